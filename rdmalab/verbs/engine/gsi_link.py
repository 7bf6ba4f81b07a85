"""What QP1's packets look like on the two link layers a soft device's port can have.

The CM's MADs are the same on both wires; the envelope and the addresses around them are the
port's link layer's (``dev.link_layer``):

* **Ethernet (RoCEv2)**: QP1 sends from the port's IPv4-mapped GID (GID index 1, ``cma_resolve_iboe_route``),
  in an Ethernet/IPv4-or-IPv6/UDP frame; the UD payload ends before the 4-byte ICRC.
* **InfiniBand**: QP1 sends from the port GID (GID index 0: subnet prefix + port GUID, IBA Vol 1
  4.1.1) as a native IB packet (LRH with the LIDs, VL0; no GRH inside a subnet: LNH 2); the UD payload
  ends before the ICRC and the 2-byte VCRC (IBA Vol 1 7.8).  A GSI packet's BTH and DETH are those of
  any UD SEND (IBA 13.5.1: Q_Key 0x80010000, source QP 1).

:func:`cm_gid` and :func:`ud_payload` are all the CM (:mod:`rdmalab.verbs.engine.ibcm`) asks of
the link layer; the carrier frames the packet (a RoCE fabric as RoCEv2, an
:class:`~rdmalab.fabric.ibfabric.IBFabric` with :func:`~rdmalab.verbs.engine.ibframe.ib_frame`).
"""

from __future__ import annotations

from typing import Any

from rdmalab.verbs.libibverbs_enums import IBV_LINK_LAYER_ETHERNET, IBV_LINK_LAYER_INFINIBAND
from rdmalab.wire.ib import LNH_IBA_GLOBAL

#: bytes of the headers before a UD payload on native IB: LRH 8, BTH 12, DETH 8 (a GRH adds 40)
IB_UD_HEADERS = 8 + 12 + 8


def on_ib(dev: Any) -> bool:
    """Whether ``dev``'s port is an InfiniBand port (else Ethernet: RoCE)."""
    return getattr(dev, "link_layer", IBV_LINK_LAYER_ETHERNET) == IBV_LINK_LAYER_INFINIBAND


def cm_gid_index(dev: Any) -> int:
    """The GID index QP1 sends from: 0 on InfiniBand (the port GID), 1 on RoCE (the IPv4-mapped GID)."""
    return 0 if on_ib(dev) else 1


def cm_gid(dev: Any) -> int:
    """The GID the CM's MADs carry as their source (and the CM keys its connections by)."""
    return int(dev.gids[cm_gid_index(dev)])


def ud_payload(frame: bytes, dev: Any) -> bytes:
    """The UD payload (a MAD) of a whole QP1 packet ``frame`` as ``dev``'s link layer carries it:
    what lies between the DETH and the ICRC (and, on InfiniBand, the VCRC), without the pad.
    ValueError for a frame too short to hold the headers."""
    if on_ib(dev):
        if len(frame) < IB_UD_HEADERS + 6:
            raise ValueError(f"a native IB packet of {len(frame)} bytes holds no UD payload")
        start = IB_UD_HEADERS + (40 if frame[1] & 3 == LNH_IBA_GLOBAL else 0)
        tail = 4 + 2
    else:
        if len(frame) < 14 + 20 + 8 + 12 + 8 + 4:
            raise ValueError(f"a RoCEv2 frame of {len(frame)} bytes holds no UD payload")
        ip4 = frame[12:14] == b"\x08\x00"
        start = 14 + ((frame[14] & 0x0F) * 4 if ip4 else 40) + 8 + 12 + 8
        tail = 4
    pad = (frame[start - 20 + 1] >> 4) & 3  # BTH byte 1: SE, M, PadCnt (2 bits), TVer
    return bytes(frame[start:len(frame) - tail - pad])
