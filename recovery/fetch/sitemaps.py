"""Sitemap discovery: a run's inventory read from a site's sitemaps (sitemaps.org protocol).

A dataset spec's `sitemap = { url, page_type, lastmod_since? }` (or a schedule whose manifest
source is `sitemap:<url>`) seeds the run with one task for the sitemap file. Each sitemap file
is a task of its own (page type `SITEMAP`, claimed before pages: `PRIORITY`), so discovery is
checkpointed per file like any other task: a sitemap index commits its child sitemaps as new
tasks, a `<urlset>` commits its URLs as tasks of the configured page type, each in the same
transaction as the file's own commit. A restart therefore resumes with the files not yet
committed and never fetches a committed one again; URLs are keyed by keys.task_key like a
manifest's lines, so a URL listed in two files (or in the manifest too) is one task.

A text sitemap (the protocol's other format: one URL a line, UTF-8) is read as a urlset without
dates. The protocol's limits are enforced, never truncated: a file over 50,000 entries or over
50 MB uncompressed (`MAX_BYTES`, also the cap on a gzip file's decompressed size: a gzip bomb
stops there) is `too_large`; XML that does not parse, has a DOCTYPE (sitemaps have none, and
entities are how XML bombs work), or whose root is not `<urlset>`/`<sitemapindex>` is
`sitemap_invalid`. Both are quarantined with nothing from the file added. The parser is lxml
with entity resolution, DTD loading and network access off.

`lastmod_since` (an ISO date or date-time, or `Nd`/`Nh` before the run's creation) skips the
URLs whose `<lastmod>` is older; a URL without a readable `<lastmod>` is kept (nothing says it
is old). Child sitemaps are always read, whatever their own `<lastmod>`: a file's date is not
a promise about the dates of the pages it lists.

The sitemap tree is bounded, so a run always ends: each file's task carries its `depth` (the
run's first file is 0) and a `budget` of files (itself included; MAX_FILES for the first). An
index with k children gives each `(budget - 1) // k`, so a run never holds more than MAX_FILES
sitemap files, however its indexes nest or repeat; an index at MAX_DEPTH, or listing more
sitemaps than its budget, is refused whole (`too_large`, the detail naming the limit). A
`/robots.txt` as the first file is read for its `Sitemap:` lines (an index without dates).

`rules` map URL patterns to page types (a regular expression searched in the canonical URL,
first match wins), else the configured `page_type`; a URL neither gives a page type is skipped
and counted (`unmatched`). An absolute `<loc>` is never joined onto the file's URL (a bare
`http://` would otherwise become the file itself): what is not an http(s) URL is skipped and
counted (`unusable`). A URL listed twice in one file is one child; the repeats are counted.
"""

from __future__ import annotations

import io
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any
from urllib.parse import urljoin, urlsplit

from recovery import keys
from recovery.outcomes import Discovered, ErrorClass, Outcome

# The page type of a sitemap file's task: spec page-type names cannot contain "@", so it can
# never collide with one (nor a sitemap file's task key with a page's).
SITEMAP_PAGE_TYPE = "@sitemap"
NAMESPACE = "http://www.sitemaps.org/schemas/sitemap/0.9"
MAX_ENTRIES = 50_000  # per file, the protocol's limit (URLs in a urlset, sitemaps in an index)
MAX_BYTES = 52_428_800  # per file, uncompressed: the protocol's "50MB (52,428,800 bytes)"
PRIORITY = 100  # sitemap files are claimed before pages: the inventory first
EXAMPLES = 3  # unusable <loc> values quoted in a file's notes
# Bounds of one run's sitemap tree (the sitemaps protocol sets none: an index may list an
# index, and a site can nest them without end). MAX_DEPTH: the run's first file is at depth
# 0, and an index at this depth is refused (the protocol's own shape, index -> sitemaps, needs
# 1; robots.txt -> index -> nested index -> sitemaps needs 3). MAX_FILES: sitemap files one run
# may read in all (also the run page's sitemap figure's cap, recovery.quality.figures).
MAX_DEPTH = 4
MAX_FILES = 10_000
ROBOTS_PATH = "/robots.txt"

_SCHEME = re.compile(r"^\s*[A-Za-z][A-Za-z0-9+.-]*:")

_RELATIVE = re.compile(r"^\s*([0-9]{1,4})\s*([dh])\s*$")
_W3C = re.compile(
    r"^(\d{4})(?:-(\d{2})(?:-(\d{2})(?:[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:[.,]\d+)?)?"
    r"\s*(Z|z|[+-]\d{2}:?\d{2})?)?)?)?$"
)


class SitemapError(Exception):
    """A sitemap file that cannot be used; `error_class` is the retry table's class."""

    def __init__(self, error_class: ErrorClass, detail: str) -> None:
        super().__init__(detail)
        self.error_class = error_class
        self.detail = detail


@dataclass(slots=True)
class Entry:
    loc: str
    lastmod: datetime | None


@dataclass
class Parsed:
    kind: str  # "urlset" or "sitemapindex" (a robots.txt's Sitemap: lines read as an index)
    entries: list[Entry] = field(default_factory=list)
    unreadable_lastmod: int = 0
    robots_txt: bool = False


# --- configuration (the spec option, schedules) ---------------------------------------------


def check_since(value: Any) -> str:
    """A `lastmod_since` value, checked: ISO date/date-time, or `Nd`/`Nh` (relative)."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError('must be an ISO date (e.g. "2026-11-01"), a date-time, or "7d"/"36h"')
    text = value.strip()
    if _RELATIVE.match(text):
        return text
    if parse_lastmod(text) is None:
        raise ValueError(
            f'{value!r} is not an ISO date (e.g. "2026-11-01"), a date-time '
            '(e.g. "2026-11-01T06:00:00Z"), or a relative "7d"/"36h"'
        )
    return text


def resolve_since(value: str | None, now: datetime) -> str | None:
    """The absolute instant (ISO, UTC) a `lastmod_since` means for a run created at `now`."""
    if not value:
        return None
    relative = _RELATIVE.match(value)
    if relative:
        n, unit = int(relative.group(1)), relative.group(2)
        instant = now - (timedelta(days=n) if unit == "d" else timedelta(hours=n))
    else:
        instant = parse_lastmod(value)
        assert instant is not None, value  # check_since accepted it
    return instant.astimezone(UTC).isoformat()


def parse_lastmod(text: str) -> datetime | None:
    """A W3C Datetime (YYYY, YYYY-MM, YYYY-MM-DD, with a time and zone) as an aware datetime;
    a value without a zone is read as UTC. None when it is not one."""
    match = _W3C.match(text.strip())
    if match is None:
        return None
    year, month, day, hour, minute, second, zone = match.groups()
    try:
        moment = datetime(
            int(year),
            int(month or 1),
            int(day or 1),
            int(hour or 0),
            int(minute or 0),
            int(second or 0),
            tzinfo=UTC,
        )
    except ValueError:
        return None
    if zone and zone not in ("Z", "z"):
        sign = 1 if zone[0] == "+" else -1
        digits = zone[1:].replace(":", "")
        offset = timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
        moment -= sign * offset
    return moment


def navigation(
    page_type: str | None, since: str | None, rules: list[dict[str, str]] | None = None
) -> dict[str, Any]:
    """What a sitemap file's task carries (its children inherit it): the page type of the URLs
    it lists, the spec's rules and the resolved lastmod cut-off, frozen when the run was
    created. The first file carries no `depth` or `budget`: absent means 0 and MAX_FILES."""
    config: dict[str, Any] = {}
    if page_type:
        config["page_type"] = page_type
    if rules:
        config["rules"] = [{"pattern": r["pattern"], "page_type": r["page_type"]} for r in rules]
    if since:
        config["since"] = since
    return {"sitemap": config}


def is_robots_txt(url: str) -> bool:
    """Is this an origin's robots.txt (read for its `Sitemap:` lines, not as a sitemap)?"""
    parts = urlsplit(url)
    return parts.path == ROBOTS_PATH and not parts.query


def page_type_for(url: str, config: dict[str, Any]) -> str | None:
    """The page type a listed URL becomes: the first rule whose pattern is found in it, else
    the configured `page_type`; None when neither gives one (the URL is skipped)."""
    for rule in config.get("rules") or ():
        if _compiled(rule["pattern"]).search(url):
            return str(rule["page_type"])
    return config.get("page_type") or None


@lru_cache(maxsize=256)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)  # checked when the spec was loaded (recovery.intake.spec_sitemap)


# --- reading one file -----------------------------------------------------------------------


def decompress(body: bytes, limit: int = MAX_BYTES) -> bytes:
    """A gzip body's content (every member), never more than `limit` bytes of it; any other
    body unchanged. A Content-Encoding was already undone, within the same cap, by the client."""
    if not body.startswith(b"\x1f\x8b"):
        return body
    out: list[bytes] = []
    size = 0
    data = body
    try:
        while data:
            inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
            while not inflater.eof:
                # max_length bounds the output of each call: a bomb stops at limit + 1 bytes.
                chunk = inflater.decompress(data, limit + 1 - size)
                size += len(chunk)
                if size > limit:
                    raise SitemapError(
                        ErrorClass.TOO_LARGE,
                        f"sitemap: over {limit:,} bytes once decompressed (the protocol's "
                        "limit per file): refused, nothing read from it",
                    )
                out.append(chunk)
                data = inflater.unconsumed_tail
                if not chunk and not data:
                    raise SitemapError(ErrorClass.SITEMAP_INVALID, "sitemap: truncated gzip file")
            data = inflater.unused_data.lstrip(b"\x00")  # trailing padding is not a member
    except zlib.error as exc:
        raise SitemapError(ErrorClass.SITEMAP_INVALID, f"sitemap: corrupt gzip ({exc})") from None
    return b"".join(out)


def parse(body: bytes, base_url: str, *, max_entries: int = MAX_ENTRIES) -> Parsed:
    """One sitemap file (XML, gzip or not) into its entries; raises SitemapError."""
    # Imported here: createrun, schedules and the dashboard import this module for its
    # constants and seeding, and only a worker reading a sitemap needs the parser.
    from lxml import etree

    data = decompress(body)
    if len(data) > MAX_BYTES:
        raise SitemapError(
            ErrorClass.TOO_LARGE,
            f"sitemap: {len(data):,} bytes, over the protocol's {MAX_BYTES:,}-byte limit",
        )
    if not data.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"<"):
        return _text(data, base_url, max_entries)
    context = etree.iterparse(
        io.BytesIO(data),
        events=("start", "end"),
        resolve_entities=False,
        load_dtd=False,
        no_network=True,
        huge_tree=False,
        remove_comments=True,
        remove_pis=True,
    )
    parsed: Parsed | None = None
    root = None
    item = loc_tag = lastmod_tag = ""
    try:
        for event, elem in context:
            if root is None:
                root = elem
                parsed = _root_kind(elem)
                ns = f"{{{NAMESPACE}}}" if elem.tag.startswith("{") else ""
                item = ns + ("url" if parsed.kind == "urlset" else "sitemap")
                loc_tag, lastmod_tag = ns + "loc", ns + "lastmod"
                continue
            if event != "end" or elem.tag != item or elem.getparent() is not root:
                continue
            assert parsed is not None
            if len(parsed.entries) >= max_entries:
                raise SitemapError(
                    ErrorClass.TOO_LARGE,
                    f"sitemap: more than {max_entries:,} <{item.rsplit('}', 1)[-1]}> entries "
                    f"(line {elem.sourceline}; the protocol's limit per file): refused, "
                    "nothing read from it",
                )
            loc = (elem.findtext(loc_tag) or "").strip()
            stamp = elem.findtext(lastmod_tag)
            lastmod = parse_lastmod(stamp) if stamp else None
            if stamp and lastmod is None:
                parsed.unreadable_lastmod += 1
            parsed.entries.append(Entry(_absolute(loc, base_url), lastmod))
            # Keep memory flat on a 50 MB file: drop each entry once read.
            elem.clear()
            while elem.getprevious() is not None:
                del root[0]
    except etree.XMLSyntaxError as exc:
        line, column = exc.position
        raise SitemapError(
            ErrorClass.SITEMAP_INVALID,
            f"sitemap: malformed XML at line {line}, column {column}: {exc.msg}",
        ) from None
    if parsed is None:
        raise SitemapError(ErrorClass.SITEMAP_INVALID, "sitemap: empty file")
    return parsed


def _absolute(loc: str, base_url: str) -> str:
    """A `<loc>` as a URL: a relative one resolved against the file's URL, an absolute one
    (anything with a scheme) never: urljoin of `http://` onto the file's URL is the file
    itself, and `mailto:x` is no page. canonical_url then refuses what is unusable."""
    if not loc or _SCHEME.match(loc):
        return loc
    return urljoin(base_url, loc)


def parse_robots(body: bytes, base_url: str) -> Parsed:
    """A robots.txt's `Sitemap:` lines (protego's parser, as recovery.fetch.robots uses) as the
    entries of an index; a robots.txt that names none is `sitemap_invalid`."""
    from protego import Protego

    text = body.decode("utf-8", "replace")
    entries = [
        Entry(_absolute(loc.strip(), base_url), None) for loc in Protego.parse(text).sitemaps
    ]
    if not entries:
        raise SitemapError(
            ErrorClass.SITEMAP_INVALID,
            f"sitemap: {base_url} lists no Sitemap: line, so there is no sitemap to read",
        )
    if len(entries) > MAX_ENTRIES:
        raise SitemapError(
            ErrorClass.TOO_LARGE,
            f"sitemap: {base_url} lists {len(entries):,} Sitemap: lines, more than the "
            f"{MAX_ENTRIES:,} an index may hold: refused, nothing read from it",
        )
    return Parsed(kind="sitemapindex", entries=entries, robots_txt=True)


def _text(data: bytes, base_url: str, max_entries: int) -> Parsed:
    """The protocol's text format: one URL a line, UTF-8 (no lastmod)."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SitemapError(
            ErrorClass.SITEMAP_INVALID,
            f"sitemap: neither XML nor a UTF-8 text sitemap (byte {exc.start} is not UTF-8)",
        ) from None
    lines = [line.strip() for line in text.split("\n")]
    lines = [line for line in lines if line]
    if not lines:
        # A 200 with nothing in it is a broken server more often than an empty catalogue.
        raise SitemapError(ErrorClass.SITEMAP_INVALID, "sitemap: empty file")
    if len(lines) > max_entries:
        raise SitemapError(
            ErrorClass.TOO_LARGE,
            f"sitemap: a text sitemap of {len(lines):,} lines, more than the protocol's "
            f"{max_entries:,} URLs per file: refused, nothing read from it",
        )
    if not any(line.lower().startswith(("http://", "https://")) for line in lines):
        raise SitemapError(
            ErrorClass.SITEMAP_INVALID,
            f"sitemap: neither XML nor a text sitemap (no line is an http(s) URL; the first "
            f"is {lines[0][:80]!r})",
        )
    return Parsed(kind="urlset", entries=[Entry(line, None) for line in lines])


def _root_kind(root) -> Parsed:
    doctype = root.getroottree().docinfo.doctype
    if doctype:
        raise SitemapError(
            ErrorClass.SITEMAP_INVALID,
            f"sitemap: a DOCTYPE ({doctype[:80]}) is not allowed in a sitemap (entity "
            "declarations are how XML bombs work): refused",
        )
    tag = root.tag if isinstance(root.tag, str) else ""
    ns, _, local = tag[1:].partition("}") if tag.startswith("{") else ("", "", tag)
    if local not in ("urlset", "sitemapindex") or ns not in ("", NAMESPACE):
        shown = f"{{{ns}}}{local}" if ns else local
        raise SitemapError(
            ErrorClass.SITEMAP_INVALID,
            f"sitemap: the root element is <{shown}>, not <urlset> or <sitemapindex> in the "
            f"sitemaps namespace ({NAMESPACE})",
        )
    return Parsed(kind=local)


def outcome(
    parsed: Parsed,
    *,
    status: int,
    config: dict[str, Any],
    partition_for: Callable[[str], str],
) -> Outcome:
    """The children of one parsed file: its child sitemaps, or its URLs (after lastmod_since
    and the rules). `config` is the task's navigation["sitemap"]; `partition_for(url)` a
    child's partition. Raises SitemapError for an index past the tree's bounds."""
    since = config.get("since")
    cutoff = datetime.fromisoformat(since) if since else None
    index = parsed.kind == "sitemapindex"
    result = Outcome(http_status=status)
    unusable: list[str] = []
    unusable_count = skipped = repeats = unmatched = 0
    seen: set[str] = set()
    for entry in parsed.entries:
        try:
            url = keys.canonical_url(entry.loc)
        except keys.InvalidURL as exc:
            unusable_count += 1
            if len(unusable) < EXAMPLES:
                unusable.append(str(exc)[:200])
            continue
        stale = cutoff is not None and entry.lastmod is not None and entry.lastmod < cutoff
        if stale and not index:
            skipped += 1
            continue
        if url in seen:
            repeats += 1  # one child, however often the file lists it
            continue
        page_type = SITEMAP_PAGE_TYPE if index else page_type_for(url, config)
        if page_type is None:
            unmatched += 1
            continue
        seen.add(url)
        result.discovered.append(
            Discovered(
                url=url,
                page_type=page_type,
                partition=partition_for(url),
                priority=PRIORITY if index else 0,
                # A sitemap's URL is a manifest-level page: its own links count from it.
                navigation={"sitemap": dict(config)} if index else {"link_depth": 0},
                discovery="sitemap",
            )
        )
    if index:
        _bound(result.discovered, config)
    counts: dict[str, Any] = {
        "kind": parsed.kind,
        "sitemaps" if index else "urls": len(result.discovered),
        "repeats": repeats,
        "skipped_lastmod": skipped,
        "unusable": unusable_count,
        "unreadable_lastmod": parsed.unreadable_lastmod,
    }
    if not index:
        counts["unmatched"] = unmatched
    if parsed.robots_txt:
        counts["robots_txt"] = 1
    notes: dict[str, Any] = {"sitemap": counts}
    reasons = []
    if unusable:
        reasons.append(f"{unusable_count} unusable <loc> skipped: " + "; ".join(unusable))
    if unmatched:
        reasons.append(f"{unmatched} URL(s) matched no sitemap rule (no default page type)")
    if reasons:
        notes["reason"] = "; ".join(reasons)
    result.artefact = notes
    return result


def _bound(children: list[Discovered], config: dict[str, Any]) -> None:
    """Give an index's child sitemaps their depth and a share of its file budget, or refuse
    the index whole when it lists sitemaps at MAX_DEPTH or more than its budget allows (an
    empty index adds nothing, wherever it is)."""
    depth = int(config.get("depth", 0))
    budget = int(config.get("budget", MAX_FILES))
    if not children:
        return
    if depth >= MAX_DEPTH:
        raise SitemapError(
            ErrorClass.TOO_LARGE,
            f"sitemap: an index nested {depth} levels below the run's first sitemap file, "
            f"the limit for nested sitemap indexes (MAX_DEPTH = {MAX_DEPTH}): its "
            f"{len(children):,} sitemap(s) would be deeper; refused, nothing read from it",
        )
    if len(children) > budget - 1:
        raise SitemapError(
            ErrorClass.TOO_LARGE,
            f"sitemap: the index lists {len(children):,} sitemaps, more than the "
            f"{budget - 1:,} files its share of the run's limit of {MAX_FILES:,} sitemap files "
            "(MAX_FILES) leaves; refused, nothing read from it",
        )
    share = (budget - 1) // len(children)
    for child in children:
        child.navigation["sitemap"].update(depth=depth + 1, budget=share)


# --- seeding a run --------------------------------------------------------------------------


def seed(run, *, url: str, page_type: str | None, since: str | None, partition: str, now) -> int:
    """The run's first sitemap task, in the caller's transaction; 1 if added, 0 if the run
    had it already (createrun --add). The dataset's `sitemap.rules` are frozen with it (a
    schedule's `sitemap:` source uses the spec's option too: manifests.sitemap_config)."""
    from recovery.models import Task

    rules = ((run.dataset.spec or {}).get("sitemap") or {}).get("rules")

    canonical = keys.canonical_url(url)
    task_key = keys.task_key_from_canonical(
        run.dataset.name, canonical, run.window, SITEMAP_PAGE_TYPE
    )
    if Task.objects.filter(task_key=task_key).exists():
        return 0
    Task.objects.create(
        run=run,
        task_key=task_key,
        url=canonical,
        page_type=SITEMAP_PAGE_TYPE,
        partition=partition,
        priority=PRIORITY,
        discovery=Task.Discovery.SITEMAP,
        navigation=navigation(page_type, resolve_since(since, now), rules),
        next_attempt_at=now,
        created_at=now,
        state_changed_at=now,
    )
    return 1
