"""The pull API over real sockets: httpx against a live server, with personal tokens.

Each format downloads with a token (the Parquet file equals the CSV row for row); a download
cut at half resumes with Range to the same bytes; If-None-Match gives 304; revoked, expired,
out-of-scope and unknown tokens are refused in the one error shape and audited; the rate limit
answers 429; rows pages keep their run while the dataset is replaced; a consumer syncing from
the change feed ends with the rows of a full download.
"""

from __future__ import annotations

import csv
import io
import json
from datetime import timedelta
from decimal import Decimal

import httpx
import pyarrow.parquet as pq
import pytest
from django.core.cache import cache
from django.utils import timezone

from recovery.consumers import catalogue, tokens
from recovery.consumers.models import ApiToken
from recovery.delivery import exports
from recovery.models import AuditEntry, Observation
from recovery.quality import acceptance, reruns
from tests.support.acceptance import commit_claimed, lenient_shop, make_collected_run, make_shop
from tests.support.factories import make_run, make_tasks
from tests.support.world import make_user

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def api(live_server, settings, tmp_path):
    settings.SALVAGE_EXPORT_CACHE_DIR = tmp_path / "export-cache"
    settings.SALVAGE_OUTBOX_WAKE = False
    cache.clear()  # the rate limit's counts from earlier tests
    return f"{live_server.url}/api/v1/"


def token_for(user, datasets=None, days=30) -> str:
    return tokens.create_token(
        user.pk, name="test", datasets=datasets, days=days, actor=user.username
    ).secret


def client(base: str, secret: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {secret}"} if secret else {}
    return httpx.Client(base_url=base, headers=headers, timeout=30)


def accepted(per_partition=6, dataset=None):
    run = make_collected_run({"a": "good"}, per_partition=per_partition, dataset=dataset)
    acceptance.advance_runs()
    acceptance.accept_run(run.pk, "admin")
    return run


def csv_rows(data: bytes) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(data.decode(), newline="")))


def test_it_downloads_each_format_with_a_token(api):
    run = accepted()
    name = run.dataset.name
    secret = token_for(make_user("erin", "exporter"))
    with client(api, secret) as http:
        listing = http.get("datasets").json()
        assert [d["name"] for d in listing["datasets"]] == [name]
        found = http.get(f"datasets/{name}").json()
        assert found["current_run"]["id"] == run.pk
        assert found["current_run"]["rows"] == 6
        assert found["current_run"]["formats"] == ["csv", "jsonl", "parquet"]
        assert found["version"] >= 1
        got = {}
        for fmt in exports.FORMATS:
            response = http.get(f"datasets/{name}/current.{fmt}")
            assert response.status_code == 200, response.text
            assert response.headers["etag"].startswith('"')
            assert response.headers["salvage-version"] == str(found["version"])
            # What a saved file is checked against (docs/api.md, "Checking a download").
            assert response.headers["salvage-rows"] == str(found["current_run"]["rows"])
            got[fmt] = response.content
            # Served again from the file written the first time: same bytes, now with a length.
            again = http.get(f"runs/{run.pk}/export.{fmt}")
            assert again.content == response.content
            assert again.headers["content-length"] == str(len(response.content))
    assert response.headers["content-type"] == "application/vnd.apache.parquet"
    cells = csv_rows(got["csv"])
    assert len(got["jsonl"].splitlines()) == len(cells) == 6
    table = pq.read_table(io.BytesIO(got["parquet"]))
    assert table.schema.field("price").type.scale == 2
    for row, cell in zip(table.to_pylist(), cells, strict=True):
        assert row["observation_key"] == cell["observation_key"]
        assert row["version"] == int(cell["version"])
        assert row["price"] == Decimal(cell["price"])
        assert row["title"] == cell["title"] and row["sku"] == cell["sku"]
    assert AuditEntry.objects.filter(action="api_request", actor="erin").count() >= 8


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_a_download_interrupted_at_half_resumes_with_range(api, fmt):
    run = accepted(per_partition=60)
    secret = token_for(make_user("erin", "exporter"))
    url = f"datasets/{run.dataset.name}/current.{fmt}"
    with client(api, secret) as http:
        # The first download streams while the file is written; the client stops at half.
        with http.stream("GET", url) as response:
            tag = response.headers["etag"]
            part = b""
            for chunk in response.iter_bytes(1024):
                part += chunk
                if len(part) >= 2048:
                    break
        # How long the whole is, known once the file exists (a Range request writes it).
        probe = http.get(url, headers={"Range": "bytes=0-0", "If-Range": tag})
        assert probe.status_code == 206
        size = int(probe.headers["content-range"].rsplit("/", 1)[1])
        half = size // 2
        part = part[:half] if len(part) >= half else part
        rest = http.get(url, headers={"Range": f"bytes={len(part)}-", "If-Range": tag})
        assert rest.status_code == 206
        assert rest.headers["content-range"] == f"bytes {len(part)}-{size - 1}/{size}"
        assert int(rest.headers["content-length"]) == size - len(part)
        whole = http.get(url)
    assert whole.status_code == 200
    assert part + rest.content == whole.content
    assert len(whole.content) == size
    if fmt == "parquet":
        assert pq.read_table(io.BytesIO(part + rest.content)).num_rows == 60


def test_if_none_match_gives_304_until_the_content_changes(api):
    run = accepted()
    secret = token_for(make_user("erin", "exporter"))
    url = f"runs/{run.pk}/export.jsonl"
    with client(api, secret) as http:
        tag = http.get(url).headers["etag"]
        assert http.get(url, headers={"If-None-Match": tag}).status_code == 304
        obs = Observation.objects.filter(run=run).order_by("pk").first()
        Observation.objects.filter(pk=obs.pk).update(
            payload={**obs.payload, "title": "changed"}, version=2, updated_at=timezone.now()
        )
        changed = http.get(url, headers={"If-None-Match": tag})
        assert changed.status_code == 200 and changed.headers["etag"] != tag
        # A resume against the old tag gets the whole new file, not a mix of two versions.
        resumed = http.get(url, headers={"Range": "bytes=10-", "If-Range": tag})
        assert resumed.status_code == 200 and resumed.content == changed.content


def test_refused_tokens_answer_in_one_shape_and_are_audited(api):
    mine = accepted()
    other = accepted(dataset=make_shop())
    erin = make_user("erin", "exporter")
    scoped = token_for(erin, datasets=[mine.dataset.name])
    revoked = token_for(erin)
    expired = token_for(erin)
    tokens.revoke_token(
        ApiToken.objects.get(prefix=tokens.prefix_of(revoked)).pk,
        "erin",
        actor_may_manage=False,
        actor_id=erin.pk,
    )
    ApiToken.objects.filter(prefix=tokens.prefix_of(expired)).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    cases = [
        (revoked, f"datasets/{mine.dataset.name}", 401, "token_revoked"),
        (expired, f"datasets/{mine.dataset.name}/current.csv", 401, "token_expired"),
        (scoped, f"datasets/{other.dataset.name}/current.csv", 403, "out_of_scope"),
        (scoped, f"runs/{other.pk}/export.parquet", 403, "out_of_scope"),
        ("slv_00000000_forged", "datasets", 401, "invalid_token"),
        (None, "datasets", 401, "not_authenticated"),
    ]
    for secret, path, status, code in cases:
        with client(api, secret) as http:
            response = http.get(path)
        assert response.status_code == status, (path, response.text)
        assert response.json() == {
            "error": {"code": code, "message": response.json()["error"]["message"]}
        }
        assert response.json()["error"]["message"]
        if status == 401:
            assert response.headers["www-authenticate"].startswith("Bearer")
    refused = AuditEntry.objects.filter(action="api_refused")
    assert sorted(refused.values_list("reason", flat=True)) == sorted(c[3] for c in cases)
    by_code = {entry.reason: entry for entry in refused}
    assert by_code["token_revoked"].actor == "erin"
    assert by_code["token_revoked"].detail["token"] == tokens.prefix_of(revoked)
    assert by_code["out_of_scope"].detail["status"] == 403
    assert by_code["invalid_token"].actor == "anonymous"
    # In scope, the scoped token reads; the listing shows only its datasets.
    with client(api, scoped) as http:
        assert [d["name"] for d in http.get("datasets").json()["datasets"]] == [mine.dataset.name]
    # A user who leaves the exporter role: every token of theirs stops working.
    erin.groups.clear()
    with client(api, scoped) as http:
        response = http.get("datasets")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "not_exporter"


def test_the_rate_limit_answers_429_per_token(api, settings):
    settings.SALVAGE_API_RATE = "3/minute"
    erin = make_user("erin", "exporter")
    first, second = token_for(erin), token_for(erin)
    with client(api, first) as http:
        answers = [http.get("datasets") for _ in range(4)]
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    assert answers[-1].json()["error"]["code"] == "throttled"
    assert int(answers[-1].headers["retry-after"]) > 0
    with client(api, second) as http:
        assert http.get("datasets").status_code == 200  # another token, its own count


def test_rows_pages_keep_their_run_while_the_dataset_is_replaced(api):
    dataset = make_shop()
    first = accepted(per_partition=5, dataset=dataset)
    secret = token_for(make_user("erin", "exporter"))
    with client(api, secret) as http:
        page = http.get(f"datasets/{dataset.name}/rows", params={"limit": 2}).json()
        assert page["run"] == first.pk and len(page["rows"]) == 2
        assert page["next"].startswith(f"{first.pk}:")
        seen = list(page["rows"])
        second = accepted(per_partition=3, dataset=dataset)  # replaces the first
        while page["next"]:
            page = http.get(
                f"datasets/{dataset.name}/rows", params={"after": page["next"], "limit": 2}
            ).json()
            assert page["run"] == first.pk
            seen.extend(page["rows"])
        fresh = http.get(f"datasets/{dataset.name}/rows").json()
        bad = http.get(f"datasets/{dataset.name}/rows", params={"after": "x"})
    full = [json.loads(line) for line in "".join(exports.stream(first.pk, "jsonl")).splitlines()]
    assert seen == full
    assert fresh["run"] == second.pk and len(fresh["rows"]) == 3 and fresh["next"] is None
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_cursor"


def scraped(price_for_b: str):
    def payload(claimed):
        price = price_for_b if claimed.partition == "b" else "9.99"
        return {"title": f"Item {claimed.task_id}", "price": price, "sku": f"SKU-{claimed.task_id}"}

    return payload


def collect(dataset, window: str, price: str):
    run = make_run(dataset, window=window)
    make_tasks(run, 4, partition="a", host="a.test")
    make_tasks(run, 4, partition="b", host="b.test")
    commit_claimed("w1", scraped(price))
    acceptance.advance_runs()
    acceptance.accept_run(run.pk, "admin")
    acceptance.publish_run(run.pk, "admin")
    return run


def correct(run, price: str):
    reruns.create_recovery_batch(
        run.pk, partitions=["b"], reason="price was wrong", scraper_version="2", actor="adam"
    )
    commit_claimed("w2", scraped(price))
    acceptance.advance_runs()


class Consumer:
    """A consumer that keeps a copy of a dataset by the change feed (docs/api.md, Syncing)."""

    def __init__(self, http: httpx.Client, name: str):
        self.http, self.name = http, name
        self.version, self.run, self.rows = 0, None, {}
        self.downloads = self.applied = 0

    def sync(self) -> None:
        while True:
            page = self.http.get(
                f"datasets/{self.name}/changes", params={"since": self.version, "limit": 3}
            ).json()
            if page["current_run"] != self.run:
                self.rows, self.run = self.download(page["current_run"]), page["current_run"]
                self.downloads += 1
            for change in page["changes"]:
                if change["kind"] == "correction" and change["run"] == self.run:
                    self.applied += 1
                    if change["row"] is None:
                        self.rows.pop(change["observation_key"], None)
                    else:
                        self.rows[change["observation_key"]] = change["row"]
            self.version = page["next_since"]
            if not page["more"]:
                return

    def download(self, run_id: int) -> dict:
        rows, after = {}, None
        while True:
            params = {"after": after} if after else {"run": run_id}
            page = self.http.get(f"datasets/{self.name}/rows", params=params).json()
            rows.update({row["observation_key"]: row for row in page["rows"]})
            after = page["next"]
            if not after:
                return rows


def full_download(http: httpx.Client, name: str) -> dict:
    text = http.get(f"datasets/{name}/current.jsonl").text
    return {row["observation_key"]: row for row in map(json.loads, text.splitlines())}


def test_a_consumer_syncing_by_the_change_feed_ends_with_a_full_downloads_rows(api):
    dataset = lenient_shop()
    secret = token_for(make_user("erin", "exporter"))
    with client(api, secret) as http:
        consumer = Consumer(http, dataset.name)
        first = collect(dataset, "2026-11-01", "5.00")
        consumer.sync()
        assert consumer.run == first.pk and consumer.rows == full_download(http, dataset.name)

        correct(first, "6.00")  # four corrections of the published run
        consumer.sync()
        assert consumer.downloads == 1 and consumer.applied == 4  # no download again
        assert consumer.rows == full_download(http, dataset.name)
        assert {row["payload"]["price"] for row in consumer.rows.values()} == {"9.99", "6.00"}

        second = collect(dataset, "2026-12-01", "7.00")  # the second publication replaces it
        correct(second, "8.00")
        consumer.sync()
        assert consumer.run == second.pk and consumer.downloads == 2
        assert consumer.rows == full_download(http, dataset.name)
        assert {row["payload"]["price"] for row in consumer.rows.values()} == {"9.99", "8.00"}
        found = http.get(f"datasets/{dataset.name}").json()
    assert consumer.version == found["version"]


def test_unknown_paths_and_the_schema(api):
    with httpx.Client(base_url=api, timeout=30) as http:
        missing = http.get("nothing/here")
        schema = http.get("schema")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"
    assert schema.status_code == 200
    from openapi_spec_validator import validate

    document = schema.json()
    validate(document)
    paths = set(document["paths"])
    assert "/api/v1/datasets/{name}/changes" in paths
    assert "/api/v1/runs/{run_id}/export.{fmt}" in paths
    assert "/api/v1/datasets/{name}/current.{fmt}" in paths
    # The formats are an enum, not the route's group written as a pattern (`^csv|jsonl|parquet$`
    # matched "csvX"); a download documents its headers and every answer it can give.
    export = document["paths"]["/api/v1/runs/{run_id}/export.{fmt}"]["get"]
    declared = {p["name"]: p["schema"] for p in export["parameters"]}
    assert declared["fmt"] == {"type": "string", "enum": ["csv", "jsonl", "parquet"]}
    assert declared["run_id"]["type"] == "integer"
    assert {"Range", "If-None-Match", "If-Range"} <= set(declared)
    assert {"200", "206", "304", "409", "416"} <= set(export["responses"])
    assert set(export["responses"]["206"]["content"]) == set(export["responses"]["200"]["content"])
    # The headers a download answers with are declared, and a real download carries each.
    run_export, current_export = "runs/{run_id}/export.{fmt}", "datasets/{name}/current.{fmt}"
    for route, status in [(run_export, "200"), (run_export, "206"), (current_export, "200")]:
        sent = document["paths"][f"/api/v1/{route}"]["get"]["responses"][status]["headers"]
        assert {"ETag", "Salvage-Rows", "Salvage-Run", "Accept-Ranges"} <= set(sent), route
    current = document["paths"]["/api/v1/datasets/{name}/current.{fmt}"]["get"]["responses"]
    assert "Salvage-Version" in current["200"]["headers"]
    assert "Content-Range" in export["responses"]["206"]["headers"]
    run = accepted()
    with client(api, token_for(make_user("erin", "exporter"))) as http:
        got = http.get(f"datasets/{run.dataset.name}/current.csv")
        part = http.get(f"runs/{run.pk}/export.csv", headers={"Range": "bytes=0-9"})
    assert (got.status_code, part.status_code) == (200, 206)
    for declared_headers, response in (
        (current["200"]["headers"], got),
        (export["responses"]["206"]["headers"], part),
    ):
        names = {name.lower() for name in response.headers}
        assert {name.lower() for name in declared_headers} <= names, sorted(names)
    rows = document["paths"]["/api/v1/datasets/{name}/rows"]["get"]
    assert "400" in rows["responses"]
    limit = next(p["schema"] for p in rows["parameters"] if p["name"] == "limit")
    assert (limit["minimum"], limit["maximum"]) == (1, catalogue.MAX_PAGE)


def test_the_latest_values_download_as_the_command_line_exports_them(api):
    from recovery.delivery import latest
    from tests.db.test_latest_observations import three_windows

    dataset, _windows = three_windows()
    other = accepted(dataset=make_shop())
    erin = make_user("erin", "exporter")
    with client(api, token_for(erin, datasets=[dataset.name])) as http:
        for fmt in latest.FORMATS:
            response = http.get(f"datasets/{dataset.name}/latest.{fmt}")
            assert response.status_code == 200, response.text
            assert response.content == b"".join(latest.stream_bytes(dataset.name, fmt))
            assert response.headers["salvage-version"].isdigit()
            assert f"{dataset.name}-latest.{fmt}" in response.headers["content-disposition"]
        cells = csv_rows(http.get(f"datasets/{dataset.name}/latest.csv").content)
        # SKU-2 is missing from the last window: its value is the window before's.
        assert [(c["entity_key"], c["window"], c["price"]) for c in cells] == [
            ("SKU-1", "2026-11-30", "12.00"),
            ("SKU-2", "2026-11-29", "21.00"),
            ("SKU-3", "2026-11-30", "32.00"),
        ]
        refused = http.get(f"datasets/{other.dataset.name}/latest.csv")
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "out_of_scope"
        assert http.get("datasets/nothing-here/latest.csv").status_code == 404
        assert http.get(f"datasets/{dataset.name}/latest.xlsx").status_code == 404
    paths = [
        e.detail["path"] for e in AuditEntry.objects.filter(action="api_request", actor="erin")
    ]
    assert f"/api/v1/datasets/{dataset.name}/latest.jsonl" in paths
