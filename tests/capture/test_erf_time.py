"""ERF timestamps in nanoseconds: Wireshark's rounding (``rdmalab.capture.linktypes.erf_time_ns``)."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from rdmalab.capture.linktypes import ERF, LINKTYPE_ERF, erf_time_ns
from rdmalab.capture.pcapwriter import CaptureWriter
from rdmalab.cli import build_parser
from rdmalab.wire import BTH, encode_ib

requires_tshark = pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark (Wireshark) is not installed")

SEC = 1210794479


@pytest.mark.parametrize(("frac", "ns"), [
    (0, 0),
    (1, 0),                      # 0.23 ns rounds down
    (3, 1),                      # 0.70 ns rounds up (truncation: 0)
    (0x00400000, 976563),        # 976562.5 ns exactly: a half rounds up
    (0x7FEBEA60, 499693535),     # frame 1 of the ConnectX capture (0.27 ns: down)
    (0x7FF07040, 499762550),     # frame 2 (0.996 ns: up; truncation gives ...549)
    (0x80000000, 500000000),     # exact
])
def test_fraction_rounds_to_the_nearest_nanosecond(frac: int, ns: int) -> None:
    assert erf_time_ns((SEC << 32) | frac) == SEC * 1_000_000_000 + ns


def test_a_fraction_that_rounds_to_a_second_carries() -> None:
    assert erf_time_ns((SEC << 32) | 0xFFFFFFFF) == (SEC + 1) * 1_000_000_000
    assert erf_time_ns(0xFFFFFFFF_FFFFFFFF) == (1 << 32) * 1_000_000_000  # the last second carries too
    assert erf_time_ns((SEC << 32) | 0xFFFFFFFD) == SEC * 1_000_000_000 + 999_999_999  # 999999999.30


def test_the_header_gives_the_same_time() -> None:
    raw = ERF(ts=(SEC << 32) | 0x7FF07040, type=21, rlen=16).encode()
    assert ERF.decode(raw).time_ns == SEC * 1_000_000_000 + 499762550


@pytest.mark.parametrize("bad", [-1, 1 << 64])
def test_not_a_64_bit_timestamp_is_an_error(bad: int) -> None:
    with pytest.raises(ValueError, match="not a 64-bit"):
        erf_time_ns(bad)


FRACTIONS = [0, 1, 3, 0x00400000, 0x7FEBEA60, 0x7FF07040, 0x80000000, 0xFFFFFFFD, 0xFFFFFFFF, 0x12345678, 0xABCDEF01]


def _erf_capture(path: Path) -> list[int]:
    """One native IB packet per fraction, in ERF records; returns each record's ERF timestamp."""
    ib = encode_ib(BTH(opcode=0x04, destqp=9, psn=1), [], b"hello!!!")
    stamps = []
    with CaptureWriter(path, linktype=LINKTYPE_ERF) as w:
        for i, frac in enumerate(FRACTIONS):
            ts = ((SEC + i) << 32) | frac
            rlen = (16 + len(ib) + 7) // 8 * 8
            rec = ERF(ts=ts, type=21, rlen=rlen, wlen=len(ib)).encode() + ib
            w.write(rec + b"\0" * (rlen - len(rec)), (SEC + i) * 1_000_000_000)
            stamps.append(ts)
    return stamps


def _text(ns: int) -> str:
    return f"{ns // 1_000_000_000}.{ns % 1_000_000_000:09d}"


@requires_tshark
@pytest.mark.tshark
def test_frame_times_are_tsharks(tmp_path: Path) -> None:
    """tshark's frame.time_epoch of ERF records is erf_time_ns, and `rdmalab decode -T fields` prints it."""
    path = tmp_path / "erf.pcap"
    stamps = _erf_capture(path)
    want = subprocess.run(["tshark", "-n", "-r", str(path), "-T", "fields", "-e", "frame.time_epoch"],
                          capture_output=True, text=True, check=True).stdout.split()
    assert want == [_text(erf_time_ns(ts)) for ts in stamps]
    out = io.StringIO()
    args = build_parser().parse_args(["decode", "-r", str(path), "-T", "fields", "-e", "frame.time_epoch"])
    assert args.func(args, out) == 0
    assert out.getvalue().split() == want


def _run(argv: list[str]) -> str:
    out = io.StringIO()
    args = build_parser().parse_args(argv)
    assert args.func(args, out) == 0
    return out.getvalue()


@requires_tshark
@pytest.mark.tshark
def test_every_output_takes_the_records_own_time_and_lengths(tmp_path: Path) -> None:
    """frame.time_epoch, frame.len and frame.cap_len of ERF records as tshark gives them (the ERF
    header's, not the pcap record's), on the columnar and the per-packet paths, in -T fields,
    -T json and the summary lines (their time column relative to the first frame, their length)."""
    path = tmp_path / "erf.pcap"
    _erf_capture(path)
    names = ["frame.time_epoch", "frame.len", "frame.cap_len", "frame.time_relative"]
    cmd = ["tshark", "-n", "-r", str(path), "-T", "fields"] + [a for n in names for a in ("-e", n)]
    want = [line.split("\t") for line in subprocess.run(cmd, capture_output=True, text=True,
                                                         check=True).stdout.splitlines()]
    assert len(want) == len(FRACTIONS) and all(w[1] != "0" and int(w[1]) + 16 < 64 for w in want)
    for extra in ([], ["--no-columnar"]):
        got = _run(["decode", "-r", str(path), "-T", "fields", "-e", "frame.time_epoch", "-e", "frame.len",
                    "-e", "frame.cap_len", *extra])
        assert [line.split("\t") for line in got.splitlines()] == [w[:3] for w in want], extra
    frames = json.loads(_run(["decode", "-r", str(path), "-T", "json"]))
    assert [[f["_source"]["layers"]["frame"][n] for n in names] for f in frames] == want
    lines = [_run(["decode", "-r", str(path), *extra]).splitlines() for extra in ([], ["--no-columnar"])]
    assert lines[0] == lines[1]
    for line, w in zip(lines[0], want, strict=True):
        cols = line.split()
        length = cols[cols.index("InfiniBand") + 1]
        assert abs(float(cols[1]) - float(w[3])) <= 5e-7 and int(length) == int(w[1]), (line, w)
