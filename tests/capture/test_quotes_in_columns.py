"""The ICMP errors that quote a UDP datagram (a RoCEv2 packet sent to a host where nothing takes RoCEv2,
answered with a port unreachable) are read from columns rather than frame by frame
(``columnar_decode._quotes_in_columns``): what ``-T fields`` and ``-Y`` see of them is what the per-packet
decoder gives (``columnar_decode.quote_fields``), field for field, on real quotes, on quotes built from the
real rxe captures, on damaged and cut copies of them; and the other quotes (TCP, no IP datagram, an error
quoting an error) are still decoded frame by frame.  Against tshark: the frames a filter on a quoted field
keeps, and the fields of the quotes."""

from __future__ import annotations

import random
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tshark_cli import decode, requires_tshark, tshark

import rdmalab.capture.columnar_decode as cd
from rdmalab.capture import records
from rdmalab.capture.columnar import COLUMN_NAMES
from rdmalab.capture.columnar_schema import DERIVED
from rdmalab.capture.pcapio import record_blocks
from rdmalab.capture.pcapwriter import CaptureWriter
from rdmalab.wire.net import internet_checksum

CAPTURES = Path(__file__).resolve().parents[2] / "captures"
REAL = CAPTURES / "lo_icmp_unreachable.pcap"
ALL = (*COLUMN_NAMES, *DERIVED)


def _unreachable(frame: bytes) -> bytes:
    """The ICMP port unreachable a Linux host answers an IPv4 UDP datagram with: at most 576 octets in
    all (RFC 1812 4.3.2.3), the datagram quoted from its IP header."""
    ip = frame[14:]
    body = struct.pack(">BBHI", 3, 3, 0, 0) + ip[:576 - 28]
    body = body[:2] + internet_checksum(body).to_bytes(2, "big") + body[4:]
    hdr = struct.pack(">BBHHHBBH4s4s", 0x45, 0xC0, 20 + len(body), 0, 0, 64, 1, 0, ip[16:20], ip[12:16])
    hdr = hdr[:10] + internet_checksum(hdr).to_bytes(2, "big") + hdr[12:]
    return frame[6:12] + frame[0:6] + frame[12:14] + hdr + body


def _answered(path: Path, sources: list[str], seed: int | None = None, snap: bool = False) -> Path:
    """The RoCEv2 packets of the real ``sources``, each followed by the port
    unreachable that quotes it; with ``seed``, 1 to 3 octets of each quote changed at random and one
    error in ten cut short (``snap``: by a snap length, its length on the wire kept)."""
    rnd = random.Random(seed)
    with CaptureWriter(path, nano=True) as w:
        for name in sources:
            for r in records(CAPTURES / name):
                d = bytes(r.data)
                if len(d) < 42 or d[12:14] != b"\x08\x00" or d[23] != 17:
                    continue
                t = round(r.timestamp * 1e9)
                w.write(d, t)
                err = bytearray(_unreachable(d))
                wire = len(err)
                if seed is not None:
                    for _ in range(rnd.randrange(1, 4)):
                        k = rnd.randrange(42, min(len(err), 42 + 70))
                        err[k] = rnd.randrange(256)
                    if rnd.random() < 0.1:
                        err = err[:rnd.randrange(42, len(err) + 1)]
                        wire = wire if snap else len(err)
                w.write(bytes(err), t + 10_000, wire_len=wire)
    return path


SOURCES = sorted(p.name for p in CAPTURES.glob("rxe_*.pcap"))


def _entries(path: Path, names: tuple[str, ...], columns: bool) -> tuple[dict[int, dict[str, Any]], int]:
    """Each quoting frame's entry in Columns.multi (its fields among ``names`` and what the conversations
    count), decoded with the columns' quotes (``columns``) or frame by frame; and how many quotes were
    read from columns."""
    done = [0]
    real = cd._quotes_in_columns

    def counted(*args: Any) -> np.ndarray:
        got = real(*args)
        done[0] += int(got.sum())
        return got

    def none(blk: Any, cols: Any, rows: np.ndarray, *args: Any) -> np.ndarray:
        return np.zeros(len(rows), dtype=bool)

    setattr(cd, "_quotes_in_columns", counted if columns else none)  # noqa: B010 - (restored below)
    keep = {*names, cd.QUOTED, cd.QUOTING}
    out: dict[int, dict[str, Any]] = {}
    try:
        for blk in record_blocks(str(path), 1 << 16):
            cols = cd.decode_block(blk, fields=names)
            out.update({f: {k: v for k, v in got.items() if k in keep} for f, got in cols.multi.items()})
    finally:
        setattr(cd, "_quotes_in_columns", real)  # noqa: B010
    return out, done[0]


@pytest.mark.parametrize("names", [ALL, ("frame.number", "ip.src", "udp.srcport", "infiniband.bth.psn"),
                                   ("ip.dst", "ipv6.src", "ip.version", "infiniband.invariant.crc",
                                    "rdmalab.icrc.status", "rdmalab.payload.len")],
                         ids=["all", "few", "versions-and-icrc"])
def test_the_columns_quotes_are_the_per_packet_decoders(names: tuple[str, ...], tmp_path: Path) -> None:
    """Field for field (every column and derived field, or a few: the frame's addresses are still there for
    the conversations), the entries equal; and most quotes came from the columns."""
    paths = [REAL, _answered(tmp_path / "clean.pcap", SOURCES)]
    paths += [_answered(tmp_path / f"fuzz{s}.pcap", SOURCES, seed=s) for s in (1, 2)]
    paths.append(_answered(tmp_path / "snapped.pcap", SOURCES, seed=3, snap=True))
    for path in paths:
        fast, n_fast = _entries(path, names, True)
        slow, n_slow = _entries(path, names, False)
        assert n_slow == 0
        assert len(slow) >= 10
        assert set(fast) == set(slow), path.name
        differ = [f for f in slow if fast[f] != slow[f]]
        assert not differ, (path.name, differ[:3], fast[differ[0]], slow[differ[0]])
        assert n_fast >= 0.8 * len(slow), (path.name, n_fast, len(slow))


def test_other_quotes_are_still_read_frame_by_frame(tmp_path: Path) -> None:
    """A quoted TCP segment, an error quoting an error: the per-packet decoder's (none from the columns);
    a RoCEv2 quote beside them: the columns'."""
    def ip4(proto: int, body: bytes) -> bytes:
        return struct.pack(">BBHHHBBHII", 0x45, 0, 20 + len(body), 7, 0, 64, proto, 0, 0x0A000001, 0x0A000002) + body

    udp = struct.pack(">HHHH", 49152, 4791, 8 + 16, 0) + bytes.fromhex("0440ffff000000110000000a") + bytes(4)
    tcp = struct.pack(">HHIIBBHHH", 3333, 4444, 1000, 0, 5 << 4, 2, 8192, 0, 0)
    icmp = struct.pack(">BBHI", 3, 3, 0, 0)
    def ip6(nxt: int, body: bytes) -> bytes:
        return struct.pack(">IHBB", 6 << 28, len(body), nxt, 64) + bytes(15) + b"\x01" + bytes(15) + b"\x02" + body

    frames = [ip4(1, icmp + ip4(6, tcp)), ip4(1, icmp + ip4(1, icmp + ip4(17, udp))), ip4(1, icmp + ip4(17, udp)),
              # (an IPv6 datagram quoted by ICMP, an IPv4 one by ICMPv6: ip.version is the IPv4 header's alone)
              ip4(1, icmp + ip6(17, udp)), ip6(58, struct.pack(">BBHI", 1, 4, 0, 0) + ip4(17, udp)),
              ip6(58, struct.pack(">BBHI", 1, 4, 0, 0) + ip6(17, udp))]
    path = tmp_path / "others.pcap"
    with CaptureWriter(path) as w:
        for i, f in enumerate(frames):
            w.write(bytes(12) + (b"\x86\xdd" if f[0] >> 4 == 6 else b"\x08\x00") + f, (10 + i) * 10**9)
    fast, n_fast = _entries(path, ALL, True)
    slow, _ = _entries(path, ALL, False)
    assert fast == slow and len(fast) == 6
    assert n_fast == 4
    assert [fast[f]["ip.version"] for f in (4, 5, 6)] == [4, 4, [6, 6]]
    assert fast[2]["ip.src"] == ["10.0.0.1", "10.0.0.1", "10.0.0.1"]  # (three IP headers: the per-packet decoder's)


def _tshark(path: Path, *args: str) -> list[str]:
    return tshark("-r", str(path), *args).splitlines()


def _ours(capsys: Any, *args: str) -> list[str]:
    return decode(capsys, *args).splitlines()


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("expr", ["infiniband.bth.opcode == 6", "infiniband.bth.psn > 100 && icmp",
                                  "udp.dstport == 4791 && ip.len < 100", "infiniband.reth.dmalen >= 4096",
                                  "udp.stream == 2"])
def test_a_filter_on_a_quoted_field_as_tshark(expr: str, tmp_path: Path, capsys: Any) -> None:
    """The frames a filter on a quoted field keeps, in summary lines and -T fields, on both paths: tshark's."""
    path = _answered(tmp_path / "clean.pcap", SOURCES)
    want = _tshark(path, "-Y", expr, "-T", "fields", "-e", "frame.number")
    assert len(want) > 4 and any(int(n) % 2 == 0 for n in want)  # (the ICMP errors are the even frames)
    for flag in ([], ["--no-columnar"]):
        assert [line.split()[0] for line in _ours(capsys, "-r", str(path), "-Y", expr, *flag)] == want
        assert _ours(capsys, "-r", str(path), "-Y", expr, "-T", "fields", "-e", "frame.number", *flag) == want


@requires_tshark
@pytest.mark.tshark
def test_the_fields_of_quotes_as_tshark(tmp_path: Path, capsys: Any) -> None:
    """Each occurrence (the frame's, then the quote's) of the fields the benchmark asks, and of the quote's
    BTH and RETH, as tshark gives them, with the conversations' numbers."""
    path = _answered(tmp_path / "clean.pcap", SOURCES)
    names = ("frame.number", "ip.src", "ip.dst", "ip.len", "ip.ttl", "udp.srcport", "udp.length", "udp.stream",
             "infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.bth.psn", "infiniband.reth.va",
             "infiniband.reth.dmalen", "infiniband.aeth.syndrome", "infiniband.deth.srcqp")
    argv = ["-T", "fields", *[a for n in names for a in ("-e", n)]]
    want = _tshark(path, *argv)
    assert len(want) > 1000
    assert _ours(capsys, "-r", str(path), *argv) == want
