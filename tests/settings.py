"""Test settings: the product's settings with DEBUG-free dev defaults and short leases."""

import os

os.environ.setdefault("SALVAGE_INSECURE_DEV_KEY", "1")
os.environ.setdefault("SECURE_SSL_REDIRECT", "0")
os.environ.setdefault("SALVAGE_ALLOWED_NETWORKS", "127.0.0.0/8,::1/128")

from recovery.settings import *  # noqa: F403
from recovery.settings import DATABASES

# Browser tests log in over plain http.
SESSION_COOKIE_SECURE = False
CSRF_COOKIE_SECURE = False
SECURE_HSTS_SECONDS = 0
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# Pages render without collectstatic: plain static storage, and whitenoise serves the files
# straight from the finders (the browser tests' live server needs them).
STORAGES = {
    **STORAGES,  # noqa: F405
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = True

if (
    DATABASES["default"]["ENGINE"].endswith("postgresql")
    and not DATABASES["default"]["TEST"]["NAME"]
):
    DATABASES["default"]["TEST"]["NAME"] = "test_salvage"
