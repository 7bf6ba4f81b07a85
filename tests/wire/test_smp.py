"""rdmalab.wire.smp: the SMP headers and the SMA/PMA attributes, byte layouts (IBA 14.2, 16.1) and tshark."""

from __future__ import annotations

import pytest
from test_mad import needs_tshark, tshark_fields, ud_frame

from rdmalab.wire import smp as S
from rdmalab.wire.errors import EncodeError, MalformedError, TruncatedError


def test_layouts_add_up_to_the_iba_sizes() -> None:
    ends = {L.name: max(f.offset + f.bits for f in L.fields.values()) for L in
            (S.PORT_INFO, S.NODE_INFO, S.PORT_COUNTERS, S.DR_SMP_HEADER, S.SMP_HEADER)}
    assert ends == {"PortInfo": 512, "NodeInfo": 320, "PortCounters": 352, "DR SMP": 288, "SMP": 256}


def test_portinfo_known_bytes() -> None:
    # a CA port as ibsim starts it (sim_net.c hcaport, 0.10): LID 2, SM LID 1, CapabilityMask 0x0050c048,
    # LocalPortNum 1, Init/LinkUp, 4x SDR, MTU 2048, VLCap 4, OperationalVLs 1
    raw = bytes.fromhex("0000000000000000" "fe80000000000000" "00020001" "0050c048" "00000ff9" "01030302"
                        "12520011" "40400008" "0804ff10" "00000000" "0000201f" "00000000" "00000000" "00300101")
    d = S.PORT_INFO.decode(raw)
    assert (d["lid"], d["master_sm_lid"], d["capability_mask"], d["local_port_num"]) == (2, 1, 0x50C048, 1)
    assert (d["port_state"], d["port_phys_state"], d["link_down_default_state"]) == (2, 5, 2)
    assert (d["link_width_active"], d["link_speed_active"], d["neighbor_mtu"], d["mtu_cap"]) == (2, 1, 4, 4)
    assert (d["vl_cap"], d["operational_vls"], d["hoq_life"], d["vl_stall_count"]) == (4, 1, 31, 7)
    assert (d["guid_cap"], d["subnet_timeout"], d["capability_mask2"], d["link_speed_ext_enabled"]) == (32, 31, 0x30, 1)
    assert S.PORT_INFO.encode(d) == raw


def test_set_changes_only_the_field() -> None:
    buf = bytearray(b"\xff" * 64)
    S.PORT_INFO.set(buf, "port_state", 4)
    assert buf[32] == 0xF4 and buf.count(0xFF) == 63
    S.PORT_INFO.set(buf, "lmc", 0)
    assert buf[34] == 0xF8
    with pytest.raises(EncodeError):
        S.PORT_INFO.set(buf, "lmc", 8)
    with pytest.raises(TruncatedError):
        S.PORT_INFO.get(bytes(10), "lid")


def test_dr_smp_round_trip_and_offsets() -> None:
    smp = S.SMP.get(S.ATTR_NODE_INFO, 0, tid=0x1234, path=(1, 3, 5))
    raw = smp.encode()
    assert len(raw) == 256 and raw[1] == 0x81 and raw[3] == 0x01
    assert raw[6:8] == bytes([0, 3])  # hop pointer, hop count (IBA 14.2.1.2)
    assert raw[32:36] == b"\xff\xff\xff\xff"  # DrSLID, DrDLID permissive
    assert raw[128:132] == bytes([0, 1, 3, 5])
    assert S.SMP.decode(raw) == smp
    back = S.SMP(0x81, 0x81, 7, S.ATTR_PORT_INFO, 1, status=0x1C, direction=1, hop_pointer=2, hop_count=2,
                 initial_path=(0, 1, 2), return_path=(1, 4, 2), data=bytes(range(64)))
    assert S.SMP.decode(back.encode()) == back
    assert back.encode()[4:6] == (0x8000 | 0x1C).to_bytes(2, "big")  # the D bit over the status
    lid = S.SMP.get(S.ATTR_PORT_INFO, 2, tid=9)
    assert S.SMP.decode(lid.encode()) == lid and lid.encode()[1] == 0x01


def test_smp_errors() -> None:
    with pytest.raises(TruncatedError):
        S.SMP.decode(bytes(100))
    with pytest.raises(MalformedError):
        S.SMP.decode(bytes(256))  # class 0 is no SMP
    bad = bytearray(S.SMP.get(S.ATTR_NODE_INFO, path=()).encode())
    bad[7] = 64
    with pytest.raises(MalformedError):
        S.SMP.decode(bytes(bad))
    with pytest.raises(EncodeError):
        S.SMP.get(S.ATTR_NODE_INFO, path=(1,) * 64)


def test_node_description_and_pma() -> None:
    assert S.decode_node_description(S.node_description("Hca1")) == "Hca1"
    with pytest.raises(EncodeError):
        S.node_description("x" * 65)
    mad = S.pma_get(S.ATTR_PORT_COUNTERS, S.PORT_COUNTERS.encode(port_select=3), tid=5)
    assert mad[1] == 0x04 and mad[16:18] == b"\x00\x12" and S.PORT_COUNTERS.get(mad, "port_select", 64) == 3


# ws name -> our field, for the attributes tshark 4.0 decodes (packet-infiniband.c)
WS_PORTINFO = {"lid": "lid", "mastersmlid": "master_sm_lid", "capabilitymask": "capability_mask",
               "diagcode": "diag_code", "m_keyleaseperiod": "m_key_lease_period", "localportnum": "local_port_num",
               "linkwidthenabled": "link_width_enabled", "linkwidthsupported": "link_width_supported",
               "linkwidthactive": "link_width_active", "linkspeedsupported": "link_speed_supported",
               "portstate": "port_state", "portphysicalstate": "port_phys_state",
               "linkdowndefaultstate": "link_down_default_state", "lmc": "lmc", "linkspeedactive": "link_speed_active",
               "linkspeedenabled": "link_speed_enabled", "neighbormtu": "neighbor_mtu", "mastersmsl": "master_sm_sl",
               "vlcap": "vl_cap", "vlhighlimit": "vl_high_limit", "vlarbitrationhighcap": "vl_arbitration_high_cap",
               "vlarbitrationlowcap": "vl_arbitration_low_cap", "mtucap": "mtu_cap", "vlstallcount": "vl_stall_count",
               "hoqlife": "hoq_life", "operationalvls": "operational_vls", "guidcap": "guid_cap",
               "subnettimeout": "subnet_timeout", "resptimevalue": "resp_time_value",
               "localphyerrors": "local_phy_errors", "overrunerrors": "overrun_errors"}
WS_NODEINFO = {"nodetype": "node_type", "numports": "num_ports", "systemimageguid": "system_image_guid",
               "nodeguid": "node_guid", "portguid": "port_guid", "partitioncap": "partition_cap",
               "deviceid": "device_id", "revision": "revision", "localportnum": "local_port_num",
               "vendorid": "vendor_id"}
WS_SWITCHINFO = {"linearfdbcap": "linear_fdb_cap", "multicastfdbcap": "multicast_fdb_cap",
                 "linearfdbtop": "linear_fdb_top", "defaultport": "default_port", "lifetimevalue": "life_time_value",
                 "portstatechange": "port_state_change", "lidsperport": "lids_per_port",
                 "partitionenforcementcap": "partition_enforcement_cap", "enhancedportzero": "enhanced_port0"}


@needs_tshark
def test_tshark_decodes_our_smps_alike() -> None:
    pi = {name: (i * 7 + 3) % (1 << f.bits) for i, (name, f) in enumerate(S.PORT_INFO.fields.items())}
    ni = {name: (i * 0x1111 + 1) % (1 << f.bits) for i, (name, f) in enumerate(S.NODE_INFO.fields.items())}
    ni["base_version"], ni["class_version"] = 1, 1
    si = {name: (i * 5 + 1) % (1 << f.bits) for i, (name, f) in enumerate(S.SWITCH_INFO.fields.items())}
    cases = [
        (S.SMP(0x81, 0x81, 1, S.ATTR_PORT_INFO, 1, direction=1, hop_count=2, initial_path=(0, 1, 3),
               return_path=(1, 2, 4), data=S.PORT_INFO.encode(pi)), "portinfo", WS_PORTINFO, pi),
        (S.SMP(0x01, 0x81, 2, S.ATTR_NODE_INFO, 0, data=S.NODE_INFO.encode(ni, size=64)), "nodeinfo", WS_NODEINFO, ni),
        (S.SMP(0x81, 0x81, 3, S.ATTR_SWITCH_INFO, 0, direction=1, data=S.SWITCH_INFO.encode(si, size=64)),
         "switchinfo", WS_SWITCHINFO, si),
    ]
    got = tshark_fields([ud_frame(smp.encode(), destqp=0, src_qp=0) for smp, *_ in cases])
    for (smp, prefix, names, values), fields in zip(cases, got, strict=True):
        assert "_ws.malformed" not in fields
        if smp.directed:
            assert fields["infiniband.smpdirected.hopcount"] == smp.hop_count
            assert fields["infiniband.smpdirected.drslid"] == 0xFFFF
        for ws, ours in names.items():
            assert fields.get(f"infiniband.{prefix}.{ws}") == values[ours], (prefix, ws)
