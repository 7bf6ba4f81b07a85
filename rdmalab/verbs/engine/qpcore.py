"""The engine's queue pair: its protocol state, split as rxe splits it, and what every part needs.

rxe keeps a QP's transport state in three parts (``rxe_verbs.h``: ``struct rxe_req_info``,
``rxe_resp_info``, ``rxe_comp_info``), each owned by one task.  So does the engine:

``RequesterState``  (``qp->req``)  next PSN, next WQE to (re)send, packets since the last AckReq,
                    READ/atomic credits in use, waiting out an RNR timer
``CompleterState``  (``qp->comp``) oldest unacknowledged PSN, retry and RNR retry budgets, the
                    retransmit timer (``qp->retrans_timer``)
``ResponderState``  (``qp->resp``) expected PSN, MSN, the message in progress (receive WQE,
                    WRITE target and offsets), the PSN-NAK and UC-drop flags, the responder
                    resources that duplicate READs and atomics are replayed from, the ACK
                    held back for coalescing

:class:`QPCore` owns the three parts, the send and receive queues, the path (GIDs, MAC, UDP
source port, MTU) and the attributes the protocol reads; it completes WQEs onto CQs and takes
the QP to the error state.  The protocol itself lives in ``requester``, ``responder`` and
``completer``, which import this module (and ``completer`` imports ``requester``, to resend);
:class:`rdmalab.verbs.engine.softqp.SoftQP` ties them together.  Nothing here imports them,
so there is no import loop.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

from rdmalab.verbs import enums as e
from rdmalab.verbs.engine.completion import WC
from rdmalab.verbs.engine.node import SoftDevice
from rdmalab.verbs.engine.packet import PSN_MASK
from rdmalab.verbs.engine.wqe import WC_OPCODE, RecvWQE, Resource, SendWQE
from rdmalab.wire.ib import timeout_ns, udp_sport

#: timeout code -> the local ACK timer's period in ns (arm_timer reads it per ACK: a table, not a call)
_TIMEOUT_NS: tuple[int, ...] = tuple(timeout_ns(code) for code in range(32))


class CompletionQueue(Protocol):
    """Where completions go (``rdmalab.verbs.cq.CQ``): False when full (an overflow)."""

    def push(self, wc: WC, solicited: bool = False) -> bool: ...


class SharedRQ(Protocol):
    """A shared receive queue (``rdmalab.verbs.srq.SRQ``): the next receive WQE, if any."""

    def take(self) -> RecvWQE | None: ...


@dataclass(slots=True, eq=False)
class RequesterState:
    """rxe ``qp->req``."""

    psn: int = 0  # the next PSN to assign
    wqe_index: int = 0  # the next send WQE to (re)send
    noack_pkts: int = 0  # packets sent since the last AckReq (RXE_MAX_PKT_PER_ACK)
    rd_out: int = 0  # READ/atomic credits in use (max_rd_atomic)
    rnr_wait: bool = False  # waiting for an RNR timer before going back


@dataclass(slots=True, eq=False)
class CompleterState:
    """rxe ``qp->comp`` and the retransmit timer."""

    psn: int = 0  # the oldest unacknowledged PSN
    retry_left: int = 0
    rnr_left: int = 0
    timer_armed: bool = False
    timer_deadline: int = 0
    timer_pending: bool = False  # a carrier timer is scheduled


@dataclass(slots=True, eq=False)
class ResponderState:
    """rxe ``qp->resp``."""

    psn: int = 0  # the expected PSN
    msn: int = 0
    op: Any = None  # OpcodeInfo of the message in progress (FIRST/MIDDLE seen)
    wqe: RecvWQE | None = None  # the receive WQE of the SEND in progress
    off: int = 0  # bytes of that SEND placed so far
    write: memoryview | None = None  # the WRITE in progress: target, offset, length
    write_off: int = 0
    write_len: int = 0
    sent_psn_nak: bool = False  # one PSN-sequence NAK per gap
    uc_drop: bool = False  # UC: dropping until the next FIRST/ONLY
    resources: list[Resource | None] = field(default_factory=list)  # max_dest_rd_atomic of them
    res_head: int = 0
    pending_ack: int | None = None  # the PSN of the ACK held back for coalescing
    atomics_executed: int = 0


class QPCore:
    """One QP of the engine: path, attributes, queues, and the requester/completer/responder state."""

    def __init__(self, dev: SoftDevice, pd: Any, qp_type: int, scq: CompletionQueue, rcq: CompletionQueue,
                 srq: SharedRQ | None, sq_sig_all: bool, owner: Any = None) -> None:
        self.dev = dev
        self.pd = pd
        self.qp_type = qp_type
        self.scq = scq
        self.rcq = rcq
        self.srq = srq
        self.sq_sig_all = sq_sig_all
        self.owner = owner  # the pyverbs-shaped QP in front of this one
        self.qp_state: int = e.IBV_QPS_RESET
        self.qp_num = dev.alloc_qpn(self)
        # the UDP source port: rxe_qp.c rxe_qp_init_req's initial value, until the address vector
        # gives the connection's (set_udp_sport, as rxe_modify_qp does)
        self.sport = 0xC000 + (_hash32(self.qp_num, 14) & 0x3FFF)
        self.gen = 0
        self.sq: list[SendWQE] = []
        self.rq: deque[RecvWQE] = deque()
        #: send WQEs posted but still being fetched by the device's NIC model (``nicmodel.Nic.post``)
        self.staged = 0
        self.sgid = self.dgid = self.dmac = 0  # the path (set with the address vector; kept over RESET)
        self.sl = 0  # the address vector's service level (an InfiniBand carrier puts it in the LRH)
        self.global_route: Any = None  # its GlobalRoute when it has one (an InfiniBand carrier then adds a GRH)
        # congestion control (rdmalab.verbs.engine.dcqcn.attach / ecn_only): the reaction point's rate
        # limiter, when the next packet may go, whether a resume timer is pending; ECT(0) without one
        self.dcqcn: Any = None
        self.dcqcn_next_ns = 0.0
        self.dcqcn_armed = False
        self.ecn_capable = False
        self.reset()

    def reset(self) -> None:
        """Back to RESET: attributes to their defaults, queues and protocol state emptied."""
        self.mtu = 1024
        self.dest_qp_num = self.qkey = self.access = 0
        self.timeout = self.retry_cnt = self.rnr_retry = self.min_rnr_timer = 0
        self.max_rd_atomic = self.max_dest_rd_atomic = 0
        self.gen += 1  # invalidates timers of a previous life
        self.sq = []
        self.rq = deque()
        self.req = RequesterState()
        self.comp = CompleterState()
        self.resp = ResponderState()

    # ------------------------------------------------------------------ attributes
    def set_sq_psn(self, psn: int) -> None:
        self.req.psn = self.comp.psn = psn & PSN_MASK

    def set_rq_psn(self, psn: int) -> None:
        self.resp.psn = psn & PSN_MASK

    def set_retry(self, retry_cnt: int | None = None, rnr_retry: int | None = None) -> None:
        if retry_cnt is not None:
            self.retry_cnt = self.comp.retry_left = retry_cnt
        if rnr_retry is not None:
            self.rnr_retry = self.comp.rnr_left = rnr_retry

    def set_udp_sport(self, flow_label: int) -> None:
        """The address vector was given (with the destination QP number already set): the UDP
        source port becomes ``rdma_get_udp_sport(flow_label, qpn, dest_qpn)``, as Linux 6.1
        ``rxe_modify_qp`` sets it (``rxe_verbs.c``; the function is in ``ib_verbs.h``).  The
        captures in ``captures/`` agree: both directions of an rxe connection share one port."""
        self.sport = udp_sport(flow_label, self.qp_num, self.dest_qp_num)

    def set_max_dest_rd_atomic(self, n: int) -> None:
        self.max_dest_rd_atomic = n
        self.resp.resources = [None] * n
        self.resp.res_head = 0

    @property
    def qp_state_name(self) -> str:
        return e.QP_STATE_NAMES[self.qp_state]

    # ------------------------------------------------------------------ state
    def set_state(self, new: int) -> None:
        """Enter ``new`` (already checked against the transition table)."""
        cur = self.qp_state
        if new == cur and new != e.IBV_QPS_RESET:
            return
        self.qp_state = new
        if self.dev.carrier.tracing:
            names: dict[str, Any] = {"from": e.QP_STATE_NAMES[cur], "to": e.QP_STATE_NAMES[new]}
            self.dev.trace(self.qp_num, "state", **names)
        if new == e.IBV_QPS_RESET:
            self.reset()
        elif new == e.IBV_QPS_ERR:
            self.flush()
        elif new == e.IBV_QPS_RTS:
            self.kick()

    def kick(self) -> None:
        """Let the requester send what it may (``SoftQP`` runs the requester)."""

    def to_error(self) -> None:
        if self.qp_state != e.IBV_QPS_ERR:
            self.set_state(e.IBV_QPS_ERR)

    # ------------------------------------------------------------------ completions and errors
    def complete_send(self, w: SendWQE, status: int = e.IBV_WC_SUCCESS) -> None:
        if w.credit:
            w.credit = False
            self.req.rd_out -= 1
        if status == e.IBV_WC_SUCCESS and not w.signaled:
            return
        # WC(wr_id, status, opcode, vendor_err, byte_len, qp_num)
        self._push(self.scq, WC(w.wr_id, status, WC_OPCODE.get(w.opcode, 0), 0, w.length, self.qp_num), False)

    def complete_recv(self, w: RecvWQE, status: int, opcode: int = e.IBV_WC_RECV, byte_len: int = 0,
                      imm: int = 0, flags: int = 0, src_qp: int = 0, solicited: bool = False,
                      gids: tuple[int, int] | None = None, slid: int = 0) -> None:
        # WC(wr_id, status, opcode, vendor_err, byte_len, qp_num, src_qp, imm_data, wc_flags)
        wc = WC(w.wr_id, status, opcode, 0, byte_len, self.qp_num, src_qp, imm, flags)
        wc.slid = slid
        if gids is not None:
            wc._sgid, wc._dgid = gids
        if self.dev.carrier.tracing:
            self._trace_wc(wc)
        if self.dev.nic is not None:  # the NIC model: the CQE is DMA-written first
            self.dev.nic.complete(self, self.rcq, wc, solicited)
            return
        if not self.rcq.push(wc, solicited) and self.qp_state != e.IBV_QPS_ERR:  # self._push, spelled out
            self.to_error()  # CQ overflow (class G): the QP goes to the error state

    def _push(self, cq: CompletionQueue, wc: WC, solicited: bool) -> None:
        if self.dev.carrier.tracing:
            self._trace_wc(wc)
        if self.dev.nic is not None:  # the NIC model: the CQE is DMA-written first
            self.dev.nic.complete(self, cq, wc, solicited)
            return
        if not cq.push(wc, solicited) and self.qp_state != e.IBV_QPS_ERR:
            self.to_error()  # CQ overflow (class G): the QP goes to the error state

    def _trace_wc(self, wc: WC) -> None:
        self.dev.trace(self.qp_num, "completed", wr_id=wc.wr_id, status=e.ibv_wc_status_str(wc.status),
                       wc_opcode=wc.opcode, byte_len=wc.byte_len)

    def pop_head(self) -> SendWQE:
        w = self.sq.pop(0)
        if self.req.wqe_index:
            self.req.wqe_index -= 1
        return w

    def local_invalidate(self, w: SendWQE) -> bool:
        """Execute a LOCAL_INV WQE here (no packet): the MR that ``inv_rkey`` names, if it is this PD's,
        is invalidated and the WQE is complete; else the WQE fails with ``LOC_PROT_ERR``.  False
        when it failed."""
        mr = self.dev.mrs.get(w.inv_rkey >> 8)
        if mr is None or w.inv_rkey not in (mr.lkey, mr.rkey) or mr.pd is not self.pd:
            self.fail_wqe(w, e.IBV_WC_LOC_PROT_ERR)
            return False
        mr.invalidate()
        w.started = w.complete = True
        return True

    def fail_wqe(self, w: SendWQE, status: int) -> None:
        """A send WQE ends in error: record its status and take the QP to ERR (which flushes)."""
        w.status = status
        self.to_error()

    def flush(self) -> None:
        """ERR: every outstanding WQE completes, with its own error status or ``WR_FLUSH_ERR``."""
        self.comp.timer_armed = False
        self.req.rnr_wait = False
        self.resp.pending_ack = None
        while self.sq:
            w = self.pop_head()
            self.complete_send(w, w.status if w.status != e.IBV_WC_SUCCESS else e.IBV_WC_WR_FLUSH_ERR)
        self.req.wqe_index = 0
        if self.resp.wqe is not None:
            w2, self.resp.wqe = self.resp.wqe, None
            self.complete_recv(w2, e.IBV_WC_WR_FLUSH_ERR)
        if self.srq is None:
            while self.rq:
                self.complete_recv(self.rq.popleft(), e.IBV_WC_WR_FLUSH_ERR)

    # ------------------------------------------------------------------ the retransmit timer
    def arm_timer(self, restart: bool = False) -> None:
        """The local ACK timer: 4.096 us x 2^timeout (IBA 9.7.6.1.3); timeout 0 disables it."""
        t = self.timeout
        comp = self.comp
        if t == 0 or (comp.timer_armed and not restart):
            return
        comp.timer_armed = True
        period = _TIMEOUT_NS[t]
        comp.timer_deadline = self.dev.carrier.now_ns + period
        if not comp.timer_pending:
            comp.timer_pending = True
            self.dev.schedule(period, self._on_timer, self.gen)

    def _on_timer(self, gen: int) -> None:
        if gen != self.gen:
            return
        comp = self.comp
        comp.timer_pending = False
        if not comp.timer_armed:
            return
        now = self.dev.now
        if now < comp.timer_deadline:
            comp.timer_pending = True
            self.dev.schedule(comp.timer_deadline - now, self._on_timer, gen)
            return
        comp.timer_armed = False
        self.on_timeout()

    def on_timeout(self) -> None:
        """The retransmit timer expired (``SoftQP`` runs the completer)."""

    def segment(self, code: int, psn: int, ackreq: int, src_gid: int, dst_gid: int, data: Any,
                reth: tuple[int, int, int] | None = None) -> bool:
        """The responder's fast path for one packet (``SoftQP`` runs it); False: take the full path."""
        return False

    def ack(self, psn: int) -> bool:
        """The completer's fast path for a plain ACK (``SoftQP`` runs it); False: take the full path."""
        return False

    def takes_acks(self) -> bool:
        """Whether :meth:`ack` would take a plain ACK now (``SoftQP`` asks the completer)."""
        return False

    def close(self) -> None:
        self.gen += 1
        self.dev.qps.pop(self.qp_num, None)

    def __repr__(self) -> str:
        return f"<engine QP {e.QP_TYPE_NAMES[self.qp_type]} {self.qp_num:#x} on {self.dev.name} {self.qp_state_name}>"


def _hash32(v: int, bits: int) -> int:
    return ((v * 0x61C88647) & 0xFFFFFFFF) >> (32 - bits)
