"""The Scrapy side of bench/scrape.py: crawl the manifest's product pages, write JSON lines.

    python bench/scrapy_shop.py --manifest M.csv --concurrency 16 --out items.jsonl [--tuned]

Scrapy runs with its defaults apart from the concurrency, no delay, robots.txt, telnet and
cookies off, and retries off (the shop serves no faults in the benchmark). It parses the same
fields as the shop's dataset spec with CSS selectors, coerces them the same way, and writes
items through a JSON-lines item pipeline. `--tuned` also sets CONCURRENT_ITEMS=1 (Scrapy's
default of 100 starts ~100 asyncio tasks per response: research/perf-baselines.md, section 4).
`--pg URL` writes the items to PostgreSQL instead (PgBatchPipeline): batches of 50, each one
transaction of one `executemany` upsert into `scrapy_observations` (observation key, entity
key, canonical JSON payload and its SHA-256, as the observations are), so Scrapy persists as
Salvage does; the table is created by bench/scrape.py (SCRAPY_PG_SCHEMA).
Prints one JSON line: items, crawl seconds (spider open to close) and CPU seconds.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import re
import resource
import time

import scrapy
from scrapy import signals
from scrapy.crawler import CrawlerProcess

_NOT_DIGITS = re.compile(r"[^0-9.\-]")


def decimal_text(text: str | None) -> str | None:
    """'£1,234.50' -> '1234.50' (what the spec's decimal type does)."""
    if not text:
        return None
    return _NOT_DIGITS.sub("", text) or None


class JsonLinesPipeline:
    def open_spider(self, spider):
        self.fh = open(spider.out, "w", encoding="utf-8")  # noqa: SIM115 (closed in close_spider)

    def close_spider(self, spider):
        self.fh.close()

    def process_item(self, item, spider):
        self.fh.write(json.dumps(item, ensure_ascii=False) + "\n")
        return item


SCRAPY_PG_SCHEMA = """
DROP TABLE IF EXISTS scrapy_observations;
CREATE TABLE scrapy_observations (
    id bigserial PRIMARY KEY,
    observation_key text NOT NULL UNIQUE,
    entity_key text NOT NULL,
    url text NOT NULL,
    payload jsonb NOT NULL,
    payload_hash text NOT NULL,
    observed_at timestamptz NOT NULL DEFAULT now()
);
"""
SCRAPY_PG_UPSERT = (
    "INSERT INTO scrapy_observations (observation_key, entity_key, url, payload, payload_hash) "
    "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (observation_key) DO UPDATE SET "
    "payload = EXCLUDED.payload, payload_hash = EXCLUDED.payload_hash, observed_at = now() "
    "WHERE scrapy_observations.payload_hash <> EXCLUDED.payload_hash"
)
PG_BATCH = 50
REACTORS = {
    "asyncio": "twisted.internet.asyncioreactor.AsyncioSelectorReactor",
    "epoll": "twisted.internet.epollreactor.EPollReactor",
}


class PgBatchPipeline:
    """Items to PostgreSQL in batches of PG_BATCH: one transaction of one executemany each."""

    def open_spider(self, spider):
        import psycopg

        self.conn = psycopg.connect(spider.pg_url, autocommit=True)
        self.rows: list[tuple] = []
        spider.written = 0

    def close_spider(self, spider):
        self.flush(spider)
        self.conn.close()

    def flush(self, spider):
        if not self.rows:
            return
        with self.conn.transaction(), self.conn.cursor() as cur:
            cur.executemany(SCRAPY_PG_UPSERT, self.rows)
        spider.written += len(self.rows)
        self.rows = []

    def process_item(self, item, spider):
        payload = json.dumps(item, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        entity = item.get("sku") or item["url"]
        okey = hashlib.sha256(f"shop|w|{entity}".encode()).hexdigest()
        digest = hashlib.sha256(payload.encode()).hexdigest()
        self.rows.append((okey, entity, item["url"], payload, digest))
        if len(self.rows) >= PG_BATCH:
            self.flush(spider)
        return item


class ShopSpider(scrapy.Spider):
    name = "shop"

    def __init__(self, urls: list[str], out: str, pg_url: str = "", **kwargs):
        super().__init__(**kwargs)
        self.urls, self.out, self.pg_url = urls, out, pg_url
        self.written = 0
        self.opened_at = self.closed_at = 0.0

    @classmethod
    def from_crawler(cls, crawler, *args, **kwargs):
        spider = super().from_crawler(crawler, *args, **kwargs)
        crawler.signals.connect(spider.on_open, signal=signals.spider_opened)
        crawler.signals.connect(spider.on_close, signal=signals.spider_closed)
        return spider

    def on_open(self, spider):
        self.opened_at = time.perf_counter()

    def on_close(self, spider):
        self.closed_at = time.perf_counter()

    async def start(self):
        for url in self.urls:
            yield scrapy.Request(url, callback=self.parse, dont_filter=True)

    def parse(self, response):
        product = response.css("div.product")
        reviews = product.css(".reviews::text").get()
        yield {
            "url": response.url,
            "title": " ".join((product.css("h1::text").get() or "").split()),
            "price": decimal_text(product.css(".price::text").get()),
            "sku": product.attrib.get("data-sku"),
            "retailer": product.attrib.get("data-retailer"),
            "in_stock": product.css(".stock::attr(data-in-stock)").get() == "true",
            "reviews": int(reviews) if reviews else None,
        }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--manifest", required=True)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--out", required=True)
    parser.add_argument("--tuned", action="store_true", help="CONCURRENT_ITEMS=1")
    parser.add_argument(
        "--reactor", choices=sorted(REACTORS), default="asyncio", help="Twisted's reactor"
    )
    parser.add_argument(
        "--lean", action="store_true", help="every extension and middleware off but the start"
    )
    parser.add_argument("--per-domain", type=int, default=0, help="default: --concurrency")
    parser.add_argument("--pg", default="", help="write the items to this PostgreSQL database")
    args = parser.parse_args()
    with open(args.manifest, newline="") as fh:
        urls = [row["url"] for row in csv.DictReader(fh) if row["page_type"] == "product"]
    settings = {
        "CONCURRENT_REQUESTS": args.concurrency,
        "CONCURRENT_REQUESTS_PER_DOMAIN": args.per_domain or args.concurrency,
        "TWISTED_REACTOR": REACTORS[args.reactor],
        "DOWNLOAD_DELAY": 0,
        "ROBOTSTXT_OBEY": False,
        "TELNETCONSOLE_ENABLED": False,
        "COOKIES_ENABLED": False,
        "RETRY_ENABLED": False,
        "LOG_LEVEL": "WARNING",
        "ITEM_PIPELINES": {PgBatchPipeline if args.pg else JsonLinesPipeline: 100},
    }
    if args.tuned:
        settings["CONCURRENT_ITEMS"] = 1
    if args.lean:  # the HTTP/1.1 download handler stays (the sandbox speaks plain HTTP/1.1)
        from scrapy.settings import default_settings as base

        settings["EXTENSIONS"] = dict.fromkeys(base.EXTENSIONS_BASE)
        settings["DOWNLOADER_MIDDLEWARES"] = dict.fromkeys(base.DOWNLOADER_MIDDLEWARES_BASE)
        keep = ("StartSpiderMiddleware", "HttpErrorMiddleware")
        settings["SPIDER_MIDDLEWARES"] = {
            name: None for name in base.SPIDER_MIDDLEWARES_BASE if not name.endswith(keep)
        }
    process = CrawlerProcess(settings=settings)
    crawler = process.create_crawler(ShopSpider)
    process.crawl(crawler, urls=urls, out=args.out, pg_url=args.pg)
    process.start()
    spider = crawler.spider
    if args.pg:
        items = spider.written  # rows committed to PostgreSQL
    else:
        with open(args.out, encoding="utf-8") as fh:
            items = sum(1 for _ in fh)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(
        json.dumps(
            {
                "items": items,
                "crawl_s": round(spider.closed_at - spider.opened_at, 3),
                "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
                "scrapy": scrapy.__version__,
            }
        )
    )


if __name__ == "__main__":
    main()
