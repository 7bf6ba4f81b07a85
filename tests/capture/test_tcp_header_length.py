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


def _damaged_after_handshake(path: Path) -> int:
    """``siw_rping.pcap`` and ``siw_write_bw.pcap`` (window scaling on: both SYNs offer it) with every third segment after the
    handshake given a header length under 20 octets or past its datagram's end, in turn; the number of
    segments changed."""
    with CaptureWriter(path) as w:
        n = 0
        for r in (r for name in ("siw_rping.pcap", "siw_write_bw.pcap") for r in records(CAPTURES / name)):
            d = bytearray(r.data)
            if d[12:14] == b"\x08\x00" and d[23] == 6:
                at = 14 + (d[14] & 15) * 4 + 12
                if not d[at + 1] & 0x02:  # (not a SYN)
                    n += 1
                    if n % 3 == 0:
                        d[at] = (3 if n % 2 else 15) << 4 | d[at] & 15
            w.write(bytes(d), r.ns or 0)
    return n // 3


@requires_tshark
@pytest.mark.tshark
def test_the_line_of_a_bogus_header_as_tshark(tmp_path: Path, capsys: Any) -> None:
    """A header under 20 octets: tshark's Info ends ``, bogus TCP header length (12, must be at least
    20)`` where ``Len=`` would be; a header past its datagram: the ports, flags, numbers and window, no
    ``Len=`` (then its options, which rdmalab does not show, and ``[Malformed Packet]``), its window raw
    where the others' is scaled.  Both paths, and the lines written with a filter, say the same."""
    path = tmp_path / "bogus.pcap"
    assert _damaged_after_handshake(path) > 10
    info = subprocess.run(
        ["tshark", "-n", "-r", str(path), "-o", "tcp.relative_sequence_numbers:FALSE", "-o",
         "tcp.analyze_sequence_numbers:FALSE", "-o", "tcp.desegment_tcp_streams:FALSE", "-T", "fields",
         "-e", "tcp.hdr_len", "-e", "_ws.col.Info"], capture_output=True, text=True, check=True).stdout.splitlines()
    ours = _ours(capsys, "-r", str(path)).splitlines()
    assert ours == _ours(capsys, "-r", str(path), "--no-columnar").splitlines()
    assert len(ours) == len(info)
    bogus = past = scaled = 0
    for line, want in zip(ours, info, strict=True):
        hdr, text = want.split("\t", 1)
        if hdr and int(hdr) < 20:
            bogus += 1
            assert f"{text} [1 problem(s): malformed TCP.data_offset" in line, (line, text)
            scaled = max(scaled, int(text.split("Win=")[1].split(",")[0]))
        elif hdr and "[Malformed Packet]" in text and " Win=" in text:  # (tshark called some iWARP)
            past += 1
            numbers = text[:text.index(" Win=")] + " Win=" + text.split(" Win=")[1].split()[0]
            assert "Len=" not in line and f" {numbers} [1 problem(s): truncated TCP.data_offset" in line, (line, text)
            assert int(numbers.split("Win=")[1]) < 1024  # (its raw window: tshark scales it not)
    assert bogus > 5 and past > 5 and scaled > 4096  # (a bogus header's window: scaled, the raw ones under 1024)
    # a filter on the segments keeps the same lines
    kept = _ours(capsys, "-r", str(path), "-Y", "tcp.srcport >= 0").splitlines()
    assert kept == [line for line in ours if " TCP " in line or " iWARP " in line]


@requires_tshark
@pytest.mark.tshark
def test_the_fields_of_a_bogus_header_as_tshark(tmp_path: Path, capsys: Any) -> None:
    """A header under 20 octets: tshark shows its fields up to the data offset (ports, sequence number,
    header length) and none after it (no acknowledgment number, flags or window), and the conversation's
    numbers all the same; -T fields, -T json and a filter say so on both paths."""
    path = tmp_path / "bogus.pcap"
    _damaged_after_handshake(path)
    names = ["frame.number", "tcp.srcport", "tcp.seq_raw", "tcp.hdr_len", "tcp.ack_raw", "tcp.flags", "tcp.flags.ack",
             "tcp.window_size_value", "tcp.window_size", "tcp.stream", "tcp.seq", "tcp.ack", "tcp.len"]
    args = ["-r", str(path), "-T", "fields", *[a for f in names for a in ("-e", f)]]
    want = subprocess.run(["tshark", "-n", *args], capture_output=True, text=True, check=True).stdout
    bogus = [line for line in want.splitlines() if line.split("\t")[3] and int(line.split("\t")[3]) < 20]
    assert len(bogus) > 5 and all(line.split("\t")[4:9] == [""] * 5 for line in bogus)
    for opt in ([], ["--no-columnar"]):
        assert _ours(capsys, *args, *opt) == want, opt
        flt = _ours(capsys, "-r", str(path), "-Y", "tcp.hdr_len < 20 && !tcp.flags", "-T", "fields", "-e",
                    "frame.number", *opt).split()
        assert flt == [line.split("\t")[0] for line in bogus]
