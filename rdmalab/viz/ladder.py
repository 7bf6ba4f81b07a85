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
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from rdmalab.wire.errors import DecodeError
from rdmalab.wire.frame import decode_ethernet
from rdmalab.wire.ib import AETH, BTH
from rdmalab.wire.net import TCP
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


def label_place(x0: float, y0: float, x1: float, y1: float, *, at_start: bool = False) -> tuple[float, float, float]:
    """Where an arrow's label goes: centred on the arrow's middle, turned to run along it (reading left to
    right whichever way the arrow points), 4 px above the line.  Returns (x, y, degrees) of the text's
    anchor.  A label there is never crossed by its own arrow, nor by the arrows that arrive where this one
    leaves (a label at the arrow's start was: "ACK PSN 100" under the head of the packet it answers).
    ``at_start`` (a lost packet's short arrow): from the arrow's start instead, text-anchor start/end."""
    if at_start:
        rad = math.atan2(y1 - y0, x1 - x0)
        nx, ny = math.sin(rad), -math.cos(rad)  # a normal of the line; the one that points up the page
        if ny > 0:
            nx, ny = -nx, -ny
        return x0 + 8 * math.cos(rad) + 4 * nx, y0 + 8 * math.sin(rad) + 4 * ny, \
            math.degrees(rad) if x1 >= x0 else math.degrees(rad) - 180
    if x1 < x0:
        x0, y0, x1, y1 = x1, y1, x0, y0
    angle = math.degrees(math.atan2(y1 - y0, x1 - x0))
    rad = math.radians(angle)
    xm, ym = (x0 + x1) / 2, (y0 + y1) / 2
    return xm + 4 * math.sin(rad), ym - 4 * math.cos(rad), angle


def _along(label: str, x0: float, y0: float, x1: float, y1: float, colour: str, lost: bool = False) -> str:
    """The label of an arrow, along it; a lost packet's label starts at its sender and ends in a red "lost"
    (a label at the cross, in a burst, landed on the neighbours' labels)."""
    x, y, angle = label_place(x0, y0, x1, y1, at_start=lost)
    anchor = "middle" if not lost else "start" if x1 >= x0 else "end"
    tail = ' <tspan fill="#c62828" font-weight="bold">lost</tspan>' if lost else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" fill="{colour}" '
            f'transform="rotate({angle:.2f} {x:.1f} {y:.1f})"{_HALO}>{html.escape(label)}{tail}</text>')


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
    _rise: float = field(default=64.0, init=False, repr=False, compare=False)
    _ys: dict[int, float] = field(default_factory=dict, init=False, repr=False, compare=False)

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

    def _times(self) -> list[int]:
        ts = set()
        for a in self.arrows:
            ts.add(a.t0)
            ts.add(a.t1 if a.t1 is not None else self._lost_end(a))
        for m in self.markers:
            ts.add(m.t)
        return sorted(ts)

    def _ymap(self, top: int) -> tuple[dict[int, float], list[tuple[float, int]]]:
        """Time -> y.  The scale is the typical one-way transit time: a gap up to a few transits is
        drawn to scale (so an arrow's slope shows its latency), a longer gap is cut and labelled."""
        times = self._times()
        y: dict[int, float] = {}
        breaks: list[tuple[float, int]] = []
        if not times:
            return y, breaks
        transits = sorted(a.t1 - a.t0 for a in self.arrows if a.t1 is not None and a.t1 > a.t0)
        gaps = sorted(b - a for a, b in zip(times, times[1:], strict=False) if b > a)
        scale = transits[len(transits) // 2] if transits else (gaps[len(gaps) // 2] if gaps else 1)
        scale = max(scale, 1)
        per_transit = 4 * self.row  # one typical transit is drawn 4 rows tall
        cur = float(top)
        prev = times[0]
        y[prev] = cur
        for t in times[1:]:
            gap = t - prev
            if gap > 8 * scale:
                breaks.append((cur + 1.5 * self.row, gap))
                cur += 3 * self.row
            else:
                cur += max(self.row, gap / scale * per_transit)
            y[t] = cur
            prev = t
        return y, breaks

    # ------------------------------------------------------------------ SVG
    def to_svg(self) -> str:
        top = 46 if self.title else 30
        ys, breaks = self._ymap(top + 14)
        # The time axis labels: wide enough for the longest ("\u2248 +67.107 ms" at a cut), so none is clipped.
        longest = max([len(_fmt_time(t)) + 1 for t in ys] + [len(_fmt_time(g)) + 3 for _, g in breaks] + [8])
        left = max(70, int(longest * 6.2) + 12)
        height = int(max(ys.values(), default=top) + 40)

        def ext(node: str | None, arrows_start: bool) -> float:
            labels = [len(m.label) for m in self.markers if m.node == node]
            return max([60.0] + [n * 5.6 + 24 for n in labels])

        first = self.nodes[0] if self.nodes else None
        last = self.nodes[-1] if self.nodes else None
        x0 = left + ext(first, True)
        xs = {n: x0 + i * self.spacing for i, n in enumerate(self.nodes)}
        width = int(x0 + (len(self.nodes) - 1) * self.spacing + (ext(last, False) if len(self.nodes) > 1 else 0) + 10)
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
        if self.title:
            out.append(f'<text x="{width / 2}" y="18" text-anchor="middle" font-size="13" font-weight="bold">'
                       f"{html.escape(self.title)}</text>")
        for n, x in xs.items():
            out.append(f'<text x="{x}" y="{top}" text-anchor="middle" font-weight="bold">{html.escape(n)}</text>')
            out.append(f'<line x1="{x}" y1="{top + 6}" x2="{x}" y2="{height - 10}" stroke="#999" stroke-width="1.5"/>')
        # time labels
        last_label = -1e9
        drawn_only = {self._lost_end(a) for a in self.arrows if a.t1 is None} - self._real_times()
        base: int | None = None  # after a cut, times read "+86 ns" from the first moment below the cut
        cuts = sorted(y for y, _ in breaks)
        for t, y in sorted(ys.items()) if self.times else []:
            if t in drawn_only:
                continue  # where a lost packet's arrow stops is not a moment anything happened
            if cuts and y > cuts[0]:
                while cuts and y > cuts[0]:
                    cuts.pop(0)
                base = t
            if y - last_label >= self.row:
                text = _fmt_time(t) if base is None or t == base else f"+{_fmt_time(t - base)}"
                out.append(f'<text x="{left - 8}" y="{y + 4}" text-anchor="end" fill="#888" font-size="10">'
                           f"{text}</text>")
                last_label = y
        for y, gap in breaks:
            if self.times:
                out.append(f'<text x="{left - 8}" y="{y + 4}" text-anchor="end" fill="#c62828" font-size="10">'
                           f"\u2248 +{_fmt_time(gap)}</text>")
            out.append(f'<line x1="{left}" y1="{y}" x2="{width - 20}" y2="{y}" stroke="#ddd" stroke-dasharray="2,4"/>')
        # Lines first, labels on top: a later arrow's line must not run over an earlier arrow's label.
        rises = sorted(ys[a.t1] - ys[a.t0] for a in self.arrows if a.t1 is not None and not a.lost)
        self._rise = rises[len(rises) // 2] if rises else 4.0 * self.row  # how far down a delivered arrow runs
        self._ys = ys
        drawn = [self._arrow_svg(a, xs, ys) for a in self.arrows]
        out += [lines for lines, _ in drawn]
        out += [self._marker_svg(m, xs, ys) for m in self.markers]
        out += [labels for _, labels in drawn]
        out.append("</svg>")
        return "".join(out)

    def _arrow_svg(self, a: Arrow, xs: dict[str, float], ys: dict[int, float]) -> tuple[str, str]:
        """The arrow's lines and its labels, as two SVG groups (drawn in two passes)."""
        if a.src not in xs or a.dst not in xs:
            return "", ""
        x0, x1 = xs[a.src], xs[a.dst]
        y0 = ys[a.t0]
        colour = COLOURS.get(a.kind, COLOURS["other"])
        dash = ' stroke-dasharray="6,3"' if a.kind == "retx" else ""
        title = f"<title>{html.escape(a.note or a.label)}</title>"
        parts = [f'<g class="rdmalab-arrow rdmalab-{a.kind}">{title}']
        labels = [f'<g class="rdmalab-label rdmalab-{a.kind}">{title}']
        if a.lost:
            # The arrow runs at the slope of a delivered packet and stops half way, at its own cross;
            # the "lost" note names the PSN, so it cannot be read as belonging to a neighbouring arrow.
            xm = (x0 + x1) / 2
            ym = y0 + max(self._lost_rise(a) / 2, self.row / 2)  # parallel to its neighbours, half their length
            parts.append(f'<line x1="{x0}" y1="{y0}" x2="{xm}" y2="{ym}" stroke="{colour}" stroke-width="1.5"{dash}/>')
            # the cross goes with the labels, drawn last: a neighbour's label (white halo) must not hide it
            labels.append(f'<path d="M{xm - 5},{ym - 5} L{xm + 5},{ym + 5} M{xm - 5},{ym + 5} L{xm + 5},{ym - 5}" '
                          f'stroke="#c62828" stroke-width="2.5"/>')
        else:
            y1 = ys[a.t1] if a.t1 is not None else y0 + self.row
            parts.append(f'<line x1="{x0}" y1="{y0}" x2="{x1}" y2="{y1}" stroke="{colour}" stroke-width="1.5"{dash} '
                         f'marker-end="url(#ah-{a.kind if a.kind in COLOURS else "other"})"/>')
        ex, ey = ((x0 + x1) / 2, y0 + max(self._lost_rise(a) / 2, self.row / 2)) if a.lost else \
            (x1, ys[a.t1] if a.t1 is not None else y0 + self.row)
        labels.append(_along(a.label, x0, y0, ex, ey, colour, lost=a.lost))
        return "".join(parts) + "</g>", "".join(labels) + "</g>"

    def _lost_rise(self, lost: Arrow) -> float:
        """How far down a lost packet's arrow would have run: as far as the last delivered arrow of the same
        direction sent before it (the next one when there is none), so that it runs parallel to the arrow
        above it and its label, in the band between the two, stays clear of both lines."""
        same = sorted((a for a in self.arrows
                       if not a.lost and a.t1 is not None and (a.src, a.dst) == (lost.src, lost.dst)),
                      key=lambda a: a.t0)
        before = [a for a in same if a.t0 <= lost.t0]
        near = before[-1] if before else (same[0] if same else None)
        if near is None or near.t1 is None:
            return self._rise
        return self._ys[near.t1] - self._ys[near.t0]

    def _marker_svg(self, m: Marker, xs: dict[str, float], ys: dict[int, float]) -> str:
        if m.node not in xs:
            return ""
        x = xs[m.node]
        y = ys[m.t]
        outer = -1 if list(xs).index(m.node) == 0 else 1
        colour = {"timeout": "#c62828", "retx": "#ef6c00", "completion": "#2e7d32", "error": "#c62828",
                  "posted": "#1565c0", "state": "#6d4c41"}.get(m.kind, "#555")
        anchor = "end" if outer < 0 else "start"
        tx = x + outer * 12
        shape = (f'<circle cx="{x}" cy="{y}" r="4" fill="{colour}"/>' if m.kind != "timeout" else
                 f'<path d="M{x - 6},{y - 6} L{x + 6},{y + 6} M{x - 6},{y + 6} L{x + 6},{y - 6}" stroke="{colour}" '
                 f'stroke-width="2"/>')
        return (f'<g class="rdmalab-marker rdmalab-{m.kind}"><title>{html.escape(m.note or m.label)}</title>{shape}'
                f'<text x="{tx}" y="{y + 4}" text-anchor="{anchor}" fill="{colour}" font-size="10"{_HALO}>'
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
        for i, a in enumerate(self.arrows):
            arrow = "--x" if a.lost else "-->"
            rows.append((a.t0, i, f"{_fmt_time(a.t0):>12}  {a.src} {arrow} {a.dst}  {a.label}"))
        for i, m in enumerate(self.markers):
            rows.append((m.t, 10_000 + i, f"{_fmt_time(m.t):>12}  [{m.node}] {m.label}"))
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


def _aeth_label(aeth: Any) -> str:
    """'NAK: PSN Sequence Error', 'RNR NAK 0.64 ms', from the decoded AETH's fields."""
    if aeth.is_rnr_nak:
        return f"RNR NAK {aeth.rnr_timer_ms:g} ms"
    return f"NAK: {aeth.nak_name}"


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
               states: bool = False, nodes: list[str] | None = None, limit: int | None = None) -> Ladder:
    """A ladder from engine trace events (:class:`rdmalab.verbs.trace.TraceEvent`)."""
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
                label = f"{_aeth_label(aeth)} PSN {e.psn}"
            cm = _cm_of(pkt)
            if cm is not None:  # a CM MAD to QP1: name the message; the same MAD again is a resend
                name, tid = cm
                kind = "retx" if (e.node, name, tid) in seen_cm else "cnp"
                label = f"CM {name}" + (" (again)" if kind == "retx" else "")
                seen_cm.add((e.node, name, tid))
            note = str(e) + (f"\n{aeth.syndrome_text()}" if aeth is not None else "")
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
            text = "ok" if ok else (status if isinstance(status, str) else f"status {status}")
            markers.append(Marker(e.node, e.time_ns, f"WC {_wc_name(op)} {text}".strip(),
                                  "completion" if ok else "error", str(e)))
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
                 transit_ns: int = 0) -> Ladder:
    """A ladder from captured packets (``rdmalab.capture.read``): one capture point, so arrows are level
    unless ``transit_ns`` tilts them.  Nodes are the IP (or MAC) addresses."""

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
            flags = "+".join(n for b, n in ((TCP.SYN, "SYN"), (TCP.FIN, "FIN"), (TCP.RST, "RST"), (TCP.ACK, "ACK"))
                             if tcp.flags & b)
            label = f"TCP {flags}" + (f" ({pkt.payload_length} B)" if pkt.payload_length else "")
            kind = "ack" if tcp.flags & (TCP.SYN | TCP.FIN | TCP.RST) == 0 and not pkt.payload_length else "other"
            if pkt.payload_length:  # bytes this capture saw go out before: a TCP retransmission
                end = tcp_sent.get(src)
                behind = (tcp.seq + pkt.payload_length - end) & 0xFFFFFFFF if end is not None else 1
                if behind == 0 or behind >= 0x80000000:  # ends at or before the furthest byte already seen
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
            label = (f"{_aeth_label(aeth)} PSN {bth.psn}" if aeth is not None and kind in ("nak", "rnr")
                     else f"{_short_opcode(bth.opcode)} PSN {bth.psn}")
            psn, op = bth.psn, bth.opcode
        tcp_h = pkt.get(TCP) if hasattr(pkt, "get") else None
        if tcp_h is not None:
            end = (tcp_h.seq + pkt.payload_length + (1 if tcp_h.flags & (TCP.SYN | TCP.FIN) else 0)) & 0xFFFFFFFF
            last = tcp_sent.get(src)
            if last is None or 0 < ((end - last) & 0xFFFFFFFF) < 0x80000000:
                tcp_sent[src] = end
        for n in (src, dst):
            if n not in nodes:
                nodes.append(n)
        t = int(round(float(getattr(cp, "timestamp", 0.0)) * 1e9))
        note = f"frame {getattr(cp, 'frame_number', '?')}: {pkt.summary() if hasattr(pkt, 'summary') else ''}"
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
