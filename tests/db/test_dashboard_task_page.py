"""The task page shows each observation's state as the product treats it: held when its
partition is quarantined, whatever verdict the row stores."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.support.factories import make_run
from tests.support.held_rows import held_run
from tests.support.world import logged_in, make_users, make_world

pytestmark = pytest.mark.django_db


def _state_cells(world, task) -> list[str]:
    page = logged_in(world, "operator").get(reverse("dashboard:task", kwargs={"task_id": task.pk}))
    assert page.status_code == 200
    text = page.content.decode()
    rows = text.split("<h2>Observations</h2>", 1)[1].split("</table>", 1)[0]
    return [cell for cell in ("valid", "invalid", "pending", "held") if f"<td>{cell}</td>" in rows]


def test_it_shows_a_row_of_a_quarantined_partition_as_held_and_others_by_their_verdict():
    world = make_world()
    world.users = make_users()
    tasks = held_run(make_run())
    assert _state_cells(world, tasks["bad"][0]) == ["held"]  # stored valid
    assert _state_cells(world, tasks["bad"][2]) == ["held"]  # stored invalid
    assert _state_cells(world, tasks["good"][0]) == ["valid"]
    assert _state_cells(world, tasks["good"][2]) == ["invalid"]
