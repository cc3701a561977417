from django.apps import AppConfig


class ConsumersConfig(AppConfig):
    name = "recovery.consumers"
    label = "consumers"
    verbose_name = "Data consumers (API tokens, change feed)"
    default_auto_field = "django.db.models.BigAutoField"
