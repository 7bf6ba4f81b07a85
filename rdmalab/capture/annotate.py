"""Write a capture again as pcapng with the analysis' findings as packet comments.

``rdmalab analyze FILE --annotate OUT.pcapng``: every frame a finding names gets a comment
(``opt_comment``, option code 1 of the Enhanced Packet Block) ``rdmalab KIND: TEXT``, so Wireshark
shows it in the packet list and its expert info, and ``frame.comment contains "go-back-N"``
finds it.  The frames themselves are copied byte for byte, with their timestamps in nanoseconds.

The file is written by :class:`rdmalab.capture.pcapwriter.CaptureWriter` (pcapng: Section Header,
Interface Description with ``if_tsresol`` = 9, Enhanced Packet Blocks with ``opt_comment``).
One interface is written per link type the capture holds.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable, Iterator

from rdmalab.capture.analysis_model import Finding
from rdmalab.capture.columnar import RecordBlock, record_blocks
from rdmalab.capture.pcapwriter import CaptureWriter
from rdmalab.capture.reader import CaptureError

#: longest comment written on one frame (Wireshark shows comments on one line each)
COMMENT_MAX = 1000


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
    with CaptureWriter(dst, format="pcapng", linktype=None, application="rdmalab analyze --annotate") as out:
        for blk in _blocks(src):
            buf = blk.buf
            for i, (off, cap, wire, tns, lt) in enumerate(zip(blk.offset.tolist(), blk.caplen.tolist(),
                                                                blk.wirelen.tolist(), blk.ts_ns.tolist(),
                                                                blk.linktype.tolist(), strict=True)):
                if lt not in idb_of:  # one interface per link type, snaplen 0 (no limit), nanoseconds
                    idb_of[lt] = out.add_interface(lt, snaplen=0)
                fr = blk.first + i
                comment = notes.get(fr)
                done += bool(comment)
                out.write(bytes(buf[off:off + cap]), tns, wire_len=wire, interface=idb_of[lt], comment=comment,
                          as_read=True)
    return done
