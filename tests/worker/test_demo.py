"""`manage.py demo`: starts everything, serves the dashboard, makes progress, stops on Ctrl-C.

The demo runs as a real process (SQLite under a temporary data directory); the test reads its
output for the child pids and the URL, logs in as the operator through the real web server,
watches task counts rise in the database, then sends SIGINT and checks every child is gone.
"""

from __future__ import annotations

import http.cookiejar
import os
import re
import signal
import sqlite3
import subprocess
import urllib.parse
import urllib.request

import pytest

from recovery.ops.processes import free_port, manage_py, wait_until

pytestmark = [pytest.mark.worker, pytest.mark.slow]


def committed(db_path) -> int:
    if not db_path.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=5) as conn:
            row = conn.execute(
                "SELECT count(*) FROM recovery_task t JOIN recovery_run r ON r.id = t.run_id "
                "JOIN recovery_dataset d ON d.id = r.dataset_id "
                "WHERE d.name = 'demo-shop' AND t.state = 'committed'"
            ).fetchone()
    except sqlite3.OperationalError:  # tables not migrated yet
        return 0
    return row[0]


def demo_counts(db_path) -> dict[str, int]:
    """The demo run's tasks (all, committed, terminal) and observations, read-only."""
    with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=5) as conn:
        run = "(SELECT r.id FROM recovery_run r JOIN recovery_dataset d ON d.id = r.dataset_id "
        run += "WHERE d.name = 'demo-shop')"
        one = lambda sql: conn.execute(sql).fetchone()[0]  # noqa: E731
        return {
            "tasks": one(f"SELECT count(*) FROM recovery_task WHERE run_id IN {run}"),
            "committed": one(
                f"SELECT count(*) FROM recovery_task WHERE run_id IN {run} AND state = 'committed'"
            ),
            "terminal": one(
                f"SELECT count(*) FROM recovery_task WHERE run_id IN {run} "
                "AND state IN ('committed', 'quarantined', 'gone', 'dead')"
            ),
            "observations": one(f"SELECT count(*) FROM recovery_observation WHERE run_id IN {run}"),
        }


def group_gone(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return True
    return False


def login(base: str, username: str, password: str) -> urllib.request.OpenerDirector:
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    page = opener.open(f"{base}/accounts/login/", timeout=20).read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    body = urllib.parse.urlencode(
        {"username": username, "password": password, "csrfmiddlewaretoken": token}
    ).encode()
    request = urllib.request.Request(
        f"{base}/accounts/login/", data=body, headers={"Referer": f"{base}/accounts/login/"}
    )
    opener.open(request, timeout=20).read()
    return opener


def test_it_serves_the_dashboard_makes_progress_and_stops_every_child(tmp_path):
    data_dir = tmp_path / "var"
    out = tmp_path / "demo.out"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(SALVAGE_INSECURE_DEV_KEY="1", DJANGO_SETTINGS_MODULE="recovery.settings")
    argv = manage_py(
        "demo", "--data-dir", str(data_dir), "--port", str(port), "--pages", "200",
        "--no-browser-open",
    )  # fmt: skip
    with open(out, "wb") as sink:
        demo = subprocess.Popen(
            argv, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        wait_until(
            lambda: "Dashboard: " in out.read_text() or demo.poll() is not None,
            timeout=240,
            what="the demo's URL",
        )
        text = out.read_text()
        assert demo.poll() is None, text
        children = {
            name: int(pid) for name, pid in re.findall(r"started (\S+) \(pid (\d+)\)", text)
        }
        assert {"sandbox", "web"} <= set(children), text
        assert len(children) >= 3, text  # sandbox, web and at least one worker process
        base = f"http://127.0.0.1:{port}"

        login_page = urllib.request.urlopen(f"{base}/accounts/login/", timeout=20)
        assert login_page.status == 200
        assert 'name="password"' in login_page.read().decode()

        passwords = dict(
            line.split(" ", 1) for line in (data_dir / "demo-passwords").read_text().splitlines()
        )
        assert set(passwords) == {"operator", "admin", "exporter"}
        assert passwords["operator"] in text  # printed for the user
        opener = login(base, "operator", passwords["operator"])
        runs_page = opener.open(f"{base}/", timeout=20).read().decode()
        assert "demo-shop" in runs_page

        db = data_dir / "salvage.sqlite3"
        # The run starts with every task pending; the mixed profile commits ~93% of pages.
        wait_until(lambda: committed(db) >= 150, timeout=240, what="tasks committed")
    finally:
        if demo.poll() is None:
            demo.send_signal(signal.SIGINT)
        try:
            demo.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(demo.pid, signal.SIGKILL)
            raise
    text = out.read_text()
    assert demo.returncode == 0, text
    assert "demo stopped" in text
    for name, pid in children.items():
        assert group_gone(pid), f"{name} (pid {pid}) survived the demo's Ctrl-C"

    # A second demo on the same data directory continues the same run: the same users and
    # passwords, no new run, nothing lost and nothing duplicated.
    before = demo_counts(data_dir / "salvage.sqlite3")
    out2 = tmp_path / "demo2.out"
    with open(out2, "wb") as sink:
        again = subprocess.Popen(
            argv, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        wait_until(
            lambda: "Dashboard: " in out2.read_text() or again.poll() is not None,
            timeout=240,
            what="the second demo's URL",
        )
        assert "exists: continuing where it stopped" in out2.read_text(), out2.read_text()
        wait_until(
            lambda: demo_counts(data_dir / "salvage.sqlite3")["terminal"] == 200,
            timeout=240,
            what="the demo run finishing",
        )
    finally:
        if again.poll() is None:
            again.send_signal(signal.SIGINT)
        try:
            again.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(again.pid, signal.SIGKILL)
            raise
    assert again.returncode == 0, out2.read_text()
    after = demo_counts(data_dir / "salvage.sqlite3")
    assert after["tasks"] == before["tasks"] == 200
    assert after["committed"] >= before["committed"]
    assert after["observations"] == after["committed"]  # one observation per committed page
    assert passwords["operator"] in out2.read_text()  # the same logins
