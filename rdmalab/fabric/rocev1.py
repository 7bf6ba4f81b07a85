"""RoCEv1: the simulated fabric with devices that send the InfiniBand transport in a GRH on Ethernet.

RoCE's first version (IBA Vol 1 annex A16) puts the GRH where native IB has the LRH, on an
Ethernet frame of EtherType 0x8915: Ethernet, GRH (next header 0x1B, the two GIDs), BTH ...,
ICRC with the GRH's TClass, FlowLabel and HopLmt masked.  It is not routable (no IP header),
so both ends share one L2 network, which the simulated fabric is.

:class:`RoceV1Fabric` is the simulated fabric (:class:`rdmalab.fabric.sim.Fabric`: virtual clock,
faults, taps, trace) whose every packet crosses as a RoCEv1 frame (``frames`` is always on): the
sender's frame is built with :func:`rdmalab.verbs.engine.ibframe.rocev1_frame`, taps and
``write_pcap`` write it (tshark decodes it as RoCE, EtherType 0x8915), faults corrupt it, and the
receiving device decodes it and checks its ICRC (:func:`rdmalab.verbs.engine.packet.from_frame`).
Its devices answer ``query_gid_type`` with IBV_GID_TYPE_ROCE_V1; programs address them as on
RoCEv2 (``AHAttr(is_global=1, gr=GlobalRoute(dgid=...))``).
"""

from __future__ import annotations

from typing import Any

from rdmalab.fabric.sim import Fabric
from rdmalab.verbs import enums as e
from rdmalab.verbs.engine.carrier import Station
from rdmalab.verbs.engine.ibframe import rocev1_frame
from rdmalab.verbs.engine.node import SoftDevice
from rdmalab.verbs.engine.packet import Pkt

__all__ = ["RoceV1Fabric"]


class RoceV1Fabric(Fabric):
    """The simulated fabric, RoCEv1 on the wire (see the module docstring); the same arguments as
    :class:`~rdmalab.fabric.sim.Fabric` but ``frames`` (always on) and ``bursts`` (single packets)."""

    def __init__(self, **kw: Any) -> None:
        for name in ("frames", "bursts"):
            if name in kw:
                raise TypeError(f"RoceV1Fabric: {name} is fixed (every packet crosses as a RoCEv1 frame)")
        super().__init__(frames=True, bursts=False, **kw)

    def attach(self, dev: SoftDevice) -> None:
        dev.gid_type = e.IBV_GID_TYPE_ROCE_V1
        super().attach(dev)

    def send(self, src: Station, pkt: Pkt) -> None:
        for p in pkt.expand():
            if p._frame is None:  # (its RoCEv1 frame, which Pkt.frame() then returns to taps, faults, the link)
                p._frame = rocev1_frame(p)
            super().send(src, p)
