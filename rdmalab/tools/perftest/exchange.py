"""perftest's out-of-band exchange, the parts both exchange methods share (``src/perftest_communication.c``):
the version strings, page size and cache line (``exchange_versions``, ``check_version_compatibility``,
``check_sys_data``), the MTU (``check_mtu``), and the 56-byte binary key record ``-R`` sends
(:data:`DEST`, ``struct pingpong_dest`` of ``src/perftest_resources.h``; ``rdma_write_keys``,
``rdma_read_keys``).  The TCP mode's 108-byte text record is :class:`rdmalab.tools.oob.PerfDest`'s.
"""

from __future__ import annotations

import struct
from typing import Any

from rdmalab.tools.oob import PerfDest
from rdmalab.tools.perftest.options import PerftestError, PerftestOptions
from rdmalab.verbs import enums as e

VERSION = "6.06"  # what Debian 12's perftest 4.5+0.17 reports (ib_write_bw -V)
PAGE, CACHE_LINE = 4096, 64
#: ``struct pingpong_dest`` as rdma_write_keys sends it (perftest_resources.h, perftest_communication.c):
#: lid, out_reads, qpn, psn, rkey (be32), 4 bytes of padding, vaddr (be64), the GID, srqn, gid_index (be32)
DEST = struct.Struct(">iiiiI4xQ16sIi")
GID_INDEX = 1  # the soft device's ::ffff:<IPv4> (perftest picks rxe's RoCEv2 IPv4 GID, index 1, the same way)


def _versions(chan: Any, client: bool) -> None:
    """exchange_versions, check_version_compatibility, check_sys_data (perftest_communication.c)."""
    mine = VERSION.encode().ljust(16, b"\0")
    rem = chan.exchange(mine, 16, client, "its version").split(b"\0", 1)[0].decode("ascii", "replace")
    try:
        rem_v = float(rem)
    except ValueError:
        raise PerftestError(f"the peer's version {rem!r} is not perftest's") from None
    if rem_v < 5.70:
        raise PerftestError("Current implementation is not compatible with versions older than 5.70")
    if rem_v >= 5.32:
        chan.exchange(struct.pack(">i", PAGE), 4, client, "its page size")
        chan.exchange(struct.pack(">i", CACHE_LINE), 4, client, "its cache line size")


def _mtu(chan: Any, client: bool, opts: PerftestOptions, port_mtu: int) -> int:
    """check_mtu: each side's MTU (the ibv_mtu digit and a NUL); both use the smaller.  Returns the ibv_mtu."""
    cur = e.bytes_to_mtu(min(opts.mtu or port_mtu, port_mtu))
    got = chan.exchange(f"{cur}".encode() + b"\0", 2, client, "its MTU")
    try:
        rem_mtu = int(got.split(b"\0", 1)[0])
    except ValueError:
        rem_mtu = 0
    return rem_mtu if 1 <= rem_mtu <= 5 and cur > rem_mtu else cur


def encode_dest(d: PerfDest, gid_index: int = GID_INDEX) -> bytes:
    """The 56 bytes of ``rdma_write_keys``: every field big-endian (htobe32/htobe64), the GID as it is."""
    return DEST.pack(d.lid, d.out_reads, d.qpn, d.psn, d.rkey, d.vaddr, d.gid, d.srqn, gid_index)


def decode_dest(raw: bytes) -> PerfDest:
    """``rdma_read_keys``: the fields perftest reads back (it ignores srqn and gid_index)."""
    if len(raw) != DEST.size:
        raise PerftestError(f"the peer's key record is {len(raw)} bytes, not the {DEST.size} of perftest's "
                            "struct pingpong_dest (is the peer perftest 4.5 with -R?)")
    lid, out_reads, qpn, psn, rkey, vaddr, gid, srqn, _ = DEST.unpack(raw)
    return PerfDest(lid, out_reads, qpn, psn, rkey, vaddr, gid, srqn)
