"""``decode -T json -Y FILTER`` and ``decode -V -Y FILTER`` of a file whose filter the columns answer
(rdmalab.cli.decode._shown_and_decoded): the frames shown found by the columnar ``-T fields`` path, only those
and the TCP segments decoded one by one.  The text is the per-packet path's (``--no-columnar``) for every
filter below on every capture named, and that path's is held to tshark's elsewhere
(tests/capture/test_tsjson.py, tests/capture/test_tree_templates.py)."""

from __future__ import annotations

import io
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from rdmalab.cli import main

CAPTURES = Path(__file__).resolve().parents[2] / "captures"
FILTERS = [
    "infiniband.bth.opcode == 17", "tcp.analysis.retransmission", "tcp.stream == 1", "iwarp_rdma.opcode == 0",
    "udp", "ip.src == 10.0.0.2 && infiniband.bth.psn > 100", "frame.number > 5 && frame.number < 40",
    "tcp.len > 0", "icmpv6 || arp", "rdmalab.icrc.ok == 1", "infiniband.aeth.syndrome", "frame.time_delta > 0.001",
    "iwarp_mpa", "infiniband.bth.opcode == 17 && !tcp",
]


def _json(*args: str) -> str:
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["decode", "-T", "json", *args]) == 0
    return buf.getvalue()


def _trees(path: Path, *args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "rdmalab", "decode", "-V", *args, "-r", str(path)], capture_output=True,
                         text=True, timeout=300, check=True)
    return out.stdout


@pytest.mark.parametrize("name", ["siw_write_bw.pcap", "rxe_send_bw_loss.pcap", "siw_crc_rping.pcap",
                                  "synthetic_all_opcodes_rocev2.pcap", "synthetic_iwarp_mpa_crc.pcap",
                                  "lo_icmp_unreachable.pcap"])
def test_the_per_packet_paths_text(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from rdmalab.cli import decode

    taken: list[str] = []
    real = decode._json_shown
    monkeypatch.setattr(decode, "_json_shown", lambda path, args, *rest: taken.append(args.filter) or real(path, args, *rest))
    path = str(CAPTURES / name)
    shown = 0
    for expr in FILTERS:
        got = _json("-Y", expr, "-r", path)
        assert got == _json("--no-columnar", "-Y", expr, "-r", path), expr
        shown += got.count('"_index"')
    assert shown > 0
    # (the filters on protocol names, frame.time_delta and a negation of one are not the columns' to answer)
    assert len(taken) == 9 and "udp" not in taken, taken


def test_with_a_count_and_appended_captures(tmp_path: Path) -> None:
    """-c stops the frames shown where the per-packet path stops them; captures appended to each other (an
    iWARP stream after a RoCE one, its ports reused later) give the same text."""
    from rdmalab.capture.pcapwriter import write_capture
    from rdmalab.capture.reader import records

    path = tmp_path / "appended.pcap"
    recs = [r for name in ("rxe_write_bw.pcap", "siw_write_bw.pcap", "siw_write_bw.pcap")
            for r in records(CAPTURES / name)]
    write_capture(path, [(round(r.timestamp * 1e9), r.data) for r in recs])
    for expr in ("iwarp_rdma.opcode == 0", "tcp.analysis.retransmission", "infiniband.bth.opcode == 10 || tcp.flags.syn == 1"):
        for count in ([], ["-c", "150"]):
            assert _json(*count, "-Y", expr, "-r", str(path)) == _json("--no-columnar", *count, "-Y", expr, "-r",
                                                                          str(path)), (expr, count)


@pytest.mark.parametrize("name", ["siw_write_bw.pcap", "rxe_send_bw_loss.pcap", "siw_crc_rping.pcap",
                                  "synthetic_iwarp_mpa_crc.pcap"])
def test_trees_are_the_per_packet_paths(name: str) -> None:
    """-V -Y: each frame shown as the per-packet path writes its tree, with tshark's SEQ/ACK analysis."""
    path = CAPTURES / name
    frames = 0
    for expr in ("infiniband.bth.opcode == 17", "tcp.analysis.retransmission", "iwarp_rdma.opcode == 0",
                 "frame.number > 5 && frame.number < 40", "tcp.len > 0", "tcp.analysis.ack_rtt > 0"):
        got = _trees(path, "-Y", expr)
        assert got == _trees(path, "--no-columnar", "-Y", expr), expr
        frames += got.count("\nFrame ") + got.startswith("Frame ")
    assert frames > 0
