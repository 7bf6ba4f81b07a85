"""Ladder diagrams and PSN plots drawn from the engine's trace and from captures."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from rdmalab import capture
from rdmalab.lab import capture_path, replays
from rdmalab.verbs.trace import TraceEvent
from rdmalab.viz import from_capture, from_trace, psn_time, qp_state_diagram, state_diagram, throughput

SVG = "{http://www.w3.org/2000/svg}"


def _events() -> list[TraceEvent]:
    return [
        TraceEvent(0, "a", 1, "sent", 5, 0x0A, {"packet_id": 1}),
        TraceEvent(1000, "b", 1, "received", 5, 0x0A, {"packet_id": 1}),
        TraceEvent(1100, "b", 1, "sent", 5, 0x11, {"packet_id": 2}),
        TraceEvent(2100, "a", 1, "received", 5, 0x11, {"packet_id": 2}),
        TraceEvent(2100, "a", 1, "acked", 5, 0x11, {"syndrome": "NAK, PSN Sequence Error (0)"}),
        TraceEvent(3000, "a", 1, "sent", 6, 0x0A, {"packet_id": 3}),
        TraceEvent(3000, "b", 1, "dropped", 6, 0x0A, {"packet_id": 3, "reason": "lost by the fabric"}),
        TraceEvent(900_000, "a", 1, "retransmitted", 6, None, {"reason": "timeout"}),
        TraceEvent(900_000, "a", 1, "sent", 6, 0x0A, {"packet_id": 4}),
        TraceEvent(901_000, "b", 1, "received", 6, 0x0A, {"packet_id": 4}),
        TraceEvent(901_000, "a", 1, "completed", None, None, {"status": "success", "wc_opcode": 1}),
    ]


def test_ladder_from_trace_classifies_every_arrow() -> None:
    lad = from_trace(_events(), title="t")
    kinds = [(a.label, a.kind, a.lost) for a in lad.arrows]
    assert kinds == [("WRITE Only PSN 5", "request", False), ("NAK: PSN Sequence Error PSN 5", "nak", False),
                     ("WRITE Only PSN 6", "request", True), ("WRITE Only PSN 6", "retx", False)]
    assert [m.kind for m in lad.markers] == ["timeout", "completion"]
    assert "WC RDMA_WRITE ok" in lad.markers[1].label


def test_ladder_svg_is_valid_and_cuts_long_gaps() -> None:
    svg = from_trace(_events())._repr_svg_()
    root = ET.fromstring(svg)
    assert root.tag == SVG + "svg"
    assert len(root.findall(f".//{SVG}g[@class='rdmalab-arrow rdmalab-retx']")) == 1
    assert "\u2248 +" in svg  # the 0.9 ms gap is drawn as a cut
    assert int(root.get("height")) < 600


def test_mermaid_export() -> None:
    text = from_trace(_events()).to_mermaid()
    assert text.startswith("sequenceDiagram") and "a-xb: WRITE Only PSN 6" in text


def test_engine_run_ladder_and_plots_are_deterministic() -> None:
    first = replays.nak_run()
    second = replays.nak_run()
    assert first.ladder().to_svg() == second.ladder().to_svg()
    kinds = {a.kind for a in first.ladder().arrows}
    assert {"request", "nak", "retx", "ack"} <= kinds
    svg = first.psn_plot().to_svg()
    assert svg == second.psn_plot().to_svg()
    ET.fromstring(svg)
    assert "<svg" in throughput(first.trace).to_svg()


def test_ladder_and_psn_plot_from_a_real_capture() -> None:
    cps = list(capture.read(capture_path("rxe_rping.pcap")))
    lad = from_capture(cps, limit=8)
    assert lad.nodes == ["10.0.0.2", "10.0.0.1"]
    assert [a.label for a in lad.arrows[:3]] == ["CM REQ", "CM REP", "CM RTU"]
    assert lad.arrows[5].label.startswith("READ Req")
    ET.fromstring(psn_time(cps).to_svg())


def test_qp_state_diagram_is_drawn_from_the_engine_table() -> None:
    from rdmalab.verbs.engine import qpstate

    d = qp_state_diagram("RC")
    rc_edges = sum(1 for masks in qpstate.TABLE.values() if qpstate.RC in masks)
    assert len(d.edges) == rc_edges
    assert ("RESET", "INIT") in {(a, b) for a, b, _ in d.edges}
    assert ("RESET", "RTS") not in {(a, b) for a, b, _ in d.edges}
    ET.fromstring(d.to_svg())


@pytest.mark.parametrize("table", [
    {"A": ["B"], "B": ["A"]},
    [("A", "B", "go"), ("B", "A")],
    {("A", "B"): "x"},
])
def test_state_diagram_accepts_table_shapes(table: object) -> None:
    d = state_diagram(table)
    assert {e[:2] for e in d.edges} >= {("A", "B")}
    ET.fromstring(d.to_svg())


def test_qp_state_diagram_labels_clear_of_every_edge() -> None:
    """No transition label lies on an arrow (the RESET -> INIT label once sat between that edge and its
    reverse) and no arrow runs through a state it does not join."""
    svg = ET.fromstring(qp_state_diagram("RC").to_svg())
    ns = "{http://www.w3.org/2000/svg}"
    curves = []
    for p in svg.iter(f"{ns}path"):
        m = re.fullmatch(r"M([\d.-]+),([\d.-]+) Q([\d.-]+),([\d.-]+) ([\d.-]+),([\d.-]+)", p.get("d", ""))
        if m:
            curves.append([float(v) for v in m.groups()])
    assert len(curves) > 10
    boxes = []  # label lines: 10px text, about 6.2px a character, anchored in the middle
    for t in svg.iter(f"{ns}tspan"):
        x, y, w = float(t.get("x", 0)), float(t.get("y", 0)), 6.2 * len(t.text or "")
        boxes.append((x - w / 2, y - 9, x + w / 2, y + 2))
    assert boxes
    circles = [(float(c.get("cx", 0)), float(c.get("cy", 0))) for c in svg.iter(f"{ns}circle")]
    for sx, sy, mx, my, ex, ey in curves:
        for i in range(1, 50):
            s = i / 50
            px = (1 - s) ** 2 * sx + 2 * s * (1 - s) * mx + s * s * ex
            py = (1 - s) ** 2 * sy + 2 * s * (1 - s) * my + s * s * ey
            for x0, y0, x1, y1 in boxes:
                assert not (x0 <= px <= x1 and y0 <= py <= y1), f"an edge crosses the label at ({x0}, {y0})"
            for cx, cy in circles:
                assert math.hypot(px - cx, py - cy) > 29, f"an edge runs through the state at ({cx}, {cy})"


def _crossings(ladder: Any) -> list[tuple[str, str]]:
    """(label, line) pairs where an arrow's line runs through a delivered arrow's label: an arrow of the same
    direction, or one that starts or ends where the label's own arrow does (a reply crossing requests still in
    flight cannot be avoided and is not counted).  The label's box, in its own rotated frame: 6.2 px per
    character (11 px DejaVu Sans) wide, 9 px above the baseline, centred on its anchor."""
    import math
    import re

    svg = ladder.to_svg()
    segs = [tuple(map(float, m)) for m in re.findall(
        r'<line x1="([\d.]+)" y1="([\d.]+)" x2="([\d.]+)" y2="([\d.]+)" stroke="#[0-9a-f]{6}" '
        r'stroke-width="1.5"(?: stroke-dasharray="6,3")? marker-end', svg)]
    texts = re.findall(r'<text x="([\d.]+)" y="([\d.]+)" text-anchor="middle" fill="#[0-9a-f]{6}" '
                       r'transform="rotate\(([-\d.]+) [\d.]+ [\d.]+\)"[^>]*>([^<]+)</text>', svg)
    assert texts and len(texts) == len(segs)  # one label per delivered arrow, in the same order
    bad = []
    for (tx, ty, ang, label), own in zip(texts, segs, strict=True):
        x, y, a = float(tx), float(ty), math.radians(float(ang))
        w = 6.2 * len(label)
        ends = {own[:2], own[2:]}
        for seg in segs:
            x0, y0, x1, y1 = seg
            same_way = (x1 > x0) == (own[2] > own[0])
            if seg is own or not (same_way or {seg[:2], seg[2:]} & ends):
                continue
            (ax, ay), (bx, by) = [((px - x) * math.cos(-a) - (py - y) * math.sin(-a),
                                   (px - x) * math.sin(-a) + (py - y) * math.cos(-a)) for px, py in ((x0, y0), (x1, y1))]
            for i in range(201):  # sample the segment: fine enough for 9 px boxes
                u, v = ax + (bx - ax) * i / 200, ay + (by - ay) * i / 200
                if -w / 2 <= u <= w / 2 and -9 <= v <= 0:
                    bad.append((label, f"line {x0:.0f},{y0:.0f} -> {x1:.0f},{y1:.0f}"))
                    break
    return bad


def test_no_line_strikes_through_a_label_in_the_rnr_and_loss_ladders() -> None:
    """Issue 20, item 4: "ACK PSN 100", "RNR NAK ... PSN 100" (notebook 03) and the labels of a lossy WRITE
    (notebook 09) were struck through by the arrow arriving where theirs left.  Labels now run along the
    middle of their own arrow; no delivered arrow's line may cross one."""
    from rdmalab.lab import replays
    from rdmalab.lab.checkers.verbs import rnr_run

    for ladder in (rnr_run(None).ladder(title="RNR"), replays.nak_run().ladder(title="NAK"),
                   replays.timeout_run().ladder(title="timeout")):
        assert _crossings(ladder) == [], ladder.title


def test_a_ladder_without_names_shows_the_nak_code_and_no_status_name() -> None:
    """Notebook 11 draws a wrong rkey's NAK above an exercise that asks the NAK's and the completion's names:
    with ``names=False`` the label, the hover text and the text form give the code only."""
    import rdmalab.verbs.enums as e
    from rdmalab.lab.pair import SoftPair
    from rdmalab.verbs.wr import SGE, SendWR

    p = SoftPair()
    wr = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(p.a.mr.buf, 8, p.a.mr.lkey)])
    wr.set_wr_rdma(p.b.mr.rkey ^ 0x1, p.b.mr.buf)
    p.a.qp.post_send(wr)
    p.a.poll()
    named, plain = p.ladder(), p.ladder(names=False)
    assert "Remote Access Error" in named.to_svg()
    assert "NAK code 2" in plain.to_svg() and "NAK code 2" in plain.text()
    for shown in (plain.to_svg(), plain.text(), repr(plain)):
        assert "remote access" not in shown.lower(), shown[:500]
