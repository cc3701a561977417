"""The whole sandbox as one aiohttp application, plus the spec and manifest that match it.

`build_app()` serves the shop (recovery.sandbox.site) at `/` and mounts each provider simulator
that exists at its own prefix. `shop_spec_toml()` and `write_manifest()` produce a dataset spec
(docs/spec-format.md) and a CSV manifest for the shop at a given base URL, so anyone can point
Salvage at the sandbox and get the expected outcome (`site.expected_summary`).
"""

from __future__ import annotations

import csv
import importlib
import logging
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from recovery.sandbox import inflight, jsshop, robots, site, sitemaps

log = logging.getLogger(__name__)

# prefix -> module exposing make_app(**options); each is written separately and may be absent.
SIMULATORS = {
    "messora": "recovery.sandbox.messora",
    "tornado": "recovery.sandbox.tornado",
    "webscraper": "recovery.sandbox.webscraper",
    "destination": "recovery.sandbox.destination",
}
SIMULATORS_KEY = web.AppKey("simulators", dict)


def build_app(
    pages: int = 1000,
    seed: int = 0,
    faults: str = "none",
    *,
    simulators: dict[str, dict[str, Any]] | None = None,
    robots_txt: str | int | list = robots.ALLOW_ALL,
    robots_redirect_text: str = "",
    hold_seconds: float = 0.0,
    **shop_options: Any,
) -> web.Application:
    """The shop at `/` and every available simulator at `/<name>/`.

    `simulators` maps a simulator name to its make_app options; None mounts all that exist
    with their defaults. `app[site.SHOP_KEY]` is the Shop; `app[SIMULATORS_KEY]` maps each
    mounted name to its sub-application (for tests that reach into simulator state).
    `robots_txt` is what /robots.txt serves (recovery.sandbox.robots; allow-all by default) and
    `app[robots.REQUESTS]` logs every path requested, in order. The shop's sitemaps are at
    /sitemap_index.xml (recovery.sandbox.sitemaps). `app[inflight.MAX_IN_FLIGHT]` holds the
    most requests each host had in flight at once, each held `hold_seconds` before its answer
    (recovery.sandbox.inflight).
    """
    app = site.make_app(pages=pages, seed=seed, faults=faults, **shop_options)
    robots.install(app, robots_txt, robots_redirect_text)
    inflight.install(app, hold_seconds)
    sitemaps.install(app, pages)  # /sitemap_index.xml and /sitemaps/...
    # Pages that need JavaScript (the browser provider), at /js/.
    js = jsshop.make_app(pages=pages, seed=seed)
    app.add_subapp("/js/", js)
    app[jsshop.JS_REQUESTS] = js[jsshop.JS_REQUESTS]  # what the browser fetched, for tests
    mounted: dict[str, web.Application] = {}
    wanted = SIMULATORS if simulators is None else {k: SIMULATORS[k] for k in simulators}
    for name, module_name in wanted.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise  # the simulator exists but one of its imports is broken: say so
            log.debug("sandbox simulator %s not installed", name)
            continue
        sub = module.make_app(**(simulators or {}).get(name, {}))
        app.add_subapp(f"/{name}/", sub)
        mounted[name] = sub
    app[SIMULATORS_KEY] = mounted
    return app


PARTITION_RULES = ("manifest", "host")


# The price selector of each scraper version. Version 1 was written for the shop's original
# template; version 2 also reads the bad retailer's redesigned pages (site.render_product's
# new_template), where `.price` became the week's price change and the price is `.price-now`.
PRICE_SELECTORS = {
    1: "div.product .price",
    2: "div.product .price-now, div.product .price:not(.price-change)",
}


def shop_spec_toml(
    *,
    name: str = "sandbox-shop",
    partition_rule: str = "manifest",
    concurrency: int = 16,
    version: int = 1,
) -> str:
    """A dataset spec for the shop: markers, fields and rules matching its pages.

    The partition is the retailer: from the manifest's partition column (default), or the host
    (one partition on a single sandbox unless it serves --retailer-hosts). `version` is the
    scraper version: 2 carries the repaired price selector (seed 002's worked example).
    """
    if partition_rule not in PARTITION_RULES:
        raise ValueError(f"partition rule must be one of {', '.join(PARTITION_RULES)}")
    if version not in PRICE_SELECTORS:
        raise ValueError(f"scraper version must be one of {', '.join(map(str, PRICE_SELECTORS))}")
    price = PRICE_SELECTORS[version]
    return f'''# Dataset spec for the Salvage sandbox shop (manage.py sandbox --spec-out).
name = "{name}"
provider = "direct"
scraper_version = "{version}"
auto_accept = false
max_attempts = 5
max_elapsed_seconds = 3600

[entity_key]
field = "sku"

[partition]
rule = "{partition_rule}"

[provider_options]
concurrency = {concurrency}
per_host = {concurrency}

[page_types.product]
expect = {{ selector = "div.product" }}
consent = {{ selector = "#consent-banner" }}
login = {{ selector = "form#login" }}
challenge = {{ text = "verify you are (a )?human" }}
empty_shell = {{ min_text_chars = 40 }}

[page_types.product.fields]
title = {{ selector = "div.product h1", required = true }}
price = {{ selector = "{price}", type = "decimal", required = true }}
sku = {{ selector = "[data-sku]", attr = "data-sku", required = true }}
retailer = {{ selector = "[data-retailer]", attr = "data-retailer", required = true }}
in_stock = {{ selector = ".stock", attr = "data-in-stock", type = "bool" }}
reviews = {{ selector = ".reviews", type = "int" }}

[page_types.category.links]
selector = "a.product-link"
page_type = "product"
max_depth = 1
allow = ["/product/"]

[page_types.listing]
cursor = {{ selector = "a.next", attr = "href" }}

[page_types.listing.links]
selector = "a.product-link"
page_type = "product"
max_depth = 1
allow = ["/product/"]

[[rules]]
name = "coverage"
kind = "coverage"
min = 0.9

[[rules]]
name = "price_positive"
kind = "range"
field = "price"
min = 0.01
max = 100000

[[rules]]
name = "sku_pattern"
kind = "pattern"
field = "sku"
pattern = "^SKU-[0-9]{{6}}$"

[[rules]]
name = "required_complete"
kind = "required"
min = 1.0

[[rules]]
name = "partition_invalid_prices"
kind = "partition_invalid_share"
field = "price"
max = 0.05
'''


MANIFEST_MODES = ("products", "categories", "listing")


def manifest_rows(
    base_url: str,
    *,
    pages: int,
    seed: int = 0,
    mode: str = "products",
    retailer_hosts: bool = False,
) -> list[dict[str, str]]:
    """Manifest rows (url, page_type, partition) for the shop at base_url.

    products: every product page, partitioned by retailer (fixed inventory); with
    `retailer_hosts` each product's URL names its retailer's own address (site.retailer_host)
    so `partition.rule = "host"` partitions by retailer too. categories: the category pages
    (link discovery); listing: the first cursor page.
    """
    base = base_url.rstrip("/")
    if mode == "products":
        port = urlsplit(base).port
        rows = []
        for i in range(1, pages + 1):
            retailer = site.retailer_for(i, seed=seed)
            origin = f"http://{site.retailer_host(retailer)}:{port}" if retailer_hosts else base
            rows.append(
                {"url": f"{origin}/product/{i}", "page_type": "product", "partition": retailer}
            )
        return rows
    if mode == "categories":
        return [
            {"url": f"{base}/category/{c}", "page_type": "category", "partition": c}
            for c in site.CATEGORIES
        ]
    if mode == "listing":
        return [{"url": f"{base}/listing", "page_type": "listing", "partition": "listing"}]
    raise ValueError(f"manifest mode must be one of {', '.join(MANIFEST_MODES)}")


async def listen_on_retailer_hosts(runner: web.AppRunner, port: int) -> list[str]:
    """Also serve the runner's app on every retailer's loopback address, on the same port."""
    hosts = [site.retailer_host(r) for r in site.RETAILERS]
    for host in hosts:
        await web.TCPSite(runner, host, port, backlog=1024).start()
    return hosts


def write_manifest(path: str | Path, rows: list[dict[str, str]]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=["url", "page_type", "partition"])
        writer.writeheader()
        writer.writerows(rows)
