"""The scraping floor: aiohttp + the product's page checks and fields + batch claim/commit.

One process of the floor side of bench/scrape.py. It does what a Salvage worker must do for a
page, with nothing else around it:
- claim 50 tasks from the bench's bare two-index tables (bench/bare_floor.py);
- fetch them with one aiohttp session, `--concurrency` requests in flight;
- decode each body as UTF-8 (strictly), parse it with selectolax, run the spec's page checks
  (fetch.pagechecks.check_page) and extract its fields and entity key (fetch.extraction);
- commit the 50 in one transaction (fenced UPDATE, attempt INSERT, observation upsert of the
  canonical JSON payload and its SHA-256); loop until no task is due.
No outbound-safety guard, retries, counters, heartbeats, cookies or artefacts: this is the
floor, what the work costs when done by hand.

    python bench/scrape_floor.py --db postgres://.../db|sqlite:///path --spec shop.toml \
        --concurrency 8 --worker floor-0

Prints one JSON line: {"committed", "failed", "cpu_s"}.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import resource

from bare_floor import PgBare, SqliteBare
from selectolax.lexbor import LexborHTMLParser

from recovery.fetch import extraction
from recovery.fetch.pagechecks import PageCheckFailure, PageView, check_page
from recovery.intake import specs

BATCH = 50


def page_row(spec: dict, page_spec: dict, key: str, token: int, url: str, body: bytes) -> tuple:
    """(task_key, lease_token, payload JSON, payload hash, observation key) of one page;
    raises on a page the product would not accept."""
    view = PageView(LexborHTMLParser(body.decode("utf-8")))
    check_page(view, page_spec)
    values = extraction.extract_fields(view.tree, page_spec.get("fields") or {})
    entity = extraction.entity_key(spec, values, url)
    payload = json.dumps(values, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    digest = hashlib.sha256(payload.encode()).hexdigest()
    okey = hashlib.sha256(f"{spec['name']}|w|{entity}".encode()).hexdigest()
    return key, token, payload, digest, okey


async def crawl(store, spec: dict, concurrency: int, committer=None) -> tuple[int, int]:
    """`committer`: a second store; batch N then commits on it in a thread while batch N+1 is
    claimed and fetched (--pipelined, as the engine does on PostgreSQL)."""
    import aiohttp

    page_spec = spec["page_types"]["product"]
    gate = asyncio.Semaphore(concurrency)
    committed = failed = 0
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one(key: str, token: int, url: str) -> tuple | None:
            async with gate, session.get(url) as response:
                body = await response.read()
                if response.status != 200:
                    return None
            try:
                return page_row(spec, page_spec, key, token, url, body)
            except (PageCheckFailure, extraction.ExtractionError, UnicodeDecodeError):
                return None

        pending = None
        while True:
            claimed = store.claim(BATCH)
            if not claimed:
                break
            rows = await asyncio.gather(*(one(*task) for task in claimed))
            good = [row for row in rows if row is not None]
            failed += len(rows) - len(good)
            if committer is None:
                committed += store.commit(good)
                continue
            if pending is not None:
                committed += await pending
            pending = asyncio.ensure_future(asyncio.to_thread(committer.commit, good))
        if pending is not None:
            committed += await pending
    return committed, failed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True, help="postgres://... or sqlite:///path")
    parser.add_argument("--spec", required=True)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--worker", default="floor-0")
    parser.add_argument(
        "--pipelined",
        action="store_true",
        help="commit each batch on a second connection in a thread while the next is claimed "
        "and fetched (PostgreSQL)",
    )
    args = parser.parse_args()
    spec = specs.validate(specs.parse_file(args.spec))
    if args.db.startswith("sqlite:///"):
        store = SqliteBare(args.db.removeprefix("sqlite:///"), args.worker)
    else:
        store = PgBare(args.db, args.worker)
    committer = PgBare(args.db, args.worker) if args.pipelined else None
    if committer is not None and isinstance(store, SqliteBare):
        parser.error("--pipelined: PostgreSQL only")
    committed, failed = asyncio.run(crawl(store, spec, args.concurrency, committer))
    store.close()
    if committer is not None:
        committer.close()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(
        json.dumps(
            {
                "committed": committed,
                "failed": failed,
                "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
