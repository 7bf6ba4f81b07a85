"""iWARP codecs (MPA / DDP / RDMAP): known answers, tshark agreement, round trips and fuzzing."""

from __future__ import annotations

import json
import subprocess
from dataclasses import fields
from pathlib import Path
from typing import Any

import dpkt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tshark_util import requires_tshark, tshark_path

from rdmalab.wire import crc as _crc
from rdmalab.wire.errors import DecodeError, EncodeError, MalformedError, TruncatedError
from rdmalab.wire.header import Header
from rdmalab.wire.iwarp import (
    DDP_TAGGED_SIZE,
    DDP_UNTAGGED_SIZE,
    OP_READ_RESPONSE,
    OP_SEND,
    OP_SEND_SE_INVALIDATE,
    OP_WRITE,
    RDMAP_OPCODES,
    AtomicRequest,
    AtomicResponse,
    DDPTagged,
    DDPUntagged,
    ImmediateData,
    MPAReqRep,
    MPAv2IRDORD,
    RDMAPControl,
    RDMAPUntagged,
    ReadRequest,
    Terminate,
    TerminatedDDPUntagged,
    atomic_request,
    atomic_response,
    decode_fpdu,
    decode_mpa_frame,
    decode_ulpdu,
    encode_fpdu,
    encode_fpdus,
    encode_mpa_frame,
    fetch_add,
    immediate_data,
    rdma_write,
    rdmap_opcode_name,
    read_request,
    read_response,
    segment_tagged,
    segment_untagged,
    send,
    terminate,
)
from rdmalab.wire.mpa import (
    MPA,
    MPAMarker,
    fpdu_length,
    fpdu_wire_length,
    insert_markers,
    marker_offsets,
    mulpdu,
    pad_length,
)
from rdmalab.wire.packet import Packet
from rdmalab.wire.rdmap import (
    TerminatedDDPTagged,
    TerminatedRDMAP,
    TerminateSegLen,
)

VECTORS = Path(__file__).resolve().parents[2] / "captures"
CRC_PCAP = VECTORS / "synthetic_iwarp_mpa_crc.pcap"
MARKERS_PCAP = VECTORS / "synthetic_iwarp_mpa_markers.pcap"

needs_vectors = pytest.mark.skipif(not CRC_PCAP.exists(), reason=f"iWARP vector pcaps not found under {VECTORS}")

ALL_HEADERS: list[type[Header]] = [
    MPA, MPAMarker, MPAReqRep, MPAv2IRDORD, DDPTagged, DDPUntagged, RDMAPControl, RDMAPUntagged, ReadRequest,
    Terminate, TerminateSegLen, TerminatedDDPTagged, TerminatedDDPUntagged, TerminatedRDMAP, AtomicRequest,
    AtomicResponse, ImmediateData,
]


# ============================================================================ helpers


def tcp_segments(path: Path) -> list[tuple[int, int, int, bytes]]:
    """(frame number, source port, TCP seq, payload) of each frame with TCP payload."""
    out = []
    with open(path, "rb") as fh:
        for n, (_, buf) in enumerate(dpkt.pcap.Reader(fh), start=1):
            eth = dpkt.ethernet.Ethernet(buf)
            tcp = eth.data.data
            if tcp.data:
                out.append((n, tcp.sport, tcp.seq, bytes(tcp.data)))
    return out


def wire_payloads(path: Path) -> dict[int, bytes]:
    """Each frame's TCP payload, by frame number."""
    return {n: payload for n, _, _, payload in tcp_segments(path)}


def decode_vector(path: Path, markers: bool) -> dict[int, Packet]:
    """Decode each frame's payload statelessly (one MPA frame or FPDU per frame in the vectors)."""
    out: dict[int, Packet] = {}
    first: dict[int, int] = {}
    for n, sport, seq, payload in tcp_segments(path):
        if payload.startswith(b"MPA ID Re"):
            pkt, used = decode_mpa_frame(payload)
            first[sport] = seq + used
        else:
            pos = (seq - first[sport]) % (1 << 32) if markers else None
            pkt, used = decode_fpdu(payload, markers=pos, lenient=True)
        assert used == len(payload), f"frame {n}: consumed {used} of {len(payload)}"
        out[n] = pkt
    return out


# ============================================================================ known answers


@needs_vectors
def test_crc_vector_every_crc_checked() -> None:
    pkts = decode_vector(CRC_PCAP, markers=False)
    assert sorted(pkts) == list(range(4, 17))
    for n in range(6, 16):
        assert pkts[n].crc_status == "good", pkts[n].summary()
        assert pkts[n].crc_kind == "crc32c"
        assert not pkts[n].problems, pkts[n].problems
    bad = pkts[16]
    assert bad.crc_status == "bad"
    assert bad.crc is not None and bad.crc_expected is not None
    assert bad.crc.to_bytes(4, "little").hex() == "deadbeef"
    # tshark: "Bad CRC32, should be 0xeea01536" (it prints the wire byte order)
    assert bad.crc_expected.to_bytes(4, "little").hex() == "eea01536"
    assert "BAD CRC32c" in bad.summary()


@needs_vectors
def test_markers_vector_every_crc_good_and_markers_checked() -> None:
    pkts = decode_vector(MARKERS_PCAP, markers=True)
    counts = []
    for n in range(6, 10):
        p = pkts[n]
        assert p.crc_status == "good" and not p.problems, p.summary()
        counts.append([(w, m.fpduptr) for w, m in p.markers])
        assert len(p.data) == fpdu_length(318)
    assert counts == [[(0, 0)], [(184, 184)], [], [(44, 44)]]


@needs_vectors
def test_vector_layers_values() -> None:
    pkts = decode_vector(CRC_PCAP, markers=False)
    req = pkts[4]
    hdr = req[MPAReqRep]
    assert hdr.is_request and hdr.rev == 2 and hdr.enhanced and hdr.crc_flag and not hdr.marker_flag
    words = req[MPAv2IRDORD]
    assert (words.p2p, words.zero_rtr, words.ird, words.write_rtr, words.read_rtr, words.ord) == (1, 0, 16, 1, 0, 16)
    assert req.payload == b"hello"
    assert pkts[5][MPAReqRep].is_reply
    rr = pkts[8][ReadRequest]
    assert (rr.sink_stag, rr.sink_to, rr.size, rr.src_stag, rr.src_to) == (0xAABBCCDD, 0x2000, 64, 0x55667788, 0x3000)
    assert pkts[10][RDMAPUntagged].inval_stag == 0x01020304
    at = pkts[12][AtomicRequest]
    assert (at.atomic_opcode, at.req_id, at.stag, at.to, at.add_swap) == (0, 7, 0x99887766, 0x4000, 5)
    assert pkts[13][AtomicResponse] == AtomicResponse(7, 42)
    assert pkts[14][ImmediateData].imm_data == 0x0123456789ABCDEF
    term = pkts[15][Terminate]
    assert (term.layer, term.etype, term.errcode, term.hdrct_m, term.hdrct_d, term.hdrct_r) == (1, 2, 3, 1, 1, 0)
    assert "Invalid MSN - MSN range is not valid" in term.describe("errcode")
    assert pkts[15][TerminateSegLen].ddp_seg_len == 0x1E
    inner = pkts[15][TerminatedDDPUntagged].decoded()
    assert (inner.qn, inner.msn) == (0, 9)
    assert pkts[7].pad == 1 and pkts[16].pad == 3


@needs_vectors
def test_builders_reproduce_vector_bytes() -> None:
    """Every RDMAP builder, framed, gives the vector's bytes exactly (CRC included)."""
    pkts = decode_vector(CRC_PCAP, markers=False)
    wire = wire_payloads(CRC_PCAP)
    assert encode_fpdu(send(b"SEND payload 123", msn=1)) == wire[6]
    assert encode_fpdu(rdma_write(0x11223344, 0x1000, b"WRITE payload!!")) == wire[7]
    assert encode_fpdu(read_request(0xAABBCCDD, 0x2000, 64, 0x55667788, 0x3000)) == wire[8]
    assert encode_fpdu(read_response(0xAABBCCDD, 0x2000, pkts[9].payload)) == wire[9]
    assert encode_fpdu(send(pkts[10].payload, inv_stag=0x01020304)) == wire[10]
    assert encode_fpdu(send(b"send-se", se=True, msn=2)) == wire[11]
    assert encode_fpdu(fetch_add(7, 0x99887766, 0x4000, 5, mask=0xFFFFFFFFFFFFFFFF)) == wire[12]
    assert encode_fpdu(atomic_response(7, 42)) == wire[13]
    assert encode_fpdu(immediate_data(0x0123456789ABCDEF, msn=3)) == wire[14]
    term_ddp = bytes.fromhex("414300000000000000000000000900000000")
    assert encode_fpdu(terminate(1, 2, 3, ddp_seg_len=0x1E, terminated_ddp=term_ddp)) == wire[15]
    good16 = encode_fpdu(send(pkts[16].payload, msn=4))
    assert good16[:-4] == wire[16][:-4] and wire[16][-4:] == bytes.fromhex("deadbeef")
    assert encode_mpa_frame(rev=2, ird=16, ord=16, p2p=True, rtr_write=True, private_data=b"hello") == wire[4]
    assert encode_mpa_frame(reply=True, rev=2, ird=16, ord=16, p2p=True, rtr_write=True) == wire[5]


@needs_vectors
def test_markers_vector_reencoded_stream() -> None:
    segs = tcp_segments(MARKERS_PCAP)
    assert encode_mpa_frame(markers=True) == segs[0][3]
    assert encode_mpa_frame(reply=True, markers=True) == segs[1][3]
    fpdus = [s for s in segs[2:]]
    stream = b"".join(p for _, _, _, p in fpdus)
    ulpdus = [send(bytes([0x41 + i]) * 300, msn=i + 1) for i in range(4)]
    assert encode_fpdus(ulpdus, markers=True) == stream


@needs_vectors
def test_header_bytes_reencode_from_decoded_layers() -> None:
    for path, mk in ((CRC_PCAP, False), (MARKERS_PCAP, True)):
        for pkt in decode_vector(path, mk).values():
            for layer in pkt.layers:
                assert layer.header.encode() == pkt.data[layer.offset : layer.end], layer.name


# ============================================================================ tshark agreement


def _tshark_json(path: Path) -> list[dict[str, Any]]:
    exe = tshark_path()
    assert exe is not None
    out = subprocess.run(
        [exe, "-r", str(path), "-T", "json", "--no-duplicate-keys", "--disable-protocol", "rpcordma"],
        capture_output=True, check=True, timeout=120,
    ).stdout
    return list(json.loads(out))


def _flatten(obj: Any, into: dict[str, Any]) -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, (dict, list)) and not (isinstance(v, list) and v and isinstance(v[0], str)):
                _flatten(v, into)
            else:
                into[k] = v
    elif isinstance(obj, list):
        for x in obj:
            _flatten(x, into)


def _ws_int(value: str) -> int:
    if ":" in value or (len(value) == 2 and not value.isdigit() and not value.startswith("0x")):
        return int(value.replace(":", ""), 16)
    if value.startswith("0x"):
        return int(value, 16)
    return int(value)


# tshark leaves that are not header fields of ours, or are checked separately below
_TSHARK_SEPARATE = {
    "iwarp_mpa.crc_check", "iwarp_mpa.crc", "iwarp_mpa.pad", "iwarp_mpa.privatedata",
    "iwarp_mpa.marker_res", "iwarp_mpa.marker_fpduptr",
}


@requires_tshark
@needs_vectors
@pytest.mark.tshark
@pytest.mark.parametrize("path,markers", [(CRC_PCAP, False), (MARKERS_PCAP, True)], ids=["crc", "markers"])
def test_fields_agree_with_tshark(path: Path, markers: bool) -> None:
    frames = _tshark_json(path)
    ours = decode_vector(path, markers)
    payloads = wire_payloads(path)
    compared = 0
    for n, pkt in ours.items():
        layers = frames[n - 1]["_source"]["layers"]
        ws: dict[str, Any] = {}
        _flatten({k: v for k, v in layers.items() if k.startswith("iwarp")}, ws)
        mine: dict[str, int] = {}
        for layer in pkt.layers:
            mine.update(layer.header.ws_fields())
        for name, value in ws.items():
            if name in _TSHARK_SEPARATE or not isinstance(value, str):
                continue
            assert name in mine, f"frame {n}: tshark has {name}={value}, we do not"
            assert mine[name] == _ws_int(value), f"frame {n}: {name}: tshark {value}, ours {mine[name]:#x}"
            compared += 1
        wire = payloads[n]
        if "iwarp_mpa.crc_check" in ws:  # tshark shows the CRC field's wire bytes read big-endian
            assert _ws_int(ws["iwarp_mpa.crc_check"]) == int.from_bytes(wire[-4:], "big")
            status = "good" if n != 16 or markers else "bad"
            assert pkt.crc_status == status
        if "iwarp_mpa.pad" in ws:
            assert bytes.fromhex(ws["iwarp_mpa.pad"].replace(":", "")) == b"\0" * pkt.pad
        else:
            assert pkt.pad == 0
        if "iwarp_mpa.privatedata" in ws:
            assert bytes.fromhex(ws["iwarp_mpa.privatedata"].replace(":", "")) == pkt.private_data
        if "iwarp_mpa.marker_fpduptr" in ws:
            ptrs = ws["iwarp_mpa.marker_fpduptr"]
            ptrs = ptrs if isinstance(ptrs, list) else [ptrs]
            assert [int(p) for p in ptrs] == [m.fpduptr for _, m in pkt.markers]
        if "data.data" in {k for k in layers.get("data", {})}:
            assert bytes.fromhex(layers["data"]["data.data"].replace(":", "")) == pkt.payload
    assert compared > (150 if not markers else 60)


@requires_tshark
@needs_vectors
@pytest.mark.tshark
def test_tshark_opcode_names_match_table() -> None:
    exe = tshark_path()
    assert exe is not None
    out = subprocess.run(
        [exe, "-r", str(CRC_PCAP), "-T", "fields", "-e", "frame.number", "-e", "_ws.col.Info",
         "--disable-protocol", "rpcordma"],
        capture_output=True, check=True, text=True, timeout=120,
    ).stdout
    pkts = decode_vector(CRC_PCAP, markers=False)
    for line in out.splitlines():
        num, info = line.split("\t", 1)
        pkt = pkts.get(int(num))
        if pkt is None or pkt.get(RDMAPControl) is None and pkt.get(RDMAPUntagged) is None:
            continue
        ctl = pkt.get(RDMAPControl) or pkt.get(RDMAPUntagged)
        assert ctl is not None
        entry = RDMAP_OPCODES[ctl.opcode]
        expected = entry.ws_name or f"Unknown {ctl.opcode}"
        assert f" {expected} [last DDP segment]" in info, (num, info)


# ============================================================================ unit checks


def test_opcode_table_complete() -> None:
    assert sorted(RDMAP_OPCODES) == [0, 1, 2, 3, 4, 5, 6, 7, 0xA, 0xB, 0xC, 0xD]
    assert rdmap_opcode_name(0xC) == "Immediate Data"
    assert rdmap_opcode_name(0xD) == "Immediate Data with Solicited Event"
    assert rdmap_opcode_name(0x8) == "Reserved (0x8)"
    assert {o for o, i in RDMAP_OPCODES.items() if i.tagged} == {OP_WRITE, OP_READ_RESPONSE}


def test_pad_and_crc_byte_order() -> None:
    assert [pad_length(n) for n in range(6)] == [2, 1, 0, 3, 2, 1]
    assert _crc.crc32c(b"123456789") == 0xE3069283
    fpdu = bytes.fromhex("0022414300000000000000000000000100000000") + b"SEND payload 123"
    assert encode_fpdu(fpdu[2:])[-4:] == bytes.fromhex("12a571d2")


def test_mulpdu() -> None:
    assert mulpdu(1460) == 1460 - 6
    assert mulpdu(1460, markers=True) == 1460 - (6 + 4 * 3)
    with pytest.raises(EncodeError):
        mulpdu(0)


def test_truncated_and_malformed_errors_name_the_field() -> None:
    wire = encode_fpdu(send(b"hello world"))
    with pytest.raises(TruncatedError) as t:
        decode_fpdu(wire[:-1])
    assert t.value.layer == "MPA" and t.value.field == "ulpdu_length"
    with pytest.raises(TruncatedError):
        decode_fpdu(wire[:1])
    bad = bytearray(send(b"x"))
    bad[1] = 0x48  # RDMAP opcode 8: reserved
    with pytest.raises(MalformedError) as m:
        decode_fpdu(encode_fpdu(bytes(bad)))
    assert (m.value.layer, m.value.field, m.value.value) == ("RDMAP", "opcode", 8)
    assert m.value.offset == 3
    pkt, _ = decode_fpdu(encode_fpdu(bytes(bad)), lenient=True)
    assert pkt.problems and pkt.crc_status == "good"
    short = encode_fpdu(send()[:10])
    with pytest.raises(MalformedError) as m2:
        decode_fpdu(short)
    assert m2.value.field == "ulpdu_length"
    tagged_send = bytearray(rdma_write(1, 2, b"abc"))
    tagged_send[1] = 0x43
    with pytest.raises(MalformedError) as m3:
        decode_fpdu(encode_fpdu(bytes(tagged_send)))
    assert (m3.value.layer, m3.value.field) == ("DDP", "tagged")


def test_bad_marker_reported() -> None:
    wire = bytearray(encode_fpdu(send(b"z" * 600), markers=0))
    offs = marker_offsets(0, fpdu_length(18 + 600))
    assert offs == [0, 512]
    wire[512 + 3] ^= 1
    with pytest.raises(MalformedError) as e:
        decode_fpdu(bytes(wire), markers=0)
    assert (e.value.layer, e.value.field, e.value.offset) == ("MPA Marker", "fpduptr", 514)
    pkt, _ = decode_fpdu(bytes(wire), markers=0, lenient=True)
    assert len(pkt.problems) == 1 and pkt.crc_status == "bad"  # the CRC covers markers


def test_mpa_frame_checks() -> None:
    with pytest.raises(MalformedError) as e:
        decode_mpa_frame(b"MPA ID Xxx Frame" + bytes(4))
    assert e.value.field == "key"
    frame = bytearray(encode_mpa_frame())
    frame[17] = 3
    with pytest.raises(MalformedError):
        decode_mpa_frame(bytes(frame))
    with pytest.raises(TruncatedError):
        decode_mpa_frame(encode_mpa_frame(private_data=b"abc")[:-1])
    with pytest.raises(EncodeError):
        encode_mpa_frame(private_data=bytes(513))
    with pytest.raises(EncodeError):
        encode_mpa_frame(reject=True)
    rej, _ = decode_mpa_frame(encode_mpa_frame(reply=True, reject=True))
    assert rej[MPAReqRep].rej_flag == 1 and "[C R]" in rej.summary()


def test_zero_length_fpdu() -> None:
    pkt, n = decode_fpdu(encode_fpdu(b""))
    assert n == 8 and pkt.zero_length and pkt.crc_status == "good"
    assert pkt.summary().startswith("Zero-length FPDU")


def test_no_crc_negotiated() -> None:
    wire = encode_fpdu(send(b"abc"), crc=False)
    assert wire[-4:] == bytes(4)
    pkt, _ = decode_fpdu(wire, crc=False)
    assert pkt.crc_status is None and pkt.crc == 0


def test_terminate_with_rdmap_header() -> None:
    rr = ReadRequest(1, 2, 3, 4, 5).encode()
    ddp = DDPTagged(stag=9, to=10).encode()
    ulpdu = terminate(0, 1, 0x02, ddp_seg_len=40, terminated_ddp=ddp, terminated_rdmap=rr)
    pkt, _ = decode_fpdu(encode_fpdu(ulpdu))
    assert pkt[TerminatedDDPTagged].decoded() == DDPTagged(stag=9, to=10)
    assert pkt[TerminatedRDMAP].decoded() == ReadRequest(1, 2, 3, 4, 5)
    t = pkt[Terminate]
    assert t.ws_fields()["iwarp_rdma.term_errcode_rdma"] == 2
    assert "Access rights violation" in t.describe("errcode")
    with pytest.raises(EncodeError):
        terminate(1, 1, 0, terminated_ddp=ddp[:13])
    with pytest.raises(EncodeError):
        terminate(1, 1, 0, ddp_seg_len=3)


def test_send_variants_and_atomic_names() -> None:
    assert send(b"", se=True, inv_stag=5)[1] & 0x0F == OP_SEND_SE_INVALIDATE
    assert send(b"")[1] & 0x0F == OP_SEND
    req = atomic_request(1, 1, 2, 3, 4, 5, 6, 7)
    pkt, _ = decode_fpdu(encode_fpdu(req))
    ws = pkt[AtomicRequest].ws_fields()
    assert ws["iwarp_rdma.atomic.swap_data"] == 4 and "iwarp_rdma.atomic.add_data" not in ws
    assert pkt[AtomicRequest].describe("atomic_opcode") == "Swap (1)"
    assert immediate_data(1, se=True)[1] & 0x0F == 0xD


# ============================================================================ property tests


@st.composite
def header_values(draw: st.DrawFn, cls: type[Header]) -> Header:
    values = {f.name: draw(st.integers(0, f.mask)) for f in cls.LAYOUT.fields}
    return cls(**values)


@pytest.mark.parametrize("cls", ALL_HEADERS, ids=[c.__name__ for c in ALL_HEADERS])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_every_header_round_trips(cls: type[Header], data: st.DataObject) -> None:
    h = data.draw(header_values(cls))
    raw = h.encode()
    assert len(raw) == cls.LAYOUT.size
    assert cls.decode(raw) == h
    assert cls.decode(b"\xaa" + raw, 1) == h
    assert [f.name for f in fields(cls)] == list(cls.field_names())  # type: ignore[arg-type]
    for span in h.spans(0):
        assert 0 <= span.start < span.end <= cls.LAYOUT.size


u32 = st.integers(0, 0xFFFFFFFF)
u64 = st.integers(0, 0xFFFFFFFFFFFFFFFF)
small_payload = st.binary(max_size=1500)


@st.composite
def ulpdus(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["write", "rr", "resp", "send", "term", "atomic", "aresp", "imm"]))
    if kind == "write":
        return rdma_write(draw(u32), draw(u64), draw(small_payload), last=draw(st.booleans()))
    if kind == "rr":
        return read_request(draw(u32), draw(u64), draw(u32), draw(u32), draw(u64), msn=draw(u32))
    if kind == "resp":
        return read_response(draw(u32), draw(u64), draw(small_payload), last=draw(st.booleans()))
    if kind == "send":
        inv = draw(st.none() | u32)
        return send(draw(small_payload), msn=draw(u32), mo=draw(u32), se=draw(st.booleans()), inv_stag=inv)
    if kind == "term":
        d = draw(st.booleans())
        tagged = draw(st.booleans())
        ddp = (rdma_write(draw(u32), draw(u64)) if tagged else send(msn=draw(u32))) if d else None
        rr = ReadRequest(draw(u32), draw(u64), draw(u32), draw(u32), draw(u64)).encode() if draw(st.booleans()) else None
        return terminate(draw(st.integers(0, 2)), draw(st.integers(0, 3)), draw(st.integers(0, 255)),
                         ddp_seg_len=draw(st.integers(0, 0xFFFF)) if d else None, terminated_ddp=ddp,
                         terminated_rdmap=rr)
    if kind == "atomic":
        return atomic_request(draw(st.integers(0, 2)), draw(u32), draw(u32), draw(u64), draw(u64), draw(u64),
                              draw(u64), draw(u64), msn=draw(u32))
    if kind == "aresp":
        return atomic_response(draw(u32), draw(u64), msn=draw(u32))
    return immediate_data(draw(u64), se=draw(st.booleans()), msn=draw(u32))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ulpdu=ulpdus(), crc=st.booleans(), markers=st.none() | st.integers(0, 0xFFFFFFFF))
def test_fpdu_round_trip(ulpdu: bytes, crc: bool, markers: int | None) -> None:
    wire = encode_fpdu(ulpdu, crc=crc, markers=markers)
    assert fpdu_wire_length(wire, 0, markers) == len(wire)
    pkt, used = decode_fpdu(wire + b"trailing", markers=markers, crc=crc)
    assert used == len(wire)
    assert not pkt.problems
    assert pkt.data[2 : 2 + len(ulpdu)] == ulpdu
    assert pkt.crc_status == ("good" if crc else None)
    assert pkt[MPA].ulpdu_length == len(ulpdu)
    if markers is not None:
        assert pkt.wire == wire
        assert len(wire) == len(pkt.data) + 4 * len(pkt.markers)
        assert insert_markers(pkt.data[:-4], markers) == wire[: len(insert_markers(pkt.data[:-4], markers))]
    rebuilt = b"".join([pkt.data[layer.offset : layer.end] for layer in pkt.layers if layer.name in ("MPA",)])
    assert rebuilt == len(ulpdu).to_bytes(2, "big")
    assert pkt.summary()


@settings(max_examples=80, deadline=None)
@given(st.lists(ulpdus(), min_size=1, max_size=6), st.booleans(), st.integers(0, 1023))
def test_fpdu_stream_round_trip(us: list[bytes], markers: bool, start: int) -> None:
    start -= start % 4
    stream = encode_fpdus(us, markers=markers, stream_pos=start)
    off = 0
    for u in us:
        pkt, n = decode_fpdu(stream, off, markers=(start + off) if markers else None)
        assert pkt.crc_status == "good" and not pkt.problems
        assert pkt.data[2 : 2 + len(u)] == u
        off += n
    assert off == len(stream)


@settings(max_examples=100, deadline=None)
@given(payload=st.binary(max_size=5000), mulpdu_=st.integers(40, 2000), stag=u32, to=u64, msn=u32)
def test_segmentation(payload: bytes, mulpdu_: int, stag: int, to: int, msn: int) -> None:
    for segs, size in (
        (segment_tagged(OP_WRITE, stag, to, payload, mulpdu_), DDP_TAGGED_SIZE),
        (segment_untagged(OP_SEND, payload, mulpdu_, msn=msn), DDP_UNTAGGED_SIZE),
    ):
        got = b""
        for i, s in enumerate(segs):
            assert len(s) <= mulpdu_
            pkt = Packet(s, encap="iwarp")
            decode_ulpdu(s, pkt, 0, len(s))
            ddp = pkt.layers[0].header
            assert isinstance(ddp, (DDPTagged, DDPUntagged))
            assert ddp.last == (i == len(segs) - 1)
            if isinstance(ddp, DDPTagged):
                assert ddp.to == (to + len(got)) % (1 << 64)
            else:
                assert ddp.mo == len(got) and ddp.msn == msn
            got += pkt.payload
            assert pkt.payload_offset == size
        assert got == payload
    with pytest.raises(EncodeError):
        segment_tagged(OP_SEND, 1, 2, b"", 100)
    with pytest.raises(EncodeError):
        segment_untagged(OP_SEND, b"x", 18)


@settings(max_examples=400, deadline=None)
@given(data=st.binary(max_size=300), markers=st.none() | st.integers(0, 2000), lenient=st.booleans())
def test_fuzz_random_bytes_raise_only_decode_errors(data: bytes, markers: int | None, lenient: bool) -> None:
    for fn in (
        lambda: decode_fpdu(data, markers=markers, lenient=lenient),
        lambda: decode_mpa_frame(data, lenient=lenient),
        lambda: decode_ulpdu(data, Packet(data), 0, len(data), lenient=lenient),
        lambda: decode_mpa_frame(b"MPA ID Req Frame" + data, lenient=lenient),
    ):
        try:
            pkt = fn()
        except DecodeError:
            continue
        if isinstance(pkt, tuple):
            pkt[0].summary()


@settings(max_examples=300, deadline=None)
@given(ulpdu=ulpdus(), flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), min_size=1, max_size=4),
       cut=st.integers(0, 10_000), markers=st.none() | st.just(0))
def test_fuzz_mutated_fpdus(ulpdu: bytes, flips: list[tuple[int, int]], cut: int, markers: int | None) -> None:
    wire = bytearray(encode_fpdu(ulpdu, markers=markers))
    for at, x in flips:
        wire[at % len(wire)] ^= x
    for buf in (bytes(wire), bytes(wire[: cut % (len(wire) + 1)])):
        for lenient in (False, True):
            try:
                pkt, _ = decode_fpdu(buf, markers=markers, lenient=lenient)
            except DecodeError:
                continue
            pkt.summary()
            pkt.spans()
