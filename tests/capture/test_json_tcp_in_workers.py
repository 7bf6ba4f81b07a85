"""``rdmalab decode -T json`` in worker processes: the TCP segments (rdmalab.capture.tsjson).

A worker writes a TCP segment's JSON as a decode with no iWARP tracker writes it; the main process
feeds the tracker in order and takes that text as it is only where the tracker leaves the frame's JSON
so (no PDU completed in it, no error, its payload not read as iWARP's: else its payload is ``data``),
changes it (:func:`~rdmalab.capture.tsjson._spliced`: the PDUs' layers, no ``data``) where the tracker
completes PDUs in it or reads its payload as iWARP's, and decodes it again per packet where neither
will do.  Each way must give one process's text byte for byte: iWARP captures (an FPDU completed in a
segment, FPDUs cut across segments, a stream whose MPA start was not captured), the same streams with
every segment sent twice (retransmissions), reordered and cut by a snap length, and a capture of RoCE
and iWARP frames mixed, at several block sizes.  The rule itself is checked too: taking the worker's
text where the stream changes it gives another text (these captures have such frames).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rdmalab.capture import read, tsjson
from rdmalab.capture.pcapio import FrameMeta
from rdmalab.capture.tsjson import iter_json, iter_json_file

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
        spliced, decode = tsjson._spliced, tsjson.decode_record

        def counted_splice(text: str, splice: Any, pdus: list[Any]) -> str | None:
            got = spliced(text, splice, pdus)
            if got is not None:
                self.spliced += 1
                self.with_pdus += bool(pdus)
            return got

        def counted_decode(*args: Any, **kw: Any) -> Any:
            self.decoded += 1
            return decode(*args, **kw)

        monkeypatch.setattr(tsjson, "_spliced", counted_splice)
        monkeypatch.setattr(tsjson, "decode_record", counted_decode)


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
    assert ways.with_pdus and ways.spliced > ways.with_pdus  # (segments mid-FPDU too: no PDU, no data)


def _wrong_rules() -> dict[str, Any]:
    """Rules that take the worker's text where they must not."""
    holds = tsjson._stateless_holds

    def ignore_follows(tracker: Any, frame: int, data: bytes, feed: Any) -> Any:
        got = holds(tracker, frame, data, feed)
        return got if got is not None and (got.pdus or got.err) else None

    def always(tracker: Any, frame: int, data: bytes, feed: Any) -> Any:
        holds(tracker, frame, data, feed)
        return None

    return {"ignore_follows": ignore_follows, "always": always}


@pytest.mark.parametrize("rule", ["ignore_follows", "always"])
@pytest.mark.parametrize("name", ["siw_write_bw.pcap", "siw_write_bw_midstream.pcap"])
def test_a_wrong_rule_is_seen(name: str, rule: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparisons above would see a rule that takes a stream-dependent segment's text from the
    worker: mid-FPDU segments (their payload iWARP's, not data) and segments completing FPDUs."""
    path = CAPTURES / name
    one = _one(path)
    monkeypatch.setattr(tsjson, "_stateless_holds", _wrong_rules()[rule])
    assert _many(path, 4096) != one
