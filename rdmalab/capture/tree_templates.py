"""``rdmalab decode -V`` in bulk: the trees of the commonest frames from per-header templates.

Most frames of a capture have one of two shapes: Ethernet / IPv4 / UDP / BTH and the extended
headers its opcode implies (RoCEv2), and Ethernet / IPv4 / TCP.  The lines a header adds to a tree
(:func:`rdmalab.capture.render.packet_tree`) are fixed text with the field values in slots, so
for each header class, offset and indentation one ``str.format`` template is made from the lines
the renderer itself writes (:func:`header_text_fn`), and a frame's header lines cost one call per
header over the header read as one big-endian integer, with no header object made.  Fields whose
text a header class spells its own way (the BTH opcode's name, the AETH syndrome) come from the
class's ``describe``, remembered per value (:data:`SPECIAL`).

A frame takes this way (:func:`fast_frame`) only when the per-packet decoder would record no
problem in it: the conditions are checked here first, with the headers' own ``check``, and the
ICRC must be good.  Its other lines are written by the renderer's own functions
(:func:`~rdmalab.capture.render.frame_line`, ``payload_line``, ``crc_line``, ``tcp_info_text``;
the RoCE Summary by :meth:`Packet.summary <rdmalab.wire.packet.Packet.summary>` of a packet holding
the BTH and what follows it; a segment's that completes iWARP PDUs and their trees by
``pdus_info`` and ``pdu_lines``, what :func:`~rdmalab.capture.render.frame_tree` runs).  The frame
of an ERF Ethernet record (:func:`erf_ethernet`: the records the columns read as Ethernet frames) takes
the same way, its tree the record's: the ERF header's lines first, every offset from the record's start.
RoCEv2 and TCP over IPv6 (no extension headers: a RoCE port's default GID is its IPv6 link-local one) take it too,
and so do frames with one 802.1Q tag (a RoCE NIC's on a lossless class: the tag's lines after the Ethernet header's).
Every other frame (other link types, two tags, IPv4 options or fragments, IPv6 extension headers, MADs to or from QP0/QP1,
anything truncated or malformed, a bad ICRC) goes through the per-packet decoder and
:func:`~rdmalab.capture.render.frame_tree`, in capture order, with the same iWARP stream
reassembly (:class:`rdmalab.capture.iwarp.IwarpTracker`) fed every TCP segment in order.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, NamedTuple

import numpy as np

from rdmalab.capture.blockpool import JSON_PARALLEL_MIN_BYTES, blocks_in_workers, default_workers, parallel_capture
from rdmalab.capture.columnar_decode import erf_ethernet_view
from rdmalab.capture.columnar_summary import AnalysisFeed, fpdu_words
from rdmalab.capture.columnar_tcp import FPDU_KINDS, READ_REQUEST_KIND, fpdu_chains
from rdmalab.capture.header_text import SPECIAL, header_text_fn, templatable
from rdmalab.capture.iwarp import IwarpTracker, _address_text
from rdmalab.capture.linktypes import (
    ERF,
    ERF_ETHERNET_TYPES,
    LINKTYPE_ERF,
    LINKTYPE_ETHERNET,
    ERFEthernet,
    decode_frame,
    erf_time_ns,
)
from rdmalab.capture.pcapio import record_blocks
from rdmalab.capture.reader import CapturedPacket, RawRecord, decode_record
from rdmalab.capture.render import (
    TCP_HEADING,
    _header_lines,
    crc_line,
    frame_line,
    frame_tree,
    pad_line,
    payload_line,
    pdu_lines,
    pdus_info,
    tcp_info_text,
    trailer_lines,
)
from rdmalab.wire.crc import ICRC_SEED, crc32, icrc_rocev2
from rdmalab.wire.errors import DecodeError
from rdmalab.wire.header import Header, compile_decoder
from rdmalab.wire.ib import BTH, DETH, Transport
from rdmalab.wire.iwarp import DDP_TAGGED_SIZE, DDP_UNTAGGED_SIZE
from rdmalab.wire.mad import carries_mad
from rdmalab.wire.mpa import MPA, MPA_CRC_SIZE, MPA_HEADER_SIZE, pad_length
from rdmalab.wire.net import (
    ETHERTYPE_IPV4,
    ETHERTYPE_IPV6,
    ETHERTYPE_VLAN,
    IPPROTO_TCP,
    IPPROTO_UDP,
    ROCEV2_PORT,
    TCP,
    UDP,
    VLAN,
    Ethernet,
    IPv4,
    IPv6,
    ethernet_trailer,
)
from rdmalab.wire.opcodes import OPCODES
from rdmalab.wire.packet import Layer, Packet
from rdmalab.wire.rdmap import (
    OP_SEND,
    OP_SEND_SE,
    DDPTagged,
    DDPUntagged,
    RDMAPControl,
    RDMAPUntagged,
    ReadRequest,
)

__all__ = ["SPECIAL", "fast_frame", "header_text_fn", "templatable", "tree_blocks"]

_REMEMBERED = 4096  # entries of each table of remembered texts and ICRC terms (emptied when full)


_TEXT: dict[tuple[type[Header], int, str], Callable[[int], str]] = {}


def _text_fn(cls: type[Header], offset: int) -> Callable[[int], str]:
    key = (cls, offset, "    ")
    fn = _TEXT.get(key)
    if fn is None:
        fn = _TEXT[key] = header_text_fn(cls, offset, "    ")
    return fn


def _field(cls: type[Header], name: str) -> tuple[int, int]:
    f = cls.LAYOUT.field(name)
    return f.shift, f.mask


_IP_TOTAL_S, _IP_TOTAL_M = _field(IPv4, "total_length")
_IP_FLAGS_S, _IP_FLAGS_M = _field(IPv4, "flags")
_IP_FRAG_S, _IP_FRAG_M = _field(IPv4, "frag_offset")
_IP_SRC_S, _IP_SRC_M = _field(IPv4, "src")
_IP_DST_S, _IP_DST_M = _field(IPv4, "dst")
_IP6_SRC_S, _IP6_SRC_M = _field(IPv6, "src")
_IP6_DST_S, _IP6_DST_M = _field(IPv6, "dst")
_UDP_DPORT_S, _UDP_DPORT_M = _field(UDP, "dport")
_UDP_LEN_S, _UDP_LEN_M = _field(UDP, "length")
_TCP_SPORT_S, _TCP_SPORT_M = _field(TCP, "sport")
_TCP_DPORT_S, _TCP_DPORT_M = _field(TCP, "dport")
_TCP_SEQ_S, _TCP_SEQ_M = _field(TCP, "seq")
_TCP_OFF_S, _TCP_OFF_M = _field(TCP, "data_offset")
_TCP_FLAGS_S, _TCP_FLAGS_M = _field(TCP, "flags")
_TCP_RES_S, _TCP_RES_M = _field(TCP, "reserved")
_TCP_ACK_S, _TCP_ACK_M = _field(TCP, "ack")
_TCP_WIN_S, _TCP_WIN_M = _field(TCP, "window")
# the headers in front of the BTH are not in the light packet the Summary line is made from: their
# ``info`` must add nothing to it (Header.info), and their declarations fix no value (no ``check``)
_PLAIN = (all(c.info is Header.info for c in (Ethernet, VLAN, IPv4, IPv6, UDP, TCP))
          and all(not c.LAYOUT.consts and c.validate is Header.validate for c in (Ethernet, VLAN, UDP)))
_UD = int(Transport.UD)
_IPV4_START = ETHERTYPE_IPV4.to_bytes(2, "big") + bytes([0x45])  # the EtherType, then IPv4 of 5 words (no options)
_IPV6_TYPE = ETHERTYPE_IPV6.to_bytes(2, "big")
_TPID = ETHERTYPE_VLAN.to_bytes(2, "big")  # (an 802.1Q tag's first octets, where the EtherType would be)
_BTH_DECODE = compile_decoder(BTH)  # BTH.decode's generated decoder, called directly
#: Per BTH opcode: the templates of its extended headers, in order; None when one of them has no template or
#: adds to the Summary line (Header.info)
Plan = tuple[Callable[[int], str], ...] | None


class _Shape:
    """The templates of an Ethernet frame's headers for a tree whose offsets count from ``at`` octets
    before the frame: 0, an Ethernet record's; 18, an ERF Ethernet record's, whose 16-octet header
    and offset and pad octets come first (the per-packet decoder's packet is the whole record).  And
    per BTH opcode its :data:`Plan`."""

    def __init__(self, at: int, tag: int = 0) -> None:
        self.at = at
        self.tag = tag
        l2 = 14 + tag  # (where the IP header starts: after the addresses, an 802.1Q tag if any and the EtherType)
        self.eth = _text_fn(Ethernet, at)
        self.vlan = _text_fn(VLAN, at + 14) if tag else None
        self.ip = _text_fn(IPv4, at + l2)
        self.ip6 = _text_fn(IPv6, at + l2)
        # per IP header length (IPv4 without options 20, IPv6 40): the UDP, TCP and BTH templates after it
        self.udp_at = {n: _text_fn(UDP, at + l2 + n) for n in (20, 40)}
        self.tcp_at = {n: _text_fn(TCP, at + l2 + n) for n in (20, 40)}
        self.bth_at = {n: _text_fn(BTH, at + l2 + n + 8) for n in (20, 40)}
        self.plans: dict[tuple[int, int], Plan] = {}
        self._tagged: _Shape | None = None

    def plan(self, opcode: int, headers: tuple[type[Header], ...], ip_len: int = 20) -> Plan:
        key = (opcode, ip_len)
        if key not in self.plans:
            self.plans[key] = _plan(headers, self.at, 34 + self.tag + ip_len)
        return self.plans[key]

    def tagged(self) -> _Shape:
        """The same frames' shape with an 802.1Q tag after their addresses."""
        if self._tagged is None:
            self._tagged = _Shape(self.at, 4)
        return self._tagged

    def link(self, buf: bytes | bytearray, o: int) -> str:
        """The lines of the frame's Ethernet header (and tag) at ``buf[o:]``."""
        eth = self.eth(int.from_bytes(buf[o:o + 14], "big"))
        if self.vlan is None:
            return eth
        return eth + "\n" + self.vlan(int.from_bytes(buf[o + 14:o + 18], "big"))


def _plan(headers: tuple[type[Header], ...], at: int, pos: int = 54) -> Plan:
    steps = []
    for cls in headers:
        if not templatable(cls) or cls.info is not Header.info:
            return None
        steps.append(_text_fn(cls, at + pos))
        pos += cls.LAYOUT.size
    return tuple(steps)


_ETHERNET = _Shape(0)


def _shape(record: _Record | None, tag: int) -> _Shape:
    """The shape of a frame in ``record`` (None: the record is the frame) after an 802.1Q tag of ``tag`` octets."""
    shape = _ETHERNET if record is None else record.shape
    return shape.tagged() if tag else shape


#: an ERF Ethernet record's frame: after the record's header (16 octets) and its offset and pad octets
_ERF_AT = ERF.LAYOUT.size + ERFEthernet.LAYOUT.size
_IN_ERF = _Shape(_ERF_AT)
_ERF_TEXT = header_text_fn(ERF, 0, "    ")
_ERF_ETH_TEXT = header_text_fn(ERFEthernet, ERF.LAYOUT.size, "    ")
_ERF_TS = ERF.LAYOUT.field("ts")
_ERF_TS_ZERO = "\n        ts: 0x" + "0" * (_ERF_TS.bits // 4) + " "  # (the renderer's hex: every digit)
if (_ERF_TS.shift, _ERF_TS.bits, _ERF_TS.fmt) != (64, 64, "hex") or _ERF_TS_ZERO not in _ERF_TEXT(0):
    raise ImportError("tree_templates: the ERF header's timestamp is not its first field, shown in hex")
#: the octets of an ERF record's headers after its timestamp (its type, flags, lengths, offset and pad)
#: -> its rlen, wlen and its headers' lines before and after the timestamp's hex digits; an rlen of -1
#: for a record that is not an Ethernet record without extension headers (erf_ethernet).  Bounded.
_ERF_SEEN: dict[bytes, tuple[int, int, str, str]] = {}


def _erf_lines(rest: bytes) -> tuple[int, int, str, str]:
    if rest[0] not in ERF_ETHERNET_TYPES or not rest[6] << 8 | rest[7]:  # (an extension header: the type's top bit)
        return -1, 0, "", ""
    text = _ERF_TEXT(int.from_bytes(rest[:8], "big")) + "\n" + _ERF_ETH_TEXT(rest[8] << 8 | rest[9])
    at = text.index(_ERF_TS_ZERO) + len(_ERF_TS_ZERO) - 1 - _ERF_TS.bits // 4
    return rest[2] << 8 | rest[3], rest[6] << 8 | rest[7], text[:at], text[at + _ERF_TS.bits // 4:]


class _Record(NamedTuple):
    """A record that holds an Ethernet frame after headers of its own (an ERF Ethernet record:
    :func:`erf_ethernet`), what its tree has that the frame's has not: its link type; where it starts
    in the block and how many octets of it were captured (the frame line's, as the per-packet
    decoder's, whose packet is the whole record); its headers' lines, after the Summary line; the
    templates of the frame's headers at their offsets in the record."""

    linktype: int
    start: int
    size: int
    lines: str
    shape: _Shape


def erf_ethernet(buf: bytes | bytearray, off: int, cap: int) -> tuple[_Record, int, int, int, float] | None:
    """The Ethernet frame of the ERF record ``buf[off:off + cap]`` (pcap link type 197), as
    :func:`~rdmalab.capture.columnar_decode.erf_ethernet_view` takes one: an Ethernet record without
    extension headers whose ``rlen`` is its captured length and whose ``wlen`` is not 0.  Its
    :class:`_Record`, where the frame starts in ``buf``, its captured octets (after the record's
    headers, at most ``wlen``), ``wlen`` and the record's own time (:func:`~rdmalab.capture.linktypes.erf_time_ns`,
    in seconds: as :func:`~rdmalab.capture.reader.decode_record` gives it); None for another record."""
    if cap < _ERF_AT:
        return None
    rest = bytes(buf[off + 8:off + _ERF_AT])
    seen = _ERF_SEEN.get(rest)
    if seen is None:
        if len(_ERF_SEEN) >= _REMEMBERED:
            _ERF_SEEN.clear()
        seen = _ERF_SEEN[rest] = _erf_lines(rest)
    rlen, wlen, before, after = seen
    if rlen != cap:
        return None
    ts = int.from_bytes(buf[off:off + 8], "little")  # (32.32 fixed-point seconds, the one little-endian field)
    return (_Record(LINKTYPE_ERF, off, cap, f"{before}{ts:016x}{after}", _IN_ERF), off + _ERF_AT,
            min(wlen, cap - _ERF_AT), wlen, erf_time_ns(ts) / 1e9)


def _ethernet_in(buf: bytes | bytearray, off: int, cap: int, wire: int, ts: float, lt: int,
                 fcs: int) -> tuple[int, int, int, float, int, _Record | None] | None:
    """The Ethernet frame a record of link type ``lt`` is or holds, as the templates take it: where it
    starts in ``buf``, its captured and wire lengths, time, declared FCS length and its :class:`_Record`
    (None: the record is the frame); None for a record of another kind."""
    if lt == LINKTYPE_ETHERNET:
        return off, cap, wire, ts, fcs, None
    if lt == LINKTYPE_ERF:
        erf = erf_ethernet(buf, off, cap)
        if erf is not None:
            record, o, c, w, t = erf
            return o, c, w, t, -1, record  # (decode_erf says no FCS length)
    return None


def _frame_head(frame: int, wire: int, cap: int, ts: float, record: _Record | None) -> str:
    """A frame's first line (:func:`~rdmalab.capture.render.frame_line`), of its record's link type and
    captured length."""
    if record is None:
        return frame_line(frame, wire, cap, LINKTYPE_ETHERNET, ts)
    return frame_line(frame, wire, record.size, record.linktype, ts)


# The ICRC of a RoCEv2 datagram is the CRC of the datagram as sent XOR a term that depends only on
# its length and the values of its variant fields (the CRC is affine: rdmalab.wire.crc.icrc_mask_delta),
# all within its first 33 bytes (IPv4 header, UDP checksum, BTH byte 4).  That term is remembered
# per (those bytes, length), so a datagram like one seen before costs one CRC over its bytes, unmasked.
_HEAD = 20 + 8 + 5
_DELTA: dict[tuple[bytes, int], int] = {}


def _icrc(buf: bytes | bytearray, start: int, end: int, head: int = _HEAD) -> int:
    """:func:`~rdmalab.wire.crc.icrc_rocev2` of the RoCEv2 datagram ``buf[start:end]`` (through the pad),
    whose variant fields are in its first ``head`` octets (IPv4 without options: :data:`_HEAD`; IPv6
    without extension headers: 40 + 8 + 5)."""
    key = (bytes(buf[start:start + head]), end - start)
    delta = _DELTA.get(key)
    with memoryview(buf) as mv:
        sent = crc32(mv[start:end], ICRC_SEED)
    if delta is None:
        if len(_DELTA) >= _REMEMBERED:
            _DELTA.clear()
        delta = _DELTA[key] = icrc_rocev2(buf[start:end]) ^ sent
    return sent ^ delta


def fast_frame(buf: bytes | bytearray, o: int, cap: int, frame: int, wire: int, ts: float, interface: int,
               tracker: Any, fcs_len: int = -1, record: _Record | None = None) -> bytes | None:
    """The tree of the Ethernet frame ``buf[o:o + cap]`` (frame number ``frame``, ``wire`` bytes on the
    wire, time ``ts``, from a capture that says it keeps an FCS of ``fcs_len`` octets, -1: does not say), as :func:`~rdmalab.capture.render.frame_tree` of the lenient per-packet
    decoder writes it (UTF-8), or None when the frame is not one this module writes (nothing is then fed
    to ``tracker``, the iWARP reassembly, or None).  ``record``: the record that holds the frame after
    headers of its own (an ERF record: :func:`erf_ethernet`), whose tree it then is.  With or without one
    802.1Q tag."""
    front = _front(buf, o, cap, wire, fcs_len, record)
    if front is None:
        return None
    tag, proto, ipv, ip_end, tail, ip_len = front
    if proto == IPPROTO_UDP:
        return _roce(buf, o, cap, frame, wire, ts, interface, ipv, ip_end, tail, record, ip_len, tag)
    if proto != IPPROTO_TCP:
        return None
    parts = _tcp_parts(buf, o, frame, wire, cap, ts, ipv, ip_end, tail, record, ip_len, tag)
    if parts is None:
        return None
    start, size = (o, cap) if record is None else (record.start, record.size)
    return tcp_tree(parts, tracker, lambda _frame: bytes(buf[start:start + size]), interface)


#: what :func:`_front` finds in front of a frame's transport header: the octets of its 802.1Q tag (0 or 4),
#: its IP protocol (next header), its IP header as one number, where its datagram ends, the lines of the
#: octets after it, and its IP header's length (20 or 40)
Front = tuple[int, int, int, int, list[str], int]


def _front(buf: bytes | bytearray, o: int, cap: int, wire: int, fcs_len: int,
           record: _Record | None = None) -> Front | None:
    """:data:`Front` of the Ethernet frame ``buf[o:o + cap]``, with or without one 802.1Q tag, over IPv4
    without options (not a fragment) or IPv6 without extension headers (UDP or TCP next); None for another
    frame."""
    tag = 4 if buf[o + 12:o + 14] == _TPID else 0
    four = _ipv4_front(buf, o, cap, wire, fcs_len, record, tag)
    if four is not None:
        return tag, buf[o + tag + 23], four[0], four[1], four[2], 20
    six = _ipv6_front(buf, o, cap, wire, fcs_len, record, tag)
    if six is None:
        return None
    return tag, six[0], int.from_bytes(buf[o + tag + 14:o + tag + 54], "big"), six[1], six[2], 40


def _ipv4_front(buf: bytes | bytearray, o: int, cap: int, wire: int, fcs_len: int,
                record: _Record | None = None, tag: int = 0) -> tuple[int, int, list[str]] | None:
    """For :func:`fast_frame`: an Ethernet frame's IPv4 header (without options, not a fragment) as
    one number, where its datagram ends, and the lines of the octets after it; None for another frame.
    ``tag``: the octets of the 802.1Q tag after the frame's addresses (4), or 0."""
    l2 = 14 + tag
    if cap < l2 + 40 or buf[o + l2 - 2:o + l2 + 1] != _IPV4_START or not _PLAIN:
        return None
    ipv = int.from_bytes(buf[o + l2:o + l2 + 20], "big")
    total = ipv >> _IP_TOTAL_S & _IP_TOTAL_M
    # (a datagram past the capture's end, or past the frame's on the wire, its FCS off: a problem, per packet)
    if ipv >> _IP_FRAG_S & _IP_FRAG_M or ipv >> _IP_FLAGS_S & 1 or total < 40 \
            or l2 + total > min(cap, (wire or cap) - max(fcs_len, 0)):
        return None
    ip_end = l2 + total
    return ipv, ip_end, _tail(buf, o, cap, wire, fcs_len, record, tag, ip_end)


def _tail(buf: bytes | bytearray, o: int, cap: int, wire: int, fcs_len: int, record: _Record | None, tag: int,
          ip_end: int) -> list[str]:
    """The lines of the octets after the datagram that ends at ``ip_end`` in the frame: padding, a trailer, an
    FCS (after an 802.1Q tag, ``tag``, as Wireshark divides them there)."""
    if ip_end >= cap:
        return []
    trailer = ethernet_trailer(bytes(buf[o:o + cap]), ip_end, wire or cap, fcs_len, tagged=tag > 0)
    if trailer is None:
        return []
    return trailer_lines("    ", trailer if record is None else trailer.shifted(record.shape.at))


def _ipv6_udp_front(buf: bytes | bytearray, o: int, cap: int, wire: int, fcs_len: int,
                    record: _Record | None = None) -> tuple[int, list[str]] | None:
    """For :func:`fast_frame`: where the IPv6 datagram of an Ethernet frame ends and the lines of the octets
    after it, when its next header is UDP (no extension header) and it is whole; None for another frame."""
    six = _ipv6_front(buf, o, cap, wire, fcs_len, record)
    return None if six is None or six[0] != IPPROTO_UDP else (six[1], six[2])


#: the least an IPv6 datagram holds, by its next header, for the templates: the UDP header, the TCP header
_IPV6_LEAST = {IPPROTO_UDP: 8, IPPROTO_TCP: 20}


def _ipv6_front(buf: bytes | bytearray, o: int, cap: int, wire: int, fcs_len: int,
                record: _Record | None = None, tag: int = 0) -> tuple[int, int, list[str]] | None:
    """For :func:`fast_frame`: the next header of the IPv6 datagram of an Ethernet frame, where the datagram
    ends and the lines of the octets after it, when its next header is UDP or TCP (no extension header), it
    holds that header's fixed part and it is whole; None for another frame.  ``tag``: the octets of the
    802.1Q tag after the frame's addresses (4), or 0."""
    l2 = 14 + tag
    if cap < l2 + 48 or buf[o + l2 - 2:o + l2] != _IPV6_TYPE or buf[o + l2] >> 4 != 6 or not _PLAIN:
        return None
    nxt = buf[o + l2 + 6]
    least = _IPV6_LEAST.get(nxt)
    length = int.from_bytes(buf[o + l2 + 4:o + l2 + 6], "big")
    ip_end = l2 + 40 + length
    if least is None or length < least or ip_end > min(cap, (wire or cap) - max(fcs_len, 0)):
        return None
    return nxt, ip_end, _tail(buf, o, cap, wire, fcs_len, record, tag, ip_end)


class RoceFrame(NamedTuple):
    """A RoCEv2 datagram the per-packet decoder would record no problem in (:func:`roce_frame`): its BTH,
    its opcode's :class:`~rdmalab.wire.opcodes.OpcodeInfo`, its extended headers (each with its offset in
    the frame), where its payload starts, its payload and pad lengths, where its ICRC is and the ICRC."""

    bth: BTH
    info: Any
    extended: list[Layer]
    pos: int
    plen: int
    pad: int
    crc_at: int
    crc: int


_DECODERS: dict[type[Header], Any] = {}


def roce_frame(buf: bytes | bytearray, o: int, ip_end: int, ip_len: int = 20, tag: int = 0) -> RoceFrame | None:
    """The RoCEv2 datagram of the Ethernet frame at ``buf[o:]`` whose IP header of ``ip_len`` octets (IPv4
    without options, not a fragment: :func:`_ipv4_front`; or IPv6, 40, without extension headers) and UDP
    header are plain and whose datagram ends at ``ip_end``, when the per-packet decoder would find no
    problem in it (its headers' own checks, the payload and pad the opcode allows, not a MAD to or from
    QP0/QP1, a good ICRC); else None.  ``tag``: the octets of an 802.1Q tag after the frame's addresses."""
    udp = 14 + tag + ip_len
    uv = int.from_bytes(buf[o + udp:o + udp + 8], "big")
    if uv >> _UDP_DPORT_S & _UDP_DPORT_M != ROCEV2_PORT:
        return None
    length = uv >> _UDP_LEN_S & _UDP_LEN_M
    udp_end = min(ip_end, udp + length) if length >= 8 else ip_end
    if udp_end - (udp + 8) < 16:
        return None
    bth = _BTH_DECODE(buf, o + udp + 8)
    opcode = bth.opcode
    info = OPCODES.get(opcode)
    if info is None or bth.check(udp + 8):
        return None
    crc_at = udp_end - 4
    pos = udp + 20 + sum(cls.LAYOUT.size for cls in info.headers)
    if pos > crc_at:
        return None
    extended: list[Layer] = []
    at = udp + 20
    for cls in info.headers:
        decode = _DECODERS.get(cls)
        if decode is None:
            decode = _DECODERS[cls] = compile_decoder(cls)
        h = decode(buf, o + at)
        if h.check(at):
            return None
        extended.append(Layer(h, at))
        at += cls.LAYOUT.size
    body = crc_at - pos
    if not info.payload:
        if body:
            return None
        plen = pad = 0
    else:
        pad = bth.padcnt
        if pad > body:
            return None
        plen = body - pad
    if opcode >> 5 == _UD:  # a datagram: a MAD to or from QP0/QP1 goes the per-packet way (rdmalab.wire.frame._transport)
        deth = next((la.header for la in extended if type(la.header) is DETH), None)
        if deth is not None and carries_mad(opcode, bth.destqp, deth.src_qp, plen):
            return None
    crc = int.from_bytes(buf[o + crc_at:o + crc_at + 4], "little")
    if crc != _icrc(buf, o + 14 + tag, o + crc_at, ip_len + 13):
        return None  # a bad ICRC: the per-packet way says what it should be
    return RoceFrame(bth, info, extended, pos, plen, pad, crc_at, crc)


def _roce(buf: bytes | bytearray, o: int, cap: int, frame: int, wire: int, ts: float, interface: int,
          ipv: int, ip_end: int, tail: list[str], record: _Record | None, ip_len: int = 20, tag: int = 0) -> bytes | None:
    """The tree of a RoCEv2 frame over IPv4 (``ipv``: its header as one number) or over IPv6 (``ip_len``
    40), after an 802.1Q tag of ``tag`` octets or none, or None when :func:`roce_frame` does not take it."""
    roce = roce_frame(buf, o, ip_end, ip_len, tag)
    if roce is None:
        return None
    bth, pos, plen, pad, crc_at, crc = roce.bth, roce.pos, roce.plen, roce.pad, roce.crc_at, roce.crc
    shape = _shape(record, tag)
    plan = shape.plan(bth.opcode, roce.info.headers, ip_len)
    if plan is None:
        return None
    udp = 14 + tag + ip_len
    ip_lines = shape.ip(ipv) if ip_len == 20 else shape.ip6(ipv)
    texts = [shape.link(buf, o), ip_lines, shape.udp_at[ip_len](int.from_bytes(buf[o + udp:o + udp + 8], "big")),
             shape.bth_at[ip_len](int.from_bytes(buf[o + udp + 8:o + udp + 20], "big"))]
    texts += [text(int.from_bytes(buf[o + la.offset:o + la.end], "big")) for text, la in zip(plan, roce.extended, strict=True)]
    layers = [Layer(bth, udp + 8), *roce.extended]
    # the Summary line from a packet holding what Packet.summary reads (the BTH and what follows it)
    summary = Packet(b"", layers, "rocev2", pos, plen, pad, crc, crc, crc_at, "icrc").summary()
    lines = [_frame_head(frame, wire, cap, ts, record), "    Summary: " + summary]
    if record is not None:
        lines.append(record.lines)
    lines += texts
    at = shape.at  # (the offsets in the tree: from the record's start)
    if plen:
        lines.append(payload_line("    ", at + pos, plen, buf[o + pos:o + pos + min(plen, 32)]))
    if pad:
        lines.append(pad_line("    ", at + pos + plen, pad))
    lines.append(crc_line("    ", "ICRC", at + crc_at, crc, "good", None))
    lines += tail
    return "\n".join(lines).encode()


#: a TCP segment's tree but for what the iWARP reassembly adds (:func:`_tcp_parts`): its text without
#: iWARP PDUs (UTF-8) and where its Summary starts and ends in it; the frame number, wire length and
#: time; what the reassembly is fed (source, source port, destination, destination port, sequence
#: number, flags, payload; the addresses as numbers); the link type of its record; where its TCP
#: header's fields end in the text (where its SEQ/ACK analysis goes: :meth:`AnalysisFeed.apply_tree`); and the
#: IP version of the addresses (4 or 6).  The text and payload may be views of the workers' shared memory
#: (:class:`_TcpColumns`).
TcpParts = tuple[bytes | memoryview, int, int, int, int, float, int, int, int, int, int, int, bytes | memoryview, int,
                 int, int]


def _tcp_parts(buf: bytes | bytearray, o: int, frame: int, wire: int, cap: int, ts: float, ipv: int, ip_end: int,
               tail: list[str], record: _Record | None = None, ip_len: int = 20, tag: int = 0) -> TcpParts | None:
    """What the tree of a TCP segment holds whatever its stream: :data:`TcpParts`, or None when its header
    does not fit.  Over IPv4 without options (``ip_len`` 20) or IPv6 without extension headers (40), after
    an 802.1Q tag of ``tag`` octets or none, its IP header read as one number ``ipv``, its datagram ending
    at ``ip_end``."""
    at = 14 + tag + ip_len
    tv = int.from_bytes(buf[o + at:o + at + 20], "big")
    hl = (tv >> _TCP_OFF_S & _TCP_OFF_M) * 4
    if hl < 20 or at + hl > ip_end:
        return None
    start = at + hl
    plen = ip_end - start
    sport = tv >> _TCP_SPORT_S & _TCP_SPORT_M
    dport = tv >> _TCP_DPORT_S & _TCP_DPORT_M
    seq = tv >> _TCP_SEQ_S & _TCP_SEQ_M
    flags = tv >> _TCP_FLAGS_S & _TCP_FLAGS_M
    shape = _shape(record, tag)
    if ip_len == 20:
        a, b, version = ipv >> _IP_SRC_S & _IP_SRC_M, ipv >> _IP_DST_S & _IP_DST_M, 4
        ip_lines = shape.ip(ipv)
    else:
        a, b, version = ipv >> _IP6_SRC_S & _IP6_SRC_M, ipv >> _IP6_DST_S & _IP6_DST_M, 6
        ip_lines = shape.ip6(ipv)
    tcp_lines = shape.tcp_at[ip_len](tv)
    summary = tcp_info_text(sport, dport, flags | (tv >> _TCP_RES_S & _TCP_RES_M) << 9, seq, tv >> _TCP_ACK_S & _TCP_ACK_M, tv >> _TCP_WIN_S & _TCP_WIN_M, plen)
    lines = [""] if record is None else ["", record.lines]
    lines += (shape.link(buf, o), ip_lines, tcp_lines)
    fields = "\n".join(lines).encode()  # (the TCP header's fields end here: its SEQ/ACK analysis goes after)
    more = [payload_line("    ", shape.at + start, plen, buf[o + start:o + start + min(plen, 32)])] if plen else []
    more += tail
    # the Summary line has the one character outside ASCII (the arrow): the text around it stays
    # ASCII, which encodes and joins as a copy
    head = _frame_head(frame, wire, cap, ts, record).encode() + b"\n    Summary: "
    text = summary.encode()
    return (b"".join((head, text, fields, ("\n" + "\n".join(more)).encode() if more else b"")), len(head),
            len(head) + len(text), frame, wire, ts, a, sport, b, dport, seq, flags, bytes(buf[o + start:o + ip_end]),
            LINKTYPE_ETHERNET if record is None else record.linktype, len(head) + len(text) + len(fields), version)


def tcp_tree(parts: TcpParts, tracker: Any, frame_bytes: Callable[[int], bytes], interface: int) -> bytes:
    """The tree of a TCP segment from its :data:`TcpParts`, the segment fed to ``tracker`` (the iWARP
    reassembly, or None): with the iWARP PDUs it completes, their Summary and their trees after the
    segment's.  ``frame_bytes(frame number)`` gives the record's bytes, for a tracker that fails on it."""
    return bytes(tcp_tree_at(parts, tracker, frame_bytes, interface)[0])


def tcp_tree_at(parts: TcpParts, tracker: Any, frame_bytes: Callable[[int], bytes],
                interface: int) -> tuple[bytes | memoryview, int | None]:
    """:func:`tcp_tree`, and where the TCP header's fields end in it (None: not known, the tree of a
    tracker's failure); the text as given when the tracker completes no PDU (a view stays a view)."""
    text, a, b, frame, wire, ts, src, sport, dst, dport, seq, flags, payload, lt, end, version = parts
    pdus: list[Packet] = []
    if tracker is not None:
        try:
            pdus = tracker.process_segment(frame, _address_text(version, src), sport, _address_text(version, dst),
                                           dport, seq, flags, payload)
        except DecodeError:
            pass  # as the per-packet reader (lenient): the stream's damage is its PDUs' to report
        except Exception as err:  # a reassembly bug must not stop a capture: reported on the frame, as the reader does
            data = frame_bytes(frame)
            if lt == LINKTYPE_ETHERNET:
                full = decode_frame(LINKTYPE_ETHERNET, data, lenient=True, wire_length=wire)
                cp = CapturedPacket(frame, ts, LINKTYPE_ETHERNET, full, [], wire, interface)
            else:  # (an ERF record: its own time and lengths, as the reader gives them)
                cp = decode_record(RawRecord(frame, ts, lt, data, wire, interface), lenient=True)
            cp.packet.internal_error = f"iWARP tracker: {type(err).__name__}: {err}"
            return frame_tree(cp).encode(), None
    if not pdus:
        return text, end
    # the Summary line from the PDUs, and their trees after the segment's
    more = pdu_lines(pdus)
    return _with_pdus(parts, pdus_info(pdus).encode(), ("\n" + "\n".join(more)).encode() if more else b"")


def _with_pdus(parts: TcpParts, info: bytes | memoryview,
               more: bytes | memoryview) -> tuple[bytes, int]:
    """The tree of a TCP segment (its :data:`TcpParts`) that completes iWARP PDUs: their Summary ``info`` in
    place of the segment's, their trees ``more`` after it; and where the TCP header's fields end in it."""
    text, a, b, end = parts[0], parts[1], parts[2], parts[14]
    return b"".join((text[:a], info, text[b:], more)), end + len(info) - (b - a)


def tree_blocks(path: str | os.PathLike[str], *, iwarp: bool = True, count: int | None = None,
                block_bytes: int = 1 << 20, workers: int | None = 1,
                parallel_min_bytes: int = JSON_PARALLEL_MIN_BYTES) -> Iterator[bytes]:
    """The text of ``rdmalab decode -V -r FILE`` (lenient), UTF-8, in pieces: each frame's tree
    followed by a blank line, in capture order, the frames of one block of records at a time
    (:func:`tree_pieces` joined)."""
    for pieces in tree_pieces(path, iwarp=iwarp, count=count, block_bytes=block_bytes, workers=workers,
                              parallel_min_bytes=parallel_min_bytes):
        yield b"".join(pieces)


def tree_pieces(path: str | os.PathLike[str], *, iwarp: bool = True, count: int | None = None,
                block_bytes: int = 1 << 20, workers: int | None = 1,
                parallel_min_bytes: int = JSON_PARALLEL_MIN_BYTES) -> Iterator[list[bytes | memoryview]]:
    """:func:`tree_blocks`' text, each block's as the list of its pieces, not joined (a writer that
    writes a list without joining it, ``os.writev``, saves a copy of the text).  A piece may be a view
    of the worker processes' shared memory: it holds until the block after next is asked for (write
    or copy each list before asking for the next).

    The frames of Ethernet records, and of ERF Ethernet records (:func:`erf_ethernet`: the record's
    header lines before the frame's), take the templates (:func:`fast_frame`); any other frame the
    per-packet decoder.

    ``workers`` (None: :func:`~rdmalab.capture.blockpool.default_workers`) above 1 writes the trees of
    a plain pcap or pcapng file (:func:`~rdmalab.capture.blockpool.parallel_capture`; of ERF records
    too, each tree of its record's own time) of at least
    ``parallel_min_bytes`` in worker processes, but for the TCP segments': those this process writes,
    in order, feeding the iWARP reassembly as it goes (:func:`_tree_block`).  The same text."""
    if count is not None and count <= 0:
        return
    tracker = IwarpTracker() if iwarp else None
    p = os.fspath(path)
    if workers is None:
        workers = default_workers()
    # tshark's SEQ/ACK analysis trees: the TCP analysis followed here, in capture order, and put into the
    # trees of the segments that have one (read from the file again beside the workers)
    seq_ack = AnalysisFeed(trees=True)
    if workers > 1 and parallel_capture(p, own_times=True) and os.path.getsize(p) >= parallel_min_bytes:
        seq_ack.read_from(p, block_bytes)
        try:
            yield from _trees_of_workers(p, seq_ack, tracker, block_bytes, workers, count)
        finally:
            seq_ack.close()
        return
    for blk in record_blocks(p, block_bytes):
        seq_ack.note(erf_ethernet_view(blk), len(blk))
        buf = blk.buf
        out = []
        rows = zip(blk.offset.tolist(), blk.caplen.tolist(), blk.wirelen.tolist(), blk.seconds().tolist(),
                   blk.linktype.tolist(), blk.interfaces().tolist(), blk.fcs_lens().tolist(), strict=True)
        last = False
        for n, (off, cap, wire, ts, lt, iface, fcs) in enumerate(rows, blk.first):
            out.append(_one_tree(buf, off, cap, n, wire, ts, lt, iface, fcs, tracker))
            if count is not None and n >= count:
                last = True
                break
        if out:
            out.append(b"")
            yield [seq_ack.apply_trees(b"\n\n".join(out))]
        if last:
            return


_TCP_HEADING = TCP_HEADING.encode()


def _trees_of_workers(p: str, seq_ack: AnalysisFeed, tracker: Any, block_bytes: int, workers: int,
                      count: int | None) -> Iterator[list[bytes | memoryview]]:
    """:func:`tree_pieces`' text of blocks rendered in workers (:func:`_tree_block`), the TCP segments'
    finished here in order."""
    for (first, pieces, tcp), _t0 in blocks_in_workers(p, _tree_block, (), workers=workers,
                                                  block_bytes=block_bytes, count=count):
        # the SEQ/ACK analysis put in each frame's tree as it is written here, in order (the frames the
        # workers wrote are not TCP segments; one whose tree has a TCP header, an ICMP error's quote, comes
        # alone with its number)
        out: list[bytes | memoryview] = []
        segments = tcp.unpack() if tcp is not None else []
        again = partial(_frame_again, p)
        for piece in pieces:
            if isinstance(piece, np.ndarray):  # (the trees of a run of frames: a view of the shared memory,
                out.append(piece.data)  # which holds until the block after next is asked for)
                continue
            if isinstance(piece, range):  # TCP segments' trees but for their streams' part
                for i in piece:
                    j, parts, iface = segments[i]
                    lane = tcp.lane(i) if tracker is not None and tcp is not None else None
                    tree: bytes | memoryview
                    end: int | None
                    if lane is not None and tracker.take_whole(
                            parts[3], _address_text(parts[15], parts[6]), parts[7], _address_text(parts[15], parts[8]),
                            parts[9], parts[10], parts[11], len(parts[12]), lane[0], lane[1], lane[2]):
                        tree, end = _with_pdus(parts, lane[3], lane[4])
                    else:
                        tree, end = tcp_tree_at(parts, tracker, again, iface)
                    out += seq_ack.tree_pieces(first + j, tree, end)
                    out.append(b"\n\n")
                continue
            if len(piece) == 2:  # a tree with a TCP header the worker wrote
                j, text = piece
            else:
                j, data, wire, ts, lt, iface, fcs = piece
                text = _one_tree(data, 0, len(data), first + j, wire, ts, lt, iface, fcs, tracker)
            out.append(seq_ack.apply_tree(first + j, text))
            out.append(b"\n\n")
        yield out


def _one_tree(buf: bytes | bytearray, off: int, cap: int, n: int, wire: int, ts: float, lt: int, iface: int,
              fcs: int, tracker: Any) -> bytes:
    """The tree of frame ``n`` (``buf[off:off + cap]``), its TCP segment (if it is one) fed to
    ``tracker`` in the course."""
    eth = _ethernet_in(buf, off, cap, wire, ts, lt, fcs)
    text = None if eth is None else fast_frame(buf, eth[0], eth[1], n, eth[2], eth[3], iface, tracker, eth[4], eth[5])
    if text is None:
        rec = RawRecord(n, ts, lt, bytes(buf[off:off + cap]), wire, iface, fcs_len=fcs)
        text = frame_tree(decode_record(rec, lenient=True, tracker=tracker)).encode()
    return text


def _frame_again(path: str, frame: int) -> bytes:
    """Frame number ``frame``'s bytes, read again from the file (for the rare tree that needs them
    whole after its worker sent only its parts: :func:`tcp_tree`)."""
    for blk in record_blocks(path, 1 << 20):
        if blk.first + len(blk) > frame:
            off, cap = int(blk.offset[frame - blk.first]), int(blk.caplen[frame - blk.first])
            return bytes(blk.buf[off:off + cap])
    raise LookupError(f"{path}: no frame {frame}")


#: a frame a worker leaves to the process that reads the iWARP streams (:func:`_tree_block`): its index
#: in the block, bytes, wire length, time, link type, interface and declared FCS length
_LeftFrame = tuple[int, bytes, int, float, int, int, int]
#: a TCP segment a worker leaves so: its index in the block, :data:`TcpParts` and interface (sent as
#: :class:`_TcpColumns`, a run of them as a range of its rows)
_LeftTcp = tuple[int, TcpParts, int]


class _TcpColumns(NamedTuple):
    """The TCP segments a worker leaves (:data:`_LeftTcp`) as a few arrays, not as tens of thousands of
    small objects to pickle and unpickle: per segment its numbers (a row of ``ints``: index in the block,
    Summary's start and end, frame, wire length, source, source port, destination, destination port,
    sequence number, flags, link type, interface, text length, payload length, where the TCP header's
    fields end, IP version) and time; their texts and payloads one after the other.  An IPv6 address, too
    wide for a row, is in ``six``, its row holding its place there."""

    ints: np.ndarray
    ts: np.ndarray
    text: np.ndarray
    payload: np.ndarray
    six: list[int]
    #: the segments of whole FPDUs (:func:`_lanes`), or None
    lanes: _Lanes | None = None

    @staticmethod
    def pack(left: list[_LeftTcp]) -> _TcpColumns:
        six: list[int] = []
        place: dict[int, int] = {}

        def short(address: int, version: int) -> int:
            if version == 4:
                return address
            at = place.get(address)
            if at is None:
                at = place[address] = len(six)
                six.append(address)
            return at

        ints = np.array([(j, p[1], p[2], p[3], p[4], short(p[6], p[15]), p[7], short(p[8], p[15]), p[9], p[10], p[11],
                          p[13], iface, len(p[0]), len(p[12]), p[14], p[15]) for j, p, iface in left],
                        dtype=np.int64).reshape(-1, 17)
        payload = np.frombuffer(b"".join([p[12] for _j, p, _i in left]), dtype=np.uint8)
        return _TcpColumns(ints, np.array([p[5] for _j, p, _i in left], dtype=np.float64),
                           np.frombuffer(b"".join([p[0] for _j, p, _i in left]), dtype=np.uint8), payload, six,
                           _lanes(payload, ints[:, 14]))

    def unpack(self) -> list[_LeftTcp]:
        """The segments, their texts and payloads views of the arrays (no copy)."""
        text, payload, six = self.text.data, self.payload.data, self.six
        out: list[_LeftTcp] = []
        t = p = 0
        for (j, a, b, frame, wire, src, sport, dst, dport, seq, flags, lt, iface, tl, pl, end, version), ts in zip(
                self.ints.tolist(), self.ts.tolist(), strict=True):
            if version == 6:
                src, dst = six[src], six[dst]
            out.append((j, (text[t:t + tl], a, b, frame, wire, ts, src, sport, dst, dport, seq, flags,
                            payload[p:p + pl], lt, end, version), iface))
            t += tl
            p += pl
        return out

    def lane(self, i: int) -> tuple[bool, bool, bool, bytes | memoryview, bytes | memoryview] | None:
        """Segment ``i``'s whole FPDUs as :func:`_lanes` found them (CRC good, not looked at, some untagged
        Sends among them; the Summary's text and the PDUs' trees), or None."""
        lanes = self.lanes
        if lanes is None:
            return None
        kind, at, info, more = lanes.rows[i]
        if not kind:
            return None
        text = lanes.text.data
        return kind & 1 != 0, kind & 2 != 0, kind & 4 != 0, text[at:at + info], text[at + info:at + info + more]


class _Lanes(NamedTuple):
    """For each TCP segment a worker leaves (:class:`_TcpColumns`), whether its payload is whole FPDUs
    and their text (:func:`_lanes`): a row of ``rows`` (bits: 1 the CRCs good, 2 the CRCs not looked at,
    4 some untagged Sends among them, 0 not so; where its text starts in ``text``, the Summary's length,
    the PDUs' trees' length)."""

    rows: list[tuple[int, int, int, int]]
    text: np.ndarray


#: the FPDU kinds (:data:`~rdmalab.capture.columnar_tcp.FPDU_KINDS`) that are untagged Sends
_SEND_KINDS = frozenset((FPDU_KINDS[(0, OP_SEND)], FPDU_KINDS[(0, OP_SEND_SE)]))


#: the indentation of an iWARP PDU's headers in a frame's tree (:func:`~rdmalab.capture.render.pdu_lines`)
_PDU_INDENT = "        "


class _FpduText:
    """The tree of an FPDU :func:`~rdmalab.capture.columnar_tcp.fpdu_chains` describes (whole,
    without markers, an RDMA Write, Read Response, Send, Send with SE or Read Request whose headers
    decode without a problem), written from its octets as :func:`~rdmalab.capture.render.pdu_lines` writes
    the packet :func:`~rdmalab.wire.iwarp.decode_fpdu` makes of them: the DDP and Read Request headers
    by their templates (:func:`header_text_fn`), the MPA header and the RDMAP control field (few values)
    remembered by value, the payload, pad and CRC lines by the renderer's own functions."""

    def __init__(self) -> None:
        self.ddp = (header_text_fn(DDPUntagged, MPA_HEADER_SIZE, _PDU_INDENT),
                    header_text_fn(DDPTagged, MPA_HEADER_SIZE, _PDU_INDENT))
        self.read_request = header_text_fn(ReadRequest, MPA_HEADER_SIZE + DDP_UNTAGGED_SIZE, _PDU_INDENT)
        self.memo: dict[tuple[int, int], str] = {}  # (0: MPA, 1: RDMAP tagged, 2: untagged; value) -> lines

    def _lines(self, which: int, value: int) -> str:
        key = (which, value)
        hit = self.memo.get(key)
        if hit is None:
            if len(self.memo) >= _REMEMBERED:
                self.memo.clear()
            h: Header = MPA(value) if which == 0 else RDMAPControl.decode(value.to_bytes(1, "big")) if which == 1 \
                else RDMAPUntagged.decode(value.to_bytes(5, "big"))
            hit = self.memo[key] = "\n".join(_header_lines(h, 0 if which == 0 else MPA_HEADER_SIZE + 1, _PDU_INDENT))
        return hit

    def fpdu(self, data: bytes, at: int, ul: int, kind: int, crc: bool) -> str:
        """The tree lines (after the PDU's heading) of the FPDU at ``data[at:]``, of ULPDU_Length ``ul`` and
        kind ``kind``; ``crc``: its CRC checked (and good), else not looked at."""
        ddp = at + MPA_HEADER_SIZE
        tagged = data[ddp] >> 7
        size = DDP_TAGGED_SIZE if tagged else DDP_UNTAGGED_SIZE
        v = int.from_bytes(data[ddp:ddp + size], "big")
        parts = [self._lines(0, ul), self.ddp[tagged](v)]
        if tagged:
            parts.append(self._lines(1, data[ddp + 1]))
        else:
            parts.append(self._lines(2, v >> 96 & 0xFFFFFFFFFF))
        po = MPA_HEADER_SIZE + size
        if kind == READ_REQUEST_KIND:
            rr = int.from_bytes(data[at + po:at + po + ReadRequest.LAYOUT.size], "big")
            parts.append(self.read_request(rr))
            po += ReadRequest.LAYOUT.size
        pl = MPA_HEADER_SIZE + ul - po
        if pl:
            parts.append(payload_line(_PDU_INDENT, po, pl, data[at + po:at + po + min(pl, 32)]))
        pad = pad_length(ul)
        if pad:
            parts.append(pad_line(_PDU_INDENT, po + pl, pad))
        end = MPA_HEADER_SIZE + ul + pad
        parts.append(crc_line(_PDU_INDENT, "MPA CRC32c", end,
                              int.from_bytes(data[at + end:at + end + MPA_CRC_SIZE], "little"), "good" if crc else None,
                              None))
        return "\n".join(parts)


_FPDU_TEXT: list[_FpduText] = []  # (made on first use: templates)


def _lanes(payload: np.ndarray, lengths: np.ndarray) -> _Lanes | None:
    """Which of the payloads (one after the other in ``payload``, ``lengths`` octets each) are whole FPDUs
    without markers that decode without a problem, their CRCs good or not looked at
    (:func:`~rdmalab.capture.columnar_tcp.fpdu_chains`), each untagged Send among them the last of its
    message; and for each such segment the Summary and the PDUs' trees :func:`tcp_tree_at` would write
    when the iWARP reassembly emits those FPDUs (:meth:`~rdmalab.capture.iwarp.IwarpTracker.take_whole`),
    written here, in the worker, from the octets (the words as the summary lines' lane writes them,
    :func:`~rdmalab.capture.columnar_summary.fpdu_words`, the trees by :class:`_FpduText`), so that the
    process following the streams need not decode them (a Send message of several FPDUs, which needs the stream, is left to
    it).  None: no such segment."""
    if not len(lengths):
        return None
    starts = np.r_[0, np.cumsum(lengths)[:-1]]
    ok_crc, ok_plain, fpdus = fpdu_chains(payload, starts, lengths)
    cand = np.flatnonzero(ok_crc | ok_plain)
    if not len(cand):
        return None
    fpdus = tuple(c[np.isin(fpdus[0], cand)] for c in fpdus)
    seg, at, ul, _tagged, kind, ctl = fpdus
    # the FPDUs' Summaries, as the summary lines' lane writes them
    words = fpdu_words(payload, fpdus)
    said = words.tobytes().translate(None, b"\0").decode()
    ends = np.cumsum(np.count_nonzero(words, axis=1)).tolist()
    if not _FPDU_TEXT:
        _FPDU_TEXT.append(_FpduText())
    write = _FPDU_TEXT[0].fpdu
    data = payload.tobytes()
    rows = [(0, 0, 0, 0)] * len(lengths)
    pieces: list[bytes] = []
    pos = 0
    firsts = np.searchsorted(seg, cand).tolist()
    lasts = np.searchsorted(seg, cand, side="right").tolist()
    at_l, ul_l, kind_l, last_l = at.tolist(), ul.tolist(), kind.tolist(), (ctl & 0x40 != 0).tolist()
    for i, crc, lo, hi in zip(cand.tolist(), ok_crc[cand].tolist(), firsts, lasts, strict=True):
        sends = False
        for f in range(lo, hi):
            if kind_l[f] in _SEND_KINDS:
                sends = True
                if not last_l[f]:
                    break  # (a Send message begun: put together by the stream)
        else:
            summaries: list[str] = []
            lines: list[str] = []
            n = hi - lo
            for k, f in enumerate(range(lo, hi), 1):
                summary = said[ends[f - 1] if f else 0:ends[f]]
                summaries.append(summary)
                lines += (f"    PDU {k} of {n} (iwarp; offsets within the PDU): {summary}",
                          write(data, at_l[f], ul_l[f], kind_l[f], crc))
            info = "; ".join(summaries).encode()
            more = ("\n" + "\n".join(lines)).encode()
            rows[i] = ((1 if crc else 2) | (4 if sends else 0), pos, len(info), len(more))
            pieces += (info, more)
            pos += len(info) + len(more)
    if not pieces:
        return None
    return _Lanes(rows, np.frombuffer(b"".join(pieces), dtype=np.uint8))
#: a tree a worker wrote that has a TCP header (an ICMP error's quote): its index in the block and text,
#: for the SEQ/ACK analysis the process that follows the segments in order puts in
_WithTcp = tuple[int, bytes]
#: (the trees of a run of frames a worker wrote: :func:`_run_text`)


def _tree_block(blk: Any, n: int, _t0: Any,
                _prev: Any) -> tuple[int, list[np.ndarray | range | _LeftFrame | _WithTcp], _TcpColumns | None]:
    """In a worker process (:func:`~rdmalab.capture.blockpool.blocks_in_workers`): the trees of the
    first ``n`` frames of a block, each followed by a blank line, but for the TCP segments, whose
    iWARP PDUs depend on the stream before them, and the frames that fail here: those are left to
    the process that reads the streams in order (:func:`tree_blocks`), a TCP segment the templates
    write as its :data:`TcpParts` (all of them as :class:`_TcpColumns`, a run of them in the pieces as a
    range of its rows), any other as its record.  A frame that is not a TCP segment has
    no state of any other frame in its tree."""
    buf = blk.buf
    pieces: list[np.ndarray | range | _LeftFrame | _WithTcp] = []
    left: list[_LeftTcp] = []  # (the TCP segments: in the pieces as ranges of them)
    run: list[bytes] = []
    rows = zip(blk.offset.tolist()[:n], blk.caplen.tolist()[:n], blk.wirelen.tolist()[:n], blk.seconds().tolist()[:n],
               blk.linktype.tolist()[:n], blk.interfaces().tolist()[:n], blk.fcs_lens().tolist()[:n], strict=True)
    for j, (off, cap, wire, ts, lt, iface, fcs) in enumerate(rows):
        text: bytes | None = None
        tcp: _LeftTcp | None = None
        alone = False  # (a tree with a TCP header: comes alone, for the SEQ/ACK analysis)
        num = blk.first + j
        try:
            eth = _ethernet_in(buf, off, cap, wire, ts, lt, fcs)
            if eth is not None and _carries_tcp(buf, eth[0], eth[1]):
                # a TCP segment (or what may decode as one): left, with what its tree holds whatever its stream
                fo, fc, fw, ft, ffcs, record = eth
                front = _front(buf, fo, fc, fw, ffcs, record)
                parts = None
                if front is not None and front[1] == IPPROTO_TCP:
                    tag, _proto, ipv, ip_end, tail, ip_len = front
                    parts = _tcp_parts(buf, fo, num, fw, fc, ft, ipv, ip_end, tail, record, ip_len, tag)
                tcp = None if parts is None else (j, parts, iface)
            else:
                text = None if eth is None else fast_frame(buf, eth[0], eth[1], num, eth[2], eth[3], iface, None,
                                                           eth[4], eth[5])
                if text is None:
                    cp = decode_record(RawRecord(num, ts, lt, bytes(buf[off:off + cap]), wire, iface, fcs_len=fcs))
                    text = None if cp.packet.encap == "tcp" else frame_tree(cp).encode()
                    # (the templates write no TCP header but a segment's, left above)
                    alone = text is not None and _TCP_HEADING in text
        except Exception:  # noqa: BLE001 - written again, by the process that reads the streams
            text = tcp = None
        if text is not None and not alone:
            run += (text, b"\n\n")  # (not text + b"\n\n": a copy of every tree more)
            continue
        if run:
            pieces.append(_run_text(run))
            run = []
        if text is not None:
            pieces.append((j, text))
        elif tcp is not None:  # (consecutive segments: one range of the columns' rows)
            last = pieces[-1] if pieces else None
            if isinstance(last, range) and last.stop == len(left):
                pieces[-1] = range(last.start, last.stop + 1)
            else:
                pieces.append(range(len(left), len(left) + 1))
            left.append(tcp)
        else:
            pieces.append((j, bytes(buf[off:off + cap]), wire, ts, lt, iface, fcs))
    if run:
        pieces.append(_run_text(run))
    return blk.first, pieces, _TcpColumns.pack(left) if left else None


def _carries_tcp(buf: bytes | bytearray, o: int, cap: int) -> bool:
    """Whether the Ethernet frame at ``buf[o:o + cap]`` is (or may decode as) a TCP segment the workers leave to
    the process that follows the streams: IPv4 whose protocol is TCP, or IPv6 whose next header is (after one
    802.1Q tag or none)."""
    t = 4 if buf[o + 12:o + 14] == _TPID else 0
    if cap >= 24 + t and buf[o + t + 12:o + t + 14] == b"\x08\x00":
        return buf[o + t + 23] == IPPROTO_TCP
    return cap >= 21 + t and buf[o + t + 12:o + t + 14] == _IPV6_TYPE and buf[o + t + 20] == IPPROTO_TCP


def _run_text(run: list[bytes]) -> np.ndarray:
    """The trees of a run of frames a worker wrote, joined, as octets of an array: an array comes back
    through the workers' shared memory without a copy (:func:`~rdmalab.capture.blockpool.blocks_in_workers`),
    where bytes would be copied into the pickle, and out of it again."""
    return np.frombuffer(b"".join(run), dtype=np.uint8)
