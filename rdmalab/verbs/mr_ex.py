"""``pyverbs.mr`` additions: ``MR.rereg``, memory windows, DM and DMA-buf MRs.

* ``MR.rereg`` fails with ``EOPNOTSUPP`` and the message pyverbs gives for
  ``IBV_REREG_MR_ERR_CMD``, which is what rxe on 6.1 does (it has no ``rereg_user_mr``), so the
  suite's rereg tests skip here as there.
* Memory windows (``MW``, types 1 and 2) work as on rxe, except that a type 2 window is not tied
  to the QP that bound it when a remote access checks it (docs/pyverbs.md).
* Device-memory MRs (``DMMR``) and DMA-buf MRs (``DmaBufMR``) are not in the soft engine:
  creating them fails with ``EOPNOTSUPP``.
"""

from __future__ import annotations

import errno
from typing import Any

from rdmalab.verbs import libibverbs_enums as e
from rdmalab.verbs import mr as _mr
from rdmalab.verbs.pyverbs_error import PyverbsRDMAError


class MR(_mr.MR):
    """``MR(pd, length, access, address=None, implicit=False)``, plus ``rereg``."""

    def __init__(self, pd: Any, length: int, access: int, address: Any = None, implicit: bool = False,
                 **kwargs: Any) -> None:
        try:
            super().__init__(pd, int(length), int(access), address=address, implicit=implicit)
        except PyverbsRDMAError as ex:
            msg = ex.msg if ex.msg.startswith("Failed to register a MR") else f"Failed to register a MR: {ex.msg}"
            raise PyverbsRDMAError(msg.split(". Errno:")[0], ex.error_code) from ex

    def rereg(self, flags: int, pd: Any = None, addr: int = 0, length: int = 0, access: int = 0) -> None:
        raise PyverbsRDMAError("Failed to rereg MR: IBV_REREG_MR_ERR_CMD", errno.EOPNOTSUPP)


class MWBindInfo:
    """``MWBindInfo(mr, addr, length, mw_access_flags)``."""

    def __init__(self, mr: Any, addr: int, length: int, mw_access_flags: int) -> None:
        self.mr = mr
        self.addr = addr
        self.length = length
        self.mw_access_flags = mw_access_flags


class MWBind:
    """``MWBind(mw_bind_info, send_flags, wr_id=0)``: what ``QP.bind_mw`` posts for a type 1 window."""

    def __init__(self, mw_bind_info: MWBindInfo, send_flags: int, wr_id: int = 0) -> None:
        self.bind_info = mw_bind_info
        self.send_flags = send_flags
        self.wr_id = wr_id


MW_FREE, MW_VALID, MW_INVALID = 0, 1, 2  # rxe_mw.c's RXE_MW_STATE_*


class MW:
    """``MW(pd, mw_type)``: a memory window of type 1 or 2 (IBA 10.6.7; rxe ``rxe_mw.c``).

    The window lives in the device's key table next to the MRs, and answers the engine's remote
    key checks as an MR would: ``rkey``, ``pd``, ``access``, the bound range (``buf``, ``length``)
    and ``view``, a slice of the bound MR's memory.  It has no lkey.  A type 1 window starts
    valid with nothing bound and is bound with ``QP.bind_mw``; a type 2 window starts free and is
    bound by an ``IBV_WR_BIND_MW`` work request, invalidated by LOCAL_INV or SEND_WITH_INV.
    Closing it (``ibv_dealloc_mw``) removes its key.
    """

    def __init__(self, pd: Any, mw_type: int) -> None:
        if mw_type not in (e.IBV_MW_TYPE_1, e.IBV_MW_TYPE_2):
            raise PyverbsRDMAError(f"Failed to allocate MW: type {mw_type} is not 1 or 2", errno.EINVAL)
        self.pd = pd
        self.device = pd.device
        self.type = mw_type
        _lkey, self.rkey = self.device.alloc_mr_keys(self)
        self.index = self.rkey >> 8
        self.lkey = -1  # a window is never a local key
        self.state = MW_VALID if mw_type == e.IBV_MW_TYPE_1 else MW_FREE
        self._unbind()

    def _unbind(self) -> None:
        self.access = 0
        self.buf = 0
        self.length = 0
        self.mr: Any = None
        self.qp: Any = None
        self.view = memoryview(bytearray())

    @property
    def handle(self) -> int:
        return int(self.index)

    @property
    def valid(self) -> bool:
        """What the remote key check asks (rxe_lookup_mw: valid state, something bound)."""
        return self.state == MW_VALID and self.length > 0

    def check_bind(self, qp: Any, mr: Any, addr: int, length: int, access: int) -> str | None:
        """Why a bind is refused (rxe_check_bind_mw, IBA C10-72..75, o10-36.2.2, o10-37.2.30/40), or None."""
        if self.type == e.IBV_MW_TYPE_1:
            if self.state != MW_VALID:
                return "a type 1 MW must be valid to be bound"
            if access & e.IBV_ACCESS_ZERO_BASED:
                return "a type 1 MW cannot be zero based"
        else:
            if self.state != MW_FREE:
                return "a type 2 MW must be free to be bound"
            if qp.pd is not self.pd:
                return "the QP and the type 2 MW are in different PDs"
            if mr is None or length == 0:
                return "a type 2 MW cannot be bound with no MR or zero length"
        if mr is None or length == 0:
            return None
        if mr.pd is not self.pd:
            return "the MR and the MW are in different PDs"
        if mr.access & e.IBV_ACCESS_ZERO_BASED:
            return "the MR is zero based"
        if not mr.access & e.IBV_ACCESS_MW_BIND:
            return "the MR lacks IBV_ACCESS_MW_BIND"
        if access & (e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_ATOMIC) and \
                not mr.access & e.IBV_ACCESS_LOCAL_WRITE:
            return "a writable MW needs an MR with IBV_ACCESS_LOCAL_WRITE"
        if addr < mr.buf or addr + length > mr.buf + mr.length:
            return "the window is outside the MR"
        return None

    def bind(self, qp: Any, mr: Any, addr: int, length: int, access: int, new_rkey: int) -> None:
        """rxe_do_bind_mw: take the key byte of ``new_rkey`` and the range of ``mr``."""
        self.rkey = (self.rkey & ~0xFF) | (new_rkey & 0xFF)
        self._unbind()
        self.state = MW_VALID
        self.access = access
        if length:
            self.mr, self.buf, self.length = mr, addr, length
            off = addr - mr.buf
            self.view = mr.view[off:off + length]
        if self.type == e.IBV_MW_TYPE_2:
            self.qp = qp

    def invalidate(self) -> None:
        """LOCAL_INV / SEND_WITH_INV of the window's rkey: back to free (rxe_do_invalidate_mw)."""
        if self.type == e.IBV_MW_TYPE_2:
            self._unbind()
            self.state = MW_FREE

    def close(self) -> None:
        if self.device.mrs.get(self.index) is self:
            del self.device.mrs[self.index]
        self._unbind()
        self.state = MW_INVALID

    def __enter__(self) -> MW:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class DMMR:
    """Device-memory MRs: soft devices have no device memory."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise PyverbsRDMAError("Failed to register a device MR", errno.EOPNOTSUPP)


class DmaBufMR:
    """DMA-buf MRs: not in the soft engine (rxe 6.1 has no ``reg_user_mr_dmabuf`` either)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise PyverbsRDMAError("Failed to register a dma-buf MR", errno.EOPNOTSUPP)
