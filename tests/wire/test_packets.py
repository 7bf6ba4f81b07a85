"""Whole packets on every encapsulation: encode, decode, ICRC, bad input."""

from __future__ import annotations

from pathlib import Path

import dpkt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rdmalab.capture.pcapwriter import write_capture
from rdmalab.wire import crc, ib
from rdmalab.wire.errors import DecodeError, EncodeError, MalformedError, TruncatedError
from rdmalab.wire.frame import decode_ethernet, decode_ib, decode_ip, encode_rocev1, encode_rocev2
from rdmalab.wire.header import Header
from rdmalab.wire.opcodes import OPCODES, Op, Pos, Transport, find_opcode
from rdmalab.wire.packet import encode_ib, encode_transport

CAPTURES = Path(__file__).resolve().parents[2] / "captures"


def frames(name: str) -> list[bytes]:
    with open(CAPTURES / name, "rb") as f:
        return [bytes(buf) for _, buf in dpkt.pcap.Reader(f)]


def sample_headers(code: int, draw: st.DrawFn | None = None) -> list[Header]:
    out: list[Header] = []
    for cls in OPCODES[code].headers:
        if draw is None:
            out.append(cls())
        else:
            vals = {f.name: draw(st.integers(0, f.mask)) for f in cls.LAYOUT.fields}
            if cls is ib.AETH:
                vals["type"] = draw(st.sampled_from([0, 1, 3]))  # 2 is reserved: decoding flags it
            out.append(cls(**vals))
    return out


# ---------------------------------------------------------------- known answers


def test_public_hardware_icrcs() -> None:
    """Four packets from real hardware (ConnectX-4 Lx, ConnectX, a Soft-RoCE host): ICRC good."""
    pkts = [decode_ethernet(f) for f in frames("public_hw_byte_vectors.pcap")]
    assert [p.encap for p in pkts] == ["rocev2", "rocev1", "rocev1", "rocev2"]
    assert [p.crc.to_bytes(4, "little").hex() for p in pkts if p.crc is not None] == [
        "82fd002a", "e3d856bb", "25f0c038", "08c6154a"]
    assert all(p.crc_status == "good" for p in pkts)
    cnp = pkts[0]
    assert cnp.bth is not None and cnp.bth.opcode == 0x81 and cnp.bth.becn == 1
    write = pkts[1]
    assert write[ib.RETH].dma_length == 5 and write.payload_length == 5 and write.pad == 3


def test_rxe_icrc_seed() -> None:
    # rxe_icrc.c seeds crc32_le with 0xdebb20e3: the CRC state after eight 0xFF bytes.
    import zlib

    assert zlib.crc32(b"\xff" * 8) ^ 0xFFFFFFFF == 0xDEBB20E3


def test_synthetic_vectors_decode_with_good_icrc() -> None:
    pkts = [decode_ethernet(f) for f in frames("synthetic_rocev2.pcap")]
    assert len(pkts) == 20
    assert all(p.crc_status == "good" and not p.problems for p in pkts)
    ops = [p.bth.opcode for p in pkts if p.bth]
    assert ops == [0x04, 0x0A, 0x0B, 0x0C, 0x10, 0x11, 0x11, 0x11, 0x11, 0x13, 0x14, 0x12, 0x17, 0x03,
                   0x64, 0x65, 0x81, 0xA4, 0x04, 0x06]
    assert pkts[6][ib.AETH].rnr_timer_ms == 1.28
    assert pkts[17][ib.XRCETH] is not None
    assert pkts[18].layers[1].name == "IPv6"
    assert pkts[19].bth is not None and pkts[19].bth.fecn == 1


def test_native_ib_vector() -> None:
    with open(CAPTURES / "synthetic_native_ib_erf.pcap", "rb") as f:
        (_, rec), = list(dpkt.pcap.Reader(f))
    # ERF: 16-byte record header, then the IB packet; rlen pads the record to 8 bytes.
    wlen = int.from_bytes(rec[14:16], "big")
    pkt = decode_ib(bytes(rec[16 : 16 + wlen]))
    assert pkt.crc_status == "good" and pkt.vcrc_status == "good"
    assert pkt[ib.LRH].dlid == 5 and pkt[ib.LRH].slid == 7 and pkt[ib.LRH].pktlen == 11
    assert pkt.payload == b"abcd"


# ---------------------------------------------------------------- every opcode on every wire


@pytest.mark.parametrize("code", list(OPCODES), ids=lambda c: f"0x{c:02x}")
@pytest.mark.parametrize("wire", ["rocev2-ipv4", "rocev2-ipv6", "rocev1", "ib", "ib-grh"])
def test_every_opcode_round_trips(code: int, wire: str) -> None:
    info = OPCODES[code]
    payload = bytes(range(13)) if info.payload else b""
    bth = ib.BTH(opcode=code, destqp=0x12, psn=0xFFFFFE, ackreq=1)
    hdrs = sample_headers(code)
    if wire == "rocev2-ipv4":
        raw = encode_rocev2(bth, hdrs, payload)
        pkt = decode_ethernet(raw)
    elif wire == "rocev2-ipv6":
        raw = encode_rocev2(bth, hdrs, payload, src_ip="fe80::1", dst_ip="fe80::2", flowlabel=0x1FACE, dscp=26)
        pkt = decode_ethernet(raw)
    elif wire == "rocev1":
        raw = encode_rocev1(bth, hdrs, payload, grh=ib.GRH(sgid=1, dgid=2, tclass=3, flowlabel=9))
        pkt = decode_ethernet(raw)
    else:
        grh = ib.GRH(sgid=5, dgid=6) if wire == "ib-grh" else None
        raw = encode_ib(bth, hdrs, payload, lrh=ib.LRH(vl=3, dlid=1, slid=2), grh=grh)
        pkt = decode_ib(raw)
        assert pkt.vcrc_status == "good"
    assert pkt.crc_status == "good", pkt.summary()
    assert not pkt.problems
    assert pkt.payload == payload and pkt.pad == (-len(payload)) % 4
    got = [layer.header for layer in pkt.layers if type(layer.header) in (ib.BTH, *info.headers)]
    assert got == [bth.replace(padcnt=pkt.pad), *hdrs]


@settings(max_examples=60)
@given(data=st.data())
def test_random_packets_round_trip(data: st.DataObject) -> None:
    code = data.draw(st.sampled_from(sorted(OPCODES)))
    info = OPCODES[code]
    payload = data.draw(st.binary(max_size=300)) if info.payload else b""
    bth_vals = {f.name: data.draw(st.integers(0, f.mask)) for f in ib.BTH.LAYOUT.fields}
    bth_vals.update(opcode=code, tver=0)
    if code >> 5 == 3:
        bth_vals["destqp"] |= 2  # UD to QP0/QP1 carries a MAD, which has its own tests
    bth = ib.BTH(**bth_vals)
    hdrs = sample_headers(code, data.draw)
    raw = encode_rocev2(bth, hdrs, payload, src_port=data.draw(st.integers(0, 65535)), ecn=data.draw(st.integers(0, 3)))
    pkt = decode_ethernet(raw)
    assert pkt.crc_status == "good" and pkt.payload == payload
    assert pkt.bth == bth.replace(padcnt=(-len(payload)) % 4)


def test_variant_fields_do_not_change_the_icrc() -> None:
    """ICRC masks TTL, TOS/ECN, IP checksum, UDP checksum and FECN/BECN: a switch may change them."""
    bth = ib.BTH(opcode=0x04, destqp=7)
    a = encode_rocev2(bth, [], b"data", ttl=64, ecn=0)
    b = encode_rocev2(bth.replace(fecn=1, becn=1), [], b"data", ttl=3, ecn=3, udp_checksum=0x1234)
    assert a[-4:] == b[-4:]
    c = encode_rocev2(bth.replace(psn=1), [], b"data")
    assert c[-4:] != a[-4:]


def test_find_opcode_matches_the_table() -> None:
    assert find_opcode(Transport.RC, Op.SEND, Pos.ONLY) == 0x04
    assert find_opcode(Transport.UC, Op.RDMA_WRITE, Pos.LAST, imm=True) == 0x29
    assert find_opcode(Transport.UD, Op.SEND, Pos.ONLY, imm=True) == 0x65
    assert find_opcode(Transport.RC, Op.SEND, Pos.ONLY, inv=True) == 0x17
    assert find_opcode(Transport.XRC, Op.FETCH_ADD) == 0xB4
    with pytest.raises(KeyError):
        find_opcode(Transport.UD, Op.RDMA_WRITE, Pos.ONLY)


def test_encode_checks_headers_against_the_opcode_table() -> None:
    with pytest.raises(EncodeError) as e:
        encode_transport(ib.BTH(opcode=0x0A), [], b"x")
    assert "RETH" in str(e.value)
    with pytest.raises(EncodeError):
        encode_transport(ib.BTH(opcode=0x11), [ib.AETH()], b"payload not allowed")
    encode_transport(ib.BTH(opcode=0x0A), [], b"x", check=False)  # deliberately odd packets are allowed


# ---------------------------------------------------------------- bad input


def test_corrupted_payload_gives_bad_icrc() -> None:
    raw = bytearray(encode_rocev2(ib.BTH(opcode=0x04), [], b"hello world!"))
    raw[-8] ^= 0x01
    pkt = decode_ethernet(bytes(raw))
    assert pkt.crc_status == "bad" and pkt.crc != pkt.crc_expected
    assert "BAD ICRC" in pkt.summary()


def test_truncated_frames_raise_truncated_and_lenient_records() -> None:
    raw = encode_rocev2(ib.BTH(opcode=0x0A), [ib.RETH(dma_length=8)], b"12345678")
    for cut in range(14, len(raw)):
        short = raw[:cut]
        with pytest.raises(DecodeError) as e:
            decode_ethernet(short)
        assert isinstance(e.value, TruncatedError), (cut, e.value)
        pkt = decode_ethernet(short, lenient=True)
        assert pkt.problems and isinstance(pkt.problems[0], TruncatedError)


def test_unknown_opcode_is_malformed() -> None:
    raw = encode_rocev2(ib.BTH(opcode=0x1E), [], b"", check=False)
    with pytest.raises(MalformedError) as e:
        decode_ethernet(raw)
    assert e.value.layer == "BTH" and e.value.field == "opcode" and e.value.value == 0x1E
    assert decode_ethernet(raw, lenient=True).problems


def test_bad_padcnt_is_malformed() -> None:
    raw = bytearray(encode_rocev2(ib.BTH(opcode=0x04), [], b"ab"))
    bth_at = 14 + 20 + 8
    raw[bth_at + 1] = 0x30  # padcnt 3 while 4 bytes follow: fine; then cut the payload
    pkt = decode_ethernet(bytes(raw), lenient=True)
    assert pkt.payload_length == 1
    raw2 = bytearray(encode_rocev2(ib.BTH(opcode=0x11), [ib.AETH()], b""))
    raw2[bth_at + 1] = 0x30  # ACK carries no payload, a pad count is harmless for decode
    assert decode_ethernet(bytes(raw2), lenient=True).crc_status == "bad"


def test_raw_ip() -> None:
    raw = encode_rocev2(ib.BTH(opcode=0x04), [], b"abcd")
    pkt = decode_ip(raw[14:])
    assert pkt.encap == "rocev2" and pkt.crc_status == "good"


@settings(max_examples=400)
@given(st.binary(max_size=200))
def test_fuzz_random_bytes_raise_only_rdmalab_errors(raw: bytes) -> None:
    try:
        decode_ethernet(raw)
    except DecodeError:
        pass
    decode_ethernet(raw, lenient=True)
    try:
        decode_ib(raw)
    except DecodeError:
        pass
    decode_ib(raw, lenient=True)


@settings(max_examples=400)
@given(st.data())
def test_fuzz_mutated_frames(data: st.DataObject) -> None:
    frame = bytearray(data.draw(st.sampled_from(frames("synthetic_rocev2.pcap") + frames("public_hw_byte_vectors.pcap"))))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(frame) - 1))
        frame[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(frame)))
    raw = bytes(frame[:cut])
    try:
        decode_ethernet(raw)
    except DecodeError:
        pass
    pkt = decode_ethernet(raw, lenient=True)
    pkt.summary()
    pkt.spans()


def test_crc32c_known_answers() -> None:
    assert crc.crc32c(b"123456789") == 0xE3069283
    # RFC 3720 B.4: 32 bytes of zeros -> aa 36 91 8a on the wire
    assert crc.crc32c(b"\0" * 32).to_bytes(4, "little").hex() == "aa36918a"


def test_tcp_frame_checksums_agree_with_wireshark(tmp_path: Path) -> None:
    """encode_tcp_frame fills in the IPv4 and TCP checksums; tshark checks them."""
    import shutil
    import subprocess

    from rdmalab.wire.frame import encode_tcp_frame
    from rdmalab.wire.net import TCP

    frame = encode_tcp_frame(b"\x00\x10" + b"x" * 19, seq=1000)
    pkt = decode_ethernet(frame)
    assert pkt.encap == "tcp" and pkt[TCP].seq == 1000 and pkt.payload_length == 21
    if shutil.which("tshark") is None:
        pytest.skip("tshark (Wireshark) is not installed")
    path = tmp_path / "tcp.pcap"
    write_capture(path, [frame])
    out = subprocess.run(["tshark", "-r", str(path), "-o", "tcp.check_checksum:TRUE", "-o", "ip.check_checksum:TRUE",
                          "-T", "fields", "-e", "tcp.checksum.status", "-e", "ip.checksum.status"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == ["1", "1"]  # 1 = "Good" in Wireshark's checksum status


@pytest.mark.parametrize("wire", ["rocev2-ipv4", "rocev2-ipv6", "rocev1", "ib-grh", "ib-local"])
def test_variant_field_table_gives_the_icrc(wire: str) -> None:
    """The icrc_* functions derive their byte masks from crc.ICRC_VARIANT_FIELDS; applied here
    bit by bit through the decoded layers instead, the table gives the same ICRC on the wire."""
    import zlib

    bth = ib.BTH(opcode=0x04, destqp=0x12, psn=7, fecn=1, becn=1)
    if wire.startswith("rocev2"):
        v6 = wire.endswith("ipv6")
        frame = encode_rocev2(bth, [], b"payload!", ttl=9, dscp=5, ecn=3, udp_checksum=0x1234, flowlabel=0x123,
                              src_ip="fd00::1" if v6 else "10.0.0.1", dst_ip="fd00::2" if v6 else "10.0.0.2")
        pkt, encap = decode_ethernet(frame), "rocev2"
    elif wire == "rocev1":
        pkt, encap = decode_ethernet(encode_rocev1(bth, [], b"payload!", grh=ib.GRH(tclass=7, flowlabel=9, hoplmt=3))), "rocev1"
    elif wire == "ib-grh":  # with a GRH the whole LRH is variant (rule "ib_global")
        pkt, encap = decode_ib(encode_ib(bth, [], b"payload!", lrh=ib.LRH(vl=5, sl=2, dlid=3, slid=4),
                                         grh=ib.GRH(tclass=7, hoplmt=3))), "ib_global"
    else:
        pkt, encap = decode_ib(encode_ib(bth, [], b"payload!", lrh=ib.LRH(vl=5, sl=2, dlid=3, slid=4))), "ib"
    first = {"rocev2": ("IPv4", "IPv6"), "rocev1": ("GRH",), "ib": ("LRH",), "ib_global": ("LRH",)}[encap]
    start = next(layer.offset for layer in pkt.layers if layer.name in first)
    assert pkt.crc_offset is not None
    buf = bytearray(pkt.data[start : pkt.crc_offset])
    named = {(layer, field) for layer, field in crc.ICRC_VARIANT_FIELDS[encap]}
    for layer in pkt.layers:
        for f in layer.header.LAYOUT.fields:
            if (layer.name, f.name) in named:
                bit0 = (layer.offset - start) * 8 + f.bit_offset
                for b in range(bit0, bit0 + f.bits):
                    buf[b // 8] |= 0x80 >> (b % 8)
    prefix = b"" if encap.startswith("ib") else b"\xff" * 8
    assert zlib.crc32(prefix + bytes(buf)) == pkt.crc == pkt.crc_expected
