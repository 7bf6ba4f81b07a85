"""The engine's structured trace, under its pyverbs-side name.

The trace belongs to the engine (:mod:`rdmalab.verbs.engine.trace`, where :class:`TraceEvent`
and :class:`Trace` are defined and documented); this module keeps the name programs and
notebooks import it by.
"""

from __future__ import annotations

from rdmalab.verbs.engine.trace import KINDS, RING_EVENTS, RingTrace, Trace, TraceEvent

__all__ = ["KINDS", "RING_EVENTS", "RingTrace", "Trace", "TraceEvent"]
