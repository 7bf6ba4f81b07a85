"""The ladder's layout (issue 36, items 1 and 2): no two labels overlap, no arrow, arrowhead or loss cross
touches a label, and every packet has a row of its own however coarse the clock.

Checked on the geometry the ladder computes (:meth:`Ladder.layout`, the same one :meth:`Ladder.to_svg`
draws: the test also holds the SVG to it), with this file's own intersection tests, on the traces of
notebook 09 (the NAK run, the timeout run, the READ under loss, the WRITE of "the same on the kernel")
and notebook 13 (the WRITE then READ), reproduced here with the soft engine, and on 13's capture with
every timestamp made equal (a live capture's clock).
"""

from __future__ import annotations

import dataclasses
import math
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from typing import Any

import pytest

from rdmalab import viz
from rdmalab.lab import replays
from rdmalab.lab.transfer import run_transfer
from rdmalab.live import labruns
from rdmalab.viz.ladder import Ladder, text_width

Point = tuple[float, float]
SVG = "{http://www.w3.org/2000/svg}"


def _cross(o: Point, a: Point, b: Point) -> float:
    return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])


def _segments_meet(p: Point, q: Point, r: Point, s: Point) -> bool:
    d1, d2, d3, d4 = _cross(r, s, p), _cross(r, s, q), _cross(p, q, r), _cross(p, q, s)
    if ((d1 > 0) != (d2 > 0)) and ((d3 > 0) != (d4 > 0)) and 0 not in (d1, d2, d3, d4):
        return True
    return any(d == 0 and min(a[0], b[0]) <= c[0] <= max(a[0], b[0]) and min(a[1], b[1]) <= c[1] <= max(a[1], b[1])
               for d, a, b, c in ((d1, r, s, p), (d2, r, s, q), (d3, p, q, r), (d4, p, q, s)))


def _inside(pt: Point, poly: Sequence[Point]) -> bool:
    signs = {_cross(poly[i], poly[(i + 1) % len(poly)], pt) > 0 for i in range(len(poly))}
    return len(signs) == 1


def _edges(poly: Sequence[Point]) -> list[tuple[Point, Point]]:
    return [(poly[i], poly[(i + 1) % len(poly)]) for i in range(len(poly))] if len(poly) > 2 else [(poly[0], poly[1])]


def _touch(p: Sequence[Point], q: Sequence[Point]) -> bool:
    """Whether two convex shapes (a segment is two points) share a point: an edge of one crosses an edge of
    the other, or one lies inside the other."""
    if any(_segments_meet(a, b, c, d) for a, b in _edges(p) for c, d in _edges(q)):
        return True
    return (len(q) > 2 and _inside(p[0], q)) or (len(p) > 2 and _inside(q[0], p))


def problems(lad: Ladder) -> list[str]:
    lay = lad.layout()
    bad = [f"no free place for {t!r}" for t in lay.unplaced]
    labels = lay.labels
    for i, a in enumerate(labels):
        for b in labels[i + 1:]:
            if _touch(a.corners, b.corners):
                bad.append(f"labels {a.text!r} and {b.text!r} overlap")
    for b in labels:
        for s in lay.segments:
            if _touch(b.corners, ((s.x0, s.y0), (s.x1, s.y1))):
                bad.append(f"the arrow of {lad.arrows[s.owner or 0].label!r} crosses label {b.text!r}")
        for what, shapes in (("an arrowhead", lay.heads), ("a loss cross", lay.crosses), ("a marker", lay.dots)):
            for sh in shapes:
                if _touch(b.corners, sh):
                    bad.append(f"{what} at {sh[0]} touches label {b.text!r}")
        if b.kind == "arrow":
            for s in lay.lifelines:
                if _touch(b.corners, ((s.x0, s.y0), (s.x1, s.y1))):
                    bad.append(f"a node's line crosses label {b.text!r}")
    return bad


def _soft_write_read() -> list[Any]:
    return list(labruns.run_scenario("write_read", backend="soft", size=5000, seed=11).packets())


def _live_write() -> Any:
    for attempt in range(1, 7):  # notebook 09's "the same on the kernel" cell, on the soft engine
        live = run_transfer(op="WRITE", size=8192, mtu=1024, loss=0.1, seed=attempt, backend="soft")
        if live.stats()["requests resent"]:
            return live
    raise AssertionError("no seed of 1-6 resent a request")


LADDERS = {
    "09-nak": lambda: replays.nak_run().ladder(title="One packet lost in the middle of a WRITE"),
    "09-timeout": lambda: replays.timeout_run().ladder(title="The tail of a message lost: a timeout, then go-back-N"),
    "09-read": lambda: run_transfer(op="READ", size=5000, mtu=1024, loss=0.1, seed=3, backend="soft").ladder,
    "09-live": lambda: _live_write().ladder,
    "13-write-read": lambda: viz.ladder(_soft_write_read(), title="RDMA WRITE then READ, soft engine"),
    "13-equal-times": lambda: viz.ladder([dataclasses.replace(p, timestamp=1.5) for p in _soft_write_read()],
                                         title="every timestamp equal"),
}


@pytest.mark.parametrize("name", list(LADDERS))
def test_no_label_overlaps_and_no_arrow_crosses_a_label(name: str) -> None:
    lad = LADDERS[name]()
    assert lad.arrows
    assert problems(lad) == []


def test_every_packet_has_its_own_row_however_coarse_the_clock() -> None:
    """Notebook 13: five WRITE packets with one timestamp were drawn on one row, their labels on top of each
    other, one arrow visible where there were five."""
    pkts = _soft_write_read()
    for lad in (viz.ladder(pkts), viz.ladder([dataclasses.replace(p, timestamp=1.5) for p in pkts])):
        lay = lad.layout()
        rows = sorted((s.y0, s.y1) for s in lay.segments)
        assert len(rows) == len(pkts) == len(set(rows))
        assert all(b[0] - a[0] >= lad.row for a, b in zip(rows, rows[1:], strict=False))  # a row apart at least
        boxes = [b for b in lay.labels if b.kind == "arrow"]
        assert sorted(b.text for b in boxes) == sorted(a.label for a in lad.arrows)


def test_the_svg_draws_the_layout() -> None:
    """The pictures are what the geometry says: each arrow's line and label where the layout put them."""
    lad = LADDERS["09-timeout"]()
    lay = lad.layout()
    root = ET.fromstring(lad.to_svg())
    lines = {(round(float(e.get("x1", 0)), 1), round(float(e.get("y1", 0)), 1), round(float(e.get("x2", 0)), 1),
              round(float(e.get("y2", 0)), 1)) for g in root.iter(f"{SVG}g") if "rdmalab-arrow" in (g.get("class") or "")
             for e in g.iter(f"{SVG}line")}
    assert lines == {(round(s.x0, 1), round(s.y0, 1), round(s.x1, 1), round(s.y1, 1)) for s in lay.segments}
    texts = {(round(float(t.get("x", 0)), 1), round(float(t.get("y", 0)), 1), "".join(t.itertext()))
             for g in root.iter(f"{SVG}g") if "rdmalab-label" in (g.get("class") or "") for t in g.iter(f"{SVG}text")}
    assert texts == {(round(b.x, 1), round(b.y, 1), b.text) for b in lay.labels if b.kind == "arrow"}
    assert (int(root.get("width", 0)), int(root.get("height", 0))) == (lay.width, lay.height)


def test_the_checks_here_can_fail() -> None:
    """A ladder drawn with a label pushed onto another arrow, and two packets forced onto one row, is caught."""
    lad = LADDERS["09-nak"]()
    lay = lad.layout()
    boxes = [b for b in lay.labels if b.kind == "arrow"]
    moved = dataclasses.replace(boxes[1], x=boxes[0].x, y=boxes[0].y)
    assert _touch(moved.corners, boxes[0].corners)
    seg = lay.segments[0]
    on_line = dataclasses.replace(boxes[1], x=(seg.x0 + seg.x1) / 2, y=(seg.y0 + seg.y1) / 2)
    assert _touch(on_line.corners, ((seg.x0, seg.y0), (seg.x1, seg.y1)))


def test_the_label_widths_are_the_fonts() -> None:
    """The boxes are as wide as DejaVu Sans draws the text (measured with the font file, when matplotlib has it)."""
    ft2font = pytest.importorskip("matplotlib.ft2font")
    fm = pytest.importorskip("matplotlib.font_manager")
    font = ft2font.FT2Font(fm.findfont("DejaVu Sans"))
    for text in ("WRITE Middle PSN 7589670", "NAK: PSN Sequence Error PSN 105", "ACK PSN 106",
                 "timeout: resend from PSN 100", "\u2248 +67.107 ms", "+2.693 \u00b5s"):
        units = sum(font.load_char(ord(c), flags=ft2font.LoadFlags.NO_SCALE).horiAdvance for c in text)
        assert math.isclose(text_width(text, 11), units / font.units_per_EM * 11, rel_tol=0.001), text
    bold = ft2font.FT2Font(fm.findfont("DejaVu Sans:bold"))
    units = sum(bold.load_char(ord(c), flags=ft2font.LoadFlags.NO_SCALE).horiAdvance for c in "lost")
    assert units / bold.units_per_EM * 11 <= text_width("lost", 11, bold=True) < units / bold.units_per_EM * 11 * 1.05
