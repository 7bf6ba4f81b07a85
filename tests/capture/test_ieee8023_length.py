"""Ethernet frames whose type/length field is a length (IEEE 802.3 3.2.6: up to 1500, the octets of an
LLC PDU; a switch's spanning tree BPDUs, CDP ...), or neither a length nor a type (1501 to 1535).

tshark shows such a field as ``eth.len`` (``vlan.len`` after a tag), never ``eth.type``; the LLC PDU
ends where the length says, and what follows is padding or a trailer; a length past the frame's end
is an error.  Between 1501 and 1535 it shows no field.  rdmalab took every such field for an
EtherType: ``crosscheck`` reported each BPDU's ``eth.type`` as an unexplained difference."""

from __future__ import annotations

import random
import struct
from pathlib import Path
from typing import Any

import pytest
from tshark_cli import decode, requires_tshark, tshark

from rdmalab.capture.crosscheck import crosscheck
from rdmalab.capture.pcapwriter import write_capture

_BPDU_DST = bytes.fromhex("0180c2000000")


def _frames(seed: int, n: int) -> list[bytes]:
    """Frames with a length or a bad type after the addresses, behind an 802.1Q tag or an 802.1ad and an
    802.1Q tag or none: LLC PDUs as long as said, shorter (padding, a trailer) and longer than the frame."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        tags = rng.choice([b"", b"", struct.pack(">HH", 0x8100, rng.randrange(1 << 16)),
                           struct.pack(">HHHH", 0x88A8, rng.randrange(1 << 16), 0x8100, rng.randrange(1 << 16)),
                           struct.pack(">HH", 0x88A8, rng.randrange(1 << 16))])
        pdu = bytes([rng.choice([0x42, 0xAA, 0xE0, 0x06]), rng.choice([0x42, 0xAA, 0xE0]), rng.choice([3, 0x13, 0xF4])])
        pdu += rng.randbytes(rng.choice([0, 5, 35, 43, 60, 200]))
        kind = rng.random()
        if kind < 0.6:
            length = len(pdu)
        elif kind < 0.75:
            length = rng.randrange(len(pdu) + 1)
        elif kind < 0.85:
            length = rng.randrange(len(pdu) + 1, 1501)
        else:
            length = rng.choice([0, 1501, 1535, rng.randrange(1501, 1536), 1536])
        tail = rng.choice([b"", bytes(rng.randrange(1, 50)), rng.randbytes(rng.randrange(1, 12))])
        src = rng.randbytes(6)
        out.append(rng.choice([_BPDU_DST, rng.randbytes(6)]) + src + tags + struct.pack(">H", length) + pdu + tail)
    return out


def _capture(path: Path, frames: list[bytes]) -> Path:
    write_capture(path, [(1_700_000_000_000_000_000 + i * 1_000_000, f) for i, f in enumerate(frames)])
    return path


_FIELDS = ["frame.number", "eth.dst", "eth.src", "eth.type", "eth.len", "vlan.id", "vlan.etype", "vlan.len",
           "ieee8021ad.id", "ieee8021ah.etype", "eth.invalid_lentype", "eth.padding", "eth.trailer",
           "vlan.trailer"]


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("seed", [1, 2])
def test_fields_as_tshark_has_them(seed: int, tmp_path: Path, capsys: Any) -> None:
    path = _capture(tmp_path / "lengths.pcap", _frames(seed, 300))
    args = [a for name in _FIELDS for a in ("-e", name)]
    want = tshark("-r", str(path), "-T", "fields", *args)
    assert decode(capsys, "-r", str(path), "-T", "fields", *args) == want
    assert decode(capsys, "--no-columnar", "-r", str(path), "-T", "fields", *args) == want
    # a filter on the type or the length keeps the frames tshark keeps
    for flt in ("eth.type", "eth.len", "vlan.len", "eth.len > 40", "eth.type == 0x0600"):
        want = tshark("-r", str(path), "-Y", flt, "-T", "fields", "-e", "frame.number")
        assert decode(capsys, "-r", str(path), "-Y", flt, "-T", "fields", "-e", "frame.number") == want, flt


@requires_tshark
@pytest.mark.tshark
def test_protocols_stop_where_tshark_goes_on(tmp_path: Path, capsys: Any) -> None:
    """``frame.protocols``: no ``ethertype`` step after a length or a bad type (tshark's "eth:llc:stp",
    "eth:data"); rdmalab reads no LLC, so its chain is tshark's cut there."""
    path = _capture(tmp_path / "lengths.pcap", _frames(3, 200))
    ours = decode(capsys, "-r", str(path), "-T", "fields", "-e", "frame.protocols").splitlines()
    theirs = tshark("-r", str(path), "-T", "fields", "-e", "frame.protocols").splitlines()
    assert len(ours) == len(theirs) == 200
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert (b + ":").startswith(a + ":"), (i + 1, a, b)
    assert sum(a in ("eth", "eth:ethertype:vlan", "eth:ethertype:ieee8021ad:ethertype:vlan") for a in ours) > 120


@requires_tshark
@pytest.mark.tshark
def test_crosscheck_finds_no_difference(tmp_path: Path) -> None:
    report = crosscheck(_capture(tmp_path / "lengths.pcap", _frames(4, 200)))
    assert report.packets == report.wireshark_packets == 200
    assert not report.results, report.text()
    assert report.per_key["eth.len"] > 50 and report.per_key["vlan.len"] > 10


@pytest.mark.parametrize("args", [[], ["-V"], ["-T", "json"], ["-x"],
                                  ["-T", "fields", "-e", "frame.number", "-e", "eth.type", "-e", "eth.src",
                                   "-e", "frame.protocols"],
                                  ["-Y", "eth.type"], ["-Y", "eth.type < 0x0600"]])
def test_the_columns_agree_with_the_decoder(args: list[str], tmp_path: Path, capsys: Any) -> None:
    # (first a frame of an EtherType the columns write, then frames of its shape whose field is a length:
    # 0 after an 802.1Q tag, a length there, was written from the columns as a type)
    tag = struct.pack(">HH", 0x8100, 7)
    ends = bytes(range(12))
    shaped = [ends + tag + struct.pack(">H", 0x8809) + bytes(46), ends + tag + struct.pack(">H", 0) + bytes(47),
              ends + tag + struct.pack(">H", 20) + bytes(47), ends + struct.pack(">H", 0) + bytes(50)]
    path = _capture(tmp_path / "lengths.pcap", shaped + _frames(5, 400))
    assert decode(capsys, *args, "-r", str(path)) == decode(capsys, "--no-columnar", *args, "-r", str(path))


def test_the_length_bounds_the_pdu(tmp_path: Path, capsys: Any) -> None:
    """A BPDU of 38 octets in a 60-octet frame: 8 octets of padding; a length past the frame's end: an error
    that says how much the frame holds."""
    bpdu = bytes([0x42, 0x42, 0x03]) + bytes(35)
    frames = [_BPDU_DST + bytes(range(6)) + struct.pack(">H", 38) + bpdu + bytes(8),
              _BPDU_DST + bytes(range(6)) + struct.pack(">H", 100) + bpdu + bytes(8)]
    tree = decode(capsys, "-V", "-r", str(_capture(tmp_path / "bpdu.pcap", frames)))
    assert "length: 38  {eth.len}  @ bytes 12-13" in tree
    assert "Payload: 38 bytes @ bytes 14-51" in tree
    assert "Ethernet padding: 8 byte(s) @ bytes 52-59  {eth.padding}" in tree
    assert "malformed Ethernet.length at byte 12: got 100 (0x64), expected at most the 46 bytes the frame holds" in tree
    assert "ethertype" not in tree
