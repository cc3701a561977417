"""The recovery drill of seed 002 ("Prove recovery before depending on it"), on real processes.

`manage.py drill` (the outer process) creates a scratch database (a SQLite file in a temporary
directory, or a PostgreSQL database next to DATABASE_URL's), then runs `manage.py drill --inner`
in a child environment whose DATABASE_URL names it, so every setting, worker and check sees only
the scratch data. The inner process (`play`) starts its own sandbox and real worker processes,
does harm to them, and then verifies seed 002's seven properties from the tables:

  harm                                          where
  SIGKILL after the fetch, before the commit    crash_windows(): SALVAGE_FAULT_POINT=after_fetch
  SIGKILL inside the commit transaction         crash_windows(): in_commit
  SIGKILL after COMMIT, before acknowledgement  crash_windows(): after_commit
  a lease expiring under a slow (paused) worker slow_worker(): SIGSTOP past the lease, SIGCONT
  K SIGKILLs of workers at random moments       collect(): at seeded random progress points
  429 with Retry-After in seconds and as a date the sandbox's "mixed" profile
  a destination timing out after the write      delivery(): the sandbox destination simulator
  the same webhook twice, then Continue         webhooks(): the webscraper simulator

A property whose machinery is not installed reports ok: false with the reason; nothing is ever
reported as passing without having been checked.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from recovery.processes import Supervisor, free_port, http_ok, manage_py, wait_until

PROPERTIES = (
    "no_intended_task_lost",
    "no_duplicate_logical_observation",
    "every_attempt_traceable",
    "quarantined_output_not_published",
    "repaired_partition_leaves_accepted_unchanged",
    "delivery_repeats_without_collection",
    "previous_dataset_available_until_replacement_passes",
)
# Harms of the drill that are reported beside the seven properties.
SCENARIOS = (
    "crash_windows",
    "lease_expired_under_slow_worker",
    "retry_after_both_forms",
    "uncertain_destination_write",
    "webhook_twice_and_continue",
)

DATASET = "drill-shop"
WINDOW = "drill-1"
REPLACEMENT_WINDOW = "drill-2"
ACTOR = "drill"


@dataclass
class DrillOptions:
    tasks: int = 2000
    kills: int = 10
    seed: int = 0
    workers: int = 3
    concurrency: int = 8
    lease_seconds: int = 4
    timeout: float = 900.0
    keep: bool = False  # keep the scratch directory (logs) for a post-mortem
    # PostgreSQL only: every this many seconds of the collection, the scratch database refuses
    # connections and loses every worker's backend for db_outage_seconds (what a restart does
    # to its clients); 0 = never. The workers must ride it out (recovery.outage).
    db_outage_every: float = 0.0
    db_outage_seconds: float = 5.0


Echo = Callable[[str], None]


# --- the outer process: scratch database, child environment ---------------------------------


@contextlib.contextmanager
def scratch_database(base_url: str, workdir: Path, keep: bool = False) -> Iterator[str]:
    """A DATABASE_URL for an empty scratch database, dropped afterwards."""
    parts = urlsplit(base_url) if base_url else None
    if parts is None or parts.scheme not in ("postgres", "postgresql"):
        yield f"sqlite:///{workdir / 'drill.sqlite3'}"
        return
    import psycopg
    from psycopg import sql

    name = f"salvage_drill_{os.getpid()}_{secrets.token_hex(3)}"
    admin = psycopg.connect(
        host=parts.hostname or None,
        port=parts.port or None,
        user=parts.username or None,
        password=parts.password or None,
        dbname="postgres",
        autocommit=True,
    )
    try:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        yield urlunsplit(parts._replace(path=f"/{name}"))
    finally:
        if not keep:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
        admin.close()


def child_environment(database_url: str, workdir: Path, options: DrillOptions) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        # Nothing of the caller's database, broker or fault injection leaks into the drill.
        if not key.startswith(("SALVAGE_FAULT", "SALVAGE_TEST")) and key not in ("REDIS_URL",)
    }
    env.update(
        DJANGO_SETTINGS_MODULE="recovery.settings",
        DATABASE_URL=database_url,
        SALVAGE_DATA_DIR=str(workdir / "var"),
        SALVAGE_INSECURE_DEV_KEY="1",
        SECURE_SSL_REDIRECT="0",
        # Nothing on loopback until the sandbox has its port (Drill.env): a manifest must not
        # reach the database or Redis on this machine.
        SALVAGE_ALLOWED_NETWORKS="",
        SALVAGE_LEASE_SECONDS=str(options.lease_seconds),
        # Outages (--db-outage-every) are seconds long: workers probe again within a second.
        SALVAGE_DB_RETRY_CAP="1",
        # Short backoff so retried pages come back within the drill; Retry-After is honoured
        # up to this cap (the sandbox asks for 2 s).
        SALVAGE_BACKOFF_BASE="0.05",
        SALVAGE_BACKOFF_CAP="1",
        SALVAGE_RETRY_AFTER_CAP="10",
        SALVAGE_CONN_MAX_AGE="0",
        # The drill delivers the outbox itself (no qcluster); the destination answers a
        # faulted write after 5 s, well past this timeout.
        SALVAGE_DELIVERY_TIMEOUT="1",
        SALVAGE_OUTBOX_WAKE="0",
        SALVAGE_LOG_LEVEL=os.environ.get("SALVAGE_DRILL_LOG_LEVEL", "WARNING"),
        PYTHONUNBUFFERED="1",
    )
    return env


def run(options: DrillOptions, *, echo: Echo) -> dict[str, Any]:
    """Play the drill on a scratch database; returns the report (see `report_ok`)."""
    base_url = os.environ.get("DATABASE_URL", "")
    workdir = Path(tempfile.mkdtemp(prefix="salvage-drill-"))
    try:
        with scratch_database(base_url, workdir, options.keep) as url:
            vendor = "postgresql" if url.startswith("postgres") else "sqlite"
            echo(f"drill: scratch database {url}, work directory {workdir}")
            env = child_environment(url, workdir, options)
            (workdir / "var" / "staticfiles").mkdir(parents=True, exist_ok=True)
            argv = manage_py(
                "drill",
                "--inner",
                str(workdir),
                "--tasks",
                str(options.tasks),
                "--kills",
                str(options.kills),
                "--seed",
                str(options.seed),
                "--workers",
                str(options.workers),
                "--timeout",
                str(options.timeout),
                "--db-outage-every",
                str(options.db_outage_every),
                "--db-outage-seconds",
                str(options.db_outage_seconds),
                "--json",
            )
            # stdout carries the inner report (one JSON line); stderr (progress) passes through.
            result = subprocess.run(argv, env=env, stdout=subprocess.PIPE, text=True, check=False)
            lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
            if not lines:
                raise RuntimeError(
                    f"the drill's inner process exited {result.returncode} without a report; "
                    f"logs in {workdir / 'logs'}"
                )
            report = json.loads(lines[-1])
            report["database"] = vendor
            return report
    finally:
        if options.keep:
            echo(f"drill: kept {workdir}")
        else:
            import shutil

            shutil.rmtree(workdir, ignore_errors=True)


def report_ok(report: dict[str, Any]) -> bool:
    """Every property holds, and every harm was really done (a drill that could not kill or
    freeze a worker proved nothing about surviving it)."""
    properties = all(report["properties"].get(name, {}).get("ok") is True for name in PROPERTIES)
    harms = all(report.get("scenarios", {}).get(name, {}).get("ok") is True for name in SCENARIOS)
    return properties and harms


# --- the inner process: the drill itself ----------------------------------------------------


@dataclass
class Drill:
    options: DrillOptions
    workdir: Path
    echo: Echo
    supervisor: Supervisor = field(init=False)
    rng: random.Random = field(init=False)
    base_url: str = ""
    allowed_networks: str = ""  # the sandbox's address and port, once it has one
    run_id: int = 0
    kills: int = 0
    worker_seq: int = 0
    worker_ids: dict[int, str] = field(default_factory=dict)  # pid -> lease owner
    webhook_secret: str = field(default_factory=lambda: "drill-" + secrets.token_hex(8))
    held_keys: set[str] = field(default_factory=set)  # entity keys held by the quarantine
    figures: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.supervisor = Supervisor(grace=20, log_dir=self.workdir / "logs", echo=self._quiet)
        self.rng = random.Random(self.options.seed)

    def _quiet(self, message: str) -> None:
        if os.environ.get("SALVAGE_DRILL_VERBOSE"):
            self.echo(message)

    # --- processes ------------------------------------------------------------------------
    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        if self.base_url:
            # The remote providers talk to the sandbox's simulators with their own test
            # credentials (never a real account's).
            env.update(
                # Every outbox event (also corrections written by workers) goes to the
                # sandbox's destination simulator, where the drill counts the writes.
                SALVAGE_DESTINATION=f"{self.base_url}/destination",
                WEBSCRAPER_API_URL=f"{self.base_url}/webscraper",
                WEBSCRAPER_API_TOKEN=CLOUD_TOKEN,
                WEBSCRAPER_WEBHOOK_SECRET=self.webhook_secret,
                SALVAGE_ALLOWED_NETWORKS=self.allowed_networks,
            )
        env.update(extra)
        return env

    def start_sandbox(self) -> None:
        port = free_port()
        self.base_url = f"http://127.0.0.1:{port}"
        # The sandbox's own port and nothing else on this machine.
        self.allowed_networks = f"127.0.0.1:{port}"
        self.supervisor.start(
            "sandbox",
            manage_py(
                "sandbox",
                "--port",
                str(port),
                "--pages",
                str(self.options.tasks),
                "--seed",
                str(self.options.seed),
                "--faults",
                "mixed",
            ),
            env=self.env(),
        )
        wait_until(
            lambda: http_ok(f"{self.base_url}/_sandbox/state"), timeout=60, what="the sandbox"
        )
        from django.conf import settings

        settings.SALVAGE_DESTINATION = f"{self.base_url}/destination"
        settings.WEBSCRAPER_API_URL = f"{self.base_url}/webscraper"
        settings.WEBSCRAPER_API_TOKEN = CLOUD_TOKEN
        settings.WEBSCRAPER_WEBHOOK_SECRET = self.webhook_secret
        settings.SALVAGE_ALLOWED_NETWORKS = [self.allowed_networks]

    def start_worker(self, name: str | None = None, batch: int | None = None, **extra_env: str):
        """Start `manage.py work`; each start gets its own lease-owner id (name.N)."""
        self.worker_seq += 1
        name = name or f"worker-{self.worker_seq}"
        worker_id = f"drill-{name}.{self.worker_seq}"
        argv = manage_py(
            "work", "--concurrency", str(self.options.concurrency), "--worker-id", worker_id
        )
        if batch:
            argv += ["--batch", str(batch)]
        child = self.supervisor.start(name, argv, env=self.env(**extra_env))
        self.worker_ids[child.pid] = worker_id
        return child

    def sandbox_post(self, path: str, payload: dict | None = None) -> dict:
        import urllib.request

        request = urllib.request.Request(
            f"{self.base_url}{path}",
            data=json.dumps(payload or {}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
        return json.loads(body) if body else {}

    def sandbox_get(self, path: str) -> dict:
        import urllib.request

        with urllib.request.urlopen(f"{self.base_url}{path}", timeout=10) as response:
            return json.loads(response.read())

    # --- setup ------------------------------------------------------------------------------
    def load(self, window: str, products: list[int]) -> int:
        """Create the run of `window` over the given sandbox product numbers."""
        from recovery import manifests, specs
        from recovery.sandbox import server

        spec_path = self.workdir / "drill-shop.toml"
        if not spec_path.exists():
            toml = server.shop_spec_toml(name=DATASET, partition_rule="manifest")
            # Coverage 0.5: a run with its bad-retailer partition (a fifth of the products)
            # quarantined can still be accepted, which is what the quarantine property needs.
            toml = toml.replace('kind = "coverage"\nmin = 0.9', 'kind = "coverage"\nmin = 0.5')
            spec_path.write_text(toml)
            specs.load_dataset(spec_path)
        wanted = set(products)
        rows = [
            row
            for row in server.manifest_rows(
                self.base_url, pages=self.options.tasks, seed=self.options.seed
            )
            if int(row["url"].rsplit("/", 1)[1]) in wanted
        ]
        manifest = self.workdir / f"{window}.csv"
        server.write_manifest(manifest, rows)
        return manifests.create_run(DATASET, window, manifest, actor=ACTOR).run.pk

    def wait_run_state(self, run_id: int, states: tuple[str, ...]) -> str:
        from recovery.models import Run

        def state() -> str | None:
            value = Run.objects.filter(pk=run_id).values_list("acceptance_state", flat=True)[0]
            return value if value in states else None

        try:
            return wait_until(state, timeout=self.options.timeout, what=f"run {run_id} {states}")
        except TimeoutError:
            return Run.objects.filter(pk=run_id).values_list("acceptance_state", flat=True)[0]

    # --- waiting ----------------------------------------------------------------------------
    def states(self, run_id: int) -> dict[str, int]:
        from recovery import counters

        return counters.by_state(run_id)

    def terminal_count(self, run_id: int) -> int:
        from recovery.states.task import TERMINAL

        return sum(n for s, n in self.states(run_id).items() if s in TERMINAL)

    def wait_terminal(self, run_id: int, total: int, progress=None, on_tick=None) -> bool:
        deadline = time.monotonic() + self.options.timeout
        while time.monotonic() < deadline:
            done = self.terminal_count(run_id)
            if progress is not None:
                progress.update(done)
            if on_tick is not None:
                on_tick(done)
            if done >= total:
                return True
            self.keep_workers_alive()
            time.sleep(0.1)
        return False

    def keep_workers_alive(self) -> None:
        """A worker that exited on its own (not by our hand) is restarted and counted; a fleet
        that keeps dying (a broken database, a bad install) stops the drill."""
        for child in list(self.supervisor.children.values()):
            if child.name.startswith("worker-") and not child.alive():
                exits = self.figures.setdefault("collect", {}).setdefault("worker_exits", [])
                exits.append({"worker": child.name, "returncode": child.popen.returncode})
                if len(exits) > 20:
                    raise RuntimeError(
                        f"workers exited on their own {len(exits)} times; see "
                        f"{self.workdir / 'logs' / (child.name + '.log')}"
                    )
                self.start_worker(child.name)

    # --- harms ------------------------------------------------------------------------------
    def crash_windows(self) -> dict[str, Any]:
        """Kill a worker at each fault point of seed 002's crash table, one at a time."""
        from recovery.models import Task

        figures: dict[str, Any] = {"ok": True}
        for point in ("after_fetch", "in_commit", "after_commit"):
            once = self.workdir / f"fault-{point}"
            child = self.start_worker(
                name=f"fault-{point}",
                batch=10,
                SALVAGE_FAULT_POINT=point,
                SALVAGE_FAULT_SKIP=str(self.rng.randint(0, 3)),
                SALVAGE_FAULT_ONCE=str(once),
            )
            try:
                wait_until(lambda c=child: not c.alive(), timeout=60, what=f"fault {point}")
            except TimeoutError:
                self.supervisor.kill(child.name)
                figures[point] = {"fired": False}
                figures["ok"] = False
                continue
            fired = child.popen.returncode == -signal.SIGKILL and once.exists()
            orphaned = Task.objects.filter(
                run_id=self.run_id, state="leased", lease_owner=self.worker_ids[child.pid]
            ).count()
            figures[point] = {"fired": fired, "leases_left_to_expire": orphaned}
            figures["ok"] = figures["ok"] and fired
            if fired:
                self.kills += 1
        return figures

    def _worker_holding_leases(self):
        """(child, {task id: lease token}) of a fleet worker holding leases, else None."""
        from recovery.models import Task

        for child in self.supervisor.children.values():
            if not (child.name.startswith("worker-") and child.alive()):
                continue
            rows = Task.objects.filter(
                run_id=self.run_id, state="leased", lease_owner=self.worker_ids[child.pid]
            ).values_list("pk", "lease_token")[:50]
            if rows:
                return child, dict(rows)
        return None

    @staticmethod
    def _taken_over(tokens: dict[int, int]) -> int:
        from recovery.models import Task

        rows = Task.objects.filter(pk__in=list(tokens)).values_list("pk", "lease_token")
        return sum(1 for pk, token in rows if token != tokens[pk])

    @staticmethod
    def _still_leased(tokens: dict[int, int]) -> dict[int, int]:
        from recovery.models import Task

        rows = Task.objects.filter(pk__in=list(tokens), state="leased").values_list(
            "pk", "lease_token"
        )
        return {pk: token for pk, token in rows if token == tokens[pk]}

    def _lost_leases(self) -> int:
        from recovery.models import Attempt

        return Attempt.objects.filter(run_id=self.run_id, outcome="lost_lease").count()

    def collect(self, run_id: int, kills: int, progress) -> dict[str, Any]:
        """Run the fleet to the end of the run while doing harm at seeded random moments:
        K SIGKILLs of a worker (restarted at once), and one worker frozen (SIGSTOP) while it
        holds leases, until another worker has taken one of its expired leases over; then it
        resumes (SIGCONT) and its late commits must be refused by the lease_token fence."""
        from recovery.models import Task

        total = Task.objects.filter(run_id=run_id).count()
        start = self.terminal_count(run_id)
        remaining = max(total - start, 1)
        # Progress points (not times): the harm lands while work is under way on any machine
        # speed, and the same seed replays the same schedule.
        points = sorted(start + self.rng.uniform(0.05, 0.9) * remaining for _ in range(kills))
        slow_at = start + self.rng.uniform(0.05, 0.5) * remaining
        done_kills: list[dict[str, Any]] = []
        slow: dict[str, Any] = {"ok": False, "paused": None, "tasks_taken_over": 0}
        lost_before = self._lost_leases()
        outages: list[dict[str, Any]] = []
        last_outage = time.monotonic()

        def on_tick(done: int) -> None:
            nonlocal last_outage
            every = self.options.db_outage_every
            if every and done < total and time.monotonic() - last_outage >= every:
                refuse_connections(self.options.db_outage_seconds)
                outages.append(
                    {"at_terminal_tasks": done, "seconds": self.options.db_outage_seconds}
                )
                last_outage = time.monotonic()
            paused = slow.get("child")
            if slow["paused"] is None and done >= slow_at:
                self._pause_a_lease_holder(slow, done)
            elif paused is not None and slow.get("resumed") is None:
                taken = self._taken_over(slow["tokens"])
                if taken:
                    paused.signal_group(signal.SIGCONT)
                    slow.update(resumed=done, tasks_taken_over=taken)
            while points and done >= points[0]:
                points.pop(0)
                workers = [
                    c
                    for c in self.supervisor.children.values()
                    if c.name.startswith("worker-")
                    and c.alive()
                    and (c is not paused or slow.get("resumed") is not None)
                ]
                if not workers:
                    return
                victim = self.rng.choice(workers)
                self.supervisor.kill(victim.name)
                self.kills += 1
                done_kills.append({"worker": victim.name, "at_terminal_tasks": done})
                self.start_worker(victim.name)

        try:
            finished = self.wait_terminal(run_id, total, progress, on_tick)
        finally:
            if slow.get("child") is not None and slow.get("resumed") is None:
                slow["child"].signal_group(signal.SIGCONT)
        if slow.get("child") is not None:
            # The resumed worker finishes what it was doing and tries to commit: wait
            # (bounded) for the refusal to be recorded.
            with contextlib.suppress(TimeoutError):
                wait_until(
                    lambda: self._lost_leases() > lost_before,
                    timeout=30,
                    what="the stale commit being refused",
                )
        slow["lost_lease_attempts"] = self._lost_leases() - lost_before
        slow["ok"] = bool(slow["tasks_taken_over"] and slow["lost_lease_attempts"])
        slow.pop("child", None)
        slow.pop("tokens", None)
        return {
            "finished": finished,
            "kills": len(done_kills),
            "kill_points": done_kills,
            "db_outages": len(outages),
            "db_outage_points": outages,
            "slow_worker": slow,
        }

    def _pause_a_lease_holder(self, slow: dict[str, Any], done: int) -> None:
        found = self._worker_holding_leases()
        if found is None:
            return
        child, tokens = found
        # SIGSTOP is a worker stalled mid-task (GC pause, swapped out, a stuck page): its
        # heartbeats stop too, so its leases really expire while it is still "active".
        child.signal_group(signal.SIGSTOP)
        tokens = self._still_leased(tokens)
        if not tokens:
            child.signal_group(signal.SIGCONT)  # it finished them meanwhile: next tick
            return
        slow.update(paused=done, worker=child.name, held=len(tokens), child=child, tokens=tokens)


# --- verification (pure reads of the scratch database) ---------------------------------------


def verify_tasks(run_id: int, expected_keys: set[str], sandbox: dict | None) -> dict[str, Any]:
    from django.db.models import Count, F, Max, Q

    from recovery.models import Attempt, Observation, Task
    from recovery.states.task import TERMINAL

    tasks = Task.objects.filter(run_id=run_id)
    keys = set(tasks.values_list("task_key", flat=True))
    missing = len(expected_keys - keys)
    unfinished = tasks.exclude(state__in=TERMINAL).count()
    by_state = dict(tasks.values_list("state").annotate(n=Count("pk")).order_by())

    observations = Observation.objects.filter(run_id=run_id)
    obs_total = observations.count()
    by_entity = observations.values("entity_key").annotate(n=Count("pk")).filter(n__gt=1).order_by()
    dup_entities = sum(row["n"] - 1 for row in by_entity)
    by_task = observations.values("source_task").annotate(n=Count("pk")).filter(n__gt=1).order_by()
    dup_tasks = sum(row["n"] - 1 for row in by_task)

    attempts = Attempt.objects.filter(run_id=run_id)
    attempt_total = attempts.count()
    untraceable = attempts.filter(
        Q(worker="")
        | Q(outcome="")
        | Q(started_at__isnull=True)
        | (Q(finished_at__isnull=True) & ~Q(outcome__in=["running", "submitted"]))
        | (Q(outcome__in=["retry", "quarantined", "dead", "gone"]) & Q(error_class=""))
    ).count()
    # Every terminal task must show at least one attempt that explains how it got there.
    terminal_without_attempt = (
        tasks.filter(state__in=TERMINAL).annotate(n=Count("attempts")).filter(n=0).count()
    )
    committed_without_commit = (
        tasks.filter(state="committed")
        .annotate(n=Count("attempts", filter=Q(attempts__outcome="committed")))
        .filter(n=0)
        .count()
    )
    obs_without_source = observations.filter(source_attempt__isnull=True).count()
    # A stale write accepted: two committed attempts for one task in one scope (the run, or
    # one recovery batch), or an observation written by an attempt whose lease was not the
    # task's last one in that scope.
    doubles = (
        attempts.filter(outcome="committed")
        .values("task", "recovery_batch")
        .annotate(n=Count("pk"))
        .filter(n__gt=1)
        .order_by()
    )
    stale = sum(row["n"] - 1 for row in doubles)
    stale += (
        observations.filter(
            source_attempt__isnull=False,
            source_attempt__lease_token__lt=F("source_task__lease_token"),
        )
        .exclude(source_task__recovery_batch__isnull=False)
        .count()
    )
    # Crashes are budgeted apart from retries: how close any page came to a crash loop.
    crashes = tasks.aggregate(
        crash_loops=Count("pk", filter=Q(last_error_class="worker_crash_loop")),
        max_crash_count=Max("crash_count"),
    )
    figures = {
        "tasks": len(keys),
        "lost_lease_attempts": attempts.filter(outcome="lost_lease").count(),
        "crash_loops": crashes["crash_loops"],
        "max_crash_count": crashes["max_crash_count"] or 0,
        "tasks_by_state": by_state,
        "missing_task_keys": missing,
        "unfinished_tasks": unfinished,
        "attempts": attempt_total,
        "observations": obs_total,
        "duplicate_entities": dup_entities,
        "duplicate_per_task": dup_tasks,
        "untraceable_attempts": untraceable,
        "terminal_without_attempt": terminal_without_attempt,
        "committed_without_committed_attempt": committed_without_commit,
        "observations_without_source_attempt": obs_without_source,
        "stale_writes_accepted": stale,
    }
    if sandbox is not None:
        figures["unexpected_final_states"] = sandbox.get("unexpected_final_states")
    return figures


def expected_final_states(run_id: int, seed: int, profile: str, bad_retailer: bool) -> dict:
    """Compare each product task's final state with what the sandbox says it should be."""
    from recovery.models import Attempt, Task
    from recovery.sandbox import site

    wrong = 0
    examples = []
    rows = Task.objects.filter(run_id=run_id).values_list(
        "pk", "url", "state", "last_error_class", "attempt_count"
    )
    for pk, url, state, error_class, attempts in rows:
        i = int(url.rstrip("/").rsplit("/", 1)[1])
        want = site.expected(i, seed=seed, profile=profile, bad_retailer=bad_retailer).final_state
        if state != want:
            wrong += 1
            if len(examples) < 10:
                # The evidence an operator needs: what each attempt ended as, in order.
                outcomes = list(
                    Attempt.objects.filter(task_id=pk)
                    .order_by("started_at")
                    .values_list("outcome", "error_class")
                )
                examples.append(
                    {
                        "product": i,
                        "url": url,
                        "state": state,
                        "expected": want,
                        "last_error_class": error_class,
                        "attempts": attempts,
                        "attempt_outcomes": [f"{o}:{e}" if e else o for o, e in outcomes],
                    }
                )
    return {"unexpected_final_states": wrong, "examples": examples}


def task_loss_property(
    finished: bool, intended: int, lost: int, tasks: dict[str, Any], sandbox: dict[str, Any]
) -> dict[str, Any]:
    """`no_intended_task_lost`: every task terminal, and each as the sandbox predicts.

    A page that ends other than predicted (a reset that ended `dead` after its worker was
    killed too often) is a lost page too: its data was there to collect. The examples go
    into the report, so `--json` says which pages and what their attempts ended as."""
    return {
        "ok": bool(finished) and lost == 0 and sandbox["unexpected_final_states"] == 0,
        "intended": intended,
        "lost": lost,
        "missing_task_keys": tasks["missing_task_keys"],
        "unfinished_tasks": tasks["unfinished_tasks"],
        "tasks_by_state": tasks["tasks_by_state"],
        "unexpected_final_states": sandbox["unexpected_final_states"],
        "unexpected_final_state_examples": sandbox["examples"],
    }


def refuse_connections(seconds: float) -> None:
    """A database outage for the drill's workers (PostgreSQL): the scratch database refuses
    new connections and every backend but this process's own is terminated, for `seconds`.
    The server itself stays up (other databases on it are not touched)."""
    import psycopg
    from django.db import connection
    from psycopg import sql

    s = connection.settings_dict
    connection.ensure_connection()
    mine = connection.connection.info.backend_pid
    auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
    admin_url = f"postgresql://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/postgres"
    name = sql.Identifier(s["NAME"])
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS false").format(name))
        try:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> %s AND pid <> pg_backend_pid()",
                [s["NAME"], mine],
            )
            time.sleep(seconds)  # the outage itself: the harm is the waiting
        finally:
            admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS true").format(name))


def not_ok(reason: str, **figures: Any) -> dict[str, Any]:
    return {"ok": False, "reason": reason, **figures}


def _guarded(check: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """Run one check; an exception is a failed check with its reason, not a lost report."""
    try:
        return check(*args)
    except Exception as exc:
        return not_ok(f"{type(exc).__name__}: {exc}"[:500])


def missing_module(*names: str) -> str | None:
    import importlib.util

    for name in names:
        if importlib.util.find_spec(name) is None:
            return f"{name} has not landed yet"
    return None


def play(options: DrillOptions, workdir: Path, *, echo: Echo) -> dict[str, Any]:
    """The inner drill (runs with DATABASE_URL naming the scratch database)."""
    from django.core.management import call_command

    from recovery import keys
    from recovery.progress import Progress

    started = time.monotonic()
    call_command("migrate", verbosity=0, interactive=False)
    drill = Drill(options, workdir, echo)
    props: dict[str, dict[str, Any]] = {}
    report: dict[str, Any] = {
        "tasks": options.tasks,
        "kills": 0,
        "lost": None,
        "duplicate_observations": None,
        "untraceable_attempts": None,
        "stale_writes_accepted": None,
        "seed": options.seed,
        "properties": props,
        "scenarios": {},
    }
    absent = missing_module("recovery.worker", "recovery.management.commands.work")
    with drill.supervisor:
        drill.start_sandbox()
        run_id = drill.run_id = drill.load(WINDOW, list(range(1, options.tasks + 1)))
        if absent:
            for name in PROPERTIES:
                props[name] = not_ok(f"no worker to drill: {absent}")
            return report
        expected_keys = {
            keys.task_key(DATASET, f"{drill.base_url}/product/{i}", WINDOW, "product")
            for i in range(1, options.tasks + 1)
        }
        echo(f"drill: run {run_id}, {options.tasks} tasks, sandbox at {drill.base_url}")

        # 1. Crash windows, one worker at a time on the fresh run.
        report["scenarios"]["crash_windows"] = drill.crash_windows()

        # 2. The fleet, with K random kills and one worker frozen past its leases.
        for _ in range(options.workers):
            drill.start_worker()
        with Progress("drill", total=options.tasks, unit="tasks") as progress:
            collect = drill.collect(run_id, options.kills, progress)
        collect["workers_exited_on_their_own"] = len(
            drill.figures.get("collect", {}).get("worker_exits", [])
        )
        report["scenarios"]["collect"] = collect
        report["scenarios"]["lease_expired_under_slow_worker"] = collect.pop("slow_worker")

        # 3. Verify the task-level properties.
        sandbox = expected_final_states(run_id, options.seed, "mixed", True)
        tasks = verify_tasks(run_id, expected_keys, sandbox)
        report.update(
            lost=tasks["missing_task_keys"] + tasks["unfinished_tasks"],
            duplicate_observations=tasks["duplicate_entities"] + tasks["duplicate_per_task"],
            untraceable_attempts=(
                tasks["untraceable_attempts"]
                + tasks["terminal_without_attempt"]
                + tasks["committed_without_committed_attempt"]
                + tasks["observations_without_source_attempt"]
            ),
            stale_writes_accepted=tasks["stale_writes_accepted"],
        )
        report["unexpected_final_states"] = sandbox["unexpected_final_states"]
        report["lost_lease_attempts"] = tasks["lost_lease_attempts"]
        report["crash_loops"] = tasks["crash_loops"]
        report["max_crash_count"] = tasks["max_crash_count"]
        props["no_intended_task_lost"] = task_loss_property(
            collect["finished"], len(expected_keys), report["lost"], tasks, sandbox
        )
        props["no_duplicate_logical_observation"] = {
            "ok": report["duplicate_observations"] == 0 and report["stale_writes_accepted"] == 0,
            "attempts": tasks["attempts"],
            "observations": tasks["observations"],
            "duplicate_entities": tasks["duplicate_entities"],
            "duplicate_per_task": tasks["duplicate_per_task"],
            "stale_writes_accepted": tasks["stale_writes_accepted"],
        }
        props["every_attempt_traceable"] = {
            "ok": report["untraceable_attempts"] == 0,
            "attempts": tasks["attempts"],
            "untraceable_attempts": tasks["untraceable_attempts"],
            "terminal_without_attempt": tasks["terminal_without_attempt"],
            "committed_without_committed_attempt": tasks["committed_without_committed_attempt"],
            "observations_without_source_attempt": tasks["observations_without_source_attempt"],
        }
        report["scenarios"]["retry_after_both_forms"] = _guarded(
            retry_after_figures, run_id, options.seed
        )

        # 4. Acceptance, repair, delivery and the replacement dataset.
        acceptance_properties(drill, run_id, props, report["scenarios"])
        report["scenarios"]["webhook_twice_and_continue"] = _guarded(webhook_scenario, drill)

    report["kills"] = drill.kills
    report["seconds"] = round(time.monotonic() - started, 1)
    for name in PROPERTIES:
        props.setdefault(name, not_ok("not checked"))
    report["ok"] = report_ok(report)
    return report


def retry_after_figures(run_id: int, seed: int) -> dict[str, Any]:
    """Pages answering 429 (Retry-After in seconds, and as an HTTP-date) end committed, and
    their next attempt waited for the Retry-After (2 s; the date form rounds to 2-3 s)."""
    from recovery.models import Attempt, Task
    from recovery.sandbox import site

    figures: dict[str, Any] = {}
    for kind in ("rate_limited", "rate_limited_date"):
        ids = [
            pk
            for pk, url in Task.objects.filter(run_id=run_id).values_list("pk", "url")
            if site.fault_for(int(url.rstrip("/").rsplit("/", 1)[1]), seed=seed, profile="mixed")
            == kind
        ]
        committed = Task.objects.filter(pk__in=ids, state="committed").count()
        waits = []
        for task_id in ids:
            attempts = list(
                Attempt.objects.filter(task_id=task_id).values_list(
                    "outcome", "error_class", "finished_at", "started_at"
                )
            )
            for outcome, error_class, finished, _started in attempts:
                if outcome != "retry" or error_class != "rate_limited" or finished is None:
                    continue
                # The next claim after this 429 was committed (an attempt that started
                # earlier ran concurrently under an expired lease: not a consequence).
                later = [s for _o, _e, _f, s in attempts if s and s >= finished]
                if later:
                    waits.append((min(later) - finished).total_seconds())
        figures[kind] = {
            "pages": len(ids),
            "committed": committed,
            "recorded_429s": len(waits),
            "min_wait_seconds": round(min(waits), 2) if waits else None,
        }
    figures["ok"] = all(
        f["pages"] > 0
        and f["committed"] == f["pages"]
        and f["recorded_429s"] > 0
        and f["min_wait_seconds"] >= 1.5
        for f in figures.values()
    )
    return figures


def acceptance_properties(
    drill: Drill, run_id: int, props: dict[str, dict[str, Any]], scenarios: dict[str, Any]
) -> None:
    absent = missing_module(
        "recovery.acceptance", "recovery.reruns", "recovery.outbox", "recovery.exports"
    )
    if absent:
        for name in PROPERTIES[3:]:
            props[name] = not_ok(absent)
        return
    # Deliveries go to the sandbox's destination simulator (Drill.start_sandbox, Drill.env).
    steps = (
        ("quarantined_output_not_published", quarantine_property),
        ("repaired_partition_leaves_accepted_unchanged", repair_property),
        ("delivery_repeats_without_collection", delivery_property),
        ("previous_dataset_available_until_replacement_passes", replacement_property),
    )
    for name, step in steps:
        try:
            props[name] = step(drill, run_id, scenarios)
        except Exception as exc:  # report the failure as a figure, keep drilling
            props[name] = not_ok(f"{type(exc).__name__}: {exc}"[:500])


def _export(run_id: int) -> list[dict[str, Any]]:
    from recovery import exports

    text = "".join(exports.stream(run_id, "jsonl"))
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _row_keys(rows: list[dict[str, Any]]) -> set[str]:
    """The entity keys in exported rows (whatever the column is called, the SKU is in it)."""
    found = set()
    for row in rows:
        for value in row.values() if isinstance(row, dict) else ():
            if isinstance(value, str) and value.startswith("SKU-"):
                found.add(value)
            elif isinstance(value, dict):
                found |= _row_keys([value])
    return found


def _evaluated(run_id: int) -> bool:
    from recovery.models import AuditEntry

    return AuditEntry.objects.filter(
        action="run_candidate", object_type="run", object_id=str(run_id)
    ).exists()


def quarantine_property(drill: Drill, run_id: int, scenarios: dict) -> dict[str, Any]:
    """Accept a run whose bad partition is quarantined: its held rows never leave (export);
    after the repair the run is published and the published rows are checked again."""
    from recovery import acceptance
    from recovery.models import RunPartition
    from recovery.sandbox import site

    state = drill.wait_run_state(run_id, ("candidate",))
    # The candidate move and its evaluation commit together; wait (bounded) to be sure.
    with contextlib.suppress(TimeoutError):
        wait_until(lambda: _evaluated(run_id), timeout=60, what="the candidate's evaluation")
    bad = site.bad_retailer_for(drill.options.seed)
    quarantined = sorted(
        RunPartition.objects.filter(run_id=run_id, quarantined=True).values_list("name", flat=True)
    )
    held_keys = _held_keys(run_id, bad)
    drill.held_keys = held_keys
    valid = _valid_rows(run_id)
    diagnostics = _candidate_diagnostics(run_id)
    acceptance.accept_run(run_id, ACTOR)
    rows = _export(run_id)
    leaked = len(_row_keys(rows) & held_keys)
    ok = (
        state == "candidate"
        and bad in quarantined
        and len(held_keys) > 0
        and leaked == 0
        and len(rows) == valid
    )
    return {
        "ok": ok,
        "state_before_accept": state,
        "evaluated": _evaluated(run_id),
        "quarantined_partitions": quarantined,
        "held_observations": len(held_keys),
        "accepted_rows_exported": len(rows),
        "valid_observations": valid,
        "held_rows_exported": leaked,
        **({} if ok else {"diagnostics": diagnostics}),
    }


def _held_keys(run_id: int, partition: str) -> set[str]:
    """Entity keys of the partition's rows that are not valid as shown (held or invalid)."""
    from recovery import row_states
    from recovery.models import Observation

    rows = Observation.objects.filter(run_id=run_id, partition=partition)
    return set(rows.filter(row_states.not_valid(run_id)).values_list("entity_key", flat=True))


def _valid_rows(run_id: int, partition: str | None = None) -> int:
    """Rows valid as shown (what an export carries), of the run or of one partition."""
    from recovery import row_states

    rows = row_states.exportable(run_id)
    return (rows if partition is None else rows.filter(partition=partition)).count()


def _candidate_diagnostics(run_id: int) -> dict[str, Any]:
    """How the run became a candidate (for a post-mortem when the figures look wrong)."""
    from django.db.models import Count

    from recovery import counters, row_states
    from recovery.models import AuditEntry, Observation, Task

    audit = [
        {"at": str(e.at), "action": e.action, "detail": e.detail}
        for e in AuditEntry.objects.filter(object_type="run", object_id=str(run_id)).order_by("at")
    ]
    activity = []
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT state, now() - xact_start, left(query, 120) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND xact_start IS NOT NULL"
            )
            activity = [[str(v) for v in row] for row in cursor.fetchall()]
    quarantined = sorted(row_states.held_partitions(run_id).values_list("name", flat=True))
    # Each partition's rows by state as shown: a quarantined partition's rows are all held.
    by_partition: dict[tuple[str, str], int] = {}
    for partition, verdict, n in (
        Observation.objects.filter(run_id=run_id)
        .values_list("partition", "validation_state")
        .annotate(n=Count("pk"))
        .order_by()
    ):
        shown = row_states.HELD if partition in quarantined else verdict
        by_partition[partition, shown] = by_partition.get((partition, shown), 0) + n

    return {
        "partitions_quarantined": quarantined,
        "validation_by_partition": [[p, s, n] for (p, s), n in sorted(by_partition.items())],
        "open_transactions": activity,
        "audit": audit[:20],
        "validation_states": row_states.state_counts(run_id),
        "counters": counters.by_state(run_id),
        "task_states": dict(
            Task.objects.filter(run_id=run_id)
            .values_list("state")
            .annotate(n=Count("pk"))
            .order_by()
        ),
    }


def _collection_snapshot(run_ids: list[int]) -> dict[str, Any]:
    from django.db.models import Count, Max

    from recovery.models import Attempt, Task

    return {
        "attempts": Attempt.objects.filter(run_id__in=run_ids).count(),
        "tasks": Task.objects.filter(run_id__in=run_ids).count(),
        "last_attempt": str(
            Attempt.objects.filter(run_id__in=run_ids).aggregate(m=Max("started_at"))["m"]
        ),
        "states": dict(
            Task.objects.filter(run_id__in=run_ids)
            .values_list("state")
            .annotate(n=Count("pk"))
            .order_by()
        ),
    }


def delivery_property(drill: Drill, run_id: int, scenarios: dict) -> dict[str, Any]:
    """The destination times out after storing the write; the outbox looks the event up
    before writing again, and delivering (again) never collects anything."""
    from datetime import timedelta

    from django.utils import timezone

    from recovery import outbox
    from recovery.models import OutboxEvent, Run

    events = list(OutboxEvent.objects.filter(run_id=run_id).order_by("created_at"))
    if not events:
        return not_ok("accepting the run wrote no outbox event")
    before = _collection_snapshot(list(Run.objects.values_list("pk", flat=True)))
    # The next write is stored, then answered too late: an uncertain write.
    drill.sandbox_post("/destination/_faults", {"slow_after_write": 1})
    first = outbox.deliver_one(events[0].pk)
    later = timezone.now() + timedelta(hours=1)  # past any backoff
    states = [first]
    for _ in range(3):
        states.append(outbox.deliver_one(events[0].pk, now=later))
        if states[-1] == "delivered":
            break
    for event in events[1:]:
        outbox.deliver_one(event.pk, now=later)
    stats = drill.sandbox_get("/destination/_stats")
    puts = stats.get("puts", {})
    delivered = OutboxEvent.objects.filter(run_id=run_id, state="delivered").count()
    after = _collection_snapshot(list(Run.objects.values_list("pk", flat=True)))
    scenarios["uncertain_destination_write"] = {
        "ok": first == "uncertain" and states[-1] == "delivered",
        "states": states,
        "writes_of_event": puts.get(str(events[0].pk), 0),
        "lookups_of_event": stats.get("lookups", {}).get(str(events[0].pk), 0),
    }
    return {
        "ok": first == "uncertain"
        and delivered == len(events)
        and all(puts.get(str(e.pk), 0) == 1 for e in events)
        and before == after,
        "events": len(events),
        "delivered": delivered,
        "delivery_states": states,
        "writes_per_event": sorted({puts.get(str(e.pk), 0) for e in events}),
        "attempts_before": before["attempts"],
        "attempts_after": after["attempts"],
        "collection_unchanged": before == after,
    }


def repair_property(drill: Drill, run_id: int, scenarios: dict) -> dict[str, Any]:
    """Repair the source, rerun the quarantined partition under the original run: the other
    partitions' observations hash exactly as before; the repaired one becomes valid."""
    from recovery import acceptance, reruns
    from recovery.models import Observation, RecoveryBatch, Task
    from recovery.sandbox import site

    bad = site.bad_retailer_for(drill.options.seed)
    drill.sandbox_post("/_sandbox/faults", {"bad_retailer": False})
    batch = reruns.create_recovery_batch(
        run_id,
        partitions=[bad],
        reason="drill: the retailer's price feed was repaired",
        scraper_version="2",
        actor=ACTOR,
    )
    finished = drill.wait_terminal(run_id, Task.objects.filter(run_id=run_id).count())
    # The workers complete the batch (their advance step); the drill only watches, so it
    # adds no evaluation of its own to theirs.
    with contextlib.suppress(TimeoutError):
        wait_until(
            lambda: RecoveryBatch.objects.filter(
                pk=batch.pk, state=RecoveryBatch.State.COMPLETED
            ).exists(),
            timeout=min(drill.options.timeout, 120),
            what="the recovery batch completing",
        )
    batch.refresh_from_db()
    unchanged = reruns.untouched_unchanged(batch)
    repaired_valid = _valid_rows(run_id, bad)
    repaired_total = Observation.objects.filter(run_id=run_id, partition=bad).count()
    repaired_keys = set(
        Observation.objects.filter(run_id=run_id, partition=bad).values_list(
            "entity_key", flat=True
        )
    )
    # Seed 002's last step: promote (publish) only after the repair revalidated. Every
    # partition is good now, so the published dataset must be every observation of the run.
    acceptance.publish_run(run_id, ACTOR)
    published = _export(run_id)
    everything = Observation.objects.filter(run_id=run_id).count()
    repaired_published = len(_row_keys(published) & repaired_keys)
    return {
        "ok": bool(unchanged)
        and all(unchanged.values())
        and batch.state == RecoveryBatch.State.COMPLETED
        and finished
        and repaired_total > 0
        and repaired_valid == repaired_total
        and len(published) == everything
        and repaired_published == len(repaired_keys),
        "published_rows": len(published),
        "run_observations": everything,
        "repaired_rows_published": repaired_published,
        **(
            {}
            if repaired_valid == repaired_total and len(published) == everything
            else {"diagnostics": _candidate_diagnostics(run_id)}
        ),
        "batch": batch.pk,
        "batch_tasks": batch.task_count,
        "batch_state": batch.state,
        "untouched_partitions": len(unchanged),
        "untouched_unchanged": sum(unchanged.values()),
        "repaired_observations_valid": repaired_valid,
        "repaired_observations": repaired_total,
    }


def replacement_property(drill: Drill, run_id: int, scenarios: dict) -> dict[str, Any]:
    """A replacement run that fails its rules never displaces the accepted dataset; one that
    passes does, only once accepted."""
    from recovery import acceptance, exports
    from recovery.sandbox import site

    seed, pages = drill.options.seed, drill.options.tasks
    bad = site.bad_retailer_for(seed)
    current_before = getattr(exports.current_run(DATASET), "pk", None)
    rows_before = len(_export(run_id))
    checks: dict[str, Any] = {"current_before": current_before, "rows_before": rows_before}

    # A replacement of only the bad retailer's products, with the fault back: it must fail.
    drill.sandbox_post("/_sandbox/faults", {"bad_retailer": True})
    failing = [i for i in range(1, pages + 1) if site.retailer_for(i, seed=seed) == bad][:150]
    run2 = drill.load(REPLACEMENT_WINDOW, failing)
    checks["current_while_collecting"] = getattr(exports.current_run(DATASET), "pk", None)
    checks["replacement_state"] = drill.wait_run_state(run2, ("candidate",))
    try:
        acceptance.accept_run(run2, ACTOR)
        checks["replacement_accept"] = "accepted"
    except acceptance.AcceptanceError as exc:
        checks["replacement_accept"] = f"refused: {exc}"[:200]
        acceptance.reject_run(run2, ACTOR, "drill: fails its rules")
    checks["current_after_failed_replacement"] = getattr(exports.current_run(DATASET), "pk", None)
    checks["rows_still_exported"] = len(_export(checks["current_after_failed_replacement"]))

    # A good replacement: current only once it is accepted.
    drill.sandbox_post("/_sandbox/faults", {"bad_retailer": False})
    good = [i for i in range(1, pages + 1) if site.retailer_for(i, seed=seed) != bad][:100]
    run3 = drill.load("drill-3", good)
    checks["good_replacement_state"] = drill.wait_run_state(run3, ("candidate",))
    checks["current_while_good_is_candidate"] = getattr(exports.current_run(DATASET), "pk", None)
    acceptance.accept_run(run3, ACTOR)
    checks["current_after_good_accepted"] = getattr(exports.current_run(DATASET), "pk", None)
    ok = (
        current_before == run_id
        and checks["current_while_collecting"] == run_id
        and checks["replacement_accept"] != "accepted"
        and checks["current_after_failed_replacement"] == run_id
        and checks["rows_still_exported"] == rows_before
        and checks["current_while_good_is_candidate"] == run_id
        and checks["current_after_good_accepted"] == run3
    )
    if not ok:
        checks["diagnostics"] = _candidate_diagnostics(run_id)
    return {"ok": ok, "accepted_run": run_id, "failing_replacement": run2, **checks}


CLOUD_DATASET = "drill-cloud"
CLOUD_TOKEN = "sandbox-webscraper-token"  # the simulator's own account token
CLOUD_SPEC = """name = "drill-cloud"
provider = "webscraper"
scraper_version = "1"

[entity_key]
from = "url"

[partition]
rule = "host"

[provider_options]
sitemap_id = 7
poll_interval = 0.5

[page_types.product.fields]
title = { selector = "h1", required = true }
"""


def webhook_scenario(drill: Drill) -> dict[str, Any]:
    """A Web Scraper Cloud job whose final-status webhook arrives twice, then a Continue that
    adds rows and notifies again: one job, every row imported once, nothing duplicated."""
    absent = missing_module(
        "recovery.webhooks", "recovery.providers.webscraper", "recovery.sandbox.webscraper"
    )
    if absent:
        return not_ok(absent)
    from django.db.models import Count
    from django.test import Client

    from recovery import manifests, specs
    from recovery.models import Observation, RemoteJob, RemoteJobItem, WebhookReceipt

    spec_path = drill.workdir / "drill-cloud.toml"
    spec_path.write_text(CLOUD_SPEC)
    specs.load_dataset(spec_path)
    manifest = drill.workdir / "drill-cloud.csv"
    manifest.write_text(
        "url,page_type\n" + "".join(f"{drill.base_url}/product/{i},product\n" for i in (1, 2, 3))
    )
    run_id = manifests.create_run(CLOUD_DATASET, WINDOW, manifest, actor=ACTOR).run.pk
    sim = f"{drill.base_url}/webscraper"

    def job():
        return RemoteJob.objects.filter(run_id=run_id).order_by("pk").first()

    def sim_job() -> dict[str, Any]:
        current = job()
        jobs = drill.sandbox_get("/webscraper/_sim/stats")["jobs"]
        return jobs.get(str(current.provider_job_id), {}) if current else {}

    def observations() -> int:
        return Observation.objects.filter(run_id=run_id).count()

    timeout = min(drill.options.timeout, 120)
    wait_until(
        lambda: (j := job()) is not None and j.state == "completed",
        timeout=timeout,
        what="the cloud job completing",
    )
    first_rows = sim_job()["rows"]
    wait_until(lambda: observations() >= first_rows, timeout=timeout, what="the first import")

    client = Client(HTTP_HOST="127.0.0.1")
    hook = f"/hooks/webscraper/{drill.webhook_secret}"
    form = {
        "scrapingjob_id": job().provider_job_id,
        "status": "finished",
        "sitemap_id": "7",
        "sitemap_name": "drill",
        "custom_id": str(run_id),
    }
    # The same notification, twice (the service resends when unsure it was received).
    answers = [client.post(hook, form).status_code, client.post(hook, form).status_code]
    with contextlib.suppress(TimeoutError):
        wait_until(lambda: job().state == "completed", timeout=timeout, what="re-sync")
    after_duplicates = observations()

    # Continue: the job runs again, adds rows, and notifies once more.
    request = urllib.request.Request(
        f"{sim}/_sim/continue/{job().provider_job_id}",
        data=json.dumps({"rows": 3}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    urllib.request.urlopen(request, timeout=10).close()
    wait_until(
        lambda: sim_job().get("status") == "finished" and sim_job()["rows"] == first_rows + 3,
        timeout=timeout,
        what="the Continue finishing",
    )
    answers.append(client.post(hook, form).status_code)
    with contextlib.suppress(TimeoutError):
        wait_until(
            lambda: observations() >= first_rows + 3, timeout=timeout, what="the Continue import"
        )
    stats = drill.sandbox_get("/webscraper/_sim/stats")
    duplicates = sum(
        row["n"] - 1
        for row in Observation.objects.filter(run_id=run_id)
        .values("entity_key")
        .annotate(n=Count("pk"))
        .filter(n__gt=1)
    )
    figures = {
        "jobs_created_at_provider": stats["created"],
        "remote_jobs": RemoteJob.objects.filter(run_id=run_id).count(),
        "webhook_answers": answers,
        "webhook_receipts": WebhookReceipt.objects.filter(job__run_id=run_id).count(),
        "rows_at_provider": sim_job()["rows"],
        "items_imported": RemoteJobItem.objects.filter(job__run_id=run_id).count(),
        "observations_after_duplicate_webhook": after_duplicates,
        "observations": observations(),
        "duplicate_observations": duplicates,
    }
    figures["ok"] = (
        figures["jobs_created_at_provider"] == 1
        and figures["remote_jobs"] == 1
        and answers == [200, 200, 200]
        and after_duplicates == first_rows
        and figures["observations"] == first_rows + 3
        and duplicates == 0
    )
    return figures


def options_from(values: dict[str, Any]) -> DrillOptions:
    known = {k: v for k, v in values.items() if k in DrillOptions.__dataclass_fields__}
    return DrillOptions(**{k: v for k, v in known.items() if v is not None})


def main_inner(options: DrillOptions, workdir: Path, *, echo: Echo) -> int:
    report = play(options, workdir, echo=echo)
    sys.stdout.write(json.dumps(report) + "\n")
    sys.stdout.flush()
    return 0
