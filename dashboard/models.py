"""The dashboard's own rows: a viewer's preferences (dashboard.viewer_zone)."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class ViewerSettings(models.Model):
    """One user's dashboard preferences. Made on first save; a user without one sees UTC."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="viewer_settings"
    )
    # An IANA name (zoneinfo), checked against the zones this machine knows when saved.
    time_zone = models.CharField(max_length=64, default="UTC")

    class Meta:
        verbose_name_plural = "viewer settings"

    def __str__(self) -> str:
        return f"{self.user} ({self.time_zone})"
