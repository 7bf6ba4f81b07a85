"""ARP, ICMP and ICMPv6: the control traffic beside RDMA in a real capture.

A capture of RoCE or iWARP on a real link also holds the frames that set the link up: ARP
resolving the peer's MAC before the first RoCEv2 packet or TCP SYN (RFC 826), IPv6 router and
neighbour solicitations of an interface coming up (RFC 4861), pings (RFC 792, RFC 4443).  They are
decoded so that a summary line says what they are, as tshark's does, and so that display filters
and ``-T fields`` know Wireshark's names for them (``arp``, ``arp.opcode``, ``icmpv6.type`` ...).

Only the fixed parts are declared: ARP for Ethernet hardware and IPv4 addresses (hardware type 1,
protocol 0x0800, sizes 6 and 4: every ARP an Ethernet RoCE capture holds) and for IPoIB and IPv4
(20-byte hardware addresses) whole; of other ARP packets the first 8 bytes; and the type, code and
checksum that begin every ICMP and ICMPv6 message.  The rest of a message is read only for its summary,
which names every type (and the codes of the types whose codes tshark names) as tshark's Info column does.
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
        return _arp_summary(self.opcode, self.src_ip, self.dst_ip, self.dst_hw == 0,
                            self.src_hw.to_bytes(6, "big").hex(":"))


def _arp_summary(opcode: int, src_ip: int, dst_ip: int, no_target_hw: bool, src_hw: str) -> str:
    spa, tpa = ipaddress.IPv4Address(src_ip), ipaddress.IPv4Address(dst_ip)
    if opcode == ARP_REQUEST:
        if src_ip == 0:  # a probe (RFC 5227 2.1.1): is the address taken?
            return f"Who has {tpa}? (ARP Probe)"
        if spa == tpa:  # asks for its own address: an announcement (RFC 5227 2.3) or gratuitous
            return f"ARP Announcement for {spa}" if no_target_hw else f"Gratuitous ARP for {spa} (Request)"
        return f"Who has {tpa}? Tell {spa}"
    if opcode == ARP_REPLY:
        if spa == tpa:
            return f"Gratuitous ARP for {spa} (Reply)"
        return f"{spa} is at {src_hw}"
    return f"ARP opcode {opcode}"


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

    def summary(self) -> str:
        """As :meth:`ARP.summary` words it; the 20-byte hardware address in hex digits, as tshark shows it."""
        return _arp_summary(self.opcode, self.src_ip, self.dst_ip, self.dst_hw == 0, self.src_hw.to_bytes(20, "big").hex())


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


@dataclass(frozen=True, slots=True)
class ICMPEcho(Header):
    """The first 8 bytes of an ICMP message with an identifier and a sequence number (RFC 792: echo,
    timestamp, information; RFC 950: address mask): type, code, checksum, identifier, sequence number."""

    type: int = 8
    code: int = 0
    checksum: int = 0
    ident: int = 0
    seq: int = 0

    LAYOUT: ClassVar[Layout] = layout("ICMP", "RFC 792", *_icmp_fields("icmp"), F("ident", 16, "icmp.ident"),
                                      F("seq", 16, "icmp.seq"), ws="icmp")


@dataclass(frozen=True, slots=True)
class ICMPv6Echo(Header):
    """The first 8 bytes of an ICMPv6 echo request or reply (RFC 4443 4.1, 4.2): type, code, checksum,
    identifier, sequence number."""

    type: int = 128
    code: int = 0
    checksum: int = 0
    ident: int = 0
    seq: int = 0

    LAYOUT: ClassVar[Layout] = layout("ICMPv6", "RFC 4443 4.1", *_icmp_fields("icmpv6"),
                                      F("ident", 16, "icmpv6.echo.identifier", fmt="hex"),
                                      F("seq", 16, "icmpv6.echo.sequence_number"), ws="icmpv6")


#: ICMP types (RFC 792, RFC 950, RFC 1256, RFC 1393, RFC 2521, RFC 8335; IANA "ICMP Type Numbers"),
#: named as Wireshark's Info column names them; every other type is "Unknown ICMP (obsolete or malformed?)"
ICMP_TYPES = {0: "Echo (ping) reply", 1: "Reserved", 2: "Reserved", 3: "Destination unreachable",
              4: "Source quench (flow control)", 5: "Redirect", 6: "Alternate host address", 8: "Echo (ping) request",
              9: "Router advertisement", 10: "Router solicitation", 11: "Time-to-live exceeded",
              12: "Parameter problem", 13: "Timestamp request", 14: "Timestamp reply", 15: "Information request",
              16: "Information reply", 17: "Address mask request", 18: "Address mask reply",
              19: "Reserved (for security)", 30: "Traceroute", 31: "Datagram Conversion Error",
              32: "Mobile Host Redirect", 33: "IPv6 Where-Are-You", 34: "IPv6 I-Am-Here",
              35: "Mobile Registration Request", 36: "Mobile Registration Reply", 37: "Domain Name Request",
              38: "Domain Name Reply", 39: "SKIP", 40: "Photuris", 41: "Experimental mobility protocols",
              42: "Extended Echo request", 43: "Extended Echo reply"}
#: the codes of the ICMP types whose Info names their code (RFC 792, RFC 1812 5.2.7.1, RFC 2521 3,
#: RFC 8335 3): a code not listed is "Unknown code: N"
ICMP_CODES = {
    3: {0: "Network unreachable", 1: "Host unreachable", 2: "Protocol unreachable", 3: "Port unreachable",
        4: "Fragmentation needed", 5: "Source route failed", 6: "Destination network unknown",
        7: "Destination host unknown", 8: "Source host isolated", 9: "Network administratively prohibited",
        10: "Host administratively prohibited", 11: "Network unreachable for TOS", 12: "Host unreachable for TOS",
        13: "Communication administratively filtered", 14: "Host precedence violation",
        15: "Precedence cutoff in effect"},
    5: {0: "Redirect for network", 1: "Redirect for host", 2: "Redirect for TOS and network",
        3: "Redirect for TOS and host"},
    6: {0: "Alternate address for host"},
    9: {0: "Normal router advertisement", 16: "Does not route common traffic"},
    11: {0: "Time to live exceeded in transit", 1: "Fragment reassembly time exceeded"},
    12: {0: "Pointer indicates the error", 1: "Required option missing", 2: "Bad length"},
    40: {0: "Bad SPI", 1: "Authentication Failed", 2: "Decompression Failed", 3: "Decryption Failed",
         4: "Need Authentication", 5: "Need Authorization"},
    42: {0: "No error"},
    43: {0: "No error", 1: "Malformed Query", 2: "No Such Interface", 3: "No Such Table Entry",
         4: "Multiple Interfaces Satisfy Query"},
}
#: echo request and reply types by IP version: ICMP (RFC 792), ICMPv6 (RFC 4443 4.1, 4.2)
ECHO_TYPES = {4: (8, 0), 6: (128, 129)}
#: ICMP types that carry an identifier and a sequence number (RFC 792: echo, timestamp, information; RFC 950: address mask)
ICMP_ID_SEQ = frozenset({0, 8, 13, 14, 15, 16, 17, 18})
#: the ICMP error messages, which quote the datagram that caused them after their 8-byte header: Destination
#: Unreachable, Source Quench, Redirect, Time Exceeded, Parameter Problem (RFC 792: "Internet Header + 64 bits
#: of Data Datagram"; RFC 1812 4.3.2.3: as much of it as fits in 576 octets)
ICMP_ERRORS = frozenset({3, 4, 5, 11, 12})
#: the ICMPv6 error messages that quote the packet that caused them, "as much of invoking packet as possible
#: without the ICMPv6 packet exceeding the minimum IPv6 MTU" (RFC 4443 3.1-3.4): Destination Unreachable,
#: Packet Too Big, Time Exceeded, Parameter Problem
ICMPV6_ERRORS = frozenset({1, 2, 3, 4})

#: ICMPv6 types (RFC 4443 2.1, RFC 4861 4, RFC 2710 3, RFC 3810 5, RFC 2894, RFC 4620, RFC 3122, RFC 6275,
#: RFC 3971, RFC 4286, RFC 6775, RFC 7731, RFC 8335; IANA "ICMPv6 Parameters"), named as Wireshark's Info
#: column names them; every other type is "Unknown (N)"
ICMPV6_TYPES = {1: "Destination Unreachable", 2: "Packet Too Big", 3: "Time Exceeded", 4: "Parameter Problem",
                100: "Private experimentation", 101: "Private experimentation",
                127: "Reserved for expansion of ICMPv6 error messages",
                128: "Echo (ping) request", 129: "Echo (ping) reply", 130: "Multicast Listener Query",
                131: "Multicast Listener Report", 132: "Multicast Listener Done", 133: "Router Solicitation",
                134: "Router Advertisement", 135: "Neighbor Solicitation", 136: "Neighbor Advertisement",
                137: "Redirect", 138: "Router Renumbering", 139: "Node Information Query",
                140: "Node Information Reply", 141: "Inverse Neighbor Discovery Solicitation",
                142: "Inverse Neighbor Discovery Advertisement", 143: "Multicast Listener Report Message v2",
                144: "Home Agent Address Discovery Request", 145: "Home Agent Address Discovery Reply",
                146: "Mobile Prefix Solicitation", 147: "Mobile Prefix Advertisement",
                148: "Certification Path Solicitation", 149: "Certification Path Advertisement",
                150: "Experimental Mobility", 151: "Multicast Router Advertisement", 152: "Multicast Router Solicitation",
                153: "Multicast Router Termination", 154: "FMIPv6", 155: "RPL Control", 156: "Locator Update", 157: "Duplicate Address Request",
                158: "Duplicate Address Confirmation", 159: "MPL Control Message", 160: "Extended Echo request",
                161: "Extended Echo reply", 200: "Private experimentation", 201: "Private experimentation",
                255: "Reserved for expansion of ICMPv6 informational messages"}
#: the codes of the ICMPv6 types whose Info names their code (RFC 4443 3.1, 3.3, 3.4; RFC 2894 3.1;
#: RFC 4620 4; RFC 6550 6; RFC 8335 3): a code not listed is "Unknown (N)", of a Destination Unreachable "Unknown"
ICMPV6_CODES = {
    1: {0: "no route to destination", 1: "Administratively prohibited", 2: "Beyond scope of source address",
        3: "Address unreachable", 4: "Port unreachable", 5: "Source address failed ingress/egress policy",
        6: "Reject route to destination", 7: "Error in Source Routing Header"},
    3: {0: "hop limit exceeded in transit", 1: "fragment reassembly time exceeded"},
    4: {0: "erroneous header field encountered", 1: "unrecognized Next Header type encountered",
        2: "unrecognized IPv6 option encountered", 3: "IPv6 First Fragment has incomplete IPv6 Header Chain"},
    138: {0: "Command", 1: "Result"},
    139: {0: "Query subject = IPv6 addresses", 1: "Query subject = DNS name or empty",
          2: "Query subject = IPv4 addresses"},
    140: {0: "Successful", 1: "Refused", 2: "Unknown query type"},
    155: {0: "DODAG Information Solicitation", 1: "DODAG Information Object", 2: "Destination Advertisement Object",
          3: "Destination Advertisement Object Acknowledgment", 4: "P2P Discovery Reply Object",
          5: "P2P Discovery Reply Object Acknowledgement"},
    160: {0: "No error"},
    161: {0: "No error", 1: "Malformed Query", 2: "No Such Interface", 3: "No Such Table Entry",
          4: "Multiple Interfaces Satisfy Query"},
}


def decode_icmp(data: bytes, pos: int, end: int, six: bool) -> ICMP | ICMPEcho | ICMPv6 | ICMPv6Echo:
    """The header of the ICMP (``six``: ICMPv6) message at ``pos`` (at least 4 bytes before ``end``): with
    its identifier and sequence number where its type has them and they were captured."""
    kind = data[pos]
    if end - pos >= 8 and (kind in ECHO_TYPES[6] if six else kind in ICMP_ID_SEQ):
        return (ICMPv6Echo if six else ICMPEcho).decode(data, pos)
    return (ICMPv6 if six else ICMP).decode(data, pos)


def icmp_summary(msg: bytes, ttl: int | None) -> str:
    """One ICMP message ``msg`` (from its type on) in a line, as tshark's Info column words it: its
    type's name in 20 characters; the code's name where the type names its codes; for a message with
    an identifier and a sequence number (echo, timestamp, information, address mask) both (the
    sequence big- and little-endian, as tshark shows it) and the IPv4 TTL ``ttl``.  A frame alone does not say
    which request a reply answers: :class:`rdmalab.capture.render.EchoPairs` pairs them in a capture."""
    kind = msg[0]
    name = ICMP_TYPES.get(kind)
    if kind == 9 and len(msg) >= 2 and msg[1] in (0, 16):
        name = "Mobile IP Advertisement"  # Wireshark's name for a router advertisement of these codes (RFC 5944 2.1)
    if name is None:
        return "Unknown ICMP (obsolete or malformed?)"
    text = f"{name:<20}"
    codes = ICMP_CODES.get(kind)
    if codes is not None and len(msg) >= 2:
        text += f" ({codes.get(msg[1], f'Unknown code: {msg[1]}')})"
    if kind in ICMP_ID_SEQ and len(msg) >= 8:
        ident, seq = int.from_bytes(msg[4:6], "big"), int.from_bytes(msg[6:8], "big")
        text += f" id=0x{ident:04x}, seq={seq}/{int.from_bytes(msg[6:8], 'little')}"
        if ttl is not None:  # (ICMP carried by IPv6 has no TTL to show, nor does tshark show one)
            text += f", ttl={ttl}"
    return text


def _link_addresses(msg: bytes, start: int) -> str:
    """`` from {MAC}`` for each source (option 1) and `` is at {MAC}`` for each target (option 2) link-layer
    address option among the neighbour-discovery options from ``start`` (RFC 4861 4.6.1) that holds an
    Ethernet address (one unit of 8 bytes, RFC 2464 8), in their order, as tshark's Info adds them (IPoIB's
    20-byte addresses, RFC 4391 9.1.1, it does not name); the options up to a damaged one."""
    out = []
    o = start
    while o + 2 <= len(msg):
        kind, units = msg[o], msg[o + 1]
        if units == 0 or o + 8 * units > len(msg):
            break
        if kind in (1, 2) and units == 1:
            out.append(f" {'from' if kind == 1 else 'is at'} {msg[o + 2:o + 8].hex(':')}")
        o += 8 * units
    return "".join(out)


#: where the options of each neighbour-discovery message start (RFC 4861 4.1-4.5)
_ND_OPTIONS = {133: 8, 134: 16, 135: 24, 136: 24, 137: 40}


def icmpv6_summary(msg: bytes, hop_limit: int) -> str:
    """One ICMPv6 message ``msg`` (from its type on) in a line, as tshark's Info column words it: the
    type's name; the code's name where the type names its codes (an experimental mobility's or FMIPv6
    message's subtype is not named); a neighbour solicitation's or advertisement's target and the
    advertisement's flags; the Ethernet addresses of a neighbour-discovery message's link-layer address
    options; an echo's identifier, sequence and the hop limit (paired in a capture by
    :class:`rdmalab.capture.render.EchoPairs`)."""
    kind = msg[0]
    text = ICMPV6_TYPES.get(kind, f"Unknown ({kind})")
    codes = ICMPV6_CODES.get(kind)
    if codes is not None and len(msg) >= 2:
        text += f" ({codes.get(msg[1], 'Unknown' if kind == 1 else f'Unknown ({msg[1]})')})"
    if kind in ECHO_TYPES[6] and len(msg) >= 8:
        ident, seq = int.from_bytes(msg[4:6], "big"), int.from_bytes(msg[6:8], "big")
        return f"{text} id=0x{ident:04x}, seq={seq}, hop limit={hop_limit}"
    if kind == 135 and len(msg) >= 24:
        text += f" for {ipaddress.IPv6Address(msg[8:24])}"
    elif kind == 136 and len(msg) >= 24:
        flags = [word for bit, word in ((0x80, "rtr"), (0x40, "sol"), (0x20, "ovr")) if msg[4] & bit]
        text += f" {ipaddress.IPv6Address(msg[8:24])} ({', '.join(flags) or 'none'})"
    if kind in _ND_OPTIONS:
        text += _link_addresses(msg, _ND_OPTIONS[kind])
    return text
