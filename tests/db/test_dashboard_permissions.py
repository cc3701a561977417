"""Every dashboard view and POST against every role: the server refuses what the role lacks.

For each page: anonymous -> login redirect; each role without the permission -> 403; each role
with it -> 200. For each POST: anonymous -> login redirect and nothing changed; forged by a role
without the permission -> 403 and nothing changed; with the permission -> the engine's change
happened; without a CSRF token -> 403 and nothing changed. A dashboard URL missing from these
tables fails the test, so a new view cannot skip the matrix.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import get_resolver, reverse
from django.utils import timezone

from dashboard.models import ViewerSettings
from recovery.consumers.models import ApiToken
from recovery.fetch import artefacts
from recovery.models import (
    Attempt,
    AuditEntry,
    Dataset,
    Incident,
    OutboxEvent,
    RecoveryBatch,
    RemoteJob,
    Run,
    RunPartition,
    Schedule,
    Task,
    TriageNote,
)
from tests.support.browser_provider import screenshot_attempt
from tests.support.demo import make_demo_candidate
from tests.support.media import completed_media_job, serve_media
from tests.support.uploads import SHOP_SPEC
from tests.support.world import XSS_SCRIPT, XSS_URL, World, make_users, make_world

ROLES = ("operator", "admin", "exporter", "nobody")
VIEWERS = {"operator", "admin"}


@dataclass
class Page:
    kwargs: Callable[[World], dict] = lambda w: {}
    allowed: set[str] = field(default_factory=lambda: set(VIEWERS))
    ok_status: int = 200


@dataclass
class Post:
    kwargs: Callable[[World], dict]
    data: dict | Callable[[], dict]  # a callable makes fresh upload files for each request
    allowed: set[str]
    happened: Callable[[World], bool]
    # A bulk action's selected rows ({"pk": [...]}), which only the world knows.
    selected: Callable[[World], dict] | None = None

    def body(self, w: World) -> dict:
        data = self.data() if callable(self.data) else self.data
        return {**data, **self.selected(w)} if self.selected else data


PAGES: dict[str, Page] = {
    "dashboard:home": Page(allowed={"operator", "admin", "exporter"}, ok_status=302),
    "dashboard:attention": Page(),
    "dashboard:runs": Page(),
    "dashboard:run": Page(lambda w: {"run_id": w.run.pk}),
    "dashboard:quarantine": Page(lambda w: {"run_id": w.run.pk}),
    "dashboard:run_tasks": Page(lambda w: {"run_id": w.run.pk}),
    "dashboard:batch": Page(lambda w: {"batch_id": _batch(w).pk}),
    "dashboard:reconcile": Page(),
    "dashboard:incidents": Page(),
    "dashboard:incidents_csv": Page(),
    "dashboard:incident": Page(lambda w: {"incident_id": _incident(w).pk}),
    "dashboard:task": Page(lambda w: {"task_id": w.quarantined_task.pk}),
    "dashboard:attempt_screenshot": Page(
        lambda w: {
            "task_id": w.quarantined_task.pk,
            "attempt_id": screenshot_attempt(w.quarantined_task).pk,
        }
    ),
    "dashboard:attempt_rendered_html": Page(
        lambda w: {
            "task_id": w.quarantined_task.pk,
            "attempt_id": screenshot_attempt(
                w.quarantined_task, rendered_html=artefacts.store(b"<p>rendered</p>", "html")
            ).pk,
        }
    ),
    "dashboard:deliveries": Page(),
    "dashboard:workers": Page(),
    "dashboard:exports": Page(allowed={"exporter"}),
    "dashboard:data_home": Page(allowed={"exporter"}),
    # Exporters manage their own tokens, admins everyone's.
    "dashboard:api_tokens": Page(allowed={"exporter", "admin"}),
    "dashboard:account_settings": Page(allowed={"operator", "admin", "exporter"}),
    # adam, the admin, accepted this run: an admin downloads what they accepted
    # (test_data_downloads: and no other run).
    "dashboard:export_download": Page(
        lambda w: {"run_id": w.accepted.pk, "fmt": "csv"}, allowed={"exporter", "admin"}
    ),
    "dashboard:audit": Page(allowed={"admin"}),
    "dashboard:datasets": Page(),
    "dashboard:dataset": Page(lambda w: {"name": w.run.dataset.name}),
    "dashboard:demo": Page(allowed={"operator", "admin", "exporter"}),
    "dashboard:glossary": Page(),
    # Each list's CSV export is its page's view: exactly the page's permissions.
    "dashboard:runs_csv": Page(),
    "dashboard:run_tasks_csv": Page(lambda w: {"run_id": w.run.pk}),
    "dashboard:quarantine_csv": Page(lambda w: {"run_id": w.run.pk}),
    "dashboard:reconcile_csv": Page(),
    "dashboard:deliveries_csv": Page(),
    "dashboard:workers_csv": Page(),
    "dashboard:exports_csv": Page(allowed={"exporter"}),
    "dashboard:audit_csv": Page(allowed={"admin"}),
    "dashboard:datasets_csv": Page(),
    "dashboard:schedules": Page(),
    "dashboard:schedules_csv": Page(),
    "dashboard:schedule_add": Page(allowed={"admin"}),
    "dashboard:schedule_edit": Page(lambda w: {"schedule_id": _schedule(w).pk}, allowed={"admin"}),
    # Confirmation pages: a GET (or an unconfirmed POST) shows the consequences, changes nothing.
    "dashboard:run_accept": Page(lambda w: {"run_id": w.candidate.pk}, allowed={"admin"}),
    "dashboard:run_reject": Page(lambda w: {"run_id": w.candidate.pk}, allowed={"admin"}),
    "dashboard:run_publish": Page(lambda w: {"run_id": w.accepted.pk}, allowed={"admin"}),
    "dashboard:reconcile_replace": Page(lambda w: {"job_id": w.job.pk}),
    "dashboard:reconcile_dismiss": Page(lambda w: {"job_id": w.job.pk}),
    "dashboard:media_regenerate": Page(
        lambda w: {"job_id": _media("missing").pk}, allowed={"admin"}
    ),
    "dashboard:schedule_remove": Page(
        lambda w: {"schedule_id": _schedule(w).pk}, allowed={"admin"}
    ),
    "dashboard:schedule_backfill": Page(
        lambda w: {"schedule_id": _schedule(w).pk}, allowed={"admin"}
    ),
}


def _token(w: World) -> ApiToken:
    # Made without the engine (no audit entry): it exists before any snapshot is taken.
    token, _ = ApiToken.objects.get_or_create(
        prefix="0badc0de",
        defaults={
            "user": w.users["exporter"],
            "name": "warehouse",
            "token_sha256": "0" * 64,
            "all_datasets": True,
            "created_by": "erin",
            "expires_at": timezone.now() + timedelta(days=30),
        },
    )
    return token


def _media(kind: str) -> RemoteJob:
    # The world fixture's media jobs: first one handed off, then one whose file is missing.
    delivered, missing = RemoteJob.objects.filter(provider="tornado").order_by("pk")
    return delivered if kind == "delivered" else missing


def _incident(w: World) -> Incident:
    return Incident.objects.create(
        run=w.run, provider="messora", source="status", http_status=404, endpoint="http://x/jobs/1"
    )


def _batch(w: World) -> RecoveryBatch:
    return RecoveryBatch.objects.create(
        run=w.run, selection={"partitions": ["beta.test"]}, reason="r", scraper_version="2"
    )


def _beta_tasks(w: World) -> list[int]:
    return list(
        Task.objects.filter(run=w.run, partition="beta.test", state="quarantined").values_list(
            "pk", flat=True
        )
    )


def _audited(action: str) -> Callable[[World], bool]:
    return lambda w: AuditEntry.objects.filter(action=action).exists()


def _schedule(w: World) -> Schedule:
    schedule, _ = Schedule.objects.get_or_create(
        dataset=w.run.dataset,
        name="nightly",
        defaults={"kind": "daily", "at_time": "06:00", "manifest_source": "previous"},
    )
    return schedule


SCHEDULE_FORM = {
    "repeat": "weekly",
    "at": "05:30",
    "weekday": "tue",
    "tz": "Europe/London",
    "window_format": "%G-W%V",
    "manifest": "previous",
    "catch_up": "each",
    "catch_up_max": "3",
}

POSTS: dict[str, Post] = {
    # Every role sets its own time zone (a preference: not audited).
    "dashboard:account_settings": Post(
        lambda w: {},
        {"time_zone": "Europe/London"},
        {"operator", "admin", "exporter"},
        lambda w: ViewerSettings.objects.filter(time_zone="Europe/London").exists(),
    ),
    "dashboard:api_token_create": Post(
        lambda w: {},
        {"name": "nightly sync", "days": "30", "all_datasets": "on"},
        {"exporter", "admin"},
        lambda w: (
            ApiToken.objects.filter(name="nightly sync", user__username="erin").exists()
            and AuditEntry.objects.filter(action="api_token_created").exists()
        ),
        # An admin makes it for the exporter; an exporter's own form has no user field.
        selected=lambda w: {"user": w.users["exporter"].pk},
    ),
    "dashboard:api_token_revoke": Post(
        lambda w: {"token_id": _token(w).pk},
        {"confirmed": "1"},
        {"exporter", "admin"},
        lambda w: (
            ApiToken.objects.filter(prefix="0badc0de", revoked_at__isnull=False).exists()
            and AuditEntry.objects.filter(action="api_token_revoked").exists()
        ),
    ),
    "dashboard:schedule_add": Post(
        lambda w: {},
        {**SCHEDULE_FORM, "dataset": "shop", "name": "weekly"},
        {"admin"},
        lambda w: (
            Schedule.objects.filter(name="weekly", weekday=2, catch_up_max=3).exists()
            and AuditEntry.objects.filter(action="schedule_added").exists()
        ),
    ),
    "dashboard:schedule_edit": Post(
        lambda w: {"schedule_id": _schedule(w).pk},
        SCHEDULE_FORM,
        {"admin"},
        lambda w: (
            Schedule.objects.filter(
                name="nightly", kind="weekly", time_zone="Europe/London"
            ).exists()
            and AuditEntry.objects.filter(action="schedule_changed").exists()
        ),
    ),
    "dashboard:schedule_remove": Post(
        lambda w: {"schedule_id": _schedule(w).pk},
        {"reason": "site closed", "confirmed": "1"},
        {"admin"},
        lambda w: (
            not Schedule.objects.filter(name="nightly").exists()
            and AuditEntry.objects.filter(action="schedule_removed", reason="site closed").exists()
        ),
    ),
    # The world's runs have these windows: the backfill adopts them (the schedule's "previous"
    # source has no run to copy from), and audits it.
    "dashboard:schedule_backfill": Post(
        lambda w: {"schedule_id": _schedule(w).pk},
        {
            "start": "2026-10-31",
            "stop": "2026-11-02",
            "confirmed": "1",
            "window": ["2026-10-31", "2026-11-01", "2026-11-02"],
        },
        {"admin"},
        _audited("schedule_backfilled"),
    ),
    "dashboard:schedule_toggle": Post(
        lambda w: {"schedule_id": _schedule(w).pk},
        {"reason": "site migration"},
        {"admin"},
        lambda w: (
            Schedule.objects.filter(name="nightly", paused=True).exists()
            and AuditEntry.objects.filter(
                action="schedule_paused", reason="site migration"
            ).exists()
        ),
    ),
    "dashboard:run_accept": Post(
        lambda w: {"run_id": w.candidate.pk},
        {"confirmed": "1"},
        {"admin"},
        lambda w: Run.objects.get(pk=w.candidate.pk).acceptance_state == "accepted",
    ),
    "dashboard:run_reject": Post(
        lambda w: {"run_id": w.candidate.pk},
        {"reason": "prices look wrong", "confirmed": "1"},
        {"admin"},
        lambda w: Run.objects.get(pk=w.candidate.pk).acceptance_state == "rejected",
    ),
    "dashboard:run_publish": Post(
        lambda w: {"run_id": w.accepted.pk},
        {"confirmed": "1"},
        {"admin"},
        lambda w: Run.objects.get(pk=w.accepted.pk).acceptance_state == "published",
    ),
    "dashboard:add_note": Post(
        lambda w: {"run_id": w.run.pk},
        {"text": "selector changed on beta", "partition": "beta.test"},
        VIEWERS,
        lambda w: TriageNote.objects.filter(partition="beta.test").exists(),
    ),
    "dashboard:mark_reviewed": Post(
        lambda w: {"run_id": w.run.pk},
        {"partition": "beta.test"},
        VIEWERS,
        lambda w: bool(RunPartition.objects.get(run=w.run, name="beta.test").reviewed_by),
    ),
    "dashboard:create_batch": Post(
        lambda w: {"run_id": w.run.pk},
        {
            "partitions": ["beta.test", "gamma.test"],
            "reason": "selector fixed",
            "scraper_version": "2",
            "expected_tasks": "4",
            "confirmed": "1",
        },
        {"admin"},
        lambda w: RecoveryBatch.objects.filter(run=w.run, task_count=4).exists(),
    ),
    "dashboard:reconcile_attach": Post(
        lambda w: {"job_id": w.job.pk},
        {"provider_job_id": "job-777", "reason": "found in the provider console"},
        VIEWERS,
        lambda w: RemoteJob.objects.get(pk=w.job.pk).provider_job_id == "job-777",
    ),
    "dashboard:reconcile_replace": Post(
        lambda w: {"job_id": w.job.pk},
        {"reason": "provider confirms nothing was created", "confirmed": "1"},
        VIEWERS,
        lambda w: RemoteJob.objects.get(pk=w.job.pk).state == "replaced",
    ),
    "dashboard:reconcile_dismiss": Post(
        lambda w: {"job_id": w.job.pk},
        {"reason": "listing withdrawn", "confirmed": "1"},
        VIEWERS,
        lambda w: RemoteJob.objects.get(pk=w.job.pk).state == "dismissed",
    ),
    # A media job's handoff: a fresh link looked up at the simulator (an operator's), and a
    # missing file regenerated as a new paid job (an admin's: it is a recovery batch).
    "dashboard:media_refresh": Post(
        lambda w: {"job_id": _media("delivered").pk}, {}, VIEWERS, _audited("refresh_media")
    ),
    "dashboard:media_regenerate": Post(
        lambda w: {"job_id": _media("missing").pk},
        {"reason": "lost by the store", "confirmed": "1"},
        {"admin"},
        lambda w: RemoteJob.objects.filter(handoff_state="regenerated").exists(),
    ),
    "dashboard:delivery_retry": Post(
        lambda w: {"event_id": w.failed_event.pk}, {}, {"admin"}, _audited("retry_delivery")
    ),
    "dashboard:delivery_lookup": Post(
        lambda w: {"event_id": w.uncertain_event.pk}, {}, {"admin"}, _audited("lookup_delivery")
    ),
    # Bulk actions: the confirmation page's own POST (confirmed, with the count it showed).
    "dashboard:tasks_bulk": Post(
        lambda w: {"run_id": w.run.pk},
        {
            "action": "rerun",
            "list": "quarantine",
            "reason": "selector fixed",
            "scraper_version": "2",
            "expected": "2",
            "confirmed": "1",
        },
        {"admin"},
        lambda w: RecoveryBatch.objects.filter(run=w.run, task_count=2).exists(),
        selected=lambda w: {"pk": _beta_tasks(w)},
    ),
    "dashboard:reconcile_bulk": Post(
        lambda w: {},
        {"action": "dismiss", "reason": "listing withdrawn", "expected": "1", "confirmed": "1"},
        VIEWERS,
        lambda w: RemoteJob.objects.get(pk=w.job.pk).state == "dismissed",
        selected=lambda w: {"pk": [w.job.pk]},
    ),
    "dashboard:deliveries_bulk": Post(
        lambda w: {},
        {"action": "retry", "expected": "2", "confirmed": "1"},
        {"admin"},
        lambda w: AuditEntry.objects.filter(action="retry_delivery").count() == 2,
        selected=lambda w: {"pk": [w.failed_event.pk, w.uncertain_event.pk]},
    ),
    "dashboard:schedules_bulk": Post(
        lambda w: {},
        {"action": "pause", "reason": "site migration", "expected": "1", "confirmed": "1"},
        {"admin"},
        lambda w: (
            Schedule.objects.filter(name="nightly", paused=True).exists()
            and AuditEntry.objects.filter(
                action="schedule_paused", reason="site migration"
            ).exists()
        ),
        selected=lambda w: {"pk": [_schedule(w).pk]},
    ),
    "dashboard:demo_load_spec": Post(
        lambda w: {}, {}, {"admin"}, _audited("demo_load_repaired_spec")
    ),
    "dashboard:dataset_upload": Post(
        lambda w: {},
        # A new dataset (a new version of an existing one shows its diff first).
        lambda: {
            "spec": SimpleUploadedFile(
                "shop.toml", SHOP_SPEC.read_bytes().replace(b'name = "shop"', b'name = "shop-two"')
            )
        },
        {"admin"},
        lambda w: Dataset.objects.filter(name="shop-two").exists(),
    ),
    "dashboard:run_create": Post(
        lambda w: {"name": w.run.dataset.name},
        lambda: {
            "window": "2026-12-24",
            "manifest": SimpleUploadedFile("m.csv", b"url\nhttp://alpha.test/item/99\n"),
        },
        {"admin"},
        lambda w: Run.objects.filter(window="2026-12-24").exists(),
    ),
}


def snapshot() -> dict:
    """Everything a dashboard POST could change."""
    return {
        "audit": AuditEntry.objects.count(),
        "notes": TriageNote.objects.count(),
        "batches": RecoveryBatch.objects.count(),
        "attempts": Attempt.objects.count(),
        "runs": list(Run.objects.order_by("pk").values_list("pk", "acceptance_state")),
        "partitions": list(
            RunPartition.objects.order_by("pk").values_list("name", "reviewed_by", "quarantined")
        ),
        "jobs": list(
            RemoteJob.objects.order_by("pk").values_list("pk", "state", "provider_job_id")
        ),
        "events": list(
            OutboxEvent.objects.order_by("pk").values_list("pk", "state", "next_attempt_at")
        ),
        "tasks": list(Task.objects.order_by("pk").values_list("pk", "state")),
        "datasets": list(Dataset.objects.order_by("pk").values_list("pk", "spec_sha256")),
        "schedules": list(Schedule.objects.order_by("pk").values()),
        "viewers": list(ViewerSettings.objects.order_by("pk").values_list("user_id", "time_zone")),
    }


@pytest.fixture(scope="module")
def media_sim():
    served = serve_media()
    yield served
    served.stop()


@pytest.fixture
def world(db, settings, tmp_path, media_sim):
    users = make_users()
    w = make_world()
    completed_media_job(media_sim.base_url)  # before any snapshot: the handoff views' jobs
    completed_media_job(media_sim.base_url, handoff_state="missing")
    settings.DATA_DIR = tmp_path
    make_demo_candidate(tmp_path)  # the demo's story, waiting for the admin's repair
    _schedule(w)  # before any snapshot: the schedule views' object
    w.users = users
    return w


@pytest.fixture(autouse=True)
def demo_mode(request, settings):
    """The demo's checklist exists in demo mode only (test_demo_story checks it is 404 outside)."""
    call = getattr(request.node, "callspec", None)
    if call is not None and str(call.params.get("name", "")).startswith("dashboard:demo"):
        settings.SALVAGE_DEMO = True


def _client(w: World, role: str | None, **kwargs) -> Client:
    client = Client(**kwargs)
    if role:
        client.force_login(w.users[role])
    return client


def test_it_covers_every_dashboard_url():
    dashboard = {f"dashboard:{p.name}" for p in get_resolver("dashboard.urls").url_patterns}
    assert dashboard == set(PAGES) | set(POSTS)


@pytest.mark.parametrize("name", sorted(PAGES))
def test_it_sends_anonymous_page_requests_to_login(world, name):
    url = reverse(name, kwargs=PAGES[name].kwargs(world))
    response = _client(world, None).get(url)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login") + "?next=")


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("name", sorted(PAGES))
def test_it_shows_pages_only_to_their_roles(world, name, role):
    page = PAGES[name]
    response = _client(world, role).get(reverse(name, kwargs=page.kwargs(world)))
    if role in page.allowed:
        assert response.status_code == page.ok_status
    else:
        assert response.status_code == 403


@pytest.mark.parametrize("name", sorted(POSTS))
def test_it_sends_anonymous_posts_to_login_and_changes_nothing(world, name):
    post = POSTS[name]
    before = snapshot()
    response = _client(world, None).post(reverse(name, kwargs=post.kwargs(world)), post.body(world))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))
    assert snapshot() == before


@pytest.mark.parametrize(
    "name,role",
    [(name, role) for name in sorted(POSTS) for role in ROLES if role not in POSTS[name].allowed],
)
def test_it_refuses_forged_posts_and_changes_nothing(world, name, role):
    post = POSTS[name]
    before = snapshot()
    response = _client(world, role).post(reverse(name, kwargs=post.kwargs(world)), post.body(world))
    assert response.status_code == 403
    assert snapshot() == before
    assert not post.happened(world)


@pytest.mark.parametrize("name", sorted(POSTS))
def test_it_performs_posts_with_permission(world, name):
    post = POSTS[name]
    role = sorted(post.allowed)[0]
    assert not post.happened(world)
    response = _client(world, role).post(
        reverse(name, kwargs=post.kwargs(world)), post.body(world), follow=True
    )
    assert response.status_code == 200
    errors = [str(m) for m in response.context["messages"] if m.level_tag == "error"]
    assert errors == []
    assert post.happened(world)


@pytest.mark.parametrize("name", sorted(POSTS))
def test_it_refuses_posts_without_a_csrf_token(world, name):
    post = POSTS[name]
    role = sorted(post.allowed)[0]
    before = snapshot()
    client = _client(world, role, enforce_csrf_checks=True)
    response = client.post(reverse(name, kwargs=post.kwargs(world)), post.body(world))
    assert response.status_code == 403
    assert snapshot() == before


def test_it_accepts_a_post_with_the_pages_csrf_token(world):
    client = _client(world, "operator", enforce_csrf_checks=True)
    page = client.get(reverse("dashboard:quarantine", kwargs={"run_id": world.run.pk}))
    token = page.context["csrf_token"]
    response = client.post(
        reverse("dashboard:add_note", kwargs={"run_id": world.run.pk}),
        {"text": "with a token", "csrfmiddlewaretoken": str(token)},
    )
    assert response.status_code == 302
    assert TriageNote.objects.filter(text="with a token", author="olivia").exists()


def test_it_refuses_get_on_post_views(world, settings):
    settings.SALVAGE_DEMO = True  # the demo's POST exists in demo mode only
    client = _client(world, "admin")
    for name, post in POSTS.items():
        if name in PAGES:
            continue  # a confirmation page: its GET is the page
        response = client.get(reverse(name, kwargs=post.kwargs(world)))
        assert response.status_code == 405, name


# --- what each role sees -------------------------------------------------------------------


def test_it_hides_the_rerun_and_acceptance_buttons_from_operators(world):
    client = _client(world, "operator")
    quarantine = client.get(reverse("dashboard:quarantine", kwargs={"run_id": world.run.pk}))
    assert b"Mark reviewed" in quarantine.content
    assert b"Create recovery batch" not in quarantine.content
    run = client.get(reverse("dashboard:run", kwargs={"run_id": world.candidate.pk}))
    assert b"Accept run" not in run.content
    assert b"Audit log" not in run.content


def test_it_shows_the_rerun_and_acceptance_buttons_to_admins(world):
    client = _client(world, "admin")
    quarantine = client.get(reverse("dashboard:quarantine", kwargs={"run_id": world.run.pk}))
    assert b"Create recovery batch" in quarantine.content
    run = client.get(reverse("dashboard:run", kwargs={"run_id": world.candidate.pk}))
    assert b"Accept run" in run.content
    assert b"Reject run" in run.content


def test_it_shows_exporters_only_the_exports(world):
    client = _client(world, "exporter")
    response = client.get(reverse("dashboard:home"), follow=True)
    assert response.redirect_chain[-1][0] == reverse("dashboard:data_home")
    nav = response.content.split(b"<nav>")[1].split(b"</nav>")[0]
    assert b"Exports" in nav
    assert b"Runs" not in nav
    assert b"Reconcile" not in nav


def test_it_hides_reconcile_actions_from_a_user_without_resolve(world):
    from django.contrib.auth.models import Permission

    viewer = world.users["nobody"]
    viewer.user_permissions.add(Permission.objects.get(codename="view_remotejob"))
    response = _client(world, "nobody").get(reverse("dashboard:reconcile"))
    assert response.status_code == 200
    assert f"Remote job #{world.job.pk}".encode() in response.content
    assert b"Attach job id" not in response.content


# --- scraped content is text -------------------------------------------------------------


@pytest.mark.parametrize(
    "name,kwargs",
    [
        ("dashboard:quarantine", lambda w: {"run_id": w.run.pk}),
        ("dashboard:task", lambda w: {"task_id": w.quarantined_task.pk}),
        ("dashboard:reconcile", lambda w: {}),
    ],
)
def test_it_shows_scraped_payloads_as_escaped_text(world, name, kwargs):
    response = _client(world, "admin").get(reverse(name, kwargs=kwargs(world)))
    html = response.content.decode()
    assert "&lt;script&gt;alert(&#x27;xss&#x27;)&lt;/script&gt;" in html
    assert XSS_SCRIPT not in html
    assert "<script>alert" not in html
    assert f'href="{XSS_URL}' not in html
    assert "href=&quot;javascript:alert(1)" in html or name == "dashboard:reconcile"
    # Scripts only from our own static files: the CSP forbids inline ones.
    assert "script-src 'self'" in response["Content-Security-Policy"]
    for line in html.splitlines():
        if "<script" in line:
            assert 'src="/static/js/' in line


# --- lists page with a cursor, never an offset --------------------------------------------


def test_it_pages_the_audit_log_with_a_cursor(world):
    from recovery import audit

    for i in range(60):
        audit.record("adam", "test_action", None, f"entry {i}")
    client = _client(world, "admin")
    first = client.get(reverse("dashboard:audit"), {"action": "test_action"})
    page = first.context["listing"]
    assert len(page.rows) == 50 and page.next_cursor
    second = client.get(
        reverse("dashboard:audit"), {"action": "test_action", "after": page.next_cursor}
    )
    rest = second.context["listing"]
    assert len(rest.rows) == 10 and not rest.next_cursor
    assert {e.pk for e in page.rows}.isdisjoint({e.pk for e in rest.rows})
    # A cursor the list cannot use is refused, not silently read as page one.
    bad = client.get(reverse("dashboard:audit"), {"after": "not-a-cursor"})
    assert bad.status_code == 400


def test_it_pages_deliveries_by_time_then_id(world):
    for _ in range(55):
        OutboxEvent.objects.create(run=world.accepted, event_type="published")
    client = _client(world, "admin")
    first = client.get(reverse("dashboard:deliveries"))
    cursor = first.context["listing"].next_cursor
    assert cursor
    second = client.get(reverse("dashboard:deliveries"), {"after": cursor})
    seen = [e.pk for e in first.context["listing"].rows] + [
        e.pk for e in second.context["listing"].rows
    ]
    assert len(seen) == len(set(seen)) == OutboxEvent.objects.count()


def test_it_asks_for_confirmation_before_creating_a_recovery_batch(world):
    client = _client(world, "admin")
    data = dict(POSTS["dashboard:create_batch"].data)
    del data["confirmed"], data["expected_tasks"]
    before = snapshot()
    url = reverse("dashboard:create_batch", kwargs={"run_id": world.run.pk})
    response = client.post(url, data)
    assert response.status_code == 200
    assert b"Confirm: reset 4 tasks" in response.content
    assert response.context["preview"].tasks == 4
    assert snapshot() == before
    # "confirmed" without the count the operator saw is not a confirmation either.
    assert client.post(url, {**data, "confirmed": "1"}).status_code == 200
    assert snapshot() == before
    confirmed = client.post(url, {**data, "confirmed": "1", "expected_tasks": "4"})
    assert confirmed.status_code == 302
    assert RecoveryBatch.objects.filter(run=world.run, task_count=4).exists()
