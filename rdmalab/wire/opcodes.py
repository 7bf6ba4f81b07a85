"""The BTH opcode table: the one source of truth for what follows a BTH.

Bits 7-5 of the opcode select the transport, bits 4-0 the operation (IBA Vol 1 9.2.1,
table 38).  For each opcode the table gives the operation, its place in a message
(first/middle/last/only), whether it carries immediate data or an invalidate key, the extended
headers that follow the BTH in order, and whether a payload follows.  The decoder, the encoder,
the engine's segmentation, the docs and the notebooks all read this table.

Sources for the header sequences: IBA Vol 1 table 38; Linux ``rxe_opcode.c``; for XRC (IBA
Annex A14) and the Memory Placement Extensions (FLUSH 0x1C, ATOMIC WRITE 0x1D) Linux
``include/rdma/ib_pack.h``.  XRC requests carry an XRCETH before the RC headers; XRC responses
do not (Annex A14.6.1).  RoCEv2 congestion notification packets use opcode 0x81 (RoCEv2 Annex
A17.9.3) and carry 16 reserved bytes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from rdmalab.wire.header import Header
from rdmalab.wire.ib import (
    AETH,
    DETH,
    FETH,
    IETH,
    RDETH,
    RETH,
    XRCETH,
    AtomicAckETH,
    AtomicETH,
    CNPPad,
    ImmDt,
)


class Transport(enum.IntEnum):
    """Opcode bits 7-5."""

    RC = 0
    UC = 1
    RD = 2
    UD = 3
    CNP = 4
    XRC = 5
    RESERVED = 6
    MANUFACTURER = 7


class Op(enum.Enum):
    """The operation an opcode belongs to."""

    SEND = "SEND"
    RDMA_WRITE = "RDMA WRITE"
    RDMA_READ_REQUEST = "RDMA READ Request"
    RDMA_READ_RESPONSE = "RDMA READ Response"
    ACKNOWLEDGE = "Acknowledge"
    ATOMIC_ACKNOWLEDGE = "ATOMIC Acknowledge"
    CMP_SWAP = "CmpSwap"
    FETCH_ADD = "FetchAdd"
    RESYNC = "RESYNC"
    FLUSH = "FLUSH"
    ATOMIC_WRITE = "ATOMIC WRITE"
    CNP = "CNP"


class Pos(enum.Enum):
    """Where a packet sits in a multi-packet message."""

    FIRST = "First"
    MIDDLE = "Middle"
    LAST = "Last"
    ONLY = "Only"


@dataclass(frozen=True, slots=True)
class OpcodeInfo:
    code: int
    transport: Transport
    op: Op
    pos: Pos | None
    headers: tuple[type[Header], ...]  # in wire order after the BTH
    payload: bool
    imm: bool = False
    inv: bool = False

    @property
    def name(self) -> str:
        return _NAMES[self.code]

    def _make_name(self) -> str:
        parts = [self.transport.name, self.op.value]
        if self.pos is not None:
            parts.append(self.pos.value)
        if self.imm:
            parts.append("with Immediate")
        if self.inv:
            parts.append("with Invalidate")
        if self.transport == Transport.CNP:
            return "CNP"
        return " ".join(parts)

    @property
    def is_request(self) -> bool:
        return self.op not in (Op.RDMA_READ_RESPONSE, Op.ACKNOWLEDGE, Op.ATOMIC_ACKNOWLEDGE, Op.CNP)

    @property
    def is_response(self) -> bool:
        return self.op in (Op.RDMA_READ_RESPONSE, Op.ACKNOWLEDGE, Op.ATOMIC_ACKNOWLEDGE)

    @property
    def header_size(self) -> int:
        """Bytes of extended headers after the BTH."""
        return sum(h.LAYOUT.size for h in self.headers)

    @property
    def first_or_only(self) -> bool:
        return self.pos in (Pos.FIRST, Pos.ONLY, None)

    @property
    def last_or_only(self) -> bool:
        return self.pos in (Pos.LAST, Pos.ONLY, None)


# The RC operations, by low five bits: (op, pos, headers, payload, imm, inv).
_RC: dict[int, tuple[Op, Pos | None, tuple[type[Header], ...], bool, bool, bool]] = {
    0x00: (Op.SEND, Pos.FIRST, (), True, False, False),
    0x01: (Op.SEND, Pos.MIDDLE, (), True, False, False),
    0x02: (Op.SEND, Pos.LAST, (), True, False, False),
    0x03: (Op.SEND, Pos.LAST, (ImmDt,), True, True, False),
    0x04: (Op.SEND, Pos.ONLY, (), True, False, False),
    0x05: (Op.SEND, Pos.ONLY, (ImmDt,), True, True, False),
    0x06: (Op.RDMA_WRITE, Pos.FIRST, (RETH,), True, False, False),
    0x07: (Op.RDMA_WRITE, Pos.MIDDLE, (), True, False, False),
    0x08: (Op.RDMA_WRITE, Pos.LAST, (), True, False, False),
    0x09: (Op.RDMA_WRITE, Pos.LAST, (ImmDt,), True, True, False),
    0x0A: (Op.RDMA_WRITE, Pos.ONLY, (RETH,), True, False, False),
    0x0B: (Op.RDMA_WRITE, Pos.ONLY, (RETH, ImmDt), True, True, False),
    0x0C: (Op.RDMA_READ_REQUEST, None, (RETH,), False, False, False),
    0x0D: (Op.RDMA_READ_RESPONSE, Pos.FIRST, (AETH,), True, False, False),
    0x0E: (Op.RDMA_READ_RESPONSE, Pos.MIDDLE, (), True, False, False),
    0x0F: (Op.RDMA_READ_RESPONSE, Pos.LAST, (AETH,), True, False, False),
    0x10: (Op.RDMA_READ_RESPONSE, Pos.ONLY, (AETH,), True, False, False),
    0x11: (Op.ACKNOWLEDGE, None, (AETH,), False, False, False),
    0x12: (Op.ATOMIC_ACKNOWLEDGE, None, (AETH, AtomicAckETH), False, False, False),
    0x13: (Op.CMP_SWAP, None, (AtomicETH,), False, False, False),
    0x14: (Op.FETCH_ADD, None, (AtomicETH,), False, False, False),
    0x16: (Op.SEND, Pos.LAST, (IETH,), True, False, True),
    0x17: (Op.SEND, Pos.ONLY, (IETH,), True, False, True),
    0x1C: (Op.FLUSH, None, (FETH, RETH), False, False, False),
    0x1D: (Op.ATOMIC_WRITE, None, (RETH,), True, False, False),  # 8-byte payload
}
_UC_OPS = range(0x00, 0x0C)  # UC has SEND and RDMA WRITE only
_UD_OPS = (0x04, 0x05)  # UD SEND Only (with Immediate)
_RD_OPS = tuple(range(0x00, 0x16))  # RD: 0x00-0x15 (0x15 RESYNC)


def _build() -> dict[int, OpcodeInfo]:
    table: dict[int, OpcodeInfo] = {}
    for low, (op, pos, hdrs, payload, imm, inv) in _RC.items():
        table[low] = OpcodeInfo(low, Transport.RC, op, pos, hdrs, payload, imm, inv)
        if low in _UC_OPS:
            table[0x20 | low] = OpcodeInfo(0x20 | low, Transport.UC, op, pos, hdrs, payload, imm, inv)
        xhdrs: tuple[type[Header], ...]
        if op not in (Op.RDMA_READ_RESPONSE, Op.ACKNOWLEDGE, Op.ATOMIC_ACKNOWLEDGE):
            xhdrs = (XRCETH, *hdrs)
        else:
            xhdrs = hdrs
        if low <= 0x17 or low in (0x1C, 0x1D):
            table[0xA0 | low] = OpcodeInfo(0xA0 | low, Transport.XRC, op, pos, xhdrs, payload, imm, inv)
    # RD: RDETH first; requests add DETH; responses keep the RC response headers.
    for low in _RD_OPS:
        if low == 0x15:
            table[0x55] = OpcodeInfo(0x55, Transport.RD, Op.RESYNC, None, (RDETH, DETH), False)
            continue
        op, pos, hdrs, payload, imm, inv = _RC[low]
        if inv:
            continue  # no SEND with Invalidate on RD
        rd: tuple[type[Header], ...]
        if op in (Op.RDMA_READ_RESPONSE, Op.ACKNOWLEDGE, Op.ATOMIC_ACKNOWLEDGE):
            rd = (RDETH, *hdrs)
        else:
            rd = (RDETH, DETH, *hdrs)
        table[0x40 | low] = OpcodeInfo(0x40 | low, Transport.RD, op, pos, rd, payload, imm, inv)
    for low in _UD_OPS:
        op, pos, hdrs, payload, imm, inv = _RC[low]
        table[0x60 | low] = OpcodeInfo(0x60 | low, Transport.UD, op, pos, (DETH, *hdrs), payload, imm, inv)
    # RD FLUSH (IBA Memory Placement Extensions; Wireshark 4.4 names 0x5C)
    table[0x5C] = OpcodeInfo(0x5C, Transport.RD, Op.FLUSH, None, (RDETH, DETH, FETH, RETH), False)
    table[0x81] = OpcodeInfo(0x81, Transport.CNP, Op.CNP, None, (CNPPad,), False)
    return dict(sorted(table.items()))


OPCODES: dict[int, OpcodeInfo] = _build()
_NAMES: dict[int, str] = {code: info._make_name() for code, info in OPCODES.items()}

CNP_OPCODE = 0x81


def opcode_info(code: int) -> OpcodeInfo | None:
    return OPCODES.get(code)


def opcode_name(code: int) -> str:
    info = OPCODES.get(code)
    if info is not None:
        return info.name
    transport = Transport(code >> 5)
    if transport == Transport.MANUFACTURER:
        return f"Manufacturer-specific 0x{code:02x}"
    return f"Unknown opcode 0x{code:02x}"


def find_opcode(
    transport: Transport,
    op: Op,
    pos: Pos | None = None,
    *,
    imm: bool = False,
    inv: bool = False,
) -> int:
    """The opcode for an operation, e.g. ``find_opcode(Transport.RC, Op.SEND, Pos.ONLY)``."""
    for info in OPCODES.values():
        if (info.transport, info.op, info.pos, info.imm, info.inv) == (transport, op, pos, imm, inv):
            return info.code
    raise KeyError(f"no opcode for {transport.name} {op.value} {pos} imm={imm} inv={inv}")
