"""Conversion between scapy packets and rdmalab packets, both ways, byte for byte.

Both directions go through the frame's bytes, so nothing is lost: ``bytes(to_scapy(p)) ==
p.data`` and ``from_scapy(s).data == bytes(s)``.  Each side then dissects with its own
decoder; :func:`compare_layers` checks that the two agree on every header's field values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from scapy.contrib import roce
from scapy.layers.inet import IP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import NoPayload, Packet, Raw

from rdmalab.wire import crc as _crc
from rdmalab.wire.frame import decode_ethernet, decode_ib, decode_ip
from rdmalab.wire.header import Header
from rdmalab.wire.packet import Packet as RdPacket

from ._gen import binding_for_layer, registered_headers
from .ib import LRH

# First scapy layer class -> rdmalab decoder of the whole frame.  Other modules (iWARP) add
# theirs with :func:`register_decoder`.
Decoder = Callable[..., RdPacket]
_DECODERS: list[tuple[type[Packet], Decoder]] = [
    (Ether, decode_ethernet),
    (IP, decode_ip),
    (IPv6, decode_ip),
    (LRH, decode_ib),
]
# rdmalab ``Packet.encap`` -> the scapy class that dissects the frame from its first byte.
_FIRST_LAYER: dict[str, Callable[[bytes], Packet]] = {
    "ib": LRH,
}


def register_decoder(first: type[Packet], decoder: Decoder, encap: str | None = None) -> None:
    """Teach the converters a new kind of frame: a scapy first layer and the rdmalab decoder
    for bytes that start with it (and, for ``encap``, the reverse direction)."""
    _DECODERS.insert(0, (first, decoder))
    if encap is not None:
        _FIRST_LAYER[encap] = first


def _ip_first(data: bytes) -> Packet:
    if data and data[0] >> 4 == 6:
        return IPv6(data)
    return IP(data)


def to_scapy(pkt: RdPacket | bytes | bytearray | memoryview, *, first: str | type[Packet] | None = None) -> Packet:
    """A scapy packet for an rdmalab packet (or raw frame bytes), dissected by scapy.

    The first layer follows ``pkt.encap`` (``"ib"`` -> LRH, ``"ip"`` -> IP/IPv6, iWARP
    encapsulations registered by :mod:`rdmalab.scapy.iwarp`, anything else Ethernet).  For bytes
    Ethernet is assumed unless ``first`` (an encap name or a scapy class) says otherwise.
    """
    if isinstance(pkt, RdPacket):
        data = pkt.data
        kind: str | type[Packet] = first or pkt.encap
    else:
        data = bytes(pkt)
        kind = first or "eth"
    if isinstance(kind, type):
        return kind(data)
    if kind == "ip":
        return _ip_first(data)
    maker = _FIRST_LAYER.get(kind, Ether)
    return maker(data)


def from_scapy(spkt: Packet, *, lenient: bool = False, **kwargs: Any) -> RdPacket:
    """The rdmalab packet for a scapy packet: its bytes decoded by rdmalab's decoder for its
    first layer (Ethernet, IP/IPv6, LRH, or a registered one such as MPA).  Extra keyword
    arguments go to that decoder (e.g. ``rocev2_ports``)."""
    data = bytes(spkt)
    for klass, decoder in _DECODERS:
        if isinstance(spkt, klass):
            return decoder(data, lenient=lenient, **kwargs)
    raise TypeError(f"no rdmalab decoder for a frame starting with scapy layer {type(spkt).__name__}")


def fix_crcs(spkt: Packet) -> Packet:
    """A copy of ``spkt`` with its CRCs (ICRC, VCRC, MPA CRC) recomputed by rdmalab.

    Scapy's contrib BTH computes the ICRC for RoCEv2 only; RoCEv1 (Ether/GRH/BTH) gets a zero
    ICRC.  This fills in whatever rdmalab's decoder says the CRCs should be.
    """
    rd = from_scapy(spkt, lenient=True)
    data = bytearray(rd.data)
    if rd.crc_offset is not None and rd.crc_expected is not None:
        data[rd.crc_offset : rd.crc_offset + 4] = rd.crc_expected.to_bytes(4, "little")
        if rd.vcrc is not None:
            at = rd.crc_offset + 4
            data[at : at + 2] = _crc.vcrc(bytes(data[:at])).to_bytes(2, "little")
    return type(spkt)(bytes(data))


def scapy_headers(spkt: Packet) -> list[tuple[Packet, Header]]:
    """Every scapy layer of ``spkt`` that has an rdmalab header, with that header's values."""
    out: list[tuple[Packet, Header]] = []
    layer: Packet = spkt
    while not isinstance(layer, NoPayload):
        b = binding_for_layer(type(layer))
        if b is not None:
            out.extend((layer, h) for h in b.headers(layer))
        layer = layer.payload
    return out


def compare_layers(spkt: Packet, rd: RdPacket) -> list[str]:
    """Differences between scapy's and rdmalab's dissection of the same frame (empty = agree).

    Compares, in order, every rdmalab layer that has a scapy layer (IB, MAD/CM, iWARP headers)
    with the scapy layers that have an rdmalab header; Ethernet/IP/UDP/TCP are scapy's own and
    are compared by bytes only.
    """
    known = set(registered_headers())
    problems: list[str] = []
    mine = [layer.header for layer in rd.layers if type(layer.header) in known]
    theirs = [h for _, h in scapy_headers(spkt)]
    if len(mine) != len(theirs):
        problems.append(f"rdmalab has {[h.LAYOUT.name for h in mine]}, scapy {[h.LAYOUT.name for h in theirs]}")
    for a, b in zip(mine, theirs, strict=False):
        if a != b:
            problems.append(f"{a.LAYOUT.name}: rdmalab {a.values()} != scapy {b.values()}")
    if bytes(spkt) != rd.data:
        problems.append("bytes differ")
    return problems


def scapy_payload(spkt: Packet) -> bytes:
    """The bytes of the innermost ``Raw`` layer (the RDMA payload, pad included)."""
    raw = spkt.getlayer(Raw)
    return bytes(raw.load) if raw is not None else b""


def scapy_icrc(spkt: Packet) -> int | None:
    """The ICRC scapy read from the wire, as rdmalab reports it (little-endian value)."""
    bth = spkt.getlayer(roce.BTH)
    if bth is None or bth.icrc is None:
        return None
    return int.from_bytes(int(bth.icrc).to_bytes(4, "big"), "little")
