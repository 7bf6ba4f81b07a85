"""Time-sequence (PSN over time, TCP sequence over time) and throughput plots, for engine traces and for
captures.

The PSN plot is the RDMA cousin of tcptrace's time-sequence graph: each request packet is a dot
at (time it was sent, its PSN); a retransmitted packet is an orange cross, a packet the fabric
lost a grey x, ACKs are the green staircase of the highest PSN acknowledged, NAKs red triangles.
A flat stretch followed by orange crosses is a timeout; a red triangle followed by a fall back
in PSN is a NAK and go-back-N.

Plots are matplotlib figures (no pyplot, no global state) wrapped in :class:`Plot`, which renders
as SVG with fixed ids and no timestamp so that the output is the same on every run.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rdmalab.capture.iwarp_conns import KEEP_ALIVE, NEW, OUT_OF_ORDER, RETRANSMISSION
from rdmalab.viz.ladder import _decoded, _endpoints, _kind_from_syndrome_text, _kind_of, match_arrivals
from rdmalab.wire.ib import AETH, BTH
from rdmalab.wire.opcodes import OPCODES

if TYPE_CHECKING:
    from rdmalab.capture.analysis_model import Analysis


@dataclass
class Plot:
    """A matplotlib figure that displays itself as a deterministic SVG."""

    figure: Any

    def to_svg(self) -> str:
        import matplotlib  # optional: matplotlib (lab, analysis extras)

        buf = io.StringIO()
        with matplotlib.rc_context({"svg.hashsalt": "rdmalab", "svg.fonttype": "none"}):
            self.figure.savefig(buf, format="svg", metadata={"Date": None}, bbox_inches="tight")
        svg = buf.getvalue()
        return svg[svg.index("<svg"):]

    def _repr_svg_(self) -> str:
        return self.to_svg()

    def savefig(self, *args: Any, **kw: Any) -> None:
        self.figure.savefig(*args, **kw)

    def __repr__(self) -> str:
        ax = self.figure.axes[0] if self.figure.axes else None
        title = ax.get_title() if ax is not None else ""
        return f"<rdmalab plot{': ' + title if title else ''} (displays as SVG in Jupyter)>"


def _figure(width: float = 7.5, height: float = 3.6) -> tuple[Any, Any]:
    from matplotlib.figure import Figure  # optional: matplotlib (lab, analysis extras)

    fig = Figure(figsize=(width, height), dpi=100)
    ax = fig.add_subplot(1, 1, 1)
    ax.grid(True, color="#eeeeee")
    return fig, ax


@dataclass
class _Point:
    t: float  # microseconds
    psn: int
    kind: str  # request, retx, ack, nak, rnr, response, lost, cnp
    node: str
    length: int = 0


def _points_from_trace(events: list[Any]) -> list[_Point]:
    pts: list[_Point] = []
    seen: set[tuple[str, int | None, int | None]] = set()
    lost_ids = {e.detail.get("packet_id") for e in events if e.kind == "dropped"}
    syndromes = {(e.node, e.time_ns): str(e.detail.get("syndrome", "")) for e in events if e.kind == "acked"}

    arrivals = match_arrivals(events)
    for i, e in enumerate(events):
        if e.kind != "sent" or e.psn is None:
            continue
        pkt = _decoded(e.frame)
        kind = _kind_of(e.opcode, pkt.get(AETH) if pkt is not None else None)
        key = (e.node, e.psn, e.opcode)
        if kind == "request":
            if key in seen:
                kind = "retx"
            seen.add(key)
        elif kind == "ack" and pkt is None:  # no frame: the completer's "acked" event says what it was
            rcv = arrivals.get(i)
            syn = syndromes.get((rcv.node, rcv.time_ns), "") if rcv is not None else ""
            kind = _kind_from_syndrome_text(e.opcode, syn)
        pts.append(_Point(e.time_ns / 1000, e.psn, kind, e.node, int(e.detail.get("len", 0) or 0)))
        if e.detail.get("packet_id") in lost_ids:
            pts.append(_Point(e.time_ns / 1000, e.psn, "lost", e.node))
    return pts


def _points_from_capture(packets: list[Any]) -> list[_Point]:
    pts: list[_Point] = []
    seen: set[tuple[str, int, int]] = set()
    t0 = None
    for cp in packets:
        pkt = getattr(cp, "packet", cp)
        if pkt is None or not hasattr(pkt, "get"):
            continue
        bth = pkt.get(BTH)
        if bth is None:
            continue
        t = float(getattr(cp, "timestamp", 0.0)) * 1e6
        t0 = t if t0 is None else t0
        aeth = pkt.get(AETH)
        kind = _kind_of(bth.opcode, aeth)
        src = _endpoints(pkt)[0] or "?"
        key = (src, bth.psn, bth.opcode)
        if kind == "request":
            if key in seen:
                kind = "retx"
            seen.add(key)
        pts.append(_Point(t - t0, bth.psn, kind, src, pkt.payload_length))
    return pts


def _points(source: Any) -> list[_Point]:
    trace = getattr(source, "trace", None)
    if trace is not None and not callable(trace):
        source = trace
    items = list(source)
    if items and hasattr(items[0], "kind") and hasattr(items[0], "time_ns"):
        return _points_from_trace(items)
    return _points_from_capture(items)


_STYLE = {
    "request": dict(marker="o", color="#1565c0", s=14, label="request sent"),
    "retx": dict(marker="x", color="#ef6c00", s=40, label="retransmitted"),
    "lost": dict(marker="x", color="#9e9e9e", s=60, label="lost in the fabric"),
    "response": dict(marker=".", color="#2e7d32", s=18, label="READ response"),
    "nak": dict(marker="v", color="#c62828", s=50, label="NAK"),
    "rnr": dict(marker="v", color="#ad1457", s=50, label="RNR NAK"),
    "cnp": dict(marker="d", color="#6a1b9a", s=30, label="CNP"),
}


def _time_unit(t_max_us: float) -> tuple[str, float]:
    """The unit that keeps a time axis's numbers short: (label, divisor of microseconds)."""
    if t_max_us >= 10_000_000:
        return "s", 1e6
    if t_max_us >= 10_000:
        return "ms", 1e3
    return "\u00b5s", 1.0


def psn_time(source: Any, *, title: str | None = None, width: float = 7.5, height: float = 3.6) -> Plot:
    """PSN over time for an engine trace (or a fabric) or for captured packets."""
    pts = _points(source)
    unit, div = _time_unit(max((p.t for p in pts), default=0.0))
    if div != 1.0:
        pts = [_Point(p.t / div, p.psn, p.kind, p.node, p.length) for p in pts]
    fig, ax = _figure(width, height)
    for kind, style in _STYLE.items():
        sel = [p for p in pts if p.kind == kind]
        if sel:
            ax.scatter([p.t for p in sel], [p.psn for p in sel], zorder=3, **style)
    acks = sorted((p for p in pts if p.kind == "ack"), key=lambda p: p.t)
    if acks:
        best = -1
        xs, ys = [], []
        for p in acks:
            best = max(best, p.psn)
            xs.append(p.t)
            ys.append(best)
        # The staircase runs on to the end of the plot, so that a single ACK is a visible line, not a lone step.
        t_end = max(p.t for p in pts)
        if t_end > xs[-1]:
            xs.append(t_end)
            ys.append(best)
        if len(xs) > 1:
            ax.step(xs, ys, where="post", color="#2e7d32", linewidth=1.5, label="highest PSN ACKed", zorder=2)
        ax.scatter([p.t for p in acks], [p.psn for p in acks], marker="^", color="#2e7d32", s=30, zorder=3,
                   label="ACK")
    ax.set_xlabel(f"time ({unit})")
    ax.set_ylabel("PSN")
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.ticklabel_format(axis="y", style="plain", useOffset=False)
    if title:
        ax.set_title(title)
    if pts:
        # Outside the axes, on the right: inside, it covered the first packets of a burst.
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize=8, frameon=False)
    fig.tight_layout()
    return Plot(fig)


def throughput(source: Any, *, window_us: float | None = None, title: str | None = None,
               width: float = 7.5, height: float = 3.0) -> Plot:
    """Payload throughput (Gbit/s) over time, per sender, in windows of ``window_us``."""
    pts = [p for p in _points(source) if p.kind in ("request", "retx", "response") and p.length]
    fig, ax = _figure(width, height)
    unit, div = _time_unit(max((p.t for p in pts), default=0.0))
    rate_unit = "Gbit/s"
    if pts:
        t_end = max(p.t for p in pts)
        win = window_us or max(t_end / 40, 0.5)
        series = []
        for node in sorted({p.node for p in pts}):
            mine = [p for p in pts if p.node == node]
            nbins = int(t_end // win) + 1
            bins = [0] * nbins
            for p in mine:
                bins[int(p.t // win)] += p.length
            series.append((node, [(i + 0.5) * win / div for i in range(nbins)], [b * 8 / (win * 1000) for b in bins]))
        peak = max((max(ys) for _, _, ys in series), default=0.0)
        scale = 1.0
        if peak < 0.001:  # a slow capture: read the rates in kbit/s or Mbit/s, not 0.000...
            rate_unit, scale = "kbit/s", 1e6
        elif peak < 1:
            rate_unit, scale = "Mbit/s", 1e3
        for node, xs, ys in series:
            ax.plot(xs, [y * scale for y in ys], drawstyle="steps-mid", label=f"{node} payload sent")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize=8, frameon=False)
    ax.set_xlabel(f"time ({unit})")
    ax.set_ylabel(rate_unit)
    if title:
        ax.set_title(title)
    fig.tight_layout()
    return Plot(fig)


#: how :func:`tcp_seq_time` draws a segment of each kind (:data:`~rdmalab.capture.iwarp_conns.SEGMENT_KINDS`)
_SEGMENT_STYLE = {
    RETRANSMISSION: dict(marker="x", color="#ef6c00", s=40, label="sent again"),
    OUT_OF_ORDER: dict(marker="s", color="#6d4c41", s=24, label="out of order (a hole filled late)"),
    KEEP_ALIVE: dict(marker="_", color="#9e9e9e", s=40, label="keep-alive"),
}


def tcp_seq_time(analysis: Analysis, connection: int | None = None, *, title: str | None = None,
                 width: float = 7.5, height: float = 3.6) -> Plot:
    """An iWARP connection's TCP segments over time (tcptrace's time-sequence graph of one connection): each
    segment with data a point at (its time, where it starts in its direction's sequence space), both
    directions; segments sent again are orange crosses, out-of-order ones brown squares, keep-alives grey
    dashes.  ``analysis``: :func:`~rdmalab.capture.analysis.analyze`'s result (its ``iwarp_seq_time``);
    ``connection``: the id of one of its ``iwarp_connections``, by default the one with the most segments
    sent again (then the most frames).  A ``ValueError`` names the connections there are when there is no
    such one."""
    have = [c for c in analysis.iwarp_connections if c.id in analysis.iwarp_seq_time]
    if connection is None:
        if not have:
            raise ValueError(f"{analysis.path}: no iWARP connection with TCP segments to plot")
        conn = max(have, key=lambda c: (c.summary.get("retransmissions", 0), c.packets, -c.id))
    else:
        found = [c for c in have if c.id == connection]
        if not found:
            raise ValueError(f"connection {connection}: not an iWARP connection of {analysis.path} with TCP segments "
                             f"(those are {[c.id for c in have] or 'none'})")
        conn = found[0]
    pts = analysis.iwarp_seq_time[conn.id]
    unit, div = _time_unit(float(pts["t"].max()) * 1e6 if len(pts["t"]) else 0.0)
    t = pts["t"] * 1e6 / div
    ways = conn.summary["directions"]  # (initiator to responder, then back)
    fig, ax = _figure(width, height)
    for way, (marker, colour, size) in enumerate((("o", "#1565c0", 14), (".", "#2e7d32", 30))):
        sel = (pts["dir"] == way) & (pts["kind"] == NEW)
        if sel.any():
            ax.scatter(t[sel], pts["seq"][sel], marker=marker, color=colour, s=size, zorder=3,
                       label=f"{ways[way]['from']} \u2192 {ways[way]['to']}")
    for kind, style in _SEGMENT_STYLE.items():
        sel = pts["kind"] == kind
        if sel.any():
            ax.scatter(t[sel], pts["seq"][sel], zorder=4, **style)
    ax.set_xlabel(f"time since the connection's first frame with iWARP ({unit})")
    ax.set_ylabel("octets after the direction's first")
    ax.ticklabel_format(axis="y", style="plain", useOffset=False)
    ax.set_title(title or f"iWARP connection {conn.id}: TCP segments over time")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize=8, frameon=False)
    fig.tight_layout()
    return Plot(fig)


def opcode_counts(source: Iterable[Any]) -> dict[str, int]:
    """How many packets of each opcode a trace or capture holds (a quick table for notebooks)."""
    out: dict[str, int] = {}
    for p in source:
        op = getattr(p, "opcode", None)
        if op is None:
            pkt = getattr(p, "packet", p)
            bth = getattr(pkt, "bth", None)
            op = bth.opcode if bth is not None else None
        elif getattr(p, "kind", "sent") != "sent":
            continue
        if op is None:
            continue
        name = OPCODES[op].name if op in OPCODES else f"0x{op:02x}"
        out[name] = out.get(name, 0) + 1
    return out
