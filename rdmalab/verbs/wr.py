"""``pyverbs.wr``: SGE, RecvWR and SendWR.

``imm_data`` is taken as pyverbs takes it: the value stored in the (big-endian) C field, so
programs pass ``socket.htonl(x)`` and read ``socket.ntohl(wc.imm_data)``.  ``invalidate_rkey``
(SEND_WITH_INV, LOCAL_INV) shares that union in libibverbs; here it is its own attribute.
"""

from __future__ import annotations

from typing import Any

from rdmalab.verbs import enums as e
from rdmalab.verbs.pyverbs_error import PyverbsUserError


class SGE:
    """``SGE(addr, length, lkey)``."""

    def __init__(self, addr: int, length: int, lkey: int) -> None:
        self.addr = addr
        self.length = length
        self.lkey = lkey

    def __repr__(self) -> str:
        return f"SGE(addr={self.addr:#x}, length={self.length}, lkey={self.lkey:#x})"


def _sg_list(num_sge: int, sg: list[SGE] | None) -> list[SGE]:
    sg = list(sg or [])
    if num_sge > len(sg):
        raise PyverbsUserError(f"num_sge is {num_sge} but only {len(sg)} SGEs were given")
    return sg[:num_sge]


class RecvWR:
    """``RecvWR(wr_id=0, num_sge=0, sg=None, next_wr=None)``."""

    def __init__(self, wr_id: int = 0, num_sge: int = 0, sg: list[SGE] | None = None, next_wr: Any = None) -> None:
        self.wr_id = wr_id
        self.sg = _sg_list(num_sge, sg)
        self.num_sge = num_sge
        self.next_wr = next_wr


class SendWR:
    """``SendWR(wr_id=0, opcode=IBV_WR_SEND, num_sge=0, imm_data=0, sg=None, send_flags=IBV_SEND_SIGNALED, next_wr=None)``."""

    def __init__(self, wr_id: int = 0, opcode: int = e.IBV_WR_SEND, num_sge: int = 0, imm_data: int = 0,
                 sg: list[SGE] | None = None, send_flags: int = e.IBV_SEND_SIGNALED, next_wr: Any = None) -> None:
        self.wr_id = wr_id
        self.opcode = opcode
        self.sg = _sg_list(num_sge, sg)
        self.num_sge = num_sge
        self.imm_data = imm_data
        self.send_flags = send_flags
        self.next_wr = next_wr
        self.invalidate_rkey = 0
        self.remote_addr = 0
        self.rkey = 0
        self.compare_add = 0
        self.swap = 0
        self.ah: Any = None
        self.remote_qpn = 0
        self.remote_qkey = 0

    def set_wr_rdma(self, rkey: int, addr: int) -> None:
        self.rkey, self.remote_addr = int(rkey), int(addr)

    def set_wr_atomic(self, rkey: int, addr: int, compare_add: int, swap: int = 0) -> None:
        self.rkey, self.remote_addr = int(rkey), int(addr)
        self.compare_add, self.swap = compare_add, swap

    def set_wr_ud(self, ah: Any, rqpn: int, rqkey: int) -> None:
        self.ah, self.remote_qpn, self.remote_qkey = ah, rqpn, rqkey
