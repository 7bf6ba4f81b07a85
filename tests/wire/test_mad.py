"""MAD common header and RMPP header: layouts, names, round trips, the QP0/QP1 hook, tshark."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tshark_util import field_types, field_value

from rdmalab.wire import decode_ethernet, encode_rocev2
from rdmalab.wire.errors import DecodeError, MalformedError, TruncatedError
from rdmalab.wire.header import Header
from rdmalab.wire.ib import BTH, DETH, GSI_QKEY
from rdmalab.wire.mad import (
    MAD_SIZE,
    WIRESHARK_QUIRKS,
    MADHeader,
    RMPPHeader,
    attribute_name,
    class_uses_rmpp,
    decode_mad_layers,
    method_name,
    mgmt_class_name,
    status_text,
)


def ud_frame(payload: bytes, destqp: int = 1, src_qp: int = 1) -> bytes:
    bth = BTH(opcode=0x64, destqp=destqp, psn=7)
    return encode_rocev2(bth, [DETH(q_key=GSI_QKEY, src_qp=src_qp)], payload)


def sa_mad(rmpp: RMPPHeader, **mad: int) -> tuple[MADHeader, bytes]:
    h = MADHeader(mgmt_class=0x03, class_version=2, method=0x92, attr_id=0x35, tid=0xABC, **mad)
    return h, h.encode() + rmpp.encode() + bytes(MAD_SIZE - 36)


# --------------------------------------------------------------------------- layouts


@pytest.mark.parametrize("cls,size", [(MADHeader, 24), (RMPPHeader, 12)])
def test_sizes_and_citation(cls: type[Header], size: int) -> None:
    assert cls.LAYOUT.size == size
    assert "IBA Vol 1 13." in cls.LAYOUT.spec


def test_mad_field_offsets_match_iba_13_4_2() -> None:
    want = {"base_version": 0, "mgmt_class": 1, "class_version": 2, "method": 3, "status": 4,
            "class_specific": 6, "tid": 8, "attr_id": 16, "reserved": 18, "attr_mod": 20}
    assert {f.name: f.byte_start for f in MADHeader.LAYOUT.fields} == want


def test_known_bytes() -> None:
    raw = bytes.fromhex("01070203000000000000000112345678001000000000002a")
    h = MADHeader.decode(raw)
    assert (h.base_version, h.mgmt_class, h.class_version, h.method) == (1, 7, 2, 3)
    assert h.tid == 0x112345678 and h.attr_id == 0x10 and h.attr_mod == 42
    assert h.attr_name == "ConnectRequest (REQ)" and h.method_name == "Send"
    assert h.encode() == raw
    r = RMPPHeader.decode(bytes.fromhex("0101ef00000000010000 00c8".replace(" ", "")))
    assert (r.type, r.resp_time, r.flags, r.data1, r.data2) == (1, 0x1D, 7, 1, 200)
    assert r.active and r.first and r.last


@pytest.mark.parametrize("cls", [MADHeader, RMPPHeader])
@given(data=st.data())
def test_round_trip(cls: type[Header], data: st.DataObject) -> None:
    raw = data.draw(st.binary(min_size=cls.LAYOUT.size, max_size=cls.LAYOUT.size))
    h = cls.decode(raw)
    assert h.encode() == raw
    assert cls.decode(b"xx" + raw, 2) == h
    for span in h.spans(5):
        assert 5 <= span.start < span.end <= 5 + cls.LAYOUT.size
        assert isinstance(span.text, str)
    h.summary()


def test_names() -> None:
    assert mgmt_class_name(0x07) == "Communication Management"
    assert mgmt_class_name(0x0A).startswith("Vendor")
    assert mgmt_class_name(0x20).startswith("Application")
    assert method_name(0x81) == "GetResp" and method_name(0x83) == "SendResp" and method_name(0x7F) == "Method 0x7f"
    assert attribute_name(0x03, 0x35) == "PathRecord"
    assert attribute_name(0x01, 0x15) == "PortInfo"
    assert attribute_name(0x07, 0x01) == "ClassPortInfo"
    assert attribute_name(0x07, 0x99) == "Attribute 0x0099"
    assert "busy" in status_text(1) and "method not supported" in status_text(2 << 2)
    assert class_uses_rmpp(0x03) and class_uses_rmpp(0x30) and not class_uses_rmpp(0x07)


# --------------------------------------------------------------------------- decoding


def test_sa_mad_in_a_packet() -> None:
    rmpp = RMPPHeader(type=1, resp_time=3, flags=7, data1=1, data2=200)
    mad, raw = sa_mad(rmpp)
    pkt = decode_ethernet(ud_frame(raw))
    assert pkt.get(MADHeader) == mad and pkt.get(RMPPHeader) == rmpp
    mad_layer = [layer for layer in pkt.layers if isinstance(layer.header, MADHeader)][0]
    assert mad_layer.offset == 14 + 20 + 8 + 12 + 8
    # then the SA header (20 bytes) and the PathRecords the RMPP PayloadLength holds: (200 - 20) // 64 = 2
    assert [type(layer.header).__name__ for layer in pkt.layers[-3:]] == ["SAHeader", "PathRecord", "PathRecord"]
    assert pkt.payload_offset == mad_layer.offset + 36 + 20 + 128 and pkt.payload_length == 72
    assert pkt.ok


def test_not_qp0_or_qp1_is_not_a_mad() -> None:
    _, raw = sa_mad(RMPPHeader())
    pkt = decode_ethernet(ud_frame(raw, destqp=0x11, src_qp=0x12))
    assert MADHeader not in pkt and pkt.payload_length == MAD_SIZE


def test_from_qp1_to_another_qp_only_when_mad_sized() -> None:
    _, raw = sa_mad(RMPPHeader())
    assert decode_ethernet(ud_frame(raw, destqp=0x11, src_qp=1)).get(RMPPHeader) is not None
    pkt = decode_ethernet(ud_frame(b"not a MAD", destqp=0x11, src_qp=0))
    assert MADHeader not in pkt and pkt.payload == b"not a MAD"


def test_rc_to_qp0_is_not_a_mad() -> None:
    pkt = decode_ethernet(encode_rocev2(BTH(opcode=0x04, destqp=0), [], b"hello"))
    assert MADHeader not in pkt and pkt.payload == b"hello"


def test_short_mad_strict_and_lenient() -> None:
    frame = ud_frame(bytes.fromhex("0107"))
    with pytest.raises(TruncatedError) as e:
        decode_ethernet(frame)
    assert e.value.layer == "MAD" and e.value.offset == 62
    pkt = decode_ethernet(frame, lenient=True)
    assert isinstance(pkt.problems[0], TruncatedError) and (pkt.payload_length, pkt.pad) == (2, 2)


def test_bad_base_version_and_length() -> None:
    raw = MADHeader(base_version=2, mgmt_class=4, class_version=1, method=1).encode() + bytes(232)
    with pytest.raises(MalformedError) as e:
        decode_ethernet(ud_frame(raw))
    assert (e.value.layer, e.value.field, e.value.value) == ("MAD", "base_version", 2)
    pkt = decode_ethernet(ud_frame(raw[:100]), lenient=True)
    assert any(isinstance(p, TruncatedError) and p.layer == "MAD" for p in pkt.problems)
    assert pkt.get(MADHeader) is not None


def test_decode_mad_layers_reports() -> None:
    problems: list[DecodeError] = []
    mad, raw = sa_mad(RMPPHeader(type=9))
    layers, pos = decode_mad_layers(raw, 0, len(raw), problems.append)
    assert [type(h) for h, _ in layers] == [MADHeader, RMPPHeader] and pos == 36
    assert problems and problems[0].field == "type"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payload=st.binary(min_size=0, max_size=300), cls=st.sampled_from([1, 3, 4, 7, 0x30, 0x81]))
def test_fuzz_only_rdmalab_errors(payload: bytes, cls: int) -> None:
    if len(payload) > 1:
        payload = payload[:1] + bytes([cls]) + payload[2:]
    frame = ud_frame(payload)
    try:
        decode_ethernet(frame)
    except DecodeError:
        pass
    pkt = decode_ethernet(frame, lenient=True)
    for layer in pkt.layers:
        layer.header.summary()
        layer.header.spans(layer.offset)


# --------------------------------------------------------------------------- tshark

needs_tshark = pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark (Wireshark) is not installed")


def tshark_fields(frames: list[bytes]) -> list[dict[str, int | str]]:
    """tshark's fields (first occurrence) of each frame, values as ints where typed."""
    from rdmalab.capture.pcapwriter import write_capture

    types = field_types()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.pcap")
        write_capture(path, [(i * 10**9, f) for i, f in enumerate(frames)])
        out = subprocess.run(["tshark", "-r", path, "-T", "json"], capture_output=True, text=True, check=True).stdout
    result = []
    for pkt in json.loads(out, object_pairs_hook=lambda pairs: pairs):
        flat: dict[str, int | str] = {}

        def walk(node: object, flat: dict[str, int | str] = flat) -> None:
            if isinstance(node, list):
                for item in node:
                    if isinstance(item, tuple):
                        key, val = item
                        if isinstance(val, str):
                            kind = types.get(key)
                            if key.startswith("_ws.") or kind is None:
                                flat.setdefault(key, val)
                            else:
                                flat.setdefault(key, field_value(kind, val))
                        else:
                            walk(val)
                    else:
                        walk(item)

        walk(pkt)
        result.append(flat)
    return result


@needs_tshark
def test_tshark_agrees_on_mad_and_rmpp() -> None:
    cases = [RMPPHeader(type=1, resp_time=0x1D, flags=7, data1=1, data2=200),
             RMPPHeader(type=2, resp_time=3, flags=5, data1=4, data2=9),
             RMPPHeader(type=3, flags=1, status=118), RMPPHeader(type=4, resp_time=31, flags=3, status=127)]
    mads = [sa_mad(r, status=0x0104, attr_mod=0x01020304) for r in cases]
    perf = MADHeader(mgmt_class=4, class_version=1, method=0x81, attr_id=0x12, tid=5, class_specific=0x77)
    frames = [ud_frame(raw) for _, raw in mads] + [ud_frame(perf.encode() + bytes(232))]
    got = tshark_fields(frames)
    for (mad, _), rmpp, fields in zip(mads + [(perf, b"")], [*cases, None], got, strict=True):
        assert "_ws.malformed" not in fields
        want = mad.ws_fields()
        if rmpp is not None:
            want.update(rmpp.ws_fields())
            byte2 = rmpp.encode()[2]  # Wireshark splits this byte 4+4 (see WIRESHARK_QUIRKS)
            assert fields["infiniband.rmpp.rresptime"] == byte2 >> 4
            assert fields["infiniband.rmpp.rmppflags"] == byte2 & 0x0F
        for name, value in want.items():
            if name in WIRESHARK_QUIRKS or (name.startswith("infiniband.rmpp.data") and rmpp and rmpp.type > 2):
                continue
            assert fields.get(name) == value, name
