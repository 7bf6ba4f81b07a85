"""Coloured hex dumps and the CRC walkthroughs, on real hardware bytes."""

from __future__ import annotations

import html
import re
import xml.etree.ElementTree as ET

import pytest

from rdmalab import capture
from rdmalab.lab import capture_path
from rdmalab.lab.samples import one_write
from rdmalab.viz import compare_wires, crc32c_steps, field_table, hexdump, icrc_steps, wire_hexdump
from rdmalab.wire import BTH, RETH, decode_ethernet, encode_rocev2


@pytest.fixture(scope="module")
def hw() -> list:
    return list(capture.read(capture_path("public_hw_byte_vectors.pcap")))


def _titles(markup: str) -> list[str]:
    return [html.unescape(t) for t in re.findall(r'title="([^"]*)"', markup)]


def test_every_byte_has_a_hover_naming_its_field() -> None:
    frame = encode_rocev2(BTH(opcode=0x0A, destqp=0x12, psn=5), [RETH(va=0x1000, r_key=0xABC, dma_length=5)], b"hello")
    pkt = decode_ethernet(frame)
    markup = hexdump(pkt)._repr_html_()
    titles = _titles(markup)
    assert len(titles) == len(frame)
    assert titles[42].startswith("byte 42 (0x2a) = 0x0a") and "BTH.opcode = RC RDMA WRITE Only (0x0a)" in titles[42]
    assert "infiniband.bth.opcode" in titles[42]
    # byte 43 of the frame packs four BTH bit fields: all are named
    for name in ("BTH.se", "BTH.migreq", "BTH.padcnt", "BTH.tver"):
        assert name in titles[43]
    assert "RETH.r_key = 0x00000abc" in titles[62]
    assert "Payload.data" in titles[70] and "ICRC.crc" in titles[-1]


def test_html_is_well_formed_and_static() -> None:
    pkt = one_write()[2].packet
    markup = hexdump(pkt, title="t")._repr_html_()
    assert "<script" not in markup
    ET.fromstring(markup.replace("&nbsp;", "&#160;").replace("&ndash;", "&#8211;"))


def test_colours_follow_headers_and_alternate_between_fields() -> None:
    pkt = one_write()[2].packet
    hd = hexdump(pkt)
    per = hd.byte_fields()
    assert per[42][0][1].layer == "BTH" and per[42][0][0] == 0  # opcode, first BTH field
    assert per[44][0][1].field == "p_key" and per[44][0][0] == 5  # the sixth BTH field: the dark shade
    markup = hd._repr_html_()
    assert "background:#ffd466" in markup and "background:#ffe7a3" in markup  # both BTH shades are used


def test_highlight_and_text_forms(hw: list) -> None:
    hd = hexdump(hw[0], highlight=[(15, 16, "TOS")])
    assert "outline:2px solid" in hd._repr_html_()
    text = hd.text()
    assert text.splitlines()[0].startswith("0000  ") and "Ethernet" in text
    assert "BTH" in repr(field_table(hw[0].packet[BTH]))


@pytest.mark.parametrize("frame", [0, 1, 2, 3])
def test_icrc_walkthrough_reproduces_hardware_icrcs(hw: list, frame: int) -> None:
    steps = icrc_steps(hw[frame])
    assert steps.matches_wire, steps
    assert steps.crc == steps.library_crc()
    assert steps.masked and "Step 5" in steps._repr_html_()


def test_icrc_masks_exactly_the_variant_fields(hw: list) -> None:
    steps = icrc_steps(hw[0])  # RoCEv2/IPv4
    names = {f"{m.layer}.{m.field}" for m in steps.masked}
    assert names == {"IPv4.dscp", "IPv4.ecn", "IPv4.ttl", "IPv4.checksum", "UDP.checksum", "BTH.fecn", "BTH.becn",
                     "BTH.resv6"}
    # 8 bytes of ff, then masked: TOS (8+1), TTL (8+8), checksum (8+10, 8+11), UDP checksum (8+26,27), BTH byte 4
    assert steps.masked_offsets() == [9, 16, 18, 19, 34, 35, 40]
    assert steps.masked_input[:8] == b"\xff" * 8


def test_native_ib_and_iwarp_walkthroughs() -> None:
    wires = one_write()
    ib = icrc_steps(wires[0].packet)
    assert ib.prefix == b"" and ib.matches_wire
    c = crc32c_steps(wires[3].packet)
    assert c.matches_wire and "CRC32c" in c._repr_html_()
    with pytest.raises(ValueError):
        icrc_steps(wires[3].packet)


def test_four_wires_comparison() -> None:
    wires = one_write()
    rows = compare_wires(wires).rows()
    assert [r["name"] for r in rows] == ["Native IB", "RoCEv1", "RoCEv2", "iWARP"]
    assert all(r["payload"] == 12 for r in rows)
    assert [r["bytes"] for r in rows] == [54, 98, 86, 86]
    assert all(r["crc_ok"] == "good" for r in rows)
    spans = wire_hexdump(wires[3]).spans
    assert {"TCP", "MPA", "DDP", "CRC32c"} <= {s.layer for s in spans}


def test_hide_keeps_a_fields_bytes_but_not_its_decoded_value() -> None:
    """Notebook 03 shows an RNR NAK whose timer its exercise asks for (issue 20, item 1)."""
    from rdmalab.lab.checkers.verbs import rnr_run
    from rdmalab.viz.hexdump import hexdump
    from rdmalab.wire.ib import AETH

    nak = next(p for p in rnr_run(None, timer_code=14).packets() if AETH in p and p[AETH].is_rnr_nak)
    shown = hexdump(nak)._repr_html_()
    hidden = hexdump(nak, hide=["AETH.value"])._repr_html_()
    assert "1.28 ms" in shown and "1.28" not in hidden and "decode it yourself" in hidden
    assert f"{nak.data[54]:02x}" in hidden  # the byte itself is still there to decode


def test_every_cell_of_the_dump_sets_its_own_spacing() -> None:
    """Issue 20, item 7: in JupyterLab the byte spacing was uneven, because cells without an explicit padding
    (blanks, the mid-row gap) took the notebook's table padding.  Every cell now states padding and border, and
    the byte cells and blanks the same ones."""
    import re

    from rdmalab.viz.hexdump import hexdump
    from rdmalab.viz.widgets import build_frame

    html = hexdump(build_frame(payload=b"x" * 21), start=3).to_html().split("</table>")[0]  # the bytes
    tds = re.findall(r"<td style=\"([^\"]*)\"[^>]*>([^<]*)</td>", html)
    table_tds = [t for t in tds if "padding" in t[0] or t[1]]
    assert table_tds and all("padding:" in style and "border:none" in style for style, _ in table_tds)
    byte_pad = {re.search(r"padding:[^;]+", st).group(0) for st, text in tds if re.fullmatch(r"[0-9a-f]{2}", text)}
    blank_pad = {re.search(r"padding:[^;]+", st).group(0) for st, text in tds if text == "&nbsp;&nbsp;"}
    assert byte_pad == blank_pad == {"padding:1px 2px"}
