"""manage.py qcluster: django-q2's cluster, plus a heartbeat for the cluster process.

It replaces django-q2's own command of the same name (recovery comes before django_q in
INSTALLED_APPS) and behaves the same, except that this process stays in the foreground until
its sentinel exits, beating meanwhile, instead of waiting in interpreter shutdown. Each
django-q2 worker process beats on its own (recovery.liveness.on_qcluster_worker_spawn).
"""

from __future__ import annotations

import os
import time

from django.conf import settings
from django_q.cluster import Cluster
from django_q.management.commands.qcluster import Command as DjangoQCommand

from recovery import liveness


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
        heartbeat = liveness.start(liveness.WorkerKind.QCLUSTER)
        try:
            # SIGTERM/SIGINT run django-q2's handler here (it stops the sentinel and waits).
            while cluster.sentinel.is_alive():
                time.sleep(0.5)
        finally:
            heartbeat.stop()
