"""Private servers for the outage tests: a Redis and a PostgreSQL cluster of the test's own,
each on its own loopback port in its own temporary directory, which the test may stop, kill
and restart. The shared servers (PostgreSQL on 5432, Redis on 6379) are never touched."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from recovery.ops.processes import free_port, wait_until


def _ping_redis(port: int) -> bool:
    import redis

    client = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=1, socket_timeout=1)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


class PrivateRedis:
    """redis-server on its own port, without persistence (a restart empties it, as a Redis
    without a volume does)."""

    def __init__(self, directory: Path) -> None:
        self.binary = shutil.which("redis-server")
        if not self.binary:
            pytest.skip("needs redis-server on PATH for a private Redis (apt-get install redis)")
        self.directory = directory
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        log = open(self.directory / "redis.log", "ab")  # noqa: SIM115 (the child holds it)
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.directory), "--daemonize", "no"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        log.close()
        wait_until(lambda: _ping_redis(self.port), timeout=30, what="the private Redis")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
        self.proc = None


@contextlib.contextmanager
def private_redis(directory: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(directory)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def postgres_bindir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class PrivatePostgres:
    """A PostgreSQL cluster made by initdb in a temporary directory, on its own port. initdb and
    the server refuse to run as root, so as root they run as the `postgres` user."""

    def __init__(self) -> None:
        bindir = postgres_bindir()
        if bindir is None:
            pytest.skip("needs PostgreSQL's server binaries (initdb, pg_ctl) for a private cluster")
        self.bindir = bindir
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            runuser = shutil.which("runuser")
            try:
                import pwd

                pwd.getpwnam("postgres")
            except KeyError:
                runuser = None
            if not runuser:
                pytest.skip("running as root needs runuser and a postgres user for initdb")
            self.as_user = [runuser, "-u", "postgres", "--"]
        # Not under pytest's tmp_path: that is private to root, and the server runs as postgres.
        self.directory = Path(tempfile.mkdtemp(prefix="salvage-pg-"))
        self.data = self.directory / "data"
        self.port = free_port()
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/salvage"
        if self.as_user:
            shutil.chown(self.directory, user="postgres")

    def _run(self, *argv: str) -> None:
        done = subprocess.run(
            [*self.as_user, *argv], capture_output=True, text=True, timeout=120, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed: {done.stdout}{done.stderr}")

    def _pg_ctl(self, *args: str) -> None:
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-w", "-t", "60", *args)

    def create(self) -> None:
        self._run(
            str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust",
            "--no-sync", "--encoding", "UTF8", "--locale", "C",
        )  # fmt: skip
        self.start()
        import psycopg

        admin = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute("CREATE DATABASE salvage")

    def start(self) -> None:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.directory} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        self._pg_ctl("-o", options, "-l", str(self.directory / "server.log"), "start")

    def restart(self, mode: str) -> None:
        """`pg_ctl restart -m fast|immediate`: every backend is ended (immediate: without a
        checkpoint, so the server recovers from its WAL on the way up)."""
        # -l again: without it the server would write to (and hold open) our capture pipe.
        self._pg_ctl("-m", mode, "-l", str(self.directory / "server.log"), "restart")

    def stop(self, mode: str = "fast") -> None:
        self._pg_ctl("-m", mode, "stop")

    def destroy(self) -> None:
        with contextlib.suppress(Exception):
            self._pg_ctl("-m", "immediate", "stop")
        shutil.rmtree(self.directory, ignore_errors=True)


@contextlib.contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    server = PrivatePostgres()
    try:
        server.create()
        yield server
    finally:
        server.destroy()
