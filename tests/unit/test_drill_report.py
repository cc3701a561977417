"""The drill's verdict: any page ending other than as the sandbox predicts fails it."""

from __future__ import annotations

from recovery.showroom.drill import PROPERTIES, SCENARIOS, report_ok, task_loss_property

TASKS = {"missing_task_keys": 0, "unfinished_tasks": 0, "tasks_by_state": {"committed": 3}}
EXAMPLE = {
    "product": 17,
    "url": "http://127.0.0.1:8765/product/17",
    "state": "dead",
    "expected": "committed",
    "last_error_class": "lost_lease",
    "attempts": 5,
    "attempt_outcomes": ["lost_lease", "lost_lease", "lost_lease", "failed:network"],
}


def report_with(prop: dict) -> dict:
    return {
        "properties": {name: {"ok": True} for name in PROPERTIES} | {"no_intended_task_lost": prop},
        "scenarios": {name: {"ok": True} for name in SCENARIOS},
    }


def test_it_passes_when_every_page_ends_as_predicted():
    prop = task_loss_property(True, 3, 0, TASKS, {"unexpected_final_states": 0, "examples": []})
    assert prop["ok"] is True
    assert report_ok(report_with(prop))


def test_one_unexpected_final_state_fails_the_drill_and_is_listed():
    sandbox = {"unexpected_final_states": 1, "examples": [EXAMPLE]}
    prop = task_loss_property(True, 3, 0, TASKS, sandbox)
    assert prop["ok"] is False
    assert prop["unexpected_final_states"] == 1
    assert prop["unexpected_final_state_examples"] == [EXAMPLE]
    assert not report_ok(report_with(prop))


def test_a_lost_task_or_an_unfinished_collection_fails_it():
    sandbox = {"unexpected_final_states": 0, "examples": []}
    assert task_loss_property(True, 3, 1, TASKS, sandbox)["ok"] is False
    assert task_loss_property(False, 3, 0, TASKS, sandbox)["ok"] is False
