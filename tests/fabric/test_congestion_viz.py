"""The congestion pictures render (deterministic SVG) from a short run."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")

from rdmalab.fabric.fluid import simulate  # noqa: E402
from rdmalab.fabric.scenarios import NS3_RDMA, run  # noqa: E402
from rdmalab.viz.congestion import fluid_vs_packets, timeline  # noqa: E402


def test_timeline_and_fluid_render() -> None:
    res = run("incast", senders=3, duration_ms=1.0)
    svg = timeline(res, title="t").to_svg()
    assert svg.startswith("<svg") and "DCQCN rate" in svg and "Kmin" in svg
    assert svg == timeline(res, title="t").to_svg()
    assert "goodput (Gb/s)" in timeline(res, goodput=True, window_us=100).to_svg()
    model = simulate(NS3_RDMA, n=3, duration_ms=1.0, dt_us=0.5)
    assert "fluid model" in fluid_vs_packets(model, res).to_svg()
