"""Several encapsulations of one operation, side by side: a bar of coloured headers per wire.

Each bar is drawn to scale (one pixel column per few bytes), coloured like the hex dump, so the
extra 40-byte GRH of RoCEv1 or the TCP/IP of iWARP is visible at a glance.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rdmalab.viz.hexdump import HexDump, layer_colour, spans_of
from rdmalab.wire.header import Span


def frame_spans(wire: Any) -> tuple[bytes, list[Span]]:
    """Bytes and spans of a whole frame; for iWARP the FPDU's spans are placed inside the TCP payload."""
    outer = getattr(wire, "outer", None)
    if outer is None:
        return spans_of(getattr(wire, "packet", wire))
    data, spans = spans_of(outer)
    base = outer.payload_offset
    spans = [s for s in spans if s.layer != "Payload"]
    inner_data, inner = spans_of(wire.packet)
    spans += [Span(s.layer, s.field, s.start + base, s.end + base, s.bit_offset, s.bits, s.value, s.text, s.ws)
              for s in inner]
    return data, spans


def _blocks(spans: list[Span]) -> list[tuple[str, int, int]]:
    blocks: list[tuple[str, int, int]] = []
    for s in spans:
        if blocks and blocks[-1][0] == s.layer and s.start <= blocks[-1][2]:
            blocks[-1] = (s.layer, blocks[-1][1], max(blocks[-1][2], s.end))
        elif blocks and s.end <= blocks[-1][2]:
            continue  # a layer nested inside the previous one (RDMAP inside DDP's bytes)
        else:
            blocks.append((s.layer, s.start, s.end))
    return blocks


@dataclass
class WireComparison:
    wires: list[Any]
    scale: float = 5.0  # pixels per byte

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for w in self.wires:
            data, spans = frame_spans(w)
            pkt = w.packet
            payload = pkt.payload_length
            crc = {"icrc": "ICRC (CRC-32, variant fields masked)", "crc32c": "MPA CRC32c (whole FPDU)"}.get(
                pkt.crc_kind or "", "none")
            if pkt.vcrc is not None:
                crc += " + VCRC (CRC-16, per link)"
            out.append({"name": w.name, "bytes": len(data), "payload": payload, "overhead": len(data) - payload,
                        "crc": crc, "crc_ok": pkt.crc_status, "blocks": _blocks(spans)})
        return out

    def to_html(self) -> str:
        rows = self.rows()
        width = int(max(r["bytes"] for r in rows) * self.scale) + 10
        parts = ["<div class='rdmalab-wires'>"]
        for r in rows:
            svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="34" font-size="10" '
                   f'font-family="DejaVu Sans, Arial, sans-serif">']
            for name, start, end in r["blocks"]:
                x, w = start * self.scale, (end - start) * self.scale
                svg.append(f'<g><title>{html.escape(name)}: bytes {start}-{end - 1} ({end - start} bytes)</title>'
                           f'<rect x="{x:.1f}" y="2" width="{w:.1f}" height="22" fill="{layer_colour(name)}" '
                           f'stroke="{layer_colour(name, True)}"/>')
                if w > 24:
                    svg.append(f'<text x="{x + w / 2:.1f}" y="17" text-anchor="middle">{html.escape(name)}</text>')
                svg.append("</g>")
            svg.append("</svg>")
            parts.append(f"<div style='margin:.3em 0'><b>{html.escape(r['name'])}</b>: {r['bytes']} bytes on the wire, "
                         f"{r['payload']} of them payload ({r['overhead']} bytes of headers and trailers)"
                         f"<br>{''.join(svg)}</div>")
        head = "<tr><th>wire</th><th>frame bytes</th><th>headers + trailers</th><th>end-to-end check</th><th>check ok</th></tr>"
        body = "".join(f"<tr><td>{html.escape(r['name'])}</td><td>{r['bytes']}</td><td>{r['overhead']}</td>"
                       f"<td>{html.escape(r['crc'])}</td><td>{r['crc_ok']}</td></tr>" for r in rows)
        parts.append(f"<table>{head}{body}</table></div>")
        return "".join(parts)

    def _repr_html_(self) -> str:
        return self.to_html()

    def __repr__(self) -> str:
        return "\n".join(f"{r['name']:>10}: {r['bytes']:4} bytes, overhead {r['overhead']:3}, "
                         + " | ".join(f"{n}({e - s})" for n, s, e in r["blocks"]) for r in self.rows())


def compare_wires(wires: Sequence[Any]) -> WireComparison:
    """Draw several encapsulations of the same operation side by side (see :mod:`rdmalab.lab.samples`)."""
    return WireComparison(list(wires))


def wire_hexdump(wire: Any, **kw: Any) -> HexDump:
    """The whole frame of a wire, coloured down to the RDMA fields (iWARP: through TCP into the FPDU)."""
    data, spans = frame_spans(wire)
    return HexDump(data, spans, title=kw.pop("title", getattr(wire, "name", None)), **kw)
