"""``pyverbs.wr`` additions: ``SendWR.set_bind_wr`` (type 2 memory windows) and the invalidate union.

In libibverbs ``imm_data`` and ``invalidate_rkey`` share a union, so pyverbs programs set the rkey
of a LOCAL_INV or SEND_WITH_INV through ``imm_data``; rdmalab's :class:`~rdmalab.verbs.wr.SendWR`
keeps ``invalidate_rkey`` apart, and :meth:`SendWR.inv_rkey` reads whichever was set.
"""

from __future__ import annotations

from typing import Any

from rdmalab.verbs import libibverbs_enums as e
from rdmalab.verbs import wr as _wr
from rdmalab.verbs.base import inc_rkey


class SendWR(_wr.SendWR):
    """``SendWR(wr_id=0, opcode=IBV_WR_SEND, num_sge=0, imm_data=0, sg=None, send_flags=IBV_SEND_SIGNALED, next_wr=None)``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bind_mw: Any = None
        self.bind_info: Any = None

    def set_bind_wr(self, mw: Any, bind_info: Any) -> None:
        """A BIND_MW work request for ``mw`` (type 2): the new rkey is ``inc_rkey(mw.rkey)``, read back as ``rkey``."""
        self.bind_mw = mw
        self.bind_info = bind_info
        self.rkey = inc_rkey(mw.rkey)

    def inv_rkey(self) -> int:
        """The rkey a LOCAL_INV / SEND_WITH_INV names (``invalidate_rkey``, else the union's ``imm_data``)."""
        if self.opcode in (e.IBV_WR_LOCAL_INV, e.IBV_WR_SEND_WITH_INV) and not self.invalidate_rkey:
            return int(self.imm_data)
        return int(self.invalidate_rkey)
