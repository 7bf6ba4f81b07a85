"""The DCQCN fluid model (Zhu et al., CoNEXT 2016) beside the packet-level fabric.

Tolerances, stated: for N = 2, 10 and 64 senders of a 40 Gb/s incast (ns3-rdma constants,
1 us links), the packet simulation's mean per-flow DCQCN rate over the second half is within 3 %
of the model's, and its mean queue within 40 KB (one Kmin) of the model's.  For stability, both
are run with the paper's switch settings (Kmin 5 KB, Kmax 200 KB, Pmax 1 %) and a feedback delay
of 85 us: 2 flows settle, 20 flows oscillate with the queue running empty, in both.
"""

from __future__ import annotations

import statistics

import pytest

from rdmalab.fabric.congestion_scenarios import NS3_RDMA, run_scenario
from rdmalab.fabric.fluid import simulate
from rdmalab.verbs.engine.dcqcn import PAPER


def _base_rtt_us(fab) -> float:  # type: ignore[no-untyped-def]
    """Data out (2 links) and CNP back (2 links): propagation plus one full frame per hop."""
    port = fab.watch[0]
    return 4 * (port.delay + (fab.payload + 58) * 8 / port.rate) / 1000


@pytest.mark.slow
@pytest.mark.parametrize("n", [2, 10, 64])
def test_fluid_matches_packets(n: int) -> None:
    res = run_scenario("incast", senders=n, duration_ms=40.0)
    fab = res.fabric
    k = len(fab.samples) // 2
    pkt_rate = statistics.mean(statistics.mean(row) for row in fab.rate_series[k:])
    pkt_queue = res.to_json()["queues"][0]["mean_kb"]
    model = simulate(NS3_RDMA, n=n, duration_ms=40.0, tau_star_us=_base_rtt_us(fab), dt_us=0.2, record_every=5,
                     packet_bytes=fab.payload + 58)
    rate, queue, _ = model.settled()
    assert rate == pytest.approx(40.0 / n, rel=0.01)
    assert pkt_rate == pytest.approx(rate, rel=0.03)
    assert abs(pkt_queue - queue) < 40.0, (pkt_queue, queue)


@pytest.mark.slow
def test_instability_with_feedback_delay() -> None:
    paper_switch = {"kmin_kb": 5.0, "kmax_kb": 200.0, "pmax": 0.01}
    calm = simulate(PAPER, n=2, duration_ms=40.0, tau_star_us=85.0, dt_us=0.2, record_every=5, **paper_switch)
    wild = simulate(PAPER, n=20, duration_ms=40.0, tau_star_us=85.0, dt_us=0.2, record_every=5, **paper_switch)
    assert calm.oscillation(0.3) < 10.0 and calm.queue_kb[-len(calm.queue_kb) // 3:].min() > 0
    assert wild.oscillation(0.3) > 200.0 and wild.queue_kb[-len(wild.queue_kb) // 3:].min() == 0.0
    # the packet-level fabric with 21.25 us links (4 hops: 85 us) does the same
    sets = {"kmin": "5", "kmax": "200", "pmax": "0.01", "delay_us": "21.25"}
    for n, oscillates in ((2, False), (20, True)):
        fab = run_scenario("incast", senders=n, duration_ms=40.0, profile="paper", settings=sets).fabric
        k = int(len(fab.samples) * 0.7)
        q = [row[0] / 1024 for row in fab.queue_series[k:]]
        swing = max(q) - min(q)
        assert (swing > 200.0) == oscillates, (n, swing)


def test_fluid_bad_input() -> None:
    with pytest.raises(ValueError, match="n must"):
        simulate(PAPER, n=0)
