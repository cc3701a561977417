from django.contrib import admin
from django.urls import include, path

from dashboard.urls import auth_urlpatterns

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("recovery.ops_urls")),
    path("", include("dashboard.urls")),
    *auth_urlpatterns,
]
