"""``rdmalab pingpong rc|uc|ud|srq``: rdma-core's ``ibv_*_pingpong`` with the soft engine on UDP.

It speaks the programs' out-of-band TCP exchange (:mod:`rdmalab.tools.oob`) and their traffic,
so either side can be the stock program on a kernel rxe device and the other this one
(rdma-core ``libibverbs/examples/{rc,uc,ud,srq}_pingpong.c`` at v44.0, Debian 12):

* both sides fill their buffer with ``0x7b`` (srq: zeros); with ``-c`` the client sets the first
  byte of every page to 0; the buffer is both the send and the receive buffer (UD: receives
  into ``buf``, ``size + 40`` bytes for the GRH, and sends from ``buf + 40``);
* strict ping-pong: a side posts its next SEND only when its previous SEND *and* a receive
  have completed; the client sends first; ``iters`` SENDs each way (srq: on every QP);
* the server moves its QP to RTR/RTS before it answers the client's record; the client does so
  after reading the answer, then writes ``"done"``.

With ``-c`` the stock programs only compare the first byte of each page at the end (server
side).  This implementation does that too, and also compares every byte of every message it
receives with what the client sent.
"""

from __future__ import annotations

import os
import random
import socket
import time
from dataclasses import dataclass, field
from typing import IO, Any

from rdmalab.fabric.udp import UdpFabric, check_permission, interface_of
from rdmalab.tools.oob import PP_DONE, PP_RECORD, Channel, OOBError, PPDest, connect, gid_text, listen
from rdmalab.verbs import enums as e
from rdmalab.verbs.addr import AH, GID, AHAttr, GlobalRoute
from rdmalab.verbs.cq import CQ
from rdmalab.verbs.device import Context
from rdmalab.verbs.mr import MR
from rdmalab.verbs.pd import PD
from rdmalab.verbs.qp import QP, QPAttr, QPCap, QPInitAttr
from rdmalab.verbs.srq import SRQ, SrqAttr, SrqInitAttr
from rdmalab.verbs.wr import SGE, RecvWR, SendWR
from rdmalab.wire.ib import check_mtu

KINDS = ("rc", "uc", "ud", "srq")
PAGE = os.sysconf("SC_PAGESIZE") if hasattr(os, "sysconf") else 4096
MAX_QP = 256  # srq_pingpong.c: records exchanged each way, whatever num_qp is
UD_QKEY = 0x11111111
RECV_WRID, SEND_WRID = 1, 2


class PingpongError(Exception):
    """What the stock program would print before exiting 1 (one sentence)."""


@dataclass
class PingpongOptions:
    kind: str = "rc"
    server: str | None = None
    port: int = 18515
    ifname: str | None = None
    ib_port: int = 1
    size: int | None = None
    mtu: int = 1024
    rx_depth: int = 500
    iters: int = 1000
    sl: int = 0
    events: bool = False
    gid_idx: int = 1
    chk: bool = False
    num_qp: int = 16
    timeout: float = 60.0  # seconds without a completion before giving up (the stock tools wait forever)
    pcap: str | None = None

    def __post_init__(self) -> None:
        if self.size is None:
            self.size = 1024 if self.kind == "ud" else 4096


@dataclass
class PingpongResult:
    bytes: int = 0
    seconds: float = 0.0
    iters: int = 0
    received: int = 0
    sent: int = 0
    bad_messages: int = 0
    invalid_pages: list[int] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)


def expected_message(opts: PingpongOptions, client_chk: bool) -> bytes:
    """What every message carries when the client fills its buffer as the stock client does."""
    assert opts.size is not None
    fill = 0 if opts.kind == "srq" else 0x7B
    buf = bytearray([fill]) * opts.size
    if client_chk:
        for i in range(0, opts.size, PAGE):
            buf[i] = 0
    return bytes(buf)


def run(opts: PingpongOptions, out: IO[str], listener: socket.socket | None = None) -> PingpongResult:
    """Run one pingpong; prints the stock program's lines to ``out``.  A server accepts on ``listener``
    (:func:`rdmalab.tools.oob.open_listener`) when given, else it opens one on ``opts.port``."""
    kind = opts.kind
    size = opts.size
    assert size is not None
    if kind not in KINDS:
        raise PingpongError(f"unknown pingpong kind {kind!r} (rc, uc, ud or srq)")
    if opts.ib_port != 1:
        raise PingpongError(f"the soft device has port 1 only, not {opts.ib_port}")
    if opts.gid_idx != 1:
        raise PingpongError(f"GID index {opts.gid_idx}: the soft device carries IPv4 only, which is GID index 1 "
                            "(::ffff:a.b.c.d, as rxe); use -g 1")
    try:
        check_mtu(opts.mtu, "-m (the path MTU)")
    except ValueError as exc:
        raise PingpongError(str(exc)) from None
    nqp = opts.num_qp if kind == "srq" else 1
    if kind == "srq":
        if nqp > opts.rx_depth:
            raise PingpongError(f"rx_depth {opts.rx_depth} is too small for {nqp} QPs -- must have at least one "
                                "receive per QP.")
        if nqp >= MAX_QP:
            raise PingpongError(f"num_qp {nqp} must be less than {MAX_QP - 1}")

    check_permission()
    # The out-of-band connection comes first: without -d, its local address picks the interface.
    chan: Channel
    if opts.server:
        chan = connect(opts.server, opts.port, tries=30.0)
    else:
        chan = listen(opts.port, listener=listener)
    fab = None
    try:
        ifname = opts.ifname or interface_of(chan.local_ip)
        fab = UdpFabric(ifname, name="rdmalab0", poll_wait=0.0, pcap=opts.pcap,
                        seed=random.SystemRandom().getrandbits(32))
        if kind == "ud" and size > fab.mtu:
            raise PingpongError(f"Requested size larger than port MTU ({fab.mtu})")
        ctx = Context(name="rdmalab0", fabric=fab)
        pd = PD(ctx)
        buflen = size + 40 if kind == "ud" else size
        access = e.IBV_ACCESS_LOCAL_WRITE
        mr = MR(pd, max(buflen, 1), access)
        fill = 0 if kind == "srq" else 0x7B
        mr.write(bytes([fill]) * buflen, buflen)
        cq = CQ(ctx, opts.rx_depth + nqp + 1)
        qp_type = {"rc": e.IBV_QPT_RC, "srq": e.IBV_QPT_RC, "uc": e.IBV_QPT_UC, "ud": e.IBV_QPT_UD}[kind]
        srq = SRQ(pd, SrqInitAttr(SrqAttr(max_wr=opts.rx_depth, max_sge=1))) if kind == "srq" else None
        qps = []
        for _ in range(nqp):
            cap = QPCap(max_send_wr=1, max_recv_wr=0 if srq else opts.rx_depth, max_send_sge=1, max_recv_sge=1)
            init = QPInitAttr(qp_type=qp_type, scq=cq, rcq=cq, srq=srq, cap=cap)
            attr = QPAttr(port_num=opts.ib_port)
            attr.qp_access_flags = 0
            attr.qkey = UD_QKEY
            qp = QP(pd, init)  # then INIT, as the programs do (pyverbs' QP(pd, init, attr) would go on to RTS for UD)
            qp.to_init(attr)
            qps.append(qp)
        by_qpn = {qp.qp_num: i for i, qp in enumerate(qps)}

        def post_recv(n: int) -> int:
            for _ in range(n):
                wr = RecvWR(wr_id=RECV_WRID, num_sge=1, sg=[SGE(mr.buf, buflen, mr.lkey)])
                (srq or qps[0]).post_recv(wr)
            return n

        routs = post_recv(opts.rx_depth)
        gid = int(ctx.query_gid(opts.ib_port, opts.gid_idx)).to_bytes(16, "big")
        rng = random.SystemRandom()
        mine = [PPDest(0, qp.qp_num, rng.getrandbits(24), gid) for qp in qps]
        sep = ":" if kind == "ud" else ","  # ud_pingpong.c prints "PSN 0x...: GID" in this one line
        for d in mine:
            out.write(f"  local address:  LID 0x{d.lid:04x}, QPN 0x{d.qpn:06x}, PSN 0x{d.psn:06x}{sep} "
                      f"GID {gid_text(d.gid)}\n")
        out.flush()

        def records(dests: list[PPDest]) -> bytes:
            count = MAX_QP if kind == "srq" else 1
            blank = PPDest(0, 0, 0, bytes(16))
            return b"".join((dests[i] if i < len(dests) else blank).encode() for i in range(count))

        nrec = MAX_QP if kind == "srq" else 1

        def read_records() -> list[PPDest]:
            raw = chan.recv(PP_RECORD * nrec, "its address record" + ("s" if nrec > 1 else ""))
            return [PPDest.decode(raw[i * PP_RECORD:(i + 1) * PP_RECORD]) for i in range(nqp)]

        def connect_qps(remote: list[PPDest]) -> list[Any]:
            ahs: list[Any] = []
            for qp, me, rem in zip(qps, mine, remote, strict=False):
                if not any(rem.gid):
                    raise PingpongError("the peer sent an all-zero GID (run the stock program with -g 1: "
                                        "RoCE needs a GID; without one its own modify_qp to RTR fails too)")
                gr = GlobalRoute(dgid=GID.from_int(int.from_bytes(rem.gid, "big")), sgid_index=opts.gid_idx,
                                 hop_limit=1)
                if kind == "ud":
                    a = QPAttr(port_num=opts.ib_port)
                    a.sq_psn, a.qkey = me.psn, UD_QKEY
                    qp.to_rts(a)
                    ahs.append(AH(pd, AHAttr(port_num=opts.ib_port, is_global=1, gr=gr, sl=opts.sl)))
                    continue
                a = QPAttr(port_num=opts.ib_port, path_mtu=e.bytes_to_mtu(opts.mtu))
                a.dest_qp_num, a.rq_psn, a.sq_psn = rem.qpn, rem.psn, me.psn
                a.ah_attr = AHAttr(port_num=opts.ib_port, is_global=1, gr=gr, sl=opts.sl)
                if kind != "uc":
                    a.max_dest_rd_atomic, a.min_rnr_timer = 1, 12
                    a.timeout, a.retry_cnt, a.rnr_retry, a.max_rd_atomic = 14, 7, 7, 1
                qp.to_rts(a)
                ahs.append(None)
            return ahs

        try:
            if opts.server:
                chan.send(records(mine))
                remote = read_records()
            else:
                remote = read_records()
        except OOBError as exc:
            raise PingpongError(f"Couldn't read remote address: {exc}") from None
        if opts.server:
            ahs = connect_qps(remote)
            chan.send(PP_DONE)
        else:
            ahs = connect_qps(remote)
            chan.send(records(mine))
            chan.recv_upto(len(PP_DONE) if kind != "srq" else PP_RECORD, timeout=30.0)
        chan.close()
        for d in remote:
            out.write(f"  remote address: LID 0x{d.lid:04x}, QPN 0x{d.qpn:06x}, PSN 0x{d.psn:06x}, "
                      f"GID {gid_text(d.gid)}\n")
        out.flush()

        send_off = 40 if kind == "ud" else 0
        if opts.server and opts.chk:
            page0 = bytes([0])
            for i in range(0, size, PAGE):
                mr.write(page0, 1, send_off + i)
        expect = expected_message(opts, client_chk=True) if opts.chk else None

        posted = 0

        def post_send(i: int) -> None:
            nonlocal posted
            wr = SendWR(wr_id=SEND_WRID, opcode=e.IBV_WR_SEND, num_sge=1,
                        sg=[SGE(mr.buf + send_off, size, mr.lkey)], send_flags=e.IBV_SEND_SIGNALED)
            if kind == "ud":
                wr.set_wr_ud(ahs[i], remote[i].qpn, UD_QKEY)
            qps[i].post_send(wr)
            posted += 1

        pending = [RECV_WRID] * nqp
        if opts.server:
            for i in range(nqp):
                post_send(i)
                pending[i] |= SEND_WRID
        res = PingpongResult(iters=opts.iters)
        start = time.monotonic()
        last_progress = start
        rcnt = scnt = 0
        while rcnt < opts.iters or scnt < opts.iters:
            n, wcs = cq.poll(max(2, nqp + 1))
            if n == 0:
                fab.step(0.05)
                if time.monotonic() - last_progress > opts.timeout:
                    unacked = posted - scnt
                    why = (f"is the peer still running, and can it reach {fab.ip} on UDP 4791?" if rcnt < opts.iters
                           else f"every receive is done, but {unacked} SEND{'s' * (unacked != 1)} never had an ACK: "
                           "the peer has probably exited after an ACK was lost (retry_cnt 7 resends for ever)")
                    raise PingpongError(f"no completion for {opts.timeout:.0f} s (received {rcnt}, sent {scnt} of "
                                        f"{opts.iters}): {why}")
                continue
            last_progress = time.monotonic()
            for wc in wcs:
                if wc.status != e.IBV_WC_SUCCESS:
                    raise PingpongError(f"Failed status {e.ibv_wc_status_str(wc.status)} ({wc.status}) "
                                        f"for wr_id {wc.wr_id}")
                qi = by_qpn.get(wc.qp_num, 0)
                if wc.wr_id == SEND_WRID:
                    scnt += 1
                elif wc.wr_id == RECV_WRID:
                    if expect is not None:
                        got = mr.read(size, send_off)
                        if got != expect:
                            res.bad_messages += 1
                    routs -= 1
                    if routs <= (nqp if kind == "srq" else 1):
                        routs += post_recv(opts.rx_depth - routs)
                    rcnt += 1
                else:
                    raise PingpongError(f"Completion for unknown wr_id {wc.wr_id}")
                pending[qi] &= ~wc.wr_id
                if scnt < opts.iters and not pending[qi]:
                    post_send(qi)
                    pending[qi] = RECV_WRID | SEND_WRID
        secs = time.monotonic() - start
        usec = secs * 1e6
        nbytes = size * opts.iters * 2
        res.bytes, res.seconds, res.received, res.sent = nbytes, secs, rcnt, scnt
        out.write(f"{nbytes} bytes in {usec / 1e6:.2f} seconds = {nbytes * 8.0 / usec:.2f} Mbit/sec\n")
        out.write(f"{opts.iters} iters in {usec / 1e6:.2f} seconds = {usec / opts.iters:.2f} usec/iter\n")
        if not opts.server and opts.chk:
            final = mr.read(size, send_off)
            for i in range(0, size, PAGE):
                if final[i] != 0:
                    res.invalid_pages.append(i // PAGE)
                    out.write(f"invalid data in page {i // PAGE}\n")
        if opts.chk:
            # Beyond the stock check (first byte of each page, at the end): every message, every byte.
            out.write(f"rdmalab: {rcnt} messages received, {res.bad_messages} differ from the client's "
                      f"buffer (every byte compared)\n")
        res.stats = dict(fab.stats)
        out.flush()
        return res
    finally:
        chan.close()
        if fab is not None:
            # Let the last ACKs go out (the peer's last SEND may still wait for one).
            fab.linger(0.2)
            fab.close()
