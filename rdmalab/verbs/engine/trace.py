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
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from rdmalab.wire.opcodes import opcode_name

KINDS = ("posted", "sent", "received", "dropped", "acked", "retransmitted", "completed", "state")


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


class Trace(list[TraceEvent]):
    """A list of :class:`TraceEvent` in the order they happened, with filters."""

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
        return "\n".join(str(e) for e in (self if events is None else events))
