"""Real siw captures that start mid-stream: rdmalab resynchronises, Wireshark cannot.

``siw_write_bw_midstream.pcap`` was cut from a real siw run without CRC (captures/MANIFEST.md);
the CRC case cuts a real siw capture with MPA CRC32c here, after its MPA frames.
"""

from __future__ import annotations

from pathlib import Path

import dpkt
import pytest

from rdmalab.capture import read
from rdmalab.capture.iwarp import IwarpTracker
from rdmalab.wire.frame import decode_ethernet
from rdmalab.wire.rdmap import DDPTagged, DDPUntagged

CAPTURES = Path(__file__).resolve().parents[2] / "captures"


def _is_fpdu(p: object) -> bool:
    return DDPTagged in p or DDPUntagged in p  # type: ignore[operator]


def _full_stream_pdus(path: Path) -> dict[tuple[object, int], bytes]:
    """(flow, TCP seq) -> FPDU bytes, for every FPDU found by following the streams from their start."""
    return {(p.stream.tuple4, p.stream.seq): bytes(p.data) for cp in read(path) for p in cp.pdus if _is_fpdu(p)}


def test_midstream_without_crc_is_resynchronised() -> None:
    path = CAPTURES / "siw_write_bw_midstream.pcap"
    pdus = [p for cp in read(path) for p in cp.pdus]
    assert len(pdus) > 100
    assert all(p.stream.resync for p in pdus)
    assert all(p.crc_status is None for p in pdus)  # siw negotiated no CRC: nothing to verify
    # The RDMA Write segments of one message carry consecutive tagged offsets.
    tagged = [p[DDPTagged] for p in pdus if DDPTagged in p]
    assert len(tagged) > 100
    steps = {(b.to - a.to) for a, b in zip(tagged, tagged[1:], strict=False) if a.stag == b.stag and b.to > a.to}
    assert 1428 in steps  # the payload of a full-MSS FPDU


@pytest.mark.parametrize("cut", [10, 17, 25])
def test_midstream_with_crc_is_resynchronised(cut: int) -> None:
    """Drop the first ``cut`` frames of a real siw capture with CRC32c (perftest's first
    connection then has no handshake and no MPA frames in view): its FPDUs are found again by
    resynchronising, with good CRCs, byte for byte the FPDUs seen when following it from the start."""
    path = CAPTURES / "siw_crc_write_bw.pcap"
    with open(path, "rb") as f:
        frames = [bytes(buf) for _, buf in dpkt.pcap.Reader(f)]
    full = _full_stream_pdus(path)
    tracker = IwarpTracker()
    found = []
    for n, raw in enumerate(frames[cut:], start=cut + 1):
        found.extend(p for p in tracker.process(n, decode_ethernet(raw, lenient=True)) if _is_fpdu(p))
    resynced = [p for p in found if p.stream.resync]
    assert len(resynced) >= 10, "the mid-stream connection was not resynchronised"
    assert all(p.crc_status == "good" for p in found)
    for p in found:
        assert full[(p.stream.tuple4, p.stream.seq)] == bytes(p.data)
    # after the first FPDU found, none of the mid-stream connection's FPDUs is missed
    flow = resynced[0].stream.tuple4
    first = resynced[0].stream.seq
    expected = {seq for (t, seq) in full if t == flow and seq >= first}
    assert {p.stream.seq for p in resynced if p.stream.tuple4 == flow} == expected
