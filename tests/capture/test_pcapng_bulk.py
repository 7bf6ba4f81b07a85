"""pcapng walked in bulk (rdmalab.capture.pcapio, the one walker) gives what a block-by-block
walker (pcapng_reference.reference_blocks, the package's walker before the bulk one) gives: the same records, times, link types and interfaces
in the same blocks, and on a damaged file the same records before the damage and the same error
(message, byte offset, frames read).  Files: every capture of captures/ as pcapng, and pcapng
files made here block by block (several interfaces with microsecond, nanosecond, binary and
picosecond resolutions and time offsets, simple and obsolete packet blocks, blocks of other types,
a second section, a big-endian section), whole, cut at every few bytes, and with one length,
interface or byte-order magic damaged.
"""

from __future__ import annotations

import glob
import gzip
import os
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pcapng_reference import reference_blocks
from test_pcapio import _to_pcapng  # the same conversion the walker's own tests use

from rdmalab.capture import pcapio
from rdmalab.capture.pcapio import CaptureError, RecordBlock, open_capture

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = sorted(glob.glob(str(ROOT / "captures" / "*.pcap")))
KEYS = ("offset", "caplen", "wirelen", "ts_ns", "linktype", "ts", "interface")


def _walk(fn: Callable[..., Iterator[RecordBlock]], path: Path, block_bytes: int) -> tuple[list[Any], Any]:
    """Every block the walker yields (as plain values), and the error it ends with (None: none)."""
    out: list[Any] = []
    err = None
    with open_capture(path) as f:
        try:
            for b in fn(str(path), f, f.read(24), block_bytes):
                out.append((b.first, b.file_pos, bytes(b.buf),
                            *((getattr(b, k).dtype.str, getattr(b, k).tolist()) for k in KEYS)))
        except CaptureError as e:
            err = (str(e), e.offset, e.frames_read)
    return out, err


def _same(path: Path, sizes: tuple[int, ...] = (4096, 1 << 20)) -> tuple[list[Any], Any]:
    for bb in sizes:
        want = _walk(reference_blocks, path, bb)
        got = _walk(pcapio._pcapng_blocks, path, bb)
        assert got == want, (path, bb)
    return want


# ---------------------------------------------------------------------------- pcapng by hand

def _block(order: str, btype: int, body: bytes) -> bytes:
    body += b"\0" * (-len(body) % 4)
    n = len(body) + 12
    return struct.pack(order + "II", btype, n) + body + struct.pack(order + "I", n)


def _shb(order: str) -> bytes:
    return _block(order, 0x0A0D0D0A, struct.pack(order + "IHHq", 0x1A2B3C4D, 1, 0, -1))


def _idb(order: str, lt: int, tsresol: int | None = None, tsoff: int | None = None) -> bytes:
    opts = b""
    if tsresol is not None:
        opts += struct.pack(order + "HH", 9, 1) + bytes([tsresol, 0, 0, 0])
    if tsoff is not None:
        opts += struct.pack(order + "HHq", 14, 8, tsoff)
    if opts:
        opts += struct.pack(order + "HH", 0, 0)
    return _block(order, 1, struct.pack(order + "HHI", lt, 0, 0) + opts)


def _epb(order: str, iface: int, t: int, data: bytes, wire: int | None = None) -> bytes:
    return _block(order, 6, struct.pack(order + "IIIII", iface, t >> 32, t & 0xFFFFFFFF, len(data),
                                        len(data) if wire is None else wire) + data)


def _frames(k: int) -> Iterator[bytes]:
    for i in range(k):
        yield bytes((i * 7 + j) & 255 for j in range(14 + (i * 13) % 90))


def _handmade(order: str = "<") -> bytes:
    parts = [_shb(order), _idb(order, 1), _idb(order, 1, 9, 1_700_000_000), _idb(order, 101, 0x80 | 20),
             _idb(order, 1, 12, -5)]
    t_of = [1_700_000_000_123_456, 123_456_789, (1_700_000_000 << 20) + 12345, 1_700_000_000_123_456_789_012 % (1 << 64)]
    for i, fr in enumerate(_frames(40)):
        iface = i % 4
        parts.append(_epb(order, iface, t_of[iface] + i * 1000, fr, len(fr) + (i % 3)))
        if i == 10:
            parts.append(_block(order, 3, struct.pack(order + "I", len(fr) + 4) + fr))  # simple packet block
        if i == 15:
            parts.append(_block(order, 2, struct.pack(order + "HHIIII", 1, 0, 0, 77, len(fr), len(fr)) + fr))
        if i == 20:
            parts.append(_block(order, 0x0BAD, b"something else"))  # skipped
    parts += [_shb(order), _idb(order, 1, 6)]  # a second section: its own interfaces
    parts += [_epb(order, 0, 1_800_000_000_000_000 + i, fr) for i, fr in enumerate(_frames(5))]
    return b"".join(parts)


@pytest.mark.parametrize("path", CAPTURES, ids=os.path.basename)
def test_every_capture_as_pcapng(path: str, tmp_path: Path) -> None:
    blocks, err = _same(_to_pcapng(path, tmp_path / "x.pcapng"), (4096, 64 << 10, 16 << 20))
    assert err is None and blocks


def test_the_projects_pcapng_capture() -> None:
    blocks, err = _same(ROOT / "captures" / "siw_write_bw_midstream.pcap")
    assert err is None and sum(len(b[3][1]) for b in blocks) == 199


@pytest.mark.parametrize("order", ["<", ">"])
def test_handmade_sections_interfaces_and_resolutions(order: str, tmp_path: Path) -> None:
    p = tmp_path / "h.pcapng"
    p.write_bytes(_handmade(order))
    blocks, err = _same(p, (64, 4096, 1 << 20))
    assert err is None
    assert sum(len(b[3][1]) for b in blocks) == 40 + 2 + 5
    assert {lt for b in blocks for lt in b[7][1]} == {1, 101}


def test_a_file_cut_anywhere(tmp_path: Path) -> None:
    raw = _handmade()
    errors = 0
    for cut in range(24, len(raw), 7):
        p = tmp_path / "cut.pcapng"
        p.write_bytes(raw[:cut])
        _blocks, err = _same(p, (256,))
        errors += err is not None
    assert errors > 100


@pytest.mark.parametrize("what", ["length", "short_epb", "caplen", "iface", "bom", "idb", "trailing"])
def test_damage_stops_both_at_the_same_place(what: str, tmp_path: Path) -> None:
    raw = bytearray(_handmade())
    pos, seen = 0, 0
    while True:  # the 13th enhanced packet block (or the 4th interface block)
        btype, blen = struct.unpack_from("<II", raw, pos)
        if (btype == 6 and what != "idb" and seen == 12) or (btype == 1 and what == "idb" and seen == 3):
            break
        seen += btype == (1 if what == "idb" else 6)
        pos += blen
    if what == "length":
        struct.pack_into("<I", raw, pos + 4, 0x7FFFFFF0)
    elif what == "short_epb":  # (its length at both ends: a block too short for an EPB, not one that disagrees)
        struct.pack_into("<I", raw, pos + 4, 28)
        struct.pack_into("<I", raw, pos + 24, 28)
    elif what == "caplen":
        struct.pack_into("<I", raw, pos + 20, 5000)
    elif what == "iface":
        struct.pack_into("<I", raw, pos + 8, 9)
    elif what == "idb":
        struct.pack_into("<I", raw, pos + 4, 16)
        struct.pack_into("<I", raw, pos + 12, 16)
    elif what == "trailing":  # (its length again at its end, as tshark checks it: "total block lengths don't match")
        blen = struct.unpack_from("<I", raw, pos + 4)[0]
        struct.pack_into("<I", raw, pos + blen - 4, blen + 4)
    else:  # the second section's byte-order magic
        pos = raw.index(b"\x0a\x0d\x0d\x0a", 8)
        raw[pos + 8:pos + 12] = b"\1\2\3\4"
    p = tmp_path / "bad.pcapng"
    p.write_bytes(bytes(raw))
    blocks, err = _same(p, (64, 4096, 1 << 20))
    assert err is not None and err[1] == pos, err
    assert sum(len(b[3][1]) for b in blocks) == err[2]


def test_record_blocks_walks_a_compressed_pcapng_in_bulk_too(tmp_path: Path) -> None:
    src = tmp_path / "x.pcapng"
    _to_pcapng(str(ROOT / "captures" / "rxe_send_bw.pcap"), src)
    gz = tmp_path / "x.pcapng.gz"
    gz.write_bytes(gzip.compress(src.read_bytes()))
    want, err = _walk(reference_blocks, src, 1 << 20)
    assert err is None and want
    got = list(pcapio.record_blocks(gz))
    assert sum(len(b.offset) for b in got) == sum(len(b[3][1]) for b in want)
    assert [t for b in got for t in b.ts_ns.tolist()] == [t for b in want for t in b[6][1]]
    with pytest.raises(CaptureError, match="no such file"):
        list(pcapio.record_blocks(tmp_path / "missing.pcapng"))


@pytest.mark.parametrize("block_bytes", [64, 4096, 1 << 20])
def test_blocks_inside_a_frames_data_are_not_records(block_bytes: int, tmp_path: Path) -> None:
    """A frame whose data holds whole enhanced packet blocks (a pcapng file copied over the network
    and captured) at 4-octet boundaries: the walker follows the lengths from block to block and
    steps over them, as the block-by-block walker does; the blocks in the data are not records."""
    inner = b"".join(_epb("<", 0, 1000 + i, fr) for i, fr in enumerate(_frames(6)))
    parts = [_shb("<"), _idb("<", 1)]
    for i, fr in enumerate(_frames(30)):
        data = fr[:12] + inner if i % 3 == 0 else fr  # 12 octets, then the blocks (the EPB header is 28)
        parts.append(_epb("<", 0, 5000 + i, data))
    # one whose data ends in half an EPB: a candidate that runs past the file's end
    parts.append(_epb("<", 0, 9000, b"\0" * 12 + inner[:40]))
    parts += [_epb("<", 0, 9001 + i, fr) for i, fr in enumerate(_frames(3))]
    p = tmp_path / "nested.pcapng"
    p.write_bytes(b"".join(parts))
    blocks, err = _same(p, (block_bytes,))
    assert err is None
    assert sum(len(b[3][1]) for b in blocks) == 30 + 1 + 3
