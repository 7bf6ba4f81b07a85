"""The HTML report of ``rdmalab analyze --html``: a page to keep open beside Wireshark.

What went wrong comes first, in words; then the connections (bytes requested beside bytes
sent again), interactive plots (plotly: zoom, pan, hover; plotly.js is embedded in the page so
it works offline), the findings grouped by kind with a sentence explaining each kind and links
to the frames they name (ascending), and the messages.
"""

from __future__ import annotations

import html
import os
from collections import defaultdict
from typing import Any

import numpy as np

from rdmalab.capture.analysis import KIND_HELP, Analysis, Finding
from rdmalab.capture.iwarp_conns import KEEP_ALIVE, NEW, OUT_OF_ORDER, RETRANSMISSION

#: connections drawn in the per-connection plots (those with the most findings first)
PLOT_CONNECTIONS = 8
#: points per connection in the PSN plot (evenly thinned beyond; retransmissions and NAKs always kept)
PLOT_POINTS = 20000
#: findings listed per kind (all are counted; -T json has all)
LIST_PER_KIND = 200

_COLOURS = {"request": "#1f77b4", "again": "#d62728", "nak": "#ff7f0e", "gap": "#9467bd", "cnp": "#2ca02c",
            "retransmission": "#d62728", "nak_seq_err": "#ff7f0e", "psn_gap": "#9467bd"}

_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1400px;padding:0 1.5em;color:#222}
h1{font-size:1.5em;margin-bottom:.2em} h2{margin-top:1.6em;border-bottom:1px solid #ddd}
.summary{font-size:1.1em;line-height:1.5;background:#f6f8fa;border-left:4px solid #d62728;padding:.6em 1em}
.summary.ok{border-left-color:#2ca02c}
table{border-collapse:collapse;margin:.5em 0} td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}
th{background:#f0f0f0} td.n{text-align:right;font-variant-numeric:tabular-nums}
.kind{font-family:monospace;font-weight:bold} .help{color:#555;margin:.2em 0 .5em}
details{margin:.6em 0} summary{cursor:pointer;font-size:1.05em}
.plot{width:100%;min-height:360px} a.f{font-family:monospace}
.muted{color:#777}
"""


def html_report(a: Analysis) -> str:
    """A self-contained HTML page (plotly.js inline: no network needed to view it)."""
    title = os.path.basename(str(a.path)) if a.path else "capture"
    parts = ["<!doctype html><html><head><meta charset='utf-8'>",
             f"<title>rdmalab analysis: {html.escape(title)}</title><style>{_CSS}</style></head><body>",
             f"<h1>{html.escape(title)}</h1>",
             f"<p class=muted>{a.packets} frames, {a.rdma_packets} RDMA packets, {len(a.connections)} connection(s), "
             f"{len(a.messages)} message(s)" + (f", path MTU ~{a.mtu}" if a.rdma_packets else "")
             + (f"; {a.iwarp_frames} iWARP frames, {len(a.iwarp_connections)} iWARP connection(s)"
                if a.iwarp_frames else "") + "</p>"]
    worst = bool(set(a.counts()) - {"cnp", "ecn_ce"}) or bool(_tcp_sent_again(a)[0])
    parts.append(f"<div class='summary{'' if worst else ' ok'}'>{_summary(a)}</div>")
    parts.append(_connections_table(a))
    parts.append(_iwarp_table(a))
    parts.extend(_plots(a))
    parts.append(_findings_html(a))
    parts.append(_messages_html(a))
    parts.append(_frames_index(a))
    parts.append("</body></html>")
    return "\n".join(parts)


# ---------------------------------------------------------------------------- words


def _summary(a: Analysis) -> str:
    n = a.all_events()  # what the findings stand for (a pass of duplicates, findings folded past a budget)
    say: list[str] = []
    if not a.connections and not a.iwarp_connections:
        say.append("No RDMA connection in this capture.")
    elif not a.connections:
        say.append(f"{len(a.iwarp_connections)} iWARP connection(s) (TCP connections that carry MPA); no RoCE.")
    req = sum(c.request_bytes for c in a.connections)
    again = sum(c.retransmitted_bytes for c in a.connections)
    if n.get("capture_seam"):
        say.append(f"The capture is <b>{n['capture_seam'] and _seams(a) + 1} runs appended to each other</b> "
                   "(time goes back at each seam); each run is analysed on its own.")
    if n.get("duplicate_frames"):
        f = a.of_kind("duplicate_frames")[0]
        say.append(f"<b>{f.detail['count']} frames are in the capture twice</b> (copied by a mirror port or a merge); "
                   "the copies are left out.")
    lost = n.get("psn_gap", 0) - n.get("capture_gap", 0)
    if lost > 0:
        say.append(f"<b>Packets were lost on the wire</b>: {lost} gap(s) in the request PSNs.")
    if n.get("capture_gap"):
        say.append(f"{n['capture_gap']} PSN gap(s) were never sent again: the <b>capture</b> missed them, not the wire.")
    if n.get("nak_seq_err"):
        say.append(f"The responder asked {n['nak_seq_err']} time(s) for a retransmission (NAK, PSN sequence error).")
    if n.get("retransmission"):
        trig: dict[str, int] = defaultdict(int)
        for f in a.of_kind("retransmission"):
            trig[str(f.detail.get("trigger"))] += 1
        why = ", ".join(f"{k} {v}" for k, v in sorted(trig.items(), key=lambda kv: -kv[1]))
        say.append(f"<b>The requesters went back {n['retransmission']} time(s)</b> (go-back-N; triggered by: {why}), "
                   f"sending {again:,} bytes again: {100 * again / max(1, req):.1f}% on top of the {req:,} bytes "
                   "requested.")
    if n.get("timeout"):
        say.append(f"{n['timeout']} retransmission(s) have nothing but the requester's timer to explain them.")
    segments, octets = _tcp_sent_again(a)
    if segments:
        say.append(f"<b>TCP sent {segments} segment(s) again on the iWARP connections</b> ({octets:,} bytes): "
                   "iWARP leaves loss recovery to TCP (a segment lost, or its acknowledgement late).")
    for kind, words in (("nak_rnr", "receiver-not-ready NAK(s): receive buffers were missing"),
                        ("nak_other", "fatal NAK(s): the connection went to the error state"),
                        ("implied_nak", "READ response gap(s) (implied NAK)"),
                        ("bad_icrc", "packet(s) with a bad ICRC"), ("bad_crc32c", "iWARP FPDU(s) with a bad CRC32c"),
                        ("terminate", "iWARP Terminate(s)"),
                        ("unreachable", "ICMP error(s) for RoCE packets (port unreachable: nothing takes RoCEv2 "
                                        "at that address)"),
                        ("opcode_sequence", "message(s) out of opcode order"),
                        ("ack_coalescing", "acknowledgement anomaly(ies)"), ("msn_jump", "MSN jump(s) back"),
                        ("lost", "packet(s) sent and never received"),
                        ("time_backwards", "step(s) back in the capture's timestamps")):
        if n.get(kind):
            say.append(f"{n[kind]} {words}.")
    if n.get("cnp") or n.get("ecn_ce"):
        say.append(f"Congestion: {n.get('ecn_ce', 0)} CE-marked request(s), {n.get('cnp', 0)} CNP(s).")
    if not say or not (set(n) - {"cnp", "ecn_ce"}) and not segments:
        say.insert(0, "<b>Nothing went wrong</b> that the capture shows: no loss, no NAK, no retransmission.")
    lat = [m.duration for m in a.messages if m.duration is not None]
    if lat:
        arr = np.array(lat) * 1e6
        say.append(f"Message latency: median {np.median(arr):.1f} us, 99th percentile {np.percentile(arr, 99):.1f} us, "
                   f"longest {arr.max():.1f} us ({len(arr)} completed messages).")
    return " ".join(say)


def _tcp_sent_again(a: Analysis) -> tuple[int, int]:
    """The TCP segments the iWARP connections sent again, and their octets (each direction's count:
    :meth:`~rdmalab.capture.iwarp_conns._Side.segment`)."""
    return (sum(c.summary.get("retransmissions", 0) for c in a.iwarp_connections),
            sum(c.retransmitted_bytes for c in a.iwarp_connections))


def _seams(a: Analysis) -> int:
    f = a.of_kind("capture_seam")
    return int(f[0].detail["count"]) if f else 0


def _iwarp_table(a: Analysis, limit: int = 2000) -> str:
    """The iWARP connections: ends, MPA exchange, FPDUs and messages each way, data bytes."""
    if not a.iwarp_connections:
        return ""
    rows = []
    for c in a.iwarp_connections[:limit]:
        s = c.summary
        mpa = ", ".join(f"{w} frame {m['frame']} (CRC {m['crc']}, markers {m['markers']})"
                        for w, m in s.get("mpa", {}).items()) or "not in the capture"
        ways = "<br>".join(f"{html.escape(d['from'])} → {html.escape(d['to'])}: {d['fpdus']} FPDUs, "
                           + (", ".join(f"{n} {html.escape(k)}" for k, n in d["messages"].items()) or "no message")
                           for d in s.get("directions", []))
        cap = f"{html.escape(c.capture)}: " if c.capture else ""
        rows.append(f"<tr><td>{c.id}</td><td>{cap}{html.escape(c.name)}</td><td>{mpa}</td><td>{ways}</td>"
                    f"<td class=n>{c.packets}</td><td class=n>{c.request_bytes:,}</td>"
                    f"<td class=n>{s.get('retransmissions', 0)} ({s.get('retransmitted_bytes', 0):,} B)</td>"
                    f"<td class=n>{s.get('throughput_mbps', 0):.2f}</td></tr>")
    more = (f"<p class=muted>... and {len(a.iwarp_connections) - limit} more (-T json has all).</p>"
            if len(a.iwarp_connections) > limit else "")
    return ("<h2>iWARP connections</h2><table><tr><th>#</th><th>initiator → responder</th><th>MPA</th>"
            "<th>messages each way</th><th>frames</th><th>data bytes</th><th>TCP segments sent again</th>"
            "<th>Mbit/s</th></tr>"
            + "".join(rows) + "</table>" + more)


def _connections_table(a: Analysis, shown: int = 20, limit: int = 2000) -> str:
    """The connections, those with the most findings first: the first ``shown`` in view, the rest
    (up to ``limit``) folded away."""
    if not a.connections:
        return "<h2>Connections</h2><p>No RoCE or InfiniBand connection.</p>" if not a.iwarp_connections else ""
    per: dict[int | None, int] = defaultdict(int)
    for f in a.findings:
        per[f.connection] += 1
    head = ("<table><tr><th>#</th><th>requester → responder</th><th>run</th><th>packets</th>"
            "<th>bytes requested</th><th>bytes sent again</th><th>goodput Mbit/s</th>"
            "<th>latency p50 / p99 (µs)</th><th>findings</th></tr>")
    ranked = sorted(a.connections, key=lambda c: (-per.get(c.id, 0), c.id)) if len(a.connections) > shown else \
        a.connections
    rows = []
    for c in ranked[:limit]:
        lat = c.summary.get("latency_us") or {}
        pct = 100 * c.retransmitted_bytes / max(1, c.request_bytes)
        cap = f"{html.escape(c.capture)}: " if c.capture else ""
        rows.append(f"<tr><td>{c.id}</td><td>{cap}{html.escape(c.name)}</td><td class=n>{c.run}</td>"
                    f"<td class=n>{c.packets}</td><td class=n>{c.request_bytes:,}</td>"
                    f"<td class=n>{c.retransmitted_bytes:,} ({pct:.1f}%)</td>"
                    f"<td class=n>{c.summary.get('goodput_mbps', 0):.2f}</td>"
                    f"<td class=n>{lat.get('p50', float('nan')):.1f} / {lat.get('p99', float('nan')):.1f}</td>"
                    f"<td class=n>{per.get(c.id, 0)}</td></tr>")
    out = ["<h2>Connections</h2>"]
    if len(a.connections) > shown:
        out.append(f"<p class=muted>{len(a.connections)} connections; the {shown} with the most findings:</p>")
    out.append(head + "".join(rows[:shown]) + "</table>")
    if len(rows) > shown:
        out.append(f"<details><summary>{len(rows) - shown} more connections</summary>{head}{''.join(rows[shown:])}"
                   "</table></details>")
    if len(a.connections) > limit:
        out.append(f"<p class=muted>... and {len(a.connections) - limit} more (-T json has all).</p>")
    return "".join(out)


# ---------------------------------------------------------------------------- plots


def _plotted(a: Analysis, conns: list[Any] | None = None) -> list[Any]:
    """The connections drawn (``conns``, by default the RoCE ones): the :data:`PLOT_CONNECTIONS` with the most
    findings, then packets, in id order."""
    per: dict[int | None, int] = defaultdict(int)
    for f in a.findings:
        per[f.connection] += 1
    ranked = sorted(a.connections if conns is None else conns, key=lambda c: (-per.get(c.id, 0), -c.packets, c.id))
    return sorted(ranked[:PLOT_CONNECTIONS], key=lambda c: c.id)


def _layout(fig: Any, title: str, xlabel: str, ylabel: str, height: int = 420) -> None:
    fig.update_layout(title=title, height=height, margin={"l": 70, "r": 20, "t": 50, "b": 50},
                      legend={"orientation": "v", "x": 1.01, "y": 1, "xanchor": "left"},  # outside the data
                      template="plotly_white", hovermode="closest")
    fig.update_xaxes(title_text=xlabel)
    fig.update_yaxes(title_text=ylabel)


def _plots(a: Analysis) -> list[str]:
    try:
        import plotly.graph_objects as go  # optional: plotly (analysis extra)
    except ImportError:
        return ["<p class=muted>(plots need plotly: pip install rdmalab[analysis])</p>"]
    out: list[str] = []
    figs: list[tuple[str, Any]] = []
    conns = _plotted(a)
    if a.connections:
        # bytes requested beside bytes sent again
        shown = a.connections[:50]
        fig = go.Figure([go.Bar(name="bytes requested", x=[f"conn {c.id}" for c in shown],
                                y=[c.request_bytes for c in shown], marker_color=_COLOURS["request"]),
                         go.Bar(name="bytes sent again", x=[f"conn {c.id}" for c in shown],
                                y=[c.retransmitted_bytes for c in shown], marker_color=_COLOURS["again"])])
        _layout(fig, "Bytes requested and bytes sent again, per connection", "connection", "bytes", 320)
        fig.update_layout(barmode="group")
        figs.append(("Bytes", fig))
    for c in conns:
        pts = a.psn_time.get(c.id)
        if pts is None or not len(pts["t"]):
            continue
        t, p, k = pts["t"] * 1e3, pts["psn"], pts["kind"]
        fig = go.Figure()
        for kind, name, colour, symbol, size in ((0, "request (first copy)", _COLOURS["request"], "circle", 4),
                                                 (1, "sent again", _COLOURS["again"], "x-thin-open", 8),
                                                 (2, "NAK (the PSN it names)", _COLOURS["nak"], "triangle-down", 11)):
            sel = np.nonzero(k == kind)[0]
            if kind == 0 and len(sel) > PLOT_POINTS:
                sel = sel[:: len(sel) // PLOT_POINTS + 1]
            if len(sel) == 0:
                continue
            # NAKs last: drawn on top of the crosses
            fig.add_trace(go.Scattergl(x=t[sel], y=p[sel], mode="markers", name=name,
                                       marker={"color": colour, "symbol": symbol, "size": size,
                                               "line": {"width": 1.5 if kind else 0, "color": colour}}))
        _layout(fig, f"Connection {c.id}: request PSNs over time (go-back-N shows as red steps back)",
                "ms since the connection's first packet", "PSN − first PSN")
        figs.append((f"PSN over time, connection {c.id}", fig))
    if conns:
        fig = go.Figure()
        marks: dict[str, tuple[list[float], list[str]]] = {}
        ymax = 0.0
        for c in conns:
            ser = a.throughput.get(c.id) or []
            if ser:
                xs = [x * 1e3 for x, _ in ser]
                ys = [y for _, y in ser]
                ymax = max(ymax, max(ys))
                fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line_shape="hv", name=f"conn {c.id} Mbit/s"))
            for f in a.findings:
                if f.connection == c.id and f.kind in ("retransmission", "nak_seq_err", "psn_gap", "cnp"):
                    xs_, texts = marks.setdefault(f.kind, ([], []))
                    xs_.append((f.time - c.first) * 1e3)
                    texts.append(f"conn {c.id}, frame {f.frames[0] if f.frames else ''}: {f.text}")
        labels = {"retransmission": "retransmission", "nak_seq_err": "NAK", "psn_gap": "PSN gap", "cnp": "CNP"}
        for row, (ev, (xs_, texts)) in enumerate(sorted(marks.items())):
            # event marks in a band above the curves, one row per kind, each with its legend entry
            fig.add_trace(go.Scattergl(x=xs_, y=[ymax * (1.05 + 0.05 * row)] * len(xs_), mode="markers",
                                       name=labels[ev], text=texts, hoverinfo="text+x",
                                       marker={"symbol": "line-ns-open", "size": 14, "color": _COLOURS.get(ev),
                                               "line": {"width": 2, "color": _COLOURS.get(ev)}}))
        _layout(fig, "Throughput over time (events marked above the curves)", "ms since the connection's first packet",
                "Mbit/s")
        figs.append(("Throughput", fig))
    figs += _iwarp_plots(a, go)
    lat = np.array([m.duration * 1e6 for m in a.messages if m.duration is not None and m.duration > 0])
    if len(lat):
        lo, hi = np.log10(max(lat.min(), 1e-3)), np.log10(lat.max())
        edges = np.logspace(lo, hi + 1e-9, max(2, min(60, int((hi - lo) * 12) + 2)))
        cnt, _ = np.histogram(lat, bins=edges)
        centers = np.sqrt(edges[:-1] * edges[1:])
        fig = go.Figure(go.Bar(x=centers, y=cnt, width=np.diff(edges), name="messages",
                               marker_color=_COLOURS["request"],
                               hovertext=[f"{a_:.1f}–{b_:.1f} µs: {n} message(s)" for a_, b_, n in
                                          zip(edges[:-1], edges[1:], cnt, strict=True)], hoverinfo="text"))
        _layout(fig, "Message latency (log scale: latencies span decades)", "latency (µs)", "messages", 320)
        fig.update_xaxes(type="log")
        figs.append(("Message latency", fig))
    first = True
    for name, fig in figs:
        div = fig.to_html(full_html=False, include_plotlyjs=first, config={"responsive": True, "scrollZoom": True,
                                                                           "displaylogo": False},
                          default_width="100%")
        first = False
        out.append(f"<h2>{html.escape(name)}</h2><div class=plot>{div}</div>")
    return out


def _iwarp_plots(a: Analysis, go: Any) -> list[tuple[str, Any]]:
    """Each plotted iWARP connection's TCP segments over time, both directions (what Wireshark's
    Stevens graph shows of one): where each segment starts in its direction's sequence space, new data
    as dots, segments sent again as red crosses, out-of-order ones (holes filled late) as orange
    diamonds, keep-alives as grey ticks."""
    figs: list[tuple[str, Any]] = []
    for c in _plotted(a, [c for c in a.iwarp_connections if c.id in a.iwarp_seq_time]):
        pts = a.iwarp_seq_time[c.id]
        names = [f"{d['from']} → {d['to']}" for d in c.summary["directions"]]
        fig = go.Figure()
        for way in (0, 1):
            for kind, label, colour, symbol, size in (
                    (NEW, "", ("#1f77b4", "#2ca02c")[way], "circle", 4),
                    (RETRANSMISSION, "sent again", _COLOURS["again"], "x-thin-open", 9),
                    (OUT_OF_ORDER, "out of order", _COLOURS["nak"], "diamond-open", 8),
                    (KEEP_ALIVE, "keep-alive", "#7f7f7f", "line-ew-open", 8)):
                sel = np.nonzero((pts["dir"] == way) & (pts["kind"] == kind))[0]
                if kind == NEW and len(sel) > PLOT_POINTS:
                    sel = sel[:: len(sel) // PLOT_POINTS + 1]
                if not len(sel):
                    continue
                hover = [f"frame {f}: {n} octets at {q}" for f, n, q in
                         zip(pts["frame"][sel].tolist(), pts["len"][sel].tolist(), pts["seq"][sel].tolist(),
                             strict=True)]
                fig.add_trace(go.Scattergl(x=pts["t"][sel] * 1e3, y=pts["seq"][sel], mode="markers",
                                           name=names[way] + (f", {label}" if label else ""), text=hover,
                                           hoverinfo="text+x",
                                           marker={"color": colour, "symbol": symbol, "size": size,
                                                   "line": {"width": 1.5 if kind != NEW else 0, "color": colour}}))
        _layout(fig, f"iWARP connection {c.id}: TCP segments over time (sent again: red crosses)",
                "ms since the connection's first frame with iWARP", "octets after the direction's first")
        figs.append((f"TCP sequence over time, iWARP connection {c.id}", fig))
    return figs


# ---------------------------------------------------------------------------- findings, messages, frames


def _frame_links(frames: list[int], limit: int = 12) -> str:
    fs = sorted(set(frames))
    links = ", ".join(f"<a class=f href='#frame-{f}' title='Wireshark: frame.number == {f}'>{f}</a>" for f in fs[:limit])
    return links + (f" … ({len(fs)} frames)" if len(fs) > limit else "")


def _findings_html(a: Analysis) -> str:
    by: dict[str, list[Finding]] = defaultdict(list)
    for f in a.findings:
        by[f.kind].append(f)
    if not by:
        return "<h2>Findings</h2><p>None.</p>"
    parts = ["<h2>Findings</h2>"]
    for kind in sorted(by, key=lambda k: -len(by[k])):
        fs = by[kind]
        parts.append(f"<details open><summary><span class=kind>{html.escape(kind)}</span> — {len(fs)}</summary>"
                     f"<p class=help>{html.escape(KIND_HELP.get(kind, ''))}</p><table><tr><th>conn</th>"
                     "<th>frames</th><th>what</th></tr>")
        for f in fs[:LIST_PER_KIND]:
            parts.append(f"<tr><td>{'' if f.connection is None else f.connection}</td><td>{_frame_links(f.frames)}</td>"
                         f"<td>{html.escape(f.text)}</td></tr>")
        parts.append("</table>")
        if len(fs) > LIST_PER_KIND:
            parts.append(f"<p class=muted>... and {len(fs) - LIST_PER_KIND} more (-T json has all).</p>")
        parts.append("</details>")
    return "".join(parts)


def _messages_html(a: Analysis) -> str:
    parts = ["<h2>Messages</h2><details><summary>"
             f"{len(a.messages)} message(s){' (first 2000)' if len(a.messages) > 2000 else ''}</summary>"
             "<table><tr><th>conn</th><th>op</th><th>PSN</th><th>size</th><th>duration (µs)</th><th>result</th>"
             "<th>frames</th></tr>"]
    for m in a.messages[:2000]:
        d = "" if m.duration is None else f"{m.duration * 1e6:.1f}"
        parts.append(f"<tr><td>{m.connection}</td><td>{html.escape(m.op)}</td><td>{m.first_psn}..{m.last_psn}</td>"
                     f"<td class=n>{m.size}</td><td class=n>{d}</td><td>{html.escape(m.result)}</td>"
                     f"<td>{_frame_links(m.frames, 4)}</td></tr>")
    parts.append("</table></details>")
    return "".join(parts)


def _frames_index(a: Analysis, limit: int = 5000) -> str:
    """Every frame a listed finding names, ascending, with what was found on it (the targets of the links)."""
    on: dict[int, list[str]] = defaultdict(list)
    by: dict[str, int] = defaultdict(int)
    for f in a.findings:
        by[f.kind] += 1
        if by[f.kind] > LIST_PER_KIND:
            continue
        for fr in f.frames[:12]:
            on[fr].append(f.kind)
    for m in a.messages[:2000]:
        for fr in m.frames[:4]:
            on.setdefault(fr, [])
    frames = sorted(on)[:limit]
    rows = [f"<tr id='frame-{fr}'><td class=n>{fr}</td><td><code>frame.number == {fr}</code></td>"
            f"<td>{html.escape(', '.join(sorted(set(on[fr]))))}</td></tr>" for fr in frames]
    return ("<h2>Frames</h2><details open><summary>the frames named above, ascending (Wireshark display filters)"
            "</summary><table><tr><th>frame</th><th>filter</th><th>findings</th></tr>" + "".join(rows)
            + "</table></details>")
