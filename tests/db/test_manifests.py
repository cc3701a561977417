"""manage.py createrun: manifests become runs and tasks, all or nothing."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.forms.models import model_to_dict

from recovery import counters, keys
from recovery.intake import specs
from recovery.models import AuditEntry, Dataset, Run, Task, TaskCountDelta
from recovery.states.choices import RunState

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def shop() -> Dataset:
    dataset, _ = specs.save_dataset(specs.validate(specs.parse_file(ROOT / "examples/shop.toml")))
    return dataset


@pytest.fixture
def by_manifest_column() -> Dataset:
    raw = specs.parse_file(ROOT / "examples/shop.toml")
    raw.update(name="retail", partition={"rule": "manifest"}, scraper_version="7")
    dataset, _ = specs.save_dataset(specs.validate(raw))
    return dataset


def createrun(*args: str) -> list[str]:
    out = io.StringIO()
    call_command("createrun", *args, stdout=out)
    return out.getvalue().splitlines()


def write(tmp_path: Path, name: str, content: str | bytes) -> str:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return str(path)


def snapshot() -> tuple:
    return (
        list(Run.objects.order_by("pk").values_list("pk", "task_total", "acceptance_state")),
        Task.objects.count(),
        TaskCountDelta.objects.count(),
        AuditEntry.objects.count(),
    )


def test_it_freezes_a_csv_manifest_into_a_run(shop, tmp_path):
    path = write(
        tmp_path,
        "m.csv",
        "url,page_type,partition,priority\n"
        "http://a.test/product/1,product,,3\n"
        "HTTP://A.test:80/product/2#x,,,\n"
        "http://b.test/category/1,category,books,10\n",
    )
    lines = createrun("shop", "--window", "2026-11-29", "--manifest", path)
    run = Run.objects.get(dataset=shop, window="2026-11-29")
    assert lines[-1] == str(run.pk)
    assert "3 task(s) added" in lines[0]
    assert run.task_total == 3
    assert run.acceptance_state == RunState.COLLECTING
    assert run.scraper_version == "1"
    assert run.manifest_sha256 == hashlib.sha256(Path(path).read_bytes()).hexdigest()
    assert run.manifest_frozen_at is not None
    tasks = {t.url: t for t in Task.objects.filter(run=run)}
    assert set(tasks) == {
        "http://a.test/product/1",
        "http://a.test/product/2",
        "http://b.test/category/1",
    }
    t1 = tasks["http://a.test/product/1"]
    assert (t1.page_type, t1.partition, t1.priority, t1.state) == (
        "product",
        "a.test",
        3,
        "pending",
    )
    assert t1.task_key == keys.task_key("shop", t1.url, "2026-11-29", "product")
    t3 = tasks["http://b.test/category/1"]
    assert (t3.page_type, t3.partition, t3.priority) == ("category", "books", 10)
    assert counters.by_partition(run.pk) == {"a.test": {"pending": 2}, "books": {"pending": 1}}
    assert AuditEntry.objects.get(action="run_created").detail["tasks_added"] == 3


def test_bulk_inserted_tasks_equal_tasks_the_orm_creates(shop, tmp_path):
    # createrun bypasses Model.save for speed; every column must still get the model's value.
    path = write(tmp_path, "m.csv", "url,priority\nhttp://a.test/product/1,4\n")
    createrun("shop", "--window", "w", "--manifest", path)
    bulk = Task.objects.get()
    orm = Task.objects.create(
        run=bulk.run,
        task_key="0" * 64,
        url=bulk.url,
        page_type=bulk.page_type,
        partition=bulk.partition,
        priority=bulk.priority,
    )
    orm.refresh_from_db()
    stamps = {"created_at", "state_changed_at", "next_attempt_at"}
    skip = {"id", "task_key", *stamps}
    assert {k: v for k, v in model_to_dict(bulk).items() if k not in skip} == {
        k: v for k, v in model_to_dict(orm).items() if k not in skip
    }
    assert {getattr(bulk, s) for s in stamps} == {bulk.run.manifest_frozen_at}


def test_it_reports_progress_on_stderr_and_keeps_the_run_id_last_on_stdout(shop, tmp_path, capsys):
    urls = "".join(f"http://a.test/product/{i}\n" for i in range(2500))
    lines = createrun("shop", "--window", "w", "--manifest", write(tmp_path, "m.txt", urls))
    assert lines[-1] == str(Run.objects.get().pk)
    progress = capsys.readouterr().err.splitlines()
    # Not a terminal: plain log lines, ending with the final count.
    assert progress and progress[-1].startswith("createrun: writing tasks 100% 2,500/2,500 tasks")


def test_it_reads_jsonl(shop, tmp_path):
    rows = [
        {"url": "http://a.test/product/1", "priority": 2},
        {"url": "http://a.test/category/1", "page_type": "category", "extra": "ignored"},
    ]
    path = write(tmp_path, "m.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n\n")
    createrun("shop", "--window", "w", "--manifest", path)
    got = set(Task.objects.values_list("url", "page_type", "priority"))
    assert got == {
        ("http://a.test/product/1", "product", 2),
        ("http://a.test/category/1", "category", 0),
    }


def test_it_reads_one_url_a_line(shop, tmp_path):
    path = write(
        tmp_path,
        "m.txt",
        "# products to collect\nhttp://a.test/product/1\n\n  http://a.test/product/2  \n",
    )
    lines = createrun("shop", "--window", "w", "--manifest", path)
    assert Task.objects.count() == 2
    assert set(Task.objects.values_list("page_type", flat=True)) == {"product"}
    assert "from 2 text line(s)" in lines[0]


@pytest.mark.parametrize(
    ("content", "fmt"),
    [
        ('{"url": "http://a.test/product/1"}\n', "JSON"),
        ("url,priority\nhttp://a.test/product/1,1\n", "CSV"),
        ("http://a.test/product/1\n", "text"),
    ],
)
def test_it_detects_the_format_by_content_without_a_known_extension(shop, tmp_path, content, fmt):
    path = write(tmp_path, "manifest.dat", content)
    lines = createrun("shop", "--window", "w", "--manifest", path)
    assert f"{fmt} line(s)" in lines[0]
    assert list(Task.objects.values_list("url", flat=True)) == ["http://a.test/product/1"]


def test_duplicates_collapse_into_one_task_and_are_reported(shop, tmp_path):
    path = write(
        tmp_path,
        "m.csv",
        "url,page_type\n"
        "http://a.test/product/1?b=2&a=1,product\n"
        "http://A.TEST/product/1?a=1&b=2&utm_source=mail#top,product\n"
        "http://a.test/product/%31?a=1&b=2,\n"
        "http://a.test/product/1?a=1&b=2,category\n",
    )
    lines = createrun("shop", "--window", "w", "--manifest", path)
    # Same URL and page type: one task; the same URL as another page type is another task.
    assert sorted(Task.objects.values_list("page_type", flat=True)) == ["category", "product"]
    assert lines[1].startswith("2 duplicate URL(s) collapsed: line 3 repeats line 2")
    assert "line 4 repeats line 2" in lines[1]
    run = Run.objects.get()
    assert run.task_total == 2
    assert AuditEntry.objects.get(action="run_created").detail["duplicates"] == 2


def test_a_second_createrun_for_the_same_window_is_refused(shop, tmp_path):
    path = write(tmp_path, "m.txt", "http://a.test/product/1\n")
    createrun("shop", "--window", "w", "--manifest", path)
    before = snapshot()
    with pytest.raises(CommandError) as err:
        createrun("shop", "--window", "w", "--manifest", path)
    assert err.value.returncode == 2
    assert "already exists for shop@w" in str(err.value)
    assert "--add" in str(err.value)
    assert snapshot() == before


def test_a_concurrent_createrun_of_the_same_window_loses_cleanly(shop, tmp_path, monkeypatch):
    # Another process creates the run after our existence check, while we read the file: the
    # database's unique (dataset, window) decides, and the loser writes nothing.
    from recovery.intake import manifests

    real_parse = manifests.parse

    def parse_while_another_process_wins(*args, **kwargs):
        result = real_parse(*args, **kwargs)
        Run.objects.create(dataset=shop, window="w")
        return result

    monkeypatch.setattr(manifests, "parse", parse_while_another_process_wins)
    path = write(tmp_path, "m.txt", "http://a.test/product/1\n")
    with pytest.raises(CommandError) as err:
        createrun("shop", "--window", "w", "--manifest", path)
    assert err.value.returncode == 2
    assert "changed while the manifest was being written" in str(err.value)
    assert Run.objects.count() == 1
    assert not Task.objects.exists()
    assert not TaskCountDelta.objects.exists()


def test_add_inserts_only_new_task_keys(shop, tmp_path):
    first = write(tmp_path, "a.txt", "http://a.test/product/1\nhttp://a.test/product/2\n")
    (run_id,) = createrun("shop", "--window", "w", "--manifest", first)[-1:]
    second = write(
        tmp_path,
        "b.txt",
        "http://a.test/product/2#again\nhttp://a.test/product/3\nhttp://c.test/product/4\n",
    )
    lines = createrun("shop", "--window", "w", "--manifest", second, "--add")
    assert lines[-1] == run_id
    assert "2 task(s) added" in lines[0]
    assert "1 already in the run" in lines[0]
    run = Run.objects.get(pk=run_id)
    assert run.task_total == 3 + 1 == Task.objects.filter(run=run).count()
    assert counters.by_state(run.pk) == {"pending": 4}
    # The frozen manifest of the run is the first one; each addition is in the audit log.
    assert run.manifest_sha256 == hashlib.sha256(Path(first).read_bytes()).hexdigest()
    added = AuditEntry.objects.get(action="run_tasks_added")
    assert added.detail["tasks_added"] == 2
    assert added.detail["already_present"] == 1


def test_add_creates_the_run_when_there_is_none(shop, tmp_path):
    path = write(tmp_path, "a.txt", "http://a.test/product/1\n")
    lines = createrun("shop", "--window", "w", "--manifest", path, "--add")
    assert lines[-1] == str(Run.objects.get().pk)


def test_add_reopens_a_candidate_run(shop, tmp_path):
    createrun("shop", "--window", "w", "--manifest", write(tmp_path, "a.txt", "http://a.test/1\n"))
    Run.objects.update(acceptance_state=RunState.CANDIDATE)
    createrun(
        "shop", "--window", "w", "--add", "--manifest", write(tmp_path, "b.txt", "http://a.test/2")
    )
    assert Run.objects.get().acceptance_state == RunState.COLLECTING


@pytest.mark.parametrize("state", [RunState.ACCEPTED, RunState.PUBLISHED])
def test_add_is_refused_for_an_accepted_run(shop, tmp_path, state):
    createrun("shop", "--window", "w", "--manifest", write(tmp_path, "a.txt", "http://a.test/1\n"))
    Run.objects.update(acceptance_state=state)
    before = snapshot()
    with pytest.raises(CommandError) as err:
        createrun(
            "shop",
            "--window",
            "w",
            "--add",
            "--manifest",
            write(tmp_path, "b.txt", "http://x.test"),
        )
    assert err.value.returncode == 2
    assert f"is {state}" in str(err.value)
    assert snapshot() == before


def test_add_refuses_a_different_scraper_version(shop, tmp_path):
    createrun("shop", "--window", "w", "--manifest", write(tmp_path, "a.txt", "http://a.test/1\n"))
    with pytest.raises(CommandError, match="a version applies to a whole run"):
        createrun(
            "shop",
            "--window",
            "w",
            "--add",
            "--scraper-version",
            "2",
            "--manifest",
            write(tmp_path, "b.txt", "http://a.test/2\n"),
        )


def test_scraper_version_comes_from_the_spec_or_the_option(by_manifest_column, tmp_path):
    path = write(tmp_path, "m.csv", "url,partition\nhttp://a.test/1,north\n")
    createrun("retail", "--window", "w1", "--manifest", path)
    createrun("retail", "--window", "w2", "--manifest", path, "--scraper-version", "8-beta")
    assert dict(Run.objects.values_list("window", "scraper_version")) == {"w1": "7", "w2": "8-beta"}
    assert set(Task.objects.values_list("partition", flat=True)) == {"north"}


def test_runs_of_different_windows_get_different_task_keys(shop, tmp_path):
    path = write(tmp_path, "m.txt", "http://a.test/product/1\n")
    createrun("shop", "--window", "w1", "--manifest", path)
    createrun("shop", "--window", "w2", "--manifest", path)
    assert Task.objects.values("task_key").distinct().count() == 2


BAD_INPUTS = [
    # (file name, content, expected message fragment)
    ("m.csv", "link,priority\nhttp://a.test/1,1\n", "line 1: missing url column"),
    ("m.csv", "", "the manifest has no URLs"),
    ("m.csv", "url\n", "the manifest has no URLs"),
    ("m.csv", "url\nhttp://a.test/1\nftp://a.test/file\n", "line 3: invalid URL"),
    ("m.csv", "url\nhttp://a.test/1\nnot a url\n", "line 3: invalid URL"),
    ("m.csv", 'url,priority\n,\n""\n', "the manifest has no URLs"),  # blank rows skipped
    ("m.csv", "url,page_type\nhttp://a.test/1,review\n", "line 2: page_type 'review' is not"),
    ("m.csv", "url,priority\nhttp://a.test/1,high\n", "line 2: priority 'high' must be an int"),
    ("m.csv", "url,priority\nhttp://a.test/1,99999\n", "line 2: priority 99999 must be between"),
    ("m.csv", "url,partition\nhttp://a.test/1," + "p" * 201 + "\n", "partition longer than"),
    ("m.txt", "http://a.test/1\njavascript:alert(1)\n", "line 2: invalid URL"),
    ("m.txt", "http://a.test/1\nhttp://user:pw@a.test/2\n", "line 2: invalid URL"),
    ("m.txt", "# only a comment\n", "the manifest has no URLs"),
    ("m.jsonl", '{"url": "http://a.test/1"}\n{"url": \n', "line 2: invalid JSON"),
    ("m.jsonl", '{"url": "http://a.test/1"}\n["http://a.test/2"]\n', "line 2: expected a JSON"),
    ("m.jsonl", '{"link": "http://a.test/1"}\n', "line 1: missing url"),
    ("m.jsonl", '{"url": "http://a.test/1", "priority": true}\n', "priority True must be"),
    ("m.jsonl", '{"url": "http://a.test/1", "page_type": 3}\n', "page_type must be a string"),
    ("m.txt", b"http://a.test/\xff\n", "not UTF-8"),
    # Limits: 8,192 characters, no control characters (issue 13).
    ("m.txt", "http://a.test/1\nhttp://a.test/" + "x" * 100_000 + "\n", "line 2: invalid URL"),
    ("m.txt", "http://a.test/" + "x" * 9000 + "\n", "over the 8,192-character limit"),
    ("m.txt", "http://a.test/" + "\u00e9" * 3000 + "\n", "once percent-encoded, over the 8,192"),
    ("m.csv", "url\nhttp://a.test/1\nhttp://a.test/a\x00b\n", "line 3: invalid URL"),
    ("m.csv", "url\nhttp://a.test/a\x00b\n", "control character ('\\x00' at position 16)"),
    (
        "m.jsonl",
        '{"url": "http://a.test/a\\u0000b"}\n',
        "line 1: invalid URL URL contains a control",
    ),
    # Issue 27: a line nested a thousand deep ended in a RecursionError inside the decoder.
    (
        "m.jsonl",
        '{"url": "http://a.test/1"}\n{"url": ' + "[" * 1000 + "]" * 1000 + "}\n",
        "line 2: nested too deeply",
    ),
    # PostgreSQL cannot store a NUL in text (issue 27: the INSERT was an HTTP 500 there).
    ("m.csv", "url,partition\nhttp://a.test/1,a\x00b\n", "line 2: partition contains a NUL"),
    ("m.jsonl", '{"url": "http://a.test/1", "page_type": "p\\u0000"}\n', "page_type contains"),
    ("m.txt", "http://a.test/a\x7fb\n", "control character ('\\x7f'"),
    ("m.txt", "http://a.test/a\x1bb\n", "control character ('\\x1b'"),
]


@pytest.mark.parametrize(("name", "content", "message"), BAD_INPUTS)
def test_bad_manifests_exit_2_naming_the_line_and_write_nothing(
    shop, tmp_path, name, content, message
):
    # An existing run of another window shows that nothing at all changes.
    createrun("shop", "--window", "old", "--manifest", write(tmp_path, "ok.txt", "http://z.test"))
    before = snapshot()
    path = write(tmp_path, name, content)
    with pytest.raises(CommandError) as err:
        createrun("shop", "--window", "w", "--manifest", path)
    assert err.value.returncode == 2
    assert message in str(err.value)
    assert snapshot() == before


def test_a_bad_line_after_many_good_ones_still_writes_nothing(shop, tmp_path):
    good = "".join(f"http://a.test/product/{i}\n" for i in range(2500))
    path = write(tmp_path, "m.txt", good + "http://a.test/ok\nmailto:x@a.test\n")
    before = snapshot()
    with pytest.raises(CommandError) as err:
        createrun("shop", "--window", "w", "--manifest", path)
    assert "line 2502: invalid URL" in str(err.value)
    assert snapshot() == before


def test_the_error_lists_several_bad_lines_and_counts_the_rest(shop, tmp_path):
    path = write(tmp_path, "m.txt", "".join(f"ftp://a.test/{i}\n" for i in range(30)))
    with pytest.raises(CommandError) as err:
        createrun("shop", "--window", "w", "--manifest", path)
    message = str(err.value)
    assert message.count("invalid URL") == 10
    assert "30 bad line(s)" in message
    assert "(and 20 more)" in message


def test_the_manifest_partition_rule_needs_the_column(by_manifest_column, tmp_path):
    path = write(tmp_path, "m.csv", "url,partition\nhttp://a.test/1,north\nhttp://a.test/2,\n")
    with pytest.raises(CommandError) as err:
        createrun("retail", "--window", "w", "--manifest", path)
    assert "line 3: the dataset partitions by manifest column" in str(err.value)
    assert not Task.objects.exists()


@pytest.mark.parametrize("window", ["", "has space", "a/b", "x" * 65, "naïve", "w;drop"])
def test_a_bad_window_exits_2(shop, tmp_path, window):
    path = write(tmp_path, "m.txt", "http://a.test/1\n")
    with pytest.raises(CommandError) as err:
        createrun("shop", "--window", window, "--manifest", path)
    assert err.value.returncode == 2
    assert "--window" in str(err.value)
    assert not Run.objects.exists()


@pytest.mark.parametrize("window", ["2026-11-29", "2026-W48", "2026-11-29T00:00", "a.b_c"])
def test_good_windows_are_accepted(shop, tmp_path, window):
    createrun("shop", "--window", window, "--manifest", write(tmp_path, "m.txt", "http://a.test"))
    assert Run.objects.get().window == window


def test_an_unknown_dataset_exits_2(shop, tmp_path):
    path = write(tmp_path, "m.txt", "http://a.test/1\n")
    with pytest.raises(CommandError) as err:
        createrun("shoe", "--window", "w", "--manifest", path)
    assert err.value.returncode == 2
    assert "unknown dataset 'shoe' (known: shop)" in str(err.value)
    assert not Run.objects.exists()


@pytest.mark.parametrize("target", ["missing.csv", "."])
def test_an_unreadable_manifest_exits_2(shop, tmp_path, target):
    with pytest.raises(CommandError) as err:
        createrun("shop", "--window", "w", "--manifest", str(tmp_path / target))
    assert err.value.returncode == 2
    assert "cannot read manifest" in str(err.value)
    assert not Run.objects.exists()


def test_a_bad_scraper_version_exits_2(shop, tmp_path):
    path = write(tmp_path, "m.txt", "http://a.test/1\n")
    with pytest.raises(CommandError) as err:
        createrun("shop", "--window", "w", "--manifest", path, "--scraper-version", "v" * 65)
    assert err.value.returncode == 2
    assert not Run.objects.exists()


def test_the_example_manifest_loads(shop):
    lines = createrun(
        "shop", "--window", "demo", "--manifest", str(ROOT / "examples/shop-manifest.csv")
    )
    run = Run.objects.get(pk=int(lines[-1]))
    assert run.task_total == 9  # ten lines, one a second spelling of product/1
    assert "1 duplicate URL(s) collapsed" in lines[1]


@pytest.mark.parametrize("name", ["m.txt", "m.jsonl"])
def test_line_numbers_match_an_editors_with_crlf_and_form_feeds(shop, tmp_path, name):
    urls = ["http://a.test/1", "http://a.test/2\x0c\u2028", "ftp://a.test/3"]
    if name.endswith(".jsonl"):
        urls = [json.dumps({"url": u}, ensure_ascii=False) for u in urls]
    path = write(tmp_path, name, "\r\n".join(urls) + "\r\n")
    with pytest.raises(CommandError) as err:
        createrun("shop", "--window", "w", "--manifest", path)
    assert "1 bad line(s)" in str(err.value)
    assert "line 3: invalid URL" in str(err.value)
