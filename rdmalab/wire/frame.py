"""Frames: Ethernet (with VLAN tags), IPv4/IPv6, UDP and TCP, down to the RDMA headers.

This is the top of :mod:`rdmalab.wire` (declarations -> packets -> MAD/CM -> frames): it
decodes whole frames (``decode_ethernet``, ``decode_ip``, ``decode_ib`` for native IB from the
LRH, RoCEv1 after its EtherType), including the MADs that QP0/QP1 datagrams carry.

``decode_ethernet`` recognises RoCEv1 (EtherType 0x8915, IBA Annex A16) and RoCEv2 (UDP
destination port 4791 over IPv4 or IPv6, any source port, IBA Annex A17).  TCP segments are
decoded to their payload; iWARP framing needs the byte stream, which
:mod:`rdmalab.wire.iwarp` handles.  ``encode_rocev2`` and ``encode_rocev1`` build complete frames
with lengths, the IPv4 checksum and the ICRC filled in.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rdmalab.wire import crc as _crc
from rdmalab.wire.control import (
    ARP,
    ETHERTYPE_ARP,
    ICMP_ERRORS,
    ICMPV6_ERRORS,
    IPPROTO_ICMP,
    IPPROTO_ICMPV6,
    ARPoIB,
    ARPOther,
    decode_arp,
    decode_icmp,
    icmp_summary,
    icmpv6_summary,
)
from rdmalab.wire.errors import DecodeError, MalformedError, TruncatedError
from rdmalab.wire.header import Header
from rdmalab.wire.ib import (
    BTH,
    DETH,
    GRH,
    GRH_NXTHDR_IBA,
    GSI_QKEY,
    IPOIB_ETHERTYPES,
    LNH_IBA_GLOBAL,
    LNH_IBA_LOCAL,
    LRH,
    IPoIB,
    Op,
    Pos,
    Transport,
    find_opcode,
)
from rdmalab.wire.mad import carries_mad
from rdmalab.wire.net import (
    ETHERTYPE_IPV4,
    ETHERTYPE_IPV6,
    ETHERTYPE_QINQ,
    ETHERTYPE_ROCE,
    ETHERTYPE_VLAN,
    IPPROTO_TCP,
    IPPROTO_UDP,
    IPV6_EXTENSIONS,
    MAX_8023_LENGTH,
    MIN_ETHERTYPE,
    ROCEV2_PORT,
    TCP,
    UDP,
    VLAN,
    VLAN_TPIDS,
    Ethernet,
    EthernetBadType,
    EthernetLength,
    IPv4,
    IPv4Bogus,
    IPv4BogusLength,
    IPv4Routed,
    IPv4RouteDestination,
    IPv6,
    IPv6DestOptions,
    IPv6Fragment,
    IPv6HopByHop,
    IPv6Routing,
    QinQ,
    TCPQuoted,
    TCPQuoted4,
    TCPQuoted6,
    TCPQuotedHead,
    TCPQuotedHead4,
    TCPQuotedPorts,
    UDPNoChecksum,
    UDPPorts,
    VLANLength,
    ethernet_trailer,
    source_route_destination,
    tcp_checksum,
)
from rdmalab.wire.packet import Layer, Packet, _problem, decode_transport, encode_ib, encode_transport, guarded
from rdmalab.wire.pfc import ETHERTYPE_MAC_CONTROL, PFC, PFC_OPCODE

AddressLike = str | int | ipaddress.IPv4Address | ipaddress.IPv6Address

if TYPE_CHECKING:
    from rdmalab.wire.cm import CMMessage


def decode_ethernet(data: bytes | bytearray | memoryview, *, lenient: bool = False, rocev2_ports: Sequence[int] = (ROCEV2_PORT,),
                    frame_len: int | None = None, fcs_len: int = -1) -> Packet:
    """Decode an Ethernet frame (as a pcap with LINKTYPE_ETHERNET holds it).

    ``frame_len`` is the frame's length on the wire (the record's; None: ``len(data)``); with it the
    octets after the datagram are divided into padding, trailer and FCS, for a capture that says its
    frames keep an FCS of ``fcs_len`` octets, or (-1) does not say
    (:func:`~rdmalab.wire.net.ethernet_trailer`, ``Packet.eth_trailer``), and an IP datagram whose
    header says it goes on past the frame's end ends there, a problem, as tshark has it (without it,
    bytes cut short are a datagram cut short: a truncated one)."""
    raw = bytes(data)
    pkt = Packet(raw, encap="eth" if len(raw) >= 14 else "other")  # (no whole Ethernet header: nothing decoded)
    size = len(raw) if frame_len is None else frame_len
    # (the frame's end on the wire, its FCS off where the capture says it keeps one: where an IP
    # datagram whose header says more ends, as tshark's reported length has it)
    reported = None if frame_len is None else frame_len - max(fcs_len, 0)
    return guarded(pkt, lenient, lambda: _eth(raw, pkt, lenient, tuple(rocev2_ports), size, fcs_len, reported))


def decode_ip(data: bytes | bytearray | memoryview, *, lenient: bool = False, rocev2_ports: Sequence[int] = (ROCEV2_PORT,),
              frame_len: int | None = None) -> Packet:
    """Decode a raw IPv4 or IPv6 packet (LINKTYPE_RAW); ``frame_len``: its length on the wire (None: not
    known), past which its datagram does not go, whatever its header says."""
    raw = bytes(data)
    pkt = Packet(raw, encap="ip")
    return guarded(pkt, lenient, lambda: _ip(raw, pkt, 0, lenient, tuple(rocev2_ports), reported=frame_len))


def decode_after_ethertype(
    data: bytes | bytearray | memoryview,
    ethertype: int,
    offset: int,
    *,
    lenient: bool = False,
    prefix: Sequence[Header] = (),
    rocev2_ports: Sequence[int] = (ROCEV2_PORT,),
    frame_len: int | None = None,
    trailer: str | None = None,
) -> Packet:
    """Decode what follows an EtherType at ``offset`` (e.g. after a Linux cooked header); ``frame_len``:
    the frame's length on the wire (None: not known), past which an IP datagram does not go.  With
    ``trailer`` (the link layer's name for it, ``sll.trailer``) and ``frame_len``, the octets after the
    datagram are divided into padding and that trailer, with no FCS, as
    :func:`~rdmalab.wire.net.ethernet_trailer` divides them."""
    raw = bytes(data)
    pkt = Packet(raw, encap="eth")
    pos = 0
    for h in prefix:
        pkt.layers.append(Layer(h, pos))
        pos += h.LAYOUT.size

    def decode() -> None:
        try:
            _after_ethertype(raw, pkt, ethertype, offset, lenient, tuple(rocev2_ports), frame_len)
        finally:
            if trailer is not None and frame_len is not None and pkt.datagram_end is not None:
                pkt.eth_trailer = ethernet_trailer(raw, pkt.datagram_end, frame_len, 0, tagged=_tagged(pkt),
                                                   name=trailer)

    return guarded(pkt, lenient, decode)


def _eth(data: bytes, pkt: Packet, lenient: bool, ports: tuple[int, ...], frame_len: int, fcs_len: int,
         reported: int | None) -> None:
    eth = Ethernet.decode(data, 0)
    try:
        if MAX_8023_LENGTH < eth.ethertype < MIN_ETHERTYPE:  # (neither: nothing more read)
            pkt.layers.append(Layer(EthernetBadType.decode(data, 0), 0))
            pkt.payload_offset, pkt.payload_length = 14, len(data) - 14
        elif 0 < eth.ethertype <= MAX_8023_LENGTH:
            pkt.layers.append(Layer(EthernetLength.decode(data, 0), 0))
            _client_data(data, pkt, 14, eth.ethertype, "Ethernet", lenient, reported)
        else:
            pkt.layers.append(Layer(eth, 0))
            _after_ethertype(data, pkt, eth.ethertype, 14, lenient, ports, reported)
    finally:  # (a datagram the decoder gave up on part way has its length all the same)
        if pkt.datagram_end is not None:
            pkt.eth_trailer = ethernet_trailer(data, pkt.datagram_end, frame_len, fcs_len, tagged=_tagged(pkt))


def _tagged(pkt: Packet) -> bool:
    """Whether an 802.1Q tag is among a packet's headers (its dissector names the trailer after it)."""
    return any(type(layer.header) in (VLAN, VLANLength) for layer in pkt.layers)


def _after_ethertype(data: bytes, pkt: Packet, ethertype: int, pos: int, lenient: bool, ports: tuple[int, ...],
                     reported: int | None = None) -> None:
    while ethertype in VLAN_TPIDS or ethertype == ETHERTYPE_QINQ:
        tag: VLAN | QinQ = (VLAN if ethertype in VLAN_TPIDS else QinQ).decode(data, pos)
        if type(tag) is VLAN and tag.ethertype <= MAX_8023_LENGTH:  # (a length after the tag: its LLC PDU)
            pkt.layers.append(Layer(VLANLength.decode(data, pos), pos))
            _client_data(data, pkt, pos + 4, tag.ethertype, "VLAN", lenient, reported)
            return
        pkt.layers.append(Layer(tag, pos))
        ethertype = tag.ethertype
        pos += 4
    if ethertype == ETHERTYPE_ROCE:
        pkt.encap = "rocev1"
        decode_grh_packet(data, pkt, pos, lenient=lenient, reported=reported)
    elif ethertype in (ETHERTYPE_IPV4, ETHERTYPE_IPV6):
        want = 4 if ethertype == ETHERTYPE_IPV4 else 6
        if pos < len(data) and data[pos] >> 4 != want:  # (Wireshark: "Bogus IPv4 version", nothing more read)
            _problem(pkt, MalformedError("IPv4" if want == 4 else "IPv6", "version", pos, data[pos] >> 4,
                                         f"{want} (EtherType 0x{ethertype:04x})"), lenient)
            pkt.payload_offset, pkt.payload_length = pos, len(data) - pos
            return
        _ip(data, pkt, pos, lenient, ports, reported=reported)
    elif ethertype == ETHERTYPE_ARP and (arp := decode_arp(data, pos, len(data))) is not None:
        pkt.layers.append(Layer(arp, pos))
        if isinstance(arp, ARP):
            pkt.info = arp.summary()
        end = pos + arp.LAYOUT.size
        # after a whole packet the frame's padding; after the fixed part, the addresses of other sizes as bytes
        pkt.payload_offset, pkt.payload_length = end, (len(data) - end if isinstance(arp, ARPOther) else 0)
        if isinstance(arp, ARP):
            pkt.datagram_end = end
    elif ethertype == ETHERTYPE_MAC_CONTROL and data[pos:pos + 2] == PFC_OPCODE.to_bytes(2, "big"):
        # an 802.1Qbb PFC frame (the congestion fabric's pauses); other MAC Control opcodes
        # (802.3x PAUSE, ...) stay undecoded bytes
        pfc = PFC.decode(data, pos)
        pkt.layers.append(Layer(pfc, pos))
        for p in pfc.check(pos):
            _problem(pkt, p, lenient)
        pkt.encap = "pfc"
        pkt.info = pfc.summary()
        end = pos + PFC.LAYOUT.size
        pkt.payload_offset, pkt.payload_length = end, 0
    else:
        pkt.payload_offset, pkt.payload_length = pos, len(data) - pos


def _client_data(data: bytes, pkt: Packet, pos: int, length: int, layer: str, lenient: bool,
                 reported: int | None) -> None:
    """The MAC client data of ``length`` octets at ``pos`` after a length field (IEEE 802.3 3.2.6: an LLC
    PDU, left as bytes), then padding or a trailer; a length past where the frame ends on the wire
    (``reported``, its FCS off) is a problem, and the data ends there (Wireshark 4.0, packet-ieee8023.c:
    "Length field value goes past the end of the payload")."""
    end = pos + length
    limit = len(data) if reported is None else reported
    if end > limit:
        _problem(pkt, MalformedError(layer, "length", pos - 2, length,
                                     f"at most the {max(limit - pos, 0)} bytes the frame holds"), lenient)
        end = max(limit, pos)
    pkt.datagram_end = end
    pkt.payload_offset, pkt.payload_length = pos, max(0, min(end, len(data)) - pos)


def _ip(data: bytes, pkt: Packet, pos: int, lenient: bool, ports: tuple[int, ...], quote: bool = False,
        reported: int | None = None) -> None:
    """An IPv4 or IPv6 datagram at ``pos`` and what it carries.  ``reported``: where the frame ends on the
    wire (None: not known); a datagram whose header says it goes on past that ends there, a problem,
    as tshark (packet-ip.c, packet-ipv6.c) takes the rest of the frame as the datagram ("IPv4 total
    length exceeds packet length")."""
    if pos >= len(data):
        raise TruncatedError("IP", "version", pos, 0, "an IPv4 or IPv6 header")
    version = data[pos] >> 4
    ip_start = pos
    if version == 4:
        ip4 = IPv4.decode(data, pos)
        pkt.layers.append(Layer(ip4, pos))
        for p in ip4.check(pos):
            _problem(pkt, p, lenient)
        hl = max(20, ip4.header_len)
        if ip4.ihl < 5:  # nothing after a header shorter than 20 octets is read (Wireshark: "Bogus IP header length")
            pkt.layers[-1] = Layer(IPv4Bogus.decode(data, pos), pos)  # (its first octet: all tshark shows)
            pkt.info = f"Bogus IP header length ({ip4.ihl * 4}, must be at least 20)"
            pkt.payload_offset, pkt.payload_length = pos + 20, max(0, len(data) - pos - 20)
            return
        if ip4.total_length == 0:  # left for the NIC to fill in (segmentation offload): the frame's length,
            end = len(data)        # as Wireshark presumes it (packet-ip.c)
            # ip.len is the length presumed, the rest of the frame on the wire (packet-ip.c: the IP tvb's
            # reported length, not what was captured; "reported as 0, presumed to be because of TSO")
            presumed = (len(data) if reported is None else reported) - pos
            pkt.layers[-1] = Layer(ip4.replace(total_length=presumed), pos)
        elif ip4.total_length < hl:  # nothing after the header can be trusted (Wireshark: "Bogus IP length")
            pkt.layers[-1] = Layer(IPv4BogusLength.decode(data, pos), pos)  # (up to its length: all tshark shows)
            pkt.info = f"Bogus IP length ({ip4.total_length}, less than header length {hl})"
            _problem(pkt, MalformedError("IPv4", "total_length", pos + 2, ip4.total_length,
                                         f"at least the header's {hl} bytes"), lenient)
            pkt.payload_offset, pkt.payload_length = pos + hl, 0
            return
        else:
            end = pkt.datagram_end = pos + ip4.total_length
        if hl > 20 and (route := source_route_destination(data, pos, hl)) is not None:
            # a source route with addresses left: the header's destination is the next hop (ip.cur_rt), the
            # route's last address the datagram's destination (ip.dst, ip.addr, the conversation's), as
            # packet-ip.c shows them
            shown = pkt.layers[-1].header
            pkt.layers[-1] = Layer(IPv4Routed(**{f.name: getattr(shown, f.name) for f in IPv4.LAYOUT.fields}), pos)
            pkt.layers.append(Layer(IPv4RouteDestination.decode(data, route), route))
        proto, hops = ip4.protocol, ip4.ttl
        if ip4.frag_offset or (ip4.flags & 1 and end <= len(data)):  # a fragment: its payload is not read; but a
            # first fragment the capture cut (a snap length) is read as far as it goes, as tshark does (packet-ip.c
            # reassembles only fragments captured whole, and hands the first one of any other datagram on)
            pkt.payload_offset, pkt.payload_length = pos + hl, max(0, min(end, len(data)) - pos - hl)
            pkt.ip_fragment = True
            return
        pos += hl
    elif version == 6:
        ip6 = IPv6.decode(data, pos)
        pkt.layers.append(Layer(ip6, pos))
        end = pkt.datagram_end = pos + 40 + ip6.payload_length
        proto, hops = ip6.next_header, ip6.hop_limit
        pos += 40
        while proto in IPV6_EXTENSIONS and pos + 8 <= min(end, len(data)):
            # extension headers (RFC 8200 4): each says the next; a fragment other than a whole first one
            # leaves the rest as its payload, as an IPv4 fragment does
            ext = IPV6_EXTENSIONS[proto].decode(data, pos)
            pkt.layers.append(Layer(ext, pos))
            if isinstance(ext, IPv6Fragment):
                proto, pos = ext.next_header, pos + 8
                if ext.offset or ext.more:
                    pkt.payload_offset, pkt.payload_length = pos, max(0, min(end, len(data)) - pos)
                    pkt.ip_fragment = True
                    return
            elif isinstance(ext, (IPv6HopByHop, IPv6DestOptions, IPv6Routing)):
                proto, pos = ext.next_header, pos + 8 + 8 * ext.length
    else:
        raise MalformedError("IP", "version", pos, version, "4 or 6")
    if quote:  # a quote ends where the ICMP message does (tshark: the rest of it, ICRC and all, is the quote's)
        end = min(end, len(data))
    if reported is not None and end > reported >= pos:
        six = version == 6
        _problem(pkt, MalformedError("IPv6" if six else "IPv4", "payload_length" if six else "total_length",
                                     ip_start + (4 if six else 2), end - ip_start - (40 if six else 0),
                                     f"at most the {reported - ip_start - (40 if six else 0)} bytes the frame holds"
                                     f"{' after the header' if six else ''}"), lenient)
        end = pkt.datagram_end = reported
    wire_end = end  # where the datagram ends on the wire
    if end > len(data):
        # the field's own value (IPv6: the payload's length, after the 40-byte header) against what was captured
        head = 0 if version == 4 else 40
        _problem(pkt, TruncatedError("IPv4" if version == 4 else "IPv6", "length", ip_start + (2 if version == 4 else 4),
                                     end - ip_start - head,
                                     f"at most the {max(0, len(data) - ip_start - head)} bytes captured"
                                     f"{' after the header' if head else ''}"),
                 lenient)
        end = len(data)
    if proto == IPPROTO_UDP and end < pos + 8 <= len(data):
        # the datagram ends inside the UDP header (octets after it captured: a trailer): the ports when it
        # holds them, then a problem, as tshark shows it; nothing read past the datagram
        if end >= pos + 4:
            part = UDPNoChecksum if end >= pos + 6 else UDPPorts
            pkt.layers.append(Layer(part.decode(data, pos), pos))
        _problem(pkt, TruncatedError("UDP", "length", pos, max(end - pos, 0),
                                     "the 8 bytes of a UDP header within the datagram"), lenient)
        pkt.payload_offset, pkt.payload_length = max(end, pos), 0
    elif proto == IPPROTO_UDP:
        udp = UDP.decode(data, pos)
        pkt.layers.append(Layer(udp, pos))
        udp_end = min(end, pos + udp.length) if udp.length >= 8 else end
        if udp.dport in ports:
            pkt.encap = "rocev2"
            wire_udp_end = min(wire_end, pos + udp.length) if udp.length >= 8 else wire_end
            if wire_udp_end > len(data):  # cut by the capture (a snap length): the ICRC was not captured
                _transport(data, pkt, pos + 8, wire_udp_end, 4, lenient, captured=len(data))
                return
            crc_at = _transport(data, pkt, pos + 8, udp_end, 4, lenient)
            pkt.crc_offset, pkt.crc_kind = crc_at, "icrc"
            pkt.crc = int.from_bytes(data[crc_at : crc_at + 4], "little")
            pkt.crc_expected = _crc.icrc_rocev2(data[ip_start:crc_at])
        else:
            if udp.length < 8 and not (version == 6 and udp.length == 0):  # (IPv6's 0: a jumbogram's, RFC 2675 4)
                # a length shorter than the header: ports and length, a problem, no checksum nor conversation,
                # as tshark stops there ("Bad length value")
                pkt.layers[-1] = Layer(UDPNoChecksum.decode(data, pos), pos)
                _problem(pkt, MalformedError("UDP", "length", pos + 4, udp.length, "at least 8 (the header's)"),
                         lenient)
            pkt.payload_offset, pkt.payload_length = pos + 8, udp_end - pos - 8
    elif proto in (IPPROTO_ICMP, IPPROTO_ICMPV6) and end - pos >= 4:
        six = proto == IPPROTO_ICMPV6
        icmp = decode_icmp(data, pos, end, six)
        pkt.layers.append(Layer(icmp, pos))
        msg = bytes(data[pos:end])
        pkt.info = icmpv6_summary(msg, hops) if six else icmp_summary(msg, hops if version == 4 else None)
        size = icmp.LAYOUT.size
        pkt.payload_offset, pkt.payload_length = pos + size, end - pos - size
        if end - pos > 8 and data[pos] in (ICMPV6_ERRORS if six else ICMP_ERRORS):  # (a quote's own: nested)
            pkt.quoted = _quoted(data[:end], pos + 8, ports)
    elif proto == IPPROTO_TCP and quote and pos + 20 > end >= pos + 4:  # a quote of part of the header:
        # as tshark shows it (packet-tcp.c): 4 to 7 octets, the ports; 8 to 15, the ports and (IPv4) the sequence
        # number; 16 to 19, up to the window (wire.net.TCPQuoted ...)
        kind = (TCPQuotedHead4 if version == 4 else TCPQuotedHead) if end >= pos + 16 else \
            TCPQuotedPorts if end < pos + 8 else TCPQuoted if version == 4 else TCPQuoted6
        pkt.layers.append(Layer(kind.decode(data, pos), pos))
    elif proto == IPPROTO_TCP:
        # (a quote of an IPv4 datagram: its sequence number as tshark shows it there, wire.net.TCPQuoted4)
        tcp = (TCPQuoted4 if quote and version == 4 else TCP).decode(data, pos)
        pkt.layers.append(Layer(tcp, pos))
        for p in tcp.check(pos):
            _problem(pkt, p, lenient)
        if tcp.data_offset < 5:  # a bogus header length: nothing after the header is read (tshark: no payload)
            pkt.encap = "tcp"
            pkt.payload_offset, pkt.payload_length = min(pos + 20, end), 0
            return
        start = pos + tcp.header_len
        if start > end:
            if wire_end <= len(data):  # a header longer than its datagram: damaged
                raise TruncatedError("TCP", "data_offset", pos + 12, tcp.data_offset, "options within the packet")
            # the capture cut its options (a snap length): a TCP segment all the same, nothing of its payload
            _problem(pkt, TruncatedError("TCP", "data_offset", pos + 12, tcp.data_offset,
                                         f"{start - pos} bytes of header, {len(data) - pos} captured"), lenient)
            pkt.encap = "tcp"
            pkt.payload_offset, pkt.payload_length = len(data), 0
            return
        pkt.encap = "tcp"
        pkt.payload_offset, pkt.payload_length = start, end - start
    else:
        pkt.payload_offset, pkt.payload_length = pos, end - pos


def _quoted(data: bytes, pos: int, ports: tuple[int, ...]) -> Packet | None:
    """The datagram an ICMP error quotes from ``pos`` to the end of ``data`` (the end of the ICMP
    message), decoded as far as it was quoted (often its headers and a few octets: RFC 792), as
    Wireshark's packet-icmp.c and packet-icmpv6.c hand it to the IP dissector.  Its problems (a length
    past the quote, a header cut short) are its own, never the frame's; None when it is no IP datagram."""
    if pos >= len(data) or data[pos] >> 4 not in (4, 6) or data[pos] >> 4 == 4 and data[pos] & 15 < 5:
        return None  # (no IP header; an IPv4 header length under 20 octets is bogus to tshark too: no addresses)
    quoted = Packet(data, encap="ip")
    guarded(quoted, True, lambda: _ip(data, quoted, pos, True, ports, quote=True))
    if not quoted.layers:
        return None
    ip = quoted.layers[0].header
    length = ip.total_length if isinstance(ip, IPv4) else 40 + ip.payload_length if isinstance(ip, IPv6) else 0
    if quoted.crc_kind == "icrc" and length > len(data) - pos:
        quoted.crc_expected = None  # a quote cut short: its last octets are no ICRC to check (shown, unchecked)
    return quoted


def tcp_segment_length(pkt: Packet) -> int | None:
    """The octets of a TCP segment's payload as its IP header counts them (tshark's ``tcp.len``): its
    payload's length, or, for a segment the capture cut short (a snap length), its length on the wire.
    As tshark (packet-tcp.c): after the header length the header says, even a bogus one under 20
    octets; None when that header runs past the end of the IP datagram (no segment length at all)."""
    at = next((i for i, la in enumerate(pkt.layers) if isinstance(la.header, TCP)), None)
    ip_layer = next((la for la in reversed(pkt.layers[:at]) if isinstance(la.header, IPv4 | IPv6)), None) \
        if at is not None else None
    if at is None or ip_layer is None:
        return pkt.payload_length
    ip, tcp = ip_layer.header, pkt.layers[at]
    assert isinstance(tcp.header, TCP)
    if isinstance(ip, IPv4):
        if ip.flags & 1:  # the first fragment of a datagram (cut, or its segment is not read): packet-tcp.c
            return None  # counts no segment length in a fragment (raw sequence numbers, no Len=)
        if ip.total_length == 0:  # left for the NIC to fill in: the frame's length
            return pkt.payload_length
        wire_end = ip_layer.offset + ip.total_length
    else:
        assert isinstance(ip, IPv6)
        wire_end = ip_layer.offset + 40 + ip.payload_length
    if pkt.datagram_end is not None:  # (a header that says more than the frame holds: the frame's end)
        wire_end = min(wire_end, pkt.datagram_end)
    payload_at = tcp.offset + tcp.header.header_len
    return None if payload_at > wire_end else wire_end - payload_at


def _transport(data: bytes, pkt: Packet, offset: int, end: int, trailer: int, lenient: bool,
               captured: int | None = None) -> int:
    """The transport headers (:func:`rdmalab.wire.packet.decode_transport`), then the MAD a
    datagram to or from QP0/QP1 carries (QP0/QP1 are UD QPs whose messages are MADs, IBA Vol 1 13.5.1)."""
    crc_at = decode_transport(data, pkt, offset, end, trailer, lenient=lenient, captured=captured)
    if data[offset] >> 5 != Transport.UD:  # the BTH opcode's transport bits: only UD datagrams carry MADs
        return crc_at
    deth = pkt.get(DETH)
    bth = pkt.get(BTH)
    if deth is not None and bth is not None and carries_mad(bth.opcode, bth.destqp, deth.src_qp, pkt.payload_length):
        # the MAD classes' modules (CM, SA, SMP, PMA: a hundred headers to declare) load at the first
        # MAD: a capture without one, and the start of every command, do without them
        from rdmalab.wire.cm import decode_mad_payload  # noqa: PLC0415

        decode_mad_payload(data, pkt, lenient=lenient)
    return crc_at


# ============================================================================ native IB and RoCEv1


def decode_ib(data: bytes | bytearray | memoryview, *, lenient: bool = False, has_vcrc: bool = True) -> Packet:
    """Decode a native InfiniBand packet starting at its LRH (as an ERF type 21 record carries)."""
    raw = bytes(data)
    pkt = Packet(raw, encap="ib")
    return guarded(pkt, lenient, lambda: _decode_ib(raw, pkt, lenient, has_vcrc))


def _decode_ib(data: bytes, pkt: Packet, lenient: bool, has_vcrc: bool) -> None:
    lrh = LRH.decode(data, 0)
    pkt.layers.append(Layer(lrh, 0))
    trailer = 6 if has_vcrc else 4
    end = len(data)
    length = lrh.pktlen * 4
    if length and length + (2 if has_vcrc else 0) != end:
        err: DecodeError = MalformedError("LRH", "pktlen", 4, lrh.pktlen,
                             f"{(end - (2 if has_vcrc else 0)) // 4} words for a {end}-byte packet")
        if length + (2 if has_vcrc else 0) > end:
            err = TruncatedError("LRH", "pktlen", 4, lrh.pktlen, f"at most {(end - (2 if has_vcrc else 0)) // 4} "
                                 f"4-byte words, as many as the {end} bytes captured hold")
        _problem(pkt, err, lenient)
    pos = 8
    if lrh.lnh == LNH_IBA_GLOBAL:
        grh = GRH.decode(data, pos)
        pkt.layers.append(Layer(grh, pos))
        for p in grh.check(pos):
            _problem(pkt, p, lenient)
        pos += 40
    elif lrh.lnh != LNH_IBA_LOCAL:
        _problem(pkt, MalformedError("LRH", "lnh", 1, lrh.lnh, "2 (BTH) or 3 (GRH); raw and IPv6 not decoded"),
                 lenient)
        pkt.payload_offset, pkt.payload_length = pos, end - pos
        return
    if length and length + (2 if has_vcrc else 0) > end:  # cut by the capture: its CRCs were not captured
        crc_at = _transport(data, pkt, pos, length + (2 if has_vcrc else 0), trailer, lenient, captured=end)
        _ipoib(data, pkt, min(crc_at, end), lenient)
        return
    crc_at = _transport(data, pkt, pos, end, trailer, lenient)
    pkt.crc_offset, pkt.crc_kind = crc_at, "icrc"
    pkt.crc = int.from_bytes(data[crc_at : crc_at + 4], "little")
    pkt.crc_expected = _crc.icrc_ib(data[:crc_at])
    if has_vcrc:
        pkt.vcrc = int.from_bytes(data[crc_at + 4 : crc_at + 6], "little")
        pkt.vcrc_expected = _crc.vcrc(data[: crc_at + 4])
    _ipoib(data, pkt, crc_at, lenient)


def _ipoib(data: bytes, pkt: Packet, end: int, lenient: bool) -> None:
    """The IPoIB header (RFC 4391 section 6) and what it carries, when a native IB packet's
    payload (up to ``end``, the ICRC) starts with one.

    The rule is Wireshark 4.0's (``packet-infiniband.c``, the ``eth_over_ib`` heuristic on
    ``infiniband.payload``): a payload of at least 4 bytes whose bytes 2-3 (the reserved bits)
    are zero and whose bytes 0-1 are an EtherType with a dissector, in a packet that is not a
    management datagram (destination QP 0 or 1: those are MADs), whatever its opcode (tshark
    tries it on SENDs, RDMA WRITEs and any transport).  rdmalab recognises the EtherTypes IPoIB
    carries (:data:`~rdmalab.wire.ib.IPOIB_ETHERTYPES`: IPv4, ARP, IPv6); others (which tshark
    may also claim) stay payload.  IPv4 and IPv6 are decoded by the IP decoder an Ethernet frame's
    EtherType leads to (:func:`_ip`, here without RoCEv2 on UDP 4791: RoCE is an Ethernet
    encapsulation); ARP by :func:`~rdmalab.wire.control.decode_arp` (whole: IPoIB's ARP, RFC 4391
    section 8, is :class:`~rdmalab.wire.control.ARPoIB`).  The packet stays native IB (``encap`` ``"ib"``, its ICRC and
    VCRC as before); its payload becomes what the inner decoders leave (the UDP payload, say),
    as for an Ethernet frame.  Only native IB: Wireshark also tries it on RoCE payloads, but
    IPoIB is an IB link's encapsulation (RFC 4391), and RoCE carries IP on Ethernet already.
    """
    bth = pkt.get(BTH)
    off, size = pkt.payload_offset, pkt.payload_length
    if bth is None or bth.destqp in (0, 1) or size < 4 or off + size > end:
        return
    ethertype = int.from_bytes(data[off : off + 2], "big")
    if data[off + 2 : off + 4] != b"\0\0" or ethertype not in IPOIB_ETHERTYPES:
        return
    pkt.layers.append(Layer(IPoIB.decode(data, off), off))
    pkt.payload_offset, pkt.payload_length = off + 4, size - 4
    pkt.payload_wire = None  # (a cut datagram inside: its own decoder says what the capture holds of it)
    if ethertype == ETHERTYPE_ARP:
        arp = decode_arp(data, off + 4, off + size)
        if arp is not None:
            pkt.layers.append(Layer(arp, off + 4))
            if isinstance(arp, ARP | ARPoIB):
                pkt.info = arp.summary()
            n = arp.LAYOUT.size
            pkt.payload_offset, pkt.payload_length = off + 4 + n, size - 4 - n
        return
    if ethertype not in (ETHERTYPE_IPV4, ETHERTYPE_IPV6):
        return
    try:
        _ip(data[: off + size], pkt, off + 4, lenient, ())
    except DecodeError as err:
        _problem(pkt, err, lenient)
    finally:
        pkt.encap = "ib"  # a TCP segment inside is still an IB packet (not a stream for iWARP)



def decode_grh_packet(data: bytes, pkt: Packet, offset: int, *, lenient: bool, reported: int | None = None) -> None:
    """RoCEv1: GRH, BTH ... ICRC (no VCRC), from ``offset`` to the end of ``data``.  ``reported``: where the
    frame ends on the wire (its FCS off), when known: a packet whose GRH says it goes on past a frame the
    capture holds whole is damaged, and ends with its frame (as an IP datagram's length past the frame:
    :func:`_ip`; tshark reads a RoCEv1 packet to its frame's end, the GRH's length not looked at)."""
    grh = GRH.decode(data, offset)
    pkt.layers.append(Layer(grh, offset))
    for p in grh.check(offset):
        _problem(pkt, p, lenient)
    if grh.nxthdr != GRH_NXTHDR_IBA:
        _problem(pkt, MalformedError("GRH", "nxthdr", offset + 6, grh.nxthdr, "0x1b (IBA transport)"), lenient)
        pkt.payload_offset, pkt.payload_length = offset + 40, len(data) - offset - 40
        return
    end = len(data)
    if grh.paylen and reported is not None and offset + 40 + grh.paylen > reported and offset + 40 <= reported <= end:
        _problem(pkt, MalformedError("GRH", "paylen", offset + 4, grh.paylen,
                                     f"at most the {reported - offset - 40} bytes the frame holds after the GRH"),
                 lenient)
        end = pkt.datagram_end = reported
    elif grh.paylen and offset + 40 + grh.paylen != end:
        if offset + 40 + grh.paylen > end:
            _problem(pkt, TruncatedError("GRH", "paylen", offset + 4, grh.paylen,
                                         f"at most the {end - offset - 40} bytes captured after the GRH"), lenient)
            # cut by the capture (a snap length): the ICRC was not captured
            _transport(data, pkt, offset + 40, offset + 40 + grh.paylen, 4, lenient, captured=end)
            return
        end = offset + 40 + grh.paylen  # Ethernet padding after the packet
        pkt.datagram_end = end
    crc_at = _transport(data, pkt, offset + 40, end, 4, lenient)
    pkt.crc_offset, pkt.crc_kind = crc_at, "icrc"
    pkt.crc = int.from_bytes(data[crc_at : crc_at + 4], "little")
    pkt.crc_expected = _crc.icrc_rocev1(data[offset:crc_at])


# ============================================================================ encoding


def _ip_int(addr: AddressLike, version: int) -> int:
    if isinstance(addr, int):
        return addr
    a = ipaddress.ip_address(addr) if isinstance(addr, str) else addr
    if a.version != version:
        raise ValueError(f"address {a} is not IPv{version}")
    return int(a)


def encode_ip_udp(
    udp_payload_length: int,
    *,
    src_ip: AddressLike,
    dst_ip: AddressLike,
    ipv6: bool,
    src_port: int,
    dst_port: int = ROCEV2_PORT,
    ttl: int = 64,
    dscp: int = 0,
    ecn: int = 0,
    ip_id: int = 0,
    flowlabel: int = 0,
    df: bool = True,
    udp_checksum: int = 0,
) -> tuple[bytes, int]:
    """The IPv4 (checksum filled in) or IPv6 header and the UDP header in front of a UDP payload
    of ``udp_payload_length`` bytes, and the EtherType that announces them.  ``df`` sets the
    IPv4 Don't Fragment flag (RFC 791 3.1; rxe sets it, ``rxe_net.c``)."""
    udp = UDP(sport=src_port, dport=dst_port, length=8 + udp_payload_length, checksum=udp_checksum).encode()
    if ipv6:
        ip = IPv6(tclass=(dscp << 2) | ecn, flowlabel=flowlabel, payload_length=len(udp) + udp_payload_length,
                  next_header=IPPROTO_UDP, hop_limit=ttl, src=_ip_int(src_ip, 6), dst=_ip_int(dst_ip, 6)).encode()
        return ip + udp, ETHERTYPE_IPV6
    ip = IPv4(dscp=dscp, ecn=ecn, total_length=20 + len(udp) + udp_payload_length, identification=ip_id,
              flags=0b010 if df else 0, ttl=ttl, protocol=IPPROTO_UDP, src=_ip_int(src_ip, 4),
              dst=_ip_int(dst_ip, 4)).with_checksum().encode()
    return ip + udp, ETHERTYPE_IPV4


def encode_l2(ethertype: int, *, src_mac: int, dst_mac: int, vlan: VLAN | None = None) -> bytes:
    """The Ethernet header (and an 802.1Q tag when ``vlan`` is given) for ``ethertype``."""
    if vlan is not None:
        return Ethernet(dst=dst_mac, src=src_mac, ethertype=ETHERTYPE_VLAN).encode() + vlan.replace(ethertype=ethertype).encode()
    return Ethernet(dst=dst_mac, src=src_mac, ethertype=ethertype).encode()


def encode_rocev2(
    bth: BTH,
    headers: Sequence[Header] = (),
    payload: bytes = b"",
    *,
    src_ip: AddressLike = "10.0.0.1",
    dst_ip: AddressLike = "10.0.0.2",
    src_port: int = 49152,
    dst_port: int = ROCEV2_PORT,
    src_mac: int = 0x020000000001,
    dst_mac: int = 0x020000000002,
    ipv6: bool | None = None,
    ttl: int = 64,
    dscp: int = 0,
    ecn: int = 0,
    ip_id: int = 0,
    flowlabel: int = 0,
    vlan: VLAN | None = None,
    udp_checksum: int = 0,
    check: bool = True,
) -> bytes:
    """A complete RoCEv2 Ethernet frame, ICRC included (as Linux rxe sends: UDP checksum 0)."""
    body = encode_transport(bth, headers, payload, check=check)
    if ipv6 is None:
        ipv6 = isinstance(src_ip, ipaddress.IPv6Address) or (isinstance(src_ip, str) and ":" in src_ip)
    l3, ethertype = encode_ip_udp(len(body) + 4, src_ip=src_ip, dst_ip=dst_ip, ipv6=ipv6, src_port=src_port,
                                  dst_port=dst_port, ttl=ttl, dscp=dscp, ecn=ecn, ip_id=ip_id, flowlabel=flowlabel,
                                  udp_checksum=udp_checksum)
    icrc = _crc.icrc_rocev2(l3 + body).to_bytes(4, "little")
    return encode_l2(ethertype, src_mac=src_mac, dst_mac=dst_mac, vlan=vlan) + l3 + body + icrc


def encode_rocev1(
    bth: BTH,
    headers: Sequence[Header] = (),
    payload: bytes = b"",
    *,
    grh: GRH | None = None,
    src_mac: int = 0x020000000001,
    dst_mac: int = 0x020000000002,
    check: bool = True,
) -> bytes:
    """A complete RoCEv1 Ethernet frame (EtherType 0x8915, GRH, ..., ICRC)."""
    body = encode_transport(bth, headers, payload, check=check)
    g = (grh or GRH()).replace(paylen=len(body) + 4)
    raw = g.encode() + body
    icrc = _crc.icrc_rocev1(raw).to_bytes(4, "little")
    return Ethernet(dst=dst_mac, src=src_mac, ethertype=ETHERTYPE_ROCE).encode() + raw + icrc


def encode_tcp_frame(
    payload: bytes,
    *,
    src_ip: AddressLike = "10.0.0.1",
    dst_ip: AddressLike = "10.0.0.2",
    src_port: int = 40000,
    dst_port: int = 7174,
    seq: int = 1,
    ack: int = 1,
    flags: int = TCP.ACK | TCP.PSH,
    window: int = 512,
    src_mac: int = 0x020000000001,
    dst_mac: int = 0x020000000002,
    ttl: int = 64,
) -> bytes:
    """An Ethernet/IPv4/TCP frame carrying ``payload`` (e.g. MPA frames or FPDUs, as iWARP
    sends them), with the IPv4 and TCP checksums filled in."""
    ip = IPv4(total_length=40 + len(payload), protocol=IPPROTO_TCP, ttl=ttl,
              src=_ip_int(src_ip, 4), dst=_ip_int(dst_ip, 4)).with_checksum()
    tcp = TCP(sport=src_port, dport=dst_port, seq=seq, ack=ack, flags=flags, window=window)
    segment = tcp.encode() + bytes(payload)
    tcp = tcp.replace(checksum=tcp_checksum(ip, segment))
    eth = Ethernet(dst=dst_mac, src=src_mac, ethertype=ETHERTYPE_IPV4)
    return eth.encode() + ip.encode() + tcp.encode() + bytes(payload)


_UD_SEND_ONLY = find_opcode(Transport.UD, Op.SEND, Pos.ONLY)


def gsi_frame(msg: CMMessage | bytes, *, psn: int = 0, src_qp: int = 1, dst_qp: int = 1, p_key: int = 0xFFFF,
              **rocev2: Any) -> bytes:
    """A RoCEv2 Ethernet frame carrying ``msg`` as a UD SEND Only to QP1 (Q_Key 0x80010000).

    ``rocev2`` goes to :func:`encode_rocev2` (``src_ip``, ``dst_ip``, MACs ...).
    """
    payload = bytes(msg) if isinstance(msg, (bytes, bytearray, memoryview)) else msg.encode()
    bth = BTH(opcode=_UD_SEND_ONLY, p_key=p_key, destqp=dst_qp, psn=psn)
    return encode_rocev2(bth, [DETH(q_key=GSI_QKEY, src_qp=src_qp)], payload, **rocev2)


#: the management virtual lane: SMPs (QP0) travel on VL15, which no credit limit holds back (IBA Vol 1 7.6.1)
SMI_VL = 15


def mad_ib_packet(mad: bytes, *, dlid: int, slid: int, dqp: int, sqp: int, psn: int = 0) -> bytes:
    """A MAD as the native IB packet that carries it: LRH, BTH (UD SEND Only), DETH, the MAD, ICRC, VCRC.

    A MAD to or from QP0 (an SMP) goes on VL15 with Q_Key 0; any other (QP1: SA, PMA, CM ...) on VL0
    with the GSI's Q_Key 0x80010000 (IBA Vol 1 13.5.1, 7.6.1)."""
    smi = dqp == 0 or sqp == 0
    lrh = LRH(vl=SMI_VL if smi else 0, sl=0, dlid=dlid, slid=slid)
    bth = BTH(opcode=_UD_SEND_ONLY, destqp=dqp, psn=psn & 0xFFFFFF)
    return encode_ib(bth, [DETH(q_key=0 if smi else GSI_QKEY, src_qp=sqp)], bytes(mad), lrh=lrh)
