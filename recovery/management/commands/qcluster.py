"""manage.py qcluster: django-q2's cluster, plus a heartbeat and an outage guard.

It replaces django-q2's own command of the same name (recovery comes before django_q in
INSTALLED_APPS) and behaves the same, except that this process stays in the foreground until
its sentinel exits, beating meanwhile, instead of waiting in interpreter shutdown. Each
django-q2 worker process beats on its own (recovery.liveness.on_qcluster_worker_spawn).

While it waits, it probes the database (and the Redis broker, when that is the broker) through
an OutageGuard: one line when either goes away, one when it is back, and past
SALVAGE_DB_OUTAGE_LIMIT the cluster is stopped and the command exits 1 with one line, like
`work`, `dispatch` and `deliver`. The cluster's own processes meanwhile wait quietly
(recovery.qcluster_outage).
"""

from __future__ import annotations

import os
import threading

from django.conf import settings
from django.core.management.base import CommandError
from django_q.cluster import Cluster
from django_q.management.commands.qcluster import Command as DjangoQCommand

from recovery import liveness, outage, stopping

# How often the command looks at its sentinel and probes the database and broker.
WATCH_SECONDS = 0.5
# How long a stop past the outage limit waits for the cluster before killing what is left.
STOP_GRACE_SECONDS = 20.0


def probe() -> None:
    outage.probe_database()
    outage.probe_broker()


class Command(DjangoQCommand):
    def handle(self, *args, **options) -> None:
        settings.SECRET_KEY  # noqa: B018 (django-q2 signs tasks: refuse to start without it)
        if options.get("cluster_name"):  # multi-queue: the cluster name is its queue's name
            os.environ["Q_CLUSTER_NAME"] = options["cluster_name"]
        cluster = Cluster()
        cluster.start()  # forks the sentinel first: no heartbeat thread exists to be forked
        if options.get("run_once"):
            cluster.stop()
            return
        stop = threading.Event()

        # SIGTERM/SIGINT: ends a backoff wait at once; the cluster is stopped below, not here
        stopping.stop_on_signals(stop)
        guard = outage.OutageGuard("qcluster", stop=stop)
        heartbeat = liveness.start(liveness.WorkerKind.QCLUSTER)
        try:
            while cluster.sentinel.is_alive() and not stop.is_set():
                guard.step(probe)
                stop.wait(WATCH_SECONDS)
        except outage.DatabaseOutage as exc:
            stop_cluster(cluster)
            raise CommandError(str(exc), returncode=1) from None
        else:
            stop_cluster(cluster)
        finally:
            heartbeat.stop()


def stop_cluster(cluster: Cluster) -> None:
    """Stop the sentinel (it stops its pusher, workers and monitor) and wait for it; SIGKILL it
    if it has not stopped within STOP_GRACE_SECONDS (a worker stuck on a dead connection).

    A SIGTERM sent to the whole process group (a supervisor, Ctrl-C's SIGINT aside) has already
    killed the sentinel, which keeps SIGTERM's default action, and it may have died holding the
    lock of the stop event it shares with us: setting that event (what django-q2's own handler
    does) then blocks for ever. So a dead sentinel is left alone, and a live one is told from
    a thread that cannot hold us up."""
    sentinel = cluster.sentinel
    sentinel.join(0.5)  # a group SIGTERM reaches it at the same time as us
    if not sentinel.is_alive():
        return
    threading.Thread(target=cluster.stop_event.set, daemon=True).start()
    sentinel.join(STOP_GRACE_SECONDS)
    if sentinel.is_alive():
        sentinel.kill()
        sentinel.join(5)
