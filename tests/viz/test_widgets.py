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


def test_the_builder_greys_out_rkey_and_va_for_opcodes_without_them() -> None:
    """Issue 20, item 7: a SEND ignores rkey and VA, so the builder does not offer them for it."""
    from rdmalab.viz.widgets import uses_remote_address

    assert uses_remote_address(BUILDER_OPCODES["RC RDMA WRITE Only"])
    assert uses_remote_address(BUILDER_OPCODES["RC RDMA READ Request"]) and uses_remote_address(BUILDER_OPCODES["RC FetchAdd"])
    assert not uses_remote_address(BUILDER_OPCODES["RC SEND Only"]) and not uses_remote_address(BUILDER_OPCODES["CNP"])
    pytest.importorskip("ipywidgets")
    from rdmalab.viz.widgets import packet_builder

    box = packet_builder()
    controls = {c.description: c for col in box.children[0].children for c in col.children}
    assert not controls["rkey"].disabled and not controls["VA"].disabled  # starts on a WRITE
    controls["opcode"].value = BUILDER_OPCODES["RC SEND Only"]
    assert controls["rkey"].disabled and controls["VA"].disabled
    controls["opcode"].value = BUILDER_OPCODES["RC RDMA READ Request"]
    assert not controls["rkey"].disabled and not controls["VA"].disabled


def test_the_congestion_runner_shows_whole_names_and_three_figures() -> None:
    """Issue 20, item 7: "rpg_time_..." was cut, and the legend read "Kmin 39.8107 KB"."""
    from rdmalab.lab.congestion import runner_settings

    assert runner_settings(10 ** 1.6, 1000.0, 1.0, 40.0, 10 ** 1.78) == {
        "kmin": "39.8", "kmax": "1000", "pmax": "1", "rpg_ai_rate": "40", "rpg_time_reset": "60.3"}
    pytest.importorskip("ipywidgets")
    from rdmalab.lab.congestion import congestion_runner

    box = congestion_runner()
    sliders = [c for row in box.children[:3] for c in row.children]
    assert all(c.style.description_width == "105px" for c in sliders)
    longest = max(len(c.description) for c in sliders)
    assert longest == len("rpg_time_reset") and longest * 7.5 <= 105  # 13 px sans: under 7.5 px a character
    legend = box.children[3].outputs
    assert not any("39.8107" in str(o) for o in legend)
