"""TCP windows in the summary line are scaled as tshark scales them (tcp.window_size, not the raw
tcp.window_size_value), from the Window Scale options of each connection's handshake."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
from pathlib import Path

import dpkt
import numpy as np
import pytest

from rdmalab.capture import read
from rdmalab.capture.pcapwriter import write_capture
from rdmalab.capture.render import TcpWindowScaling, summary_line

CAPTURES = Path(__file__).resolve().parents[2] / "captures"
requires_tshark = pytest.mark.skipif(shutil.which("tshark") is None,
                                     reason="tshark (Wireshark) is not installed; CI installs it")
SYN, SYNACK, ACK = 0x02, 0x12, 0x10
A, B = "10.0.0.1", "10.0.0.2"


def _ws(shift: int) -> bytes:
    return b"\x01\x03\x03" + bytes([shift])  # NOP, Window Scale


# (src, dst, sport, dport, flags, raw window, options): each handshake variant on its own ports
HANDSHAKES = {
    "both sides offer": [(A, B, 1, 2, SYN, 1000, _ws(7)), (B, A, 2, 1, SYNACK, 2000, _ws(5)),
                         (A, B, 1, 2, ACK, 100, b""), (B, A, 2, 1, ACK, 200, b"")],
    "SYN-ACK without": [(A, B, 3, 4, SYN, 1000, _ws(7)), (B, A, 4, 3, SYNACK, 2000, b""),
                        (A, B, 3, 4, ACK, 100, b""), (B, A, 4, 3, ACK, 200, b"")],
    "SYN without": [(A, B, 5, 6, SYN, 1000, b""), (B, A, 6, 5, SYNACK, 2000, _ws(5)),
                    (A, B, 5, 6, ACK, 100, b""), (B, A, 6, 5, ACK, 200, b"")],
    "no handshake": [(A, B, 7, 8, ACK, 100, b""), (B, A, 8, 7, ACK, 200, b"")],
    "no SYN-ACK": [(A, B, 9, 10, SYN, 1000, _ws(3)), (A, B, 9, 10, ACK, 100, b""), (B, A, 10, 9, ACK, 200, b"")],
    "shift over 14": [(A, B, 11, 12, SYN, 1000, _ws(15)), (B, A, 12, 11, SYNACK, 2000, _ws(20)),
                      (A, B, 11, 12, ACK, 100, b""), (B, A, 12, 11, ACK, 200, b"")],
    "SYN-ACK only": [(B, A, 14, 13, SYNACK, 2000, _ws(2)), (A, B, 13, 14, ACK, 100, b""),
                     (B, A, 14, 13, ACK, 200, b"")],
    "new handshake": [(A, B, 15, 16, SYN, 1000, _ws(1)), (B, A, 16, 15, SYNACK, 2000, _ws(1)),
                      (A, B, 15, 16, ACK, 100, b""), (A, B, 15, 16, SYN, 1000, _ws(4)),
                      (B, A, 16, 15, SYNACK, 2000, _ws(4)), (A, B, 15, 16, ACK, 100, b"")],
    "options after MSS": [(A, B, 17, 18, SYN, 1000, b"\x02\x04\x05\xb4" + _ws(6) + b"\x00\x00\x00\x00"),
                          (B, A, 18, 17, SYNACK, 2000, b"\x02\x04\x05\xb4\x03\x03\x02\x00"),
                          (A, B, 17, 18, ACK, 100, b""), (B, A, 18, 17, ACK, 200, b"")],
}


def _frame(src: str, dst: str, sport: int, dport: int, flags: int, win: int, opts: bytes) -> bytes:
    t = dpkt.tcp.TCP(sport=sport, dport=dport, seq=1000, ack=0, flags=flags, win=win, opts=opts)
    t.off = (20 + len(opts)) // 4
    ip = dpkt.ip.IP(src=socket.inet_aton(src), dst=socket.inet_aton(dst), p=6, data=t, ttl=64)
    ip.len = 20 + len(bytes(t))
    return bytes(dpkt.ethernet.Ethernet(src=b"\x02\0\0\0\0\1", dst=b"\x02\0\0\0\0\2", type=0x0800, data=ip))


def _our_windows(path: Path) -> dict[int, int]:
    scaling = TcpWindowScaling()
    out = {}
    for cp in read(path, iwarp=False):
        line = summary_line(cp, 0.0, scaling)
        m = re.search(r" Win=(\d+) ", line)
        if m:
            out[cp.frame_number] = int(m.group(1))
    return out


def _tshark_windows(path: Path) -> dict[int, int]:
    out = subprocess.run(["tshark", "-n", "-r", str(path), "-T", "fields", "-e", "frame.number", "-e",
                          "tcp.window_size", "-Y", "tcp"], capture_output=True, text=True, check=True).stdout
    return {int(a): int(b) for a, b in (line.split("\t") for line in out.splitlines())}


@requires_tshark
@pytest.mark.tshark
def test_handshake_variants_scale_as_tshark(tmp_path: Path) -> None:
    path = tmp_path / "handshakes.pcap"
    write_capture(path, [((k + 1) * 10**9, _frame(*p)) for k, p in enumerate(p for pk in HANDSHAKES.values()
                                                                              for p in pk)])
    ours, theirs = _our_windows(path), _tshark_windows(path)
    assert ours == theirs
    assert ours[3] == 100 << 7 and ours[4] == 200 << 5  # both sides offered: each scaled by its own


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("name", ["siw_rping.pcap", "siw_write_bw.pcap", "rxe_rc_pingpong.pcap", "rxe_write_bw.pcap"])
def test_real_captures_scale_as_tshark(name: str) -> None:
    ours, theirs = _our_windows(CAPTURES / name), _tshark_windows(CAPTURES / name)
    assert ours == theirs
    assert any(v > 65535 for v in ours.values()) or any(ours[k] != v for k, v in _raw(CAPTURES / name).items())


def _raw(path: Path) -> dict[int, int]:
    from rdmalab.wire.net import TCP

    return {cp.frame_number: cp.packet[TCP].window for cp in read(path, iwarp=False) if cp.packet.get(TCP) is not None}


def test_decode_prints_the_scaled_window(capsys: pytest.CaptureFixture[str]) -> None:
    from rdmalab.cli import main

    assert main(["decode", "-r", str(CAPTURES / "siw_rping.pcap"), "-c", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # the handshake offered WS=128 (shift 7) both ways; the SYNs themselves are not scaled
    assert " Win=64240 " in lines[0] and " Win=65160 " in lines[1] and " Win=64256 " in lines[2]


def _handshakes(tmp_path: Path) -> Path:
    path = tmp_path / "handshakes.pcap"
    write_capture(path, [((k + 1) * 10**9, _frame(*p)) for k, p in enumerate(p for pk in HANDSHAKES.values()
                                                                              for p in pk)])
    return path


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("name", ["handshakes", "siw_rping.pcap", "siw_write_bw.pcap", "siw_crc_read_bw.pcap",
                                  "siw_write_bw_midstream.pcap", "rxe_rc_pingpong.pcap"])
@pytest.mark.parametrize("path_opt", [[], ["--no-columnar"]])
def test_window_size_field_and_filter_as_tshark(name: str, path_opt: list[str], tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """``-e tcp.window_size`` and ``-Y 'tcp.window_size ...'`` print what tshark prints, on the
    columnar path (the handshakes followed across blocks) and the per-packet one."""
    from rdmalab.cli import main

    path = _handshakes(tmp_path) if name == "handshakes" else CAPTURES / name
    for flt in ("tcp", "tcp.window_size > 65535", "tcp.window_size == tcp.window_size_value"):
        if "==" in flt and "tcp.window_size_value" in flt:
            flt = "tcp.window_size >= 1000 && tcp.window_size_value < 1000"
        args = ["-T", "fields", "-e", "frame.number", "-e", "tcp.window_size_value", "-e", "tcp.window_size",
                "-Y", flt]
        want = subprocess.run(["tshark", "-n", "-r", str(path), *args], capture_output=True, text=True,
                              check=True).stdout
        assert main(["decode", *path_opt, "-r", str(path), *args]) == 0
        assert capsys.readouterr().out == want, flt


def test_window_size_column_follows_handshakes_across_blocks(tmp_path: Path) -> None:
    from rdmalab.capture.columnar import iter_columns

    path = CAPTURES / "siw_write_bw.pcap"
    names = ["tcp.window_size", "tcp.window_size_value"]
    whole = next(iter(iter_columns(path, fields=names)))
    parts = list(iter_columns(path, fields=names, block_bytes=2048))
    assert len(parts) > 5
    got = np.concatenate([p["tcp.window_size"] for p in parts])
    assert np.array_equal(got, whole["tcp.window_size"])
    assert (got != whole["tcp.window_size_value"]).sum() > 10  # scaled: the handshake offered a shift


@pytest.mark.parametrize("seed", range(4))
def test_update_many_is_update_row_by_row(seed: int) -> None:
    """TcpWindowScaling.update_many over blocks of segments (random cuts) leaves the windows and
    the state that update, one segment at a time, gives: handshakes that repeat on the same
    4-tuples (a later SYN resets a direction), SYN-ACKs with and without the option, directions
    whose handshake was not seen, IPv4 and IPv6 addresses that are the same integer."""
    rng = np.random.default_rng(seed)
    keys = [(1, 10, 2, 20), (2, 20, 1, 10), (1, 11, 2, 20), (2, 20, 1, 11), (3, 5, 4, 6), (4, 6, 3, 5)]
    n = 3000
    dirs = rng.integers(0, len(keys), size=n)
    flags = np.where(rng.random(n) < 0.05, rng.choice([SYN, SYNACK], size=n), ACK).astype(np.int64)
    flags[rng.random(n) < 0.02] |= 0x04  # RST with or without SYN: only SYN matters
    windows = rng.integers(0, 65536, size=n)
    shifts = [None if rng.random() < 0.3 else int(rng.integers(0, 15)) for _ in range(n)]
    one = TcpWindowScaling()
    want = [one.update(*keys[d], f, w, shifts[i] if f & SYN else None)
            for i, (d, f, w) in enumerate(zip(dirs.tolist(), flags.tolist(), windows.tolist(), strict=True))]
    many = TcpWindowScaling()
    got: list[int] = []
    cuts = sorted({0, n, *rng.integers(0, n, size=12).tolist()})
    asked: list[int] = []
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        used = sorted(set(dirs[a:b].tolist()))  # only the block's own directions, as the caller passes them
        local = np.searchsorted(used, dirs[a:b])

        def shift(i: int, a: int = a) -> int | None:
            asked.append(a + i)
            return shifts[a + i]

        got += many.update_many([keys[u] for u in used], local, flags[a:b], windows[a:b], shift).tolist()
    assert got == want
    assert many._shift == one._shift
    assert asked == np.flatnonzero(flags & SYN).tolist()
    assert len(set(got) - set(windows.tolist())) > 100  # scaled windows were shown (the test can fail)
