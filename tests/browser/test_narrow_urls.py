"""Long URLs at 390 px (issue 29): a task's URL wraps at its slashes and query separators (or
after a hyphen, where any text may wrap), never mid-word, on the task list and the task page,
and never widens the page."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from recovery.models import Task
from tests.browser.test_dashboard_browser import log_in
from tests.support.world import make_users, make_world

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LONG = (
    "https://shop.test/catalogue/kitchen-and-dining/cookware/frying-pans/"
    "cast-iron-skillet-28cm/reviews?sort=newest&page=3&colour=graphite&ref=newsletter"
)
BREAKS = "/?&=#-"

# Each line the element's text is laid out in: a new line starts where a character's box
# moves down (one Range per character; <wbr> has no text, so it is skipped).
LINES_JS = """
(element) => {
  const lines = [];
  let top = null;
  const walker = document.createTreeWalker(element, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    for (let i = 0; i < node.data.length; i++) {
      const range = document.createRange();
      range.setStart(node, i);
      range.setEnd(node, i + 1);
      const box = range.getBoundingClientRect();
      if (top === null || box.top > top + 2) { lines.push(""); top = box.top; }
      lines[lines.length - 1] += node.data[i];
    }
  }
  return lines;
}
"""


def laid_out(locator) -> list[str]:
    return locator.evaluate(LINES_JS)


def test_a_long_url_wraps_at_its_separators_at_390_px(transactional_db, live_server, page):
    make_users()
    world = make_world()
    task = Task.objects.filter(run=world.run).order_by("pk").first()
    Task.objects.filter(pk=task.pk).update(url=LONG)
    page.set_viewport_size({"width": 390, "height": 900})
    log_in(page, live_server, "olivia")

    page.goto(f"{live_server.url}/tasks/{task.pk}/")
    cell = page.locator("dd.url")
    expect(cell).to_have_text(LONG)
    lines = laid_out(cell)
    assert "".join(lines) == LONG
    assert len(lines) > 1, "the URL fits one line at 390 px: nothing to check"
    assert all(line[-1] in BREAKS for line in lines[:-1]), lines
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"the task page is {width} px wide at 390 px"

    page.goto(f"{live_server.url}/runs/{world.run.pk}/tasks/?q=shop.test%2Fcatalogue")
    row = page.locator("#tasks tr[data-row]").filter(
        has=page.locator(f"a[href='/tasks/{task.pk}/']")
    )
    cell = row.locator("td.url")
    expect(cell).to_have_text(LONG)
    lines = laid_out(cell)
    assert len(lines) > 1 and all(line[-1] in BREAKS for line in lines[:-1]), lines
