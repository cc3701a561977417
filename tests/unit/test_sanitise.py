"""recovery.ops.sanitise: what a provider said, made safe to store (and what an Incident keeps)."""

from __future__ import annotations

import json

import httpx

from recovery.ops import sanitise
from recovery.providers.remote_base import exchange_of

SECRET = "s3cr3t-value-that-must-go"


def test_it_drops_credential_cookie_and_session_headers_and_redacts_values():
    kept = sanitise.headers(
        [
            ("Content-Type", "application/json"),
            ("Set-Cookie", f"session={SECRET}; HttpOnly"),
            ("Set-Cookie", f"other={SECRET}"),
            ("Cookie", f"a={SECRET}"),
            ("Authorization", f"Bearer {SECRET}"),
            ("X-API-Key", SECRET),
            ("X-Session-Id", SECRET),
            ("X-Upstream-Token", SECRET),
            ("Location", f"https://api.example/next?api_token={SECRET}&page=2"),
            ("Vary", "Accept"),
            ("Vary", "Origin"),
        ]
    )
    assert kept == {
        "content-type": "application/json",
        "location": "https://api.example/next?api_token=[redacted]&page=2",
        "vary": "Accept, Origin",
    }


def test_it_keeps_a_json_body_whole_without_its_credential_fields():
    body = {
        "error": "quota exceeded",
        "api_key": SECRET,
        "detail": {"access_token": SECRET, "url": f"https://x.test/?token={SECRET}"},
        "rows": list(range(40)),  # whole: an incident is not a summary
    }
    text, truncated = sanitise.body(json.dumps(body))
    assert not truncated and SECRET not in text
    assert json.loads(text) == {
        "error": "quota exceeded",
        "detail": {"url": "https://x.test/?token=[redacted]"},
        "rows": list(range(40)),
    }


def test_it_caps_a_long_body_and_says_so():
    text, truncated = sanitise.body("x" * (sanitise.BODY_CAP + 10))
    assert truncated and len(text) == sanitise.BODY_CAP
    text, truncated = sanitise.body("ok\x00done")
    assert (text, truncated) == ("ok\ufffddone", False)  # PostgreSQL refuses NUL


def test_an_exchange_keeps_the_request_and_the_response_sanitised():
    request = httpx.Request("POST", f"https://api.example/jobs?api_token={SECRET}")
    response = httpx.Response(
        422,
        request=request,
        headers={"Content-Type": "application/json", "Set-Cookie": f"sid={SECRET}"},
        content=json.dumps({"error": "bad url", "token": SECRET}).encode(),
    )
    seen = exchange_of(response)
    assert (seen.method, seen.http_status) == ("POST", 422)
    assert seen.endpoint == "https://api.example/jobs?api_token=[redacted]"
    assert seen.headers == {"content-type": "application/json", "content-length": "58"}
    assert json.loads(seen.body) == {"error": "bad url"}
    assert seen.at.utcoffset().total_seconds() == 0
    signed = httpx.Response(404, request=httpx.Request("HEAD", "https://cdn.test/f.mp4?sig=abc"))
    assert exchange_of(signed, strip_query=True).endpoint == "https://cdn.test/f.mp4"
