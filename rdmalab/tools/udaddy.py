"""``rdmalab udaddy``: librdmacm's ``udaddy`` on the soft engine: SIDR, then UD SENDs with immediate.

Either side can be the stock ``udaddy`` on kernel rxe (rdma-core ``librdmacm/examples/udaddy.c``,
v44).  What it does, and so what this does:

* port 7174 in RDMA_PS_UDP (service ID 0x1111C06); the client's ``rdma_connect`` is a SIDR_REQ,
  the server's ``rdma_accept`` the SIDR_REP with its QPN and Q_Key 0x01234567
  (``RDMA_UDP_QKEY``); the client's ESTABLISHED event carries them and the address handle;
* a UD QP on each side with ``message_count`` receives of ``message_size + 40`` bytes (the GRH)
  posted before connecting / accepting; the client checks ``message_size`` against the port MTU;
* the client sends ``message_count`` SEND-with-immediate, unsignalled, the immediate holding its
  own QPN (big-endian); the server takes the reply QPN from the first receive's immediate and
  builds the reply address handle from its GRH (``ibv_create_ah_from_wc``), then sends as many
  back, signalled; both poll for ``message_count`` completions.

udaddy does not check the bytes (its buffers are left as malloc gave them); this one fills them
with a pattern and, with ``--check``, compares what arrives.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from typing import IO

from rdmalab.verbs import enums as e
from rdmalab.verbs.addr import AH
from rdmalab.verbs.cm_enums import RAI_PASSIVE, RDMA_PS_UDP, rdma_cm_event_type
from rdmalab.verbs.cmid import CMID, AddrInfo, CMEvent, CMEventChannel, ConnParam, UDParam, event_str
from rdmalab.verbs.cmstate import CMEventError, wait_event
from rdmalab.verbs.cq import CQ
from rdmalab.verbs.engine.ibcm import RDMA_UDP_QKEY
from rdmalab.verbs.mr import MR
from rdmalab.verbs.pyverbs_error import PyverbsRDMAError
from rdmalab.verbs.qp import QPCap, QPInitAttr
from rdmalab.verbs.wr import SGE, RecvWR, SendWR

EV = rdma_cm_event_type
GRH = 40
QKEY = RDMA_UDP_QKEY


class UdaddyError(Exception):
    """What udaddy would print before failing (one sentence)."""


@dataclass
class UdaddyOptions:
    server_addr: str | None = None  # -s: the client connects to it; absent: run the server
    bind_addr: str | None = None  # -b
    port: int = 7174
    count: int = 10  # -C
    size: int = 100  # -S
    check: bool = False
    timeout: float = 60.0


def _pattern(size: int, who: int) -> bytes:
    return bytes((i * 7 + who) & 0xFF for i in range(size))


class _Node:
    def __init__(self, cmid: CMID, opts: UdaddyOptions, out: IO[str]) -> None:
        self.cmid, self.opts, self.out = cmid, opts, out
        dev = cmid.device
        assert dev is not None and cmid.ctx is not None
        if opts.count and opts.size > dev.active_mtu:
            raise UdaddyError(f"message_size {opts.size} is larger than active mtu {dev.active_mtu}")
        self.cq = CQ(cmid.ctx, opts.count * 2 if opts.count else 2)
        cap = QPCap(max_send_wr=opts.count or 1, max_recv_wr=opts.count or 1)
        cmid.create_qp(QPInitAttr(qp_type=e.IBV_QPT_UD, scq=self.cq, rcq=self.cq, cap=cap, sq_sig_all=0))
        assert cmid.qp is not None
        self.qp = cmid.qp
        self.mr = MR(cmid.pd, opts.size + GRH, e.IBV_ACCESS_LOCAL_WRITE)
        self.ah: AH | None = None
        self.remote_qpn = 0
        self.received: list[bytes] = []

    def post_recvs(self) -> None:
        for _ in range(self.opts.count):
            self.qp.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[SGE(self.mr.buf, self.opts.size + GRH, self.mr.lkey)]))

    def post_sends(self, signaled: bool, who: int) -> None:
        assert self.ah is not None
        self.mr.write(_pattern(self.opts.size, who), self.opts.size)
        for _ in range(self.opts.count):
            wr = SendWR(wr_id=2, opcode=e.IBV_WR_SEND_WITH_IMM, num_sge=1,
                        sg=[SGE(self.mr.buf, self.opts.size, self.mr.lkey)],
                        send_flags=e.IBV_SEND_SIGNALED if signaled else 0)
            wr.imm_data = socket.htonl(self.qp.qp_num)  # be32 in memory, as udaddy's htobe32
            wr.set_wr_ud(self.ah, self.remote_qpn, QKEY)
            self.qp.post_send(wr)

    def poll(self, what: str) -> None:
        """udaddy's poll_cqs: ``message_count`` completions; the first receive gives the reply address."""
        done = 0
        deadline = time.monotonic() + self.opts.timeout
        while done < self.opts.count:
            n, wcs = self.cq.poll(8)
            for wc in wcs:
                if wc.status != e.IBV_WC_SUCCESS:
                    raise UdaddyError(f"{what}: completion with status {wc.status} ({e.ibv_wc_status_str(wc.status)})")
                if wc.opcode == e.IBV_WC_RECV:
                    self.received.append(bytes(self.mr.read(self.opts.size, GRH)))
                    if self.ah is None:
                        self.ah = AH(self.cmid.pd, wc=wc, port_num=1, grh=self.mr.buf)
                        self.remote_qpn = socket.ntohl(wc.imm_data)
            done += n
            if not n and time.monotonic() > deadline:
                raise UdaddyError(f"{what}: {done} of {self.opts.count} completions in {self.opts.timeout:.0f} s")


def _event(ch: CMEventChannel, want: int, what: str) -> CMEvent:
    try:
        ev = wait_event(ch, None, want, what)
    except CMEventError as exc:
        raise UdaddyError(f"event: {event_str(exc.event.kind)}, error: {exc.event.status}") from None
    except PyverbsRDMAError as exc:  # its message names what it waited for
        raise UdaddyError(str(exc)) from None
    return CMEvent.of(ev)


def run_server(opts: UdaddyOptions, out: IO[str]) -> int:
    out.write("udaddy: starting server\n")
    ch = CMEventChannel()
    lid = CMID(ch, port_space=RDMA_PS_UDP)
    try:
        lid.bind_addr(AddrInfo(src=opts.bind_addr or "0.0.0.0", src_service=opts.port, flags=RAI_PASSIVE,
                               port_space=RDMA_PS_UDP))
        lid.listen(0)
    except PyverbsRDMAError as exc:
        raise UdaddyError(f"bind address failed: {exc}") from None
    ev = _event(ch, EV.RDMA_CM_EVENT_CONNECT_REQUEST, "a connection request")
    cmid = CMID(ev, listen_id=lid)
    node = _Node(cmid, opts, out)
    node.post_recvs()
    cmid.accept(ConnParam(qp_num=node.qp.qp_num))
    if opts.count:
        out.write("receiving data transfers\n")
        node.poll("receiving")
        out.write("sending replies\n")
        node.post_sends(True, 2)
        node.poll("sending")
        out.write("data transfers complete\n")
    return _finish(node, opts, out, 1)


def run_client(opts: UdaddyOptions, out: IO[str]) -> int:
    out.write("udaddy: starting client\n")
    ch = CMEventChannel()
    cmid = CMID(ch, port_space=RDMA_PS_UDP)
    out.write("udaddy: connecting\n")
    assert opts.server_addr is not None
    try:
        cmid.resolve_addr(AddrInfo(src=opts.bind_addr, dst=opts.server_addr, dst_service=opts.port,
                                   port_space=RDMA_PS_UDP))
    except PyverbsRDMAError as exc:
        raise UdaddyError(f"failure getting addr: {exc}") from None
    _event(ch, EV.RDMA_CM_EVENT_ADDR_RESOLVED, "the address resolution")
    cmid.resolve_route()
    _event(ch, EV.RDMA_CM_EVENT_ROUTE_RESOLVED, "the route resolution")
    node = _Node(cmid, opts, out)
    node.post_recvs()
    cmid.connect(ConnParam())
    ev = _event(ch, EV.RDMA_CM_EVENT_ESTABLISHED, "the SIDR reply")
    ud = UDParam(ev)
    node.remote_qpn = ud.qp_num
    node.ah = AH(cmid.pd, attr=ud.ah_attr)
    if ud.qkey != QKEY:
        raise UdaddyError(f"the SIDR_REP's Q_Key is {ud.qkey:#x}, not RDMA_UDP_QKEY {QKEY:#x}")
    if opts.count:
        out.write("initiating data transfers\n")
        node.post_sends(False, 1)
        out.write("receiving data transfers\n")
        node.poll("receiving")
        out.write("data transfers complete\n")
    return _finish(node, opts, out, 2)


def _finish(node: _Node, opts: UdaddyOptions, out: IO[str], peer: int) -> int:
    rc = 0
    if opts.check:
        want = _pattern(opts.size, peer)
        bad = sum(1 for m in node.received if m != want)
        out.write(f"rdmalab: {len(node.received)} messages received, {bad} differ from the sender's pattern\n")
        rc = 1 if bad or len(node.received) != opts.count else 0
    out.write("test complete\n")
    out.write(f"return status {rc}\n")
    return rc


def run(opts: UdaddyOptions, out: IO[str]) -> int:
    return run_client(opts, out) if opts.server_addr else run_server(opts, out)
