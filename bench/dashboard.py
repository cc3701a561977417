"""Dashboard page time at 10,000 and at 1,000,000 tasks, on PostgreSQL, in one run.

    python bench/dashboard.py [--small 10000] [--large 1000000] [--reps 15] [--pg-name NAME]

1. Drops and creates a scratch database (BENCH_DATABASE_URL or DATABASE_URL names the server;
   default postgres://postgres@127.0.0.1:5432/postgres), migrates it, and generates two runs of
   one dataset with INSERT ... SELECT generate_series: `--small` and `--large` tasks over 50
   partitions (90% committed, 5% quarantined over 4 error classes, 3% dead, 2% pending; one
   partition flagged quarantined), one attempt per task. Attempts finish at the same rate for
   both runs (one fleet: 10,000 per hour, ending now), so the large run has 100 hours of
   history behind the same last hour; each task's last state change is its attempt's end.
   Attempt counts run 1-4 (0 pending), the last HTTP status is 200, 403 (quarantined), 503
   (dead) or none (pending). Counters come from counters.rebuild; then VACUUM ANALYZE.
2. Requests each page through Django's test client, in process, as an admin: `--reps` timed
   requests after 3 warm-ups, alternating small and large; the median server time is reported.
   Pages: the run pages, the runs overview, and every list of a run's tasks a user reaches
   (URL order, descending, a page deep in the middle, URL-prefix search, a search by any part
   of the URL (trigram index), an exact-URL search that jumps to the task (302), state and
   partition filters, the quarantine list; sorted by attempts, HTTP status, error class and
   last change, each ascending, descending and from halfway down), the runs list sorted by
   dataset, window and creation, and the first chunk of a list's CSV export (its
   header and first 500 rows; an export is streamed, so this is what grows with the run if
   anything does: the whole export grows with the rows selected, by design).
3. EXPLAINs every query of each page on the large run, prints the indexes each page's queries
   read on the big tables, and fails if any reads recovery_task or recovery_attempt with a
   sequential scan.
4. Prints one line per page and, last, one JSON line:
   {"bench": "dashboard", "results": [{"page", "ms_10k", "ms_1m", "growth", "indexes"}],
   "loadavg_before", "loadavg_after", "headline", ...}
   growth = ms_1m / ms_10k (the "10k"/"1m" labels are the --small/--large runs); the target
   is at most 2. The load average and headline verdict: bench/loadwatch.py.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlencode, urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# Last: bench/ holds a dashboard.py of its own, which must not hide the Django app.
sys.path.append(str(ROOT / "bench"))

from common import explain as common_explain  # noqa: E402 (after the path it is found on)

PARTITIONS = 50
ERROR_CLASSES = ("selector_failure", "challenge_page", "server_error", "wrong_template")
RATE_PER_HOUR = 10_000


def scratch_database(name: str, reuse: bool = False) -> str:
    """The scratch database's URL: dropped and created, or with `reuse` kept if it exists."""
    import psycopg

    url = os.environ.get("BENCH_DATABASE_URL") or os.environ.get("DATABASE_URL") or ""
    if not url.startswith(("postgres://", "postgresql://")):
        url = "postgres://postgres@127.0.0.1:5432/postgres"
    parts = urlsplit(url)
    admin_url = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if not (reuse and exists):
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
            conn.execute(f'CREATE DATABASE "{name}"')
    return urlunsplit(parts._replace(path=f"/{name}"))


def drop_database(name: str) -> None:
    import psycopg
    from django.db import connections

    connections.close_all()
    url = os.environ.get("BENCH_DATABASE_URL") or os.environ.get("DATABASE_URL") or ""
    if not url.startswith(("postgres://", "postgresql://")):
        url = "postgres://postgres@127.0.0.1:5432/postgres"
    admin_url = urlunsplit(urlsplit(url)._replace(path="/postgres"))
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')


def generate(run_id: int, n: int) -> None:
    """n tasks and n attempts for one run, in SQL (a million rows in seconds, not minutes).

    Task keys are the product's own (recovery.keys.task_key: the length-prefixed SHA-256 of
    "task", dataset, canonical URL, window, page type), so an exact-URL search finds its task.
    """
    from django.db import connection

    from recovery.models import Run

    dataset, window = Run.objects.filter(pk=run_id).values_list("dataset__name", "window").get()

    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO recovery_task (
                run_id, task_key, url, page_type, partition, priority, discovery, navigation,
                state, attempt_count, next_attempt_at, lease_owner, lease_token,
                last_error_class, last_http_status, created_at, state_changed_at, depth)
            SELECT %(run)s, encode(sha256(
                       int8send(4) || 'task'::bytea
                       || int8send(octet_length(%(dataset)s)) || convert_to(%(dataset)s, 'UTF8')
                       || int8send(octet_length(u.url)) || convert_to(u.url, 'UTF8')
                       || int8send(octet_length(%(window)s)) || convert_to(%(window)s, 'UTF8')
                       || int8send(7) || 'product'::bytea), 'hex'),
                   u.url, 'product', 'p' || (g %% %(parts)s) || '.test', 0,
                   'manifest', '{}'::jsonb,
                   CASE WHEN g %% 100 < 90 THEN 'committed'
                        WHEN g %% 100 < 95 THEN 'quarantined'
                        WHEN g %% 100 < 98 THEN 'dead' ELSE 'pending' END,
                   CASE WHEN g %% 100 < 98 THEN 1 + (g / 100) %% 4 ELSE 0 END,
                   now(), '', 0,
                   CASE WHEN g %% 100 BETWEEN 90 AND 97
                        THEN (%(errors)s::text[])[1 + (g / 100) %% 4] ELSE '' END,
                   CASE WHEN g %% 100 < 90 THEN 200 WHEN g %% 100 < 95 THEN 403
                        WHEN g %% 100 < 98 THEN 503 END,
                   now(),
                   now() - make_interval(secs => (%(n)s - g) * 3600.0 / %(rate)s),
                   0
            FROM generate_series(1, %(n)s) AS g,
                 LATERAL (SELECT 'http://p' || (g %% %(parts)s) || '.test/item/' || g AS url) u
            """,
            {
                "run": run_id,
                "n": n,
                "parts": PARTITIONS,
                "errors": list(ERROR_CLASSES),
                "dataset": dataset,
                "window": window,
                "rate": RATE_PER_HOUR,
            },
        )
        # One attempt per task; the newest finished now, older ones at the fleet's rate.
        cursor.execute(
            """
            INSERT INTO recovery_attempt (
                id, task_id, run_id, lease_token, worker, scraper_version, started_at,
                finished_at, http_status, outcome, error_class, error_detail, artefact,
                payload_hash)
            SELECT gen_random_uuid(), t.id, t.run_id, 1, 'w-' || (t.id %% 8), '1',
                   now() - make_interval(secs => (n.last - t.id) * 3600.0 / %(rate)s + 0.2),
                   now() - make_interval(secs => (n.last - t.id) * 3600.0 / %(rate)s),
                   200,
                   CASE t.state WHEN 'pending' THEN 'retry' ELSE t.state END,
                   t.last_error_class, '',
                   CASE WHEN t.state = 'quarantined' THEN jsonb_build_object(
                        'status', 200, 'body_excerpt', '<h1>Sign in</h1><script>x()</script>')
                   END, ''
            FROM recovery_task t, (SELECT max(id) AS last FROM recovery_task
                                   WHERE run_id = %(run)s) n
            WHERE t.run_id = %(run)s
            """,
            {"run": run_id, "rate": RATE_PER_HOUR},
        )
        cursor.execute("UPDATE recovery_run SET task_total = %s WHERE id = %s", [n, run_id])


def explain(queries: list[dict]) -> tuple[list[str], list[str]]:
    return common_explain(queries, ("recovery_task", "recovery_attempt"), ("task_", "attempt_"))


# Each task list order a page opens halfway down: the SQL of its sort key (the list's own).
SORT_KEYS = {
    "url": 'substr(url, 1, {chars}) COLLATE "C"',
    "attempts": "attempt_count",
    "http": "COALESCE(last_http_status, 0)",
    "error_class": "last_error_class",
    "changed": "state_changed_at",
}


def middle_cursor(run_id: int, sort: str = "url") -> str:
    """A cursor halfway down the run's task list in `sort` order (a deep page, no OFFSET)."""
    from django.db import connection

    from dashboard.filtersets import URL_KEY_CHARS

    key = SORT_KEYS[sort].format(chars=URL_KEY_CHARS)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {key}, id FROM recovery_task WHERE run_id = %s ORDER BY {key}, id"
            " OFFSET (SELECT task_total / 2 FROM recovery_run WHERE id = %s) LIMIT 1",
            [run_id, run_id],
        )
        value, pk = cursor.fetchone()
    if hasattr(value, "isoformat"):
        value = value.isoformat()
    return json.dumps([value, pk], separators=(",", ":"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--large", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--pg-name", default="salvage_bench_dashboard")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="reuse a kept scratch database whose runs have the same sizes (implies --keep)",
    )
    args = parser.parse_args()
    # Imported here: tests/db/test_dashboard_scale.py imports this file for generate().
    from loadwatch import LoadWatch

    watch = LoadWatch(own_processes=1)

    if args.reuse:
        args.keep = True
    os.environ["DATABASE_URL"] = scratch_database(args.pg_name, reuse=args.reuse)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    os.environ.setdefault("SALVAGE_DATA_DIR", str(ROOT / "var" / "bench-dashboard"))
    os.environ["SALVAGE_LOG_LEVEL"] = "ERROR"
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext, setup_test_environment
    from django.urls import reverse

    settings.ALLOWED_HOSTS = ["testserver"]
    setup_test_environment()
    call_command("migrate", verbosity=0)

    from django.contrib.auth.models import Group, User

    from recovery import counters
    from recovery.models import Dataset, Run, RunPartition

    started = time.perf_counter()
    sizes = (("10k", args.small), ("1m", args.large))
    kept = {
        run.window: run
        for run in Run.objects.filter(
            dataset__name="bench", window__in=[f"w-{k}" for k, _ in sizes]
        )
    }
    if args.reuse and all(
        f"w-{label}" in kept and kept[f"w-{label}"].task_total == n for label, n in sizes
    ):
        runs = {label: kept[f"w-{label}"] for label, _ in sizes}
        print(f"reusing the kept runs of {args.small} + {args.large} tasks")
    else:
        Dataset.objects.filter(name="bench").delete()
        dataset = Dataset.objects.create(
            name="bench",
            spec={"name": "bench", "page_types": {"product": {"fields": {}}}},
            spec_sha256="0" * 64,
            provider="noop",
        )
        runs = {}
        for label, n in sizes:
            run = Run.objects.create(dataset=dataset, window=f"w-{label}")
            generate(run.pk, n)
            counters.rebuild(run.pk)
            RunPartition.objects.create(run=run, name="p7.test", quarantined=True)
            runs[label] = run
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    setup_s = time.perf_counter() - started
    print(f"generated {args.small} + {args.large} tasks and attempts in {setup_s:.1f} s")

    admin, _ = User.objects.get_or_create(username="bench-admin")
    admin.groups.add(Group.objects.get(name="admin"))
    client = Client()
    client.force_login(admin)

    middles = {
        (run.pk, sort): middle_cursor(run.pk, sort) for run in runs.values() for sort in SORT_KEYS
    }

    def tasks(**params):
        def url(run):
            values = {k: (v(run) if callable(v) else v) for k, v in params.items()}
            query = urlencode(values)
            path = reverse("dashboard:run_tasks", kwargs={"run_id": run.pk})
            return path + (f"?{query}" if query else "")

        return url

    def runs_sorted(sort: str, cursor):
        def url(run):
            after = json.dumps(cursor(run), separators=(",", ":"))
            query = urlencode({"dataset": "bench", "sort": sort, "after": after})
            return reverse("dashboard:runs") + "?" + query

        return url

    pages = {
        "run_detail": lambda run: reverse("dashboard:run", kwargs={"run_id": run.pk}),
        "quarantine": lambda run: reverse("dashboard:quarantine", kwargs={"run_id": run.pk}),
        "runs_overview": lambda run: (
            # The keyset cursor of the default order (newest first): this run heads the page.
            reverse("dashboard:runs")
            + "?"
            + urlencode({"dataset": "bench", "after": f"[{run.pk + 1}]"})
        ),
        "tasks": tasks(),
        "tasks_desc": tasks(sort="-url"),
        "tasks_middle": tasks(after=lambda run: middles[run.pk, "url"]),
        "tasks_search": tasks(q="http://p7.test/item/5"),
        "tasks_search_host": tasks(q="p7.test/"),
        # Any part of the URL (trigram index). Its cost follows the matches, not the run: a
        # rare part, and a broad one that ~1% of every run shares (p7, p17, ... p47 hosts).
        "tasks_contains": tasks(q="item/31415", match="contains"),
        "tasks_contains_broad": tasks(q="7.test/item/5", match="contains"),
        "tasks_exact_url": tasks(q="http://p7.test/item/57"),
        "tasks_quarantined": tasks(state="quarantined"),
        "tasks_partition": tasks(partition="p7.test", state="dead"),
        "tasks_partition_only": tasks(partition="p7.test"),
        # Sorted by a column's header (issue 29): each order on its own index, ascending,
        # descending, and a page halfway down.
        **{
            f"tasks_by_{sort}{suffix}": tasks(**params)
            for sort in ("attempts", "http", "error_class", "changed")
            for suffix, params in (
                ("", {"sort": sort}),
                ("_desc", {"sort": f"-{sort}"}),
                ("_middle", {"sort": sort, "after": lambda run, s=sort: middles[run.pk, s]}),
            )
        },
        # The runs list by dataset, window and creation (issue 29), descending, from a cursor
        # just above this run, as runs_overview does: the large run's page lists both runs,
        # the small run's page itself alone.
        "runs_by_dataset": runs_sorted("-dataset", lambda run: ["bench", run.window + "0"]),
        "runs_by_window": runs_sorted("-window", lambda run: [run.window + "0", 0]),
        "runs_by_created": runs_sorted(
            "-created", lambda run: [(run.created_at + timedelta(microseconds=1)).isoformat(), 0]
        ),
        "export_first_chunk": lambda run: (
            reverse("dashboard:run_tasks_csv", kwargs={"run_id": run.pk})
            + "?"
            + urlencode({"partition": "p7.test", "q": "http://p7.test/item/"})
        ),
    }
    # An exact URL must go straight to its task: a 200 would time a list instead.
    expected = {"tasks_exact_url": 302}

    def fetch(url: str):
        """One request; for a streamed export, up to its first chunk (then closed)."""
        response = client.get(url)
        if response.streaming:
            next(iter(response.streaming_content))
            response.close()
        return response

    results = []
    failures = []
    for page, url_of in pages.items():
        times: dict[str, list[float]] = {"10k": [], "1m": []}
        status = expected.get(page, 200)
        for label in ("10k", "1m"):
            for _ in range(3):
                response = fetch(url_of(runs[label]))
                assert response.status_code == status, (page, label, response.status_code)
        # ABBA: small then large in even repetitions, large then small in odd ones.
        for rep in range(args.reps):
            for label in ("10k", "1m") if rep % 2 == 0 else ("1m", "10k"):
                t0 = time.perf_counter()
                response = fetch(url_of(runs[label]))
                times[label].append((time.perf_counter() - t0) * 1000)
                assert response.status_code == status, (page, label, response.status_code)
        with CaptureQueriesContext(connection) as captured:
            fetch(url_of(runs["1m"]))
        seq, indexes = explain(captured.captured_queries)
        if seq:
            failures.extend(seq)
        ms_small = statistics.median(times["10k"])
        ms_large = statistics.median(times["1m"])
        growth = ms_large / ms_small
        results.append(
            {
                "page": page,
                "ms_10k": round(ms_small, 2),
                "ms_1m": round(ms_large, 2),
                "growth": round(growth, 2),
                "queries": len(captured.captured_queries),
                "seq_scans_on_big_tables": len(seq),
                "indexes": indexes,
            }
        )
        print(
            f"{page:20s} 10k {ms_small:7.2f} ms   1m {ms_large:7.2f} ms   growth x{growth:.2f}"
            f"   {len(captured.captured_queries)} queries, {len(seq)} seq scans on big tables"
            f"   indexes: {', '.join(indexes) or '-'}"
        )
    for plan in failures:
        print("SEQ SCAN:\n" + plan, file=sys.stderr)
    if not args.keep:
        drop_database(args.pg_name)
    print(
        json.dumps(
            {
                "bench": "dashboard",
                "results": results,
                "small": args.small,
                "large": args.large,
                "reps": args.reps,
                "target_growth": 2.0,
                "python": platform.python_version(),
                **watch.finish(),
                "command": " ".join(["python", "bench/dashboard.py", *sys.argv[1:]]),
            }
        ),
        flush=True,
    )
    ok = not failures and all(r["growth"] <= 2.0 for r in results)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
