"""The API's one error shape: `{"error": {"code": ..., "message": ...}}`, for every refusal.

DRF's own exceptions (authentication, permission, throttling, not found, bad method) keep
their status and headers (`WWW-Authenticate`, `Retry-After`); only the body is reshaped. The
codes are listed in docs/api.md.
"""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler


class ApiError(exceptions.APIException):
    """A refusal with a code of ours (bad cursor, no current run, export failed, ...)."""

    def __init__(self, code: str, message: str, http_status: int = status.HTTP_400_BAD_REQUEST):
        super().__init__(message, code)
        self.status_code = http_status


def body(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


def _message(detail: Any) -> str:
    if isinstance(detail, dict):
        return "; ".join(f"{key}: {_message(value)}" for key, value in detail.items())
    if isinstance(detail, list):
        return "; ".join(_message(item) for item in detail)
    return str(detail)


def _code(exc: exceptions.APIException) -> str:
    codes = exc.get_codes()
    if isinstance(codes, str):
        return codes
    return exc.default_code


def handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    response = exception_handler(exc, context)
    if response is None or not isinstance(exc, exceptions.APIException):
        return response  # an unexpected error: Django's 500
    response.data = body(_code(exc), _message(exc.detail))
    return response
