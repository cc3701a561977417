"""The inner process's hands: the sandbox, real worker processes, and the harm done to them.

In: `DrillOptions` and the scratch work directory (logs go under it). Out: a `Drill` that
starts the sandbox and workers (each start with its own lease-owner id), loads runs from the
sandbox's products, waits on the tables, and does seed 002's harm: a SIGKILL at each crash
window (`crash_windows`), K SIGKILLs at seeded random progress points and one worker frozen
(SIGSTOP) past its leases (`collect`), and database outages on PostgreSQL
(`refuse_connections`). Each harm returns the figures that show it was really done.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recovery.ops.processes import Supervisor, free_port, http_ok, manage_py, wait_until
from recovery.showroom.drill.options import (
    ACTOR,
    CLOUD_TOKEN,
    DATASET,
    DrillOptions,
    Echo,
)


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
        from recovery.intake import manifests, specs
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
        if not _sqlite_writable():
            # Stopped inside a write on SQLite, it holds the one write lock: every other worker
            # would wait on it and nothing could take its leases over. The harm to show is a
            # worker frozen while holding leases, not the database lock: try on a later tick.
            child.signal_group(signal.SIGCONT)
            return
        slow.update(paused=done, worker=child.name, held=len(tokens), child=child, tokens=tokens)


def _sqlite_writable(timeout: float = 2.0) -> bool:
    """True unless the drill's database is SQLite and its write lock stays held for `timeout`
    seconds (PostgreSQL has no such lock: always True)."""
    import sqlite3

    from django.db import connection

    if connection.vendor != "sqlite":
        return True
    probe = sqlite3.connect(connection.settings_dict["NAME"], timeout=timeout)
    try:
        probe.execute("BEGIN IMMEDIATE")
        probe.rollback()
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        probe.close()


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
