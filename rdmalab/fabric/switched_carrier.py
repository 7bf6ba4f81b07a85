"""Soft verbs devices on the switched fabric: the engine's own packets through queues, ECN and PFC.

:class:`SwitchedCarrier` implements the carrier seam (:mod:`rdmalab.verbs.engine.carrier`) on a
:class:`~rdmalab.fabric.switched.SwitchedFabric`: each :class:`~rdmalab.verbs.engine.node.SoftDevice`
is a host of the fabric, ``send`` puts the engine's packet on the host's port, switches queue,
mark and pause it like any other frame, and the receiving host hands it to its device.  So a
pyverbs-style program (``Pair``, ``Context(fabric=carrier)``) runs RDMA over a congested switch,
with the engine's notification point (:func:`rdmalab.verbs.engine.cnp.enable_np`) answering
CE-marked requests with CNPs and its reaction point (:func:`rdmalab.verbs.engine.dcqcn.attach`)
pacing the QP.  With a tap on a link (or ``frames=True`` on the fabric) packets cross as real
frames: the switch rewrites the ECN bits of the frame and the receiver checks its ICRC.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from functools import partial
from typing import Any

from rdmalab.fabric.switched import ENGINE, Host, Node, SwitchedFabric
from rdmalab.verbs.engine.carrier import Scheduler, Station, TimerHandle
from rdmalab.verbs.engine.cnp import CE
from rdmalab.verbs.engine.node import SoftDevice
from rdmalab.verbs.engine.packet import Pkt
from rdmalab.verbs.trace import TraceEvent
from rdmalab.wire.opcodes import CNP_OPCODE


class _Route:
    """Egress port per switch for packets between two hosts (what a flow's fwd/rev are)."""

    __slots__ = ("fwd", "rev")

    def __init__(self, hops: dict[int, Any]) -> None:
        self.fwd = self.rev = hops


class _Timer:
    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class SwitchedCarrier:
    """The switched fabric as a carrier (and scheduler) for soft RoCEv2 devices."""

    burst_ok = False  # switches see single packets
    tracing = False

    def __init__(self, fabric: SwitchedFabric, *, mtu: int = 1024) -> None:
        self.fabric = fabric
        self._mtu = mtu
        self.devices: dict[str, SoftDevice] = {}
        self._hosts: dict[str, Host] = {}
        self._routes: dict[tuple[int, int], _Route] = {}

    # ------------------------------------------------------------------ building
    def add_device(self, name: str | None = None, *, switch: Node | str | None = None, rate_gbps: float = 40.0,
                   delay_us: float = 1.0) -> SoftDevice:
        """A soft device on a new host linked to ``switch`` (default: the fabric's first switch)."""
        fab = self.fabric
        name = name or f"soft{len(self.devices)}"
        sw = switch if switch is not None else (fab.switches[0] if fab.switches else None)
        if sw is None:
            raise ValueError("add a switch to the fabric first")
        host = fab.add_host(name)
        fab.link(host, sw, rate_gbps, delay_us)
        dev = SoftDevice(name, host.ip, host.mac, self, seed=len(self.devices))
        self.devices[name] = dev
        self._hosts[name] = host
        host.station = dev  # type: ignore[attr-defined]
        host.engine_deliver = partial(deliver, host)
        return dev

    # ------------------------------------------------------------------ the Carrier protocol
    @property
    def mtu(self) -> int:
        return self._mtu

    @property
    def now_ns(self) -> int:
        return int(self.fabric.now)

    @property
    def scheduler(self) -> Scheduler:
        return self

    def send(self, src: Station, pkt: Pkt) -> None:
        fab = self.fabric
        host = self._hosts[src.name]
        dst = next((self._hosts[n] for n, d in self.devices.items() if pkt.dst_gid in d.gids), None)
        if dst is None:
            return  # nobody has that address: the packet goes nowhere, as on a wire
        route = self._routes.get((host.id, dst.id))
        if route is None:
            route = _Route({p.node.id: p for p in fab._path(host, dst, None, host.id * 7919 + dst.id)})
            self._routes[(host.id, dst.id)] = route
        for p in pkt.expand():
            prio = fab.cnp_prio if p.opcode == CNP_OPCODE else fab.data_prio
            frame = p.frame() if fab.frames else None
            fab._enqueue(host.ports[0], [ENGINE, route, p.wire_size, prio, p.ecn, p.psn, None, frame, p])

    def call_later(self, delay_ns: int, fn: Callable[[Any], None], arg: Any = None) -> TimerHandle:
        h = _Timer()

        def fire(a: Any) -> None:
            if not h.cancelled:
                fn(a)

        self.fabric.schedule(self.fabric.now + delay_ns, fire, arg)
        return h

    def resolve_mac(self, gid: int) -> int | None:
        return next((d.mac for d in self.devices.values() if gid in d.gids), None)

    def record(self, event: TraceEvent) -> None:  # tracing is off: the fabric keeps its own series
        return None

    # ------------------------------------------------------------------ the Scheduler protocol
    def step(self) -> bool:
        q = self.fabric._q
        if not q:
            return False

        t = q[0][0]
        self.fabric.now = t
        while q and q[0][0] == t:
            ev = heapq.heappop(q)
            ev[2](ev[3])
            self.fabric.events += 1
        for d in self.devices.values():
            d.flush()
        return True

    def progress(self, done: Callable[[], bool], max_steps: int = 200_000) -> bool:
        for _ in range(max_steps):
            if done() or not self.step():
                break
        return done()

    def run(self, until_ns: int | None = None, max_events: int = 10_000_000) -> int:
        n = 0
        q = self.fabric._q
        while q and n < max_events and (until_ns is None or q[0][0] <= until_ns):
            self.step()
            n += 1
        return n


def deliver(host: Host, pkt: list[Any]) -> None:
    """An engine packet reached ``host``: hand it to the device (as a frame when it crossed as one)."""
    station = host.station  # type: ignore[attr-defined]
    eng: Pkt = pkt[8]
    if pkt[7] is not None:
        station.receive_frame(pkt[7], eng.id)  # the frame the switches marked: its ICRC is checked
        return
    if pkt[4] == CE:
        eng.ecn = CE
    station.receive(eng)
