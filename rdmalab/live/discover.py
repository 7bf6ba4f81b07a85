"""The host's kernel RDMA devices: what ``/sys/class/infiniband`` and ``rdma link`` show.

>>> from rdmalab.live import devices
>>> for d in devices():                     # doctest: +SKIP
...     print(d.name, d.driver, d.netdev, d.gids)
rxe0 rxe veth0 ['fe80:0000:...', '0000:0000:0000:0000:0000:ffff:0a00:0001']
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

SYS_IB = Path("/sys/class/infiniband")
ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"


@dataclass
class Device:
    """One kernel RDMA device (port 1 only; rxe and siw have one port)."""

    name: str
    driver: str                    # "rxe", "siw", "mlx5" ... (from `rdma link` or the name)
    node_type: str                 # e.g. "1: CA" or "4: RNIC"
    netdev: str | None
    state: str                     # e.g. "4: ACTIVE"
    gids: list[str] = field(default_factory=list)   # index -> GID (zero GIDs trailing dropped)
    ipv4: str | None = None        # from the IPv4-mapped GID, if any

    @property
    def soft(self) -> bool:
        return self.driver in ("rxe", "siw")

    @property
    def ipv4_gid_index(self) -> int | None:
        for i, g in enumerate(self.gids):
            if g.lower().startswith("0000:0000:0000:0000:0000:ffff:"):
                return i
        return None


def _read(p: Path) -> str:
    try:
        return p.read_text().strip()
    except OSError:
        return ""


def _rdma_links() -> dict[str, str]:
    """ifname -> netdev from `rdma -j link` (empty when iproute2's rdma tool is missing)."""
    if not shutil.which("rdma"):
        return {}
    try:
        p = subprocess.run(["rdma", "-j", "link", "show"], capture_output=True, text=True, timeout=10)
        links = json.loads(p.stdout or "[]")
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return {}
    return {str(x.get("ifname")): str(x.get("netdev")) for x in links if x.get("netdev")}


def gid_to_ipv4(gid: str) -> str | None:
    h = gid.replace(":", "").lower()
    if len(h) != 32 or not h.startswith("0" * 20 + "ffff"):
        return None
    return ".".join(str(int(h[i:i + 2], 16)) for i in range(24, 32, 2))


def devices(root: Path = SYS_IB) -> list[Device]:
    """The RDMA devices of this machine's kernel (empty list when there are none)."""
    if not root.is_dir():
        return []
    links = _rdma_links()
    out = []
    for d in sorted(root.iterdir()):
        port = d / "ports" / "1"
        gids = []
        gdir = port / "gids"
        if gdir.is_dir():
            n = len(list(gdir.iterdir()))
            gids = [_read(gdir / str(i)) for i in range(n)]
            while gids and gids[-1] in ("", ZERO_GID):
                gids.pop()
        netdev = links.get(d.name) or _read(d / "parent") or None
        driver = ""
        drv = d / "device" / "driver"
        if drv.exists():
            driver = drv.resolve().name
        if not driver:
            driver = "rxe" if d.name.startswith("rxe") else "siw" if d.name.startswith("siw") else d.name.rstrip("0123456789")
        ipv4 = next((ip for ip in (gid_to_ipv4(g) for g in gids) if ip), None)
        out.append(Device(d.name, driver, _read(d / "node_type"), netdev, _read(port / "state"), gids, ipv4))
    return out


def describe() -> str:
    """A few lines for humans: the devices, or what to do without any."""
    devs = devices()
    if not devs:
        return ("no kernel RDMA devices on this machine (fine: `rdmalab vm` boots a VM with rxe devices, "
                "or `sudo rdma link add rxe0 type rxe netdev IFACE` after `sudo modprobe rdma_rxe`)")
    return "\n".join(f"{d.name:8} {d.driver:5} netdev {d.netdev or '-':10} {d.state:10} "
                     f"IPv4 GID index {d.ipv4_gid_index} ({d.ipv4 or '-'})" for d in devs)
