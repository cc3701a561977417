"""What the outage quieting drops and what it keeps (ops.outage, ops.qcluster_outage):
only errors whose database or broker really does not answer; a real error stays loud."""

from __future__ import annotations

import logging
import sqlite3

import psycopg
import pytest
import redis
from django.db import DatabaseError, connection
from django.test import override_settings

from recovery.ops import outage
from recovery.ops.processes import free_port
from recovery.ops.qcluster_outage import RedisBroker


def record_of(exc: BaseException) -> logging.LogRecord:
    return logging.LogRecord(
        "django-q", logging.ERROR, __file__, 1, "Could not save task result", None,
        (type(exc), exc, None),
    )  # fmt: skip


def real_database_error() -> DatabaseError:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT * FROM no_such_table_here")
    except DatabaseError as exc:  # SQLite: an OperationalError, like an outage's
        return exc
    raise AssertionError("the query should have failed")


def closed_redis_url() -> str:
    return f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there


@pytest.mark.django_db
def test_it_keeps_a_real_database_error_the_database_answers_for():
    exc = real_database_error()
    assert not outage.unreachable(exc)
    assert outage.QuietOutageFilter().filter(record_of(exc))


@pytest.mark.django_db
def test_it_drops_a_broker_error_while_the_broker_is_unreachable_and_keeps_other_records():
    url = closed_redis_url()
    with override_settings(Q_CLUSTER={"redis": url}):
        try:
            redis.Redis.from_url(url, socket_connect_timeout=1).ping()
        except redis.ConnectionError as exc:
            refused = exc
        assert outage.unreachable(refused)
        assert not outage.QuietOutageFilter().filter(record_of(refused))
        plain = logging.LogRecord("django-q", logging.ERROR, __file__, 1, "boom", None, None)
        assert outage.QuietOutageFilter().filter(plain)
        # Stat.save logs the exception itself as the message.
        as_message = logging.LogRecord("django-q", logging.ERROR, __file__, 1, refused, None, None)
        assert not outage.QuietOutageFilter().filter(as_message)


@pytest.mark.django_db
def test_the_redis_broker_waits_out_an_unreachable_redis_and_returns_nothing():
    url = closed_redis_url()
    with override_settings(Q_CLUSTER={"redis": url}, SALVAGE_DB_RETRY_CAP=0.1):
        broker = RedisBroker(list_key="outage-test")
        broker.connection = redis.Redis.from_url(url, socket_connect_timeout=1)
        assert broker.dequeue() is None
        assert broker.set_stat("k", "v", 3) is None


@pytest.mark.parametrize(
    ("exc", "lost"),
    [
        (psycopg.errors.AdminShutdown("terminating connection"), True),
        (psycopg.errors.CannotConnectNow("the database system is starting up"), True),
        (psycopg.OperationalError("connection failed: Connection refused"), True),
        (psycopg.errors.UndefinedTable("relation does not exist"), False),
        (psycopg.errors.SerializationFailure("could not serialize"), False),
        (sqlite3.OperationalError("no such table: x"), False),
    ],
)
def test_lost_connection_is_only_a_dropped_or_refused_connection(exc, lost):
    from django.db import OperationalError

    assert outage.lost_connection(exc) is lost
    try:  # and the same through Django's wrapper, which keeps the driver's error as the cause
        raise OperationalError(str(exc)) from exc
    except OperationalError as wrapped:
        assert outage.lost_connection(wrapped) is lost


@pytest.mark.django_db(transaction=True)
def test_the_orm_broker_reconnects_after_a_restart_dropped_its_connection(postgres_only):
    from django_q.models import OrmQ

    from recovery.ops.qcluster_outage import OrmBroker

    broker = OrmBroker(list_key="outage-test")
    task_id = broker.enqueue("wake-up")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    # A database restart terminates every backend; the database answers again at once here,
    # so only this process's connection is dead (what the cluster's monitor met in CI).
    with psycopg.connect(_dsn(), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    assert broker.acknowledge(task_id) is None  # skipped quietly: no traceback, no exit
    # The next call opens a new connection and works.
    broker.acknowledge(task_id)
    assert not OrmQ.objects.filter(pk=task_id).exists()


def _dsn() -> str:
    s = connection.settings_dict
    return f"host={s['HOST']} port={s['PORT'] or 5432} user={s['USER']} dbname={s['NAME']}"
