"""The outer process: a scratch database, and the drill played on it in a child process.

In: `DrillOptions` and the caller's DATABASE_URL. Out: the inner process's report (one JSON
line on its stdout), with the database vendor added. The scratch database is a SQLite file in
a temporary directory, or a PostgreSQL database created next to DATABASE_URL's and dropped
afterwards; the child's environment names it, so every setting, worker and check sees only the
scratch data, and nothing of the caller's broker or fault injection leaks in.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from recovery.ops.processes import manage_py
from recovery.showroom.drill.options import DrillOptions, Echo


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
