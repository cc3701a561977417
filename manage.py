#!/usr/bin/env python
"""Salvage's command line: python manage.py <command> (see README, "Command line")."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "recovery.settings")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as exc:
        # A bad setting (an unusable data directory, a malformed DATABASE_URL...) is the
        # user's to fix: one line naming it, not a traceback through Django's internals.
        print(f"manage.py: {exc}", file=sys.stderr)
        sys.exit(2)
