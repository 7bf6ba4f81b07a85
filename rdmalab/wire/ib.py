"""InfiniBand link, network and transport headers (IBA Vol 1, chapters 7 and 9).

Sizes and layouts follow the InfiniBand Architecture Specification Volume 1 (release 1.4),
section 7.7 (LRH), 8.3 (GRH), 9.2 (BTH) and 9.3 (extended transport headers), as encoded by
Linux ``include/rdma/ib_pack.h`` and ``drivers/infiniband/sw/rxe/rxe_hdr.h``.  Wireshark
display-filter names are those of ``epan/dissectors/packet-infiniband.c`` (4.0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rdmalab.wire.errors import MalformedError
from rdmalab.wire.header import F, Header, Layout, layout

# --------------------------------------------------------------------------- routing headers

LNH_RAW = 0
LNH_IP_NON_IBA = 1
LNH_IBA_LOCAL = 2
LNH_IBA_GLOBAL = 3
LNH_NAMES = {0: "Raw", 1: "IP non-IBA", 2: "IBA local (BTH next)", 3: "IBA global (GRH next)"}

GRH_NXTHDR_IBA = 0x1B  # IBA Vol 1 8.3.1: next header value for an IBA transport header


@dataclass(frozen=True, slots=True)
class LRH(Header):
    """Local Route Header, 8 bytes, native InfiniBand only."""

    vl: int = 0
    lver: int = 0
    sl: int = 0
    reserved2: int = 0
    lnh: int = LNH_IBA_LOCAL
    dlid: int = 0
    reserved5: int = 0
    pktlen: int = 0
    slid: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "LRH",
        "IBA Vol 1 7.7 (Local Route Header)",
        F("vl", 4, "infiniband.lrh.vl", doc="Virtual Lane"),
        F("lver", 4, "infiniband.lrh.lver", doc="Link version"),
        F("sl", 4, "infiniband.lrh.sl", doc="Service Level"),
        F("reserved2", 2, "infiniband.lrh.reserved2", reserved=True),
        F("lnh", 2, "infiniband.lrh.lnh", doc="Link Next Header"),
        F("dlid", 16, "infiniband.lrh.dlid", doc="Destination LID"),
        F("reserved5", 5, "infiniband.lrh.reserved5", reserved=True),
        F("pktlen", 11, "infiniband.lrh.pktlen", doc="Packet length in 4-byte words, LRH to ICRC"),
        F("slid", 16, "infiniband.lrh.slid", doc="Source LID"),
        ws="infiniband.lrh",
    )

    def describe(self, field: str) -> str:
        if field == "lnh":
            return f"{LNH_NAMES[self.lnh]} ({self.lnh})"
        if field == "pktlen":
            return f"{self.pktlen} words ({self.pktlen * 4} bytes)"
        return Header.describe(self, field)


@dataclass(frozen=True, slots=True)
class GRH(Header):
    """Global Route Header, 40 bytes, shaped like IPv6 (RoCEv1 and routed native IB)."""

    ipver: int = 6
    tclass: int = 0
    flowlabel: int = 0
    paylen: int = 0
    nxthdr: int = GRH_NXTHDR_IBA
    hoplmt: int = 64
    sgid: int = 0
    dgid: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "GRH",
        "IBA Vol 1 8.3 (Global Route Header)",
        F("ipver", 4, "infiniband.grh.ipver", const=6),
        F("tclass", 8, "infiniband.grh.tclass", doc="Traffic class"),
        F("flowlabel", 20, "infiniband.grh.flowlabel", fmt="hex"),
        F("paylen", 16, "infiniband.grh.paylen", doc="Bytes after the GRH, ICRC included"),
        F("nxthdr", 8, "infiniband.grh.nxthdr", fmt="hex", doc="0x1B: IBA transport"),
        F("hoplmt", 8, "infiniband.grh.hoplmt"),
        F("sgid", 128, "infiniband.grh.sgid", fmt="ipv6", doc="Source GID"),
        F("dgid", 128, "infiniband.grh.dgid", fmt="ipv6", doc="Destination GID"),
        ws="infiniband.grh",
    )


# --------------------------------------------------------------------------- BTH


@dataclass(frozen=True, slots=True)
class BTH(Header):
    """Base Transport Header, 12 bytes, present in every IBA transport packet.

    Byte 4 holds FECN (bit 7) and BECN (bit 6), the congestion notification bits of IBA
    Vol 1 A10 / RoCEv2 Annex A17; Wireshark 4.0 shows this byte only as ``infiniband.reserved``.
    """

    opcode: int = 0
    se: int = 0
    migreq: int = 0
    padcnt: int = 0
    tver: int = 0
    p_key: int = 0xFFFF
    fecn: int = 0
    becn: int = 0
    resv6: int = 0
    destqp: int = 0
    ackreq: int = 0
    resv7: int = 0
    psn: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "BTH",
        "IBA Vol 1 9.2 (Base Transport Header)",
        F("opcode", 8, "infiniband.bth.opcode", fmt="hex"),
        F("se", 1, "infiniband.bth.se", doc="Solicited Event"),
        F("migreq", 1, "infiniband.bth.m", doc="Migration request"),
        F("padcnt", 2, "infiniband.bth.padcnt", doc="Pad bytes after the payload"),
        F("tver", 4, "infiniband.bth.tver", const=0, doc="Transport header version"),
        F("p_key", 16, "infiniband.bth.p_key", fmt="hex", doc="Partition key"),
        F("fecn", 1, "rdmalab.bth.fecn", doc="Forward ECN"),
        F("becn", 1, "rdmalab.bth.becn", doc="Backward ECN"),
        F("resv6", 6, None, reserved=True),
        F("destqp", 24, "infiniband.bth.destqp", fmt="hex", doc="Destination QP"),
        F("ackreq", 1, "infiniband.bth.a", doc="Acknowledge request"),
        F("resv7", 7, "infiniband.bth.reserved7", reserved=True),
        F("psn", 24, "infiniband.bth.psn", doc="Packet Sequence Number"),
        ws="infiniband.bth",
    )

    def describe(self, field: str) -> str:
        if field == "opcode":
            from rdmalab.wire.opcodes import opcode_name

            return f"{opcode_name(self.opcode)} (0x{self.opcode:02x})"
        return Header.describe(self, field)


# --------------------------------------------------------------------------- extended headers


@dataclass(frozen=True, slots=True)
class RDETH(Header):
    """Reliable Datagram Extended Transport Header, 4 bytes."""

    reserved: int = 0
    ee_context: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "RDETH",
        "IBA Vol 1 9.3.1 (Reliable Datagram ETH)",
        F("reserved", 8, None, reserved=True),
        F("ee_context", 24, "infiniband.rdeth.eecnxt", fmt="hex"),
        ws="infiniband.rdeth",
    )


GSI_QKEY = 0x80010000  # IBA Vol 1 13.5.3.3: Q_Key of QP1 (the General Services Interface)


@dataclass(frozen=True, slots=True)
class DETH(Header):
    """Datagram Extended Transport Header, 8 bytes (UD and RD)."""

    q_key: int = 0
    reserved: int = 0
    src_qp: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "DETH",
        "IBA Vol 1 9.3.2 (Datagram ETH)",
        F("q_key", 32, "infiniband.deth.q_key", fmt="hex"),
        F("reserved", 8, None, reserved=True),
        F("src_qp", 24, "infiniband.deth.srcqp", fmt="hex"),
        ws="infiniband.deth",
    )


@dataclass(frozen=True, slots=True)
class RETH(Header):
    """RDMA Extended Transport Header, 16 bytes (WRITE First/Only, READ Request, FLUSH)."""

    va: int = 0
    r_key: int = 0
    dma_length: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "RETH",
        "IBA Vol 1 9.3.3 (RDMA ETH)",
        F("va", 64, "infiniband.reth.va", fmt="hex", doc="Virtual address"),
        F("r_key", 32, "infiniband.reth.r_key", fmt="hex", doc="Remote key"),
        F("dma_length", 32, "infiniband.reth.dmalen", doc="DMA length in bytes"),
        ws="infiniband.reth",
    )


@dataclass(frozen=True, slots=True)
class AtomicETH(Header):
    """Atomic Extended Transport Header, 28 bytes (CmpSwap and FetchAdd).

    Wireshark reports this header's VA and R_Key under the RETH names; we keep its names so
    display filters written for Wireshark select the same packets.
    """

    va: int = 0
    r_key: int = 0
    swap_add: int = 0
    compare: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "AtomicETH",
        "IBA Vol 1 9.3.4 (Atomic ETH)",
        F("va", 64, "infiniband.reth.va", fmt="hex"),
        F("r_key", 32, "infiniband.reth.r_key", fmt="hex"),
        F("swap_add", 64, "infiniband.atomiceth.swapdt", fmt="hex", doc="Swap (CmpSwap) or add (FetchAdd) data"),
        F("compare", 64, "infiniband.atomiceth.cmpdt", fmt="hex", doc="Compare data (CmpSwap)"),
        ws="infiniband.atomiceth",
    )


# AETH syndrome, IBA Vol 1 9.3.5, table 44 (also Linux rxe_hdr.h AETH_* constants)
AETH_ACK = 0
AETH_RNR_NAK = 1
AETH_RESERVED = 2
AETH_NAK = 3
AETH_TYPE_NAMES = {0: "ACK", 1: "RNR NAK", 2: "Reserved", 3: "NAK"}

NAK_PSN_SEQUENCE_ERROR = 0
NAK_INVALID_REQUEST = 1
NAK_REMOTE_ACCESS_ERROR = 2
NAK_REMOTE_OPERATIONAL_ERROR = 3
NAK_INVALID_RD_REQUEST = 4
NAK_NAMES = {
    0: "PSN Sequence Error",
    1: "Invalid Request",
    2: "Remote Access Error",
    3: "Remote Operational Error",
    4: "Invalid RD Request",
}

CREDIT_INVALID = 31
# Credit code -> number of credits (IBA Vol 1 9.7.5.1.2; Linux rdmavt/rc.c credit_table)
CREDIT_TABLE = (
    0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768,
    1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
)
# RNR NAK timer code -> minimum delay in microseconds (IBA Vol 1 9.7.5.2.8, table 45)
RNR_TIMER_US = (
    655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
    2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880,
    163840, 245760, 327680, 491520,
)


def rnr_timer_ms(code: int) -> float:
    """The RNR NAK timer code's minimum delay in milliseconds (code 0 is the longest)."""
    return RNR_TIMER_US[code] / 1000.0


@dataclass(frozen=True, slots=True)
class AETH(Header):
    """ACK Extended Transport Header, 4 bytes: syndrome and message sequence number."""

    reserved: int = 0
    type: int = AETH_ACK
    value: int = 0
    msn: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "AETH",
        "IBA Vol 1 9.3.5 (ACK ETH)",
        F("reserved", 1, "infiniband.aeth.syndrome.reserved", reserved=True),
        F("type", 2, "infiniband.aeth.syndrome.opcode", doc="00 ACK, 01 RNR NAK, 11 NAK"),
        F("value", 5, None, doc="Credit count, RNR timer or NAK code"),
        F("msn", 24, "infiniband.aeth.msn", doc="Message Sequence Number"),
        ws="infiniband.aeth",
    )

    @classmethod
    def ack(cls, msn: int, credits: int = CREDIT_INVALID) -> AETH:
        return cls(type=AETH_ACK, value=credits, msn=msn)

    @classmethod
    def rnr_nak(cls, msn: int, timer: int) -> AETH:
        return cls(type=AETH_RNR_NAK, value=timer, msn=msn)

    @classmethod
    def nak(cls, msn: int, code: int) -> AETH:
        return cls(type=AETH_NAK, value=code, msn=msn)

    @property
    def syndrome(self) -> int:
        return (self.reserved << 7) | (self.type << 5) | self.value

    @property
    def is_ack(self) -> bool:
        return self.type == AETH_ACK

    @property
    def is_rnr_nak(self) -> bool:
        return self.type == AETH_RNR_NAK

    @property
    def is_nak(self) -> bool:
        return self.type == AETH_NAK

    @property
    def credits(self) -> int | None:
        """Number of credits an ACK grants; ``None`` for code 31 (no end-to-end credits)."""
        if self.type != AETH_ACK or self.value == CREDIT_INVALID:
            return None
        return CREDIT_TABLE[self.value]

    @property
    def rnr_timer_ms(self) -> float | None:
        return rnr_timer_ms(self.value) if self.type == AETH_RNR_NAK else None

    @property
    def nak_name(self) -> str | None:
        if self.type != AETH_NAK:
            return None
        return NAK_NAMES.get(self.value, f"Reserved NAK code {self.value}")

    def syndrome_text(self) -> str:
        if self.type == AETH_ACK:
            if self.value == CREDIT_INVALID:
                return "ACK, credits invalid (31)"
            return f"ACK, {CREDIT_TABLE[self.value]} credits (code {self.value})"
        if self.type == AETH_RNR_NAK:
            return f"RNR NAK, timer {rnr_timer_ms(self.value):g} ms (code {self.value})"
        if self.type == AETH_NAK:
            return f"NAK, {self.nak_name} ({self.value})"
        return f"Reserved syndrome type (value {self.value})"

    def describe(self, field: str) -> str:
        if field == "type":
            return f"{AETH_TYPE_NAMES[self.type]} ({self.type})"
        if field == "value":
            return self.syndrome_text()
        return Header.describe(self, field)

    def ws_fields(self) -> dict[str, int]:
        out = {"infiniband.aeth.syndrome": self.syndrome}
        out["infiniband.aeth.syndrome.reserved"] = self.reserved
        out["infiniband.aeth.syndrome.opcode"] = self.type
        sub = {
            AETH_ACK: "credit_count",
            AETH_RNR_NAK: "timer",
            AETH_RESERVED: "reserved_value",
            AETH_NAK: "error_code",
        }[self.type]
        out[f"infiniband.aeth.syndrome.{sub}"] = self.value
        out["infiniband.aeth.msn"] = self.msn
        return out

    def validate(self, offset: int = 0) -> list[MalformedError]:
        if self.type == AETH_RESERVED:
            return [MalformedError("AETH", "type", offset, self.type, "0 (ACK), 1 (RNR NAK) or 3 (NAK)")]
        return []

    def summary(self) -> str:
        return f"AETH({self.syndrome_text()}, msn={self.msn})"


@dataclass(frozen=True, slots=True)
class AtomicAckETH(Header):
    """Atomic ACK Extended Transport Header, 8 bytes: the remote data before the atomic."""

    orig_data: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "AtomicAckETH",
        "IBA Vol 1 9.3.6 (Atomic ACK ETH)",
        F("orig_data", 64, "infiniband.atomicacketh.origremdt", fmt="hex"),
        ws="infiniband.atomicacketh",
    )


@dataclass(frozen=True, slots=True)
class ImmDt(Header):
    """Immediate Data Extended Transport Header, 4 bytes, opaque to the transport."""

    imm: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "ImmDt",
        "IBA Vol 1 9.3.7 (Immediate Data ETH)",
        F("imm", 32, "infiniband.immdt", fmt="hex"),
        ws="infiniband.immdt",
    )


@dataclass(frozen=True, slots=True)
class IETH(Header):
    """Invalidate Extended Transport Header, 4 bytes: the R_Key the responder invalidates."""

    r_key: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "IETH",
        "IBA Vol 1 9.3.8 (Invalidate ETH)",
        F("r_key", 32, "infiniband.ieth", fmt="hex"),
        ws="infiniband.ieth",
    )


@dataclass(frozen=True, slots=True)
class XRCETH(Header):
    """XRC Extended Transport Header, 4 bytes: the destination XRC SRQ (IBA Vol 1 A14)."""

    reserved: int = 0
    xrcsrq: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "XRCETH",
        "IBA Vol 1 Annex A14.6.1 (XRC ETH)",
        F("reserved", 8, None, reserved=True),
        F("xrcsrq", 24, "rdmalab.xrceth.xrcsrq", fmt="hex", doc="XRC SRQ number"),
        ws="rdmalab.xrceth",
    )


@dataclass(frozen=True, slots=True)
class FETH(Header):
    """FLUSH Extended Transport Header, 4 bytes (IBA Memory Placement Extensions).

    Layout as Linux rxe encodes it (``rxe_hdr.h``: ``FETH_PLT_MASK 0x0f``, ``FETH_SEL_MASK
    0x30``).  Wireshark 4.4 uses narrower masks (SEL 0x18, PLT 0x07); rxe is what puts FLUSH
    on the wire, so we follow it.
    """

    reserved: int = 0
    sel: int = 0
    plt: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "FETH",
        "IBA Vol 1 Annex A19 (FLUSH ETH), as Linux rxe_hdr.h",
        F("reserved", 26, None, reserved=True),
        F("sel", 2, "rdmalab.feth.sel", doc="Selectivity level"),
        F("plt", 4, "rdmalab.feth.plt", doc="Placement type"),
        ws="rdmalab.feth",
    )


@dataclass(frozen=True, slots=True)
class CNPPad(Header):
    """The 16 reserved bytes after the BTH of a RoCEv2 CNP (opcode 0x81), zero on the wire."""

    reserved: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "CNP",
        "IBA RoCEv2 Annex A17.9.3 (CNP format)",
        F("reserved", 128, "rdmalab.cnp.reserved", fmt="bytes", reserved=True),
        ws="rdmalab.cnp",
    )
