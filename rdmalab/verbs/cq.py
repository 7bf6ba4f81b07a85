"""``pyverbs.cq``: completion queues, work completions and completion channels.

``WC`` is the engine's completion record (:mod:`rdmalab.verbs.engine.completion`).

``CQ.poll`` is where a program waits, so it is also where the engine moves: when the CQ is
empty, ``poll`` asks the scheduler of the device's carrier to make progress (on the simulated
fabric, virtual time passes) until a completion arrives or a bounded number of steps has run.
A busy-poll loop written for hardware therefore works unchanged, and no threads are needed.
"""

from __future__ import annotations

from collections import deque
from functools import partial
from typing import Any

from rdmalab.verbs import enums as e
from rdmalab.verbs.engine.completion import WC, WC_OPCODE_NAMES  # the engine's record, pyverbs' name
from rdmalab.verbs.pyverbs_error import EINVAL, PyverbsRDMAError

__all__ = ["CQ", "WC", "WC_OPCODE_NAMES", "CompChannel"]


class CompChannel:
    """``CompChannel(ctx)``: where armed CQs report completion events."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.events: deque[Any] = deque()

    def get_cq_event(self, cq: Any) -> None:
        """Wait (running the device's scheduler) for an event on ``cq``; pyverbs blocks here."""
        self.ctx.device.scheduler.progress(lambda: bool(self.events))
        if not self.events:
            raise PyverbsRDMAError("Failed to get CQ event: no event will ever come (the carrier is idle)", EINVAL)
        got = self.events.popleft()
        if got is not cq:
            raise PyverbsRDMAError("Failed to get CQ event: the event is for another CQ", EINVAL)

    def close(self) -> None:
        pass


class CQ:
    """``CQ(ctx, cqe, cq_context=None, channel=None, comp_vector=0)``."""

    def __init__(self, ctx: Any, cqe: int, cq_context: Any = None, channel: CompChannel | None = None,
                 comp_vector: int = 0) -> None:
        if cqe < 1 or cqe > 1 << 20:
            raise PyverbsRDMAError(f"Failed to create CQ with {cqe} entries", EINVAL)
        self.ctx = ctx
        self.cqe = cqe
        self.cq_context = cq_context
        self.channel = channel
        self.comp_vector = comp_vector
        self._q: deque[WC] = deque()
        self._nonempty = partial(bool, self._q)  # what poll waits for (a C call, no Python frame per step)
        # the scheduler that advances the device (its carrier's, fixed when the device is made), looked up once
        self._progress = ctx.device.scheduler.progress
        self._armed = 0  # 0 not armed, 1 any completion, 2 solicited only
        self.overflowed = False
        self.events_acked = 0

    # ------------------------------------------------------------------ the verbs
    def poll(self, num_entries: int = 1) -> tuple[int, list[WC]]:
        """Up to ``num_entries`` completions as ``(count, [WC, ...])``; runs the scheduler if empty."""
        q = self._q
        if not q:
            self._progress(self._nonempty)
        n = len(q)
        if n <= 1 or num_entries == 1:
            return (1, [q.popleft()]) if n and num_entries >= 1 else (0, [])
        out = [q.popleft() for _ in range(min(num_entries, n))]
        return len(out), out

    def req_notify(self, solicited_only: bool = False) -> None:
        self._armed = 2 if solicited_only else 1

    def ack_events(self, num_events: int) -> None:
        self.events_acked += num_events

    def close(self) -> None:
        self._q.clear()

    def __len__(self) -> int:
        return len(self._q)

    # ------------------------------------------------------------------ engine side
    def push(self, wc: WC, solicited: bool = False) -> bool:
        """Add a completion; False (and nothing added) if the CQ is full (an overflow)."""
        if len(self._q) >= self.cqe:
            self.overflowed = True
            return False
        self._q.append(wc)
        if self._armed and (self._armed == 1 or solicited or wc.status != e.IBV_WC_SUCCESS):
            self._armed = 0
            if self.channel is not None:
                self.channel.events.append(self)
        return True
