"""/api/v1/: the pull API's routes (docs/api.md). Names are `api:<name>`."""

from __future__ import annotations

from django.urls import path, re_path
from drf_spectacular.views import SpectacularJSONAPIView
from rest_framework.permissions import AllowAny

from api import views

app_name = "api"

FORMAT = r"(?P<fmt>csv|jsonl|parquet)"

urlpatterns = [
    # The OpenAPI document is public: it holds no data.
    path(
        "schema",
        SpectacularJSONAPIView.as_view(authentication_classes=[], permission_classes=[AllowAny]),
        name="schema",
    ),
    path("datasets", views.DatasetList.as_view(), name="datasets"),
    path("datasets/<slug:name>", views.DatasetDetail.as_view(), name="dataset"),
    path("datasets/<slug:name>/runs", views.DatasetRuns.as_view(), name="runs"),
    path("datasets/<slug:name>/rows", views.DatasetRows.as_view(), name="rows"),
    path("datasets/<slug:name>/changes", views.DatasetChanges.as_view(), name="changes"),
    re_path(
        rf"^datasets/(?P<name>[-a-zA-Z0-9_]+)/current\.{FORMAT}$",
        views.CurrentExport.as_view(),
        name="current",
    ),
    re_path(
        r"^datasets/(?P<name>[-a-zA-Z0-9_]+)/latest\.(?P<fmt>csv|jsonl|parquet)$",
        views.LatestExport.as_view(),
        name="latest",
    ),
    path("runs/<int:run_id>", views.RunDetail.as_view(), name="run"),
    re_path(
        rf"^runs/(?P<run_id>[0-9]+)/export\.{FORMAT}$", views.RunExport.as_view(), name="run_export"
    ),
    # Anything else under /api/v1/ is a 404 in the API's error shape, not an HTML page.
    re_path(r"^(?P<rest>.*)$", views.NotFound.as_view(), name="not_found"),
]
