"""Ladder (sequence) diagrams drawn from the engine's trace or from a capture.

One vertical line per node, time running down.  Every packet is an arrow from the moment it
left its sender to the moment it arrived; a packet the fabric lost ends in a cross half way.
Requests are blue, responses and ACKs green, NAKs and RNR NAKs red, CNPs purple, and
retransmissions are dashed orange.  Timeouts, retransmission restarts and work completions are
marked on the node's line.  The output is a standalone SVG (``_repr_svg_``), so it renders
without a kernel in JupyterLab and in the book.

Time is drawn compressed: a gap longer than a few rows (a retransmission timeout is thousands
of times longer than a packet time) is cut, and the cut is labelled with the real gap.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from rdmalab.wire.errors import DecodeError
from rdmalab.wire.frame import decode_ethernet
from rdmalab.wire.ib import AETH, BTH
from rdmalab.wire.net import TCP, is_retransmission, seq_add, seq_max, tcp_flag_names
from rdmalab.wire.opcodes import CNP_OPCODE, OPCODES, Op, opcode_name

COLOURS = {
    "request": "#1565c0",
    "response": "#2e7d32",
    "ack": "#2e7d32",
    "nak": "#c62828",
    "rnr": "#ad1457",
    "cnp": "#6a1b9a",
    "retx": "#ef6c00",
    "other": "#555555",
}


#: A white outline under every label, so a label stays readable where an arrow crosses it.
_HALO = ' stroke="white" stroke-width="3" stroke-linejoin="round" paint-order="stroke"'


#: DejaVu Sans advance widths (font units, 2048 to the em) of the characters a ladder writes; the SVG asks for
#: DejaVu Sans first, and a wider guess than Arial's keeps the boxes honest where that is the font used.
_ADVANCE = dict(zip(
    " !\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~",
    (651, 821, 942, 1716, 1303, 1946, 1597, 563, 799, 799, 1024, 1716, 651, 739, 651, 690, *[1303] * 10, 690, 690,
     1716, 1716, 1716, 1087, 2048, 1401, 1405, 1430, 1577, 1294, 1178, 1587, 1540, 604, 604, 1343, 1141, 1767, 1532,
     1612, 1235, 1612, 1423, 1300, 1251, 1499, 1401, 2025, 1403, 1251, 1403, 799, 690, 799, 1716, 1024, 1024, 1255,
     1300, 1126, 1300, 1260, 721, 1300, 1298, 569, 569, 1186, 569, 1995, 1298, 1253, 1300, 1300, 842, 1067, 803,
     1298, 1212, 1675, 1212, 1212, 1075, 1303, 690, 1303, 1716), strict=True))
_ADVANCE.update({"\u00b7": 651, "\u2192": 1716, "\u2248": 1716, "\u00b5": 1303, "\u2026": 2048, "\u2013": 1024})


def text_width(text: str, size: float = 11, *, bold: bool = False) -> float:
    """The width in px of ``text`` in DejaVu Sans at ``size`` px (bold: about 17 % wider)."""
    return sum(_ADVANCE.get(c, 2048) for c in text) / 2048 * size * (1.17 if bold else 1.0)


Point = tuple[float, float]


@dataclass(frozen=True)
class LabelBox:
    """Where a text is drawn: a rectangle turned ``angle`` degrees about the middle of its baseline (x, y)."""

    text: str
    x: float
    y: float
    width: float
    size: float
    angle: float = 0.0
    anchor: str = "middle"  # the SVG text-anchor the box was computed for
    kind: str = "arrow"  # arrow, marker, time, node, title
    owner: int | None = None  # the arrow's (or marker's) index

    @property
    def corners(self) -> tuple[Point, Point, Point, Point]:
        a = math.radians(self.angle)
        ux, uy = math.cos(a), math.sin(a)
        nx, ny = math.sin(a), -math.cos(a)  # "up" in the text's own frame
        left = {"start": 0.0, "end": -self.width}.get(self.anchor, -self.width / 2)
        right = left + self.width
        up, down = 0.78 * self.size, 0.24 * self.size  # ascent and descent of DejaVu Sans (no accents)
        return ((self.x + ux * left + nx * up, self.y + uy * left + ny * up),
                (self.x + ux * right + nx * up, self.y + uy * right + ny * up),
                (self.x + ux * right - nx * down, self.y + uy * right - ny * down),
                (self.x + ux * left - nx * down, self.y + uy * left - ny * down))


@dataclass(frozen=True)
class Segment:
    """A straight line of the drawing: an arrow's (``kind`` is the arrow's kind) or a node's lifeline."""

    x0: float
    y0: float
    x1: float
    y1: float
    kind: str = "arrow"
    owner: int | None = None


@dataclass
class Layout:
    """Everything :meth:`Ladder.layout` placed, in SVG pixels: what the SVG draws, and what a test can check."""

    width: int
    height: int
    left: float
    xs: dict[str, float]
    ys: dict[tuple[int, int], float]
    labels: list[LabelBox]
    segments: list[Segment]  # the arrows' lines (a lost one to its cross)
    heads: list[tuple[Point, Point, Point, Point]]  # a square around each arrowhead
    crosses: list[tuple[Point, Point, Point, Point]]  # a square around each loss cross
    dots: list[tuple[Point, Point, Point, Point]]  # a square around each marker's dot or cross
    lifelines: list[Segment]
    breaks: list[tuple[float, int]]
    unplaced: list[str] = field(default_factory=list)  # labels that found no free place (drawn anyway)


def _square(x: float, y: float, r: float) -> tuple[Point, Point, Point, Point]:
    return ((x - r, y - r), (x + r, y - r), (x + r, y + r), (x - r, y + r))


def _project(poly: Sequence[Point], ax: float, ay: float) -> tuple[float, float]:
    ps = [px * ax + py * ay for px, py in poly]
    return min(ps), max(ps)


def polygons_overlap(p: Sequence[Point], q: Sequence[Point], gap: float = 0.0) -> bool:
    """Whether two convex polygons (a segment is a two-point polygon) come closer than ``gap`` px (the
    separating axis test: they are apart when some edge's normal separates their shadows)."""
    for poly in (p, q):
        n = len(poly)
        for i in range(n if n > 2 else 1):
            (x0, y0), (x1, y1) = poly[i], poly[(i + 1) % n]
            ax, ay = y0 - y1, x1 - x0
            norm = math.hypot(ax, ay)
            if norm == 0:
                continue
            ax, ay = ax / norm, ay / norm
            a0, a1 = _project(p, ax, ay)
            b0, b1 = _project(q, ax, ay)
            if a1 + gap <= b0 or b1 + gap <= a0:
                return False
    if len(p) == 2 and len(q) == 2:  # two segments: the axis along one of them may separate them too
        for (x0, y0), (x1, y1) in (p, q):
            ax, ay = x1 - x0, y1 - y0
            norm = math.hypot(ax, ay)
            if norm and (lambda a, b: a[1] + gap <= b[0] or b[1] + gap <= a[0])(
                    _project(p, ax / norm, ay / norm), _project(q, ax / norm, ay / norm)):
                return False
    return True


_RNR_DELAY = re.compile(r"RNR NAK[^A-Z]*?[\d.]+ ?[mµu]?s|RNR NAK, timer [^)\n]*\)?")


@dataclass
class Arrow:
    src: str
    dst: str
    t0: int  # ns
    t1: int | None  # ns; None when lost
    label: str
    kind: str = "request"
    lost: bool = False
    note: str = ""  # hover text
    psn: int | None = None
    opcode: int | None = None


@dataclass
class Marker:
    node: str
    t: int
    label: str
    kind: str = "info"  # timeout, retx, completion, error, posted, state, info
    note: str = ""


@dataclass
class Ladder:
    """A sequence diagram; ``nodes`` left to right."""

    nodes: list[str]
    arrows: list[Arrow] = field(default_factory=list)
    markers: list[Marker] = field(default_factory=list)
    title: str | None = None
    spacing: int = 320
    row: int = 20  # the least vertical step: two parallel arrows a row apart leave room for a label between them
    times: bool = True  # the time axis and the lengths of the cut gaps (False: see without_times)

    # ------------------------------------------------------------------ layout
    def _transit(self) -> int:
        """The typical one-way time of a delivered packet (a lost one is drawn with this slope)."""
        transits = sorted(a.t1 - a.t0 for a in self.arrows if a.t1 is not None and a.t1 > a.t0)
        return transits[len(transits) // 2] if transits else 0

    def _lost_end(self, a: Arrow) -> int:
        """Where a lost packet's arrow stops: half a typical transit after it left."""
        return a.t0 + self._transit() // 2

    def _real_times(self) -> set[int]:
        ts = {m.t for m in self.markers}
        for a in self.arrows:
            ts.add(a.t0)
            if a.t1 is not None:
                ts.add(a.t1)
        return ts

    def _keys(self) -> tuple[list[tuple[tuple[int, int], tuple[int, int]]], list[tuple[int, int]]]:
        """The rows of the drawing.  Each arrow's departure and arrival, and each marker, is a key (time, k):
        packets that left at the same instant (a capture's timestamps are coarse; a burst) get k = 0, 1, 2, ...
        in their order, so that every packet has a row of its own however coarse the clock.  An arrival at the
        instant a reply leaves shares its row (k = 0 both): the reply is seen to answer it."""
        departed: dict[int, int] = {}
        arrived: dict[int, int] = {}
        ends: list[tuple[tuple[int, int], tuple[int, int]]] = []
        for a in self.arrows:
            k0 = departed.get(a.t0, 0)
            departed[a.t0] = k0 + 1
            t1 = a.t1 if a.t1 is not None else self._lost_end(a)
            if t1 == a.t0:  # a level arrow (one capture point): it arrives on its own row
                ends.append(((a.t0, k0), (a.t0, k0)))
                continue
            k1 = arrived.get(t1, 0)
            arrived[t1] = k1 + 1
            ends.append(((a.t0, k0), (t1, k1)))
        return ends, [(m.t, 0) for m in self.markers]

    def _ymap(self, top: float, stretch: float = 1.0) -> tuple[dict[tuple[int, int], float], list[tuple[float, int]]]:
        """Row -> y.  The scale is the typical one-way transit time: a gap up to a few transits is drawn to
        scale (so an arrow's slope shows its latency), a longer gap is cut and labelled; rows of one instant
        are a row apart.  ``stretch`` draws a transit taller (more room between crossing arrows)."""
        ends, marks = self._keys()
        keys = sorted({k for pair in ends for k in pair} | set(marks))
        y: dict[tuple[int, int], float] = {}
        breaks: list[tuple[float, int]] = []
        if not keys:
            return y, breaks
        times = sorted({t for t, _ in keys})
        transits = sorted(a.t1 - a.t0 for a in self.arrows if a.t1 is not None and a.t1 > a.t0)
        gaps = sorted(b - a for a, b in zip(times, times[1:], strict=False) if b > a)
        scale = max(transits[len(transits) // 2] if transits else (gaps[len(gaps) // 2] if gaps else 1), 1)
        per_transit = 4 * self.row * stretch  # one typical transit is drawn 4 rows tall
        cur = float(top)
        prev = keys[0]
        y[prev] = cur
        for key in keys[1:]:
            gap = key[0] - prev[0]
            if gap == 0:
                cur += self.row
            elif gap > 8 * scale:
                breaks.append((cur + 1.5 * self.row, gap))
                cur += 3 * self.row
            else:
                cur += max(self.row, gap / scale * per_transit)
            y[key] = cur
            prev = key
        return y, breaks

    def layout(self) -> Layout:
        """Where everything goes.  Every label is placed where no line, arrowhead, cross, dot or other label
        touches it: along its own arrow (at its middle if that is free, else at the free place nearest the
        middle, above the line or below it).  When an arrow has no free place, the nodes are drawn further
        apart and the time axis taller (up to 1.6 and 3 times), which opens the gaps between crossing arrows;
        a label that still finds no place is named in ``unplaced``."""
        best: Layout | None = None
        for stretch, wider in ((1.0, 1.0), (1.0, 1.3), (1.5, 1.0), (1.5, 1.3), (2.0, 1.3), (1.5, 1.6), (2.0, 1.6),
                               (3.0, 1.6)):
            lay = self._layout(stretch, int(self.spacing * wider))
            if not lay.unplaced:
                return lay
            if best is None or len(lay.unplaced) < len(best.unplaced):
                best = lay
        assert best is not None
        return best

    def _layout(self, stretch: float, spacing: int) -> Layout:
        top = 46 if self.title else 30
        ys, breaks = self._ymap(top + 14, stretch)
        ends, mark_keys = self._keys()
        times = self._time_labels(ys, breaks)
        left = max([70.0] + [text_width(text, 10) + 16 for _, text, _ in times])
        height = int(max(ys.values(), default=top) + 40)

        def margin(node: str | None) -> float:
            widths = [text_width(m.label, 10) + 24 for m in self.markers if m.node == node]
            return max([60.0] + widths)

        first = self.nodes[0] if self.nodes else None
        last = self.nodes[-1] if self.nodes else None
        x0 = left + margin(first)
        xs = {n: x0 + i * spacing for i, n in enumerate(self.nodes)}
        width = int(x0 + (len(self.nodes) - 1) * spacing + (margin(last) if len(self.nodes) > 1 else 0) + 10)
        lay = Layout(width, height, left, xs, ys, [], [], [], [], [], [], breaks)
        if self.title:
            lay.labels.append(LabelBox(self.title, width / 2, 18, text_width(self.title, 13, bold=True), 13,
                                       kind="title"))
        for n, x in xs.items():
            lay.labels.append(LabelBox(n, x, top, text_width(n, 11, bold=True), 11, kind="node"))
            lay.lifelines.append(Segment(x, top + 6, x, height - 10, "lifeline"))
        for y, text, _colour in times:
            lay.labels.append(LabelBox(text, left - 8, y + 4, text_width(text, 10), 10, anchor="end", kind="time"))
        # the lines first: every label is then placed clear of all of them
        rises = sorted(ys[e1] - ys[e0] for a, (e0, e1) in zip(self.arrows, ends, strict=True)
                       if a.t1 is not None and not a.lost)
        rise = rises[len(rises) // 2] if rises else 4.0 * self.row * stretch
        spans: list[tuple[int, float, float, float, float]] = []  # (arrow, x0, y0, x1, y1) of the full path
        for i, (a, (e0, e1)) in enumerate(zip(self.arrows, ends, strict=True)):
            if a.src not in xs or a.dst not in xs:
                continue
            xa, xb, ya = xs[a.src], xs[a.dst], ys[e0]
            if a.lost:
                full = self._lost_rise(a, ys, ends, rise)
                yb = ya + full
                xm, ym = (xa + xb) / 2, ya + max(full / 2, self.row / 2)
                lay.segments.append(Segment(xa, ya, xm, ym, a.kind, i))
                lay.crosses.append(_square(xm, ym, 6))
            else:
                yb = ys[e1]
                lay.segments.append(Segment(xa, ya, xb, yb, a.kind, i))
                lay.heads.append(_square(xb - 5 * (1 if xb >= xa else -1), yb, 5))
            spans.append((i, xa, ya, xb, yb))
        for j, (m, key) in enumerate(zip(self.markers, mark_keys, strict=True)):
            if m.node not in xs:
                continue
            x, y = xs[m.node], ys[key]
            outer = -1 if list(xs).index(m.node) == 0 else 1
            lay.dots.append(_square(x, y, 6 if m.kind == "timeout" else 4))
            lay.labels.append(LabelBox(m.label, x + outer * 12, y + 4, text_width(m.label, 10), 10,
                                       anchor="end" if outer < 0 else "start", kind="marker", owner=j))
        obstacles: list[Sequence[Point]] = [((s.x0, s.y0), (s.x1, s.y1)) for s in lay.segments + lay.lifelines]
        obstacles += lay.heads + lay.crosses + lay.dots
        placed: list[Sequence[Point]] = [b.corners for b in lay.labels]
        for i, xa, ya, xb, yb in spans:
            a = self.arrows[i]
            box = self._place(a, i, xa, ya, xb, yb, obstacles, placed, width, height)
            if box is None:
                lay.unplaced.append(a.label)
                box = self._candidates(a, i, xa, ya, xb, yb)[0]
            lay.labels.append(box)
            placed.append(box.corners)
        return lay

    def _time_labels(self, ys: dict[tuple[int, int], float], breaks: list[tuple[float, int]]) -> list[tuple[float, str, str]]:
        """(y, text, colour) of the time axis: one label per instant at least a row below the last one, and
        the length of every cut; after a cut, times read "+86 ns" from the first instant below it."""
        out: list[tuple[float, str, str]] = []
        if not self.times:
            return out
        drawn_only = {self._lost_end(a) for a in self.arrows if a.t1 is None} - self._real_times()
        last_label = -1e9
        base: int | None = None
        cuts = sorted(y for y, _ in breaks)
        for (t, k), y in sorted(ys.items()):
            if k or t in drawn_only:
                continue  # a second row of one instant; or where a lost arrow stops, not a moment anything happened
            if cuts and y > cuts[0]:
                while cuts and y > cuts[0]:
                    cuts.pop(0)
                base = t
            if y - last_label >= self.row:
                out.append((y, _fmt_time(t) if base is None or t == base else f"+{_fmt_time(t - base)}", "#888"))
                last_label = y
        out += [(y, f"\u2248 +{_fmt_time(gap)}", "#c62828") for y, gap in breaks]
        return out

    @staticmethod
    def _label_text(a: Arrow, short: bool = False) -> tuple[str, float]:
        """The label's text and width: a lost packet's ends in a bold "lost"; ``short``, it is only "PSN n lost"
        (the opcode is in its hover text)."""
        label = f"PSN {a.psn}" if short and a.psn is not None else a.label
        if not a.lost:
            return label, text_width(label, 11)
        return label + " lost", text_width(label + " ", 11) + text_width("lost", 11, bold=True)

    def _candidates(self, a: Arrow, i: int, xa: float, ya: float, xb: float, yb: float,
                    short: bool = False) -> list[LabelBox]:
        """Where a label may go along its arrow, best first: the middle, then ever further from it, above the
        line before below it.  A lost packet's label may also use the rest of the path it did not finish."""
        text, w = self._label_text(a, short)
        rightward = xb >= xa
        if xb < xa:
            xa, ya, xb, yb = xb, yb, xa, ya
        length = math.hypot(xb - xa, yb - ya) or 1.0
        ux, uy = (xb - xa) / length, (yb - ya) / length
        nx, ny = uy, -ux  # the normal that points up the page
        if ny > 0:
            nx, ny = -nx, -ny
        angle = math.degrees(math.atan2(yb - ya, xb - xa))
        lo, hi = w / 2 + 10, length - w / 2 - 10
        mid = (length / 4 if rightward else 3 * length / 4) if a.lost else length / 2  # the drawn part's middle
        offsets = [0.0] + [s * d for d in range(6, int(length) + 6, 6) for s in (-1, 1)]
        ranked: list[tuple[int, int, float, LabelBox]] = []
        for off in offsets:
            c = min(max(mid + off, lo), hi) if lo <= hi else mid
            if lo <= hi and abs(c - (mid + off)) > 0.01:
                continue
            for k, side in enumerate((3 + 0.24 * 11, -(3 + 0.78 * 11))):  # baseline above the line, or text below
                box = LabelBox(text, xa + ux * c + nx * side, ya + uy * c + ny * side, w, 11, angle, kind="arrow",
                               owner=i)
                # near the middle above, near the middle below, then further along: a label kept on the side its
                # neighbours use leaves the band below free for the next arrow of a burst
                ranked.append((abs(off) > 90, k, abs(off), box))
        out = [box for *_, box in sorted(ranked, key=lambda r: r[:3])]
        return out or [LabelBox(text, (xa + xb) / 2, (ya + yb) / 2 - 4, w, 11, angle, kind="arrow", owner=i)]

    def _place(self, a: Arrow, i: int, xa: float, ya: float, xb: float, yb: float,
               obstacles: list[Sequence[Point]], placed: list[Sequence[Point]], width: int, height: int) -> LabelBox | None:
        shorter = [True] if a.lost and a.psn is not None else []
        for box in (b for short in [False, *shorter] for b in self._candidates(a, i, xa, ya, xb, yb, short)):
            corners = box.corners
            if any(not (0 <= x <= width and 0 <= y <= height) for x, y in corners):
                continue
            if any(polygons_overlap(corners, o, 1.0) for o in obstacles):
                continue
            if any(polygons_overlap(corners, p, 5.0) for p in placed):  # apart enough not to read as one
                continue
            return box
        return None

    def _lost_rise(self, lost: Arrow, ys: dict[tuple[int, int], float],
                   ends: list[tuple[tuple[int, int], tuple[int, int]]], rise: float) -> float:
        """How far down a lost packet's arrow would have run: the mean of the delivered arrows of the same
        direction sent just before and just after it (the one there is, when only one is), so that it runs
        between its neighbours and its label has room on both sides."""
        same = sorted(((a, e) for a, e in zip(self.arrows, ends, strict=True)
                       if not a.lost and a.t1 is not None and (a.src, a.dst) == (lost.src, lost.dst)),
                      key=lambda ae: ae[0].t0)
        near = [ae for ae in same if ae[0].t0 <= lost.t0][-1:] + [ae for ae in same if ae[0].t0 > lost.t0][:1]
        if not near:
            return rise
        return sum(ys[e1] - ys[e0] for _, (e0, e1) in near) / len(near)

    # ------------------------------------------------------------------ SVG
    def to_svg(self) -> str:
        lay = self.layout()
        width, height = lay.width, lay.height
        out = [
            f'<svg xmlns="http://www.w3.org/2000/svg" class="rdmalab-ladder" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="DejaVu Sans, Arial, sans-serif" font-size="11">',
            "<defs>",
        ]
        for kind, colour in COLOURS.items():
            out.append(f'<marker id="ah-{kind}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
                       f'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="{colour}"/></marker>')
        out.append("</defs>")
        out.append(f'<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>')
        for b in lay.labels:
            if b.kind == "title":
                out.append(f'<text x="{b.x}" y="{b.y}" text-anchor="middle" font-size="13" font-weight="bold">'
                           f"{html.escape(b.text)}</text>")
            elif b.kind == "node":
                out.append(f'<text x="{b.x}" y="{b.y}" text-anchor="middle" font-weight="bold">{html.escape(b.text)}</text>')
            elif b.kind == "time":
                colour = "#c62828" if b.text.startswith("\u2248") else "#888"
                out.append(f'<text x="{b.x}" y="{b.y}" text-anchor="end" fill="{colour}" font-size="10">'
                           f"{html.escape(b.text)}</text>")
        for s in lay.lifelines:
            out.append(f'<line x1="{s.x0}" y1="{s.y0}" x2="{s.x1}" y2="{s.y1}" stroke="#999" stroke-width="1.5"/>')
        for y, _ in lay.breaks:
            out.append(f'<line x1="{lay.left}" y1="{y}" x2="{width - 20}" y2="{y}" stroke="#ddd" stroke-dasharray="2,4"/>')
        # Lines first, labels on top (each placed clear of every line anyway)
        for s in lay.segments:
            a = self.arrows[s.owner or 0]
            colour = COLOURS.get(a.kind, COLOURS["other"])
            dash = ' stroke-dasharray="6,3"' if a.kind == "retx" else ""
            head = "" if a.lost else f' marker-end="url(#ah-{a.kind if a.kind in COLOURS else "other"})"'
            out.append(f'<g class="rdmalab-arrow rdmalab-{a.kind}"><title>{html.escape(a.note or a.label)}</title>'
                       f'<line x1="{s.x0:.1f}" y1="{s.y0:.1f}" x2="{s.x1:.1f}" y2="{s.y1:.1f}" stroke="{colour}" '
                       f'stroke-width="1.5"{dash}{head}/></g>')
        for j, m in enumerate(self.markers):
            box = next((b for b in lay.labels if b.kind == "marker" and b.owner == j), None)
            if box is not None:
                out.append(self._marker_svg(m, box))
        for (x0, y0), _, (x1, y1), _ in lay.crosses:
            xm, ym = (x0 + x1) / 2, (y0 + y1) / 2
            out.append(f'<path d="M{xm - 5:.1f},{ym - 5:.1f} L{xm + 5:.1f},{ym + 5:.1f} M{xm - 5:.1f},{ym + 5:.1f} '
                       f'L{xm + 5:.1f},{ym - 5:.1f}" stroke="#c62828" stroke-width="2.5"/>')
        for b in lay.labels:
            if b.kind != "arrow" or b.owner is None:
                continue
            a = self.arrows[b.owner]
            colour = COLOURS.get(a.kind, COLOURS["other"])
            text, tail = (b.text[:-len("lost")], '<tspan fill="#c62828" font-weight="bold">lost</tspan>') if a.lost \
                else (b.text, "")
            out.append(f'<g class="rdmalab-label rdmalab-{a.kind}"><title>{html.escape(a.note or a.label)}</title>'
                       f'<text x="{b.x:.1f}" y="{b.y:.1f}" text-anchor="middle" fill="{colour}" '
                       f'transform="rotate({b.angle:.2f} {b.x:.1f} {b.y:.1f})"{_HALO}>{html.escape(text)}{tail}'
                       f"</text></g>")
        out.append("</svg>")
        return "".join(out)

    def _marker_svg(self, m: Marker, box: LabelBox) -> str:
        x = box.x - 12 if box.anchor == "start" else box.x + 12
        y = box.y - 4
        colour = {"timeout": "#c62828", "retx": "#ef6c00", "completion": "#2e7d32", "error": "#c62828",
                  "posted": "#1565c0", "state": "#6d4c41"}.get(m.kind, "#555")
        shape = (f'<circle cx="{x}" cy="{y}" r="4" fill="{colour}"/>' if m.kind != "timeout" else
                 f'<path d="M{x - 6},{y - 6} L{x + 6},{y + 6} M{x - 6},{y + 6} L{x + 6},{y - 6}" stroke="{colour}" '
                 f'stroke-width="2"/>')
        return (f'<g class="rdmalab-marker rdmalab-{m.kind}"><title>{html.escape(m.note or m.label)}</title>{shape}'
                f'<text x="{box.x}" y="{box.y}" text-anchor="{box.anchor}" fill="{colour}" font-size="10"{_HALO}>'
                f"{html.escape(m.label)}</text></g>")

    def _repr_svg_(self) -> str:
        return self.to_svg()

    def without_times(self) -> Ladder:
        """The same ladder with no time axis, no lengths on the cut gaps, and no RNR NAK delay in any label
        or hover text: for a notebook whose exercise asks for a delay that the ladder would otherwise state."""
        def quiet(text: str) -> str:
            return _RNR_DELAY.sub("RNR NAK", text)

        arrows = [replace(a, label=quiet(a.label), note=quiet(a.label) if _RNR_DELAY.search(a.note) else a.note)
                  for a in self.arrows]
        return replace(self, arrows=arrows, markers=[replace(m, note=quiet(m.label)) for m in self.markers],
                       times=False)

    # ------------------------------------------------------------------ text forms
    def to_mermaid(self) -> str:
        """The same exchange as a Mermaid ``sequenceDiagram`` (for docs and slides)."""
        lines = ["sequenceDiagram"] + [f"    participant {n}" for n in self.nodes]
        items: list[tuple[int, int, str]] = []
        for i, a in enumerate(self.arrows):
            arrow = "-x" if a.lost else ("-->>" if a.kind == "retx" else "->>")
            items.append((a.t0, i, f"    {a.src}{arrow}{a.dst}: {a.label}"))
        for i, m in enumerate(self.markers):
            items.append((m.t, 10_000 + i, f"    Note over {m.node}: {m.label}"))
        lines += [s for _, _, s in sorted(items)]
        return "\n".join(lines)

    def text(self) -> str:
        rows: list[tuple[int, int, str]] = []

        def when(t: int) -> str:  # without_times(): no time column either
            return f"{_fmt_time(t):>12}  " if self.times else ""

        for i, a in enumerate(self.arrows):
            arrow = "--x" if a.lost else "-->"
            rows.append((a.t0, i, f"{when(a.t0)}{a.src} {arrow} {a.dst}  {a.label}"))
        for i, m in enumerate(self.markers):
            rows.append((m.t, 10_000 + i, f"{when(m.t)}[{m.node}] {m.label}"))
        return "\n".join(s for _, _, s in sorted(rows))

    def __repr__(self) -> str:
        return self.text()


def _fmt_time(ns: int) -> str:
    if ns >= 1_000_000:
        return f"{ns / 1e6:.3f} ms"
    if ns >= 1_000:
        return f"{ns / 1e3:.3f} \u00b5s"
    return f"{ns} ns"


def _kind_of(opcode: int | None, aeth: Any = None) -> str:
    """The arrow's colour class from the decoded packet: its opcode, and for an acknowledgement
    its decoded AETH (:class:`rdmalab.wire.ib.AETH`): NAK, RNR NAK or ACK."""
    if opcode is None:
        return "other"
    if opcode == CNP_OPCODE:
        return "cnp"
    info = OPCODES.get(opcode)
    if info is None:
        return "other"
    if info.op in (Op.ACKNOWLEDGE, Op.ATOMIC_ACKNOWLEDGE, Op.RDMA_READ_RESPONSE):
        if aeth is not None and aeth.is_rnr_nak:
            return "rnr"
        if aeth is not None and aeth.is_nak:
            return "nak"
        return "ack" if info.op != Op.RDMA_READ_RESPONSE else "response"
    return "request"


def _kind_from_syndrome_text(opcode: int | None, text: str | None) -> str:
    """Fallback for traces without frames (a trace recorded elsewhere): the completer's ``acked``
    event is all there is, and it carries the syndrome as text."""
    kind = _kind_of(opcode)
    if kind == "ack" and text:
        t = text.upper()
        return "rnr" if t.startswith("RNR NAK") else "nak" if t.startswith("NAK") else kind
    return kind


def _cm_of(pkt: Any) -> tuple[str, int] | None:
    """(message name, TID) of a decoded packet carrying a CM MAD, else None."""
    if pkt is None:
        return None
    name = next((layer.name[3:] for layer in getattr(pkt, "layers", []) if layer.name.startswith("CM_")), None)
    if name is None:
        return None
    mad = next((layer.header for layer in pkt.layers if layer.name == "MAD"), None)
    return name, int(getattr(mad, "tid", 0))


def _short_opcode(opcode: int | None) -> str:
    if opcode is None:
        return "?"
    name = opcode_name(opcode)
    for prefix in ("RC ", "UC ", "UD ", "XRC "):
        if name.startswith(prefix):
            name = name[len(prefix):]
    return name.replace("RDMA ", "").replace("Acknowledge", "ACK").replace(" Request", " Req").replace(
        " Response", " Resp").replace("with Immediate", "+Imm").replace("with Invalidate", "+Inv")


def _aeth_label(aeth: Any, names: bool = True) -> str:
    """'NAK: PSN Sequence Error', 'RNR NAK 0.64 ms', from the decoded AETH's fields; without ``names``,
    'NAK code 2' (for a page whose exercise asks the learner to name the code)."""
    if aeth.is_rnr_nak:
        return f"RNR NAK {aeth.rnr_timer_ms:g} ms"
    return f"NAK: {aeth.nak_name}" if names else f"NAK code {aeth.value}"


def _decoded(frame: bytes | None) -> Any:
    """The packet a trace event carries, decoded by rdmalab.wire (``None`` without a frame)."""
    if frame is None:
        return None

    try:
        return decode_ethernet(frame, lenient=True)
    except (DecodeError, ValueError):
        return None


def match_arrivals(events: list[Any]) -> dict[int, Any]:
    """For each ``sent`` event (by index), the ``received`` event of the same packet.

    Events share ``detail["packet_id"]`` (the fabric keeps it even for packets it carries as
    bytes).  An arrival without a usable id (a trace from elsewhere, or a second copy of a
    duplicated packet) is paired with the oldest unmatched sent packet of the same PSN and
    opcode from another node."""
    out: dict[int, Any] = {}
    by_id: dict[Any, int] = {}
    pending: dict[tuple[Any, Any], list[int]] = {}
    for i, e in enumerate(events):
        pid = e.detail.get("packet_id") if isinstance(e.detail, dict) else None
        if e.kind == "sent":
            if pid is not None:
                by_id[pid] = i
            pending.setdefault((e.psn, e.opcode), []).append(i)
        elif e.kind == "dropped" and pid in by_id:
            q = pending.get((e.psn, e.opcode), [])
            if by_id[pid] in q:
                q.remove(by_id[pid])
        elif e.kind == "received":
            i_sent = by_id.get(pid) if pid is not None else None
            q = pending.get((e.psn, e.opcode), [])
            if i_sent is None or i_sent in out:
                i_sent = next((j for j in q if events[j].node != e.node and events[j].time_ns <= e.time_ns), None)
            if i_sent is None:
                continue
            if i_sent in q:
                q.remove(i_sent)
            if i_sent in out:
                continue  # a duplicate copy; from_trace draws it separately
            out[i_sent] = e
    return out


def from_trace(trace: Iterable[Any], *, title: str | None = None, completions: bool = True, posted: bool = False,
               states: bool = False, nodes: list[str] | None = None, limit: int | None = None,
               names: bool = True) -> Ladder:
    """A ladder from engine trace events (:class:`rdmalab.verbs.trace.TraceEvent`).

    ``names=False`` labels a NAK with its code and an error completion as "failed", without the names an
    exercise on the page asks the learner to find (the hover text says no more)."""
    events = list(trace)
    order = nodes or []
    for e in events:
        if e.node not in order:
            order.append(e.node)
    sent: dict[Any, Arrow] = {}
    arrows: list[Arrow] = []
    markers: list[Marker] = []
    seen_psn: set[tuple[str, int | None, int | None]] = set()
    seen_cm: set[tuple[str, str, int]] = set()
    # Without frames (a trace recorded elsewhere), the completer's "acked" events say what an ACK was.
    syndromes: dict[tuple[str, int], str] = {}
    for e in events:
        if e.kind == "acked" and "syndrome" in e.detail:
            syndromes[(e.node, e.time_ns)] = str(e.detail["syndrome"])
    arrivals = match_arrivals(events)
    by_arrival = {id(ev): i for i, ev in arrivals.items()}
    arrow_of: dict[int, Arrow] = {}
    for idx, e in enumerate(events):
        pid = e.detail.get("packet_id") if isinstance(e.detail, dict) else None
        if e.kind == "received" and id(e) in by_arrival and by_arrival[id(e)] in arrow_of:
            a = arrow_of[by_arrival[id(e)]]
            a.dst = e.node
            a.t1 = e.time_ns
            _from_acked(a, syndromes.get((e.node, e.time_ns)))
            continue
        if e.kind == "sent":
            other = [n for n in order if n != e.node]
            dst = other[0] if other else e.node
            pkt = _decoded(e.frame)
            aeth = pkt.get(AETH) if pkt is not None else None
            kind = _kind_of(e.opcode, aeth)
            key = (e.node, e.psn, e.opcode)
            if kind == "request" and key in seen_psn:
                kind = "retx"
            seen_psn.add(key)
            label = f"{_short_opcode(e.opcode)} PSN {e.psn}"
            if aeth is not None and kind in ("nak", "rnr"):
                label = f"{_aeth_label(aeth, names)} PSN {e.psn}"
            cm = _cm_of(pkt)
            if cm is not None:  # a CM MAD to QP1: name the message; the same MAD again is a resend
                name, tid = cm
                kind = "retx" if (e.node, name, tid) in seen_cm else "cnp"
                label = f"CM {name}" + (" (again)" if kind == "retx" else "")
                seen_cm.add((e.node, name, tid))
            note = str(e) + (f"\n{aeth.syndrome_text()}" if aeth is not None else "")
            if not names and kind == "nak":
                note = label  # the hover text would name it
            if pkt is None and kind == "ack":
                kind = "ack?"  # no frame: decided when the completer's "acked" event arrives
            a = Arrow(e.node, dst, e.time_ns, None, label, kind, False, note, e.psn, e.opcode)
            arrows.append(a)
            arrow_of[idx] = a
            if pid is not None:
                sent[pid] = a
        elif e.kind in ("received", "dropped") and pid is not None and pid in sent:
            a = sent[pid]
            if e.kind == "received":
                if a.t1 is None:
                    a.dst = e.node
                    a.t1 = e.time_ns
                    _from_acked(a, syndromes.get((e.node, e.time_ns)))
                else:  # a duplicate copy arrived
                    arrows.append(Arrow(a.src, e.node, a.t0, e.time_ns, a.label + " (dup)", a.kind, False, a.note,
                                        a.psn, a.opcode))
            else:
                reason = e.detail.get("reason", "dropped")
                if e.node != a.src:
                    a.dst = e.node
                a.lost = True
                if "lost" in str(reason):
                    a.t1 = None  # lost on the way: drawn as stopping short of the receiver
                a.note += f"\ndropped: {reason}"
                if "lost" not in str(reason):
                    markers.append(Marker(e.node, e.time_ns, f"dropped: {reason}", "error", str(e)))
        elif e.kind == "retransmitted":
            reason = e.detail.get("reason", "")
            kind = "timeout" if "timeout" in str(reason).lower() else "retx"
            label = f"{'timeout' if kind == 'timeout' else 'go back'}: resend from PSN {e.psn}"
            if reason and kind != "timeout":
                label += f" ({reason})"
            markers.append(Marker(e.node, e.time_ns, label, kind, str(e)))
        elif e.kind == "completed" and completions:
            status = e.detail.get("status", 0)
            op = e.detail.get("wc_opcode", e.detail.get("opcode", ""))
            ok = status in (0, "success", "IBV_WC_SUCCESS")
            text = "ok" if ok else ((status if isinstance(status, str) else f"status {status}") if names else "failed")
            label = f"WC {_wc_name(op)} {text}".strip()
            markers.append(Marker(e.node, e.time_ns, label, "completion" if ok else "error",
                                  str(e) if names or ok else label))
        elif e.kind == "posted" and posted:
            markers.append(Marker(e.node, e.time_ns, f"post {e.detail.get('opcode', '')}", "posted", str(e)))
        elif e.kind == "state" and states:
            last = markers[-1] if markers else None
            if last is not None and last.kind == "state" and last.node == e.node and last.t == e.time_ns \
                    and last.label.endswith(str(e.detail.get("from"))):
                last.label += f" \u2192 {e.detail.get('to')}"  # INIT -> RTR -> RTS in one instant: one marker
            else:
                markers.append(Marker(e.node, e.time_ns, f"{e.detail.get('from')} \u2192 {e.detail.get('to')}",
                                      "state", str(e)))
        elif e.kind == "cm state" and states:
            text = str(e.detail.get("detail", "")).split(" ", 1)[-1]
            if text in ("established", "timewait", "closed"):
                markers.append(Marker(e.node, e.time_ns, f"CM {text}", "state", str(e)))
    for a in arrows:
        if a.kind == "ack?":
            a.kind = "ack"
    _spread_bursts(arrows)
    markers = _merge_markers(markers)
    if limit is not None:
        arrows = arrows[:limit]
        if arrows:
            t_end = max(a.t1 or a.t0 for a in arrows)
            markers = [m for m in markers if m.t <= t_end]
    return Ladder(order, arrows, markers, title)


def _merge_markers(markers: list[Marker]) -> list[Marker]:
    """Markers of one node at one instant become one ("WC SEND ok; RTS -> ERR"): drawn apart they overlap."""
    out: list[Marker] = []
    at: dict[tuple[str, int], Marker] = {}
    for m in markers:
        first = at.get((m.node, m.t))
        if first is None:
            at[(m.node, m.t)] = m
            out.append(m)
        elif m.label not in first.label:
            first.label += f"; {m.label}"
            first.note += f"\n{m.note}"
    return out


def _from_acked(a: Arrow, syndrome: str | None) -> None:
    """A frame-less ACK arrow learns what it was from the completer's ``acked`` event."""
    if a.kind != "ack?" or not syndrome:
        return
    a.kind = _kind_from_syndrome_text(a.opcode, syndrome)
    if a.kind != "ack":
        a.label = f"{syndrome.split(' (')[0].replace(', ', ': ').replace('RNR NAK: timer', 'RNR NAK')} PSN {a.psn}"


def _spread_bursts(arrows: list[Arrow]) -> None:
    """Packets a node sends at one instant leave the wire one after another: draw each one
    departing when it must have started to arrive when it did (arrival minus the burst's
    shortest transit), so their labels do not sit on top of each other."""
    groups: dict[tuple[str, int], list[Arrow]] = {}
    for a in arrows:
        groups.setdefault((a.src, a.t0), []).append(a)
    for group in groups.values():
        if len(group) < 2:
            continue
        delivered = [a.t1 - a.t0 for a in group if a.t1 is not None]
        transit = min(delivered) if delivered else 0
        departures = sorted(max(a.t0, a.t1 - transit) for a in group if a.t1 is not None)
        steps = sorted(b - a for a, b in zip(departures, departures[1:], strict=False) if b > a)
        step = steps[len(steps) // 2] if steps else 1  # one packet time on the wire
        prev = None
        for a in group:
            if a.t1 is None:  # lost: it left in its turn, one packet time after the one before it
                t = a.t0 if prev is None else prev + step
            else:
                t = max(a.t0, a.t1 - transit)
            if prev is not None and t <= prev:
                t = prev + 1
            a.t0 = t
            prev = t


_WC_OPCODES = {0: "SEND", 1: "RDMA_WRITE", 2: "RDMA_READ", 3: "COMP_SWAP", 4: "FETCH_ADD", 5: "BIND_MW",
               6: "LOCAL_INV", 9: "ATOMIC_WRITE", 128: "RECV", 129: "RECV_RDMA_WITH_IMM"}


def _wc_name(op: Any) -> str:
    if isinstance(op, int):
        return _WC_OPCODES.get(op, str(op))
    return str(op).replace("IBV_WC_", "")


def from_capture(packets: Iterable[Any], *, title: str | None = None, limit: int | None = 60,
                 transit_ns: int = 0, names: bool = True) -> Ladder:
    """A ladder from captured packets (``rdmalab.capture.read``): one capture point, so arrows are level
    unless ``transit_ns`` tilts them.  Nodes are the IP (or MAC) addresses.  ``names=False``: a NAK is
    labelled with its code, not its name."""

    arrows: list[Arrow] = []
    nodes: list[str] = []
    seen: set[tuple[str, int, int]] = set()
    tcp_sent: dict[str, int] = {}  # per sender: the TCP sequence number after the last byte seen
    for cp in packets:
        pkt = getattr(cp, "packet", cp)
        if pkt is None:
            continue
        src, dst = _endpoints(pkt)
        if src is None or dst is None:
            continue
        bth = pkt.get(BTH) if hasattr(pkt, "get") else None
        cm = next((layer.name[3:] for layer in getattr(pkt, "layers", []) if layer.name.startswith("CM_")), None)
        pdus = getattr(cp, "pdus", None) or []
        if cm is not None:
            label, kind, psn, op = f"CM {cm}", "cnp", None, None
        elif bth is None and pdus:
            label = "; ".join(p.summary().split(" [")[0][:40] for p in pdus[:2])
            kind, psn, op = "request", None, None
        elif bth is None and hasattr(pkt, "get") and pkt.get(TCP) is not None:
            tcp = pkt.get(TCP)  # iWARP's carrier: a handshake, a FIN, a bare ACK or part of an FPDU
            flags = "+".join(tcp_flag_names(tcp.flags & (TCP.SYN | TCP.FIN | TCP.RST | TCP.ACK)))
            label = f"TCP {flags}" + (f" ({pkt.payload_length} B)" if pkt.payload_length else "")
            kind = "ack" if tcp.flags & (TCP.SYN | TCP.FIN | TCP.RST) == 0 and not pkt.payload_length else "other"
            if is_retransmission(tcp.seq, pkt.payload_length, tcp_sent.get(src)):  # bytes seen going out before
                label, kind = f"TCP retransmission ({pkt.payload_length} B)", "retx"
            psn = op = None
        elif bth is None:
            label = pkt.summary() if hasattr(pkt, "summary") else "packet"
            kind = "other"
            psn = op = None
        else:
            aeth = pkt.get(AETH)
            kind = _kind_of(bth.opcode, aeth)
            key = (src, bth.psn, bth.opcode)
            if kind == "request" and key in seen:
                kind = "retx"
            seen.add(key)
            label = (f"{_aeth_label(aeth, names)} PSN {bth.psn}" if aeth is not None and kind in ("nak", "rnr")
                     else f"{_short_opcode(bth.opcode)} PSN {bth.psn}")
            psn, op = bth.psn, bth.opcode
        tcp_h = pkt.get(TCP) if hasattr(pkt, "get") else None
        if tcp_h is not None:
            # SYN and FIN take a sequence number each (RFC 9293 3.4)
            end = seq_add(tcp_h.seq, pkt.payload_length + (1 if tcp_h.flags & (TCP.SYN | TCP.FIN) else 0))
            tcp_sent[src] = seq_max(end, tcp_sent.get(src))
        for n in (src, dst):
            if n not in nodes:
                nodes.append(n)
        t = int(round(float(getattr(cp, "timestamp", 0.0)) * 1e9))
        note = f"frame {getattr(cp, 'frame_number', '?')}: {pkt.summary() if hasattr(pkt, 'summary') else ''}"
        if not names and kind == "nak":
            note = f"frame {getattr(cp, 'frame_number', '?')}: {label}"  # the summary would name it
        arrows.append(Arrow(src, dst, t, t + transit_ns, label, kind, False, note, psn, op))
        if limit is not None and len(arrows) >= limit:
            break
    if arrows:
        t0 = arrows[0].t0
        for a in arrows:
            a.t0 -= t0
            a.t1 = None if a.t1 is None else a.t1 - t0
    return Ladder(nodes, arrows, [], title)


def _endpoints(pkt: Any) -> tuple[str | None, str | None]:
    for layer in getattr(pkt, "layers", []):
        h = layer.header
        name = h.LAYOUT.name
        if name in ("IPv4", "IPv6", "GRH"):
            vals = h.values()
            s = vals.get("src", vals.get("sgid"))
            d = vals.get("dst", vals.get("dgid"))
            f = "src" if "src" in vals else "sgid"
            return h.describe(f), h.describe("dst" if "dst" in vals else "dgid") if d is not None and s is not None else None
        if name == "LRH":
            return f"LID {h.slid}", f"LID {h.dlid}"
    for layer in getattr(pkt, "layers", []):
        if layer.header.LAYOUT.name == "Ethernet":
            h = layer.header
            return h.describe("src"), h.describe("dst")
    return None, None


def ladder(obj: Any, **kw: Any) -> Ladder:
    """A ladder from a trace (events), a fabric (its trace), or captured packets."""
    trace = getattr(obj, "trace", None)
    if trace is not None and not callable(trace):
        return from_trace(trace, **kw)
    items = list(obj)
    if items and hasattr(items[0], "kind") and hasattr(items[0], "time_ns"):
        return from_trace(items, **kw)
    return from_capture(items, **kw)
