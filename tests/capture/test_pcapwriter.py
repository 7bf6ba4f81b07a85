"""The one capture writer (rdmalab.capture.pcapwriter).

Oracles: rdmalab's own reader (pcapio/reader), tshark and capinfos (Wireshark's, when installed)
and dpkt's pcap writer (what every tap used before, so a file written from the same frames and
times must be the same bytes).
"""

from __future__ import annotations

import io
import os
import random
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import dpkt
import numpy as np
import pytest

from rdmalab.capture.linktypes import LINKTYPE_ETHERNET, LINKTYPE_INFINIBAND, LINKTYPE_RAW
from rdmalab.capture.pcapio import record_blocks
from rdmalab.capture.pcapwriter import CaptureWriter, seconds_to_ns, write_capture
from rdmalab.capture.reader import read, records
from rdmalab.wire import BTH, RETH, encode_rocev2

FRAME = encode_rocev2(BTH(opcode=0x0A, destqp=0x12, psn=7), [RETH(0x1000, 7, 16)], b"p" * 16)
T0 = 1_700_000_000_123_456_789  # ns since the epoch: needs all nine digits


def _tshark(*args: str, stdin: bytes | None = None) -> list[list[str]]:
    tshark = shutil.which("tshark")
    if tshark is None:
        pytest.skip("tshark is not installed")
    out = subprocess.run([tshark, *args], input=stdin, capture_output=True, check=True).stdout.decode()
    return [line.split("\t") for line in out.splitlines()]


def _rows(path: Path) -> list[tuple[int, bytes, int, int, int]]:
    """(ts_ns, data, wire length, link type, interface) of each record, by rdmalab's reader."""
    out = []
    for blk in record_blocks(path):
        for off, cap, wire, t, lt, i in zip(blk.offset.tolist(), blk.caplen.tolist(), blk.wirelen.tolist(),
                                            blk.ts_ns.tolist(), blk.linktype.tolist(), blk.interfaces().tolist(),
                                            strict=True):
            out.append((t, bytes(blk.buf[off:off + cap]), wire, lt, i))
    return out


# ----------------------------------------------------------------------------- the bytes of before


@pytest.mark.parametrize("nano", [True, False])
def test_pcap_is_byte_for_byte_what_dpkt_wrote(nano: bool) -> None:
    rnd = random.Random(5)
    ours, theirs = io.BytesIO(), io.BytesIO()
    w = dpkt.pcap.Writer(theirs, snaplen=262144, nano=nano)
    with CaptureWriter(ours, nano=nano) as c:
        for _ in range(3000):
            # times as the taps and readers hand them: whole ns (or us) since the epoch, or virtual
            unit = 1 if nano else 1000
            t = (T0 if rnd.random() < 0.5 else 0) + rnd.randrange(10**12) // unit * unit
            data = rnd.randbytes(rnd.randrange(1, 200))
            w.writepkt(data, ts=t / 1e9)
            c.write(data, seconds_to_ns(t / 1e9))
    assert ours.getvalue() == theirs.getvalue()


def test_seconds_to_ns() -> None:
    assert seconds_to_ns(5.5) == 5_500_000_000
    assert seconds_to_ns(0) == 0
    assert seconds_to_ns(12.345678901) == 12_345_678_901
    # a float near 1.7e9 s holds about 240 ns: the nanoseconds are off, the nearest microsecond is right
    assert (seconds_to_ns(1700000000.123456) + 500) // 1000 == 1_700_000_000_123_456
    assert seconds_to_ns(0.9999999999) == 1_000_000_000  # carried into the seconds, never a fraction of 10^9
    with pytest.raises(ValueError, match="finite"):
        seconds_to_ns(float("nan"))


# ----------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
@pytest.mark.parametrize("nano", [True, False])
def test_round_trip_through_rdmalab_reader(tmp_path: Path, fmt: str, nano: bool) -> None:
    rnd = random.Random(1)
    frames = [(T0 + k * 1_234_567 + rnd.randrange(1000), rnd.randbytes(rnd.randrange(14, 300))) for k in range(50)]
    p = tmp_path / f"f.{fmt}"
    assert write_capture(p, frames, format=fmt, nano=nano) == 50  # type: ignore[arg-type]
    got = _rows(p)
    # microseconds: to the nearest, halves up
    want = [(t if nano else (t + 500) // 1000 * 1000, d, len(d), LINKTYPE_ETHERNET, 0) for t, d in frames]
    assert got == want
    assert [cp.packet.data for cp in read(p)] == [d for _, d in frames]


def test_microseconds_round_to_the_nearest_halves_up(tmp_path: Path) -> None:
    p = tmp_path / "us.pcap"
    write_capture(p, [(1499, b"a"), (1500, b"b"), (2_999_999_999_500, b"c")], nano=False)
    assert [t for t, *_ in _rows(p)] == [1000, 2000, 3_000_000_000_000]


def test_snaplen_cuts_and_keeps_the_wire_length(tmp_path: Path) -> None:
    p = tmp_path / "cut.pcap"
    with CaptureWriter(p, snaplen=60) as w:
        w.write(FRAME, 10)
        w.write(FRAME[:40], 20, wire_len=len(FRAME))
    assert _rows(p) == [(10, FRAME[:60], len(FRAME), 1, 0), (20, FRAME[:40], len(FRAME), 1, 0)]
    q = tmp_path / "cut.pcapng"
    with CaptureWriter(q, format="pcapng", snaplen=60) as w:
        w.write(FRAME, 10)
        i = w.add_interface(LINKTYPE_ETHERNET, snaplen=0)  # no limit
        w.write(FRAME, 20, interface=i)
    assert _rows(q) == [(10, FRAME[:60], len(FRAME), 1, 0), (20, FRAME, len(FRAME), 1, 1)]


# ----------------------------------------------------------------------------- pcapng, read by tshark


def _three_interfaces(path: Path) -> None:
    ib = bytes(range(40))  # what tshark makes of it does not matter; its link type and bytes do
    ip = FRAME[14:]
    with CaptureWriter(path, format="pcapng", if_name="eth-a", comment=["a section", "two lines"],
                       application="rdmalab tests") as w:
        w.write(FRAME, T0, comment="first, on eth-a")
        raw = w.add_interface(LINKTYPE_RAW, name="ip-b", description="raw IPv4")
        w.write(ip, T0 + 1, interface=raw)
        slow = w.add_interface(LINKTYPE_INFINIBAND, name="ib-us", nano=False)
        w.write(ib, T0 + 2_000, interface=slow, comment=["two", "comments é"])
        w.write(FRAME, T0 + 3, comment=None)
        assert w.interfaces == [LINKTYPE_ETHERNET, LINKTYPE_RAW, LINKTYPE_INFINIBAND]


def test_pcapng_interfaces_comments_and_times_by_rdmalab(tmp_path: Path) -> None:
    p = tmp_path / "three.pcapng"
    _three_interfaces(p)
    assert [(t, lt, i) for t, _d, _w, lt, i in _rows(p)] == [
        (T0, 1, 0), (T0 + 1, LINKTYPE_RAW, 1), (1_700_000_000_123_459_000, LINKTYPE_INFINIBAND, 2), (T0 + 3, 1, 0)]  # us: the nearest
    assert [r.data for r in records(p)][1] == FRAME[14:]


@pytest.mark.tshark
def test_pcapng_interfaces_comments_and_times_by_tshark(tmp_path: Path) -> None:
    p = tmp_path / "three.pcapng"
    _three_interfaces(p)
    rows = _tshark("-r", str(p), "-T", "fields", "-E", "separator=\t", "-e", "frame.interface_id",
                   "-e", "frame.interface_name", "-e", "frame.time_epoch", "-e", "frame.len", "-e", "frame.comment")
    assert rows == [
        ["0", "eth-a", "1700000000.123456789", str(len(FRAME)), "first, on eth-a"],
        ["1", "ip-b", "1700000000.123456790", str(len(FRAME) - 14), ""],
        ["2", "ib-us", "1700000000.123459000", "40", "two,comments é"],
        ["0", "eth-a", "1700000000.123456792", str(len(FRAME)), ""],
    ]
    capinfos = shutil.which("capinfos")
    if capinfos is not None:
        info = subprocess.run([capinfos, str(p)], capture_output=True, text=True, check=True).stdout
        assert "Capture comment:     a section" in info and "two lines" in info
        assert "rdmalab tests" in info and "Number of interfaces in file: 3" in info


@pytest.mark.tshark
@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_tshark_reads_the_packets_and_their_nanoseconds(tmp_path: Path, fmt: str) -> None:
    p = tmp_path / f"one.{fmt}"
    write_capture(p, [(T0, FRAME), (T0 + 999_999_999, FRAME)], format=fmt)  # type: ignore[arg-type]
    rows = _tshark("-r", str(p), "-T", "fields", "-E", "separator=\t", "-e", "frame.time_epoch",
                   "-e", "infiniband.bth.psn", "-e", "_ws.malformed")
    assert rows == [["1700000000.123456789", "7", ""], ["1700000001.123456788", "7", ""]]


# ----------------------------------------------------------------------------- pipes and standard output


@pytest.mark.tshark
def test_writing_to_a_pipe_that_tshark_reads(tmp_path: Path) -> None:
    tshark = shutil.which("tshark")
    if tshark is None:
        pytest.skip("tshark is not installed")
    proc = subprocess.Popen([tshark, "-r", "-", "-T", "fields", "-e", "frame.comment"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdin is not None and proc.stdout is not None
    with CaptureWriter(proc.stdin, format="pcapng") as w:  # a pipe: never seeks
        for k in range(3):
            w.write(FRAME, T0 + k, comment=f"packet {k}")
            w.flush()
    assert not proc.stdin.closed  # not the writer's to close
    proc.stdin.close()
    assert proc.stdout.read().decode().split() == ["packet", "0", "packet", "1", "packet", "2"]
    assert proc.wait(30) == 0


def test_an_os_pipe_gets_each_packet_when_flushed() -> None:
    r, wfd = os.pipe()
    got = bytearray()

    def drain() -> None:
        with os.fdopen(r, "rb", buffering=0) as f:
            while chunk := f.read(65536):
                got.extend(chunk)

    th = threading.Thread(target=drain)
    th.start()
    with os.fdopen(wfd, "wb") as pipe:
        with CaptureWriter(pipe) as w:
            w.write(FRAME, 5)
        assert not pipe.closed
    th.join(10)
    expect = io.BytesIO()
    write_capture(expect, [(5, FRAME)])
    assert bytes(got) == expect.getvalue()


def test_dash_is_standard_output(tmp_path: Path) -> None:
    code = ("import sys; from rdmalab.capture.pcapwriter import write_capture; "
            "write_capture('-', [(7, bytes(range(60)))], format='pcapng', comment='via stdout')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}).stdout
    expect = io.BytesIO()
    write_capture(expect, [(7, bytes(range(60)))], format="pcapng", comment="via stdout")
    assert out == expect.getvalue()
    p = tmp_path / "o.pcapng"
    p.write_bytes(out)
    assert _rows(p) == [(7, bytes(range(60)), 60, 1, 0)]


# ----------------------------------------------------------------------------- bad input


def test_bad_input_is_named(tmp_path: Path) -> None:
    buf = io.BytesIO()
    w = CaptureWriter(buf)
    with pytest.raises(TypeError, match=r"packet 1: ts_ns must be an int .*seconds_to_ns"):
        w.write(FRAME, 1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="packet 1: ts_ns must not be negative"):
        w.write(FRAME, -1)
    with pytest.raises(ValueError, match="packet 1: a classic pcap file has no place for a comment"):
        w.write(FRAME, 1, comment="x")
    with pytest.raises(ValueError, match="packet 1: no interface 1"):
        w.write(FRAME, 1, interface=1)
    with pytest.raises(ValueError, match="packet 1: wire_len 3 is shorter than the"):
        w.write(FRAME, 1, wire_len=3)
    with pytest.raises(ValueError, match="past 2106"):
        w.write(FRAME, 2**32 * 10**9)
    with pytest.raises(TypeError, match="packet 1: data must be bytes, not str"):
        w.write("abc", 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="add_interface is for format='pcapng'"):
        w.add_interface(1)
    w.write(FRAME, np.int64(1))  # numpy's integers are integers
    assert w.count == 1
    w.close()
    w.close()
    with pytest.raises(ValueError, match="closed"):
        w.write(FRAME, 2)
    with pytest.raises(ValueError, match="format must be 'pcap' or 'pcapng'"):
        CaptureWriter(io.BytesIO(), format="erf")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="comment is a pcapng option"):
        CaptureWriter(io.BytesIO(), comment="x")
    with pytest.raises(TypeError, match="not a text stream"):
        CaptureWriter(io.StringIO())
    with pytest.raises(ValueError, match="linktype must be"):
        CaptureWriter(io.BytesIO(), linktype=70000)
    with pytest.raises(ValueError, match="packet 1: no interface 0 .*add_interface"):
        CaptureWriter(io.BytesIO(), format="pcapng", linktype=None).write(FRAME, 1)
    with pytest.raises(ValueError, match="longer than a pcapng option can hold"):
        CaptureWriter(io.BytesIO(), format="pcapng").write(FRAME, 1, comment="x" * 70000)
    with pytest.raises(FileNotFoundError):
        CaptureWriter(tmp_path / "no" / "such" / "dir.pcap")


def test_a_path_is_closed_a_file_object_is_not(tmp_path: Path) -> None:
    with CaptureWriter(tmp_path / "a.pcap") as w:
        pass
    assert w._f.closed
    buf = io.BytesIO()
    with CaptureWriter(buf) as w:
        pass
    assert not buf.closed and len(buf.getvalue()) == 24
