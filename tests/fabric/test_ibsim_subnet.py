"""rdmalab.fabric.ibsubnet in-process: net file errors (FILE:LINE), GUID numbering, the SMA's answers to
directed-route and LID-routed SMPs, the port state machine, the PMA's counters, bad MADs."""

from __future__ import annotations

import pytest

from rdmalab.fabric.ibsubnet import Subnet
from rdmalab.fabric.ibsubnet_netfile import NetFileError, parse_netfile
from rdmalab.wire import pma as P
from rdmalab.wire import smp as S
from rdmalab.wire.ibsim import SimRequest
from rdmalab.wire.mad import (
    ATTR_NOTICE,
    STATUS_INVALID_VALUE,
    STATUS_METHOD_ATTR_UNSUPPORTED,
    STATUS_METHOD_UNSUPPORTED,
)

NET = """# two switches, three HCAs
Switch\t8 "Sw1"\t# "switch one"
[1]\t"H1"[1]
[2]\t"Sw2"[2]

Switch 4 "Sw2"
[2]\t"Sw1"[2]
[3]\t"H2"[1]

Hca\t2 "H1"
[1]\t"Sw1"[1]

Ca\t1 "H2"
[1]\t"Sw2"[3]
"""


def sub() -> Subnet:
    return Subnet.from_text(NET, "t.net")


def dr(s: Subnet, c, attr: int, path: tuple[int, ...], mod: int = 0, method: int = 1, data: bytes = b""):
    req = SimRequest(0xFFFF, 0xFFFF, 0, 0, S.SMP(method, attr, mod, 7, data, initial_path=path).encode())
    out = s.send(c, req)
    assert len(out) == 1 and out[0].client is c
    return out[0].request, S.SMP.decode(out[0].request.mad)


@pytest.mark.parametrize("text, line, words", [
    ('Switch 8 "A"\n[1] "B"[1]\n', 2, 'unknown node "B"'),
    ('Switch 8 "A"\n[1] "B"[1]\n\nHca 1 "B"\n', 2, "dangling port"),
    ('Switch 8 "A"\n[1] "B"[1]\n[1] "B"[1]\n\nHca 1 "B"\n[1] "A"[1]\n', 3, "listed twice"),
    ('Switch 8 "A"\n[9] "B"[1]\n', 2, "expected 1..8"),
    ('Switch 8 "A"\n[1] B[1]\n', 2, "port line"),
    ('Switch x "A"\n', 1, "number of ports"),
    ('Hca 1 "A"\n[1] "A"[1]\nHca 1 "B"\n', 3, "blank line"),
    ('Switch 8 "A"\n\nHca 1 "A"\n', 3, "already used"),
    ('Switch 2 "A"\n[1] "B"[5]\n\nHca 1 "B"\n[1] "A"[1]\n', 2, "which has 1 ports"),
    ('include "x"\n', 1, "not supported"),
])
def test_netfile_errors_name_file_and_line(text: str, line: int, words: str) -> None:
    with pytest.raises(NetFileError) as e:
        parse_netfile(text, "bad.net")
    assert str(e.value).startswith(f"bad.net:{line}: ") and words in str(e.value), str(e.value)


def test_guids_numbered_as_ibsim() -> None:
    s = sub()
    assert [hex(n.guid) for n in s.nodes] == ["0x200000", "0x200001", "0x100000", "0x100003"]
    h1 = s.node("H1")
    assert h1.port(1).guid == 0x100001 and h1.port(2).guid == 0x100002
    assert s.node("switch one") is s.node("Sw1")  # attach by description, as ibsim
    assert s.node("H1").port(2).state == 1  # an unlinked port is Down


def test_dr_nodeinfo_hop_by_hop_and_return_path() -> None:
    s = sub()
    c = s.attach("H1")
    _, local = dr(s, c, S.ATTR_NODE_INFO, ())
    ni = S.NodeInfo.decode(local.data)
    assert (ni.node_type, ni.node_guid, ni.port_guid, ni.local_port_num) == (1, 0x100000, 0x100001, 1)
    req, far = dr(s, c, S.ATTR_NODE_INFO, (1, 2, 3))  # H1 -> Sw1 -> port 2 -> Sw2 -> port 3 -> H2
    assert req.status == 0 and far.method == 0x81 and far.direction == 1
    ni = S.NodeInfo.decode(far.data)
    assert (ni.node_guid, ni.local_port_num) == (0x100003, 1)
    assert far.return_path == (1, 2, 1)  # the port entered at each hop
    assert req.mad[192:196] == bytes([1, 1, 2, 1])  # and in ReturnPath[0], the sender's port, as ibsim
    _, sw = dr(s, c, S.ATTR_NODE_INFO, (1, 2))
    assert S.NodeInfo.decode(sw.data).local_port_num == 2  # Sw2, entered on its port 2
    _, desc = dr(s, c, S.ATTR_NODE_DESCRIPTION, (1,))
    assert S.node_description(desc.data) == "switch one"


def test_dr_to_a_down_port_is_lost_with_status_110() -> None:
    s = sub()
    c = s.attach("H1")
    req, _ = dr(s, c, S.ATTR_NODE_INFO, (1, 4))  # Sw1 port 4 is not linked
    assert req.status == 110


def test_portinfo_set_lid_and_states_then_lid_routing_and_counters() -> None:
    s = sub()
    c = s.attach("H1")
    pi = bytearray(64)
    S.PortInfo.set_field(pi, "lid", 5)
    S.PortInfo.set_field(pi, "master_sm_lid", 5)
    _, r = dr(s, c, S.ATTR_PORT_INFO, (), 1, method=2, data=bytes(pi))
    assert S.PortInfo.get_field(r.data, "lid") == 5 and S.PortInfo.get_field(r.data, "port_state") == 2
    S.PortInfo.set_field(pi, "port_state", 4)  # Init -> Active skips Armed: refused
    _, r = dr(s, c, S.ATTR_PORT_INFO, (), 1, method=2, data=bytes(pi))
    assert r.status == STATUS_INVALID_VALUE
    # a switch: LID 9 on port 0, LFT top and block 0
    S.PortInfo.set_field(pi, "port_state", 0)
    S.PortInfo.set_field(pi, "lid", 9)
    dr(s, c, S.ATTR_PORT_INFO, (1,), 0, method=2, data=bytes(pi))
    si = bytearray(64)
    S.SwitchInfo.set_field(si, "linear_fdb_top", 9)
    dr(s, c, S.ATTR_SWITCH_INFO, (1,), method=2, data=bytes(si))
    lft = bytearray(b"\xff" * 64)
    lft[5], lft[9] = 1, 0
    _, r = dr(s, c, S.ATTR_LINEAR_FORWARDING_TABLE, (1,), 0, method=2, data=bytes(lft))
    assert r.data[5] == 1 and r.data[9] == 0 and r.data[6] == 0xFF
    # LID-routed Get to LID 9 crosses H1 port 1 -> Sw1 port 1 only while both are Active
    lr = SimRequest(9, 0, 0, 0, S.lid_get(S.ATTR_NODE_INFO, tid=1).encode())
    assert s.send(c, lr)[0].request.status == 110
    for state in (3, 4):
        S.PortInfo.set_field(pi, "port_state", state)
        S.PortInfo.set_field(pi, "lid", 5)
        assert dr(s, c, S.ATTR_PORT_INFO, (), 1, method=2, data=bytes(pi))[1].status == 0
        S.PortInfo.set_field(pi, "lid", 9)
        assert dr(s, c, S.ATTR_PORT_INFO, (1,), 1, method=2, data=bytes(pi))[1].status == 0
    before = s.node("Sw1").port(1).counters.rcv_pkts
    out = s.send(c, lr)[0].request
    assert out.status == 0 and S.NodeInfo.decode(S.SMP.decode(out.mad).data).node_guid == 0x200000
    assert (out.dlid, out.slid) == (5, 9)
    assert s.node("Sw1").port(1).counters.rcv_pkts == before + 1
    # the PMA: PortCounters of Sw1 port 1, read by LID
    pc = P.PortCounters(port_select=1).encode()
    got = s.send(c, SimRequest(9, 0, 1, 1, P.pma_mad(P.ATTR_PORT_COUNTERS, pc, tid=3)))[0].request
    counters = P.PortCounters.decode(got.mad, P.PMA_DATA_OFFSET)
    assert counters.port_rcv_pkts == before + 2 and counters.port_rcv_data == 72 * (before + 2)


def test_unknown_attribute_method_and_bad_mads_never_crash() -> None:
    s = sub()
    c = s.attach("H1")
    _, r = dr(s, c, 0x0077, ())
    assert r.status == STATUS_METHOD_ATTR_UNSUPPORTED
    _, r = dr(s, c, S.ATTR_NODE_INFO, (), method=0x03)
    assert r.status == STATUS_METHOD_UNSUPPORTED
    _, r = dr(s, c, S.ATTR_SWITCH_INFO, ())  # an HCA has no SwitchInfo
    assert r.status == STATUS_METHOD_ATTR_UNSUPPORTED
    bad = bytearray(S.dr_get(S.ATTR_NODE_INFO, ()).encode())
    bad[0] = 2  # base version 2: dropped, as ibsim drops it
    assert s.send(c, SimRequest(0xFFFF, 0xFFFF, 0, 0, bytes(bad))) == []
    assert s.send(c, SimRequest(0xFFFF, 0xFFFF, 0, 0, b"")) == []
    junk = bytes(range(256))
    assert isinstance(s.send(c, SimRequest(0xFFFF, 0xFFFF, 0, 0, junk)), list)


def test_sminfo_goes_to_the_sm_client() -> None:
    s = sub()
    c = s.attach("H1")
    sm = s.attach("H1", issm=True)
    req = SimRequest(0xFFFF, 0xFFFF, 0, 0, S.dr_get(S.ATTR_SM_INFO, ()).encode())
    out = s.send(c, req)
    assert [d.client for d in out] == [sm]
    s.detach(sm)
    assert s.send(c, req)[0].request.status == 110  # no SM: lost, as in ibsim


def test_issm_change_traps_144_to_the_sm() -> None:
    s = sub()
    c = s.attach("H1")
    port = c.port
    port.lid, port.sm_lid = 5, 5
    sm = s.attach("H1")
    out = s.set_issm(sm, True)  # CapabilityMask.IsSM changes on a port that has IsTrap and IsCapabilityMaskTrap
    assert [d.client for d in out] == [sm]
    smp = S.SMP.decode(out[0].request.mad)
    assert (smp.method, smp.attr_id) == (0x05, ATTR_NOTICE)
    notice = S.Notice.decode(smp.data)
    assert (notice.trap_number, notice.issuer_lid, notice.is_generic) == (144, 5, 1)
    assert int.from_bytes(smp.data[15:19], "big") & 0x2  # the capability mask with IsSM
    assert s.set_issm(sm, True) == []  # no change, no trap


def test_in_process_request_and_port_by_lid() -> None:
    s = sub()
    c = s.attach("H2")
    reply = s.request(c, S.dr_get(S.ATTR_NODE_INFO, (1,)).encode())
    assert reply is not None and S.NodeInfo.get_field(S.SMP.decode(reply.mad).data, "node_guid") == 0x200001
    lost = s.request(c, S.lid_get(S.ATTR_NODE_INFO, tid=2).encode(), dlid=77)  # no LID 77 (no LIDs at all yet)
    assert lost is not None and lost.status == 110 and s.dropped == 1
    assert s.port_by_lid(1) is None
    s.node("Sw2").first_port().lid = 4
    assert s.port_by_lid(4) is s.node("Sw2").first_port()


def test_neighbor_mtu_set_within_mtu_cap() -> None:
    s = sub()
    c = s.attach("H1")
    pi = bytearray(64)
    S.PortInfo.set_field(pi, "neighbor_mtu", 3)  # 1024
    _, r = dr(s, c, S.ATTR_PORT_INFO, (), 1, method=2, data=bytes(pi))
    assert r.status == 0 and S.PortInfo.get_field(r.data, "neighbor_mtu") == 3
    S.PortInfo.set_field(pi, "neighbor_mtu", 5)  # 4096 > MTUCap 2048
    _, r = dr(s, c, S.ATTR_PORT_INFO, (), 1, method=2, data=bytes(pi))
    assert r.status == STATUS_INVALID_VALUE
    _, r = dr(s, c, S.ATTR_PORT_INFO, (), 1)
    assert S.PortInfo.get_field(r.data, "neighbor_mtu") == 3
