"""A handed-off media job made directly (no worker): a job completed at the Tornado simulator and
the RemoteJob, Attempt and committed Task that Salvage would have recorded for it. For tests
that need a job's handoff actions (the dashboard's permission table) without running the
remote lifecycle; the lifecycle itself is tested in tests/db/test_media_handoff.py."""

from __future__ import annotations

import httpx
from django.utils import timezone

from recovery.models import Attempt, RemoteJob
from recovery.sandbox import tornado
from tests.support.factories import make_run, make_tasks
from tests.support.remote import remote_dataset

KEY = "sandbox-tornado-key"


def completed_media_job(base_url: str, *, handoff_state: str = "delivered") -> RemoteJob:
    """A media job completed at the simulator (`base_url`), its result handed off. The dataset
    names the simulator in its options, so no setting needs to."""
    created = httpx.post(
        f"{base_url}/jobs",
        json={"source_url": "http://media.test/clip"},
        headers={"X-API-Key": KEY},
        timeout=5,
    ).json()
    job_id = created["job_id"]
    answer: dict = {}
    for _ in range(5):  # the simulator completes a job after polls_to_finish lookups
        answer = httpx.get(
            f"{base_url}/jobs/{job_id}", headers={"X-API-Key": KEY}, timeout=5
        ).json()
        if answer["status"] == "completed":
            break
    dataset = remote_dataset("tornado", base_url=base_url, api_key=KEY, request_timeout=2)
    run = make_run(dataset)
    (task,) = make_tasks(run, 1, state="committed")
    attempt = Attempt.objects.create(task=task, run=run, outcome=Attempt.Outcome.SUBMITTED)
    now = timezone.now()
    return RemoteJob.objects.create(
        attempt=attempt,
        run=run,
        provider="tornado",
        kind="media",
        input_ref={"tasks": [{"id": task.pk, "url": task.url, "navigation": {}}]},
        provider_job_id=job_id,
        state="completed",
        submitted_at=now,
        result_ref=answer["result"]["object_key"],
        handoff_state=handoff_state,
        result_accepted_at=now,
    )


def serve_media():
    """The Tornado simulator on a free port, completing a job at its first lookup."""
    from tests.support.remote import serve

    served, _state = serve(tornado, polls_to_finish=0)
    return served
