""":func:`run`: one perftest program (``main`` of ``src/write_bw.c``, ``read_bw.c``, ``send_bw.c``,
``atomic_bw.c``): the options checked as ``src/perftest_parameters.c`` checks them, then the session
with the TCP exchange (:mod:`rdmalab.tools.perftest.ethernet`) or with rdma_cm
(:mod:`rdmalab.tools.perftest.rdmacm`).
"""

from __future__ import annotations

import random
import socket
from typing import IO

from rdmalab.fabric.udp import UdpFabric, check_permission, interface_of
from rdmalab.tools.oob import Channel, connect, listen
from rdmalab.tools.perftest.ethernet import _traffic
from rdmalab.tools.perftest.exchange import _mtu, _versions
from rdmalab.tools.perftest.options import ATOMIC_IWARP, MAX_SIZE, VERBS, PerftestError, PerftestOptions
from rdmalab.tools.perftest.rdmacm import _run_cm
from rdmalab.tools.perftest.report import PerftestResult
from rdmalab.wire.ib import check_mtu
from rdmalab.wire.ib import mtu_bytes as mtu_bytes_of  # (mtu_bytes: the name of a local below)


def run(opts: PerftestOptions, out: IO[str], listener: socket.socket | None = None) -> PerftestResult:
    """Run one perftest program's exchange and traffic; prints its lines to ``out``.  A server (without
    -R) accepts on ``listener`` (:func:`rdmalab.tools.oob.open_listener`) when given."""
    verb = opts.verb
    if verb not in VERBS:
        raise PerftestError(f"unknown test {verb!r} (write, read, send or atomic)")
    assert opts.size is not None and opts.iters is not None
    if opts.num_qps != 1:
        raise PerftestError(f"-q {opts.num_qps}: the soft engine runs perftest with one QP (-q 1)")
    if opts.ib_port != 1:
        raise PerftestError(f"the soft device has port 1 only, not {opts.ib_port}")
    if opts.gid_idx not in (None, 1):
        raise PerftestError(f"GID index {opts.gid_idx}: the soft device carries IPv4 only, which is GID index 1 "
                            "(::ffff:a.b.c.d, as rxe); use -x 1")
    try:
        if opts.mtu is not None:
            check_mtu(opts.mtu, "-m (the MTU)")
    except ValueError as exc:
        raise PerftestError(str(exc)) from None
    if verb == "atomic" and opts.size != 8:
        raise PerftestError(f"-s {opts.size}: atomic operations are 8 bytes")
    if not 1 <= opts.size <= MAX_SIZE:
        raise PerftestError(f"-s {opts.size}: the size is 1 .. {MAX_SIZE} bytes")
    if opts.atomic_type not in ("CMP_AND_SWAP", "FETCH_AND_ADD"):
        raise PerftestError(f"-A {opts.atomic_type}: the atomic type is CMP_AND_SWAP or FETCH_AND_ADD")
    if opts.transport == "iwarp" and opts.pcap:
        raise PerftestError("--pcap records the RoCE engine's datagrams; over iWARP the kernel's TCP carries the "
                            "bytes: capture with tcpdump on the interface")
    if opts.transport != "iwarp":
        check_permission()   # the RoCE carrier's raw socket; iWARP uses plain TCP sockets
    if opts.duration is None:
        # perftest (force_dependecies): neither depth exceeds the iterations
        opts.tx_depth = min(opts.tx_depth, opts.iters)
        if opts.verb == "send":
            opts.rx_depth = min(opts.rx_depth, opts.iters)
    if opts.verb == "send" and opts.rx_depth % 2:
        opts.rx_depth += 1  # perftest_parameters.c: "WA for a bug when rx_depth is odd in SEND"
    if opts.transport not in ("auto", "roce", "iwarp"):
        raise PerftestError(f"transport {opts.transport!r}: auto, roce or iwarp")
    if opts.transport == "iwarp" and not opts.rdma_cm:
        raise PerftestError("iWARP connects with rdma_cm only (TCP and MPA): add -R")
    if opts.transport == "iwarp" and verb == "atomic":
        raise PerftestError(ATOMIC_IWARP)
    client = opts.server is not None
    sizes = [1 << i for i in range(1, 24)] if opts.all_sizes and verb != "atomic" else [opts.size]
    if not client:
        out.write("\n************************************\n* Waiting for client to connect... *\n"
                  "************************************\n")
        out.flush()
    if opts.rdma_cm:
        return _run_cm(opts, out, client, sizes)
    chan: Channel = (connect(opts.server, opts.port, tries=30.0) if opts.server
                     else listen(opts.port, listener=listener))
    fab = None
    try:
        # ----------------------------------------------------------- versions, page size, MTU
        _versions(chan, client)
        ifname = opts.ifname or interface_of(chan.local_ip)
        fab = UdpFabric(ifname, name="rdmalab0", poll_wait=0.0, pcap=opts.pcap,
                        seed=random.SystemRandom().getrandbits(32))
        curr = _mtu(chan, client, opts, fab.mtu)
        mtu_bytes = mtu_bytes_of(curr)
        return _traffic(opts, out, chan, fab, client, sizes, curr, mtu_bytes)
    finally:
        chan.close()
        if fab is not None:
            fab.linger(0.2)
            fab.close()
