"""ARP, ICMP and ICMPv6: the control traffic beside RDMA in a real capture.

A capture of RoCE or iWARP on a real link also holds the frames that set the link up: ARP
resolving the peer's MAC before the first RoCEv2 packet or TCP SYN (RFC 826), IPv6 router and
neighbour solicitations of an interface coming up (RFC 4861), pings (RFC 792, RFC 4443).  They are
decoded so that a summary line says what they are, as tshark's does, and so that display filters
and ``-T fields`` know Wireshark's names for them (``arp``, ``arp.opcode``, ``icmpv6.type`` ...).

Only the fixed parts are declared: ARP for Ethernet hardware and IPv4 addresses (hardware type 1,
protocol 0x0800, sizes 6 and 4: every ARP an Ethernet RoCE capture holds) and for IPoIB and IPv4
(20-byte hardware addresses) whole; of other ARP packets the first 8 bytes; and the type, code and
checksum that begin every ICMP and ICMPv6 message.  The rest of a message is read only for its summary.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import ClassVar

from rdmalab.wire.header import F, Header, Layout, layout
from rdmalab.wire.net import ETHERTYPE_IPV4

ETHERTYPE_ARP = 0x0806  # RFC 826; IANA EtherType registry
IPPROTO_ICMP = 1  # RFC 792
IPPROTO_ICMPV6 = 58  # RFC 4443
ARP_HW_ETHERNET = 1  # RFC 826 (IANA ARP hardware type 1)
ARP_HW_INFINIBAND = 32  # RFC 4391 8 (IANA ARP hardware type 32)
ARP_REQUEST, ARP_REPLY = 1, 2  # RFC 826 (ar$op)


def _arp_fields(hw_type: int | None, hw_size: int | None, hw: str, hw_bits: int, hw_fmt: str) -> tuple[F, ...]:
    """The fields of an ARP packet (RFC 826): the fixed part (``hw_type`` and ``hw_size`` the values
    required, None: any), then, when ``hw_bits``, the sender's and target's hardware and IPv4 addresses
    (Wireshark's ``arp.src.<hw>``, ``arp.src.proto_ipv4`` ...)."""
    fixed = (F("hw_type", 16, "arp.hw.type", const=hw_type, doc="hardware type (1 Ethernet, 32 InfiniBand)"),
             F("proto_type", 16, "arp.proto.type", fmt="hex", const=None if hw_type is None else ETHERTYPE_IPV4,
               doc="protocol type (0x0800 IPv4)"),
             F("hw_size", 8, "arp.hw.size", const=hw_size),
             F("proto_size", 8, "arp.proto.size", const=None if hw_size is None else 4),
             F("opcode", 16, "arp.opcode", doc="1 request, 2 reply"))
    if not hw_bits:
        return fixed
    return (*fixed, F("src_hw", hw_bits, f"arp.src.{hw}", fmt=hw_fmt), F("src_ip", 32, "arp.src.proto_ipv4", fmt="ipv4"),
            F("dst_hw", hw_bits, f"arp.dst.{hw}", fmt=hw_fmt), F("dst_ip", 32, "arp.dst.proto_ipv4", fmt="ipv4"))


@dataclass(frozen=True, slots=True)
class ARP(Header):
    """An ARP packet for Ethernet and IPv4 (RFC 826: ar$hrd, ar$pro, ar$hln, ar$pln, ar$op, then the
    sender's and target's hardware and protocol addresses), 28 bytes."""

    hw_type: int = ARP_HW_ETHERNET
    proto_type: int = ETHERTYPE_IPV4
    hw_size: int = 6
    proto_size: int = 4
    opcode: int = ARP_REQUEST
    src_hw: int = 0
    src_ip: int = 0
    dst_hw: int = 0
    dst_ip: int = 0

    LAYOUT: ClassVar[Layout] = layout("ARP", "RFC 826 (packet format)",
                                      *_arp_fields(ARP_HW_ETHERNET, 6, "hw_mac", 48, "mac"), ws="arp")

    def summary(self) -> str:
        """What it asks or answers, in tshark's words (its ``packet-arp.c`` Info column)."""
        spa, tpa = ipaddress.IPv4Address(self.src_ip), ipaddress.IPv4Address(self.dst_ip)
        if self.opcode == ARP_REQUEST:
            if self.src_ip == 0:  # a probe (RFC 5227 2.1.1): is the address taken?
                return f"Who has {tpa}? (ARP Probe)"
            if spa == tpa:  # asks for its own address: an announcement (RFC 5227 2.3) or gratuitous
                return f"ARP Announcement for {spa}" if self.dst_hw == 0 else f"Gratuitous ARP for {spa} (Request)"
            return f"Who has {tpa}? Tell {spa}"
        if self.opcode == ARP_REPLY:
            mac = self.src_hw.to_bytes(6, "big").hex(":")
            if spa == tpa:
                return f"Gratuitous ARP for {spa} (Reply)"
            return f"{spa} is at {mac}"
        return f"ARP opcode {self.opcode}"


@dataclass(frozen=True, slots=True)
class ARPoIB(Header):
    """An ARP packet of IPoIB (RFC 4391 section 8: hardware type 32, 20-byte hardware addresses, the
    QPN and port GID of each end, and IPv4), 56 bytes."""

    hw_type: int = ARP_HW_INFINIBAND
    proto_type: int = ETHERTYPE_IPV4
    hw_size: int = 20
    proto_size: int = 4
    opcode: int = ARP_REQUEST
    src_hw: int = 0
    src_ip: int = 0
    dst_hw: int = 0
    dst_ip: int = 0

    # a hardware address: flags and QPN (4 bytes), then the port GID (RFC 4391 8)
    LAYOUT: ClassVar[Layout] = layout("ARP", "RFC 826 (packet format); RFC 4391 8 (IPoIB link-layer address)",
                                      *_arp_fields(ARP_HW_INFINIBAND, 20, "hw", 160, "bytes"), ws="arp")


@dataclass(frozen=True, slots=True)
class ARPOther(Header):
    """The fixed part of an ARP packet for other hardware or protocol addresses (RFC 826), 8 bytes.  Its
    addresses stay bytes."""

    hw_type: int = 32
    proto_type: int = ETHERTYPE_IPV4
    hw_size: int = 20
    proto_size: int = 4
    opcode: int = ARP_REQUEST

    LAYOUT: ClassVar[Layout] = layout("ARP", "RFC 826 (packet format)", *_arp_fields(None, None, "", 0, ""), ws="arp")


#: the first 6 bytes of an ARP packet for Ethernet and IPv4 (hardware type 1, protocol 0x0800, sizes 6
#: and 4): what :class:`ARP` declares; other ARP packets are :class:`ARPOther`
ARP_ETHERNET_IPV4 = bytes.fromhex("000108000604")


#: the same of IPoIB's ARP (hardware type 32, protocol 0x0800, sizes 20 and 4): :class:`ARPoIB`
ARP_IPOIB_IPV4 = bytes.fromhex("002008001404")


def decode_arp(data: bytes, pos: int, end: int) -> ARP | ARPoIB | ARPOther | None:
    """The ARP packet at ``pos`` (before ``end``): :class:`ARP` for Ethernet and IPv4, :class:`ARPoIB`
    for IPoIB and IPv4, else :class:`ARPOther`; None when not even the fixed part was captured."""
    if data[pos:pos + 6] == ARP_ETHERNET_IPV4 and end - pos >= 28:
        return ARP.decode(data, pos)
    if data[pos:pos + 6] == ARP_IPOIB_IPV4 and end - pos >= 56:
        return ARPoIB.decode(data, pos)
    if end - pos >= 8:
        return ARPOther.decode(data, pos)
    return None


def _icmp_fields(proto: str) -> tuple[F, ...]:
    """Type, code and checksum: how every ICMP (RFC 792) and ICMPv6 (RFC 4443 2.1) message begins."""
    return (F("type", 8, f"{proto}.type"), F("code", 8, f"{proto}.code"), F("checksum", 16, f"{proto}.checksum", fmt="hex"))


@dataclass(frozen=True, slots=True)
class ICMP(Header):
    """The first 4 bytes of every ICMP message (RFC 792): type, code, checksum."""

    type: int = 8
    code: int = 0
    checksum: int = 0

    LAYOUT: ClassVar[Layout] = layout("ICMP", "RFC 792", *_icmp_fields("icmp"), ws="icmp")


@dataclass(frozen=True, slots=True)
class ICMPv6(Header):
    """The first 4 bytes of every ICMPv6 message (RFC 4443 2.1): type, code, checksum."""

    type: int = 128
    code: int = 0
    checksum: int = 0

    LAYOUT: ClassVar[Layout] = layout("ICMPv6", "RFC 4443 2.1", *_icmp_fields("icmpv6"), ws="icmpv6")


#: ICMP types (RFC 792; IANA "ICMP Type Numbers"), named as Wireshark's Info column names them
ICMP_TYPES = {0: "Echo (ping) reply", 3: "Destination unreachable", 4: "Source quench (flow control)",
              5: "Redirect", 8: "Echo (ping) request", 11: "Time-to-live exceeded", 12: "Parameter problem",
              13: "Timestamp request", 14: "Timestamp reply"}
#: ICMPv6 types (RFC 4443 2.1, RFC 4861 4, RFC 3810 5.2), named as Wireshark's Info column names them
ICMPV6_TYPES = {1: "Destination Unreachable", 2: "Packet Too Big", 3: "Time Exceeded", 4: "Parameter Problem",
                128: "Echo (ping) request", 129: "Echo (ping) reply", 133: "Router Solicitation",
                134: "Router Advertisement", 135: "Neighbor Solicitation", 136: "Neighbor Advertisement",
                137: "Redirect", 143: "Multicast Listener Report Message v2"}


def icmp_summary(msg: bytes, ttl: int) -> str:
    """One ICMP message ``msg`` (from its type on) in a line: its type's name, and for an echo its
    identifier and sequence number (big- and little-endian, as tshark shows both) and the IP TTL.
    Requests and replies are not paired (tshark adds "(reply in N)" after reading both)."""
    kind = msg[0]
    name = ICMP_TYPES.get(kind, f"Type {kind}")
    if kind in (0, 8) and len(msg) >= 8:
        ident, seq = int.from_bytes(msg[4:6], "big"), int.from_bytes(msg[6:8], "big")
        return f"{name}  id=0x{ident:04x}, seq={seq}/{int.from_bytes(msg[6:8], 'little')}, ttl={ttl}"
    return name


def _option(msg: bytes, start: int, want: int) -> bytes | None:
    """The value of the first neighbour-discovery option of type ``want`` (RFC 4861 4.6: type, length in
    units of 8 bytes, value) in ``msg`` from ``start``; None if there is none or the options are damaged."""
    o = start
    while o + 2 <= len(msg):
        kind, units = msg[o], msg[o + 1]
        if units == 0 or o + 8 * units > len(msg):
            return None
        if kind == want:
            return msg[o + 2:o + 8 * units]
        o += 8 * units
    return None


def icmpv6_summary(msg: bytes, hop_limit: int) -> str:
    """One ICMPv6 message ``msg`` (from its type on) in a line, as tshark's Info column words it: the
    type's name; a solicitation's source link-layer address (option 1), a neighbour solicitation's or
    advertisement's target and the advertisement's flags; an echo's identifier, sequence and the hop
    limit (requests and replies not paired)."""
    kind = msg[0]
    name = ICMPV6_TYPES.get(kind, f"Unknown ICMPv6 type {kind}")
    if kind in (128, 129) and len(msg) >= 8:
        ident, seq = int.from_bytes(msg[4:6], "big"), int.from_bytes(msg[6:8], "big")
        return f"{name} id=0x{ident:04x}, seq={seq}, hop limit={hop_limit}"
    if kind in (133, 135):  # the source link-layer address option
        target = ""
        if kind == 135 and len(msg) >= 24:
            target = f" for {ipaddress.IPv6Address(msg[8:24])}"
        mac = _option(msg, 8 if kind == 133 else 24, 1)
        return f"{name}{target}" + (f" from {mac[:6].hex(':')}" if mac is not None and len(mac) >= 6 else "")
    if kind == 136 and len(msg) >= 24:
        flags = [word for bit, word in ((0x80, "rtr"), (0x40, "sol"), (0x20, "ovr")) if msg[4] & bit]
        return f"{name} {ipaddress.IPv6Address(msg[8:24])}" + (f" ({', '.join(flags)})" if flags else "")
    return name
