"""Every kind of worker process beats while idle, and the workers page follows it: alive while
it runs, stale after a SIGKILL, gone once the gone threshold passes (or at once on a clean
stop); a process started after a restart appears as alive."""

from __future__ import annotations

import re
import signal

import pytest
from django.test import Client

from recovery.models import WorkerHeartbeat
from tests.support.engine_procs import Procs, log_text, wait_for
from tests.support.world import make_user

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

# Short thresholds, the same in the children (environment) and on the page (settings).
BEAT, ALIVE, GONE = 0.3, 2.0, 6.0
ENV = {
    "SALVAGE_HEARTBEAT_SECONDS": str(BEAT),
    "SALVAGE_WORKER_ALIVE_SECONDS": str(ALIVE),
    "SALVAGE_WORKER_GONE_SECONDS": str(GONE),
    "SALVAGE_Q_WORKERS": "1",
}


@pytest.fixture
def procs(tmp_path):
    children = Procs(tmp_path)
    yield children
    children.close()


@pytest.fixture
def page(settings):
    settings.SALVAGE_HEARTBEAT_SECONDS = BEAT
    settings.SALVAGE_WORKER_ALIVE_SECONDS = ALIVE
    settings.SALVAGE_WORKER_GONE_SECONDS = GONE
    client = Client()
    client.force_login(make_user("olivia", "operator"))

    def statuses() -> dict[str, str]:
        html = client.get("/workers/?status=all").content.decode()
        return dict(
            (worker, status)
            for status, worker in re.findall(
                r'<tr data-row class="worker-(\w+)"><td>.*?</td><td>([^<]+)</td>', html
            )
        )

    return statuses


def _rows(kind: str) -> dict[str, object]:
    return dict(WorkerHeartbeat.objects.filter(kind=kind).values_list("worker", "last_seen"))


def test_each_process_kind_beats_while_idle_and_the_page_follows_a_sigkill(procs, page):
    started = {
        "work": procs.manage("work", "work", "--worker-id", "live-work", **ENV),
        "qcluster": procs.manage("qcluster", "qcluster", **ENV),
        "dispatch": procs.manage("dispatch", "dispatch", **ENV),
        "deliver": procs.manage("deliver", "deliver", **ENV),
    }
    # Nothing is due: every process is idle. A qcluster beats for itself and its one worker.
    wanted = {"work": 1, "qcluster": 2, "dispatch": 1, "deliver": 1}
    for kind, n in wanted.items():
        wait_for(
            lambda kind=kind, n=n: len(_rows(kind)) >= n,
            timeout=90,
            what=f"{kind} heartbeat rows\n{log_text(started[kind])[-2000:]}",
        )
    first = {kind: _rows(kind) for kind in wanted}
    for kind, seen in first.items():
        wait_for(
            lambda kind=kind, seen=seen: all(_rows(kind)[w] > last for w, last in seen.items()),
            timeout=30,
            what=f"a second heartbeat of every idle {kind} process",
        )
    workers = {w: kind for kind, seen in first.items() for w in seen}
    shown = wait_for(
        lambda: (s := page()) and all(s.get(w) == "alive" for w in workers) and s,
        timeout=30,
        what="every process alive on the workers page",
    )
    assert set(workers) <= set(shown)

    procs.stop(started["work"], signal.SIGKILL, grace=10)
    wait_for(lambda: page().get("live-work") == "stale", timeout=30, what="live-work stale")
    assert all(page()[w] == "alive" for w, k in workers.items() if k != "work")
    wait_for(lambda: page().get("live-work") == "gone", timeout=30, what="live-work gone")

    # A clean stop says goodbye: gone at once, not stale first.
    (dispatcher,) = first["dispatch"]
    procs.stop(started["dispatch"], signal.SIGTERM)
    assert page()[dispatcher] == "gone"

    # A cluster killed with its workers: every one of its rows stops beating.
    procs.stop(started["qcluster"], signal.SIGKILL, grace=10)
    wait_for(
        lambda: all(page()[w] in ("stale", "gone") for w in first["qcluster"]),
        timeout=30,
        what="the killed cluster's rows stale",
    )

    # Restarted: the new process appears, alive, on the default page.
    procs.manage("work-again", "work", "--worker-id", "live-work-2", **ENV)
    wait_for(lambda: page().get("live-work-2") == "alive", timeout=90, what="the new worker")
