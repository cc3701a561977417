"""Provider notifications: Web Scraper Cloud's final-status webhook.

Web Scraper Cloud does not sign its notifications, so the endpoint's path carries a secret
(WEBSCRAPER_WEBHOOK_SECRET), compared in constant time; a wrong or missing secret is a 404 and
nothing is stored. The form body (scrapingjob_id, status, sitemap_id, sitemap_name, custom_id)
is only a hint: it is kept, sanitised, as a WebhookReceipt, and the job is made due for a
synchronisation that confirms the status through the API before importing anything
(recovery.remote). The answer is a prompt 200, so the service does not resend for nothing;
repeated and out-of-order notifications only make the job due again, and a re-synchronisation
is idempotent (a Continue's new rows are added, nothing is imported twice).
"""

from __future__ import annotations

import hmac
import logging
import re
from urllib.parse import parse_qs

from django.conf import settings
from django.db import transaction
from django.http import Http404, HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from recovery import logs, remote
from recovery.models import RemoteJob, WebhookReceipt

log = logging.getLogger(__name__)

FIELDS = ("scrapingjob_id", "status", "sitemap_id", "sitemap_name", "custom_id")
MAX_BODY = 16 * 1024  # the real notification is a few hundred bytes
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def secret_matches(given: str) -> bool:
    expected = settings.WEBSCRAPER_WEBHOOK_SECRET or ""
    if not expected:
        return False  # no secret configured: the endpoint does not exist
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))


def sanitise_form(form) -> dict[str, str]:
    """Only the documented fields, as short single-line text without credentials.

    `form` is a QueryDict (request.POST: form-urlencoded as documented, multipart tolerated),
    or raw urlencoded bytes."""
    if isinstance(form, bytes):
        form = parse_qs(form.decode("utf-8", errors="replace"), keep_blank_values=True)
        form = {k: v[0] for k, v in form.items() if v}
    clean = {}
    for name in FIELDS:
        value = form.get(name)
        if value:
            clean[name] = logs.redact(_CONTROL.sub("", str(value)))[:200]
    return clean


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
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    if length > MAX_BODY:
        return JsonResponse({"error": "body too large"}, status=413)
    if len(request.body) > MAX_BODY:
        return JsonResponse({"error": "body too large"}, status=413)
    receipt = receive_webscraper(sanitise_form(request.POST))
    return JsonResponse({"ok": True, "receipt": receipt.pk})
