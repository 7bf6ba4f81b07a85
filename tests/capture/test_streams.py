"""Captures read from pipes, FIFOs and standard input (``decode -r -``), as they arrive, in bounded
memory; live captures from an interface (``capture -i``, ``decode -i``; tests/capture/test_live.py)."""

from __future__ import annotations

import io
import os
import select
import struct
import subprocess
import sys
import threading
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
from tshark_util import requires_tshark

from rdmalab.capture.pcapio import CaptureError, is_stream
from rdmalab.capture.pcapwriter import CaptureWriter
from rdmalab.capture.reader import read, records
from rdmalab.cli import main

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = ROOT / "captures"
NAMES = ["rxe_rc_pingpong.pcap", "siw_read_bw.pcap", "rxe_write_bw_cm.pcap", "mixed"]
FORMATS = {
    "summary": [],
    "tree": ["-V"],
    "json": ["-T", "json"],
    "fields": ["-T", "fields", "-e", "frame.number", "-e", "ip.src", "-e", "infiniband.bth.psn", "-e",
               "tcp.window_size", "-e", "iwarp_ddp.msn"],
    "filter": ["-Y", "infiniband.bth.opcode != 17 && frame.number > 2 || iwarp_ddp || iwarp_mpa"],
}
#: waiting for what must come: a guard against hanging, never a measurement
GUARD = 60.0


def _env() -> dict[str, str]:
    """The environment of a command run here: this checkout's rdmalab, and Python's own buffering of
    standard output (what -l is about)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    return {**env, "PYTHONPATH": str(ROOT)}


def _pcapng(src: Path, dst: Path) -> Path:
    """``src`` again as pcapng, through the project's writer (one interface per link type)."""
    with CaptureWriter(dst, format="pcapng", linktype=None) as w:
        ifaces: dict[int, int] = {}
        for rec in records(src):
            if rec.linktype not in ifaces:
                ifaces[rec.linktype] = w.add_interface(rec.linktype)
            w.write(rec.data, round(rec.timestamp * 1e9), wire_len=max(rec.wire_length, len(rec.data)),
                    interface=ifaces[rec.linktype])
    return dst


def _mixed(dst: Path) -> Path:
    """A pcapng of two link types: RoCE frames on Ethernet, a native InfiniBand frame (ERF), RoCE again
    (a stream goes over to the per-packet decoder at the first frame that is not Ethernet)."""
    eth = list(records(CAPTURES / "rxe_rc_pingpong.pcap"))
    ib = list(records(CAPTURES / "synthetic_native_ib_erf.pcap"))
    with CaptureWriter(dst, format="pcapng") as w:
        erf = w.add_interface(ib[0].linktype)
        for k, rec in enumerate(eth[:10] + ib + eth[10:20]):
            w.write(rec.data, 10**18 + k * 1000, interface=erf if rec.linktype == ib[0].linktype else 0)
    return dst


@pytest.fixture(params=["pcap", "pcapng"])
def capture(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    name = request.node.callspec.params.get("name", "siw_read_bw.pcap")
    if name == "mixed":  # two link types: pcapng only (CASES has no pcap of it)
        yield _mixed(tmp_path / "mixed.pcapng")
        return
    src = CAPTURES / name
    yield src if request.param == "pcap" else _pcapng(src, tmp_path / (src.stem + ".pcapng"))


def _feed(data: bytes, fd: int) -> threading.Thread:
    """A thread that writes ``data`` into ``fd`` in uneven pieces (records cut across writes), then closes it."""
    def run() -> None:
        with open(fd, "wb", buffering=0) as f:
            pos, k = 0, 0
            while pos < len(data):
                step = (7, 1000, 33, 4096, 1)[k % 5]
                try:
                    f.write(data[pos:pos + step])
                except BrokenPipeError:
                    return
                pos += step
                k += 1

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _decode(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = main(["decode", *args])
    got = capsys.readouterr()
    return rc, got.out, got.err


# ----------------------------------------------------------------------------- the same output as from the file


#: (capture, file format): a capture of two link types exists only as pcapng
CASES = [(n, f) for n in NAMES for f in ("pcap", "pcapng") if not (n == "mixed" and f == "pcap")]


@pytest.mark.parametrize(("name", "capture"), CASES, indirect=["capture"])
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_stdin_decodes_as_the_file(name: str, fmt: str, capture: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    """``decode -r -``: every output format, pcap and pcapng, prints what ``decode -r FILE`` prints."""
    rc, want, _ = _decode(["-r", str(capture), *FORMATS[fmt]], capsys)
    assert rc == 0 and want.count("\n") >= 3
    r, w = os.pipe()
    feeder = _feed(capture.read_bytes(), w)
    with open(r, "rb") as stdin:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(stdin))
        rc, got, err = _decode(["-r", "-", *FORMATS[fmt]], capsys)
    feeder.join(GUARD)
    assert (rc, err) == (0, "")
    assert got == want


@pytest.mark.parametrize("name", NAMES[:2])
def test_fifo_decodes_as_the_file(name: str, capture: Path, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "cap.fifo"
    os.mkfifo(fifo)
    assert is_stream(fifo) and is_stream("-") and not is_stream(capture)
    _rc, want, _ = _decode(["-r", str(capture)], capsys)

    def writer() -> None:  # opening a FIFO waits for its reader
        fd = os.open(fifo, os.O_WRONLY)
        _feed(capture.read_bytes(), fd).join(GUARD)

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    rc, got, err = _decode(["-r", str(fifo)], capsys)
    t.join(GUARD)
    assert (rc, err, got) == (0, "", want)


def test_gzip_on_stdin(tmp_path: Path) -> None:
    import gzip

    src = CAPTURES / "rxe_read_bw.pcap"
    want = subprocess.run([sys.executable, "-m", "rdmalab", "decode", "-r", str(src)], capture_output=True,
                          env=_env(), cwd=ROOT, check=True).stdout
    got = subprocess.run([sys.executable, "-m", "rdmalab", "decode", "-r", "-"], input=gzip.compress(src.read_bytes()),
                         capture_output=True, env=_env(), cwd=ROOT, check=True).stdout
    assert got == want and want.count(b"\n") > 10


@requires_tshark
@pytest.mark.tshark
def test_stdin_fields_print_like_tshark_reading_stdin() -> None:
    """tshark -r - and rdmalab decode -r -, both fed the same bytes on standard input, print the same
    fields (the pattern of test_columnar's comparisons, through pipes)."""
    path = CAPTURES / "siw_crc_read_bw.pcap"
    args = ["-T", "fields", "-e", "frame.number", "-e", "ip.src", "-e", "tcp.srcport", "-e", "iwarp_ddp.msn",
            "-e", "iwarp_rdma.opcode", "-E", "occurrence=f", "-Y", "iwarp_ddp"]
    data = path.read_bytes()
    want = subprocess.run(["tshark", "-n", "--disable-protocol", "rpcordma", "-r", "-", *args], input=data,
                          capture_output=True, check=True).stdout
    got = subprocess.run([sys.executable, "-m", "rdmalab", "decode", "-r", "-", *args], input=data,
                         capture_output=True, env=_env(), cwd=ROOT, check=True).stdout
    assert want.count(b"\n") >= 10
    assert got == want


# ----------------------------------------------------------------------------- as the packets arrive


def test_each_record_is_handed_out_before_the_next_is_written() -> None:
    """The reader hands out a record as soon as it has arrived: the writer writes the next one only
    after the reader got the one before (a reader that waited for a full block would never get it)."""
    frames = [r.data for r in records(CAPTURES / "rxe_rc_pingpong.pcap")][:6]
    r, w = os.pipe()
    got_one = threading.Semaphore(0)
    failed: list[str] = []

    def writer() -> None:
        with open(w, "wb") as f, CaptureWriter(f) as cw:
            for k, fr in enumerate(frames):
                cw.write(fr, k * 1000)
                cw.flush()
                if not got_one.acquire(timeout=GUARD):
                    failed.append(f"the reader did not hand out packet {k + 1} before packet {k + 2} was written")
                    return

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    seen = []
    for cp in read(f"/dev/fd/{r}"):
        seen.append(cp.packet.data)
        got_one.release()
    os.close(r)
    t.join(GUARD)
    assert failed == []
    assert seen == frames


def _proc(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "rdmalab", *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=_env(), cwd=ROOT)


def _line(proc: subprocess.Popen[bytes]) -> bytes:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], GUARD)
    assert ready, "no line came"
    return proc.stdout.readline()


@pytest.mark.parametrize("opts", [[], ["-T", "fields", "-e", "frame.number", "-e", "infiniband.bth.psn"],
                                  ["-T", "fields", "-e", "frame.number", "--no-columnar"]])
def test_dash_l_prints_each_packet_before_the_writer_finishes(opts: list[str]) -> None:
    """``decode -r - -l``: the line of a packet comes out while the writer still holds the pipe open
    (without -l, Python holds standard output to a pipe in a buffer of 8 KiB)."""
    frames = [(round(r.timestamp * 1e9), r.data) for r in records(CAPTURES / "rxe_write_bw.pcap")][:4]
    proc = _proc("decode", "-r", "-", "-l", *opts)
    assert proc.stdin is not None
    with CaptureWriter(proc.stdin) as w:
        for k, (ts, fr) in enumerate(frames, 1):
            w.write(fr, ts)
            w.flush()
            line = _line(proc)
            assert line.split()[0] == str(k).encode(), line
    proc.stdin.close()
    assert proc.wait(GUARD) == 0


def test_count_stops_a_stream_without_reading_on() -> None:
    """``decode -r - -c 2`` ends after the second packet although the writer keeps the pipe open."""
    proc = _proc("decode", "-r", "-", "-c", "2")
    assert proc.stdin is not None and proc.stdout is not None
    frames = [r.data for r in records(CAPTURES / "rxe_send_lat.pcap")][:3]
    with CaptureWriter(proc.stdin) as w:
        for fr in frames:
            w.write(fr)
        w.flush()
        assert proc.wait(GUARD) == 0  # the pipe is still open
    assert proc.stdout.read().count(b"\n") == 2
    proc.stdin.close()


# ----------------------------------------------------------------------------- cut short


@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_a_stream_cut_mid_record_says_where_after_the_packets_before(fmt: str, tmp_path: Path) -> None:
    src = CAPTURES / "rxe_rc_pingpong.pcap"
    path = src if fmt == "pcap" else _pcapng(src, tmp_path / "x.pcapng")
    data = path.read_bytes()
    # where the sixth record starts, by the file's own lengths (pcap: 16-byte headers after the 24-byte
    # file header; pcapng: blocks, the first three being the section header, the interface and packet 1)
    pos, starts = (24, []) if fmt == "pcap" else (0, [])
    while len(starts) < 8:
        if fmt == "pcap":
            starts.append(pos)
            pos += 16 + struct.unpack_from("<I", data, pos + 8)[0]
        else:
            btype, blen = struct.unpack_from("<II", data, pos)
            if btype == 6:
                starts.append(pos)
            pos += blen
    start6 = starts[5]
    r = subprocess.run([sys.executable, "-m", "rdmalab", "decode", "-r", "-"], input=data[:start6 + 20],
                       capture_output=True, env=_env(), cwd=ROOT)
    assert r.returncode == 1
    assert r.stdout.count(b"\n") == 5  # the five packets before the cut
    err = r.stderr.decode()
    assert err.startswith("rdmalab: standard input: is truncated mid-record")
    if fmt == "pcap":
        assert f"record 6 at byte {start6} announces" in err and "ends after 4" in err
    else:
        assert f"block at byte {start6} (after frame 5)" in err and "ends after 20" in err
    assert "Traceback" not in err


def test_empty_and_missing_stdin(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    r = subprocess.run([sys.executable, "-m", "rdmalab", "decode", "-r", "-"], input=b"", capture_output=True,
                       env=_env(), cwd=ROOT)
    assert (r.returncode, r.stderr) == (1, b"rdmalab: standard input: is empty, not a pcap or pcapng file\n")
    monkeypatch.setattr(sys, "stdin", None)
    with pytest.raises(CaptureError, match="standard input: cannot be read"):
        list(read("-"))


def test_stats_reads_stdin(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    src = CAPTURES / "rxe_send_bw_loss.pcap"
    assert main(["stats", "-r", str(src)]) == 0
    want = capsys.readouterr().out
    r, w = os.pipe()
    _feed(src.read_bytes(), w)
    with open(r, "rb") as stdin:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(stdin))
        assert main(["stats", "-r", "-"]) == 0
    got = capsys.readouterr().out
    assert got.splitlines()[1:] == want.splitlines()[1:] and "NAK" in want
    assert got.splitlines()[0].startswith("standard input: ")


# ----------------------------------------------------------------------------- bounded memory


def _endless(frames: list[bytes], total: int) -> Iterator[bytes]:
    """A capture stream of about ``total`` bytes: the header, then ``frames`` over and over."""
    buf = io.BytesIO()
    w = CaptureWriter(buf)
    t = 1_700_000_000 * 10**9
    written = 0
    while written < total:
        for fr in frames:
            t += 1000
            w.write(fr, t)
        piece = buf.getvalue()
        written += len(piece)
        yield piece
        buf.seek(0)
        buf.truncate()


def test_a_long_stream_is_read_in_bounded_memory() -> None:
    """32 MB through a pipe: the records walker's memory stays under 4 MB (it holds a block of at most
    256 KiB and a part of a record; 1.1 MB at the peak when measured), an eighth of the stream; reading
    it whole would need all of it."""
    frames = [r.data for r in records(CAPTURES / "rxe_write_bw.pcap")]
    total = 32 << 20
    r, w = os.pipe()

    def writer() -> None:
        with open(w, "wb") as f:
            for piece in _endless(frames, total):
                f.write(piece)

    t = threading.Thread(target=writer, daemon=True)
    tracemalloc.start()
    try:
        t.start()
        n = size = 0
        for rec in records(f"/dev/fd/{r}"):
            n += 1
            size += len(rec.data) + 16
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        os.close(r)
    t.join(GUARD)
    assert size >= total - (1 << 20)
    assert peak < 4 << 20, f"{peak} bytes at the peak for a stream of {size}"


def test_decode_of_a_long_stream_keeps_its_size() -> None:
    """``decode -r - -T fields`` (the columnar path) over 6 MB and over 36 MB of stream: the process's
    peak RSS grows by less than 8 MB (reading the stream whole would add 30 MB)."""
    frames = [r.data for r in records(CAPTURES / "rxe_write_bw.pcap")]

    def peak(total: int) -> int:
        proc = subprocess.Popen([sys.executable, "-m", "rdmalab", "decode", "-r", "-", "-T", "fields", "-e",
                                 "frame.number", "-e", "infiniband.bth.psn"],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, env=_env(), cwd=ROOT)
        assert proc.stdin is not None
        for piece in _endless(frames, total):
            proc.stdin.write(piece)
        proc.stdin.close()
        _pid, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        assert proc.returncode == 0
        return usage.ru_maxrss * 1024

    small, large = peak(6 << 20), peak(36 << 20)
    assert large - small < 8 << 20, (small, large)


def test_analyze_reads_stdin_through_a_copy_on_disk(tmp_path: Path) -> None:
    """``analyze -r -`` (which reads a capture more than once) copies the stream to a temporary file:
    the same report and the same annotated capture as from the file, the report naming standard input."""
    src = CAPTURES / "rxe_write_bw_loss.pcap"

    def run(*args: str, stdin: bytes | None = None) -> str:
        r = subprocess.run([sys.executable, "-m", "rdmalab", "analyze", "-q", *args], input=stdin, capture_output=True,
                           env=_env(), cwd=ROOT, check=True)
        return r.stdout.decode()

    want = run(str(src), "--annotate", str(tmp_path / "a.pcapng"))
    got = run("-r", "-", "--annotate", str(tmp_path / "b.pcapng"), stdin=src.read_bytes())
    assert want.startswith(f"{src}: 420 frames") and got.startswith("standard input: 420 frames")
    assert got.replace("standard input", str(src)).replace("b.pcapng", "a.pcapng") == want
    assert "go-back-N" in want or "retransmission" in want
    assert (tmp_path / "a.pcapng").read_bytes() == (tmp_path / "b.pcapng").read_bytes()


@pytest.mark.parametrize("argv,what", [
    (["crosscheck", "-"], "standard input: crosscheck has tshark and rdmalab each read the capture"),
    (["convert", "-", "-o", "{tmp}/ds"], "standard input: convert reads capture files"),
    (["crosscheck", "{fifo}"], "{fifo}: crosscheck has tshark and rdmalab each read the capture"),
])
def test_commands_that_read_a_capture_twice_refuse_a_stream(argv: list[str], what: str, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """crosscheck (tshark reads it too) and convert (workers read ranges) say so, instead of comparing with
    an empty capture or saying "no such file"."""
    pytest.importorskip("pyarrow")
    fifo = tmp_path / "f.fifo"
    os.mkfifo(fifo)
    sub = {"{tmp}": str(tmp_path), "{fifo}": str(fifo)}
    for k, v in sub.items():
        argv = [a.replace(k, v) for a in argv]
        what = what.replace(k, v)
    assert main(argv) == 1
    assert capsys.readouterr().err.startswith(f"rdmalab: {what}")
