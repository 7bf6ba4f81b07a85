"""A TCP segment with SYN and FIN both set: its ``tcp.nxtseq`` counts the two flags as one octet (packet-tcp.c
adds one when either is set), as tshark shows it; rdmalab added one for each (``0 → 2`` for a bare SYN+FIN,
tshark ``1``), on both paths.  The segments after it in the same conversation are counted from the same base."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tshark_cli import decode, requires_tshark, tshark

from rdmalab.capture.pcapwriter import write_capture


def _capture(path: Path) -> Path:
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether

    shapes = [("SF", b""), ("SF", b"abcd"), ("S", b""), ("F", b""), ("SFA", b"xy"), ("SFR", b""), ("SFPU", b"z"),
              ("FA", b"tail"), ("SA", b"")]
    frames = []
    for i, (flags, data) in enumerate(shapes):
        pkt = (Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP(src="10.0.0.1", dst="10.0.0.2")
               / TCP(sport=1000 + i % 7, dport=80, flags=flags, seq=100 + 10 * i, ack=7) / data)
        frames.append((1_700_000_000_000_000_000 + i * 1000, bytes(pkt)))
    write_capture(path, frames)
    return path


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("path_args", [[], ["--no-columnar"]])
def test_next_sequence_number_as_tshark(path_args: list[str], tmp_path: Path, capsys: Any) -> None:
    path = str(_capture(tmp_path / "synfin.pcap"))
    fields = ["-T", "fields", *(a for f in ("frame.number", "tcp.flags", "tcp.seq", "tcp.ack", "tcp.nxtseq", "tcp.len",
                                            "tcp.stream") for a in ("-e", f))]
    assert decode(capsys, *path_args, "-r", path, *fields) == tshark("-r", path, *fields)
    for flt in ("tcp.nxtseq == 1", "tcp.nxtseq == 5", "tcp.nxtseq > 2"):
        want = tshark("-r", path, "-Y", flt, "-T", "fields", "-e", "frame.number")
        assert decode(capsys, *path_args, "-r", path, "-Y", flt, "-T", "fields", "-e", "frame.number") == want, flt


def test_paths_agree(tmp_path: Path, capsys: Any) -> None:
    path = str(_capture(tmp_path / "synfin.pcap"))
    for mode in ([], ["-V"], ["-T", "json"]):
        assert decode(capsys, *mode, "-r", path) == decode(capsys, "--no-columnar", *mode, "-r", path)
