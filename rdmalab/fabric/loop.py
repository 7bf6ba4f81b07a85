"""The event loops of the fabrics: one on a virtual clock, one on the wall clock, one interface.

Every carrier of :mod:`rdmalab.fabric` keeps its time and its timers in one of these two, and is
the scheduler (:class:`rdmalab.verbs.engine.carrier.Scheduler`) the engine drives it through:

* :class:`VirtualLoop`, the simulators' (:class:`rdmalab.fabric.sim.Fabric`,
  :class:`rdmalab.fabric.switched.SwitchedFabric`): a clock that moves only when events run,
  and one heap of ``(time_ns, seq, fn, arg)``.  Events due at the same time run in the order
  they were scheduled (``seq`` breaks the tie), so the same program is the same run, event for event.
* :class:`WallClockLoop`, the carriers on real sockets (:class:`rdmalab.fabric.udp.UdpFabric`,
  :class:`rdmalab.fabric.tcpkernel.KernelTcp`): ``time.monotonic_ns`` (or any clock given to
  it), a heap of timers, and a wait for I/O bounded by the next timer.

What both offer (:class:`Loop`): ``now_ns``; ``call_at(at_ns, fn, arg)`` and
``call_later(delay_ns, fn, arg)`` (the latter returns a :class:`~rdmalab.verbs.engine.carrier.Timer`
whose ``cancel()`` makes it never run); ``pending`` (events or timers waiting); ``step()``;
``run(until_ns)``.  Times are integer nanoseconds, on every carrier and simulator: the switched
fabric too, whose ports keep the fraction of a nanosecond a frame's serialisation leaves over
(a 1082-byte frame at 40 Gb/s takes 216.4 ns) as an integer remainder carried to the next frame,
so that its clock stays whole and its rates exact (:meth:`rdmalab.fabric.switched.SwitchedFabric.link`).

The simulated fabric and the socket carriers *are* their loops (subclasses), so that the clock
is a plain attribute of the carrier (the engine reads ``carrier.now_ns`` several times a message);
the switched fabric *has* one (``fabric.loop``), since its own ``run`` takes microseconds.  On a
simulator's per-packet path, ``loop.push((at_ns, next(loop.tickets), fn, arg))`` is ``call_at`` without
a Python call (the cost of an event is most of what a simulator spends).  The end of an instant is where devices send the ACKs they held back for
coalescing (carrier rule 3): :meth:`VirtualLoop.on_instant_end` names the container to look at
(``pending``: nothing to do while it is empty, checked without a call) and what to call.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator, Sized
from functools import partial
from heapq import heappop, heappush
from typing import Any, Protocol, runtime_checkable

from rdmalab.verbs.engine.carrier import Timer, WallClockWait

__all__ = ["Loop", "VirtualLoop", "WallClockLoop"]

Progress = Callable[[float], None]
#: how many events a virtual loop runs between two calls of a ``progress`` callback
PROGRESS_EVERY = 1 << 15
#: later than any event (the bound of a run without one)
_FOREVER = 1 << 62


@runtime_checkable
class Loop(Protocol):
    """What every event loop of the fabrics offers (both implementations below)."""

    @property
    def now_ns(self) -> int:
        """The loop's clock in nanoseconds."""

    @property
    def pending(self) -> int:
        """Events (virtual) or timers (wall clock) waiting."""

    def call_at(self, at_ns: int, fn: Callable[[Any], None], arg: Any = None) -> None:
        """Run ``fn(arg)`` when the clock reads ``at_ns`` (not cancellable)."""

    def call_later(self, delay_ns: int, fn: Callable[[Any], None], arg: Any = None) -> Timer:
        """Run ``fn(arg)`` ``delay_ns`` from now; ``cancel()`` the result to forget it."""

    def step(self) -> bool:
        """Run what is due at the next instant; False if nothing was there."""

    def run(self, until_ns: int | None = None, max_events: int = 10_000_000) -> int:
        """Step until idle or until the clock reaches ``until_ns``; returns the steps run."""


def _no_flush() -> None:
    return None



def _whole_ns(delay: Any, what: str = "call_later: delay_ns") -> int:
    """A time given as a number, in whole nanoseconds (a fraction is dropped); anything else is refused."""
    if isinstance(delay, bool) or not isinstance(delay, int | float):
        raise TypeError(f"{what} is a number of nanoseconds, not {delay!r}")
    return int(delay)


class VirtualLoop:
    """A discrete-event loop on a virtual clock (``now_ns``, integer nanoseconds), which moves only
    when events run.

    ``events`` counts the events run so far.  ``step()`` runs every event due at the next
    instant (events scheduled for that same instant while it runs included), then the
    end-of-instant call (:meth:`on_instant_end`).  Times are ints: ``start`` must be one (a float
    is refused), a ``call_later`` delay or a ``run``/``advance_to``/``advance`` bound given as a
    float loses its fraction (for a bound, "at or before 2.5" is "at or before 2"), and ``call_at``
    takes what it is given unchecked (the per-packet path: its callers schedule ints).
    """

    def __init__(self, start: int = 0) -> None:
        if start.__class__ is not int:
            raise TypeError(f"VirtualLoop: the clock starts at a whole number of nanoseconds, not {start!r}")
        #: the clock (a plain attribute, read on every packet; set only by the loop)
        self.now_ns: int = start
        #: events run so far
        self.events = 0
        self._heap: list[tuple[int, int, Callable[[Any], None], Any]] = []
        self._seq = itertools.count(1)  # the tie-breaker: events of one time run in the order scheduled
        #: the per-packet fast path of :meth:`call_at`, two C calls and no Python frame:
        #: ``loop.push((at_ns, next(loop.tickets), fn, arg))`` is ``loop.call_at(at_ns, fn, arg)``
        self.push: Callable[[tuple[int, int, Callable[[Any], None], Any]], None] = partial(heappush, self._heap)
        self.tickets: Iterator[int] = self._seq
        self._dirty: Sized = ()
        self._end_instant: Callable[[], None] = _no_flush

    def on_instant_end(self, dirty: Sized, flush: Callable[[], None]) -> None:
        """After each instant in which ``dirty`` (a set or list the owner fills) is not empty, call
        ``flush()`` (which should empty it)."""
        self._dirty = dirty
        self._end_instant = flush

    @property
    def pending(self) -> int:
        """Events waiting."""
        return len(self._heap)

    @property
    def next_ns(self) -> int | None:
        """When the next event is due (None if there is none)."""
        return self._heap[0][0] if self._heap else None

    def call_at(self, at_ns: int, fn: Callable[[Any], None], arg: Any = None,
                _push: Callable[[list[Any], Any], None] = heappush) -> None:
        """Run ``fn(arg)`` at ``at_ns`` (no earlier than ``now_ns``: not checked, this is the
        simulators' per-packet path); after every event already scheduled for that time."""
        _push(self._heap, (at_ns, next(self._seq), fn, arg))

    def call_later(self, delay_ns: int, fn: Callable[[Any], None], arg: Any = None) -> Timer:
        """A timer: ``fn(arg)`` ``delay_ns`` from now (a negative delay counts as 0); ``cancel()``
        the result and it never runs (it still counts as an event when its time comes)."""
        if delay_ns.__class__ is not int:
            delay_ns = _whole_ns(delay_ns)
        t = Timer(fn, arg)
        self.push((self.now_ns + (delay_ns if delay_ns > 0 else 0), next(self._seq), t, None))
        return t

    def step(self) -> bool:
        """Run every event due at the next event time (moving the clock there), then end the
        instant.  False if nothing is left."""
        heap = self._heap
        if not heap:
            return False
        t = heap[0][0]
        self.now_ns = t
        n = 0
        while heap and heap[0][0] == t:
            _, _, fn, arg = heappop(heap)
            fn(arg)
            n += 1
        self.events += n
        if self._dirty:
            self._end_instant()
        return True

    def run(self, until_ns: int | None = None, max_events: int = 10_000_000,
            progress: Progress | None = None) -> int:
        """Step until no event is left, or the next is after ``until_ns``, or ``max_events``
        steps (instants) ran; returns the steps run.  The clock ends at the last instant run;
        when nothing at all is left and ``until_ns`` is given, at ``until_ns`` (so a timer set
        next counts from there).  ``progress(fraction)``, if given with ``until_ns``, is called
        every :data:`PROGRESS_EVERY` events with how far the clock has come from where it was
        to ``until_ns`` (0..1), and with 1.0 at the end."""
        if until_ns is not None and until_ns.__class__ is not int:
            until_ns = _whole_ns(until_ns, "run: until_ns")
        steps = self._run(until_ns, max_events, progress)
        if until_ns is not None and self.now_ns < until_ns and not self._heap:
            self.now_ns = until_ns
        if progress is not None and until_ns is not None:
            progress(1.0)
        return steps

    def advance_to(self, until_ns: int, progress: Progress | None = None) -> int:
        """Run every event due at or before ``until_ns``, then set the clock to ``until_ns`` (if it
        is not past it already); returns the steps run.  ``progress`` as for :meth:`run`."""
        if until_ns.__class__ is not int:
            until_ns = _whole_ns(until_ns, "advance_to: until_ns")
        steps = self._run(until_ns, 1 << 62, progress)
        if self.now_ns < until_ns:
            self.now_ns = until_ns
        if progress is not None:
            progress(1.0)
        return steps

    def advance(self, ns: int) -> None:
        """Let ``ns`` nanoseconds of virtual time pass, running what falls due."""
        self.advance_to(self.now_ns + _whole_ns(ns, "advance: ns"))

    def _run(self, until_ns: int | None, max_steps: int, progress: Progress | None) -> int:
        # One flat loop over the events (the simulators' hottest code): an instant ends when the next
        # event is at another time (or none is left); then, if ``dirty``, the end-of-instant call runs
        # (it may schedule events, so the next one is looked at again, and anything it schedules for
        # the same time is a new instant).  The same events, in the same order, as step() after step().
        heap = self._heap
        pop = heappop
        dirty = self._dirty
        end = self._end_instant
        start = self.now_ns
        until = _FOREVER if until_ns is None else until_ns  # (ints: the clock's comparisons stay int with int)
        span = (until - start) or 1
        report = PROGRESS_EVERY if progress is not None and until_ns is not None else 1 << 62
        n = 0
        steps = 0
        now = start  # the time of the instant running, while ``running``
        running = False  # (False: none yet, or it has ended)
        while True:
            if not heap:
                if running and dirty:
                    end()  # (which may schedule more)
                    running = False
                    continue
                break
            ev = heap[0]
            t = ev[0]
            if t != now or not running:
                if running and dirty:
                    end()  # the instant is over (what it schedules may come first: look again)
                    running = False
                    continue
                if t > until or steps >= max_steps:
                    break
                self.now_ns = now = t
                running = True
                steps += 1
                if n >= report:
                    report += PROGRESS_EVERY
                    assert progress is not None
                    progress((t - start) / span)
            pop(heap)
            ev[2](ev[3])
            n += 1
        self.events += n
        return steps

    def progress(self, done: Callable[[], bool], max_steps: int = 20_000) -> bool:
        """Step until ``done()`` or idle, at most ``max_steps`` instants (what ``CQ.poll`` calls)."""
        for _ in range(max_steps):
            if done():
                return True
            if not self.step():
                return done()
        return done()


class WallClockLoop(WallClockWait):
    """An event loop on a wall clock: timers in a heap, and a wait for I/O bounded by the next one.

    ``clock`` returns the time in ns (default ``time.monotonic_ns``).  A carrier on sockets
    overrides :meth:`poll_io` (wait up to ``timeout`` seconds for its sockets, handle what is
    ready, return how many things it handled) and, if it has work to do after every step,
    :meth:`end_step`; by default the loop waits with ``sleep`` (default ``time.sleep``).  A test
    gives it a fake clock and a ``sleep`` that moves it.  ``closed`` stops it.  ``io_handled``
    counts the I/O handled so far (a waiter tells a peer still sending from one gone quiet).
    """

    def __init__(self, *, clock: Callable[[], int] = time.monotonic_ns,
                 sleep: Callable[[float], None] = time.sleep, poll_wait: float = 0.02) -> None:
        self.clock = clock
        self.sleep = sleep
        self.poll_wait = poll_wait
        self.closed = False
        self.io_handled = 0
        self._timers: list[tuple[int, int, Callable[[Any], None], Any]] = []
        self._seq = itertools.count(1)

    @property
    def now_ns(self) -> int:
        return self.clock()

    @property
    def pending(self) -> int:
        """Timers waiting (cancelled ones included, until their time comes)."""
        return len(self._timers)

    @property
    def next_ns(self) -> int | None:
        """When the next timer is due (None if there is none)."""
        return self._timers[0][0] if self._timers else None

    def call_at(self, at_ns: int, fn: Callable[[Any], None], arg: Any = None) -> None:
        """Run ``fn(arg)`` from the loop once the clock reads ``at_ns``."""
        heappush(self._timers, (at_ns, next(self._seq), fn, arg))

    def call_later(self, delay_ns: int, fn: Callable[[Any], None], arg: Any = None) -> Timer:
        """Run ``fn(arg)`` from the loop ``delay_ns`` from now (a negative delay counts as 0);
        ``cancel()`` the result to forget it."""
        delay_ns = _whole_ns(delay_ns)
        t = Timer(fn, arg)
        self.call_at(self.clock() + max(0, delay_ns), t, None)
        return t

    def run_due(self) -> int:
        """Run the timers that are due now, in order; returns how many ran."""
        t = self._timers
        ran = 0
        now = self.clock()
        while t and t[0][0] <= now:
            _, _, fn, arg = heappop(t)
            fn(arg)
            ran += 1
        return ran

    def poll_io(self, timeout: float) -> int:
        """Wait up to ``timeout`` seconds for I/O and handle it; returns the things handled.
        Without I/O of its own the loop just sleeps."""
        if timeout > 0:
            self.sleep(timeout)
        return 0

    def end_step(self) -> None:
        """Called at the end of every step (a carrier flushes its devices' held ACKs here)."""

    def linger(self, seconds: float = 0.2, every: float = 0.02) -> None:
        """Keep stepping for ``seconds`` of this loop's clock, waiting at most ``every`` seconds a step:
        a program about to close lets its last ACKs go out (the peer's last message may wait for one)."""
        end = self.clock() + int(seconds * 1e9)
        while self.clock() < end and not self.closed:
            self.step(every)

    def step(self, timeout: float = 0.0) -> bool:
        """Handle the I/O there is (waiting up to ``timeout`` seconds, less if a timer falls due
        sooner), run the timers due, end the step.  True if anything happened."""
        if self.closed:
            return False
        if timeout > 0 and self._timers:
            timeout = min(timeout, max(0.0, (self._timers[0][0] - self.clock()) / 1e9))
        did = self.poll_io(timeout)
        self.io_handled += did
        did += self.run_due()
        self.end_step()
        return did > 0

    def run(self, until_ns: int | None = None, max_events: int = 10_000_000) -> int:
        """Step (waiting up to 10 ms each time) until no timer is left, or the clock reaches
        ``until_ns``, or ``max_events`` steps ran; returns the steps."""
        steps = 0
        while steps < max_events and not self.closed:
            if until_ns is not None and self.clock() >= until_ns:
                break
            if not self._timers and until_ns is None:
                self.step()
                break
            self.step(0.01)
            steps += 1
        return steps
