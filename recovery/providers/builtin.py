"""Imports every built-in provider module so that each registers itself."""

from recovery.providers import noop  # noqa: F401
