from django.contrib.auth import views as auth_views
from django.urls import path

from dashboard import (
    account_views,
    artefact_views,
    attention_views,
    backfill_views,
    data_views,
    dataset_views,
    delivery_views,
    demo_views,
    handoff_views,
    incident_views,
    ops_views,
    run_views,
    schedule_views,
    triage_views,
    views,
)

app_name = "dashboard"
# A list's CSV export is its page's own view (same permission checks, same filterset) with
# export=True; dashboard.lists finds it by the page's URL name + "_csv".
EXPORT = {"export": True}

urlpatterns = [
    path("", views.home, name="home"),
    path("attention/", attention_views.attention_page, name="attention"),
    path("runs/", run_views.runs, name="runs"),
    path("runs.csv", run_views.runs, EXPORT, name="runs_csv"),
    path("runs/<int:run_id>/", run_views.run_detail, name="run"),
    path("runs/<int:run_id>/tasks/", run_views.run_tasks, name="run_tasks"),
    path("runs/<int:run_id>/tasks.csv", run_views.run_tasks, EXPORT, name="run_tasks_csv"),
    path("runs/<int:run_id>/tasks/bulk", triage_views.tasks_bulk, name="tasks_bulk"),
    path("runs/<int:run_id>/accept", run_views.run_accept, name="run_accept"),
    path("runs/<int:run_id>/reject", run_views.run_reject, name="run_reject"),
    path("runs/<int:run_id>/publish", run_views.run_publish, name="run_publish"),
    path("runs/<int:run_id>/quarantine/", triage_views.quarantine, name="quarantine"),
    path(
        "runs/<int:run_id>/quarantine.csv", triage_views.quarantine, EXPORT, name="quarantine_csv"
    ),
    path("runs/<int:run_id>/notes", triage_views.add_note, name="add_note"),
    path("runs/<int:run_id>/reviewed", triage_views.mark_reviewed, name="mark_reviewed"),
    path("runs/<int:run_id>/batches", triage_views.create_batch, name="create_batch"),
    path("batches/<int:batch_id>/", triage_views.batch_detail, name="batch"),
    path("reconcile/", triage_views.reconcile, name="reconcile"),
    path("reconcile.csv", triage_views.reconcile, EXPORT, name="reconcile_csv"),
    path("reconcile/bulk", triage_views.reconcile_bulk, name="reconcile_bulk"),
    path("reconcile/<int:job_id>/attach", triage_views.reconcile_attach, name="reconcile_attach"),
    path(
        "reconcile/<int:job_id>/replace", triage_views.reconcile_replace, name="reconcile_replace"
    ),
    path(
        "reconcile/<int:job_id>/dismiss", triage_views.reconcile_dismiss, name="reconcile_dismiss"
    ),
    path("reconcile/<int:job_id>/refresh-media", handoff_views.media_refresh, name="media_refresh"),
    path(
        "reconcile/<int:job_id>/regenerate-media",
        handoff_views.media_regenerate,
        name="media_regenerate",
    ),
    path("incidents/", incident_views.incidents, name="incidents"),
    path("incidents.csv", incident_views.incidents, EXPORT, name="incidents_csv"),
    path("incidents/<int:incident_id>/", incident_views.incident_detail, name="incident"),
    path("tasks/<int:task_id>/", run_views.task_detail, name="task"),
    path(
        "tasks/<int:task_id>/attempts/<uuid:attempt_id>/screenshot.png",
        run_views.attempt_screenshot,
        name="attempt_screenshot",
    ),
    path(
        "tasks/<int:task_id>/attempts/<uuid:attempt_id>/rendered.txt",
        artefact_views.attempt_rendered_html,
        name="attempt_rendered_html",
    ),
    path("deliveries/", delivery_views.deliveries, name="deliveries"),
    path("deliveries.csv", delivery_views.deliveries, EXPORT, name="deliveries_csv"),
    path("deliveries/bulk", delivery_views.deliveries_bulk, name="deliveries_bulk"),
    path("deliveries/<uuid:event_id>/retry", delivery_views.delivery_retry, name="delivery_retry"),
    path(
        "deliveries/<uuid:event_id>/lookup", delivery_views.delivery_lookup, name="delivery_lookup"
    ),
    path("workers/", ops_views.workers, name="workers"),
    path("workers.csv", ops_views.workers, EXPORT, name="workers_csv"),
    path("exports/", delivery_views.exports, name="exports"),
    path("exports.csv", delivery_views.exports, EXPORT, name="exports_csv"),
    path("exports/<int:run_id>.<str:fmt>", delivery_views.export_download, name="export_download"),
    # The exporter's home and their API tokens (docs/api.md).
    path("data/", data_views.data_home, name="data_home"),
    path("account/settings/", account_views.account_settings, name="account_settings"),
    path("account/tokens/", data_views.api_tokens, name="api_tokens"),
    path("account/tokens/new", data_views.api_token_create, name="api_token_create"),
    path(
        "account/tokens/<int:token_id>/revoke",
        data_views.api_token_revoke,
        name="api_token_revoke",
    ),
    path("audit/", ops_views.audit, name="audit"),
    path("audit.csv", ops_views.audit, EXPORT, name="audit_csv"),
    path("datasets/", dataset_views.datasets, name="datasets"),
    path("datasets.csv", dataset_views.datasets, EXPORT, name="datasets_csv"),
    path("datasets/upload", dataset_views.dataset_upload, name="dataset_upload"),
    path("datasets/<slug:name>/", dataset_views.dataset_detail, name="dataset"),
    path("datasets/<slug:name>/runs", dataset_views.run_create, name="run_create"),
    path("schedules/", schedule_views.schedule_list, name="schedules"),
    path("schedules.csv", schedule_views.schedule_list, EXPORT, name="schedules_csv"),
    path("schedules/new", schedule_views.schedule_add, name="schedule_add"),
    path("schedules/bulk", schedule_views.schedules_bulk, name="schedules_bulk"),
    path("schedules/<int:schedule_id>/edit", schedule_views.schedule_edit, name="schedule_edit"),
    path(
        "schedules/<int:schedule_id>/remove",
        schedule_views.schedule_remove,
        name="schedule_remove",
    ),
    path(
        "schedules/<int:schedule_id>/toggle",
        schedule_views.schedule_toggle,
        name="schedule_toggle",
    ),
    path(
        "schedules/<int:schedule_id>/backfill",
        backfill_views.schedule_backfill,
        name="schedule_backfill",
    ),
    path("demo/", demo_views.story, name="demo"),
    path("demo/repaired-spec", demo_views.load_repaired_spec, name="demo_load_spec"),
    path("glossary/", views.glossary, name="glossary"),
]

# The login/logout views live outside the namespace so LOGIN_URL = "login" resolves.
auth_urlpatterns = [
    # Browsers ask for /favicon.ico whatever the page links; answer with the real icon.
    path("favicon.ico", views.favicon, name="favicon"),
    path("accounts/login/", views.ThrottledLoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
]
