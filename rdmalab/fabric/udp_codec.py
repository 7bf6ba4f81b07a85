"""The UDP carrier's codec: engine packets to IPv4 RoCEv2 datagrams and back, as rxe puts them on the wire.

:func:`encode_datagram` and :func:`decode_datagram` are the reference (one packet, readable);
the carrier's fast paths (:mod:`rdmalab.fabric.udp`: a burst's datagrams built in one reused
buffer, the receive path that checks the ICRC in place) use the struct layouts and the ICRC
correction below, and ``tests/fabric/test_udp.py`` holds them to these functions byte for byte.
The ICRC's masking itself has one home, :mod:`rdmalab.wire.crc`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from rdmalab.verbs.engine.packet import _ATTR, INFO, SEGMENT, Pkt
from rdmalab.wire.crc import ICRC_SEED, crc32, icrc_mask_delta, mask_rocev2
from rdmalab.wire.header import Header, compile_constructor
from rdmalab.wire.net import ROCEV2_PORT

IPUDP = struct.Struct(">BBHHHBBHIIHHHH")  # IPv4 header (20 bytes) + UDP header (8 bytes)
BTH_WORDS = struct.Struct(">BBHII")
HDR = struct.Struct(">BBHHHBBHIIHHHHBBHII")  # IPv4 + UDP + BTH, 40 bytes
ICRC = struct.Struct("<I")
ZEROS = (b"", b"\0", b"\0\0", b"\0\0\0")
#: what the receive loop reads of a datagram, from offset 0: version/IHL, total length, IPv4 source; BTH
#: opcode, flags (SE, MigReq, pad count, version), words 1 (dest QP) and 2 (AckReq, PSN)
RX_FIELDS = struct.Struct(">BxH8xI12xBBxxII")
RETH_WORDS = struct.Struct(">QII")

#: the opcodes the receive loop hands to ``SoftDevice.receive_segment`` (:data:`SEGMENT`) -> whether a
#: RETH follows the BTH (a WRITE's FIRST or ONLY)
SEGMENT_RETH: dict[int, bool] = {code: bool(info.headers) for code, info in SEGMENT.items()}

U16 = struct.Struct(">H")
U32 = struct.Struct(">I")
_DELTAS: dict[tuple[int, int], int] = {}


def mask_delta(tos: int, length: int) -> int:
    """What to XOR into ``crc32(datagram, ICRC_SEED)`` of a datagram of ``length`` bytes as this carrier
    sends it (TOS ``tos``, TTL 64, IP and UDP checksums 0, BTH byte 4 zero) to get its ICRC
    (:func:`rdmalab.wire.crc.icrc_mask_delta`), computed once per ``(tos, length)``."""
    d = _DELTAS.get((tos, length))
    if d is None:
        head = HDR.pack(0x45, tos, 0, 0, 0x4000, 64, 17, 0, 0, 0, 0, ROCEV2_PORT, 0, 0, 0, 0, 0xFFFF, 0, 0)
        d = _DELTAS[(tos, length)] = icrc_mask_delta(head, length)
    return d


def ext_headers(p: Pkt, code: int) -> bytes:
    """The extended headers (after the BTH) that packet ``p`` carries with opcode ``code``."""
    classes = INFO[code].headers
    if not classes:
        return b""
    out = []
    for cls in classes:
        h = getattr(p, _ATTR[cls], None) if cls in _ATTR else None
        out.append((h if h is not None else cls()).encode())
    return b"".join(out)


def encode_datagram(p: Pkt, ip_id: int) -> bytes:
    """The IPv4/UDP/BTH/.../ICRC datagram for ``p``: DF set, TTL 64, ``ip_id``, UDP checksum 0 (as rxe).

    The same fields as the carrier seam's ``Datagram`` of this packet with this ``ip_id``, built
    in one pass (the payload is not copied before the CRC is taken over it)."""
    info = INFO[p.opcode]
    payload = p.payload
    n = len(payload)
    pad = -n % 4
    ext = b"".join([h.encode() for h in p.headers()]) if info.headers else b""
    psn = (p.ackreq << 31) | (p.psn & 0xFFFFFF)
    dqp = p.destqp & 0xFFFFFF
    flags = (p.se << 7) | (pad << 4)
    udp_len = 24 + len(ext) + n + pad  # UDP 8 + BTH 12 + ext + payload + pad + ICRC 4
    src, dst, sport = p.src_gid & 0xFFFFFFFF, p.dst_gid & 0xFFFFFFFF, p.sport
    # version/IHL, TOS (the ECN bits: 0 unless DCQCN marks ECT), total length, ID, DF, TTL 64, UDP,
    # checksum 0 (the kernel fills it in for IP_HDRINCL sends: net/ipv4/raw.c), addresses; UDP
    # ports, length, checksum 0.
    hdr = IPUDP.pack(0x45, p.ecn & 0xFF, 20 + udp_len, ip_id, 0x4000, 64, 17, 0, src, dst, sport, ROCEV2_PORT, udp_len, 0)
    bth = BTH_WORDS.pack(p.opcode, flags, 0xFFFF, dqp, psn)
    # ICRC (rxe_icrc.c): the headers with their variant fields set to ones (wire.crc.mask_rocev2), then
    # the rest as sent; zlib's CRC-32, little-endian
    masked = bytearray(hdr + bth)
    mask_rocev2(masked)
    crc = crc32(masked, ICRC_SEED)
    if ext:
        crc = crc32(ext, crc)
    tail = b"\0" * pad
    if n:
        crc = crc32(payload, crc)
        if pad:
            crc = crc32(tail, crc)
    return b"".join((hdr, bth, ext, payload, tail, ICRC.pack(crc)))


def decode_datagram(d: bytes, icrc_checked: bool = False) -> Pkt | None:
    """An IPv4 RoCEv2 datagram (IP header first) as a :class:`Pkt`, or None if it is malformed,
    not RoCEv2, or its ICRC is wrong (rxe drops those silently: ``rxe_recv.c``).  The payload of
    the packet is a view into ``d``.  ``icrc_checked``: the caller has checked the ICRC already.

    A datagram with a 20-byte IP header (all that rxe and this carrier send) takes
    :func:`_decode_ipv4`: the IP, UDP and BTH fields in one ``struct`` call and the extended
    headers through decoders generated from their declarations; anything else takes
    :func:`decode_datagram_reference`, which ``tests/fabric/test_udp_codec_fast.py`` holds the fast
    path to, packet for packet."""
    if len(d) >= 44 and d[0] == 0x45:
        return _decode_ipv4(d, icrc_checked)
    return decode_datagram_reference(d, icrc_checked)


#: IPv4 header (20 bytes, no options) + UDP + BTH, the fields the decoder reads: version/IHL, total
#: length, protocol, source, destination; UDP ports; BTH opcode, flags, P_Key, words 1 and 2
RX_HEAD = struct.Struct(">BxH5xB2xIIHH4xBBHII")


def _compile_decoder(cls: type[Header]) -> Callable[[Any, int], Header]:
    """``decode(data, offset)`` for header class ``cls``, without the length check (the caller has
    made it): its fields' shifts and masks from the declaration, written out once, and the generated
    constructor (:func:`rdmalab.wire.header.compile_constructor`)."""
    lay = cls.LAYOUT
    args = ", ".join(f"(v >> {f.shift}) & {f.mask:#x}" if f.shift else f"v & {f.mask:#x}" for f in lay.fields)
    ns: dict[str, Any] = {"_make": compile_constructor(cls), "_int": int.from_bytes}
    exec(f"def decode(d, at):\n    v = _int(d[at:at + {lay.size}], 'big')\n    return _make({args})\n", ns)  # noqa: S102
    decode: Callable[[Any, int], Header] = ns["decode"]
    return decode


#: opcode -> its extended headers as (Pkt attribute or None, size, decoder); None for a header the
#: engine's packet has no attribute for (RD's RDETH, FLUSH's FETH: decoded for the length check, not kept).
#: Filled on first use of each opcode (:func:`_plan`): compiling every decoder up front would cost the
#: engine's start-up in the lab VM for opcodes most runs never receive.
_PLANS: dict[int, tuple[tuple[str | None, int, Callable[[Any, int], Header]], ...]] = {}
_DECODERS: dict[type[Header], Callable[[Any, int], Header]] = {}


def _plan(code: int) -> tuple[tuple[str | None, int, Callable[[Any, int], Header]], ...] | None:
    info = INFO.get(code)
    if info is None:
        return None
    for cls in info.headers:
        if cls not in _DECODERS:
            _DECODERS[cls] = _compile_decoder(cls)
    plan = _PLANS[code] = tuple((_ATTR.get(cls), cls.LAYOUT.size, _DECODERS[cls]) for cls in info.headers)
    return plan


def _decode_ipv4(d: bytes, icrc_checked: bool) -> Pkt | None:
    """:func:`decode_datagram` for a datagram whose IP header is 20 bytes (``d[0] == 0x45``, ``len(d) >= 44``)."""
    _, total, proto, src, dst, sport, dport, opc, flags, pkey, w1, w2 = RX_HEAD.unpack_from(d)
    if proto != 17 or total > len(d) or total < 44 or dport != ROCEV2_PORT:
        return None
    plan = _PLANS.get(opc)
    if plan is None:
        plan = _plan(opc)
        if plan is None:
            return None
    mv = memoryview(d)
    end_crc = total - 4
    if not icrc_checked:
        m = bytearray(mv[:40])
        mask_rocev2(m)
        if crc32(mv[40:end_crc], crc32(m, ICRC_SEED)) != int.from_bytes(mv[end_crc:total], "little"):
            return None
    at = 40
    hdrs = []
    for attr, size, dec in plan:
        if at + size > end_crc:
            return None
        if attr is not None:
            hdrs.append((attr, dec(d, at)))
        at += size
    end = end_crc - ((flags >> 4) & 3)
    if end < at:
        return None
    p = Pkt(opc, w2 & 0xFFFFFF, w1 & 0xFFFFFF, 0xFFFF00000000 | src, 0xFFFF00000000 | dst, sport, 0, 0, mv[at:end],
            w2 >> 31, flags >> 7)
    p.pkey = pkey
    for attr, h in hdrs:
        setattr(p, attr, h)
    return p


def decode_datagram_reference(d: bytes, icrc_checked: bool = False) -> Pkt | None:
    """:func:`decode_datagram` spelled out field by field, for any IPv4 header length: the reference."""
    if len(d) < 20 or d[0] >> 4 != 4:
        return None
    u = (d[0] & 0x0F) * 4
    total = (d[2] << 8) | d[3]
    if d[9] != 17 or total > len(d) or total < u + 8 + 12 + 4:
        return None
    if (d[u + 2] << 8 | d[u + 3]) != ROCEV2_PORT:
        return None
    b = u + 8
    opc = d[b]
    info = INFO.get(opc)
    if info is None:
        return None
    mv = memoryview(d)
    end_crc = total - 4
    if not icrc_checked:
        # ICRC over the masked IP header, UDP header and BTH, then the rest (rxe_icrc.c)
        m = bytearray(mv[:b + 12])
        mask_rocev2(m)
        crc = crc32(mv[b + 12:end_crc], crc32(m, ICRC_SEED))
        if crc != int.from_bytes(mv[end_crc:total], "little"):
            return None
    pad = (d[b + 1] >> 4) & 3
    at = b + 12
    hdrs = []
    for cls in info.headers:
        size = cls.LAYOUT.size
        if at + size > end_crc:
            return None
        hdrs.append(cls.decode(d, at))
        at += size
    end = end_crc - pad
    if end < at:
        return None
    src = 0xFFFF00000000 | int.from_bytes(mv[12:16], "big")
    dst = 0xFFFF00000000 | int.from_bytes(mv[16:20], "big")
    w2 = int.from_bytes(mv[b + 8:b + 12], "big")
    p = Pkt(opc, w2 & 0xFFFFFF, int.from_bytes(mv[b + 5:b + 8], "big"), src, dst, (d[u] << 8) | d[u + 1], 0, 0,
            mv[at:end], w2 >> 31, d[b + 1] >> 7)
    p.pkey = (d[b + 2] << 8) | d[b + 3]
    for h in hdrs:
        attr = _ATTR.get(type(h))
        if attr is not None:  # (RD's RDETH, FLUSH's FETH: the engine's packet does not keep them)
            setattr(p, attr, h)
    return p
