"""State diagrams drawn from a transition table (the engine's QP state machine).

The diagram is generated from the same table the engine enforces (h11 draws its diagrams from
its tables for the same reason): if the engine changes, the picture changes with it.  Edges are
quadratic curves so that A->B and B->A do not overlap; transitions into RESET and ERR, which
exist from almost every state, are drawn light so the main path RESET -> INIT -> RTR -> RTS
stands out.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from rdmalab.verbs import enums as e
from rdmalab.verbs.engine import qpstate

# Positions for the QP states of IBA Vol 1 10.3.1 (ibv_qp_state names), in a 3-row grid.
QP_LAYOUT = {
    "RESET": (0, 0), "INIT": (1, 0), "RTR": (2, 0), "RTS": (3, 0),
    "SQD": (3, 1), "SQE": (2, 1), "ERR": (1, 1), "UNKNOWN": (0, 1),
}


def _wrap(text: str, width: int = 30) -> list[str]:
    lines: list[str] = []
    for part in text.split(" | "):
        if lines and len(lines[-1]) + 3 + len(part) <= width:
            lines[-1] += " | " + part
        else:
            lines.append(part)
    return lines


def _norm(s: Any) -> str:
    name = getattr(s, "name", None) or str(s)
    name = name.split(".")[-1]
    return name.replace("IBV_QPS_", "")


def _route(pos: dict[str, tuple[float, float]], a: str, b: str, r: float, *, bold: bool, reverse_bold: bool,
           paired: bool, mid_y: float) -> tuple[float, tuple[float, float, float, float, float, float]]:
    """The quadratic curve from ``a`` to ``b``: (bend, (start, control, end)).

    An edge with a reverse edge bends to one side (the highlighted one of the pair upward, the other
    downward), and any edge that would pass through a third state bends further until it clears it.
    """
    (x1, y1), (x2, y2) = pos[a], pos[b]
    dx, dy = x2 - x1, y2 - y1
    d = math.hypot(dx, dy)
    ux, uy = dx / d, dy / d
    # The control point is the chord's midpoint moved by bend along the normal (-uy, ux).
    up = -1.0 if ux > 0 else 1.0  # the sign of bend that moves the curve up the page
    if not paired:
        base = 0.0
    elif bold:
        base = 18 * up
    elif reverse_bold:
        base = -18 * up  # down the page, below the highlighted edge
    else:
        base = 18.0  # each of the pair to its own side: their normals point opposite ways
    # Without a pair, bend toward the middle of the grid (where there is room), not across the labels.
    towards_middle = up if (y1 + y2) / 2 > mid_y else -up
    preferred = 1.0 if base > 0 else (-1.0 if base < 0 else towards_middle)
    others = [(p, q) for s, (p, q) in pos.items() if s not in (a, b)]

    def curve(bend: float) -> tuple[float, float, float, float, float, float]:
        # Leave and enter each circle along the curve's tangent, so that edges bent differently
        # meet a state at different points rather than piling their arrowheads on one spot.
        mx, my = (x1 + x2) / 2 - uy * bend, (y1 + y2) / 2 + ux * bend
        d1, d2 = math.hypot(mx - x1, my - y1), math.hypot(mx - x2, my - y2)
        sx, sy = x1 + (mx - x1) / d1 * r, y1 + (my - y1) / d1 * r
        ex, ey = x2 + (mx - x2) / d2 * r, y2 + (my - y2) / d2 * r
        return sx, sy, mx, my, ex, ey

    def clear(c: tuple[float, float, float, float, float, float]) -> bool:
        sx, sy, mx, my, ex, ey = c
        for i in range(1, 40):
            t = i / 40
            px = (1 - t) ** 2 * sx + 2 * t * (1 - t) * mx + t * t * ex
            py = (1 - t) ** 2 * sy + 2 * t * (1 - t) * my + t * t * ey
            if any(math.hypot(px - p, py - q) < r + 8 for p, q in others):
                return False
        return True

    # A paired edge keeps its side (the reverse edge is on the other one); others may take either.
    signs = (preferred,) if base else (preferred, -preferred)
    for extra in range(0, 241, 12):
        for sign in signs:
            bend = sign * (abs(base) + extra)
            c = curve(bend)
            if clear(c):
                return bend, c
    return base, curve(base)


@dataclass
class StateDiagram:
    edges: list[tuple[str, str, str]]
    states: list[str] = field(default_factory=list)
    title: str | None = None
    highlight: list[str] = field(default_factory=list)  # a path to draw bold, e.g. RESET INIT RTR RTS

    def _positions(self) -> dict[str, tuple[float, float]]:
        pos: dict[str, tuple[float, float]] = {}
        extra = [s for s in self.states if s not in QP_LAYOUT]
        for s in self.states:
            if s in QP_LAYOUT:
                c, r = QP_LAYOUT[s]
                pos[s] = (90 + c * 250, 150 + r * 170)
        for i, s in enumerate(extra):
            pos[s] = (90 + i * 250, 150 + 2 * 170)
        return pos

    def to_svg(self) -> str:
        pos = self._positions()
        width = int(max(x for x, _ in pos.values()) + 110)
        height = int(max(y for _, y in pos.values()) + 80)
        path = set(zip(self.highlight, self.highlight[1:], strict=False))
        out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="rdmalab-states" width="{width}" height="{height}" '
               f'viewBox="0 0 {width} {height}" font-family="DejaVu Sans, Arial, sans-serif" font-size="11">',
               '<defs><marker id="st-ah" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
               'orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker>'
               '<marker id="st-ah-b" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
               'orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#1565c0"/></marker></defs>',
               f'<rect width="{width}" height="{height}" fill="white"/>']
        if self.title:
            out.append(f'<text x="{width / 2}" y="18" text-anchor="middle" font-weight="bold" font-size="13">'
                       f"{html.escape(self.title)}</text>")
        r = 30
        pairs = {(a, b) for a, b, _ in self.edges}
        labels: dict[tuple[str, str], list[str]] = {}
        for a, b, lab in self.edges:
            labels.setdefault((a, b), []).append(lab)
        mid_y = (min(y for _, y in pos.values()) + max(y for _, y in pos.values())) / 2
        for (a, b), labs in labels.items():
            if a not in pos or b not in pos:
                continue
            x1, y1 = pos[a]
            bold = (a, b) in path
            faint = b in ("RESET", "ERR") and not bold
            colour = "#1565c0" if bold else ("#c7c7c7" if faint else "#555")
            if a == b:
                # Loops go on the outside of the grid (above the top row, below the others), clear of the
                # arrows that run between the rows.
                k = -1 if y1 <= mid_y else 1
                out.append(f'<path d="M{x1 - 12},{y1 + k * (r - 2)} C{x1 - 30},{y1 + k * (r + 40)} '
                           f'{x1 + 30},{y1 + k * (r + 40)} {x1 + 12},{y1 + k * (r - 2)}" fill="none" '
                           f'stroke="{colour}" marker-end="url(#st-ah)"/>')
                if any(labs):
                    ly = y1 - r - 36 if k < 0 else y1 + r + 44
                    out.append(f'<text x="{x1}" y="{ly}" text-anchor="middle" fill="{colour}" font-size="10">'
                               f"{html.escape(', '.join(x for x in labs if x))}</text>")
                continue
            bend, (sx, sy, mx, my, ex, ey) = _route(pos, a, b, r, bold=bold, reverse_bold=(b, a) in path,
                                                    paired=(b, a) in pairs, mid_y=mid_y)
            marker = "st-ah-b" if bold else "st-ah"
            out.append(f'<path d="M{sx:.1f},{sy:.1f} Q{mx:.1f},{my:.1f} {ex:.1f},{ey:.1f}" fill="none" '
                       f'stroke="{colour}" stroke-width="{2.2 if bold else 1.2}" marker-end="url(#{marker})">'
                       f"<title>{html.escape(a)} \u2192 {html.escape(b)}: {html.escape(', '.join(labs))}</title></path>")
            if not faint and labs and any(labs):
                lines = _wrap(" | ".join(x for x in labs if x))
                # The label sits on the outer side of the curve's apex, so it never lies between an edge
                # and its reverse edge.
                ax, ay = (sx + 2 * mx + ex) / 4, (sy + 2 * my + ey) / 4
                below = ay > (sy + ey) / 2 + 0.5 or (abs(ay - (sy + ey) / 2) <= 0.5 and y1 > mid_y)
                y0 = ay + 15 if below else ay - 8 - 12 * (len(lines) - 1)
                spans = "".join(f'<tspan x="{ax:.1f}" y="{y0 + 12 * i:.1f}">{html.escape(t)}</tspan>'
                                for i, t in enumerate(lines))
                out.append(f'<text text-anchor="middle" fill="{colour}" font-size="10">{spans}</text>')
        for s, (x, y) in pos.items():
            fill = "#e3f2fd" if s in self.highlight else ("#ffebee" if s in ("ERR", "SQE") else "#f5f5f5")
            out.append(f'<circle cx="{x}" cy="{y}" r="{r}" fill="{fill}" stroke="#333" stroke-width="1.5"/>')
            out.append(f'<text x="{x}" y="{y + 4}" text-anchor="middle" font-weight="bold">{html.escape(s)}</text>')
        out.append("</svg>")
        return "".join(out)

    def _repr_svg_(self) -> str:
        return self.to_svg()

    def __repr__(self) -> str:
        return "\n".join(f"{a:>6} -> {b:<6} {lab}" for a, b, lab in self.edges)


def state_diagram(table: Any, *, title: str | None = None, highlight: Iterable[Any] = ()) -> StateDiagram:
    """Draw a transition table.

    ``table`` may be a mapping ``{from: {to: label_or_attrs}}``, a mapping ``{(from, to): value}``,
    ``{from: [to, ...]}``, or an iterable of ``(from, to[, label])``.  States may be enums.
    """
    edges: list[tuple[str, str, str]] = []

    def lab(v: Any) -> str:
        if v is None or v is True:
            return ""
        if isinstance(v, str):
            return v
        if isinstance(v, dict):
            req = v.get("required") or v.get("req")
            return ", ".join(_norm(x) for x in req) if req else ""
        if isinstance(v, (set, frozenset, list, tuple)):
            return ""
        return ""

    if isinstance(table, dict):
        for k, v in table.items():
            if isinstance(k, tuple) and len(k) == 2:
                edges.append((_norm(k[0]), _norm(k[1]), lab(v)))
            elif isinstance(v, dict):
                for to, val in v.items():
                    edges.append((_norm(k), _norm(to), lab(val)))
            else:
                for to in v:
                    edges.append((_norm(k), _norm(to), ""))
    else:
        for item in table:
            t = tuple(item)
            edges.append((_norm(t[0]), _norm(t[1]), str(t[2]) if len(t) > 2 and t[2] is not None else ""))
    states: list[str] = []
    for a, b, _ in edges:
        for s in (a, b):
            if s not in states:
                states.append(s)
    order = list(QP_LAYOUT)
    states.sort(key=lambda s: order.index(s) if s in order else 99)
    return StateDiagram(edges, states, title, [_norm(h) for h in highlight])


def qp_state_diagram(qp_type: str = "RC", *, title: str | None = None,
                     highlight: Iterable[Any] = ("RESET", "INIT", "RTR", "RTS")) -> StateDiagram:
    """The QP state machine of the soft engine (``rdmalab.verbs.engine.qpstate.TABLE``) for one QP
    type; each edge is labelled with the attributes that transition requires."""

    names = {v: k[len("IBV_QPS_"):] for k, v in vars(e).items() if k.startswith("IBV_QPS_") and isinstance(v, int)}
    qpt = getattr(e, f"IBV_QPT_{qp_type}")
    edges = []
    for (cur, new), per_type in qpstate.TABLE.items():
        if qpt not in per_type:
            continue
        required, _optional = per_type[qpt]
        label = qpstate.mask_names(required) if required else ""
        edges.append((names.get(cur, str(cur)), names.get(new, str(new)), "" if label == "none" else label))
    d = state_diagram(edges, title=title or f"{qp_type} QP states (from the engine's transition table)",
                      highlight=highlight)
    return d
