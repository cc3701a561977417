"""Outbox delivery: file drop, HTTP with idempotency key, uncertain -> lookup, fencing."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from recovery.delivery import outbox
from recovery.models import AuditEntry, OutboxEvent
from recovery.quality import acceptance
from recovery.sandbox.destination import STATE_KEY, make_app
from recovery.sandbox.runner import start_in_thread
from tests.support.acceptance import make_collected_run

pytestmark = pytest.mark.django_db


def accepted_event() -> OutboxEvent:
    run = make_collected_run({"a": "good"}, per_partition=3)
    acceptance.advance_runs()
    acceptance.accept_run(run.pk, "admin")
    return OutboxEvent.objects.get(run=run)


def later(seconds: float = 3600):
    return timezone.now() + timedelta(seconds=seconds)


@pytest.fixture
def file_drop(settings, tmp_path):
    settings.SALVAGE_DESTINATION = f"file://{tmp_path}/drop"
    settings.SALVAGE_OUTBOX_WAKE = False
    return tmp_path / "drop"


@pytest.fixture
def destination(settings):
    app = make_app(idempotent=False, slow_seconds=1.5)
    served = start_in_thread(app)
    settings.SALVAGE_DESTINATION = f"{served.base_url}/"
    settings.SALVAGE_DELIVERY_TIMEOUT = 0.4
    settings.SALVAGE_OUTBOX_WAKE = False
    yield app[STATE_KEY]
    served.stop()


def test_it_drops_a_whole_file_once(file_drop):
    event = accepted_event()
    assert outbox.deliver_due() == 1
    event.refresh_from_db()
    assert event.state == "delivered" and event.attempts == 1
    files = list(file_drop.iterdir())
    assert [f.name for f in files] == [f"{event.pk}.json"]  # no temp file left behind
    doc = json.loads(files[0].read_text())
    assert doc["event_id"] == str(event.pk) and doc["event_type"] == "accepted"
    assert outbox.deliver_due(now=later()) == 0
    with pytest.raises(outbox.DeliveryError, match="already delivered"):
        outbox.retry_delivery(event.pk, "admin")


def test_it_sends_the_event_id_as_idempotency_key(destination):
    event = accepted_event()
    assert outbox.deliver_due() == 1
    event.refresh_from_db()
    assert event.state == "delivered"
    assert destination.by_key[str(event.pk)]["event_id"] == str(event.pk)
    assert destination.puts[str(event.pk)] == 1


def test_it_looks_up_an_uncertain_write_instead_of_writing_twice(destination):
    """Seed 002: a destination that times out after the write -> check the key, no resend."""
    event = accepted_event()
    destination.arm(slow_after_write=1)
    outbox.deliver_due()
    event.refresh_from_db()
    assert event.state == "uncertain", event.last_error
    assert destination.records_for(str(event.pk)) == 1  # the write did happen

    assert outbox.deliver_due(now=later()) == 1
    event.refresh_from_db()
    assert event.state == "delivered"
    assert destination.lookups[str(event.pk)] == 1
    assert destination.puts[str(event.pk)] == 1  # never re-sent
    assert destination.records_for(str(event.pk)) == 1  # a naive importer holds one copy


def test_it_resends_after_a_5xx(destination):
    event = accepted_event()
    destination.arm(error_5xx=1)
    outbox.deliver_due()
    event.refresh_from_db()
    assert event.state == "failed" and "503" in event.last_error
    assert event.next_attempt_at > timezone.now() - timedelta(seconds=1)
    assert outbox.deliver_due(now=later()) == 1
    event.refresh_from_db()
    assert event.state == "delivered"
    assert destination.records_for(str(event.pk)) == 1


def test_it_treats_a_dropped_connection_as_uncertain_and_sends_when_the_key_is_absent(
    destination,
):
    event = accepted_event()
    destination.arm(drop=1)
    outbox.deliver_due()
    event.refresh_from_db()
    assert event.state == "uncertain"
    outbox.deliver_due(now=later())
    event.refresh_from_db()
    assert event.state == "delivered"
    assert destination.lookups[str(event.pk)] == 1
    assert destination.records_for(str(event.pk)) == 1


def test_a_stale_sender_cannot_record_a_result(file_drop):
    event = accepted_event()
    now = timezone.now()
    assert outbox._claim(event.pk, "unsent", 0, now)
    # The lease expires and another sender claims the event (attempt 2).
    assert outbox._claim(event.pk, "sending", 1, now + timedelta(seconds=3600))
    assert not outbox._finish(event.pk, 1, "failed", last_error="stale")
    assert outbox._finish(event.pk, 2, "delivered")


def test_a_crashed_sender_is_looked_up_after_its_lease(file_drop, settings):
    event = accepted_event()
    assert outbox._claim(event.pk, "unsent", 0, timezone.now())
    # Crashed after writing the file, before recording "delivered".
    outbox.destination_for().send(str(event.pk), outbox.document(event))
    assert outbox.deliver_due() == 0  # lease still held
    assert outbox.deliver_due(now=later()) == 1
    event.refresh_from_db()
    assert event.state == "delivered" and event.attempts == 2


@pytest.mark.parametrize("write_landed", [True, False])
def test_an_event_left_sending_with_an_expired_lease_is_looked_up_before_any_resend(
    destination, write_landed
):
    """A sender crashed between its claim and its result (so the event stays `sending`). After
    the lease, the next sender asks the destination by key first: a write that landed is not
    written again; one that did not is sent once. The HTTP destination here is not
    idempotent, so a skipped lookup would show as a second PUT."""
    event = accepted_event()
    assert outbox._claim(event.pk, "unsent", 0, timezone.now())
    if write_landed:
        outbox.destination_for().send(str(event.pk), outbox.document(event))
    assert outbox.deliver_due() == 0  # the crashed sender's lease still holds it
    assert outbox.deliver_due(now=later()) == 1
    event.refresh_from_db()
    assert event.state == "delivered" and event.attempts == 2
    assert destination.lookups[str(event.pk)] == 1  # looked up...
    assert destination.puts[str(event.pk)] == 1  # ...so written exactly once either way
    assert destination.records_for(str(event.pk)) == 1


def test_retry_and_lookup_are_audited(destination):
    event = accepted_event()
    destination.arm(error_5xx=1)
    outbox.deliver_due()
    outbox.retry_delivery(event.pk, "ops")
    event.refresh_from_db()
    assert event.next_attempt_at <= timezone.now()
    result = outbox.lookup_delivery(event.pk, "ops")
    assert result["found"] is False and result["state"] == "failed"
    outbox.deliver_due()
    assert outbox.lookup_delivery(event.pk, "ops")["state"] == "delivered"
    actions = set(
        AuditEntry.objects.filter(object_id=str(event.pk)).values_list("action", flat=True)
    )
    assert actions == {"retry_delivery", "lookup_delivery"}


def test_lookup_marks_an_arrived_event_delivered(destination):
    event = accepted_event()
    destination.arm(slow_after_write=1)
    outbox.deliver_due()
    result = outbox.lookup_delivery(str(event.pk), "ops")
    assert result == {"event": str(event.pk), "found": True, "state": "delivered", "error": ""}
    assert destination.puts[str(event.pk)] == 1


def test_bad_event_ids_are_refused():
    with pytest.raises(outbox.DeliveryError, match="not a valid event id"):
        outbox.retry_delivery("nope", "ops")
    with pytest.raises(outbox.DeliveryError, match="does not exist"):
        outbox.lookup_delivery("00000000-0000-0000-0000-000000000000", "ops")


# --- destinations that carry credentials (guarantee 11) --------------------------------------

CREDENTIALED = "https://deliver:s3cret-pw@importer.example/in?api_token=tok-SECRET-42"


def test_public_label_drops_user_password_and_query():
    assert outbox.public_label(CREDENTIALED) == "https://importer.example/in"
    assert outbox.public_label("http://u:p@[::1]:8443/x/?k=v#f") == "http://[::1]:8443/x/"
    assert outbox.public_label("file:///srv/drop") == "file:///srv/drop"
    assert outbox.public_label("http://[bad") == "[unparsable destination]"


def test_an_event_stores_its_destination_without_the_credentials(settings):
    settings.SALVAGE_DESTINATION = CREDENTIALED
    settings.SALVAGE_OUTBOX_WAKE = False
    event = accepted_event()
    assert event.destination == "https://importer.example/in"
    # The label names the configured URL, credentials and all, when the event is sent.
    assert outbox.destination_for(event.destination).base_url == CREDENTIALED


def test_a_credentialed_destination_still_receives_the_event(destination, settings):
    base = settings.SALVAGE_DESTINATION
    settings.SALVAGE_DESTINATION = base.replace("http://", "http://deliver:s3cret-pw@", 1)
    event = accepted_event()
    assert "s3cret" not in event.destination
    assert outbox.deliver_due() == 1
    event.refresh_from_db()
    assert event.state == "delivered"
    assert destination.puts[str(event.pk)] == 1


def test_the_deliveries_page_never_shows_a_credential(client, settings):
    from django.contrib.auth.models import Group, User

    from dashboard import roles

    settings.SALVAGE_OUTBOX_WAKE = False
    event = accepted_event()
    # A row written before labels were public keeps the whole URL: the page must still hide it.
    OutboxEvent.objects.filter(pk=event.pk).update(destination=CREDENTIALED)
    user = User.objects.create_user("olivia", password="pw-olivia-1")
    user.groups.add(Group.objects.get(name=roles.OPERATOR))
    client.force_login(user)
    page = client.get("/deliveries/")
    assert page.status_code == 200
    body = page.content.decode()
    assert "importer.example/in" in body
    assert "s3cret" not in body and "tok-SECRET" not in body and "deliver:" not in body
