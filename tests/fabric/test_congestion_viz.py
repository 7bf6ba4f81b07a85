"""The congestion pictures render (deterministic SVG) from a short run."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")

from rdmalab.fabric.congestion_scenarios import NS3_RDMA, run_scenario  # noqa: E402
from rdmalab.fabric.fluid import simulate  # noqa: E402
from rdmalab.viz.congestion import fluid_vs_packets, timeline  # noqa: E402


def test_timeline_and_fluid_render() -> None:
    res = run_scenario("incast", senders=3, duration_ms=1.0)
    svg = timeline(res, title="t").to_svg()
    assert svg.startswith("<svg") and "DCQCN rate" in svg and "Kmin" in svg
    assert svg == timeline(res, title="t").to_svg()
    assert "goodput (Gb/s)" in timeline(res, goodput=True, window_us=100).to_svg()
    model = simulate(NS3_RDMA, n=3, duration_ms=1.0, dt_us=0.5)
    assert "fluid model" in fluid_vs_packets(model, res).to_svg()


def test_the_runner_lives_in_lab_and_draws_a_run() -> None:
    pytest.importorskip("ipywidgets")
    import rdmalab.viz.congestion as viz
    from rdmalab.lab.congestion import congestion_runner

    assert not hasattr(viz, "congestion_runner") and not hasattr(viz, "run")  # viz draws, it runs nothing
    box = congestion_runner("lossy")
    assert len(box.children) == 4


def test_timeline_shows_drops() -> None:
    res = run_scenario("lossy", senders=6, duration_ms=1.5, settings={"buffer": "0.15", "flow_kb": "512"})
    assert res.fabric.drops > 0
    assert "drops" in timeline(res).to_svg()
