"""pcapng files walked in bulk: the packet blocks' offsets, lengths, interfaces and times with numpy.

:func:`rdmalab.capture.pcapio.record_blocks` walks a pcapng file block by block in Python
(``struct.unpack_from`` and a dozen list appends a packet).  Here the same walk costs one
subscript of a ``memoryview`` of 32-bit words a block: the only per-block Python is following the
block lengths from one block to the next through a run of Enhanced Packet Blocks; each run's
interface ids, timestamps and lengths are then read with numpy over the buffer, all at once, and
checked with masks.  Any other block (section header, interface description, simple or obsolete
packet block, one of another type) and any block that fails a check ends the run and goes through
:func:`rdmalab.capture.pcapio._pcapng_blocks`' rules here, block by block, so the records, the
times and the errors (same message, frame and byte offset) are the same as the Python walker's:
``tests/capture/test_pcapng_bulk.py`` holds the two to that on every capture and on damaged ones.

The runs are walked in native byte order; a big-endian section on a little-endian machine (or the
reverse) takes the block-by-block rules for all its blocks.

:func:`record_blocks` is :func:`rdmalab.capture.pcapio.record_blocks` with this walker for pcapng
files (a pipe, a compressed file or a pcap file goes to pcapio's own).
"""

from __future__ import annotations

import os
import struct
import sys
from collections.abc import Iterator
from typing import IO

import numpy as np

from rdmalab.capture.pcapio import (
    _BLOCK_NAMES,
    _BOM_BE,
    _BOM_LE,
    _PCAPNG_SHB,
    MAX_RECORD,
    CaptureError,
    RecordBlock,
    open_capture,
)
from rdmalab.capture.pcapio import record_blocks as _record_blocks
from rdmalab.capture.pcapwriter import PCAPNG_EPB, PCAPNG_IDB, PCAPNG_SHB

__all__ = ["pcapng_blocks", "record_blocks"]

_NATIVE = "<" if sys.byteorder == "little" else ">"


def record_blocks(path: str | os.PathLike[str], block_bytes: int = 16 << 20) -> Iterator[RecordBlock]:
    """The records of a capture file in blocks (:func:`rdmalab.capture.pcapio.record_blocks`), an
    uncompressed pcapng file walked in bulk (:func:`pcapng_blocks`)."""
    p = os.fspath(path)
    head = b""
    if os.path.isfile(p):
        try:
            with open(p, "rb") as f:
                head = f.read(4)
        except OSError:
            head = b""
    if head != _PCAPNG_SHB:
        yield from _record_blocks(p, block_bytes)
        return
    with open_capture(p) as f:
        yield from pcapng_blocks(p, f, f.read(24), block_bytes)


class _Ifaces:
    """The interfaces of the current section: link type, timestamp units per second, offset in
    seconds, as lists (the block-by-block rules) and as arrays (the runs)."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, int, int]] = []
        self._arrays: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def clear(self) -> None:
        self.rows = []
        self._arrays = None

    def append(self, row: tuple[int, int, int]) -> None:
        self.rows.append(row)
        self._arrays = None

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self._arrays is None:
            self._arrays = (np.array([r[0] for r in self.rows], dtype=np.int32),
                            np.array([r[1] for r in self.rows], dtype=object),
                            np.array([r[2] for r in self.rows], dtype=np.int64))
        return self._arrays


def _times(t: np.ndarray, iface: np.ndarray, ifaces: _Ifaces) -> tuple[np.ndarray, np.ndarray]:
    """Nanoseconds (``tsoff * 1e9 + t * 1e9 // units``, exact) and float seconds
    (``tsoff + t / float(units)``, as the Python walker computes them) of timestamps ``t``
    (uint64) on interfaces ``iface``."""
    _lt, units_of, off_of = ifaces.arrays()
    n = len(t)
    ns = np.zeros(n, dtype=np.int64)
    secs = np.zeros(n, dtype=np.float64)
    for k in np.unique(iface).tolist():
        sel = iface == k
        units = int(units_of[k])
        off = int(off_of[k])
        tk = t[sel]
        secs[sel] = off + tk.astype(np.float64) / float(units)
        big = bool((tk >= np.uint64(1 << 62)).any())
        if not big and units <= 1_000_000_000 and 1_000_000_000 % units == 0 and \
                int(tk.max()) * (1_000_000_000 // units) < (1 << 62) and abs(off) < (1 << 31):
            ns[sel] = off * 1_000_000_000 + tk.astype(np.int64) * (1_000_000_000 // units)
        elif not big and units > 1_000_000_000 and units % 1_000_000_000 == 0 and abs(off) < (1 << 31):
            ns[sel] = off * 1_000_000_000 + tk.astype(np.int64) // (units // 1_000_000_000)
        else:  # units that do not divide (powers of two), or huge times: Python's integers
            ns[sel] = np.array([off * 1_000_000_000 + (v * 1_000_000_000) // units for v in tk.tolist()],
                               dtype=np.int64)
    return ns, secs


def pcapng_blocks(path: str, f: IO[bytes], head: bytes, block_bytes: int) -> Iterator[RecordBlock]:
    """The records of a pcapng file whose first bytes ``head`` were read from ``f``, in blocks
    of about ``block_bytes`` (what :func:`rdmalab.capture.pcapio._pcapng_blocks` yields)."""
    pending = head
    order = "<"
    ifaces = _Ifaces()
    frame = 1
    pos_file = 0
    while True:
        chunk = f.read(block_bytes)
        buf = pending + chunk
        end = len(buf)
        pos = 0
        parts: list[tuple[np.ndarray, ...]] = []  # (offs, caps, wires, ts_ns, secs, lts, ifs) of runs
        count = 0
        err: CaptureError | None = None
        words = np.frombuffer(buf, dtype=np.dtype(_NATIVE + "u4"), count=end // 4)
        with memoryview(buf) as mv, mv[:end // 4 * 4].cast("I") as w32:
            while pos + 8 <= end:
                if order == _NATIVE and w32[pos >> 2] == PCAPNG_EPB:
                    # a run of Enhanced Packet Blocks: follow the lengths, then read them with numpy
                    starts: list[int] = []
                    add = starts.append
                    q = pos
                    while q + 8 <= end and w32[q >> 2] == PCAPNG_EPB:
                        blen = w32[(q >> 2) + 1]
                        if blen < 32 or blen % 4 or blen > MAX_RECORD or q + blen > end:
                            break
                        add(q)
                        q += blen
                    if starts:
                        at = np.array(starts, dtype=np.int64) >> 2
                        blen_a = words[at + 1].astype(np.int64)
                        iface = words[at + 2].astype(np.int64)
                        cap = words[at + 5].astype(np.int64)
                        bad = (28 + cap > blen_a - 4) | (iface >= len(ifaces.rows))
                        if bad.any():  # the block-by-block rules say what is wrong with it
                            k = int(np.argmax(bad))
                            at, blen_a, iface, cap = at[:k], blen_a[:k], iface[:k], cap[:k]
                        if len(at):
                            t = (words[at + 3].astype(np.uint64) << np.uint64(32)) | words[at + 4].astype(np.uint64)
                            ns, secs = _times(t, iface, ifaces)
                            lts = ifaces.arrays()[0][iface]
                            parts.append(((at << 2) + 28, cap, words[at + 6].astype(np.int64), ns, secs, lts,
                                          iface.astype(np.int32)))
                            count += len(at)
                            pos = int((at[-1] << 2) + blen_a[-1])
                            continue
                # one block by the block-by-block rules (pcapio._pcapng_blocks')
                at_file = pos_file + pos
                if buf[pos:pos + 4] == _PCAPNG_SHB:
                    if pos + 12 > end:
                        break
                    bom = buf[pos + 8:pos + 12]
                    if bom not in (_BOM_LE, _BOM_BE):
                        err = CaptureError(path, f"has a pcapng section header at byte {at_file} with an unknown "
                                                 f"byte-order magic {bom.hex(' ')}", offset=at_file,
                                           frames_read=frame - 1 + count)
                        break
                    order = "<" if bom == _BOM_LE else ">"
                btype, blen = struct.unpack_from(order + "II", buf, pos)
                name = _BLOCK_NAMES.get(btype, f"type {btype}")
                if blen < 12 or blen % 4 or blen > MAX_RECORD or (btype == PCAPNG_SHB and blen < 28):
                    err = CaptureError(path, f"is damaged: the pcapng {name} block at byte {at_file} has length "
                                             f"{blen} (a block is at least 12 bytes, a section header 28, a multiple "
                                             f"of 4 and at most {MAX_RECORD})", offset=at_file,
                                       frames_read=frame - 1 + count)
                    break
                if pos + blen > end:
                    break
                if btype == PCAPNG_SHB:
                    ifaces.clear()
                elif btype == PCAPNG_IDB:
                    if blen < 20:
                        err = CaptureError(path, f"is damaged: the pcapng interface description block at byte "
                                                 f"{at_file} has length {blen} (at least 20)", offset=at_file,
                                           frames_read=frame - 1 + count)
                        break
                    lt = struct.unpack_from(order + "H", buf, pos + 8)[0]
                    units, tsoff = 1_000_000, 0
                    o = pos + 16
                    while o + 4 <= pos + blen - 4:
                        code, olen = struct.unpack_from(order + "HH", buf, o)
                        if code == 0:
                            break
                        if code == 9 and olen >= 1:
                            v = buf[o + 4]
                            units = (2 if v & 0x80 else 10) ** (v & 0x7F)
                        elif code == 14 and olen >= 8:
                            tsoff = struct.unpack_from(order + "q", buf, o + 4)[0]
                        o += 4 + ((olen + 3) & ~3)
                    ifaces.append((lt, units, tsoff))
                elif btype in (PCAPNG_EPB, 2, 3):
                    frame_no = frame + count
                    if btype == 3:
                        iface_i, tv = 0, None
                        wire = struct.unpack_from(order + "I", buf, pos + 8)[0]
                        cap_i = min(wire, blen - 16)
                        data = pos + 12
                    else:
                        if blen < 32:
                            err = CaptureError(path, f"is damaged: the pcapng {name} block of frame {frame_no} at "
                                                     f"byte {at_file} has length {blen} (at least 32)", offset=at_file,
                                               frames_read=frame - 1 + count)
                            break
                        iface_i, hi, lo, cap_i, wire = struct.unpack_from(order + "IIIII", buf, pos + 8)
                        if btype == 2:
                            iface_i &= 0xFFFF
                        tv = (hi << 32) | lo
                        data = pos + 28
                        if data + cap_i > pos + blen - 4:
                            err = CaptureError(path, f"is damaged: the pcapng {name} block of frame {frame_no} at "
                                                     f"byte {at_file} claims {cap_i} captured bytes but holds only "
                                                     f"{blen - 32}", offset=at_file, frames_read=frame - 1 + count)
                            break
                    if iface_i >= len(ifaces.rows):
                        err = CaptureError(path, f"is damaged: the packet block of frame {frame_no} at byte {at_file} "
                                                 f"refers to interface {iface_i}, but only {len(ifaces.rows)} "
                                                 "interface(s) were described before it", offset=at_file,
                                           frames_read=frame - 1 + count)
                        break
                    lt, units, tsoff = ifaces.rows[iface_i]
                    if tv is None:  # a simple packet block has no time
                        ns1, s1 = 0, 0.0
                    else:
                        ns1, s1 = (tsoff * 1_000_000_000) + (tv * 1_000_000_000) // units, tsoff + tv / float(units)
                    parts.append((np.array([data], dtype=np.int64), np.array([cap_i], dtype=np.int64),
                                  np.array([wire], dtype=np.int64), np.array([ns1], dtype=np.int64),
                                  np.array([s1], dtype=np.float64), np.array([lt], dtype=np.int32),
                                  np.array([iface_i], dtype=np.int32)))
                    count += 1
                pos += blen
        del words
        if count:
            cols = [np.concatenate([p[i] for p in parts]) if len(parts) > 1 else parts[0][i] for i in range(7)]
            offs, caps, wires, tss, secs_a, lts_a, ifs = cols
            yield RecordBlock(buf, offs.astype(np.int64), caps.astype(np.int64), wires.astype(np.int64),
                              tss.astype(np.int64), lts_a.astype(np.int32), frame, pos_file + pos,
                              secs_a.astype(np.float64), ifs.astype(np.int32))
            frame += count
        if err is not None:
            raise err
        pos_file += pos
        pending = buf[pos:]
        if not chunk:
            if pending:
                if len(pending) >= 8:
                    btype, blen = struct.unpack_from(order + "II", pending, 0)
                    raise CaptureError(path, f"is truncated mid-record: the pcapng "
                                             f"{_BLOCK_NAMES.get(btype, f'type {btype}')} block at byte {pos_file} "
                                             f"(after frame {frame - 1}) announces {blen} bytes but the file ends "
                                             f"after {len(pending)}", offset=pos_file, frames_read=frame - 1)
                raise CaptureError(path, f"is truncated: it ends inside a pcapng block header at byte {pos_file} "
                                         f"(after frame {frame - 1}, {len(pending)} of 8 bytes present)",
                                   offset=pos_file, frames_read=frame - 1)
            return
