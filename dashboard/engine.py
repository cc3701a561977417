"""The dashboard's one door into the engine's service functions (docs/architecture.md).

Views name a service as "module.function" (e.g. "acceptance.accept_run") and call it once.
A service that this build does not include yet becomes a clear error message on the page
rather than a crash, and the refusals the engine raises on bad input become messages too.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.core.exceptions import ObjectDoesNotExist
from django.http import HttpRequest


class ServiceUnavailable(LookupError):
    """The named engine function is not part of this build."""


def service(path: str) -> Callable[..., Any]:
    module_name, _, func_name = path.rpartition(".")
    qualified = f"recovery.{module_name}"
    try:
        module = importlib.import_module(qualified)
    except ModuleNotFoundError as exc:
        if exc.name != qualified:
            raise  # a real import error inside the module must stay loud
        raise ServiceUnavailable(f"{path} is not available in this build") from None
    func = getattr(module, func_name, None)
    if func is None:
        raise ServiceUnavailable(f"{path} is not available in this build")
    return func


# What the engine raises when it refuses an action (bad input, a state that moved meanwhile).
REFUSALS = (ValueError, LookupError, ObjectDoesNotExist, PermissionError)


def call(request: HttpRequest, path: str, *args: Any, **kwargs: Any) -> tuple[bool, Any]:
    """Call one engine function; on a refusal add an error message and return (False, None)."""
    try:
        return True, service(path)(*args, **kwargs)
    except REFUSALS as exc:
        messages.error(request, f"Refused: {exc}")
        return False, None
