#!/usr/bin/env python
"""Salvage's command line: python manage.py <command> (see README, "Command line")."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "recovery.settings")
    # One line, not a traceback, for a bad setting (exit 2) or an unreachable database
    # (exit 1); help and --help need no secret key (recovery/ops/commandline.py).
    from recovery.ops.commandline import main

    sys.exit(main(sys.argv))
