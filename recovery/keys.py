"""Identities: canonical URLs, task keys and observation keys (pure functions).

Two spellings of one page are one task; a retry collides with its original task; one entity in
one window is one observation. Keys are SHA-256 hex over length-prefixed parts, so no choice of
part values can make two different tuples collide by concatenation.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

DEFAULT_PORTS = {"http": 80, "https": 443}
# Longest URL a task may have, before and after canonicalisation (bytes = characters here:
# a canonical URL is ASCII). Browsers and servers commonly stop at 8 KB; a longer "URL" in a
# manifest is a pasted document, not a page.
MAX_URL_LENGTH = 8192
# C0 controls and DEL: never part of a URL (a raw NUL reached the database before this).
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
TRACKING_PARAMS = frozenset(
    {"gclid", "fbclid", "dclid", "msclkid", "yclid", "mc_cid", "mc_eid", "_ga", "_gl", "igshid"}
)
TRACKING_PREFIXES = ("utm_",)

# Characters left as they are in a path; everything else is percent-encoded, so "%7E" and "~"
# or a raw and an encoded space canonicalise to the same spelling.
_PATH_SAFE = "/:@!$&'()*+,;=-._~"
# One DNS label after IDNA encoding (underscores occur in real hostnames, so they pass).
_LABEL = re.compile(r"^[a-z0-9_-]{1,63}$")


class InvalidURL(ValueError):
    """A manifest or discovered URL that cannot be a task (names the problem)."""


def _is_tracking(key: str) -> bool:
    lowered = key.lower()
    return lowered in TRACKING_PARAMS or lowered.startswith(TRACKING_PREFIXES)


# The common spelling: ASCII host, optional port, a path and query with nothing to decode or
# encode. Such URLs take the fast path below; anything else (and any doubt) the full one.
_SIMPLE = re.compile(
    r"(?P<scheme>[Hh][Tt][Tt][Pp][Ss]?)://(?P<host>[A-Za-z0-9._-]+)(?::(?P<port>[0-9]{1,5}))?"
    r"(?P<path>/[A-Za-z0-9/:@!$&'()*+,;=._~-]*)?(?:\?(?P<query>[A-Za-z0-9._~=&-]*))?"
    r"(?:#[^\r\n\t]*)?"
)


def canonical_url(url: str) -> str:
    """Lower-case scheme and host, default port dropped, fragment dropped, query keys sorted,
    tracking parameters removed, path percent-encoding normalised."""
    if isinstance(url, str):
        if len(url) > MAX_URL_LENGTH:
            raise InvalidURL(
                f"{url[:60]!r}...: {len(url):,} characters, over the "
                f"{MAX_URL_LENGTH:,}-character limit"
            )
        fast = _canonical_simple(url)
        if fast is not None:
            return fast
    canonical = _canonical_full(url)
    if len(canonical) > MAX_URL_LENGTH:
        # Percent-encoding can triple a path: the stored form must fit as well.
        raise InvalidURL(
            f"{url[:60]!r}...: {len(canonical):,} characters once percent-encoded, over the "
            f"{MAX_URL_LENGTH:,}-character limit"
        )
    return canonical


def _canonical_simple(url: str) -> str | None:
    """canonical_url for URLs that need no decoding (a manifest's usual case, ~2x faster);
    None when the full parser must decide. tests/unit/test_keys.py checks it agrees with
    _canonical_full on generated URLs."""
    match = _SIMPLE.fullmatch(url)
    if match is None:
        return None
    scheme, host, port, path, query = match.group("scheme", "host", "port", "path", "query")
    scheme = scheme.lower()
    host = host.lower().rstrip(".")
    if not host or len(host) > 253 or not all(_LABEL.match(label) for label in host.split(".")):
        return None
    if port is not None:
        number = int(port)
        if not 0 < number <= 65535:
            return None
        if number != DEFAULT_PORTS[scheme]:
            host = f"{host}:{number}"
    pairs = []
    for piece in (query or "").split("&"):
        if not piece:
            continue
        key, _, value = piece.partition("=")
        if "=" in value:
            return None  # urlencode would encode it
        if not _is_tracking(key):
            pairs.append((key, value))
    pairs.sort()
    out = f"{scheme}://{host}{path or '/'}"
    return out + "?" + "&".join(f"{k}={v}" for k, v in pairs) if pairs else out


def _canonical_full(url: str) -> str:
    if not isinstance(url, str) or not url.strip():
        raise InvalidURL("empty URL")
    raw = url.strip()
    control = _CONTROL.search(raw)
    if control:
        raise InvalidURL(
            f"URL contains a control character ({control.group()!r} at position "
            f"{control.start() + 1}): {raw[:200]!r}"
        )
    try:
        parts = urlsplit(raw)
        port = parts.port
    except ValueError as exc:
        raise InvalidURL(f"{raw!r}: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise InvalidURL(f"{raw!r}: scheme {scheme or '(none)'!r} is not http or https")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise InvalidURL(f"{raw!r}: no host")
    try:
        host = host.encode("idna").decode("ascii") if not host.isascii() else host.lower()
    except UnicodeError:
        raise InvalidURL(f"{raw!r}: host {host!r} is not a valid name") from None
    if parts.username is not None or parts.password is not None:
        # Dropping them would silently merge different users' pages into one task; keeping
        # them would store a credential (guarantee 11). Refuse instead.
        raise InvalidURL(f"{raw!r}: credentials in a URL are not allowed")
    if ":" in host:  # IPv6 literal
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise InvalidURL(f"{raw!r}: host {host!r} is not a valid IPv6 address") from None
        host = f"[{host}]"
    elif len(host) > 253 or not all(_LABEL.match(label) for label in host.split(".")):
        raise InvalidURL(f"{raw!r}: host {host!r} is not a valid name")
    if port == 0:
        raise InvalidURL(f"{raw!r}: port 0")
    netloc = host if port in (None, DEFAULT_PORTS[scheme]) else f"{host}:{port}"
    path = quote(unquote(parts.path), safe=_PATH_SAFE) or "/"
    query_pairs = [
        (k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if not _is_tracking(k)
    ]
    query = urlencode(sorted(query_pairs), quote_via=quote)
    return urlunsplit((scheme, netloc, path, query, ""))


def _digest(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8")
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    return h.hexdigest()


def task_key(dataset: str, url: str, window: str, page_type: str) -> str:
    """hash(dataset, canonical URL, window, page type): stable across retries and spellings."""
    return task_key_from_canonical(dataset, canonical_url(url), window, page_type)


def task_key_from_canonical(dataset: str, canonical: str, window: str, page_type: str) -> str:
    """task_key for a URL already passed through canonical_url (saves a second parse when the
    caller needs the canonical URL too, as manifests do for every line)."""
    return _digest("task", dataset, canonical, window, page_type)


def observation_key(dataset: str, entity_key: str, window: str) -> str:
    """hash(dataset, entity key, window): one entity's state in one window."""
    return _digest("observation", dataset, entity_key, window)


def payload_hash(payload_json: str) -> str:
    """Hash of a payload's canonical JSON (sorted keys), kept to detect real changes."""
    return hashlib.sha256(payload_json.encode("utf-8")).hexdigest()


# Triage files (recovery.fetch.artefacts) are named by the SHA-256 of their content; a name that
# does not match is never opened, so an attempt's JSON cannot point outside the directory.
ARTEFACT_NAME = re.compile(r"^[0-9a-f]{64}\.(png|html)$")


def valid_artefact_name(name: object, suffix: str) -> bool:
    return isinstance(name, str) and bool(ARTEFACT_NAME.match(name)) and name.endswith("." + suffix)
