"""Two network namespaces joined by a veth pair, for tests that run two engines over real UDP."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

import pytest


@contextmanager
def veth_namespaces(prefix: str, net: str) -> Iterator[tuple[str, str]]:
    """Namespaces ``A`` and ``B`` (named from ``prefix`` and this process), ``net``.1/24 and ``net``.2/24 on
    the two ends of a veth pair, both up; removed afterwards.  Skips without root, iproute2 or netns."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 (two network namespaces joined by a veth pair)")
    tag = f"{prefix}{os.getpid() % 100000}"
    a, b = f"{tag}a", f"{tag}b"

    def ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True)

    def remove() -> None:
        for ns in (a, b):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)

    try:
        ip("netns", "add", a)
        ip("netns", "add", b)
        ip("link", "add", f"{tag}x", "type", "veth", "peer", "name", f"{tag}y")
        ip("link", "set", f"{tag}x", "netns", a)
        ip("link", "set", f"{tag}y", "netns", b)
        ip("-n", a, "addr", "add", f"{net}.1/24", "dev", f"{tag}x")
        ip("-n", b, "addr", "add", f"{net}.2/24", "dev", f"{tag}y")
        for ns, dev in ((a, f"{tag}x"), (b, f"{tag}y")):
            ip("-n", ns, "link", "set", dev, "up")
            ip("-n", ns, "link", "set", "lo", "up")
    except subprocess.CalledProcessError as exc:
        remove()
        pytest.skip(f"cannot set up network namespaces here: {exc.stderr.decode().strip()}")
    try:
        yield a, b
    finally:
        remove()
