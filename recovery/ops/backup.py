"""Back up and restore a deployment: the database and the files the database names.

A backup is a directory:
- `database.dump`: `pg_dump --format=custom` of the PostgreSQL database (one snapshot,
  consistent while every process keeps running), or `database.sqlite3`: SQLite's online
  backup API (`sqlite3.Connection.backup`, a consistent copy while the workers write; copying
  the file of a live WAL database is not);
- `files.tar.gz`: the data directory (artefacts of failed pages, kept export files, schedule
  manifests, the file outbox) without the SQLite database and the collected static files,
  plus any of those directories configured outside it. Taken after the database: an
  artefact is written before the attempt that names it commits, so every file the dump
  names is in the archive;
- `manifest.json`, written last (a directory without it is an unfinished backup): sizes and
  SHA-256 of both files, the applied migrations, the release, the time.

`restore` checks the manifest's sums before it touches anything, refuses a database or a data
directory that is not empty (a restore goes into new ones; nothing is overwritten), restores
the database in one transaction (`pg_restore --single-transaction`) and unpacks the files.
Tasks leased at backup time come back when their leases expire, by the database's clock.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict
from urllib.parse import unquote, urlsplit

FORMAT = "salvage-backup/1"
MANIFEST = "manifest.json"
FILES = "files.tar.gz"
DUMP = {"postgresql": "database.dump", "sqlite": "database.sqlite3"}
# Directories of the data directory's kind that may be configured elsewhere (settings name,
# and the name they have under a restored data directory).
FILE_ROLES = {
    "artefacts": "SALVAGE_ARTEFACT_DIR",
    "export-cache": "SALVAGE_EXPORT_CACHE_DIR",
    "exports": "SALVAGE_EXPORT_DIR",
    "manifests": "SALVAGE_SCHEDULE_MANIFEST_DIR",
}


class BackupRefused(Exception):
    """Bad input: nothing was written (the command's exit 2)."""


class BackupFailed(Exception):
    """A tool or a check failed part-way (exit 1); what was written is named."""


class FileEntry(TypedDict):
    file: str
    bytes: int
    sha256: str


class Manifest(TypedDict):
    format: str
    created_at: str
    release: str
    database: dict[str, Any]
    files: dict[str, Any]
    migrations: dict[str, list[str]]


@dataclass(frozen=True)
class Target:
    """A database named by a URL, as DATABASE_URL names one (recovery.settings reads the
    same two forms; this layer may not import the settings module)."""

    vendor: str  # postgresql | sqlite
    name: str  # database name, or the SQLite file's path
    user: str = ""
    password: str = ""
    host: str = ""
    port: str = ""

    @classmethod
    def from_url(cls, url: str) -> Target:
        parts = urlsplit(url)
        if parts.scheme in ("postgres", "postgresql"):
            return cls(
                "postgresql",
                unquote(parts.path.lstrip("/")) or "postgres",
                unquote(parts.username or ""),
                unquote(parts.password or ""),
                parts.hostname or "",
                str(parts.port or ""),
            )
        if parts.scheme == "sqlite" and not parts.netloc and parts.path.startswith("/"):
            return cls("sqlite", unquote(parts.path))
        raise BackupRefused(
            f"--database-url: expected postgres://user@host:port/name or sqlite:///abs/path, "
            f"got a {parts.scheme or 'schemeless'} URL"
        )

    @classmethod
    def from_settings(cls, s: dict[str, Any]) -> Target:
        if s["ENGINE"].endswith("sqlite3"):
            return cls("sqlite", str(s["NAME"]))
        return cls(
            "postgresql", s["NAME"], s["USER"] or "", s["PASSWORD"] or "", s["HOST"] or "",
            str(s["PORT"] or ""),
        )  # fmt: skip

    def label(self) -> str:
        if self.vendor == "sqlite":
            return f"sqlite {self.name}"
        return f"postgresql {self.user}@{self.host or 'localhost'}:{self.port or 5432}/{self.name}"

    def pg_args(self) -> list[str]:
        """libpq's flags for pg_dump/pg_restore; the password goes by environment, never argv."""
        args = ["--dbname", self.name]
        for flag, value in (
            ("--host", self.host),
            ("--port", self.port),
            ("--username", self.user),
        ):
            if value:
                args += [flag, value]
        return args

    def pg_env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.password:
            env["PGPASSWORD"] = self.password
        return env


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def entry(path: Path) -> FileEntry:
    return {"file": path.name, "bytes": path.stat().st_size, "sha256": sha256_of(path)}


def _run_tool(argv: list[str], env: dict[str, str], what: str) -> None:
    if shutil.which(argv[0]) is None:
        raise BackupFailed(
            f"{argv[0]} is not installed (Debian: apt-get install postgresql-client)"
        )
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise BackupFailed(f"{what} failed (exit {done.returncode}): {done.stderr.strip()[:2000]}")


# --- backing up --------------------------------------------------------------------------------


def applied_migrations() -> dict[str, list[str]]:
    from django.db import connection
    from django.db.migrations.recorder import MigrationRecorder

    applied: dict[str, list[str]] = {}
    for app, name in sorted(MigrationRecorder(connection).applied_migrations()):
        applied.setdefault(app, []).append(name)
    return applied


def dump_database(source: Target, out: Path) -> None:
    if source.vendor == "postgresql":
        argv = ["pg_dump", "--format=custom", "--file", str(out), *source.pg_args()]
        _run_tool(argv, source.pg_env(), "pg_dump")
        return
    # SQLite's online backup: pages copied under the database's own locking, so a copy taken
    # while workers commit is a consistent database (a copy of the file may not be).
    src = sqlite3.connect(f"{Path(source.name).resolve().as_uri()}?mode=ro", uri=True)
    dst = sqlite3.connect(out)
    try:
        with dst:
            src.backup(dst)
    finally:
        dst.close()
        src.close()


def file_roots(settings: Any) -> dict[str, Path]:
    """role -> directory to archive: the data directory, and each file directory that is
    configured outside it."""
    data = Path(settings.DATA_DIR).resolve()
    roots = {"data": data}
    for role, setting in FILE_ROLES.items():
        path = Path(getattr(settings, setting)).resolve()
        if not path.is_relative_to(data):
            roots[role] = path
    return roots


def _excluded(settings: Any, backup_dir: Path) -> set[Path]:
    """What the archive leaves out: the database (dumped apart), the collected static files
    (rebuilt by collectstatic), and the backup itself should it sit in the data directory."""
    out = {Path(settings.STATIC_ROOT).resolve(), backup_dir.resolve()}
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        name = Path(str(db["NAME"])).resolve()
        out |= {name, *(name.with_name(name.name + s) for s in ("-wal", "-shm", "-journal"))}
    return out


def _walk(root: Path, excluded: set[Path]) -> Iterator[Path]:
    if not root.is_dir():
        return
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames if (here / d).resolve() not in excluded)
        for name in sorted(filenames):
            path = here / name
            # .tmp-*: a file being written (artefacts and export files are renamed into place).
            if path.resolve() not in excluded and not name.startswith(".tmp-"):
                yield path


def archive_files(settings: Any, out: Path, backup_dir: Path) -> dict[str, Any]:
    roots = file_roots(settings)
    excluded = _excluded(settings, backup_dir)
    entries = content = 0
    with tarfile.open(out, "w:gz") as tar:
        for role, root in roots.items():
            for path in _walk(root, excluded):
                try:
                    tar.add(path, arcname=f"{role}/{path.relative_to(root)}", recursive=False)
                except FileNotFoundError:
                    continue  # pruned while we walked: it is gone from the database's view too
                entries += 1
                content += path.stat().st_size if path.exists() else 0
    return {
        "entries": entries,
        "content_bytes": content,
        "roots": {k: str(v) for k, v in roots.items()},
    }


def release() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("salvage")
    except PackageNotFoundError:
        return "unknown"


def backup(target_dir: Path) -> Manifest:
    """Write a backup of this deployment (its settings' database and data directory)."""
    from django.conf import settings

    target_dir = target_dir.resolve()
    if target_dir.exists() and (not target_dir.is_dir() or any(target_dir.iterdir())):
        raise BackupRefused(f"{target_dir}: not an empty directory (a backup never overwrites)")
    source = Target.from_settings(settings.DATABASES["default"])
    target_dir.mkdir(parents=True, exist_ok=True)
    migrations = applied_migrations()
    dump = target_dir / DUMP[source.vendor]
    dump_database(source, dump)
    files = target_dir / FILES
    archived = archive_files(settings, files, target_dir)
    manifest: Manifest = {
        "format": FORMAT,
        "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "release": release(),
        "database": {"vendor": source.vendor, "name": Path(source.name).name
                     if source.vendor == "sqlite" else source.name, **entry(dump)},
        "files": {**entry(files), **archived},
        "migrations": migrations,
    }  # fmt: skip
    tmp = target_dir / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    tmp.rename(target_dir / MANIFEST)  # last: its presence says the backup is whole
    return manifest


# --- restoring ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Restored:
    manifest: Manifest
    target: Target
    data_dir: Path
    moved_roles: dict[str, str]  # role -> where it was configured at backup time


def read_manifest(source_dir: Path) -> Manifest:
    path = source_dir / MANIFEST
    if not path.is_file():
        raise BackupRefused(f"{source_dir}: no {MANIFEST} (not a backup, or an unfinished one)")
    manifest: Manifest = json.loads(path.read_text())
    if manifest.get("format") != FORMAT:
        raise BackupRefused(f"{path}: format {manifest.get('format')!r}, expected {FORMAT}")
    for part in ("database", "files"):
        file = source_dir / manifest[part]["file"]
        if not file.is_file() or file.stat().st_size != manifest[part]["bytes"]:
            raise BackupRefused(f"{file}: missing or not {manifest[part]['bytes']} bytes")
        if sha256_of(file) != manifest[part]["sha256"]:
            raise BackupRefused(f"{file}: its SHA-256 is not the manifest's (damaged copy?)")
    return manifest


def _postgres_tables(target: Target) -> int:
    import psycopg
    from psycopg.conninfo import make_conninfo

    params = {"dbname": target.name, "user": target.user, "host": target.host,
              "port": target.port, "password": target.password}  # fmt: skip
    conninfo = make_conninfo(**{k: v for k, v in params.items() if v})
    try:
        with psycopg.connect(conninfo, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_tables WHERE schemaname NOT IN "
                "('pg_catalog', 'information_schema')"
            ).fetchone()
    except psycopg.OperationalError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BackupRefused(
            f"cannot reach {target.label()}: {first} (create it first: createdb)"
        ) from None
    return int(row[0]) if row else 0


def _check_empty(target: Target, data_dir: Path) -> None:
    if data_dir.exists() and (not data_dir.is_dir() or any(data_dir.iterdir())):
        raise BackupRefused(
            f"--data-dir {data_dir}: not an empty directory (restore into a new one)"
        )
    if target.vendor == "postgresql":
        if _postgres_tables(target):
            raise BackupRefused(f"{target.label()} has tables: restore into a new, empty database")
    elif Path(target.name).exists() and Path(target.name).stat().st_size:
        raise BackupRefused(f"{target.name} exists: restore into a new database file")


def restore(source_dir: Path, database_url: str, data_dir: Path) -> Restored:
    source_dir, data_dir = source_dir.resolve(), data_dir.resolve()
    manifest = read_manifest(source_dir)
    target = Target.from_url(database_url)
    if target.vendor != manifest["database"]["vendor"]:
        raise BackupRefused(
            f"the backup is of a {manifest['database']['vendor']} database; "
            f"--database-url names a {target.vendor} one"
        )
    _check_empty(target, data_dir)
    dump = source_dir / manifest["database"]["file"]
    if target.vendor == "postgresql":
        # One transaction: a failure leaves the new database as empty as it was.
        argv = ["pg_restore", "--no-owner", "--no-privileges", "--exit-on-error",
                "--single-transaction", *target.pg_args(), str(dump)]  # fmt: skip
        _run_tool(argv, target.pg_env(), "pg_restore")
    else:
        Path(target.name).parent.mkdir(parents=True, exist_ok=True)
        src = sqlite3.connect(f"{dump.as_uri()}?mode=ro", uri=True)
        dst = sqlite3.connect(target.name)
        try:
            with dst:
                src.backup(dst)
        finally:
            dst.close()
            src.close()
    data_dir.mkdir(parents=True, exist_ok=True)
    with tarfile.open(source_dir / manifest["files"]["file"], "r:gz") as tar:
        for member in tar.getmembers():
            role, _, rest = member.name.partition("/")
            if role != "data" and role not in FILE_ROLES:
                raise BackupFailed(f"unexpected archive entry {member.name!r}")
            member.name = rest if role == "data" else f"{role}/{rest}"
            # filter="data": no absolute paths, no '..', no links out, no device files.
            tar.extract(member, data_dir, filter="data")
    moved = {r: p for r, p in manifest["files"]["roots"].items() if r != "data"}
    return Restored(manifest, target, data_dir, moved)
