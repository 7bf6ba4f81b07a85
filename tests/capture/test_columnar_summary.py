"""``rdmalab decode -r FILE``: the columnar summary lines are the per-packet path's, byte for byte.

The reference is the same command with ``--no-columnar`` (one CapturedPacket a frame, as before
the fast path).  Both run on every capture in captures/, with filters and counts, and on hostile
files: captures appended to themselves (time running backwards at the seam), every frame
duplicated, frames cut by a snap length, a file that ends mid-record, bad ICRCs and damaged
headers mixed in.
"""

from __future__ import annotations

import glob
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rdmalab.capture import records
from rdmalab.capture.columnar import decode_block, record_blocks
from rdmalab.capture.columnar_summary import _fast_rows
from rdmalab.cli import main

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = sorted(glob.glob(str(ROOT / "captures" / "*.pcap")))


def _both(args: list[str], capsys: Any) -> tuple[str, str, int, int]:
    rc_fast = main(["decode", *args])
    fast = capsys.readouterr().out
    rc_ref = main(["decode", "--no-columnar", *args])
    ref = capsys.readouterr().out
    return fast, ref, rc_fast, rc_ref


@pytest.mark.parametrize("path", CAPTURES, ids=os.path.basename)
def test_every_capture(path: str, capsys: Any) -> None:
    fast, ref, rc1, rc2 = _both(["-r", path], capsys)
    assert rc1 == rc2 == 0
    assert fast == ref
    assert fast.count("\n") == sum(1 for _ in records(path))


def test_the_fast_path_is_taken() -> None:
    """Most frames of a real rxe capture are formatted from columns (else the test above proves little)."""
    blk = next(record_blocks(ROOT / "captures" / "rxe_write_bw_loss.pcap"))
    fast = _fast_rows(blk, decode_block(blk))
    assert fast.mean() > 0.8


@pytest.mark.parametrize(("name", "flt", "count"), [
    ("rxe_write_bw_loss.pcap", "infiniband.bth.opcode == 17", None),
    ("rxe_write_bw_loss.pcap", "infiniband.aeth && ip.src == 10.0.0.0/8", 50),
    ("rxe_read_bw.pcap", "frame.number > 10 && !infiniband.reth", None),
    ("siw_write_bw.pcap", "tcp.srcport != 0", 30),
    ("rxe_write_bw_cm.pcap", "udp", None),
    ("synthetic_all_opcodes_rocev2.pcap", "infiniband.bth.opcode in {0..20}", 100),
])
def test_filters_and_counts(name: str, flt: str, count: int | None, capsys: Any) -> None:
    args = ["-r", str(ROOT / "captures" / name), "-Y", flt] + (["-c", str(count)] if count else [])
    fast, ref, rc1, rc2 = _both(args, capsys)
    assert rc1 == rc2 == 0
    assert fast == ref and fast


def _pcap_records(path: Path) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    data = path.read_bytes()
    out, pos = [], 24
    while pos < len(data):
        cap = struct.unpack_from("<I", data, pos + 8)[0]
        out.append((data[pos:pos + 16], data[pos + 16:pos + 16 + cap]))
        pos += 16 + cap
    return data[:24], out


def _write(path: Path, head: bytes, recs: list[tuple[bytes, bytes]]) -> Path:
    path.write_bytes(head + b"".join(h + d for h, d in recs))
    return path


def test_hostile_captures(tmp_path: Path, capsys: Any) -> None:
    head, recs = _pcap_records(ROOT / "captures" / "rxe_write_bw_loss.pcap")
    _h2, other = _pcap_records(ROOT / "captures" / "rxe_send_bw.pcap")
    rng = np.random.default_rng(19)
    cases: dict[str, list[tuple[bytes, bytes]]] = {
        "appended": recs + other + recs,  # time runs backwards at each seam
        "duplicated": [r for r in recs for _ in (0, 1)],
    }
    snap = []  # cut by a snap length: caplen shorter than the wire length
    for h, d in recs:
        cut = d[:int(rng.integers(20, max(21, len(d))))]
        snap.append((h[:8] + struct.pack("<II", len(cut), len(d)), cut))
    cases["snaplen"] = snap
    damaged = []  # flipped bytes in headers and payloads: bad ICRCs, odd lengths, unknown opcodes
    for h, d in recs:
        b = bytearray(d)
        for at in rng.integers(0, len(b), size=2).tolist():
            b[at] ^= int(rng.integers(1, 256))
        damaged.append((h, bytes(b)))
    cases["damaged"] = damaged
    for name, rs in cases.items():
        p = _write(tmp_path / f"{name}.pcap", head, rs)
        fast, ref, rc1, rc2 = _both(["-r", str(p)], capsys)
        assert rc1 == rc2 == 0, name
        assert fast == ref, name
        assert fast.count("\n") == len(rs), name


def test_ends_mid_record(tmp_path: Path, capsys: Any) -> None:
    data = (ROOT / "captures" / "rxe_write_bw_loss.pcap").read_bytes()
    p = tmp_path / "cut.pcap"
    p.write_bytes(data[:-7])
    outs = []
    for extra in ([], ["--no-columnar"]):
        rc = main(["decode", *extra, "-r", str(p)])
        got = capsys.readouterr()
        outs.append((rc, got.out, got.err))
    assert outs[0] == outs[1]
    assert outs[0][0] != 0 and "truncated mid-record: record 420 at byte" in outs[0][2]
    assert outs[0][1].count("\n") == sum(1 for _ in records(ROOT / "captures" / "rxe_write_bw_loss.pcap")) - 1


def test_strict_stops_at_the_same_frame(tmp_path: Path, capsys: Any) -> None:
    head, recs = _pcap_records(ROOT / "captures" / "rxe_write_bw_loss.pcap")
    h, d = recs[30]
    recs[30] = (h[:8] + struct.pack("<II", 40, 40), d[:40])  # a frame cut inside the BTH
    p = _write(tmp_path / "strict.pcap", head, recs)
    from rdmalab.cli._common import Fail

    outs = []
    for extra in ([], ["--no-columnar"]):
        try:
            main(["decode", "--strict", *extra, "-r", str(p)])
            err = ""
        except (Fail, SystemExit) as e:
            err = str(e)
        outs.append((capsys.readouterr(), err))
    assert outs[0] == outs[1]
    assert outs[0][0].out.count("\n") == 30


def test_times_round_as_python_does() -> None:
    """The vectorised ``%11.6f`` of relative times is Python's, including halves, nanosecond
    times, negative times (a capture whose clock steps back) and large ones."""
    from rdmalab.capture.columnar_summary import _seconds

    rng = np.random.default_rng(19)
    t = np.concatenate([
        rng.random(20000) * 100,  # nanosecond resolution: anything after the sixth decimal
        np.arange(20000) * 1e-6,  # microsecond times
        (np.arange(5000) + 0.5) / 1e6,  # halves (as close as binary gets)
        (rng.integers(0, 10**9, 5000) * 1e-9 + rng.integers(0, 10**6, 5000)),  # sec + ns
        -rng.random(1000), -np.arange(10) * 1e-7, [0.0, -0.0, 1e9 + 0.5e-6, 5e8 + 0.25e-6, 123456.0000005],
    ])
    m = _seconds(t)
    got = [bytes(row[row != 0]).decode() for row in m]
    assert got == [f"{x:11.6f}" for x in t.tolist()]


@pytest.mark.parametrize(("name", "expr", "count"), [
    ("rxe_write_bw_loss.pcap", None, None),
    ("rxe_write_bw_cm.pcap", None, 150),
    ("siw_write_bw.pcap", "tcp || infiniband", None),
    ("rxe_read_bw.pcap", "infiniband.bth.opcode in {12 13 14 15 16}", None),
])
def test_worker_processes_give_the_same_text(name: str, expr: str | None, count: int | None) -> None:
    """Blocks rendered in worker processes (small blocks, so that there are many) give the text of
    the single-process path."""
    from rdmalab.capture.columnar_summary import summary_lines
    from rdmalab.capture.filter import compile_filter

    path = str(ROOT / "captures" / name)
    flt = compile_filter(expr) if expr else None
    one = "".join(summary_lines(path, count=count, flt=flt, filter_expr=expr, block_bytes=8192))
    many = "".join(summary_lines(path, count=count, flt=flt, filter_expr=expr, block_bytes=8192, workers=2,
                                 parallel_min_bytes=0))
    assert many == one and one
