"""The sandbox shop: a deterministic target website with misbehaving pages chosen by seed.

`make_app(pages=N, seed=S, faults=PROFILE)` returns an aiohttp application serving:

- `/product/{i}` (1 <= i <= pages): `div.product` with the title in `h1`, the price in `.price`
  ("£1,234.50"), the SKU in `[data-sku]` ("SKU-000123"), the stock flag in `.stock`
  (`data-in-stock="true|false"`), a review count in `.reviews`, the retailer in `.retailer`
  (`data-retailer`; the manifest's partition column carries it too), and three
  `a.product-link` links to other products;
- `/listing` (cursor form: an opaque `?cursor=`, the next page in `a.next`) and
  `/listing?offset=K&limit=L` (offset form). Both list newest first, so an item "added" to the
  shop appears at the front and shifts every offset by one, as real listings do;
- `/categories` and `/category/{slug}`: link pages for link discovery (`a.category-link`,
  `a.product-link`);
- `/refused/{status}/{times}/{i}` (status 401 or 403): answers that status `times` times, then
  product `i` normally (`times` 0: refuses forever), counted per path: the persistent-vs-
  passing 401/403 of the retry table (an access block that lifts, or one a person must lift);
- `/_sandbox/state` (GET), `/_sandbox/faults` (POST JSON `{"bad_retailer": false}` or
  `{"profile": "none"}`), `/_sandbox/insert` (POST `?n=1`), `/_sandbox/reset` (POST).

Which product misbehaves, and how, is a pure function of (seed, profile, product number):
`fault_for()`. `expected()` says what the retry table should end each product as, so tests
and benchmarks compute expected outcomes (observation counts, final states) up front.
Bodies are rendered once and cached: the shop must never be the bottleneck of a benchmark.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import socket
import struct
import time
from collections import Counter
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import Any

from aiohttp import web

RETAILERS = ("northwind", "harbourline", "kestrel", "meridian", "oakridge")
CATEGORIES = (
    "kitchen",
    "garden",
    "tools",
    "lighting",
    "outdoor",
    "storage",
    "office",
    "bathroom",
)
_ADJECTIVES = (
    "Compact", "Classic", "Deluxe", "Rugged", "Silent", "Folding", "Modular", "Heated",
    "Portable", "Premium", "Stackable", "Cordless", "Vintage", "Smart", "Weatherproof", "Slim",
)  # fmt: skip
_NOUNS = (
    "Kettle", "Lantern", "Drill", "Planter", "Shelf", "Desk Lamp", "Toolbox", "Stool",
    "Hose Reel", "Mirror", "Bench", "Fan", "Organiser", "Cabinet", "Grill", "Rack",
)  # fmt: skip
_WORDS = (
    "durable", "steel", "frame", "easy", "assembly", "includes", "fittings", "finish", "resists",
    "scratches", "and", "stains", "designed", "for", "everyday", "use", "with", "a", "two",
    "year", "warranty", "tested", "safety", "rated", "indoor", "outdoor", "ships", "flat",
    "packed", "recycled", "packaging", "matte", "black", "brushed", "oak", "natural", "linen",
)  # fmt: skip


# --- fault kinds -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    """What a fault kind does and what the retry table should end it as.

    `transient` is how many requests for that product fail before it serves normally (0: the
    fault is permanent). `error_class` is the class of the failing responses (the engine's
    ErrorClass values); `final_state` is the task state the retry table should reach with a
    budget of more than `transient` attempts; `observation` says whether a record results.
    """

    name: str
    final_state: str
    error_class: str | None
    observation: bool
    transient: int = 0
    description: str = ""


KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind("ok", "committed", None, True, description="a normal product page"),
        Kind("consent", "quarantined", "consent_page", False, description="200 consent page"),
        Kind("login", "quarantined", "login_page", False, description="200 login wall"),
        Kind("challenge", "quarantined", "challenge_page", False, description="200 bot check"),
        Kind("wrong_template", "quarantined", "wrong_template", False, description="redesign"),
        Kind("empty_shell", "quarantined", "empty_shell", False, description="JS app shell"),
        Kind("not_found", "gone", "not_found", False, description="404 removed product"),
        Kind("gone", "gone", "not_found", False, description="410 removed product"),
        Kind("rate_limited", "committed", "rate_limited", True, 1, "429, Retry-After: N"),
        Kind("rate_limited_date", "committed", "rate_limited", True, 1, "429, HTTP-date"),
        Kind("server_500", "committed", "server_error", True, 2, "500 twice, then 200"),
        Kind("server_502", "committed", "server_error", True, 2, "502 twice, then 200"),
        Kind("server_503", "committed", "server_error", True, 2, "503 twice, then 200"),
        Kind("server_504", "committed", "server_error", True, 2, "504 twice, then 200"),
        Kind("server_persistent", "dead", "server_error", False, description="503 forever"),
        Kind("reset", "committed", "network", True, 2, "connection reset twice, then 200"),
        Kind("slow", "committed", "network", True, 1, "first response after slow_seconds"),
        Kind("trickle", "committed", "network", True, 1, "first body trickles past a deadline"),
        Kind("oversized", "quarantined", "too_large", False, description="chunked, huge body"),
        Kind("bad_encoding", "quarantined", "bad_encoding", False, description="invalid utf-8"),
        Kind("redirect", "committed", None, True, description="301 to /p/{i}"),
        Kind("redirect_chain", "committed", None, True, description="3 redirects to /p/{i}"),
        Kind("redirect_loop", "quarantined", "redirect_loop", False, description="a loop"),
        Kind("price_na", "quarantined", "selector_failure", False, description="price N/A"),
    )
}

# The "mixed" profile: a realistic spread (shares of all products); the rest are "ok".
MIXED_SHARES: dict[str, float] = {
    "server_500": 0.0075,
    "server_502": 0.0075,
    "server_503": 0.0075,
    "server_504": 0.0075,
    "server_persistent": 0.002,
    "rate_limited": 0.005,
    "rate_limited_date": 0.005,
    "consent": 0.01,
    "login": 0.01,
    "challenge": 0.005,
    "not_found": 0.005,
    "gone": 0.005,
    "wrong_template": 0.005,
    "empty_shell": 0.003,
    "reset": 0.005,
    "slow": 0.002,
    "oversized": 0.001,
    "bad_encoding": 0.002,
    "redirect": 0.005,
    "redirect_chain": 0.003,
    "redirect_loop": 0.002,
    "price_na": 0.003,
}
# A per-kind profile (`faults="consent"`) gives that kind to one product in ten.
KIND_PROFILE_EVERY = 10
PROFILES = ("none", "mixed", "every", "bad_retailer", *[k for k in KINDS if k != "ok"])
# Profiles whose retailer overlay is on: one retailer's pages change template (seed 002's
# worked example). The redesigned page keeps every field in place except the price: the old
# selector (`.price`) now finds the week's price change, a negative amount, and the price
# itself moved to `.price-now`. Scraper version 1 reads invalid prices there; the spec's
# version 2 (server.shop_spec_toml(version=2)) reads `.price-now` first and repairs them.
_BAD_RETAILER_PROFILES = ("mixed", "bad_retailer")
BAD_PRICE = "£-5.00"  # what version 1 reads from the bad retailer's new template


def _unit(seed: int, salt: str, i: int) -> float:
    """A uniform number in [0, 1) from (seed, salt, i): stable across processes and runs."""
    digest = hashlib.blake2b(f"{seed}:{salt}:{i}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def _pick(seed: int, salt: str, i: int, n: int) -> int:
    return int(_unit(seed, salt, i) * n)


def check_profile(profile: str) -> str:
    if profile not in PROFILES:
        raise ValueError(f"unknown fault profile {profile!r}; choose one of {', '.join(PROFILES)}")
    return profile


def fault_for(i: int, *, seed: int = 0, profile: str = "none") -> str:
    """The fault kind of product `i` under (seed, profile); "ok" for a normal page."""
    check_profile(profile)
    if profile in ("none", "bad_retailer"):
        return "ok"
    if profile == "every":
        kinds = list(KINDS)
        return kinds[(i + seed) % len(kinds)]
    if profile == "mixed":
        u = _unit(seed, "fault", i)
        for kind, share in MIXED_SHARES.items():
            if u < share:
                return kind
            u -= share
        return "ok"
    return profile if (i + seed) % KIND_PROFILE_EVERY == 0 else "ok"


def retailer_for(i: int, *, seed: int = 0) -> str:
    return RETAILERS[_pick(seed, "retailer", i, len(RETAILERS))]


def retailer_host(retailer: str) -> str:
    """Each retailer's own loopback address (all of 127.0.0.0/8 reaches this machine), so a
    dataset can partition by host: `manage.py sandbox --retailer-hosts` also listens there."""
    return f"127.0.0.{RETAILERS.index(retailer) + 2}"


def bad_retailer_for(seed: int = 0) -> str:
    """The retailer whose prices come out invalid when the bad-retailer overlay is on."""
    return RETAILERS[seed % len(RETAILERS)]


@dataclass(frozen=True)
class Expected:
    """What the retry table should end product `i` as (see Kind)."""

    i: int
    kind: str
    final_state: str  # committed | gone | quarantined | dead
    error_class: str | None  # the class of the failing responses (interim for transient kinds)
    observation: bool  # an observation (keyed by SKU) results
    price_valid: bool  # False: the observation carries the bad retailer's invalid price
    retailer: str
    sku: str
    transient: int  # failing responses before success (0 for permanent faults)


def expected(
    i: int, *, seed: int = 0, profile: str = "none", bad_retailer: bool | None = None
) -> Expected:
    """The expected outcome for product `i`. `bad_retailer` None: the profile's default."""
    kind = KINDS[fault_for(i, seed=seed, profile=profile)]
    if bad_retailer is None:
        bad_retailer = profile in _BAD_RETAILER_PROFILES
    retailer = retailer_for(i, seed=seed)
    invalid = bad_retailer and retailer == bad_retailer_for(seed) and kind.observation
    return Expected(
        i=i,
        kind=kind.name,
        final_state=kind.final_state,
        error_class=kind.error_class,
        observation=kind.observation,
        price_valid=not invalid,
        retailer=retailer,
        sku=sku_for(i),
        transient=kind.transient,
    )


def expected_summary(
    pages: int, *, seed: int = 0, profile: str = "none", bad_retailer: bool | None = None
) -> dict[str, Any]:
    """Totals over products 1..pages: final states, kinds, observations, invalid prices."""
    rows = [
        expected(i, seed=seed, profile=profile, bad_retailer=bad_retailer)
        for i in range(1, pages + 1)
    ]
    return {
        "pages": pages,
        "final_states": dict(Counter(r.final_state for r in rows)),
        "kinds": dict(Counter(r.kind for r in rows)),
        "observations": sum(r.observation for r in rows),
        "invalid_prices": sum(r.observation and not r.price_valid for r in rows),
        "by_retailer": dict(Counter(r.retailer for r in rows)),
    }


# --- product data ----------------------------------------------------------------------------


def sku_for(i: int) -> str:
    return f"SKU-{i:06d}"


def format_price(pence: int) -> str:
    return f"£{pence // 100:,}.{pence % 100:02d}"


@dataclass(frozen=True)
class Product:
    i: int
    title: str
    pence: int
    sku: str
    in_stock: bool
    reviews: int
    retailer: str
    category: str
    related: tuple[int, ...]

    @property
    def price(self) -> str:
        return format_price(self.pence)


def product_for(i: int, *, seed: int = 0, pages: int = 1000) -> Product:
    """The product's data (what a correct extraction yields from a normal page)."""
    related = tuple(1 + _pick(seed, f"rel{k}", i, max(pages, 1)) for k in range(3))
    return Product(
        i=i,
        title=(
            f"{_ADJECTIVES[_pick(seed, 'adj', i, len(_ADJECTIVES))]} "
            f"{_NOUNS[_pick(seed, 'noun', i, len(_NOUNS))]} {i}"
        ),
        pence=100 + _pick(seed, "price", i, 250_000),
        sku=sku_for(i),
        in_stock=_pick(seed, "stock", i, 5) != 0,
        reviews=_pick(seed, "reviews", i, 500),
        retailer=retailer_for(i, seed=seed),
        category=CATEGORIES[_pick(seed, "category", i, len(CATEGORIES))],
        related=related,
    )


# --- HTML ------------------------------------------------------------------------------------

_HEAD = (
    '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
    "<title>{title}</title>"
    '<meta name="viewport" content="width=device-width, initial-scale=1">'
    "<style>body{{font-family:sans-serif;margin:2rem}}.price{{font-weight:bold}}</style>"
    '</head><body><header><nav><a href="/">Sandbox Shop</a> · '
    '<a href="/categories">Categories</a> · <a href="/listing">New in</a></nav></header>\n'
)
_FOOT = "<footer><p>Sandbox Shop: a test site for Salvage.</p></footer></body></html>\n"


def _page(title: str, body: str) -> str:
    return _HEAD.format(title=title) + body + _FOOT


def _description(p: Product, seed: int) -> str:
    # About 3.8 KB of filler so a product page weighs ~5 KB, like the baseline measurement.
    words = [_WORDS[_pick(seed, f"w{k}", p.i, len(_WORDS))] for k in range(560)]
    paragraphs = [" ".join(words[k : k + 40]).capitalize() + "." for k in range(0, 560, 40)]
    return "".join(f"<p>{text}</p>" for text in paragraphs)


def render_product(
    p: Product,
    seed: int,
    *,
    price: str | None = None,
    title: str = "",
    new_template: bool = False,
) -> str:
    links = "".join(
        f'<li><a class="product-link" href="/product/{r}">Product {r}</a></li>' for r in p.related
    )
    stock = "In stock" if p.in_stock else "Out of stock"
    if new_template:
        # The bad retailer's redesign: `.price` is now the change since last week.
        price_html = (
            f'<div class="price-box"><p class="price price-change" title="Change since last '
            f'week">{BAD_PRICE}</p><p class="price-now">{price or p.price}</p></div>'
        )
    else:
        price_html = f'<p class="price">{price or p.price}</p>'
    body = (
        f'<main><div class="product" data-sku="{p.sku}" data-retailer="{p.retailer}">'
        f"<h1>{title or p.title}</h1>"
        f"{price_html}"
        f'<p>SKU: <span class="sku">{p.sku}</span></p>'
        f'<p class="stock" data-in-stock="{"true" if p.in_stock else "false"}">{stock}</p>'
        f'<p>Reviews: <span class="reviews">{p.reviews}</span></p>'
        f'<p>Sold by <span class="retailer">{p.retailer}</span> in '
        f'<a class="category" href="/category/{p.category}">{p.category}</a></p>'
        f'<section class="description">{_description(p, seed)}</section>'
        f'<section class="related"><h2>Related</h2><ul>{links}</ul></section>'
        "</div></main>"
    )
    return _page(p.title, body)


def render_misbehaving(kind: str, p: Product) -> str:
    if kind == "consent":
        return _page(
            "Before you continue",
            '<div id="consent-banner" role="dialog"><h1>We value your privacy</h1>'
            "<p>We and our partners use cookies to personalise content and ads. Choose "
            "whether to accept them before you continue to the shop.</p>"
            '<form method="post" action="/consent"><button name="accept" value="1">Accept all'
            '</button><button name="accept" value="0">Reject</button></form></div>',
        )
    if kind == "login":
        return _page(
            "Sign in",
            "<main><h1>Sign in to see prices</h1><p>Members see our best prices. Please sign "
            'in with your account to continue.</p><form id="login" method="post" '
            'action="/login"><input name="email" type="email"><input name="password" '
            'type="password"><button>Sign in</button></form></main>',
        )
    if kind == "challenge":
        return _page(
            "Just a moment...",
            "<main><h1>Checking your browser</h1><p>Please verify you are human to continue. "
            "This check is automatic and takes a few seconds.</p>"
            '<div class="challenge-widget" data-ray="8c2f1a">Verifying...</div></main>',
        )
    if kind == "wrong_template":
        # A redesign: same data, new markup, no div.product and none of its selectors.
        return _page(
            p.title,
            f'<main class="pdp-v2"><section class="hero"><h2 class="pdp-title">{p.title}</h2>'
            f'<span class="amount">{p.price}</span><span class="code">{p.sku}</span></section>'
            "<p>Our new look: the same great products, now easier to browse and buy from "
            "any device.</p></main>",
        )
    if kind == "empty_shell":
        return (
            '<!doctype html>\n<html><head><meta charset="utf-8"><title>Shop</title></head>'
            '<body><div id="app"></div><script src="/static/app.js" defer></script>'
            "</body></html>\n"
        )
    raise ValueError(kind)


def render_listing(
    items: list[Product], *, total: int, next_href: str | None, heading: str = "New in"
) -> str:
    rows = "".join(
        f'<li class="item" data-sku="{p.sku}" data-retailer="{p.retailer}">'
        f'<a class="product-link" href="/product/{p.i}">{p.title}</a> '
        f'<span class="price">{p.price}</span></li>'
        for p in items
    )
    nxt = f'<a class="next" rel="next" href="{next_href}">Next page</a>' if next_href else ""
    return _page(
        heading,
        f'<main><div class="listing" data-total="{total}"><h1>{heading}</h1>'
        f"<p>{total} products</p><ul>{rows}</ul>{nxt}</div></main>",
    )


# --- the application -------------------------------------------------------------------------


@dataclass
class ShopState:
    """Everything mutable: request counters (transient faults), inserted items, switches."""

    profile: str
    bad_retailer: bool
    inserted: int = 0
    offset_requests: int = 0
    hits: Counter = field(default_factory=Counter)  # product number -> requests served
    refused: Counter = field(default_factory=Counter)  # /refused/... path -> requests served


class Shop:
    """The shop's configuration, data and mutable state; handlers are its methods."""

    def __init__(
        self,
        pages: int = 1000,
        seed: int = 0,
        faults: str = "none",
        *,
        bad_retailer: bool | None = None,
        listing_limit: int = 20,
        listing_insert_every: int = 0,
        listing_overstate: int = 0,
        listing_fail_requests: tuple[int, ...] = (),
        retry_after_seconds: int = 2,
        slow_seconds: float = 3.0,
        trickle_seconds: float = 5.0,
        oversized_bytes: int = 8_000_000,
        max_inserted: int = 100_000,
    ) -> None:
        if pages < 1:
            raise ValueError("pages must be at least 1")
        self.pages = pages
        self.seed = seed
        self.listing_limit = listing_limit
        self.listing_insert_every = listing_insert_every
        # The listing's stated total exceeds what it lists by this many (an inventory shortfall).
        self.listing_overstate = listing_overstate
        # These offset requests (1 = the first) answer 503 (a head re-read that fails).
        self.listing_fail_requests = frozenset(listing_fail_requests)
        self.retry_after_seconds = retry_after_seconds
        self.slow_seconds = slow_seconds
        self.trickle_seconds = trickle_seconds
        self.oversized_bytes = oversized_bytes
        self.max_inserted = max_inserted
        check_profile(faults)
        self.state = ShopState(
            profile=faults,
            bad_retailer=faults in _BAD_RETAILER_PROFILES if bad_retailer is None else bad_retailer,
        )
        self._products: dict[int, Product] = {}
        self._bodies: dict[tuple[int, str], bytes] = {}
        self._faults: dict[int, str] = {}

    # -- lookups used by tests and benchmarks (the same functions the handlers use) --

    def fault(self, i: int) -> str:
        kind = self._faults.get(i)
        if kind is None:
            kind = self._faults[i] = fault_for(i, seed=self.seed, profile=self.state.profile)
        return kind

    def expected(self, i: int) -> Expected:
        return expected(
            i, seed=self.seed, profile=self.state.profile, bad_retailer=self.state.bad_retailer
        )

    def summary(self) -> dict[str, Any]:
        return expected_summary(
            self.pages,
            seed=self.seed,
            profile=self.state.profile,
            bad_retailer=self.state.bad_retailer,
        )

    def products_with(self, kind: str) -> list[int]:
        return [i for i in range(1, self.pages + 1) if self.fault(i) == kind]

    def product(self, i: int) -> Product:
        p = self._products.get(i)
        if p is None:
            p = self._products[i] = product_for(i, seed=self.seed, pages=self.pages)
        return p

    def visible(self) -> int:
        """Number of products in the shop now (the originals plus any inserted)."""
        return self.pages + self.state.inserted

    def set_profile(self, profile: str) -> None:
        self.state.profile = check_profile(profile)
        self._faults.clear()

    def reset(self) -> None:
        self.state.hits.clear()
        self.state.refused.clear()
        self.state.inserted = 0
        self.state.offset_requests = 0

    def _body(self, i: int, variant: str) -> bytes:
        key = (i, variant)
        body = self._bodies.get(key)
        if body is None:
            p = self.product(i)
            if variant == "ok":
                text = render_product(p, self.seed)
            elif variant == "new_template":
                text = render_product(p, self.seed, new_template=True)
            elif variant == "price_na":
                text = render_product(p, self.seed, price="N/A")
            else:
                text = render_misbehaving(variant, p)
            body = self._bodies[key] = text.encode()
        return body

    def _product_ok(self, i: int) -> web.Response:
        p = self.product(i)
        bad = self.state.bad_retailer and p.retailer == bad_retailer_for(self.seed)
        return _html(self._body(i, "new_template" if bad else "ok"))

    # -- handlers --

    async def product_page(self, request: web.Request) -> web.StreamResponse:
        i = _int(request.match_info["i"])
        if i is None or not 1 <= i <= self.visible():
            raise web.HTTPNotFound(text="no such product")
        kind = self.fault(i)
        if kind == "ok":  # the hot path: one dict lookup
            return self._product_ok(i)
        self.state.hits[i] += 1
        hit = self.state.hits[i]
        spec = KINDS[kind]
        if spec.transient and hit > spec.transient:
            return self._product_ok(i)
        return await self._misbehave(kind, i, request)

    async def _misbehave(self, kind: str, i: int, request: web.Request) -> web.StreamResponse:
        if kind in ("consent", "login", "challenge", "wrong_template", "empty_shell"):
            return _html(self._body(i, kind))
        if kind == "price_na":
            return _html(self._body(i, "price_na"))
        if kind == "not_found":
            return web.Response(status=404, text="Product not found", content_type="text/html")
        if kind == "gone":
            return web.Response(status=410, text="Product removed", content_type="text/html")
        if kind == "rate_limited":
            return _status(429, {"Retry-After": str(self.retry_after_seconds)})
        if kind == "rate_limited_date":
            # HTTP-date has whole-second resolution: round up so the wait is never shorter.
            when = formatdate(int(time.time()) + self.retry_after_seconds + 1, usegmt=True)
            return _status(429, {"Retry-After": when})
        if kind.startswith("server_"):
            code = 503 if kind == "server_persistent" else int(kind.removeprefix("server_"))
            return _status(code)
        if kind == "reset":
            return await self._reset(request)
        if kind == "slow":
            await asyncio.sleep(self.slow_seconds)
            return self._product_ok(i)
        if kind == "trickle":
            return await self._trickle(i, request)
        if kind == "oversized":
            return await self._oversized(request)
        if kind == "bad_encoding":
            body = self._body(i, "ok").replace(b"<h1>", b"<h1>\xff\xfe\xc3\x28 ", 1)
            return _html(body)
        if kind == "redirect":
            raise web.HTTPMovedPermanently(f"/p/{i}")
        if kind == "redirect_chain":
            raise web.HTTPFound(f"/moved/{i}/1")
        if kind == "redirect_loop":
            raise web.HTTPFound(f"/loop/{i}/a")
        raise AssertionError(kind)

    async def _reset(self, request: web.Request) -> web.StreamResponse:
        # Headers and part of the body go out, then the socket is aborted with SO_LINGER 0 so
        # the client sees a TCP RST mid-response (not a clean close).
        response = web.StreamResponse(status=200, headers={"Content-Length": "5000"})
        response.content_type = "text/html"
        await response.prepare(request)
        await response.write(b"<!doctype html><html><head><title>partial")
        transport = request.transport
        if transport is not None:
            sock = transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            transport.abort()
        return response

    async def _trickle(self, i: int, request: web.Request) -> web.StreamResponse:
        # Each chunk arrives well inside a per-read timeout; the whole body takes
        # trickle_seconds, so only a total deadline per request catches it.
        body = self._body(i, "ok")
        chunks = 20
        size = -(-len(body) // chunks)
        response = web.StreamResponse(status=200)
        response.content_type = "text/html"
        response.charset = "utf-8"
        await response.prepare(request)
        for start in range(0, len(body), size):
            await response.write(body[start : start + size])
            await asyncio.sleep(self.trickle_seconds / chunks)
        await response.write_eof()
        return response

    async def _oversized(self, request: web.Request) -> web.StreamResponse:
        # Chunked, no Content-Length: the client must count bytes to enforce its cap.
        response = web.StreamResponse(status=200)
        response.content_type = "text/html"
        response.charset = "utf-8"
        response.enable_chunked_encoding()
        await response.prepare(request)
        block = b"<p>" + b"x" * 65_530 + b"</p>"
        sent = 0
        try:
            await response.write(b'<!doctype html><html><body><div class="product">')
            while sent < self.oversized_bytes:
                await response.write(block)
                sent += len(block)
            await response.write(b"</div></body></html>")
            await response.write_eof()
        except ConnectionError:
            pass  # the client hung up at its cap: that is the point
        return response

    async def moved_page(self, request: web.Request) -> web.StreamResponse:
        i, hop = _int(request.match_info["i"]), _int(request.match_info["hop"])
        if i is None or hop is None:
            raise web.HTTPNotFound()
        if hop < 2:
            raise web.HTTPFound(f"/moved/{i}/{hop + 1}")
        raise web.HTTPMovedPermanently(f"/p/{i}")

    async def loop_page(self, request: web.Request) -> web.StreamResponse:
        i, side = request.match_info["i"], request.match_info["side"]
        raise web.HTTPFound(f"/loop/{i}/{'b' if side == 'a' else 'a'}")

    async def refused_page(self, request: web.Request) -> web.StreamResponse:
        status, times = _int(request.match_info["status"]), _int(request.match_info["times"])
        i = _int(request.match_info["i"])
        if status not in (401, 403) or times is None or i is None or not 1 <= i <= self.visible():
            raise web.HTTPNotFound(text="no such refusal")
        self.state.refused[request.path] += 1
        if times and self.state.refused[request.path] > times:
            return self._product_ok(i)
        return web.Response(status=status, text="Access denied", content_type="text/html")

    async def canonical_page(self, request: web.Request) -> web.StreamResponse:
        # Where redirects land: the product served normally (its fault was the redirect).
        i = _int(request.match_info["i"])
        if i is None or not 1 <= i <= self.visible():
            raise web.HTTPNotFound(text="no such product")
        return self._product_ok(i)

    def _listing_ids(self, start: int, limit: int) -> list[int]:
        # Newest first: ids visible()..1. `start` is a position in that order.
        top = self.visible()
        return list(range(top - start, max(top - start - limit, 0), -1))

    async def listing(self, request: web.Request) -> web.StreamResponse:
        q = request.query
        limit = _int(q.get("limit", "")) or self.listing_limit
        limit = max(1, min(limit, 200))
        if "offset" in q:
            offset = _int(q["offset"])
            if offset is None or offset < 0:
                raise web.HTTPBadRequest(text="offset must be a non-negative integer")
            self.state.offset_requests += 1
            if self.state.offset_requests in self.listing_fail_requests:
                return web.Response(status=503, text="listing unavailable\n")
            every = self.listing_insert_every
            if every and self.state.offset_requests % every == 0:
                self._insert(1)
            ids = self._listing_ids(offset, limit)
            nxt = None
            if offset + limit < self.visible():
                nxt = f"/listing?offset={offset + limit}&limit={limit}"
        else:
            # Keyset cursor over the newest-first order: "ids below X", so items added at the
            # front during a walk never shift it (each existing product is seen exactly once).
            below = self.visible() + 1
            if q.get("cursor"):
                below = self._decode_cursor(q["cursor"])
            top = min(below - 1, self.visible())
            ids = list(range(top, max(top - limit, 0), -1))
            nxt = None
            if ids and ids[-1] > 1:
                nxt = f"/listing?cursor={self._encode_cursor(ids[-1])}"
                if "limit" in q:
                    nxt += f"&limit={limit}"
        items = [self.product(i) for i in ids]
        total = self.visible() + self.listing_overstate
        return _html(render_listing(items, total=total, next_href=nxt).encode())

    def _encode_cursor(self, below: int) -> str:
        raw = json.dumps({"b": below, "s": self.seed}, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    def _decode_cursor(self, cursor: str) -> int:
        try:
            raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
            data = json.loads(raw)
            below = int(data["b"])
        except (ValueError, KeyError, TypeError) as exc:
            raise web.HTTPBadRequest(text="invalid cursor") from exc
        if data.get("s") != self.seed or below < 1:
            raise web.HTTPBadRequest(text="invalid cursor")
        return below

    def _insert(self, n: int) -> None:
        self.state.inserted = min(self.state.inserted + n, self.max_inserted)

    async def categories(self, request: web.Request) -> web.StreamResponse:
        links = "".join(
            f'<li><a class="category-link" href="/category/{c}">{c.title()}</a></li>'
            for c in CATEGORIES
        )
        return _html(_page("Categories", f"<main><h1>Categories</h1><ul>{links}</ul></main>"))

    async def category(self, request: web.Request) -> web.StreamResponse:
        slug = request.match_info["slug"]
        if slug not in CATEGORIES:
            raise web.HTTPNotFound(text="no such category")
        key = (-1 - CATEGORIES.index(slug), "category")
        body = self._bodies.get(key)
        if body is None:
            items = [
                self.product(i)
                for i in range(1, self.pages + 1)
                if self.product(i).category == slug
            ]
            body = render_listing(
                items, total=len(items), next_href=None, heading=slug.title()
            ).encode()
            self._bodies[key] = body
        return _html(body)

    async def home(self, request: web.Request) -> web.StreamResponse:
        return _html(
            _page(
                "Sandbox Shop",
                f"<main><h1>Sandbox Shop</h1><p>{self.visible()} products.</p><ul>"
                '<li><a href="/listing">New in (cursor pages)</a></li>'
                '<li><a href="/listing?offset=0">New in (offset pages)</a></li>'
                '<li><a href="/categories">Categories</a></li>'
                '<li><a href="/product/1">Product 1</a></li></ul></main>',
            )
        )

    # -- control endpoints --

    def state_dict(self) -> dict[str, Any]:
        return {
            "pages": self.pages,
            "seed": self.seed,
            "profile": self.state.profile,
            "bad_retailer": self.state.bad_retailer,
            "bad_retailer_name": bad_retailer_for(self.seed),
            "inserted": self.state.inserted,
            "visible": self.visible(),
            "offset_requests": self.state.offset_requests,
        }

    async def get_state(self, request: web.Request) -> web.StreamResponse:
        return web.json_response(self.state_dict())

    async def post_faults(self, request: web.Request) -> web.StreamResponse:
        try:
            data = await request.json() if request.can_read_body else {}
        except ValueError as exc:
            raise web.HTTPBadRequest(text="body must be JSON") from exc
        if not isinstance(data, dict):
            raise web.HTTPBadRequest(text="body must be a JSON object")
        if "profile" in data:
            try:
                self.set_profile(str(data["profile"]))
            except ValueError as exc:
                raise web.HTTPBadRequest(text=str(exc)) from exc
        if "bad_retailer" in data:
            self.state.bad_retailer = bool(data["bad_retailer"])
        return web.json_response(self.state_dict())

    async def post_insert(self, request: web.Request) -> web.StreamResponse:
        n = _int(request.query.get("n", "1"))
        if n is None or n < 1:
            raise web.HTTPBadRequest(text="n must be a positive integer")
        self._insert(n)
        return web.json_response(self.state_dict())

    async def post_reset(self, request: web.Request) -> web.StreamResponse:
        self.reset()
        return web.json_response(self.state_dict())


def _int(text: str) -> int | None:
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def _html(body: bytes | str) -> web.Response:
    if isinstance(body, str):
        body = body.encode()
    return web.Response(body=body, content_type="text/html", charset="utf-8")


def _status(code: int, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        status=code, text=f"<h1>Error {code}</h1>", content_type="text/html", headers=headers
    )


SHOP_KEY = web.AppKey("shop", Shop)


def make_app(
    pages: int = 1000, seed: int = 0, faults: str = "none", **options: Any
) -> web.Application:
    """The shop as an aiohttp application; `app[SHOP_KEY]` is its Shop (lookups and state)."""
    shop = Shop(pages, seed, faults, **options)
    app = web.Application()
    app[SHOP_KEY] = shop
    app.router.add_get("/", shop.home)
    app.router.add_get("/product/{i}", shop.product_page)
    app.router.add_get("/p/{i}", shop.canonical_page)
    app.router.add_get("/moved/{i}/{hop}", shop.moved_page)
    app.router.add_get("/loop/{i}/{side}", shop.loop_page)
    app.router.add_get("/refused/{status}/{times}/{i}", shop.refused_page)
    app.router.add_get("/listing", shop.listing)
    app.router.add_get("/categories", shop.categories)
    app.router.add_get("/category/{slug}", shop.category)
    app.router.add_get("/_sandbox/state", shop.get_state)
    app.router.add_post("/_sandbox/faults", shop.post_faults)
    app.router.add_post("/_sandbox/insert", shop.post_insert)
    app.router.add_post("/_sandbox/reset", shop.post_reset)
    return app
