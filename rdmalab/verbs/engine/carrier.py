"""The carrier seam: what the soft engine needs from whatever carries its packets, and nothing more.

The engine (:mod:`rdmalab.verbs.engine`) is sans-I/O.  A *carrier* moves its packets between
devices and gives it a clock; a *scheduler* (one per carrier) decides when the engine runs.
The engine imports no carrier; carriers import the engine.  Three carriers plug in here:

* :class:`rdmalab.fabric.sim.Fabric`, the in-process simulated fabric (virtual clock, seeded
  faults, taps); it is its own scheduler;
* a UDP carrier next to the kernel's rxe (``rdmalab.fabric.udp``): datagrams on a real socket
  to port 4791, wall clock, an event loop that waits on the socket and the timers;
* a switched fabric (``rdmalab.fabric.switched``): queues, ECN marking, CNPs and PFC, which
  rewrites the ICRC-masked ECN bits of a :class:`Datagram` (:meth:`Datagram.with_ecn`).

Names (stable; other modules build on them):

``Datagram``       (frozen) one RoCEv2 packet as a UDP payload, BTH..ICRC, plus the IP/UDP
                   fields the carrier must put on the wire (:mod:`~rdmalab.verbs.engine.datagram`)
``datagram_from_frame(frame)``  a whole Ethernet frame decoded down to a ``Datagram``, ICRC checked
``Station``        what a carrier may call on an engine device (:class:`~rdmalab.verbs.engine.node.SoftDevice`):
                   ``deliver(dgram)`` (inbound bytes: the one entry point for a carrier that has bytes),
                   ``receive_frame(frame)`` (a whole Ethernet frame), ``receive(pkt)`` (the fast
                   path for a carrier that moves packet objects), ``receive_segment(...)`` (the
                   fast path for a carrier that has bytes: one in-sequence WRITE/SEND packet's
                   fields and payload, no ``Pkt``; False sends it to ``receive``), ``receive_ack(fields)``
                   (a plain ACK from an ACK lane, as fields), and ``flush()`` after each step
``Carrier``        outbound ``send(station, pkt)`` (and, optionally, ``send_ack(station, fields)``: an
                   ACK lane, see ``SoftDevice.ack_lane``); ``mtu``; ``burst_ok``; the clock ``now_ns`` and
                   timers ``call_later(delay_ns, fn, arg) -> TimerHandle``; ``resolve_mac(gid)``;
                   the trace sink ``tracing``/``record(event)``; and its ``scheduler``
``TimerHandle``    what ``call_later`` returns: ``cancel()``; ``Timer`` is one for carriers that keep
                   a heap of ``(due, seq, callback, arg)`` (the simulated and the UDP carrier)
``Scheduler``      advances the engine: ``step()``, ``progress(done, max_steps)``,
                   ``run(until_ns)``.  ``CQ.poll`` and ``CompChannel.get_cq_event`` advance time
                   only through the scheduler of their device's carrier.

Outbound packets keep the engine's fast path: ``send`` receives a
:class:`~rdmalab.verbs.engine.packet.Pkt` object, which a carrier may move as it is (the
simulated fabric does, without encoding a byte, when nothing observes the traffic).  A
carrier that needs bytes asks the packet: ``pkt.datagram()`` (UDP payload and addressing) or
``pkt.frame()`` (the Ethernet frame).  A ``Pkt`` with ``count > 1`` is a burst of consecutive
packets of one message; the engine builds bursts only while the carrier's ``burst_ok`` is true,
and ``pkt.expand()`` splits one into single packets.

Rules for carriers:

1. Put on the wire exactly the fields a ``Datagram`` gives (the ICRC covers them; IBA vol 1
   annex A17.3.3); only ``tos`` (DSCP/ECN), ``ttl`` and the IPv6 flow label may change in flight.
2. Deliver inbound packets with ``station.deliver(dgram)`` (or ``receive_frame``/``receive``);
   the device checks the ICRC, the destination QP and the address, as ``rxe_rcv`` does.
3. Run timers and deliveries only from the scheduler, one instant at a time, and call
   ``station.flush()`` on every device after each instant (the responder coalesces ACKs
   within one instant, as rxe does within one tasklet run).  A carrier may offer one set,
   ``held_acks``, that all its devices share for the QPs holding an ACK back: while it is empty,
   no device has one to flush.
4. Never call back into the engine from inside ``send`` (a delivery is always later).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from rdmalab.verbs.engine.datagram import Datagram, datagram_from_frame
from rdmalab.verbs.engine.packet import Pkt
from rdmalab.verbs.engine.trace import TraceEvent

__all__ = ["Carrier", "Datagram", "Scheduler", "Station", "Timer", "TimerHandle", "WallClockWait", "datagram_from_frame"]


@runtime_checkable
class TimerHandle(Protocol):
    """A pending ``call_later``; ``cancel()`` makes it never run (idempotent)."""

    def cancel(self) -> None: ...


class Timer:
    """A :class:`TimerHandle` for carriers that keep ``(due, seq, callback, arg)`` in a heap: call it
    (with any argument) when it falls due; it runs ``fn(arg)`` unless cancelled."""

    __slots__ = ("fn", "arg", "cancelled")

    def __init__(self, fn: Callable[[Any], None], arg: Any) -> None:
        self.fn = fn
        self.arg = arg
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True

    def __call__(self, _: Any) -> None:
        if not self.cancelled:
            self.fn(self.arg)


class WallClockWait:
    """How a carrier on the wall clock waits (the UDP carrier, the kernel-TCP carrier): ``step(timeout)``
    runs what is ready within ``timeout`` seconds; ``poll_wait`` is how long :meth:`progress` waits by
    default (what ``CQ.poll`` gives the network before it answers "nothing yet")."""

    poll_wait: float

    def step(self, timeout: float = 0.0) -> bool:
        raise NotImplementedError

    def progress(self, done: Callable[[], bool], max_steps: int = 20_000, timeout: float | None = None) -> bool:
        """Run the loop until ``done()`` or ``timeout`` seconds (default ``poll_wait``) pass."""
        end = time.monotonic() + (self.poll_wait if timeout is None else timeout)
        while not done():
            left = end - time.monotonic()
            if left <= 0:
                self.step()
                return done()
            self.step(min(left, 0.05))
        return True

    def run_until(self, done: Callable[[], bool], timeout: float) -> bool:
        """:meth:`progress` with an explicit deadline (for programs that wait for a peer)."""
        return self.progress(done, timeout=timeout)


@runtime_checkable
class Station(Protocol):
    """An engine device as a carrier sees it (implemented by ``SoftDevice``)."""

    name: str
    mac: int
    gids: list[int]

    def deliver(self, dgram: Datagram, packet_id: int | None = None) -> None:
        """A datagram arrived: check its ICRC, decode it and hand it to the QP (or drop it)."""

    def receive_frame(self, frame: bytes, packet_id: int | None = None) -> None:
        """A whole Ethernet frame arrived: decoded down to the RoCEv2 packet, ICRC checked."""

    def receive(self, pkt: Pkt) -> None:
        """A packet object arrived (the fast path; the carrier vouches for its integrity)."""

    def receive_segment(self, destqp: int, code: int, psn: int, ackreq: int, src_gid: int, dst_gid: int,
                        data: Any, reth: tuple[int, int, int] | None = None) -> bool:
        """One in-sequence RC/UC WRITE or SEND packet as fields and payload (no ``Pkt``), ICRC
        checked by the carrier; False, with nothing changed, if it needs the full path (``receive``)."""

    def receive_ack(self, fields: tuple[int, ...]) -> None:
        """A plain ACK (AETH syndrome ACK) as the fields a carrier's ACK lane carried (``send_ack``;
        a tenth field, when the carrier traced the sending, is the packet id of its "sent" event):
        taken by the completer's fast path, or built into a ``Pkt`` and received as any packet."""

    def flush(self) -> None:
        """End of one instant: send the ACKs held back for coalescing."""


@runtime_checkable
class Scheduler(Protocol):
    """The one object that advances the engine on a carrier (its event loop)."""

    def step(self) -> bool:
        """Run everything due at the next instant (waiting for it on a wall clock). False if idle."""

    def progress(self, done: Callable[[], bool], max_steps: int = 20_000) -> bool:
        """Step until ``done()`` is true, nothing is left to happen, or ``max_steps`` steps ran.
        Returns ``done()``.  ``CQ.poll`` calls this when its queue is empty."""

    def run(self, until_ns: int | None = None, max_events: int = 10_000_000) -> int:
        """Step until idle (or until the clock would pass ``until_ns``); returns the steps run."""


@runtime_checkable
class Carrier(Protocol):
    """What carries an engine device's packets, and keeps its time."""

    @property
    def mtu(self) -> int:
        """The IB MTU the port offers (256..4096 bytes of payload per packet)."""

    @property
    def burst_ok(self) -> bool:
        """Whether ``send`` may be given bursts (``Pkt.count > 1``): only when nothing observes single packets."""

    @property
    def now_ns(self) -> int:
        """The carrier's clock in nanoseconds (virtual on the simulated fabric, monotonic on a wire)."""

    @property
    def tracing(self) -> bool:
        """Whether the engine should produce trace events (``record`` them)."""

    @property
    def scheduler(self) -> Scheduler:
        """The event loop that advances this carrier and the devices on it."""

    def send(self, src: Station, pkt: Pkt) -> None:
        """Put ``pkt`` (or a burst) on the wire from ``src``; it is delivered later, if at all."""

    def call_later(self, delay_ns: int, fn: Callable[[Any], None], arg: Any = None) -> TimerHandle:
        """Run ``fn(arg)`` from the scheduler ``delay_ns`` nanoseconds from now."""

    def resolve_mac(self, gid: int) -> int | None:
        """The next hop's MAC for ``gid`` (what ARP/ND answers), ``None`` if unreachable."""

    def record(self, event: TraceEvent) -> None:
        """Keep one trace event (only called while ``tracing``)."""
