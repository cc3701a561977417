"""The one-command demo (`manage.py demo`): set up, start every process, stop them all on Ctrl-C.

Everything the demo keeps lives under the data directory (default ./var):
- the SQLite database (settings), static files (collectstatic), artefacts and exports;
- `demo-passwords`: the demo users' passwords (0600; the database stores only hashes);
- `demo/`: the sandbox's spec and manifest, the sandbox port (the run's task URLs name it, so a
  second demo must serve the shop on the same port), a persistent secret key, and the logs of
  every child process (`demo/logs/<name>.log`).

A second `manage.py demo` migrates (a no-op), keeps the users and passwords, finds the run and
carries on: tasks are durable rows, so nothing done is repeated and nothing pending is lost.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import sys
import time
import urllib.request
import webbrowser
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import settings

from recovery.ops.processes import (
    Supervisor,
    forward_signals,
    free_port,
    http_ok,
    manage_py,
    wait_until,
)
from recovery.sandbox import server
from recovery.showroom import demo_story

DATASET = demo_story.DATASET
REMOTE_DATASET = "demo-messora"
WINDOW = demo_story.WINDOW
USERS = ("operator", "admin", "exporter")  # each in the dashboard group of the same name
ROLE_HINTS = {
    "operator": "watches runs and triages quarantine",
    "admin": "repairs, reruns, accepts and publishes",
    "exporter": "downloads accepted datasets",
}
# How often a child that keeps dying is restarted before the demo gives up.
MAX_RESTARTS = 5

Echo = Callable[[str], None]


class DemoError(Exception):
    """The demo cannot start (a port taken, a broken data directory)."""


# --- state under the data directory --------------------------------------------------------


def demo_dir() -> Path:
    path = Path(settings.DATA_DIR) / "demo"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _private_file(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


def load_state() -> dict[str, Any]:
    path = demo_dir() / "state.json"
    if path.exists():
        return json.loads(path.read_text())
    return {}


def save_state(state: dict[str, Any]) -> None:
    (demo_dir() / "state.json").write_text(json.dumps(state, indent=2) + "\n")


def secret_key() -> str:
    path = demo_dir() / "secret-key"
    if not path.exists():
        _private_file(path, secrets.token_urlsafe(50))
    return path.read_text().strip()


def ensure_users() -> dict[str, str]:
    """The demo users in their groups; passwords are kept in <data>/demo-passwords (0600)."""
    from django.contrib.auth.models import Group, User

    path = Path(settings.DATA_DIR) / "demo-passwords"
    # With a PostgreSQL DATABASE_URL nothing else has created the data directory yet.
    path.parent.mkdir(parents=True, exist_ok=True)
    stored: dict[str, str] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            name, _, password = line.partition(" ")
            if name and password:
                stored[name] = password
    for name in USERS:
        user = User.objects.filter(username=name).first()
        password = stored.get(name)
        if user is None or password is None or not user.check_password(password):
            password = password or secrets.token_urlsafe(9)
            user = user or User(username=name)
            user.set_password(password)
            # Only the admin role may open Django's admin for raw records.
            user.is_staff = name == "admin"
            user.save()
            stored[name] = password
        group = Group.objects.filter(name=name).first()
        if group is not None:
            user.groups.add(group)
    _private_file(path, "".join(f"{name} {stored[name]}\n" for name in USERS))
    return {name: stored[name] for name in USERS}


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def busy_port_message(port: int) -> str:
    return (
        f"port {port} is taken: choose another with --port N "
        f"(make demo DEMO_PORT=N), or --port 0 for a free one"
    )


def check_database() -> None:
    """One line naming the database and what to do when it cannot be reached (PostgreSQL
    through DATABASE_URL is optional; unset, the demo uses SQLite under the data directory)."""
    from django.db import OperationalError, connection

    try:
        connection.ensure_connection()
    except OperationalError as exc:
        where = connection.settings_dict.get("HOST") or connection.settings_dict.get("NAME")
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if connection.vendor == "postgresql":
            raise DemoError(
                f"cannot reach PostgreSQL at {where} ({first}): start it (Debian: apt-get "
                "install postgresql), or unset DATABASE_URL to run the demo on SQLite"
            ) from None
        raise DemoError(f"cannot open the database {where}: {first}") from None


# --- the run --------------------------------------------------------------------------------


def ensure_run(spec_path: Path, manifest_path: Path, echo: Echo) -> int:
    """Load the demo dataset and create its run, unless that run already exists."""
    from recovery.intake import manifests, specs
    from recovery.models import Run

    run = Run.objects.filter(dataset__name=DATASET, window=WINDOW).first()
    if run is not None:
        echo(f"demo run {run.pk} exists: continuing where it stopped")
        return run.pk
    specs.load_dataset(spec_path)
    result = manifests.create_run(DATASET, WINDOW, manifest_path, actor="demo")
    echo(f"demo run {result.run.pk} created with {result.tasks_added} tasks")
    return result.run.pk


REMOTE_SPEC = """# The demo's remote dataset: the sandbox's Messora simulator (seed 000's API).
name = "{name}"
provider = "messora"
scraper_version = "1"

[entity_key]
from = "url"

[partition]
rule = "host"

[provider_options]
kind = "batch"
batch_size = 10

[page_types.product.fields]
title = {{ selector = "h1", required = true }}
"""


def ensure_remote_run(sandbox_url: str, echo: Echo) -> str:
    """A small Messora run whose first submission is dropped by the simulator: the provider
    job is in `unknown` state and waits in the reconcile queue for an operator's decision."""
    from recovery.intake import manifests, specs
    from recovery.models import Run

    try:
        from recovery.providers import messora  # noqa: F401 (registers the provider)
    except ImportError:
        return "remote provider messora not installed: no reconcile items in this demo"
    if Run.objects.filter(dataset__name=REMOTE_DATASET, window=WINDOW).exists():
        return "remote run exists"
    spec_path = demo_dir() / "messora.toml"
    spec_path.write_text(REMOTE_SPEC.format(name=REMOTE_DATASET))
    manifest_path = demo_dir() / "messora-manifest.csv"
    manifest_path.write_text(
        "url,page_type\n" + "".join(f"{sandbox_url}/product/{i},product\n" for i in range(1, 31))
    )
    try:
        specs.load_dataset(spec_path)
        # Arm the fault first: the very first create is dropped after the job was created.
        request = urllib.request.Request(
            f"{sandbox_url}/messora/_sim/faults",
            data=json.dumps({"create_drop": 1}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        urllib.request.urlopen(request, timeout=10).close()
        result = manifests.create_run(REMOTE_DATASET, WINDOW, manifest_path, actor="demo")
    except Exception as exc:  # the demo carries on without its reconcile items
        return f"remote run not created ({type(exc).__name__}: {exc})"
    return f"remote run {result.run.pk} created: its first Messora submission will be ambiguous"


# --- processes ------------------------------------------------------------------------------


def child_environment(sandbox_port: int) -> dict[str, str]:
    sandbox = f"http://127.0.0.1:{sandbox_port}"
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="recovery.settings",
        SALVAGE_DATA_DIR=str(settings.DATA_DIR),
        SECRET_KEY=secret_key(),
        # Plain http on loopback: no https redirect, no HSTS, cookies without the Secure flag.
        SECURE_SSL_REDIRECT="0",
        SECURE_HSTS_SECONDS="0",
        SALVAGE_SECURE_COOKIES="0",
        # The sandbox is on loopback, which outbound safety refuses unless allow-listed: its
        # port only, so a manifest cannot reach the database or Redis on this machine.
        SALVAGE_ALLOWED_NETWORKS=f"127.0.0.1:{sandbox_port},[::1]:{sandbox_port}",
        MESSORA_API_URL=f"{sandbox}/messora",
        # The simulator's own tenant key: a real key is never sent to the sandbox.
        MESSORA_API_KEY="sandbox-messora-key",
        SALVAGE_DESTINATION=f"{sandbox}/destination",
        # The dashboard's home page becomes the demo's checklist (recovery.showroom.demo_story).
        SALVAGE_DEMO="1",
        PYTHONUNBUFFERED="1",
    )
    env.pop("SALVAGE_INSECURE_DEV_KEY", None)
    return env


def worker_commands(workers: int) -> list[tuple[str, list[str], dict[str, str]]]:
    """The dispatcher and a django-q2 cluster; `manage.py work` if there is no dispatcher."""
    from django.core.management import get_commands

    commands = get_commands()
    if "dispatch" in commands:
        return [
            ("dispatch", manage_py("dispatch"), {}),
            ("qcluster", manage_py("qcluster"), {"SALVAGE_Q_WORKERS": str(workers)}),
        ]
    return [
        (f"work-{n}", manage_py("work", "--worker-id", f"demo-work-{n}"), {})
        for n in range(1, workers + 1)
    ]


def gunicorn_command(port: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "gunicorn",
        "recovery.wsgi:application",
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        "2",
        "--threads",
        "4",
        "--graceful-timeout",
        "10",
        "--access-logfile",
        "-",
        # The access log would otherwise hold the webhook's path secret in clear.
        "--logger-class",
        "recovery.ops.gunicorn_logging.RedactingLogger",
    ]


def run_demo(*, port: int, pages: int, workers: int, open_browser: bool, echo: Echo) -> int:
    from django.core.management import call_command

    from recovery import counters
    from recovery.ops.progress import Progress
    from recovery.states.task import TERMINAL

    data_dir = Path(settings.DATA_DIR)
    echo(f"Salvage demo: data in {data_dir}")
    # SQLite creates it with its database file; with a PostgreSQL DATABASE_URL nothing does.
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DemoError(
            f"cannot create the data directory {data_dir}: {exc.strerror}; "
            "choose one you can write with --data-dir"
        ) from None
    # Refuse a taken dashboard port before any work, naming the port and how to change it.
    if port and not port_free(port):
        raise DemoError(busy_port_message(port))
    check_database()
    call_command("migrate", verbosity=0, interactive=False)
    logins = ensure_users()
    call_command("collectstatic", verbosity=0, interactive=False)

    state = load_state()
    sandbox_port = state.get("sandbox_port") or free_port()
    if state.get("pages") and state["pages"] != pages:
        echo(f"the demo run has {state['pages']} pages; --pages {pages} applies to a new data dir")
        pages = state["pages"]
    if not port_free(sandbox_port):
        raise DemoError(
            f"the demo's sandbox port {sandbox_port} is taken (the run's URLs use it); "
            "stop what uses it, or start over with a new --data-dir"
        )
    web_port = port or free_port()
    if not port_free(web_port):
        raise DemoError(busy_port_message(web_port))
    state.update(sandbox_port=sandbox_port, pages=pages)
    save_state(state)

    env = child_environment(sandbox_port)
    sandbox_url = f"http://127.0.0.1:{sandbox_port}"
    url = f"http://127.0.0.1:{web_port}/"
    spec_path = demo_dir() / "shop.toml"
    manifest_path = demo_dir() / "manifest.csv"
    restarts: dict[str, int] = {}
    supervisor = Supervisor(grace=15, log_dir=demo_dir() / "logs", echo=echo)
    try:
        with supervisor, forward_signals():
            supervisor.start(
                "sandbox",
                manage_py(
                    "sandbox",
                    "--port",
                    str(sandbox_port),
                    "--pages",
                    str(pages),
                    "--faults",
                    "mixed",
                    "--dataset-name",
                    DATASET,
                    "--spec-out",
                    str(spec_path),
                    "--manifest-out",
                    str(manifest_path),
                ),
                env=env,
            )
            wait_until(
                lambda: http_ok(f"{sandbox_url}/_sandbox/state") and manifest_path.exists(),
                timeout=60,
                what="the sandbox",
            )
            run_id = ensure_run(spec_path, manifest_path, echo)
            # Version 2 of the spec (the repaired price selector) waits beside version 1 for
            # the admin who loads it from the checklist once the bad retailer is quarantined.
            demo_story.repaired_spec_path().write_text(
                server.shop_spec_toml(name=DATASET, version=2), encoding="utf-8"
            )
            echo(ensure_remote_run(sandbox_url, echo))
            for name, argv, extra in worker_commands(workers):
                supervisor.start(name, argv, env={**env, **extra})
            supervisor.start("web", gunicorn_command(web_port), env=env)
            wait_until(lambda: http_ok(f"{url}healthz"), timeout=60, what="the web server")
            echo("")
            echo(f"Dashboard: {url}")
            for name, password in logins.items():
                echo(f"  login {name:<9} password {password}  ({ROLE_HINTS[name]})")
            echo(f"(passwords are also in {data_dir / 'demo-passwords'}; Ctrl-C stops the demo)")
            echo(
                "First: log in as operator; the home page is the demo's checklist, and each "
                "step links to where it happens."
            )
            echo(f"Logs: {demo_dir() / 'logs'}")
            echo("")
            if open_browser and _has_desktop():
                with contextlib.suppress(Exception):
                    webbrowser.open(url)
            total = sum(counters.by_state(run_id).values())
            with Progress("demo run", total=total, unit="tasks", interval=15) as progress:
                while True:
                    by_state = counters.by_state(run_id)
                    done = sum(n for s, n in by_state.items() if s in TERMINAL)
                    progress.update(done, note=_states_note(by_state))
                    for child in supervisor.exited():
                        restarts[child.name] = restarts.get(child.name, 0) + 1
                        if restarts[child.name] > MAX_RESTARTS:
                            progress.log(f"{child.name} keeps failing; see {child.log_path}")
                            return 1
                        progress.log(
                            f"{child.name} exited with {child.popen.returncode}: restarting"
                        )
                        supervisor.start(child.name, child.argv, env=child.env)
                    time.sleep(1.0)
    except KeyboardInterrupt:
        echo("demo stopped: every process it started has exited")
        return 0


def _states_note(by_state: dict[str, int]) -> str:
    order = ("committed", "leased", "retry_wait", "quarantined", "gone", "dead")
    return " ".join(f"{s}={by_state[s]}" for s in order if by_state.get(s))


def _has_desktop() -> bool:
    """Only a desktop session gets a browser: on a server, webbrowser.open would start a text
    browser in this very terminal."""
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
