"""Bearer tokens (recovery.consumers.tokens decides), the per-token rate limit, JSON only.

`Authorization: Bearer slv_...` is the only way in: no session, no cookie, so no CSRF to
guard (and the API only reads). A refused token's reason travels as the error code
(`invalid_token`, `token_revoked`, `token_expired`: 401; `not_exporter`: 403).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

from recovery.consumers import tokens


class BearerTokenAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not header:
            return None
        scheme, _, raw = header.partition(" ")
        raw = raw.strip()
        if scheme.lower() != "bearer" or not raw:
            raise exceptions.AuthenticationFailed(
                "use the header Authorization: Bearer <token>", code="invalid_token"
            )
        request.salvage_prefix = tokens.prefix_of(raw)  # type: ignore[attr-defined]
        try:
            token = tokens.authenticate(raw)
        except tokens.Refused as refused:
            request.salvage_token = refused.token  # type: ignore[attr-defined]
            if refused.status == 401:
                raise exceptions.AuthenticationFailed(refused.message, code=refused.code) from None
            raise exceptions.PermissionDenied(refused.message, code=refused.code) from None
        request.salvage_token = token  # type: ignore[attr-defined]
        return token.user, token

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="salvage"'


class BearerTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    """How the OpenAPI document names the one way in (drf-spectacular finds it by subclassing)."""

    target_class = "api.auth.BearerTokenAuthentication"
    name = "bearerToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "description": "a personal API token"}


class HasToken(BasePermission):
    def has_permission(self, request: Request, view: Any) -> bool:
        return request.auth is not None


class TokenRateThrottle(SimpleRateThrottle):
    """SALVAGE_API_RATE requests per token (per address without one), in the shared cache."""

    scope = "token"

    def get_rate(self) -> str:
        return str(settings.SALVAGE_API_RATE)

    def get_cache_key(self, request: Request, view: Any) -> str:
        ident = f"t{request.auth.pk}" if request.auth is not None else self.get_ident(request)
        return self.cache_format % {"scope": self.scope, "ident": ident}


class JsonOnly(BaseContentNegotiation):
    """The first renderer, whatever the Accept header says: downloads answer with their own
    types, and a client asking for text/csv must not get 406 before the view runs."""

    def select_parser(self, request: Request, parsers: list[Any]) -> Any:
        return parsers[0] if parsers else None

    def select_renderer(
        self, request: Request, renderers: list[Any], format_suffix: str | None = None
    ) -> tuple[Any, str]:
        return renderers[0], renderers[0].media_type
