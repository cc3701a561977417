"""REGISTRY maps a dataset's `provider` name to a factory. Each provider module adds itself
with `@register(name)`; recovery.providers.builtin imports the built-in ones. This module
imports nothing, so a provider module that registers itself never imports the package that
loads it (no import cycle)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

REGISTRY: dict[str, Callable[..., Any]] = {}


def register(name: str):
    def wrap(factory: Callable[..., Any]) -> Callable[..., Any]:
        REGISTRY[name] = factory
        return factory

    return wrap
