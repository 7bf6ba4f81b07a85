"""PFC (802.1Qbb) frames: round trip, bad input, and Wireshark's macc dissector as the oracle."""

from __future__ import annotations

import json
import subprocess

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tshark_util import requires_tshark, tshark_path

from rdmalab.capture.pcapwriter import write_capture
from rdmalab.wire.errors import DecodeError
from rdmalab.wire.pfc import MIN_FRAME, decode_pfc_frame, encode_pfc_frame, is_pfc_frame, pause_ns, quanta_for

times_st = st.dictionaries(st.integers(0, 7), st.integers(0, 0xFFFF), max_size=8)


@given(times_st)
def test_round_trip(times: dict[int, int]) -> None:
    frame = encode_pfc_frame(times)
    assert len(frame) == MIN_FRAME and is_pfc_frame(frame)
    pfc = decode_pfc_frame(frame)
    assert pfc.paused() == dict(sorted(times.items()))


def test_layout_bytes() -> None:
    frame = encode_pfc_frame({3: 0xFFFF}, src_mac=0x0A0B0C0D0E0F)
    assert frame[:6] == bytes.fromhex("0180c2000001")
    assert frame[12:18] == bytes.fromhex("8808 0101 0008".replace(" ", ""))
    assert frame[18 + 6:18 + 8] == b"\xff\xff"  # priority 3's time
    assert not any(frame[34:])  # padding


def test_quanta() -> None:
    assert pause_ns(1, 40.0) == pytest.approx(12.8)  # 512 bit times at 40 Gb/s
    assert quanta_for(1000.0, 40.0) == 79  # ceil(1000 ns * 40 bit/ns / 512)
    assert quanta_for(1e9, 10.0) == 0xFFFF


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="priority"):
        encode_pfc_frame({8: 1})
    with pytest.raises(ValueError, match="quanta"):
        encode_pfc_frame({1: 0x10000})
    with pytest.raises(DecodeError, match="ethertype"):
        decode_pfc_frame(bytes(12) + b"\x08\x00" + bytes(46))
    classic = bytearray(encode_pfc_frame({0: 5}))
    classic[14] = 0x00  # opcode 0x0001: classic PAUSE, not PFC
    with pytest.raises(DecodeError, match="opcode"):
        decode_pfc_frame(bytes(classic))
    with pytest.raises(DecodeError):
        decode_pfc_frame(encode_pfc_frame({0: 5})[:20])


@requires_tshark
@pytest.mark.tshark
def test_tshark_decodes_our_frames(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cases = [{3: 0xFFFF}, {3: 0}, {0: 17, 5: 300, 7: 1}, {p: p * 1000 for p in range(8)}]
    path = tmp_path / "pfc.pcap"
    write_capture(path, [(i * 10**9, encode_pfc_frame(c)) for i, c in enumerate(cases)])
    tool = tshark_path()
    assert tool is not None
    out = subprocess.run([tool, "-r", str(path), "-T", "json"], capture_output=True, text=True, check=True).stdout
    pkts = json.loads(out)
    assert len(pkts) == len(cases)
    for case, p in zip(cases, pkts, strict=True):
        macc = p["_source"]["layers"]["macc"]
        assert macc["macc.opcode"] == "0x0101"
        mine = decode_pfc_frame(encode_pfc_frame(case))
        assert int(macc["macc.cbfc.enbv"], 16) == mine.enable
        bits = macc["macc.cbfc.enbv_tree"]
        times = macc["CBFC Class Pause Times"]
        for prio in range(8):
            assert int(bits[f"macc.cbfc.enbv.c{prio}"]) == (prio in case)
            assert int(times[f"macc.cbfc.pause_time.c{prio}"]) == mine.times[prio] == case.get(prio, 0)
