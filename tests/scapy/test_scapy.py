"""rdmalab.scapy: scapy layers generated from rdmalab's declarations, and conversion both ways.

For every opcode of the opcode table and every encapsulation: a frame built by rdmalab is
dissected by scapy into the same headers with the same field values and the same bytes, and a
frame built with scapy decodes in rdmalab with a good ICRC.
"""

from __future__ import annotations

import logging
from pathlib import Path

import dpkt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw, bind_layers

from rdmalab import scapy as rs
from rdmalab.wire import ib
from rdmalab.wire.frame import decode_ethernet, decode_ib, encode_rocev1, encode_rocev2, gsi_frame
from rdmalab.wire.header import Header
from rdmalab.wire.opcodes import OPCODES
from rdmalab.wire.packet import encode_ib

CAPTURES = Path(__file__).resolve().parents[2] / "captures"

# contrib.roce's BTH warns when it cannot compute a RoCEv1/IB ICRC; fix_crcs does that.
logging.getLogger("scapy.runtime").setLevel(logging.ERROR)


def eth(**kw: object) -> Packet:
    """An Ethernet header with fixed addresses (scapy would otherwise resolve them)."""
    return Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01", **kw)


def _value(bits: int, seed: int) -> int:
    """A deterministic, non-trivial value that fits ``bits``."""
    return (0x9E3779B97F4A7C15F39CC0605CEDC834 * (seed + 1)) % (1 << bits)


def sample_headers(code: int, draw: st.DrawFn | None = None) -> list[Header]:
    """The headers the opcode table lists for ``code``, with non-default field values."""
    out: list[Header] = []
    for n, cls in enumerate(OPCODES[code].headers):
        if draw is None:
            vals = {f.name: _value(f.bits, n * 31 + i) for i, f in enumerate(cls.LAYOUT.fields)}
            if cls is ib.DETH:
                vals["src_qp"] |= 0x100  # not QP0/QP1: their payloads are MADs
        else:
            vals = {f.name: draw(st.integers(0, f.mask)) for f in cls.LAYOUT.fields}
        if cls is ib.CNPPad:
            vals["reserved"] = 0
        if cls is ib.AETH and vals["type"] == ib.AETH_RESERVED:
            vals["type"] = ib.AETH_NAK  # type 2 is reserved: strict decoding rejects it
        out.append(cls(**vals))
    return out


def payload_for(code: int, n: int = 5) -> bytes:
    return bytes(range(1, n + 1)) if OPCODES[code].payload else b""


ENCAPS = ["rocev2-ipv4", "rocev2-ipv6", "rocev1", "ib-lrh", "ib-grh"]


def rdmalab_frame(encap: str, bth: ib.BTH, headers: list[Header], payload: bytes) -> bytes:
    if encap == "rocev2-ipv4":
        return encode_rocev2(bth, headers, payload, src_port=0xC123)
    if encap == "rocev2-ipv6":
        return encode_rocev2(bth, headers, payload, ipv6=True, src_ip="fe80::1", dst_ip="fe80::2", flowlabel=0x12345)
    if encap == "rocev1":
        return encode_rocev1(bth, headers, payload, grh=ib.GRH(sgid=1, dgid=2, hoplmt=1))
    if encap == "ib-lrh":
        return encode_ib(bth, headers, payload, lrh=ib.LRH(sl=3, dlid=5, slid=7))
    return encode_ib(bth, headers, payload, lrh=ib.LRH(dlid=5, slid=7), grh=ib.GRH(sgid=3, dgid=4))


def decode(encap: str, data: bytes):  # type: ignore[no-untyped-def]
    return decode_ib(data) if encap.startswith("ib") else decode_ethernet(data)


def transport_layers(spkt: Packet) -> list[Packet]:
    """The scapy layers from the BTH on."""
    bth = spkt.getlayer(rs.BTH)
    assert bth is not None, spkt.summary()
    out = []
    layer = bth
    while layer:
        out.append(layer)
        layer = layer.payload
    return out


# ============================================================================ generation


@pytest.mark.parametrize("header", [
    ib.RETH, ib.DETH, ib.RDETH, ib.ImmDt, ib.IETH, ib.AtomicETH, ib.AtomicAckETH, ib.XRCETH, ib.FETH, ib.LRH,
])
def test_generated_layer_matches_declaration(header: type[Header]) -> None:
    layer = rs.scapy_class(header)
    declared = [(f.name, f.bits) for f in header.LAYOUT.fields]
    generated = [(fd.name, fd.size if hasattr(fd, "size") else fd.sz * 8) for fd in layer.fields_desc
                 if fd.name not in ("vcrc",)]
    assert declared == generated
    vals = {f.name: _value(f.bits, i) for i, f in enumerate(header.LAYOUT.fields)}
    h = header(**vals)
    s = rs.layer_from_header(h)
    if header is ib.LRH:
        assert bytes(s)[:8] == h.encode()
    else:
        assert bytes(s) == h.encode()
        assert rs.header_from_layer(layer(h.encode())) == h
    assert rs.header_from_layer(s) == h


@pytest.mark.parametrize("header", [ib.BTH, ib.GRH, ib.AETH, ib.CNPPad])
def test_contrib_layers_convert(header: type[Header]) -> None:
    vals = {f.name: _value(f.bits, i) for i, f in enumerate(header.LAYOUT.fields)}
    h = header(**vals)
    s = rs.layer_from_header(h)
    assert rs.header_from_layer(s) == h
    if header is not ib.BTH:  # contrib's BTH appends its ICRC
        assert bytes(s) == h.encode()


def test_contrib_classes_are_reused() -> None:
    from scapy.contrib import roce

    assert rs.BTH is roce.BTH and rs.GRH is roce.GRH and rs.AETH is roce.AETH
    assert rs.scapy_class(ib.BTH) is roce.BTH


# ============================================================================ rdmalab -> scapy


@pytest.mark.parametrize("encap", ENCAPS)
@pytest.mark.parametrize("code", sorted(OPCODES), ids=[f"0x{c:02x}" for c in sorted(OPCODES)])
def test_rdmalab_frame_dissected_by_scapy(code: int, encap: str) -> None:
    info = OPCODES[code]
    headers = sample_headers(code)
    payload = payload_for(code)
    data = rdmalab_frame(encap, ib.BTH(opcode=code, destqp=0x123456, psn=0xABCDE, ackreq=1), headers, payload)
    rd = decode(encap, data)
    assert rd.crc_status == "good"
    spkt = rs.to_scapy(rd)
    assert bytes(spkt) == data
    assert rs.compare_layers(spkt, rd) == []
    layers = transport_layers(spkt)
    want = [rs.BTH, *(rs.scapy_class(h) for h in info.headers)]
    if payload:
        want.append(Raw)
    assert [type(x) for x in layers] == want
    for x, h in zip(layers[1:], headers, strict=False):
        assert rs.header_from_layer(x) == h
        assert x.fields == rs.layer_from_header(h).fields
    assert rs.scapy_payload(spkt) == payload + b"\0" * (-len(payload) % 4)
    assert rs.scapy_icrc(spkt) == rd.crc
    # and back
    again = rs.from_scapy(spkt)
    assert again.data == data and again.crc_status == "good"
    assert [type(x.header) for x in again.layers] == [type(x.header) for x in rd.layers]


# ============================================================================ scapy -> rdmalab


def scapy_transport(code: int, headers: list[Header], payload: bytes) -> Packet:
    pad = -len(payload) % 4
    p: Packet = rs.BTH(opcode=code, padcount=pad, dqpn=0x42, psn=9, pkey=0x8001)
    for h in headers:
        p = p / rs.layer_from_header(h)
    if payload:
        p = p / Raw(payload + b"\0" * pad)
    return p


@pytest.mark.parametrize("encap", ENCAPS)
@pytest.mark.parametrize("code", sorted(OPCODES), ids=[f"0x{c:02x}" for c in sorted(OPCODES)])
def test_scapy_frame_decoded_by_rdmalab(code: int, encap: str) -> None:
    headers = sample_headers(code)
    payload = payload_for(code, 7)
    body = scapy_transport(code, headers, payload)
    spkt: Packet
    if encap == "rocev2-ipv4":
        spkt = eth() / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=49152, dport=4791) / body
    elif encap == "rocev2-ipv6":
        spkt = eth() / IPv6(src="fe80::1", dst="fe80::2", fl=7) / UDP(sport=49152, dport=4791) / body
    elif encap == "rocev1":
        spkt = rs.fix_crcs(eth(type=0x8915) / rs.GRH(nexthdr=0x1B, hoplmt=64, flowlabel=0) / body)
    elif encap == "ib-lrh":
        spkt = rs.LRH(dlid=1, slid=2) / body
    else:
        spkt = rs.LRH(dlid=1, slid=2) / rs.GRH(nexthdr=0x1B, flowlabel=0) / body
    rd = rs.from_scapy(spkt)
    assert rd.data == bytes(spkt)
    assert rd.crc_status == "good", rd.problems
    if encap.startswith("ib"):
        assert rd.vcrc_status == "good"
    assert rd.ok
    assert rd.bth == ib.BTH(opcode=code, padcnt=-len(payload) % 4, destqp=0x42, psn=9, p_key=0x8001)
    assert [layer.header for layer in rd.layers if type(layer.header) in OPCODES[code].headers] == headers
    assert rd.payload == payload
    assert rs.compare_layers(Ether(rd.data) if not encap.startswith("ib") else rs.LRH(rd.data), rd) == []


def test_example_from_the_docs() -> None:
    p = (eth() / IP() / UDP(sport=49152, dport=4791) / rs.BTH(opcode=0x0A)
         / rs.RETH(va=0x1000, r_key=7, dma_length=4) / Raw(b"abcd"))
    data = bytes(p)
    again = Ether(data)
    assert again.haslayer(rs.RETH) and again[rs.RETH].va == 0x1000 and again[Raw].load == b"abcd"
    rd = decode_ethernet(data)
    assert rd.crc_status == "good"
    assert rd[ib.RETH] == ib.RETH(va=0x1000, r_key=7, dma_length=4)


def test_default_udp_source_port_is_not_dns() -> None:
    """UDP() defaults to sport=53: contrib.roce alone dissects the frame as DNS."""
    data = bytes(eth() / IP() / UDP() / rs.BTH(opcode=0x64) / rs.DETH(q_key=1, src_qp=2) / Raw(b"xxxx"))
    spkt = Ether(data)
    assert spkt[UDP].sport == 53 and spkt.haslayer(rs.DETH)


def test_contrib_behaviour_kept() -> None:
    from scapy.contrib import roce

    spkt = Ether(bytes(eth() / IP() / UDP(sport=1, dport=4791) / roce.cnp(0x17)))
    assert spkt.haslayer(roce.CNPPadding) and spkt[rs.BTH].dqpn == 0x17
    assert decode_ethernet(bytes(spkt)).crc_status == "good"
    ack = Ether(bytes(eth() / IP() / UDP(sport=1, dport=4791) / rs.BTH() / rs.AETH(syndrome=0x1F, msn=3)))
    assert ack[rs.BTH].opcode == 0x11 and ack[rs.AETH].msn == 3  # RC ACK, not contrib's RD 0x51
    rd_ack = encode_rocev2(ib.BTH(opcode=0x51), [ib.RDETH(ee_context=5), ib.AETH.ack(9)])
    layers = transport_layers(Ether(rd_ack))
    assert [type(x) for x in layers] == [rs.BTH, rs.RDETH, rs.AETH]  # contrib alone: BTH/AETH


def test_new_opcodes_are_named() -> None:
    assert "XRC_SEND_FIRST" in repr(rs.BTH(opcode=0xA0))
    assert "FLUSH" in repr(rs.BTH(opcode=0x1C))


def test_short_frames_do_not_raise() -> None:
    data = encode_rocev2(ib.BTH(opcode=0x13), [ib.AtomicETH(va=1)])
    cut = Ether(data[:-10])
    assert not cut.haslayer(rs.AtomicETH)


def test_to_scapy_from_bytes_and_ip() -> None:
    data = encode_rocev2(ib.BTH(opcode=0x04), [], b"hello")
    assert bytes(rs.to_scapy(data)) == data
    ip_only = data[14:]
    s = rs.to_scapy(ip_only, first="ip")
    assert isinstance(s, IP) and bytes(s) == ip_only
    assert rs.from_scapy(s).crc_status == "good"
    with pytest.raises(TypeError):
        rs.from_scapy(Raw(b"abc"))


def test_fix_crcs_rocev1_and_ib() -> None:
    v1 = eth(type=0x8915) / rs.GRH(nexthdr=0x1B) / rs.BTH(opcode=0x04) / Raw(b"abcd")
    assert decode_ethernet(bytes(v1), lenient=True).crc_status == "bad"
    assert decode_ethernet(bytes(rs.fix_crcs(v1))).crc_status == "good"
    ibp = rs.LRH(dlid=3) / rs.BTH(opcode=0x04, icrc=0) / Raw(b"abcd")
    fixed = rs.fix_crcs(ibp)
    rd = decode_ib(bytes(fixed))
    assert rd.crc_status == rd.vcrc_status == "good"


def test_user_bindings_still_work() -> None:
    class Custom(Packet):
        name = "Custom"
        fields_desc: list = []  # type: ignore[type-arg]

    bind_layers(UDP, Custom, dport=9999)
    assert isinstance(Ether(bytes(eth() / IP() / UDP(sport=1, dport=9999) / Raw(b"x")))[UDP].payload, Custom)


# ============================================================================ captures


def _frames(name: str) -> list[tuple[int, bytes]]:
    path = CAPTURES / name
    if not path.exists():
        pytest.skip(f"{path} not present")
    with open(path, "rb") as f:
        reader = dpkt.pcap.Reader(f)
        return [(reader.datalink(), bytes(buf)) for _, buf in reader]


@pytest.mark.parametrize("name", ["synthetic_rocev2.pcap", "public_hw_byte_vectors.pcap", "synthetic_rocev2_cm_req.pcap"])
def test_captures_agree(name: str) -> None:
    n = 0
    for linktype, data in _frames(name):
        if linktype != 1:
            continue
        rd = decode_ethernet(data, lenient=True)
        if rd.bth is None:
            continue
        spkt = rs.to_scapy(rd)
        assert bytes(spkt) == data
        assert rs.compare_layers(spkt, rd) == [], rd.summary()
        n += 1
    assert n


# ============================================================================ properties


@st.composite
def transport_packets(draw: st.DrawFn) -> tuple[ib.BTH, list[Header], bytes]:
    code = draw(st.sampled_from(sorted(OPCODES)))
    vals = {f.name: draw(st.integers(0, f.mask)) for f in ib.BTH.LAYOUT.fields}
    vals.update(opcode=code, tver=0, destqp=max(2, vals["destqp"]))
    bth = ib.BTH(**vals)
    headers = [h.replace(src_qp=max(2, h.src_qp)) if isinstance(h, ib.DETH) else h for h in sample_headers(code, draw)]
    payload = draw(st.binary(max_size=64)) if OPCODES[code].payload else b""
    return bth, headers, payload


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(transport_packets(), st.sampled_from(ENCAPS))
def test_roundtrip_rdmalab_scapy_rdmalab(sample: tuple[ib.BTH, list[Header], bytes], encap: str) -> None:
    bth, headers, payload = sample
    data = rdmalab_frame(encap, bth, headers, payload)
    rd = decode(encap, data)
    spkt = rs.to_scapy(rd)
    assert bytes(spkt) == data
    assert rs.compare_layers(spkt, rd) == []
    back = rs.from_scapy(spkt)
    assert back.data == data and back.layers == rd.layers and back.crc_status == "good"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(transport_packets(), st.booleans())
def test_roundtrip_scapy_rdmalab(sample: tuple[ib.BTH, list[Header], bytes], v6: bool) -> None:
    bth, headers, payload = sample
    pad = -len(payload) % 4
    body: Packet = rs.layer_from_header(bth.replace(padcnt=pad))
    for h in headers:
        body = body / rs.layer_from_header(h)
    if payload:
        body = body / Raw(payload + b"\0" * pad)
    l3 = IPv6(src="::1", dst="::2") if v6 else IP(src="1.2.3.4", dst="5.6.7.8")
    spkt = eth() / l3 / UDP(sport=1000, dport=4791) / body
    rd = rs.from_scapy(spkt)
    assert rd.crc_status == "good" and rd.ok
    assert rd.bth == bth.replace(padcnt=pad)
    assert [layer.header for layer in rd.layers[4:]] == headers
    assert rd.payload == payload
    assert rs.compare_layers(Ether(rd.data), rd) == []


# ============================================================================ MAD / CM

from rdmalab.wire import cm, iwarp, mad, mpa, rdmap  # noqa: E402


def cm_messages() -> list[cm.CMMessage]:
    req = cm.build_req("10.0.0.1", "10.0.0.2", 40000, local_comm_id=0x1234, local_qpn=0x11, starting_psn=5,
                       private_data=b"consumer")
    rep = cm.build_rep(req, local_comm_id=0x5678, local_qpn=0x22, starting_psn=9, private_data=b"ok")
    dreq = cm.build_dreq(0x1234, 0x5678, 0x22)
    out = [
        req, rep, cm.build_rtu(rep), dreq, cm.build_drep(dreq),
        cm.build_rej(req, cm.REJ_CONSUMER_DEFINED, local_comm_id=0x5678, private_data=b"no"),
        cm.build_mra(req, local_comm_id=0x5678),
    ]
    return out


def test_cm_messages_roundtrip() -> None:
    msgs = cm_messages()
    assert len(msgs) >= 2
    seen = set()
    for msg in msgs:
        data = gsi_frame(msg)
        rd = decode_ethernet(data)
        spkt = rs.to_scapy(rd)
        assert bytes(spkt) == data
        assert rs.compare_layers(spkt, rd) == [], spkt.summary()
        assert spkt.haslayer(rs.MAD) and spkt[rs.MAD].attr_id == msg.mad.attr_id
        body = rs.scapy_class(type(msg.body))
        assert spkt.haslayer(body) and rs.header_from_layer(spkt[body]) == msg.body
        seen.add(body)
        back = rs.from_scapy(spkt)
        assert back.data == data and back.crc_status == "good"
        again = cm.CMMessage.from_packet(back)
        assert again is not None and again.encode() == msg.encode()
    assert seen >= {rs.CMReq, rs.CMRep, rs.CMRtu, rs.CMDreq, rs.CMDrep, rs.CMRej, rs.CMMra}


def test_cm_req_built_with_scapy() -> None:
    req = cm_messages()[0]
    ipcm = req.ip_cm
    assert ipcm is not None
    layers = (rs.BTH(opcode=0x64, dqpn=1) / rs.DETH(q_key=ib.GSI_QKEY, src_qp=1) / rs.layer_from_header(req.mad)
              / rs.layer_from_header(req.body) / rs.layer_from_header(ipcm)
              / Raw(req.encode()[mad.MAD_HEADER_SIZE + req.body.LAYOUT.size + ipcm.LAYOUT.size :]))
    spkt = eth() / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=49152, dport=4791) / layers
    rd = rs.from_scapy(spkt)
    assert rd.crc_status == "good" and rd.ok
    again = cm.CMMessage.from_packet(rd)
    assert again is not None and again.encode() == req.encode()
    assert [type(x.header) for x in rd.layers][-4:] == [ib.DETH, mad.MADHeader, cm.CMReq, cm.IPCMHeader]


def test_rmpp_and_other_classes() -> None:
    sa = mad.MADHeader(mgmt_class=mad.MGMT_CLASS_SA, class_version=2, method=mad.METHOD_GET_TABLE, attr_id=0x35)
    rmpp = mad.RMPPHeader(type=mad.RMPP_TYPE_DATA, flags=7, data1=1, data2=56)
    body = sa.encode() + rmpp.encode()
    payload = body + bytes(mad.MAD_SIZE - len(body))
    data = encode_rocev2(ib.BTH(opcode=0x64, destqp=1), [ib.DETH(q_key=ib.GSI_QKEY, src_qp=1)], payload)
    spkt = Ether(data)
    assert spkt.haslayer(rs.RMPP) and rs.header_from_layer(spkt[rs.RMPP]) == rmpp
    assert rs.compare_layers(spkt, decode_ethernet(data)) == []
    perf = mad.MADHeader(mgmt_class=mad.MGMT_CLASS_PERF, class_version=1, method=mad.METHOD_GET, attr_id=0x12)
    data = encode_rocev2(ib.BTH(opcode=0x64, destqp=1), [ib.DETH(q_key=ib.GSI_QKEY, src_qp=1)],
                         perf.encode() + bytes(232))
    spkt = Ether(data)
    assert isinstance(spkt[rs.MAD].payload, Raw)
    assert rs.compare_layers(spkt, decode_ethernet(data)) == []


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_mad_headers_roundtrip(data: st.DataObject) -> None:
    for cls in (mad.MADHeader, mad.RMPPHeader, cm.IPCMHeader, *cm.CM_MESSAGES.values()):
        vals = {f.name: data.draw(st.integers(0, f.mask)) for f in cls.LAYOUT.fields}
        h = cls(**vals)
        layer = rs.scapy_class(cls)
        assert bytes(rs.layer_from_header(h))[: cls.LAYOUT.size] == h.encode()
        assert rs.header_from_layer(layer(h.encode())) == h


# ============================================================================ iWARP


def ulpdus() -> list[bytes]:
    return [
        iwarp.rdma_write(0x11, 0x2000, b"abcdefg"),
        iwarp.read_request(1, 2, 3, 4, 5, msn=2),
        iwarp.read_response(0x11, 0x2000, b"data"),
        iwarp.send(b"hello world", se=True, inv_stag=0x99),
        iwarp.send(b"", msn=7),
        iwarp.terminate(1, 2, 3, ddp_seg_len=40, terminated_ddp=iwarp.send(b"x")[:18], terminated_rdmap=bytes(28)),
        iwarp.terminate(1, 1, 3, ddp_seg_len=40, terminated_ddp=iwarp.rdma_write(1, 2, b"x")[:14]),
        iwarp.terminate(0, 2, 6),
        iwarp.atomic_request(rdmap.ATOMIC_CMP_SWAP, 7, 1, 2, 3, 4, 5, 6),
        iwarp.atomic_response(7, 0x55),
        iwarp.immediate_data(0x1234, se=True),
        b"",
    ]


@pytest.mark.parametrize("markers", [None, 0, 500])
@pytest.mark.parametrize("index", range(len(ulpdus())))
def test_fpdu_rdmalab_to_scapy(index: int, markers: int | None) -> None:
    wire = iwarp.encode_fpdu(ulpdus()[index], markers=markers)
    rd, used = iwarp.decode_fpdu(wire, markers=markers)
    assert rd.crc_status == "good" and rd.ok
    spkt = rs.to_scapy(rd)
    assert bytes(spkt) == rd.data
    assert rs.compare_layers(spkt, rd) == []
    assert spkt.crc == rd.crc and spkt.pad == rd.data[2 + spkt.ulpdu_length : rd.crc_offset]
    assert rs.scapy_payload(spkt) == rd.payload
    again, n = rs.dissect_fpdu(wire, markers=markers)
    assert n == used == len(wire) and bytes(again) == rd.data
    back = rs.from_scapy(spkt)
    assert back.layers == rd.layers and back.crc == rd.crc
    if markers is None:
        assert bytes(spkt) == wire and back.crc_status == "good"
    else:  # the CRC covers the markers, which the marker-free FPDU lacks
        assert back.crc_status == ("bad" if rd.markers else "good")


def test_fpdu_built_with_scapy() -> None:
    cases: list[Packet] = [
        rs.DDPTagged(stag=5, to=0x1000, opcode=rdmap.OP_WRITE) / Raw(b"abcde"),
        rs.DDPUntagged(opcode=rdmap.OP_READ_REQUEST, qn=1, msn=3) / rs.ReadRequest(sink_stag=1, size=64, src_stag=2),
        rs.DDPUntagged(opcode=rdmap.OP_SEND_INVALIDATE, inval_stag=0x77, msn=1) / Raw(b"x" * 9),
        rs.DDPUntagged(opcode=rdmap.OP_ATOMIC_RESPONSE, qn=3) / rs.AtomicResponse(req_id=1, value=2),
        rs.DDPUntagged(opcode=rdmap.OP_TERMINATE, qn=2) / rs.Terminate(layer=2, etype=0, errcode=2),
    ]
    for ulpdu in cases:
        spkt = rs.FPDU() / ulpdu
        data = bytes(spkt)
        assert len(data) % 4 == 0
        rd = rs.from_scapy(spkt)
        assert rd.crc_status == "good" and rd.ok, rd.problems
        assert rs.compare_layers(rs.FPDU(data), rd) == []
        assert data == iwarp.encode_fpdu(data[2 : 2 + rd[mpa.MPA].ulpdu_length])


def test_ddp_layer_is_ddp_plus_rdmap() -> None:
    spkt = rs.DDPUntagged(opcode=rdmap.OP_SEND_SE_INVALIDATE, inval_stag=0xABCD, qn=0, msn=4, mo=8)
    ddp, ctrl = rs.headers_from_layer(spkt)
    assert isinstance(ddp, rdmap.DDPUntagged) and isinstance(ctrl, rdmap.RDMAPUntagged)
    assert ctrl == rdmap.RDMAPUntagged(opcode=rdmap.OP_SEND_SE_INVALIDATE, inval_stag=0xABCD)
    assert bytes(spkt) == ddp.encode()
    built = rs.layer_from_header(ddp)
    assert all(built.getfieldval(f.name) == spkt.getfieldval(f.name) for f in spkt.fields_desc)


def test_mpa_frames() -> None:
    for frame in (
        iwarp.encode_mpa_frame(private_data=b"hello"),
        iwarp.encode_mpa_frame(reply=True, reject=True),
        iwarp.encode_mpa_frame(rev=2, private_data=b"pd", ird=3, ord=4, p2p=True, rtr_read=True),
    ):
        rd, n = iwarp.decode_mpa_frame(frame)
        spkt = rs.to_scapy(rd)
        assert bytes(spkt) == frame and rs.compare_layers(spkt, rd) == []
        assert rs.from_scapy(spkt).layers == rd.layers
    built = rs.MPAReqRep(key=mpa.MPA_KEY_REP_INT, rev=2, res=mpa.MPA_FLAG_ENHANCED) / rs.MPAv2IRDORD(ird=5, ord=6) / Raw(b"z")
    rd = rs.from_scapy(built)
    assert rd.ok and rd[mpa.MPAReqRep].pd_length == 5 and rd[mpa.MPAv2IRDORD].ord == 6


def test_tcp_payload_stream() -> None:
    req = iwarp.encode_mpa_frame(private_data=b"abc")
    stream = req + iwarp.encode_fpdus(ulpdus()[:4])
    pkts = rs.dissect_tcp_payload(stream)
    assert [type(p) for p in pkts] == [rs.MPAReqRep] + [rs.FPDU] * 4
    assert b"".join(bytes(p) for p in pkts) == stream
    partial = rs.dissect_tcp_payload(stream[:-3])
    assert isinstance(partial[-1], Raw)
    marked = iwarp.encode_fpdus(ulpdus()[:4], markers=True, stream_pos=0)
    pkts = rs.dissect_tcp_payload(marked, markers=0)
    assert len(pkts) == 4
    pos = 0
    for p in pkts:
        rd, used = iwarp.decode_fpdu(marked, pos, markers=pos)
        assert rd.crc_status == "good" and bytes(p) == rd.data and p.crc == rd.crc
        pos += used
    assert pos == len(marked)


@pytest.mark.parametrize("name", ["synthetic_iwarp_mpa_crc.pcap", "synthetic_iwarp_mpa_markers.pcap"])
def test_iwarp_captures(name: str) -> None:
    frames = _frames(name)
    n = 0
    for _, data in frames:
        rd = decode_ethernet(data, lenient=True)
        if rd.encap != "tcp" or not rd.payload:
            continue
        for spkt in rs.dissect_tcp_payload(rd.payload, markers=None):
            if isinstance(spkt, rs.FPDU | rs.MPAReqRep):
                n += 1
    assert n


@st.composite
def ulpdu_headers(draw: st.DrawFn) -> Packet:
    tagged = draw(st.booleans())
    if tagged:
        op = draw(st.sampled_from([rdmap.OP_WRITE, rdmap.OP_READ_RESPONSE]))
        layer: Packet = rs.DDPTagged(last=draw(st.integers(0, 1)), opcode=op, stag=draw(st.integers(0, 2**32 - 1)),
                                     to=draw(st.integers(0, 2**64 - 1)))
        return layer / Raw(draw(st.binary(max_size=40)))
    op = draw(st.sampled_from([o for o, i in rdmap.RDMAP_OPCODES.items() if not i.tagged]))
    info = rdmap.RDMAP_OPCODES[op]
    inval = draw(st.integers(0, 2**32 - 1)) if info.invalidate else 0
    layer = rs.DDPUntagged(opcode=op, inval_stag=inval, qn=info.qn or 0, msn=draw(st.integers(0, 2**32 - 1)),
                           mo=draw(st.integers(0, 2**32 - 1)), last=draw(st.integers(0, 1)))
    for cls in info.headers:
        vals = {f.name: draw(st.integers(0, f.mask)) for f in cls.LAYOUT.fields if not f.reserved}
        if cls is rdmap.Terminate:
            vals.update(hdrct_d=0, hdrct_r=0)
        if cls is rdmap.AtomicRequest:
            vals["atomic_opcode"] = draw(st.sampled_from(sorted(rdmap.ATOMIC_OPCODE_NAMES)))
        layer = layer / rs.layer_from_header(cls(**vals))
    if info.payload:
        layer = layer / Raw(draw(st.binary(max_size=40)))
    return layer


@settings(max_examples=150, deadline=None)
@given(ulpdu_headers(), st.one_of(st.none(), st.integers(0, 2000)))
def test_iwarp_roundtrip(ulpdu: Packet, markers: int | None) -> None:
    fpdu = rs.FPDU() / ulpdu
    data = bytes(fpdu)
    rd = rs.from_scapy(fpdu)
    assert rd.crc_status == "good" and rd.ok, rd.problems
    assert rs.compare_layers(rs.FPDU(data), rd) == []
    wire = iwarp.encode_fpdu(data[2 : 2 + rd[mpa.MPA].ulpdu_length], markers=markers)
    again, n = rs.dissect_fpdu(wire, markers=markers)
    assert n == len(wire) and bytes(again)[:-4] == data[:-4]  # with markers the CRC covers them too
    rd_wire, _ = iwarp.decode_fpdu(wire, markers=markers)
    assert rd_wire.crc_status == "good" and again.crc == rd_wire.crc and rd_wire.layers == rd.layers
