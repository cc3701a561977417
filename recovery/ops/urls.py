"""Machine-facing endpoints: health and readiness. `/metrics` is routed by the root URL conf
(recovery.urls), which passes it the sections of the wings above this one."""

from django.urls import path

from recovery.ops import views as ops_views

urlpatterns = [
    path("healthz", ops_views.healthz, name="healthz"),
    path("readyz", ops_views.readyz, name="readyz"),
]
