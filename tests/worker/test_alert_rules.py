"""deploy/prometheus/alerts.yml against what a real stack exports when its task worker dies.

A `work` process and a dispatcher run against the test database. The worker takes a batch of a
run whose pages never arrive (stuck: alive, nothing committed), then is SIGKILLed (dead: only
the dispatcher beats). `/metrics` is scraped a few times in each state, the samples become
promtool's input series, and `promtool test rules` says which alerts fire: the stall alert on
the stuck stack, the no-task-worker alert on the dead one while its dispatcher lives.

promtool comes from Debian's `prometheus` package (.ci/run installs it). Without it the test
skips, except in CI, where it fails.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from recovery.models import Task, WorkerHeartbeat
from tests.support.engine_procs import ROOT, STALL, Procs, log_text, wait_exit, wait_for
from tests.support.factories import make_dataset, make_run, make_tasks

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
# Short liveness thresholds, the same in the children (environment) and here (settings). A live
# process may wait STALL seconds for a CPU on a loaded box and must still count as alive.
BEAT, ALIVE, GONE = 0.5, float(STALL), 120.0
ENV = {
    "SALVAGE_HEARTBEAT_SECONDS": str(BEAT),
    "SALVAGE_WORKER_ALIVE_SECONDS": str(ALIVE),
    "SALVAGE_WORKER_GONE_SECONDS": str(GONE),
}
INTERVAL = 15  # seconds between two samples in promtool's series (Prometheus's default scrape)
# After the scrapes, the stack stays as it was for this many intervals (25 minutes): long
# enough for the 15-minute stall alert, whose data no test could wait for.
KEPT = 100
WORK = (
    "import tests.worker.slow_provider; from django.core.management import call_command; "
    "call_command('work', {args})"
)


@pytest.fixture
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is missing: .ci/run installs it (Debian package prometheus)")
        pytest.skip("promtool is not installed (apt-get install prometheus); CI runs this test")
    return path


@pytest.fixture
def procs(tmp_path):
    children = Procs(tmp_path)
    yield children
    children.close()


def test_the_rules_file_is_valid(promtool):
    checked = subprocess.run(
        [promtool, "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


# --- scraping ----------------------------------------------------------------------------------


def parse(text: str) -> dict[str, float]:
    """{'name{labels}': value} of a text-format exposition (the series syntax promtool reads)."""
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, _, value = line.rpartition(" ")
            samples[series] = float(value)
    return samples


class Scraper:
    """Reads /metrics through the test client; each scrape after the dispatcher's next beat, so
    the samples are a little apart in time as real scrapes are (and the stack has moved)."""

    def __init__(self, client, dispatcher_pid: int) -> None:
        self.client = client
        self.dispatcher = WorkerHeartbeat.objects.filter(pid=dispatcher_pid, kind="dispatch")

    def once(self) -> tuple[float, dict[str, float]]:
        response = self.client.get("/metrics")
        assert response.status_code == 200
        return time.time(), parse(response.content.decode())

    def several(self, n: int) -> list[tuple[float, dict[str, float]]]:
        scrapes = []
        for _ in range(n):
            seen = self.dispatcher.values_list("last_seen", flat=True).first()
            wait_for(
                lambda seen=seen: self.dispatcher.filter(last_seen__gt=seen).exists(),
                timeout=30,
                what="the dispatcher's next beat",
            )
            scrapes.append(self.once())
        return scrapes


# --- to promtool --------------------------------------------------------------------------------


def _number(value: float) -> str:
    return repr(round(value, 3))


def input_series(scrapes: list[tuple[float, dict[str, float]]]) -> list[dict[str, str]]:
    """promtool input series: scrape i at the test's time i * INTERVAL, then KEPT more samples
    of a stack left as it was.

    The test's clock starts at 0, so a Unix time (`*_timestamp_seconds`) is moved onto it: the
    value minus the scrape's wall time plus the scrape's test time, which keeps `time() - value`
    at each sample what it was at the scrape. While the stack is left alone an age
    (`*_age_seconds`) other than 0 (nothing waiting) grows by INTERVAL a sample, and every
    other value stays."""
    names = sorted({series for _, samples in scrapes for series in samples})
    out = []
    for series in names:
        values = []
        for i, (wall, samples) in enumerate(scrapes):
            value = samples.get(series)
            if (
                value is not None
                and series.startswith("salvage_")
                and "_timestamp_seconds" in (series.split("{")[0])
            ):
                value = value - wall + i * INTERVAL
            values.append("_" if value is None else _number(value))
        last = values[-1]
        if last != "_":
            age = series.split("{")[0].endswith("_age_seconds") and float(last) > 0
            step = INTERVAL if age else 0
            values.append(f"{_number(float(last) + step)}+{step}x{KEPT - 1}")
        out.append({"series": series, "values": " ".join(values)})
    return out


def firing(name: str, at: str, labels: dict[str, str] | None) -> dict:
    """A check that alert `name` is firing at `at` (with these labels), or is not (None).

    It reads the ALERTS series rather than promtool's exp_alerts, which also compares every
    annotation: the wording of a description is not what this test is about."""
    expected = []
    if labels is not None:
        inner = ", ".join(
            f'{k}="{v}"'
            for k, v in sorted({"alertname": name, "alertstate": "firing", **labels}.items())
        )
        expected = [{"labels": f"ALERTS{{{inner}}}", "value": 1}]
    return {
        "expr": f'ALERTS{{alertname="{name}", alertstate="firing"}}',
        "eval_time": at,
        "exp_samples": expected,
    }


def promtool_test(promtool: str, path: Path, tests: list[dict]) -> None:
    # JSON is YAML: no YAML library needed to write promtool's test file.
    path.write_text(
        json.dumps(
            {
                "rule_files": [str(RULES)],
                "evaluation_interval": f"{INTERVAL}s",
                "tests": tests,
            },
            indent=1,
        )
    )
    result = subprocess.run(
        [promtool, "test", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


# --- the stack ----------------------------------------------------------------------------------


def test_a_stuck_worker_stalls_the_run_and_a_killed_one_leaves_no_task_worker(
    promtool, procs, client, settings, tmp_path
):
    settings.SALVAGE_HEARTBEAT_SECONDS = BEAT
    settings.SALVAGE_WORKER_ALIVE_SECONDS = ALIVE
    settings.SALVAGE_WORKER_GONE_SECONDS = GONE
    page = {"severity": "page"}

    # A first run, collected to the end: the stack's last commit is a real one.
    done = make_run(make_dataset(provider="slow_test"))
    make_tasks(done, 2)
    first = procs.python("first", WORK.format(args="'--until-idle', '--idle-wait', '0'"), **ENV)
    assert wait_exit(first, 120, "the first worker") == 0, log_text(first)

    # The run that stalls: its pages never arrive, so the worker holds one batch for ever.
    run = make_run(make_dataset(provider="slow_test", lease_seconds=300))
    make_tasks(run, 10)
    worker = procs.python(
        "work",
        WORK.format(args="'--batch', '2', '--worker-id', 'stuck'"),
        SLOW_PROVIDER_GATE=str(tmp_path / "never"),
        **ENV,
    )
    dispatcher = procs.manage("dispatch", "dispatch", **ENV)
    wait_for(
        lambda: (
            Task.objects.filter(run=run, state="leased", lease_owner="stuck").count() == 2
            and WorkerHeartbeat.objects.filter(pid=dispatcher.pid, kind="dispatch").exists()
        ),
        timeout=90,
        what=f"the stuck batch and the dispatcher\n{log_text(worker)[-2000:]}",
    )
    scraper = Scraper(client, dispatcher.pid)
    stuck = scraper.several(3)
    held = f'salvage_run_tasks{{run="{run.pk}",dataset="{run.dataset.name}",state="leased"}}'
    for _, samples in stuck:
        assert samples['salvage_workers_alive{kind="work"}'] == 1
        assert samples['salvage_workers_alive{kind="dispatch"}'] == 1
        assert samples["salvage_oldest_due_task_age_seconds"] > 0
        assert samples["salvage_last_commit_timestamp_seconds"] > 0
        assert samples[held] == 2

    # SIGKILL: nothing of the worker runs any more; its heartbeat row turns stale.
    os.killpg(worker.pid, signal.SIGKILL)
    assert wait_exit(worker, 30, "the killed worker") == -signal.SIGKILL
    wait_for(
        lambda: scraper.once()[1]['salvage_workers_alive{kind="work"}'] == 0,
        timeout=ALIVE + 60,
        what="the killed worker no longer alive",
    )
    killed = scraper.several(3)
    for _, samples in killed:
        assert samples['salvage_workers_alive{kind="work"}'] == 0
        assert samples['salvage_workers_alive{kind="dispatch"}'] == 1
        assert samples["salvage_oldest_due_task_age_seconds"] > 0

    promtool_test(
        promtool,
        tmp_path / "alerts_test.yml",
        [
            {
                "name": "a worker alive but stuck: the stall alert, not the worker alert",
                "interval": f"{INTERVAL}s",
                "input_series": input_series(stuck),
                "promql_expr_test": [
                    firing("SalvageNoCommit", "1m", None),
                    firing("SalvageNoCommit", "24m", page),
                    firing("SalvageNoTaskWorker", "24m", None),
                ],
            },
            {
                "name": "the only task worker killed, the dispatcher alive",
                "interval": f"{INTERVAL}s",
                "input_series": input_series(killed),
                "promql_expr_test": [
                    firing("SalvageNoTaskWorker", "1m", None),  # pending for 2 minutes
                    firing("SalvageNoTaskWorker", "3m", page),
                    firing("SalvageNoCommit", "3m", None),
                    firing("SalvageNoCommit", "24m", page),
                    firing("SalvageNoTaskWorker", "24m", page),
                    firing("SalvageMetricsAbsent", "24m", None),
                ],
            },
        ],
    )
    assert procs.stop(dispatcher) == 0
