"""tshark ``-T fields`` text from columns, built with numpy instead of one string per value.

Each field becomes an ``(n, width)`` matrix of ASCII codes in which 0 means "no character"
(leading zeros of a decimal number, an absent field); the fields, separators and newlines are
laid side by side and the zeros dropped in one pass, which gives the output bytes of a whole
block of packets at once.  The text follows tshark 4.0: decimal integers, ``0x``-prefixed
hexadecimal padded to the width of Wireshark's field type, dotted IPv4, colon-separated MAC,
``seconds.nanoseconds`` for ``frame.time_epoch``, ``0``/``1`` for booleans.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
import os
import time
from collections.abc import Generator, Iterable, Iterator, Sequence
from contextlib import closing
from typing import Any

import numpy as np

from rdmalab.capture.blockpool import blocks_in_workers, default_workers, parallel_capture
from rdmalab.capture.columnar import _ethernet_only, _progress, iter_columns
from rdmalab.capture.columnar_decode import (
    CONVERSATION_INPUTS,
    QUOTED,
    QUOTING,
    decode_block,
    fill_conversations,
    iter_columns_from_packets,
    wants_conversations,
    wants_iwarp,
    wants_windows,
)
from rdmalab.capture.columnar_schema import (
    COLUMN_BY_NAME,
    DERIVED,
    FILTER_TIMES,
    Columns,
    _fmt_values,
    _ipv6_text,
    format_column,
)
from rdmalab.capture.filter import (
    ABSOLUTE_TIME,
    EITHER_FIELDS,
    RELATIVE_TIMES,
    compile_filter,
    declared_fields,
    either_values,
)
from rdmalab.capture.pcapio import FRAME_META_FIELDS, NS_MAX, NS_MIN, FrameMeta, RecordBlock, record_ns
from rdmalab.capture.render import Conversations, time_text

_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_POW10 = [10 ** i for i in range(20)]


# the four digits of 0..9999 (row i: f"{i:04d}"), computed with numpy rather than 10,000 strings
_I4 = np.arange(10000)[:, None]
_QUADS = (_I4 // np.array([1000, 100, 10, 1]) % 10 + ord("0")).astype(np.uint8)
# the same four characters as one uint32 each (one gather per four digits), and with the leading
# zeros blanked (0 bytes, dropped when the lines are joined): for the leading group of a number,
# and for the last group when it is the whole number (0 still shows as "0")
_QUADS32 = np.ascontiguousarray(_QUADS).view(np.uint32).ravel()
_LEAD32 = np.where(_I4 >= np.array([1000, 100, 10, 1]), _QUADS, 0).astype(np.uint8).view(np.uint32).ravel()
_ALONE32 = _LEAD32.copy()
_ALONE32[0] = np.frombuffer(b"\x00\x00\x000", dtype=np.uint32)[0]
# one byte -> its two hex digits, as one uint16
_HEX2 = np.frombuffer("".join(f"{i:02x}" for i in range(256)).encode(), dtype=np.uint16)
# one byte -> its decimal digits and a dot, as one uint32 (0 bytes in front: dropped on output);
# an IPv4 address is four lookups, the last dot overwritten
_OCTET_DOT32 = np.frombuffer(b"".join(f"{i}.".encode().rjust(4, b"\0") for i in range(256)), dtype=np.uint32)


def _dec(v: np.ndarray, width: int | None = None, pad_zeros: bool = False) -> np.ndarray:
    """Decimal digits of unsigned integers, one row each (0 where a leading zero would be)."""
    n = len(v)
    top = int(v.max()) if n else 0
    if width is None:
        width = max(1, len(str(top)))
    quads = (width + 3) // 4
    rest = v.astype(np.uint32 if top < 2**32 else np.uint64, copy=False)
    groups = []  # least significant first
    for _ in range(quads - 1):
        rest, r = np.divmod(rest, rest.dtype.type(10000))
        groups.append(r)
    groups.append(rest)
    out = np.empty((n, quads), dtype=np.uint32)
    started = None
    for q, r in enumerate(reversed(groups)):
        idx = r.astype(np.intp, copy=False)
        if pad_zeros:
            out[:, q] = _QUADS32[idx]
        elif q == 0:
            out[:, q] = (_ALONE32 if quads == 1 else _LEAD32)[idx]
            started = r != 0
        else:
            assert started is not None
            table = _ALONE32 if q == quads - 1 else _LEAD32
            out[:, q] = np.where(started, _QUADS32[idx], table[idx])
            started |= r != 0
    m = out.view(np.uint8).reshape(n, quads * 4)
    return m[:, quads * 4 - width:]


def _hex(v: np.ndarray, digits: int, prefix: bool = True) -> np.ndarray:
    n = len(v)
    nbytes = (digits + 1) // 2
    b = v.astype(">u8").view(np.uint8).reshape(n, 8)[:, 8 - nbytes:]
    pairs = _HEX2[b].view(np.uint8).reshape(n, 2 * nbytes)[:, 2 * nbytes - digits:]
    if not prefix:
        return pairs
    out = np.empty((n, digits + 2), dtype=np.uint8)
    out[:, 0] = ord("0")
    out[:, 1] = ord("x")
    out[:, 2:] = pairs
    return out


def _join(parts: Sequence[np.ndarray], sep: bytes) -> np.ndarray:
    n = len(parts[0])
    s = np.frombuffer(sep, dtype=np.uint8)
    pieces: list[np.ndarray] = []
    for i, p in enumerate(parts):
        if i:
            pieces.append(np.broadcast_to(s, (n, len(s))))
        pieces.append(p)
    return np.hstack(pieces)


def _strings(values: list[str]) -> np.ndarray:
    n = len(values)
    if n == 0:
        return np.zeros((0, 1), dtype=np.uint8)
    raw = np.array([v.encode() for v in values], dtype=bytes)
    w = max(1, raw.dtype.itemsize)
    return raw.astype(f"S{w}").view(np.uint8).reshape(n, w)


def field_matrix(cols: Columns, name: str) -> np.ndarray:
    """The text of one field for every row, as an ASCII matrix (0: no character)."""
    rows, m = _field_rows(cols, name)
    if rows is None:
        return m
    out = np.zeros((cols.n, m.shape[1]), dtype=np.uint8)
    out[rows] = m
    return out


def _field_rows(cols: Columns, name: str) -> tuple[np.ndarray | None, np.ndarray]:
    """The text of one field as ``(rows, matrix)``: the matrix of the rows where the field is present
    (``rows``, an index array), or ``(None, matrix of every row)``.  A numeric column is formatted for
    its present rows alone: a field of one protocol costs what that protocol's rows cost."""
    pair = EITHER_FIELDS.get(name)
    if pair is not None:  # (ip.addr ...) the two fields' texts joined by a comma, where the frame has them
        both = np.flatnonzero(cols.present(pair[0]) & cols.present(pair[1]))
        a, b = (field_matrix(cols, f)[both] for f in pair)
        return both, np.hstack([a, np.full((len(both), 1), ord(","), dtype=np.uint8), b])
    if name == ABSOLUTE_TIME:  # (computed from frame.time_ns, every frame)
        ns = cols.data["frame.time_ns"]
        if len(ns) and int(ns.max()) == NS_MAX:  # past what an int64 holds: as the float seconds have it
            return None, _strings([absolute_text(v) for v in map(record_ns, cols.data["frame.time_epoch"].tolist(),
                                                                 ns.tolist())])
        return None, _absolute_matrix(ns.astype(np.int64, copy=False))
    present = cols.present(name)
    if name == "frame.time_epoch":
        ns = cols.data["frame.time_ns"]
        if len(ns) and (int(ns.min()) < 0 or int(ns.max()) == NS_MAX):  # before 1970, or past what an int64 holds
            m = _strings([epoch_text(v) for v in map(record_ns, cols.data["frame.time_epoch"].tolist(), ns.tolist())])
        else:
            m = _epoch_text(ns)
    elif name in DERIVED:
        m = _strings([str(v) for v in cols[name].tolist()])
    else:
        col = COLUMN_BY_NAME[name]
        f = col.fmt
        if f in ("dec", "bool") or f.startswith(("hex", "bytes")) or f in ("ipv4", "mac"):
            rows = None if present.all() else np.flatnonzero(present)
            v = cols.data[name] if rows is None else cols.data[name][rows]
            return rows, _numeric_text(v, f)
        if f == "reltime":  # (the TCP analysis' times: nanoseconds)
            rows = np.flatnonzero(present)
            return rows, relative_matrix(cols.data[name][rows].astype(np.int64, copy=False))
        m = _strings(format_column(cols, name))  # IPv6 and anything rare: per-value strings
    if not present.all():
        m = np.where(present[:, None], m, 0).astype(np.uint8)
    return None, m


def epoch_text(ns: int) -> str:
    """tshark's ``frame.time_epoch`` of a time in nanoseconds: the whole seconds, rounded down, a
    dot and nine digits (so a time before 1970 reads as tshark prints it: -8.5 s is -9.500000000)."""
    return f"{ns // 1_000_000_000}.{ns % 1_000_000_000:09d}"


def _epoch_text(ns: np.ndarray) -> np.ndarray:
    """:func:`epoch_text` of nanosecond times from 1970 on.  A block of packets spans a few seconds: the
    seconds and the dot are then rows of a small table of those seconds' text, not digits computed
    row by row."""
    n = len(ns)
    secs = ns // 1_000_000_000
    lo, hi = (int(secs.min()), int(secs.max())) if n else (0, 0)
    if 0 <= lo and hi - lo < 4096:
        width = len(str(hi))
        table = np.frombuffer(b"".join(str(sec).encode().rjust(width, b"\0") + b"." for sec in range(lo, hi + 1)),
                              dtype=np.uint8).reshape(hi - lo + 1, width + 1)
        head = table[secs - lo]
    else:
        head = np.hstack([_dec(secs), np.full((n, 1), ord("."), dtype=np.uint8)])
    out = np.empty((n, head.shape[1] + 9), dtype=np.uint8)
    out[:, :head.shape[1]] = head
    out[:, head.shape[1]:] = _dec(ns - secs * 1_000_000_000, 9, pad_zeros=True)
    return out


#: seconds since the epoch -> frame.time's text up to the second and its time zone's name (local time),
#: bounded (frames of the same second share them)
_ABSOLUTE: dict[tuple[int, tuple[str, str]], tuple[str, str, str]] = {}


def absolute_parts(sec: int) -> tuple[str, str, str]:
    """tshark's ``frame.time`` of a second since the epoch, in local time as tshark shows it
    (``Nov 21, 2026 06:21:08``, the day's number padded to two places), the time zone's name
    (``UTC``, ``IST``) and the local date (``2026-11-21``, the ``_index`` of ``-T json``)."""
    key = (sec, time.tzname)  # (the zone TZ names, read again by time.tzset)
    hit = _ABSOLUTE.get(key)
    if hit is None:
        try:
            when = _dt.datetime.fromtimestamp(sec).astimezone()
            hit = (f"{when:%b} {when.day:2d}, {when:%Y %H:%M:%S}", when.tzname() or "", f"{when:%Y-%m-%d}")
        except (ValueError, OverflowError, OSError):  # a year datetime does not hold (past 9999): numpy's, UTC
            date, clock = str(np.datetime64(sec, "s")).split("T")
            year, month, day = date.rsplit("-", 2)
            hit = (f"{_dt.date(2000, int(month), 1):%b} {int(day):2d}, {year} {clock}", "UTC", date)
        if len(_ABSOLUTE) >= 4096:
            _ABSOLUTE.clear()
        _ABSOLUTE[key] = hit
    return hit


def absolute_text(ns: int) -> str:
    """tshark's ``frame.time`` of a time in nanoseconds since the epoch (local time, nine digits
    after the second, the zone's name): ``Nov 21, 2026 06:21:08.901798000 UTC``."""
    sec, frac = divmod(ns, 1_000_000_000)
    head, zone, _date = absolute_parts(sec)
    return f"{head}.{frac:09d} {zone}"


def _absolute_matrix(ns: np.ndarray) -> np.ndarray:
    """:func:`absolute_text` of an int64 array of nanoseconds, as an ASCII matrix: the text of each
    distinct second once, the fractions as digits."""
    secs = ns // 1_000_000_000
    uniq, inv = np.unique(secs, return_inverse=True)
    parts = [absolute_parts(int(x)) for x in uniq.tolist()]
    heads = _strings([p[0] + "." for p in parts])[inv.reshape(-1)]
    zones = _strings([" " + p[1] for p in parts])[inv.reshape(-1)]
    return np.hstack([heads, _dec(ns - secs * 1_000_000_000, 9, pad_zeros=True), zones])


def relative_text(ns: int) -> str:
    """tshark's text of a relative time in nanoseconds: signed seconds and nine digits (-0.000296000)."""
    return time_text(ns, 9)


def relative_matrix(ns: np.ndarray, digits: np.ndarray | None = None) -> np.ndarray:
    """:func:`~rdmalab.capture.render.time_text` of an int64 array of nanoseconds, each to its ``digits``
    (None: nine, :func:`relative_text`), as an ASCII matrix (0: no character)."""
    n = len(ns)
    a = np.abs(ns)
    secs = a // 1_000_000_000
    frac = a - secs * 1_000_000_000
    parts = [np.where(ns < 0, ord("-"), 0).astype(np.uint8)[:, None], _dec(secs)]
    for d in ([9] if digits is None else np.flatnonzero(np.bincount(digits)).tolist()):  # (np.unique loads numpy.ma)
        sel = np.ones(n, dtype=bool) if digits is None else digits == d
        t = np.zeros((n, d + 1 if d else 1), dtype=np.uint8)
        if d:
            t[sel, 0] = ord(".")
            t[sel, 1:] = _dec(frac[sel] // 10 ** (9 - d), d, pad_zeros=True)
        parts.append(t)
    return np.hstack(parts)


class Clock:
    """What :data:`RELATIVE_TIMES` count from, carried from one block of frames to the next, in
    nanoseconds: the capture's first frame, the frame read before the block, the frame shown before it
    (None before the first frame shown, whose ``frame.time_delta_displayed`` is 0), as tshark's single
    pass and :func:`rdmalab.capture.tsjson.iter_json` count them."""

    def __init__(self, first: int | None = None, before: int | None = None, shown: int | None = None) -> None:
        self.first, self.before, self.shown = first, before, shown

    def stamp(self, cols: Columns) -> int | None:
        """The block's :data:`~rdmalab.capture.columnar_schema.FILTER_TIMES` added to ``cols`` for a display
        filter (:meth:`~rdmalab.capture.columnar_schema.Columns.stamp_times`); the time of its last frame
        comes back (the clock stays before the block: :meth:`times` moves it past)."""
        if not cols.n:
            return self.before
        if self.first is None:
            self.first = record_ns(float(cols.data["frame.time_epoch"][0]), int(cols.data["frame.time_ns"][0]))
        return cols.stamp_times(self.first, self.before if self.before is not None else self.first)

    def times(self, cols: Columns, rows: np.ndarray | None) -> dict[str, list[int] | np.ndarray]:
        """The relative times of the rows ``rows`` selects (a boolean mask; None: all), in nanoseconds;
        the clock then stands after the block."""
        ns = cols.data["frame.time_ns"].astype(np.int64, copy=False)
        if not len(ns):
            return {}
        if self.first is None:
            self.first = record_ns(float(cols.data["frame.time_epoch"][0]), int(ns[0]))
        if self.before is None:
            self.before = self.first
        kept = ns if rows is None else ns[rows]
        if self.shown is None and len(kept):
            # the first frame shown is 0 after the one shown before it, as in tshark
            self.shown = record_ns(float(cols.data["frame.time_epoch"][rows][0] if rows is not None
                                         else cols.data["frame.time_epoch"][0]), int(kept[0]))
        shown = self.shown if self.shown is not None else self.first
        lo = min(int(ns.min()), self.first, self.before, shown)
        hi = max(int(ns.max()), self.first, self.before, shown)
        out: dict[str, list[int] | np.ndarray] = {}
        if lo <= NS_MIN or hi >= NS_MAX or hi - lo > NS_MAX:
            # a time past what an int64 holds (as the per-packet path has it: its float seconds'), or a
            # difference an int64 does not hold (damaged times): Python's integers
            all_ns = list(map(record_ns, cols.data["frame.time_epoch"].tolist(), ns.tolist()))
            shown_ns = all_ns if rows is None else [all_ns[i] for i in np.flatnonzero(rows).tolist()]
            deltas = [a - b for a, b in zip(all_ns, [self.before, *all_ns[:-1]], strict=True)]
            out["frame.time_relative"] = [x - self.first for x in shown_ns]
            out["frame.time_delta"] = deltas if rows is None else [deltas[i] for i in np.flatnonzero(rows).tolist()]
            out["frame.time_delta_displayed"] = [a - b for a, b in zip(shown_ns, [shown, *shown_ns[:-1]],
                                                                        strict=True)]
            self.before = all_ns[-1]
            if shown_ns:
                self.shown = shown_ns[-1]
            return out
        prev = np.empty_like(ns)
        prev[0], prev[1:] = self.before, ns[:-1]
        out["frame.time_relative"] = kept - self.first
        out["frame.time_delta"] = (ns - prev) if rows is None else (ns - prev)[rows]
        prev_shown = np.empty_like(kept)
        if len(kept):
            prev_shown[0], prev_shown[1:] = shown, kept[:-1]
        out["frame.time_delta_displayed"] = kept - prev_shown
        self.before = int(ns[-1])
        if len(kept):
            self.shown = int(kept[-1])
        return out


def _numeric_text(v: np.ndarray, f: str) -> np.ndarray:
    """The ASCII matrix of integer values ``v`` in the column format ``f`` (dec, bool, hexN, bytesN,
    ipv4, mac)."""
    if f in ("dec", "bool"):
        return _dec(v)
    if f.startswith("hex"):
        return _hex(v, int(f[3:]))
    if f.startswith("bytes"):
        return _hex(v, 2 * int(f[5:]), prefix=False)
    if f == "ipv4":
        octets = v.astype(">u4").view(np.uint8).reshape(len(v), 4)
        m = _OCTET_DOT32[octets].view(np.uint8).reshape(len(v), 16)
        m[:, 15] = 0  # no dot after the last octet
        return m
    v64 = v.astype(np.uint64)  # mac
    return _join([_hex((v64 >> np.uint64(s)) & np.uint64(255), 2, prefix=False) for s in (40, 32, 24, 16, 8, 0)],
                 b":")


def render_fields(cols: Columns, names: Sequence[str], *, separator: bytes = b"\t", quote: bytes = b"",
                  rows: np.ndarray | None = None, times: dict[str, list[int] | np.ndarray] | None = None,
                  texts: dict[str, list[str | None]] | None = None) -> bytes:
    """The ``-T fields`` lines of ``cols`` (or of the rows a boolean mask selects); ``times``: the
    :data:`RELATIVE_TIMES` among ``names`` of those rows (:meth:`Clock.times`); ``texts``: the text of
    other fields among ``names`` in those rows (None: absent), made elsewhere (the pcapng blocks' fields)."""
    if rows is not None:
        cols = cols.take(rows)
    n = cols.n
    if n == 0:
        return b""
    if not names:
        return b"\n" * n
    parts = []
    q = np.frombuffer(quote, dtype=np.uint8)
    for name in names:
        given = texts.get(name) if texts is not None else None
        if given is not None:
            at_rows, m = None, _strings([t or "" for t in given])
        elif name in RELATIVE_TIMES:
            assert times is not None, name
            t = times[name]
            at_rows, m = None, (_strings([relative_text(x) for x in t]) if isinstance(t, list) else relative_matrix(t))
        else:
            at_rows, m = _field_rows(cols, name)
        if len(q):  # tshark quotes values, not absent fields
            if given is not None:
                qq = np.where(np.array([t is not None for t in given])[:, None], q[None, :], 0).astype(np.uint8)
            elif name in RELATIVE_TIMES or name == ABSOLUTE_TIME:
                qq = np.broadcast_to(q, (n, len(q)))
            elif at_rows is None:
                qq = np.where(cols.present(name)[:, None], q[None, :], 0).astype(np.uint8)
            else:
                qq = np.broadcast_to(q, (len(at_rows), len(q)))
            m = np.hstack([qq, m, qq])
        parts.append((at_rows, m))
    # the fields and separators side by side in one matrix (each written once, in place; a field
    # present in some rows only is written in those rows, the others left 0), a newline at the
    # end of each row, then every 0 byte dropped
    s = np.frombuffer(separator, dtype=np.uint8)
    width = sum(p.shape[1] for _r, p in parts) + len(s) * (len(parts) - 1) + 1
    out = np.zeros((n, width), dtype=np.uint8)
    at = 0
    for i, (at_rows, p) in enumerate(parts):
        if i and len(s):
            out[:, at:at + len(s)] = s
            at += len(s)
        if at_rows is None:
            out[:, at:at + p.shape[1]] = p
        elif len(at_rows):
            out[at_rows, at:at + p.shape[1]] = p
        at += p.shape[1]
    out[:, at] = 10
    # bytes.translate deletes the 0 bytes in one C pass, several times faster than a boolean mask
    text: bytes = out.tobytes().translate(None, b"\0")
    return text


#: the characters ``tshark -T fields`` writes escaped in a text value (a comment with a tab or a newline
#: stays on its line): backspace, tab, newline, form feed, carriage return; the others as they are
_FIELD_ESCAPES = str.maketrans({"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"})


def pick_occurrence(value: Any, occurrence: str) -> Any:
    """The value ``-T fields`` writes of a field that occurs more than once (a list) under tshark's ``-E
    occurrence=``: ``a`` all of them, ``f`` the first, ``l`` the last; None for an empty list.  A
    value that is not a list is returned as it is."""
    if not isinstance(value, list) or occurrence == "a":
        return value
    if not value:
        return None
    return value[0] if occurrence == "f" else value[-1]


def field_cell(name: str, value: object) -> str:
    """:func:`value_text` as a ``-T fields`` cell writes it (tshark's escapes: :data:`_FIELD_ESCAPES`)."""
    return value_text(name, value).translate(_FIELD_ESCAPES)


def value_text(name: str, value: object) -> str:
    """One value of a per-packet field dictionary as tshark prints it (lists joined by commas)."""
    if value is None:
        return ""
    if isinstance(value, list):
        return ",".join(value_text(name, v) for v in value)
    if name == "frame.time_epoch" and isinstance(value, float):
        return f"{value:.9f}"
    if isinstance(value, str) and value.startswith("::ffff:") and "." not in value:
        # an IPv4-mapped IPv6 address (a RoCEv1 GID): Wireshark ends it in dotted decimal

        return _ipv6_text(ipaddress.IPv6Address(value).packed)
    if isinstance(value, int) and not isinstance(value, bool):
        col = COLUMN_BY_NAME.get(name)
        if col is not None and col.fmt in ("dec", "bool"):
            return str(value)
        if col is not None and col.fmt == "reltime":
            return relative_text(value)
        if col is not None and col.fmt.startswith("hex"):
            return f"0x{value:0{int(col.fmt[3:])}x}"
        if col is not None and col.fmt.startswith("bytes"):
            return value.to_bytes(int(col.fmt[5:]), "big").hex()

        fmt, bits = declared_fields().get(name, ("dec", 0))
        if fmt == "hex":
            digits = next(w for w in (2, 4, 6, 8, 16, 32, 64) if w * 4 >= bits)
            return f"0x{value:0{digits}x}"
        if fmt == "bytes":
            return value.to_bytes((bits + 7) // 8, "big").hex()
    return str(value)


# ============================================================================ whole files, in parallel


def filter_mask(flt: Any, cols: Columns) -> np.ndarray:
    """The rows a compiled display filter keeps: on the columns, and on the per-packet fields of the
    rows whose fields occur more than once (:attr:`Columns.multi`: several iWARP PDUs, an ICMP error's
    quote), which a filter matches if any occurrence does."""
    rows = np.asarray(flt.mask(cols, cols.present, cols.n), dtype=bool)
    if cols.multi:
        frames = cols.data["frame.number"]
        for i in np.flatnonzero(np.isin(frames, np.fromiter(cols.multi, dtype=frames.dtype))).tolist():
            rows[i] = flt(_row_fields(cols, i, flt.fields))
    return rows


def _row_fields(cols: Columns, i: int, names: Iterable[str]) -> dict[str, Any]:
    """Row ``i`` as a per-packet field dictionary (the fields ``names`` and, for a frame with
    several iWARP PDUs, every occurrence of its iWARP fields), for what columns cannot say."""
    out: dict[str, Any] = {}
    for name in names:
        if name == ABSOLUTE_TIME:
            out[name] = absolute_text(record_ns(float(cols.data["frame.time_epoch"][i]), int(cols.data["frame.time_ns"][i])))
            continue
        if name in EITHER_FIELDS:  # (a row of several occurrences: all of them, as tshark lists them)
            both = either_values(_row_fields(cols, i, EITHER_FIELDS[name]), name)
            if both is not None:
                out[name] = both
            continue
        try:
            present = cols.present(name)[i]
        except KeyError:
            continue
        if not present:
            continue
        col = COLUMN_BY_NAME.get(name)
        if col is not None and col.fmt in ("ipv4", "ipv6", "mac"):
            out[name] = _fmt_values(col, cols.data[name][i:i + 1])[0]  # (one value: not the row's every column)
        elif col is not None or name in DERIVED:
            out[name] = cols[name][i].item() if col is not None else cols[name][i]
        elif name in FILTER_TIMES:
            out[name] = cols[name][i].item()
        else:
            out[name] = True  # a protocol: present
    out.update(cols.multi.get(int(cols.data["frame.number"][i]), {}))
    return out


def _meta_texts(cols: Columns, keep: np.ndarray | None, names: Sequence[str], meta: FrameMeta | None,
                occurrence: str, aggregator: str) -> dict[str, list[str | None]] | None:
    """The text of the pcapng blocks' fields among ``names`` (:data:`FRAME_META_FIELDS`) in the rows
    ``keep`` (a boolean mask; None: all), from ``meta``, fed every frame of the block in order."""
    wanted = [n for n in names if n in FRAME_META_FIELDS]
    if meta is None or not wanted:
        return None
    frames = cols.data["frame.number"].tolist()
    shown = [True] * len(frames) if keep is None else keep.tolist()
    rows: list[tuple[str | None, ...]] = []
    # (the frames of one interface without comments share one dictionary, FrameMeta.of: its texts made once)
    made: dict[int, tuple[tuple[str | None, ...], dict[str, Any]]] = {}
    for frame, ok in zip(frames, shown, strict=True):
        got = meta.of(frame)
        if not ok:
            continue
        hit = made.get(id(got))
        if hit is None or hit[1] is not got:
            texts = []
            for n in wanted:
                v = pick_occurrence(got.get(n), occurrence)
                text = None if v is None else field_cell(n, v)
                if isinstance(v, list) and text is not None:
                    text = text.replace(",", aggregator)
                texts.append(text)
            hit = made[id(got)] = (tuple(texts), got)  # (the dictionary held: its id not taken again meanwhile)
        rows.append(hit[0])
    return {n: [r[k] for r in rows] for k, n in enumerate(wanted)}


def _block_text(cols: Columns, names: Sequence[str], flt: object, separator: bytes, quote: bytes,
                occurrence: str = "a", aggregator: str = ",", clock: Clock | None = None,
                meta: FrameMeta | None = None) -> bytes:
    """The ``-T fields`` text of one block; ``clock`` (needed when ``names`` has one of
    :data:`RELATIVE_TIMES`) stands after the block when it returns; ``meta`` (needed when ``names`` has
    one of :data:`FRAME_META_FIELDS`) is fed the block's frames."""
    rows = None
    if flt is not None:
        if clock is not None and not flt.fields.isdisjoint(FILTER_TIMES):  # type: ignore[attr-defined]
            clock.stamp(cols)
        rows = filter_mask(flt, cols)
    if not cols.multi:
        times = clock.times(cols, rows) if clock is not None else None
        texts = _meta_texts(cols, rows, names, meta, occurrence, aggregator)
        return render_fields(cols, names, separator=separator, quote=quote, rows=rows, times=times, texts=texts)
    # frames completing several iWARP PDUs: a field occurs more than once there, which a filter
    # matches if any occurrence does and tshark prints (-E occurrence=a) joined by commas
    frames = cols.data["frame.number"]
    multi_rows = np.nonzero(np.isin(frames, np.fromiter(cols.multi, dtype=frames.dtype)))[0]
    keep = np.arange(cols.n) if rows is None else np.nonzero(rows)[0]
    times = clock.times(cols, rows) if clock is not None else None
    texts = _meta_texts(cols, rows, names, meta, occurrence, aggregator)
    text = render_fields(cols, names, separator=separator, quote=quote, rows=keep, times=times, texts=texts)
    lines = text.split(b"\n")
    for pos in np.nonzero(np.isin(keep, multi_rows))[0].tolist():
        fields: dict[str, Any] = _row_fields(cols, int(keep[pos]), names)
        cells = []
        for name in names:
            if name in RELATIVE_TIMES:
                assert times is not None
                cells.append(quote + relative_text(int(times[name][pos])).encode() + quote)
                continue
            if texts is not None and name in texts:
                cell_text = texts[name][pos]
                cells.append(b"" if cell_text is None else quote + cell_text.encode() + quote)
                continue
            if name == "frame.time_epoch":  # exact nanoseconds, as the other rows (not the per-packet float)
                cells.append(quote + epoch_text(int(cols.data["frame.time_ns"][keep[pos]])).encode() + quote)
                continue
            v = pick_occurrence(fields.get(name), occurrence)
            cell = field_cell(name, v)
            if isinstance(v, list):
                cell = cell.replace(",", aggregator)
            cells.append(quote + cell.encode() + quote if cell else b"")
        lines[pos] = separator.join(cells)
    return b"\n".join(lines)


_WORKER_FILTERS: dict[str, object] = {}


def _columns_needed(names: Iterable[str], flt: Any) -> set[str]:
    """The columns the fields ``names`` and the compiled filter ``flt`` read (ip.addr: ip.src and ip.dst)."""
    needed = {part for n in names for part in EITHER_FIELDS.get(n, (n,))}
    if ABSOLUTE_TIME in needed:  # (its text is made from frame.time_ns)
        needed = (needed - {ABSOLUTE_TIME}) | {"frame.time_ns", "frame.time_epoch"}
    return needed | (set(flt.fields) if flt is not None else set())


def _fields_in_worker(blk: RecordBlock, n: int, t0: int, prev: int | None, names: list[str], expr: str | None,
                      verify: bool, sep: bytes, quote: bytes) -> tuple[bytes, int] | int:
    """In a worker process (:func:`rdmalab.capture.blockpool.blocks_in_workers`, exact times): decode,
    filter, render; the text and the time of the block's last frame come back.  A block with frames of
    another link type than Ethernet (a pcapng interface described after the first packet) is not: its
    first frame number comes back, for the per-packet decoder.  Relative times: from ``t0`` and
    ``prev``; a filtered run with ``frame.time_delta_displayed`` is not given to workers (it needs the
    frames shown before the block)."""
    if not _ethernet_only(blk):
        return blk.first
    flt = None
    if expr:
        flt = _WORKER_FILTERS.get(expr)
        if flt is None:
            flt = _WORKER_FILTERS[expr] = compile_filter(expr)
    needed = _columns_needed(names, flt)
    cols = decode_block(blk, verify_icrc=verify, fields=needed)
    clock = Clock(t0, prev, prev) if needed & set(RELATIVE_TIMES) else None
    last = int(cols.data["frame.time_ns"][-1]) if cols.n else (prev if prev is not None else t0)
    return _block_text(cols, names, flt, sep, quote, clock=clock), last


#: ``-T fields``' blocks of records in one process: 2 MiB (a block, its rows, columns and text are what the
#: command holds: docs/captures.md has the memory)
BLOCK_BYTES = 2 << 20
#: and in worker processes, each holding its own: 4 MiB.  A block has a cost of its own whatever its size (the
#: columnar decoder's few hundred numpy calls): with 2 workers on 2 cores the 200,000-frame mixed capture's
#: fields (benchmarks/bench_decode.py --mixed, imports left out) took 0.40 s in 512 KiB blocks, 0.28-0.29 s in
#: 1 MiB, 0.21-0.22 s in 2 MiB, 0.19-0.20 s in 4 MiB, 0.21 s in 6 MiB and 0.23-0.24 s in 8 MiB (fewer blocks
#: than that shared less evenly between the workers)
WORKER_BLOCK_BYTES = 4 << 20


def field_text(path: str | os.PathLike[str], names: Sequence[str], *, filter_expr: str | None = None,
               count: int | None = None, separator: bytes = b"\t", quote: bytes = b"", verify_icrc: bool = False,
               workers: int | None = None, progress: bool = False, block_bytes: int | None = None,
               parallel_min_bytes: int = 32 << 20, occurrence: str = "a", aggregator: str = ",") -> Iterator[bytes]:
    """The ``-T fields`` output of a capture, block by block (bounded memory).

    A plain (not compressed) pcap or pcapng file (pcapng: of Ethernet frames;
    :func:`~rdmalab.capture.blockpool.parallel_capture`) of ``parallel_min_bytes`` or more, read whole, is split among ``workers``
    processes (default: :func:`~rdmalab.capture.blockpool.default_workers`, one a core not busy now): the workers
    follow the record headers of their ranges of the file, this process checks the ranges and
    numbers the frames, and a worker reads each block again, decodes, filters and renders it; the
    blocks come back in file order.  iWARP fields need the TCP streams followed
    in order, so they are decoded in this process.  The conversations' fields (``tcp.stream``,
    relative sequence numbers ...) are counted in order in this process, the blocks decoded in the
    workers first (:func:`_conversations_text`).  ``occurrence``/``aggregator`` are tshark's
    ``-E`` options, for fields that occur more than once in a frame (several iWARP FPDUs).
    The pcapng blocks' fields (:data:`~rdmalab.capture.pcapio.FRAME_META_FIELDS`) may be asked for, but a filter
    on them is refused with a ValueError (they are not columns: ``rdmalab decode -Y`` filters them frame by frame).
    ``block_bytes``: the size of a block of records (default: :data:`BLOCK_BYTES` in this process,
    :data:`WORKER_BLOCK_BYTES` in workers).
    """
    p = os.fspath(path)
    flt = compile_filter(filter_expr) if filter_expr else None
    if flt is not None and not flt.fields.isdisjoint(FRAME_META_FIELDS):
        raise ValueError(f"field_text: the filter {filter_expr!r} reads "
                         f"{', '.join(sorted(flt.fields & set(FRAME_META_FIELDS)))}, a pcapng block's field that is not a "
                         "column: filter on it frame by frame (rdmalab decode -Y does), or on the columns' fields")
    needed = _columns_needed(names, flt)
    clock = Clock() if needed & set(RELATIVE_TIMES) else None
    needed -= set(RELATIVE_TIMES)  # computed here, from frame.time_ns
    # the pcapng blocks' fields: read beside the columns, in this process (a block at a time, an interface's text
    # made once: FrameMeta, _meta_texts)
    meta = FrameMeta(p) if needed & set(FRAME_META_FIELDS) else None
    needed -= set(FRAME_META_FIELDS)
    if clock is not None:
        needed.add("frame.time_ns")
    if workers is None:
        # the workers follow the record headers of their own ranges, so this process only checks
        # them and writes: on 2 cores at load below 1, -j 2 took 0.54-0.64 s of wall time against 0.73-0.86 s
        # for -j 1 (the 200k mixed capture of benchmarks/bench_decode.py --mixed)
        workers = default_workers()
    parallel = (workers > 1 and count is None and not wants_iwarp(needed) and not wants_windows(needed)
                and not (flt is not None and "frame.time_delta_displayed" in names)
                and parallel_capture(p, ethernet=True)
                and os.path.getsize(p) >= parallel_min_bytes)
    if block_bytes is None:
        block_bytes = WORKER_BLOCK_BYTES if parallel else BLOCK_BYTES
    if parallel and (wants_conversations(needed) or meta is not None):
        # (the blocks decoded in the workers, the conversations and the pcapng blocks' fields followed here)
        yield from _conversations_text(p, names, flt, needed, verify_icrc, separator, quote, occurrence, aggregator,
                                       clock, workers, block_bytes, progress, meta)
        return
    if not parallel:
        left = count
        for cols in iter_columns(p, verify_icrc=verify_icrc, progress=progress, block_bytes=block_bytes,
                                 fields=needed):
            if left is not None:
                if cols.n > left:
                    cols = cols.take(np.arange(left))
                left -= cols.n
            yield _block_text(cols, names, flt, separator, quote, occurrence, aggregator, clock, meta)
            if left is not None and left <= 0:
                return
        return

    last: int | None = None
    with closing(_in_workers(p, _fields_in_worker, (list(names), filter_expr, verify_icrc, separator, quote),
                             workers, block_bytes, progress)) as blocks:
        for got, t0 in blocks:
            if isinstance(got, int):  # frames of other link types from this frame on: as iter_columns reads them
                blocks.close()
                if clock is not None:
                    clock = Clock(t0, last, last)
                for cols in iter_columns_from_packets(p, first=got):
                    yield _block_text(cols, names, flt, separator, quote, occurrence, aggregator, clock)
                return
            text, last = got
            yield text


def _in_workers(p: str, render: Any, extra: tuple[Any, ...], workers: int, block_bytes: int,
                progress: bool) -> Generator[tuple[Any, Any], None, None]:
    """:func:`~rdmalab.capture.blockpool.blocks_in_workers` with exact times, a progress bar on a
    terminal (``progress``), the workers and the bar closed when the blocks end or the caller closes this."""
    bar = _bar(p) if progress else None
    blocks = blocks_in_workers(p, render, extra, workers=workers, block_bytes=block_bytes, exact_times=True,
                               progress=(lambda at: bar.update(at - bar.n)) if bar is not None else None)
    try:
        yield from blocks
    finally:
        blocks.close()
        if bar is not None:
            bar.close()


def _columns_in_worker(blk: RecordBlock, n: int, _t0: int, _prev: int | None, needed: list[str],
                       verify: bool) -> Columns | int:
    """In a worker process (:func:`rdmalab.capture.blockpool.blocks_in_workers`): a block's columns
    (:func:`~rdmalab.capture.columnar_decode.decode_block`, the ICMP errors' quotes among them), with
    what the conversations are counted from, but not counted: that is done in order, by the caller
    (:func:`_conversations_text`).  A block with frames of another link type than Ethernet is not
    decoded: its first frame number comes back, for the per-packet decoder."""
    if not _ethernet_only(blk):
        return blk.first
    cols = decode_block(blk, verify_icrc=verify, fields=(*needed, *CONVERSATION_INPUTS))
    if cols.multi:  # (an ICMP error's fields: only those the caller reads go back)
        keep = {*needed, QUOTED, QUOTING}
        cols.multi = {f: {k: v for k, v in got.items() if k in keep} for f, got in cols.multi.items()}
    return cols if cols.n <= n else cols.take(np.arange(n))


def _conversations_text(p: str, names: Sequence[str], flt: Any, needed: set[str], verify_icrc: bool,
                        separator: bytes, quote: bytes, occurrence: str, aggregator: str, clock: Clock | None,
                        workers: int, block_bytes: int, progress: bool, meta: FrameMeta | None = None) -> Iterator[bytes]:
    """:func:`field_text` of fields that need the conversations (``tcp.stream``, relative sequence
    numbers ...) or the pcapng blocks' fields (``meta``): each block decoded in a worker
    (:func:`_columns_in_worker`), the conversations followed here, in capture order, then the filter and
    the text, as :func:`iter_columns` and :func:`_block_text` do in one process."""
    conversations = Conversations() if wants_conversations(needed) else None
    with closing(_in_workers(p, _columns_in_worker, (sorted(needed), verify_icrc), workers, block_bytes,
                             progress)) as blocks:
        for got, _t0 in blocks:
            if isinstance(got, int):  # frames of other link types from this frame on: as iter_columns reads them
                blocks.close()
                for cols in iter_columns_from_packets(p, first=got):
                    yield _block_text(cols, names, flt, separator, quote, occurrence, aggregator, clock, meta)
                return
            got.path = p
            if conversations is not None:
                fill_conversations(got, conversations)
            yield _block_text(got, names, flt, separator, quote, occurrence, aggregator, clock, meta)


def _bar(path: str) -> Any:
    return _progress(path)
