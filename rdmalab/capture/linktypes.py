"""Link-layer headers of capture files, and frame -> :class:`~rdmalab.wire.packet.Packet`.

A pcap or pcapng file says once (per interface) what its records start with: the *link type*
(tcpdump.org "LINKTYPE_*" values).  The ones RDMA traffic shows up in:

==========  ====================================  =========================================
Link type   Record starts with                    Decoded by
==========  ====================================  =========================================
1           Ethernet                              :func:`rdmalab.wire.frame.decode_ethernet`
113         Linux cooked capture v1 (SLL, 16 B)   :class:`SLL` + the EtherType in it
276         Linux cooked capture v2 (SLL2, 20 B)  :class:`SLL2` + the EtherType in it
101, 12, 14 raw IPv4 or IPv6 ("LINKTYPE_RAW"; 12   :func:`rdmalab.wire.frame.decode_ip`
            and 14 are DLT_RAW on some systems)
228 / 229   raw IPv4 / raw IPv6                   :func:`rdmalab.wire.frame.decode_ip`
197         ERF (Endace), 16-byte record header   :class:`ERF`; type 21 = native InfiniBand
            and extension headers                 from the LRH (:func:`rdmalab.wire.decode_ib`)
247         native InfiniBand from the LRH         :func:`rdmalab.wire.decode_ib` (tshark 4.0
                                                  rejects this link type)
==========  ====================================  =========================================

The link-layer header becomes the first layer of the packet, so that offsets in a decoded
packet are offsets in the captured record, as in Wireshark.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Self

from rdmalab.wire.errors import DecodeError, MalformedError, TruncatedError
from rdmalab.wire.frame import decode_after_ethertype, decode_ethernet, decode_ib, decode_ip
from rdmalab.wire.header import F, Header, Layout, layout
from rdmalab.wire.packet import Layer, Packet

LINKTYPE_NULL = 0
LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101
LINKTYPE_DLT_RAW12 = 12
LINKTYPE_DLT_RAW14 = 14
LINKTYPE_LINUX_SLL = 113
LINKTYPE_ERF = 197
LINKTYPE_LOOP = 108
LINKTYPE_IPV4 = 228
LINKTYPE_IPV6 = 229
LINKTYPE_INFINIBAND = 247
LINKTYPE_LINUX_SLL2 = 276
#: raw IP: the record is an IPv4 or IPv6 datagram, its version nibble says which (a tun device's capture)
RAW_IP_LINKTYPES = (LINKTYPE_RAW, LINKTYPE_DLT_RAW12, LINKTYPE_DLT_RAW14, LINKTYPE_IPV4, LINKTYPE_IPV6)
#: the link types whose frames the columnar decoder reads (``rdmalab.capture.columnar_decode``):
#: Ethernet, Linux cooked captures v1 and v2 (``tcpdump -i any``, ``rdmalab capture -i any``) and raw IP
COLUMNAR_LINKTYPES = (LINKTYPE_ETHERNET, LINKTYPE_LINUX_SLL, LINKTYPE_LINUX_SLL2, *RAW_IP_LINKTYPES)

LINKTYPE_NAMES = {
    LINKTYPE_NULL: "BSD loopback",
    LINKTYPE_LOOP: "OpenBSD loopback",
    LINKTYPE_ETHERNET: "Ethernet",
    LINKTYPE_RAW: "raw IP",
    LINKTYPE_DLT_RAW12: "raw IP (DLT 12)",
    LINKTYPE_DLT_RAW14: "raw IP (DLT 14)",
    LINKTYPE_LINUX_SLL: "Linux cooked capture v1",
    LINKTYPE_ERF: "ERF",
    LINKTYPE_IPV4: "raw IPv4",
    LINKTYPE_IPV6: "raw IPv6",
    LINKTYPE_INFINIBAND: "InfiniBand",
    LINKTYPE_LINUX_SLL2: "Linux cooked capture v2",
}

SUPPORTED_LINKTYPES = frozenset(LINKTYPE_NAMES)

# ERF record types (Endace "ERF types" reference; Wireshark erf.types.type)
ERF_TYPE_ETH = 2
ERF_TYPE_COLOR_ETH = 10
ERF_TYPE_DSM_COLOR_ETH = 16
ERF_TYPE_COLOR_HASH_ETH = 20
ERF_TYPE_INFINIBAND = 21
ERF_TYPE_IPV4 = 22
ERF_TYPE_IPV6 = 23
ERF_TYPE_INFINIBAND_LINK = 25
ERF_ETHERNET_TYPES = frozenset({ERF_TYPE_ETH, ERF_TYPE_COLOR_ETH, ERF_TYPE_DSM_COLOR_ETH, ERF_TYPE_COLOR_HASH_ETH})


#: the address families of IP in a BSD loopback header (tcpdump's print-null.c, Wireshark's packet-null.c):
#: AF_INET, and AF_INET6 as NetBSD/OpenBSD, FreeBSD and Darwin number it
BSD_AF_INET = 2
BSD_AF_INET6 = frozenset({24, 28, 30})


@dataclass(frozen=True, slots=True)
class NullLoopback(Header):
    """BSD loopback header, 4 bytes: the packet's address family, in the capturing host's byte order
    (LINKTYPE_NULL: read as tcpdump and Wireshark read it, swapped when its upper 16 bits are set) or
    in network byte order (LINKTYPE_LOOP)."""

    family: int = BSD_AF_INET

    LAYOUT: ClassVar[Layout] = layout(
        "Null/Loopback",
        "tcpdump.org LINKTYPE_NULL and LINKTYPE_LOOP (BSD loopback encapsulation)",
        F("family", 32, "null.family", doc="Address family: 2 IPv4; 24, 28, 30 IPv6 (BSD, FreeBSD, Darwin)"),
        ws="null",
    )


@dataclass(frozen=True, slots=True)
class SLL(Header):
    """Linux cooked capture v1 header, 16 bytes (tcpdump.org LINKTYPE_LINUX_SLL)."""

    pkttype: int = 0
    hatype: int = 1
    halen: int = 6
    addr: int = 0
    protocol: int = 0x0800

    LAYOUT: ClassVar[Layout] = layout(
        "SLL",
        "tcpdump.org LINKTYPE_LINUX_SLL (Linux cooked capture v1)",
        F("pkttype", 16, "sll.pkttype", doc="0 to us, 1 broadcast, 2 multicast, 3 to another host, 4 sent by us"),
        F("hatype", 16, "sll.hatype", doc="ARPHRD_ type of the interface"),
        F("halen", 16, "sll.halen", doc="Link-layer address length"),
        F("addr", 64, None, fmt="bytes", doc="Link-layer source address, padded to 8 bytes"),
        F("protocol", 16, "sll.etype", fmt="hex", doc="EtherType of what follows"),
        ws="sll",
    )


@dataclass(frozen=True, slots=True)
class SLL2(Header):
    """Linux cooked capture v2 header, 20 bytes (tcpdump.org LINKTYPE_LINUX_SLL2)."""

    protocol: int = 0x0800
    reserved: int = 0
    ifindex: int = 0
    hatype: int = 1
    pkttype: int = 0
    halen: int = 6
    addr: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "SLL2",
        "tcpdump.org LINKTYPE_LINUX_SLL2 (Linux cooked capture v2)",
        F("protocol", 16, "sll.etype", fmt="hex", doc="EtherType of what follows"),
        F("reserved", 16, None, reserved=True),
        F("ifindex", 32, "sll.ifindex", doc="Interface index"),
        F("hatype", 16, "sll.hatype", doc="ARPHRD_ type of the interface"),
        F("pkttype", 8, "sll.pkttype"),
        F("halen", 8, "sll.halen"),
        F("addr", 64, None, fmt="bytes", doc="Link-layer source address, padded to 8 bytes"),
        ws="sll",
    )


def erf_time_ns(ts: int) -> int:
    """An ERF timestamp (64-bit, 32.32 fixed-point seconds, as :class:`ERF` holds it) in nanoseconds.

    Wireshark's rule (``wiretap/erf.c`` ``erf_read_header`` for ERF files, and the ERF pseudo-header
    reader of ``wiretap/pcap-common.c`` for pcap link type 197): the seconds are the high 32 bits;
    the nanoseconds are the low 32 bits (the fraction, in units of 2**-32 s) times 10**9, divided by
    2**32 and **rounded to the nearest nanosecond, a half rounding up** (Wireshark adds 2**32 when
    bit 31 of the product is set, then shifts right by 32).  So fraction ``0x7FF07040`` is
    499762550 ns (truncation gives 499762549), ``0x00400000`` (976562.5 ns exactly) is 976563 ns,
    and a fraction that rounds to 10**9 ns carries into the seconds (``0xFFFFFFFF`` is the next
    second).  Truncating instead is 1 ns early for about half of all timestamps.
    """
    if not 0 <= ts < 1 << 64:
        raise ValueError(f"ERF timestamp {ts!r}: not a 64-bit unsigned value")
    frac_ns = ((ts & 0xFFFFFFFF) * 1_000_000_000 + (1 << 31)) >> 32
    return (ts >> 32) * 1_000_000_000 + frac_ns


def erf_timestamp(ns: int) -> int:
    """Nanoseconds since the epoch as an ERF timestamp (32.32 fixed-point seconds); the fraction is
    truncated, and :func:`erf_time_ns` gives ``ns`` back (a unit of 2**-32 s is under a nanosecond)."""
    if not 0 <= ns < (1 << 32) * 1_000_000_000:
        raise ValueError(f"ERF timestamp of {ns} ns: not a time between the epoch and 2106 (32-bit seconds)")
    sec, rem = divmod(ns, 1_000_000_000)
    return (sec << 32) | (rem << 32) // 1_000_000_000


def erf_ib_record(ns: int, packet: bytes) -> bytes:
    """A native InfiniBand packet (from its LRH to its VCRC) as an ERF record of type 21 at ``ns``,
    padded to 8 bytes (flags: varying record length), as a DAG card writes it; tshark dissects these as
    InfiniBand (it refuses link type 247)."""
    rlen = (16 + len(packet) + 7) // 8 * 8
    head = ERF(ts=erf_timestamp(ns), type=ERF_TYPE_INFINIBAND, flags=4, rlen=rlen, wlen=len(packet)).encode()
    return (head + packet).ljust(rlen, b"\0")


def erf_ethernet_record(ns: int, frame: bytes) -> bytes:
    """An Ethernet frame (its FCS too, if it has one: ``wlen`` counts what is given) as an ERF record of
    type 2 at ``ns``: the header, the offset and pad octets (0), the frame, padded to 8 bytes (flags:
    varying record length), as a DAG card writes it."""
    rlen = (16 + 2 + len(frame) + 7) // 8 * 8
    head = ERF(ts=erf_timestamp(ns), type=ERF_TYPE_ETH, flags=4, rlen=rlen, wlen=len(frame)).encode()
    return (head + b"\0\0" + frame).ljust(rlen, b"\0")


@dataclass(frozen=True, slots=True)
class ERF(Header):
    """ERF record header, 16 bytes (Endace Extensible Record Format).

    The timestamp is a little-endian 32.32 fixed-point number of seconds, the only
    little-endian field; ``decode``/``encode`` swap it so that ``ts`` holds its value.
    """

    ts: int = 0
    ext: int = 0
    type: int = ERF_TYPE_INFINIBAND
    flags: int = 0
    rlen: int = 16
    lctr: int = 0
    wlen: int = 0

    PSEUDO: ClassVar[bool] = True
    LAYOUT: ClassVar[Layout] = layout(
        "ERF",
        "Endace ERF record format (16-byte generic header)",
        F("ts", 64, "erf.ts", fmt="hex", doc="Timestamp, 32.32 fixed point seconds, little-endian"),
        F("ext", 1, "erf.types.ext_header", doc="Extension headers follow"),
        F("type", 7, "erf.types.type", doc="Record type: 21 InfiniBand, 2 Ethernet, ..."),
        F("flags", 8, "erf.flags", fmt="hex"),
        F("rlen", 16, "erf.rlen", doc="Record length in bytes, this header included"),
        F("lctr", 16, "erf.lctr", doc="Loss counter or colour"),
        F("wlen", 16, "erf.wlen", doc="Length of the packet on the wire"),
        ws="erf",
    )

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview, offset: int = 0) -> Self:
        h = super(ERF, cls).decode(data, offset)
        return h.replace(ts=int.from_bytes(h.ts.to_bytes(8, "big"), "little"))

    def encode(self) -> bytes:
        raw = Header.encode(self.replace(ts=int.from_bytes(self.ts.to_bytes(8, "little"), "big")))
        return raw

    @property
    def time_ns(self) -> int:
        """The timestamp in nanoseconds since the epoch, as Wireshark makes it: :func:`erf_time_ns`."""
        return erf_time_ns(self.ts)

    @property
    def timestamp(self) -> float:
        return (self.ts >> 32) + (self.ts & 0xFFFFFFFF) / 2**32


def erf_frame(data: bytes | bytearray | memoryview) -> tuple[int, int, int, int] | None:
    """Wireshark's frame time (nanoseconds since the epoch), ``frame.len`` and ``frame.cap_len`` of a
    pcap record of link type ERF, which are the ERF record's own, and where in the record the frame's
    octets start: its header's timestamp (:func:`erf_time_ns`), its wire length (``wlen``), and the
    octets after its headers, at most ``wlen``.  The headers are a pseudo-header, not frame data: the
    16-octet header, its 8-octet extension headers, and for an Ethernet record the offset and pad
    octets before the Ethernet header (``wiretap/erf.c``: ``erf_read_header`` puts all three in the
    pseudo-header).  None for a record shorter than the header."""
    size = ERF.LAYOUT.size
    if len(data) < size:
        return None
    erf = ERF.decode(data, 0)
    start, more = size, erf.ext
    while more and start + 8 <= len(data):
        more = data[start] >> 7
        start += 8
    if erf.type in ERF_ETHERNET_TYPES:
        start += 2
    start = min(start, len(data))
    return erf.time_ns, erf.wlen, min(erf.wlen, len(data) - start), start


@dataclass(frozen=True, slots=True)
class ERFExt(Header):
    """One 8-byte ERF extension header."""

    more: int = 0
    type: int = 0
    data: int = 0

    PSEUDO: ClassVar[bool] = True
    LAYOUT: ClassVar[Layout] = layout(
        "ERF extension",
        "Endace ERF extension header",
        F("more", 1, "erf.ehdr.types.more", doc="Another extension header follows"),
        F("type", 7, "erf.ehdr.types.type"),
        F("data", 56, None, fmt="hex"),
        ws="erf.ehdr",
    )


@dataclass(frozen=True, slots=True)
class ERFEthernet(Header):
    """The two octets an ERF Ethernet record has before its frame (part of the pseudo-header, as the ERF
    header is: Wireshark's ``erf.eth``)."""

    off: int = 0
    pad: int = 0

    PSEUDO: ClassVar[bool] = True
    LAYOUT: ClassVar[Layout] = layout(
        "ERF Ethernet",
        "Endace ERF Ethernet record: offset and pad before the frame",
        F("off", 8, "erf.eth.off", doc="Offset"),
        F("pad", 8, "erf.eth.pad", fmt="hex", doc="Padding"),
        ws="erf",
    )


def _rebase(inner: Packet, data: bytes, offset: int, prefix: list[Layer], encap: str | None = None) -> Packet:
    """``inner`` decoded from ``data[offset:]``, re-expressed over the whole record."""
    if offset == 0 and not prefix:
        return inner
    pkt = Packet(data, encap=encap or inner.encap)
    pkt.layers = prefix + [Layer(layer.header, layer.offset + offset) for layer in inner.layers]
    pkt.payload_offset = inner.payload_offset + offset
    pkt.payload_length, pkt.payload_wire = inner.payload_length, inner.payload_wire
    pkt.pad = inner.pad
    pkt.crc, pkt.crc_expected, pkt.crc_kind = inner.crc, inner.crc_expected, inner.crc_kind
    pkt.crc_offset = None if inner.crc_offset is None else inner.crc_offset + offset
    pkt.vcrc, pkt.vcrc_expected = inner.vcrc, inner.vcrc_expected
    pkt.problems = inner.problems
    pkt.annotate_from(inner)
    if inner.datagram_end is not None:
        pkt.datagram_end = inner.datagram_end + offset
    if inner.eth_trailer is not None:
        pkt.eth_trailer = inner.eth_trailer.shifted(offset)
    return pkt


def _unsupported(data: bytes, offset: int, what: str, prefix: list[Layer]) -> Packet:
    pkt = Packet(data, encap="other")
    pkt.layers = list(prefix)
    pkt.payload_offset, pkt.payload_length = offset, max(0, len(data) - offset)
    pkt.info = what
    return pkt


def decode_erf(data: bytes, *, lenient: bool) -> Packet:
    """An ERF record: header, extension headers, then the packet its type says."""
    erf = ERF.decode(data, 0)
    prefix = [Layer(erf, 0)]
    pos = 16
    more = erf.ext
    while more:
        ext = ERFExt.decode(data, pos)
        prefix.append(Layer(ext, pos))
        pos += 8
        more = ext.more
    if erf.rlen < pos or erf.rlen > len(data):
        err: DecodeError
        if erf.rlen > len(data):
            err = TruncatedError("ERF", "rlen", 10, erf.rlen, f"at most the {len(data)} bytes captured")
        else:
            err = MalformedError("ERF", "rlen", 10, erf.rlen, f"at least {pos} (the headers)")
        if not lenient:
            raise err
    # (lenient, the record's bytes are read whatever its rlen says, as tshark 4.0 reads an ERF record of a
    # pcap file: packet-erf.c dissects what follows the headers by the captured length; wlen still bounds it)
    end = len(data)
    if erf.type in ERF_ETHERNET_TYPES:
        if pos + 2 <= end:
            prefix.append(Layer(ERFEthernet.decode(data, pos), pos))
        pos += 2  # offset and pad bytes before the Ethernet header
        stop = min(end, pos + erf.wlen) if erf.wlen else end
        # (wlen counts the FCS an ERF Ethernet record keeps; tshark 4.0 tells it as it does in a pcap: by the lengths)
        inner = decode_ethernet(data[pos:stop], lenient=lenient, frame_len=erf.wlen or stop - pos)
    elif erf.type == ERF_TYPE_INFINIBAND:
        stop = min(end, pos + erf.wlen) if erf.wlen else end
        inner = _guard(decode_ib, data[pos:stop], lenient)
    elif erf.type in (ERF_TYPE_IPV4, ERF_TYPE_IPV6):
        stop = min(end, pos + erf.wlen) if erf.wlen else end
        inner = decode_ip(data[pos:stop], lenient=lenient)
    else:
        return _unsupported(data, pos, f"ERF record type {erf.type} (not decoded)", prefix)
    return _rebase(inner, data, pos, prefix, inner.encap)


def decode_frame(linktype: int, data: bytes, *, lenient: bool = True, wire_length: int | None = None,
                 fcs_len: int = -1) -> Packet:
    """Decode one captured record of the given link type.

    Strict (``lenient=False``) raises :class:`~rdmalab.wire.errors.DecodeError` on the first
    problem; lenient records problems in ``Packet.problems`` and never raises for bad bytes.
    ``wire_length``: the record's length on the wire (None or 0: as captured), which decides how an
    Ethernet frame's octets after its datagram are divided (padding, trailer, FCS), with ``fcs_len``, the
    FCS length the capture says it keeps (-1: it does not say; :func:`~rdmalab.wire.net.ethernet_trailer`).
    """
    wire = wire_length or len(data)
    if linktype == LINKTYPE_ETHERNET:
        return decode_ethernet(data, lenient=lenient, frame_len=wire, fcs_len=fcs_len)
    if linktype in RAW_IP_LINKTYPES:
        return decode_ip(data, lenient=lenient, frame_len=wire)
    if linktype == LINKTYPE_LINUX_SLL:
        return _cooked(SLL, data, lenient, wire)
    if linktype == LINKTYPE_LINUX_SLL2:
        return _cooked(SLL2, data, lenient, wire)
    if linktype == LINKTYPE_ERF:
        return _guard(decode_erf, data, lenient)
    if linktype == LINKTYPE_INFINIBAND:
        return _guard(decode_ib, data, lenient)
    if linktype in (LINKTYPE_NULL, LINKTYPE_LOOP):
        return _loopback(data, lenient, host_order=linktype == LINKTYPE_NULL, frame_len=wire)
    return _unsupported(data, 0, f"link type {linktype} (not decoded)", [])


def _loopback(data: bytes, lenient: bool, *, host_order: bool, frame_len: int | None = None) -> Packet:
    """A BSD loopback record: its family header, then IPv4 or IPv6 (another family is not decoded)."""
    if len(data) < 4:
        err = TruncatedError("Null/Loopback", "family", 0, len(data), "4 bytes")
        if not lenient:
            raise err
        pkt = _unsupported(data, 0, "Null/Loopback (truncated)", [])
        pkt.problems.append(err)
        return pkt
    family = int.from_bytes(data[:4], "big")
    if host_order and family & 0xFFFF0000:  # written by a little-endian host
        family = int.from_bytes(data[:4], "little")
    prefix = [Layer(NullLoopback(family), 0)]
    if family == BSD_AF_INET or family in BSD_AF_INET6:
        return _rebase(decode_ip(data[4:], lenient=lenient, frame_len=None if frame_len is None else frame_len - 4),
                       data, 4, prefix)
    return _unsupported(data, 4, f"Null/Loopback family {family} (not decoded)", prefix)


def _cooked(cls: type[SLL] | type[SLL2], data: bytes, lenient: bool, frame_len: int | None = None) -> Packet:
    size = cls.LAYOUT.size
    try:
        hdr = cls.decode(data, 0)
    except DecodeError as err:
        if not lenient:
            raise
        pkt = Packet(data, encap="other")
        pkt.payload_offset, pkt.payload_length = 0, len(data)
        pkt.problems.append(err)
        return pkt
    return decode_after_ethertype(data, hdr.protocol, size, lenient=lenient, prefix=(hdr,), frame_len=frame_len,
                                  trailer="sll.trailer")


def _guard(fn: object, data: bytes, lenient: bool) -> Packet:
    try:
        return fn(data, lenient=lenient)  # type: ignore[operator, no-any-return]
    except DecodeError as err:
        if not lenient:
            raise
        pkt = Packet(data, encap="other")
        pkt.payload_offset, pkt.payload_length = 0, len(data)
        pkt.problems.append(err)
        return pkt
