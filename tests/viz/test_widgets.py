"""The widgets are thin: their work is done by plain functions that the tests can call."""

from __future__ import annotations

import pytest

from rdmalab.viz.widgets import BUILDER_OPCODES, build_frame, run_transfer


@pytest.mark.parametrize("name", list(BUILDER_OPCODES))
def test_builder_encodes_every_offered_opcode_with_a_good_icrc(name: str) -> None:
    pkt = build_frame(BUILDER_OPCODES[name], psn=3, ecn=3, fecn=True)
    assert pkt.opcode_name == name and pkt.crc_status == "good" and not pkt.problems


def test_marking_ecn_does_not_change_the_icrc() -> None:
    assert build_frame(0x04, ecn=0).crc == build_frame(0x04, ecn=3).crc
    assert build_frame(0x04, psn=1).crc != build_frame(0x04, psn=2).crc


@pytest.mark.parametrize("op", ["WRITE", "READ", "SEND"])
def test_transfer_runner_function(op: str) -> None:
    res = run_transfer(op=op, size=3000, mtu=1024, loss=0.0, seed=2)
    assert res.completions[0].status == 0
    assert len(res.ladder.arrows) >= 3
    assert "<svg" in res.psn_plot.to_svg()


def test_widgets_build_without_a_frontend() -> None:
    pytest.importorskip("ipywidgets")
    from rdmalab.viz.widgets import packet_builder, transfer_runner

    assert packet_builder().children and transfer_runner().children
