"""One linked device, several processes: what they must agree on, kept in a directory they share.

Kernel rxe is one device however many processes open it: one QP number space, one connection
manager answering for every listener.  A linked soft device (``RDMALAB_LINKS=soft0=veth0``) is
instead made again by every process that opens it, on the same interface and address, and each
process's raw socket sees every RoCEv2 packet sent to that address.  rdma-core's own rdma-cm
tests run exactly so: two processes forked from one, both on the device's one address, the
active side connecting to the passive side's port (``tests/base.py``, ``two_nodes_rdmacm_traffic``).

So that they behave as one device, the processes of one device share a directory
(:func:`device_dir`) and in it:

* **QP numbers**: a process claims blocks of 256 QPNs with an exclusive create of
  ``qpn-<block>`` (holding its PID); a block whose process has died is taken over.  Each process
  then handles only packets for its own QPs (the others' are dropped as "no QP", silently, as a
  device drops packets for a QP that does not exist).
* **Listeners**: ``listen-<service ID>`` holds the PID of the process listening on it.  A REQ or
  SIDR_REQ for a service ID this process does not listen on is answered with REJ 8 / SIDR
  "unsupported" only when no live process of the device listens on it; otherwise the listener's
  process answers and this one stays silent.

The directory is keyed by the network namespace, the interface and the address, under
``$XDG_RUNTIME_DIR`` or the temporary directory, one per user.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

QPN_BLOCK = 256
FIRST_BLOCK = 1  # QPNs from 0x100: below are QP0/QP1 and what a plain device hands out first (0x11)
LAST_BLOCK = 0xFFFF  # 24-bit QPNs


def _netns() -> str:
    try:
        return str(os.stat("/proc/self/ns/net").st_ino)
    except OSError:
        return "0"


def device_dir(ifname: str, ip: str) -> Path:
    base = Path(os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()) / f"rdmalab-{os.getuid()}" / "devices"
    d = base / f"{_netns()}-{ifname}-{ip}"
    d.mkdir(parents=True, exist_ok=True)
    return d


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (it may belong to another user)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _owner(path: Path) -> int | None:
    try:
        return int(path.read_text().strip() or "0")
    except (OSError, ValueError):
        return None


def _claim(path: Path) -> bool:
    """Create ``path`` holding this PID, or take it over from a dead process."""
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            pid = _owner(path)
            if pid is not None and pid_alive(pid):
                return pid == os.getpid()
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        return True
    return False


class SharedDevice:
    """The agreements of one process with the other processes of one linked device."""

    def __init__(self, ifname: str, ip: str) -> None:
        self.dir = device_dir(ifname, ip)
        self.forked()

    def forked(self) -> None:
        """Start afresh as this process (also in a child after ``fork()``: its blocks are its own)."""
        self.pid = os.getpid()
        self._next = 0
        self._end = 0
        self._blocks: list[Path] = []
        self._listening: dict[int, Path] = {}

    def next_qpn(self) -> int:
        """A QP number no other live process of the device uses."""
        if os.getpid() != self.pid:
            self.forked()
        if self._next >= self._end:
            start = FIRST_BLOCK + (self.pid * 7919) % (LAST_BLOCK - FIRST_BLOCK)
            for i in range(LAST_BLOCK - FIRST_BLOCK):
                block = FIRST_BLOCK + (start - FIRST_BLOCK + i) % (LAST_BLOCK - FIRST_BLOCK)
                path = self.dir / f"qpn-{block}"
                if _claim(path):
                    self._blocks.append(path)
                    self._next, self._end = block * QPN_BLOCK, (block + 1) * QPN_BLOCK
                    break
            else:
                raise RuntimeError(f"no free QP number block in {self.dir}")
        qpn = self._next
        self._next += 1
        return qpn

    def listen(self, service_id: int) -> bool:
        """Register this process as the listener on ``service_id``; False if a live process already is."""
        path = self.dir / f"listen-{service_id:016x}"
        if _claim(path):
            self._listening[service_id] = path
            return True
        return False

    def unlisten(self, service_id: int) -> None:
        path = self._listening.pop(service_id, None)
        if path is not None and _owner(path) == os.getpid():
            path.unlink(missing_ok=True)

    def listened_elsewhere(self, service_id: int) -> bool:
        """Whether another live process of the device listens on ``service_id``."""
        pid = _owner(self.dir / f"listen-{service_id:016x}")
        return pid is not None and pid != os.getpid() and pid_alive(pid)

    def close(self) -> None:
        for sid in list(self._listening):
            self.unlisten(sid)
        for path in self._blocks:
            if _owner(path) == os.getpid():
                path.unlink(missing_ok=True)
        self._blocks.clear()
