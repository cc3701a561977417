"""The deployment recipes agree with each other and with the code they run.

The Procfile is the reference: compose.yaml, the systemd units, the Dockerfile's CMD and the
web command of docs/production.md run the same commands. Docker and nginx do not run on the
CI machine, so compose.yaml is parsed and compared here; the systemd units are checked by
systemd-analyze verify itself (on a copy whose install prefix points at a temporary tree
holding the programs the units start: verify refuses a missing ExecStart binary). The alerting
rules pass promtool's own tests (deploy/prometheus/alerts_test.yml).
"""

from __future__ import annotations

import os
import re
import runpy
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "deploy" / "systemd"
PREFIX = "/opt/salvage"
LOOPS = ("web", "work", "dispatch", "deliver")
# Procfile process -> its systemd unit
UNIT_OF = {
    "web": "salvage-web.service",
    "work": "salvage-work@.service",
    "dispatch": "salvage-dispatch.service",
    "deliver": "salvage-deliver.service",
    "qcluster": "salvage-qcluster.service",
}


def procfile(text: str | None = None) -> dict[str, str]:
    """name -> command, as honcho reads it; `#   name: command` lines are the alternatives."""
    text = (ROOT / "Procfile").read_text() if text is None else text
    found = {}
    for line in text.splitlines():
        match = re.match(r"^([A-Za-z0-9_-]+):\s*(.+)$", line)
        if match:  # `exec `: the shell honcho starts becomes the process
            found[match.group(1)] = match.group(2).strip().removeprefix("exec ")
    return found


def alternatives() -> dict[str, str]:
    lines = [line.lstrip("#").strip() for line in (ROOT / "Procfile").read_text().splitlines()]
    return procfile(
        "\n".join(line for line in lines if line.startswith(("qcluster:", "dispatch:")))
    )


def unit(name: str) -> dict[str, list[str]]:
    """key -> values of a unit file (every section; keys repeat)."""
    values: dict[str, list[str]] = {}
    for line in (UNITS / name).read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            values.setdefault(key.strip(), []).append(value.strip())
    return values


def gunicorn_conf() -> dict:
    return runpy.run_path(str(ROOT / "deploy" / "gunicorn.conf.py"))


def test_the_procfile_runs_the_whole_stack_and_names_the_qcluster_alternative():
    commands = procfile()
    assert list(commands) == list(LOOPS)
    assert commands["web"] == (
        ".venv/bin/gunicorn --config deploy/gunicorn.conf.py recovery.wsgi:application"
    )
    assert commands["work"] == ".venv/bin/python manage.py work"
    # Beside `work`: the dispatcher for schedules (no wake-ups: nothing reads them) and the
    # outbox delivery; `work` alone does neither.
    assert commands["dispatch"] == ".venv/bin/python manage.py dispatch --no-wakeups"
    assert commands["deliver"] == ".venv/bin/python manage.py deliver"
    assert alternatives() == {
        "qcluster": ".venv/bin/python manage.py qcluster",
        "dispatch": ".venv/bin/python manage.py dispatch",
    }


def test_compose_runs_the_procfile_commands():
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    services = compose["services"]
    for name, command in procfile().items():
        assert services[name]["command"] == command, name
        assert services[name]["depends_on"]["migrate"] == {
            "condition": "service_completed_successfully"
        }
    assert services["work"]["deploy"]["replicas"] >= 2
    assert services["migrate"]["command"] == ".venv/bin/python manage.py migrate --noinput"
    assert services["migrate"]["restart"] == "no"
    assert {"postgres", "redis"} <= set(services)
    # The grace period before SIGKILL is the unit's TimeoutStopSec, process by process.
    for name in LOOPS:
        grace = services[name]["stop_grace_period"]
        assert grace == unit(UNIT_OF[name])["TimeoutStopSec"][0] + "s", name
        assert services[name]["stop_signal"] == "SIGTERM"


def test_the_units_run_the_procfile_commands():
    commands = {**procfile(), "qcluster": alternatives()["qcluster"]}
    for name, unit_name in UNIT_OF.items():
        exec_start = unit(unit_name)["ExecStart"][0]
        assert exec_start.startswith(f"{PREFIX}/.venv/bin/"), unit_name
        assert exec_start.removeprefix(f"{PREFIX}/") == commands[name], unit_name
        assert unit(unit_name)["WorkingDirectory"] == [PREFIX]


def test_the_image_and_the_docs_run_the_procfile_web_command():
    web = shlex.split(procfile()["web"])
    dockerfile = (ROOT / "Dockerfile").read_text()
    cmd = re.search(r"^CMD (\[.*\])$", dockerfile, re.M).group(1)
    assert yaml.safe_load(cmd) == web
    assert re.search(r"^FROM python:3\.11-slim$", dockerfile, re.M)
    assert re.search(r"^USER salvage$", dockerfile, re.M)
    assert "HEALTHCHECK" in dockerfile and "/readyz" in dockerfile
    # Installed as `make install` installs the runtime: the Makefile's pip line, in .venv.
    makefile = (ROOT / "Makefile").read_text()
    runtime = re.search(r"^\t\$\(BIN\)/pip install --quiet -e \.$", makefile, re.M).group(0)
    assert runtime.strip().replace("$(BIN)", ".venv/bin") in dockerfile
    # docs/production.md's processes table: the same command, the venv's gunicorn.
    docs = (ROOT / "docs" / "production.md").read_text()
    row = next(line for line in docs.splitlines() if line.startswith("| web |"))
    documented = re.search(r"`(gunicorn [^`]+)`", row).group(1)
    assert ".venv/bin/" + documented == procfile()["web"]


def test_gunicorn_streams_long_downloads_and_redacts_its_logs():
    conf = gunicorn_conf()
    assert conf["worker_class"] == "gthread" and conf["threads"] >= 2
    assert conf["timeout"] >= 60
    assert conf["logger_class"] == "recovery.ops.gunicorn_logging.RedactingLogger"
    # SIGTERM lets requests finish for graceful_timeout; systemd waits longer than that.
    stop = int(unit("salvage-web.service")["TimeoutStopSec"][0])
    assert stop > conf["graceful_timeout"]


@pytest.mark.parametrize("name", sorted(UNIT_OF.values()))
def test_each_unit_drains_on_sigterm_and_restarts_on_failure(name):
    values = unit(name)
    text = (UNITS / name).read_text()
    assert values["KillSignal"] == ["SIGTERM"]
    assert values["EnvironmentFile"] == ["/etc/salvage/env"]
    assert values["User"] == ["salvage"] and values["Group"] == ["salvage"]
    assert values["Restart"] == ["on-failure"]
    assert values["WantedBy"] == ["salvage.target"]
    assert values["PartOf"] == ["salvage.target"]
    # KillMode is a decision: a comment right above it says why.
    (mode,) = values["KillMode"]
    assert mode in {"mixed", "control-group"}
    above = text.split("\nKillMode=")[0].splitlines()[-1]
    assert above.startswith("#"), f"{name}: say why KillMode={mode}"
    # Processes that fork (gunicorn's workers, django-q2's, a browser's Chromium) get the
    # signal in their main process only, which stops its children in order.
    if name in {"salvage-web.service", "salvage-qcluster.service", "salvage-work@.service"}:
        assert mode == "mixed"


def test_stop_timeouts_exceed_what_each_process_drains():
    from recovery import settings

    stop = {name: int(unit(name)["TimeoutStopSec"][0]) for name in UNIT_OF.values()}
    assert stop["salvage-qcluster.service"] > settings.Q_CLUSTER["timeout"]
    deadline_waves = -(-settings.SALVAGE_CLAIM_BATCH // settings.SALVAGE_CONCURRENCY)
    assert stop["salvage-work@.service"] > deadline_waves * settings.SALVAGE_REQUEST_DEADLINE
    assert stop["salvage-dispatch.service"] > settings.SALVAGE_REQUEST_DEADLINE
    assert stop["salvage-deliver.service"] > settings.SALVAGE_DELIVERY_TIMEOUT


def test_the_target_starts_the_work_stack_and_the_session_cleanup():
    wants = " ".join(unit("salvage.target")["Wants"]).split()
    assert set(wants) == {
        "salvage-web.service",
        "salvage-dispatch.service",
        "salvage-deliver.service",
        "salvage-work@1.service",
        "salvage-work@2.service",
        "salvage-clearsessions.timer",
    }
    assert unit("salvage-clearsessions.service")["ExecStart"] == [
        f"{PREFIX}/.venv/bin/python manage.py clearsessions"
    ]
    assert unit("salvage-clearsessions.timer")["OnCalendar"]


def test_systemd_analyze_verifies_every_unit(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        if os.environ.get("CI"):
            pytest.fail("CI needs systemd-analyze (Debian package systemd)")
        pytest.skip("needs systemd-analyze (apt-get install systemd)")
    prefix = tmp_path / "opt"
    (prefix / ".venv" / "bin").mkdir(parents=True)
    for program in ("python", "gunicorn"):
        (prefix / ".venv" / "bin" / program).symlink_to(sys.executable)
    units = tmp_path / "units"
    units.mkdir()
    for path in UNITS.iterdir():
        text = path.read_text().replace(PREFIX, str(prefix))
        (units / path.name).write_text(text.replace("/etc/salvage/env", str(tmp_path / "env")))
    names = [*sorted(p.name for p in units.iterdir()), "salvage-work@1.service"]
    done = subprocess.run(
        [analyze, "verify", "--man=no", *names],
        cwd=units,
        capture_output=True,
        text=True,
        timeout=120,
    )
    # verify exits 0 on an unknown key or a bad value and only warns: any line is a failure.
    assert done.returncode == 0 and not done.stderr.strip() and not done.stdout.strip(), (
        done.stdout + done.stderr
    )


def test_the_alert_rules_pass_their_promtool_tests():
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("CI"):
            pytest.fail("CI needs promtool (Debian package prometheus)")
        pytest.skip("needs promtool (apt-get install prometheus)")
    done = subprocess.run(
        [promtool, "test", "rules", str(ROOT / "deploy" / "prometheus" / "alerts_test.yml")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_nginx_streams_downloads_and_keeps_the_webhook_secret_out_of_its_log():
    from recovery import settings

    conf = (ROOT / "deploy" / "nginx" / "salvage.conf").read_text()
    assert "proxy_buffering off;" in conf
    read_timeout = int(re.search(r"proxy_read_timeout (\d+)s;", conf).group(1))
    assert read_timeout > gunicorn_conf()["timeout"]
    body = int(re.search(r"client_max_body_size (\d+)m;", conf).group(1)) * 1_000_000
    assert body >= settings.SALVAGE_MANIFEST_UPLOAD_MAX_BYTES
    assert '~^(?<hook>/hooks/[^/]+/)  "${hook}[redacted]";' in conf
    # nginx's error log quotes the request line of a failed upstream connect (every gunicorn
    # restart), at level error: the webhook's location logs crit only.
    hooks = conf.split("location /hooks/ {")[1].split("}")[0]
    assert "error_log /var/log/nginx/salvage.error.log crit;" in hooks
    assert "proxy_pass http://salvage_web;" in hooks
    assert all(
        line.strip().endswith("salvage;")
        for line in conf.splitlines()
        if line.strip().startswith("access_log")
    )
    # It proxies to where the web unit listens.
    bind = unit("salvage-web.service")["Environment"][0].split("--bind=")[1]
    assert f"server {bind};" in conf
    assert "ssl_certificate" in conf and "X-Forwarded-Proto https" in conf


def test_the_example_environment_names_only_real_settings():
    source = (ROOT / "recovery" / "settings.py").read_text()
    read = set(re.findall(r'env_(?:str|bool|int|float|list)\(\s*"([A-Z_0-9]+)"', source))
    example = (ROOT / "deploy" / "env.example").read_text()
    names = {line.split("=")[0] for line in example.splitlines() if line and line[0] != "#"}
    assert names - read == {"POSTGRES_PASSWORD"}  # compose.yaml's database container


def test_every_setting_is_documented_in_the_production_guide():
    source = (ROOT / "recovery" / "settings.py").read_text()
    read = set(re.findall(r'env_(?:str|bool|int|float|list)\(\s*"([A-Z_0-9]+)"', source))
    docs = (ROOT / "docs" / "production.md").read_text()
    assert len(read) > 60
    assert sorted(name for name in read if f"`{name}`" not in docs) == []
