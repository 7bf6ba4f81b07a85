"""The switched fabric's flows: RC QP pairs of the verbs engine writing across the fabric.

A **flow** (:class:`Flow`, made by :meth:`rdmalab.fabric.switched.SwitchedFabric.add_flow`) is an
RC QP pair of the engine, created through the pyverbs-shaped API (``Context``, ``PD``, ``MR``,
``QP``), whose sender posts RDMA WRITEs of ``msg_packets`` packets: the engine's requester
assigns the PSNs, sets AckReq, keeps its window of 128 PSNs, the responder ACKs and NAKs, the
completer completes and goes back N on a NAK or a timeout, so a packet a switch drops is resent
and the resend is on the wire.  With DCQCN each sending QP has the engine's reaction point
(:func:`rdmalab.verbs.engine.dcqcn.attach`, pacing its packets at the current rate); the hosts'
notification points are the fabric's (:func:`rdmalab.verbs.engine.cnp.enable_np`).

The fabric counts what the flow's packets meet on the way (``rcvd``, ``marked``, ``drops``, ...);
the flow itself keeps its WRITEs posted (:class:`_Completions` hands each send completion back to
it) and checks, for a bounded flow, that the receiver's memory holds what was written.
"""

from __future__ import annotations

import random
from typing import Any

from rdmalab.fabric.switched_topology import FabricRef, Host, Port
from rdmalab.verbs import enums as e
from rdmalab.verbs.addr import AHAttr, GlobalRoute
from rdmalab.verbs.cq import CQ, WC
from rdmalab.verbs.device import Context
from rdmalab.verbs.engine import dcqcn as dcqcn_rp
from rdmalab.verbs.engine.dcqcn import DcqcnParams, RateLimiter
from rdmalab.verbs.mr import MR
from rdmalab.verbs.pd import PD
from rdmalab.verbs.qp import QP, QPAttr, QPCap, QPInitAttr
from rdmalab.verbs.wr import SGE, SendWR

__all__ = ["Flow"]

_FLOW_ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE


class _Completions(CQ):
    """The send CQ of a flow's QP: each completion goes straight to the flow (which posts the next WRITE)."""

    def __init__(self, ctx: Context, flow: Flow) -> None:
        super().__init__(ctx, 1 << 20)
        self._flow = flow

    def push(self, wc: WC, solicited: bool = False) -> bool:
        self._flow._completed(wc)
        return True


class Flow:
    """One RC QP pair of the engine moving RDMA WRITEs from ``src`` to ``dst``.

    The sender keeps ``depth`` WRITEs of ``msg_bytes`` posted (``size`` bytes in all, or until
    ``stop``; ``start`` and ``stop`` are times on the fabric's clock, in integer ns); each completion
    posts the next.  ``qp``/``peer_qp`` are the pyverbs-shaped QPs,
    ``limiter`` the sender's DCQCN reaction point (None without DCQCN).  Counted by the fabric:
    ``rcvd`` payload bytes the responder accepted in sequence (duplicates and packets after a
    gap do not count), ``sent`` new payload bytes and ``retx_bytes``/``retx_pkts`` resent ones,
    ``marked`` CE-marked arrivals, ``cnps`` CNPs back at the sender, ``drops`` packets of the
    flow (either direction) that a switch dropped, ``data_drops`` the requests among them.
    """

    def __init__(self, fab: FabricRef, fid: int, src: Host, dst: Host, size: int | None, start: int,
                 stop: int | None, msg_bytes: int, dcqcn: DcqcnParams | None, name: str, depth: int = 3,
                 timeout: int = 10) -> None:
        self.fabric = fab
        self.id = fid
        self.name = name
        self.src = src
        self.dst = dst
        self.size = size
        self.start = start
        self.stop = stop
        self.msg_bytes = msg_bytes
        self.depth = depth
        self.sent = self.rcvd = self.pkts_rcvd = 0
        self.retx_bytes = self.retx_pkts = 0
        self.sent_psn = 0  # the next PSN never sent before (the QPs start at PSN 0)
        self.marked = self.cnps = self.drops = self.data_drops = 0
        self.posted = self.completed = self.errors = 0
        self.started = self.stopped = self.done = False
        self.finish_ns: int | None = None  # when the last WRITE of a bounded flow completed (ns)
        self.fwd: dict[int, Port] = {}
        self.rev: dict[int, Port] = {}
        # the QPs, through the pyverbs-shaped API, as a program would build them
        mr_len = size if size is not None else msg_bytes
        self._a = Context(name=src.name, fabric=fab)
        self._b = Context(name=dst.name, fabric=fab)
        pd_a, pd_b = PD(self._a), PD(self._b)
        self.cq = _Completions(self._a, self)
        self.peer_cq = CQ(self._b, 16)
        self.mr = MR(pd_a, mr_len, _FLOW_ACCESS)
        self.peer_mr = MR(pd_b, mr_len, _FLOW_ACCESS)
        if size is not None:  # a bounded flow writes distinct bytes, so that the receiver's copy can be checked
            self.mr.write(random.Random(fab.seed * 7919 + fid).randbytes(mr_len), mr_len)
        cap = QPCap(max_send_wr=max(depth, 1), max_recv_wr=1, max_send_sge=1, max_recv_sge=1)
        self.qp = QP(pd_a, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap),
                     _attr(e.IBV_QPS_INIT))
        self.peer_qp = QP(pd_b, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.peer_cq, rcq=self.peer_cq, cap=cap),
                          _attr(e.IBV_QPS_INIT))
        self.qpn_src = self.qp.qp_num
        self.qpn_dst = self.peer_qp.qp_num
        mtu = e.bytes_to_mtu(fab.payload)
        for qp, peer, peer_qp in ((self.qp, dst, self.peer_qp), (self.peer_qp, src, self.qp)):
            a = QPAttr(port_num=1, path_mtu=mtu)
            a.qp_access_flags = e.IBV_ACCESS_REMOTE_WRITE
            a.max_dest_rd_atomic = a.max_rd_atomic = 1
            a.min_rnr_timer, a.timeout, a.retry_cnt, a.rnr_retry = 12, timeout, 7, 7
            a.ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=_gid(peer), sgid_index=1))
            a.dest_qp_num, a.rq_psn, a.sq_psn = peer_qp.qp_num, 0, 0
            qp.to_rts(a)
        self.engine = self.qp.engine
        self.peer_engine = self.peer_qp.engine
        self.limiter: RateLimiter | None = None
        if dcqcn is not None:
            self.limiter = dcqcn_rp.attach(self.qp, dcqcn, line_gbps=src.ports[0].rate)
        self._line = src.ports[0].rate

    @property
    def rate(self) -> float:
        """What the requester paces at (Gb/s): the DCQCN rate, or the line rate without DCQCN."""
        return self.limiter.rate if self.limiter is not None else self._line

    @property
    def active(self) -> bool:
        return self.started and not self.stopped and not self.done

    # ------------------------------------------------------------------ the application
    def _begin(self, _: Any = None) -> None:
        self.started = True
        for _i in range(self.depth):
            if not self._post():
                break

    def _post(self) -> bool:
        if self.stopped or self.done:
            return False
        off = 0
        n = self.msg_bytes
        if self.size is not None:
            off = self.posted * self.msg_bytes
            if off >= self.size:
                return False
            n = min(n, self.size - off)
        wr = SendWR(wr_id=self.posted, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                    sg=[SGE(self.mr.buf + off, n, self.mr.lkey)], send_flags=e.IBV_SEND_SIGNALED)
        wr.set_wr_rdma(self.peer_mr.rkey, self.peer_mr.buf + off)
        self.posted += 1
        self.qp.post_send(wr)
        return True

    def _halt(self, _: Any = None) -> None:
        """``stop``: post nothing more and drain the send queue (SQD: the WRITEs under way finish)."""
        self.stopped = True
        if self.engine.qp_state == e.IBV_QPS_RTS:
            self.qp.modify(QPAttr(qp_state=e.IBV_QPS_SQD), e.IBV_QP_STATE)

    def _completed(self, wc: WC) -> None:
        if wc.status != e.IBV_WC_SUCCESS:
            self.errors += 1
            self.done = True
            return
        self.completed += 1
        if self.size is not None and self.completed * self.msg_bytes >= self.size:
            self.done = True
            self.finish_ns = self.fabric.now
            return
        self._post()

    def intact(self) -> bool:
        """A finished bounded flow: does the receiver's memory hold exactly what the sender wrote?"""
        if self.size is None:
            raise ValueError(f"flow {self.name} has no size: its WRITEs overwrite one buffer")
        return self.done and not self.errors and self.peer_mr.read(self.size, 0) == self.mr.read(self.size, 0)

    def __repr__(self) -> str:
        return f"Flow({self.name}, QP {self.qpn_src:#x} -> {self.qpn_dst:#x})"


def _attr(state: int) -> QPAttr:
    a = QPAttr(qp_state=state, port_num=1)
    a.qp_access_flags = e.IBV_ACCESS_REMOTE_WRITE
    return a


def _gid(host: Host) -> Any:
    return Context(name=host.name, fabric=host.fabric).query_gid(1, 1)
