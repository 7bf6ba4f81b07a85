"""Write a capture again as pcapng with the analysis' findings as packet comments.

``rdmalab analyze FILE --annotate OUT.pcapng``: every frame a finding names gets a comment
(``opt_comment``, option code 1 of the Enhanced Packet Block) ``rdmalab KIND: TEXT``, so Wireshark
shows it in the packet list and its expert info, and ``frame.comment contains "go-back-N"``
finds it.  The frames themselves are copied byte for byte, with their timestamps in nanoseconds.

The blocks follow the pcapng specification (draft-ietf-opsawg-pcapng: Section Header Block 4.1,
Interface Description Block 4.2 with ``if_tsresol`` = 9, Enhanced Packet Block 4.3, options 3.5).
One interface is written per link type the capture holds.
"""

from __future__ import annotations

import os
import struct
from collections import defaultdict
from collections.abc import Iterable, Iterator

from rdmalab.capture.analysis_model import Finding
from rdmalab.capture.columnar import RecordBlock, record_blocks
from rdmalab.capture.reader import CaptureError

#: longest comment written on one frame (Wireshark shows comments on one line each)
COMMENT_MAX = 1000


def _pad4(b: bytes) -> bytes:
    return b + b"\0" * (-len(b) % 4)


def _options(opts: Iterable[tuple[int, bytes]]) -> bytes:
    out = b"".join(struct.pack("<HH", code, len(v)) + _pad4(v) for code, v in opts)
    return out + struct.pack("<HH", 0, 0) if out else b""


def _block(btype: int, body: bytes) -> bytes:
    total = 12 + len(body)
    return struct.pack("<II", btype, total) + body + struct.pack("<I", total)


def comments_of(findings: Iterable[Finding]) -> dict[int, list[str]]:
    """frame number -> the comments to put on it (one per finding that names the frame)."""
    out: dict[int, list[str]] = defaultdict(list)
    for f in findings:
        text = f"rdmalab {f.kind}: {f.text}"
        if f.connection is not None:
            text += f" (connection {f.connection})"
        if len(f.frames) > 64:  # a finding for the whole capture (every copy, every seam): one line per frame
            text = f"rdmalab {f.kind}: {f.text.split(':')[0]}"
        for fr in f.frames:
            if not out[fr] or out[fr][-1] != text:
                out[fr].append(text[:COMMENT_MAX])
    return out


def _blocks(src: str | os.PathLike[str]) -> Iterator[RecordBlock]:
    """The record blocks up to any damage (the analysis reports the damage; the frames before it are kept)."""
    try:
        yield from record_blocks(src)
    except CaptureError as err:
        if err.frames_read == 0 and err.offset is None:
            raise


def write_annotated(src: str | os.PathLike[str], dst: str | os.PathLike[str], findings: Iterable[Finding]) -> int:
    """Copy ``src`` (pcap or pcapng) to ``dst`` (pcapng) with comments on the frames the findings
    name.  Returns how many frames got a comment."""
    notes = comments_of(findings)
    idb_of: dict[int, int] = {}
    done = 0
    with open(dst, "wb") as out:
        # SHB: byte-order magic, version 1.0, section length unknown (-1), shb_userappl
        shb_opts = _options([(4, b"rdmalab analyze --annotate")])
        out.write(_block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1) + shb_opts))
        for blk in _blocks(src):
            buf = blk.buf
            for i, (off, cap, wire, tns, lt) in enumerate(zip(blk.offset.tolist(), blk.caplen.tolist(),
                                                                blk.wirelen.tolist(), blk.ts_ns.tolist(),
                                                                blk.linktype.tolist(), strict=True)):
                if lt not in idb_of:  # IDB: link type, snaplen 0 (no limit), if_tsresol 9 (nanoseconds)
                    idb_of[lt] = len(idb_of)
                    out.write(_block(1, struct.pack("<HHI", lt, 0, 0) + _options([(9, b"\x09")])))
                data = bytes(buf[off:off + cap])
                fr = blk.first + i
                opts = b""
                if fr in notes:
                    opts = _options((1, c.encode("utf-8")) for c in notes[fr])
                    done += 1
                body = struct.pack("<IIIII", idb_of[lt], tns >> 32, tns & 0xFFFFFFFF, cap, wire) + _pad4(data) + opts
                out.write(_block(6, body))
    return done
