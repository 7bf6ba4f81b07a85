"""lab.twowires tells a TCP retransmission from new bytes across the 2^32 wrap of sequence numbers (it
once compared plain integers, so the first segment after the wrap read as a retransmission)."""

from __future__ import annotations

from rdmalab.capture.reader import CapturedPacket
from rdmalab.lab.twowires import _iwarp_rows
from rdmalab.wire.frame import decode_ethernet, encode_tcp_frame
from rdmalab.wire.net import TCP


def _segments(seqs: list[int], size: int = 100) -> list[CapturedPacket]:
    out = []
    for i, seq in enumerate(seqs, 1):
        frame = encode_tcp_frame(bytes(size), src_ip="10.0.0.1", dst_ip="10.0.0.2", seq=seq, flags=TCP.ACK)
        out.append(CapturedPacket(i, float(i), 1, decode_ethernet(frame)))
    return out


def test_the_segment_after_the_wrap_is_new_and_a_resend_before_it_is_a_retransmission() -> None:
    before = (1 << 32) - 100  # ends exactly at the wrap
    rows = _iwarp_rows(_segments([before, 0, before, 0, 100]), "10.0.0.1")
    assert [r.what for r in rows] == ["TCP ACK", "TCP ACK", "TCP retransmission", "TCP retransmission", "TCP ACK"]


def test_without_a_wrap_too() -> None:
    rows = _iwarp_rows(_segments([1000, 1100, 1000, 1200]), "10.0.0.1")
    assert [r.what for r in rows] == ["TCP ACK", "TCP ACK", "TCP retransmission", "TCP ACK"]
