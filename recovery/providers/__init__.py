"""Providers: how a task's page is obtained. The engine never knows which one runs.

REGISTRY maps a dataset's `provider` name to a factory; each provider lives in its own module.
"""

from __future__ import annotations

from collections.abc import Callable

from recovery.providers.base import Provider

REGISTRY: dict[str, Callable[..., Provider]] = {}


def register(name: str):
    def wrap(factory: Callable[..., Provider]) -> Callable[..., Provider]:
        REGISTRY[name] = factory
        return factory

    return wrap


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
