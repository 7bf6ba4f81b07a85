"""rdmalab.wire.smp and rdmalab.wire.pma: SMP and PMA attribute bytes (IBA 14.2, 16.1), in-place fields, tshark."""

from __future__ import annotations

import pytest
from test_mad import needs_tshark, tshark_fields, ud_frame

from rdmalab.wire import pma as P
from rdmalab.wire import smp as S
from rdmalab.wire.errors import EncodeError, MalformedError, TruncatedError
from rdmalab.wire.header import Header
from rdmalab.wire.mad import MADHeader


def test_layouts_are_the_iba_sizes() -> None:
    sizes = {cls.__name__: cls.LAYOUT.size for cls in (S.PortInfo, S.NodeInfo, S.Notice, P.PortCounters,
                                                         P.PortCountersExtended, P.ClassPortInfo)}
    assert sizes == {"PortInfo": 64, "NodeInfo": 40, "Notice": 64, "PortCounters": 44, "PortCountersExtended": 72,
                     "ClassPortInfo": 72}
    assert P.PortCounters.LAYOUT.field("port_xmit_data").byte_start == 24  # 16.1.3.5 table 247
    assert P.PortCountersExtended.LAYOUT.field("port_xmit_data").byte_start == 8  # 16.1.4.11


def test_portinfo_known_bytes() -> None:
    # a CA port as ibsim starts it (sim_net.c hcaport, 0.10): LID 2, SM LID 1, CapabilityMask 0x0050c048,
    # LocalPortNum 1, Init/LinkUp, 4x SDR, MTU 2048, VLCap 4, OperationalVLs 1
    raw = bytes.fromhex("0000000000000000" "fe80000000000000" "00020001" "0050c048" "00000ff9" "01030302"
                        "12520011" "40400008" "0804ff10" "00000000" "0000201f" "00000000" "00000000" "00300101")
    d = S.PortInfo.decode(raw)
    assert (d.lid, d.master_sm_lid, d.capability_mask, d.local_port_num) == (2, 1, 0x50C048, 1)
    assert (d.port_state, d.port_phys_state, d.link_down_default_state) == (2, 5, 2)
    assert (d.link_width_active, d.link_speed_active, d.neighbor_mtu, d.mtu_cap) == (2, 1, 4, 4)
    assert (d.vl_cap, d.operational_vls, d.hoq_life, d.vl_stall_count) == (4, 1, 31, 7)
    assert (d.guid_cap, d.subnet_timeout, d.capability_mask2, d.link_speed_ext_enabled) == (32, 31, 0x30, 1)
    assert d.encode() == raw
    for f in S.PortInfo.LAYOUT.fields:  # each field read in place is the decoded one
        assert S.PortInfo.get_field(raw, f.name) == getattr(d, f.name), f.name


def test_set_field_changes_only_the_field() -> None:
    buf = bytearray(b"\xff" * 64)
    S.PortInfo.set_field(buf, "port_state", 4)
    assert buf[32] == 0xF4 and buf.count(0xFF) == 63
    S.PortInfo.set_field(buf, "lmc", 0)
    assert buf[34] == 0xF8
    mad = bytearray(256)
    P.PortCounters.set_field(mad, "port_select", 3, P.PMA_DATA_OFFSET)  # at an offset
    assert mad[65] == 3 and mad.count(0) == 255
    with pytest.raises(EncodeError, match="lmc"):
        S.PortInfo.set_field(buf, "lmc", 8)
    with pytest.raises(TruncatedError):
        S.PortInfo.get_field(bytes(10), "lid")
    with pytest.raises(KeyError):
        S.PortInfo.get_field(buf, "no_such_field")


def test_set_field_agrees_with_encode_for_every_field_of_every_attribute() -> None:
    classes: list[type[Header]] = [S.NodeInfo, S.SwitchInfo, S.PortInfo, S.SMInfo, S.Notice, P.ClassPortInfo,
                                   P.PortCounters, P.PortCountersExtended, MADHeader]
    for cls in classes:
        buf = bytearray(cls.LAYOUT.size)
        values = {}
        for i, f in enumerate(cls.LAYOUT.fields):
            values[f.name] = (0x9E3779B97F4A7C15 * (i + 1)) & f.mask
            cls.set_field(buf, f.name, values[f.name])
        assert bytes(buf) == cls(**values).encode(), cls.__name__


def test_notice_and_node_description() -> None:
    n = S.Notice(is_generic=1, type=4, producer_type=2, trap_number=144, issuer_lid=5, data_details=1 << 8)
    raw = n.encode()
    assert raw[:10] == bytes.fromhex("84000002" "0090" "0005" "0000") and raw[62:64] == b"\x01\x00"
    assert S.node_description(S.node_description_data("Hca1")) == "Hca1"
    assert len(S.node_description_data("é" * 32)) == 64
    with pytest.raises(EncodeError, match="64 bytes"):
        S.node_description_data("x" * 65)


def test_pma_mad() -> None:
    mad = P.pma_mad(P.ATTR_PORT_COUNTERS, P.PortCounters(port_select=3).encode(), tid=5)
    hdr = MADHeader.decode(mad)
    assert (hdr.mgmt_class, hdr.class_version, hdr.method, hdr.attr_id, hdr.tid) == (4, 1, 1, 0x12, 5)
    assert len(mad) == 256 and mad[24:64] == bytes(40) and P.PortCounters.decode(mad, 64).port_select == 3
    with pytest.raises(EncodeError):
        P.pma_mad(P.ATTR_PORT_COUNTERS, bytes(193))


def test_portcounters_and_class_port_info_known_bytes() -> None:
    pc = P.PortCounters(port_select=1, counter_select=0xF000, port_rcv_errors=3, port_xmit_data=0x01020304,
                        port_rcv_pkts=9, port_xmit_wait=5)
    raw = pc.encode()
    assert len(raw) == 44 and raw[1] == 1 and raw[2:4] == b"\xf0\x00" and raw[8:10] == b"\x00\x03"
    assert raw[24:28] == bytes.fromhex("01020304") and raw[36:40] == (9).to_bytes(4, "big")
    assert raw[40:44] == (5).to_bytes(4, "big") and P.PortCounters.decode(raw) == pc
    assert P.COUNTER_SELECT_BITS[12] == "port_xmit_data"  # CounterSelect bit 12 (IBA 16.1.3.5 table 248)
    cpi = P.ClassPortInfo(capability_mask=0x1200, resp_time_value=0x12).encode()
    assert cpi[:8] == bytes.fromhex("0101" "1200" "00000012") and cpi[8:] == bytes(64)


def test_lid_routed_and_directed_smps() -> None:
    lid = S.lid_get(S.ATTR_PORT_INFO, 2, tid=9)
    raw = lid.encode()
    back = S.SMP.decode(raw)
    assert raw[1] == 0x01 and not back.directed and (back.attr_id, back.attr_mod, back.tid) == (0x15, 2, 9)
    assert back.encode() == raw
    bad = bytearray(S.dr_get(S.ATTR_NODE_INFO, ()).encode())
    bad[7] = 64  # hop count 64
    with pytest.raises(MalformedError, match="hop_cnt"):
        S.SMP.decode(bytes(bad))


# ws name -> our field, for the attributes tshark 4.0 decodes (packet-infiniband.c)
WS_PORTINFO = {"lid": "lid", "mastersmlid": "master_sm_lid", "capabilitymask": "capability_mask",
               "diagcode": "diag_code", "m_keyleaseperiod": "m_key_lease_period", "localportnum": "local_port_num",
               "linkwidthenabled": "link_width_enabled", "linkwidthsupported": "link_width_supported",
               "linkwidthactive": "link_width_active", "linkspeedsupported": "link_speed_supported",
               "portstate": "port_state", "portphysicalstate": "port_phys_state",
               "linkdowndefaultstate": "link_down_default_state", "lmc": "lmc", "linkspeedactive": "link_speed_active",
               "linkspeedenabled": "link_speed_enabled", "neighbormtu": "neighbor_mtu", "mastersmsl": "master_sm_sl",
               "vlcap": "vl_cap", "vlhighlimit": "vl_high_limit", "vlarbitrationhighcap": "vl_arb_high_cap",
               "vlarbitrationlowcap": "vl_arb_low_cap", "mtucap": "mtu_cap", "vlstallcount": "vl_stall_count",
               "hoqlife": "hoq_life", "operationalvls": "operational_vls", "guidcap": "guid_cap",
               "subnettimeout": "subnet_timeout", "resptimevalue": "resp_time_value",
               "localphyerrors": "local_phy_errors", "overrunerrors": "overrun_errors"}


@needs_tshark
def test_tshark_decodes_our_smp_and_pma_attributes_alike() -> None:
    pi = S.PortInfo(**{f.name: (i * 7 + 3) & f.mask for i, f in enumerate(S.PortInfo.LAYOUT.fields)})
    pc = P.PortCounters(**{f.name: (i * 0x1357 + 1) & f.mask for i, f in enumerate(P.PortCounters.LAYOUT.fields)
                           if not f.reserved})
    pce = P.PortCountersExtended(port_select=1, counter_select=0xF, port_xmit_data=1 << 40, port_rcv_data=7,
                                 port_xmit_pkts=9, port_rcv_pkts=1 << 33)
    smp = S.SMP(0x81, S.ATTR_PORT_INFO, 1, 1, S.attribute_data(pi), initial_path=(1, 3), return_path=(2, 4),
                direction=1)
    frames = [smp.encode(), P.pma_mad(P.ATTR_PORT_COUNTERS, pc.encode(), method=0x81),
              P.pma_mad(P.ATTR_PORT_COUNTERS_EXTENDED, pce.encode(), method=0x81)]
    got = tshark_fields([ud_frame(raw, destqp=qp, src_qp=qp) for raw, qp in zip(frames, (0, 1, 1), strict=True)])
    assert all("_ws.malformed" not in fields for fields in got)
    assert got[0]["infiniband.smpdirected.hopcount"] == 2
    for ws, ours in WS_PORTINFO.items():
        assert got[0].get(f"infiniband.portinfo.{ws}") == getattr(pi, ours), ws
    for layer, fields in ((pc, got[1]), (pce, got[2])):
        wanted = layer.ws_fields()
        assert wanted and {k: fields.get(k) for k in wanted} == wanted, type(layer).__name__
