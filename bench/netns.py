"""A network namespace for the workers, joined to this one by a veth pair: another machine's
network stack on this one.

Processes started with `namespace.prefix` (`ip netns exec NAME`) see only the namespace's own
loopback and its end of the pair (`worker_address`); this namespace's end is `host_address`, so
whatever listens there (the latency proxy in front of PostgreSQL) is reached across the link,
through both network stacks, as a database on another host is. These kernels have no `netem`:
delay, where wanted, comes from bench/latency_proxy.py listening on `host_address`. Each
namespace gets its own /30 (by its tag), so two at once do not share an address.

Needs root and iproute2 (`available()` says why not). Everything is removed on exit; deleting
the namespace deletes its end of the pair, and with it the pair.

    with WorkerNamespace() as ns:
        subprocess.run([*ns.prefix, "python", "-c", "..."])
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
import zlib

# The /30s are cut from a private range the project uses nowhere else.
NETWORK = ipaddress.ip_network("10.232.0.0/16")
PREFIX_LENGTH = 30


def available() -> str | None:
    """None when namespaces can be made here; otherwise why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if not shutil.which("ip"):
        return "network namespaces need iproute2's `ip`"
    return None


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


class WorkerNamespace:
    def __init__(self, tag: str | None = None) -> None:
        tag = tag or str(os.getpid())
        self.name = f"salvage-w{tag}"
        # Interface names are at most 15 bytes.
        self.host_end = f"svh{tag}"[:15]
        self.worker_end = f"svw{tag}"[:15]
        self.prefix = ["ip", "netns", "exec", self.name]
        subnets = NETWORK.num_addresses // 4
        base = NETWORK.network_address + 4 * (zlib.crc32(tag.encode()) % subnets)
        self.host_address, self.worker_address = str(base + 1), str(base + 2)

    def __enter__(self) -> WorkerNamespace:
        why = available()
        if why:
            raise RuntimeError(why)
        _ip("netns", "add", self.name)
        try:
            _ip("link", "add", self.host_end, "type", "veth", "peer", "name", self.worker_end)
            _ip("link", "set", self.worker_end, "netns", self.name)
            _ip("addr", "add", f"{self.host_address}/{PREFIX_LENGTH}", "dev", self.host_end)
            _ip("link", "set", self.host_end, "up")
            inside = ("netns", "exec", self.name, "ip")
            worker = f"{self.worker_address}/{PREFIX_LENGTH}"
            _ip(*inside, "addr", "add", worker, "dev", self.worker_end)
            _ip(*inside, "link", "set", self.worker_end, "up")
            _ip(*inside, "link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, timeout=30)
        subprocess.run(["ip", "link", "del", self.host_end], capture_output=True, timeout=30)
