import pytest

from recovery import counters
from tests.support.factories import make_run, make_tasks


@pytest.mark.django_db
def test_it_counts_created_tasks_by_partition():
    run = make_run()
    make_tasks(run, 3, partition="a")
    make_tasks(run, 2, partition="b")
    assert counters.by_partition(run.pk) == {"a": {"pending": 3}, "b": {"pending": 2}}
