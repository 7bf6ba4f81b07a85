"""The engine's structured trace: what happened, where, and when in virtual time.

Also importable as :mod:`rdmalab.verbs.trace` (the name programs use).

Every event is a :class:`TraceEvent`; a :class:`Trace` is a list of them with a few filters.
The visualisations draw ladder diagrams from it: one vertical line per ``node`` (device name),
an arrow from each ``sent`` event to the matching ``received`` (or ``dropped``) event, which
share ``packet_id`` in ``detail``.

``kind`` is one of:

=================  ==========================================================================
``posted``         a work request was posted (``detail``: ``wr_id``, ``opcode`` name, ``queue``)
``sent``           a packet left the node (``psn``, ``opcode``; ``frame`` if it was built)
``received``       a packet arrived and passed the header and ICRC checks
``dropped``        the fabric lost it, the ICRC failed, or a receive check rejected it
                   (``detail["reason"]``)
``acked``          the completer accepted an ACK/NAK/response (``detail["syndrome"]``)
``retransmitted``  go-back-N restarted at ``psn`` (``detail["reason"]``: timeout, NAK, RNR)
``completed``      a work completion was generated (``detail``: ``wr_id``, ``status``...)
``state``          the QP changed state (``detail``: ``from``, ``to``)
=================  ==========================================================================

``opcode`` is the BTH opcode (an int) for packet events and ``None`` otherwise; ``psn`` is the
BTH PSN or ``None``.  ``frame`` holds the complete RoCEv2 frame when it was materialised (a tap,
a pcap writer or a fault needed the bytes) and ``None`` otherwise.

How much is kept is the owner's choice.  A :class:`Trace` keeps every event: what a
:class:`rdmalab.lab.pair.Pair`, the notebooks and a :class:`rdmalab.fabric.Fabric` built by a
program record, so that a ladder shows the whole run.  The default devices (``soft0`` and ``soft1``
of :func:`rdmalab.fabric.default_fabric`, what ``get_device_list()`` offers a pyverbs program that
chose no fabric) keep a :class:`RingTrace` of the latest :data:`RING_EVENTS` (100,000) events, so
that a program that loops does not grow without end (a 64-byte SEND is about eight events, so the
ring holds about the last 12,000 of them); ``trace.dropped`` counts the older events it let go,
and :meth:`Trace.dump` and ``repr`` say so.  A program that wants everything gives the fabric a
full trace (``default_fabric().trace = Trace()``); ``default_fabric().tracing = False`` records
nothing at all.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from rdmalab.wire.opcodes import opcode_name

KINDS = ("posted", "sent", "received", "dropped", "acked", "retransmitted", "completed", "state")
#: how many of the latest events the default devices' trace keeps (:class:`RingTrace`)
RING_EVENTS = 100_000


# Not frozen: a frozen dataclass sets each field through object.__setattr__, which made building the
# events (several a packet while tracing) the largest single cost of a traced run.  Nothing changes
# an event once it is recorded.
@dataclass(slots=True)
class TraceEvent:
    time_ns: int
    node: str
    qpn: int
    kind: str
    psn: int | None = None
    opcode: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    frame: bytes | None = None

    @property
    def opcode_name(self) -> str | None:
        if self.opcode is None:
            return None
        return opcode_name(self.opcode)

    def __str__(self) -> str:
        parts = [f"{self.time_ns / 1000:12.3f} us", f"{self.node:>8}", f"qp {self.qpn:#06x}", f"{self.kind:<13}"]
        if self.opcode is not None:
            parts.append(self.opcode_name or "")
        if self.psn is not None:
            parts.append(f"psn={self.psn}")
        if self.detail:
            parts.append(" ".join(f"{k}={v}" for k, v in self.detail.items() if k != "packet_id"))
        return "  ".join(parts)


class _Filters:
    """The filters both traces offer; each gives a :class:`Trace` (a list) of the events it keeps."""

    def __iter__(self) -> Iterator[TraceEvent]:  # (never called: the list's or the deque's comes first)
        raise NotImplementedError

    def of_kind(self, *kinds: str) -> Trace:
        return Trace(e for e in self if e.kind in kinds)

    def on(self, node: str | None = None, qpn: int | None = None) -> Trace:
        return Trace(e for e in self if (node is None or e.node == node) and (qpn is None or e.qpn == qpn))

    def packets(self) -> Trace:
        """The ``sent`` events, one per packet that left a node."""
        return self.of_kind("sent")

    def between(self, start_ns: int, end_ns: int) -> Trace:
        return Trace(e for e in self if start_ns <= e.time_ns <= end_ns)

    def nodes(self) -> list[str]:
        seen: dict[str, None] = {}
        for e in self:
            seen.setdefault(e.node, None)
        return list(seen)

    def frames(self) -> list[bytes]:
        return [e.frame for e in self if e.kind == "sent" and e.frame is not None]

    def dump(self, events: Iterable[TraceEvent] | None = None) -> str:
        """One line per event; a ring that let events go says how many first."""
        lines = [str(e) for e in (self if events is None else events)]
        dropped: int = getattr(self, "dropped", 0)
        if dropped and events is None:
            lines.insert(0, f"({dropped} earlier event{'s' if dropped != 1 else ''} let go: "
                            f"this trace keeps the latest {getattr(self, 'maxlen', '?')})")
        return "\n".join(lines)


class Trace(list[TraceEvent], _Filters):
    """A list of :class:`TraceEvent` in the order they happened, with filters; it keeps every event."""

    #: a full trace lets nothing go (see :class:`RingTrace`)
    dropped = 0
    maxlen: int | None = None


_deque_append = deque.append


class RingTrace(deque[TraceEvent], _Filters):
    """The latest ``maxlen`` events (default :data:`RING_EVENTS`), in the order they happened.

    Appending to a full ring lets the oldest event go and counts it in :attr:`dropped`, so
    ``len(ring) + ring.dropped`` is every event recorded since the ring was made or cleared
    (:meth:`clear` starts both again).  Reads as a :class:`Trace` does: iteration, ``len``,
    ``ring[-1]``, slices (a :class:`Trace` of the events in the slice) and the same filters.
    """

    def __init__(self, events: Iterable[TraceEvent] = (), maxlen: int = RING_EVENTS) -> None:
        if not isinstance(maxlen, int) or isinstance(maxlen, bool) or maxlen < 1:
            raise ValueError(f"RingTrace: maxlen is how many events to keep, a positive int, not {maxlen!r}")
        super().__init__((), maxlen)
        self._max = maxlen  # (an attribute read is cheaper than deque's maxlen descriptor, once an event)
        #: how many events the ring let go to keep the latest ``maxlen``
        self.dropped = 0
        self.extend(events)

    def append(self, event: TraceEvent) -> None:
        if len(self) == self._max:
            self.dropped += 1
        _deque_append(self, event)

    def extend(self, events: Iterable[TraceEvent]) -> None:
        for e in events:
            self.append(e)

    def clear(self) -> None:
        deque.clear(self)
        self.dropped = 0

    def __getitem__(self, index: int | slice) -> Any:  # type: ignore[override]
        if isinstance(index, slice):
            return Trace(list(self)[index])
        return deque.__getitem__(self, index)

    def __repr__(self) -> str:
        return f"<RingTrace: {len(self)} events kept (the latest, at most {self.maxlen}), {self.dropped} let go>"
