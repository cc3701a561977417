"""SALVAGE_ALLOWED_NETWORKS: which private addresses (and ports) a target may resolve to.

Pure (ipaddress only), so recovery.settings can refuse a bad entry at start-up instead of every
fetch failing later; recovery.fetch.guard applies the list to every connection and redirect hop.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class AllowedNetwork:
    """One SALVAGE_ALLOWED_NETWORKS entry: a network, and a port or None for every port."""

    network: IPNetwork
    port: int | None = None

    def admits(self, address: IPAddress, port: int | None) -> bool:
        if address.version != self.network.version or address not in self.network:
            return False
        return self.port is None or port == self.port

    def __str__(self) -> str:
        if self.port is None:
            return str(self.network)
        net = str(self.network)
        if self.network.version == 6:
            address, _, prefix = net.partition("/")
            net = f"[{address}]" + (f"/{prefix}" if prefix != "128" else "")
        elif net.endswith("/32"):
            net = net[:-3]
        return f"{net}:{self.port}"


def parse_networks(items: Iterable[str]) -> tuple[AllowedNetwork, ...]:
    """Allow-list entries from settings; a bad entry raises ValueError naming it.

    Forms: `10.0.0.0/8` or `::1/128` (every port), `127.0.0.1:8765`, `10.0.0.0/8:443`,
    `[::1]:8765`, `[fd00::]/8:443` (that port only). A bare IPv6 network takes no port (its
    colons are the address's), so an IPv6 entry with a port is written in brackets.
    """
    entries = []
    for item in items:
        text = item.strip()
        if not text:
            continue
        try:
            entries.append(_parse_entry(text))
        except ValueError as exc:
            raise ValueError(
                f"SALVAGE_ALLOWED_NETWORKS: {item!r} is not a network or network:port ({exc})"
            ) from None
    return tuple(entries)


def _parse_entry(text: str) -> AllowedNetwork:
    port_text = None
    if text.startswith("["):
        address, bracket, rest = text[1:].partition("]")
        if not bracket:
            raise ValueError("no closing bracket")
        prefix, colon, port_text = rest.partition(":")
        if prefix and not prefix.startswith("/"):
            raise ValueError(f"unexpected {prefix!r} after the address")
        if colon and not port_text:
            raise ValueError("empty port")
        network_text = address + prefix
        port_text = port_text if colon else None
    elif text.count(":") == 1:
        network_text, _, port_text = text.partition(":")
    else:
        network_text = text
    network = ipaddress.ip_network(network_text, strict=False)
    port = None
    if port_text is not None:
        if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
            raise ValueError(f"port {port_text!r} is not 1-65535")
        port = int(port_text)
    return AllowedNetwork(network, port)
