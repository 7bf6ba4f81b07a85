"""Frame times in nanoseconds, exact on every path: a nanosecond capture (rdmalab's own writer
makes them by default) has times a float64 of seconds does not hold (its step near 2026 is about
240 ns).  ``frame.time_epoch``, ``frame.time_delta`` and ``frame.time_relative`` are checked
against the integers written, in ``-T fields`` (columnar, per packet, a stream) and ``-T json``
(one process, worker processes, a stream), and against tshark where it is installed.  A pcapng
time past what an int64 of nanoseconds holds (year 2262) is read, not a crash."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rdmalab.capture import records
from rdmalab.capture.json_blocks import iter_json_file
from rdmalab.capture.pcapio import FrameMeta
from rdmalab.capture.pcapwriter import CaptureWriter
from rdmalab.cli import main

ROOT = Path(__file__).resolve().parents[2]
requires_tshark = pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark (Wireshark) is not installed")

#: a time of 2026 whose nanoseconds a float of seconds rounds (…901798123 reads back as …901798010)
T0 = 1_795_242_068_901_798_123
#: steps between frames, none a whole microsecond
STEPS = [61_215_007, 11_641_007, 1, 999_999_999, 7, 123_456_789]


def _ns_capture(tmp_path: Path, fmt: str) -> tuple[Path, list[int]]:
    """The frames of a real RoCE capture (RoCEv2 with the CM, and TCP), at nanosecond times."""
    frames = [r.data for r in records(ROOT / "captures" / "rxe_read_bw.pcap")][:40]
    times = [T0]
    for k in range(1, len(frames)):
        times.append(times[-1] + STEPS[k % len(STEPS)])
    path = tmp_path / f"ns.{fmt}"
    with CaptureWriter(path, format=fmt, nano=True) as w:  # type: ignore[arg-type]
        for t, data in zip(times, frames, strict=True):
            w.write(data, t)
    return path, times


def _text(ns: int) -> str:
    sign = "-" if ns < 0 else ""
    return f"{sign}{abs(ns) // 1_000_000_000}.{abs(ns) % 1_000_000_000:09d}"


def _run(args: list[str], capsys: Any) -> str:
    assert main(["decode", *args]) == 0
    return capsys.readouterr().out


def _stream(args: list[str], data: bytes) -> str:
    got = subprocess.run([sys.executable, "-m", "rdmalab", "decode", "-r", "-", *args], input=data,
                         capture_output=True, check=True)
    return got.stdout.decode()


def _json_times(text: str) -> list[tuple[str, str, str]]:
    return [(f["frame.time_epoch"], f["frame.time_delta"], f["frame.time_relative"])
            for f in (p["_source"]["layers"]["frame"] for p in json.loads(text))]


@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_fields_give_the_nanoseconds_written(tmp_path: Path, fmt: str, capsys: Any) -> None:
    path, times = _ns_capture(tmp_path, fmt)
    want = [_text(t) for t in times]
    columnar = _run(["-T", "fields", "-e", "frame.time_epoch", "-r", str(path)], capsys).split()
    per_packet = _run(["-T", "fields", "-e", "frame.time_epoch", "--no-columnar", "-r", str(path)], capsys).split()
    # a field that is not a column takes the per-packet path by itself
    mixed = _run(["-T", "fields", "-e", "frame.time_epoch", "-e", "rdmalab.icrc.expected", "-r", str(path)],
                 capsys).splitlines()
    stream = _stream(["-T", "fields", "-e", "frame.time_epoch"], path.read_bytes()).split()
    assert columnar == want
    assert per_packet == want
    assert [line.split("\t")[0] for line in mixed] == want
    assert stream == want


@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_json_gives_the_nanoseconds_written(tmp_path: Path, fmt: str, capsys: Any) -> None:
    path, times = _ns_capture(tmp_path, fmt)
    want = [(_text(t), _text(t - (times[k - 1] if k else t)), _text(t - times[0])) for k, t in enumerate(times)]
    one = _run(["-T", "json", "-j", "1", "-r", str(path)], capsys)
    many = "".join(iter_json_file(str(path), workers=2, block_bytes=1024, meta=FrameMeta(path)))  # in workers
    stream = _stream(["-T", "json"], path.read_bytes())
    assert _json_times(one) == want
    # (the library's workers give the frames' JSON; the command adds tshark's TCP analysis objects to it)
    assert _json_times(many) == want
    assert _json_times(stream) == want
    assert stream == one or fmt == "pcapng"  # (from a pipe a pcapng file's interface keys are not read twice)


@requires_tshark
@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_times_as_tshark_gives_them(tmp_path: Path, fmt: str, capsys: Any) -> None:
    path, _times = _ns_capture(tmp_path, fmt)
    ts = subprocess.run(["tshark", "-n", "-r", str(path), "-T", "json"], capture_output=True, check=True).stdout
    theirs = [(f["frame.time"], f["frame.time_epoch"], f["frame.time_delta"], f["frame.time_relative"])
              for f in (p["_source"]["layers"]["frame"] for p in json.loads(ts))]
    mine = [(f["frame.time"], f["frame.time_epoch"], f["frame.time_delta"], f["frame.time_relative"])
            for f in (p["_source"]["layers"]["frame"] for p in json.loads(_run(["-T", "json", "-r", str(path)],
                                                                                   capsys)))]
    assert mine == theirs


def _far_future(tmp_path: Path) -> Path:
    """A pcapng capture whose third and last packets' timestamps have their high word damaged:
    microseconds of the year 586524, more nanoseconds than an int64 holds."""
    src = tmp_path / "src.pcapng"
    with CaptureWriter(src, format="pcapng", nano=False) as w:
        for k, r in enumerate(records(ROOT / "captures" / "rxe_write_bw_cm.pcap")):
            if k == 40:
                break
            w.write(r.data, 1_795_242_080_870_131_000 + k * 21_263_000)
    d = bytearray(src.read_bytes())
    pos = n = 0
    while pos < len(d):
        btype, blen = struct.unpack_from("<II", d, pos)
        if btype == 6:
            n += 1
            if n in (3, 40):  # a CM MAD, and the last frame (an RC SEND: its connection ends then)
                struct.pack_into("<I", d, pos + 12, 0xFFFFFFF0)
        pos += blen
    out = tmp_path / "far.pcapng"
    out.write_bytes(bytes(d))
    return out


def test_a_time_past_2262_is_read_not_a_crash(tmp_path: Path, capsys: Any) -> None:
    path = _far_future(tmp_path)
    summary = _run(["-r", str(path)], capsys)
    assert summary == _run(["--no-columnar", "-r", str(path)], capsys)
    assert summary.splitlines()[2].split()[1].startswith("18444948764494.9")  # seconds after frame 1
    fields = _run(["-T", "fields", "-e", "frame.time_epoch", "-r", str(path)], capsys).split()
    assert fields == _run(["-T", "fields", "-e", "frame.time_epoch", "--no-columnar", "-r", str(path)], capsys).split()
    assert fields[2].startswith("18446744006575.8") and fields[3] == "1795242080.933920000"
    frames = [p["_source"]["layers"]["frame"] for p in json.loads(_run(["-T", "json", "-r", str(path)], capsys))]
    assert frames[2]["frame.time"].startswith("Jan 18, 586524 13:22:55.8")  # as tshark dates it
    assert frames[2]["frame.time_epoch"] == fields[2]
    assert "Frame 3:" in _run(["-V", "-r", str(path)], capsys)
    assert main(["analyze", "-q", "-r", str(path)]) == 0
    assert "go back" in capsys.readouterr().out  # time goes back after frame 3: a finding, not a crash
    assert main(["top", "-r", str(path), "--speed", "max", "--once"]) == 0


def test_write_pcap_keeps_the_nanoseconds_it_read(tmp_path: Path) -> None:
    from rdmalab.capture import read, write_pcap

    path, times = _ns_capture(tmp_path, "pcapng")
    copy = tmp_path / "copy.pcap"
    write_pcap(copy, read(path), nano=True)
    assert [r.ns for r in records(copy)] == times


def _pcapng_with_resolution(path: Path, tsresol: int, ts: int) -> Path:
    """Three packets of a real capture on an interface of ``if_tsresol`` ``tsresol``, at ``ts``
    units and 1000 and 2000 units later."""
    frames = [r.data for r in records(ROOT / "captures" / "rxe_send_bw.pcap")][:3]

    def block(btype: int, body: bytes) -> bytes:
        return struct.pack("<II", btype, 12 + len(body)) + body + struct.pack("<I", 12 + len(body))

    opts = struct.pack("<HH", 9, 1) + bytes([tsresol, 0, 0, 0]) + struct.pack("<HH", 0, 0)
    out = block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    out += block(1, struct.pack("<HHI", 1, 0, 0) + opts)
    for k, f in enumerate(frames):
        t = ts + 1000 * k
        out += block(6, struct.pack("<IIIII", 0, t >> 32, t & 0xFFFFFFFF, len(f), len(f)) + f + bytes(-len(f) % 4))
    path.write_bytes(out)
    return path


@pytest.mark.parametrize("tsresol", [63, 127, 0x80 | 63, 0x80 | 127, 19, 0x80 | 62])
def test_interfaces_of_extreme_resolutions(tmp_path: Path, tsresol: int, capsys: Any) -> None:
    """``if_tsresol`` up to 10^127 or 2^127 units a second (pcapng's 7 bits of exponent): the
    times are the integers' own (ts * 10^9 // units), on every path and command, not an
    OverflowError.  (tshark gives 0.000000001 for 2^63 units: it overflows.)"""
    ts = 0x60000 << 32
    path = _pcapng_with_resolution(tmp_path / "res.pcapng", tsresol, ts)
    units = 2 ** (tsresol & 0x7F) if tsresol & 0x80 else 10 ** tsresol
    want = [_text((ts + 1000 * k) * 1_000_000_000 // units) for k in range(3)]
    assert _run(["-T", "fields", "-e", "frame.time_epoch", "-r", str(path)], capsys).split() == want
    assert _run(["-T", "fields", "-e", "frame.time_epoch", "--no-columnar", "-r", str(path)], capsys).split() == want
    assert [f[0] for f in _json_times(_run(["-T", "json", "-r", str(path)], capsys))] == want
    summary = _run(["-r", str(path)], capsys)
    assert summary == _run(["--no-columnar", "-r", str(path)], capsys) and summary.count("\n") == 3
    for args in (["-V", "-r"], ["stats", "-r"], ["analyze", "-q", "-r"], ["top", "--speed", "max", "--once", "-r"]):
        cmd = ["decode", *args] if args[0] == "-V" else args
        assert main([*cmd, str(path)]) == 0, args
        capsys.readouterr()


def test_times_before_1970_as_tshark_prints_them(tmp_path: Path, capsys: Any) -> None:
    """An interface whose if_tsoffset (-10 s) puts its frames before 1970 (-8.5 s and -8.25 s):
    ``frame.time_epoch`` as tshark prints it, whole seconds rounded down (-9.500000000), on the
    columnar path (a traceback before: an IndexError formatting negative seconds), the per-packet
    path and in JSON (which printed -8.500000000); the deltas stay signed."""
    frames = [r.data for r in records(ROOT / "captures" / "rxe_send_bw.pcap")][:2]

    def block(btype: int, body: bytes) -> bytes:
        return struct.pack("<II", btype, 12 + len(body)) + body + struct.pack("<I", 12 + len(body))

    opts = struct.pack("<HH", 14, 8) + struct.pack("<q", -10) + struct.pack("<HH", 0, 0)
    out = block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1)) + block(1, struct.pack("<HHI", 1, 0, 0) + opts)
    for k, f in enumerate(frames):
        t = 1_500_000 + 250_000 * k  # microseconds
        out += block(6, struct.pack("<IIIII", 0, t >> 32, t & 0xFFFFFFFF, len(f), len(f)) + f + bytes(-len(f) % 4))
    path = tmp_path / "before_1970.pcapng"
    path.write_bytes(out)
    want = ["-9.500000000", "-9.750000000"]
    assert _run(["-T", "fields", "-e", "frame.time_epoch", "-r", str(path)], capsys).split() == want
    assert _run(["-T", "fields", "-e", "frame.time_epoch", "--no-columnar", "-r", str(path)], capsys).split() == want
    assert _json_times(_run(["-T", "json", "-r", str(path)], capsys)) == [
        ("-9.500000000", "0.000000000", "0.000000000"), ("-9.750000000", "0.250000000", "0.250000000")]
    if shutil.which("tshark"):
        ts = subprocess.run(["tshark", "-n", "-r", str(path), "-T", "fields", "-e", "frame.time_epoch"],
                            capture_output=True, text=True, check=True).stdout.split()
        assert ts == want
