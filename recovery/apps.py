from django.apps import AppConfig


class RecoveryConfig(AppConfig):
    name = "recovery"
    verbose_name = "Recovery engine"

    def ready(self) -> None:
        from django_q.signals import post_spawn, pre_execute

        from recovery.ops import liveness, outage

        # Each django-q2 worker process beats from its own thread, idle or busy.
        post_spawn.connect(liveness.on_qcluster_worker_spawn, dispatch_uid="salvage-heartbeat")
        # After a database restart a worker's connection is dead, and django-q2's own check
        # does not see it (the claim's raw psycopg error never marks it): drop it before the
        # next task, or every task fails until the connection's max age runs out.
        pre_execute.connect(outage.close_broken_connections, dispatch_uid="salvage-outage")
