"""pcapng custom blocks (block types 0x00000BAD, copyable, and 0x40000BAD, not: pcapng 4.8).  tshark 4.0
counts each as a frame (pcapng.c reads it as a record: frame.protocols ``data``, its custom data as
``data.data``, ``frame.cb_pen`` and ``frame.cb_copy``, a line "PCAPNG ... Custom Block: PEN = ... (32473),
will be copied" without a time or addresses); rdmalab reads no record from one, so the frames after it
are numbered one less than tshark numbers them.  Here: that difference, measured (if tshark's count
changes, this test says so); that every output of rdmalab reads the packets around the blocks on both
paths, and in worker processes, with tshark's fields; and that crosscheck pairs the packets as they are
(before, frame 2 was tshark's custom block against rdmalab's second packet: every field unexplained)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest
from tshark_cli import decode, requires_tshark, tshark

from rdmalab.capture.crosscheck import crosscheck
from rdmalab.capture.fieldtext import field_text

FIELDS = ("ip.src", "udp.srcport", "udp.dstport", "udp.length", "udp.stream", "frame.len")


def _block(btype: int, body: bytes) -> bytes:
    body += b"\0" * (-len(body) % 4)
    return struct.pack("<II", btype, len(body) + 12) + body + struct.pack("<I", len(body) + 12)


def _capture(path: Path) -> Path:
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    parts = [_block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1)), _block(1, struct.pack("<HHI", 1, 0, 65535))]
    for i in range(5):
        frame = bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP(src="10.0.0.1", dst="10.0.0.2")
                      / UDP(sport=40000 + i, dport=40100) / b"abc")
        t = (1_700_000_000 + i) * 1_000_000
        parts.append(_block(6, struct.pack("<IIIII", 0, t >> 32, t & 0xFFFFFFFF, len(frame), len(frame)) + frame))
        if i in (1, 3):  # a custom block of each kind, 32473 (RFC 5612's PEN for documentation), after packets 2 and 4
            parts.append(_block(0x0BAD if i == 1 else 0x40000BAD, struct.pack("<I", 32473) + b"custom data"))
    path.write_bytes(b"".join(parts))
    return path


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("path_args", [[], ["--no-columnar"]])
def test_the_packets_around_custom_blocks(path_args: list[str], tmp_path: Path, capsys: Any) -> None:
    path = str(_capture(tmp_path / "custom.pcapng"))
    numbered = tshark("-r", path, "-T", "fields", "-e", "frame.number", "-e", "frame.protocols", "-e", "frame.cb_pen")
    assert [line.split("\t") for line in numbered.splitlines()] == [
        ["1", "eth:ethertype:ip:udp:data", ""], ["2", "eth:ethertype:ip:udp:data", ""], ["3", "data", "32473"],
        ["4", "eth:ethertype:ip:udp:data", ""], ["5", "eth:ethertype:ip:udp:data", ""], ["6", "data", "32473"],
        ["7", "eth:ethertype:ip:udp:data", ""]]  # (tshark's count: the difference named in docs/captures.md)
    fields = ["-T", "fields", *(a for f in FIELDS for a in ("-e", f))]
    want = tshark("-r", path, "-Y", "!frame.cb_pen", *fields)  # tshark's packets, its custom blocks left out
    assert decode(capsys, *path_args, "-r", path, *fields) == want
    assert decode(capsys, *path_args, "-r", path, "-T", "fields", "-e", "frame.number") == "1\n2\n3\n4\n5\n"
    assert decode(capsys, *path_args, "-r", path, "-Y", "udp.srcport == 40004", "-T", "fields", "-e",
                  "udp.srcport") == "40004\n"
    lines = decode(capsys, *path_args, "-r", path)
    assert len(lines.splitlines()) == 5
    assert decode(capsys, *path_args, "-r", path, "-c", "3", "-T", "fields", "-e", "udp.srcport") == "40000\n40001\n40002\n"
    for mode in (["-V"], ["-T", "json"]):
        assert decode(capsys, *path_args, "-r", path, *mode)
    # in worker processes (the bulk walker, blockpool._walk_ng), as in one
    got = b"".join(field_text(path, list(FIELDS), workers=2, parallel_min_bytes=0)).decode()
    assert got == want


@requires_tshark
@pytest.mark.tshark
def test_crosscheck_pairs_the_packets(tmp_path: Path) -> None:
    report = crosscheck(_capture(tmp_path / "custom.pcapng"))
    assert report.packets == report.wireshark_packets == 5
    assert not report.unexplained and report.agreements
