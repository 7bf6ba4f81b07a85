"""The one record walker (rdmalab.capture.pcapio) and the ICRC fast path of the columnar decoder.

* The per-packet reader and the columnar decoder see the same records of every capture, in pcap
  and in pcapng, and a damaged file stops both at the same frame with an error that names the
  frame and the byte offset, after every record before the damage.
* The ICRC check of the columnar decoder masks exactly the bytes the reference
  (rdmalab.wire.crc) masks, byte for byte, on every RoCE packet of the real captures.
"""

from __future__ import annotations

import glob
import os
import struct
import zlib
from pathlib import Path

import dpkt
import numpy as np
import pytest

from rdmalab.capture import CaptureError, columnar_decode, read, records
from rdmalab.capture.columnar import iter_columns, record_blocks
from rdmalab.capture.pcapwriter import CaptureWriter
from rdmalab.wire import crc

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = sorted(glob.glob(str(ROOT / "captures" / "*.pcap")))


def _to_pcapng(src: str, dst: Path) -> Path:
    """The same records as a pcapng file (one interface per link type, nanosecond times and wire
    lengths kept), by rdmalab's writer."""
    ifaces: dict[int, int] = {}
    with CaptureWriter(dst, format="pcapng", linktype=None) as w:
        for blk in record_blocks(src):
            for off, cap, wire, t, lt in zip(blk.offset.tolist(), blk.caplen.tolist(), blk.wirelen.tolist(),
                                             blk.ts_ns.tolist(), blk.linktype.tolist(), strict=True):
                if lt not in ifaces:
                    ifaces[lt] = w.add_interface(lt, snaplen=0)
                w.write(bytes(blk.buf[off:off + cap]), t, wire_len=wire, interface=ifaces[lt])
    return dst


def _walk_columnar(path: str | Path) -> list[tuple[int, float, bytes, int]]:
    out = []
    for blk in record_blocks(path, block_bytes=4096):  # small blocks: records straddle block boundaries
        for i, (off, cap) in enumerate(zip(blk.offset.tolist(), blk.caplen.tolist(), strict=True)):
            out.append((blk.first + i, float(blk.seconds()[i]), bytes(blk.buf[off:off + cap]), int(blk.wirelen[i])))
    return out


@pytest.mark.parametrize("path", CAPTURES, ids=os.path.basename)
def test_both_decoders_see_the_same_records(path: str, tmp_path: Path) -> None:
    want = [(r.frame_number, r.timestamp, r.data, r.wire_length) for r in records(path)]
    # an oracle nobody here wrote: dpkt's own reader gives the same bytes and wire lengths
    if Path(path).read_bytes()[:4] in (b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1"):
        with open(path, "rb") as f:
            theirs = [(bytes(buf), ln) for (_, buf), ln in zip(dpkt.pcap.Reader(f), _wire_lengths(path), strict=True)]
        assert [(d, w) for _, _, d, w in want] == theirs
    assert _walk_columnar(path) == want
    ng = _to_pcapng(path, tmp_path / "x.pcapng")
    got = [(r.frame_number, r.data, r.wire_length) for r in records(ng)]
    assert got == [(n, d, w) for n, _, d, w in want]
    assert [(n, d, w) for n, _, d, w in _walk_columnar(ng)] == got
    assert [t for b in record_blocks(ng) for t in b.ts_ns.tolist()] == \
        [t for b in record_blocks(path) for t in b.ts_ns.tolist()]


def _wire_lengths(path: str) -> list[int]:
    data = Path(path).read_bytes()
    order = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    pos, out = 24, []
    while pos < len(data):
        _s, _f, cap, wire = struct.unpack_from(order + "IIII", data, pos)
        out.append(wire)
        pos += 16 + cap
    return out


def _cut_points(path: Path) -> list[int]:
    """Byte counts that end the file inside the last record: in its header and in its data."""
    size = path.stat().st_size
    last = list(records(path))[-1]
    start = size - len(last.data) - (16 if path.suffix == ".pcap" else 32)
    return [start + 1, start + 8, start + 15, size - len(last.data) + 1, size - 4, size - 1]


@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_a_file_that_ends_mid_record(fmt: str, tmp_path: Path) -> None:
    src = ROOT / "captures" / "rxe_send_bw.pcap"
    full = src if fmt == "pcap" else _to_pcapng(str(src), tmp_path / "full.pcapng")
    n = sum(1 for _ in records(full))
    raw = full.read_bytes()
    for cut in _cut_points(full):
        p = tmp_path / f"cut{cut}.{fmt}"
        p.write_bytes(raw[:cut])
        got = []
        with pytest.raises(CaptureError, match="truncated") as ei:
            got.extend(read(p))
        assert len(got) == n - 1 and ei.value.frames_read == n - 1
        assert ei.value.offset is not None and f"byte {ei.value.offset}" in str(ei.value)
        assert str(p) in str(ei.value) and (f"record {n}" in str(ei.value) or f"after frame {n - 1}" in str(ei.value))
        cols = []
        with pytest.raises(CaptureError) as ec:
            cols.extend(iter_columns(p, block_bytes=4096, fields=["frame.number"]))
        assert str(ec.value) == str(ei.value)  # one walker: the same error
        assert sum(c.n for c in cols) == n - 1


def test_a_record_that_claims_too_much_keeps_the_records_before(tmp_path: Path) -> None:
    src = (ROOT / "captures" / "rxe_send_bw.pcap").read_bytes()
    pos = 24
    for _ in range(5):  # the sixth record's caplen becomes absurd
        pos += 16 + struct.unpack_from("<I", src, pos + 8)[0]
    bad = src[:pos + 8] + struct.pack("<I", 0x7FFFFFF0) + src[pos + 12:]
    p = tmp_path / "bad.pcap"
    p.write_bytes(bad)
    got = []
    with pytest.raises(CaptureError, match=f"record 6 at byte {pos} claims") as ei:
        got.extend(read(p))
    assert len(got) == 5 and ei.value.frames_read == 5 and ei.value.offset == pos


def test_pcapng_packet_block_longer_than_its_block(tmp_path: Path) -> None:
    ng = _to_pcapng(str(ROOT / "captures" / "rxe_send_bw.pcap"), tmp_path / "x.pcapng")
    raw = bytearray(ng.read_bytes())
    # the first enhanced packet block: claim more captured bytes than the block holds
    pos = 0
    while struct.unpack_from("<I", raw, pos)[0] != 6:
        pos += struct.unpack_from("<I", raw, pos + 4)[0]
    struct.pack_into("<I", raw, pos + 20, 5000)
    p = tmp_path / "bad.pcapng"
    p.write_bytes(bytes(raw))
    for walk in (lambda: list(read(p)), lambda: list(iter_columns(p))):
        with pytest.raises(CaptureError, match=f"frame 1 at byte {pos} claims 5000 captured bytes"):
            walk()


@pytest.mark.parametrize("path", [p for p in CAPTURES if "rxe" in p or "rocev" in p or "public" in p],
                         ids=os.path.basename)
def test_icrc_fast_path_masks_the_bytes_the_reference_masks(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The columnar ICRC check hands the CRC each masked packet: it must be rdmalab.wire.crc's masked
    packet, byte for byte."""
    calls: list[bytes] = []

    def recording_crc32(data: bytes | memoryview, state: int = 0) -> int:
        assert state == crc.ICRC_SEED
        calls.append(bytes(data))
        return zlib.crc32(data, state)

    monkeypatch.setattr(columnar_decode, "_crc32", recording_crc32)
    cols = next(iter(iter_columns(path)), None)
    assert cols is not None
    want = []
    for cp in read(path):
        pkt = cp.packet
        if pkt.encap not in ("rocev2", "rocev1") or pkt.crc_offset is None or pkt.problems:
            continue
        start = next(la.offset for la in pkt.layers if la.name in ("IPv4", "IPv6", "GRH"))
        body = pkt.data[start:pkt.crc_offset]
        masked = crc.icrc_masked_rocev2(body) if pkt.encap == "rocev2" else crc.icrc_masked_rocev1(body)
        # the reference's own CRC over these bytes is its ICRC
        ref = crc.icrc_rocev2(body) if pkt.encap == "rocev2" else crc.icrc_rocev1(body)
        assert zlib.crc32(masked, crc.ICRC_SEED) == ref
        want.append(masked)
    assert want, "no RoCE packet in the capture"
    assert calls == want
    assert np.count_nonzero(cols.data["rdmalab.icrc.ok"] == 1) == sum(
        1 for cp in read(path) if cp.packet.crc_status == "good")


@pytest.mark.parametrize("extra", [0, 1 << 26 | 2 << 28, 0x03FF0000])
def test_the_link_type_is_the_low_16_bits_of_its_word(tmp_path: Path, extra: int) -> None:
    """pcap-savefile(5): the header's last word holds the link type in its low 16 bits; above them
    an FCS length (bit 26 says it is there, bits 28-31 count 16-bit units) and reserved bits that
    readers ignore.  Frames that carry their FCS (4 octets) in a file that says so are Ethernet
    frames: the same packets as without it, on both paths and in worker processes."""
    from rdmalab.capture.columnar_summary import summary_bytes

    data = (ROOT / "captures" / "rxe_send_bw.pcap").read_bytes()
    head = bytearray(data[:24])
    struct.pack_into("<I", head, 20, struct.unpack_from("<I", head, 20)[0] | extra)
    out, pos = bytearray(head), 24
    while pos < len(data):
        sec, frac, cap, wire = struct.unpack_from("<IIII", data, pos)
        frame = data[pos + 16:pos + 16 + cap]
        fcs = struct.pack("<I", zlib.crc32(frame)) if extra & (1 << 26) else b""
        out += struct.pack("<IIII", sec, frac, cap + len(fcs), wire + len(fcs)) + frame + fcs
        pos += 16 + cap
    path = tmp_path / "lt.pcap"
    path.write_bytes(bytes(out))
    got = [(cp.packet.encap, cp.packet.ok, cp.packet.info) for cp in read(path)]
    want = [(cp.packet.encap, cp.packet.ok, cp.packet.info) for cp in read(ROOT / "captures" / "rxe_send_bw.pcap")]
    assert got == want and {"rocev2", "tcp"} <= {e for e, _ok, _i in got}
    one = b"".join(summary_bytes(path))
    assert b"link type" not in one
    assert b"".join(summary_bytes(path, workers=2, parallel_min_bytes=0, block_bytes=512)) == one
