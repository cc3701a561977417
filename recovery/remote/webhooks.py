"""Provider notifications: Web Scraper Cloud's final-status webhook.

Web Scraper Cloud does not sign its notifications, so the endpoint's path carries a secret
(WEBSCRAPER_WEBHOOK_SECRET), compared in constant time; a wrong or missing secret is a 404 and
nothing is stored. The form body (scrapingjob_id, status, sitemap_id, sitemap_name, custom_id)
is only a hint. A body that is not a well-formed form of those fields is a 400 and nothing is
stored (`parse_notification`); a body over MAX_BODY is a 413, chunked or not (`read_body`).
A well-formed one is kept, redacted, as a WebhookReceipt, and the job is made due for a
synchronisation that confirms the status through the API before importing anything
(recovery.remote). The answer is a prompt 200, so the service does not resend for nothing;
repeated and out-of-order notifications only make the job due again, and a re-synchronisation
is idempotent (a Continue's new rows are added, nothing is imported twice).
"""

from __future__ import annotations

import hmac
import io
import logging
import re
from typing import Any
from urllib.parse import parse_qsl

from django.conf import settings
from django.core.exceptions import TooManyFieldsSent
from django.core.files.uploadhandler import MemoryFileUploadHandler
from django.db import transaction
from django.http import Http404, HttpRequest, JsonResponse
from django.http.multipartparser import MultiPartParser, MultiPartParserError
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from recovery import remote
from recovery.models import RemoteJob, WebhookReceipt
from recovery.ops import logs

log = logging.getLogger(__name__)

FIELDS = ("scrapingjob_id", "status", "sitemap_id", "sitemap_name", "custom_id")
MAX_BODY = 16 * 1024  # the real notification is a few hundred bytes
MAX_VALUE = 200  # characters per documented field
MAX_FIELDS = 20
FORM = "application/x-www-form-urlencoded"  # what Web Scraper Cloud sends
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_JOB_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


class BadNotification(ValueError):
    """A body that is not a well-formed notification (the message names what is wrong)."""


class BodyTooLarge(ValueError):
    pass


def secret_matches(given: str) -> bool:
    expected = settings.WEBSCRAPER_WEBHOOK_SECRET or ""
    if not expected:
        return False  # no secret configured: the endpoint does not exist
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))


def read_body(request: HttpRequest) -> bytes:
    """The request body, at most MAX_BODY bytes (BodyTooLarge past it), with or without a
    Content-Length. A chunked body has none, and Django then reads nothing at all: it is read
    here from the server's input stream, which gunicorn de-chunks, up to the cap."""
    declared = request.META.get("CONTENT_LENGTH") or ""
    if declared:
        if not declared.isdigit():
            raise BadNotification("Content-Length is not a number")
        if int(declared) > MAX_BODY:
            raise BodyTooLarge
        body = request.body
        # A client that stops sending early leaves a short body (gunicorn hands over what
        # came before the connection ended): a truncated notification is no notification.
        if len(body) < int(declared):
            raise BadNotification(
                f"the body is shorter ({len(body)} bytes) than its Content-Length ({declared})"
            )
    elif "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower():
        body = request.META["wsgi.input"].read(MAX_BODY + 1)
    else:
        body = b""
    if len(body) > MAX_BODY:
        raise BodyTooLarge
    return body


def parse_notification(content_type: str, body: bytes, meta: dict[str, Any]) -> dict[str, str]:
    """The documented fields of a well-formed form body; BadNotification otherwise.

    Well-formed: form-urlencoded (the documented encoding; multipart is read too), UTF-8, no
    field repeated, no control character, each value at most MAX_VALUE characters, and a
    scrapingjob_id. Unknown fields are ignored (the service may add some); nothing from a body
    that fails any check is stored."""
    if content_type == FORM:
        try:
            text = body.decode("utf-8")
            pairs = parse_qsl(
                text,
                keep_blank_values=True,
                strict_parsing=bool(text),
                errors="strict",
                max_num_fields=MAX_FIELDS,
            )
        except UnicodeDecodeError:
            raise BadNotification("the body is not UTF-8") from None
        except ValueError as exc:
            raise BadNotification(f"the body is not a form: {exc}") from None
    elif content_type == "multipart/form-data":
        pairs = _multipart_pairs(body, meta)
    else:
        raise BadNotification(f"Content-Type {content_type or '(none)'!r} is not {FORM}")
    fields: dict[str, str] = {}
    for name, value in pairs:
        if name not in FIELDS:
            continue
        if name in fields:
            raise BadNotification(f"{name} is given more than once")
        if _CONTROL.search(value):
            raise BadNotification(f"{name} holds a control character")
        if len(value) > MAX_VALUE:
            raise BadNotification(f"{name} is longer than {MAX_VALUE} characters")
        if value:
            fields[name] = logs.redact(value)
    if not _JOB_ID.fullmatch(fields.get("scrapingjob_id", "")):
        raise BadNotification("scrapingjob_id is missing or not a job id")
    return fields


def _multipart_pairs(body: bytes, meta: dict[str, Any]) -> list[tuple[str, str]]:
    # Django's parser reads a body cut off before its closing delimiter as if it were whole
    # (the last field's value simply ends where the bytes do): refuse it instead.
    boundary = _boundary(meta.get("CONTENT_TYPE", ""))
    if boundary and not re.search(b"(^|\r?\n)--" + re.escape(boundary) + b"--", body):
        raise BadNotification("the multipart body has no closing boundary (cut off?)")
    meta = {**meta, "CONTENT_LENGTH": str(len(body))}
    try:
        # A memory handler so that file parts show up (to be refused) instead of vanishing.
        handlers = [MemoryFileUploadHandler()]
        form, files = MultiPartParser(meta, io.BytesIO(body), handlers, "utf-8").parse()
    except (MultiPartParserError, TooManyFieldsSent, UnicodeDecodeError) as exc:
        raise BadNotification(f"the multipart body is broken: {exc}") from None
    if files:
        raise BadNotification("a notification carries no files")
    return [(name, value) for name, values in form.lists() for value in values]


def _boundary(content_type: str) -> bytes:
    for param in content_type.split(";")[1:]:
        name, _, value = param.strip().partition("=")
        if name.lower() == "boundary":
            return value.strip().strip('"').encode("latin-1", "replace")
    return b""


def receive_webscraper(fields: dict[str, str]) -> WebhookReceipt:
    """Store the hint and make the named job due for a synchronisation (one transaction)."""
    job_id = fields.get("scrapingjob_id", "")
    with transaction.atomic():
        job = (
            RemoteJob.objects.filter(provider="webscraper", provider_job_id=job_id).first()
            if job_id
            else None
        )
        receipt = WebhookReceipt.objects.create(
            provider="webscraper",
            provider_job_id=job_id,
            status=fields.get("status", "")[:32],
            body=fields,
            job=job,
        )
        if job is not None:
            remote.mark_due(job.pk)
    if job is None and job_id:
        # The submitter may have saved this id since the lookup above (see
        # remote.adopt_early_receipts: whoever commits last attaches the receipt).
        job = RemoteJob.objects.filter(provider="webscraper", provider_job_id=job_id).first()
        if job is not None and remote.adopt_early_receipts(job.pk, "webscraper", job_id):
            receipt.refresh_from_db()
    if job is None:
        # Kept for the operator: a notification for a job whose id we never saved is the
        # evidence that resolves an `unknown` submission (custom_id names our run).
        log.warning("webscraper notification for unknown job %s (receipt %s)", job_id, receipt.pk)
    return receipt


@csrf_exempt
@require_POST
def webscraper_webhook(request: HttpRequest, secret: str) -> JsonResponse:
    if not secret_matches(secret):
        raise Http404  # indistinguishable from a path that does not exist
    try:
        fields = parse_notification(request.content_type or "", read_body(request), request.META)
    except BodyTooLarge:
        return JsonResponse({"error": f"body over {MAX_BODY} bytes"}, status=413)
    except BadNotification as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    receipt = receive_webscraper(fields)
    return JsonResponse({"ok": True, "receipt": receipt.pk})
