"""The switched fabric's topology: switch parameters, ports, hosts, switches, and what a switch does to a frame's bytes.

Hosts and switches (:class:`Node`) are joined by full-duplex links, each direction with a rate
(Gb/s = bits per ns; a whole number of Mbit/s) and a propagation delay (whole ns); each end of a
link is a :class:`Port`, holding the eight per-priority egress queues towards its peer and the
per-priority ingress counters from it (what the fabric's PFC counts).  Every time a port keeps
is an integer number of nanoseconds on the fabric's clock.  A :class:`Switch` has its shared buffer (``buffer`` MB of
:class:`SwitchConfig`, the names ``--set`` accepts); a :class:`Host` is a soft RoCEv2 device of the
verbs engine (:class:`rdmalab.verbs.engine.node.SoftDevice`, one per host, ``host.device``) whose
carrier is the fabric (:mod:`rdmalab.fabric.switched_carrier`).

:func:`mark_ce` is the congestion point's rewrite of a carried frame: the ECN bits of the real
IPv4 header become CE and its checksum is recomputed; the ICRC masks the TOS byte, so it stays
valid.  A :class:`PcapTap` on a port writes the frames crossing that link to a pcap that tshark
and ``rdmalab decode`` read.

What moves the frames (queues served, ECN marking, PFC, the clock) is
:class:`rdmalab.fabric.switched.SwitchedFabric`; it imports this module, so the fabric is named
here only through what the nodes use of it (:class:`FabricRef`).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import IO, Any, Protocol

from rdmalab.capture.pcapwriter import CaptureWriter
from rdmalab.fabric.switched_carrier import CE, SwitchedCarrier
from rdmalab.verbs.engine.node import SoftDevice
from rdmalab.wire.net import internet_checksum

__all__ = ["FabricRef", "Host", "Node", "PcapTap", "Port", "Switch", "SwitchConfig", "mark_ce"]


class FabricRef(Protocol):
    """What the nodes and flows use of the fabric they belong to (a :class:`~rdmalab.fabric.switched.SwitchedFabric`)."""

    seed: int
    payload: int
    carrier: SwitchedCarrier

    @property
    def now(self) -> int: ...


def mark_ce(frame: bytes, ip_offset: int = 14) -> bytes:
    """``frame`` with its IPv4 ECN set to CE and the header checksum recomputed, as a switch does."""
    b = bytearray(frame)
    b[ip_offset + 1] |= CE
    ihl = (b[ip_offset] & 0x0F) * 4
    b[ip_offset + 10] = b[ip_offset + 11] = 0
    b[ip_offset + 10:ip_offset + 12] = internet_checksum(bytes(b[ip_offset:ip_offset + ihl])).to_bytes(2, "big")
    return bytes(b)


@dataclass
class SwitchConfig:
    """Switch parameters (the names ``--set`` accepts).  Sizes in KB/MB as the simulators give them."""

    kmin: float = 40.0  # KB (ns3-rdma mix/config.txt KMIN 40)
    kmax: float = 1000.0  # KB (KMAX 1000)
    pmax: float = 1.0  # (PMAX 1.0)
    ecn: int = 1
    pfc: int = 1
    buffer: float = 12.0  # MB of shared buffer (a Broadcom Trident II has 12 MB)
    pfc_shift: int = 3  # dynamic XOFF threshold = free shared buffer >> pfc_shift (HPCC)
    pfc_xoff: float = 0.0  # KB, a fixed XOFF threshold per ingress queue instead (0: dynamic)
    pfc_prios: int = 0b00001000  # priorities PFC protects (bit n = priority n): 3
    loss: float = 0.0  # probability that a switch drops an arriving request (a lossy link; Lumina injects drops)


@dataclass(eq=False, slots=True)
class Port:
    """One end of a link: the egress queues towards ``peer`` and the ingress counters from it."""

    node: Node
    index: int
    rate: float  # Gb/s = bits per ns, as given (``mbps`` / 1000)
    delay: int  # ns
    mbps: int = 1  # the rate in Mbit/s: a frame of n bytes takes n * 8000 / mbps ns
    peer: Port | None = None
    queues: list[deque[list[Any]]] = field(default_factory=lambda: [deque() for _ in range(8)])
    qbytes: list[int] = field(default_factory=lambda: [0] * 8)
    active: int = 0  # bit n set: queue n has frames
    busy_until: int = 0  # ns: when the frame on the wire has left (to the whole ns before its end)
    tx_rem: int = 0  # ... and the rest of its serialisation, in units of 1/mbps ns, carried to the next frame
    free_ev: bool = False
    wake_at: int = -1
    paused_until: list[int] = field(default_factory=lambda: [0] * 8)
    in_bytes: list[int] = field(default_factory=lambda: [0] * 8)
    xoff: list[bool] = field(default_factory=lambda: [False] * 8)
    xoff_gen: list[int] = field(default_factory=lambda: [0] * 8)
    xoff_level: list[int] = field(default_factory=lambda: [0] * 8)
    pause_start: int = 0
    headroom: int = 0
    taps: list[PcapTap] = field(default_factory=list)
    tx_bytes: int = 0
    tx_pkts: int = 0
    marks: int = 0
    drops: int = 0
    pause_tx: int = 0
    resume_tx: int = 0
    pause_rx: int = 0
    paused_ns: int = 0
    qmax: int = 0
    ahead: list[int] = field(default_factory=lambda: [0] * 8)  # host ports: responses queued ahead of requests

    @property
    def name(self) -> str:
        return f"{self.node.name}->{self.peer.node.name if self.peer else '?'}"

    def __repr__(self) -> str:
        return f"Port({self.name})"


class Node:
    def __init__(self, fabric: FabricRef, name: str, nid: int) -> None:
        self.fabric = fabric
        self.name = name
        self.id = nid
        self.ports: list[Port] = []
        self.is_switch = False


class Host(Node):
    """A RoCEv2 NIC with one port: a soft device of the engine (``device``) and its flows' counters."""

    def __init__(self, fabric: FabricRef, name: str, nid: int, ip: int, mac: int) -> None:
        super().__init__(fabric, name, nid)
        self.ip = ip
        self.mac = mac
        self.device = SoftDevice(name, ip, mac, fabric.carrier, seed=fabric.seed * 1000 + nid)
        self.cnp_sent = 0
        self.cnp_rcvd = 0
        self.ce_rcvd = 0
        self.touched = False  # received a packet in the current instant (its ACKs are flushed after it)
        self.routes: dict[int, dict[int, Port]] = {}  # egress port per node towards another host, by host id

    @property
    def pacer(self) -> Any:
        """The notification point's CNP pacer (:func:`rdmalab.verbs.engine.cnp.enable_np`), if any."""
        return getattr(self.device, "cnp_pacer", None)


class Switch(Node):
    def __init__(self, fabric: FabricRef, name: str, nid: int, cfg: SwitchConfig) -> None:
        super().__init__(fabric, name, nid)
        self.is_switch = True
        self.cfg = cfg
        self.buffer = int(cfg.buffer * 1e6)
        self.used = 0
        self.headroom_total = 0
        self.xoff: list[tuple[Port, int]] = []  # ingress queues (port, priority) that have paused their upstream


class PcapTap:
    """Writes every frame crossing one link (both directions) to a pcap (ns timestamps) through
    :class:`~rdmalab.capture.pcapwriter.CaptureWriter`."""

    def __init__(self, dest: str | IO[bytes]) -> None:
        self._writer = CaptureWriter(dest, nano=True)
        self.count = 0

    def write(self, t_ns: int, frame: bytes) -> None:
        self._writer.write(frame, t_ns)
        self.count += 1

    def close(self) -> None:
        self._writer.close()
