"""InfiniBand link, network and transport headers (IBA Vol 1, chapters 7 and 9).

Sizes and layouts follow the InfiniBand Architecture Specification Volume 1 (release 1.4),
section 7.7 (LRH), 8.3 (GRH), 9.2 (BTH) and 9.3 (extended transport headers), as encoded by
Linux ``include/rdma/ib_pack.h`` and ``drivers/infiniband/sw/rxe/rxe_hdr.h``.  Wireshark
display-filter names are those of ``epan/dissectors/packet-infiniband.c`` (4.0).
"""

from __future__ import annotations

import enum
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from rdmalab.wire.control import ETHERTYPE_ARP
from rdmalab.wire.errors import MalformedError
from rdmalab.wire.header import F, Header, Layout, compile_constructor, layout
from rdmalab.wire.net import ETHERTYPE_IPV4, ETHERTYPE_IPV6, TCP, UDP, IPv4, IPv6

# --------------------------------------------------------------------------- routing headers

LNH_RAW = 0
LNH_IP_NON_IBA = 1
LNH_IBA_LOCAL = 2
LNH_IBA_GLOBAL = 3
LNH_NAMES = {0: "Raw", 1: "IP non-IBA", 2: "IBA local (BTH next)", 3: "IBA global (GRH next)"}

GRH_NXTHDR_IBA = 0x1B  # IBA Vol 1 8.3.1: next header value for an IBA transport header

#: The IB MTUs: code -> bytes of payload a packet may carry (IBA Vol 1 14.2.5.6, PortInfo MTUCap and
#: NeighborMTU; the same codes in a CM REQ's Path MTU, 12.6.5, and in libibverbs' ``enum ibv_mtu``).
IB_MTU_BYTES: dict[int, int] = {1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}
IB_MTUS: tuple[int, ...] = tuple(IB_MTU_BYTES.values())  # 256 .. 4096, smallest first
_MTU_CODES: dict[int, int] = {nbytes: code for code, nbytes in IB_MTU_BYTES.items()}
_MTU_LIST = f"{', '.join(map(str, IB_MTUS[:-1]))} or {IB_MTUS[-1]}"


def mtu_bytes(code: int) -> int:
    """The bytes of an IB MTU code (1 -> 256 .. 5 -> 4096, IBA Vol 1 14.2.5.6; ``enum ibv_mtu``).

    Raises ValueError naming ``code`` when it is not one of the five codes."""
    nbytes = IB_MTU_BYTES.get(code)
    if nbytes is None:
        raise ValueError(f"MTU code {code!r} is not an IB MTU code: 1..5 ({_MTU_LIST} bytes)")
    return nbytes


def mtu_code(nbytes: int) -> int:
    """The IB MTU code of ``nbytes`` (256 -> 1 .. 4096 -> 5), the inverse of :func:`mtu_bytes`.

    Raises ValueError naming ``nbytes`` when it is not an IB MTU."""
    code = _MTU_CODES.get(nbytes)
    if code is None:
        raise ValueError(f"{nbytes!r} bytes is not an IB MTU ({_MTU_LIST})")
    return code


def check_mtu(nbytes: int, what: str = "mtu") -> int:
    """``nbytes`` if it is an IB MTU (256, 512, 1024, 2048 or 4096 bytes, IBA Vol 1 14.2.5.6), else
    ValueError: ``"<what> must be an IB MTU (256, 512, 1024, 2048 or 4096 bytes), not <nbytes>"``."""
    if nbytes not in _MTU_CODES:
        raise ValueError(f"{what} must be an IB MTU ({_MTU_LIST} bytes), not {nbytes!r}")
    return nbytes


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


# The RoCEv2 UDP source port of a connection (Linux include/rdma/ib_verbs.h, since 5.17; rxe sets it in
# rxe_modify_qp whenever the address vector is given, replacing the initial 0xC000 + hash_32(qpn, 14)).
ROCE_UDP_SPORT_MIN = 0xC000  # IB_ROCE_UDP_ENCAP_VALID_PORT_MIN: the 14 low bits carry the entropy
FLOW_LABEL_MASK = 0xFFFFF  # IB_GRH_FLOWLABEL_MASK


def calc_flow_label(lqpn: int, rqpn: int) -> int:
    """ib_verbs.h ``rdma_calc_flow_label``: a 20-bit flow label from the two QP numbers, the same
    at both ends (the product folded at bits 20 and 40)."""
    v = (lqpn * rqpn) & 0xFFFFFFFFFFFFFFFF
    v ^= v >> 20
    v ^= v >> 40
    return v & FLOW_LABEL_MASK


def flow_label_to_udp_sport(flow_label: int) -> int:
    """ib_verbs.h ``rdma_flow_label_to_udp_sport``: the 20-bit flow label folded into 14 bits, above 0xC000."""
    low, high = flow_label & 0x3FFF, flow_label & 0xFC000
    return (low ^ (high >> 14)) | ROCE_UDP_SPORT_MIN


def udp_sport(flow_label: int, lqpn: int, rqpn: int) -> int:
    """ib_verbs.h ``rdma_get_udp_sport``: the UDP source port of a QP's packets, from the address
    vector's flow label, or from the QP numbers when the flow label is 0."""
    return flow_label_to_udp_sport(flow_label or calc_flow_label(lqpn, rqpn))


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
        if field == "opcode":  # the opcode table is at the end of this module
            return f"{opcode_name(self.opcode)} (0x{self.opcode:02x})"
        return Header.describe(self, field)


# --------------------------------------------------------------------------- PSN arithmetic
# The BTH's PSN is 24 bits (IBA Vol 1 9.2); PSNs count modulo 2^24 and compare in a window of half
# that space (9.7.1, "PSN" serial arithmetic): ``a`` is after ``b`` when ``(a - b) mod 2^24`` is
# below 2^23 (rxe ``psn_compare``).  Hot paths take these functions as module-level aliases.

PSN_BITS = 24
PSN_MOD = 1 << PSN_BITS  # 2^24 PSNs
PSN_MASK = PSN_MOD - 1  # 0xFFFFFF
PSN_HALF = PSN_MOD >> 1  # 2^23: the comparison window


def psn_add(psn: int, n: int) -> int:
    """``psn + n`` modulo 2^24 (``n`` may be negative): ``psn_add(0xFFFFFF, 1) == 0``."""
    return (psn + n) & PSN_MASK


def psn_diff(a: int, b: int) -> int:
    """The signed distance ``a - b`` in PSN space, in [-2^23, 2^23): positive when ``a`` is after ``b``
    (``psn_diff(0, 0xFFFFFF) == 1``).  Shifting by half the space, wrapping and shifting back maps
    ``a - b`` into that window."""
    return ((a - b + PSN_HALF) & PSN_MASK) - PSN_HALF


def psn_unwrap(psn: int, ref: int) -> int:
    """``psn`` (24 bits) as the unbounded integer nearest ``ref``: ``ref + psn_diff(psn, ref)``; used to
    walk a capture's PSNs on a line that does not wrap (``psn_unwrap(2, 0xFFFFFF) == 0x1000002``)."""
    return ref + ((psn - ref + PSN_HALF) & PSN_MASK) - PSN_HALF


# --------------------------------------------------------------------------- timeouts


def timeout_ns(code: int) -> int:
    """The duration of a 5-bit timeout code, 4.096 us x 2^code, in ns (exactly ``4096 << code``).

    The one formula of the QP's Local ACK Timeout (IBA Vol 1 9.7.6.1.3, 11.2.4.2) and of the CM's
    response and ACK timeouts (12.6.5).  Raises ValueError naming ``code`` outside 0..31."""
    if not 0 <= code <= 31:
        raise ValueError(f"timeout code {code!r} is not a 5-bit code (0..31)")
    return 4096 << code


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


#: ``make_reth(va, r_key, dma_length)``: a RETH built by the generated constructor (see
#: :func:`~rdmalab.wire.header.compile_constructor`); the engine builds one for every WRITE it sends
make_reth = compile_constructor(RETH)


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

    # the engine builds one of these for every ACK it sends: the generated constructor, not __init__
    @classmethod
    def ack(cls, msn: int, credits: int = CREDIT_INVALID) -> AETH:
        return _make_aeth(0, AETH_ACK, credits, msn) if cls is AETH else cls(0, AETH_ACK, credits, msn)

    @classmethod
    def rnr_nak(cls, msn: int, timer: int) -> AETH:
        return cls(0, AETH_RNR_NAK, timer, msn)

    @classmethod
    def nak(cls, msn: int, code: int) -> AETH:
        return cls(0, AETH_NAK, code, msn)

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


_make_aeth = compile_constructor(AETH)


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


# =========================================================================== the BTH opcode table
# Declared here, after the headers it names, so that the declarations import one way; the
# public module for it is rdmalab.wire.opcodes.
#
# Bits 7-5 of the opcode select the transport, bits 4-0 the operation (IBA Vol 1 9.2.1,
# table 38).  For each opcode the table gives the operation, its place in a message
# (first/middle/last/only), whether it carries immediate data or an invalidate key, the extended
# headers that follow the BTH in order, and whether a payload follows.
#
# Sources for the header sequences: IBA Vol 1 table 38; Linux ``rxe_opcode.c``; for XRC (IBA
# Annex A14) and the Memory Placement Extensions (FLUSH 0x1C, ATOMIC WRITE 0x1D) Linux
# ``include/rdma/ib_pack.h``.  XRC requests carry an XRCETH before the RC headers; XRC responses
# do not (Annex A14.6.1).  RoCEv2 congestion notification packets use opcode 0x81 (RoCEv2 Annex
# A17.9.3) and carry 16 reserved bytes.


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

    # Members are singletons compared by identity, so the identity hash agrees with ``==``; Enum's own
    # ``__hash__`` is a Python function (hash of the name), and the engine looks opcodes up by these
    # several times a packet.
    __hash__ = object.__hash__

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

    __hash__ = object.__hash__  # as Op's

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

    # Derived from the fields above once, in __post_init__: the engine reads them for every packet.
    is_request: bool = field(init=False, repr=False, compare=False)
    is_response: bool = field(init=False, repr=False, compare=False)
    header_size: int = field(init=False, repr=False, compare=False)  # bytes of extended headers after the BTH
    first_or_only: bool = field(init=False, repr=False, compare=False)
    last_or_only: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        put = object.__setattr__  # a frozen dataclass sets its derived fields this way
        put(self, "is_request", self.op not in (Op.RDMA_READ_RESPONSE, Op.ACKNOWLEDGE, Op.ATOMIC_ACKNOWLEDGE, Op.CNP))
        put(self, "is_response", self.op in (Op.RDMA_READ_RESPONSE, Op.ACKNOWLEDGE, Op.ATOMIC_ACKNOWLEDGE))
        put(self, "header_size", sum(h.LAYOUT.size for h in self.headers))
        put(self, "first_or_only", self.pos in (Pos.FIRST, Pos.ONLY, None))
        put(self, "last_or_only", self.pos in (Pos.LAST, Pos.ONLY, None))


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
#: opcodes of requests (SEND, WRITE, READ request, atomics, FLUSH, RESYNC: every transport), and of
#: responses (READ responses, ACK/NAK, ATOMIC ACK); the CNP is neither
REQUEST_OPCODES: frozenset[int] = frozenset(code for code, info in OPCODES.items() if info.is_request)
RESPONSE_OPCODES: frozenset[int] = frozenset(code for code, info in OPCODES.items() if info.is_response)


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


ACK_OPCODE = find_opcode(Transport.RC, Op.ACKNOWLEDGE)  # 0x11: ACK and NAK (IBA Vol 1 9.7.5.1)


# ============================================================================ IPoIB

#: The EtherTypes an IPoIB header is recognised for, with their names: IPv4, ARP and IPv6, what
#: IPoIB carries (RFC 4391 sections 6 and 9; RFC 4391 itself is IPv4/ARP, RFC 4861 over it IPv6).
IPOIB_ETHERTYPES: dict[int, str] = {ETHERTYPE_IPV4: "IPv4", ETHERTYPE_ARP: "ARP", ETHERTYPE_IPV6: "IPv6"}


@dataclass(frozen=True, slots=True)
class IPoIB(Header):
    """IPoIB encapsulation header, 4 bytes (RFC 4391 section 6): an EtherType, then 16 reserved
    bits that are zero.  It starts the payload of the IB SEND that carries an IP datagram or an ARP
    packet (a UD SEND in datagram mode, RFC 4391; an RC SEND in connected mode, RFC 4755).

    Wireshark shows it under ``infiniband.payload`` ("IBA Payload - appears to be EtherType
    encapsulated") with the EtherType as ``infiniband.rwh.etype``."""

    ethertype: int = ETHERTYPE_IPV4
    reserved: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "IPoIB",
        "RFC 4391 6 (IPoIB encapsulation header)",
        F("ethertype", 16, "infiniband.rwh.etype", fmt="hex", doc="EtherType of what follows: IPv4, ARP, IPv6"),
        F("reserved", 16, None, reserved=True),
        ws="infiniband.payload",
    )

    def carried(self, headers: Sequence[Header]) -> list[Header]:
        """The headers after this one among a packet's ``headers`` (what it carries, decoded)."""
        seq = list(headers)
        return seq[next((i for i, h in enumerate(seq) if h is self), len(seq)) + 1:]

    def protocol(self, headers: Sequence[Header]) -> str:
        """The innermost protocol it carries, as tshark's Protocol column names it: ``UDP``,
        ``TCP``, ``ICMP``, ``ICMPv6`` (by the IP protocol number, 1 or 58), ``IPv4``/``IPv6``
        (another protocol), ``ARP``."""
        name = IPOIB_ETHERTYPES.get(self.ethertype, f"0x{self.ethertype:04x}")
        for h in self.carried(headers):
            if isinstance(h, UDP | TCP):
                return h.LAYOUT.name
            if isinstance(h, IPv4 | IPv6):
                proto = h.protocol if isinstance(h, IPv4) else h.next_header
                name = _IP_PROTOCOL_NAMES.get(proto, h.LAYOUT.name)
        return name

    def info(self, headers: Sequence[Header]) -> str | None:
        """``IPoIB``, the EtherType's name, the inner addresses, and the protocol inside with its
        ports, e.g. ``IPoIB IPv4 10.0.0.1 → 10.0.0.2 UDP 9 → 9`` or ``IPoIB IPv6 fe80::1 → ff02::1
        ICMPv6`` or ``IPoIB ARP``."""
        parts = ["IPoIB", IPOIB_ETHERTYPES.get(self.ethertype, f"EtherType 0x{self.ethertype:04x}")]
        inner = self.carried(headers)
        for h in inner:
            if isinstance(h, IPv4 | IPv6):
                addr = ipaddress.IPv4Address if isinstance(h, IPv4) else ipaddress.IPv6Address
                parts.append(f"{addr(h.src)} → {addr(h.dst)}")
            elif isinstance(h, UDP | TCP):
                parts.append(f"{h.LAYOUT.name} {h.sport} → {h.dport}")
        proto = self.protocol(headers)
        if proto not in (parts[1], "UDP", "TCP"):  # ICMP, ICMPv6: named, not decoded further
            parts.append(proto)
        return " ".join(parts)


#: IP protocol numbers (IANA) whose name tshark's Protocol column shows for an IP datagram that
#: rdmalab decodes no further
_IP_PROTOCOL_NAMES = {1: "ICMP", 58: "ICMPv6"}
