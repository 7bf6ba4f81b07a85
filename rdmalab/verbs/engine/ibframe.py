"""The engine's packets on the two other InfiniBand-transport wires: native InfiniBand and RoCEv1.

The engine builds a :class:`~rdmalab.verbs.engine.packet.Pkt` whatever the wire: the BTH fields,
the extended headers and the payload.  A RoCEv2 carrier asks it for :meth:`Pkt.frame`; the
carriers of this module's wires put the same transport headers in other envelopes:

* **native InfiniBand** (IBA Vol 1 chapter 7): LRH (VL, LVer 0, SL, LNH 2 "IBA local", DLID,
  PktLen, SLID), BTH and the extended headers, the payload padded to 4 bytes, the ICRC (the VL
  masked, 7.8.1) and the VCRC (7.8.2): :func:`ib_frame`, and :func:`from_ib`, which decodes one
  and checks both CRCs, as an HCA's link layer does before the transport sees the packet.  The
  LRH carries LIDs, not GIDs: a carrier gives the LIDs when it frames (``slid`` is the sending
  port's, ``dlid`` what the QP's address vector resolved, ``pkt.dst_mac``), and maps the LIDs of
  an arriving packet back to the port GIDs the engine's address checks compare
  (``gid_of(lid)``), which on a subnet without routers is one-to-one (LMC 0).
* **RoCEv1** (IBA Vol 1 annex A16): Ethernet (EtherType 0x8915), the GRH (the QP's SGID and
  DGID, next header 0x1B), BTH ..., ICRC with the GRH's TClass, FlowLabel and HopLmt masked:
  :func:`rocev1_frame` and :func:`from_rocev1`.

Neither function keeps anything: the bytes are built and checked by :mod:`rdmalab.wire`
(``encode_ib``, ``decode_ib``, ``encode_rocev1``, ``decode_ethernet``).
"""

from __future__ import annotations

from collections.abc import Callable

from rdmalab.verbs.engine.packet import INFO, Pkt, from_frame
from rdmalab.wire.errors import DecodeError
from rdmalab.wire.frame import decode_ib, encode_rocev1
from rdmalab.wire.header import Header
from rdmalab.wire.ib import AETH, BTH, DETH, GRH, IETH, LRH, RETH, AtomicAckETH, AtomicETH, ImmDt
from rdmalab.wire.net import ETHERTYPE_ROCE
from rdmalab.wire.packet import Packet, encode_ib

__all__ = ["IB_LOCAL_OVERHEAD", "ib_frame", "ib_size", "from_ib", "rocev1_frame", "from_rocev1", "ROCEV1_OVERHEAD"]

#: bytes around every native IB packet without a GRH: LRH 8, BTH 12, ICRC 4, VCRC 2
IB_LOCAL_OVERHEAD = 8 + 12 + 4 + 2
#: bytes around every RoCEv1 packet: Ethernet 14, GRH 40, BTH 12, ICRC 4
ROCEV1_OVERHEAD = 14 + 40 + 12 + 4

# the extended headers a Pkt keeps as attributes (as rdmalab.verbs.engine.packet names them)
_EXT_ATTR: dict[type[Header], str] = {RETH: "reth", AETH: "aeth", DETH: "deth", ImmDt: "imm", IETH: "ieth",
                                      AtomicETH: "atomic", AtomicAckETH: "atomic_ack"}


def _bth(pkt: Pkt) -> BTH:
    if pkt.count != 1:
        raise ValueError("a burst has no single frame; expand() it first")
    return BTH(opcode=pkt.opcode, se=pkt.se, destqp=pkt.destqp, ackreq=pkt.ackreq, psn=pkt.psn, p_key=pkt.pkey)


def ib_size(pkt: Pkt, grh: bool = False) -> int:
    """Bytes of ``pkt`` (one packet) as a native IB packet, LRH to VCRC (with a GRH: 40 more)."""
    n = len(pkt.payload)
    return IB_LOCAL_OVERHEAD + (40 if grh else 0) + INFO[pkt.opcode].header_size + n + (-n % 4)


def ib_frame(pkt: Pkt, *, slid: int, dlid: int, sl: int = 0, vl: int = 0, grh: GRH | None = None) -> bytes:
    """``pkt`` as a native IB packet, LRH through ICRC and VCRC: LNH 2 (BTH next), or LNH 3 with
    ``grh`` after the LRH (its PayLen set; the ICRC then masks the whole LRH, IBA Vol 1 7.8.1).

    Raises ValueError naming the field when a LID is not 16 bits or SL/VL not 4 bits."""
    for name, value, bits in (("slid", slid, 16), ("dlid", dlid, 16), ("sl", sl, 4), ("vl", vl, 4)):
        if not 0 <= value < 1 << bits:
            raise ValueError(f"ib_frame: {name} {value!r} does not fit the LRH's {bits}-bit field")
    lrh = LRH(vl=vl, sl=sl, dlid=dlid, slid=slid)
    return encode_ib(_bth(pkt), pkt.headers(), bytes(pkt.payload), lrh=lrh, grh=grh)


def _pkt_from(d: Packet, src_gid: int, dst_gid: int, src_addr: int, dst_addr: int) -> Pkt | None:
    bth = d.bth
    if bth is None or bth.opcode not in INFO:
        return None
    p = Pkt(bth.opcode, bth.psn, bth.destqp, src_gid, dst_gid, 0, src_addr, dst_addr, d.payload, bth.ackreq, bth.se)
    for layer in d.layers:
        attr = _EXT_ATTR.get(type(layer.header))
        if attr is not None:
            setattr(p, attr, layer.header)
    p.pkey = bth.p_key
    return p


def from_ib(raw: bytes, gid_of: Callable[[int], int | None]) -> Pkt | None:
    """Decode a native IB packet (LRH .. VCRC) into a :class:`Pkt`; ``None`` if it is malformed, its
    ICRC or VCRC is bad, or ``gid_of`` knows no port for its SLID or DLID.  The Pkt's ``src_gid``
    and ``dst_gid`` are its GRH's SGID and DGID, or without one ``gid_of(SLID)`` and
    ``gid_of(DLID)``; its ``src_mac``/``dst_mac`` the SLID and DLID themselves (the link-layer
    addresses, as the MACs are on Ethernet)."""
    try:
        d = decode_ib(raw)
    except DecodeError:
        return None
    if d.crc_status != "good" or d.vcrc_status != "good":
        return None
    lrh = d[LRH]
    grh = d.get(GRH)
    src, dst = (grh.sgid, grh.dgid) if grh is not None else (gid_of(lrh.slid), gid_of(lrh.dlid))
    if src is None or dst is None:
        return None
    p = _pkt_from(d, src, dst, lrh.slid, lrh.dlid)
    if p is not None:
        p._frame = bytes(raw)
    return p


def rocev1_frame(pkt: Pkt, *, hop_limit: int = 64, traffic_class: int = 0, flow_label: int = 0) -> bytes:
    """``pkt`` as a RoCEv1 Ethernet frame: its MACs, EtherType 0x8915, a GRH from its GIDs (next
    header 0x1B), BTH ..., ICRC."""
    grh = GRH(tclass=traffic_class, flowlabel=flow_label, hoplmt=hop_limit, sgid=pkt.src_gid, dgid=pkt.dst_gid)
    return encode_rocev1(_bth(pkt), pkt.headers(), bytes(pkt.payload), grh=grh, src_mac=pkt.src_mac,
                         dst_mac=pkt.dst_mac)


def from_rocev1(frame: bytes) -> Pkt | None:
    """Decode a RoCEv1 frame into a :class:`Pkt` (GIDs from its GRH, as
    :func:`rdmalab.verbs.engine.packet.from_frame` does); ``None`` if it is not RoCEv1, is malformed
    or its ICRC is bad."""
    if frame[12:14] != ETHERTYPE_ROCE.to_bytes(2, "big"):
        return None
    return from_frame(frame)
