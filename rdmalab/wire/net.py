"""The Ethernet, IP, UDP and TCP headers RDMA rides on.

Declared with the same machinery as the IB headers so that a whole frame can be drawn field by
field and so the ICRC code can mask exactly the fields RoCEv2 says are variant.  Only the fixed
parts are declared; IPv4 and TCP options are carried as opaque bytes.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import ClassVar

from rdmalab.wire.errors import MalformedError
from rdmalab.wire.header import F, Header, Layout, layout

ETHERTYPE_IPV4 = 0x0800
ETHERTYPE_IPV6 = 0x86DD
ETHERTYPE_VLAN = 0x8100
ETHERTYPE_QINQ = 0x88A8
#: the TPID of pre-802.1ad stacked tags (Cisco's and others' "QinQ" before IEEE gave 0x88A8): Wireshark 4.0
#: reads it as an 802.1Q tag (packet-vlan.c registers its ``vlan.qinq_ethertype`` preference, 0x9100 by
#: default, in the ``ethertype`` table beside 0x8100): the same ``vlan`` layer and fields
ETHERTYPE_VLAN_9100 = 0x9100
#: the EtherTypes an 802.1Q tag (:class:`VLAN`) follows
VLAN_TPIDS = (ETHERTYPE_VLAN, ETHERTYPE_VLAN_9100)
ETHERTYPE_ROCE = 0x8915  # RoCEv1 (IBA Annex A16)
IPPROTO_TCP = 6
IPPROTO_UDP = 17
ROCEV2_PORT = 4791  # IANA "roce", IBA Annex A17.2


#: an Ethernet frame's addresses, and an 802.1Q tag's control information: the fields before the type/length
#: field that the type and the length forms share (:class:`EthernetLength`, :class:`VLANLength`)
_ETH_ADDRESSES = (F("dst", 48, "eth.dst", fmt="mac"), F("src", 48, "eth.src", fmt="mac"))
_VLAN_TCI = (F("pcp", 3, "vlan.priority"), F("dei", 1, "vlan.dei"), F("vid", 12, "vlan.id"))


@dataclass(frozen=True, slots=True)
class Ethernet(Header):
    dst: int = 0
    src: int = 0
    ethertype: int = ETHERTYPE_IPV4

    LAYOUT: ClassVar[Layout] = layout("Ethernet", "IEEE 802.3 clause 3", *_ETH_ADDRESSES,
                                      F("ethertype", 16, "eth.type", fmt="hex"), ws="eth")


@dataclass(frozen=True, slots=True)
class VLAN(Header):
    pcp: int = 0
    dei: int = 0
    vid: int = 0
    ethertype: int = ETHERTYPE_IPV4

    LAYOUT: ClassVar[Layout] = layout("VLAN", "IEEE 802.1Q 9.6", *_VLAN_TCI,
                                      F("ethertype", 16, "vlan.etype", fmt="hex"), ws="vlan")


#: the type/length field after the addresses (and after an 802.1Q tag): a value up to 1500 is a length,
#: the octets of MAC client data that follow (an LLC PDU, IEEE 802.3 3.2.6), 0x0600 and up a type;
#: the values between are neither (Wireshark 4.0, packet-eth.c: ``eth.invalid_lentype``).  After the
#: addresses 0 is a type all the same (packet-eth.c: Cisco MDS switches' "Vegas" frames); after an 802.1Q
#: tag, a length (packet-vlan.c).  Wireshark 4.0 takes what follows an 802.1ad tag for a type whatever it is.
MAX_8023_LENGTH = 1500
MIN_ETHERTYPE = 0x0600


@dataclass(frozen=True, slots=True)
class EthernetLength(Header):
    """An Ethernet frame whose type/length field is a length (IEEE 802.3 3.2.6; Wireshark's ``eth.len``):
    the MAC client data (an IEEE 802.2 LLC PDU) is that many octets; what follows it is padding or a
    trailer.  The decoder reads no further than the addresses and the length."""

    dst: int = 0
    src: int = 0
    length: int = 0

    LAYOUT: ClassVar[Layout] = layout("Ethernet", "IEEE 802.3 3.2.6", *_ETH_ADDRESSES, F("length", 16, "eth.len"),
                                      ws="eth")


@dataclass(frozen=True, slots=True)
class EthernetBadType(Header):
    """An Ethernet frame whose type/length field is neither a length nor a type (1501 to 1535; Wireshark's
    ``eth.invalid_lentype``).  Nothing after it is read."""

    dst: int = 0
    src: int = 0
    type_length: int = 0

    LAYOUT: ClassVar[Layout] = layout("Ethernet", "IEEE 802.3 3.2.6", *_ETH_ADDRESSES,
                                      F("type_length", 16, "eth.invalid_lentype", fmt="hex"), ws="eth")


@dataclass(frozen=True, slots=True)
class VLANLength(Header):
    """An 802.1Q tag followed by a length, not a type (:class:`EthernetLength`; Wireshark's ``vlan.len``)."""

    pcp: int = 0
    dei: int = 0
    vid: int = 0
    length: int = 0

    LAYOUT: ClassVar[Layout] = layout("VLAN", "IEEE 802.1Q 9.6", *_VLAN_TCI, F("length", 16, "vlan.len"), ws="vlan")


@dataclass(frozen=True, slots=True)
class QinQ(Header):
    """An IEEE 802.1ad service tag (S-TAG, TPID 0x88A8: a provider's tag outside the customer's
    802.1Q tag; IEEE 802.1Q 9.6, the same fields as a C-TAG).  Wireshark names it ``ieee8021ad``
    and its type field ``ieee8021ah.etype`` (packet-ieee8021ah.c declares the field for both)."""

    pcp: int = 0
    dei: int = 0
    vid: int = 0
    ethertype: int = ETHERTYPE_VLAN

    LAYOUT: ClassVar[Layout] = layout(
        "IEEE 802.1ad",
        "IEEE 802.1Q 9.6 (S-TAG)",
        F("pcp", 3, "ieee8021ad.priority"),
        F("dei", 1, "ieee8021ad.dei"),
        F("vid", 12, "ieee8021ad.id"),
        F("ethertype", 16, "ieee8021ah.etype", fmt="hex"),
        ws="ieee8021ad",
    )


@dataclass(frozen=True, slots=True)
class EthernetFCS(Header):
    """The frame check sequence that ends an Ethernet frame when the capture kept it (IEEE 802.3
    3.2.9: a CRC-32 of the frame from the destination address on, sent least significant octet
    first).  ``fcs`` is its four octets as read, big-endian, which is how Wireshark shows ``eth.fcs``;
    :func:`ethernet_trailer` finds it."""

    fcs: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "Ethernet FCS",
        "IEEE 802.3 3.2.9",
        F("fcs", 32, "eth.fcs", fmt="hex"),
        ws="eth",
    )


#: Wireshark's ``eth.fcs.status`` when it does not check the FCS (its default: the ``eth.check_fcs``
#: preference off): 2, "Unverified" (epan/proto.h ``PROTO_CHECKSUM_E_UNVERIFIED``)
FCS_UNVERIFIED = 2
#: the shortest Ethernet frame without its FCS (IEEE 802.3 4.4.2: 64 octets with it); a shorter
#: datagram is padded up to it
ETH_MIN_FRAME = 60


@dataclass(frozen=True, slots=True)
class EthernetTrailer:
    """The octets of an Ethernet frame after the datagram its EtherType carries, divided as Wireshark
    divides them (``epan/dissectors/packet-eth.c`` ``add_ethernet_trailer``, after
    ``packet-ethertype.c`` ``add_dix_trailer``): padding up to the 60-octet minimum (zeros only), then a
    trailer (what else a device appended), then the FCS.  Offsets are into the packet's data."""

    padding_at: int
    padding: bytes
    trailer_at: int
    trailer: bytes
    fcs_at: int | None = None
    fcs: int | None = None
    #: what the FCS should be (the CRC-32 of the frame before it), when all of the frame was captured
    fcs_expected: int | None = None
    #: Wireshark's name for the trailer: ``eth.trailer``, ``vlan.trailer`` after an 802.1Q tag, ``sll.trailer``
    #: after a Linux cooked header
    trailer_name: str = "eth.trailer"

    def shifted(self, by: int) -> EthernetTrailer:
        """The same trailer in data that starts ``by`` octets earlier (an ERF record's headers before the frame)."""
        return EthernetTrailer(self.padding_at + by, self.padding, self.trailer_at + by, self.trailer,
                               None if self.fcs_at is None else self.fcs_at + by, self.fcs, self.fcs_expected,
                               self.trailer_name)


def ethernet_trailer(data: bytes, datagram_end: int, frame_len: int, fcs_len: int = -1, *,
                     tagged: bool = False, name: str = "eth.trailer") -> EthernetTrailer | None:
    """What follows the datagram that ends at ``datagram_end`` in the Ethernet frame ``data`` (as
    captured; ``frame_len`` octets long on the wire), as Wireshark 4.0 divides it, or None when nothing
    of it was captured.

    ``fcs_len`` is what the capture says of an FCS: 4 (it has one: a pcap file's header with its FCS
    bits, a pcapng interface's ``if_fcslen``), 0 (it has none) or -1 (it does not say: most pcap and
    pcapng files of link type Ethernet, an ERF record), in which case a frame of 64 octets or more
    whose trailer (after any padding) has 4 octets or more is taken to end in one.
    Padding is counted only where the frame had to be padded (the datagram with its headers under 60
    octets, the frame 60 or more) and only when those octets are all zero.  After an 802.1Q tag
    (``tagged``) Wireshark looks for no FCS in the trailer and names it ``vlan.trailer``; otherwise the
    trailer is called ``name`` (a Linux cooked header's dissector gives ``sll.trailer`` and an
    ``fcs_len`` of 0: ``epan/dissectors/packet-sll.c``, its call of ``ethertype``).

    When the capture says 4, Wireshark (``epan/dissectors/packet-eth.c``) takes the FCS off the frame's
    end before it reads what the EtherType names (measured with tshark 4.0.17,
    ``tests/capture/test_declared_fcs.py``): a datagram that runs into those 4 octets leaves no trailer,
    and the FCS is the frame's last 4 octets all the same; otherwise the octets after the datagram,
    FCS included, are divided as above, and an FCS is shown only when 4 octets or more are left after
    the padding (none, and no trailer, when fewer are).  After a tag the trailer ends where the FCS
    starts, and the FCS is shown when the frame is 64 octets or more (or under 60: no padding; from 60 to
    63 Wireshark shows padding where the FCS would be, which this does not divide)."""
    reported = frame_len - datagram_end
    captured = min(len(data), frame_len) - datagram_end
    declared = fcs_len == 4
    if declared and reported <= 4:  # the datagram reaches into the FCS: the FCS, nothing else
        return _fcs_only(data, datagram_end, frame_len, "vlan.trailer" if tagged else name)
    if reported <= 0 or captured <= 0:
        return None
    fcs_outside = tagged and declared  # (the FCS off the end before the tag's trailer is divided)
    if fcs_outside:
        captured = min(captured, reported - 4)
        reported -= 4
    if tagged:
        fcs_len = 0
    pad = 0
    if frame_len >= ETH_MIN_FRAME and frame_len - reported < ETH_MIN_FRAME:
        pad = ETH_MIN_FRAME - (frame_len - reported)
        if pad > captured or any(data[datagram_end:datagram_end + pad]):
            pad = 0
    reported -= pad
    captured = max(captured - pad, 0)
    fcs = (declared and not tagged and reported >= 4) or (fcs_len < 0 and frame_len >= 64 and reported >= 4)
    if declared and not tagged and reported < 4:  # too few left for the FCS: Wireshark shows neither
        reported = captured = 0
    if fcs:
        reported -= 4
        captured = min(captured, reported) if captured < reported + 4 else captured - 4
    if fcs_outside:
        fcs = frame_len >= 64 or frame_len < ETH_MIN_FRAME
    at = datagram_end + pad
    fcs_at = frame_len - 4 if fcs and 4 <= frame_len <= len(data) else None  # (captured whole)
    value, expected = _fcs_of(data, fcs_at, frame_len)
    return EthernetTrailer(datagram_end, bytes(data[datagram_end:at]), at, bytes(data[at:at + max(0, captured)]),
                           fcs_at, value, expected, "vlan.trailer" if tagged else name)


def _fcs_of(data: bytes, fcs_at: int | None, frame_len: int) -> tuple[int | None, int | None]:
    """The FCS at ``fcs_at`` (None: none) and, when the whole frame was captured, what its CRC-32 is."""
    if fcs_at is None:
        return None, None
    value = int.from_bytes(data[fcs_at:fcs_at + 4], "big")
    expected = None
    if fcs_at + 4 == frame_len:
        expected = int.from_bytes(zlib.crc32(data[:fcs_at]).to_bytes(4, "little"), "big")
    return value, expected


def _fcs_only(data: bytes, datagram_end: int, frame_len: int, name: str) -> EthernetTrailer | None:
    """A frame whose datagram runs into the FCS its capture says it keeps: the last 4 octets, when captured."""
    fcs_at = frame_len - 4 if 4 <= frame_len <= len(data) else None
    if fcs_at is None:
        return None
    value, expected = _fcs_of(data, fcs_at, frame_len)
    return EthernetTrailer(datagram_end, b"", datagram_end, b"", fcs_at, value, expected, name)


_IPV4_FIRST_2 = (F("version", 4, "ip.version", const=4), F("ihl", 4, "ip.hdr_len"))
_IPV4_FIRST_4 = (*_IPV4_FIRST_2, F("dscp", 6, "ip.dsfield.dscp"),
                 F("ecn", 2, "ip.dsfield.ecn", doc="RFC 3168 5: 0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE (Congestion Experienced)"), F("total_length", 16, "ip.len"))


#: an IPv4 header's fields up to its source address (:class:`IPv4`, :class:`IPv4Routed`)
_IPV4_TO_SRC = (*_IPV4_FIRST_4, F("identification", 16, "ip.id", fmt="hex"), F("flags", 3, "ip.flags", fmt="hex"),
                F("frag_offset", 13, "ip.frag_offset"), F("ttl", 8, "ip.ttl"), F("protocol", 8, "ip.proto"),
                F("checksum", 16, "ip.checksum", fmt="hex"), F("src", 32, "ip.src", fmt="ipv4"))


@dataclass(frozen=True, slots=True)
class IPv4(Header):
    version: int = 4
    ihl: int = 5
    dscp: int = 0
    ecn: int = 0
    total_length: int = 0
    identification: int = 0
    flags: int = 0b010
    frag_offset: int = 0
    ttl: int = 64
    protocol: int = IPPROTO_UDP
    checksum: int = 0
    src: int = 0
    dst: int = 0

    LAYOUT: ClassVar[Layout] = layout("IPv4", "RFC 791 3.1", *_IPV4_TO_SRC, F("dst", 32, "ip.dst", fmt="ipv4"), ws="ip")

    #: each flag bit's own Wireshark field (FT_BOOLEAN within the 3-bit ip.flags: reserved, Don't
    #: Fragment, More Fragments, RFC 791 3.1; packet-ip.c's hf_ip_flags_rf/df/mf), as display
    #: filters and ``-T fields`` name them
    FLAG_FIELDS: ClassVar[tuple[tuple[str, int], ...]] = (("ip.flags.rb", 0x4), ("ip.flags.df", 0x2), ("ip.flags.mf", 0x1))

    def validate(self, offset: int = 0) -> list[MalformedError]:
        if self.ihl < 5:
            return [MalformedError("IPv4", "ihl", offset, self.ihl, "at least 5 (20 bytes)")]
        return []

    @property
    def header_len(self) -> int:
        return self.ihl * 4

    def ws_fields(self) -> dict[str, int]:
        return _ipv4_ws_fields(self)

    def with_checksum(self) -> IPv4:
        """The same header with its checksum computed (RFC 791, one's complement sum)."""
        return self.replace(checksum=internet_checksum(self.replace(checksum=0).encode()))


#: the IPv4 options (RFC 791 3.1) that name the route a datagram is to take: Loose and Strict Source and Record Route
IPOPT_LSRR, IPOPT_SSRR = 131, 137


def source_route_destination(data: bytes, pos: int, header_len: int) -> int | None:
    """Where the final destination of the IPv4 header at ``pos`` (``header_len`` octets) is, when its
    options hold a loose or strict source route that has addresses left (its pointer at one of them):
    the route's last address (RFC 791 3.1: the header's destination is only the next hop); None when there
    is none, as Wireshark 4.0 finds it (packet-ip.c ``get_dst_offset``: the first such option, the options
    walked by their lengths, stopping at an end-of-list option or a length that does not fit)."""
    at, end = pos + 20, min(pos + header_len, len(data))
    while at < end:
        kind = data[at]
        if kind == 0:  # (end of the option list)
            return None
        if kind == 1:  # (no operation: one octet)
            at += 1
            continue
        if at + 1 >= end:
            return None
        length = data[at + 1]
        if length < 2 or at + length > end:
            return None
        if kind in (IPOPT_LSRR, IPOPT_SSRR):
            pointer = data[at + 2] if at + 2 < end else 0
            if pointer < 4 or pointer & 3 or pointer > length:  # (the route used up: the header's destination)
                return None
            return at + length - 4
        at += length
    return None


@dataclass(frozen=True, slots=True)
class IPv4Routed(IPv4):
    """An IPv4 header whose options hold a source route with addresses left (:func:`source_route_destination`):
    its destination field is the route's current hop, which Wireshark names ``ip.cur_rt``; ``ip.dst`` (the
    summary's, the conversations') is the route's last address, :class:`IPv4RouteDestination` after it."""

    LAYOUT: ClassVar[Layout] = layout("IPv4", "RFC 791 3.1", *_IPV4_TO_SRC, F("dst", 32, "ip.cur_rt", fmt="ipv4"),
                                      ws="ip")


@dataclass(frozen=True, slots=True)
class IPv4RouteDestination(Header):
    """The last address of an IPv4 source route option, the datagram's final destination: Wireshark's
    ``ip.dst`` (and ``ip.addr``) of such a datagram, shown in the option (packet-ip.c)."""

    dst: int = 0

    PSEUDO: ClassVar[bool] = True  # (an address within the IPv4 header's options: a summary names no header for it)
    LAYOUT: ClassVar[Layout] = layout("IPv4 source route destination", "RFC 791 3.1 (Source and Record Route)",
                                      F("dst", 32, "ip.dst", fmt="ipv4"), ws="ip")


@dataclass(frozen=True, slots=True)
class IPv4Bogus(Header):
    """An IPv4 header whose header length is under 20 octets (IHL under 5): its first octet, all of it
    that tshark shows (packet-ip.c: "Bogus IP header length", nothing more read).  The decoder puts it
    in the frame's layers in the place of the :class:`IPv4` header (whose checks name the problem)."""

    version: int = 4
    ihl: int = 0

    LAYOUT: ClassVar[Layout] = layout("IPv4", "RFC 791 3.1 (the first octet)", *_IPV4_FIRST_2, ws="ip")

    def ws_fields(self) -> dict[str, int]:
        return _ipv4_ws_fields(self)


@dataclass(frozen=True, slots=True)
class IPv4BogusLength(Header):
    """An IPv4 header whose total length is shorter than the header: its first 4 octets, up to the
    total length, all of it that tshark shows (packet-ip.c: "Bogus IP length", nothing more read), in
    the place of the :class:`IPv4` header as :class:`IPv4Bogus`."""

    version: int = 4
    ihl: int = 5
    dscp: int = 0
    ecn: int = 0
    total_length: int = 0

    LAYOUT: ClassVar[Layout] = layout("IPv4", "RFC 791 3.1 (the first 4 octets)", *_IPV4_FIRST_4, ws="ip")

    def ws_fields(self) -> dict[str, int]:
        return _ipv4_ws_fields(self)


def _ipv4_ws_fields(h: IPv4 | IPv4Bogus | IPv4BogusLength) -> dict[str, int]:
    """An IPv4 header's (or its first octets') Wireshark fields: ``ip.hdr_len`` in octets, as Wireshark
    counts it (the header counts 32-bit words)."""
    out = Header.ws_fields(h)
    out["ip.hdr_len"] = h.ihl * 4
    return out


@dataclass(frozen=True, slots=True)
class IPv6(Header):
    version: int = 6
    tclass: int = 0
    flowlabel: int = 0
    payload_length: int = 0
    next_header: int = IPPROTO_UDP
    hop_limit: int = 64
    src: int = 0
    dst: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "IPv6",
        "RFC 8200 3",
        F("version", 4, "ipv6.version", const=6),
        F("tclass", 8, "ipv6.tclass", fmt="hex"),
        F("flowlabel", 20, "ipv6.flow", fmt="hex"),
        F("payload_length", 16, "ipv6.plen"),
        F("next_header", 8, "ipv6.nxt"),
        F("hop_limit", 8, "ipv6.hlim"),
        F("src", 128, "ipv6.src", fmt="ipv6"),
        F("dst", 128, "ipv6.dst", fmt="ipv6"),
        ws="ipv6",
    )


def _ext_fields(proto: str) -> tuple[F, ...]:
    """Next header and length (in 8-byte units after the first 8): how every IPv6 extension header but the
    Fragment header begins (RFC 8200 4.3-4.6)."""
    return F("next_header", 8, f"{proto}.nxt"), F("length", 8, f"{proto}.len")


@dataclass(frozen=True, slots=True)
class IPv6HopByHop(Header):
    """The fixed part of an IPv6 Hop-by-Hop Options header (RFC 8200 4.3): the next header and the
    header's length in 8-byte units after the first 8; its options follow (not decoded)."""

    next_header: int = 58
    length: int = 0

    LAYOUT: ClassVar[Layout] = layout("IPv6 Hop-by-Hop Options", "RFC 8200 4.3", *_ext_fields("ipv6.hopopts"),
                                      ws="ipv6.hopopts")


@dataclass(frozen=True, slots=True)
class IPv6DestOptions(Header):
    """The fixed part of an IPv6 Destination Options header (RFC 8200 4.6), laid out as Hop-by-Hop's."""

    next_header: int = 58
    length: int = 0

    LAYOUT: ClassVar[Layout] = layout("IPv6 Destination Options", "RFC 8200 4.6", *_ext_fields("ipv6.dstopts"),
                                      ws="ipv6.dstopts")


@dataclass(frozen=True, slots=True)
class IPv6Routing(Header):
    """The fixed part of an IPv6 Routing header (RFC 8200 4.4): next header, length in 8-byte units
    after the first 8, routing type and segments left; the type-specific data follows (not decoded)."""

    next_header: int = 58
    length: int = 0
    routing_type: int = 0
    segments_left: int = 0

    LAYOUT: ClassVar[Layout] = layout("IPv6 Routing", "RFC 8200 4.4", *_ext_fields("ipv6.routing"),
                                      F("routing_type", 8, "ipv6.routing.type"),
                                      F("segments_left", 8, "ipv6.routing.segleft"), ws="ipv6.routing")


@dataclass(frozen=True, slots=True)
class IPv6Fragment(Header):
    """An IPv6 Fragment header (RFC 8200 4.5), all 8 bytes."""

    next_header: int = 58
    reserved: int = 0
    offset: int = 0
    reserved_bits: int = 0
    more: int = 0
    ident: int = 0

    LAYOUT: ClassVar[Layout] = layout("IPv6 Fragment", "RFC 8200 4.5",
                                      F("next_header", 8, "ipv6.fraghdr.nxt"),
                                      F("reserved", 8, "ipv6.fraghdr.reserved_octet", fmt="hex", reserved=True),
                                      F("offset", 13, "ipv6.fraghdr.offset"),
                                      F("reserved_bits", 2, "ipv6.fraghdr.reserved_bits", reserved=True),
                                      F("more", 1, "ipv6.fraghdr.more"), F("ident", 32, "ipv6.fraghdr.ident", fmt="hex"),
                                      ws="ipv6.fraghdr")


#: the IPv6 extension headers a frame's decoder walks through, by next-header value (RFC 8200 4; IANA
#: "Assigned Internet Protocol Numbers"): 0 Hop-by-Hop, 43 Routing, 44 Fragment, 60 Destination Options
IPV6_EXTENSIONS: dict[int, type[Header]] = {0: IPv6HopByHop, 43: IPv6Routing, 44: IPv6Fragment, 60: IPv6DestOptions}


#: a UDP header's ports (RFC 768), all of it a datagram that ends after 4 octets holds (:class:`UDPPorts`)
_UDP_PORTS = (F("sport", 16, "udp.srcport"), F("dport", 16, "udp.dstport"))


@dataclass(frozen=True, slots=True)
class UDP(Header):
    sport: int = 0
    dport: int = ROCEV2_PORT
    length: int = 0
    checksum: int = 0

    LAYOUT: ClassVar[Layout] = layout("UDP", "RFC 768", *_UDP_PORTS, F("length", 16, "udp.length"),
                                      F("checksum", 16, "udp.checksum", fmt="hex"), ws="udp")


@dataclass(frozen=True, slots=True)
class UDPPorts(Header):
    """The ports of a UDP header whose datagram ends before its length (an IP length too short for the
    header: RFC 768's 8 octets), as Wireshark shows it: the fields the datagram holds whole, then a
    malformed packet (:class:`UDPNoChecksum`: the length too)."""

    sport: int = 0
    dport: int = 0

    LAYOUT: ClassVar[Layout] = layout("UDP", "RFC 768 (the ports)", *_UDP_PORTS, ws="udp")


@dataclass(frozen=True, slots=True)
class UDPNoChecksum(Header):
    """A UDP header whose datagram ends inside its checksum (:class:`UDPPorts`): ports and length."""

    sport: int = 0
    dport: int = 0
    length: int = 0

    LAYOUT: ClassVar[Layout] = layout("UDP", "RFC 768 (without the checksum)", *_UDP_PORTS,
                                      F("length", 16, "udp.length"), ws="udp")


#: a TCP header's first 8 octets: ports and sequence number (RFC 9293 3.1), all an ICMP error must quote
_TCP_FIRST_8 = (F("sport", 16, "tcp.srcport"), F("dport", 16, "tcp.dstport"), F("seq", 32, "tcp.seq_raw"))
#: the octets 8 to 16 of a TCP header: acknowledgment number, header length, flags and window (RFC 9293 3.1)
_TCP_ACK_TO_WINDOW = (F("ack", 32, "tcp.ack_raw"), F("data_offset", 4, "tcp.hdr_len"),
                      F("reserved", 3, None, reserved=True), F("flags", 9, "tcp.flags", fmt="hex"),
                      F("window", 16, "tcp.window_size_value"))
#: the last 4 octets of a TCP header without options: checksum and urgent pointer
_TCP_LAST_4 = (F("checksum", 16, "tcp.checksum", fmt="hex"), F("urgent", 16, "tcp.urgent_pointer"))


@dataclass(frozen=True, slots=True)
class TCP(Header):
    sport: int = 0
    dport: int = 0
    seq: int = 0
    ack: int = 0
    data_offset: int = 5
    reserved: int = 0
    flags: int = 0
    window: int = 65535
    checksum: int = 0
    urgent: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "TCP",
        "RFC 9293 3.1",
        *_TCP_FIRST_8,
        *_TCP_ACK_TO_WINDOW,
        *_TCP_LAST_4,
        ws="tcp",
    )

    FIN: ClassVar[int] = 0x001
    SYN: ClassVar[int] = 0x002
    RST: ClassVar[int] = 0x004
    PSH: ClassVar[int] = 0x008
    ACK: ClassVar[int] = 0x010
    URG: ClassVar[int] = 0x020
    ECE: ClassVar[int] = 0x040  # RFC 3168 6.1
    CWR: ClassVar[int] = 0x080  # RFC 3168 6.1
    AE: ClassVar[int] = 0x100  # RFC 9768 (Accurate ECN; RFC 3540's NS before it), as Wireshark 4.0.17 names it
    #: the three reserved bits before the flags (RFC 9293 3.1), which Wireshark shows as part of tcp.flags
    #: (``tcp.flags`` holds 12 bits, ``tcp.flags.res`` is set when any of the three is)
    RES: ClassVar[int] = 0xE00

    #: each flag bit's own Wireshark field (FT_BOOLEAN, its mask: ``tshark -G fields`` of Wireshark
    #: 4.0, packet-tcp.c's hf_tcp_flags_*), as display filters and ``-T fields`` name them
    FLAG_FIELDS: ClassVar[tuple[tuple[str, int], ...]] = (
        ("tcp.flags.fin", 0x001), ("tcp.flags.syn", 0x002), ("tcp.flags.reset", 0x004), ("tcp.flags.push", 0x008),
        ("tcp.flags.ack", 0x010), ("tcp.flags.urg", 0x020), ("tcp.flags.ece", 0x040), ("tcp.flags.cwr", 0x080),
        ("tcp.flags.ae", 0x100), ("tcp.flags.res", 0xE00))

    def validate(self, offset: int = 0) -> list[MalformedError]:
        if self.data_offset < 5:
            return [MalformedError("TCP", "data_offset", offset + 12, self.data_offset, "at least 5 (20 bytes)")]
        return []

    @property
    def header_len(self) -> int:
        return self.data_offset * 4

    def ws_fields(self) -> dict[str, int]:
        out = Header.ws_fields(self)
        out["tcp.hdr_len"] = self.data_offset * 4  # Wireshark counts bytes, the header counts 32-bit words
        if self.data_offset < 5:  # a bogus header length: Wireshark shows nothing of the header after it
            return {k: v for k, v in out.items() if k in _TCP_BOGUS_SHOWN}
        out["tcp.flags"] = self.all_flags  # (the reserved bits too, as Wireshark's 12-bit field)
        return out

    @property
    def all_flags(self) -> int:
        """The flags with the reserved bits before them (:attr:`RES`): Wireshark's 12-bit ``tcp.flags``."""
        return self.reserved << 9 | self.flags


#: what tshark 4.0.17 shows of a TCP header whose data offset is under 5 (packet-tcp.c: "Bogus TCP header
#: length"): the fields before the data offset, and it; no acknowledgment number, flags or window
_TCP_BOGUS_SHOWN = frozenset({"tcp.srcport", "tcp.dstport", "tcp.seq_raw", "tcp.seq", "tcp.hdr_len"})


#: a quoted TCP header's sequence number as tshark 4.0.17 shows it in an ICMP error's quote of an IPv4
#: datagram (packet-tcp.c, for a TCP header inside an error packet whose addresses are IPv4: the number
#: as it is, under tcp.seq, and no tcp.seq_raw, however much of the header the quote holds)
_TCP_SEQ_IN_QUOTE = F("seq", 32, "tcp.seq")


@dataclass(frozen=True, slots=True)
class TCPQuoted(Header):
    """The first 8 octets of a TCP header, all that an ICMP error must quote of the segment that caused it
    (RFC 792: "64 bits of Data Datagram"; RFC 9293 3.1), in the quote of an IPv4 datagram: ports and
    sequence number (tcp.seq, the number as it is), as tshark 4.0.17 shows a quote of 8 to 15 octets of
    TCP header (packet-tcp.c).  Only :attr:`rdmalab.wire.packet.Packet.quoted` holds it."""

    sport: int = 0
    dport: int = 0
    seq: int = 0

    LAYOUT: ClassVar[Layout] = layout("TCP", "RFC 9293 3.1 (the first 8 octets)", *_TCP_FIRST_8[:2],
                                      _TCP_SEQ_IN_QUOTE, ws="tcp")


@dataclass(frozen=True, slots=True)
class TCPQuotedPorts(Header):
    """The first 4 to 7 octets of a TCP header in an ICMP error's quote (shorter than RFC 792 asks): the
    ports alone, as tshark 4.0.17 shows them (packet-tcp.c), in no conversation."""

    sport: int = 0
    dport: int = 0

    LAYOUT: ClassVar[Layout] = layout("TCP", "RFC 9293 3.1 (the ports)", *_TCP_FIRST_8[:2], ws="tcp")


@dataclass(frozen=True, slots=True)
class TCPQuoted6(Header):
    """:class:`TCPQuoted` in the quote of an IPv6 datagram (an ICMPv6 error's): the ports alone, as
    tshark 4.0.17 shows 8 to 15 octets of TCP header there (packet-tcp.c reads the sequence number of
    an IPv6 quote in its ordinary place, after the header's first 16 octets: none shown)."""

    sport: int = 0
    dport: int = 0
    seq: int = 0

    LAYOUT: ClassVar[Layout] = layout("TCP", "RFC 9293 3.1 (the first 8 octets)", *_TCP_FIRST_8[:2],
                                      F("seq", 32, None), ws="tcp")


@dataclass(frozen=True, slots=True)
class TCPQuotedHead(TCP):
    """The first 16 octets of a TCP header in an ICMP error's quote of an IPv6 datagram: everything up to
    the window, as tshark 4.0.17 shows a quote of 16 to 19 octets of TCP header (packet-tcp.c stops
    before the checksum; the header's conversation is counted, tcp.stream).  A :class:`TCP` whose
    checksum and urgent pointer were not quoted (0, not shown).  Only a quote holds it."""

    LAYOUT: ClassVar[Layout] = layout("TCP", "RFC 9293 3.1 (the first 16 octets)", *_TCP_FIRST_8,
                                      *_TCP_ACK_TO_WINDOW, ws="tcp")


@dataclass(frozen=True, slots=True)
class TCPQuotedHead4(TCP):
    """:class:`TCPQuotedHead` in the quote of an IPv4 datagram: its sequence number as tcp.seq, as it is
    (no tcp.seq_raw)."""

    LAYOUT: ClassVar[Layout] = layout("TCP", "RFC 9293 3.1 (the first 16 octets)", *_TCP_FIRST_8[:2],
                                      _TCP_SEQ_IN_QUOTE, *_TCP_ACK_TO_WINDOW, ws="tcp")


@dataclass(frozen=True, slots=True)
class TCPQuoted4(TCP):
    """A whole TCP header in an ICMP error's quote of an IPv4 datagram: a :class:`TCP` whose sequence
    number shows as tcp.seq, as it is (no tcp.seq_raw), as tshark 4.0.17 shows it (packet-tcp.c)."""

    LAYOUT: ClassVar[Layout] = layout("TCP", "RFC 9293 3.1", *_TCP_FIRST_8[:2], _TCP_SEQ_IN_QUOTE,
                                      *_TCP_ACK_TO_WINDOW, *_TCP_LAST_4, ws="tcp")


#: The TCP flag bits and their names, lowest bit first (RFC 9293 3.1; ECE and CWR RFC 3168 6.1, AE
#: RFC 9768), then the reserved bits: the order in which tshark 4.0.17 lists them ("[SYN, ACK]",
#: "[SYN, AE]", "[SYN, Reserved]").
TCP_FLAG_NAMES: tuple[tuple[int, str], ...] = (
    (TCP.FIN, "FIN"), (TCP.SYN, "SYN"), (TCP.RST, "RST"), (TCP.PSH, "PSH"), (TCP.ACK, "ACK"), (TCP.URG, "URG"),
    (TCP.ECE, "ECE"), (TCP.CWR, "CWR"), (TCP.AE, "AE"), (TCP.RES, "Reserved"))


def tcp_flag_names(flags: int) -> list[str]:
    """The names of the TCP flags set in ``flags``, lowest bit first: ``tcp_flag_names(0x12) == ["SYN", "ACK"]``.

    A caller that shows only some flags masks ``flags`` first, and joins the names its own way."""
    return [name for bit, name in TCP_FLAG_NAMES if flags & bit]


# --------------------------------------------------------------------------- TCP sequence numbers
# Sequence numbers count modulo 2^32 and compare in a window of half that space (RFC 9293 3.4:
# "the comparison operators ... are modulo 2**32"; RFC 1982 serial number arithmetic).

SEQ_MOD = 1 << 32
SEQ_MASK = SEQ_MOD - 1
SEQ_HALF = SEQ_MOD >> 1


def seq_add(seq: int, n: int) -> int:
    """``seq + n`` modulo 2^32 (``n`` may be negative): ``seq_add(0xFFFFFFFF, 1) == 0``."""
    return (seq + n) & SEQ_MASK


def seq_diff(a: int, b: int) -> int:
    """The signed distance ``a - b`` in TCP sequence space, in [-2^31, 2^31): positive when ``a`` is after
    ``b`` (``seq_diff(0, 0xFFFFFFFF) == 1``)."""
    return ((a - b + SEQ_HALF) & SEQ_MASK) - SEQ_HALF


def seq_max(a: int, b: int | None) -> int:
    """The later of two sequence numbers (``a`` when ``b`` is None): ``seq_max(5, 0xFFFFFFF0) == 5``."""
    return a if b is None or seq_diff(a, b) > 0 else b


def is_retransmission(seq: int, length: int, sent_end: int | None) -> bool:
    """Whether a segment of ``length`` payload octets at ``seq`` carries only octets sent before: it
    ends (``seq + length``, modulo 2^32) at or before ``sent_end``, the end of the furthest octets seen
    in that direction so far (None: none yet).  A segment without payload is never one."""
    return length > 0 and sent_end is not None and seq_diff(seq + length, sent_end) <= 0


def internet_checksum(data: bytes) -> int:
    """The Internet checksum (RFC 1071): one's complement of the one's complement sum."""
    if len(data) % 2:
        data += b"\0"
    total = sum(int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def tcp_checksum(ip: IPv4, segment: bytes) -> int:
    """TCP checksum over the IPv4 pseudo-header and the segment (RFC 9293 3.1), with the
    segment's own checksum field taken as zero."""
    seg = segment[:16] + b"\0\0" + segment[18:]
    pseudo = ip.src.to_bytes(4, "big") + ip.dst.to_bytes(4, "big") + bytes([0, IPPROTO_TCP]) + len(seg).to_bytes(2, "big")
    return internet_checksum(pseudo + seg)


def mac(text: str) -> int:
    """``"02:00:00:00:00:01"`` -> int, for building Ethernet headers."""
    return int(text.replace(":", "").replace("-", ""), 16)
