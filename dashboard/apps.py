from django.apps import AppConfig
from django.contrib.auth.signals import user_logged_in
from django.db.models.signals import post_migrate


def _sync_roles(sender, using="default", apps=None, **kwargs) -> None:
    from django.apps import apps as global_apps

    from dashboard.roles import sync_roles

    # Sent per app that has models; hook the recovery app's signal
    # (its permissions exist by then: auth's receiver was connected first), and the consumers
    # app's, whose permission (manage_api_tokens) the admin role holds.
    if sender.label not in ("recovery", "consumers"):
        return
    # migrate passes the migration state's apps; flush (e.g. between transactional tests,
    # which empties the groups table) passes none.
    sync_roles(apps or global_apps, using=using)


class DashboardConfig(AppConfig):
    name = "dashboard"
    verbose_name = "Operator dashboard"

    def ready(self) -> None:
        # Runs after every migrate so a recovery model added later joins the operator role.
        post_migrate.connect(_sync_roles, dispatch_uid="dashboard.sync_roles")
        from dashboard.viewer_zone import on_login

        user_logged_in.connect(on_login, dispatch_uid="dashboard.viewer_zone")
