"""A TCP header whose Data Offset is wrong: under 5 (a header "shorter" than 20 octets) or past the end of
its datagram.  tshark (packet-tcp.c) counts ``tcp.len`` after the header length the header says, even
a bogus one, and gives no ``tcp.len`` when that header runs past the datagram's end.  Before: the
per-packet decoder counted from 20 octets (24 against tshark's 28 ...), the columns gave such a segment a
length of 0 and called it ``tcp`` where the per-packet decoder said ``eth``."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from tshark_cli import decode as _ours
from tshark_cli import requires_tshark

from rdmalab.capture import records
from rdmalab.capture.pcapwriter import CaptureWriter

CAPTURES = Path(__file__).resolve().parents[2] / "captures"
FIELDS = ["frame.number", "tcp.srcport", "tcp.dstport", "tcp.len", "tcp.hdr_len", "tcp.seq_raw"]


def _damaged(path: Path) -> None:
    """The TCP segments of a real capture, each with another Data Offset (0 to 15, in turn)."""
    with CaptureWriter(path) as w:
        n = 0
        for name in ("rxe_write_bw.pcap", "siw_rping.pcap"):
            for r in records(CAPTURES / name):
                d = bytearray(r.data)
                if d[12:14] != b"\x08\x00" or d[23] != 6:
                    continue
                at = 14 + (d[14] & 15) * 4 + 12
                d[at] = (n % 16) << 4 | d[at] & 15
                w.write(bytes(d), r.ns or 0)
                n += 1


@requires_tshark
@pytest.mark.tshark
def test_segment_length_as_tshark_on_both_paths(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "offsets.pcap"
    _damaged(path)
    args = ["-r", str(path), "-T", "fields", *[a for f in FIELDS for a in ("-e", f)]]
    want = subprocess.run(["tshark", "-n", *args], capture_output=True, text=True, check=True).stdout
    assert "\t\t" in want  # some segments have no length
    for opt in ([], ["--no-columnar"]):
        assert _ours(capsys, *args, *opt) == want, opt
    # the frame is a segment (rdmalab.encap) exactly where it has a length, on both paths
    enc = ["-r", str(path), "-T", "fields", "-e", "rdmalab.encap", "-e", "tcp.len"]
    rows = [line.split("\t") for line in _ours(capsys, *enc).splitlines()]
    assert rows == [line.split("\t") for line in _ours(capsys, *enc, "--no-columnar").splitlines()]
    assert all((e == "tcp") == (n != "") for e, n in rows) and {e for e, _n in rows} == {"tcp", "eth"}
    assert _ours(capsys, "-r", str(path)) == _ours(capsys, "-r", str(path), "--no-columnar")
