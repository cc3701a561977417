from django.apps import AppConfig


class RecoveryConfig(AppConfig):
    name = "recovery"
    verbose_name = "Recovery engine"

    def ready(self) -> None:
        from django_q.signals import post_spawn

        from recovery import liveness

        # Each django-q2 worker process beats from its own thread, idle or busy.
        post_spawn.connect(liveness.on_qcluster_worker_spawn, dispatch_uid="salvage-heartbeat")
