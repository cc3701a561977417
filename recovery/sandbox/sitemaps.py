"""The sandbox's sitemaps (fetch.sitemaps): an index, gzip files, a 50,000-URL file, faults.

- `/sitemap_index.xml` lists `/sitemaps/products-a.xml.gz` (a gzip file, served as
  application/gzip), `/sitemaps/products-b.xml` (served with Content-Encoding: gzip) and
  `/sitemaps/big.xml` (exactly 50,000 URLs, the protocol's limit). The two product files
  overlap (`OVERLAP` URLs are in both) and big.xml lists every product URL again, so
  "one task per URL" is tested, not assumed.
- Faults, each its own path: `too-many.xml` (50,001 URLs), `bomb.xml.gz` (a gzip file whose
  content is over 50 MB), `encoded-bomb.xml` (the same through Content-Encoding),
  `malformed.xml`, `doctype.xml` (an entity-expansion "billion laughs"), `not-a-sitemap.xml`.
- `/sitemaps/fault-index.xml` lists one good file and every fault file.
- Edges of the tree and of `<loc>`: `/sitemaps/deep/<n>.xml` is an index listing
  `/sitemaps/deep/<n+1>.xml`, without end (a run must stop it: fetch.sitemaps.MAX_DEPTH);
  `/sitemaps/wide.xml` an index listing `WIDE` sitemaps (more than one run may read:
  fetch.sitemaps.MAX_FILES); `/sitemaps/edges.xml` a urlset whose `<loc>` values repeat,
  are empty, or are absolute without a host (`EDGE_LOCS`; `EDGE_PRODUCTS` are the usable ones).

Every URL carries `<lastmod>` from `lastmod_for(i)`, so a `lastmod_since` test computes its
expected URLs with the function the server uses. Requests are logged by
recovery.sandbox.robots (`app[robots.REQUESTS]`): the server's own word on what was fetched.
"""

from __future__ import annotations

import gzip
from datetime import date, timedelta
from functools import lru_cache

from aiohttp import web

NAMESPACE = "http://www.sitemaps.org/schemas/sitemap/0.9"
BIG = 50_000
OVERLAP = 5
FIRST_LASTMOD = date(2026, 10, 1)
PRODUCTS = web.AppKey("sitemap_products", int)
WIDE = 10_000
EDGE_PRODUCTS = (1, 2, 3)
# (loc, how many times listed) in /sitemaps/edges.xml, `{base}` the shop's origin.
EDGE_LOCS = (
    ("{base}/product/1", 3),
    ("{base}/product/2", 1),
    ("http://", 1),
    ("https:///product/9", 1),
    ("", 1),
    ("mailto:shop@example.com", 1),
    ("{BASE}/product/2", 1),  # the same URL in another spelling: a repeat too
    ("/product/3", 1),  # relative: resolved against the file's URL
)
FAULTS = ("too-many.xml", "bomb.xml.gz", "encoded-bomb.xml", "malformed.xml", "doctype.xml",
          "not-a-sitemap.xml")  # fmt: skip


def lastmod_for(i: int) -> date:
    """Product i's <lastmod>: spread over 60 days from 2026-10-01."""
    return FIRST_LASTMOD + timedelta(days=i % 60)


def split(products: int) -> tuple[range, range]:
    """The products in products-a and products-b (OVERLAP of them in both)."""
    half = products // 2
    return range(1, half + 1), range(max(1, half + 1 - OVERLAP), products + 1)


def urlset(base: str, numbers) -> bytes:
    parts = [f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="{NAMESPACE}">\n']
    for i in numbers:
        parts.append(
            f"<url><loc>{base}/product/{i}</loc><lastmod>{lastmod_for(i).isoformat()}</lastmod>"
            "</url>\n"
        )
    parts.append("</urlset>\n")
    return "".join(parts).encode()


def index(base: str, paths: list[str]) -> bytes:
    entries = "".join(
        f"<sitemap><loc>{base}{p}</loc><lastmod>2026-11-30</lastmod></sitemap>\n" for p in paths
    )
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<sitemapindex xmlns="{NAMESPACE}">\n'
        f"{entries}</sitemapindex>\n"
    ).encode()


@lru_cache(maxsize=8)
def _big(base: str, count: int) -> bytes:
    return urlset(base, range(1, count + 1))


@lru_cache(maxsize=1)
def _bomb() -> bytes:
    # 60 MB of one repeated entry: ~60 KB compressed, over the 50 MB limit once inflated.
    head = f'<?xml version="1.0"?>\n<urlset xmlns="{NAMESPACE}">\n'.encode()
    filler = b"<!-- " + b" " * (60 * 1024 * 1024) + b" -->"
    return gzip.compress(head + filler + b"</urlset>\n", compresslevel=9)


DOCTYPE = b"""<?xml version="1.0"?>
<!DOCTYPE urlset [
 <!ENTITY a "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa">
 <!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">
 <!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">
]>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>&c;</loc></url></urlset>
"""
MALFORMED = b"""<?xml version="1.0"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
<url><loc>http://example.invalid/a</loc></url>
<url><loc>http://example.invalid/b</loc>
</urlset>
"""
NOT_A_SITEMAP = b"<html><body><p>Not a sitemap</p></body></html>\n"


def _base(request: web.Request) -> str:
    return f"{request.scheme}://{request.host}"


def _xml(body: bytes, **headers: str) -> web.Response:
    return web.Response(body=body, content_type="application/xml", headers=headers)


async def sitemap_index(request: web.Request) -> web.Response:
    paths = ["/sitemaps/products-a.xml.gz", "/sitemaps/products-b.xml", "/sitemaps/big.xml"]
    return _xml(index(_base(request), paths))


async def fault_index(request: web.Request) -> web.Response:
    paths = ["/sitemaps/products-b.xml", *(f"/sitemaps/{name}" for name in FAULTS)]
    return _xml(index(_base(request), paths))


async def deep(request: web.Request) -> web.Response:
    n = int(request.match_info["n"])
    return _xml(index(_base(request), [f"/sitemaps/deep/{n + 1}.xml"]))


def edges(base: str) -> bytes:
    entries = []
    for loc, times in EDGE_LOCS:
        text = loc.replace("{base}", base).replace("{BASE}", base.upper())
        entries.extend([f"<url><loc>{text}</loc></url>\n"] * times)
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="{NAMESPACE}">\n'
        + "".join(entries)
        + "</urlset>\n"
    ).encode()


async def sitemap_file(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    base = _base(request)
    first, second = split(request.app[PRODUCTS])
    if name == "products-a.xml.gz":
        return web.Response(
            body=gzip.compress(urlset(base, first)), content_type="application/gzip"
        )
    if name == "products-b.xml":
        # Content-Encoding: the client undoes it (within its size cap) before we see the body.
        return _xml(gzip.compress(urlset(base, second)), **{"Content-Encoding": "gzip"})
    if name == "big.xml":
        return _xml(_big(base, BIG))
    if name == "too-many.xml":
        return _xml(_big(base, BIG + 1))
    if name == "bomb.xml.gz":
        return web.Response(body=_bomb(), content_type="application/gzip")
    if name == "encoded-bomb.xml":
        return _xml(_bomb(), **{"Content-Encoding": "gzip"})
    if name == "malformed.xml":
        return _xml(MALFORMED)
    if name == "doctype.xml":
        return _xml(DOCTYPE)
    if name == "not-a-sitemap.xml":
        return web.Response(body=NOT_A_SITEMAP, content_type="text/html")
    if name == "wide.xml":
        return _xml(index(base, [f"/sitemaps/wide/{i}.xml" for i in range(WIDE)]))
    if name == "edges.xml":
        return _xml(edges(base))
    raise web.HTTPNotFound()


def install(app: web.Application, products: int) -> None:
    """Serve the sitemaps on `app` (before it starts); the product files list 1..products."""
    app[PRODUCTS] = products
    app.router.add_get("/sitemap_index.xml", sitemap_index)
    app.router.add_get("/sitemaps/fault-index.xml", fault_index)
    app.router.add_get("/sitemaps/deep/{n:[0-9]{1,6}}.xml", deep)
    app.router.add_get("/sitemaps/{name}", sitemap_file)
