"""Datasets from the browser: an admin's spec and manifest uploads run the command line's
checks, say what the commands say, and write nothing when they refuse (SQLite and PostgreSQL)."""

from __future__ import annotations

import io
import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.test import Client

from recovery import counters
from recovery.models import AuditEntry, Dataset, Run, Task
from tests.support.uploads import (
    BAD_MANIFEST,
    BAD_SPEC,
    BAD_SPEC_LINE,
    SHOP_MANIFEST,
    SHOP_SPEC,
    command_error,
    table_counts,
)
from tests.support.world import make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin():
    client = Client()
    client.force_login(make_user("adam", "admin"))
    return client


def _file(name: str, content: str | bytes) -> SimpleUploadedFile:
    return SimpleUploadedFile(name, content.encode() if isinstance(content, str) else content)


def _text(response) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", response.content.decode()))


def _unescaped(message: str) -> str:
    from django.utils.html import escape

    return re.sub(r"\s+", " ", str(escape(message)))


def test_a_good_spec_upload_stores_exactly_what_loaddataset_stores(admin):
    response = admin.post("/datasets/upload", {"spec": _file("shop.toml", SHOP_SPEC.read_bytes())})
    assert response.status_code == 302
    dataset = Dataset.objects.get(name="shop")
    assert response["Location"] == "/datasets/shop/"
    out = io.StringIO()
    call_command("loaddataset", str(SHOP_SPEC), stdout=out)
    assert out.getvalue().strip() == f"dataset shop unchanged (spec {dataset.spec_sha256[:12]})"
    entry = AuditEntry.objects.get(action="dataset_created")
    assert entry.actor == "adam"
    assert entry.detail["spec"] == dataset.spec  # the version is kept for the history
    page = admin.get("/datasets/shop/")
    assert dataset.spec_sha256 in page.content.decode()
    assert "dataset_created" in _text(page) and "adam" in _text(page)


def test_a_bad_spec_upload_says_what_loaddataset_says_and_writes_nothing(
    admin, tmp_path, monkeypatch
):
    (tmp_path / "typo.toml").write_text(BAD_SPEC)
    expected = command_error("loaddataset", "typo.toml", cwd=tmp_path, monkeypatch=monkeypatch)
    assert expected.startswith("typo.toml: page_types.product.fields.sku.requried: unknown key")
    before = table_counts()

    response = admin.post("/datasets/upload", {"spec": _file("typo.toml", BAD_SPEC)})

    assert response.status_code == 400
    assert table_counts() == before
    html = response.content.decode()
    assert _unescaped(expected) in re.sub(r"\s+", " ", html)
    # The line the key is on is shown and marked.
    marked = re.search(r'<span class="bad-line">\s*(\d+) \| ([^<]*)</span>', html)
    assert marked and int(marked.group(1)) == BAD_SPEC_LINE
    assert "requried = true" in marked.group(2)


def test_a_spec_with_invalid_toml_points_at_its_line(admin):
    response = admin.post("/datasets/upload", {"spec": _file("broken.toml", 'name = "x"\n[[\n')})
    assert response.status_code == 400
    assert "broken.toml: invalid TOML" in _text(response)
    assert re.search(r'<span class="bad-line">\s*2 \|', response.content.decode())


def _manifest_post(client, dataset: str, name: str, content, **fields):
    data = {"window": "2026-12-01", "manifest": _file(name, content), **fields}
    return client.post(f"/datasets/{dataset}/runs", data)


def test_a_good_manifest_upload_creates_the_run_createrun_creates(admin):
    call_command("loaddataset", str(SHOP_SPEC), stdout=io.StringIO())
    response = _manifest_post(admin, "shop", "shop-manifest.csv", SHOP_MANIFEST.read_bytes())
    assert response.status_code == 302
    uploaded = Run.objects.get(window="2026-12-01")
    assert response["Location"] == f"/runs/{uploaded.pk}/"

    out = io.StringIO()
    call_command(
        "createrun", "shop", "--window", "2026-12-02", "--manifest", str(SHOP_MANIFEST), stdout=out
    )
    by_command = Run.objects.get(pk=int(out.getvalue().splitlines()[-1]))

    def shape(run):
        return sorted(
            Task.objects.filter(run=run).values_list(
                "url", "page_type", "partition", "priority", "state"
            )
        )

    assert shape(uploaded) == shape(by_command)
    assert uploaded.task_total == by_command.task_total == 9
    assert uploaded.manifest_sha256 == by_command.manifest_sha256
    assert counters.by_state(uploaded.pk) == counters.by_state(by_command.pk)
    assert AuditEntry.objects.get(action="run_created", object_id=str(uploaded.pk)).actor == "adam"
    # The page says what the command printed (run id and window aside).
    shown = [str(m) for m in admin.get(response["Location"]).context["messages"]]
    printed = out.getvalue().splitlines()[:-1]

    def same(lines, run, window):
        return [line.replace(f"run {run.pk} ", "").replace(window, "W") for line in lines]

    assert same(printed, by_command, "2026-12-02") == same(shown, uploaded, "2026-12-01")


def test_a_bad_manifest_upload_says_what_createrun_says_lists_ten_lines_and_writes_nothing(
    admin, tmp_path, monkeypatch
):
    call_command("loaddataset", str(SHOP_SPEC), stdout=io.StringIO())
    (tmp_path / "bad.csv").write_text(BAD_MANIFEST)
    expected = command_error(
        "createrun",
        "shop",
        "--window",
        "2026-12-01",
        "--manifest",
        "bad.csv",
        cwd=tmp_path,
        monkeypatch=monkeypatch,
    )
    assert expected.startswith("bad.csv: 12 bad line(s), nothing written: line 2:")
    before = table_counts()

    response = _manifest_post(admin, "shop", "bad.csv", BAD_MANIFEST)

    assert response.status_code == 400
    assert table_counts() == before
    html = response.content.decode()
    assert _unescaped(expected) in re.sub(r"\s+", " ", html)
    listed = re.findall(r"<li>([^<]*)</li>", html.split('id="bad-lines"')[1].split("</ol>")[0])
    assert len(listed) == 11  # the first ten bad lines, then "and 2 more"
    assert listed[0] == "line 2: priority &#x27;high&#x27; must be an integer"
    assert listed[1].startswith("line 5: invalid URL")
    assert listed[-1] == "and 2 more"


def test_a_window_refusal_is_shown_beside_the_window_field(admin, tmp_path, monkeypatch):
    call_command("loaddataset", str(SHOP_SPEC), stdout=io.StringIO())
    before = table_counts()
    response = _manifest_post(
        admin, "shop", "m.csv", SHOP_MANIFEST.read_bytes(), window="not a window"
    )
    assert response.status_code == 400
    assert table_counts() == before
    expected = command_error(
        "createrun",
        "shop",
        "--window",
        "not a window",
        "--manifest",
        str(SHOP_MANIFEST),
        cwd=tmp_path,
        monkeypatch=monkeypatch,
    )
    html = response.content.decode()
    window_part = html.split('name="window"')[1].split("<label")[0]
    assert _unescaped(expected) in re.sub(r"\s+", " ", window_part)


@pytest.mark.parametrize("size", [30_000, 300_000])  # streamed past the cap / declared too big
def test_an_upload_over_the_cap_is_refused_with_a_clear_message(admin, settings, size):
    call_command("loaddataset", str(SHOP_SPEC), stdout=io.StringIO())
    settings.SALVAGE_MANIFEST_UPLOAD_MAX_BYTES = 10_000
    settings.SALVAGE_SPEC_UPLOAD_MAX_BYTES = 10_000
    before = table_counts()
    lines = "url\n" + "".join(f"http://shop.test/product/{i}\n" for i in range(size // 28))
    manifest = _manifest_post(admin, "shop", "big.csv", lines)
    spec = admin.post("/datasets/upload", {"spec": _file("big.toml", "#" * size)})
    for response, what in ((manifest, "manifest"), (spec, "spec")):
        assert response.status_code == 413
        assert f"The {what} is larger than the upload limit of 0.01 MB" in _text(response)
    assert table_counts() == before


def test_operators_see_datasets_but_no_upload_form(tmp_path):
    call_command("loaddataset", str(SHOP_SPEC), stdout=io.StringIO())
    client = Client()
    client.force_login(make_user("olivia", "operator"))
    listing = client.get("/datasets/")
    assert listing.status_code == 200
    assert "shop" in _text(listing) and "Upload a spec" not in _text(listing)
    detail = client.get("/datasets/shop/")
    assert detail.status_code == 200
    assert "Create a run from a manifest" not in _text(detail)


# Issue 27's fault test: inputs that used to end in an HTTP 500 get the form's error instead.
REFUSED_SPECS = [
    (
        "huge.toml",
        SHOP_SPEC.read_bytes().replace(b"max_attempts = 5", b"max_attempts = " + b"1" * 24),
        "max_attempts: must be between 1 and 2147483647",
    ),
    (
        "inf.toml",
        SHOP_SPEC.read_bytes()
        + b'\n[[rules]]\nname = "cap"\nkind = "range"\nfield = "price"\nmax = inf\n',
        "rules.cap.max: must be a finite number, got inf",
    ),
    (
        "deep.json",
        b'{"name": "shop", "a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        "deep.json: nested deeper than 64 levels",
    ),
    (
        "deep.toml",
        b'name = "shop"\na = ' + b"[" * 5_000 + b"]" * 5_000 + b"\n",
        "deep.toml: nested deeper than 64 levels",
    ),
    (
        "nul.toml",
        SHOP_SPEC.read_bytes().replace(
            b'name = "shop"', b'name = "shop"\ndescription = "a\\u0000"'
        ),
        "description: contains a NUL character",
    ),
]


@pytest.mark.parametrize(("name", "content", "message"), REFUSED_SPECS)
def test_a_refused_spec_upload_is_a_form_error_not_a_500(admin, name, content, message):
    before = table_counts()
    response = admin.post("/datasets/upload", {"spec": _file(name, content)})
    assert response.status_code == 400
    assert message in _text(response)
    assert table_counts() == before


def test_a_spec_with_a_byte_order_mark_is_stored(admin):
    content = b"\xef\xbb\xbf" + SHOP_SPEC.read_bytes()
    response = admin.post("/datasets/upload", {"spec": _file("shop.toml", content)})
    assert response.status_code == 302
    assert Dataset.objects.get(name="shop").spec["default_page_type"] == "product"


def test_a_manifest_line_nested_too_deep_is_a_form_error(admin):
    call_command("loaddataset", str(SHOP_SPEC), stdout=io.StringIO())
    before = table_counts()
    content = '{"url": "http://a.test/1"}\n{"url": ' + "[" * 1000 + "]" * 1000 + "}\n"
    response = _manifest_post(admin, "shop", "deep.jsonl", content)
    assert response.status_code == 400
    assert "line 2: nested too deeply" in _text(response)
    assert table_counts() == before


def test_a_spec_upload_lists_every_problem_beside_the_field(admin):
    content = (
        SHOP_SPEC.read_text()
        .replace("max_attempts = 5", "max_attempts = 0")
        .replace("auto_accept = false", 'auto_accept = "yes"')
    )
    before = table_counts()
    response = admin.post("/datasets/upload", {"spec": _file("shop.toml", content)})
    assert response.status_code == 400
    errors = re.findall(
        r'<p class="field-error" role="alert">([^<]+)</p>', response.content.decode()
    )
    assert errors == [
        "shop.toml: auto_accept: must be true or false",
        "shop.toml: max_attempts: must be &gt;= 1, got 0",
    ]
    assert table_counts() == before


def _v2() -> bytes:
    return SHOP_SPEC.read_bytes().replace(b'scraper_version = "1"', b'scraper_version = "2"')


def _confirm_fields(page: str) -> dict[str, str]:
    form = page[page.index('id="spec-confirm"') :]
    return dict(
        re.findall(
            r'<input type="hidden" name="(staged|staged_name|replaces)" value="([^"]*)"', form
        )
    )


def test_a_new_version_shows_the_diff_and_is_stored_only_once_confirmed(admin):
    call_command("loaddataset", str(SHOP_SPEC), stdout=io.StringIO())
    v1 = Dataset.objects.get(name="shop").spec_sha256
    before = table_counts()

    preview = admin.post("/datasets/upload", {"spec": _file("shop.toml", _v2())})
    assert preview.status_code == 200
    page = preview.content.decode()
    assert '<span class="diff-del">-  &quot;scraper_version&quot;: &quot;1&quot;</span>' in page
    assert '<span class="diff-add">+  &quot;scraper_version&quot;: &quot;2&quot;</span>' in page
    assert table_counts() == before and Dataset.objects.get(name="shop").spec_sha256 == v1

    fields = _confirm_fields(page)
    assert fields["replaces"] == v1 and fields["staged_name"] == "shop.toml"
    confirmed = admin.post("/datasets/upload", fields)
    assert confirmed.status_code == 302
    dataset = Dataset.objects.get(name="shop")
    assert dataset.spec["scraper_version"] == "2"
    entry = AuditEntry.objects.get(action="dataset_updated")
    assert (entry.actor, entry.detail["previous_sha256"]) == ("adam", v1)


def test_a_confirmation_drawn_against_an_older_version_shows_the_diff_again(admin, tmp_path):
    call_command("loaddataset", str(SHOP_SPEC), stdout=io.StringIO())
    fields = _confirm_fields(
        admin.post("/datasets/upload", {"spec": _file("shop.toml", _v2())}).content.decode()
    )
    # Another admin saves version 3 in the meantime.
    v3 = tmp_path / "shop.toml"
    v3.write_bytes(
        SHOP_SPEC.read_bytes().replace(b'scraper_version = "1"', b'scraper_version = "3"')
    )
    call_command("loaddataset", str(v3), stdout=io.StringIO())
    current = Dataset.objects.get(name="shop").spec_sha256

    again = admin.post("/datasets/upload", fields)
    assert again.status_code == 200
    page = again.content.decode()
    assert 'id="spec-moved"' in page
    assert '<span class="diff-del">-  &quot;scraper_version&quot;: &quot;3&quot;</span>' in page
    assert Dataset.objects.get(name="shop").spec_sha256 == current
    assert _confirm_fields(page)["replaces"] == current


def test_a_forged_confirmation_is_refused_and_stores_nothing(admin):
    call_command("loaddataset", str(SHOP_SPEC), stdout=io.StringIO())
    before = table_counts()
    forged = {"staged": "not base64!", "staged_name": "shop.toml", "replaces": "0" * 64}
    response = admin.post("/datasets/upload", forged)
    assert response.status_code == 400
    assert "the confirmed spec is not valid base64" in _text(response)
    assert table_counts() == before
