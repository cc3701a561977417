"""Incidents: a provider's terminal error kept whole, sanitised (seed 001 §04: "retain the code
and the complete sanitised response ... the endpoint, HTTP status, UTC time, request options
and result body, with credentials removed")."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from recovery.models.remote import RemoteJob
from recovery.models.runs import Run
from recovery.models.tasks import Attempt, Task


class Incident(models.Model):
    """One terminal error answer of a provider, as received and sanitised (recovery.ops.sanitise:
    no credential, token or cookie), with the job, attempt and run it belongs to. Written by
    recovery.ops.incidents in the transaction that records what the answer meant; removed with
    its run's artefacts (manage.py pruneartefacts)."""

    class Source(models.TextChoices):
        SUBMIT = "submit", "create call"
        STATUS = "status", "status check"
        RESULT = "result", "result file"
        SITEMAP = "sitemap", "sitemap"
        PAGE = "page", "page response"

    provider = models.CharField(max_length=32)
    source = models.CharField(max_length=16, choices=Source.choices)
    # What the answer meant here (an error class, a job state), and a line saying so.
    outcome = models.CharField(max_length=32, blank=True)
    detail = models.TextField(blank=True)
    method = models.CharField(max_length=10, blank=True)
    endpoint = models.TextField(blank=True)  # the URL, credentials redacted
    http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    occurred_at = models.DateTimeField(default=timezone.now)  # UTC, as every datetime here
    request_options = models.JSONField(default=dict, blank=True)  # sanitised
    response_headers = models.JSONField(default=dict, blank=True)  # sanitised
    response_body = models.TextField(blank=True)  # sanitised, at most ops.sanitise.BODY_CAP
    body_truncated = models.BooleanField(default=False)
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, null=True, blank=True, related_name="incidents"
    )
    remote_job = models.ForeignKey(
        RemoteJob, on_delete=models.CASCADE, null=True, blank=True, related_name="incidents"
    )
    attempt = models.ForeignKey(
        Attempt, on_delete=models.SET_NULL, null=True, blank=True, related_name="incidents"
    )
    task = models.ForeignKey(
        Task, on_delete=models.SET_NULL, null=True, blank=True, related_name="incidents"
    )

    class Meta:
        indexes = [
            # The Incidents list, newest first (dashboard.lists.INCIDENTS), and its filters by
            # provider and by run, each a range read in the list's order.
            models.Index(fields=["occurred_at", "id"], name="incident_time_idx"),
            models.Index(fields=["provider", "occurred_at", "id"], name="incident_provider_idx"),
            models.Index(fields=["run", "occurred_at", "id"], name="incident_run_idx"),
        ]
