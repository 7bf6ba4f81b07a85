"""The extended CQ of ``pyverbs.cq``: ``CqInitAttrEx``, ``CQEX``, ``PollCqAttr``; and ``CQ.resize``.

``CQEX`` is libibverbs' ``ibv_cq_ex`` (verbs.h): ``start_poll`` / ``poll_next`` / ``end_poll``
walk the completions one at a time, and ``status``, ``wr_id`` and the ``read_*`` accessors read
the current one.  ``start_poll`` and ``poll_next`` return 0 or ``ENOENT`` (2) when there is none,
as libibverbs does; like ``CQ.poll``, an empty ``start_poll`` first runs the simulated fabric
until a completion arrives or nothing is left to run.

The ``wc_flags`` a CQEX accepts are rxe's (providers/rxe/rxe.c, ``RXE_SUP_WC_EX_FLAGS``):
byte_len, imm, qp_num, src_qp, slid, sl, dlid_path_bits; others (timestamps, CVLAN, flow tag,
TM info) fail with ``EOPNOTSUPP``, as on rxe.  Reading a field whose flag was not requested is
a ``PyverbsUserError`` here (libibverbs would call a NULL function pointer).

``CQ`` here is :class:`rdmalab.verbs.cq.CQ` with pyverbs' checks on creation (``cqe`` and
``comp_vector`` in range, else ``EINVAL``), ``comp_channel`` and ``resize``.
"""

from __future__ import annotations

import errno
from typing import Any

from rdmalab.verbs import cq as _cq
from rdmalab.verbs import libibverbs_enums as e
from rdmalab.verbs.pyverbs_error import PyverbsRDMAError, PyverbsUserError

MAX_CQE = 1 << 20
NUM_COMP_VECTORS = 1
SUPPORTED_WC_FLAGS = (e.IBV_WC_EX_WITH_BYTE_LEN | e.IBV_WC_EX_WITH_IMM | e.IBV_WC_EX_WITH_QP_NUM
                      | e.IBV_WC_EX_WITH_SRC_QP | e.IBV_WC_EX_WITH_SLID | e.IBV_WC_EX_WITH_SL
                      | e.IBV_WC_EX_WITH_DLID_PATH_BITS)
ENOENT = errno.ENOENT


def _check(cqe: Any, comp_vector: int, what: str) -> None:
    if not 1 <= cqe <= MAX_CQE:
        raise PyverbsRDMAError(f"Failed to create {what} with {cqe} entries (1..{MAX_CQE})", errno.EINVAL)
    if not 0 <= comp_vector < NUM_COMP_VECTORS:
        raise PyverbsRDMAError(f"Failed to create {what}: comp_vector {comp_vector} (the device has "
                               f"{NUM_COMP_VECTORS})", errno.EINVAL)


class CQ(_cq.CQ):
    """``CQ(ctx, cqe, cq_context=None, channel=None, comp_vector=0)``."""

    def __init__(self, ctx: Any, cqe: int, cq_context: Any = None, channel: Any = None, comp_vector: int = 0) -> None:
        _check(cqe, comp_vector, "CQ")
        super().__init__(ctx, int(cqe), cq_context, channel, comp_vector)

    @property
    def comp_channel(self) -> Any:
        return self.channel

    def __enter__(self) -> CQ:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def resize(self, cqe: int) -> None:
        """``ibv_resize_cq``: ``EINVAL`` if out of range or smaller than the completions it holds."""
        if not 1 <= cqe <= MAX_CQE or cqe < len(self._q):
            raise PyverbsRDMAError(f"Failed to resize CQ to {cqe} entries ({len(self._q)} held)", errno.EINVAL)
        self.cqe = int(cqe)


class PollCqAttr:
    """``PollCqAttr(comp_mask=0)``: the ``ibv_poll_cq_attr`` of ``start_poll`` (must be 0)."""

    def __init__(self, comp_mask: int = 0) -> None:
        self.comp_mask = comp_mask


class CqInitAttrEx:
    """``CqInitAttrEx(cqe=100, channel=None, comp_vector=0, wc_flags=0, comp_mask=0, flags=0, parent_domain=None)``."""

    def __init__(self, cqe: int = 100, channel: Any = None, comp_vector: int = 0, wc_flags: int = 0,
                 comp_mask: int = 0, flags: int = 0, parent_domain: Any = None) -> None:
        self.cqe = cqe
        self.comp_channel = channel
        self.comp_vector = comp_vector
        self.wc_flags = wc_flags
        self.comp_mask = comp_mask
        self.flags = flags
        self.parent_domain = parent_domain
        self.cq_context = None


class CQEX(_cq.CQ):
    """``CQEX(ctx, init_attr)``: a CQ read with start_poll / poll_next / end_poll."""

    def __init__(self, ctx: Any, init_attr: CqInitAttrEx | None = None) -> None:
        a = init_attr if init_attr is not None else CqInitAttrEx()
        if a.wc_flags & ~SUPPORTED_WC_FLAGS:
            raise PyverbsRDMAError(f"Failed to create extended CQ: wc_flags {a.wc_flags & ~SUPPORTED_WC_FLAGS:#x} "
                                   "not supported", errno.EOPNOTSUPP)
        if a.comp_mask & ~(e.IBV_CQ_INIT_ATTR_MASK_FLAGS | e.IBV_CQ_INIT_ATTR_MASK_PD):
            raise PyverbsRDMAError(f"Failed to create extended CQ: comp_mask {a.comp_mask:#x}", errno.EINVAL)
        if a.comp_mask & e.IBV_CQ_INIT_ATTR_MASK_FLAGS and a.flags:
            # rxe: ibv_cmd_create_cq_ex passes flags to the kernel, which accepts none for rxe
            raise PyverbsRDMAError(f"Failed to create extended CQ: flags {a.flags:#x} not supported",
                                   errno.EOPNOTSUPP)
        if a.comp_mask & e.IBV_CQ_INIT_ATTR_MASK_PD or a.parent_domain is not None:
            raise PyverbsRDMAError("Failed to create extended CQ: parent domains are not supported",
                                   errno.EOPNOTSUPP)
        _check(a.cqe, a.comp_vector, "extended CQ")
        super().__init__(ctx, int(a.cqe), None, a.comp_channel, a.comp_vector)
        self.wc_flags = a.wc_flags
        self._cur: _cq.WC | None = None
        self._polling = False

    @property
    def comp_channel(self) -> Any:
        return self.channel

    def __enter__(self) -> CQEX:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ the poll loop
    def start_poll(self, attr: PollCqAttr | None = None) -> int:
        if attr is not None and attr.comp_mask:
            return errno.EINVAL
        if self._polling:
            raise PyverbsUserError("start_poll called twice without end_poll")
        q = self._q
        if not q:
            self.ctx.device.scheduler.progress(lambda: bool(q))
        if not q:
            return ENOENT
        self._polling = True
        self._cur = q.popleft()
        return 0

    def poll_next(self) -> int:
        if not self._polling:
            raise PyverbsUserError("poll_next called without a successful start_poll")
        q = self._q
        if not q:
            self.ctx.device.scheduler.progress(lambda: bool(q))
        if not q:
            return ENOENT
        self._cur = q.popleft()
        return 0

    def end_poll(self) -> None:
        self._polling = False
        self._cur = None

    # ------------------------------------------------------------------ the current completion
    def _wc(self) -> _cq.WC:
        if self._cur is None:
            raise PyverbsUserError("no current completion: call start_poll first")
        return self._cur

    def _need(self, flag: int, name: str) -> _cq.WC:
        if not self.wc_flags & flag:
            raise PyverbsUserError(f"read_{name}: this CQEX was created without the wc_flags bit for it")
        return self._wc()

    @property
    def status(self) -> int:
        return self._wc().status

    @property
    def wr_id(self) -> int:
        return self._wc().wr_id

    def read_opcode(self) -> int:
        return self._wc().opcode

    def read_vendor_err(self) -> int:
        return self._wc().vendor_err

    def read_wc_flags(self) -> int:
        return self._wc().wc_flags

    def read_byte_len(self) -> int:
        return self._need(e.IBV_WC_EX_WITH_BYTE_LEN, "byte_len").byte_len

    def read_imm_data(self) -> int:
        return self._need(e.IBV_WC_EX_WITH_IMM, "imm_data").imm_data

    def read_qp_num(self) -> int:
        return self._need(e.IBV_WC_EX_WITH_QP_NUM, "qp_num").qp_num

    def read_src_qp(self) -> int:
        return self._need(e.IBV_WC_EX_WITH_SRC_QP, "src_qp").src_qp

    def read_slid(self) -> int:
        return self._need(e.IBV_WC_EX_WITH_SLID, "slid").slid

    def read_sl(self) -> int:
        return self._need(e.IBV_WC_EX_WITH_SL, "sl").sl

    def read_dlid_path_bits(self) -> int:
        return self._need(e.IBV_WC_EX_WITH_DLID_PATH_BITS, "dlid_path_bits").dlid_path_bits

    def _absent(self, name: str) -> Any:
        raise PyverbsUserError(f"read_{name}: not supported by the soft engine (as on rxe)")

    def read_timestamp(self) -> int:
        return int(self._absent("timestamp"))

    def read_completion_wallclock_ns(self) -> int:
        return int(self._absent("completion_wallclock_ns"))

    def read_cvlan(self) -> int:
        return int(self._absent("cvlan"))

    def read_flow_tag(self) -> int:
        return int(self._absent("flow_tag"))

    def read_tm_info(self) -> Any:
        return self._absent("tm_info")
