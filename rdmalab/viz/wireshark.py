"""rdmalab and Wireshark side by side, for one frame, field by field.

The comparison itself is :func:`rdmalab.capture.crosscheck.compare_packet` (the same code the
test suite's parity check runs); this module only lays the result out as a table, with every
disagreement tagged by the known Wireshark defect that explains it.
"""

from __future__ import annotations

import html
import os
from dataclasses import dataclass
from typing import Any

from rdmalab.capture import read
from rdmalab.capture.crosscheck import CrosscheckReport, compare_packet, known_ws_names, wireshark_packets
from rdmalab.capture.defects import WIRESHARK_DEFECTS
from rdmalab.capture.fields import frame_fields

_COLOUR = {"agree": "#e8f5e9", "explained": "#fff8e1", "unexplained": "#ffebee", "only": "#f5f5f5"}


@dataclass
class SideBySide:
    path: str
    frame: int
    rows: list[tuple[str, str, str, str, str]]  # field, rdmalab, wireshark, status, note

    def _repr_html_(self) -> str:
        body = []
        for key, ours, theirs, status, note in self.rows:
            bg = _COLOUR["agree" if status == "agree" else "only" if status.startswith("only") else
                         "explained" if note else "unexplained"]
            body.append(f"<tr style='background:{bg}'><td><code>{html.escape(key)}</code></td>"
                        f"<td>{html.escape(ours)}</td><td>{html.escape(theirs)}</td><td>{html.escape(status)}</td>"
                        f"<td style='font-size:90%'>{html.escape(note)}</td></tr>")
        agree = sum(1 for r in self.rows if r[3] == "agree")
        return (f"<div class='rdmalab-wireshark'><p>Frame {self.frame} of <code>{html.escape(os.path.basename(self.path))}"
                f"</code>: {agree} of {len(self.rows)} fields agree.</p><table style='font-size:12px'>"
                "<tr><th>field (Wireshark name)</th><th>rdmalab</th><th>Wireshark 4.0</th><th>status</th>"
                f"<th>why they differ</th></tr>{''.join(body)}</table></div>")

    def __repr__(self) -> str:
        return "\n".join(f"{k:40} {o:>24} {t:>24} {s:10} {n}" for k, o, t, s, n in self.rows)


def _fmt(v: Any) -> str:
    if isinstance(v, list):
        return ", ".join(_fmt(x) for x in v)
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v} (0x{v:x})" if v > 9 else str(v)
    return "" if v is None else str(v)


def side_by_side(path: str | os.PathLike[str], frame: int) -> SideBySide:
    """Compare one frame of a capture as rdmalab and tshark decode it (needs tshark)."""

    cp = next(c for c in read(path) if c.frame_number == frame)
    ws = next(f for n, f in wireshark_packets(path) if n == frame)
    report = CrosscheckReport(os.fspath(path))
    compare_packet(cp, ws, report, known_ws_names())
    problems = {r.key: r for r in report.results}
    ours = frame_fields(cp)
    rows = []
    keys = [k for k in ours if not k.startswith(("frame.", "rdmalab.")) and k != "erf.ts"]
    keys += [k for k in problems if k not in ours]
    for key in keys:
        theirs = ", ".join(f.show for f in ws.get(key, []))
        r = problems.get(key)
        if r is None:
            status, note = ("agree", "") if key in ws else ("only rdmalab", "")
        else:
            status = r.status.replace("_", " ")
            note = f"{r.defect.id}: {r.defect.reason}" if r.defect else "UNEXPLAINED"
        rows.append((key, _fmt(ours.get(key)), theirs, status, note))
    return SideBySide(os.fspath(path), frame, rows)


@dataclass
class DefectTable:
    rows: list[tuple[str, str, str, str]]

    def _repr_html_(self) -> str:
        body = "".join(f"<tr><td><code>{html.escape(a)}</code></td><td>{html.escape(b)}</td><td>{html.escape(c)}</td>"
                       f"<td>{html.escape(d)}</td></tr>" for a, b, c, d in self.rows)
        return ("<table style='font-size:12px'><tr><th>defect</th><th>when</th><th>what Wireshark 4.0 does</th>"
                f"<th>what the specification says</th></tr>{body}</table>")

    def __repr__(self) -> str:
        return "\n".join(f"{a}: {c}" for a, _, c, _ in self.rows)


def defect_table() -> DefectTable:
    """The known Wireshark 4.0 defects rdmalab's cross-check accounts for."""

    return DefectTable([(d.id, d.condition, d.reason, d.spec) for d in WIRESHARK_DEFECTS])
