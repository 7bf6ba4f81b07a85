"""Options and inputs of analyze, top, convert and crosscheck that make no sense are refused in words that
name them (before, --dask-workers 0 hung for ever, --cnp-gap nan was a traceback, --width 0 printed nothing
and exited 0, --limit -1 said "... 31 more" of 30 findings); errors name the file the user gave (a stream's
error named the temporary copy analyze reads it from, a several-file analysis blamed the first file for the
damage of another).  Found by a hostile-input fuzz."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CAPTURES = Path(__file__).resolve().parents[2] / "captures"
CAP = str(CAPTURES / "rxe_send_bw.pcap")


def _run(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "rdmalab", *args], input=stdin, capture_output=True, timeout=120)


@pytest.mark.parametrize(("args", "said"), [
    (["analyze", "-q", CAP, "--cnp-gap", "nan"], "argument --cnp-gap: 'nan' is not a finite number"),
    (["analyze", "-q", CAP, "--cnp-gap", "inf"], "argument --cnp-gap: 'inf' is not a finite number"),
    (["analyze", "-q", CAP, CAP, "--dask-workers", "0"], "argument --dask-workers: 0 is less than 1"),
    (["analyze", "-q", CAP, "--limit", "-1"], "argument --limit: -1 is less than 0"),
    (["top", "-r", CAP, "--once", "--width", "0"], "argument --width: 0 is less than 20"),
    (["top", "-r", CAP, "--once", "--idle", "nan"], "argument --idle: 'nan' is not a finite number"),
    (["convert", CAP, "-o", "/tmp/never", "-j", "0"], "argument -j/--workers: 0 is less than 1"),
    (["convert", CAP, "-o", "/tmp/never", "--dask", "local", "--dask-workers", "-2"],
     "argument --dask-workers: -2 is less than 1"),
])
def test_options_that_make_no_sense(args: list[str], said: str) -> None:
    run = _run(*args)
    err = run.stderr.decode()
    assert run.returncode == 2 and said in err and "Traceback" not in err, err
    assert run.stdout == b""


def test_errors_name_what_the_user_gave(tmp_path: Path) -> None:
    run = _run("analyze", "-q", "-", stdin=b"hello, not a capture\n")
    assert run.returncode == 1 and run.stderr.decode().startswith("rdmalab: standard input: is not a pcap or pcapng"), run.stderr
    cut = (CAPTURES / "rxe_send_bw.pcap").read_bytes()[:1000]
    run = _run("analyze", "-q", "-", stdin=cut)
    assert run.stderr.decode().startswith("rdmalab: warning: standard input: the capture is truncated"), run.stderr
    whole, damaged = tmp_path / "whole.pcap", tmp_path / "damaged.pcap"
    whole.write_bytes((CAPTURES / "rxe_read_bw.pcap").read_bytes())
    damaged.write_bytes(cut)
    run = _run("analyze", "-q", str(whole), str(damaged), "--dask", "none")
    assert f"warning: {damaged.name}: the capture is truncated" in run.stderr.decode(), run.stderr
    assert str(whole) not in run.stderr.decode()
    run = _run("analyze", "-q", CAP, "--counters", CAP)
    assert run.returncode == 1 and f"--counters {CAP}: is not text (byte 0xd4 at 0)" in run.stderr.decode()
    run = _run("crosscheck", str(tmp_path))
    assert run.returncode == 1 and f"{tmp_path}: is a directory, not a capture file" in run.stderr.decode()
    run = _run("analyze", "-q", CAP, CAP)
    assert run.returncode == 1 and f"{CAP} is given twice" in run.stderr.decode()
