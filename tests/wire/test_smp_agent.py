"""rdmalab.wire.smp's in-place field access (what an agent keeps: each attribute as its bytes), the Notice,
and rdmalab.wire.pma (PortCounters, ClassPortInfo, the PMA MAD): known byte layouts (IBA 14.2.5, 13.4.8, 16.1)."""

from __future__ import annotations

import pytest

from rdmalab.wire import pma as P
from rdmalab.wire import smp as S
from rdmalab.wire.errors import EncodeError, TruncatedError

# a CA port as ibsim 0.10 starts it (sim_net.c hcaport): LID 2, SM LID 1, CapabilityMask 0x0050c048,
# LocalPortNum 1, Init/LinkUp, 4x SDR, MTU 2048, VLCap 4, OperationalVLs 1
HCAPORT = bytes.fromhex("0000000000000000" "fe80000000000000" "00020001" "0050c048" "00000ff9" "01030302"
                        "12520011" "40400008" "0804ff10" "00000000" "0000201f" "00000000" "00000000" "00300101")


def test_get_field_reads_the_iba_layout() -> None:
    g = lambda name: S.get_field(S.PortInfo, HCAPORT, name)  # noqa: E731
    assert (g("lid"), g("master_sm_lid"), g("capability_mask"), g("local_port_num")) == (2, 1, 0x50C048, 1)
    assert (g("port_state"), g("port_phys_state"), g("link_down_default_state")) == (2, 5, 2)
    assert (g("link_width_active"), g("link_speed_active"), g("neighbor_mtu"), g("mtu_cap")) == (2, 1, 4, 4)
    assert (g("vl_cap"), g("operational_vls"), g("hoq_life"), g("vl_stall_count")) == (4, 1, 31, 7)
    assert (g("guid_cap"), g("subnet_timeout"), g("capability_mask2"), g("link_speed_ext_enabled")) == (32, 31, 0x30, 1)
    assert S.PortInfo.decode(HCAPORT).lid == 2  # the Header decodes the same bytes alike


def test_set_field_changes_only_the_field() -> None:
    buf = bytearray(b"\xff" * 64)
    S.set_field(S.PortInfo, buf, "port_state", 4)
    assert buf[32] == 0xF4 and buf.count(0xFF) == 63
    S.set_field(S.PortInfo, buf, "lmc", 0)
    assert buf[34] == 0xF8
    S.set_field(S.NodeInfo, buf, "port_guid", 0x1122334455667788, base=0)
    assert buf[20:28] == bytes.fromhex("1122334455667788")
    with pytest.raises(EncodeError):
        S.set_field(S.PortInfo, buf, "lmc", 8)
    with pytest.raises(TruncatedError):
        S.get_field(S.PortInfo, bytes(10), "lid")
    with pytest.raises(KeyError):
        S.get_field(S.PortInfo, HCAPORT, "no_such_field")


def test_notice_and_node_description() -> None:
    raw = S.Notice(is_generic=1, type=4, producer_type=2, trap_number=144, issuer_lid=7).encode()
    assert raw == bytes.fromhex("84000002" "0090" "0007" "0000")
    assert S.node_description(S.node_description_bytes("Hca1")) == "Hca1"
    assert len(S.node_description_bytes("x" * 80)) == 64


def test_portcounters_known_bytes() -> None:
    pc = P.PortCounters(port_select=1, counter_select=0xF000, port_rcv_errors=3, port_xmit_data=0x01020304,
                        port_rcv_pkts=9, port_xmit_wait=5)
    raw = pc.encode()
    assert len(raw) == 44 and raw[1] == 1 and raw[2:4] == b"\xf0\x00" and raw[8:10] == b"\x00\x03"
    assert raw[24:28] == bytes.fromhex("01020304") and raw[36:40] == (9).to_bytes(4, "big")
    assert raw[40:44] == (5).to_bytes(4, "big")
    assert P.PortCounters.decode(raw) == pc
    assert P.COUNTER_SELECT_BITS[12] == "port_xmit_data"  # CounterSelect bit 12 (IBA 16.1.3.5 table 248)


def test_pma_mad_and_class_port_info() -> None:
    mad = P.pma_mad(P.ATTR_PORT_COUNTERS, P.PortCounters(port_select=3).encode(), tid=5)
    assert len(mad) == 256 and mad[:4] == bytes([1, 0x04, 1, 0x01]) and mad[16:18] == b"\x00\x12"
    assert mad[8:16] == (5).to_bytes(8, "big") and mad[65] == 3
    cpi = P.ClassPortInfo(capability_mask=0x1200, resp_time_value=0x12).encode()
    assert cpi == bytes.fromhex("0101" "1200" "00000012")
    with pytest.raises(EncodeError):
        P.pma_mad(P.ATTR_PORT_COUNTERS, bytes(193))
