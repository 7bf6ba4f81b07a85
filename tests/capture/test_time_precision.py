"""The summary line's time to its capture's precision, as tshark shows it: six decimals for microsecond
captures, nine for nanosecond ones (``tcpdump --time-stamp-precision=nano``, rdmalab's own writer) and ERF
records' own times, 0-3 for pcapng interfaces of coarser ``if_tsresol``, 10^-7 s and 2^-20 s cut to six,
2^-10 s to three; each time cut, not rounded.  Against tshark on both paths (columns and per-packet),
with every ``-t`` format, a filter, and the blocks rendered in worker processes.  Before: always six
decimals, rounded."""

from __future__ import annotations

import random
import struct
from pathlib import Path
from typing import Any

import pytest
from tshark_cli import decode as _ours
from tshark_cli import requires_tshark
from tshark_cli import tshark as _tshark

from rdmalab.capture import records
from rdmalab.capture.columnar_summary import summary_lines
from rdmalab.capture.pcapio import time_digits
from rdmalab.capture.pcapwriter import CaptureWriter

CAPTURES = Path(__file__).resolve().parents[2] / "captures"


def _nano(path: Path, fmt: str) -> Path:
    """rxe_rping.pcap's and siw_read_bw.pcap's frames (RoCE, TCP, iWARP) at nanosecond times, some apart by
    seconds, some by a few nanoseconds."""
    rnd = random.Random(5)
    t = 1_795_242_068_901_798_123
    with CaptureWriter(path, format=fmt, nano=True) as w:  # type: ignore[arg-type]
        for _ in range(3):
            for name in ("rxe_rping.pcap", "siw_read_bw.pcap"):
                for r in records(CAPTURES / name):
                    t += rnd.randrange(1, 3_000_000_000) if rnd.random() < 0.05 else rnd.randrange(1, 2_000_000)
                    w.write(r.data, t)
    return path


def _resolution(path: Path, tsresol: int) -> Path:
    """A pcapng file of one interface of ``if_tsresol`` ``tsresol`` (pcapng 4.2), a real capture's frames."""
    def block(kind: int, body: bytes) -> bytes:
        body += bytes(-len(body) % 4)
        return struct.pack("<II", kind, 12 + len(body)) + body + struct.pack("<I", 12 + len(body))

    units = 2 ** (tsresol & 0x7F) if tsresol & 0x80 else 10 ** tsresol
    out = block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    out += block(1, struct.pack("<HHI", 1, 0, 0) + struct.pack("<HHB3x", 9, 1, tsresol) + bytes(4))
    t = 1_700_000_000.0
    for k, r in enumerate(records(CAPTURES / "rxe_write_bw.pcap")):
        t += 0.1234567891 if k % 7 == 0 else 0.0000123
        ts = int(t * units)
        out += block(6, struct.pack("<IIIII", 0, ts >> 32, ts & 0xFFFFFFFF, len(r.data), len(r.data)) + r.data)
    path.write_bytes(out)
    return path


def _columns(text: str, fmt: str) -> list[tuple[str, ...]]:
    take = 3 if fmt in ("ad", "ud") else 2
    return [tuple(line.split()[:take]) for line in text.splitlines()]


def test_digits_of_a_resolution() -> None:
    assert [time_digits(u) for u in (1, 10, 100, 1000, 10**4, 10**6, 10**7, 10**9, 2**10, 2**20, 2**30)] == \
        [0, 1, 2, 3, 3, 6, 6, 9, 3, 6, 9]


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("kind", ["pcap", "pcapng", 0, 1, 2, 3, 4, 7, 0x8A, 0x94, "erf"])
def test_times_as_tshark(kind: Any, tmp_path: Path, capsys: Any) -> None:
    if kind == "erf":
        path = CAPTURES / "hw_ib_connectx_erf.pcap"
    elif isinstance(kind, str):
        path = _nano(tmp_path / f"nano.{kind}", kind)
    else:
        path = _resolution(tmp_path / f"res{kind}.pcapng", kind)
    flt = "frame.number != 3"
    for fmt in ("r", "e", "ad", "dd"):
        want = _columns(_tshark("-t", fmt, "-r", str(path), "-Y", flt), fmt)
        assert len(want) > 10
        for how in ([], ["--no-columnar"]):
            assert _columns(_ours(capsys, *how, "-t", fmt, "-r", str(path), "-Y", flt), fmt) == want, (fmt, how)
    want = _tshark("-r", str(path))
    got = _ours(capsys, "-r", str(path))
    assert _columns(got, "r") == _columns(want, "r")
    assert got == _ours(capsys, "--no-columnar", "-r", str(path))
    if kind == "pcapng":  # the blocks rendered in worker processes: the same lines
        many = "".join(summary_lines(path, workers=2, parallel_min_bytes=0, block_bytes=64 << 10))
        assert many == got
    digits = {len(t.partition(".")[2]) for _n, t in _columns(got, "r")}
    assert len(digits) == 1
