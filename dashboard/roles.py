"""The dashboard's roles as Django groups: which permission each role holds.

Operators see everything and triage; admins also rerun, accept and deliver; exporters only
download accepted datasets. `sync_roles` is idempotent: the data migration calls it, and so
does `post_migrate`, so a model added later gets its view permission in the operator role.
"""

from __future__ import annotations

OPERATOR = "operator"
ADMIN = "admin"
EXPORTER = "exporter"

# Models whose view_* permission every operator holds ("view everything" except the audit log).
VIEWED_MODELS = (
    "dataset",
    "run",
    "recoverybatch",
    "task",
    "attempt",
    "observation",
    "observationversion",
    "outboxevent",
    "remotejob",
    "remotejobitem",
    "webhookreceipt",
    "runpartition",
    "validationresult",
    "taskcountdelta",
    "workerheartbeat",
    "triagenote",
    "schedule",
    "incident",
)

OPERATOR_PERMS = [f"view_{model}" for model in VIEWED_MODELS] + [
    "triage_run",
    "resolve_reconcile",
]
ADMIN_PERMS = [
    *OPERATOR_PERMS,
    "create_recovery_batch",
    "accept_run",
    "retry_delivery",
    "view_audit",
    "view_auditentry",
    "upload_dataset",
    # The Schedules page (dashboard.schedule_views): add, edit, pause/resume, remove; audited.
    "add_schedule",
    "change_schedule",
    "delete_schedule",
]
EXPORTER_PERMS = ["export_dataset"]
# Permissions of the consumers app (recovery.consumers: API tokens), by role.
CONSUMERS_PERMS: dict[str, list[str]] = {ADMIN: ["manage_api_tokens"]}
APPS = ("recovery", "consumers")

ROLES: dict[str, list[str]] = {
    OPERATOR: OPERATOR_PERMS,
    ADMIN: ADMIN_PERMS,
    EXPORTER: EXPORTER_PERMS,
}


def sync_roles(apps, using: str = "default") -> None:
    """Create the groups and give each exactly its role's recovery permissions."""
    from django.contrib.auth.management import create_permissions

    # Permissions are normally created after migrate; a data migration must create them first.
    # A migration-state app config has no models_module, which create_permissions would skip.
    for app_config in apps.get_app_configs():
        if app_config.label not in {*APPS, "contenttypes", "auth"}:
            continue
        original = getattr(app_config, "models_module", None)
        app_config.models_module = original or True
        try:
            create_permissions(app_config, verbosity=0, apps=apps, using=using)
        finally:
            app_config.models_module = original

    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for role, codenames in ROLES.items():
        group, _ = Group.objects.using(using).get_or_create(name=role)
        perms = Permission.objects.using(using).filter(
            content_type__app_label="recovery", codename__in=codenames
        ) | Permission.objects.using(using).filter(
            content_type__app_label="consumers", codename__in=CONSUMERS_PERMS.get(role, [])
        )
        # Keep any permission granted by hand outside our apps; own the ones of our apps.
        kept = group.permissions.exclude(content_type__app_label__in=APPS)
        group.permissions.set([*kept, *perms])
