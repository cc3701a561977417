from django.contrib import admin
from django.urls import include, path

from dashboard.urls import auth_urlpatterns

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("recovery.ops_urls")),
    path("", include("dashboard.urls")),
    *auth_urlpatterns,
]

# A 400 page with the navigation and the reason a list refused its parameters.
handler400 = "dashboard.views.bad_request"
