"""``rdmalab decode -T json`` in worker processes: the TCP segments (rdmalab.capture.json_blocks).

A worker writes a TCP segment's JSON but for what its stream decides: a segment without payload whole
(as a decode with no iWARP tracker writes it), one with a payload without its ``data`` layer; the main
process feeds the tracker in order and finishes the text (:func:`~rdmalab.capture.json_blocks._spliced`):
the PDUs the tracker completes in the segment, nothing more where it reads the payload as iWARP's
(mid-FPDU, a retransmission), else the payload as ``data``; and decodes the segment again per packet
where that will not do (the tracker fails on it).  Each way must give one process's text byte for
byte: iWARP captures (FPDUs completed in a segment, FPDUs cut across segments, a stream whose MPA
start was not captured), the same streams with every segment sent twice (retransmissions), reordered
and cut by a snap length, and a capture of RoCE and iWARP frames mixed, at several block sizes.  The
rule itself is checked too: finishing the text as if the tracker followed no stream, or completed no
PDU, gives another text (these captures have such frames).
"""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Any

import pytest

from rdmalab.capture import json_blocks, read
from rdmalab.capture.columnar_summary import AnalysisFeed
from rdmalab.capture.json_blocks import iter_json_file
from rdmalab.capture.pcapio import FrameMeta
from rdmalab.capture.tcp_analysis import insert_json, insert_json_one
from rdmalab.capture.tsjson import iter_json

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = ROOT / "captures"
IWARP = ["siw_write_bw.pcap", "siw_write_bw_midstream.pcap", "siw_crc_read_bw.pcap", "siw_rping.pcap",
         "synthetic_iwarp_mpa_markers.pcap", "synthetic_iwarp_all_opcodes.pcap"]


def _one(path: Path) -> str:
    return "".join(iter_json(read(path), meta=FrameMeta(path)))


def _many(path: Path, block_bytes: int) -> str:
    return "".join(iter_json_file(str(path), workers=2, block_bytes=block_bytes, meta=FrameMeta(path)))


def _hostile(tmp_path: Path, how: str) -> Path:
    import hostile  # tests/hostile.py

    src, dst = CAPTURES / "siw_write_bw.pcap", tmp_path / f"{how}.pcap"
    n = len(hostile.frames_of(src))
    if how == "twice":  # every segment again right after it: retransmissions in the iWARP stream
        hostile.duplicated(src, dst, 2 * n)
    elif how == "reordered":
        hostile.reordered(src, dst, n)
    else:  # cut by a snap length inside the FPDUs
        hostile.snaplen_cut(src, dst, n, snaplen=200)
    return dst


def _mixed(tmp_path: Path) -> Path:
    """RoCE and iWARP captures appended (the benchmark's mixed capture, smaller), times going on."""
    import hostile  # tests/hostile.py

    frames: list[tuple[int, bytes, int]] = []
    for name in ("rxe_write_bw.pcap", "siw_write_bw.pcap", "rxe_send_bw.pcap", "siw_crc_send_bw.pcap",
                 "siw_write_bw_midstream.pcap", "rxe_read_bw.pcap", "siw_read_bw.pcap"):
        got = hostile.frames_of(CAPTURES / name)
        shift = (frames[-1][0] + 1000 - got[0][0]) if frames else 0
        frames += [(t + shift, d, w) for t, d, w in got]
    path = tmp_path / "mixed.pcap"
    hostile.write(path, frames)
    return path


class _Ways:
    """How often each way was taken in this process (the splices and decodes happen here)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.spliced = self.with_pdus = self.decoded = 0
        spliced, decode = json_blocks._spliced, json_blocks.decode_record

        def counted_splice(text: str, splice: Any, pdus: list[Any], tcp_data: bytes | None) -> str | None:
            got = spliced(text, splice, pdus, tcp_data)
            if got is not None:
                self.spliced += 1
                self.with_pdus += bool(pdus)
            return got

        def counted_decode(*args: Any, **kw: Any) -> Any:
            self.decoded += 1
            return decode(*args, **kw)

        monkeypatch.setattr(json_blocks, "_spliced", counted_splice)
        monkeypatch.setattr(json_blocks, "decode_record", counted_decode)


@pytest.mark.parametrize("name", IWARP)
def test_iwarp_json_in_workers_is_one_process_json(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    path = CAPTURES / name
    one = _one(path)
    ways = _Ways(monkeypatch)
    for block_bytes in (1024, 4096, 65536):
        assert _many(path, block_bytes) == one, block_bytes
    assert ways.with_pdus  # (FPDUs completed in segments: their text spliced here)


@pytest.mark.parametrize("how", ["twice", "reordered", "snaplen"])
def test_changed_iwarp_streams_in_workers(how: str, tmp_path: Path) -> None:
    path = _hostile(tmp_path, how)
    one = _one(path)
    for block_bytes in (2048, 32768):
        assert _many(path, block_bytes) == one, block_bytes


def test_mixed_capture_in_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _mixed(tmp_path)
    one = _one(path)
    ways = _Ways(monkeypatch)
    for block_bytes in (4096, 1 << 20):
        assert _many(path, block_bytes) == one, block_bytes
    assert ways.with_pdus and ways.spliced > ways.with_pdus  # (segments with data, or mid-FPDU, too)


def _wrong_rules() -> dict[str, Any]:
    """Rules that finish a segment's text wrongly: as if the tracker read no payload as iWARP's (every
    payload without PDUs shown as data), or completed no PDU in any segment."""
    fed = json_blocks._fed

    def no_follows(tracker: Any, frame: int, feed: Any, payload: bytes) -> Any:
        got = fed(tracker, frame, feed, payload)
        got.following = False
        return got

    def no_pdus(tracker: Any, frame: int, feed: Any, payload: bytes) -> Any:
        got = fed(tracker, frame, feed, payload)
        got.pdus = []
        return got

    return {"no_follows": no_follows, "no_pdus": no_pdus}


@pytest.mark.parametrize("rule", ["no_follows", "no_pdus"])
@pytest.mark.parametrize("name", ["siw_write_bw.pcap", "siw_write_bw_midstream.pcap"])
def test_a_wrong_rule_is_seen(name: str, rule: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparisons above would see a segment's text finished without what its stream decides:
    mid-FPDU segments (their payload iWARP's, not data) and segments completing FPDUs."""
    path = CAPTURES / name
    one = _one(path)
    monkeypatch.setattr(json_blocks, "_fed", _wrong_rules()[rule])
    assert _many(path, 4096) != one


def _frames_json(*frames: tuple[int, bool]) -> list[str]:
    """Made ``-T json`` texts of frames (number, whether it has a ``tcp`` layer), as the writers lay them out."""
    out = []
    for n, tcp in frames:
        layers = f'\n        "frame": {{\n          "frame.number": "{n}"\n        }}'
        if tcp:
            layers += ',\n        "tcp": {\n          "tcp.srcport": "1"\n        }'
        out.append(',\n  {\n    "_source": {\n      "layers": {' + layers + "\n      }\n    }\n  }")
    return out


def test_a_segments_analysis_goes_into_its_own_text_and_another_frames_waits_for_the_piece() -> None:
    """AnalysisFeed.json_frame puts a segment's tcp.analysis member into that frame's text alone; a member of
    a frame before it (written by a worker, in a run) stays pending for apply_json, which puts it in the
    piece's text; a piece with nothing pending is given back as it is."""
    feed = AnalysisFeed(json=True)
    feed.pending.extend([(3, ['"tcp.analysis.x": "three"']), (5, ['"tcp.analysis.x": "five"'])])
    one, two, three, four, five = _frames_json((1, False), (2, True), (3, True), (4, False), (5, True))
    assert feed.json_frame(2, two) == two  # (no member)
    got5 = feed.json_frame(5, five)  # (frame 3's member is before it: left)
    assert got5.count('"tcp.analysis.x": "five"') == 1 and got5.index("five") > got5.index('"tcp.srcport"')
    assert [f for f, _ in feed.pending] == [3]
    piece = "".join((one, two, three, four, got5))
    done = feed.apply_json(piece)
    assert done.count('"tcp.analysis.x": "three"') == 1 and done.count("five") == 1 and not feed.pending
    assert feed.apply_json(piece) is piece  # nothing pending: the text as given
    # the member goes at the end of the tcp layer, as insert_json puts it
    member = ['"tcp.analysis.x": "y"']
    assert insert_json_one(three, member) == insert_json(three, deque([(3, member)]))
    assert insert_json_one(four, member) == four  # no tcp layer: unchanged
