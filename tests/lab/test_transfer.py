"""Notebook 09's transfer runner: a plain function the widget calls, run here without a frontend."""

from __future__ import annotations

import pytest

from rdmalab.lab.transfer import run_transfer


@pytest.mark.parametrize("op", ["WRITE", "READ", "SEND"])
def test_transfer_runner_function(op: str) -> None:
    res = run_transfer(op=op, size=3000, mtu=1024, loss=0.0, seed=2)
    first = res.completions[0]
    assert first is not None and first.status == 0
    assert len(res.ladder.arrows) >= 3
    assert "<svg" in res.psn_plot.to_svg()


def test_transfer_runner_builds_without_a_frontend() -> None:
    pytest.importorskip("ipywidgets")
    from rdmalab.lab.transfer import transfer_runner

    assert transfer_runner().children
