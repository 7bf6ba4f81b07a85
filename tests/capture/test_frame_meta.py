"""The fields of a pcapng file's blocks around its packets (:class:`rdmalab.capture.pcapio.FrameMeta`):
``frame.comment`` (what ``rdmalab analyze --annotate`` writes, and Wireshark's own packet comments),
``frame.interface_id``, ``frame.interface_name``, ``frame.interface_description`` and
``frame.section_number``, in ``-T fields`` and display filters on every output, against tshark.  Before:
"not a field rdmalab knows", so a capture annotated by rdmalab could not be filtered on its findings by
rdmalab itself."""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from tshark_cli import decode as _ours
from tshark_cli import requires_tshark, shown_frames
from tshark_cli import tshark as _tshark

from rdmalab.capture import records
from rdmalab.capture.pcapwriter import CaptureWriter
from rdmalab.cli import main

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = ROOT / "captures"
META = ["frame.comment", "frame.interface_id", "frame.interface_name", "frame.interface_description",
        "frame.section_number"]
ARGS = ["-T", "fields", "-e", "frame.number", *[a for n in META for a in ("-e", n)]]


def _sections(path: Path, n: int) -> None:
    """``n`` sections, each with three interfaces (named, named and described, neither) and packets of
    rxe_rping.pcap on them in turn, some with one comment, some with two."""
    data = [r.data for r in records(CAPTURES / "rxe_rping.pcap")][:12]
    with open(path, "wb") as out:
        for sec in range(n):
            buf = io.BytesIO()
            with CaptureWriter(buf, format="pcapng", if_name=f"veth{sec}", comment=f"section {sec}") as w:
                ifaces = [0, w.add_interface(1, name="rxe0 ü", description="the RoCE port"), w.add_interface(1)]
                for i, d in enumerate(data):
                    note = None if i % 4 else ([f"c{sec}-{i}", "a second, with a comma"] if i % 8 == 0 else f"only {i}")
                    w.write(d, 1_000_000_000 * (i + 1) + sec, interface=ifaces[i % 3], comment=note)
            out.write(buf.getvalue())


@pytest.fixture(scope="module")
def annotated(tmp_path_factory: Any) -> Path:
    out = tmp_path_factory.mktemp("meta") / "annotated.pcapng"
    assert main(["analyze", str(CAPTURES / "rxe_write_bw_loss.pcap"), "--annotate", str(out), "-q"]) == 0
    return out


@pytest.fixture(scope="module")
def one(tmp_path_factory: Any) -> Path:
    out = tmp_path_factory.mktemp("meta") / "one.pcapng"
    _sections(out, 1)
    return out


@requires_tshark
@pytest.mark.tshark
def test_fields_as_tshark(annotated: Path, one: Path, capsys: Any) -> None:
    capsys.readouterr()
    for path in (annotated, one, CAPTURES / "rxe_rping.pcap", CAPTURES / "hw_ib_connectx_erf.pcap"):
        want = _tshark("-r", str(path), *ARGS)
        assert _ours(capsys, "-r", str(path), *ARGS) == want, path
    assert "go-back-N" in _tshark("-r", str(annotated), *ARGS)
    assert "Port B (ERF Interface 1)" in want  # (ERF: each capture port an interface)


@requires_tshark
@pytest.mark.tshark
def test_filters_as_tshark(annotated: Path, one: Path, tmp_path: Path, capsys: Any) -> None:
    capsys.readouterr()
    cases = [(annotated, 'frame.comment contains "go-back-N"'), (annotated, "frame.comment"),
             (annotated, 'frame.comment matches "psn_gap: PSN \\\\d+ missing"'), (annotated, "!frame.comment"),
             (one, "frame.interface_id == 1"), (one, 'frame.interface_name == "rxe0 ü"'),
             (one, 'frame.interface_description contains "RoCE"'), (one, 'frame.comment == "only 4"'),
             (one, "frame.section_number == 1 && frame.interface_id != 0"),
             (CAPTURES / "rxe_rping.pcap", "frame.interface_id == 0 || frame.comment")]
    for path, flt in cases:
        want = _tshark("-r", str(path), "-Y", flt, "-T", "fields", "-e", "frame.number").split()
        assert want or flt.startswith("frame.interface_id == 0 ||"), flt
        for mode in ([], ["-T", "fields", "-e", "frame.number"], ["-T", "json"], ["-V"], ["--no-columnar"]):
            assert shown_frames(_ours(capsys, "-r", str(path), "-Y", flt, *mode), mode) == want, (flt, mode)
        out = tmp_path / "kept.pcapng"
        assert main(["decode", "-r", str(path), "-Y", flt, "-w", str(out)]) == 0
        assert sum(1 for _ in records(out)) == len(want), flt


@requires_tshark
@pytest.mark.tshark
def test_sections(tmp_path: Path, capsys: Any) -> None:
    """A second section numbers its interfaces from 0 again, as tshark; its interfaces are its own
    (tshark 4.0 names them by the first section's of the same number: veth0 for the second's veth1)."""
    two = tmp_path / "two.pcapng"
    _sections(two, 2)
    ours = [line.split("\t") for line in _ours(capsys, "-r", str(two), *ARGS).splitlines()]
    theirs = [line.split("\t") for line in _tshark("-r", str(two), *ARGS).splitlines()]
    assert len(ours) == len(theirs) == 24
    for a, b in zip(ours, theirs, strict=True):
        if a[5] == "2" and a[2] == "0":  # the second section's interface 0
            assert (a[3], b[3]) == ("veth1", "veth0")
            a[3] = b[3]
        assert a == b
    assert {x[5] for x in ours} == {"1", "2"}


@pytest.mark.parametrize("opts", [[], ["-E", "quote=d"], ["-E", "occurrence=f"], ["-E", "occurrence=l", "-E", "aggregator=/"],
                                  ["-Y", "udp.dstport == 4791 && frame.number > 3"], ["-c", "7"]])
def test_written_beside_the_columns(annotated: Path, one: Path, tmp_path: Path, capsys: Any, monkeypatch: Any,
                                    opts: list[str]) -> None:
    """From a pcapng file they are written beside the columns (fed the frames of each block, in order),
    not by the per-packet decoder: the same text as the per-packet decoder's, with tshark's -E options,
    a filter on other fields and -c."""
    two = tmp_path / "two.pcapng"
    _sections(two, 2)
    for path in (annotated, one, two):
        slow = _ours(capsys, "-r", str(path), "--no-columnar", *opts, *ARGS)
        with monkeypatch.context() as m:
            m.setattr("rdmalab.cli.decode._fields_objects", lambda *a: pytest.fail("the per-packet path was taken"))
            assert _ours(capsys, "-r", str(path), *opts, *ARGS) == slow, (path.name, opts)


@requires_tshark
@pytest.mark.tshark
def test_text_escaped_as_tshark(tmp_path: Path, capsys: Any) -> None:
    """A comment with control characters: tshark -T fields writes backspace, tab, newline, form feed and
    carriage return escaped (so that a frame stays one line), the others as they are; both paths do too."""
    path = tmp_path / "escapes.pcapng"
    text = "".join(f"{chr(65 + i % 26)}{chr(i)}" for i in range(1, 32)) + "\\\x7f ü"
    subprocess.run(["editcap", "-a", f"1:{text}", "-a", "3:two\tlines\nhere", str(CAPTURES / "rxe_rping.pcap"), str(path)],
                   check=True)
    want = _tshark("-r", str(path), *ARGS)
    assert "\\t" in want and want.count("\n") == 41
    assert _ours(capsys, "-r", str(path), *ARGS) == want
    assert _ours(capsys, "-r", str(path), "--no-columnar", *ARGS) == want


@requires_tshark
@pytest.mark.tshark
def test_a_stream_gives_them_too(annotated: Path, one: Path, tmp_path: Path) -> None:
    """From a pipe (plain and gzip) the blocks are read as the stream's reader reads them (before: "write
    the capture to a file first"): the same fields and filters as tshark's from the file."""
    gz = tmp_path / "one.pcapng.gz"
    gz.write_bytes(gzip.compress(one.read_bytes()))
    for path, flt in ((annotated, 'frame.comment contains "go-back-N"'), (one, "frame.interface_id == 1"),
                      (gz, 'frame.comment || frame.interface_name == "rxe0 ü"')):
        for args in (ARGS, ["-Y", flt, *ARGS]):
            with open(path, "rb") as f:
                got = subprocess.run([sys.executable, "-m", "rdmalab", "decode", "-r", "-", *args], stdin=f,
                                     capture_output=True, text=True, cwd=ROOT)
            assert got.returncode == 0, got.stderr
            assert got.stdout == _tshark("-r", str(path), *args), (path.name, args)


@pytest.mark.parametrize("name", ["rxe_write_bw_loss.pcap", "pcapng"])
def test_what_a_stream_keeps_for_them_is_bounded(name: str, one: Path, tmp_path: Path, capsys: Any,
                                                 monkeypatch: Any) -> None:
    """Through a FIFO, read in small pieces: a pcap stream has no blocks to read, so nothing is kept for
    them after its first frame; a pcapng stream's bytes are kept only until its frames are asked for (each piece read is
    gone before the reader reads far past it)."""
    from rdmalab.capture import pcapio

    monkeypatch.setattr(pcapio, "STREAM_BLOCK", 4096)  # (the reads and what is dropped, small)
    kept: list[int] = []
    real = pcapio._Tap.feed
    monkeypatch.setattr(pcapio._Tap, "feed", lambda self, data: (real(self, data), kept.append(len(self._buf))))
    src = CAPTURES / name if name.endswith(".pcap") else one
    data = src.read_bytes() * (1 if name.endswith(".pcap") else 400)  # (a pcapng file of 400 sections)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_bytes(data))
    writer.start()
    assert main(["decode", "-r", str(fifo), "-T", "fields", "-e", "frame.comment", "-e", "frame.number"]) == 0
    writer.join()
    lines = capsys.readouterr().out.splitlines()
    if name.endswith(".pcap"):
        assert len(lines) == 420 and kept[-1] == 0 and max(kept) <= 2 * 4096  # (what came before the first frame)
    else:
        assert len(lines) == 4800 and sum(1 for x in lines if x.split("\t")[0]) == 400 * 3
        assert len(data) > 900_000 and max(kept) <= 3 * 4096, max(kept)


def _named(order: str) -> bytes:
    """A pcapng section of byte order ``order``: two interfaces (the second named ``eth1``), packets of
    rxe_rping.pcap on them in turn, every third with a comment option (opt_comment) after its data."""
    import struct

    from test_pcapng_bulk import _block, _shb

    def opt(code: int, value: bytes) -> bytes:
        return struct.pack(order + "HH", code, len(value)) + value + b"\0" * (-len(value) % 4)

    parts = [_shb(order), _block(order, 1, struct.pack(order + "HHI", 1, 0, 0)),
             _block(order, 1, struct.pack(order + "HHI", 1, 0, 0) + opt(2, b"eth1") + opt(0, b""))]
    for i, d in enumerate([r.data for r in records(CAPTURES / "rxe_rping.pcap")][:30]):
        data = d + b"\0" * (-len(d) % 4)
        extra = opt(1, f"note {i}".encode()) + opt(0, b"") if i % 3 == 0 else b""
        parts.append(_block(order, 6, struct.pack(order + "IIIII", i % 2, 0, i, len(d), len(d)) + data + extra))
    return b"".join(parts)


def test_either_byte_order(tmp_path: Path, capsys: Any) -> None:
    """A big-endian section's blocks give the fields a little-endian one gives: the interfaces' numbers and
    names, the comments of the packets that have one (the others: none)."""
    got = []
    for order in "<>":
        path = tmp_path / f"order{ord(order)}.pcapng"
        path.write_bytes(_named(order))
        got.append(_ours(capsys, *ARGS, "-r", str(path)))
    assert got[0] == got[1]
    rows = [line.split("\t") for line in got[0].splitlines()]
    assert len(rows) == 30
    assert [r[1] for r in rows[:4]] == ["note 0", "", "", "note 3"]
    assert [r[2:4] for r in rows[:2]] == [["0", "unknown"], ["1", "eth1"]]


@pytest.mark.parametrize("flt", [None, "udp.dstport == 4791 && frame.number > 3"])
def test_written_beside_the_workers(annotated: Path, tmp_path: Path, capsys: Any, flt: str | None) -> None:
    """With the blocks decoded in worker processes (blocks cut small, a file of two sections, another with
    rdmalab's own findings as comments), the pcapng blocks' fields are followed in this process: the same text
    as in one process, with a filter on other fields, and beside the conversations' fields.  A filter on them is
    not answered from the columns: the library says so (the CLI filters frame by frame)."""
    from rdmalab.capture.fieldtext import field_text

    two = tmp_path / "two.pcapng"
    _sections(two, 2)
    for path in (annotated, two):
        for names in (["frame.number", *META], ["frame.number", "frame.interface_name", "udp.stream", "frame.comment"]):
            one = b"".join(field_text(path, names, filter_expr=flt, workers=1))
            many = b"".join(field_text(path, names, filter_expr=flt, workers=2, parallel_min_bytes=0, block_bytes=700))
            assert many == one and one, (path.name, names, flt)
    with pytest.raises(ValueError, match=r"reads frame.comment, frame.interface_id, a pcapng block's field"):
        b"".join(field_text(two, ["frame.number"], filter_expr="frame.interface_id == 1 || frame.comment"))
