"""``pyverbs.qp``: QPCap, QPInitAttr, QPAttr and QP, over the soft engine.

``QP`` is a thin front over an engine QP (:class:`rdmalab.verbs.engine.softqp.SoftQP`), which
holds the protocol state (:mod:`rdmalab.verbs.engine.qpcore`: requester, completer, responder,
as rxe's ``qp->req``/``qp->comp``/``qp->resp``); the legal transitions are in
:mod:`~rdmalab.verbs.engine.qpstate`.  As in pyverbs, ``QP(pd, init_attr, qp_attr)`` brings
RC/UC QPs to INIT and UD QPs to RTS, and ``to_rtr``/``to_rts`` use the per-type masks of
``QP._get_comp_mask`` (reference section 4.1).
"""

from __future__ import annotations

import copy
import errno
import socket
from typing import Any

from rdmalab.verbs import enums as e
from rdmalab.verbs.addr import GID, resolve_path
from rdmalab.verbs.device import MAX_INLINE, MAX_QP_RD_ATOM, MAX_QP_WR, MAX_SGE
from rdmalab.verbs.engine import qpstate
from rdmalab.verbs.engine.memory import AccessError
from rdmalab.verbs.engine.softqp import SoftQP
from rdmalab.verbs.engine.wqe import ATOMICS, WR_NAMES, RecvWQE, SendWQE
from rdmalab.verbs.pyverbs_error import EINVAL, ENOMEM, PyverbsRDMAError, PyverbsUserError
from rdmalab.wire.ib import IB_MTU_BYTES, PSN_MASK

S = qpstate
_TYPE_MASKS: dict[int, dict[str, int]] = {  # pyverbs QP._get_comp_mask
    e.IBV_QPT_RC: {"INIT": S.PKEY | S.PORT | S.ACC, "RTR": S.AV | S.MTU | S.DQPN | S.RQPSN | S.MDRA | S.RNRT,
                   "RTS": S.TMO | S.RETRY | S.RNRR | S.SQPSN | S.MRA},
    e.IBV_QPT_UC: {"INIT": S.PKEY | S.PORT | S.ACC, "RTR": S.AV | S.MTU | S.DQPN | S.RQPSN, "RTS": S.SQPSN},
    e.IBV_QPT_UD: {"INIT": S.PKEY | S.PORT | S.QKEY, "RTR": 0, "RTS": S.SQPSN},
}


_NO_SEND = (e.IBV_QPS_RESET, e.IBV_QPS_INIT, e.IBV_QPS_RTR)  # ibv_post_send is refused in these states


def _pow2(n: int) -> int:
    return 1 << (n - 1).bit_length() if n > 0 else 0


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


def is_multicast_gid(v: int) -> bool:
    """ff00::/8, or an IPv4-mapped 224.0.0.0/4 address (RoCEv2 with IPv4: rdma_ip2gid of the group)."""
    return (v >> 120) == 0xFF or ((v >> 32) == 0xFFFF and (v & 0xF0000000) == 0xE0000000)


def _mgid(gid: Any, what: str) -> int:
    v = int(gid) if not isinstance(gid, int) else gid
    if not is_multicast_gid(v):
        raise PyverbsRDMAError(f"Failed to {what}: {GID.from_int(v).gid} is not a multicast GID", errno.EINVAL)
    return v


class ECE:
    """``ECE(vendor_id=0, options=0, comp_mask=0)``: enhanced connection establishment data (pyverbs.qp)."""

    def __init__(self, vendor_id: int = 0, options: int = 0, comp_mask: int = 0) -> None:
        self.vendor_id, self.options, self.comp_mask = vendor_id, options, comp_mask

    def __repr__(self) -> str:
        return f"ECE(vendor_id={self.vendor_id:#x}, options={self.options:#x}, comp_mask={self.comp_mask})"


class QP:
    """``QP(pd, init_attr, qp_attr=None)``: an RC, UC or UD queue pair on a soft device.

    A thin pyverbs front: it checks arguments as ``ibv_create_qp``/``ibv_modify_qp``/
    ``ibv_post_*`` do, keeps the attributes ``query`` returns, and hands everything else to its
    engine QP, :attr:`engine` (:class:`rdmalab.verbs.engine.softqp.SoftQP`).
    """

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
        self.qp_type = init_attr.qp_type
        self.init_attr = init_attr
        self.srq = init_attr.srq
        self.cap = copy.copy(cap)
        self.attr = QPAttr(qp_state=e.IBV_QPS_RESET)
        self.closed = False
        self.scq = init_attr.send_cq
        self.rcq = init_attr.recv_cq if init_attr.recv_cq is not None else init_attr.send_cq
        self.sq_sig_all = bool(init_attr.sq_sig_all)
        # the device's transport picks the engine QP: SoftQP (RoCE), or IwQP on an iWARP device
        engine_cls = getattr(self.dev, "qp_engine", SoftQP)
        try:
            self.engine = engine_cls(self.dev, pd, self.qp_type, self.scq, self.rcq, init_attr.srq, self.sq_sig_all,
                                     owner=self)
        except ValueError as exc:
            raise PyverbsRDMAError(f"Failed to create QP: {exc}", errno.EOPNOTSUPP) from None
        if qp_attr is not None:
            if self.qp_type == e.IBV_QPT_UD:
                self.to_rts(qp_attr)
            else:
                self.to_init(qp_attr)

    @property
    def qp_num(self) -> int:
        return self.engine.qp_num

    @property
    def qp_state(self) -> int:
        return self.engine.qp_state

    @property
    def qp_state_name(self) -> str:
        return self.engine.qp_state_name

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
        if new == e.IBV_QPS_RESET:
            self.attr = QPAttr(qp_state=e.IBV_QPS_RESET)
        self.engine.set_state(new)

    def _fail(self, new: int, why: str) -> None:
        raise PyverbsRDMAError(f"Failed to modify QP state to {e.QP_STATE_NAMES.get(new, new)}: {why}", EINVAL)

    def _apply(self, a: QPAttr, mask: int, new: int) -> None:
        def bad(why: str) -> None:
            self._fail(new, why)

        if mask & S.PORT and a.port_num != 1:
            bad(f"port_num {a.port_num} (soft devices have port 1)")
        if mask & S.PKEY and a.pkey_index != 0:
            bad(f"pkey_index {a.pkey_index} (the P_Key table has one entry, 0xffff)")
        if mask & S.MTU and a.path_mtu not in IB_MTU_BYTES:
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
        eng = self.engine
        if mask & S.AV:
            sgid, dgid = resolve_path(self.dev, a.ah_attr)
            mac = self.dev.resolve_mac(dgid)
            if mac is None:
                bad(f"cannot resolve the MAC address of GID {dgid:#x}: the carrier cannot reach it")
            eng.sgid, eng.dgid, eng.dmac, eng.sl = sgid, dgid, mac, a.ah_attr.sl
            eng.global_route = a.ah_attr.gr if a.ah_attr.is_global else None
            self.attr.ah_attr = a.ah_attr
        at = self.attr
        for bit, name in ((S.ACC, "qp_access_flags"), (S.QKEY, "qkey"), (S.DQPN, "dest_qp_num"),
                          (S.TMO, "timeout"), (S.RETRY, "retry_cnt"), (S.RNRR, "rnr_retry"),
                          (S.RNRT, "min_rnr_timer"), (S.PORT, "port_num"), (S.PKEY, "pkey_index"),
                          (S.MTU, "path_mtu"), (S.MIG, "path_mig_state"), (S.SQDN, "en_sqd_async_notify")):
            if mask & bit:
                setattr(at, name, getattr(a, name))
        eng.access, eng.qkey, eng.dest_qp_num = at.qp_access_flags, at.qkey, at.dest_qp_num
        if mask & S.AV and a.ah_attr.is_global:  # rxe_modify_qp: the port from the flow label (or the QPNs)
            eng.set_udp_sport(a.ah_attr.gr.flow_label)
        eng.timeout, eng.min_rnr_timer = at.timeout, at.min_rnr_timer
        if mask & S.MTU:
            eng.mtu = e.mtu_to_bytes(a.path_mtu)
        if mask & S.MRA:
            at.max_rd_atomic = eng.max_rd_atomic = _pow2(a.max_rd_atomic)  # rxe rounds up to a power of two
        if mask & S.MDRA:
            at.max_dest_rd_atomic = _pow2(a.max_dest_rd_atomic)
            eng.set_max_dest_rd_atomic(at.max_dest_rd_atomic)
        if mask & S.RQPSN:
            at.rq_psn = a.rq_psn & PSN_MASK
            eng.set_rq_psn(at.rq_psn)
        if mask & S.SQPSN:
            at.sq_psn = a.sq_psn & PSN_MASK
            eng.set_sq_psn(at.sq_psn)
        eng.set_retry(a.retry_cnt if mask & S.RETRY else None, a.rnr_retry if mask & S.RNRR else None)

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

    def to_error(self) -> None:
        """Move the QP to ERR (as the engine does on a fatal error); outstanding WQEs flush."""
        self.engine.to_error()

    def query(self, attr_mask: int = 0) -> tuple[QPAttr, QPInitAttr]:
        a = copy.copy(self.attr)
        eng = self.engine
        a.qp_state = a.cur_qp_state = eng.qp_state
        a.sq_psn, a.rq_psn = eng.req.psn, eng.resp.psn
        a.cap = copy.copy(self.cap)
        a.sq_draining = int(eng.qp_state == e.IBV_QPS_SQD and any(w.started for w in eng.sq))
        return a, self.init_attr

    # ------------------------------------------------------------------ posting
    def post_send(self, wr: Any, bad_wr: Any = None) -> None:
        """``ibv_post_send``: validated as rxe's ``validate_send_wr``; errors on the wire end as WCs."""
        eng = self.engine
        if eng.qp_state in _NO_SEND:
            raise PyverbsRDMAError(f"Failed to post send: the QP is in {e.QP_STATE_NAMES[self.qp_state]}, "
                                   "not RTS", EINVAL)
        queued = len(eng.sq) + eng.staged  # (staged: WQEs a NIC model is still fetching)
        if wr.next_wr is None:  # one work request (the usual case): no list to grow
            eng.post_send([self._send_wqe(wr, queued)])
            return
        wqes: list[SendWQE] = []
        while wr is not None:
            wqes.append(self._send_wqe(wr, queued + len(wqes)))
            wr = wr.next_wr
        eng.post_send(wqes)

    def _send_wqe(self, wr: Any, queued: int) -> SendWQE:
        sg = list(wr.sg)
        cap = self.cap
        if len(sg) > cap.max_send_sge:
            raise PyverbsRDMAError(f"Failed to post send: {len(sg)} SGEs > max_send_sge {cap.max_send_sge}",
                                   EINVAL)
        if queued >= cap.max_send_wr:
            raise PyverbsRDMAError(f"Failed to post send: the send queue is full ({cap.max_send_wr})", ENOMEM)
        length = sg[0].length if len(sg) == 1 else sum(s.length for s in sg)
        op = wr.opcode
        flags = wr.send_flags
        if op in ATOMICS and (length != 8 or wr.remote_addr & 7):
            raise PyverbsRDMAError("Failed to post send: an atomic needs one 8-byte SGE and an 8-byte aligned "
                                   "remote address", EINVAL)
        if self.qp_type == e.IBV_QPT_UD and wr.ah is None:
            raise PyverbsRDMAError("Failed to post send: a UD send needs set_wr_ud(ah, rqpn, rqkey)", EINVAL)
        inline = None
        if flags & e.IBV_SEND_INLINE:
            if length > cap.max_inline_data:
                raise PyverbsRDMAError(f"Failed to post send: {length} bytes inline > max_inline_data "
                                       f"{cap.max_inline_data}", EINVAL)
            inline = b"".join(self._inline_bytes(s) for s in sg)
        imm = wr.imm_data
        if imm:
            imm = socket.ntohl(imm & 0xFFFFFFFF)
        # positional: SendWQE(wr_id, opcode, send_flags, sg, length, imm, inv_rkey, remote_addr, rkey,
        # compare_add, swap, ah, remote_qpn, remote_qkey, inline, signaled)
        w = SendWQE(wr.wr_id, op, flags, sg, length, imm, wr.invalidate_rkey, wr.remote_addr, wr.rkey,
                    wr.compare_add, wr.swap, wr.ah, wr.remote_qpn, wr.remote_qkey, inline,
                    self.sq_sig_all or bool(flags & e.IBV_SEND_SIGNALED))
        if self.dev.carrier.tracing:
            self.dev.trace(self.qp_num, "posted", wr_id=wr.wr_id, op=WR_NAMES.get(op) or str(op), queue="send",
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
        eng = self.engine
        if eng.qp_state == e.IBV_QPS_RESET:
            raise PyverbsRDMAError("Failed to post receive: the QP is in RESET", EINVAL)
        wqes: list[RecvWQE] = []
        queued = len(eng.rq)
        cap = self.cap
        tracing = self.dev.carrier.tracing
        while wr is not None:
            sg = list(wr.sg)
            if len(sg) > cap.max_recv_sge:
                raise PyverbsRDMAError(f"Failed to post receive: {len(sg)} SGEs > max_recv_sge "
                                       f"{cap.max_recv_sge}", EINVAL)
            if queued + len(wqes) >= cap.max_recv_wr:
                raise PyverbsRDMAError(f"Failed to post receive: the receive queue is full ({cap.max_recv_wr})",
                                       ENOMEM)
            wqes.append(RecvWQE(wr.wr_id, sg, sg[0].length if len(sg) == 1 else sum(s.length for s in sg)))
            if tracing:
                self.dev.trace(self.qp_num, "posted", wr_id=wr.wr_id, op="RECV", queue="recv")
            wr = wr.next_wr
        eng.post_recv(wqes)

    # ------------------------------------------------------------------ misc
    def attach_mcast(self, gid: Any, lid: int = 0) -> None:
        """``ibv_attach_mcast``: a UD QP receives what is sent to the multicast GID ``gid``."""
        mgid = _mgid(gid, "attach QP to mcast")
        if self.qp_type != e.IBV_QPT_UD:
            raise PyverbsRDMAError("Failed to attach QP to mcast: only UD QPs join multicast groups", errno.EINVAL)
        self.dev.attach_mcast(mgid, self.engine)

    def detach_mcast(self, gid: Any, lid: int = 0) -> None:
        """``ibv_detach_mcast``."""
        if not self.dev.detach_mcast(_mgid(gid, "detach QP from mcast"), self.engine):
            raise PyverbsRDMAError("Failed to detach QP from mcast: the QP is not attached to that group", errno.EINVAL)

    def query_ece(self) -> ECE:
        """``ibv_query_ece``: the soft devices have no ECE, as rxe has none (EOPNOTSUPP)."""
        raise PyverbsRDMAError("Failed to query ECE: the device does not support ECE", errno.EOPNOTSUPP)

    def set_ece(self, ece: ECE) -> None:
        """``ibv_set_ece``: EOPNOTSUPP, as on rxe."""
        raise PyverbsRDMAError("Failed to set ECE: the device does not support ECE", errno.EOPNOTSUPP)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.engine.close()

    def __enter__(self) -> QP:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<QP {e.QP_TYPE_NAMES[self.qp_type]} {self.qp_num:#x} on {self.dev.name} "
                f"{self.qp_state_name}>")


__all__ = ["QP", "QPAttr", "QPCap", "QPInitAttr", "AccessError"]
