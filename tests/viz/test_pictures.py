"""What a reader sees: the lost mark sits on the lost packet, the legend leaves the points alone,
labels are not clipped, and the ladder reads decoded packets rather than text."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET

import pytest

from rdmalab.lab import replays
from rdmalab.verbs.trace import TraceEvent
from rdmalab.viz import from_trace
from rdmalab.viz.hexdump import hexdump
from rdmalab.viz.plots import psn_time
from rdmalab.wire import encode_rocev2
from rdmalab.wire.ib import AETH, BTH

SVG = "{http://www.w3.org/2000/svg}"


def _lines_and_labels(svg: str) -> tuple[list[dict[str, float]], list[tuple[float, float, str]]]:
    root = ET.fromstring(svg)
    lines = [{k: float(e.get(k, 0)) for k in ("x1", "y1", "x2", "y2")}
             for g in root.iter(f"{SVG}g") if "rdmalab-arrow" in (g.get("class") or "")
             for e in g.iter(f"{SVG}line")]
    texts = [(float(t.get("x", 0)), float(t.get("y", 0)), t.text or "") for t in root.iter(f"{SVG}text")]
    return lines, texts


def test_the_lost_mark_names_and_sits_on_the_lost_packet() -> None:
    pair = replays.nak_run()
    lost_psn = next(ev.psn for ev in pair.trace if ev.kind == "dropped")
    lad = pair.ladder()
    lost = [a for a in lad.arrows if a.lost]
    assert [a.psn for a in lost] == [lost_psn]
    lines, _ = _lines_and_labels(lad.to_svg())
    # Its label names the packet and ends in "lost", and runs along the lost packet's own line, beside it
    root = ET.fromstring(lad.to_svg())
    (label,) = [t for t in root.iter(f"{SVG}text") if "".join(t.itertext()).endswith(f"PSN {lost_psn} lost")]
    x, y = float(label.get("x", 0)), float(label.get("y", 0))
    (seg,) = [sg for sg in lad.layout().segments if lad.arrows[sg.owner or 0].lost]
    mine = next(ln for ln in lines if (ln["x1"], ln["y2"]) == (round(seg.x0, 1), round(seg.y1, 1)))
    dx, dy = mine["x2"] - mine["x1"], mine["y2"] - mine["y1"]
    along = ((x - mine["x1"]) * dx + (y - mine["y1"]) * dy) / math.hypot(dx, dy)
    off = abs((x - mine["x1"]) * dy - (y - mine["y1"]) * dx) / math.hypot(dx, dy)
    assert 0 < along < 2 * math.hypot(dx, dy) and off < 12, (along, off)
    # The lost packet's line stops half way, at its cross, and slopes like a delivered packet of the burst
    full = [ln for ln in lines if ln["x2"] > ln["x1"] and ln is not mine]
    slope = (mine["y2"] - mine["y1"]) / (mine["x2"] - mine["x1"])
    slopes = sorted((ln["y2"] - ln["y1"]) / (ln["x2"] - ln["x1"]) for ln in full)
    assert slopes[0] * 0.5 <= slope <= slopes[-1] * 1.5
    # the lost packet left in its turn: after the PSN before it, before the PSN after it
    sent = {a.psn: a.t0 for a in lad.arrows if a.kind == "request"}
    assert sent[lost_psn - 1] < lost[0].t0 < sent[lost_psn + 1]


def test_labels_are_drawn_over_every_line() -> None:
    svg = replays.nak_run().ladder().to_svg()
    last_line = max(m.start() for m in re.finditer("<line ", svg))
    first_label = min(m.start() for m in re.finditer('class="rdmalab-label', svg))
    assert first_label > last_line


def test_time_labels_fit_in_the_margin() -> None:
    lad = replays.timeout_run().ladder()
    _, texts = _lines_and_labels(lad.to_svg())
    cut = [(x, t) for x, _, t in texts if t.startswith("\u2248 +")]
    assert cut, "the timeout's gap is drawn as a cut"
    for x, t in cut + [(x, t) for x, _, t in texts if t.endswith(("ms", "\u00b5s", "ns")) and x < 200]:
        assert x - 6.2 * len(t) >= 0, t  # right-aligned at x: it must not start left of the picture
    assert any(t.startswith("+") for _, _, t in texts)  # after a cut, times read from the cut


def test_the_psn_plot_legend_leaves_the_points_alone() -> None:
    plot = psn_time(replays.nak_run())
    fig = plot.figure
    fig.canvas.draw()
    ax = fig.axes[0]
    legend = ax.get_legend().get_window_extent()
    axes_box = ax.get_window_extent()
    assert legend.x0 >= axes_box.x1  # outside the axes, so it can cover nothing
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "ACK" in labels and "NAK" in labels


def _nak_frame(psn: int) -> bytes:
    return encode_rocev2(BTH(opcode=0x11, destqp=1, psn=psn), [AETH.nak(msn=1, code=0)], src_ip="10.0.0.2",
                         dst_ip="10.0.0.1")


def test_the_ladder_classifies_from_the_decoded_aeth() -> None:
    """Frames only, no completer events: a NAK is still red, and says which NAK, from its AETH."""
    events = [
        TraceEvent(0, "a", 1, "sent", 5, 0x0A, {"packet_id": 1}),
        TraceEvent(1000, "b", 1, "received", 5, 0x0A, {"packet_id": 1}),
        TraceEvent(1100, "b", 1, "sent", 5, 0x11, {"packet_id": 2}, _nak_frame(5)),
        TraceEvent(2100, "a", 1, "received", 5, 0x11, {"packet_id": 2}),
    ]
    nak = from_trace(events).arrows[1]
    assert (nak.kind, nak.label) == ("nak", "NAK: PSN Sequence Error PSN 5")
    ack = encode_rocev2(BTH(opcode=0x11, destqp=1, psn=5), [AETH(type=0, value=31, msn=1)], src_ip="10.0.0.2",
                        dst_ip="10.0.0.1")
    events[2] = TraceEvent(1100, "b", 1, "sent", 5, 0x11, {"packet_id": 2}, ack)
    assert from_trace(events).arrows[1].kind == "ack"


@pytest.mark.parametrize("offsets,text", [([9], "masked: 9<"), ([9, 16, 17], "masked: 9, 16&ndash;17<")])
def test_hexdump_legend_groups_marks_and_shows_single_bytes(offsets: list[int], text: str) -> None:
    marks = []
    for o in offsets:
        if marks and marks[-1][1] == o:
            marks[-1] = (marks[-1][0], o + 1, "masked")
        else:
            marks.append((o, o + 1, "masked"))
    assert text in hexdump(bytes(32), highlight=marks)._repr_html_()


def test_the_tcp_sequence_plot_puts_each_segment_where_analyze_counted_it() -> None:
    """viz.tcp_seq_time of siw_crc_rping: one point per TCP segment with data (both directions), the three the
    server sent again as the orange crosses, each at its time and its place in the direction's octets; the
    connection chosen by default is the one with segments sent again; a connection that is not there is named."""
    from pathlib import Path

    from rdmalab.capture.analysis import analyze
    from rdmalab.viz import tcp_seq_time

    a = analyze(Path(__file__).resolve().parents[2] / "captures" / "siw_crc_rping.pcap")
    pts = a.iwarp_seq_time[0]
    plot = tcp_seq_time(a)
    ax = plot.figure.axes[0]
    offsets = {c.get_label(): c.get_offsets() for c in ax.collections}
    again = offsets.pop("sent again")
    want = sorted((t * 1e3, q) for t, q, k in zip(pts["t"].tolist(), pts["seq"].tolist(), pts["kind"].tolist(),
                                                  strict=True) if k == 1)
    got = sorted(map(tuple, again.tolist()))
    assert [q for _t, q in got] == [q for _t, q in want] == [200, 416, 632]
    assert [t for t, _q in got] == pytest.approx([t for t, _q in want])
    assert len(again) == 3 and sum(len(v) for v in offsets.values()) == len(pts["t"]) - 3
    assert set(offsets) == {"10.0.0.2:56885 \u2192 10.0.0.1:7174", "10.0.0.1:7174 \u2192 10.0.0.2:56885"}
    assert "(ms)" in ax.get_xlabel() and "<svg" in plot.to_svg()
    with pytest.raises(ValueError, match=r"connection 3: not an iWARP connection .* \(those are \[0\]\)"):
        tcp_seq_time(a, 3)
