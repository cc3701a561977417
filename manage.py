#!/usr/bin/env python
"""Salvage's command line: python manage.py <command> (see README, "Command line")."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "recovery.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
