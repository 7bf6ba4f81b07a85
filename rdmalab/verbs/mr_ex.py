"""``pyverbs.mr`` additions: ``MR.rereg``, memory windows, DM and DMA-buf MRs.

* ``MR.rereg`` fails with ``EOPNOTSUPP`` and the message pyverbs gives for
  ``IBV_REREG_MR_ERR_CMD``, which is what rxe on 6.1 does (it has no ``rereg_user_mr``), so the
  suite's rereg tests skip here as there.
* Memory windows (``MW``), device-memory MRs (``DMMR``) and DMA-buf MRs (``DmaBufMR``) are not
  in the soft engine: creating them fails with ``EOPNOTSUPP``.  rxe has memory windows; this is
  one of the listed differences (docs/pyverbs.md).
"""

from __future__ import annotations

import errno
from typing import Any

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
    """``MWBind(mw_bind_info, send_flags, wr_id=0)``."""

    def __init__(self, mw_bind_info: MWBindInfo, send_flags: int, wr_id: int = 0) -> None:
        self.bind_info = mw_bind_info
        self.send_flags = send_flags
        self.wr_id = wr_id


class MW:
    """Memory windows: not in the soft engine; ``MW(pd, mw_type)`` fails with EOPNOTSUPP."""

    def __init__(self, pd: Any, mw_type: int) -> None:
        raise PyverbsRDMAError("Failed to allocate MW", errno.EOPNOTSUPP)


class DMMR:
    """Device-memory MRs: soft devices have no device memory."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise PyverbsRDMAError("Failed to register a device MR", errno.EOPNOTSUPP)


class DmaBufMR:
    """DMA-buf MRs: not in the soft engine (rxe 6.1 has no ``reg_user_mr_dmabuf`` either)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise PyverbsRDMAError("Failed to register a dma-buf MR", errno.EOPNOTSUPP)
