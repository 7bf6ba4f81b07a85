"""One RoCEv2 packet as a UDP payload, with the addressing its ICRC covers.

A :class:`Datagram` is what crosses the carrier seam (:mod:`rdmalab.verbs.engine.carrier`) when
a carrier needs bytes: the UDP payload (BTH through ICRC) and every IP/UDP header field a
carrier puts on the wire.  The engine decides each field the ICRC covers (IBA vol 1 annex
A17.3.3: for IPv4 everything but TOS, TTL and the header checksum; for IPv6 everything but
traffic class, flow label and hop limit; the UDP header but its checksum), so a carrier sends
exactly those values, or the receiver drops the packet as rxe does (``rxe_icrc.c``).  The
fields the ICRC masks (``tos``, ``ttl``, the IPv6 flow label) may be rewritten on the way; a
switch marking ECN does exactly that (:meth:`Datagram.with_ecn`).

Addresses are GIDs, 128-bit integers; an IPv4 endpoint has the IPv4-mapped GID
``::ffff:a.b.c.d`` (what rxe puts at its IPv4 GID index, IBA annex A17.4.1).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, replace

from rdmalab.wire import crc as _crc
from rdmalab.wire.errors import DecodeError
from rdmalab.wire.frame import decode_ethernet, encode_ip_udp, encode_l2
from rdmalab.wire.net import ROCEV2_PORT, UDP, IPv4, IPv6

V4_MAPPED = 0xFFFF << 32
IPV4_HEADER, IPV6_HEADER, UDP_HEADER = 20, 40, 8


def is_v4_mapped(gid: int) -> bool:
    """True for ``::ffff:a.b.c.d`` (an IPv4 endpoint's GID)."""
    return (gid >> 32) == 0xFFFF


def gid_to_ip(gid: int) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The IP address a GID stands for on a RoCEv2 wire (IPv4 for IPv4-mapped GIDs)."""
    return ipaddress.IPv4Address(gid & 0xFFFFFFFF) if is_v4_mapped(gid) else ipaddress.IPv6Address(gid)


def ip_to_gid(ip: str | int | ipaddress.IPv4Address | ipaddress.IPv6Address) -> int:
    """The GID of an IP address: IPv4 becomes ``::ffff:a.b.c.d``."""
    a = ipaddress.ip_address(ip)
    return V4_MAPPED | int(a) if a.version == 4 else int(a)


@dataclass(frozen=True, slots=True)
class Datagram:
    """A RoCEv2 UDP payload (BTH .. ICRC) and the IP/UDP fields it travels with.

    ``payload``  the UDP payload: BTH, extended headers, data, pad, ICRC (4 bytes, LSB first)
    ``src_gid``, ``dst_gid``  the IP source and destination as GIDs (IPv4-mapped for IPv4)
    ``sport``, ``dport``  UDP ports; ``dport`` is 4791 (IANA, annex A17.2.1), ``sport`` the
             per-QP entropy port (``rxe_qp.c``)
    ``ip_id``  IPv4 identification (covered by the ICRC) or, over IPv6, the flow label (masked)
    ``tos``    DSCP << 2 | ECN (IPv4 TOS / IPv6 traffic class; masked by the ICRC)
    ``ttl``    IPv4 TTL / IPv6 hop limit (masked by the ICRC)
    ``df``     the IPv4 Don't Fragment flag (covered by the ICRC; rxe sets it)
    """

    payload: bytes
    src_gid: int
    dst_gid: int
    sport: int
    dport: int = ROCEV2_PORT
    ip_id: int = 0
    tos: int = 0
    ttl: int = 64
    df: bool = True

    @property
    def ipv4(self) -> bool:
        """Whether this datagram travels over IPv4 (both GIDs IPv4-mapped)."""
        return is_v4_mapped(self.src_gid) and is_v4_mapped(self.dst_gid)

    @property
    def src_ip(self) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
        return gid_to_ip(self.src_gid) if self.ipv4 else ipaddress.IPv6Address(self.src_gid)

    @property
    def dst_ip(self) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
        return gid_to_ip(self.dst_gid) if self.ipv4 else ipaddress.IPv6Address(self.dst_gid)

    @property
    def ecn(self) -> int:
        """The ECN codepoint (RFC 3168 5: 3 = Congestion Experienced)."""
        return self.tos & 3

    def with_ecn(self, ecn: int) -> Datagram:
        """The same datagram with its ECN bits rewritten (what a marking switch does; the ICRC stays valid)."""
        return replace(self, tos=(self.tos & ~3) | (ecn & 3))

    def ip_udp_header(self) -> bytes:
        """The IP and UDP headers this datagram is sent with (IPv4 header checksum filled in)."""
        return self._headers()[0]

    def _headers(self) -> tuple[bytes, int]:
        v4 = self.ipv4
        return encode_ip_udp(
            len(self.payload), src_ip=self.src_gid & 0xFFFFFFFF if v4 else self.src_gid,
            dst_ip=self.dst_gid & 0xFFFFFFFF if v4 else self.dst_gid, ipv6=not v4, src_port=self.sport,
            dst_port=self.dport, ttl=self.ttl, dscp=self.tos >> 2, ecn=self.tos & 3,
            ip_id=self.ip_id if v4 else 0, flowlabel=0 if v4 else self.ip_id, df=self.df)

    def frame(self, src_mac: int = 0, dst_mac: int = 0) -> bytes:
        """The complete Ethernet frame carrying this datagram."""
        l3, ethertype = self._headers()
        return encode_l2(ethertype, src_mac=src_mac, dst_mac=dst_mac) + l3 + self.payload

    def icrc_ok(self) -> bool:
        """Whether the ICRC at the end of ``payload`` matches this datagram's covered fields."""
        if len(self.payload) < 12 + 4:
            return False
        body, icrc = self.payload[:-4], self.payload[-4:]
        return _crc.icrc_rocev2(self.ip_udp_header() + body) == int.from_bytes(icrc, "little")

    @classmethod
    def seal(cls, body: bytes, src_gid: int, dst_gid: int, sport: int, *, dport: int = ROCEV2_PORT, ip_id: int = 0,
             tos: int = 0, ttl: int = 64, df: bool = True) -> Datagram:
        """A datagram for ``body`` (BTH through pad) with its ICRC computed over these fields."""
        # The IP and UDP lengths the ICRC covers count the ICRC itself (IBA vol 1 annex A17.3.3),
        # so the headers are built for a payload four bytes longer than ``body``.
        d = cls(body + bytes(4), src_gid, dst_gid, sport, dport, ip_id, tos, ttl, df)
        icrc = _crc.icrc_rocev2(d.ip_udp_header() + body).to_bytes(4, "little")
        return replace(d, payload=body + icrc)


def datagram_from_frame(frame: bytes | bytearray | memoryview) -> Datagram | None:
    """Decode an Ethernet frame down to its RoCEv2 :class:`Datagram`.

    ``None`` when the frame is not a well-formed RoCEv2 packet or its ICRC is bad (rxe drops
    such packets silently, ``rxe_recv.c``/``rxe_icrc.c``).
    """
    try:
        d = decode_ethernet(frame)
    except DecodeError:
        return None
    if d.encap != "rocev2" or d.crc_status != "good":
        return None
    udp_layer = next(ly for ly in d.layers if isinstance(ly.header, UDP))
    udp = udp_layer.header
    assert isinstance(udp, UDP)
    ip4 = d.get(IPv4)
    start = udp_layer.offset + UDP_HEADER
    payload = bytes(d.data[start:(d.crc_offset or start) + 4])
    if ip4 is not None:
        return Datagram(payload, V4_MAPPED | ip4.src, V4_MAPPED | ip4.dst, udp.sport, udp.dport,
                        ip4.identification, (ip4.dscp << 2) | ip4.ecn, ip4.ttl, bool(ip4.flags & 0b010))
    ip6 = d[IPv6]
    return Datagram(payload, ip6.src, ip6.dst, udp.sport, udp.dport, ip6.flowlabel, ip6.tclass, ip6.hop_limit, False)
