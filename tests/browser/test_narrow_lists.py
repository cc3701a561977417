"""The long lists at 390 px (issue 29): a run's tasks and the runs become one card per row whose
key columns (state, partition; acceptance state, coverage, ETA) come first, inside the screen,
and the page never scrolls sideways. Wide, they stay tables in their column order."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.test_dashboard_browser import log_in
from tests.support.world import make_users, make_world

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Each shown cell of a row: its label (data-label, else its text), whether it is a key column,
# and its box, in the order the row lays them out (top to bottom, then left to right).
CELLS_JS = """
(row) => Array.from(row.children)
  .filter((cell) => getComputedStyle(cell).display !== "none" && !cell.classList.contains("pick"))
  .map((cell) => {
    const box = cell.getBoundingClientRect();
    return {label: cell.dataset.label || cell.textContent.trim().slice(0, 30),
            key: cell.classList.contains("key"), top: Math.round(box.top),
            left: Math.round(box.left), right: box.right};
  })
  .sort((a, b) => a.top - b.top || a.left - b.left)
"""

LISTS = [
    ("tasks", lambda world: f"/runs/{world.run.pk}/tasks/", ["State", "Partition"]),
    ("runs", lambda world: "/runs/", ["Acceptance", "Committed", "Acceptance coverage", "ETA"]),
]


@pytest.mark.parametrize(("table", "path", "keys"), LISTS, ids=[name for name, _, _ in LISTS])
def test_the_key_columns_come_first_at_390_px(
    transactional_db, live_server, page, screenshot, table, path, keys
):
    make_users()
    world = make_world()
    log_in(page, live_server, "olivia")
    page.set_viewport_size({"width": 390, "height": 900})
    page.goto(live_server.url + path(world))
    row = page.locator(f"#{table} tr[data-row]").first
    expect(row).to_be_visible()

    cells = row.evaluate(CELLS_JS)
    assert [c["label"] for c in cells[: len(keys)]] == keys, cells
    assert all(c["key"] for c in cells[: len(keys)]) and not any(
        c["key"] for c in cells[len(keys) :]
    )
    assert all(c["right"] <= 390 for c in cells[: len(keys)]), cells
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"{path(world)} is {width} px wide at 390 px"
    # The header row keeps its sort links, the key columns' first.
    heads = page.locator(f"#{table} thead th").evaluate_all(
        "(ths) => ths.filter((th) => !th.classList.contains('pick'))"
        ".map((th) => [th.classList.contains('key'), Math.round(th.getBoundingClientRect().top),"
        " Math.round(th.getBoundingClientRect().left)])"
    )
    ordered = sorted(heads, key=lambda h: (h[1], h[2]))
    assert [h[0] for h in ordered[: len(keys)]] == [True] * len(keys), ordered
    screenshot(page, f"narrow-{table}-390")


@pytest.mark.parametrize(("table", "path", "keys"), LISTS, ids=[name for name, _, _ in LISTS])
def test_wide_the_lists_stay_tables_in_column_order(
    transactional_db, live_server, page, table, path, keys
):
    make_users()
    world = make_world()
    log_in(page, live_server, "olivia")
    page.goto(live_server.url + path(world))
    row = page.locator(f"#{table} tr[data-row]").first
    expect(row).to_be_visible()
    assert row.evaluate("(row) => getComputedStyle(row).display") == "table-row"
    # Left to right the cells keep the template's order: the key columns are not moved.
    lefts = row.evaluate(
        "(row) => Array.from(row.children).map((cell) => cell.getBoundingClientRect().left)"
    )
    assert lefts == sorted(lefts)
    first_key = row.locator("td.key").first
    assert first_key.evaluate("(cell) => cell.cellIndex") > 0
