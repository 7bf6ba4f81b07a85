"""Work queue entries as the engine keeps them (rxe ``rxe_send_wqe``/``rxe_recv_wqe``, simplified)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rdmalab.verbs import enums as e

# wr opcode -> wc opcode (IBA 11.4.2.1; libibverbs)
WC_OPCODE: dict[int, int] = {
    e.IBV_WR_SEND: e.IBV_WC_SEND, e.IBV_WR_SEND_WITH_IMM: e.IBV_WC_SEND, e.IBV_WR_SEND_WITH_INV: e.IBV_WC_SEND,
    e.IBV_WR_RDMA_WRITE: e.IBV_WC_RDMA_WRITE, e.IBV_WR_RDMA_WRITE_WITH_IMM: e.IBV_WC_RDMA_WRITE,
    e.IBV_WR_RDMA_READ: e.IBV_WC_RDMA_READ, e.IBV_WR_ATOMIC_CMP_AND_SWP: e.IBV_WC_COMP_SWAP,
    e.IBV_WR_ATOMIC_FETCH_AND_ADD: e.IBV_WC_FETCH_ADD, e.IBV_WR_LOCAL_INV: e.IBV_WC_LOCAL_INV,
}
WR_NAMES = {
    e.IBV_WR_RDMA_WRITE: "RDMA_WRITE", e.IBV_WR_RDMA_WRITE_WITH_IMM: "RDMA_WRITE_WITH_IMM", e.IBV_WR_SEND: "SEND",
    e.IBV_WR_SEND_WITH_IMM: "SEND_WITH_IMM", e.IBV_WR_RDMA_READ: "RDMA_READ",
    e.IBV_WR_ATOMIC_CMP_AND_SWP: "ATOMIC_CMP_AND_SWP", e.IBV_WR_ATOMIC_FETCH_AND_ADD: "ATOMIC_FETCH_AND_ADD",
    e.IBV_WR_LOCAL_INV: "LOCAL_INV", e.IBV_WR_BIND_MW: "BIND_MW", e.IBV_WR_SEND_WITH_INV: "SEND_WITH_INV",
    e.IBV_WR_TSO: "TSO", e.IBV_WR_ATOMIC_WRITE: "ATOMIC_WRITE",
}
# which wr opcodes each QP type supports (rxe_opcode.c rxe_wr_opcode_info)
SUPPORTED: dict[int, set[int]] = {
    e.IBV_QPT_RC: {e.IBV_WR_SEND, e.IBV_WR_SEND_WITH_IMM, e.IBV_WR_SEND_WITH_INV, e.IBV_WR_RDMA_WRITE,
                   e.IBV_WR_RDMA_WRITE_WITH_IMM, e.IBV_WR_RDMA_READ, e.IBV_WR_ATOMIC_CMP_AND_SWP,
                   e.IBV_WR_ATOMIC_FETCH_AND_ADD, e.IBV_WR_LOCAL_INV},
    # UC has no SEND with Invalidate opcode (IBA table 38: only RC 0x16/0x17)
    e.IBV_QPT_UC: {e.IBV_WR_SEND, e.IBV_WR_SEND_WITH_IMM, e.IBV_WR_RDMA_WRITE,
                   e.IBV_WR_RDMA_WRITE_WITH_IMM, e.IBV_WR_LOCAL_INV},
    e.IBV_QPT_UD: {e.IBV_WR_SEND, e.IBV_WR_SEND_WITH_IMM},
}
READ_ATOMIC = {e.IBV_WR_RDMA_READ, e.IBV_WR_ATOMIC_CMP_AND_SWP, e.IBV_WR_ATOMIC_FETCH_AND_ADD}
ATOMICS = {e.IBV_WR_ATOMIC_CMP_AND_SWP, e.IBV_WR_ATOMIC_FETCH_AND_ADD}


# slots: the requester and completer read these fields several times a message
@dataclass(eq=False, slots=True)
class SendWQE:
    wr_id: int
    opcode: int
    send_flags: int
    sg: list[Any]
    length: int
    imm: int = 0  # ImmDt value as it goes on the wire
    inv_rkey: int = 0
    remote_addr: int = 0
    rkey: int = 0
    compare_add: int = 0
    swap: int = 0
    ah: Any = None
    remote_qpn: int = 0
    remote_qkey: int = 0
    inline: bytes | None = None
    signaled: bool = True
    # progress
    started: bool = False  # first packet sent: first_psn/last_psn are fixed
    first_psn: int = 0
    last_psn: int = 0
    npkts: int = 1
    next_pkt: int = 0  # next packet index to (re)send
    done_sending: bool = False
    payload: Any = None  # gathered source data (SEND/WRITE)
    dest: list[memoryview] | None = None  # READ/atomic destination views
    credit: bool = False  # holds a rd_atomic credit
    status: int = e.IBV_WC_SUCCESS
    complete: bool = False  # UC/UD/local ops: done once sent or executed
    read_off: int = 0  # READ bytes received


@dataclass(eq=False, slots=True)
class RecvWQE:
    wr_id: int
    sg: list[Any]
    length: int
    views: list[memoryview] | None = None


@dataclass(eq=False)
class Resource:
    """A responder resource (rxe ``resp_res``): what a duplicate READ or atomic is replayed from."""

    kind: str  # "read" or "atomic"
    first_psn: int
    last_psn: int
    rkey: int = 0
    va: int = 0
    length: int = 0
    orig: int = 0
