from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _sync_roles(sender, using="default", apps=None, **kwargs) -> None:
    from dashboard.roles import sync_roles

    if apps is not None:
        sync_roles(apps, using=using)


class DashboardConfig(AppConfig):
    name = "dashboard"
    verbose_name = "Operator dashboard"

    def ready(self) -> None:
        # Runs after every migrate so a recovery model added later joins the operator role.
        post_migrate.connect(_sync_roles, sender=self, dispatch_uid="dashboard.sync_roles")
