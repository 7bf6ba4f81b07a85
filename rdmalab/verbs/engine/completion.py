"""The engine's completion record: one finished work request, with pyverbs' fields.

The engine builds these and hands them to a completion queue (``QPCore.complete_send`` and
``complete_recv``); :mod:`rdmalab.verbs.cq` hands them to programs as its ``WC`` (the same
class).  The fields are libibverbs' ``struct ibv_wc`` (``verbs.h``), as pyverbs names them.
"""

from __future__ import annotations

from rdmalab.verbs import enums as e

WC_OPCODE_NAMES = {0: "SEND", 1: "RDMA_WRITE", 2: "RDMA_READ", 3: "COMP_SWAP", 4: "FETCH_ADD", 5: "BIND_MW",
                   6: "LOCAL_INV", 128: "RECV", 129: "RECV_RDMA_WITH_IMM"}


class WC:
    """A work completion, with pyverbs' fields."""

    def __init__(self, wr_id: int = 0, status: int = 0, opcode: int = 0, vendor_err: int = 0, byte_len: int = 0,
                 qp_num: int = 0, src_qp: int = 0, imm_data: int = 0, wc_flags: int = 0, pkey_index: int = 0,
                 slid: int = 0, sl: int = 0, dlid_path_bits: int = 0) -> None:
        self.wr_id = wr_id
        self.status = status
        self.opcode = opcode
        self.vendor_err = vendor_err
        self.byte_len = byte_len
        self.qp_num = qp_num
        self.src_qp = src_qp
        self.imm_data = imm_data
        self.wc_flags = wc_flags
        self.pkey_index = pkey_index
        self.slid = slid
        self.sl = sl
        self.dlid_path_bits = dlid_path_bits
        self._sgid: int | None = None  # UD receives: the sender's GID (for AH(pd, wc=...))
        self._dgid: int | None = None

    @property
    def invalidated_rkey(self) -> int:
        return self.imm_data

    def __str__(self) -> str:
        return (f"WC(wr_id={self.wr_id}, status={e.ibv_wc_status_str(self.status)}, "
                f"opcode={WC_OPCODE_NAMES.get(self.opcode, self.opcode)}, byte_len={self.byte_len}, "
                f"qp_num={self.qp_num:#x}, src_qp={self.src_qp:#x}, imm_data={self.imm_data:#x}, "
                f"wc_flags={self.wc_flags:#x})")

    __repr__ = __str__
