from django.contrib.auth import views as auth_views
from django.urls import path

from dashboard import dataset_views, demo_views, schedule_views, views

app_name = "dashboard"
# A list's CSV export is its page's own view (same permission checks, same filterset) with
# export=True; dashboard.lists finds it by the page's URL name + "_csv".
EXPORT = {"export": True}

urlpatterns = [
    path("", views.home, name="home"),
    path("runs/", views.runs, name="runs"),
    path("runs.csv", views.runs, EXPORT, name="runs_csv"),
    path("runs/<int:run_id>/", views.run_detail, name="run"),
    path("runs/<int:run_id>/tasks/", views.run_tasks, name="run_tasks"),
    path("runs/<int:run_id>/tasks.csv", views.run_tasks, EXPORT, name="run_tasks_csv"),
    path("runs/<int:run_id>/accept", views.run_accept, name="run_accept"),
    path("runs/<int:run_id>/reject", views.run_reject, name="run_reject"),
    path("runs/<int:run_id>/publish", views.run_publish, name="run_publish"),
    path("runs/<int:run_id>/quarantine/", views.quarantine, name="quarantine"),
    path("runs/<int:run_id>/quarantine.csv", views.quarantine, EXPORT, name="quarantine_csv"),
    path("runs/<int:run_id>/notes", views.add_note, name="add_note"),
    path("runs/<int:run_id>/reviewed", views.mark_reviewed, name="mark_reviewed"),
    path("runs/<int:run_id>/batches", views.create_batch, name="create_batch"),
    path("batches/<int:batch_id>/", views.batch_detail, name="batch"),
    path("reconcile/", views.reconcile, name="reconcile"),
    path("reconcile.csv", views.reconcile, EXPORT, name="reconcile_csv"),
    path("reconcile/<int:job_id>/attach", views.reconcile_attach, name="reconcile_attach"),
    path("reconcile/<int:job_id>/replace", views.reconcile_replace, name="reconcile_replace"),
    path("reconcile/<int:job_id>/dismiss", views.reconcile_dismiss, name="reconcile_dismiss"),
    path("tasks/<int:task_id>/", views.task_detail, name="task"),
    path(
        "tasks/<int:task_id>/attempts/<uuid:attempt_id>/screenshot.png",
        views.attempt_screenshot,
        name="attempt_screenshot",
    ),
    path("deliveries/", views.deliveries, name="deliveries"),
    path("deliveries.csv", views.deliveries, EXPORT, name="deliveries_csv"),
    path("deliveries/<uuid:event_id>/retry", views.delivery_retry, name="delivery_retry"),
    path("deliveries/<uuid:event_id>/lookup", views.delivery_lookup, name="delivery_lookup"),
    path("workers/", views.workers, name="workers"),
    path("workers.csv", views.workers, EXPORT, name="workers_csv"),
    path("exports/", views.exports, name="exports"),
    path("exports.csv", views.exports, EXPORT, name="exports_csv"),
    path("exports/<int:run_id>.<str:fmt>", views.export_download, name="export_download"),
    path("audit/", views.audit, name="audit"),
    path("audit.csv", views.audit, EXPORT, name="audit_csv"),
    path("datasets/", dataset_views.datasets, name="datasets"),
    path("datasets.csv", dataset_views.datasets, EXPORT, name="datasets_csv"),
    path("datasets/upload", dataset_views.dataset_upload, name="dataset_upload"),
    path("datasets/<slug:name>/", dataset_views.dataset_detail, name="dataset"),
    path("datasets/<slug:name>/runs", dataset_views.run_create, name="run_create"),
    path("schedules/", schedule_views.schedule_list, name="schedules"),
    path("schedules/new", schedule_views.schedule_add, name="schedule_add"),
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
