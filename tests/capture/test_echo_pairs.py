"""Echo replies paired with their requests in the summary lines, as tshark pairs them in one pass.

tshark adds "(request in N)" to the Info of an ICMP or ICMPv6 echo reply that answers a request it has
read; rdmalab's summaries said nothing (stop 45).  The frames below hold each case of tshark's matching
(packet-icmp.c, packet-icmpv6.c: same identifier, sequence and data, the same two addresses either way
round, one reply a request, a later request of the same key in the earlier one's place), and every path
that writes summary lines is compared with tshark's: per packet, from columns in one process and in
worker processes, a block at a time, with a display filter.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from rdmalab.capture.columnar_summary import summary_bytes
from rdmalab.capture.pcapwriter import CaptureWriter
from rdmalab.capture.render import EchoPairs
from rdmalab.cli import main
from rdmalab.wire.net import ETHERTYPE_IPV4, ETHERTYPE_IPV6, Ethernet, IPv4, IPv6, internet_checksum

ROOT = Path(__file__).resolve().parents[2]
requires_tshark = pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark (Wireshark) is not installed")
A, B, C = 0x0A000001, 0x0A000002, 0x0A000003
A6, B6 = (int.from_bytes(bytes.fromhex(f"fe80000000000000000000000000000{d}"), "big") for d in "12")


def _v4(src: int, dst: int, kind: int, ident: int, seq: int, data: bytes) -> bytes:
    msg = bytearray(bytes([kind, 0, 0, 0]) + ident.to_bytes(2, "big") + seq.to_bytes(2, "big") + data)
    msg[2:4] = internet_checksum(bytes(msg)).to_bytes(2, "big")
    ip = IPv4(total_length=20 + len(msg), protocol=1, ttl=64, src=src, dst=dst).with_checksum().encode()
    return Ethernet(dst=0x020000000002, src=0x020000000001, ethertype=ETHERTYPE_IPV4).encode() + ip + bytes(msg)


def _v6(src: int, dst: int, kind: int, ident: int, seq: int, data: bytes) -> bytes:
    msg = bytearray(bytes([kind, 0, 0, 0]) + ident.to_bytes(2, "big") + seq.to_bytes(2, "big") + data)
    pseudo = src.to_bytes(16, "big") + dst.to_bytes(16, "big") + len(msg).to_bytes(4, "big") + bytes([0, 0, 0, 58])
    msg[2:4] = internet_checksum(pseudo + bytes(msg)).to_bytes(2, "big")
    ip = IPv6(payload_length=len(msg), next_header=58, hop_limit=64, src=src, dst=dst).encode()
    return Ethernet(dst=0x020000000002, src=0x020000000001, ethertype=ETHERTYPE_IPV6).encode() + ip + bytes(msg)


#: (frame, the frame of the request it answers): every case of the matching
CASES = [
    (_v4(A, B, 8, 1, 1, b"abcd"), None),
    (_v4(B, A, 0, 1, 1, b"abcd"), 1),  # the reply
    (_v4(B, A, 0, 1, 1, b"abcd"), None),  # a second reply: the request was answered
    (_v4(A, B, 8, 1, 2, b"abcd"), None),
    (_v4(B, A, 0, 1, 2, b"XXXX"), None),  # other data
    (_v4(A, B, 8, 1, 3, b"abcd"), None),
    (_v4(C, A, 0, 1, 3, b"abcd"), None),  # from another address
    (_v4(A, B, 8, 1, 4, b"abcd"), None),
    (_v4(A, B, 8, 1, 4, b"abcd"), None),  # the same request again: it takes the first one's place
    (_v4(B, A, 0, 1, 4, b"abcd"), 9),
    (_v4(B, A, 0, 7, 9, b"abcd"), None),  # no request
    (_v4(A, B, 8, 2, 1, b"abcd"), None),
    (_v4(A, B, 0, 2, 1, b"abcd"), 12),  # a reply the same way round: the same two addresses
    (_v6(A6, B6, 128, 5, 1, b"hi"), None),
    (_v6(B6, A6, 129, 5, 1, b"hi"), 14),
    (_v6(B6, A6, 129, 5, 1, b"hi"), None),
    (_v6(A6, B6, 128, 5, 2, b"hi"), None),
    (_v6(B6, A6, 129, 5, 2, b"ho"), None),
    (_v4(A, B, 8, 1, 1, b"abcd"), None),  # an identifier and sequence used again later
    (_v4(B, A, 0, 1, 1, b"abcd"), 19),
    (_v6(A6, B6, 128, 5, 3, b"hi"), None),
    (_v4(B, A, 0, 5, 3, b"hi"), None),  # an ICMP reply does not answer an ICMPv6 request
]


_LETTERS = bytes(range(97, 123)) * 3


def _random_pings(n: int, seed: int = 7) -> list[bytes]:
    """``n`` pings with random identifiers, sequences and lengths of data (checksums of every value), some
    replies lost.  The data are letters: random bytes sometimes look to tshark like another tool's probe
    (its heuristics then add to the Info)."""
    rnd = random.Random(seed)
    frames: list[bytes] = []
    for _ in range(n):
        ident, seq, data = rnd.randrange(1 << 16), rnd.randrange(1 << 16), _LETTERS[rnd.randrange(26):][:rnd.randrange(0, 40)]
        six = rnd.random() < 0.4
        make, req, rep = (_v6, 128, 129) if six else (_v4, 8, 0)
        a, b = (A6, B6) if six else (A, B)
        frames.append(make(a, b, req, ident, seq, data))
        if rnd.random() < 0.9:
            frames.append(make(b, a, rep, ident, seq, data))
    return frames


def _capture(path: Path, frames: list[bytes]) -> Path:
    with CaptureWriter(path, format="pcap") as w:
        for k, f in enumerate(frames):
            w.write(f, 1_795_242_068_000_000_000 + k * 1_000_000)
    return path


def _infos(lines: list[str]) -> list[str]:
    """The Info of each summary line (after the length, the column before it)."""
    return [re.sub(r"^ *\d+ +[\d.]+ +\S+ → \S+ +\S+ +\d+ ", "", line) for line in lines]


def test_the_pairs_as_tshark_makes_them() -> None:
    pairs = EchoPairs()
    assert [pairs.note(k + 1, decode.packet) for k, decode in enumerate(_decoded(CASES))] == [r for _f, r in CASES]


def _decoded(cases: list[tuple[bytes, int | None]]) -> list[Any]:
    from rdmalab.capture.reader import RawRecord, decode_record

    return [decode_record(RawRecord(k + 1, float(k), 1, f, len(f), 0)) for k, (f, _r) in enumerate(cases)]


def test_waiting_requests_are_bounded() -> None:
    pairs = EchoPairs(limit=2)
    frames = [_v4(A, B, 8, 1, s, b"") for s in (1, 2, 3)] + [_v4(B, A, 0, 1, s, b"") for s in (1, 2, 3)]
    got = [pairs.note(k + 1, cp.packet) for k, cp in enumerate(_decoded([(f, None) for f in frames]))]
    assert got == [None, None, None, None, 2, 3]  # the oldest request was let go


@requires_tshark
@pytest.mark.parametrize("name", ["cases", "random"])
def test_every_summary_path_pairs_as_tshark(name: str, tmp_path: Path, capsys: Any) -> None:
    frames = [f for f, _r in CASES] if name == "cases" else _random_pings(3000)
    path = _capture(tmp_path / "echo.pcap", frames)
    want = subprocess.run(["tshark", "-n", "-r", str(path), "-T", "fields", "-e", "_ws.col.Info"],
                          capture_output=True, text=True, check=True).stdout.splitlines()
    assert sum("(request in " in w for w in want) >= (4 if name == "cases" else 2000)
    for args in ([], ["--no-columnar"]):
        assert main(["decode", "-r", str(path), *args]) == 0
        assert _infos(capsys.readouterr().out.splitlines()) == want, args
    # from columns in worker processes, a few kilobytes a block (pairs across blocks and workers)
    text = b"".join(summary_bytes(path, workers=2, parallel_min_bytes=0, block_bytes=4096)).decode()
    assert _infos(text.splitlines()) == want
    text = b"".join(summary_bytes(path, workers=1, block_bytes=4096)).decode()
    assert _infos(text.splitlines()) == want
    # a filter that drops the requests: they are paired all the same, as tshark pairs them
    replies = [w for w in want if "reply" in w]
    for args in ([], ["--no-columnar"]):
        assert main(["decode", "-r", str(path), "-Y", "icmp.type == 0 || icmpv6.type == 129", *args]) == 0
        assert _infos(capsys.readouterr().out.splitlines()) == replies, args


@requires_tshark
def test_ipoib_lines_end_with_the_message_tshark_names(capsys: Any) -> None:
    """A native IB packet that carries ARP, ICMP or ICMPv6 over IPoIB keeps its InfiniBand words and ends
    with the message's, as tshark's Info gives it (an echo reply with its request's frame): the ERF
    capture of ConnectX HCAs (before stop 45: "... IPoIB IPv4 10.0.1.34 → 10.0.0.58 ICMP", nothing more)."""
    path = str(ROOT / "captures" / "hw_ib_connectx_erf.pcap")
    want = subprocess.run(["tshark", "-n", "-r", path, "-Y", "arp || icmp || icmpv6", "-T", "fields", "-e",
                           "frame.number", "-e", "_ws.col.Info"], capture_output=True, text=True, check=True).stdout
    info = dict(line.split("\t", 1) for line in want.splitlines())
    assert len(info) == 13 and any("(request in " in v for v in info.values())
    for args in ([], ["--no-columnar"]):
        assert main(["decode", "-r", path, *args]) == 0
        lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
        for frame, text in info.items():
            assert " IPoIB " in lines[frame] and lines[frame].endswith(" " + text), (frame, args)


#: what tshark's ICMP tree holds that rdmalab's does not (the checksum's verdict, little-endian copies of the
#: identifier and sequence, the pairing's fields in the reply's tree)
_THEIRS_ONLY = {"icmp.checksum.status", "icmp.ident_le", "icmp.seq_le", "icmp.resp_to", "icmp.resptime",
                "icmpv6.checksum.status", "icmpv6.resp_to", "icmpv6.resptime"}


@requires_tshark
def test_echo_trees_as_tshark(tmp_path: Path, capsys: Any) -> None:
    """An echo's identifier and sequence number are fields; its data is in its tree, after the time ping
    wrote at its start where the bytes look like one (big- or little-endian timeval within a day of the
    frame: icmp.data_time and its distance from the frame's time), as tshark shows them."""
    now = 1_795_242_068  # the frames' time, as _capture writes them
    stamps = [now.to_bytes(4, "big") + (123_456).to_bytes(4, "big"),
              (now - 5).to_bytes(4, "little") + (999_999).to_bytes(4, "little"),
              (now + 90_000).to_bytes(4, "big") + bytes(4),  # more than a day away: data
              now.to_bytes(4, "big") + (1_000_000).to_bytes(4, "big")]  # not microseconds: data
    frames = [_v4(A, B, 8, 9, k, s + b"0123456789") for k, s in enumerate(stamps)]
    frames += [_v4(A, B, 8, 9, 9, stamps[0]), _v4(A, B, 8, 9, 10, b""), _v6(A6, B6, 128, 0xBEEF, 3, stamps[0] + b"x")]
    path = _capture(tmp_path / "echo.pcap", frames)
    want = json.loads(subprocess.run(["tshark", "-n", "-r", str(path), "-T", "json"], capture_output=True, text=True,
                                     check=True).stdout)
    for args in ([], ["--no-columnar"]):
        assert main(["decode", "-r", str(path), "-T", "json", *args]) == 0
        got = json.loads(capsys.readouterr().out)
        for a, b in zip(got, want, strict=True):
            la, lb = a["_source"]["layers"], b["_source"]["layers"]
            assert la["frame"]["frame.protocols"] == lb["frame"]["frame.protocols"]
            proto = "icmp" if "icmp" in lb else "icmpv6"
            assert la[proto] == {k: v for k, v in lb[proto].items() if k not in _THEIRS_ONLY}, args
    fields = ["icmp.ident", "icmp.seq", "icmpv6.echo.identifier", "icmpv6.echo.sequence_number"]
    args = ["-r", str(path), "-T", "fields", *[x for f in fields for x in ("-e", f)], "-Y", "icmp.seq >= 2 || icmpv6"]
    theirs = subprocess.run(["tshark", "-n", *args], capture_output=True, text=True, check=True).stdout
    for extra in ([], ["--no-columnar"]):
        assert main(["decode", *args, *extra]) == 0
        assert capsys.readouterr().out == theirs, extra
