"""DDP (RFC 5041) and RDMAP (RFC 5040, extended by RFC 7306) headers, and the RDMAP opcode table.

A DDP segment starts with the DDP control byte (T, L, Rsvd, DV) followed by RsvdULP, bits the
DDP layer carries for its upper layer.  RDMAP uses the first RsvdULP byte as its control byte
(RV, Rsv, OpCode) and, in the untagged model, the next four bytes as the Invalidate STag of the
Send-with-Invalidate messages (reserved, zero, otherwise)::

    tagged (14):   ctrl | RDMAP ctrl | STag (32) | TO (64)
    untagged (18): ctrl | RDMAP ctrl | RsvdULP[8:39] (32) | QN (32) | MSN (32) | MO (32)

The DDP header classes keep RsvdULP as raw bits, so DDP round-trips on its own; a decoded
packet also lists an RDMAP layer (:class:`RDMAPControl` or :class:`RDMAPUntagged`) that starts
one byte into the DDP header and reads the same octets with RDMAP's names, as Wireshark does.

:data:`RDMAP_OPCODES` is the one table that drives decoding, encoding and summaries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rdmalab.wire.errors import MalformedError
from rdmalab.wire.header import F, Header, Layout, layout

DDP_VERSION = 1
RDMAP_VERSION = 1

# ============================================================================ DDP


@dataclass(frozen=True, slots=True)
class DDPTagged(Header):
    """DDP tagged buffer model header, 14 bytes (T = 1)."""

    tagged: int = 1
    last: int = 1
    rsvd: int = 0
    dv: int = DDP_VERSION
    rsvdulp: int = 0x40
    stag: int = 0
    to: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "DDP",
        "RFC 5041 4.1 (DDP Control Field), 4.2 (DDP Tagged Buffer Model Header)",
        F("tagged", 1, "iwarp_ddp.tagged_flag", const=1, doc="T: tagged buffer model"),
        F("last", 1, "iwarp_ddp.last_flag", doc="L: last segment of the DDP message"),
        F("rsvd", 4, "iwarp_ddp.rsvd", fmt="hex", reserved=True, const=0),
        F("dv", 2, "iwarp_ddp.dv", const=DDP_VERSION, doc="DDP version"),
        F("rsvdulp", 8, None, fmt="hex", doc="RsvdULP: the RDMAP control byte"),
        F("stag", 32, "iwarp_ddp.stag", fmt="hex", doc="Data Sink Steering Tag"),
        F("to", 64, "iwarp_ddp.tagged_offset", fmt="hex", doc="Data Sink Tagged Offset"),
        ws="iwarp_ddp",
    )


@dataclass(frozen=True, slots=True)
class DDPUntagged(Header):
    """DDP untagged buffer model header, 18 bytes (T = 0)."""

    tagged: int = 0
    last: int = 1
    rsvd: int = 0
    dv: int = DDP_VERSION
    rsvdulp: int = 0x43 << 32
    qn: int = 0
    msn: int = 1
    mo: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "DDP",
        "RFC 5041 4.1 (DDP Control Field), 4.3 (DDP Untagged Buffer Model Header)",
        F("tagged", 1, "iwarp_ddp.tagged_flag", const=0, doc="T: tagged buffer model"),
        F("last", 1, "iwarp_ddp.last_flag", doc="L: last segment of the DDP message"),
        F("rsvd", 4, "iwarp_ddp.rsvd", fmt="hex", reserved=True, const=0),
        F("dv", 2, "iwarp_ddp.dv", const=DDP_VERSION, doc="DDP version"),
        F("rsvdulp", 40, "iwarp_ddp.rsvdulp", fmt="bytes",
          doc="RsvdULP: RDMAP control byte + Invalidate STag or reserved"),
        F("qn", 32, "iwarp_ddp.qn", doc="Queue Number: 0 Send, 1 Read Request, 2 Terminate"),
        F("msn", 32, "iwarp_ddp.msn", doc="Message Sequence Number, from 1 per queue"),
        F("mo", 32, "iwarp_ddp.mo", doc="Message Offset of this segment's payload"),
        ws="iwarp_ddp",
    )


QN_SEND = 0
QN_READ_REQUEST = 1
QN_TERMINATE = 2
QN_ATOMIC = 3  # RFC 7306 [unverified: whether Atomic Responses use QN 3 or another queue]

# ============================================================================ RDMAP

OP_WRITE = 0x0
OP_READ_REQUEST = 0x1
OP_READ_RESPONSE = 0x2
OP_SEND = 0x3
OP_SEND_INVALIDATE = 0x4
OP_SEND_SE = 0x5
OP_SEND_SE_INVALIDATE = 0x6
OP_TERMINATE = 0x7
OP_ATOMIC_REQUEST = 0xA
OP_ATOMIC_RESPONSE = 0xB
OP_IMMEDIATE_DATA = 0xC
OP_IMMEDIATE_DATA_SE = 0xD


def _opname(opcode: int) -> str:
    info = RDMAP_OPCODES.get(opcode)
    return info.name if info is not None else f"Reserved (0x{opcode:x})"


@dataclass(frozen=True, slots=True)
class RDMAPControl(Header):
    """RDMAP control byte (RsvdULP[0:7] of the DDP header): RV, Rsv, OpCode (tagged messages)."""

    rv: int = RDMAP_VERSION
    rsv: int = 0
    opcode: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "RDMAP",
        "RFC 5040 4.1 (RDMAP Control and Invalidate STag Field); RFC 7306 (opcodes 0xA-0xD)",
        F("rv", 2, "iwarp_rdma.version", const=RDMAP_VERSION, doc="RDMAP version"),
        F("rsv", 2, "iwarp_rdma.rsv", fmt="hex", reserved=True, const=0),
        F("opcode", 4, "iwarp_rdma.opcode", fmt="hex"),
        ws="iwarp_rdma",
    )

    def describe(self, field: str) -> str:
        if field == "opcode":
            return f"{_opname(self.opcode)} (0x{self.opcode:x})"
        return Header.describe(self, field)


@dataclass(frozen=True, slots=True)
class RDMAPUntagged(Header):
    """RDMAP control byte plus RsvdULP[8:39] (untagged messages): Invalidate STag or zero."""

    rv: int = RDMAP_VERSION
    rsv: int = 0
    opcode: int = OP_SEND
    inval_stag: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "RDMAP",
        "RFC 5040 4.1 (RDMAP Control and Invalidate STag Field); RFC 7306 (opcodes 0xA-0xD)",
        F("rv", 2, "iwarp_rdma.version", const=RDMAP_VERSION, doc="RDMAP version"),
        F("rsv", 2, "iwarp_rdma.rsv", fmt="hex", reserved=True, const=0),
        F("opcode", 4, "iwarp_rdma.opcode", fmt="hex"),
        F("inval_stag", 32, "iwarp_rdma.inval_stag", fmt="hex",
          doc="Invalidate STag (Send with Invalidate); reserved, zero, for other messages"),
        ws="iwarp_rdma",
    )

    def describe(self, field: str) -> str:
        if field == "opcode":
            return f"{_opname(self.opcode)} (0x{self.opcode:x})"
        return Header.describe(self, field)

    def ws_fields(self) -> dict[str, int]:
        out = {"iwarp_rdma.version": self.rv, "iwarp_rdma.rsv": self.rsv, "iwarp_rdma.opcode": self.opcode}
        if self.opcode in (OP_SEND_INVALIDATE, OP_SEND_SE_INVALIDATE):
            out["iwarp_rdma.inval_stag"] = self.inval_stag
        elif self.opcode in (OP_READ_REQUEST, OP_SEND, OP_SEND_SE, OP_TERMINATE):
            out["iwarp_rdma.reserved"] = self.inval_stag  # Wireshark: 4 raw bytes
        return out

    def validate(self, offset: int = 0) -> list[MalformedError]:
        if self.inval_stag and self.opcode not in (OP_SEND_INVALIDATE, OP_SEND_SE_INVALIDATE):
            return [MalformedError("RDMAP", "inval_stag", offset + 1, self.inval_stag,
                                   f"0 (reserved for {_opname(self.opcode)})")]
        return []


@dataclass(frozen=True, slots=True)
class ReadRequest(Header):
    """RDMA Read Request header, 28 bytes after the untagged DDP header."""

    sink_stag: int = 0
    sink_to: int = 0
    size: int = 0
    src_stag: int = 0
    src_to: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "RDMAP Read Request",
        "RFC 5040 4.4 (RDMA Read Request Header)",
        F("sink_stag", 32, "iwarp_rdma.sinkstag", fmt="hex", doc="Data Sink STag (where the response goes)"),
        F("sink_to", 64, "iwarp_rdma.sinkto", fmt="hex", doc="Data Sink Tagged Offset"),
        F("size", 32, "iwarp_rdma.rdmardsz", doc="RDMA Read Message Size in bytes"),
        F("src_stag", 32, "iwarp_rdma.srcstag", fmt="hex", doc="Data Source STag"),
        F("src_to", 64, "iwarp_rdma.srcto", fmt="hex", doc="Data Source Tagged Offset"),
        ws="iwarp_rdma.rr",
    )


# ---------------------------------------------------------------------------- Terminate

TERM_LAYER_RDMAP = 0
TERM_LAYER_DDP = 1
TERM_LAYER_LLP = 2
TERM_LAYER_NAMES = {0: "RDMAP", 1: "DDP", 2: "LLP (MPA)"}

TERM_ETYPE_NAMES: dict[int, dict[int, str]] = {
    0: {0: "Local Catastrophic Error", 1: "Remote Protection Error", 2: "Remote Operation Error"},
    1: {0: "Local Catastrophic Error", 1: "Tagged Buffer Error", 2: "Untagged Buffer Error", 3: "Reserved for the LLP"},
    2: {0: "MPA Error"},
}

TERM_ERRCODE_RDMAP = {
    0x00: "Invalid STag",
    0x01: "Base or bounds violation",
    0x02: "Access rights violation",
    0x03: "STag not associated with RDMAP Stream",
    0x04: "TO wrap",
    0x05: "Invalid RDMAP version",
    0x06: "Unexpected OpCode",
    0x07: "Catastrophic error, localized to RDMAP Stream",
    0x08: "Catastrophic error, global",
    0x09: "STag cannot be Invalidated",
    0xFF: "Unspecified Error",
}
TERM_ERRCODE_DDP_TAGGED = {
    0x00: "Invalid STag",
    0x01: "Base or bounds violation",
    0x02: "STag not associated with DDP Stream",
    0x03: "TO wrap",
    0x04: "Invalid DDP version",
}
TERM_ERRCODE_DDP_UNTAGGED = {
    0x01: "Invalid QN",
    0x02: "Invalid MSN - no buffer available",
    0x03: "Invalid MSN - MSN range is not valid",
    0x04: "Invalid MO",
    0x05: "DDP Message too long for available buffer",
    0x06: "Invalid DDP version",
}
TERM_ERRCODE_LLP = {
    0x01: "TCP connection closed, terminated or lost",
    0x02: "MPA CRC Error",
    0x03: "MPA Marker and ULPDU Length field mismatch",
    0x04: "Invalid MPA Request Frame or MPA Response Frame",
    0x05: "Local Catastrophic Error",  # RFC 6581
    0x06: "Insufficient IRD Resources",  # RFC 6581
    0x07: "No Matching RTR Option",  # RFC 6581
}


def term_errcode_names(layer: int, etype: int) -> dict[int, str]:
    if layer == TERM_LAYER_RDMAP:
        return TERM_ERRCODE_RDMAP if etype else {}
    if layer == TERM_LAYER_DDP:
        return {1: TERM_ERRCODE_DDP_TAGGED, 2: TERM_ERRCODE_DDP_UNTAGGED}.get(etype, {})
    if layer == TERM_LAYER_LLP:
        return TERM_ERRCODE_LLP
    return {}


@dataclass(frozen=True, slots=True)
class Terminate(Header):
    """Terminate Control word, 4 bytes after the untagged DDP header (QN 2).

    Optional parts follow, as the header-control bits say: with D, the DDP Segment Length
    (:class:`TerminateSegLen`) and the terminated DDP header; with R, the terminated RDMAP
    header (28 bytes).  M says the DDP Segment Length is valid.
    """

    layer: int = 0
    etype: int = 0
    errcode: int = 0
    hdrct_m: int = 0
    hdrct_d: int = 0
    hdrct_r: int = 0
    rsvd: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "RDMAP Terminate",
        "RFC 5040 4.8 (Terminate Header); RFC 6581 (MPA error codes 5-7)",
        F("layer", 4, "iwarp_rdma.term_layer", fmt="hex", doc="0 RDMAP, 1 DDP, 2 LLP (MPA)"),
        F("etype", 4, "iwarp_rdma.term_etype", fmt="hex", doc="Error type, per layer"),
        F("errcode", 8, "iwarp_rdma.term_errcode", fmt="hex", doc="Error code, per layer and type"),
        F("hdrct_m", 1, "iwarp_rdma.term_hdrct_m", doc="M: DDP Segment Length valid"),
        F("hdrct_d", 1, "iwarp_rdma.hdrct_d", doc="D: terminated DDP header included"),
        F("hdrct_r", 1, "iwarp_rdma.hdrct_r", doc="R: terminated RDMAP header included"),
        F("rsvd", 13, "iwarp_rdma.term_rsvd", fmt="hex", reserved=True, const=0),
        ws="iwarp_rdma.terminate",
    )

    def describe(self, field: str) -> str:
        if field == "layer":
            return f"{TERM_LAYER_NAMES.get(self.layer, 'Unknown')} ({self.layer})"
        if field == "etype":
            name = TERM_ETYPE_NAMES.get(self.layer, {}).get(self.etype, "Unknown")
            return f"{name} ({self.etype})"
        if field == "errcode":
            name = term_errcode_names(self.layer, self.etype).get(self.errcode, "Unknown")
            if self.layer == TERM_LAYER_RDMAP and self.etype == 0:
                name = "(any: Local Catastrophic)"
            return f"{name} (0x{self.errcode:02x})"
        return Header.describe(self, field)

    def ws_fields(self) -> dict[str, int]:
        """Wireshark's per-layer names for EType and error code (packet-iwarp-ddp-rdmap.c)."""
        out = {
            "iwarp_rdma.term_layer": self.layer,
            "iwarp_rdma.term_hdrct_m": self.hdrct_m,
            "iwarp_rdma.hdrct_d": self.hdrct_d,
            "iwarp_rdma.hdrct_r": self.hdrct_r,
            "iwarp_rdma.term_rsvd": self.rsvd,
        }
        if self.layer == TERM_LAYER_RDMAP:
            out["iwarp_rdma.term_etype_rdma"] = self.etype
            out["iwarp_rdma.term_errcode_rdma" if self.etype else "iwarp_rdma.term_errcode"] = self.errcode
        elif self.layer == TERM_LAYER_DDP:
            out["iwarp_rdma.term_etype_ddp"] = self.etype
            name = {1: "iwarp_rdma.term_errcode_ddp_tagged", 2: "iwarp_rdma.term_errcode_ddp_untagged"}
            out[name.get(self.etype, "iwarp_rdma.term_errcode")] = self.errcode
        elif self.layer == TERM_LAYER_LLP:
            out["iwarp_rdma.term_etype_llp"] = self.etype
            out["iwarp_rdma.term_errcode" if self.etype else "iwarp_rdma.term_errcode_llp"] = self.errcode
        else:
            out["iwarp_rdma.term_etype"] = self.etype
            out["iwarp_rdma.term_errcode"] = self.errcode
        return out


@dataclass(frozen=True, slots=True)
class TerminateSegLen(Header):
    """DDP Segment Length of the terminated segment (its MPA ULPDU_Length), present with D."""

    ddp_seg_len: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "RDMAP Terminate",
        "RFC 5040 4.8 (Terminate Header: DDP Segment Length)",
        F("ddp_seg_len", 16, "iwarp_rdma.term_ddp_seg_len", doc="ULPDU_Length of the terminated FPDU"),
        ws="iwarp_rdma.terminate",
    )


@dataclass(frozen=True, slots=True)
class TerminatedDDPTagged(Header):
    """The tagged DDP header (14 bytes) of the segment that caused the Terminate."""

    ddp_h: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "RDMAP Terminate",
        "RFC 5040 4.8 (Terminate Header: Terminated DDP Header)",
        F("ddp_h", 112, "iwarp_rdma.term_ddp_h", fmt="bytes"),
        ws="iwarp_rdma.terminate",
    )

    def decoded(self) -> DDPTagged:
        return DDPTagged.decode(self.encode())


@dataclass(frozen=True, slots=True)
class TerminatedDDPUntagged(Header):
    """The untagged DDP header (18 bytes) of the segment that caused the Terminate."""

    ddp_h: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "RDMAP Terminate",
        "RFC 5040 4.8 (Terminate Header: Terminated DDP Header)",
        F("ddp_h", 144, "iwarp_rdma.term_ddp_h", fmt="bytes"),
        ws="iwarp_rdma.terminate",
    )

    def decoded(self) -> DDPUntagged:
        return DDPUntagged.decode(self.encode())


@dataclass(frozen=True, slots=True)
class TerminatedRDMAP(Header):
    """The RDMAP header (28 bytes: a Read Request header) of the message that caused the Terminate."""

    rdma_h: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "RDMAP Terminate",
        "RFC 5040 4.8 (Terminate Header: Terminated RDMA Header)",
        F("rdma_h", 224, "iwarp_rdma.term_rdma_h", fmt="bytes"),
        ws="iwarp_rdma.terminate",
    )

    def decoded(self) -> ReadRequest:
        return ReadRequest.decode(self.encode())


# ---------------------------------------------------------------------------- RFC 7306

ATOMIC_FETCH_ADD = 0
ATOMIC_SWAP = 1
ATOMIC_CMP_SWAP = 2
ATOMIC_OPCODE_NAMES = {0: "FetchAdd", 1: "Swap", 2: "CompareSwap"}


@dataclass(frozen=True, slots=True)
class AtomicRequest(Header):
    """Atomic Operation Request header, 52 bytes after the untagged DDP header (RFC 7306).

    Wireshark 4.0 names Atomic OpCode 0 FetchAdd and 2 CmpSwap and leaves 1 (Swap) unnamed; for
    OpCode 1 it skips the add/swap fields and shows Compare Data at the wrong offset.
    """

    reserved: int = 0
    atomic_opcode: int = ATOMIC_FETCH_ADD
    req_id: int = 0
    stag: int = 0
    to: int = 0
    add_swap: int = 0
    add_swap_mask: int = 0
    compare: int = 0
    compare_mask: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "RDMAP Atomic Request",
        "RFC 7306 5.2 (Atomic Operation Request Message)",
        F("reserved", 28, "iwarp_rdma.atomic.reserved", reserved=True, const=0),
        F("atomic_opcode", 4, "iwarp_rdma.atomic.opcode", doc="0 FetchAdd, 1 Swap, 2 CompareSwap"),
        F("req_id", 32, "iwarp_rdma.atomic.request_identifier", doc="Request Identifier"),
        F("stag", 32, "iwarp_rdma.atomic.remote_stag", fmt="hex", doc="Remote STag"),
        F("to", 64, "iwarp_rdma.atomic.remote_tagged_offset", fmt="hex", doc="Remote Tagged Offset"),
        F("add_swap", 64, "iwarp_rdma.atomic.add_data", fmt="hex", doc="Add or Swap Data"),
        F("add_swap_mask", 64, "iwarp_rdma.atomic.add_mask", fmt="hex", doc="Add or Swap Mask"),
        F("compare", 64, "iwarp_rdma.atomic.compare_data", fmt="hex", doc="Compare Data (CompareSwap)"),
        F("compare_mask", 64, "iwarp_rdma.atomic.compare_mask", fmt="hex", doc="Compare Mask (CompareSwap)"),
        ws="iwarp_rdma",
    )

    def describe(self, field: str) -> str:
        if field == "atomic_opcode":
            return f"{ATOMIC_OPCODE_NAMES.get(self.atomic_opcode, 'Reserved')} ({self.atomic_opcode})"
        return Header.describe(self, field)

    def ws_fields(self) -> dict[str, int]:
        out = Header.ws_fields(self)
        if self.atomic_opcode != ATOMIC_FETCH_ADD:
            del out["iwarp_rdma.atomic.add_data"], out["iwarp_rdma.atomic.add_mask"]
            out["iwarp_rdma.atomic.swap_data"] = self.add_swap
            out["iwarp_rdma.atomic.swap_mask"] = self.add_swap_mask
        return out

    def validate(self, offset: int = 0) -> list[MalformedError]:
        if self.atomic_opcode not in ATOMIC_OPCODE_NAMES:
            return [MalformedError("RDMAP Atomic Request", "atomic_opcode", offset + 3, self.atomic_opcode,
                                   "0 (FetchAdd), 1 (Swap) or 2 (CompareSwap)")]
        return []


@dataclass(frozen=True, slots=True)
class AtomicResponse(Header):
    """Atomic Operation Response header, 12 bytes after the untagged DDP header (RFC 7306)."""

    req_id: int = 0
    value: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "RDMAP Atomic Response",
        "RFC 7306 5.3 (Atomic Operation Response Message)",
        F("req_id", 32, "iwarp_rdma.atomic.original_request_identifier", doc="Original Request Identifier"),
        F("value", 64, "iwarp_rdma.atomic.original_remote_data_value", fmt="hex",
          doc="Original Remote Data Value (before the operation)"),
        ws="iwarp_rdma",
    )


@dataclass(frozen=True, slots=True)
class ImmediateData(Header):
    """Immediate Data header, 8 bytes after the untagged DDP header (RFC 7306, opcodes 0xC/0xD).

    Wireshark 4.0 does not decode it ("Unknown 12/13"); the field names here are rdmalab's.
    """

    imm_data: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "RDMAP Immediate Data",
        "RFC 7306 6 (Immediate Data)",
        F("imm_data", 64, "rdmalab.iwarp_rdma.immediate_data", fmt="hex"),
        ws="iwarp_rdma",
    )


# ============================================================================ the opcode table


@dataclass(frozen=True, slots=True)
class RdmapOpInfo:
    """One RDMAP message: how DDP carries it and which headers follow the DDP header."""

    opcode: int
    name: str
    ws_name: str | None  # Wireshark 4.0's Info text, None where it says "Unknown N"
    tagged: bool
    qn: int | None  # untagged queue number
    headers: tuple[type[Header], ...]  # after the DDP header (Terminate's optional parts aside)
    payload: bool
    invalidate: bool  # RsvdULP[8:39] carries an Invalidate STag
    solicited: bool
    spec: str


RDMAP_OPCODES: dict[int, RdmapOpInfo] = {
    i.opcode: i
    for i in (
        RdmapOpInfo(0x0, "RDMA Write", "Write", True, None, (), True, False, False, "RFC 5040 4.3"),
        RdmapOpInfo(0x1, "RDMA Read Request", "Read Request", False, QN_READ_REQUEST, (ReadRequest,), False,
                    False, False, "RFC 5040 4.4"),
        RdmapOpInfo(0x2, "RDMA Read Response", "Read Response", True, None, (), True, False, False, "RFC 5040 4.5"),
        RdmapOpInfo(0x3, "Send", "Send", False, QN_SEND, (), True, False, False, "RFC 5040 4.6"),
        RdmapOpInfo(0x4, "Send with Invalidate", "Send with Invalidate", False, QN_SEND, (), True, True, False,
                    "RFC 5040 4.6"),
        RdmapOpInfo(0x5, "Send with Solicited Event", "Send with SE", False, QN_SEND, (), True, False, True,
                    "RFC 5040 4.6"),
        RdmapOpInfo(0x6, "Send with Solicited Event and Invalidate", "Send with SE and Invalidate", False, QN_SEND,
                    (), True, True, True, "RFC 5040 4.6"),
        RdmapOpInfo(0x7, "Terminate", "Terminate", False, QN_TERMINATE, (Terminate,), False, False, False,
                    "RFC 5040 4.8"),
        RdmapOpInfo(0xA, "Atomic Request", "Atomic Request", False, QN_ATOMIC, (AtomicRequest,), False, False,
                    False, "RFC 7306 5"),
        RdmapOpInfo(0xB, "Atomic Response", "Atomic Response", False, QN_ATOMIC, (AtomicResponse,), False, False,
                    False, "RFC 7306 5"),
        RdmapOpInfo(0xC, "Immediate Data", None, False, QN_SEND, (ImmediateData,), False, False, False,
                    "RFC 7306 6"),
        RdmapOpInfo(0xD, "Immediate Data with Solicited Event", None, False, QN_SEND, (ImmediateData,), False,
                    False, True, "RFC 7306 6"),
    )
}

#: the Send messages (RFC 5040 4.6: Send, with Invalidate, with Solicited Event, with both): untagged, on the
#: Send queue, with the ULP's payload (Immediate Data, also on that queue, carries none)
SEND_OPCODES = frozenset(op for op, i in RDMAP_OPCODES.items() if i.qn == QN_SEND and i.payload)

# 0x8, 0x9, 0xE, 0xF stay reserved (RFC 5040 reserved 0x8-0xF; RFC 7306 assigned 0xA-0xD).
RDMAP_RESERVED_OPCODES = frozenset({0x8, 0x9, 0xE, 0xF})


def rdmap_opcode_name(opcode: int) -> str:
    """Name of an RDMAP opcode; ``"Reserved (0x8)"`` for unassigned ones."""
    return _opname(opcode)
