"""InfiniBand CM messages: exact layouts, round trips, rdma_cm builders, tshark as the oracle."""

from __future__ import annotations

import glob
import ipaddress
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tshark_util import field_types, field_value

from rdmalab.wire import decode_ethernet
from rdmalab.wire.cm import (
    CM_MESSAGES,
    RDMA_PS_TCP,
    REJ_CONSUMER_DEFINED,
    REJ_REASON_NAMES,
    RPING_PORT,
    WIRESHARK_QUIRKS,
    CMBody,
    CMDrep,
    CMDreq,
    CMMessage,
    CMMra,
    CMPath,
    CMRej,
    CMRep,
    CMReq,
    CMRtu,
    CMSidrRep,
    CMSidrReq,
    IPCMHeader,
    build_drep,
    build_dreq,
    build_mra,
    build_rej,
    build_rep,
    build_req,
    build_rtu,
    cm_mad,
    ip_cm_service_id,
    parse_ip_cm_service_id,
)
from rdmalab.wire.errors import DecodeError, EncodeError, MalformedError, TruncatedError
from rdmalab.wire.frame import gsi_frame
from rdmalab.wire.header import Header
from rdmalab.wire.ib import BTH, DETH
from rdmalab.wire.mad import MADHeader
from rdmalab.wire.net import IPv4, IPv6

CAPTURES = Path(__file__).resolve().parents[2] / "captures"
VECTOR = CAPTURES / "synthetic_rocev2_cm_req.pcap"
MAD_AT = 14 + 20 + 8 + 12 + 8  # Ethernet, IPv4, UDP, BTH, DETH

BODIES: list[tuple[type[CMBody], int, int]] = [  # class, fixed size, private data size (IBA 12.6 / 12.11)
    (CMReq, 140, 92), (CMMra, 10, 222), (CMRej, 84, 148), (CMRep, 36, 196), (CMRtu, 8, 224),
    (CMDreq, 12, 220), (CMDrep, 8, 224), (CMSidrReq, 16, 216), (CMSidrRep, 96, 136),
]


# --------------------------------------------------------------------------- layouts


@pytest.mark.parametrize("cls,size,private", BODIES, ids=lambda v: getattr(v, "__name__", str(v)))
def test_sizes_and_citation(cls: type[CMBody], size: int, private: int) -> None:
    assert cls.LAYOUT.size == size
    assert cls.private_data_size() == private
    assert cls.LAYOUT.spec.startswith("IBA Vol 1 12.")
    assert CM_MESSAGES[cls.ATTR_ID] is cls


def test_other_sizes() -> None:
    assert IPCMHeader.LAYOUT.size == 36 and "A11" in IPCMHeader.LAYOUT.spec
    assert CMPath.LAYOUT.size == 44


# Byte offsets within the MAD data, from IBA Vol 1 12.6.5 / 12.6.8 (and Linux ibta_vol1_c12.h)
REQ_OFFSETS = {
    "local_comm_id": 0, "vendor_id": 5, "service_id": 8, "local_ca_guid": 16, "local_qkey": 28, "local_qpn": 32,
    "responder_resources": 35, "local_eecn": 36, "initiator_depth": 39, "remote_eecn": 40,
    "remote_cm_response_timeout": 43, "starting_psn": 44, "local_cm_response_timeout": 47, "p_key": 48,
    "path_mtu": 50, "max_cm_retries": 51, "primary_local_lid": 52, "primary_remote_lid": 54,
    "primary_local_gid": 56, "primary_remote_gid": 72, "primary_flow_label": 88, "primary_packet_rate": 91,
    "primary_traffic_class": 92, "primary_hop_limit": 93, "primary_sl": 94, "primary_local_ack_timeout": 95,
    "alternate_local_lid": 96, "alternate_local_gid": 100, "alternate_remote_gid": 116,
    "alternate_flow_label": 132, "alternate_packet_rate": 135, "alternate_local_ack_timeout": 139,
}
REP_OFFSETS = {
    "local_comm_id": 0, "remote_comm_id": 4, "local_qkey": 8, "local_qpn": 12, "vendor_id_h": 15,
    "local_eecn": 16, "starting_psn": 20, "responder_resources": 24, "initiator_depth": 25,
    "target_ack_delay": 26, "rnr_retry_count": 27, "local_ca_guid": 28,
}
# (class, field, value, byte offset in the MAD data, expected byte): sub-byte fields
BITS = [
    (CMReq, "remote_cm_response_timeout", 0x1F, 43, 0xF8), (CMReq, "transport_service_type", 3, 43, 0x06),
    (CMReq, "e2e_flow_control", 1, 43, 0x01), (CMReq, "local_cm_response_timeout", 0x1F, 47, 0xF8),
    (CMReq, "retry_count", 7, 47, 0x07), (CMReq, "path_mtu", 0xF, 50, 0xF0), (CMReq, "rdc_exists", 1, 50, 0x08),
    (CMReq, "rnr_retry_count", 7, 50, 0x07), (CMReq, "max_cm_retries", 0xF, 51, 0xF0), (CMReq, "srq", 1, 51, 0x08),
    (CMReq, "ext_transport_type", 7, 51, 0x07), (CMReq, "primary_packet_rate", 0x3F, 91, 0x3F),
    (CMReq, "primary_sl", 0xF, 94, 0xF0), (CMReq, "primary_subnet_local", 1, 94, 0x08),
    (CMReq, "primary_local_ack_timeout", 0x1F, 95, 0xF8),
    (CMRep, "target_ack_delay", 0x1F, 26, 0xF8), (CMRep, "failover_accepted", 3, 26, 0x06),
    (CMRep, "e2e_flow_control", 1, 26, 0x01), (CMRep, "rnr_retry_count", 7, 27, 0xE0), (CMRep, "srq", 1, 27, 0x10),
    (CMRej, "message_rejected", 3, 8, 0xC0), (CMRej, "reject_info_length", 0x7F, 9, 0xFE),
    (CMMra, "message_mraed", 3, 8, 0xC0), (CMMra, "service_timeout", 0x1F, 9, 0xF8),
]


def test_field_offsets() -> None:
    assert {n: CMReq.LAYOUT.field(n).byte_start for n in REQ_OFFSETS} == REQ_OFFSETS
    assert {n: CMRep.LAYOUT.field(n).byte_start for n in REP_OFFSETS} == REP_OFFSETS
    assert CMRej.LAYOUT.field("reason").byte_start == 10 and CMRej.LAYOUT.field("ari").byte_start == 12
    assert CMDreq.LAYOUT.field("remote_qpn_eecn").byte_start == 8
    assert CMSidrRep.LAYOUT.field("qpn").byte_start == 8 and CMSidrRep.LAYOUT.field("qkey").byte_start == 20


@pytest.mark.parametrize("cls,name,value,at,byte", BITS, ids=lambda v: v if isinstance(v, str) else None)
def test_sub_byte_fields(cls: type[CMBody], name: str, value: int, at: int, byte: int) -> None:
    raw = cls().replace(**{f.name: 0 for f in cls.LAYOUT.fields}).replace(**{name: value}).encode()
    assert raw[at] == byte
    assert sum(raw) == byte


@pytest.mark.parametrize("cls", [c for c, _, _ in BODIES] + [IPCMHeader, CMPath], ids=lambda c: c.__name__)
@settings(deadline=None)
@given(data=st.data())
def test_round_trip_headers(cls: type[Header], data: st.DataObject) -> None:
    raw = data.draw(st.binary(min_size=cls.LAYOUT.size, max_size=cls.LAYOUT.size))
    h = cls.decode(raw)
    assert h.encode() == raw and cls.decode(raw) == h
    for span in h.spans():
        assert span.text
    h.summary()
    h.ws_fields()


@settings(deadline=None)
@given(attr=st.sampled_from(sorted(CM_MESSAGES)), body=st.binary(min_size=232, max_size=232),
       tid=st.integers(0, 2**64 - 1))
def test_round_trip_messages(attr: int, body: bytes, tid: int) -> None:
    raw = MADHeader(tid=tid, attr_id=attr).encode() + body
    msg = CMMessage.decode(raw, lenient=True)
    assert msg.encode() == raw
    assert type(msg.body) is CM_MESSAGES[attr]
    assert CMMessage(msg.mad, msg.body, msg.private_data, msg.ip_cm).encode() == raw
    msg.summary()


def test_req_paths() -> None:
    path = CMPath.roce("10.0.0.1", "10.0.0.2", hop_limit=3, packet_rate=7)
    req = CMReq().with_paths(primary=path, alternate=path.replace(sl=5))
    assert req.primary_path == path and req.alternate_path == path.replace(sl=5)
    assert req.primary_local_gid == int(ipaddress.IPv6Address("::ffff:10.0.0.1"))
    assert req.encode()[56:72] == path.encode()[4:20]
    assert req.encode()[52:96] == path.encode()


# --------------------------------------------------------------------------- IP CM


def test_ip_cm_service_id() -> None:
    assert ip_cm_service_id(RPING_PORT) == 0x0000000001061C06 == (RDMA_PS_TCP << 16) + RPING_PORT
    assert parse_ip_cm_service_id(0x0000000001061C06) == (6, 7174)
    assert parse_ip_cm_service_id(0x0002C90300001234) is None
    with pytest.raises(EncodeError):
        ip_cm_service_id(70000)


def test_ip_cm_header_v4_and_v6() -> None:
    h4 = IPCMHeader.for_addresses("192.168.1.5", "192.168.1.6", 33000)
    raw = h4.encode()
    assert raw[:4] == bytes([0x00, 0x40, 33000 >> 8, 33000 & 0xFF])
    assert raw[16:20] == bytes([192, 168, 1, 5]) and raw[32:36] == bytes([192, 168, 1, 6]) and not any(raw[4:16])
    assert h4.src_address == ipaddress.IPv4Address("192.168.1.5")
    # the last 4 bytes count, whatever the first 12 hold (the vector uses ::ffff:a.b.c.d)
    assert IPCMHeader(src_ip=0xFFFF0A000001).src_address == ipaddress.IPv4Address("10.0.0.1")
    h6 = IPCMHeader.for_addresses("fd00::1", "fd00::2", 1)
    assert h6.encode()[1] == 0x60 and h6.dst_address == ipaddress.IPv6Address("fd00::2")
    assert "infiniband.cm.req.ip_cm.sip6" in h6.ws_fields() and "infiniband.cm.req.ip_cm.sip4" in h4.ws_fields()
    with pytest.raises(EncodeError):
        IPCMHeader.for_addresses("10.0.0.1", "fd00::2", 1)
    assert IPCMHeader(ipv=5).check()[0].field == "ipv"


# --------------------------------------------------------------------------- the vector


def read_pcap(path: str | Path) -> Iterator[bytes]:
    """Ethernet frames of a pcap/pcapng (Linux cooked captures are turned into Ethernet)."""
    import dpkt

    with open(path, "rb") as fh:
        magic = fh.read(4)
        fh.seek(0)
        reader = dpkt.pcapng.Reader(fh) if magic == b"\x0a\x0d\x0d\x0a" else dpkt.pcap.Reader(fh)
        link = reader.datalink()
        for _, buf in reader:
            if link == 1:
                yield bytes(buf)
            elif link == 113 and len(buf) > 16:  # SLL: ethertype at 14
                yield bytes(12) + bytes(buf[14:16]) + bytes(buf[16:])
            elif link == 276 and len(buf) > 20:  # SLL2: ethertype at 0
                yield bytes(12) + bytes(buf[0:2]) + bytes(buf[20:])


def cm_frames(frames: list[bytes]) -> list[tuple[bytes, CMMessage]]:
    out = []
    for f in frames:
        pkt = decode_ethernet(f, lenient=True)
        bth = pkt.get(BTH)
        if bth is not None and bth.destqp == 1 and pkt.get(MADHeader) is not None:
            mad_at = [layer.offset for layer in pkt.layers if isinstance(layer.header, MADHeader)][0]
            if pkt.get(MADHeader).mgmt_class == 7:  # type: ignore[union-attr]
                out.append((f, CMMessage.decode(f, mad_at)))
    return out


def test_vector_decodes() -> None:
    frame = next(read_pcap(VECTOR))
    pkt = decode_ethernet(frame)
    assert pkt.ok
    assert [layer.name for layer in pkt.layers][-4:] == ["DETH", "MAD", "CM_REQ", "IPCM"]
    assert pkt.payload == b"consumer-pd".ljust(56, b"\0")
    req = pkt[CMReq]
    assert req.local_comm_id == 0x11223344 and req.service_id == 0x0000000001064853
    assert req.local_ca_guid == 0x0002C90300A1B2C3 and req.local_qpn == 0x123 and req.starting_psn == 0x64
    assert (req.responder_resources, req.initiator_depth, req.path_mtu, req.max_cm_retries) == (16, 16, 3, 15)
    assert (req.primary_hop_limit, req.primary_subnet_local, req.primary_local_ack_timeout) == (64, 1, 0x12)
    assert req.primary_packet_rate == 3  # tshark 4.0 shows 0 here: see WIRESHARK_QUIRKS
    msg = CMMessage.decode(frame, MAD_AT)
    assert msg.encode() == frame[MAD_AT : MAD_AT + 256]
    assert (msg.src_ip, msg.dst_ip) == (ipaddress.IPv4Address("10.0.0.1"), ipaddress.IPv4Address("10.0.0.2"))
    assert (msg.src_port, msg.dst_port, msg.protocol) == (0x8235, 18515, 6)
    assert msg.tid == 0x112345678 and msg.name == "REQ"
    assert CMMessage.from_packet(pkt) == msg and CMMessage.from_packet(decode_ethernet(gsi_frame(bytes(256)), lenient=True)) is None


# --------------------------------------------------------------------------- builders


def rping_exchange() -> list[CMMessage]:
    req = build_req("10.0.0.1", "10.0.0.2", 40000, local_comm_id=0x1234ABCD, local_qpn=0x11,
                    starting_psn=0xABCDEF, local_ca_guid=0x0200_00FF_FE00_0001, private_data=b"hello")
    rep = build_rep(req, local_comm_id=0x55667788, local_qpn=0x22, starting_psn=0x123456,
                    local_ca_guid=0x0200_00FF_FE00_0002, private_data=b"rep")
    rtu = build_rtu(rep)
    dreq = build_dreq(0x1234ABCD, 0x55667788, 0x22)
    drep = build_drep(dreq)
    return [req, rep, rtu, dreq, drep]


def test_rdma_cm_exchange() -> None:
    req, rep, rtu, dreq, drep = rping_exchange()
    assert req.service_id == 0x0000000001061C06 and req.dst_port == RPING_PORT and req.src_port == 40000
    assert str(req.src_ip) == "10.0.0.1" and str(req.dst_ip) == "10.0.0.2"
    assert req.private_data == b"hello" and len(req.encode()) == 256
    assert CMMessage.decode(req.encode()).private_data == b"hello".ljust(56, b"\0")
    r = req.body
    assert isinstance(r, CMReq)
    assert (r.remote_cm_response_timeout, r.local_cm_response_timeout, r.max_cm_retries, r.p_key) == (20, 20, 15, 0xFFFF)
    assert (r.primary_local_lid, r.primary_remote_lid) == (0xFFFF, 0xFFFF)
    assert rep.tid == req.tid == rtu.tid and (rep.remote_comm_id, rep.local_comm_id) == (0x1234ABCD, 0x55667788)
    assert (rtu.local_comm_id, rtu.remote_comm_id) == (0x1234ABCD, 0x55667788)
    assert drep.tid == dreq.tid and (drep.local_comm_id, drep.remote_comm_id) == (0x55667788, 0x1234ABCD)
    assert isinstance(rep.body, CMRep) and (rep.body.responder_resources, rep.body.initiator_depth) == (1, 1)
    for m in (req, rep, rtu, dreq, drep):
        assert m.mad.mgmt_class == 7 and m.mad.class_version == 2 and m.mad.method == 3
        assert CMMessage.decode(m.encode()) == CMMessage.decode(m.encode())
        assert CMMessage.decode(m.encode()).body == m.body


def test_rej_and_mra() -> None:
    req = rping_exchange()[0]
    rej = build_rej(req, REJ_CONSUMER_DEFINED, local_comm_id=9, ari=b"\x01\x02", private_data=b"no")
    body = rej.body
    assert isinstance(body, CMRej)
    assert body.reason_name == "Consumer Reject" and body.ari_bytes == b"\x01\x02" and body.message_rejected == 0
    assert body.remote_comm_id == 0x1234ABCD and "Consumer Reject" in rej.summary()
    assert len(REJ_REASON_NAMES) == 34
    mra = build_mra(req, local_comm_id=9, service_timeout=17)
    assert isinstance(mra.body, CMMra) and mra.body.service_timeout == 17 and mra.tid == req.tid
    with pytest.raises(EncodeError):
        build_rej(req, 1, ari=bytes(73))


def test_gsi_frame_decodes() -> None:
    for msg in rping_exchange():
        frame = gsi_frame(msg, psn=3)
        pkt = decode_ethernet(frame)
        assert pkt.ok and pkt.crc_status == "good"
        assert pkt[BTH].opcode == 0x64 and pkt[BTH].destqp == 1 and pkt[DETH].q_key == 0x80010000
        assert pkt[DETH].src_qp == 1 and len(frame) - MAD_AT - 4 == 256
        assert pkt.get(type(msg.body)) == msg.body
        assert CMMessage.decode(frame, MAD_AT) == msg.__class__.decode(msg.encode())


# --------------------------------------------------------------------------- errors and fuzz


def test_errors_name_layer_field_offset() -> None:
    req = rping_exchange()[0].encode()
    with pytest.raises(TruncatedError) as t:
        CMMessage.decode(req[:100])
    assert t.value.layer == "MAD"
    with pytest.raises(TruncatedError) as t:
        CMMessage.decode(req[:60], lenient=True)
    assert t.value.layer == "CM"
    bad = bytearray(req)
    bad[1] = 0x04
    with pytest.raises(MalformedError) as m:
        CMMessage.decode(bytes(bad))
    assert (m.value.field, m.value.offset, m.value.value) == ("mgmt_class", 1, 4)
    bad = bytearray(req)
    bad[2] = 1
    with pytest.raises(MalformedError) as m:
        CMMessage.decode(bytes(bad))
    assert m.value.field == "class_version"
    assert CMMessage.decode(bytes(bad), lenient=True).problems[0].field == "class_version"
    bad = bytearray(req)
    bad[24 + 140 + 1] = 0x70  # IP CM version 7
    with pytest.raises(MalformedError) as m:
        CMMessage.decode(bytes(bad))
    assert (m.value.layer, m.value.field, m.value.offset) == ("IPCM", "ipv", 24 + 140 + 1)
    with pytest.raises(EncodeError):
        cm_mad(CMRtu(), 1, bytes(225))
    with pytest.raises(EncodeError):
        cm_mad(CMRtu(local_comm_id=2**32), 1)
    with pytest.raises(EncodeError):
        CMMessage(MADHeader(attr_id=0x10), CMRtu()).encode()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fuzz_mutated_cm_mads(data: st.DataObject) -> None:
    base = bytearray(data.draw(st.sampled_from(rping_exchange())).encode())
    for _ in range(data.draw(st.integers(1, 8))):
        base[data.draw(st.integers(0, 255))] = data.draw(st.integers(0, 255))
    raw = bytes(base[: data.draw(st.integers(0, 256))])
    for lenient in (False, True):
        try:
            CMMessage.decode(raw, lenient=lenient)
        except DecodeError:
            pass
    frame = gsi_frame(raw)
    try:
        decode_ethernet(frame)
    except DecodeError:
        pass
    pkt = decode_ethernet(frame, lenient=True)
    for layer in pkt.layers:
        layer.header.summary()


# --------------------------------------------------------------------------- tshark

needs_tshark = pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark (Wireshark) is not installed")
EXPERT_OK = {"Illegal checksum value (0)"}  # UDP over IPv6 with checksum 0, as rxe sends it


def run_tshark(path: str | Path) -> list[dict[str, list[int | str]]]:
    """Every field tshark shows for each frame: name -> values (ints where typed)."""
    types = field_types()
    out = subprocess.run(["tshark", "-r", str(path), "-T", "json"], capture_output=True, text=True, check=True).stdout
    result = []
    for pkt in json.loads(out, object_pairs_hook=lambda pairs: pairs):
        flat: dict[str, list[int | str]] = {}

        def walk(node: object, flat: dict[str, list[int | str]] = flat) -> None:
            if isinstance(node, list):
                for item in node:
                    if isinstance(item, tuple) and isinstance(item[1], str):
                        key, val = item
                        kind = types.get(key)
                        flat.setdefault(key, []).append(val if kind is None else field_value(kind, val))
                    elif isinstance(item, tuple):
                        walk(item[1])
                    else:
                        walk(item)

        walk(pkt)
        result.append(flat)
    return result


def tshark_frames(frames: list[bytes]) -> list[dict[str, list[int | str]]]:
    from rdmalab.capture.pcapwriter import write_capture

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "cm.pcap")
        write_capture(path, [(i * 10**9, f) for i, f in enumerate(frames)])
        return run_tshark(path)


def quirk_values(msg: CMMessage) -> dict[str, int]:
    """What tshark 4.0 shows for the fields it reads from the wrong bytes (WIRESHARK_QUIRKS)."""
    if not isinstance(msg.body, CMReq):
        return {}
    raw = msg.body.encode()
    out = {}
    for prefix, at in (("prim", 88), ("alt", 132)):
        out[f"infiniband.cm.req.{prefix}_flowlabel"] = int.from_bytes(raw[at : at + 3], "big") >> 12
        out[f"infiniband.cm.req.{prefix}_reserved0"] = raw[at] >> 6
        out[f"infiniband.cm.req.{prefix}_pktrate"] = raw[at] & 0x3F
    return out


def assert_tshark_agrees(msg: CMMessage, fields: dict[str, list[int | str]], ipv4_frame: bool) -> None:
    assert "_ws.malformed" not in fields, fields["_ws.malformed"]
    assert set(map(str, fields.get("_ws.expert.message", []))) <= EXPERT_OK
    want = msg.ws_fields()
    want.update(msg.mad.ws_fields())
    if isinstance(msg.body, CMReq):
        # tshark shows the primary GIDs as IPv4 exactly when the frame is IPv4 (WIRESHARK_QUIRKS)
        for name in ("localgid", "remotegid"):
            gid = getattr(msg.body, f"primary_{name[:-3]}_gid")
            want.pop(f"infiniband.cm.req.prim_{name}", None)
            want.pop(f"infiniband.cm.req.prim_{name}_ipv4", None)
            if ipv4_frame:
                want[f"infiniband.cm.req.prim_{name}_ipv4"] = gid & 0xFFFFFFFF
            else:
                want[f"infiniband.cm.req.prim_{name}"] = gid
    want.update(quirk_values(msg))
    for name, value in want.items():
        if name.startswith("rdmalab."):
            continue  # MRA and SIDR: tshark 4.0 has no fields for them
        if isinstance(msg.body, CMSidrReq) and name.startswith("infiniband.cm.req.ip_cm"):
            continue  # tshark 4.0 does not decode the SIDR_REQ's IP CM private data
        assert name in fields, f"tshark has no {name}"
        assert fields[name][0] == value, f"{name}: tshark {fields[name][0]!r}, rdmalab {value!r}"
    # and every CM field tshark shows (private data blobs aside) is one we decode
    ours = set(want) | set(WIRESHARK_QUIRKS)
    blobs = ("private", "infiniband.cm.req.ip_cm", "infiniband.cm.req.serviceid")
    theirs = {n for n in fields if n.startswith("infiniband.cm") and not n.endswith(("_tree", *blobs))}
    assert theirs <= ours, theirs - ours


def all_messages() -> list[CMMessage]:
    msgs = rping_exchange()
    req = msgs[0]
    r = req.body
    assert isinstance(r, CMReq)
    odd = CMMessage(req.mad, r.replace(
        primary_flow_label=0xABCDE, primary_packet_rate=0x15, primary_traffic_class=0x77, primary_sl=9,
        alternate_local_lid=7, alternate_remote_lid=8, alternate_local_gid=0xFE80 << 112 | 1,
        alternate_remote_gid=0xFE80 << 112 | 2, alternate_flow_label=0x12345, alternate_packet_rate=0x21,
        alternate_traffic_class=5, alternate_hop_limit=9, alternate_sl=3, alternate_subnet_local=1,
        alternate_local_ack_timeout=14, local_qkey=0xDEADBEEF, local_eecn=0x1234, remote_eecn=0x4321,
        e2e_flow_control=1, transport_service_type=1, rdc_exists=1, srq=1, ext_transport_type=2,
        vendor_id=0x123456,
    ), req.private_data, req.ip_cm)
    rep = msgs[1]
    assert isinstance(rep.body, CMRep)
    odd_rep = CMMessage(rep.mad, rep.body.replace(local_qkey=0xBEEF, local_eecn=0x999, e2e_flow_control=1,
                                                 failover_accepted=2, srq=1, target_ack_delay=0x11), b"x")
    rej = build_rej(req, REJ_CONSUMER_DEFINED, local_comm_id=9, ari=bytes(range(1, 21)), private_data=b"nope")
    mra = build_mra(req, local_comm_id=9, service_timeout=17)
    sidr = cm_mad(CMSidrReq(request_id=5, service_id=ip_cm_service_id(7174, 17)), 77,
                  ip_cm=IPCMHeader.for_addresses("1.2.3.4", "5.6.7.8", 99))
    sidr_rep = cm_mad(CMSidrRep(request_id=5, qpn=0x33, service_id=5, qkey=0x1111), 77)
    return [*msgs, odd, odd_rep, rej, mra, sidr, sidr_rep]


@needs_tshark
def test_tshark_on_the_vector() -> None:
    frame = next(read_pcap(VECTOR))
    msg = CMMessage.decode(frame, MAD_AT)
    assert_tshark_agrees(msg, run_tshark(VECTOR)[0], ipv4_frame=True)


@needs_tshark
@pytest.mark.parametrize("ipv6", [False, True], ids=["ipv4", "ipv6"])
def test_tshark_on_built_messages(ipv6: bool) -> None:
    msgs = all_messages()
    if ipv6:
        msgs[0] = build_req("fd00::1", "fd00::2", 40000, local_comm_id=1, local_qpn=2, starting_psn=3)
        addrs = {"src_ip": "fd00::1", "dst_ip": "fd00::2"}
    else:
        addrs = {}
    frames = [gsi_frame(m, psn=i, **addrs) for i, m in enumerate(msgs)]
    for msg, frame, fields in zip(msgs, frames, tshark_frames(frames), strict=True):
        assert CMMessage.decode(frame, MAD_AT + (20 if ipv6 else 0)) == msg.__class__.decode(msg.encode())
        assert_tshark_agrees(msg, fields, ipv4_frame=not ipv6)


def _captures() -> list[str]:
    return sorted(glob.glob(str(CAPTURES / "rxe_rping*.pcap*")) + glob.glob(str(CAPTURES / "*cm*.pcap*")))


@pytest.mark.skipif(not _captures(), reason="no real rping captures in captures/ yet (rxe_rping*.pcap)")
def test_real_rping_captures() -> None:
    seen = 0
    for path in _captures():
        frames = list(read_pcap(path))
        found = cm_frames(frames)
        fields = run_tshark(path) if shutil.which("tshark") and path.endswith(".pcap") else None
        by_frame = {id(f): i for i, f in enumerate(frames)}
        for frame, msg in found:
            seen += 1
            pkt = decode_ethernet(frame)
            assert pkt.ok, pkt.problems
            mad_at = [layer.offset for layer in pkt.layers if isinstance(layer.header, MADHeader)][0]
            assert msg.encode() == frame[mad_at : mad_at + 256]
            if isinstance(msg.body, CMReq) and msg.ip_cm is not None:
                ip = pkt.layers[1].header  # the active side's cma_hdr holds the real addresses
                assert isinstance(ip, (IPv4, IPv6))
                assert (int(msg.src_ip or 0), int(msg.dst_ip or 0)) == (ip.src, ip.dst)
            if fields is not None:
                assert_tshark_agrees(msg, fields[by_frame[id(frame)]], ipv4_frame=frame[12:14] == b"\x08\x00")
    if not seen:
        pytest.skip("the captures hold no CM MADs")
