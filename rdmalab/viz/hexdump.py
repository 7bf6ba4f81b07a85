"""Hex dumps coloured by header and field.

Every byte is coloured by the header it belongs to; neighbouring fields of one header alternate
between two shades of that header's colour so that field boundaries stay visible.  Hovering a
byte names every field that touches it (bit fields share bytes) with its decoded value.  The
output is plain HTML with inline styles and no script, so it renders the same in JupyterLab,
in nbconvert output and in the Jupyter Book pages.

The byte spans come from the decoders themselves (:meth:`rdmalab.wire.Packet.spans`,
:meth:`rdmalab.wire.Header.spans`), so the colours can never disagree with the decoder.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from dataclasses import replace as dc_replace
from typing import Any

from rdmalab.wire.header import Header, Span

# One hue per header; (light, dark) shades alternate between fields of the same header.
_PALETTE: dict[str, tuple[str, str]] = {
    "Ethernet": ("#e8e8e8", "#d0d0d0"),
    "SLL": ("#e8e8e8", "#d0d0d0"),
    "VLAN": ("#dcdcdc", "#c4c4c4"),
    "IPv4": ("#cfe3f7", "#a9cbef"),
    "IPv6": ("#cfe3f7", "#a9cbef"),
    "UDP": ("#d9d2f0", "#bdb1e6"),
    "TCP": ("#d9d2f0", "#bdb1e6"),
    "LRH": ("#f7d9c4", "#efbd99"),
    "GRH": ("#cfe3f7", "#a9cbef"),
    "BTH": ("#ffe7a3", "#ffd466"),
    "RETH": ("#c8ecc8", "#9edb9e"),
    "AETH": ("#f9c9d4", "#f29fb3"),
    "AtomicETH": ("#c7ece6", "#98dcd1"),
    "AtomicAckETH": ("#c7ece6", "#98dcd1"),
    "ImmDt": ("#f3d0f0", "#e6a9e0"),
    "IETH": ("#f3d0f0", "#e6a9e0"),
    "DETH": ("#d6e9c6", "#b5d89a"),
    "RDETH": ("#d6e9c6", "#b5d89a"),
    "XRCETH": ("#d6e9c6", "#b5d89a"),
    "FETH": ("#d6e9c6", "#b5d89a"),
    "CNP": ("#eeeeee", "#dddddd"),
    "MAD": ("#e0f0d8", "#c2e2b2"),
    "CM": ("#fde3c8", "#f9c896"),
    "MPA": ("#f7d9c4", "#efbd99"),
    "DDP": ("#ffe7a3", "#ffd466"),
    "RDMAP": ("#c8ecc8", "#9edb9e"),
    "Payload": ("#ffffff", "#ffffff"),
    "Pad": ("#f0f0f0", "#f0f0f0"),
    "ICRC": ("#ff9f9f", "#ff9f9f"),
    "CRC32c": ("#ff9f9f", "#ff9f9f"),
    "VCRC": ("#ffb3b3", "#ffb3b3"),
}
_FALLBACK = [("#e3f2fd", "#bbdefb"), ("#fff3e0", "#ffe0b2"), ("#f1f8e9", "#dcedc8"), ("#fce4ec", "#f8bbd0")]

MONO = "font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, 'DejaVu Sans Mono', monospace"


def layer_colour(layer: str, dark: bool = False) -> str:
    """The colour the hex dump uses for a header (also used by the ladder and the legend)."""
    pair = _PALETTE.get(layer)
    if pair is None:
        pair = _FALLBACK[sum(map(ord, layer)) % len(_FALLBACK)]
    return pair[1 if dark else 0]


@dataclass
class Mark:
    """Bytes to outline, e.g. the masked ICRC fields or the byte where an answer is wrong."""

    start: int
    end: int
    label: str
    colour: str = "#d00000"


def _as_marks(highlight: Any) -> list[Mark]:
    if highlight is None:
        return []
    out = []
    for h in highlight:
        if isinstance(h, Mark):
            out.append(h)
        elif isinstance(h, Span):
            out.append(Mark(h.start, h.end, f"{h.layer}.{h.field}"))
        else:
            start, end, *rest = h
            out.append(Mark(int(start), int(end), str(rest[0]) if rest else ""))
    return out


def spans_of(obj: Any) -> tuple[bytes, list[Span]]:
    """Bytes and field spans of anything the lab shows: a Packet, a Header, a captured packet, bytes."""
    if hasattr(obj, "packet") and obj.packet is not None and not isinstance(obj, (bytes, bytearray)):
        obj = obj.packet  # a CapturedPacket
    if hasattr(obj, "spans") and hasattr(obj, "data") and not isinstance(obj, Header):
        return bytes(obj.data), _with_options(obj, list(obj.spans()))
    if isinstance(obj, Header):
        return obj.encode(), obj.spans(0)
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return bytes(obj), []
    raise TypeError(f"cannot draw a hex dump of {type(obj).__name__}")


def _with_options(packet: Any, spans: list[Span]) -> list[Span]:
    """``spans`` and, after each header longer than its fixed part (TCP's options, RFC 9293 3.1; IPv4's,
    RFC 791), a span ``options`` for the bytes that no declared field covers."""
    size = len(packet.data)
    for layer in getattr(packet, "layers", ()):
        fixed = layer.header.LAYOUT.size
        length = getattr(layer.header, "header_len", fixed)
        if not isinstance(length, int) or length <= fixed:
            continue
        start, end = layer.offset + fixed, min(layer.offset + length, size)
        if end <= start:
            continue
        span = Span(layer.name, "options", start, end, 0, (end - start) * 8, None, f"{end - start} bytes", None)
        last = [i for i, sp in enumerate(spans) if sp.layer == layer.name and sp.end == start]
        spans.insert(last[-1] + 1 if last else len(spans), span)
    return spans


@dataclass
class HexDump:
    """A coloured hex dump; displays itself in Jupyter (``_repr_html_``) and as text."""

    data: bytes
    spans: list[Span] = field(default_factory=list)
    title: str | None = None
    marks: list[Mark] = field(default_factory=list)
    width: int = 16
    legend: bool = True
    fields: bool = True
    start: int = 0
    end: int | None = None

    # ------------------------------------------------------------ per-byte index
    def byte_fields(self) -> list[list[tuple[int, Span]]]:
        """For each byte, the (field index within its layer, span) pairs that touch it."""
        per: list[list[tuple[int, Span]]] = [[] for _ in self.data]
        counters: dict[tuple[str, int], int] = {}
        layer_ids: dict[str, int] = {}
        for sp in self.spans:
            # field index within the header instance (a header is identified by layer + first start)
            key = (sp.layer, layer_ids.setdefault(sp.layer, sp.start))
            idx = counters.get(key, 0)
            counters[key] = idx + 1
            for b in range(max(0, sp.start), min(len(self.data), sp.end)):
                per[b].append((idx, sp))
        return per

    def field_at(self, offset: int) -> list[Span]:
        """The fields that cover byte ``offset`` (several for bit fields)."""
        return [sp for sp in self.spans if sp.start <= offset < sp.end]

    # ------------------------------------------------------------ rendering
    def _byte_title(self, i: int, hits: list[tuple[int, Span]], marks: list[Mark]) -> str:
        lines = [f"byte {i} (0x{i:x}) = 0x{self.data[i]:02x}"]
        for _, sp in hits:
            where = f"bytes {sp.start}-{sp.end - 1}" if sp.end - sp.start > 1 else f"byte {sp.start}"
            bits = f", {sp.bits} bits" if sp.bits % 8 or sp.end - sp.start != sp.bits // 8 else ""
            ws = f" [{sp.ws}]" if sp.ws else ""
            lines.append(f"{sp.layer}.{sp.field} = {sp.text} ({where}{bits}){ws}")
        for m in marks:
            lines.append(f"marked: {m.label}")
        return html.escape("\n".join(lines), quote=True)

    def to_html(self) -> str:
        data = self.data
        end = len(data) if self.end is None else min(self.end, len(data))
        per = self.byte_fields()
        marks = self.marks
        rows = []
        first_row = self.start - self.start % self.width
        # Every cell states its own padding, border and alignment: a notebook's table CSS (JupyterLab pads
        # a td by .5em and right-aligns it) must not widen the cells a style left unset, which made the
        # spacing between bytes uneven (blank cells and the mid-row gap were wider than byte cells).
        cell = "padding:1px 2px;border:none;text-align:center;"
        for row in range(first_row, end, self.width):
            cells = [f'<td style="color:#888;padding:1px .6em 1px 0;border:none;text-align:right">{row:04x}</td>']
            for i in range(row, row + self.width):
                gap = "x" if (i - row) == self.width // 2 else ""
                if gap:
                    cells.append('<td style="width:.5em;min-width:.5em;padding:0;border:none"></td>')
                if i < self.start or i >= end:
                    cells.append(f'<td style="{cell}">&nbsp;&nbsp;</td>')
                    continue
                hits = per[i]
                if hits:
                    idx, sp = hits[0]
                    bg = layer_colour(sp.layer, dark=bool(idx % 2))
                else:
                    bg = "#ffffff"
                my_marks = [m for m in marks if m.start <= i < m.end]
                style = f"background:{bg};{cell}"
                if my_marks:
                    style += f"outline:2px solid {my_marks[0].colour};outline-offset:-2px;font-weight:bold;"
                if len(hits) > 1:
                    style += "text-decoration:underline dotted;"
                title = self._byte_title(i, hits, my_marks)
                cells.append(f'<td style="{style}" title="{title}">{data[i]:02x}</td>')
            rows.append("<tr>" + "".join(cells) + "</tr>")
        parts = ['<div class="rdmalab-hexdump" style="margin:.4em 0">']
        if self.title:
            parts.append(f'<div style="font-weight:bold;margin-bottom:.2em">{html.escape(self.title)}</div>')
        parts.append(
            f'<table style="{MONO};font-size:12px;border-collapse:collapse;line-height:1.35;'
            f'border:none;margin:0">' + "".join(rows) + "</table>"
        )
        if self.legend:
            parts.append(self._legend_html())
        if self.fields and self.spans:
            parts.append(self._fields_html())
        parts.append("</div>")
        return "".join(parts)

    def _layers(self) -> list[tuple[str, int, int]]:
        out: list[tuple[str, int, int]] = []
        for sp in self.spans:
            if out and out[-1][0] == sp.layer and sp.start <= out[-1][2]:
                out[-1] = (sp.layer, out[-1][1], max(out[-1][2], sp.end))
            else:
                out.append((sp.layer, sp.start, sp.end))
        return out

    def _legend_html(self) -> str:
        items = []
        for name, start, end in self._layers():
            items.append(
                f'<span style="background:{layer_colour(name)};border:1px solid {layer_colour(name, True)};'
                f'padding:0 .4em;margin-right:.3em;white-space:nowrap">{html.escape(name)} '
                f'<span style="color:#555">{start if end - start == 1 else f"{start}&ndash;{end - 1}"}</span></span>'
            )
        # One legend entry per label ("masked to ones: 9, 16, 18-19"), not one per outlined range.
        groups: dict[tuple[str, str], list[Mark]] = {}
        for m in self.marks:
            groups.setdefault((m.label, m.colour), []).append(m)
        for (label, colour), ms in groups.items():
            where = ", ".join(f"{m.start}" if m.end - m.start == 1 else f"{m.start}&ndash;{m.end - 1}" for m in ms)
            items.append(
                f'<span style="outline:2px solid {colour};padding:0 .4em;margin-right:.3em">'
                f"{html.escape(label)}: {where}</span>"
            )
        return f'<div style="font-size:12px;margin:.3em 0;line-height:1.9">{"".join(items)}</div>'

    def _fields_html(self) -> str:
        rows = []
        for sp in self.spans:
            colour = layer_colour(sp.layer)
            where = f"{sp.start}" if sp.end - sp.start == 1 else f"{sp.start}&ndash;{sp.end - 1}"
            rows.append(
                f'<tr><td style="background:{colour};padding:0 .4em">{html.escape(sp.layer)}</td>'
                f'<td style="padding:0 .4em">{html.escape(sp.field)}</td>'
                f'<td style="padding:0 .4em;text-align:right">{where}</td>'
                f'<td style="padding:0 .4em">{html.escape(sp.text)}</td>'
                f'<td style="padding:0 .4em;color:#777">{html.escape(sp.ws or "")}</td></tr>'
            )
        head = (
            "<tr><th style='text-align:left;padding:0 .4em'>header</th><th style='text-align:left;padding:0 .4em'>field</th>"
            "<th style='padding:0 .4em'>bytes</th><th style='text-align:left;padding:0 .4em'>value</th>"
            "<th style='text-align:left;padding:0 .4em'>Wireshark field</th></tr>"
        )
        return (
            f'<details style="font-size:12px"><summary>{len(self.spans)} fields</summary>'
            f'<table style="{MONO};font-size:12px;border-collapse:collapse">{head}{"".join(rows)}</table></details>'
        )

    def _repr_html_(self) -> str:
        return self.to_html()

    def text(self) -> str:
        """A plain-text hex dump with the header names in the margin."""
        per = self.byte_fields()
        end = len(self.data) if self.end is None else min(self.end, len(self.data))
        lines = [self.title] if self.title else []
        first_row = self.start - self.start % self.width
        for row in range(first_row, end, self.width):
            cols = []
            names: list[str] = []
            for i in range(row, row + self.width):
                if self.start <= i < end:
                    cols.append(f"{self.data[i]:02x}")
                    for _, sp in per[i][:1]:
                        if not names or names[-1] != sp.layer:
                            names.append(sp.layer)
                else:
                    cols.append("  ")
            lines.append(f"{row:04x}  {' '.join(cols)}  {' '.join(names)}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.text()


def hexdump(
    obj: Any,
    *,
    title: str | None = None,
    highlight: Iterable[Any] | None = None,
    spans: Sequence[Span] | None = None,
    width: int = 16,
    legend: bool = True,
    fields: bool = True,
    start: int = 0,
    end: int | None = None,
    hide: Iterable[str] = (),
) -> HexDump:
    """A coloured hex dump of a packet, a header, a captured packet or plain bytes.

    ``highlight`` outlines byte ranges: ``(start, end, label)`` tuples, :class:`Mark` or spans.
    ``spans`` overrides the field spans (useful for plain bytes with known layout).
    ``hide`` names fields (``"AETH.value"``) whose decoded value is not shown, only their bytes: for an
    exercise that asks the learner to decode them.
    """
    data, found = spans_of(obj)
    hidden = set(hide)
    if hidden:
        found = [dc_replace(sp, value=None, text="(decode it yourself)") if f"{sp.layer}.{sp.field}" in hidden else sp
                 for sp in found]
    return HexDump(
        data, list(spans) if spans is not None else found, title, _as_marks(highlight), width, legend, fields,
        start, end,
    )


def field_table(obj: Any) -> FieldTable:
    """The decoded fields of a packet as a table (header, field, bytes, value, Wireshark name)."""
    data, spans = spans_of(obj)
    return FieldTable(spans)


@dataclass
class FieldTable:
    spans: list[Span]

    def _repr_html_(self) -> str:
        return HexDump(b"", self.spans, legend=False)._fields_html().replace("<details", "<details open")

    def rows(self) -> list[tuple[str, str, int, int, str]]:
        return [(sp.layer, sp.field, sp.start, sp.end, sp.text) for sp in self.spans]

    def __repr__(self) -> str:
        return "\n".join(f"{sp.layer:>12}.{sp.field:<14} {sp.start:>4}-{sp.end - 1:<4} {sp.text}" for sp in self.spans)
