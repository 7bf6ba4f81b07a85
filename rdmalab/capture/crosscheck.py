"""Cross-check rdmalab's decoding against Wireshark's dissectors, field by field, packet by packet.

``crosscheck(path)`` runs tshark on a capture and rdmalab on the same file, pairs the packets by
frame number and compares every field both decode (same display-filter name): its value and,
for whole-byte fields, its byte offset.  Each difference is explained by tshark's choice of
another dissector for the frame's UDP/TCP payload, named with the port of its port table or the
heuristic that made it (:func:`rdmalab.capture.defects.dissector_choice`: "tshark dissected UDP
port 69 as TFTP (its port table)"), or by a known Wireshark 4.0 defect whose whole signature the
frame shows (:data:`rdmalab.capture.defects.WIRESHARK_DEFECTS`), or left unexplained, which
means a new Wireshark defect or an rdmalab bug.  For iWARP it also compares the CRC32c verdict
("Good CRC32" / "Bad CRC32" in Wireshark's tree) with rdmalab's.

Why tshark directly and not pyshark: pyshark drives the same tshark, but builds its packets
from dictionaries (losing the repeated fields that several iWARP PDUs in one frame, or
Wireshark's doubled ``infiniband.immdt``, produce), drops the byte positions we compare, and
costs an asyncio event loop and an object per field.  ``tshark -T pdml`` gives every field
with its value (``show``), its label (``showname``, where the CRC verdict lives), and its
position, and it streams: we parse it incrementally with ``xml.etree.ElementTree.iterparse``.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from rdmalab.capture.defects import (
    CUT_BEFORE,
    NEW_CONVERSATION,
    DissectorChoice,
    DissectorTables,
    WiresharkDefect,
    cut_by_capture,
    dissector_choice,
    explain,
    parse_ws_value,
)
from rdmalab.capture.fields import TRAILER_BYTES, frame_fields, ws_formats
from rdmalab.capture.linktypes import ERF, ERFEthernet, ERFExt
from rdmalab.capture.reader import CapturedPacket, read
from rdmalab.wire.header import Header

#: rpcordma and artemis: see their rows in :data:`rdmalab.capture.defects.WIRESHARK_DEFECTS`.
TSHARK_ARGS: tuple[str, ...] = ("-n", "--disable-protocol", "rpcordma", "--disable-protocol", "artemis")


class TsharkError(RuntimeError):
    """tshark is missing or failed on a file."""


def tshark_path() -> str | None:
    return shutil.which("tshark")


@dataclass(frozen=True, slots=True)
class WsField:
    name: str
    show: str
    showname: str
    pos: int | None
    size: int | None


def wireshark_packets(path: str | os.PathLike[str], *, tshark: str | None = None,
                      extra_args: Sequence[str] = ()) -> Iterator[tuple[int, dict[str, list[WsField]]]]:
    """(frame number, {field name: [fields in tree order]}) for each packet, as tshark decodes it.

    tshark 4.0 counts a pcapng custom block (block types 0x00000BAD and 0x40000BAD: its ``frame.cb_pen``) as a
    frame, rdmalab reads none: such a record is left out here, and the frames after it numbered as rdmalab
    numbers them (one less for each custom block before), so that the packets pair up."""
    exe = tshark or tshark_path()
    if exe is None:
        raise TsharkError("tshark is not installed (Debian/Ubuntu: apt-get install tshark)")
    cmd = [exe, *TSHARK_ARGS, *extra_args, "-r", os.fspath(path), "-T", "pdml"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    custom = 0  # the custom blocks read so far (pcapng.c's records, tshark's frames; no packets to rdmalab)
    try:
        for _event, elem in ET.iterparse(proc.stdout, events=("end",)):
            if elem.tag != "packet":
                continue
            fields: dict[str, list[WsField]] = {}
            number = 0
            for f in elem.iter("field"):
                name = f.get("name")
                if not name:
                    continue
                pos, size = f.get("pos"), f.get("size")
                wf = WsField(name, f.get("show", ""), f.get("showname", ""),
                             int(pos) if pos is not None else None, int(size) if size is not None else None)
                fields.setdefault(name, []).append(wf)
                if name == "frame.number":
                    number = int(wf.show)
            elem.clear()
            if "frame.cb_pen" in fields:
                custom += 1
                continue
            yield number - custom, fields
    except ET.ParseError as err:
        stderr = proc.stderr.read().decode(errors="replace").strip() if proc.stderr else ""
        raise TsharkError(f"tshark output for {os.fspath(path)} could not be parsed ({err}); {stderr}") from None
    finally:
        proc.stdout.close()
        rc = proc.wait()
        err_text = proc.stderr.read().decode(errors="replace").strip() if proc.stderr else ""
        if proc.stderr:
            proc.stderr.close()
    if rc != 0 and "appears to have been cut short" not in err_text:
        raise TsharkError(f"tshark failed on {os.fspath(path)} (exit {rc}): {err_text}")


_TABLES: dict[str, DissectorTables] = {}


def dissector_tables(tshark: str | None = None) -> DissectorTables:
    """tshark's port tables, heuristic lists and protocol names (three ``tshark -G`` runs, about
    half a second each; kept for the process, per tshark executable)."""
    exe = tshark or tshark_path()
    if exe is None:
        raise TsharkError("tshark is not installed (Debian/Ubuntu: apt-get install tshark)")
    if exe not in _TABLES:
        texts = []
        for report in ("decodes", "heuristic-decodes", "protocols"):
            proc = subprocess.run([exe, "-G", report], capture_output=True, text=True)
            if proc.returncode != 0:
                raise TsharkError(f"tshark -G {report} failed (exit {proc.returncode}): {proc.stderr.strip()}")
            texts.append(proc.stdout)
        _TABLES[exe] = DissectorTables.parse(*texts)
    return _TABLES[exe]


# ----------------------------------------------------------------------------- rdmalab's field names


def _all_header_classes() -> list[type[Header]]:
    out: list[type[Header]] = []
    todo: list[type[Header]] = list(Header.__subclasses__())
    while todo:
        c = todo.pop()
        out.append(c)
        todo.extend(c.__subclasses__())
    return out


_EXTRA_KNOWN = frozenset({
    "infiniband.invariant.crc", "infiniband.variant.crc", "infiniband.aeth.syndrome",
    "infiniband.aeth.syndrome.credit_count", "infiniband.aeth.syndrome.timer",
    "infiniband.aeth.syndrome.error_code", "infiniband.aeth.syndrome.reserved_value",
})


def known_ws_names() -> frozenset[str]:
    """Every InfiniBand/iWARP Wireshark field name some rdmalab header declares."""
    for mod in ("mad", "cm", "mpa", "rdmap", "iwarp"):
        try:
            importlib.import_module(f"rdmalab.wire.{mod}")
        except ImportError:
            pass
    names: set[str] = set(_EXTRA_KNOWN)
    for cls in _all_header_classes():
        if "LAYOUT" in dir(cls):
            names.update(ws_formats(cls))
    return frozenset(n for n in names if n.startswith(("infiniband.", "iwarp_")))


# ----------------------------------------------------------------------------- results


@dataclass(slots=True)
class FieldResult:
    """One compared field of one frame.

    ``status``: ``"agree"``, ``"value"`` (both decode it, values differ), ``"offset"`` (same value,
    different byte position), ``"repeated"`` (Wireshark repeats our value), ``"only_rdmalab"``,
    ``"only_wireshark"``.
    """

    frame: int
    key: str
    status: str
    ours: Any = None
    theirs: Any = None
    defect: WiresharkDefect | None = None
    note: str = ""
    cause: DissectorChoice | None = None  # tshark dissected the payload as another protocol

    @property
    def explained(self) -> bool:
        return self.status == "agree" or self.defect is not None or self.cause is not None

    def __str__(self) -> str:
        why = (self.cause.text if self.cause else
               f"known Wireshark defect '{self.defect.id}': {self.defect.reason}" if self.defect else "UNEXPLAINED")
        return (f"frame {self.frame}: {self.key}: {self.status}: rdmalab={_show(self.ours)} "
                f"wireshark={_show(self.theirs)}{' (' + self.note + ')' if self.note else ''} -> {why}")


def _show(v: Any) -> str:
    if isinstance(v, list):
        return "[" + ", ".join(_show(x) for x in v) + "]"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v} (0x{v:x})"
    return repr(v) if v is not None else "-"


@dataclass
class CrosscheckReport:
    path: str
    packets: int = 0
    wireshark_packets: int = 0
    fields_compared: int = 0
    agreements: int = 0
    crc_compared: int = 0
    results: list[FieldResult] = field(default_factory=list)  # everything but agreements
    per_key: Counter[str] = field(default_factory=Counter)  # key -> times compared
    crc_status: dict[int, list[str]] = field(default_factory=dict)  # frame -> rdmalab CRC statuses

    @property
    def differences(self) -> list[FieldResult]:
        return self.results

    @property
    def unexplained(self) -> list[FieldResult]:
        return [r for r in self.results if not r.explained]

    @property
    def explained(self) -> list[FieldResult]:
        return [r for r in self.results if r.explained]

    @property
    def ok(self) -> bool:
        return not self.unexplained and self.packets == self.wireshark_packets

    @property
    def dissector_choices(self) -> dict[str, list[int]]:
        """Cause text -> the frames whose differences it explains (tshark chose another dissector)."""
        out: dict[str, list[int]] = {}
        for r in self.results:
            if r.cause is not None:
                frames = out.setdefault(r.cause.text, [])
                if r.frame not in frames:
                    frames.append(r.frame)
        return out

    def text(self, *, verbose: bool = False) -> str:
        by_cause = Counter(r.cause.text for r in self.results if r.cause)
        by_defect = Counter(r.defect.id for r in self.results if r.defect and not r.cause)
        lines = [
            f"{self.path}: {self.packets} packets (tshark: {self.wireshark_packets}), "
            f"{self.fields_compared} fields compared, {self.agreements} agree, "
            f"{sum(by_defect.values())} differences explained by known Wireshark defects, "
            f"{sum(by_cause.values())} by tshark's choice of dissector, "
            f"{len(self.unexplained)} unexplained; {self.crc_compared} CRC32c verdicts compared",
        ]
        for text, frames in self.dissector_choices.items():
            shown = ", ".join(map(str, frames[:10])) + (f" ... ({len(frames)} frames)" if len(frames) > 10 else "")
            lines.append(f"  {text}: {by_cause[text]} field(s) in frame(s) {shown}")
        for did, n in sorted(by_defect.items()):
            lines.append(f"  known defect {did}: {n} field(s)")
        for r in self.unexplained:
            lines.append(f"  {r}")
        if verbose:
            for r in self.explained:
                lines.append(f"  {r}")
        return "\n".join(lines)


# ----------------------------------------------------------------------------- comparison


def _our_offsets(cp: CapturedPacket) -> dict[str, list[int]]:
    """Byte offsets (as Wireshark counts them) of our whole-byte fields in the frame packet."""
    out: dict[str, list[int]] = {}
    base = cp.frame_start  # Wireshark's ERF frame starts after the ERF headers (an Ethernet record's pad too)
    for layer in cp.packet.layers:
        if isinstance(layer.header, (ERF, ERFExt, ERFEthernet)):
            continue  # Wireshark shows the ERF header as a pseudo-header, outside the frame's bytes
        for f in layer.header.LAYOUT.fields:
            if f.ws and f.bits % 8 == 0 and f.bit_offset % 8 == 0:
                out.setdefault(f.ws, []).append(layer.offset + f.byte_start - base)
    return out


def _formats(cp: CapturedPacket) -> dict[str, str]:
    fm: dict[str, str] = {}
    for p in (cp.packet, *cp.pdus):
        for layer in p.layers:
            fm.update(ws_formats(type(layer.header)))
    return fm


def compare_packet(cp: CapturedPacket, ws: dict[str, list[WsField]], report: CrosscheckReport,
                   known: frozenset[str], tables: Callable[[], DissectorTables] | None = None) -> None:
    """Compare one frame; ``tables`` gives tshark's dissector tables (:func:`dissector_tables`),
    asked for only when tshark's ``frame.protocols`` lacks the protocol rdmalab decoded."""
    ours = frame_fields(cp, raw=True)
    fmts = _formats(cp)
    offsets = _our_offsets(cp)
    view = {k: [f.show for f in v] for k, v in ws.items()}
    frame = cp.frame_number
    choice = dissector_choice(cp, view, tables) if tables is not None else None

    inside = choice.inside if choice is not None else None

    def outer(key: str, theirs: list[Any]) -> list[Any]:
        """tshark's values of ``key`` before the payload it dissected and rdmalab did not (``inside``)."""
        return [x for x, f in zip(theirs, ws[key], strict=True) if f.pos is None or inside is None or f.pos < inside]

    def add(r: FieldResult) -> None:
        if r.status != "agree":
            if choice is not None and choice.covers(r.key):
                r.cause = choice
            elif r.cause is None:
                r.defect = explain(cp, view, r.key, r.status)
            report.results.append(r)

    for key, val in ours.items():
        if key.startswith(("frame.", "rdmalab.")) or key == "erf.ts":
            continue
        mine = list(val) if isinstance(val, list) else [val]
        if key not in ws:
            add(FieldResult(frame, key, "only_rdmalab", mine[0] if len(mine) == 1 else mine))
            continue
        fmt = fmts.get(key, "dec")
        if key in TRAILER_BYTES:  # octets of any length, as hex text (leading zeros count)
            theirs: list[Any] = [f.show.replace(":", "").lower() for f in ws[key]]
        else:
            theirs = [parse_ws_value(f.show, fmt) for f in ws[key]]
        report.fields_compared += 1
        report.per_key[key] += 1
        if theirs == mine:
            status, note = "agree", ""
            pos = offsets.get(key)
            if pos is not None and len(pos) == len(ws[key]) and not cp.pdus:
                wpos = [f.pos for f in ws[key]]
                if wpos != pos:
                    status, note = "offset", f"rdmalab at byte {pos}, wireshark at byte {wpos}"
            if status == "agree":
                report.agreements += 1
            else:
                add(FieldResult(frame, key, status, mine, theirs, note=note))
        elif inside is not None and outer(key, theirs) == mine:
            # (tshark's values of the frame's own headers agree; the others are of what it found in the payload)
            add(FieldResult(frame, key, "value", mine[0] if len(mine) == 1 else mine, theirs, cause=choice))
        elif len(theirs) == 2 * len(mine) and theirs[::2] == mine and theirs[1::2] == mine:
            add(FieldResult(frame, key, "repeated", mine, theirs))
        else:
            add(FieldResult(frame, key, "value", mine[0] if len(mine) == 1 else mine,
                            theirs[0] if len(theirs) == 1 else theirs))
    present = {n for p in (cp.packet, *cp.pdus) for layer in p.layers for n in ws_formats(type(layer.header))}
    for key in ws:
        if (key in known or key in present) and key not in ours:
            fmt = fmts.get(key, "dec")
            theirs = [parse_ws_value(f.show, fmt) for f in ws[key]]
            add(FieldResult(frame, key, "only_wireshark", None, theirs[0] if len(theirs) == 1 else theirs,
                            cause=choice if inside is not None and not outer(key, theirs) else None))
    # CRC32c verdicts: Wireshark validates the MPA CRC ("Good CRC32" / "Bad CRC32" in the label)
    ws_verdicts = ["good" if "Good CRC32" in f.showname else "bad" if "Bad CRC32" in f.showname else "?"
                   for f in ws.get("iwarp_mpa.crc_check", [])]
    mine_v = ours.get("rdmalab.crc32c.status")
    mine_verdicts = (list(mine_v) if isinstance(mine_v, list) else [mine_v]) if mine_v is not None else []
    mine_verdicts = [v for v in mine_verdicts if v in ("good", "bad")]  # no CRC negotiated: nothing to compare
    statuses = [s for k in ("rdmalab.icrc.status", "rdmalab.crc32c.status", "rdmalab.vcrc.status")
                for s in (ours[k] if isinstance(ours.get(k), list) else [ours[k]] if k in ours else [])]
    if statuses:
        report.crc_status[frame] = statuses
    if ws_verdicts or mine_verdicts:
        report.crc_compared += 1
        if ws_verdicts != mine_verdicts:
            add(FieldResult(frame, "rdmalab.crc32c.status", "value", mine_verdicts, ws_verdicts,
                            note="CRC32c verdict (Wireshark validates the MPA CRC)"))


def _note_new_conversation(ws: dict[str, list[WsField]], again: set[str]) -> None:
    """Mark a frame of a TCP conversation tshark started again at a SYN without ACK (its ports reused),
    that frame included, for the ``tcp-syn-new-conversation`` cause; ``again`` holds those conversations."""
    stream = ws.get("tcp.stream")
    if not stream:
        return
    syn, ack = (parse_ws_value(ws[k][0].show) if ws.get(k) else None for k in ("tcp.flags.syn", "tcp.flags.ack"))
    if "tcp.analysis.reused_ports" in ws and syn == 1 and ack == 0:
        again.add(stream[0].show)
    if stream[0].show in again:
        ws[NEW_CONVERSATION] = stream


def _note_cut_segment(cp: CapturedPacket, ws: dict[str, list[WsField]], cut: dict[tuple[str, str], int]) -> None:
    """Mark a frame of a TCP direction in which the capture cut a segment with payload (its length on the wire
    longer than what was captured) at or before this frame, for the ``cut-segment-loses-alignment`` cause;
    ``cut`` holds those directions (tshark's stream and source port) and the first such segment's frame."""
    stream, port, length = (ws.get(k) for k in ("tcp.stream", "tcp.srcport", "tcp.len"))
    if not stream or not port:
        return
    key = (stream[0].show, port[0].show)
    if key not in cut and length and parse_ws_value(length[0].show) != 0 and cut_by_capture(cp):
        cut[key] = cp.frame_number
    if key in cut:
        ws[CUT_BEFORE] = [WsField(CUT_BEFORE, str(cut[key]), "", None, None)]


def crosscheck(path: str | os.PathLike[str], *, tshark: str | None = None) -> CrosscheckReport:
    """Compare rdmalab and Wireshark on every packet and field of a capture."""
    report = CrosscheckReport(os.fspath(path))
    known = known_ws_names()
    ws_iter = wireshark_packets(path, tshark=tshark)

    def tables() -> DissectorTables:
        return dissector_tables(tshark)

    ws_pending: dict[int, dict[str, list[WsField]]] = {}
    ws_done = False
    again: set[str] = set()  # tshark's TCP conversations that a SYN without ACK started again (ports reused)
    cut: dict[tuple[str, str], int] = {}  # TCP directions in which the capture cut a segment: its frame
    for cp in read(path, lenient=True):
        report.packets += 1
        while not ws_done and cp.frame_number not in ws_pending:
            try:
                num, fields = next(ws_iter)
            except StopIteration:
                ws_done = True
                break
            ws_pending[num] = fields
            report.wireshark_packets += 1
        ws = ws_pending.pop(cp.frame_number, None)
        if ws is None:
            continue
        _note_new_conversation(ws, again)
        _note_cut_segment(cp, ws, cut)
        compare_packet(cp, ws, report, known, tables)
    for _num, _fields in ws_iter:
        report.wireshark_packets += 1
    return report
