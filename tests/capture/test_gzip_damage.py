"""A damaged gzip-compressed capture (the stream cut short, a byte flipped in its deflate data) is a clear
one-line error naming the file and how much was decompressed, from every command and from a pipe, after
what could be read, as a plain capture's damage is; not the gzip module's traceback."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import pytest

CAPTURES = Path(__file__).resolve().parents[2] / "captures"


def _damaged(tmp_path: Path) -> dict[str, Path]:
    whole = gzip.compress((CAPTURES / "rxe_send_bw.pcap").read_bytes())
    cut = tmp_path / "cut.pcap.gz"
    cut.write_bytes(whole[:len(whole) // 2])
    flipped = bytearray(whole)
    flipped[len(whole) // 2] ^= 0x55
    bad = tmp_path / "flipped.pcap.gz"
    bad.write_bytes(bytes(flipped))
    return {"cut": cut, "flipped": bad}


def _run(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rdmalab", *args], input=None if stdin is None else stdin,
                          capture_output=True, timeout=120, text=stdin is None)


@pytest.mark.parametrize("kind", ["cut", "flipped"])
@pytest.mark.parametrize("command", [["decode", "-r"], ["decode", "-T", "fields", "-e", "frame.number", "-r"],
                                     ["analyze", "-q"], ["top", "--once", "-r"]])
def test_every_command_says_it_in_one_line(kind: str, command: list[str], tmp_path: Path) -> None:
    path = _damaged(tmp_path)[kind]
    out = _run(*command, str(path))
    assert "Traceback" not in out.stderr, out.stderr
    said = [line for line in out.stderr.splitlines() if "gzip stream" in line]
    assert said and str(path) in said[0] and "decompressed bytes" in said[0], out.stderr
    assert out.returncode != 0 or command[0] in ("analyze", "top")  # (analyze, top: a finding, as for a cut pcap)


def test_from_a_pipe(tmp_path: Path) -> None:
    path = _damaged(tmp_path)["cut"]
    out = subprocess.run([sys.executable, "-m", "rdmalab", "decode", "-r", "-"], input=path.read_bytes(),
                         capture_output=True, timeout=120)
    err = out.stderr.decode()
    assert out.returncode == 1 and "Traceback" not in err, err
    assert "standard input: the gzip stream ends before its end-of-stream marker" in err
    assert out.stdout.count(b"\n") > 10  # (the frames before the damage)
