"""``tcp.stream`` and ``udp.stream`` (each conversation numbered in the order of its first frame, a TCP
SYN with a new initial sequence number on the same ports a new one) and tshark's relative ``tcp.seq``,
``tcp.ack`` and ``tcp.nxtseq`` in ``-T fields`` and display filters,
against tshark: on every capture of the repository, and on captures appended to each other (the same
ports again, as a capture of repeated test runs has them).  Before: "not a field rdmalab knows"."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tshark_cli import decode as _ours
from tshark_cli import requires_tshark
from tshark_cli import tshark as _tshark

from rdmalab.capture import records
from rdmalab.capture.pcapwriter import CaptureWriter
from rdmalab.capture.render import Conversations

CAPTURES = Path(__file__).resolve().parents[2] / "captures"
FILES = sorted(p.name for p in CAPTURES.glob("*.pcap"))
ARGS = ["-T", "fields", "-e", "frame.number", "-e", "tcp.stream", "-e", "udp.stream", "-e", "tcp.seq", "-e", "tcp.ack",
        "-e", "tcp.nxtseq"]


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("name", FILES)
def test_stream_numbers_as_tshark(name: str, capsys: Any) -> None:
    path = str(CAPTURES / name)
    assert _ours(capsys, "-r", path, *ARGS) == _tshark("-r", path, *ARGS)
    flt = "tcp.stream == 1 || udp.stream in {0, 3} || !(tcp.stream >= 0 || udp.stream >= 0) || tcp.seq == 1"
    want = _tshark("-r", path, "-Y", flt, "-T", "fields", "-e", "frame.number").split()
    for mode in ([], ["-T", "fields", "-e", "frame.number"]):
        got = [line.split()[0] for line in _ours(capsys, "-r", path, "-Y", flt, *mode).splitlines()]
        assert got == want, mode


@requires_tshark
@pytest.mark.tshark
def test_ports_reused_by_appended_runs(tmp_path: Path, capsys: Any) -> None:
    """The same runs appended: once as they are (the same SYNs again: the same conversations), once each
    run's TCP sequence numbers moved (new SYNs on the same ports: new conversations)."""
    for moved in (False, True):
        path = tmp_path / f"again{int(moved)}.pcap"
        with CaptureWriter(path) as w:
            for k, name in enumerate(("siw_rping.pcap", "rxe_write_bw.pcap", "siw_rping.pcap", "rxe_write_bw.pcap")):
                for r in records(CAPTURES / name):
                    d = bytearray(r.data)
                    if moved and d[12:14] == b"\x08\x00" and d[23] == 6:
                        at = 14 + (d[14] & 15) * 4
                        for field in (at + 4, at + 8):  # seq and ack, moved alike
                            v = (int.from_bytes(d[field:field + 4], "big") + k * 100_000) % (1 << 32)
                            d[field:field + 4] = v.to_bytes(4, "big")
                    w.write(bytes(d), r.ns or 0)
        got = _ours(capsys, "-r", str(path), *ARGS)
        assert got == _tshark("-r", str(path), *ARGS), moved
        streams = {line.split("\t")[1] for line in got.splitlines()} - {""}
        assert len(streams) == (4 if moved else 2), (moved, streams)  # (one TCP connection a run)


def test_counts_every_frame_and_both_directions() -> None:
    c = Conversations()
    frames = [{"ip.src": "10.0.0.1", "ip.dst": "10.0.0.2", "udp.srcport": 5, "udp.dstport": 4791},
              {"ip.src": "10.0.0.2", "ip.dst": "10.0.0.1", "udp.srcport": 4791, "udp.dstport": 5},
              {"ip.src": "10.0.0.2", "ip.dst": "10.0.0.1", "udp.srcport": 6, "udp.dstport": 4791},
              {"ip.src": "10.0.0.1", "ip.dst": "10.0.0.2", "tcp.srcport": 9, "tcp.dstport": 80, "tcp.flags": 2,
               "tcp.seq_raw": 100},
              {"ip.src": "10.0.0.1", "ip.dst": "10.0.0.2", "tcp.srcport": 9, "tcp.dstport": 80, "tcp.flags": 2,
               "tcp.seq_raw": 100},  # the SYN again: the same conversation
              {"ip.src": "10.0.0.1", "ip.dst": "10.0.0.2", "tcp.srcport": 9, "tcp.dstport": 80, "tcp.flags": 2,
               "tcp.seq_raw": 7}, {"eth.type": 0x806}]
    for f in frames:
        c.add(f)
    assert [f.get("udp.stream", f.get("tcp.stream")) for f in frames] == [0, 0, 1, 0, 0, 1, None]


@requires_tshark
@pytest.mark.tshark
def test_relative_numbers_of_damaged_headers(tmp_path: Path, capsys: Any) -> None:
    """A header longer than its datagram (tshark counts nothing: the raw numbers) and a bogus header
    length under 20 (the sequence number alone), on every Data Offset, as tshark."""
    path = tmp_path / "offsets.pcap"
    with CaptureWriter(path) as w:
        n = 0
        for r in records(CAPTURES / "rxe_write_bw.pcap"):
            d = bytearray(r.data)
            if d[12:14] == b"\x08\x00" and d[23] == 6:
                at = 14 + (d[14] & 15) * 4 + 12
                d[at] = (n % 16) << 4 | d[at] & 15
                n += 1
            w.write(bytes(d), r.ns or 0)
    assert _ours(capsys, "-r", str(path), *ARGS) == _tshark("-r", str(path), *ARGS)
