"""WSGI entry point for gunicorn (the demo and production both serve through it)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "recovery.settings")
application = get_wsgi_application()
