"""BSD loopback captures (LINKTYPE_NULL: the address family in the capturing host's byte order,
LINKTYPE_LOOP: in network byte order), as a BSD or macOS host's ``tcpdump -i lo0`` writes them: the
family header, then IPv4 or IPv6 (AF_INET6 numbered 24, 28 or 30 by the BSDs, FreeBSD and Darwin).
Before, every such frame was "link type 0 (not decoded)".  Built from real captures of captures/ (their
Ethernet header replaced by the family), compared with tshark field by field, and their summary lines
with rdmalab's own lines of the Ethernet originals."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest
from tshark_cli import decode as _ours
from tshark_cli import requires_tshark
from tshark_cli import tshark as _tshark

from rdmalab.capture import records
from rdmalab.capture.linktypes import LINKTYPE_LOOP, LINKTYPE_NULL

CAPTURES = Path(__file__).resolve().parents[2] / "captures"
SOURCES = ["rxe_rping.pcap", "rxe_write_bw.pcap", "siw_rping.pcap"]
FIELDS = ["frame.number", "null.family", "frame.protocols", "frame.len", "ip.src", "ipv6.src", "udp.dstport",
          "tcp.srcport", "tcp.stream", "tcp.seq", "infiniband.bth.opcode", "infiniband.bth.psn", "icmpv6.type",
          "iwarp_mpa.ulpdulength"]
V6_FAMILIES = (24, 28, 30)


def _loopback(src: Path, out: Path, linktype: int, order: str, turn: int) -> int:
    """``src``'s Ethernet frames of IPv4 and IPv6 with a loopback header instead (``order``: the family's
    byte order; IPv6 frames take the three numbers in turn, from the ``turn``-th), times as they were (microseconds); the
    number of frames written."""
    n = v6 = 0
    with open(out, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, linktype))
        for rec in records(src):
            ethertype = rec.data[12:14]
            if ethertype not in (b"\x08\x00", b"\x86\xdd"):
                continue
            family = 2 if ethertype == b"\x08\x00" else V6_FAMILIES[(v6 + turn) % 3]
            v6 += family != 2
            data = struct.pack(order + "I", family) + rec.data[14:]
            ns = rec.ns if rec.ns is not None else round(rec.timestamp * 1e9)
            f.write(struct.pack("<IIII", ns // 10**9, ns % 10**9 // 1000, len(data), len(data)) + data)
            n += 1
    return n


@pytest.fixture(scope="module")
def made(tmp_path_factory: Any) -> list[tuple[Path, Path]]:
    d = tmp_path_factory.mktemp("loopback")
    out = []
    for name in SOURCES:
        for turn, (lt, order, tag) in enumerate(((LINKTYPE_NULL, "<", "null_le"), (LINKTYPE_NULL, ">", "null_be"),
                                                 (LINKTYPE_LOOP, ">", "loop"))):
            path = d / f"{tag}_{name}"
            assert _loopback(CAPTURES / name, path, lt, order, turn) > 10
            out.append((CAPTURES / name, path))
    return out


@requires_tshark
@pytest.mark.tshark
def test_fields_as_tshark(made: list[tuple[Path, Path]], capsys: Any) -> None:
    args = ["-T", "fields", *[a for f in FIELDS for a in ("-e", f)]]
    families = set()
    for _src, path in made:
        want = _tshark("-r", str(path), *args)
        assert _ours(capsys, "-r", str(path), *args) == want, path.name
        families |= {line.split("\t")[1] for line in want.splitlines()}
    assert families == {"2", "24", "28", "30"}


def _cells(text: str) -> list[tuple[str, ...]]:
    """Each summary line without its length column: number, time, addresses, protocol, info."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        out.append((*parts[:6], " ".join(parts[7:])))
    return out


def test_summary_lines_are_the_ethernet_originals(made: list[tuple[Path, Path]], capsys: Any) -> None:
    for src, path in made:
        if src.name == "siw_rping.pcap":  # (an ARP frame there is left out of the loopback file)
            continue
        want = _cells(_ours(capsys, "-r", str(src)))
        got = _cells(_ours(capsys, "-r", str(path)))
        assert got == want, path.name
        assert _ours(capsys, "-r", str(path), "--no-columnar") == _ours(capsys, "-r", str(path))


def test_other_families_and_short_records_are_said(tmp_path: Path, capsys: Any) -> None:
    rec = next(iter(records(CAPTURES / "rxe_rping.pcap")))
    path = tmp_path / "odd.pcap"
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, LINKTYPE_NULL))
        for data in (struct.pack("<I", 7) + rec.data[14:], b"\x02\x00"):
            f.write(struct.pack("<IIII", 1, 0, len(data), len(data)) + data)
    out = _ours(capsys, "-r", str(path))
    assert "Null/Loopback family 7 (not decoded)" in out and "Null/Loopback (truncated)" in out
    fields = _ours(capsys, "-r", str(path), "-T", "fields", "-e", "null.family")
    assert fields.splitlines() == ["7", ""]
