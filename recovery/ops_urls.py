"""Machine-facing endpoints: health, readiness, metrics and provider webhooks."""

from django.urls import path

from recovery import ops_views, webhooks

urlpatterns = [
    path("healthz", ops_views.healthz, name="healthz"),
    path("readyz", ops_views.readyz, name="readyz"),
    path("metrics", ops_views.metrics, name="metrics"),
    # Web Scraper Cloud's final-status notification: the secret is the path (it cannot sign).
    path(
        "hooks/webscraper/<str:secret>",
        webhooks.webscraper_webhook,
        name="webscraper-webhook",
    ),
]
