"""State diagrams drawn from a transition table: the QP, the IB CM, iWARP's MPA exchange, rdma_cm's CMID.

The diagram is generated from the same table the engine enforces (h11 draws its diagrams from
its tables for the same reason): if the engine changes, the picture changes with it.  Edges are
quadratic curves so that A->B and B->A do not overlap; transitions into the states reached from
almost everywhere (RESET and ERR for a QP, CLOSED for a connection) are drawn light so the main
path stands out.  :func:`qp_state_diagram` reads ``engine.qpstate.TABLE``,
:func:`cm_state_diagram` ``engine.ibcm.TABLE``, :func:`mpa_state_diagram` ``engine.mpacm.TABLE``
and :func:`cmid_state_diagram` ``cmstate.TRANSITIONS``.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from rdmalab.verbs import cmstate
from rdmalab.verbs import enums as e
from rdmalab.verbs.engine import ibcm, mpacm, qpstate

# Positions for the QP states of IBA Vol 1 10.3.1 (ibv_qp_state names), in a 3-row grid.
QP_LAYOUT = {
    "RESET": (0, 0), "INIT": (1, 0), "RTR": (2, 0), "RTS": (3, 0),
    "SQD": (3, 1), "SQE": (2, 1), "ERR": (1, 1), "UNKNOWN": (0, 1),
}
# The IB CM (IBA Vol 1 12.6): the active side along the top, the passive side below, teardown on the right.
CM_LAYOUT = {
    "IDLE": (0, 1), "REQ_SENT": (1, 0), "REP_RCVD": (2, 0), "ESTABLISHED": (3, 1), "DREQ_SENT": (4, 0),
    "TIMEWAIT": (5, 1), "REQ_RCVD": (1, 2), "REP_SENT": (2, 2), "DREQ_RCVD": (4, 2), "MRA_REQ_SENT": (1, 3),
    "SIDR_REQ_RCVD": (0, 3), "SIDR_REQ_SENT": (0, 0), "CLOSED": (5, 3),
}
# An iWARP connection (mpacm.MPAState): the initiator above, the responder below, CLOSED between them.
MPA_LAYOUT = {
    "TCP_CONNECTING": (0, 0), "REQUEST_SENT": (1, 0), "CLOSED": (1, 1), "ESTABLISHED": (2, 1),
    "DISCONNECTED": (3, 1), "AWAIT_REQUEST": (0, 2), "REQUEST_RCVD": (2, 2),
}
# rdma_cm's CMID (cmstate.CMIDState): the active side above, the passive side below.
CMID_LAYOUT = {
    "IDLE": (0, 1), "ADDR_RESOLVED": (1, 0), "ROUTE_RESOLVED": (2, 0), "CONNECTING": (3, 0), "ESTABLISHED": (4, 1),
    "DISCONNECTING": (5, 0), "DISCONNECTED": (5, 2), "LISTEN": (0, 2), "CONNECT_REQUEST": (1, 2),
    "ACCEPTED": (3, 2), "REJECTED": (2, 3), "UNREACHABLE": (3, 3), "ERROR": (4, 3),
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
    #: state -> (column, row); None: the QP's grid
    layout: dict[str, tuple[int, int]] | None = None
    #: edges into these are drawn light and unlabelled (they exist from almost every state)
    faint_to: tuple[str, ...] = ("RESET", "ERR")
    #: states filled red (error states)
    alarm: tuple[str, ...] = ("ERR", "SQE")
    spacing: tuple[int, int] = (250, 170)
    radius: int = 30

    def _positions(self) -> dict[str, tuple[float, float]]:
        layout = self.layout if self.layout is not None else QP_LAYOUT
        dx, dy = self.spacing
        pos: dict[str, tuple[float, float]] = {}
        extra = [s for s in self.states if s not in layout]
        for s in self.states:
            if s in layout:
                c, r = layout[s]
                pos[s] = (90 + c * dx, 150 + r * dy)
        below = max((r for c, r in layout.values()), default=1) + 1
        for i, s in enumerate(extra):
            pos[s] = (90 + i * dx, 150 + below * dy)
        return pos

    def to_svg(self) -> str:
        pos = self._positions()
        width = int(max(x for x, _ in pos.values()) + 110)
        height = int(max(y for _, y in pos.values()) + 100)  # room for a loop's label under the bottom row
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
        r = self.radius
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
            faint = b in self.faint_to and not bold
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
            fill = "#e3f2fd" if s in self.highlight else ("#ffebee" if s in self.alarm else "#f5f5f5")
            out.append(f'<circle cx="{x}" cy="{y}" r="{r}" fill="{fill}" stroke="#333" stroke-width="1.5"/>')
            size = "" if len(s) <= 9 else ' font-size="9"'  # long names (MRA_REQ_SENT) stay inside the circle
            out.append(f'<text x="{x}" y="{y + 4}" text-anchor="middle" font-weight="bold"{size}>'
                       f'{html.escape(s)}</text>')
        out.append("</svg>")
        return "".join(out)

    def _repr_svg_(self) -> str:
        return self.to_svg()

    def __repr__(self) -> str:
        w = max((len(a) for a, _, _ in self.edges), default=6)
        return "\n".join(f"{a:>{w}} -> {b:<{w}} {lab}" for a, b, lab in self.edges)


def state_diagram(table: Any, *, title: str | None = None, highlight: Iterable[Any] = (),
                  layout: dict[str, tuple[int, int]] | None = None) -> StateDiagram:
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
    order = list(layout if layout is not None else QP_LAYOUT)
    states.sort(key=lambda s: order.index(s) if s in order else 99)
    return StateDiagram(edges, states, title, [_norm(h) for h in highlight], layout=layout)


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


def _merged(edges: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """One edge per (from, to), its events joined: ``REJ | timer``."""
    labels: dict[tuple[str, str], list[str]] = {}
    for a, b, lab in edges:
        labs = labels.setdefault((a, b), [])
        if lab not in labs:
            labs.append(lab)
    return [(a, b, " | ".join(labs)) for (a, b), labs in labels.items()]


def cm_state_diagram(*, title: str | None = None,
                     highlight: Iterable[Any] = ("IDLE", "REQ_SENT", "REP_RCVD", "ESTABLISHED", "DREQ_SENT",
                                                 "TIMEWAIT", "CLOSED")) -> StateDiagram:
    """The IB CM of the soft engine (``rdmalab.verbs.engine.ibcm.TABLE``): each edge is labelled with the
    messages, timer and calls that make it; refusals (drops, duplicates) are not edges, nor is IDLE's
    loop (a REQ refused, a DREP to an unknown connection: nothing is kept).  The default highlight is
    the active side's path, the handshake the notebook performs."""
    edges = [(a, b, lab) for a, b, lab in ibcm.edges() if (a, b) != ("IDLE", "IDLE")]
    d = state_diagram(_merged(edges), title=title or "IB CM states (from the engine's transition table)",
                      highlight=highlight, layout=CM_LAYOUT)
    d.faint_to, d.alarm, d.spacing, d.radius = ("CLOSED",), (), (210, 150), 40
    return d


def mpa_state_diagram(*, title: str | None = None,
                      highlight: Iterable[Any] = ("TCP_CONNECTING", "REQUEST_SENT", "ESTABLISHED",
                                                  "DISCONNECTED")) -> StateDiagram:
    """An iWARP connection of rdma_cm (``rdmalab.verbs.engine.mpacm.TABLE``): TCP, the MPA Request and
    Reply, the QP taking the stream."""
    d = state_diagram(_merged(mpacm.edges()), title=title or "iWARP connection states (MPA, from the transition "
                      "table)", highlight=highlight, layout=MPA_LAYOUT)
    d.faint_to, d.alarm, d.spacing, d.radius = (), (), (230, 150), 44
    return d


def cmid_state_diagram(*, title: str | None = None,
                       highlight: Iterable[Any] = ("IDLE", "ADDR_RESOLVED", "ROUTE_RESOLVED", "CONNECTING",
                                                   "ESTABLISHED", "DISCONNECTING", "DISCONNECTED")) -> StateDiagram:
    """rdma_cm's CMID (``rdmalab.verbs.cmstate.TRANSITIONS``): the calls and events that move it."""
    d = state_diagram(_merged(cmstate.edges()), title=title or "rdma_cm CMID states (from the transition table)",
                      highlight=highlight, layout=CMID_LAYOUT)
    d.faint_to, d.alarm, d.spacing, d.radius = (("REJECTED", "DISCONNECTED"), ("REJECTED", "UNREACHABLE", "ERROR"),
                                                (210, 150), 44)
    return d
