from django.contrib.auth import views as auth_views
from django.urls import path

from dashboard import views

app_name = "dashboard"

urlpatterns = [
    path("", views.runs, name="runs"),
]

# The login/logout views live outside the namespace so LOGIN_URL = "login" resolves.
auth_urlpatterns = [
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
]
