"""``rdmalab rping``: librdmacm's ``rping`` on the soft engine, connected through its own rdma_cm.

Each side can be the stock ``rping`` on kernel rxe (rdma-core ``librdmacm/examples/rping.c``, v44)
and the other this one.  What rping does, and so what this does:

* **Connection**: rdma_cm, port 7174 by default (RDMA_PS_TCP, service ID 0x1061C06), an RC QP of
  16 send and 2 receive WRs, ``responder_resources = initiator_depth = 1``, retry and RNR retry 7
  (``rping_init_conn_param``); each side posts its receive before connecting or accepting.
* **Each cycle** (``rping_test_client``/``rping_test_server``): the client fills its start buffer
  with ``"rdma-ping-<n>: "`` and then the letters ``A``..``z`` from a start letter that moves on by
  one each cycle, NUL-terminated, and SENDs a 16-byte ``{be64 addr, be32 rkey, be32 size}``
  describing it; the server RDMA READs it, SENDs "go ahead", gets the client's second
  descriptor (its rdma buffer), RDMA WRITEs ``strlen + 1`` bytes of what it read there and SENDs
  "go ahead" again.  A receive that is not exactly 16 bytes is refused ("Received bogus data").
* ``-V`` compares the start buffer with what came back; ``-v`` prints ``ping data: ...``
  (client) and ``server ping data: ...`` (server).  After ``-C`` cycles the client disconnects
  (DREQ); the server sees DISCONNECTED, disconnects (DREP) and ends.

Options: rping's ``-s -c -a -I -p -C -S -v -V -d -P -q``; ``-t`` (ToS) is refused by name.  ``-P``
serves one connection after another.  ``-q`` makes the QP outside the CMID and moves it through
INIT, RTR and RTS with the attributes ``init_qp_attr`` gives, then ``rdma_establish`` (client), as
``rping_self_modify_qp`` does.  The
device is the soft device with the server's address (``-s``), or the one that reaches it
(``-c``): a device linked to an interface (``rdmalab link add soft0 netdev veth1`` or
``RDMALAB_LINKS``), or ``--netdev IFNAME`` for one made for this run.
"""

from __future__ import annotations

import errno
import os
import struct
import time
from dataclasses import dataclass
from typing import IO

from rdmalab.verbs import enums as e
from rdmalab.verbs.cm_enums import RAI_PASSIVE, rdma_cm_event_type
from rdmalab.verbs.cmid import CMID, AddrInfo, CMEvent, CMEventChannel, ConnParam, unreachable_text
from rdmalab.verbs.cmstate import owner
from rdmalab.verbs.cq import CQ
from rdmalab.verbs.device import is_iwarp
from rdmalab.verbs.mr import MR
from rdmalab.verbs.pyverbs_error import PyverbsRDMAError
from rdmalab.verbs.qp import QP, QPCap, QPInitAttr
from rdmalab.verbs.wr import SGE, RecvWR, SendWR
from rdmalab.wire.cm import rej_reason_name

EV = rdma_cm_event_type
MSG_FMT = "rdma-ping-%d: "
BUFSIZE = 64 * 1024  # RPING_BUFSIZE
MIN_BUFSIZE = len("2147483647") + 1 + len(MSG_FMT) + 1  # sizeof(stringify(INT_MAX)) + sizeof(RPING_MSG_FMT)
INFO = struct.Struct(">QII")  # struct rping_rdma_info
SQ_DEPTH, RQ_DEPTH = 16, 2
RECV_WRID, SEND_WRID, RDMA_WRID = 1, 2, 3


class RpingError(Exception):
    """What rping would print before it exits non-zero (one sentence)."""


@dataclass
class RpingOptions:
    server: bool = False
    addr: str | None = None
    source: str | None = None
    port: int = 7174
    count: int = 0
    size: int = 64
    verbose: bool = False
    validate: bool = False
    debug: bool = False
    persistent: bool = False
    self_qp: bool = False
    timeout: float = 120.0  # seconds without progress before giving up (rping waits for ever)
    transport: str = "auto"  # "roce" or "iwarp": the device rdma_cm picks must have it (auto: whichever)

    def check(self) -> None:
        if not MIN_BUFSIZE <= self.size <= BUFSIZE - 1:
            raise RpingError(f"Invalid size {self.size} (valid range is {MIN_BUFSIZE} to {BUFSIZE})")
        if self.count < 0:
            raise RpingError(f"Invalid count {self.count}")
        if not self.server and not self.addr:
            raise RpingError("the client needs the server's address (-a addr)")
        if self.transport not in ("auto", "roce", "iwarp"):
            raise RpingError(f"transport {self.transport!r}: auto, roce or iwarp")


def check_transport(cmid: CMID, want: str, what: str) -> None:
    """Refuse a device of the other transport than ``want`` ("auto": either), naming it."""
    dev = cmid.device
    if want == "auto" or dev is None:
        return
    have = "iwarp" if is_iwarp(dev) else "roce"
    if have != want:
        raise RpingError(f"{what}: the device rdma_cm chose, {dev.name} ({have}), is not {want} "
                         f"(make one with --netdev IFNAME --transport {want}, or link one)")


def ping_text(ping: int, start: int, size: int) -> bytes:
    """The client's start buffer for cycle ``ping``: the message, then letters from ``start``, NUL last."""
    head = (MSG_FMT % ping).encode()[:size]
    buf = bytearray(head)
    c = start
    while len(buf) < size:
        buf.append(c)
        c = 65 if c + 1 > 122 else c + 1
    buf[size - 1] = 0
    return bytes(buf)


class Side:
    """One rping connection: its CMID, QP, CQ and the four buffers rping registers.  Public so that
    a program driving both ends itself (``rdmalab.lab.owncaptures``) runs the same cycle."""

    def __init__(self, cmid: CMID, opts: RpingOptions, out: IO[str]) -> None:
        self.cmid, self.opts, self.out = cmid, opts, out
        assert cmid.ctx is not None
        self.cq = CQ(cmid.ctx, SQ_DEPTH * 2)
        init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq,
                          cap=QPCap(max_send_wr=SQ_DEPTH, max_recv_wr=RQ_DEPTH))
        pd = cmid.pd
        if opts.self_qp:  # -q: the program's own QP (ibv_create_qp), moved by rping_self_modify_qp
            self.qp = QP(pd, init)
            self.modify(e.IBV_QPS_INIT)
        else:
            cmid.create_qp(init)
            assert cmid.qp is not None
            self.qp = cmid.qp
        self.recv_mr = MR(pd, INFO.size, e.IBV_ACCESS_LOCAL_WRITE)
        self.send_mr = MR(pd, INFO.size, 0)
        rw = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_WRITE
        self.rdma_mr = MR(pd, opts.size, rw)
        self.start_mr = MR(pd, opts.size, rw) if not opts.server else None
        self.channel = cmid._channel
        self.disconnected = False

    def modify(self, state: int) -> None:
        attr, mask = self.cmid.init_qp_attr(state)
        self.qp.modify(attr, mask)

    def param(self) -> ConnParam:
        """rping_init_conn_param: 1/1, retry 7/7, and the QP number when the CMID has no QP (-q)."""
        return ConnParam(resources=1, depth=1, retry=7, rnr_retry=7, qp_num=self.qp.qp_num if self.opts.self_qp else 0)

    def debug(self, text: str) -> None:
        if self.opts.debug:
            self.out.write(text + "\n")

    def post_recv(self) -> None:
        self.qp.post_recv(RecvWR(wr_id=RECV_WRID, num_sge=1,
                                      sg=[SGE(self.recv_mr.buf, INFO.size, self.recv_mr.lkey)]))

    def send_info(self, mr: MR | None) -> None:
        """rping_format_send + post: the 16-byte descriptor of ``mr`` (None: the "go ahead", contents as they are)."""
        if mr is not None:
            self.send_mr.write(INFO.pack(mr.buf, mr.rkey, self.opts.size), INFO.size)
            self.debug(f"RDMA addr {mr.buf:x} rkey {mr.rkey:x} len {self.opts.size}")
        self.qp.post_send(SendWR(wr_id=SEND_WRID, opcode=e.IBV_WR_SEND, num_sge=1,
                                      sg=[SGE(self.send_mr.buf, INFO.size, self.send_mr.lkey)],
                                      send_flags=e.IBV_SEND_SIGNALED))

    def rdma(self, opcode: int, length: int, remote_addr: int, rkey: int) -> None:
        wr = SendWR(wr_id=RDMA_WRID, opcode=opcode, num_sge=1, sg=[SGE(self.rdma_mr.buf, length, self.rdma_mr.lkey)],
                    send_flags=e.IBV_SEND_SIGNALED)
        wr.set_wr_rdma(rkey, remote_addr)
        self.qp.post_send(wr)

    def wait(self, what: str, want: int) -> tuple[int, int, int] | None:
        """Wait for the completion ``want`` (RECV_WRID or RDMA_WRID), taking SEND completions on the way.
        Returns the peer's descriptor for a receive; None if the connection went away meanwhile."""
        dev = self.cmid.device
        assert dev is not None and self.channel is not None
        deadline = time.monotonic() + self.opts.timeout
        while True:
            while len(self.cq):
                _, wcs = self.cq.poll(1)
                wc = wcs[0]
                if wc.status != e.IBV_WC_SUCCESS:
                    if self.disconnected or wc.status == e.IBV_WC_WR_FLUSH_ERR:
                        self.debug(f"cq completion failed status {wc.status}")
                        return None
                    raise RpingError(f"cq completion failed status {wc.status} ({e.ibv_wc_status_str(wc.status)}) "
                                     f"while waiting for {what}")
                if wc.wr_id == RECV_WRID:
                    if wc.byte_len != INFO.size:
                        raise RpingError(f"Received bogus data, size {wc.byte_len}")
                    info = INFO.unpack(bytes(self.recv_mr.read(INFO.size, 0)))
                    self.post_recv()
                    if want == RECV_WRID:
                        return info
                elif wc.wr_id == RDMA_WRID and want == RDMA_WRID:
                    return (0, 0, 0)
            for ev in list(self.channel.queue):
                if ev.kind == EV.RDMA_CM_EVENT_DISCONNECTED and owner(ev.cmid) is owner(self.cmid):
                    self.channel.queue.remove(ev)
                    self.disconnected = True
                    return None
            if time.monotonic() > deadline:
                raise RpingError(f"no progress for {self.opts.timeout:.0f} s while waiting for {what}")
            dev.scheduler.progress(lambda: len(self.cq) > 0 or bool(self.channel and self.channel.queue))


def expect_event(ch: CMEventChannel, kind: int, what: str, where: str) -> CMEvent:
    """The next event on ``ch`` if it is ``kind``; else :class:`RpingError` saying what came instead
    (``what`` names the call waited for, ``where`` the peer), as rping prints it."""
    try:
        ev = CMEvent(ch)
    except PyverbsRDMAError as exc:
        raise RpingError(f"{what}: {exc}") from None
    if ev.event_type == kind:
        return ev
    if ev.event_type == EV.RDMA_CM_EVENT_REJECTED:
        raise RpingError(f"{what}: rejected by {where}: {_reason(ev.status)}")
    if ev.event_type == EV.RDMA_CM_EVENT_UNREACHABLE:
        i = ev._ev.info if ev._ev is not None else {}
        raise RpingError(f"{what}: {where} is unreachable: {unreachable_text(i)}")
    raise RpingError(f"{what}: got {ev.event_str()} (status {ev.status}) instead of {EV(kind).name}")


def run_client(opts: RpingOptions, out: IO[str]) -> int:
    opts.check()
    ch = CMEventChannel()
    cmid = CMID(ch)
    where = f"{opts.addr}:{opts.port}"
    try:
        cmid.resolve_addr(AddrInfo(src=opts.source, dst=opts.addr, dst_service=opts.port))
    except PyverbsRDMAError as exc:
        raise RpingError(f"rdma_resolve_addr: {exc}") from None
    expect_event(ch, EV.RDMA_CM_EVENT_ADDR_RESOLVED, "rdma_resolve_addr", where)
    check_transport(cmid, opts.transport, f"rdma_resolve_addr {where}")
    cmid.resolve_route()
    expect_event(ch, EV.RDMA_CM_EVENT_ROUTE_RESOLVED, "rdma_resolve_route", where)
    side = Side(cmid, opts, out)
    side.post_recv()
    cmid.connect(side.param())
    if opts.self_qp:
        expect_event(ch, EV.RDMA_CM_EVENT_CONNECT_RESPONSE, "connect error", where)
        side.modify(e.IBV_QPS_RTR)
        side.modify(e.IBV_QPS_RTS)
        cmid.establish()  # no ESTABLISHED event follows on this side
    else:
        expect_event(ch, EV.RDMA_CM_EVENT_ESTABLISHED, "connect error", where)
    side.debug("rdma_connect successful")
    start = 65
    ping = 0
    assert side.start_mr is not None
    while not opts.count or ping < opts.count:
        text = ping_text(ping, start, opts.size)
        start = 65 if start + 1 > 122 else start + 1
        side.start_mr.write(text, opts.size)
        side.send_info(side.start_mr)
        if side.wait("the server's go-ahead after its RDMA READ", RECV_WRID) is None:
            break
        side.send_info(side.rdma_mr)
        if side.wait("the server's go-ahead after its RDMA WRITE", RECV_WRID) is None:
            break
        got = bytes(side.rdma_mr.read(opts.size, 0))
        if opts.validate and got != text:
            raise RpingError(f"data mismatch! cycle {ping}: sent {text[:40]!r}..., got back {got[:40]!r}...")
        if opts.verbose:
            out.write(f"ping data: {_text(got)}\n")
            out.flush()
        ping += 1
    if not side.disconnected:
        if opts.self_qp:
            side.qp.to_error()
        cmid.disconnect()
        try:
            expect_event(ch, EV.RDMA_CM_EVENT_DISCONNECTED, "rdma_disconnect", where)
        except RpingError as exc:
            side.debug(str(exc))
    return 0


def _serve(lid: CMID, ch: CMEventChannel, opts: RpingOptions, out: IO[str]) -> None:
    ev = expect_event(ch, EV.RDMA_CM_EVENT_CONNECT_REQUEST, "wait for CONNECT_REQUEST", f"{opts.addr}:{opts.port}")
    cmid = CMID(ev, listen_id=lid)
    side = Side(cmid, opts, out)
    side.post_recv()
    if opts.self_qp:
        side.modify(e.IBV_QPS_RTR)
        side.modify(e.IBV_QPS_RTS)
    cmid.accept(side.param())
    expect_event(ch, EV.RDMA_CM_EVENT_ESTABLISHED, "accept", f"{cmid.dst_addr}:{cmid.dst_port}")
    side.debug("accepted")
    try:
        _serve_cycles(side, opts, out)
    finally:  # also on an error: the client must not wait for ever (the kernel would send a DREQ for a dead process)
        if opts.self_qp and side.qp.qp_state != e.IBV_QPS_ERR:
            side.qp.to_error()
        cmid.disconnect()


def _serve_cycles(side: Side, opts: RpingOptions, out: IO[str]) -> None:
    while True:
        info = side.wait("the client's source descriptor", RECV_WRID)
        if info is None:
            break
        addr, rkey, size = info
        side.debug("server received sink adv")
        if size > opts.size:
            raise RpingError(f"the client's buffer ({size} bytes) is larger than this server's -S {opts.size}")
        side.rdma(e.IBV_WR_RDMA_READ, size, addr, rkey)
        if side.wait("the RDMA READ", RDMA_WRID) is None:
            break
        data = bytes(side.rdma_mr.read(opts.size, 0))
        if opts.verbose:
            out.write(f"server ping data: {_text(data)}\n")
            out.flush()
        side.send_info(None)
        info = side.wait("the client's sink descriptor", RECV_WRID)
        if info is None:
            break
        addr, rkey, size = info
        length = data.find(b"\0") + 1 if b"\0" in data else opts.size
        side.rdma(e.IBV_WR_RDMA_WRITE, length, addr, rkey)
        if side.wait("the RDMA WRITE", RDMA_WRID) is None:
            break
        side.send_info(None)


def run_server(opts: RpingOptions, out: IO[str]) -> int:
    opts.check()
    ch = CMEventChannel()
    lid = CMID(ch)
    try:
        lid.bind_addr(AddrInfo(src=opts.addr or "0.0.0.0", src_service=opts.port, flags=RAI_PASSIVE))
        check_transport(lid, opts.transport, f"rdma_bind_addr {opts.addr or '0.0.0.0'}:{opts.port}")
        lid.listen(3)
    except PyverbsRDMAError as exc:
        raise RpingError(f"rdma_bind_addr/rdma_listen: {exc}") from None
    while True:
        _serve(lid, ch, opts, out)
        if not opts.persistent:
            break
    lid.close()
    return 0


def run(opts: RpingOptions, out: IO[str]) -> int:
    return run_server(opts, out) if opts.server else run_client(opts, out)


def _reason(status: int) -> str:
    """A REJECTED event's status in words: a CM REJ reason (RoCE), or an errno (iWARP: -ECONNREFUSED for
    a refused TCP connection or an MPA Reply with R, as cma_iw_handler reports them)."""
    if status < 0:
        return f"{errno.errorcode.get(-status, str(-status))} ({os.strerror(-status)})"
    return f"reason {status} ({rej_reason_name(status)})"


def _text(buf: bytes) -> str:
    """A C string as printf's %s shows it: up to the first NUL."""
    return buf.split(b"\0", 1)[0].decode(errors="replace")
