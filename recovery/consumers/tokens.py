"""Personal API tokens: made by their user (or an admin, for someone else), shown once, stored
as a SHA-256, scoped to datasets, expiring, revocable; every use and refusal audited.

A token reads `slv_<prefix>_<secret>`: `prefix` is 8 random hex characters, stored in clear
to name the token in lists and in the audit log; `secret` is 32 random bytes (URL-safe
base64). Only the SHA-256 of the whole token is stored, so the database never holds a usable
token (guarantee 11), and a lookup is one indexed equality on the hash.

Refusals (`Refused`), each with the API's error code and HTTP status:
- no or an unknown token: `invalid_token` (401);
- a revoked one: `token_revoked` (401); an expired one: `token_expired` (401);
- its user inactive or without the exporter permission (`recovery.export_dataset`), checked
  at every use, so leaving the exporter role disables the user's tokens: `not_exporter` (403);
- a dataset outside its scope: `out_of_scope` (403, `check_scope`).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from recovery import audit
from recovery.consumers.models import ApiToken
from recovery.models import Dataset

SCHEME = "slv_"
EXPORTER_PERMISSION = "recovery.export_dataset"
MANAGE_PERMISSION = "consumers.manage_api_tokens"


class TokenError(ValueError):
    """A token that cannot be made or revoked as asked (bad name, scope, expiry, user)."""


class Refused(Exception):
    """A request the API refuses for its token: `code` and `status` are the API's."""

    def __init__(self, code: str, message: str, status: int, token: ApiToken | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.token = token


@dataclass(frozen=True)
class Created:
    token: ApiToken
    secret: str  # the whole token: shown once, never stored


def digest(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def prefix_of(raw: str) -> str:
    """The visible part of a presented token (for the audit of an unknown one), or ""."""
    parts = raw.split("_")
    return parts[1][:8] if raw.startswith(SCHEME) and len(parts) >= 3 else ""


def may_export(user: Any) -> bool:
    return bool(user.is_active and user.has_perm(EXPORTER_PERMISSION))


def create_token(
    user_id: int, *, name: str, datasets: list[str] | None, days: int, actor: str
) -> Created:
    """A new token for the user: `datasets` None means every dataset. Audited."""
    name = (name or "").strip()
    if not name or len(name) > 100:
        raise TokenError("name: give the token a name of 1 to 100 characters")
    most = settings.SALVAGE_API_TOKEN_MAX_DAYS
    if not 1 <= days <= most:
        raise TokenError(f"days: a token lives 1 to {most} days")
    user = get_user_model().objects.filter(pk=user_id).first()
    if user is None:
        raise TokenError(f"user {user_id} does not exist")
    if not may_export(user):
        raise TokenError(
            f"user {user.get_username()} cannot hold a token: it needs the exporter role"
        )
    scope: list[Dataset] = []
    if datasets is not None:
        if not datasets:
            raise TokenError("datasets: choose at least one dataset, or all datasets")
        found = {ds.name: ds for ds in Dataset.objects.filter(name__in=datasets)}
        missing = sorted(set(datasets) - set(found))
        if missing:
            raise TokenError(f"datasets: no dataset named {missing[0]!r}")
        scope = [found[name] for name in sorted(found)]
    prefix = secrets.token_hex(4)
    raw = f"{SCHEME}{prefix}_{secrets.token_urlsafe(32)}"
    now = timezone.now()
    with transaction.atomic():
        token = ApiToken.objects.create(
            user=user,
            name=name,
            prefix=prefix,
            token_sha256=digest(raw),
            all_datasets=datasets is None,
            created_at=now,
            created_by=actor,
            expires_at=now + timedelta(days=days),
        )
        token.datasets.set(scope)
        audit.record(
            actor,
            "api_token_created",
            token,
            "",
            user=user.get_username(),
            prefix=prefix,
            name=name,
            scope="all" if datasets is None else [ds.name for ds in scope],
            expires_at=token.expires_at.isoformat(),
        )
    return Created(token, raw)


def revoke_token(token_id: int, actor: str, *, actor_may_manage: bool, actor_id: int) -> ApiToken:
    """Revoke a token: its own user may, and an admin (MANAGE_PERMISSION) may revoke anyone's.
    A guarded UPDATE (not yet revoked): revoking twice is refused, not audited twice."""
    with transaction.atomic():
        token = ApiToken.objects.select_related("user").filter(pk=token_id).first()
        if token is None or (token.user_id != actor_id and not actor_may_manage):
            raise TokenError(f"token {token_id} does not exist")
        now = timezone.now()
        if not ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(
            revoked_at=now, revoked_by=actor
        ):
            raise TokenError(f"token {token.prefix} was already revoked")
        token.refresh_from_db()
        audit.record(
            actor,
            "api_token_revoked",
            token,
            "",
            user=token.user.get_username(),
            prefix=token.prefix,
            name=token.name,
        )
    return token


def authenticate(raw: str) -> ApiToken:
    """The token a request presents, or Refused. Marks it used."""
    token = None
    if raw.startswith(SCHEME):
        token = ApiToken.objects.select_related("user").filter(token_sha256=digest(raw)).first()
    if token is None:
        raise Refused("invalid_token", "the token is not valid", 401)
    now = timezone.now()
    if token.revoked_at is not None:
        raise Refused("token_revoked", f"token {token.prefix} was revoked", 401, token)
    if token.expires_at <= now:
        raise Refused("token_expired", f"token {token.prefix} has expired", 401, token)
    if not may_export(token.user):
        raise Refused(
            "not_exporter",
            f"user {token.user.get_username()} no longer has the exporter role",
            403,
            token,
        )
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token


def scoped_datasets(token: ApiToken) -> QuerySet[Dataset]:
    if token.all_datasets:
        return Dataset.objects.all()
    return Dataset.objects.filter(pk__in=token.datasets.values("pk"))


def check_scope(token: ApiToken, dataset: Dataset) -> None:
    if not token.all_datasets and not token.datasets.filter(pk=dataset.pk).exists():
        raise Refused(
            "out_of_scope",
            f"token {token.prefix} may not read dataset {dataset.name}",
            403,
            token,
        )


def record_request(
    token: ApiToken | None, presented_prefix: str, *, method: str, path: str, status: int, code: str
) -> None:
    """The audit entry of one API request: who (the token's user), with which token, what,
    and the answer. Refusals (401, 403) are `api_refused`, everything else `api_request`."""
    action = "api_refused" if status in (401, 403) else "api_request"
    actor = token.user.get_username() if token is not None else "anonymous"
    audit.record(
        actor,
        action,
        token,
        code,
        token=token.prefix if token is not None else presented_prefix,
        method=method,
        path=path[:500],
        status=status,
    )


def tokens_for(user: AbstractBaseUser | AnonymousUser, *, every_user: bool) -> QuerySet[ApiToken]:
    """The tokens a person sees on the tokens page: their own, or every user's for an admin."""
    tokens = ApiToken.objects.select_related("user").prefetch_related("datasets")
    if not every_user:
        if user.pk is None:
            return tokens.none()
        tokens = tokens.filter(user_id=user.pk)
    return tokens.order_by("-created_at", "-pk")
