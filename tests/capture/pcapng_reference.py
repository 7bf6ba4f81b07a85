"""The pcapng walker the package had before it walked in bulk: one block at a time, in Python.

It is the reference :mod:`test_pcapng_bulk` holds :func:`rdmalab.capture.pcapio.record_blocks`
to (same records, times, link types, interfaces; same errors, frames and offsets), kept here, in the
tests, so that the package has one pcapng walker.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import IO

import numpy as np

from rdmalab.capture.pcapio import _BLOCK_NAMES, _BOM_BE, _BOM_LE, _PCAPNG_SHB, MAX_RECORD, CaptureError, RecordBlock
from rdmalab.capture.pcapwriter import PCAPNG_EPB, PCAPNG_IDB, PCAPNG_SHB


def reference_blocks(path: str, f: IO[bytes], head: bytes, block_bytes: int) -> Iterator[RecordBlock]:
    pending = head
    order = "<"
    ifaces: list[tuple[int, int, int]] = []  # linktype, units per second, offset seconds
    frame = 1
    pos_file = 0
    while True:
        chunk = f.read(block_bytes)
        buf = pending + chunk
        end = len(buf)
        pos = 0
        offs: list[int] = []
        caps: list[int] = []
        wires: list[int] = []
        tss: list[int] = []
        secs: list[float] = []
        lts: list[int] = []
        ifs: list[int] = []
        err: CaptureError | None = None

        while pos + 8 <= end:
            at = pos_file + pos
            if buf[pos:pos + 4] == _PCAPNG_SHB:
                if pos + 12 > end:
                    break
                bom = buf[pos + 8:pos + 12]
                if bom not in (_BOM_LE, _BOM_BE):
                    err = CaptureError(path, f"has a pcapng section header at byte {at} with an unknown byte-order magic "
                                  f"{bom.hex(' ')}", offset=at,
                                     frames_read=frame - 1 + len(offs))
                    break
                order = "<" if bom == _BOM_LE else ">"
            btype, blen = struct.unpack_from(order + "II", buf, pos)
            name = _BLOCK_NAMES.get(btype, f"type {btype}")
            if blen < 12 or blen % 4 or blen > MAX_RECORD or (btype == PCAPNG_SHB and blen < 28):
                err = CaptureError(path, f"is damaged: the pcapng {name} block at byte {at} has length {blen} (a block is at "
                              f"least 12 bytes, a section header 28, a multiple of 4 and at most {MAX_RECORD})", offset=at,
                                     frames_read=frame - 1 + len(offs))
                break
            if pos + blen > end:
                break
            trail = struct.unpack_from(order + "I", buf, pos + blen - 4)[0]
            if trail != blen:  # (pcapng 3.1: the block's length again at its end)
                err = CaptureError(path, f"is damaged: the pcapng {name} block at byte {at} has length {blen} at its "
                                         f"start and {trail} at its end", offset=at, frames_read=frame - 1 + len(offs))
                break
            if btype == PCAPNG_SHB:
                ifaces = []
            elif btype == PCAPNG_IDB:
                if blen < 20:
                    err = CaptureError(path, f"is damaged: the pcapng interface description block at byte {at} has length "
                                  f"{blen} (at least 20)", offset=at,
                                     frames_read=frame - 1 + len(offs))
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
                frame_no = frame + len(offs)
                if btype == 3:
                    iface, t = 0, None
                    wire = struct.unpack_from(order + "I", buf, pos + 8)[0]
                    cap = min(wire, blen - 16)
                    data = pos + 12
                else:
                    if blen < 32:
                        err = CaptureError(path, f"is damaged: the pcapng {name} block of frame {frame_no} at byte {at} has "
                                      f"length {blen} (at least 32)", offset=at,
                                     frames_read=frame - 1 + len(offs))
                        break
                    iface, hi, lo, cap, wire = struct.unpack_from(order + "IIIII", buf, pos + 8)
                    if btype == 2:  # a 16-bit interface id, then a 16-bit drops count
                        iface = struct.unpack_from(order + "H", buf, pos + 8)[0]
                    t = (hi << 32) | lo
                    data = pos + 28
                    if data + cap > pos + blen - 4:
                        err = CaptureError(path, f"is damaged: the pcapng {name} block of frame {frame_no} at byte {at} claims "
                                      f"{cap} captured bytes but holds only {blen - 32}", offset=at,
                                     frames_read=frame - 1 + len(offs))
                        break
                if iface >= len(ifaces):
                    err = CaptureError(path, f"is damaged: the packet block of frame {frame_no} at byte {at} refers "
                                             f"to interface {iface}, but only {len(ifaces)} interface(s) were "
                                             "described before it", offset=at, frames_read=frame - 1 + len(offs))
                    break
                lt, units, tsoff = ifaces[iface]
                offs.append(data)
                caps.append(cap)
                wires.append(wire)
                if t is None:  # a simple packet block has no time
                    tss.append(0)
                    secs.append(0.0)
                else:
                    tss.append((tsoff * 1_000_000_000) + (t * 1_000_000_000) // units)
                    secs.append(tsoff + t / float(units))
                lts.append(lt)
                ifs.append(iface)
            pos += blen
        if offs:
            yield RecordBlock(buf, np.array(offs, dtype=np.int64), np.array(caps, dtype=np.int64),
                              np.array(wires, dtype=np.int64), np.array(tss, dtype=np.int64),
                              np.array(lts, dtype=np.int32), frame, pos_file + pos,
                              np.array(secs, dtype=np.float64), np.array(ifs, dtype=np.int32))
            frame += len(offs)
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
