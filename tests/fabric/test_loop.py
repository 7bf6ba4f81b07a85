"""The fabrics' event loops (rdmalab.fabric.loop): the virtual-time loop and the wall-clock loop."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

import rdmalab.fabric
from rdmalab.fabric.loop import PROGRESS_EVERY, Loop, VirtualLoop, WallClockLoop
from rdmalab.fabric.sim import Fabric
from rdmalab.fabric.switched import SwitchedFabric
from rdmalab.fabric.tcpkernel import KernelTcp
from rdmalab.fabric.udp import UdpFabric


def _log(loop: Any, out: list[Any]) -> Any:
    return lambda arg: out.append((loop.now_ns, arg))


# ---------------------------------------------------------------------- the virtual-time loop
def test_same_time_events_run_in_the_order_they_were_scheduled() -> None:
    loop = VirtualLoop(0)
    out: list[Any] = []
    log = _log(loop, out)
    loop.call_at(20, log, "c")
    loop.call_at(10, log, "a")
    loop.call_later(10, log, "b")  # same time as "a", scheduled after it
    loop.call_at(20, lambda _: loop.call_at(20, log, "e"), None)  # scheduled while its instant runs
    loop.call_at(20, log, "d")
    assert loop.pending == 5 and loop.next_ns == 10
    assert loop.run() == 2  # two instants
    assert out == [(10, "a"), (10, "b"), (20, "c"), (20, "d"), (20, "e")]
    assert loop.events == 6 and loop.pending == 0 and loop.now_ns == 20


def test_the_fast_path_is_call_at() -> None:
    """``push((t, next(tickets), fn, arg))`` schedules exactly as ``call_at(t, fn, arg)`` does."""
    loop = VirtualLoop(0)
    out: list[Any] = []
    log = _log(loop, out)
    loop.call_at(7, log, 1)
    loop.push((7, next(loop.tickets), log, 2))
    loop.call_later(7, log, 3)
    loop.push((3, next(loop.tickets), log, 0))
    loop.run()
    assert out == [(3, 0), (7, 1), (7, 2), (7, 3)]


def test_step_runs_one_instant_and_moves_the_clock() -> None:
    loop = VirtualLoop(100)
    out: list[Any] = []
    log = _log(loop, out)
    loop.call_later(5, log, 1)
    loop.call_later(5, log, 2)
    loop.call_later(7, log, 3)
    assert loop.step() is True
    assert out == [(105, 1), (105, 2)] and loop.now_ns == 105
    assert loop.step() is True and out[-1] == (107, 3)
    assert loop.step() is False and loop.now_ns == 107  # idle: the clock stays


def test_cancelled_timer_never_runs_and_cancel_is_idempotent() -> None:
    loop = VirtualLoop(0)
    out: list[Any] = []
    t = loop.call_later(10, out.append, "timer")
    loop.call_later(20, out.append, "other")
    t.cancel()
    t.cancel()
    assert loop.pending == 2  # it keeps its place until its time comes
    loop.run()
    assert out == ["other"]


def test_negative_delay_counts_as_zero_and_a_bad_delay_is_refused() -> None:
    loop = VirtualLoop(50)
    out: list[Any] = []
    loop.call_later(-30, _log(loop, out), "x")
    loop.run()
    assert out == [(50, "x")]
    with pytest.raises(TypeError, match="delay_ns is a number of nanoseconds"):
        loop.call_later("10", print)  # type: ignore[arg-type]


def test_run_until_stops_before_later_events() -> None:
    loop = VirtualLoop(0)
    out: list[Any] = []
    log = _log(loop, out)
    for t in (10, 20, 30, 40):
        loop.call_at(t, log, t)
    assert loop.run(until_ns=25) == 2
    assert [a for _, a in out] == [10, 20]
    assert loop.now_ns == 20  # events remain: the clock stays at the last instant run
    assert loop.run(until_ns=30) == 1 and loop.now_ns == 30  # an event due at until_ns runs
    assert loop.run(until_ns=1000) == 1
    assert loop.now_ns == 1000  # nothing left: the clock reads until_ns
    loop.call_later(5, log, "after")
    loop.run()
    assert out[-1] == (1005, "after")


def test_run_stops_after_max_events_steps() -> None:
    loop = VirtualLoop(0)
    for t in range(1, 11):
        loop.call_at(t, lambda _: None)
    assert loop.run(max_events=3) == 3 and loop.now_ns == 3 and loop.pending == 7


def test_advance_sets_the_clock_even_with_events_left() -> None:
    loop = VirtualLoop(0)
    out: list[Any] = []
    loop.call_at(10, out.append, "a")
    loop.call_at(500, out.append, "b")
    loop.advance(100)
    assert out == ["a"] and loop.now_ns == 100
    assert loop.advance_to(50) == 0 and loop.now_ns == 100  # never backwards
    loop.advance_to(500)
    assert out == ["a", "b"] and loop.now_ns == 500


def test_end_of_instant_flush_runs_only_after_instants_that_left_work() -> None:
    loop = VirtualLoop(0)
    dirty: set[str] = set()
    flushes: list[tuple[int, list[str]]] = []

    def flush() -> None:
        flushes.append((loop.now_ns, sorted(dirty)))
        dirty.clear()
        loop.call_later(3, lambda _: None)  # what a flush sends arrives later

    loop.on_instant_end(dirty, flush)
    loop.call_at(1, dirty.add, "x")
    loop.call_at(1, dirty.add, "y")
    loop.call_at(2, lambda _: None)  # an instant that leaves nothing to flush
    loop.call_at(5, dirty.add, "z")
    loop.run()
    assert flushes == [(1, ["x", "y"]), (5, ["z"])]
    assert loop.now_ns == 8  # the event the last flush scheduled ran
    # step() ends its instant the same way
    loop.call_later(1, dirty.add, "w")
    loop.step()
    assert flushes[-1] == (9, ["w"])


def test_a_flush_that_leaves_work_does_not_stall_the_loop() -> None:
    """A flush that leaves ``dirty`` non-empty is called again only after the next instant; what it
    schedules for the instant's own time runs as a new instant (as step() after step() would)."""
    loop = VirtualLoop(0)
    dirty = ["held"]
    calls: list[int] = []

    def flush() -> None:
        calls.append(loop.now_ns)
        if len(calls) == 1:
            loop.call_at(loop.now_ns, lambda _: None)  # the same time: one more instant at 10

    loop.on_instant_end(dirty, flush)
    loop.call_at(10, lambda _: None)
    loop.call_at(20, lambda _: None)
    assert loop.run() == 3  # 10, 10 again, 20
    assert calls == [10, 10, 20] and loop.now_ns == 20


def test_progress_reports_fractions_and_ends_with_one() -> None:
    loop = VirtualLoop(0)
    n = 2 * PROGRESS_EVERY + 10
    for t in range(n):
        loop.call_at(t, lambda _: None)
    seen: list[float] = []
    loop.advance_to(2 * n, seen.append)
    assert len(seen) == 3 and seen[-1] == 1.0
    assert 0 < seen[0] < seen[1] < 0.5  # the events run in the first half of the span
    assert loop.events == n


def test_the_clock_is_whole_nanoseconds() -> None:
    with pytest.raises(TypeError, match="whole number of nanoseconds"):
        VirtualLoop(0.0)  # type: ignore[arg-type]
    loop = VirtualLoop(0)
    out: list[Any] = []
    loop.call_at(25, out.append, "25")
    loop.call_at(26, out.append, "26")
    assert loop.run(until_ns=25.9) == 1 and out == ["25"]  # type: ignore[arg-type]  # a bound's fraction is dropped
    assert loop.now_ns == 25 and type(loop.now_ns) is int
    loop.advance_to(30.5)  # type: ignore[arg-type]
    assert out == ["25", "26"] and loop.now_ns == 30 and type(loop.now_ns) is int
    loop.advance(2.7)  # type: ignore[arg-type]
    t = loop.call_later(1.9, out.append, "later")  # type: ignore[arg-type]
    loop.run()
    assert loop.now_ns == 33 and type(loop.now_ns) is int and out[-1] == "later" and not t.cancelled
    with pytest.raises(TypeError, match="advance_to: until_ns is a number of nanoseconds"):
        loop.advance_to("40")  # type: ignore[arg-type]


def test_progress_of_a_scheduler_waits_for_done_or_idle() -> None:
    loop = VirtualLoop(0)
    box: list[int] = []
    for t in (10, 20, 30):
        loop.call_at(t, box.append, t)
    assert loop.progress(lambda: len(box) >= 2) is True and loop.now_ns == 20
    assert loop.progress(lambda: len(box) >= 5) is False and loop.pending == 0


# ---------------------------------------------------------------------- the wall-clock loop
class FakeClock:
    def __init__(self, start: int = 1_000_000) -> None:
        self.ns = start
        self.sleeps: list[float] = []

    def __call__(self) -> int:
        return self.ns

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.ns += round(seconds * 1e9)


def test_wall_clock_timers_run_when_due() -> None:
    clock = FakeClock()
    loop = WallClockLoop(clock=clock, sleep=clock.sleep)
    out: list[Any] = []
    loop.call_later(2_000_000, lambda a: out.append((clock.ns, a)), "t2")
    loop.call_later(1_000_000, lambda a: out.append((clock.ns, a)), "t1")
    gone = loop.call_later(1_500_000, out.append, "cancelled")
    gone.cancel()
    assert loop.now_ns == 1_000_000 and loop.next_ns == 2_000_000
    assert loop.step() is False and out == []  # nothing due, and step(0) does not wait
    assert clock.sleeps == []
    assert loop.step(1.0) is True  # waits no longer than the first timer
    assert clock.sleeps == [pytest.approx(0.001)] and out == [(2_000_000, "t1")]
    loop.step(1.0)  # the cancelled timer: due, dropped
    assert out == [(2_000_000, "t1")]
    loop.step(1.0)
    assert out[-1] == (3_000_000, "t2") and loop.pending == 0
    assert loop.step(0.25) is False and clock.sleeps[-1] == 0.25  # no timer: the whole timeout


def test_wall_clock_run_until_no_timer_is_left_or_until_ns() -> None:
    clock = FakeClock(0)
    loop = WallClockLoop(clock=clock, sleep=clock.sleep)
    out: list[int] = []
    for ms in (5, 25, 40):
        loop.call_later(ms * 1_000_000, out.append, ms)
    loop.run(until_ns=30_000_000)
    assert out == [5, 25] and clock.ns >= 30_000_000
    loop.run()
    assert out == [5, 25, 40] and loop.pending == 0
    loop.closed = True
    loop.call_later(0, out.append, 99)
    assert loop.step() is False and loop.run() == 0 and out[-1] == 40  # a closed loop does nothing


def test_wall_clock_io_and_end_of_step() -> None:
    class Io(WallClockLoop):
        def __init__(self, clock: FakeClock) -> None:
            super().__init__(clock=clock, poll_wait=0.0)
            self.waits: list[float] = []
            self.ends = 0

        def poll_io(self, timeout: float) -> int:
            self.waits.append(timeout)
            return 1

        def end_step(self) -> None:
            self.ends += 1

    clock = FakeClock(0)
    io = Io(clock)
    io.call_later(3_000_000, lambda _: None)
    assert io.step(0.5) is True  # the I/O counts as something done
    assert io.waits == [pytest.approx(0.003)] and io.ends == 1


# ---------------------------------------------------------------------- one loop for every fabric
def test_every_fabric_runs_on_one_of_the_two_loops() -> None:
    fab = Fabric()
    assert isinstance(fab, VirtualLoop) and isinstance(fab, Loop)
    sw = SwitchedFabric()
    assert isinstance(sw.loop, VirtualLoop) and isinstance(sw.loop, Loop)
    assert issubclass(UdpFabric, WallClockLoop) and issubclass(KernelTcp, WallClockLoop)
    kt = KernelTcp()
    try:
        assert isinstance(kt, Loop)
    finally:
        kt.close()


def test_switched_carrier_timers_are_the_loops() -> None:
    sw = SwitchedFabric()
    out: list[Any] = []
    car = sw.carrier
    t = car.call_later(1500, lambda a: out.append((sw.now, a)), "t")
    car.call_later(1000, lambda a: out.append((sw.now, a)), "first")
    car.call_later(2000, out.append, "x").cancel()
    assert sw.loop.pending == 3 and t is not None
    assert car.run(until_ns=1200) == 1 and out == [(1000.0, "first")]
    car.run()
    assert out == [(1000.0, "first"), (1500.0, "t")] and car.now_ns == 2000
    sw.run(5.0)  # microseconds: the clock reads 5000 ns after
    assert sw.now == 5000.0 and sw.events == sw.loop.events >= 3


def test_no_other_heap_in_the_fabrics() -> None:
    """The loop module is the only one in rdmalab.fabric that keeps a heap of events."""
    root = pathlib.Path(rdmalab.fabric.__file__).parent
    holders = sorted(p.name for p in root.glob("*.py") if "heapq" in p.read_text())
    assert holders == ["loop.py"]


def test_linger_steps_for_the_time_asked_and_runs_what_falls_due() -> None:
    clock = FakeClock(0)
    loop = WallClockLoop(clock=clock, sleep=clock.sleep)
    out: list[int] = []
    loop.call_later(50_000_000, out.append, 50)   # falls due while lingering
    loop.call_later(500_000_000, out.append, 500)  # does not
    loop.linger(0.2, every=0.02)
    assert out == [50] and 200_000_000 <= clock.ns < 220_000_000
    assert max(clock.sleeps) <= 0.02 + 1e-12
    loop.closed = True
    before = clock.ns
    loop.linger(1.0)
    assert clock.ns == before  # a closed loop does not linger
