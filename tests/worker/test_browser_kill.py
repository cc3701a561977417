"""The browser provider in real worker processes: SIGKILL mid-render, and the takeover.

The victim is killed by pid alone (not its process group: Playwright puts Chromium in a group
of its own anyway). Every descendant it had must be gone within seconds, also when the browser
was hung (SIGSTOPped) at the time, which only the parent-death signals set by fetch.chromium
can ensure; then the next worker commits the task exactly once.
"""

from __future__ import annotations

import copy
import os
import signal
from pathlib import Path

import pytest

from recovery.intake import specs
from recovery.models import Task
from recovery.sandbox import jsshop
from tests.support.browser_provider import BROWSER_SPEC, need_chromium
from tests.support.direct import create_run
from tests.support.engine_procs import (
    Procs,
    assert_each_task_done_once,
    log_text,
    wait_exit,
    wait_for,
)

pytestmark = [
    pytest.mark.worker,
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture
def procs(tmp_path):
    children = Procs(tmp_path)
    yield children
    children.close()


def descendants(pid: int) -> dict[int, tuple[str, int]]:
    """{pid: (command name, parent pid)} of every live process below `pid`."""
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] == "Z":  # a zombie is dead, only not yet reaped
            continue
        parents[int(entry.name)] = int(fields[1])
        names[int(entry.name)] = name
    found: dict[int, tuple[str, int]] = {}
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        for child, ppid in parents.items():
            if ppid == parent and child not in found:
                found[child] = (names[child], ppid)
                frontier.append(child)
    return found


def alive(pids) -> list[int]:
    left = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            left.append(pid)
    return left


@pytest.mark.parametrize("hung", [False, True], ids=["rendering", "browser-hung"])
def test_a_worker_killed_mid_render_leaves_no_chromium_and_the_task_commits_once(
    sandbox,
    procs,
    tmp_path,
    hung,
):
    need_chromium()
    port = sandbox.base_url.rsplit(":", 1)[1]
    raw = copy.deepcopy(BROWSER_SPEC)
    raw["provider_options"] = {"wait_for": "div.product .price", "deadline": 30.0}
    specs.save_dataset(specs.validate(raw))
    # The product's data answers after 4 s: the victim is killed while the page renders.
    run = create_run(raw["name"], [(sandbox.url("/js/product/5?delay=4"), "product")], tmp_path)
    requests = sandbox.served._runner.app[jsshop.JS_REQUESTS]
    requests.clear()
    env = {"SALVAGE_ALLOWED_NETWORKS": f"127.0.0.1:{port}"}

    victim = procs.manage("victim", "work", "--worker-id", "victim", **env)
    wait_for(
        lambda: requests["/js/api/product/5"] > 0 or victim.poll() is not None,
        timeout=60,
        what="the victim's browser to ask for the product's data",
    )
    assert victim.poll() is None, log_text(victim)
    family = descendants(victim.pid)
    browsers = [
        pid
        for pid, (name, ppid) in family.items()
        if "chrom" in name and "chrom" not in family.get(ppid, ("",))[0]
    ]
    assert len(browsers) == 1, family  # the browser process (its helpers are its children)
    if hung:
        # A browser that stopped answering: it cannot react to its pipe closing, and the
        # driver waits for it. Only the parent-death signals end them (plain Playwright leaves
        # both behind here).
        os.kill(browsers[0], signal.SIGSTOP)
    os.kill(victim.pid, signal.SIGKILL)  # the worker alone: no process-group kill
    assert wait_exit(victim, 10, "the victim") == -signal.SIGKILL
    wait_for(
        lambda: not alive(family),
        timeout=20,
        what=f"the victim's Chromium to exit (left: {alive(family)})",
    )
    assert Task.objects.get(run=run).state == "leased"  # the kill left the lease behind

    rescuer = procs.manage("rescuer", "work", "--until-idle", "--worker-id", "rescuer", **env)
    assert wait_exit(rescuer, 120, "the rescuer") == 0, log_text(rescuer)
    outcomes = assert_each_task_done_once(run.pk, 1)
    assert outcomes == {"committed": 1, "lost_lease": 1}
    assert not alive(descendants(rescuer.pid))
