"""``pyverbs.qp``: QPCap, QPInitAttr, QPAttr and QP, over the soft engine.

The QP object holds the engine's per-QP state; the protocol lives in
:mod:`~rdmalab.verbs.engine.requester`, :mod:`~rdmalab.verbs.engine.responder` and
:mod:`~rdmalab.verbs.engine.completer`, and the legal transitions in
:mod:`~rdmalab.verbs.engine.qpstate`.  As in pyverbs, ``QP(pd, init_attr, qp_attr)`` brings
RC/UC QPs to INIT and UD QPs to RTS, and ``to_rtr``/``to_rts`` use the per-type masks of
``QP._get_comp_mask`` (reference section 4.1).
"""

from __future__ import annotations

import copy
import socket
from collections import deque
from typing import Any

from rdmalab.verbs import enums as e
from rdmalab.verbs.addr import resolve_path
from rdmalab.verbs.cq import WC
from rdmalab.verbs.device import MAX_INLINE, MAX_QP_RD_ATOM, MAX_QP_WR, MAX_SGE
from rdmalab.verbs.engine import completer, qpstate, requester, responder
from rdmalab.verbs.engine.memory import AccessError
from rdmalab.verbs.engine.packet import PSN_MASK
from rdmalab.verbs.engine.wqe import ATOMICS, WC_OPCODE, WR_NAMES, RecvWQE, Resource, SendWQE
from rdmalab.verbs.pyverbs_error import EINVAL, ENOMEM, PyverbsRDMAError, PyverbsUserError

S = qpstate
_TYPE_MASKS = {  # pyverbs QP._get_comp_mask
    e.IBV_QPT_RC: {"INIT": S.PKEY | S.PORT | S.ACC, "RTR": S.AV | S.MTU | S.DQPN | S.RQPSN | S.MDRA | S.RNRT,
                   "RTS": S.TMO | S.RETRY | S.RNRR | S.SQPSN | S.MRA},
    e.IBV_QPT_UC: {"INIT": S.PKEY | S.PORT | S.ACC, "RTR": S.AV | S.MTU | S.DQPN | S.RQPSN, "RTS": S.SQPSN},
    e.IBV_QPT_UD: {"INIT": S.PKEY | S.PORT | S.QKEY, "RTR": 0, "RTS": S.SQPSN},
}


def _pow2(n: int) -> int:
    return 1 << (n - 1).bit_length() if n > 0 else 0


def _hash32(v: int, bits: int) -> int:
    return ((v * 0x61C88647) & 0xFFFFFFFF) >> (32 - bits)


class QPCap:
    """``QPCap(max_send_wr=1, max_recv_wr=10, max_send_sge=1, max_recv_sge=1, max_inline_data=0)``."""

    def __init__(self, max_send_wr: int = 1, max_recv_wr: int = 10, max_send_sge: int = 1, max_recv_sge: int = 1,
                 max_inline_data: int = 0) -> None:
        self.max_send_wr = max_send_wr
        self.max_recv_wr = max_recv_wr
        self.max_send_sge = max_send_sge
        self.max_recv_sge = max_recv_sge
        self.max_inline_data = max_inline_data


class QPInitAttr:
    """``QPInitAttr(qp_type=IBV_QPT_UD, qp_context=None, scq=None, rcq=None, srq=None, cap=None, sq_sig_all=1)``."""

    def __init__(self, qp_type: int = e.IBV_QPT_UD, qp_context: Any = None, scq: Any = None, rcq: Any = None,
                 srq: Any = None, cap: QPCap | None = None, sq_sig_all: int = 1) -> None:
        self.qp_type = qp_type
        self.qp_context = qp_context
        self.send_cq = scq
        self.recv_cq = rcq
        self.srq = srq
        self.cap = cap if cap is not None else QPCap()
        self.sq_sig_all = sq_sig_all


class QPAttr:
    """``QPAttr(qp_state=IBV_QPS_INIT, cur_qp_state=IBV_QPS_RESET, port_num=1, path_mtu=IBV_MTU_1024)``."""

    def __init__(self, qp_state: int = e.IBV_QPS_INIT, cur_qp_state: int = e.IBV_QPS_RESET, port_num: int = 1,
                 path_mtu: int = e.IBV_MTU_1024) -> None:
        self.qp_state = qp_state
        self.cur_qp_state = cur_qp_state
        self.port_num = port_num
        self.path_mtu = path_mtu
        self.path_mig_state = e.IBV_MIG_MIGRATED
        self.qkey = 0
        self.rq_psn = 0
        self.sq_psn = 0
        self.dest_qp_num = 0
        self.qp_access_flags = 0
        self.cap = QPCap()
        self.ah_attr: Any = None
        self.alt_ah_attr: Any = None
        self.pkey_index = 0
        self.alt_pkey_index = 0
        self.en_sqd_async_notify = 0
        self.sq_draining = 0
        self.max_rd_atomic = 0
        self.max_dest_rd_atomic = 0
        self.min_rnr_timer = 0
        self.timeout = 0
        self.retry_cnt = 0
        self.rnr_retry = 0
        self.alt_port_num = 0
        self.alt_timeout = 0
        self.rate_limit = 0


class QP:
    """``QP(pd, init_attr, qp_attr=None)``: an RC, UC or UD queue pair on a soft device."""

    def __init__(self, pd: Any, init_attr: QPInitAttr, qp_attr: QPAttr | None = None) -> None:
        if not hasattr(pd, "device") or not hasattr(pd, "handle"):
            raise PyverbsUserError("the soft engine creates QPs from a PD: QP(pd, init_attr, qp_attr)")
        if init_attr.qp_type not in _TYPE_MASKS:
            raise PyverbsRDMAError(f"Failed to create QP: type {init_attr.qp_type} is not RC, UC or UD", EINVAL)
        cap = init_attr.cap
        if init_attr.send_cq is None or (init_attr.recv_cq is None and init_attr.srq is None):
            raise PyverbsRDMAError("Failed to create QP: a send CQ and a receive CQ are required", EINVAL)
        if (cap.max_send_wr > MAX_QP_WR or cap.max_recv_wr > MAX_QP_WR or cap.max_send_sge > MAX_SGE
                or cap.max_recv_sge > MAX_SGE or cap.max_inline_data > MAX_INLINE):
            raise PyverbsRDMAError("Failed to create QP: capabilities exceed the device's limits", EINVAL)
        self.pd = pd
        self.dev = pd.device
        self.fabric = pd.ctx.fabric
        self.qp_type = init_attr.qp_type
        self.init_attr = init_attr
        self.scq = init_attr.send_cq
        self.rcq = init_attr.recv_cq if init_attr.recv_cq is not None else init_attr.send_cq
        self.srq = init_attr.srq
        self.cap = copy.copy(cap)
        self.sq_sig_all = bool(init_attr.sq_sig_all)
        self.qp_state = e.IBV_QPS_RESET
        self.qp_num = self.dev.alloc_qpn(self)
        self.sport = 0xC000 + (_hash32(self.qp_num, 14) & 0x3FFF)  # rxe_qp.c: per-QP UDP source port
        self.attr = QPAttr(qp_state=e.IBV_QPS_RESET)
        self.mtu = 1024
        self.sgid = self.dgid = 0
        self.dmac = 0
        self.closed = False
        self._reset_engine()
        if qp_attr is not None:
            if self.qp_type == e.IBV_QPT_UD:
                self.to_rts(qp_attr)
            else:
                self.to_init(qp_attr)

    # ------------------------------------------------------------------ engine state
    def _reset_engine(self) -> None:
        # requester / completer (rxe req.* and comp.*)
        self.sq: list[SendWQE] = []
        self.req_idx = 0
        self.req_psn = self.comp_psn = self.attr.sq_psn & PSN_MASK
        self.noack = 0
        self.rd_out = 0
        self.retry_left = self.attr.retry_cnt
        self.rnr_left = self.attr.rnr_retry
        self.rnr_wait = False
        self.timer_armed = False
        self.timer_deadline = 0
        self.timer_pending = False
        self.gen = getattr(self, "gen", 0) + 1  # invalidates timers of a previous life
        # responder (rxe resp.*)
        self.rq: deque[RecvWQE] = deque()
        self.resp_psn = self.attr.rq_psn & PSN_MASK
        self.msn = 0
        self.resp_op: Any = None
        self.resp_wqe: RecvWQE | None = None
        self.resp_off = 0
        self.resp_write: memoryview | None = None
        self.resp_write_off = 0
        self.resp_write_len = 0
        self.resp_imm_len = 0
        self.sent_psn_nak = False
        self.uc_drop = False
        self.resources: list[Resource | None] = []
        self.res_head = 0
        self.pending_ack: int | None = None
        self.atomics_executed = 0

    # ------------------------------------------------------------------ state transitions
    def modify(self, qp_attr: QPAttr, attr_mask: int) -> None:
        """``ibv_modify_qp``: checked against the transition table, then applied."""
        cur = self.qp_state
        new = qp_attr.qp_state if attr_mask & e.IBV_QP_STATE else cur
        if attr_mask & e.IBV_QP_CUR_STATE and qp_attr.cur_qp_state != cur:
            if qp_attr.cur_qp_state not in (e.IBV_QPS_RTS, e.IBV_QPS_SQD, e.IBV_QPS_SQE):
                self._fail(new, "IBV_QP_CUR_STATE names a state the QP is not in")
        why = qpstate.check(self.qp_type, cur, new, attr_mask)
        if why is not None:
            self._fail(new, why)
        self._apply(qp_attr, attr_mask, new)
        self._enter(cur, new)

    def _fail(self, new: int, why: str) -> None:
        raise PyverbsRDMAError(f"Failed to modify QP state to {e.QP_STATE_NAMES.get(new, new)}: {why}", EINVAL)

    def _apply(self, a: QPAttr, mask: int, new: int) -> None:
        def bad(why: str) -> None:
            self._fail(new, why)

        if mask & S.PORT and a.port_num != 1:
            bad(f"port_num {a.port_num} (soft devices have port 1)")
        if mask & S.PKEY and a.pkey_index != 0:
            bad(f"pkey_index {a.pkey_index} (the P_Key table has one entry, 0xffff)")
        if mask & S.MTU and not e.IBV_MTU_256 <= a.path_mtu <= e.IBV_MTU_4096:
            bad(f"path_mtu {a.path_mtu} is not an IBV_MTU_* value")
        if mask & S.TMO and not 0 <= a.timeout <= 31:
            bad(f"timeout {a.timeout} > 31")
        if mask & S.RETRY and not 0 <= a.retry_cnt <= 7:
            bad(f"retry_cnt {a.retry_cnt} > 7")
        if mask & S.RNRR and not 0 <= a.rnr_retry <= 7:
            bad(f"rnr_retry {a.rnr_retry} > 7")
        if mask & S.RNRT and not 0 <= a.min_rnr_timer <= 31:
            bad(f"min_rnr_timer {a.min_rnr_timer} > 31")
        if mask & S.MRA and a.max_rd_atomic > MAX_QP_RD_ATOM:
            bad(f"max_rd_atomic {a.max_rd_atomic} > {MAX_QP_RD_ATOM}")
        if mask & S.MDRA and a.max_dest_rd_atomic > MAX_QP_RD_ATOM:
            bad(f"max_dest_rd_atomic {a.max_dest_rd_atomic} > {MAX_QP_RD_ATOM}")
        if mask & S.AV:
            sgid, dgid = resolve_path(self.dev, a.ah_attr)
            mac = self.dev.resolve_mac(dgid)
            if mac is None:
                bad(f"cannot resolve the MAC address of GID {dgid:#x}: the carrier cannot reach it")
            self.sgid, self.dgid, self.dmac = sgid, dgid, mac
            self.attr.ah_attr = a.ah_attr
        at = self.attr
        for bit, name in ((S.ACC, "qp_access_flags"), (S.QKEY, "qkey"), (S.DQPN, "dest_qp_num"),
                          (S.TMO, "timeout"), (S.RETRY, "retry_cnt"), (S.RNRR, "rnr_retry"),
                          (S.RNRT, "min_rnr_timer"), (S.PORT, "port_num"), (S.PKEY, "pkey_index"),
                          (S.MTU, "path_mtu"), (S.MIG, "path_mig_state"), (S.SQDN, "en_sqd_async_notify")):
            if mask & bit:
                setattr(at, name, getattr(a, name))
        if mask & S.MTU:
            self.mtu = e.mtu_to_bytes(a.path_mtu)
        if mask & S.MRA:
            at.max_rd_atomic = _pow2(a.max_rd_atomic)  # rxe rounds up to a power of two
        if mask & S.MDRA:
            at.max_dest_rd_atomic = _pow2(a.max_dest_rd_atomic)
            self.resources = [None] * at.max_dest_rd_atomic
            self.res_head = 0
        if mask & S.RQPSN:
            at.rq_psn = a.rq_psn & PSN_MASK
            self.resp_psn = at.rq_psn
        if mask & S.SQPSN:
            at.sq_psn = a.sq_psn & PSN_MASK
            self.req_psn = self.comp_psn = at.sq_psn
        if mask & S.RETRY:
            self.retry_left = a.retry_cnt
        if mask & S.RNRR:
            self.rnr_left = a.rnr_retry

    def _enter(self, cur: int, new: int) -> None:
        if new == cur and new != e.IBV_QPS_RESET:
            return
        self.qp_state = new
        if self.dev.tracing:
            self.dev.trace(self.qp_num, "state", **{"from": e.QP_STATE_NAMES[cur], "to": e.QP_STATE_NAMES[new]})
        if new == e.IBV_QPS_RESET:
            self.attr = QPAttr(qp_state=e.IBV_QPS_RESET)
            self.mtu = 1024
            self._reset_engine()
        elif new == e.IBV_QPS_ERR:
            self.flush()
        elif new == e.IBV_QPS_RTS:
            requester.run(self)

    def to_init(self, attr: QPAttr) -> None:
        attr.qp_state = e.IBV_QPS_INIT
        self.modify(attr, e.IBV_QP_STATE | _TYPE_MASKS[self.qp_type]["INIT"])

    def to_rtr(self, attr: QPAttr) -> None:
        if self.qp_state != e.IBV_QPS_INIT:
            self.to_init(attr)
        attr.qp_state = e.IBV_QPS_RTR
        self.modify(attr, e.IBV_QP_STATE | _TYPE_MASKS[self.qp_type]["RTR"])

    def to_rts(self, attr: QPAttr) -> None:
        if self.qp_state != e.IBV_QPS_RTR:
            self.to_rtr(attr)
        attr.qp_state = e.IBV_QPS_RTS
        self.modify(attr, e.IBV_QP_STATE | _TYPE_MASKS[self.qp_type]["RTS"])

    def query(self, attr_mask: int = 0) -> tuple[QPAttr, QPInitAttr]:
        a = copy.copy(self.attr)
        a.qp_state = a.cur_qp_state = self.qp_state
        a.sq_psn, a.rq_psn = self.req_psn, self.resp_psn
        a.cap = copy.copy(self.cap)
        a.sq_draining = int(self.qp_state == e.IBV_QPS_SQD and any(w.started for w in self.sq))
        return a, self.init_attr

    # ------------------------------------------------------------------ posting
    def post_send(self, wr: Any, bad_wr: Any = None) -> None:
        """``ibv_post_send``: validated as rxe's ``validate_send_wr``; errors on the wire end as WCs."""
        if self.qp_state in (e.IBV_QPS_RESET, e.IBV_QPS_INIT, e.IBV_QPS_RTR):
            raise PyverbsRDMAError(f"Failed to post send: the QP is in {e.QP_STATE_NAMES[self.qp_state]}, "
                                   "not RTS", EINVAL)
        while wr is not None:
            self.sq.append(self._send_wqe(wr))
            wr = wr.next_wr
        if self.qp_state == e.IBV_QPS_ERR:
            self.flush()
        else:
            requester.run(self)

    def _send_wqe(self, wr: Any) -> SendWQE:
        sg = list(wr.sg)
        if len(sg) > self.cap.max_send_sge:
            raise PyverbsRDMAError(f"Failed to post send: {len(sg)} SGEs > max_send_sge {self.cap.max_send_sge}",
                                   EINVAL)
        if len(self.sq) >= self.cap.max_send_wr:
            raise PyverbsRDMAError(f"Failed to post send: the send queue is full ({self.cap.max_send_wr})", ENOMEM)
        length = sum(s.length for s in sg)
        op = wr.opcode
        if op in ATOMICS and (length != 8 or wr.remote_addr & 7):
            raise PyverbsRDMAError("Failed to post send: an atomic needs one 8-byte SGE and an 8-byte aligned "
                                   "remote address", EINVAL)
        if self.qp_type == e.IBV_QPT_UD and wr.ah is None:
            raise PyverbsRDMAError("Failed to post send: a UD send needs set_wr_ud(ah, rqpn, rqkey)", EINVAL)
        inline = None
        if wr.send_flags & e.IBV_SEND_INLINE:
            if length > self.cap.max_inline_data:
                raise PyverbsRDMAError(f"Failed to post send: {length} bytes inline > max_inline_data "
                                       f"{self.cap.max_inline_data}", EINVAL)
            inline = b"".join(self._inline_bytes(s) for s in sg)
        imm = socket.ntohl(wr.imm_data & 0xFFFFFFFF)
        w = SendWQE(wr.wr_id, op, wr.send_flags, sg, length, imm=imm, inv_rkey=wr.invalidate_rkey,
                    remote_addr=wr.remote_addr, rkey=wr.rkey, compare_add=wr.compare_add, swap=wr.swap,
                    ah=wr.ah, remote_qpn=wr.remote_qpn, remote_qkey=wr.remote_qkey, inline=inline,
                    signaled=self.sq_sig_all or bool(wr.send_flags & e.IBV_SEND_SIGNALED))
        if self.dev.tracing:
            self.dev.trace(self.qp_num, "posted", wr_id=wr.wr_id, op=WR_NAMES.get(op, str(op)), queue="send",
                           length=length)
        return w

    def _inline_bytes(self, sge: Any) -> bytes:
        # Inline data is copied at post time and its lkey is not checked (libibverbs semantics).
        for mr in self.dev.mrs.values():
            off = sge.addr - mr.buf
            if 0 <= off and off + sge.length <= mr.length:
                return bytes(mr.view[off:off + sge.length])
        raise PyverbsRDMAError(f"Failed to post send: inline SGE at {sge.addr:#x} is not in any registered buffer "
                               "(the soft engine can only read registered memory)", EINVAL)

    def post_recv(self, wr: Any, bad_wr: Any = None) -> None:
        """``ibv_post_recv``."""
        if self.srq is not None:
            raise PyverbsRDMAError("Failed to post receive: this QP takes its receives from an SRQ", EINVAL)
        if self.qp_state == e.IBV_QPS_RESET:
            raise PyverbsRDMAError("Failed to post receive: the QP is in RESET", EINVAL)
        while wr is not None:
            if len(wr.sg) > self.cap.max_recv_sge:
                raise PyverbsRDMAError(f"Failed to post receive: {len(wr.sg)} SGEs > max_recv_sge "
                                       f"{self.cap.max_recv_sge}", EINVAL)
            if len(self.rq) >= self.cap.max_recv_wr:
                raise PyverbsRDMAError(f"Failed to post receive: the receive queue is full ({self.cap.max_recv_wr})",
                                       ENOMEM)
            self.rq.append(RecvWQE(wr.wr_id, list(wr.sg), sum(s.length for s in wr.sg)))
            if self.dev.tracing:
                self.dev.trace(self.qp_num, "posted", wr_id=wr.wr_id, op="RECV", queue="recv")
            wr = wr.next_wr
        if self.qp_state == e.IBV_QPS_ERR:
            self.flush()

    # ------------------------------------------------------------------ completions and errors
    def complete_send(self, w: SendWQE, status: int = e.IBV_WC_SUCCESS) -> None:
        if w.credit:
            w.credit = False
            self.rd_out -= 1
        if status == e.IBV_WC_SUCCESS and not w.signaled:
            return
        byte_len = w.length
        wc = WC(w.wr_id, status, WC_OPCODE.get(w.opcode, 0), byte_len=byte_len, qp_num=self.qp_num)
        self._push(self.scq, wc, False)

    def complete_recv(self, w: RecvWQE, status: int, opcode: int = e.IBV_WC_RECV, byte_len: int = 0,
                      imm: int = 0, flags: int = 0, src_qp: int = 0, solicited: bool = False,
                      gids: tuple[int, int] | None = None) -> None:
        wc = WC(w.wr_id, status, opcode, byte_len=byte_len, qp_num=self.qp_num, src_qp=src_qp, imm_data=imm,
                wc_flags=flags)
        if gids is not None:
            wc._sgid, wc._dgid = gids
        self._push(self.rcq, wc, solicited)

    def _push(self, cq: Any, wc: WC, solicited: bool) -> None:
        if self.dev.tracing:
            self.dev.trace(self.qp_num, "completed", wr_id=wc.wr_id, status=e.ibv_wc_status_str(wc.status),
                           wc_opcode=wc.opcode, byte_len=wc.byte_len)
        if not cq.push(wc, solicited) and self.qp_state != e.IBV_QPS_ERR:
            self.to_error()  # CQ overflow (class G): the QP goes to the error state

    def pop_head(self) -> SendWQE:
        w = self.sq.pop(0)
        self.req_idx = max(0, self.req_idx - 1)
        return w

    def fail_wqe(self, w: SendWQE, status: int) -> None:
        """A send WQE ends in error: record its status and take the QP to ERR (which flushes)."""
        w.status = status
        self.to_error()

    def to_error(self) -> None:
        if self.qp_state != e.IBV_QPS_ERR:
            self._enter(self.qp_state, e.IBV_QPS_ERR)

    def flush(self) -> None:
        """ERR: every outstanding WQE completes, with its own error status or ``WR_FLUSH_ERR``."""
        self.timer_armed = False
        self.rnr_wait = False
        self.pending_ack = None
        while self.sq:
            w = self.pop_head()
            self.complete_send(w, w.status if w.status != e.IBV_WC_SUCCESS else e.IBV_WC_WR_FLUSH_ERR)
        self.req_idx = 0
        if self.resp_wqe is not None:
            w2, self.resp_wqe = self.resp_wqe, None
            self.complete_recv(w2, e.IBV_WC_WR_FLUSH_ERR)
        if self.srq is None:
            while self.rq:
                self.complete_recv(self.rq.popleft(), e.IBV_WC_WR_FLUSH_ERR)

    # ------------------------------------------------------------------ timers
    def arm_timer(self, restart: bool = False) -> None:
        """The local ACK timer: 4.096 us x 2^timeout (IBA 9.7.6.1.3); timeout 0 disables it."""
        t = self.attr.timeout
        if t == 0 or (self.timer_armed and not restart):
            return
        self.timer_armed = True
        period = 4096 << t
        self.timer_deadline = self.dev.now + period
        if not self.timer_pending:
            self.timer_pending = True
            self.dev.schedule(period, self._on_timer, self.gen)

    def _on_timer(self, gen: int) -> None:
        if gen != self.gen:
            return
        self.timer_pending = False
        if not self.timer_armed:
            return
        now = self.dev.now
        if now < self.timer_deadline:
            self.timer_pending = True
            self.dev.schedule(self.timer_deadline - now, self._on_timer, gen)
            return
        self.timer_armed = False
        completer.on_timeout(self)

    # ------------------------------------------------------------------ packets in
    def on_request(self, pkt: Any) -> None:
        responder.on_request(self, pkt)

    def on_response(self, pkt: Any) -> None:
        completer.on_response(self, pkt)

    def flush_ack(self) -> None:
        responder.flush_ack(self)

    # ------------------------------------------------------------------ misc
    @property
    def qp_state_name(self) -> str:
        return e.QP_STATE_NAMES[self.qp_state]

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.gen += 1
            self.dev.qps.pop(self.qp_num, None)

    def __enter__(self) -> QP:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<QP {e.QP_TYPE_NAMES[self.qp_type]} {self.qp_num:#x} on {self.dev.name} "
                f"{self.qp_state_name}>")


__all__ = ["QP", "QPAttr", "QPCap", "QPInitAttr", "AccessError"]
