"""The switched fabric as the engine's carrier: soft devices send and receive through its queues.

:class:`SwitchedCarrier` implements the carrier seam (:mod:`rdmalab.verbs.engine.carrier`) and
its scheduler on a :class:`~rdmalab.fabric.switched.SwitchedFabric`.  Every host of the fabric
is a :class:`~rdmalab.verbs.engine.node.SoftDevice` on this carrier: ``send`` puts the engine's
packet on the host's port, switches queue, mark, pause and drop it like any other frame, and the
receiving host hands it to its device.  The fabric's flows are RC QPs of the engine, and a
pyverbs-style program (``Context(name=..., fabric=fab)``, or the harness's ``Pair``) runs RDMA
over a congested switch the same way, with the engine's notification point
(:func:`rdmalab.verbs.engine.cnp.enable_np`) answering CE-marked requests with CNPs and its
reaction point (:func:`rdmalab.verbs.engine.dcqcn.attach`) pacing the QP.  With a tap on a link
(or ``frames=True`` on the fabric) packets cross as real frames: the switch rewrites the ECN
bits of the frame and the receiver checks its ICRC.

A packet in the fabric is a list (fast to build and index); its fields, by index:
``KIND`` the BTH opcode, ``FLOW`` the fabric flow it belongs to (or None), ``SIZE`` bytes on
the wire, ``PRIO`` the 802.1p priority, ``ECN`` the IP ECN bits, ``PSN``, ``INPORT`` the port
it arrives on, ``FRAME`` its bytes (or None), ``PKT`` the engine's packet, ``ROUTE`` the egress
port per node.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rdmalab.verbs.engine.carrier import Scheduler, Station, TimerHandle
from rdmalab.verbs.engine.cnp import CE, ECT0
from rdmalab.verbs.engine.node import SoftDevice
from rdmalab.verbs.engine.packet import Pkt
from rdmalab.verbs.trace import TraceEvent

__all__ = ["CE", "ECT0", "SwitchedCarrier"]

KIND, FLOW, SIZE, PRIO, ECN, PSN, INPORT, FRAME, PKT, ROUTE = range(10)


class SwitchedCarrier:
    """The switched fabric as a carrier (and scheduler) for its hosts' soft RoCEv2 devices.

    A fabric makes its own (``fabric.carrier``); ``SwitchedCarrier(fabric)`` returns a view of
    the same fabric, and ``mtu`` must then be the fabric's ``payload``.
    """

    burst_ok = False  # switches see single packets
    tracing = False
    #: ``call_later(delay_ns, fn, arg=None) -> TimerHandle``: the fabric's loop's (``VirtualLoop.call_later``)
    call_later: Callable[..., TimerHandle]

    def __init__(self, fabric: Any, *, mtu: int | None = None) -> None:
        # fabric: a rdmalab.fabric.switched.SwitchedFabric (which imports this module, so not named here)
        if mtu is not None and mtu != fabric.payload:
            raise ValueError(f"the fabric's QPs use a path MTU of {fabric.payload} bytes (its payload), not {mtu}")
        self.fabric = fabric
        self._loop = fabric.loop  # (its clock: the engine reads it on every packet)
        self.call_later = fabric.loop.call_later  # the carrier's timers are the loop's (one call less)

    # ------------------------------------------------------------------ building
    @property
    def devices(self) -> dict[str, SoftDevice]:
        devices: dict[str, SoftDevice] = self.fabric.devices
        return devices

    def add_device(self, name: str | None = None, *, switch: Any = None, rate_gbps: float = 40.0,
                   delay_us: float = 1.0) -> SoftDevice:
        """A soft device on a new host linked to ``switch`` (default: the fabric's first switch)."""
        fab = self.fabric
        name = name or f"soft{len(fab.devices)}"
        sw = switch if switch is not None else (fab.switches[0] if fab.switches else None)
        if sw is None:
            raise ValueError("add a switch to the fabric first")
        host = fab.add_host(name)
        fab.link(host, sw, rate_gbps, delay_us)
        dev: SoftDevice = host.device
        return dev

    # ------------------------------------------------------------------ the Carrier protocol
    @property
    def mtu(self) -> int:
        return int(self.fabric.payload)

    @property
    def now_ns(self) -> int:
        now: int = self._loop.now_ns  # (integer ns, as on every carrier)
        return now

    @property
    def scheduler(self) -> Scheduler:
        return self

    def send(self, src: Station, pkt: Pkt) -> None:
        fab = self.fabric
        host = fab.by_name[src.name]
        if pkt.count == 1:  # always, as burst_ok is False; a burst would be split into its packets
            fab.send(host, pkt)
            return
        for p in pkt.expand():
            fab.send(host, p)

    def resolve_mac(self, gid: int) -> int | None:
        return next((d.mac for d in self.fabric.devices.values() if gid in d.gids), None)

    def record(self, event: TraceEvent) -> None:  # tracing is off: the fabric keeps its own series
        return None

    # ------------------------------------------------------------------ the Scheduler protocol
    def step(self) -> bool:
        return bool(self.fabric.loop.step())

    def progress(self, done: Callable[[], bool], max_steps: int = 200_000) -> bool:
        for _ in range(max_steps):
            if done() or not self.step():
                break
        return done()

    def run(self, until_ns: int | None = None, max_events: int = 10_000_000) -> int:
        return int(self.fabric.loop.run(until_ns, max_events))
