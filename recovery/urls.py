from django.contrib import admin
from django.urls import include, path

from dashboard.urls import auth_urlpatterns
from recovery.intake import schedule_metrics
from recovery.ops import views as ops_views
from recovery.quality import run_metrics
from recovery.remote import acknowledge, webhooks

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("recovery.ops.urls")),
    # Prometheus: the engine's series (recovery.ops.metrics), then the per-run and schedule
    # series of the wings above it, passed in (the ops floor cannot import them).
    path(
        "metrics",
        ops_views.metrics,
        {"sections": (run_metrics.write, schedule_metrics.write)},
        name="metrics",
    ),
    # Web Scraper Cloud's final-status notification: the secret is the path (it cannot sign).
    path(
        "hooks/webscraper/<str:secret>",
        webhooks.webscraper_webhook,
        name="webscraper-webhook",
    ),
    # The media consumer's acknowledgement (recovery.remote.acknowledge): a bearer token.
    path("hooks/media/<int:job_id>/finished", acknowledge.media_finished, name="media-finished"),
    # The pull API (api/, docs/api.md): bearer tokens, read-only.
    path("api/v1/", include("api.urls")),
    path("", include("dashboard.urls")),
    *auth_urlpatterns,
]

# A 400 page with the navigation and the reason a list refused its parameters.
handler400 = "dashboard.views.bad_request"
