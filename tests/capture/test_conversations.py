"""``tcp.stream`` and ``udp.stream`` (each conversation numbered in the order of its first frame, a TCP
SYN with a new initial sequence number on the same ports a new one) and tshark's relative ``tcp.seq``,
``tcp.ack`` and ``tcp.nxtseq`` in ``-T fields`` and display filters, against tshark, on both paths: the
columns' (:func:`rdmalab.capture.columnar_decode.fill_conversations`) and the per-packet decoder's
(``--no-columnar``).  On every capture of the repository, and on captures appended to each other (the
same ports again, as a capture of repeated test runs has them), also read in blocks small enough that
every conversation crosses several.  Before: "not a field rdmalab knows"; then the per-packet path alone
(12.0 s where tshark took 4.4 s on the benchmark's 200,000 frames)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tshark_cli import decode as _ours
from tshark_cli import requires_tshark
from tshark_cli import tshark as _tshark

from rdmalab.capture import records
from rdmalab.capture.fieldtext import field_text
from rdmalab.capture.pcapwriter import CaptureWriter
from rdmalab.capture.render import Conversations

CAPTURES = Path(__file__).resolve().parents[2] / "captures"
FILES = sorted(p.name for p in CAPTURES.glob("*.pcap"))
NAMES = ["frame.number", "tcp.stream", "udp.stream", "tcp.seq", "tcp.ack", "tcp.nxtseq"]
ARGS = [a for n in NAMES for a in ("-e", n)]
ARGS = ["-T", "fields", *ARGS]
PATHS = ([], ["--no-columnar"])


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("name", FILES)
def test_stream_numbers_as_tshark(name: str, capsys: Any) -> None:
    path = str(CAPTURES / name)
    want = _tshark("-r", path, *ARGS)
    for how in PATHS:
        assert _ours(capsys, *how, "-r", path, *ARGS) == want, how
    flt = "tcp.stream == 1 || udp.stream in {0, 3} || !(tcp.stream >= 0 || udp.stream >= 0) || tcp.seq == 1"
    want = _tshark("-r", path, "-Y", flt, "-T", "fields", "-e", "frame.number").split()
    for how in PATHS:
        for mode in ([], ["-T", "fields", "-e", "frame.number"]):
            got = [line.split()[0] for line in _ours(capsys, *how, "-r", path, "-Y", flt, *mode).splitlines()]
            assert got == want, (how, mode)


def _appended(path: Path, moved: bool) -> None:
    """The same runs appended; with ``moved``, each run's TCP sequence numbers moved (new SYNs on the
    same ports)."""
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


@requires_tshark
@pytest.mark.tshark
def test_ports_reused_by_appended_runs(tmp_path: Path, capsys: Any) -> None:
    """The same runs appended: once as they are (the same SYNs again: the same conversations), once each
    run's TCP sequence numbers moved (new SYNs on the same ports: new conversations)."""
    for moved in (False, True):
        path = tmp_path / f"again{int(moved)}.pcap"
        _appended(path, moved)
        want = _tshark("-r", str(path), *ARGS)
        for how in PATHS:
            got = _ours(capsys, *how, "-r", str(path), *ARGS)
            assert got == want, (moved, how)
        streams = {line.split("\t")[1] for line in want.splitlines()} - {""}
        assert len(streams) == (4 if moved else 2), (moved, streams)  # (one TCP connection a run)


@requires_tshark
@pytest.mark.tshark
def test_columns_follow_conversations_across_blocks(tmp_path: Path) -> None:
    """The columns' state carried from block to block: every capture of the repository appended (their
    runs' sequence numbers moved, so ports come back with new SYNs), read in blocks of 16 KiB."""
    path = tmp_path / "all.pcap"
    with CaptureWriter(path) as w:
        for k, name in enumerate([*FILES, *FILES]):
            for r in records(CAPTURES / name):
                d = bytearray(r.data)
                if r.linktype != 1:
                    continue
                if k >= len(FILES) and d[12:14] == b"\x08\x00" and d[23] == 6:
                    at = 14 + (d[14] & 15) * 4
                    for field in (at + 4, at + 8):
                        v = (int.from_bytes(d[field:field + 4], "big") + 7_000_000) % (1 << 32)
                        d[field:field + 4] = v.to_bytes(4, "big")
                w.write(bytes(d), r.ns or 0)
    got = b"".join(field_text(path, NAMES, workers=1, block_bytes=16 << 10)).decode()
    want = _tshark("-r", str(path), *ARGS)
    assert got == want
    assert len({line.split("\t")[1] for line in want.splitlines()} - {""}) > 20


def test_counts_every_frame_and_both_directions() -> None:
    c = Conversations()
    frames = [{"ip.src": "10.0.0.1", "ip.dst": "10.0.0.2", "udp.srcport": 5, "udp.dstport": 4791},
              {"ip.src": "10.0.0.2", "ip.dst": "10.0.0.1", "udp.srcport": 4791, "udp.dstport": 5},
              {"ip.src": "10.0.0.2", "ip.dst": "10.0.0.1", "udp.srcport": 6, "udp.dstport": 4791},
              {"ip.src": "10.0.0.1", "ip.dst": "10.0.0.2", "tcp.srcport": 9, "tcp.dstport": 80, "tcp.flags": 2,
               "tcp.seq_raw": 100, "tcp.ack_raw": 0, "tcp.len": 0},
              {"ip.src": "10.0.0.1", "ip.dst": "10.0.0.2", "tcp.srcport": 9, "tcp.dstport": 80, "tcp.flags": 2,
               "tcp.seq_raw": 100, "tcp.ack_raw": 0, "tcp.len": 0},  # the SYN again: the same conversation
              {"ip.src": "10.0.0.1", "ip.dst": "10.0.0.2", "tcp.srcport": 9, "tcp.dstport": 80, "tcp.flags": 2,
               "tcp.seq_raw": 7, "tcp.ack_raw": 0, "tcp.len": 0},  # (another sequence number than the base: a new one)
              {"eth.type": 0x806}]
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
    want = _tshark("-r", str(path), *ARGS)
    for how in PATHS:
        assert _ours(capsys, *how, "-r", str(path), *ARGS) == want, how


def test_summary_lines_filtered_on_conversations(tmp_path: Path, capsys: Any) -> None:
    """Summary lines with a filter on the conversations (written as without a filter, then the frames the
    columns' filter keeps): the per-packet path's lines, on every capture appended (ERF records among
    Ethernet ones: those blocks' columns from the per-packet decoder), in blocks of 16 KiB, with -c."""
    from rdmalab.capture.columnar_summary import summary_bytes
    from rdmalab.capture.filter import compile_filter

    path = tmp_path / "all.pcapng"
    with CaptureWriter(path, format="pcapng", linktype=None) as w:
        ifaces: dict[int, int] = {}
        for name in sorted(FILES, key=lambda n: "erf" in n):  # (the ERF records after Ethernet conversations)
            for r in records(CAPTURES / name):
                if r.linktype not in ifaces:
                    ifaces[r.linktype] = w.add_interface(r.linktype)
                w.write(r.data, r.ns or 0, interface=ifaces[r.linktype])
    assert len(ifaces) == 2
    for flt in ("tcp.stream == 2", "udp.stream in {0, 7} || tcp.seq == 1", "!(udp.stream >= 1)",
                "tcp.nxtseq > 100 && ip.src == 10.0.0.1"):
        for count in (None, 700):
            more = ["-c", str(count)] if count else []
            want = _ours(capsys, "--no-columnar", "-r", str(path), "-Y", flt, *more)
            got = b"".join(summary_bytes(path, flt=compile_filter(flt), filter_expr=flt, count=count,
                                         block_bytes=16 << 10)).decode()
            assert got == want, (flt, count)
            assert _ours(capsys, "-r", str(path), "-Y", flt, *more) == want
            assert want.count("\n") > 5, flt
