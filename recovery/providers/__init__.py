"""Providers: how a task's page is obtained. The engine never knows which one runs.

recovery.providers.registry maps a dataset's `provider` name to a factory; each provider lives
in its own module.
"""

from __future__ import annotations

from recovery.providers.base import Provider
from recovery.providers.registry import REGISTRY, register

__all__ = ["REGISTRY", "Provider", "get_provider", "known", "register"]


def known() -> dict:
    """Every provider of this build, by name (the built-in modules register on import)."""
    from recovery.providers import builtin  # noqa: F401

    return REGISTRY


def get_provider(name: str, **options) -> Provider:
    # Import the built-in modules so their @register lines run.
    from recovery.providers import builtin  # noqa: F401

    try:
        factory = REGISTRY[name]
    except KeyError:
        raise KeyError(
            f"unknown provider {name!r} (known: {', '.join(sorted(REGISTRY))})"
        ) from None
    return factory(**options)
