"""SALVAGE_LOG_FORMAT=json: every line of every process is one JSON object, and each lifecycle
event is logged exactly once.

A small real stack on the test database: `work`, `dispatch --no-wakeups`, `deliver` and
gunicorn as docs/production.md documents it (deploy/gunicorn.conf.py: the redacting logger
class, access and error logs to the console), each with its stdout and stderr kept apart, plus
the one-shot `publish` and `reject` commands. On the sandbox shop:

- run A collects, becomes a candidate, is accepted (auto_accept) and published;
- run B collects while one retailer's prices come out invalid: that partition is flagged
  provisionally while B collects (one task is held back until the flag is seen), quarantined
  when B becomes a candidate, and B is rejected;
- a recovery batch on run A completes.

Then every line each process wrote, on either stream, is parsed as JSON with `ts`, `level`,
`process` (the process's name) and `event`; no configured secret appears; and each lifecycle
event is found exactly once, with its ids, in the process where the move happened.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import transaction
from django.utils import timezone

from recovery.models import OutboxEvent, RecoveryBatch, Run, RunPartition, Task
from recovery.ops.processes import free_port, http_ok, manage_py, wait_until
from recovery.sandbox import server, site
from tests.support.engine_procs import ROOT, child_env

pytestmark = [pytest.mark.worker, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PAGES = 200  # 40 per retailer: enough for the provisional flag's sample (30)
HOOK_SECRET = "json-logs-hook-secret-6d1e2a"
API_TOKEN = "json-logs-api-token-9f3b7c"
REQUIRED = ("ts", "level", "process", "event")
ONE_SHOT = {"publish": ("err",), "reject": ("err",)}


class Stack:
    """Child processes whose stdout and stderr are kept in files of their own."""

    def __init__(self, log_dir: Path, env: dict[str, str]) -> None:
        self.log_dir = log_dir
        self.env = env
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, argv: list[str]) -> subprocess.Popen:
        with (
            open(self.log_dir / f"{name}.out", "wb") as out,
            open(self.log_dir / f"{name}.err", "wb") as err,
        ):
            proc = subprocess.Popen(
                argv, cwd=ROOT, env=self.env, stdin=subprocess.DEVNULL, stdout=out,
                stderr=err, start_new_session=True,
            )  # fmt: skip
        self.procs[name] = proc
        return proc

    def once(self, name: str, *args: str) -> None:
        proc = self.start(name, manage_py(*args))
        assert proc.wait(timeout=120) == 0, self.text(name)

    def stop_all(self) -> dict[str, int]:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
        codes = {}
        for name, proc in self.procs.items():
            try:
                codes[name] = proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                codes[name] = None
        return codes

    def kill_all(self) -> None:
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)

    def text(self, name: str, streams: tuple[str, ...] = ("out", "err")) -> str:
        return "".join(
            (self.log_dir / f"{name}.{stream}").read_text(errors="replace") for stream in streams
        )


def documented_web_command(port: int) -> list[str]:
    """gunicorn exactly as docs/production.md's process table runs it, on a free port."""
    text = (ROOT / "docs" / "production.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| web |"))
    argv = shlex.split(re.search(r"`(gunicorn [^`]+)`", row).group(1))
    assert "--config" in argv  # deploy/gunicorn.conf.py names the redacting logger class
    return [sys.executable, "-m", *argv, "--bind", f"127.0.0.1:{port}", "--workers", "1"]


def set_overlay(base_url: str, bad: bool) -> None:
    urllib.request.urlopen(
        urllib.request.Request(
            f"{base_url}/_sandbox/faults",
            data=json.dumps({"bad_retailer": bad}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        ),
        timeout=10,
    ).close()


def run_state(run_id: int) -> str:
    return Run.objects.filter(pk=run_id).values_list("acceptance_state", flat=True)[0]


def hit_the_web_server(base: str) -> None:
    form = b"scrapingjob_id=777&status=finished"
    for path, data in (
        (f"/hooks/webscraper/{HOOK_SECRET}", form),
        (f"/healthz?api_token={API_TOKEN}", None),
        ("/readyz", None),
        ("/accounts/login/", None),
        ("/no-such-page", None),
    ):
        with contextlib.suppress(urllib.error.HTTPError):
            urllib.request.urlopen(f"{base}{path}", data=data, timeout=20).close()


def parse_lines(name: str, text: str, process: str) -> list[dict]:
    entries = []
    for number, line in enumerate(text.splitlines(), 1):
        try:
            entry = json.loads(line)
        except ValueError:
            raise AssertionError(f"{name} line {number} is not JSON: {line[:300]!r}") from None
        assert isinstance(entry, dict), (name, number, line)
        missing = [key for key in REQUIRED if not entry.get(key)]
        assert not missing, f"{name} line {number} lacks {missing}: {line[:300]}"
        assert entry["process"] == process, (name, number, line)
        assert re.fullmatch(r"[a-z][a-z0-9_.-]*", entry["event"]), (name, entry["event"])
        entries.append(entry)
    return entries


def test_every_line_is_json_and_each_lifecycle_event_is_logged_once(tmp_path):
    from recovery.intake import manifests, specs
    from recovery.quality import reruns

    logs = tmp_path / "logs"
    logs.mkdir()
    sandbox_port, web_port = free_port(), free_port()
    base_url = f"http://127.0.0.1:{sandbox_port}"
    env = child_env(
        SALVAGE_LOG_FORMAT="json",
        SALVAGE_LOG_LEVEL="INFO",
        SALVAGE_LEASE_SECONDS="60",
        SALVAGE_DATA_DIR=str(tmp_path / "data"),
        SALVAGE_DESTINATION=f"file://{tmp_path / 'outbox'}",
        SALVAGE_OUTBOX_WAKE="0",
        SALVAGE_ALLOWED_NETWORKS=f"127.0.0.1:{sandbox_port}",
        WEBSCRAPER_WEBHOOK_SECRET=HOOK_SECRET,
        WEBSCRAPER_API_TOKEN=API_TOKEN,
        PORT=str(web_port),
    )
    stack = Stack(logs, env)
    sandbox = subprocess.Popen(
        manage_py("sandbox", "--port", str(sandbox_port), "--pages", str(PAGES),
                  "--faults", "bad_retailer"),
        cwd=ROOT, env=child_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        wait_until(lambda: http_ok(f"{base_url}/_sandbox/state"), timeout=60, what="sandbox")
        set_overlay(base_url, bad=False)
        spec = tmp_path / "shop.toml"
        spec.write_text(
            server.shop_spec_toml(name="json-shop").replace(
                "auto_accept = false", "auto_accept = true"
            )
        )
        specs.load_dataset(spec)
        manifest = tmp_path / "shop.csv"
        server.write_manifest(manifest, server.manifest_rows(base_url, pages=PAGES))

        stack.start("work", manage_py("work", "--concurrency", "8"))
        stack.start("dispatch", manage_py("dispatch", "--no-wakeups", "--tick", "0.2"))
        stack.start("deliver", manage_py("deliver", "--interval", "0.2"))
        stack.start("web", documented_web_command(web_port))
        web = f"http://127.0.0.1:{web_port}"
        wait_until(lambda: http_ok(f"{web}/healthz"), timeout=60, what="gunicorn")
        hit_the_web_server(web)

        # Run A: candidate, accepted (auto_accept), published, both deliveries sent.
        run_a = manifests.create_run("json-shop", "2026-12-01", manifest).run.pk
        wait_until(lambda: run_state(run_a) == "accepted", timeout=300, what="run A accepted")
        stack.once("publish", "publish", str(run_a))
        wait_until(
            lambda: (
                set(
                    OutboxEvent.objects.filter(run_id=run_a, state="delivered").values_list(
                        "event_type", flat=True
                    )
                )
                >= {"accepted", "published"}
            ),
            timeout=120,
            what="run A's two deliveries",
        )

        # Run B: one retailer's prices invalid. One task of another retailer is held back,
        # so the run is still collecting when the flag's sample is complete.
        set_overlay(base_url, bad=True)
        bad = site.bad_retailer_for()
        with transaction.atomic():
            run_b = manifests.create_run("json-shop", "2026-12-02", manifest).run.pk
            held = Task.objects.filter(run_id=run_b).exclude(partition=bad).first()
            later = timezone.now() + timedelta(days=1)
            Task.objects.filter(pk=held.pk).update(next_attempt_at=later)
        wait_until(
            lambda: (
                RunPartition.objects.filter(run_id=run_b, name=bad)
                .exclude(provisional_at=None)
                .exists()
            ),
            timeout=300,
            what="the provisional flag",
        )
        Task.objects.filter(pk=held.pk).update(next_attempt_at=timezone.now())
        wait_until(lambda: run_state(run_b) == "candidate", timeout=300, what="run B candidate")
        # The candidate's rules are evaluated just after its move.
        wait_until(
            lambda: RunPartition.objects.get(run_id=run_b, name=bad).quarantined,
            timeout=120,
            what="the partition's quarantine",
        )
        stack.once("reject", "reject", str(run_b), "--reason", "one retailer's prices")

        # A recovery batch on run A (published: it stays available, guarantee 9).
        set_overlay(base_url, bad=False)
        good = next(p for p in site.RETAILERS if p != bad)
        batch = reruns.create_recovery_batch(
            run_a, partitions=[good], reason="check", scraper_version="1", actor="test"
        )
        wait_until(
            lambda: RecoveryBatch.objects.get(pk=batch.pk).state == "completed",
            timeout=300,
            what="the recovery batch",
        )
        hit_the_web_server(web)
        codes = stack.stop_all()
    finally:
        stack.kill_all()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(sandbox.pid, signal.SIGKILL)
        sandbox.wait(timeout=10)
    assert codes == dict.fromkeys(codes, 0), codes

    events: Counter = Counter()
    by_process: dict[str, list[dict]] = {}
    for name in stack.procs:
        # A one-shot command's stdout is its answer ("run 1 published"); its log is stderr.
        text = stack.text(name, ONE_SHOT.get(name, ("out", "err")))
        assert text.strip(), f"{name} wrote nothing"
        for secret in (HOOK_SECRET, HOOK_SECRET[:-1], API_TOKEN):
            assert secret not in text, f"{name} logged a secret"
        by_process[name] = parse_lines(name, text, process=name)
        for entry in by_process[name]:
            events[(entry["event"], entry.get("run"), entry.get("partition"))] += 1

    # The lifecycle events, each exactly once, with the ids they are about.
    assert events[("run_candidate", run_a, None)] == 1
    assert events[("run_accepted", run_a, None)] == 1
    assert events[("run_published", run_a, None)] == 1
    assert events[("run_candidate", run_b, None)] == 1
    assert events[("partition_flagged", run_b, bad)] == 1
    assert events[("partition_quarantined", run_b, bad)] == 1
    assert events[("run_rejected", run_b, None)] == 1
    assert events[("batch_completed", run_a, None)] == 1
    lifecycle = {e for e, _r, _p in events} & {
        "run_candidate", "run_accepted", "run_rejected", "run_published", "run_reopened",
        "partition_flagged", "partition_quarantined", "batch_completed",
    }  # fmt: skip
    assert sum(n for (e, _r, _p), n in events.items() if e in lifecycle) == 8, events
    moves = {
        entry["event"]: name
        for name, entries in by_process.items()
        for entry in entries
        if entry["event"] in lifecycle
    }
    assert moves["run_published"] == "publish" and moves["run_rejected"] == "reject"
    assert moves["run_accepted"] == "work" and moves["batch_completed"] == "work"
    for name in ("work", "dispatch", "deliver"):
        started = [e for e in by_process[name] if e["event"] == "worker_started"]
        stopped = [e for e in by_process[name] if e["event"] == "worker_stopped"]
        assert len(started) == len(stopped) == 1, name
        assert started[0]["worker"] == stopped[0]["worker"]
    assert any(e["event"] == "progress" for e in by_process["work"])
    # gunicorn's access lines, as JSON with their fields, the webhook's secret cut off.
    access = [e for e in by_process["web"] if e["event"] == "http_request"]
    hooks = [e for e in access if e.get("path", "").startswith("/hooks/")]
    assert len(hooks) == 2 and {e["status"] for e in hooks} == {200}
    assert hooks[0]["path"] == "/hooks/webscraper/[redacted]"
    assert any(e["event"] == "web_server" for e in by_process["web"])  # gunicorn's error log


def test_a_django_q2_cluster_writes_json_lines_too(tmp_path):
    """qcluster (its own lines and django-q2's, from every process of the cluster) beside a
    dispatcher that wakes it: a small run to accepted, every line JSON."""
    from recovery.intake import manifests, specs

    logs = tmp_path / "logs"
    logs.mkdir()
    sandbox_port = free_port()
    base_url = f"http://127.0.0.1:{sandbox_port}"
    env = child_env(
        SALVAGE_LOG_FORMAT="json",
        SALVAGE_LOG_LEVEL="INFO",
        SALVAGE_Q_LOG_LEVEL="INFO",  # django-q2's own line per task and wake-up
        SALVAGE_Q_WORKERS="2",
        SALVAGE_LEASE_SECONDS="60",
        SALVAGE_DATA_DIR=str(tmp_path / "data"),
        SALVAGE_ALLOWED_NETWORKS=f"127.0.0.1:{sandbox_port}",
        SALVAGE_OUTBOX_WAKE="0",
        SALVAGE_Q_NAME=f"json-logs-{sandbox_port}",
    )
    stack = Stack(logs, env)
    sandbox = subprocess.Popen(
        manage_py("sandbox", "--port", str(sandbox_port), "--pages", "20", "--faults", "none"),
        cwd=ROOT, env=child_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        wait_until(lambda: http_ok(f"{base_url}/_sandbox/state"), timeout=60, what="sandbox")
        spec = tmp_path / "shop.toml"
        text = server.shop_spec_toml(name="json-q")
        spec.write_text(text.replace("auto_accept = false", "auto_accept = true"))
        specs.load_dataset(spec)
        manifest = tmp_path / "shop.csv"
        server.write_manifest(manifest, server.manifest_rows(base_url, pages=20))
        run_id = manifests.create_run("json-q", "2026-12-03", manifest).run.pk
        stack.start("qcluster", manage_py("qcluster"))
        stack.start("dispatch", manage_py("dispatch", "--tick", "0.2"))
        wait_until(lambda: run_state(run_id) == "accepted", timeout=300, what="the run accepted")
        codes = stack.stop_all()
    finally:
        stack.kill_all()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(sandbox.pid, signal.SIGKILL)
        sandbox.wait(timeout=10)
    assert codes == {"qcluster": 0, "dispatch": 0}, codes
    entries = parse_lines("qcluster", stack.text("qcluster"), process="qcluster")
    events = Counter(e["event"] for e in entries)
    assert events["worker_started"] == events["worker_stopped"] == 1, events
    assert events["queue"] > 0, events  # django-q2's own lines
    assert events["run_accepted"] == 1 and events["run_candidate"] == 1, events
    parse_lines("dispatch", stack.text("dispatch"), process="dispatch")
