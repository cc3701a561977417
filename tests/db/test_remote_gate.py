"""The worker loop's remote step is skipped while no remote work can exist (issue 15), and
comes back at once when this process adds a remote dataset or a remote job."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from recovery import remote, worker
from recovery.remote import jobs
from tests.db.test_worker_steps import Recording, factory_for
from tests.support.factories import make_dataset, make_run, make_tasks

pytestmark = pytest.mark.django_db


def remote_job_reads(queries) -> int:
    return sum("recovery_remotejob" in q["sql"] for q in queries)


def test_a_loop_without_remote_work_reads_remote_jobs_once_not_every_turn():
    run = make_run(make_dataset(provider="recording"))
    make_tasks(run, 6)
    with CaptureQueriesContext(connection) as ctx:
        stats = worker.run_until_idle(
            "w1", batch_size=1, provider_factory=factory_for({"recording": Recording()})
        )
    assert stats.batches == 6  # six loop turns at least
    # the gate's one EXISTS, plus has_live_jobs when the loop stops; the ungated step read
    # RemoteJob 4-5 times on every turn
    assert remote_job_reads(ctx.captured_queries) <= 2


def test_the_gate_opens_when_this_process_creates_a_job():
    run = make_run(make_dataset(provider="recording"))
    tasks = make_tasks(run, 1)
    jobs.forget_presence()
    assert not remote.remote_work_possible()  # cached "no" for the next RECHECK_SECONDS

    class Media:
        name, kind = "tornado", "media"

        def request_options(self, remote_tasks, run_pk):
            return {}

    jobs.create_job(run, Media(), tasks, worker="w1", lease=False)
    assert remote.remote_work_possible()


def test_loaddataset_of_a_remote_dataset_opens_the_gate(tmp_path):
    jobs.forget_presence()
    assert not remote.remote_work_possible()
    shop = (Path(settings.BASE_DIR) / "examples" / "shop.toml").read_text()
    path = tmp_path / "media.toml"
    media = shop.replace('name = "shop"', 'name = "media"').replace('"direct"', '"tornado"')
    path.write_text(media)
    call_command("loaddataset", str(path))
    assert remote.remote_work_possible()
