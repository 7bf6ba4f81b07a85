"""Reading every supported link type, pcap and pcapng, and damaged files."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import dpkt
import pytest

from rdmalab.capture import CaptureError, read, records, to_json, write_pcap
from rdmalab.capture.linktypes import ERF, SLL, SLL2
from rdmalab.capture.pcapwriter import write_capture
from rdmalab.wire import BTH, RETH, encode_ib, encode_rocev2
from rdmalab.wire.ib import LRH

FRAME = encode_rocev2(BTH(opcode=0x0A, destqp=0x123, psn=7, ackreq=1), [RETH(va=0x1000, r_key=0x42, dma_length=4)],
                      b"abcd")
IP_PART = FRAME[14:]  # IPv4 + UDP + IB


def _pcap(path: Path, linktype: int, frames: list[bytes], nano: bool = False, fmt: str = "pcap") -> Path:
    write_capture(path, [((1000 + i) * 10**9, fr) for i, fr in enumerate(frames)], format=fmt,  # type: ignore[arg-type]
                  linktype=linktype, snaplen=65535, nano=nano)
    return path


def _pcapng(path: Path, linktype: int, frames: list[bytes]) -> Path:
    return _pcap(path, linktype, frames, fmt="pcapng")


def _check_rocev2(path: Path, n: int = 1) -> None:
    cps = list(read(path))
    assert len(cps) == n
    for i, cp in enumerate(cps, 1):
        assert cp.frame_number == i
        assert cp.packet.encap == "rocev2"
        assert cp.packet.crc_status == "good"
        assert cp.packet[BTH].psn == 7
        assert cp.packet[RETH].r_key == 0x42
        assert cp.packet.payload == b"abcd"
        assert cp.timestamp == pytest.approx(1000.0 + i - 1)


def test_ethernet_pcap(tmp_path: Path) -> None:
    _check_rocev2(_pcap(tmp_path / "e.pcap", 1, [FRAME, FRAME]), 2)


def test_ethernet_pcap_nanosecond(tmp_path: Path) -> None:
    _check_rocev2(_pcap(tmp_path / "e.pcap", 1, [FRAME], nano=True))


def test_ethernet_pcapng(tmp_path: Path) -> None:
    _check_rocev2(_pcapng(tmp_path / "e.pcapng", 1, [FRAME, FRAME, FRAME]), 3)


def test_pcapng_two_interfaces_with_different_linktypes(tmp_path: Path) -> None:
    # built with dpkt's pcapng blocks: a writer other than ours (tests/capture/test_pcapwriter.py has ours)
    from dpkt.pcapng import EnhancedPacketBlockLE, InterfaceDescriptionBlockLE, SectionHeaderBlockLE

    buf = bytes(SectionHeaderBlockLE())
    buf += bytes(InterfaceDescriptionBlockLE(linktype=1, snaplen=65535))
    buf += bytes(InterfaceDescriptionBlockLE(linktype=101, snaplen=65535))
    for iface, data in ((0, FRAME), (1, IP_PART)):
        epb = EnhancedPacketBlockLE(iface_id=iface, ts_high=0, ts_low=1000000 * 1000, caplen=len(data),
                                    pkt_len=len(data), pkt_data=data)
        buf += bytes(epb)
    p = tmp_path / "two.pcapng"
    p.write_bytes(buf)
    cps = list(read(p))
    assert [cp.linktype for cp in cps] == [1, 101]
    assert all(cp.packet.crc_status == "good" for cp in cps)
    assert cps[1].interface == 1


@pytest.mark.parametrize("linktype", [101, 12, 14, 228])
def test_raw_ip(tmp_path: Path, linktype: int) -> None:
    _check_rocev2(_pcap(tmp_path / "raw.pcap", linktype, [IP_PART]))


def test_linux_cooked_v1(tmp_path: Path) -> None:
    sll = SLL(pkttype=4, hatype=1, halen=6, addr=0x020000000001 << 16, protocol=0x0800).encode()
    p = _pcap(tmp_path / "sll.pcap", 113, [sll + IP_PART])
    _check_rocev2(p)
    cp = next(read(p))
    assert isinstance(cp.packet.layers[0].header, SLL)
    assert cp.packet[RETH].va == 0x1000


def test_linux_cooked_v2(tmp_path: Path) -> None:
    sll2 = SLL2(protocol=0x0800, ifindex=3, hatype=1, pkttype=0, halen=6, addr=0).encode()
    p = _pcap(tmp_path / "sll2.pcap", 276, [sll2 + IP_PART])
    _check_rocev2(p)
    cp = next(read(p))
    assert cp.packet.layers[0].header.ifindex == 3  # type: ignore[attr-defined]


def _erf_record(payload: bytes, ext: list[bytes] = ()) -> bytes:  # type: ignore[assignment]
    hdr_len = 16 + 8 * len(ext)
    rlen = (hdr_len + len(payload) + 7) // 8 * 8
    erf = ERF(ts=(1000 << 32) | (1 << 31), ext=1 if ext else 0, type=21, flags=4, rlen=rlen, wlen=len(payload))
    body = erf.encode() + b"".join(ext) + payload
    return body + b"\0" * (rlen - len(body))


def test_erf_native_ib(tmp_path: Path) -> None:
    ib = encode_ib(BTH(opcode=0x0A, destqp=0x123, psn=7, ackreq=1), [RETH(va=0x1000, r_key=0x42, dma_length=4)],
                   b"abcd", lrh=LRH(dlid=5, slid=7))
    p = _pcap(tmp_path / "erf.pcap", 197, [_erf_record(ib)])
    cp = next(read(p))
    assert cp.packet.encap == "ib"
    assert isinstance(cp.packet.layers[0].header, ERF)
    assert cp.packet.layers[0].header.timestamp == pytest.approx(1000.5)
    assert cp.packet[LRH].dlid == 5
    assert cp.packet.crc_status == "good" and cp.packet.vcrc_status == "good"
    assert cp.packet.payload == b"abcd"


def test_erf_extension_headers(tmp_path: Path) -> None:
    ib = encode_ib(BTH(opcode=0x04, destqp=9, psn=1), [], b"hello!!!")
    ext = [bytes([0x80 | 5]) + b"\0" * 7, bytes([3]) + b"\1" * 7]  # two extension headers, the first says "more"
    p = _pcap(tmp_path / "erf.pcap", 197, [_erf_record(ib, ext)])
    cp = next(read(p))
    assert [layer.name for layer in cp.packet.layers][:3] == ["ERF", "ERF extension", "ERF extension"]
    assert cp.packet.payload == b"hello!!!"
    assert cp.packet.crc_status == "good"


def test_vector_erf_file(captures_dir: Path) -> None:
    cp = next(read(captures_dir / "synthetic_native_ib_erf.pcap"))
    fields = __import__("json").loads(to_json(cp))
    assert fields["infiniband.invariant.crc"] == 0xC7E1A931
    assert fields["infiniband.variant.crc"] == 0x30CF
    assert fields["rdmalab.icrc.status"] == "good"


def test_write_pcap_round_trip(tmp_path: Path) -> None:
    p = tmp_path / "out.pcap"
    assert write_pcap(p, [FRAME, (5.5, FRAME)]) == 2
    cps = list(read(p))
    assert [cp.timestamp for cp in cps] == pytest.approx([0.0, 5.5])
    assert all(cp.packet.data == FRAME for cp in cps)
    q = tmp_path / "copy.pcap"
    write_pcap(q, cps)
    assert q.read_bytes() == p.read_bytes()


# ----------------------------------------------------------------------------- damaged files


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(CaptureError, match="no such file") as ei:
        list(read(tmp_path / "nope.pcap"))
    assert "nope.pcap" in str(ei.value)


def test_directory(tmp_path: Path) -> None:
    with pytest.raises(CaptureError, match="directory"):
        list(read(tmp_path))


def test_empty_file(tmp_path: Path) -> None:
    p = tmp_path / "empty.pcap"
    p.write_bytes(b"")
    with pytest.raises(CaptureError, match="empty"):
        list(read(p))


@pytest.mark.parametrize("data", [b"hello world, not a capture", b"\x00" * 100, bytes(range(256))])
def test_garbage(tmp_path: Path, data: bytes) -> None:
    p = tmp_path / "garbage.pcap"
    p.write_bytes(data)
    with pytest.raises(CaptureError, match="not a pcap or pcapng file"):
        list(read(p))


def test_truncated_file_header(tmp_path: Path) -> None:
    p = tmp_path / "t.pcap"
    p.write_bytes(_pcap(tmp_path / "full.pcap", 1, [FRAME]).read_bytes()[:10])
    with pytest.raises(CaptureError, match="file header"):
        list(read(p))


@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
@pytest.mark.parametrize("cut", [1, 5, 20])
def test_truncated_mid_record_keeps_earlier_packets(tmp_path: Path, fmt: str, cut: int) -> None:
    full = (_pcap if fmt == "pcap" else _pcapng)(tmp_path / f"full.{fmt}", 1, [FRAME, FRAME, FRAME])
    p = tmp_path / f"cut.{fmt}"
    p.write_bytes(full.read_bytes()[:-cut])
    got = []
    with pytest.raises(CaptureError, match="truncated") as ei:
        for cp in read(p):
            got.append(cp)
    assert len(got) == 2
    assert ei.value.frames_read == 2
    assert str(p) in str(ei.value)


def test_corrupt_record_length(tmp_path: Path) -> None:
    full = _pcap(tmp_path / "full.pcap", 1, [FRAME]).read_bytes()
    bad = full[:24] + full[24:32] + struct.pack("<I", 0x7FFFFFFF) + full[36:]
    p = tmp_path / "bad.pcap"
    p.write_bytes(bad)
    with pytest.raises(CaptureError, match="claims"):
        list(read(p))


def test_bad_frames_do_not_stop_the_run(tmp_path: Path) -> None:
    bad_crc = FRAME[:-1] + bytes([FRAME[-1] ^ 0xFF])
    short = FRAME[:40]
    p = _pcap(tmp_path / "mixed.pcap", 1, [FRAME, bad_crc, short, b"\x01", FRAME])
    cps = list(read(p))
    assert len(cps) == 5
    assert cps[1].packet.crc_status == "bad"
    assert cps[2].packet.problems and cps[3].packet.problems
    assert cps[4].packet.crc_status == "good"
    for cp in cps:
        to_json(cp)  # every frame, bad or not, renders


def test_strict_raises_decode_error(tmp_path: Path) -> None:
    from rdmalab.wire.errors import DecodeError

    p = _pcap(tmp_path / "short.pcap", 1, [FRAME[:40]])
    with pytest.raises(DecodeError):
        list(read(p, lenient=False))


def test_records_stream_one_at_a_time(tmp_path: Path) -> None:
    p = _pcap(tmp_path / "many.pcap", 1, [FRAME] * 50)
    it = records(p)
    first = next(it)
    assert first.frame_number == 1 and first.data == FRAME and first.wire_length == len(FRAME)
    assert sum(1 for _ in it) == 49


def test_unknown_linktype_is_reported_not_fatal(tmp_path: Path) -> None:
    p = _pcap(tmp_path / "odd.pcap", 147, [b"\x00" * 20])
    cp = next(read(p))
    assert "link type 147" in cp.packet.summary()


def test_write_pcap_to_file_object_compat() -> None:
    # a reader nobody here wrote (dpkt's) reads what write_pcap wrote into a file object
    buf = io.BytesIO()
    assert write_pcap(buf, [(1.25, FRAME)]) == 1
    assert not buf.closed
    buf.seek(0)
    assert [(ts, bytes(d)) for ts, d in dpkt.pcap.Reader(buf)] == [(1.25, FRAME)]
