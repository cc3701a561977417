"""Imports every built-in provider module so that each registers itself."""

from recovery.providers import (
    messora,  # noqa: F401  (asynchronous: recovery.remote)
    noop,  # noqa: F401
)
