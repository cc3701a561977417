"""Validation's reads and writes of observations in SQL (issue 15).

An observation's verdict is judged when it is committed (quality.verdicts), so an evaluation
first reads the stored verdicts (`stored`: rows per partition and verdict, no payload read).
Rows judged by other rules than the run's current ones (or by none) are judged again here, in
the database, over the payload with its JSON functions (SQLite's json_extract/json_type,
PostgreSQL's jsonb operators): one pass that tallies every rule kind per partition (GROUP BY
partition), and one UPDATE ... FROM that writes the re-marked partitions' verdicts.

"Invalid" keeps one definition, recovery.verdicts.check_value / empty (Python), which
quality.provisional also uses. The SQL here decides a value only where it provably agrees with
that definition, and says "undecided" (NULL) everywhere else; undecided observations are fetched
and judged by the Python definition. The hypothesis tests in tests/db/test_validation_sql.py
check on both databases that the two paths agree. Left to Python (undecided):
- `pattern` rules on PostgreSQL (its regular expressions are POSIX, not Python's `re`); on
  SQLite the pattern is matched by Django's REGEXP function, which is Python's `re.search`;
- emptiness of a text that has no printable ASCII character and is not plain ASCII
  whitespace (Python's str.strip() knows every Unicode space);
- `range` values written as text other than a plain decimal (exponents, "inf", "nan",
  "1_000", Unicode digits, surrounding spaces: Python's float() accepts all of them; on SQLite
  also one longer than 15 characters, whose text-to-real conversion is not exactly rounded),
  and integers beyond 2**53 (float() rounds them);
- `enum` values that are not text (Python compares str(value): True, 1.0, lists).
A typical run therefore goes through SQL whole; a run whose values are odd pays Python only
for its odd observations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db import connection

from recovery.verdicts import MAX_BITS, PENDING

# Printable ASCII characters float() never accepts (its grammar: digits, sign, point, exponent,
# underscore, whitespace and the letters of "nan", "inf", "infinity"): a text holding one is
# not a number whatever else it holds.
_NOT_IN_FLOAT = "".join(
    c for c in map(chr, range(0x21, 0x7F)) if c not in "0123456789+-._eEnNaAiIfFtTyY"
)
_ASCII_SPACE = " \t\n\r\x0b\x0c"
_EXACT_INT = 2**53  # beyond this float(int) rounds


@dataclass
class PartitionTally:
    """Counts of one partition's observations (the fields of recovery.quality.validation._Tally)."""

    total: int = 0
    fails: dict[str, int] = field(default_factory=dict)  # value rule name -> failures
    field_invalid: dict[str, int] = field(default_factory=dict)  # watched field -> invalid
    complete: int = 0
    valid: int = 0


@dataclass
class Pass:
    """What one SQL pass found: tallies of the decided rows, and the rows left to Python."""

    tallies: dict[str, PartitionTally]
    undecided: list[tuple[int, str, Any, str | None]]  # (pk, partition, payload, page_type)


def _q(*parts: tuple[str, list]) -> tuple[str, list]:
    return "".join(p[0] for p in parts), [x for p in parts for x in p[1]]


class _Dialect:
    """The few expressions that differ between SQLite and PostgreSQL, for one JSON field."""

    def __init__(self, vendor: str) -> None:
        if vendor not in ("sqlite", "postgresql"):
            raise ValueError(f"validation in SQL supports sqlite and postgresql, not {vendor}")
        self.pg = vendor == "postgresql"

    def kind(self, name: str) -> tuple[str, list]:
        """'null' (also missing), 'text', 'int', 'real', 'bool', 'other'."""
        if self.pg:
            return (
                "CASE COALESCE(jsonb_typeof(o.payload -> %s), 'null') "
                "WHEN 'null' THEN 'null' WHEN 'string' THEN 'text' WHEN 'boolean' THEN 'bool' "
                "WHEN 'number' THEN CASE WHEN (o.payload ->> %s) ~ '^-?[0-9]+$' THEN 'int' "
                "ELSE 'real' END ELSE 'other' END",
                [name, name],
            )
        return (
            "CASE COALESCE(json_type(o.payload, %s), 'null') "
            "WHEN 'null' THEN 'null' WHEN 'text' THEN 'text' WHEN 'true' THEN 'bool' "
            "WHEN 'false' THEN 'bool' WHEN 'integer' THEN 'int' WHEN 'real' THEN 'real' "
            "ELSE 'other' END",
            [_path(name)],
        )

    def text(self, name: str) -> tuple[str, list]:
        if self.pg:
            return "(o.payload ->> %s)", [name]
        return "json_extract(o.payload, %s)", [_path(name)]

    def number(self, name: str) -> tuple[str, list]:
        if self.pg:
            return "(o.payload ->> %s)::double precision", [name]
        return "json_extract(o.payload, %s)", [_path(name)]

    def has_any(self, col: str, chars: str) -> tuple[str, list]:
        """True when the text column holds one of `chars` (each printable ASCII; "!-~" is
        the range of all of them)."""
        if chars == "!-~":
            return (f"{col} ~ %s", ["[!-~]"]) if self.pg else (f"{col} GLOB %s", ["*[!-~]*"])
        if self.pg:
            body = "".join("\\" + c if c in "\\]^-[" else c for c in chars)
            return f"{col} ~ %s", ["[" + body + "]"]
        # GLOB classes: ']' first, no '-' (caller never passes it), '^' not first.
        chars = ("]" if "]" in chars else "") + "".join(c for c in chars if c != "]")
        if chars.startswith("^"):
            chars = chars[1:] + "^"
        return f"{col} GLOB %s", ["*[" + chars + "]*"]

    def trim_space(self, col: str) -> tuple[str, list]:
        fn = "btrim" if self.pg else "trim"
        return f"{fn}({col}, %s)", [_ASCII_SPACE]

    def plain_decimal(self, col: str) -> tuple[str, list]:
        """A text float() reads exactly as the database does: [+-]digits[.digits], short."""
        if self.pg:
            return (
                # PostgreSQL reads float8 with strtod, correctly rounded as Python's float():
                # no length limit (SQLite's reader is not, so it gets one).
                f"({col} ~ '^[+-]?([0-9]+[.]?[0-9]*|[.][0-9]+)$')",
                [],
            )
        body = f"(CASE WHEN substr({col}, 1, 1) IN ('+', '-') THEN substr({col}, 2) ELSE {col} END)"
        return (
            f"(length({col}) <= 15 AND {body} <> '' AND {body} NOT GLOB '*[^0-9.]*' "
            f"AND {body} NOT GLOB '*.*.*' AND {body} GLOB '*[0-9]*')",
            [],
        )

    def as_real(self, col: str) -> str:
        return f"CAST({col} AS {'double precision' if self.pg else 'REAL'})"


def _path(name: str) -> str:
    return '$."' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


class RowVerdicts:
    """The SQL of one run's per-observation verdicts, for its rules."""

    def __init__(
        self,
        vendor: str,
        value_rules: list[dict[str, Any]],
        required: dict[str, list[str]],
        watched: set[str] | list[str],
    ) -> None:
        self.d = _Dialect(vendor)
        self.value_rules = value_rules
        self.required = {pt: fs for pt, fs in required.items() if fs}
        self.watched = sorted(watched)
        self.empty_fields = sorted(
            {f for fs in self.required.values() for f in fs} | set(self.watched)
        )
        self.fields = sorted({r["field"] for r in value_rules} | set(self.empty_fields))

    # Layer 0 reads each field of the payload once: its kind (k<j>) and its value (v<j>, text
    # on PostgreSQL, SQLite's typed value). The layers above refer to these columns.
    def _kind(self, name: str) -> tuple[str, list]:
        return f"k{self.fields.index(name)}", []

    def _text(self, name: str) -> tuple[str, list]:
        return f"v{self.fields.index(name)}", []

    def _number(self, name: str) -> tuple[str, list]:
        col = f"v{self.fields.index(name)}"
        return (f"CAST({col} AS double precision)" if self.d.pg else col), []

    def _fence(self) -> str:
        # Keeps the planner from inlining a layer's expressions into every reference above it
        # (PostgreSQL and SQLite flatten subqueries; each reference would re-evaluate them).
        return " OFFSET 0" if self.d.pg else " LIMIT -1 OFFSET 0"

    def layer0(self, where: str, where_params: list) -> tuple[str, list]:
        cols: list[tuple[str, list]] = [
            ("o.id AS id, o.partition AS partition, t.page_type AS page_type", [])
        ]
        for j, name in enumerate(self.fields):
            kind, text = self.d.kind(name), self.d.text(name)
            cols.append((f", {kind[0]} AS k{j}, {text[0]} AS v{j}", kind[1] + text[1]))
        return _q(
            ("SELECT ", []),
            *cols,
            (
                " FROM recovery_observation o LEFT JOIN recovery_task t ON t.id = o.source_task_id"
                f" WHERE {where}{self._fence()}",
                where_params,
            ),
        )

    # Layer 1: one column per value rule (1 fails, 0 passes, NULL undecided) and one per field
    # whose emptiness matters (1 empty, 0 not, NULL undecided).
    def _empty(self, name: str) -> tuple[str, list]:
        kind = self._kind(name)
        text = self._text(name)
        printable = self.d.has_any(text[0], "!-~")
        trimmed = self.d.trim_space(text[0])
        return _q(
            ("CASE ", []),
            kind,
            (" WHEN 'null' THEN 1 WHEN 'text' THEN CASE WHEN ", []),
            (trimmed[0], text[1] + trimmed[1]),
            (" = '' THEN 1 WHEN ", []),
            (printable[0], text[1] + printable[1]),
            (" THEN 0 END ELSE 0 END", []),
        )

    def _fails(self, rule: dict[str, Any]) -> tuple[str, list]:
        name = rule["field"]
        kind = self._kind(name)
        text = self._text(name)
        empty = self._empty(name)
        if rule["kind"] == "range":
            num = self._number(name)

            def outside(value: tuple[str, list]) -> tuple[str, list]:
                conds: list[tuple[str, list]] = []
                if "min" in rule:
                    conds.append((f"{value[0]} < %s", value[1] + [rule["min"]]))
                if "max" in rule:
                    conds.append((f"{value[0]} > %s", value[1] + [rule["max"]]))
                if not conds:
                    return "0", []
                sql, params = _q(*[(f"({c[0]}) OR ", c[1]) for c in conds])
                return f"CASE WHEN {sql[:-4]} THEN 1 ELSE 0 END", params

            decimal = self.d.plain_decimal(text[0])
            not_float = self.d.has_any(text[0], _NOT_IN_FLOAT)
            return _q(
                ("CASE ", []),
                kind,
                (" WHEN 'null' THEN 0 WHEN 'bool' THEN 1 WHEN 'other' THEN 1", []),
                (" WHEN 'int' THEN CASE WHEN length(", []),
                text,
                (") > 20 THEN NULL WHEN abs(", []),
                num,
                (f") <= {_EXACT_INT} THEN ", []),
                outside(num),
                (" END WHEN 'real' THEN ", []),
                outside(num),
                (" WHEN 'text' THEN CASE WHEN (", []),
                empty,
                (") = 1 THEN 0 WHEN ", []),
                (decimal[0], text[1] * decimal[0].count(text[0])),
                (" THEN ", []),
                outside((self.d.as_real(text[0]), text[1])),
                (" WHEN ", []),
                (not_float[0], text[1] + not_float[1]),
                (" THEN 1 END END", []),
            )
        if rule["kind"] == "enum":
            values = sorted({str(v) for v in rule["values"]})
            marks = ", ".join(["%s"] * len(values))
            member = (f"{text[0]} IN ({marks})", text[1] + values) if values else ("1 = 0", [])
            return _q(
                ("CASE ", []),
                kind,
                (" WHEN 'null' THEN 0 WHEN 'text' THEN CASE (", []),
                empty,
                (") WHEN 1 THEN 0 WHEN 0 THEN CASE WHEN ", []),
                member,
                (" THEN 0 ELSE 1 END END END", []),
            )
        if rule["kind"] == "pattern" and rule.get("pattern") and not self.d.pg:
            # Django registers REGEXP on SQLite as Python's re.search: the same matcher.
            return _q(
                ("CASE ", []),
                kind,
                (" WHEN 'null' THEN 0 WHEN 'text' THEN CASE (", []),
                empty,
                (") WHEN 1 THEN 0 WHEN 0 THEN CASE WHEN ", []),
                (f"{text[0]} REGEXP %s", text[1] + [rule["pattern"]]),
                (" THEN 0 ELSE 1 END END END", []),
            )
        # A pattern on PostgreSQL: 0 when the value is empty, else Python decides.
        return _q(("CASE (", []), empty, (") WHEN 1 THEN 0 END", []))

    def layer1(self, where: str, where_params: list) -> tuple[str, list]:
        cols = [("id, partition, page_type", [])]
        for i, rule in enumerate(self.value_rules):
            sql, params = self._fails(rule)
            cols.append((f", {sql} AS f{i}", params))
        for j, name in enumerate(self.empty_fields):
            sql, params = self._empty(name)
            cols.append((f", {sql} AS e{j}", params))
        inner = self.layer0(where, where_params)
        return _q(
            ("SELECT ", []),
            *cols,
            (f" FROM ({inner[0]}) l0{self._fence()}", inner[1]),
        )

    # Layer 2, over layer 1's columns (no parameters): complete, field_invalid per watched
    # field, valid, undecided.
    def _sum(self, cols: list[str]) -> str:
        return "(" + " + ".join(cols) + ")" if cols else "0"

    def complete(self) -> str:
        if not self.required:
            return "1"
        whens = []
        for _pt, fields in sorted(self.required.items()):
            s = self._sum([f"e{self.empty_fields.index(f)}" for f in fields])
            whens.append(f"WHEN %s THEN CASE WHEN {s} > 0 THEN 0 WHEN {s} = 0 THEN 1 END")
        return "CASE page_type " + " ".join(whens) + " ELSE 1 END"

    def complete_params(self) -> list:
        return sorted(self.required)

    def field_invalid(self, name: str) -> str:
        cols = [f"f{i}" for i, r in enumerate(self.value_rules) if r["field"] == name]
        s = self._sum([*cols, f"e{self.empty_fields.index(name)}"])
        return f"CASE WHEN {s} > 0 THEN 1 WHEN {s} = 0 THEN 0 END"

    def layer2(self, where: str, where_params: list) -> tuple[str, list]:
        fails = self._sum([f"f{i}" for i in range(len(self.value_rules))])
        inner, params = self.layer1(where, where_params)
        cols = ["id", "partition", "page_type"]
        cols += [f"f{i}" for i in range(len(self.value_rules))]
        cols += [f"({self.field_invalid(w)}) AS w{k}" for k, w in enumerate(self.watched)]
        complete = self.complete()
        # Every column that can be NULL takes part: a NULL anywhere makes the row undecided.
        every = " + ".join([fails, "c", "0"] + [f"w{k}" for k in range(len(self.watched))])
        # The verdict bits of quality.verdicts.Rules: value rules, watched fields, incomplete
        # (NULL when they do not fit the column: such rules are judged at every evaluation).
        n = len(self.value_rules)
        bits = [f"f{i} * {1 << i}" for i in range(n)]
        bits += [f"w{k} * {1 << (n + k)}" for k in range(len(self.watched))]
        bits.append(f"(1 - c) * {1 << (n + len(self.watched))}")
        if len(bits) > MAX_BITS:
            bits = ["CAST(NULL AS bigint)" if self.d.pg else "NULL"]
        sql = (
            f"SELECT x.*, CASE WHEN {fails} + (1 - c) = 0 THEN 1 ELSE 0 END AS valid, "
            f"CASE WHEN ({every}) IS NULL THEN 1 ELSE 0 END AS undecided, "
            f"({' + '.join(bits)}) AS bits FROM ("
            f"SELECT {', '.join(cols)}, ({complete}) AS c FROM ({inner}) l1) x"
        )
        return sql, self.complete_params() + params

    def tally_sql(self, run_id: int, stale_for: str | None = None) -> tuple[str, list]:
        """Per partition, the sums of the run's rows (or of its stale rows: not judged by the
        rules of digest `stale_for`)."""
        rows, params = self.layer2(*_run_rows(run_id, stale_for))
        sums = ["COUNT(*)", "SUM(c)", "SUM(valid)"]
        sums += [f"SUM(f{i})" for i in range(len(self.value_rules))]
        sums += [f"SUM(w{k})" for k in range(len(self.watched))]
        return (
            f"SELECT partition, undecided, {', '.join(sums)} FROM ({rows}) r "
            "GROUP BY partition, undecided",
            params,
        )

    def mark_sql(
        self, run_id: int, partitions: set[str] | None, digest: str, states: dict[str, str]
    ) -> tuple[str, list]:
        """UPDATE writing the verdict (bits, `digest`, valid or invalid) of the decided stale
        rows of `partitions` (None: all): the rows not judged by the rules of `digest`."""
        where, wparams = _run_rows(run_id, digest)
        if partitions is not None:
            if not partitions:
                where += " AND 1 = 0"
            else:
                where += f" AND o.partition IN ({', '.join(['%s'] * len(partitions))})"
                wparams += sorted(partitions)
        rows, params = self.layer2(where, wparams)
        sql = (
            "UPDATE recovery_observation SET verdict = m.bits, verdict_rules = %s, "
            "validation_state = CASE WHEN m.valid = 1 THEN %s ELSE %s END FROM ("
            f"SELECT id, bits, valid FROM ({rows}) r WHERE undecided = 0) m "
            "WHERE recovery_observation.id = m.id"
        )
        return sql, [digest, states["valid"], states["invalid"], *params]


def _run_rows(run_id: int, stale_for: str | None) -> tuple[str, list]:
    """The WHERE of a run's rows, or of its stale rows: not judged by the rules of digest
    `stale_for`, or sent back to validation (`pending`) by whoever rewrote them."""
    if stale_for is None:
        return "o.run_id = %s", [run_id]
    return (
        "o.run_id = %s AND (o.verdict IS NULL OR o.verdict_rules <> %s OR o.validation_state = %s)",
        [run_id, stale_for, PENDING],
    )


# --- the verdicts stored at commit ---------------------------------------------------------

# A partition's fingerprint sums each row's updated_at in microseconds modulo this prime: any
# added or rewritten row changes it (a rewrite sets updated_at), and the sum stays a bigint.
FINGERPRINT_MOD = 1_000_000_007


def _updated_us(vendor: str) -> str:
    if vendor == "postgresql":
        return "(extract(epoch FROM o.updated_at) * 1000000)::bigint"
    # SQLite keeps 'YYYY-MM-DD HH:MM:SS[.fff...]' text: whole seconds, then the fraction's digits.
    return (
        "(CAST(strftime('%%s', o.updated_at) AS INTEGER) * 1000000"
        " + CAST(substr(o.updated_at, 21) AS INTEGER))"
    )


@dataclass
class Stored:
    """The run's stored verdicts: per partition, rows by verdict (fresh rows: judged by the
    current rules) and the partition's fingerprint (rows, checksum); stale rows per partition."""

    by_verdict: dict[str, dict[int, int]]
    stale: dict[str, int]
    fingerprints: dict[str, tuple[int, int]]


def stored(run_id: int, digest: str) -> Stored:
    """One grouped read of the run's rows: no payload is read, no row judged."""
    sql = (
        "SELECT o.partition, CASE WHEN o.verdict_rules = %s AND o.validation_state <> %s "
        "THEN o.verdict END, COUNT(*), "
        f"SUM({_updated_us(connection.vendor)} %% {FINGERPRINT_MOD}) "
        "FROM recovery_observation o WHERE o.run_id = %s GROUP BY 1, 2"
    )
    found = Stored({}, {}, {})
    with connection.cursor() as cursor:
        cursor.execute(sql, [digest, PENDING, run_id])
        for partition, verdict, n, checksum in cursor.fetchall():
            rows, total = found.fingerprints.get(partition, (0, 0))
            found.fingerprints[partition] = (rows + n, (total + int(checksum)) % FINGERPRINT_MOD)
            if verdict is None:
                found.stale[partition] = found.stale.get(partition, 0) + n
            else:
                found.by_verdict.setdefault(partition, {})[int(verdict)] = n
    return found


def tally(run_id: int, verdicts: RowVerdicts, stale_for: str | None = None) -> Pass:
    """One pass: per partition, the counts of the decided rows; then the undecided rows.
    `stale_for`: only the rows not judged by the rules of that digest."""
    sql, params = verdicts.tally_sql(run_id, stale_for)
    n_rules = len(verdicts.value_rules)
    tallies: dict[str, PartitionTally] = {}
    undecided_partitions = False
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        for row in cursor.fetchall():
            partition, undecided, total, complete, valid = row[:5]
            t = tallies.setdefault(partition, PartitionTally())
            if undecided:
                undecided_partitions = True
                continue
            t.total += total
            t.complete += complete or 0
            t.valid += valid or 0
            for i, rule in enumerate(verdicts.value_rules):
                t.fails[rule["name"]] = t.fails.get(rule["name"], 0) + (row[5 + i] or 0)
            for k, name in enumerate(verdicts.watched):
                t.field_invalid[name] = t.field_invalid.get(name, 0) + (row[5 + n_rules + k] or 0)
    undecided: list[tuple[int, str, Any, str | None]] = []
    if undecided_partitions:
        from recovery.models import Observation

        rows, params = verdicts.layer2(*_run_rows(run_id, stale_for))
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT id FROM ({rows}) r WHERE undecided = 1", params)
            ids = [r[0] for r in cursor.fetchall()]
        for start in range(0, len(ids), 2000):
            undecided += list(
                Observation.objects.filter(pk__in=ids[start : start + 2000])
                .order_by()
                .values_list("pk", "partition", "payload", "source_task__page_type")
            )
    return Pass(tallies=tallies, undecided=undecided)


def mark(
    run_id: int,
    verdicts: RowVerdicts,
    partitions: set[str] | None,
    digest: str,
    states: dict[str, str],
) -> int:
    """Write the decided stale rows' verdicts (see RowVerdicts.mark_sql). Rows written."""
    sql, params = verdicts.mark_sql(run_id, partitions, digest, states)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount
