"""Sandbox pages that need JavaScript (mounted at /js/ by recovery.sandbox.server).

- `/js/product/{i}`: an application shell; a script fetches `/js/api/product/{i}` and inserts
  the product (the same markup and values as the shop's `/product/{i}`, site.product_for), so
  the direct provider sees an empty shell and the browser provider sees the product.
- `/js/listing`: the first LISTING_STEP product links and a "Load more" button that appends
  the next ones from `/js/api/listing?offset=k`, up to LISTING_SIZE links.
- `/js/feed`: the same links, the next ones appended whenever the page is scrolled to the end.
- `/js/probe?host=H&port=P`: a rendered product whose script also tries to reach
  `http://H:P/` (fetch, an <img>, a WebSocket): outbound safety must refuse all three.
- `/js/redirect?host=H&port=P`: a redirect to `http://H:P/doc`.
- `/js/never`: a page that never settles (a blocking script that never arrives).

`app[JS_REQUESTS]` counts requests per path, so tests can see what the browser fetched.
"""

from __future__ import annotations

import asyncio
import html
import json
from collections import Counter

from aiohttp import web

from recovery.sandbox import site

LISTING_SIZE = 30
LISTING_STEP = 10
JS_REQUESTS = web.AppKey("js_requests", Counter)
JS_PAGES_KEY = web.AppKey("js_pages", int)

_SHELL = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<meta name="viewport" content="width=device-width, initial-scale=1"></head>
<body><main id="app"></main>{extra}
<script>
{script}
</script></body></html>
"""

_PRODUCT_SCRIPT = """
fetch({api}).then(r => r.json()).then(p => {{
  setTimeout(() => {{
    const main = document.getElementById('app');
    const div = document.createElement('div');
    div.className = 'product';
    div.dataset.sku = p.sku;
    div.dataset.retailer = p.retailer;
    const line = (tag, cls, text) => {{
      const el = document.createElement(tag);
      if (cls) el.className = cls;
      el.textContent = text;
      div.appendChild(el);
      return el;
    }};
    line('h1', '', p.title);
    line('p', 'price', p.price);
    line('p', 'stock', p.in_stock ? 'In stock' : 'Out of stock').dataset.inStock =
      p.in_stock ? 'true' : 'false';
    const reviews = line('p', '', 'Reviews: ');
    const count = document.createElement('span');
    count.className = 'reviews';
    count.textContent = String(p.reviews);
    reviews.appendChild(count);
    line('p', 'description', p.description);
    main.appendChild(div);
  }}, 30);
}});
"""

_LISTING_SCRIPT = """
const main = document.getElementById('app');
const list = document.createElement('ul');
list.className = 'listing';
main.appendChild(list);
let offset = 0;
function more() {
  return fetch('/js/api/listing?offset=' + offset).then(r => r.json()).then(page => {
    for (const i of page.items) {
      const li = document.createElement('li');
      const a = document.createElement('a');
      a.className = 'product-link';
      a.href = '/js/product/' + i;
      a.textContent = 'Product ' + i;
      li.appendChild(a);
      list.appendChild(li);
    }
    offset = page.next;
    button.hidden = page.next === null;
  });
}
const button = document.createElement('button');
button.id = 'load-more';
button.textContent = 'Load more';
button.addEventListener('click', more);
main.appendChild(button);
more();
"""

_FEED_SCRIPT = """
const main = document.getElementById('app');
const list = document.createElement('ul');
list.className = 'listing';
main.appendChild(list);
let offset = 0, busy = false;
function more() {
  if (busy || offset === null) return;
  busy = true;
  fetch('/js/api/listing?offset=' + offset).then(r => r.json()).then(page => {
    for (const i of page.items) {
      const li = document.createElement('li');
      li.style.height = '120px';
      const a = document.createElement('a');
      a.className = 'product-link';
      a.href = '/js/product/' + i;
      a.textContent = 'Product ' + i;
      li.appendChild(a);
      list.appendChild(li);
    }
    offset = page.next;
    busy = false;
  });
}
window.addEventListener('scroll', () => {
  if (window.innerHeight + window.scrollY >= document.body.scrollHeight - 50) more();
});
more();
"""

_PROBE_SCRIPT = """
const target = {target};
fetch(target + 'fetch').catch(() => {{}});
const img = new Image();
img.src = target + 'img';
document.body.appendChild(img);
try {{ new WebSocket(target.replace('http', 'ws') + 'ws'); }} catch (e) {{}}
"""


def _shell(title: str, script: str, extra: str = "") -> web.Response:
    body = _SHELL.format(title=html.escape(title), script=script, extra=extra)
    return web.Response(text=body, content_type="text/html", charset="utf-8")


def _product_json(i: int, seed: int, pages: int) -> dict:
    p = site.product_for(i, seed=seed, pages=pages)
    return {
        "title": p.title,
        "price": p.price,
        "sku": p.sku,
        "retailer": p.retailer,
        "in_stock": p.in_stock,
        "reviews": p.reviews,
        # Enough visible text that the rendered page is not an empty shell.
        "description": f"{p.title}, sold by {p.retailer} in {p.category}.",
    }


def expected_values(i: int, *, seed: int = 0, pages: int = 1000) -> dict:
    """What a correct extraction of /js/product/{i} yields (the sandbox's own values)."""
    p = site.product_for(i, seed=seed, pages=pages)
    return {
        "title": p.title,
        "price": f"{p.pence // 100}.{p.pence % 100:02d}",
        "sku": p.sku,
        "retailer": p.retailer,
        "in_stock": p.in_stock,
        "reviews": p.reviews,
    }


def _target(request: web.Request) -> str:
    host = request.query.get("host", "127.0.0.1")
    port = request.query.get("port", "")
    if not port.isdigit() or host not in ("127.0.0.1", "127.0.0.2", "localhost", "[::1]"):
        raise web.HTTPBadRequest(text="host must be a loopback address and port a number")
    return f"http://{host}:{port}/"


def make_app(pages: int = 1000, seed: int = 0) -> web.Application:
    app = web.Application()
    requests: Counter = Counter()
    app[JS_REQUESTS] = requests

    @web.middleware
    async def count(request: web.Request, handler):
        requests[request.path] += 1
        return await handler(request)

    app.middlewares.append(count)

    def index(request: web.Request) -> int:
        i = site._int(request.match_info["i"])
        if i is None or not 1 <= i <= pages:
            raise web.HTTPNotFound()
        return i

    async def product(request: web.Request) -> web.Response:
        i = index(request)
        # ?delay=S: the data answers after S seconds (a render that a kill test interrupts).
        delay = request.query.get("delay", "")
        api = json.dumps(f"/js/api/product/{i}" + (f"?delay={delay}" if delay.isdigit() else ""))
        return _shell(f"Product {i}", _PRODUCT_SCRIPT.format(api=api))

    async def product_api(request: web.Request) -> web.Response:
        delay = request.query.get("delay", "")
        if delay.isdigit():
            await asyncio.sleep(min(int(delay), 60))
        return web.json_response(_product_json(index(request), seed, pages))

    async def listing(request: web.Request) -> web.Response:
        return _shell("New in", _LISTING_SCRIPT)

    async def listing_api(request: web.Request) -> web.Response:
        offset = site._int(request.query.get("offset", "0")) or 0
        end = min(offset + LISTING_STEP, LISTING_SIZE, pages)
        items = list(range(offset + 1, end + 1))
        return web.json_response({"items": items, "next": end if end < LISTING_SIZE else None})

    async def feed(request: web.Request) -> web.Response:
        return _shell("Feed", _FEED_SCRIPT)

    async def probe(request: web.Request) -> web.Response:
        script = _PRODUCT_SCRIPT.format(api=json.dumps("/js/api/product/1"))
        script += _PROBE_SCRIPT.format(target=json.dumps(_target(request)))
        return _shell("Probe", script)

    async def redirect(request: web.Request) -> web.Response:
        raise web.HTTPFound(_target(request) + "doc")

    async def never(request: web.Request) -> web.Response:
        extra = '<script src="/js/api/hang.js"></script>'
        return _shell("Never settles", "document.title = 'still loading';", extra)

    async def hang(request: web.Request) -> web.Response:
        # Never answers while the client waits; gives up once it has gone (so a server
        # shutdown does not wait an hour for this handler).
        for _ in range(36_000):
            transport = request.transport
            if transport is None or transport.is_closing():
                break
            await asyncio.sleep(0.1)
        return web.Response(text="")

    app.router.add_get("/product/{i}", product)
    app.router.add_get("/api/product/{i}", product_api)
    app.router.add_get("/listing", listing)
    app.router.add_get("/api/listing", listing_api)
    app.router.add_get("/feed", feed)
    app.router.add_get("/probe", probe)
    app.router.add_get("/redirect", redirect)
    app.router.add_get("/never", never)
    app.router.add_get("/api/hang.js", hang)
    return app
