"""The switched fabric on integer nanoseconds: exact port rates, whole times everywhere, rates refused."""

from __future__ import annotations

from typing import Any

import pytest

from rdmalab.fabric import congestion_scenarios as sc
from rdmalab.fabric.switched import SwitchedFabric
from rdmalab.wire.ib import ACK_OPCODE


def _frames_through(rate_gbps: float, sizes: list[int], *, delay_us: float = 1.0,
                    gap_after: int | None = None, gap_ns: int = 0) -> tuple[list[int], int]:
    """Send frames of ``sizes`` back to back out of a host's port; the times they arrive at the peer.
    With ``gap_after``, the port idles ``gap_ns`` after that many frames before the rest are queued."""
    fab = SwitchedFabric(dcqcn=None)
    h, s = fab.add_host("h"), fab.add_switch("s")
    port, _ = fab.link(h, s, rate_gbps, delay_us)
    arrivals: list[int] = []
    fab._arrive = lambda pkt: arrivals.append(fab.now)  # type: ignore[method-assign]  # (no switch behind)

    def queue(batch: list[int]) -> None:
        for size in batch:
            pkt: list[Any] = [ACK_OPCODE, None, size, 3, 0, 0, None, None, None, None]
            port.queues[3].append(pkt)
            port.qbytes[3] += size
        port.active |= 1 << 3
        fab._kick(port)

    first = sizes if gap_after is None else sizes[:gap_after]
    queue(first)
    fab.loop.run()
    if gap_after is not None:
        fab.loop.advance(gap_ns)
        queue(sizes[gap_after:])
        fab.loop.run()
    assert all(type(t) is int for t in arrivals)
    return arrivals, port.delay


@pytest.mark.parametrize("rate", [40.0, 25.0, 100.0, 2.5, 7.0])
def test_back_to_back_frames_take_exactly_their_bits_at_the_rate(rate: float) -> None:
    sizes = [1082] * 500 + [64, 1082, 1500, 86] * 50
    arrivals, delay = _frames_through(rate, sizes)
    mbps = round(rate * 1000)
    bits = 0
    for i, size in enumerate(sizes):
        bits += size * 8
        # each frame is out at the whole ns at or before its exact end: nothing is lost or gained per frame
        assert arrivals[i] == bits * 1000 // mbps + delay, i
    # so the long-run rate is the link's own: 40 Gb/s sends 500 frames of 1082 bytes in 108,200 ns, not 108,000
    assert (arrivals[-1] - delay) * rate <= bits < (arrivals[-1] - delay + 1) * rate


def test_an_idle_port_starts_the_next_frame_from_now() -> None:
    sizes = [1082] * 3 + [1082] * 2
    arrivals, delay = _frames_through(40.0, sizes, gap_after=3, gap_ns=5_000)
    assert arrivals[:3] == [216 + delay, 432 + delay, 649 + delay]  # 216.4, 432.8, 649.2
    restart = 649 + delay + 5_000  # the clock after the idle time (the remainder of 0.2 ns is dropped)
    assert arrivals[3:] == [restart + 216 + delay, restart + 432 + delay]


@pytest.mark.parametrize("rate", [40.0001, 0.0001, 1e-4 + 25, float("nan"), float("inf")])
def test_a_rate_that_is_not_whole_mbits_is_refused(rate: float) -> None:
    fab = SwitchedFabric()
    h, s = fab.add_host("h"), fab.add_switch("s")
    with pytest.raises(ValueError, match="link h-s"):
        fab.link(h, s, rate, 1.0)


def test_times_given_in_microseconds_are_whole_ns() -> None:
    fab = SwitchedFabric(sample_ns=2_500.4)
    a, b, s = fab.add_host("a"), fab.add_host("b"), fab.add_switch("s")
    fab.link(a, s, 25, 0.3333)
    fab.link(s, b, 25, 0.3333)
    assert fab.port("a", "s").delay == 333 and fab.sample_ns == 2_500
    f = fab.add_flow("a", "b", start_us=1.0004, stop_us=50.0006)
    assert (f.start, f.stop) == (1_000, 50_001)
    fab.run(60.0000004)
    assert fab.now == 60_000 and type(fab.now) is int and type(fab.carrier.now_ns) is int
    assert fab.samples == list(range(0, 60_001, 2_500))
    with pytest.raises(ValueError, match="start_us=0 is before"):
        fab.add_flow("a", "b", start_us=0)
    with pytest.raises(ValueError, match="sample_ns"):
        SwitchedFabric(sample_ns=0.2)
    with pytest.raises(ValueError, match="delay_us"):
        SwitchedFabric().link(SwitchedFabric().add_host("x"), SwitchedFabric().add_switch("y"), 40, float("nan"))


def test_pfc_pauses_and_every_event_are_at_whole_ns() -> None:
    """The deadlock ring: PFC pauses, refreshes and XONs, at 25 Gb/s where a pause is 1,342,156.8 ns."""
    fab, _ = sc.build("deadlock", rate=25.0, duration_ms=1.0)
    fab.run(1_000.0)
    assert fab.pauses > 0
    assert all(type(ev[0]) is int for ev in fab.loop._heap)
    for node in fab.nodes:
        for p in node.ports:
            assert type(p.busy_until) is int and all(type(t) is int for t in p.paused_until)
            assert 0 <= p.tx_rem < p.mbps
    p = fab.watch[0]
    assert type(fab.paused_time_ns(p)) is int and fab.paused_time_ns(p) > 0
    # a pause received lasts 65535 quanta of 512 bit times, rounded up: 1,342,157 ns at 25 Gb/s
    paused = [t for n in fab.nodes for q in n.ports for t in q.paused_until if t > fab.now]
    assert paused and all(t - fab.now <= 1_342_157 for t in paused)
