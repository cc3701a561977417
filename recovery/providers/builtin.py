"""Imports every built-in provider module so that each registers itself."""

from recovery.providers import (
    browser,  # noqa: F401  (needs the optional `browser` extra only when used)
    direct,  # noqa: F401
    messora,  # noqa: F401  (asynchronous: recovery.remote)
    noop,  # noqa: F401
    tornado,  # noqa: F401  (asynchronous: recovery.remote)
    webscraper,  # noqa: F401  (asynchronous: recovery.remote)
)
