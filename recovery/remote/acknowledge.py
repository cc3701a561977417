"""The media consumer's acknowledgement endpoint: POST /hooks/media/<job>/finished.

The consumer presents the job's token (from the handoff document it was delivered) as
`Authorization: Bearer <token>`: a header, never the URL, so no access log holds it. Idempotent
by job: the first acknowledgement is recorded (recovery.remote.handoff.consumer_finished), a
repeat answers the same time with `"first": false`. A missing, wrong or foreign token and an
unknown job get the same 403, so the endpoint tells nobody which jobs exist.
"""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from recovery.remote.handoff import HandoffError, NotAcknowledged, consumer_finished


def _bearer(request: HttpRequest) -> str:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


@csrf_exempt  # a machine's call, authenticated by its token (there is no session to forge)
@require_POST
def media_finished(request: HttpRequest, job_id: int) -> JsonResponse:
    token = _bearer(request)
    if not token:
        return JsonResponse({"error": "an Authorization: Bearer token is required"}, status=401)
    try:
        done = consumer_finished(job_id, token)
    except NotAcknowledged:
        return JsonResponse({"error": "unknown job or invalid token"}, status=403)
    except HandoffError as exc:  # a real job and its token, but nothing was handed off yet
        return JsonResponse({"error": str(exc)}, status=409)
    return JsonResponse(
        {"job": done.job, "finished_at": done.finished_at.isoformat(), "first": done.first}
    )
