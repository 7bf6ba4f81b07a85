"""``rdmalab perftest write|read|send|atomic``: perftest 4.5's ``ib_*_bw`` with the soft engine on UDP.

The out-of-band exchange, the traffic and the report of ``ib_write_bw``, ``ib_read_bw``,
``ib_send_bw`` and ``ib_atomic_bw`` (perftest v4.5-0.17, Debian 12; ``src/write_bw.c`` and
siblings, ``src/perftest_communication.c``, ``src/perftest_parameters.c``), RC, one QP, TCP
exchange (not ``-R``/``-z``):

1. TCP connection; the client writes first in every exchange, the server reads first.
2. Version strings (16 bytes; the peer must be >= 5.70), page size and cache line (4 bytes each,
   network order, when the peer is >= 5.32), MTU (2 bytes: the ``ibv_mtu`` digit and a NUL; both
   use the smaller).
3. Key records (108 bytes, :class:`rdmalab.tools.oob.PerfDest`): write/read/atomic: one, connect
   the QP, one more (printed as the remote's), one "after RTR"; send: one, connect, one, one.
4. The client runs: up to ``tx_depth`` (128) WRITE/READ/ATOMIC/SEND work requests outstanding,
   one signalled every ``cq_mod`` (100); the server only answers (send: it posts 512 receives
   and counts ``iters`` of them).
5. write/read/atomic: one more key record ("client finished"), then the report fields (size,
   iters, peak, average, message rate; 8 bytes each, big-endian), which the server prints; all
   tools: a last key record, then ``"done"``.

With ``-R`` (:func:`_run_cm`, perftest's rdma_cm mode) the same sequence runs as SENDs on a control
RC QP that rdma_cm connects first (conn_param 0/0, one receive posted again after each message), the
key records as the 56-byte binary ``struct pingpong_dest`` (:data:`DEST`, big-endian fields); after
the MTU, a zeroed record, the data QP's own rdma_cm connection to the same port (out_reads/out_reads
for read and atomic), another zeroed record; no QP is connected by hand, no "done" is written, and
both connections end with a DREQ (``create_rdma_cm_connection``, ``rdma_write_keys``,
``ctx_xchg_data_rdma`` in perftest_communication.c).  perftest disconnects as soon as the closing
exchange is done on its side, so an ACK lost in it is never sent again: the engine takes the
peer's answer, or its DREQ after our closing answer, as the end of the session, and before its own
DREQ it answers the peer's retransmissions until they stop (``_Control._await``, :func:`_linger`).

Over iWARP (``-R`` on an iWARP device: ``transport="iwarp"``, or a linked device whose transport is
iWARP; the peer is ``ib_*_bw -R`` on kernel siw) rdma_cm connects with TCP and MPA instead of CM MADs,
and perftest itself differs in what :class:`PerftestOptions` documents for ``transport``: the read
sink also gets REMOTE_WRITE (``ctx_alloc_mr`` in perftest_resources.c), GID index 0 (siw's only GID),
``Transport type : IW``, and ``ib_send_bw`` runs with receive credits (:class:`_Credits`,
``send_rcredit`` in send_bw.c).  iWARP has no atomics (siw 6.1 refuses opcodes above Terminate), so
``atomic`` is refused by name.

BW in MB/sec is bytes / 2^20 per second, in Gb/sec bits / 10^9 (``format_factor``); the peak is
perftest's: the shortest time per message over any run of completed messages
(``print_report_bw``).
"""

from __future__ import annotations

import random
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

from rdmalab.fabric.links import LinkError, use_interface
from rdmalab.fabric.udp import UdpFabric, check_permission, interface_of
from rdmalab.tools.oob import PERF_RECORD, Channel, PerfDest, connect, listen
from rdmalab.verbs import enums as e
from rdmalab.verbs.addr import GID, AHAttr, GlobalRoute
from rdmalab.verbs.cm_enums import RAI_PASSIVE, rdma_cm_event_type
from rdmalab.verbs.cmid import CMID, AddrInfo, CMEvent, CMEventChannel, ConnParam, event_str, unreachable_text
from rdmalab.verbs.cmstate import CMEventError, owner, rejection_text, wait_event
from rdmalab.verbs.cq import CQ
from rdmalab.verbs.device import Context, _fabric, get_device_list, is_iwarp
from rdmalab.verbs.mr import MR
from rdmalab.verbs.pd import PD
from rdmalab.verbs.pyverbs_error import PyverbsRDMAError
from rdmalab.verbs.qp import QP, QPAttr, QPCap, QPInitAttr
from rdmalab.verbs.wr import SGE, RecvWR, SendWR
from rdmalab.wire.cm import cm_timeout_seconds
from rdmalab.wire.ib import check_mtu
from rdmalab.wire.ib import mtu_bytes as mtu_bytes_of  # (mtu_bytes: the name of a local below)

EV = rdma_cm_event_type

VERBS = ("write", "read", "send", "atomic")
TEST_NAME = {"send": "Send", "write": "RDMA_Write", "read": "RDMA_Read", "atomic": "Atomic"}
VERB_NUM = {"send": 0, "write": 1, "read": 2, "atomic": 3}
VERSION = "6.06"  # what Debian 12's perftest 4.5+0.17 reports (ib_write_bw -V)
RESULT_LINE = "-" * 87 + "\n"
RESULT_FMT = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
RESULT_FMT_G = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
MAX_SIZE = 8388608
PAGE, CACHE_LINE = 4096, 64
OUT_READS = 128  # the device's max_qp_rd_atom (rxe and the soft engine: 128)
ACCESS = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
          | e.IBV_ACCESS_REMOTE_ATOMIC)
#: ctx_alloc_mr's flags on iWARP (perftest_resources.c): the read sink also takes REMOTE_WRITE there
ACCESS_IWARP = {"write": e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE,
                "read": e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_WRITE,
                "send": e.IBV_ACCESS_LOCAL_WRITE}
ATOMIC_IWARP = ("atomic over iWARP: RDMAP (RFC 5040) as kernel siw implements it has no atomic operations "
                "(siw 6.1 answers any opcode above Terminate with a TERMINATE), so ib_atomic_bw has no iWARP peer")
CREDIT_WRID = 0xC4ED17  # the work request id of a credit RDMA WRITE (perftest uses the QP index)


class PerftestError(Exception):
    """What perftest would print before exiting 1 (one sentence)."""


class Rejected(PerftestError):
    """The peer's CM answered the REQ with a REJ."""


@dataclass
class PerftestOptions:
    verb: str = "write"
    server: str | None = None
    port: int = 18515
    ifname: str | None = None
    ib_port: int = 1
    size: int | None = None
    iters: int | None = None
    duration: float | None = None
    all_sizes: bool = False
    gid_idx: int | None = None
    mtu: int | None = None
    report_gbits: bool = False
    atomic_type: str = "FETCH_AND_ADD"
    tx_depth: int = 128
    rx_depth: int = 512
    cq_mod: int = 100
    num_qps: int = 1
    timeout: float = 60.0
    pcap: str | None = None
    rdma_cm: bool = False  # -R: both QPs connected by rdma_cm, the exchange over the first one
    #: "auto" (the device's), "roce" or "iwarp": the transport of the device -R uses; with ``ifname`` the
    #: device made on that interface has it, without, a linked device of that transport is taken
    transport: str = "auto"
    mpa_crc: bool = False  # iWARP: ask for MPA CRC32c in the MPA Request/Reply (the C flag)

    def __post_init__(self) -> None:
        if self.size is None:
            self.size = 8 if self.verb == "atomic" else 65536
        if self.iters is None:
            self.iters = 5000 if self.verb == "write" else 1000


@dataclass
class BwReport:
    size: int
    iters: int
    bw_peak: float
    bw_avg: float
    msg_rate: float


@dataclass
class PerftestResult:
    reports: list[BwReport] = field(default_factory=list)
    remote_reports: list[BwReport] = field(default_factory=list)
    completions: int = 0
    errors: int = 0


def _c_hex(v: int, width: int) -> str:
    """C's ``%#0<width>x``: ``0x``-prefixed and zero-padded, but a plain zero for 0."""
    return "0" * width if v == 0 else f"{v:#0{width}x}"


def report_line(r: BwReport, gbits: bool) -> str:
    if gbits and r.bw_avg < 0.1:  # inc_accuracy: REPORT_FMT_EXT
        return f" {r.size:<7d}    {r.iters}           {r.bw_peak:<7.6f}            {r.bw_avg:<7.6f}            {r.msg_rate:<7.6f}\n"
    return f" {r.size:<7d}    {r.iters:<10d}       {r.bw_peak:<7.2f}            {r.bw_avg:<7.2f}\t\t   {r.msg_rate:<7.6f}\n"


def sample_window(duration: float) -> tuple[float, float]:
    """perftest's ``-D``: the run goes START -> SAMPLE after the margin -> STOP_SAMPLE at duration -
    margin -> END at duration (perftest_resources.c ``catch_alarm``); the margin is duration / 4 in
    whole seconds (perftest_parameters.c, DEF_INIT_MARGIN).  Seconds from the start."""
    margin = int(duration) // 4
    return float(margin), duration - margin


def duration_report(size: int, iters: int, window: float, gbits: bool) -> BwReport:
    """``print_report_bw`` for ``-D``: no peak (noPeak is forced on), the completions of the sample window."""
    factor = 125_000_000 if gbits else 0x100000
    if window <= 0:
        return BwReport(size, iters, 0.0, 0.0, 0.0)
    return BwReport(size, iters, 0.0, size * iters / window / factor, iters / window / 1e6)


def compute_report(size: int, posted: list[float], completed: list[float], cq_mod: int, gbits: bool, *,
                   peak: bool = True, count: int | None = None) -> BwReport:
    """perftest's ``print_report_bw`` from per-message post times and completion times (seconds).

    ``peak=False`` is perftest's noPeak (the peak prints as 0; the average runs from the first post
    to the last completion); ``count`` is the number of messages when the lists hold only those two."""
    n = len(completed) if count is None else count
    factor = 125_000_000 if gbits else 0x100000
    total = completed[-1] - posted[0] if n else 0.0
    if n == 0 or total <= 0:
        return BwReport(size, n, 0.0, 0.0, 0.0)
    if not peak:
        return BwReport(size, n, 0.0, size * n / total / factor, n / total / 1e6)
    opt = total
    for i in range(n):
        j = ((i + cq_mod) // cq_mod) * cq_mod - 1  # ROUND_UP(i + 1, cq_mod) - 1
        while j < n:
            t = (completed[j] - posted[i]) / (j - i + 1)
            if 0 < t < opt:
                opt = t
            j += cq_mod
        if n % cq_mod:
            t = (completed[n - 1] - posted[i]) / (n - i)
            if 0 < t < opt:
                opt = t
    return BwReport(size, n, size / opt / factor, size * n / total / factor, n / total / 1e6)


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
            end = time.monotonic() + 0.2
            while time.monotonic() < end:
                fab.step(0.02)
            fab.close()


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


def _traffic(opts: PerftestOptions, out: IO[str], chan: Channel, fab: Any, client: bool, sizes: list[int],
             curr_mtu: int, mtu_bytes: int) -> PerftestResult:
    verb = opts.verb
    assert opts.iters is not None
    ctx = Context(name=fab.device.name, fabric=fab)
    pd = PD(ctx)
    bufsize = max(max(sizes), PAGE)
    mr = _data_mr(pd, bufsize, verb)
    cq = CQ(ctx, opts.tx_depth + opts.rx_depth + 1)
    cap = QPCap(max_send_wr=opts.tx_depth, max_recv_wr=opts.rx_depth, max_send_sge=1, max_recv_sge=1)
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap))
    init = QPAttr(port_num=opts.ib_port)
    init.qp_access_flags = ACCESS & ~e.IBV_ACCESS_LOCAL_WRITE
    qp.to_init(init)
    gid = int(ctx.query_gid(opts.ib_port, 1)).to_bytes(16, "big")
    # The receiving area is the second half of the buffer (perftest: buf + num_qps * BUFF_SIZE).
    me = PerfDest(0, OUT_READS, qp.qp_num, random.SystemRandom().getrandbits(24), mr.rkey, mr.buf + bufsize, gid)

    def connect_qp(rem: PerfDest) -> None:
        if ((rem.gid[:12] == bytes(10) + b"\xff\xff") != (gid[:12] == bytes(10) + b"\xff\xff")):
            raise PerftestError("Found Incompatibility issue with GID types. Please Try to use a different IP version.")
        a = QPAttr(port_num=opts.ib_port, path_mtu=curr_mtu)
        a.qp_access_flags = ACCESS & ~e.IBV_ACCESS_LOCAL_WRITE
        a.dest_qp_num, a.rq_psn, a.sq_psn = rem.qpn, rem.psn, me.psn
        a.max_dest_rd_atomic = OUT_READS
        a.max_rd_atomic = max(1, min(rem.out_reads, OUT_READS))
        a.min_rnr_timer, a.timeout, a.retry_cnt, a.rnr_retry = 12, 14, 7, 7
        a.ah_attr = AHAttr(port_num=opts.ib_port, is_global=1,
                           gr=GlobalRoute(dgid=GID.from_int(int.from_bytes(rem.gid, "big")), sgid_index=1,
                                          hop_limit=0xFF))
        qp.to_rts(a)

    return _session(opts, out, chan, fab, client, sizes, mtu_bytes, qp, cq, mr, bufsize, me, connect_qp)


def _data_mr(pd: Any, bufsize: int, verb: str, iwarp: bool = False) -> MR:
    """perftest's data buffer: the sending half, then the receiving half the peer is told about."""
    mr = MR(pd, 2 * bufsize, ACCESS_IWARP[verb] if iwarp else ACCESS)
    mr.write(random.randbytes(2 * bufsize) if verb != "atomic" else bytes(2 * bufsize), 2 * bufsize)
    return mr


def _session(opts: PerftestOptions, out: IO[str], chan: Any, fab: Any, client: bool, sizes: list[int],
             mtu_bytes: int, qp: Any, cq: Any, mr: Any, bufsize: int, me: PerfDest,
             connect_qp: Callable[[PerfDest], None] | None, iwarp: bool = False,
             credits: _Credits | None = None) -> PerftestResult:
    """From the first key exchange to the end: the part both exchange methods share.  ``connect_qp``
    is None with ``-R`` (rdma_cm connected the QP; the key records are 56-byte binary
    ``struct pingpong_dest`` over the control QP, and no "done" is written at the end)."""
    verb = opts.verb
    cm = connect_qp is None
    assert opts.iters is not None

    def pump() -> None:
        fab.step(0.005)

    def handshake(last: bool = False) -> PerfDest:
        # The engine keeps answering the peer while we wait for its next record.
        chan.pump = pump
        try:
            if cm:
                chan.last = last  # ctx_close_connection's: the peer disconnects once it has ours
                return decode_dest(chan.exchange(encode_dest(me), DEST.size, client, "its key record"))
            return PerfDest.decode(chan.exchange(me.encode(), PERF_RECORD, client, "its key record"))
        finally:
            chan.pump = None

    def print_dest(d: PerfDest, side: str) -> None:
        line = f" {side} address: LID {_c_hex(d.lid, 4)} QPN {_c_hex(d.qpn, 6)} PSN {_c_hex(d.psn, 6)}"
        # with -R the exchange's own parameters print them, and those say SEND (create_comm_struct)
        if VERB_NUM[verb] == 2 and not cm:
            line += f" OUT {_c_hex(d.out_reads, 4)}"
        if VERB_NUM[verb] in (1, 2) and not cm:
            line += f" RKey {_c_hex(d.rkey, 8)} VAddr {_c_hex(d.vaddr, 16)}"
        out.write(line + "\n")
        out.write(" GID: " + ":".join(f"{b:02d}" for b in d.gid) + "\n")

    def header() -> None:
        out.write(RESULT_LINE)
        title = TEST_NAME[verb] + " " + (opts.atomic_type + " " if verb == "atomic" else "") + "BW Test"
        out.write(" " * 20 + title + "\n")
        out.write(f" Dual-port       : OFF\t\tDevice         : {fab.device.name} ({fab.ifname})\n")
        out.write(f" Number of qps   : 1\t\tTransport type : {'IW' if iwarp else 'IB'}\n")
        out.write(" Connection type : RC\t\tUsing SRQ      : OFF\n")
        out.write(" PCIe relax order: Unsupported\n")
        out.write(" ibv_wr* API     : OFF\n")
        if client:
            out.write(f" TX depth        : {opts.tx_depth}\n")
        if verb == "send" and not client:
            out.write(f" RX depth        : {opts.rx_depth}\n")
        out.write(f" CQ Moderation   : {min(opts.cq_mod, opts.iters or 1)}\n")
        out.write(f" Mtu             : {mtu_bytes}[B]\n")
        out.write(" Link type       : Ethernet\n")
        out.write(f" GID index       : {0 if iwarp else 1}\n")
        if verb in ("read", "atomic"):
            out.write(f" Outstand reads  : {OUT_READS}\n")
        else:
            out.write(" Max inline data : 0[B]\n")
        if cm:
            out.write(" rdma_cm QPs\t : ON\n")
            out.write(" Data ex. method : rdma_cm")
            if not client:  # ctx_print_test_info, work_rdma_cm on the server
                out.write("\n" + RESULT_LINE + " Waiting for client rdma_cm QP to connect\n"
                          " Please run the same command with the IB/RoCE interface IP")
            out.write("\n")
        else:
            out.write(" rdma_cm QPs\t : OFF\n")
            out.write(" Data ex. method : Ethernet\n")
        out.write(RESULT_LINE)
        out.flush()

    header()
    rem = handshake()
    if connect_qp is not None:
        connect_qp(rem)
    if verb == "send":
        handshake()
        print_dest(me, "local")
        rem2 = handshake()
        print_dest(rem2, "remote")
    else:
        print_dest(me, "local")
        rem2 = handshake()
        print_dest(rem2, "remote")
        handshake()  # "an additional handshake is required after moving qp to RTR"
    out.write(RESULT_LINE)
    out.write((RESULT_FMT_G if opts.report_gbits else RESULT_FMT) + "\n")
    out.flush()
    res = PerftestResult()

    def post_recvs(n: int) -> None:
        for _ in range(n):
            qp.post_recv(RecvWR(wr_id=0, num_sge=1, sg=[SGE(mr.buf + bufsize, bufsize, mr.lkey)]))

    if credits is not None:
        credits.remote = rem  # ctx_set_credit_wqes: the peer's credit word, from the first record
    if not client:
        if verb == "send":
            post_recvs(opts.rx_depth)
            for size in sizes:
                handshake()
                if credits is not None:
                    credits.reset()
                rep = _serve_sends(opts, fab, cq, post_recvs, size, res, qp, credits)
                res.reports.append(rep)
                out.write(report_line(rep, opts.report_gbits))
            out.write(RESULT_LINE)
        else:
            handshake()  # the client finished
            chan.pump = pump
            try:
                for _ in sizes[:1]:
                    fields = [chan.exchange(bytes(8), 8, False, "its report") for _ in range(5)]
            finally:
                chan.pump = None
            size, iters = struct.unpack(">Q", fields[0])[0], struct.unpack(">Q", fields[1])[0]
            peak, avg, rate = (struct.unpack(">d", f)[0] for f in fields[2:])
            rr = BwReport(size, iters, peak, avg, rate)
            res.remote_reports.append(rr)
            out.write(report_line(rr, opts.report_gbits))
        handshake(last=True)  # ctx_close_connection
        if not cm:
            chan.send(b"done\0")
        if verb != "send":
            out.write(RESULT_LINE)
        out.flush()
        return res

    # ----------------------------------------------------------------- the client runs
    for size in sizes:
        if verb == "send":
            handshake()
            if credits is not None:
                credits.reset()
        rep = _run_client(opts, fab, qp, cq, mr, bufsize, rem, size, res, credits)
        res.reports.append(rep)
        out.write(report_line(rep, opts.report_gbits))
        out.flush()
    out.write(RESULT_LINE)
    if verb != "send":
        handshake()  # "client finished"
        last = res.reports[-1]
        for x in (struct.pack(">Q", last.size), struct.pack(">Q", last.iters), struct.pack(">d", last.bw_peak),
                  struct.pack(">d", last.bw_avg), struct.pack(">d", last.msg_rate)):
            chan.exchange(x, 8, True, "its report")
    handshake(last=True)  # ctx_close_connection
    if not cm:
        chan.send(b"done\0")
    out.flush()
    return res


def _run_client(opts: PerftestOptions, fab: Any, qp: Any, cq: Any, mr: Any, bufsize: int, rem: PerfDest, size: int,
                res: PerftestResult, credits: _Credits | None = None) -> BwReport:
    verb = opts.verb
    assert opts.iters is not None
    iters = opts.iters
    cq_mod = max(1, min(opts.cq_mod, iters))
    opcode = {"write": e.IBV_WR_RDMA_WRITE, "read": e.IBV_WR_RDMA_READ, "send": e.IBV_WR_SEND,
              "atomic": (e.IBV_WR_ATOMIC_FETCH_AND_ADD if opts.atomic_type == "FETCH_AND_ADD"
                         else e.IBV_WR_ATOMIC_CMP_AND_SWP)}[verb]
    posted: list[float] = []
    completed: list[float] = []
    done = 0
    start = time.monotonic()
    deadline = start + opts.duration if opts.duration else None
    sample_from, sample_to = (start + t for t in sample_window(opts.duration or 0.0))
    sampled = 0   # -D: completions polled while perftest's state is SAMPLE_STATE
    last_progress = start
    i = 0
    last_signalled = True

    def post(signal: bool) -> None:
        wr = SendWR(wr_id=len(posted), opcode=opcode, num_sge=1, sg=[SGE(mr.buf, size, mr.lkey)],
                    send_flags=e.IBV_SEND_SIGNALED if signal else 0)
        if verb == "atomic":
            if opcode == e.IBV_WR_ATOMIC_FETCH_AND_ADD:
                wr.set_wr_atomic(rem.rkey, rem.vaddr, 1, 0)
            else:
                wr.set_wr_atomic(rem.rkey, rem.vaddr, 0, 0)
        elif verb != "send":
            wr.set_wr_rdma(rem.rkey, rem.vaddr)
        posted.append(time.monotonic())
        qp.post_send(wr)

    while True:
        if deadline is None:
            while i < iters and i - done < opts.tx_depth and (credits is None or credits.may_send(i, opts.rx_depth)):
                last_signalled = (i + 1) % cq_mod == 0 or i + 1 == iters
                post(last_signalled)
                i += 1
        elif time.monotonic() < deadline:
            while i - done < opts.tx_depth and (credits is None or credits.may_send(i, opts.rx_depth)):
                last_signalled = (i + 1) % cq_mod == 0
                post(last_signalled)
                i += 1
        elif not last_signalled and i - done < opts.tx_depth and (credits is None or credits.may_send(i, opts.rx_depth)):
            # -D: the run ends after the deadline with one more, signalled, work request
            post(True)
            i += 1
            last_signalled = True
        # (with -n, all posted: a sender held back by iWARP receive credits has i < iters meanwhile)
        if done >= i and (i >= iters if deadline is None else time.monotonic() >= deadline):
            break
        n, wcs = cq.poll(16)
        if n == 0:
            # the CQ was just looked at, so a completion that came during the last step counts
            if time.monotonic() - last_progress > opts.timeout:
                if credits is not None and done >= i:
                    raise PerftestError(f"no receive credit for {opts.timeout:.0f} s ({done} sent, the peer's credit "
                                        f"says {credits.received()} received; the window is {opts.rx_depth})")
                raise PerftestError(f"no completion for {opts.timeout:.0f} s ({done} of {i} done): is the peer still "
                                    f"running, and can it reach {fab.ip} on UDP 4791?")
            fab.step(0.01)
            continue
        last_progress = time.monotonic()
        for wc in wcs:
            if wc.status != e.IBV_WC_SUCCESS:
                res.errors += 1
                raise PerftestError(f"Completion with error at client: Failed status {wc.status}: "
                                    f"{e.ibv_wc_status_str(wc.status)} (wr_id {wc.wr_id})")
            k = wc.wr_id + 1
            completed.extend([last_progress] * (k - done))
            res.completions += k - done
            if deadline is not None and sample_from <= last_progress < sample_to:
                sampled += k - done
            done = k
    if deadline is not None:
        return duration_report(size, sampled, sample_to - sample_from, opts.report_gbits)
    # perftest turns the peak off for long runs (perftest_parameters.c: ITERATIONS, iters > 20000, BW)
    return compute_report(size, posted[:len(completed)], completed, cq_mod, opts.report_gbits,
                          peak=iters <= 20000)


def _serve_sends(opts: PerftestOptions, fab: Any, cq: Any, post_recvs: Any, size: int, res: PerftestResult,
                 qp: Any = None, credits: _Credits | None = None) -> BwReport:
    """perftest's ``run_iter_bw_server``: receive ``iters`` SENDs, or with ``-D`` receive for the duration
    from the first one (``set_on_first_rx_packet``), counting those completed in the sample window.  The
    receive queue is kept full to the end, so the client's last SENDs still complete after the server
    stops counting (it answers them while it waits for the closing handshake).  With ``credits``
    (iWARP) every ``rx_depth // 3``-th receive is answered by a credit RDMA WRITE of the count."""
    assert opts.iters is not None
    rcnt = 0
    first: float | None = None
    last = 0.0
    sampled = 0
    window = sample_window(opts.duration or 0.0)
    last_progress = time.monotonic()
    outstanding = opts.rx_depth
    while rcnt < opts.iters if opts.duration is None else (first is None or time.monotonic() < first + opts.duration):
        wcs = credits.take_stash() if credits is not None else []
        n = len(wcs)
        if not n:
            n, wcs = cq.poll(32)
        if n == 0:
            # the CQ was just looked at, so a completion that came during the last step counts
            if time.monotonic() - last_progress > opts.timeout:
                goal = f"of {opts.iters} " if opts.duration is None else ""
                raise PerftestError(f"no completion for {opts.timeout:.0f} s ({rcnt} {goal}received)")
            fab.step(0.01)
            continue
        last = last_progress = time.monotonic()
        if first is None:
            first = last_progress
        for wc in wcs:
            if wc.status != e.IBV_WC_SUCCESS:
                what = "a credit RDMA WRITE" if wc.wr_id == CREDIT_WRID else "a receive"
                raise PerftestError(f"Completion with error at server ({what}): Failed status {wc.status}: "
                                    f"{e.ibv_wc_status_str(wc.status)}")
            if wc.wr_id == CREDIT_WRID:
                assert credits is not None
                credits.outstanding -= 1
                continue
            rcnt += 1
            if credits is not None:
                credits.after_receive(qp, cq, rcnt, opts, fab)
            if first + window[0] <= last_progress < first + window[1]:
                sampled += 1
            outstanding -= 1
        # as perftest does, every receive completed is posted again at once (it refills per completion)
        if outstanding < opts.rx_depth and (opts.duration is not None or rcnt < opts.iters):
            post_recvs(opts.rx_depth - outstanding)
            outstanding = opts.rx_depth
    if opts.duration is None:
        # run_iter_bw_server takes tcompleted after its loop (get_cycles), not at the last poll: all the
        # receives may come in one poll (a slow machine), and the time is still not zero
        last = time.monotonic()
    res.completions += rcnt
    if credits is not None:
        credits.drain(cq, opts, fab)
    if opts.duration is not None:
        return duration_report(size, sampled, window[1] - window[0], opts.report_gbits)
    # a SEND server has no peak (perftest_parameters.c: noPeak for SEND, BW, SERVER); its time runs
    # from the first receive (set_on_first_rx_packet) to the last
    assert first is not None
    return compute_report(size, [first], [last], 1, opts.report_gbits, peak=False, count=rcnt)


class _Credits:
    """``ib_send_bw``'s receive credits on iWARP (send_bw.c ``send_rcredit``; perftest_resources.c
    ``ctx_alloc_credit``, ``ctx_set_credit_wqes``, ``run_iter_bw``, ``run_iter_bw_server``).

    iWARP has no RNR: a SEND that finds no receive posted ends the connection with a TERMINATE, so
    perftest paces its sender by credits.  Each side registers 8 bytes (LOCAL_WRITE | REMOTE_WRITE):
    word 0 is the count it writes, word 1 the credit word the peer writes into, whose address and
    rkey go in the first key record in place of the data buffer's.  The receiver RDMA WRITEs its
    receive count (4 bytes, host order: little-endian on x86, as the stock program) into the
    sender's word every ``rx_depth // 3`` receives; the sender posts SEND number ``n`` only while
    ``n + 1 - credit < rx_depth``.  The word is zeroed before each size's run."""

    def __init__(self, pd: Any, rx_depth: int, tx_depth: int) -> None:
        self.mr = MR(pd, 8, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)
        self.mr.write(bytes(8), 8)
        self.every = max(1, rx_depth // 3)
        self.rx_depth, self.tx_depth = rx_depth, tx_depth
        self.remote: PerfDest | None = None
        self.outstanding = 0          # credit WRITEs posted and not completed
        self.stash: list[Any] = []    # receive completions polled while waiting for a credit WRITE's
        self.written = 0              # credit WRITEs posted in all

    @property
    def addr(self) -> int:
        return self.mr.buf + 4

    def received(self) -> int:
        return int(struct.unpack("<I", bytes(self.mr.read(4, 4)))[0])

    def reset(self) -> None:
        self.mr.write(bytes(4), 4, 4)

    def may_send(self, scnt: int, rx_depth: int) -> bool:
        return scnt + 1 - self.received() < rx_depth

    def take_stash(self) -> list[Any]:
        out, self.stash = self.stash, []
        return out

    def after_receive(self, qp: Any, cq: Any, rcnt: int, opts: PerftestOptions, fab: Any) -> None:
        if (rcnt % self.rx_depth) % self.every:
            return
        if self.remote is None:
            raise PerftestError("a credit is due but the peer's credit word is unknown (no key record yet)")
        while self.outstanding >= self.tx_depth:
            self._poll_credit(cq, opts, fab, "a free send slot for the next credit")
        self.mr.write(struct.pack("<I", rcnt & 0xFFFFFFFF), 4)
        wr = SendWR(wr_id=CREDIT_WRID, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(self.mr.buf, 4, self.mr.lkey)],
                    send_flags=e.IBV_SEND_SIGNALED)
        wr.set_wr_rdma(self.remote.rkey, self.remote.vaddr)
        qp.post_send(wr)
        self.outstanding += 1
        self.written += 1

    def _poll_credit(self, cq: Any, opts: PerftestOptions, fab: Any, what: str) -> None:
        start = time.monotonic()
        while True:
            n, wcs = cq.poll(16)
            for wc in wcs[:n]:
                if wc.wr_id != CREDIT_WRID:
                    self.stash.append(wc)
                    continue
                if wc.status != e.IBV_WC_SUCCESS:
                    raise PerftestError(f"Poll send CQ error status={wc.status} ({e.ibv_wc_status_str(wc.status)}) "
                                        "on a credit RDMA WRITE")
                self.outstanding -= 1
            if n:
                return
            if time.monotonic() - start > opts.timeout:
                raise PerftestError(f"no completion of a credit RDMA WRITE for {opts.timeout:.0f} s while waiting for {what}")
            fab.step(0.01)

    def drain(self, cq: Any, opts: PerftestOptions, fab: Any) -> None:
        """clean_scq_credit: the credit WRITEs still outstanding complete before the report."""
        while self.outstanding > 0:
            self._poll_credit(cq, opts, fab, "the last credit WRITEs (clean_scq_credit)")


# ---------------------------------------------------------------------- -R: perftest's rdma_cm mode
#: ``struct pingpong_dest`` as rdma_write_keys sends it (perftest_resources.h, perftest_communication.c):
#: lid, out_reads, qpn, psn, rkey (be32), 4 bytes of padding, vaddr (be64), the GID, srqn, gid_index (be32)
DEST = struct.Struct(">iiiiI4xQ16sIi")
CM_RETRIES = 10  # rdma_cm_client_connection: max_retries, 100 ms apart
GID_INDEX = 1  # the soft device's ::ffff:<IPv4> (perftest picks rxe's RoCEv2 IPv4 GID, index 1, the same way)


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


class _Control:
    """perftest's control connection with ``-R`` (create_comm_struct, rdma_{client,server}_connect): an RC QP
    of one send and one receive on an rdma_cm connection, every exchange a signalled SEND of exactly
    the field's size, each receive posted again once taken (rdma_read_data/rdma_write_data).  It has
    :class:`rdmalab.tools.oob.Channel`'s ``exchange``, so the TCP mode's sequence runs on it unchanged."""

    RECV, SEND = 0, 1

    def __init__(self, cmid: CMID, timeout: float) -> None:
        assert cmid.ctx is not None and cmid.pd is not None and cmid.device is not None
        self.cmid, self.timeout = cmid, timeout
        self.fab: Any = cmid.device.carrier
        # a CQ each for sends and receives, as perftest's (a SEND verb context has a recv_cq of its own):
        # the peer's next message may complete before the ACK of ours does
        self.scq, self.rcq = CQ(cmid.ctx, 2), CQ(cmid.ctx, 2)
        cmid.create_qp(QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.scq, rcq=self.rcq,
                                  cap=QPCap(max_send_wr=1, max_recv_wr=1, max_send_sge=1, max_recv_sge=1)))
        assert cmid.qp is not None
        self.qp = cmid.qp
        self.mr = MR(cmid.pd, 2 * DEST.size, e.IBV_ACCESS_LOCAL_WRITE)
        self.pump: Any = None  # what oob.Channel has; the waits here step the engine themselves
        self.last = False  # the exchange under way is the session's last (ctx_close_connection's)
        self._post_recv()

    def _post_recv(self) -> None:
        self.qp.post_recv(RecvWR(wr_id=self.RECV, num_sge=1, sg=[SGE(self.mr.buf, DEST.size, self.mr.lkey)]))

    def peer_left(self) -> bool:
        """Whether the peer has disconnected either connection: the channel is the session's alone,
        and perftest disconnects the data connection first (``destroy_ctx``), the control one at its
        exit; a perftest client waits for the data connection's DISCONNECTED before it exits."""
        ch = self.cmid._channel
        return ch is not None and any(ev.kind == EV.RDMA_CM_EVENT_DISCONNECTED for ev in ch.queue)

    def _await(self, send: str | None, recv: str | None) -> Any:
        """Until our SEND has completed (``send``: what we are doing, in words) and the peer's next
        message has come (``recv``, likewise; its completion returned).  A peer that disconnects
        meanwhile ends the wait with an error, except where only the ACK of our SEND is missing and
        the peer surely had the SEND: its answer came (it answers only what it has received), or ours
        was the session's last message (perftest goes on to ``destroy_ctx`` once it has it, after
        ``ctx_close_connection``).  That ACK was lost; waiting on would only meet the peer's
        timeouts (its DREQ unanswered) or its exit."""
        start = time.monotonic()
        got = None
        while True:
            for doing, cq, wr_id in ((send, self.scq, self.SEND), (recv, self.rcq, self.RECV)):
                if doing is None:
                    continue
                n, wcs = cq.poll(1)
                if not n:
                    continue
                wc = wcs[0]
                if wc.status != e.IBV_WC_SUCCESS:
                    raise PerftestError(f"the control connection failed while {doing}: completion status "
                                        f"{wc.status} ({e.ibv_wc_status_str(wc.status)})")
                if wc.wr_id != wr_id:
                    raise PerftestError(f"the control connection: a completion of work request {wc.wr_id} came "
                                        f"while {doing}")
                if wr_id == self.SEND:
                    send = None
                else:
                    recv, got = None, wc
            if send is None and recv is None:
                return got
            doing = send or recv
            if self.peer_left():
                if recv is None and (got is not None or self.last):
                    return got
                raise PerftestError(f"the peer disconnected (its DREQ came) while {doing}")
            if time.monotonic() - start > self.timeout:
                raise PerftestError(f"nothing came on the control connection for {self.timeout:.0f} s while {doing}")
            self.fab.step(0.01)

    def _post_send(self, data: bytes) -> None:
        self.mr.write(data, len(data), DEST.size)
        self.qp.post_send(SendWR(wr_id=self.SEND, opcode=e.IBV_WR_SEND, num_sge=1,
                                 sg=[SGE(self.mr.buf + DEST.size, len(data), self.mr.lkey)],
                                 send_flags=e.IBV_SEND_SIGNALED))

    def _take(self, wc: Any, size: int, what: str) -> bytes:
        if wc.byte_len != size:
            raise PerftestError(f"the peer sent {wc.byte_len} bytes where perftest's exchange has {what} "
                                f"({size} bytes): is it perftest 4.5 with -R, and the same test?")
        data = bytes(self.mr.read(size, 0))
        self._post_recv()
        return data

    def exchange(self, mine: bytes, size: int, client: bool, what: str) -> bytes:
        """ctx_xchg_data_rdma: the client sends first, the server receives first."""
        if client:
            self._post_send(mine)
            return self._take(self._await(f"sending ours for {what}", f"waiting for {what}"), size, what)
        got = self._take(self._await(None, f"waiting for {what}"), size, what)
        self._post_send(mine)
        self._await(f"answering {what}", None)
        return got

    def close(self) -> None:
        pass


def _is(a: Any, b: Any) -> bool:
    return owner(a) is owner(b)


def _event(ch: CMEventChannel, cmid: CMID | None, kinds: tuple[int, ...], what: str, where: str, timeout: float,
           listen: CMID | None = None) -> Any:
    """The next event of ``cmid`` (or a CONNECT_REQUEST on ``listen``); a failure in words (REJ reason, retries)."""
    try:
        return wait_event(ch, cmid, kinds, what, timeout_ms=int(timeout * 1000), listen=listen,
                          skip=(EV.RDMA_CM_EVENT_TIMEWAIT_EXIT,))
    except CMEventError as exc:
        ev = exc.event
        if ev.kind == EV.RDMA_CM_EVENT_REJECTED:
            raise Rejected(f"{what}: rejected by {where}: {rejection_text(ev.status)}") from None
        if ev.kind == EV.RDMA_CM_EVENT_UNREACHABLE:
            raise PerftestError(f"{what}: {where} is unreachable: {unreachable_text(ev.info)}") from None
        raise PerftestError(f"{what}: got {event_str(ev.kind)} (status {ev.status}) from {where}") from None
    except PyverbsRDMAError as exc:
        raise PerftestError(f"{what}: {exc}") from None


def _cm_device(opts: PerftestOptions) -> Any:
    """The soft device rdma_cm will use: one made on ``-d NETDEV`` for this run (iWARP with
    ``transport="iwarp"``: :mod:`rdmalab.fabric.tcpkernel`), else the linked devices."""
    if opts.mpa_crc and not (opts.ifname and opts.transport == "iwarp"):
        raise PerftestError("--mpa-crc goes with the device it makes: -d NETDEV --transport iwarp")
    if opts.ifname:  # the device a link of type siw (transport iwarp) or rxe would be, for this run
        siw = opts.transport == "iwarp"
        extra: dict[str, Any] = {"mpa_crc": opts.mpa_crc} if siw else {"pcap": opts.pcap}
        try:
            return use_interface(opts.ifname, type="siw" if siw else "rxe", poll_wait=0.0,
                                 seed=random.SystemRandom().getrandbits(32), **extra)
        except LinkError as exc:
            raise PerftestError(str(exc)) from None
    try:
        devs = get_device_list()
    except PyverbsRDMAError as exc:
        raise PerftestError(str(exc)) from None
    linked = [d for d in _fabric(None).devices.values() if d.ifname is not None]
    if not linked:
        names = ", ".join(d.name.decode() for d in devs) or "none"
        raise PerftestError(f"-R needs a soft device on a network interface: give -d NETDEV, or link one with "
                            f"`rdmalab link add soft0 netdev IFNAME` (or RDMALAB_LINKS=soft0=IFNAME); devices now: {names}")
    fab = linked[0].carrier
    if opts.transport == "iwarp" and not is_iwarp(fab.device):
        raise PerftestError(f"--transport iwarp: the linked device {fab.device.name} is RoCE; give -d NETDEV to make "
                            "a soft iWARP device on that interface")
    if opts.pcap:
        fab.write_pcap(opts.pcap)
    return fab


def _run_cm(opts: PerftestOptions, out: IO[str], client: bool, sizes: list[int]) -> PerftestResult:
    """``-R``: the exchange on a control rdma_cm connection, the data QP on a second one (both to ``port``)."""
    fab = _cm_device(opts)
    verb = opts.verb
    iwarp = is_iwarp(fab.device)
    if iwarp and verb == "atomic":
        raise PerftestError(ATOMIC_IWARP)
    out_reads = OUT_READS if verb in ("read", "atomic") else 1  # check_link: ctx_set_out_reads, else 1
    ch = CMEventChannel()
    where = f"{opts.server}:{opts.port}" if client else f"port {opts.port}"
    ids: list[CMID] = []
    listener: CMID | None = None
    try:
        # ------------------------------------------------------------ the control connection
        # conn_param 0/0: the exchange's parameters say SEND whatever the test (create_comm_struct)
        ctrl_param = ConnParam(resources=0, depth=0, retry=7, rnr_retry=7)
        if client:
            assert opts.server is not None
            cid = _resolve(ch, opts.server, opts.port, opts.timeout)
            ids.append(cid)
            ctrl = _Control(cid, opts.timeout)
            cid.connect(ctrl_param)
            # no timeout of ours: the CM ends the attempt itself (REJ, or UNREACHABLE after its retries)
            _event(ch, cid, (EV.RDMA_CM_EVENT_ESTABLISHED,), "connecting the control QP", where, 1e9)
        else:
            listener = CMID(ch)
            try:
                listener.bind_addr(AddrInfo(src="0.0.0.0", src_service=opts.port, flags=RAI_PASSIVE))
                listener.listen(1)
            except PyverbsRDMAError as exc:
                raise PerftestError(f"rdma_bind_addr/rdma_listen on port {opts.port}: {exc}") from None
            req = _event(ch, None, (), "waiting for the client's control connection", where, 1e9, listen=listener)
            cid = _adopt(ch, req, listener)
            ids.append(cid)
            ctrl = _Control(cid, opts.timeout)
            cid.accept(ctrl_param)  # perftest's server sends the REP and goes on (no wait for the RTU)
        if verb == "write":
            time.sleep(1)  # write_bw.c: sleep(1) after establish_connection
        _versions(ctrl, client)
        curr = _mtu(ctrl, client, opts, fab.device.active_mtu)
        # ------------------------------------------------------------ the data connection
        zero = PerfDest(0, 0, 0, 0, 0, 0, bytes(16))
        ctrl.exchange(encode_dest(zero, 0), DEST.size, client, "the key record before the data connection")
        data_param = ConnParam(resources=out_reads if out_reads > 1 else 0, depth=out_reads if out_reads > 1 else 0,
                               retry=7, rnr_retry=7)
        if client:
            assert opts.server is not None
            did, qp, cq, mr, bufsize = _connect_data(ch, opts, sizes, data_param, where, iwarp)
        else:
            assert listener is not None
            req = _event(ch, None, (), "waiting for the client's data connection", where, opts.timeout, listen=listener)
            did = _adopt(ch, req, listener)
            qp, cq, mr, bufsize = _data_qp(did, opts, sizes, iwarp)
            did.accept(data_param)
        ids.append(did)
        ctrl.exchange(encode_dest(zero, 0), DEST.size, client, "the key record after the data connection")
        gid_index = 0 if iwarp else GID_INDEX   # siw has one GID, from its MAC; rxe's IPv4 one is index 1
        gid = int(ctrl.cmid.ctx.query_gid(1, gid_index)).to_bytes(16, "big")  # type: ignore[union-attr]
        me = PerfDest(0, out_reads, qp.qp_num, random.SystemRandom().getrandbits(24), mr.rkey, mr.buf + bufsize, gid)
        credits = None
        if iwarp and verb == "send":  # send_bw.c: send_rcredit on iWARP; the record carries the credit word
            assert did.pd is not None
            credits = _Credits(did.pd, opts.rx_depth, opts.tx_depth)
            me.rkey, me.vaddr = credits.mr.rkey, credits.addr
        mtu_bytes = mtu_bytes_of(curr)
        res = _session(opts, out, ctrl, fab, client, sizes, mtu_bytes, qp, cq, mr, bufsize, me, None,
                       iwarp=iwarp, credits=credits)
        if not iwarp:  # iWARP's TCP carries the last ACKs itself
            _linger(ctrl, fab, opts.timeout)
        return res
    finally:
        _disconnect(ch, ids, fab, min(opts.timeout, 5.0))
        if listener is not None:
            listener.close()


def _resolve(ch: CMEventChannel, server: str, port: int, timeout: float) -> CMID:
    cid = CMID(ch)
    where = f"{server}:{port}"
    try:
        cid.resolve_addr(AddrInfo(dst=server, dst_service=port))
    except PyverbsRDMAError as exc:
        raise PerftestError(f"rdma_resolve_addr {where}: {exc}") from None
    _event(ch, cid, (EV.RDMA_CM_EVENT_ADDR_RESOLVED,), "rdma_resolve_addr", where, timeout)
    cid.resolve_route()
    _event(ch, cid, (EV.RDMA_CM_EVENT_ROUTE_RESOLVED,), "rdma_resolve_route", where, timeout)
    return cid


def _adopt(ch: CMEventChannel, req: Any, listener: CMID) -> CMID:
    """``CMID(CMEvent, listen_id)`` for a CONNECT_REQUEST taken out of the queue by :func:`_event`."""
    ch.queue.appendleft(req)
    return CMID(CMEvent(ch), listen_id=listener)


def _data_qp(cid: CMID, opts: PerftestOptions, sizes: list[int], iwarp: bool = False) -> tuple[QP, CQ, MR, int]:
    """create_qp_main under rdma_cm (rdma_create_qp): tx_depth sends, rx_depth receives, one CQ."""
    assert cid.ctx is not None and cid.pd is not None
    bufsize = max(max(sizes), PAGE)
    mr = _data_mr(cid.pd, bufsize, opts.verb, iwarp)
    cq = CQ(cid.ctx, opts.tx_depth + opts.rx_depth + 1)
    cap = QPCap(max_send_wr=opts.tx_depth, max_recv_wr=opts.rx_depth, max_send_sge=1, max_recv_sge=1)
    cid.create_qp(QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap))
    assert cid.qp is not None  # INIT with every remote access (CMID.create_qp)
    return cid.qp, cq, mr, bufsize


def _connect_data(ch: CMEventChannel, opts: PerftestOptions, sizes: list[int], param: ConnParam,
                  where: str, iwarp: bool = False) -> tuple[CMID, QP, CQ, MR, int]:
    """rdma_cm_client_connection: resolve, route, QP, connect; a REJ (the server not listening yet) is
    tried again, up to 10 times 100 ms apart, as perftest does."""
    assert opts.server is not None
    for attempt in range(1, CM_RETRIES + 1):
        cid = _resolve(ch, opts.server, opts.port, opts.timeout)
        qp, cq, mr, bufsize = _data_qp(cid, opts, sizes, iwarp)
        cid.connect(param)
        try:
            _event(ch, cid, (EV.RDMA_CM_EVENT_ESTABLISHED,), "connecting the data QP", where, 1e9)
            return cid, qp, cq, mr, bufsize
        except Rejected:
            if attempt == CM_RETRIES:
                raise
            cid.close()
            time.sleep(0.1)
    raise AssertionError("unreachable")


def _linger(ctrl: _Control, fab: Any, timeout: float) -> None:
    """After the last exchange, before our own ``rdma_disconnect``: wait for the peer's DREQ, the engine
    answering meanwhile, until two of the control QP's retransmission periods (4.096 us x 2^timeout,
    IBA 9.7.6.1.3; 2.1 s for the local ACK timeout 19 that rdma_cm puts in the REQ) have passed
    without a duplicate request from the peer, ``timeout`` at most: the peer's timer, started when
    it sent, fires within one period, and the second leaves room for a guest that runs slowly.
    The ACK of the peer's last SEND may have been lost; perftest disconnects as soon as that SEND
    completes (``destroy_ctx``), so the peer sends its DREQ at once when the ACK arrived, and
    retransmits the SEND when it did not (again if the ACK of the retransmission is lost too).
    Disconnecting first would move our QP to ERR (``rdma_disconnect``) and leave the retransmission
    unanswered: rxe retries a SEND with retry count 7 for ever, so the peer would never end."""
    period = cm_timeout_seconds(ctrl.qp.query()[0].timeout)
    counters = ctrl.cmid.device.counters if ctrl.cmid.device is not None else {}
    dups = counters.get("duplicate_request", 0)
    now = time.monotonic()
    quiet, hard = now + 2 * period, now + timeout
    while now < min(quiet, hard):
        if ctrl.peer_left():
            return
        fab.step(0.01)
        now = time.monotonic()
        if counters.get("duplicate_request", 0) != dups:  # the peer is still retransmitting: answered, wait on
            dups = counters.get("duplicate_request", 0)
            quiet = now + 2 * period


def _disconnect(ch: CMEventChannel, ids: list[CMID], fab: Any, wait: float) -> None:
    """The data connection, then the control one: rdma_disconnect (a DREQ, or the DREP answering the
    peer's), then DISCONNECTED, as perftest's destroy_ctx and its exit do; the engine keeps answering
    meanwhile, so the peer's own DREQs and last ACKs are answered before the process ends."""
    for cid in reversed(ids):
        if cid.conn is None or cid.state in ("rejected", "unreachable", "idle"):
            continue
        try:
            cid.disconnect()
        except PyverbsRDMAError:
            continue
    end = time.monotonic() + wait
    pending = [c for c in ids if c.conn is not None and c.state not in ("rejected", "unreachable", "idle")]
    while pending and time.monotonic() < end:
        for ev in list(ch.queue):
            if ev.kind == EV.RDMA_CM_EVENT_DISCONNECTED:
                pending = [c for c in pending if not _is(ev.cmid, c)]
        fab.step(0.01)
    end = time.monotonic() + 0.2
    while time.monotonic() < end:
        fab.step(0.02)
