"""Observation.source_task_key: the task key copied on the row by the commit, read by exports.

Both commit paths store it: on PostgreSQL the single-statement commit (recovery.leases.postgres)
and, for the new keys of an accepted or published run, the portable upsert
(recovery.leases.statements), which is SQLite's only path. NULL means not stored: the export
then looks the task key up and prints the same bytes.
"""

from __future__ import annotations

import pytest
from django.utils import timezone

from recovery import leases
from recovery.delivery import exports
from recovery.models import Observation, Run, Task
from recovery.outcomes import Observed, Outcome
from recovery.quality import acceptance
from tests.support.acceptance import make_collected_run
from tests.support.factories import make_run, make_tasks

pytestmark = pytest.mark.django_db


def ok(entity: str, **payload) -> Outcome:
    return Outcome(http_status=200, observations=[Observed(entity, {"v": 1, **payload})])


def stored_keys() -> dict[int, tuple[int, str | None]]:
    return {o.pk: (o.source_task_id, o.source_task_key) for o in Observation.objects.order_by("pk")}


def task_keys() -> dict[int, str]:
    return dict(Task.objects.values_list("pk", "task_key"))


def test_a_commit_stores_the_task_key_on_the_observation():
    make_run()
    make_tasks(Run.objects.get(), 3)
    claimed = leases.claim("w1")
    leases.commit_outcomes("w1", claimed, [ok(c.url) for c in claimed])
    rows = stored_keys()
    assert len(rows) == 3
    keys = task_keys()
    assert all(key == keys[task_id] for task_id, key in rows.values())


def test_a_re_upsert_from_another_task_moves_the_key_with_the_task():
    run = make_run()
    first, second = make_tasks(run, 2)
    Task.objects.filter(pk=second.pk).update(next_attempt_at=timezone.now().replace(year=2100))
    (c1,) = leases.claim("w1")
    assert c1.task_id == first.pk
    leases.commit_outcomes("w1", [c1], [ok("same-entity")])
    assert list(stored_keys().values()) == [(first.pk, first.task_key)]

    Task.objects.filter(pk=second.pk).update(next_attempt_at=timezone.now())
    (c2,) = leases.claim("w2")
    assert c2.task_id == second.pk
    assert leases.commit_outcomes("w2", [c2], [ok("same-entity", v=2)]).observations == 1
    assert list(stored_keys().values()) == [(second.pk, second.task_key)]


def test_a_new_key_of_an_accepted_run_stores_the_task_key_too():
    # On PostgreSQL a versioned run's rows leave the single statement and go through the
    # portable upsert (recovery.leases.statements); on SQLite that is the only path.
    run = make_run()
    make_tasks(run, 2)
    Run.objects.filter(pk=run.pk).update(acceptance_state="accepted")
    claimed = leases.claim("w1")
    assert leases.commit_outcomes("w1", claimed, [ok(c.url) for c in claimed]).observations == 2
    keys = task_keys()
    rows = stored_keys()
    assert len(rows) == 2
    assert all(key == keys[task_id] for task_id, key in rows.values())


def accepted_run():
    run = make_collected_run({"a": "good"}, per_partition=4)
    acceptance.advance_runs()
    acceptance.accept_run(run.pk, "admin")
    return run


@pytest.mark.parametrize("fmt", exports.TEXT_FORMATS)
def test_an_export_prints_the_task_key_whether_stored_or_not(fmt):
    run = accepted_run()  # its observations come from a factory: no key stored
    keys = task_keys()
    rows = stored_keys()
    assert len(rows) == 4 and {key for _, key in rows.values()} == {None}
    looked_up = "".join(exports.stream(run.pk, fmt))
    assert all(key in looked_up for key in keys.values())

    # Stored as the commit stores them (one row, then all): the same bytes.
    first = min(rows)
    Observation.objects.filter(pk=first).update(source_task_key=keys[rows[first][0]])
    assert "".join(exports.stream(run.pk, fmt)) == looked_up
    for pk, (task_id, _) in rows.items():
        Observation.objects.filter(pk=pk).update(source_task_key=keys[task_id])
    assert "".join(exports.stream(run.pk, fmt)) == looked_up

    # And a stored key is what the export reads (no lookup when it is there).
    Observation.objects.filter(pk=first).update(source_task_key="stored-copy")
    changed = "".join(exports.stream(run.pk, fmt))
    assert changed.count("stored-copy") == 1
    assert changed == looked_up.replace(keys[rows[first][0]], "stored-copy")
