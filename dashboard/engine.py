"""The dashboard's one door into the engine's service functions (docs/architecture.md).

Views import the engine function they need and call it once through `call`: the refusals the
engine raises on bad input (a state that moved meanwhile, a missing reason) become a message
on the page instead of a crash. A typo in a function's name fails at import, not at a click.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.core.exceptions import ObjectDoesNotExist
from django.http import HttpRequest

# What the engine raises when it refuses an action (bad input, a state that moved meanwhile).
REFUSALS = (ValueError, LookupError, ObjectDoesNotExist, PermissionError)


def call(
    request: HttpRequest, service: Callable[..., Any], *args: Any, **kwargs: Any
) -> tuple[bool, Any]:
    """Call one engine function; on a refusal add an error message and return (False, None)."""
    try:
        return True, service(*args, **kwargs)
    except REFUSALS as exc:
        messages.error(request, f"Refused: {exc}")
        return False, None
