"""Django's admin for the dashboard's own rows, read-only for staff as the engine's are
(recovery.admin.RawRecordAdmin): a user changes their time zone on /account/settings/."""

from __future__ import annotations

from django.contrib import admin

from dashboard.models import ViewerSettings
from recovery.admin import RawRecordAdmin


@admin.register(ViewerSettings)
class ViewerSettingsAdmin(RawRecordAdmin):
    list_display = ("id", "user", "time_zone")
    raw_id_fields = ("user",)
