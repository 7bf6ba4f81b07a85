"""The extended QP API of ``pyverbs.qp``: ``QPInitAttrEx``, ``QPEx`` and the ``wr_*`` posting style.

``QP`` here is :class:`rdmalab.verbs.qp.QP` that can also be created the way pyverbs allows:
``QP(pd, QPInitAttr)``, ``QP(ctx, QPInitAttrEx(pd=pd, ...))`` or ``QP(pd, QPInitAttrEx)``.
``QPEx`` adds libibverbs' "new post send" interface (``ibv_wr_start`` ... ``ibv_wr_complete``,
verbs.h): between ``wr_start()`` and ``wr_complete()`` each ``wr_<opcode>()`` starts a work
request, taking ``wr_id`` and ``wr_flags`` as they are at that moment, and ``wr_set_sge*`` /
``wr_set_inline_data*`` / ``wr_set_ud_addr`` complete it.  ``wr_complete()`` posts them all at
once, through the same validation and engine as ``post_send`` (so errors are the same:
``EINVAL`` for a QP not in RTS, a bad SGE count...); ``wr_abort()`` drops them.

Opcodes must be enabled at creation in ``QPInitAttrEx.send_ops_flags`` (``IBV_QP_EX_WITH_*``),
as libibverbs requires; a ``wr_*`` call for an opcode that was not enabled raises
``PyverbsUserError`` here (libibverbs would call a NULL function pointer).  The soft engine
supports the rxe set: SEND, SEND_WITH_IMM, RDMA_WRITE(_WITH_IMM), RDMA_READ, the two atomics,
SEND_WITH_INV, LOCAL_INV and BIND_MW; asking for others (TSO, ATOMIC_WRITE...) at creation
fails with ``EOPNOTSUPP``.

Memory windows (:class:`rdmalab.verbs.mr_ex.MW`) are bound here, by ``QP.bind_mw`` (type 1) or an
``IBV_WR_BIND_MW`` work request (type 2): as rxe executes a bind in its requester once the WQEs
before it are done, ``post_send`` runs the simulation until the send queue before the bind has
drained, applies the bind and completes it (``IBV_WC_BIND_MW``, or ``IBV_WC_MW_BIND_ERR`` and the
QP to the error state, rxe_req.c).
"""

from __future__ import annotations

import errno
import socket
from typing import Any

from rdmalab.verbs import enums as _enums
from rdmalab.verbs import libibverbs_enums as e
from rdmalab.verbs import qp as _qp
from rdmalab.verbs.base import inc_rkey
from rdmalab.verbs.cq import WC
from rdmalab.verbs.pyverbs_error import PyverbsRDMAError, PyverbsUserError
from rdmalab.verbs.wr import SGE
from rdmalab.verbs.wr_ex import SendWR

QPCap = _qp.QPCap
QPAttr = _qp.QPAttr

SUPPORTED_SEND_OPS = (e.IBV_QP_EX_WITH_SEND | e.IBV_QP_EX_WITH_SEND_WITH_IMM | e.IBV_QP_EX_WITH_RDMA_WRITE
                      | e.IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | e.IBV_QP_EX_WITH_RDMA_READ
                      | e.IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | e.IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
                      | e.IBV_QP_EX_WITH_SEND_WITH_INV | e.IBV_QP_EX_WITH_LOCAL_INV | e.IBV_QP_EX_WITH_BIND_MW)
SUPPORTED_COMP_MASK = (e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_CREATE_FLAGS
                       | e.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)
TYPES = (e.IBV_QPT_RC, e.IBV_QPT_UC, e.IBV_QPT_UD)


class _CapProps:
    """``max_send_wr`` etc. as shortcuts into ``cap`` (pyverbs' QPInitAttr and QPInitAttrEx have them)."""

    cap: Any

    @property
    def max_send_wr(self) -> int:
        return int(self.cap.max_send_wr)

    @max_send_wr.setter
    def max_send_wr(self, val: int) -> None:
        self.cap.max_send_wr = val

    @property
    def max_recv_wr(self) -> int:
        return int(self.cap.max_recv_wr)

    @max_recv_wr.setter
    def max_recv_wr(self, val: int) -> None:
        self.cap.max_recv_wr = val

    @property
    def max_send_sge(self) -> int:
        return int(self.cap.max_send_sge)

    @max_send_sge.setter
    def max_send_sge(self, val: int) -> None:
        self.cap.max_send_sge = val

    @property
    def max_recv_sge(self) -> int:
        return int(self.cap.max_recv_sge)

    @max_recv_sge.setter
    def max_recv_sge(self, val: int) -> None:
        self.cap.max_recv_sge = val

    @property
    def max_inline_data(self) -> int:
        return int(self.cap.max_inline_data)

    @max_inline_data.setter
    def max_inline_data(self, val: int) -> None:
        self.cap.max_inline_data = val


class QPInitAttr(_CapProps, _qp.QPInitAttr):
    """``QPInitAttr(qp_type=IBV_QPT_UD, qp_context=None, scq=None, rcq=None, srq=None, cap=None, sq_sig_all=1)``."""


class QPInitAttrEx(_CapProps):
    """``QPInitAttrEx(qp_type=IBV_QPT_UD, qp_context=None, scq=None, rcq=None, srq=None, cap=None,
    sq_sig_all=0, comp_mask=0, pd=None, xrcd=None, create_flags=0, max_tso_header=0,
    source_qpn=0, hash_conf=None, ind_table=None, send_ops_flags=0)``."""

    def __init__(self, qp_type: int = e.IBV_QPT_UD, qp_context: Any = None, scq: Any = None, rcq: Any = None,
                 srq: Any = None, cap: Any = None, sq_sig_all: int = 0, comp_mask: int = 0, pd: Any = None,
                 xrcd: Any = None, create_flags: int = 0, max_tso_header: int = 0, source_qpn: int = 0,
                 hash_conf: Any = None, ind_table: Any = None, send_ops_flags: int = 0) -> None:
        self.qp_type = qp_type
        self.qp_context = qp_context
        self.send_cq = scq
        self.recv_cq = rcq
        self.srq = srq
        self.cap = cap if cap is not None else QPCap()
        self.sq_sig_all = sq_sig_all
        self.comp_mask = comp_mask
        self.pd = pd
        self.xrcd = xrcd
        self.create_flags = create_flags
        self.max_tso_header = max_tso_header
        self.source_qpn = source_qpn
        self.hash_conf = hash_conf
        self.ind_table = ind_table
        self.send_ops_flags = send_ops_flags


def _as_basic(init_attr: QPInitAttrEx) -> _qp.QPInitAttr:
    return _qp.QPInitAttr(qp_type=init_attr.qp_type, qp_context=init_attr.qp_context, scq=init_attr.send_cq,
                          rcq=init_attr.recv_cq, srq=init_attr.srq, cap=init_attr.cap,
                          sq_sig_all=init_attr.sq_sig_all)


class QP(_qp.QP):
    """``QP(creator, init_attr, qp_attr=None)``: ``creator`` is a PD, or a Context with ``init_attr.pd`` set."""

    def __init__(self, creator: Any, init_attr: Any, qp_attr: Any = None) -> None:
        self.send_ops_flags = 0
        if isinstance(init_attr, QPInitAttrEx):
            mask = init_attr.comp_mask
            if init_attr.qp_type not in TYPES:
                raise PyverbsRDMAError(f"Failed to create QP: type {init_attr.qp_type} is not supported "
                                       "(the soft engine has RC, UC and UD)", errno.EOPNOTSUPP)
            if mask & ~SUPPORTED_COMP_MASK:
                raise PyverbsRDMAError(f"Failed to create QP: comp_mask {mask & ~SUPPORTED_COMP_MASK:#x} is not "
                                       "supported", errno.EOPNOTSUPP)
            if mask & e.IBV_QP_INIT_ATTR_CREATE_FLAGS and init_attr.create_flags:
                raise PyverbsRDMAError(f"Failed to create QP: create_flags {init_attr.create_flags:#x} are not "
                                       "supported", errno.EOPNOTSUPP)
            if mask & e.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS:
                if init_attr.send_ops_flags & ~SUPPORTED_SEND_OPS:
                    raise PyverbsRDMAError(f"Failed to create QP: send_ops_flags "
                                           f"{init_attr.send_ops_flags & ~SUPPORTED_SEND_OPS:#x} are not supported",
                                           errno.EOPNOTSUPP)
                self.send_ops_flags = init_attr.send_ops_flags
            pd = init_attr.pd if mask & e.IBV_QP_INIT_ATTR_PD and init_attr.pd is not None else creator
            if not hasattr(pd, "handle"):
                raise PyverbsRDMAError("Failed to create QP: IBV_QP_INIT_ATTR_PD and a PD are required", errno.EINVAL)
            basic = _as_basic(init_attr)
        else:
            if init_attr.qp_type not in TYPES:
                raise PyverbsRDMAError(f"Failed to create QP: type {init_attr.qp_type} is not supported "
                                       "(the soft engine has RC, UC and UD)", errno.EOPNOTSUPP)
            pd, basic = creator, init_attr
        super().__init__(pd, basic, qp_attr)
        self.init_attr = init_attr

    def query(self, attr_mask: int = 0) -> tuple[Any, Any]:
        attr, _ = super().query(attr_mask)
        ia = QPInitAttr(qp_type=self.qp_type, scq=self.scq, rcq=self.rcq, srq=self.srq, cap=attr.cap,
                        sq_sig_all=int(self.sq_sig_all))
        return attr, ia

    # ------------------------------------------------------------------ posting, with binds
    def post_send(self, wr: Any, bad_wr: Any = None) -> None:
        """``ibv_post_send``; BIND_MW requests are executed here, LOCAL_INV/SEND_WITH_INV take their rkey
        from ``imm_data`` when ``invalidate_rkey`` is unset (the union of libibverbs)."""
        while wr is not None:
            nxt = wr.next_wr
            if wr.opcode == e.IBV_WR_BIND_MW:
                self._bind(wr.wr_id, wr.send_flags, getattr(wr, "bind_mw", None), wr.rkey,
                           getattr(wr, "bind_info", None))
            else:
                if wr.opcode in (e.IBV_WR_LOCAL_INV, e.IBV_WR_SEND_WITH_INV) and not wr.invalidate_rkey:
                    wr.invalidate_rkey = int(wr.imm_data)
                wr.next_wr = None  # one at a time, so a bind later in the chain keeps its place
                try:
                    super().post_send(wr, bad_wr)
                finally:
                    wr.next_wr = nxt
            wr = nxt

    def bind_mw(self, mw: Any, mw_bind: Any) -> None:
        """``ibv_bind_mw`` (type 1 windows): posts the bind; on success ``mw.rkey`` is the new key."""
        if mw.type != e.IBV_MW_TYPE_1:
            raise PyverbsRDMAError("Failed to bind MW: ibv_bind_mw binds type 1 windows only", errno.EINVAL)
        info = mw_bind.bind_info
        if info.mr is None and (info.addr or info.length) or info.mw_access_flags & e.IBV_ACCESS_ZERO_BASED:
            raise PyverbsRDMAError("Failed to bind MW", errno.EINVAL)
        self._bind(mw_bind.wr_id, mw_bind.send_flags, mw, inc_rkey(mw.rkey), info)

    def _bind(self, wr_id: int, send_flags: int, mw: Any, rkey: int, info: Any) -> None:
        if self.qp_state != e.IBV_QPS_RTS:
            raise PyverbsRDMAError(f"Failed to post send: the QP is in {_enums.QP_STATE_NAMES.get(self.qp_state)}, "
                                   "not RTS", errno.EINVAL)
        if mw is None or info is None:
            raise PyverbsRDMAError("Failed to post send: a BIND_MW request needs set_bind_wr(mw, bind_info)",
                                   errno.EINVAL)
        # The bind executes after every earlier WQE (rxe_requester handles it in order): let them finish.
        self.dev.scheduler.progress(lambda: not self.engine.sq)
        if self.engine.sq:
            raise PyverbsRDMAError("Failed to post BIND_MW: earlier work requests did not complete", errno.EBUSY)
        why = mw.check_bind(self, info.mr, info.addr, info.length, info.mw_access_flags)
        if why is None and info.length and info.mr is not None and self.dev.mrs.get(info.mr.lkey >> 8) is not info.mr:
            why = "the MR is not registered"
        if why is None:
            mw.bind(self, info.mr, info.addr, info.length, info.mw_access_flags, rkey)
            if mw.type == e.IBV_MW_TYPE_1:
                mw.rkey = (mw.rkey & ~0xFF) | (rkey & 0xFF)
            if self.sq_sig_all or send_flags & e.IBV_SEND_SIGNALED:
                self.scq.push(WC(wr_id, e.IBV_WC_SUCCESS, e.IBV_WC_BIND_MW, qp_num=self.qp_num))
            return
        if self.dev.tracing:
            self.dev.trace(self.qp_num, "bind_mw refused", why=why)
        self.scq.push(WC(wr_id, e.IBV_WC_MW_BIND_ERR, e.IBV_WC_BIND_MW, qp_num=self.qp_num))
        self.to_error()

    def query_data_in_order(self, op: int, flags: int = 0) -> int:
        """``ibv_query_qp_data_in_order``: 1 - the soft engine places an RC/UC message's data in order."""
        return 1 if self.qp_type in (e.IBV_QPT_RC, e.IBV_QPT_UC) else 0


class QPEx(QP):
    """``QPEx(creator, init_attr_ex, qp_attr=None)``: a QP with the ``wr_*`` posting interface."""

    def __init__(self, creator: Any, init_attr: Any, qp_attr: Any = None) -> None:
        super().__init__(creator, init_attr, qp_attr)
        self.wr_id = 0
        self.wr_flags = 0
        self.comp_mask = 0
        self.ind_table = None
        self._batch: list[SendWR] | None = None

    # ------------------------------------------------------------------ batch
    def wr_start(self) -> None:
        self._batch = []

    def wr_complete(self) -> None:
        batch, self._batch = self._batch, None
        if batch is None:
            raise PyverbsRDMAError("ibv_wr_complete failed.", errno.EINVAL)
        if not batch:
            return
        for a, b in zip(batch, batch[1:], strict=False):
            a.next_wr = b
        try:
            self.post_send(batch[0])
        except PyverbsRDMAError as ex:
            raise PyverbsRDMAError("ibv_wr_complete failed.", ex.error_code) from ex

    def wr_abort(self) -> None:
        self._batch = None

    def _new(self, flag: int, opcode: int) -> SendWR:
        if self._batch is None:
            raise PyverbsUserError("wr_start() must be called before posting with the wr_* functions")
        if not self.send_ops_flags & flag:
            raise PyverbsUserError(f"this QPEx was not created with send_ops_flags including {flag:#x}")
        wr = SendWR(wr_id=self.wr_id, opcode=opcode, send_flags=self.wr_flags)
        self._batch.append(wr)
        return wr

    def _cur(self) -> SendWR:
        if not self._batch:
            raise PyverbsUserError("no work request started: call a wr_<opcode>() function first")
        return self._batch[-1]

    # ------------------------------------------------------------------ opcodes
    def wr_send(self) -> None:
        self._new(e.IBV_QP_EX_WITH_SEND, e.IBV_WR_SEND)

    def wr_send_imm(self, data: int) -> None:
        wr = self._new(e.IBV_QP_EX_WITH_SEND_WITH_IMM, e.IBV_WR_SEND_WITH_IMM)
        wr.imm_data = socket.htonl(data & 0xFFFFFFFF)  # pyverbs: htobe32(data)

    def wr_send_inv(self, invalidate_rkey: int) -> None:
        wr = self._new(e.IBV_QP_EX_WITH_SEND_WITH_INV, e.IBV_WR_SEND_WITH_INV)
        wr.invalidate_rkey = invalidate_rkey

    def wr_local_inv(self, invalidate_rkey: int) -> None:
        wr = self._new(e.IBV_QP_EX_WITH_LOCAL_INV, e.IBV_WR_LOCAL_INV)
        wr.invalidate_rkey = invalidate_rkey

    def wr_rdma_write(self, rkey: int, remote_addr: int) -> None:
        self._new(e.IBV_QP_EX_WITH_RDMA_WRITE, e.IBV_WR_RDMA_WRITE).set_wr_rdma(rkey, remote_addr)

    def wr_rdma_write_imm(self, rkey: int, remote_addr: int, data: int) -> None:
        wr = self._new(e.IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM, e.IBV_WR_RDMA_WRITE_WITH_IMM)
        wr.set_wr_rdma(rkey, remote_addr)
        wr.imm_data = socket.htonl(data & 0xFFFFFFFF)

    def wr_rdma_read(self, rkey: int, remote_addr: int) -> None:
        self._new(e.IBV_QP_EX_WITH_RDMA_READ, e.IBV_WR_RDMA_READ).set_wr_rdma(rkey, remote_addr)

    def wr_atomic_cmp_swp(self, rkey: int, remote_addr: int, compare: int, swap: int) -> None:
        wr = self._new(e.IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP, e.IBV_WR_ATOMIC_CMP_AND_SWP)
        wr.set_wr_atomic(rkey, remote_addr, compare, swap)

    def wr_atomic_fetch_add(self, rkey: int, remote_addr: int, add: int) -> None:
        wr = self._new(e.IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD, e.IBV_WR_ATOMIC_FETCH_AND_ADD)
        wr.set_wr_atomic(rkey, remote_addr, add)

    def wr_atomic_write(self, rkey: int, remote_addr: int, atomic_wr: bytes) -> None:
        self._new(e.IBV_QP_EX_WITH_ATOMIC_WRITE, e.IBV_WR_ATOMIC_WRITE)

    def wr_bind_mw(self, mw: Any, rkey: int, bind_info: Any) -> None:
        wr = self._new(e.IBV_QP_EX_WITH_BIND_MW, e.IBV_WR_BIND_MW)
        wr.bind_mw, wr.bind_info, wr.rkey = mw, bind_info, rkey

    def wr_send_tso(self, hdr: Any, hdr_sz: int, mss: int) -> None:
        self._new(e.IBV_QP_EX_WITH_TSO, e.IBV_WR_TSO)

    # ------------------------------------------------------------------ data and address
    def wr_set_sge(self, sge: SGE) -> None:
        wr = self._cur()
        wr.sg, wr.num_sge = [sge], 1

    def wr_set_sge_list(self, num_sge: int, sg_list: list[SGE]) -> None:
        wr = self._cur()
        if num_sge > len(sg_list):
            raise PyverbsUserError(f"num_sge is {num_sge} but only {len(sg_list)} SGEs were given")
        wr.sg, wr.num_sge = list(sg_list[:num_sge]), num_sge

    def wr_set_inline_data(self, addr: int, length: int) -> None:
        """Inline data from registered memory at ``addr`` (the engine copies it when posting)."""
        wr = self._cur()
        wr.sg, wr.num_sge = [SGE(addr, length, 0)], 1
        wr.send_flags |= e.IBV_SEND_INLINE

    def wr_set_inline_data_list(self, num_buf: int, buf_list: list[Any]) -> None:
        wr = self._cur()
        wr.sg = [SGE(b[0], b[1], 0) if isinstance(b, tuple) else b for b in buf_list[:num_buf]]
        wr.num_sge = len(wr.sg)
        wr.send_flags |= e.IBV_SEND_INLINE

    def wr_set_ud_addr(self, ah: Any, remote_qpn: int, remote_qkey: int) -> None:
        self._cur().set_wr_ud(ah, remote_qpn, remote_qkey)

    def wr_set_xrc_srqn(self, remote_srqn: int) -> None:
        raise PyverbsRDMAError("XRC is not supported by the soft engine", errno.EOPNOTSUPP)
