"""manage.py qcluster: django-q2's cluster, plus a heartbeat and an outage guard.

It replaces django-q2's own command of the same name (recovery comes before django_q in
INSTALLED_APPS) and behaves the same, except that this process stays in the foreground until
its sentinel exits, beating meanwhile, instead of waiting in interpreter shutdown. Each
django-q2 worker process beats on its own (recovery.ops.liveness.on_qcluster_worker_spawn).

While it waits, it probes the database (and the Redis broker, when that is the broker) through
an OutageGuard: one line when either goes away, one when it is back, and past
SALVAGE_DB_OUTAGE_LIMIT the cluster is stopped and the command exits 1 with one line, like
`work`, `dispatch` and `deliver`. The cluster's own processes meanwhile wait quietly
(recovery.ops.qcluster_outage).

Started while the database (or the Redis broker) does not answer, it waits the same way before
it starts the cluster (django-q2's sentinel connects as it starts, and a refused connection
ended the command at once): one line when it finds either down, one when it is back, then the
cluster starts; past SALVAGE_DB_OUTAGE_LIMIT it exits 1 with one line, and SIGTERM or SIGINT
meanwhile ends it at once with exit 0, no cluster started.

If the sentinel exits without being asked (killed, or a fault in django-q2), the command
exits 1 with one line, so a supervisor restarting on failure starts a new cluster.

SIGTERM or SIGINT, to this process alone or to its whole process group, drains the cluster:
each worker finishes the wake-up in hand and starts no other, then the command exits 0. The
cluster's own processes ignore the signal and leave the stop to this one
(recovery.ops.qcluster_stopping).
"""

from __future__ import annotations

import logging
import os
import threading

from django.conf import settings
from django_q.conf import Conf
from django_q.management.commands.qcluster import Command as DjangoQCommand

from recovery.ops import liveness, logs, outage, stopping
from recovery.ops.qcluster_stopping import Cluster

log = logging.getLogger("recovery.tasks")

# How often the command looks at its sentinel and probes the database and broker.
WATCH_SECONDS = 0.5
# How long a stop past the outage limit waits for the cluster before killing what is left.
STOP_GRACE_SECONDS = 20.0


def probe() -> bool:
    """True when the database and the broker answer; an outage error otherwise."""
    outage.probe_database()
    outage.probe_broker()
    return True


class Command(DjangoQCommand):
    def handle(self, *args, **options) -> None:
        settings.SECRET_KEY  # noqa: B018 (django-q2 signs tasks: refuse to start without it)
        logs.set_process("qcluster")  # before the cluster forks: its processes keep the name
        if options.get("cluster_name"):  # multi-queue: the cluster name is its queue's name
            os.environ["Q_CLUSTER_NAME"] = options["cluster_name"]
        stop = threading.Event()
        # SIGTERM/SIGINT, to this process or its whole group: ends a backoff wait at once; the
        # cluster is drained below, not in the handler. Installed before the cluster starts,
        # which keeps it (a signal during start-up stops the cluster once it runs).
        stopping.stop_on_signals(stop)
        worker = liveness.new_worker_id(liveness.WorkerKind.QCLUSTER)
        guard = outage.OutageGuard("qcluster", stop=stop)
        # The sentinel's broker connects to the database as the sentinel starts, and a refused
        # connection there ended the command with a traceback: wait for the database and the
        # broker first, as the other loops' first step does.
        try:
            while not stop.is_set() and not guard.step(probe):
                pass  # the guard has waited out an outage (or a stop came): probe again
        except outage.DatabaseOutage as exc:
            raise logs.gave_up(str(exc), log, worker=worker) from None
        if stop.is_set():  # stopped while waiting: no cluster was started
            logs.event(log, "worker_stopped", "qcluster %s stopped", worker, worker=worker)
            return
        # The probe's connection must not be shared with the processes forked below.
        outage.close_connections()
        cluster = Cluster()
        cluster.start()  # forks the sentinel first: no heartbeat thread exists to be forked
        if options.get("run_once"):
            cluster.stop()
            return
        heartbeat = liveness.start(liveness.WorkerKind.QCLUSTER, worker)
        logs.event(log, "worker_started", "qcluster %s started", worker, worker=worker)
        try:
            while cluster.sentinel.is_alive() and not stop.is_set():
                guard.step(probe)
                stop.wait(WATCH_SECONDS)
        except outage.DatabaseOutage as exc:
            stop_cluster(cluster, STOP_GRACE_SECONDS)
            raise logs.gave_up(str(exc), log, worker=worker) from None
        else:
            # A worker may be inside a wake-up for up to django-q2's timeout.
            stop_cluster(cluster, (Conf.TIMEOUT or 0) + STOP_GRACE_SECONDS)
        finally:
            heartbeat.stop()
        if not stop.is_set():
            # Nobody asked: exit 1, so a supervisor that restarts on failure (the systemd
            # units' Restart=on-failure) starts a new cluster; exit 0 left none running.
            raise logs.gave_up(sentinel_gone(cluster), log, worker=worker)
        logs.event(log, "worker_stopped", "qcluster %s stopped", worker, worker=worker)


def sentinel_gone(cluster: Cluster) -> str:
    return (
        f"qcluster: the cluster's sentinel exited by itself (exit code "
        f"{cluster.sentinel.exitcode}); exiting"
    )


def stop_cluster(cluster: Cluster, grace: float) -> None:
    """Drain the cluster (its workers finish the wake-up in hand and take no other) and wait
    for its sentinel; SIGKILL the sentinel if it has not stopped within `grace` seconds (a
    worker stuck on a dead connection during an outage)."""
    sentinel = cluster.sentinel
    cluster.request_stop()
    sentinel.join(grace)
    if sentinel.is_alive():
        sentinel.kill()
        sentinel.join(5)
