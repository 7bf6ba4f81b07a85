"""The widgets are thin: their work is done by plain functions that the tests can call."""

from __future__ import annotations

import pytest

from rdmalab.viz.widgets import BUILDER_OPCODES, build_frame


@pytest.mark.parametrize("name", list(BUILDER_OPCODES))
def test_builder_encodes_every_offered_opcode_with_a_good_icrc(name: str) -> None:
    pkt = build_frame(BUILDER_OPCODES[name], psn=3, ecn=3, fecn=True)
    assert pkt.opcode_name == name and pkt.crc_status == "good" and not pkt.problems


def test_marking_ecn_does_not_change_the_icrc() -> None:
    send = BUILDER_OPCODES["RC SEND Only"]
    assert build_frame(send, ecn=0).crc == build_frame(send, ecn=3).crc
    assert build_frame(send, psn=1).crc != build_frame(send, psn=2).crc


def test_packet_builder_builds_without_a_frontend() -> None:
    pytest.importorskip("ipywidgets")
    from rdmalab.viz.widgets import packet_builder

    assert packet_builder().children
