"""The SM's pieces without a simulator: SMP and SA codecs, bad input, the client's errors, min-hop
routing on a subnet held in memory, and ``rdmalab sm`` (against stock ibsim where installed)."""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
import socket
from pathlib import Path

import pytest
from ibsm_util import ibsim, net_file, requires_ibsim

from rdmalab.capture.reader import read
from rdmalab.cli import main
from rdmalab.fabric.ibsim_client import IBSimClient, IBSimNotRunning
from rdmalab.fabric.ibsm import Node, Port, SMError, SubnetManager, route_hops
from rdmalab.wire.errors import EncodeError, MalformedError, TruncatedError
from rdmalab.wire.mad import METHOD_GET_TABLE, MADHeader
from rdmalab.wire.sa import PR_DLID, PR_SLID, PathRecord, SAMad, sa_request
from rdmalab.wire.smp import (
    ATTR_NODE_INFO,
    ATTR_PORT_INFO,
    SMP,
    NodeInfo,
    PortInfo,
    SMInfo,
    SMPPaths,
    SwitchInfo,
    dr_get,
    get_response,
    lft_block,
)


def test_attribute_sizes_are_the_specifications() -> None:
    # IBA Vol 1 14.2.5: NodeInfo 40 bytes, PortInfo 64, SMInfo 21, SwitchInfo 17 used
    assert (NodeInfo.LAYOUT.size, PortInfo.LAYOUT.size, SMInfo.LAYOUT.size, SwitchInfo.LAYOUT.size) == (40, 64, 21, 17)
    assert PortInfo.LAYOUT.field("lid").byte_start == 16 and PortInfo.LAYOUT.field("port_state").byte_start == 32
    assert NodeInfo.LAYOUT.field("node_guid").byte_start == 12 and NodeInfo.LAYOUT.field("local_port_num").byte_start == 36


def test_a_directed_route_smp_round_trips_with_its_paths_and_hop_fields() -> None:
    req = dr_get(ATTR_PORT_INFO, [1, 3, 5], attr_mod=5, tid=0x77)
    raw = req.encode()
    assert len(raw) == 256 and raw[1] == 0x81 and raw[128:132] == b"\0\x01\x03\x05"
    hdr = MADHeader.decode(raw)
    assert hdr.class_specific == 3 and hdr.status == 0  # hop pointer 0, hop count 3, D 0
    back = SMP.decode(raw)
    assert (back.initial_path, back.hops, back.attr_mod, back.tid) == ((1, 3, 5), 3, 5, 0x77)
    assert (back.dr_slid, back.dr_dlid) == (0xFFFF, 0xFFFF)
    resp = get_response(dataclasses.replace(back, return_path=(1, 3, 5)), b"\x01" * 64)
    again = SMP.decode(resp.encode())
    assert again.direction == 1 and again.method == 0x81 and again.data == b"\x01" * 64
    assert again.return_path == (1, 3, 5) and again.tid == 0x77


def test_bad_smps_are_named_errors() -> None:
    with pytest.raises(TruncatedError, match="256-byte MAD"):
        SMP.decode(bytes(100))
    cm = bytearray(dr_get(ATTR_NODE_INFO, []).encode())
    cm[1] = 0x07
    with pytest.raises(MalformedError, match="subnet management class"):
        SMP.decode(bytes(cm))
    with pytest.raises(EncodeError, match="63 hops"):
        dr_get(ATTR_NODE_INFO, [1] * 64).encode()
    with pytest.raises(EncodeError, match="64 bytes"):
        SMP(0x02, ATTR_PORT_INFO, data=bytes(65)).encode()
    with pytest.raises(EncodeError, match="at most 64 entries"):
        lft_block([1] * 65)
    assert lft_block([0, 1, 2]) == b"\0\x01\x02" + b"\xff" * 61


def test_an_sa_query_round_trips() -> None:
    raw = sa_request(METHOD_GET_TABLE, 0x35, bytes(64), PR_SLID | PR_DLID, tid=5)
    got = SAMad.decode(raw)
    assert (got.mad.mgmt_class, got.mad.class_version, got.mad.method) == (3, 2, METHOD_GET_TABLE)
    assert got.sa.component_mask == 0x30 and len(raw) == 256
    with pytest.raises(MalformedError, match="Subnet Administration"):
        SAMad.decode(dr_get(ATTR_NODE_INFO, []).encode())


def test_no_simulator_is_a_clear_error() -> None:
    name = f"rdmalab-ibsm-nobody-{os.getpid()}"
    with pytest.raises(IBSimNotRunning, match=f"no ibsim simulator listens on the abstract unix socket '{name}:ctl'"):
        IBSimClient("Hca1", sockname=name)


def _node(sm: SubnetManager, guid: int, switch: bool, ports: int) -> Node:
    info = NodeInfo(node_type=2 if switch else 1, num_ports=ports, node_guid=guid, port_guid=guid + (0 if switch else 1))
    node = Node(guid, info, ())
    for num in range(0 if switch else 1, ports + 1):
        node.ports[num] = Port(guid, num, guid if switch else guid + 1, PortInfo(), ())
    sm.nodes[guid] = node
    return node


def _link(sm: SubnetManager, a: int, pa: int, b: int, pb: int) -> None:
    sm.nodes[a].ports[pa].peer = (b, pb)
    sm.nodes[b].ports[pb].peer = (a, pa)


def test_min_hop_spreads_parallel_links_and_takes_the_short_way() -> None:
    """In memory, no simulator: two switches joined by two links; a third switch by a longer way."""
    sm = SubnetManager(port=None)  # type: ignore[arg-type]  # routing only: no MADs
    for g in (10, 20, 30):
        _node(sm, g, True, 8)
    for g in (1, 2, 3, 4):
        _node(sm, g, False, 1)
    _link(sm, 10, 3, 20, 3)
    _link(sm, 10, 5, 20, 5)  # two parallel links S10-S20
    _link(sm, 20, 6, 30, 6)
    _link(sm, 1, 1, 10, 1)
    _link(sm, 2, 1, 20, 1)
    _link(sm, 3, 1, 20, 2)
    _link(sm, 4, 1, 30, 1)
    sm.sm_node, sm.sm_port = sm.nodes[1], sm.nodes[1].ports[1]
    sm.assign_lids()
    sm.compute_routes()
    lid = {p.node_guid: n for n, p in sm.lids.items()}  # node GUID -> its LID
    assert lid == {1: 1, 10: 2, 20: 3, 30: 4, 2: 5, 3: 6, 4: 7}  # the SM's port first, then sweep order
    s10 = sm.nodes[10].lft
    # S10 reaches CAs 2 and 3 (both behind S20) one over each parallel link
    assert {s10[lid[2]], s10[lid[3]]} == {3, 5}
    assert sm.nodes[30].lft[lid[1]] == 6 and sm.nodes[20].lft[lid[1]] in (3, 5) and sm.nodes[10].lft[lid[1]] == 1
    assert s10[lid[10]] == 0  # a switch's own LID: port 0
    hops = {(s, d): sm.hops(sm.nodes[s].ports[1], sm.nodes[d].ports[1]) for s in (1, 2, 3, 4) for d in (1, 2, 3, 4)
            if s != d}
    assert hops[(1, 4)] == 4 and hops[(1, 2)] == 3 and hops[(2, 3)] == 2 and hops[(4, 1)] == 4
    # a table pointing back where it came from is a loop, which the walk reports as no route
    sm.nodes[20].lft[lid[4]] = 3
    sm.nodes[10].lft[lid[4]] = 3
    assert sm.hops(sm.nodes[1].ports[1], sm.nodes[4].ports[1]) is None
    assert route_hops({}, [], {}, (1, 1), 5, {}) is None


@requires_ibsim
def test_rdmalab_sm_prints_lids_and_tables(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with ibsim(net_file("net.2sw2path4hca"), tmp_path) as sim:
        rc = main(["sm", "--node", "Hca1", "--sockname", sim.sockname, "--ladder", "-w", str(tmp_path / "sm.pcap")])
    out = capsys.readouterr().out
    assert rc == 0
    assert "SM on Hca1 port 1, LID 1: Master, 6 nodes" in out
    assert "      1  CA      port GUID 0x0000000000100001  Hca1/1" in out
    assert "Linear forwarding table of Switch1 (LID 2)" in out and "LID     2 -> port   0   Switch1/0" in out
    assert re.search(r"^\s+\d+\s+SM -> Switch1\s+Set LinearForwardingTable DR path \[1\]$", out, re.M), out
    assert (tmp_path / "sm.pcap").stat().st_size > 256 * 100


def test_rdmalab_sm_without_a_simulator_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["sm", "--sockname", f"rdmalab-ibsm-nobody-{os.getpid()}"])
    assert rc == 1
    assert "no ibsim simulator listens" in capsys.readouterr().err


def test_a_real_connectx_capture_decodes_its_sminfo_and_path_record() -> None:
    """captures/hw_ib_connectx_erf.pcap (ConnectX HCAs, 2008): its DR SMInfo SMPs and its SubnAdmGet
    PathRecord decode to the values tshark shows (test_parity compares every field of it)."""
    path = Path(__file__).resolve().parents[2] / "captures" / "hw_ib_connectx_erf.pcap"
    if not path.exists():
        pytest.skip("captures/hw_ib_connectx_erf.pcap is not in this checkout")
    frames = {cp.frame_number: cp.packet for cp in read(path)}
    sminfo = frames[2].get(SMInfo)
    assert sminfo is not None and (sminfo.guid, sminfo.sm_state) == (0x0002C9020020B4DD, 3)  # master
    paths = frames[2].get(SMPPaths)
    assert paths is not None and paths.return_path >> (8 * 61) == 0x000601  # ReturnPath[1..2] = 6, 1
    record = frames[33].get(PathRecord)
    assert record is not None and (record.slid, record.dlid, record.mtu) == (4, 2, 4)
    assert record.sgid == int(ipaddress.IPv6Address("fe80::2:c902:24:f636"))


def _free_udp_ports(n: int) -> int:
    """A UDP port with the ``n`` after it free too (ibsim's remote mode uses PORT .. PORT + 10)."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n >= 65536:
            continue
        try:
            held = []
            for port in range(base, base + n + 1):
                t = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                held.append(t)
                t.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for t in held:
                t.close()
    pytest.skip("no run of 11 free UDP ports")


@requires_ibsim
def test_the_sm_over_ibsims_remote_mode(tmp_path: Path) -> None:
    """IBSIM_SERVER_NAME/PORT: the same protocol over UDP (``ibsim -r -l PORT``)."""
    port = _free_udp_ports(10)
    with ibsim(net_file("net.2sw2path4hca"), tmp_path, udp_port=port), \
            IBSimClient("Hca1", server="127.0.0.1", port=port, issm=True) as client:
        sm = SubnetManager(client)
        sm.run()
        assert sm.state_name == "Master" and len(sm.lids) == 6
        assert (client.port().lid, client.port().state) == (1, 4)


class _RefusingPort:
    """A MADPort whose agents answer every SMP with a status (or whose link is gone)."""

    def __init__(self, status: int = 0, fail: Exception | None = None) -> None:
        self.status, self.fail, self.sent = status, fail, 0

    def exchange(self, mad: bytes, dlid: int, dqp: int) -> bytes:
        self.sent += 1
        if self.fail is not None:
            raise self.fail
        smp = SMP.decode(mad)
        return get_response(smp, bytes(64), status=self.status).encode()


def test_a_refused_or_lost_smp_stops_the_sm_with_what_and_where() -> None:
    port = _RefusingPort(status=0x001C)
    with pytest.raises(SMError, match=r"Get NodeInfo DR path \[\] to path \[\]: status 0x001c"):
        SubnetManager(port).run()
    assert port.sent == 1
    lost = _RefusingPort(fail=TimeoutError("no answer in 2 s"))
    sm = SubnetManager(lost)
    with pytest.raises(SMError, match=r"Get NodeInfo DR path \[\] to path \[\] failed: no answer in 2 s"):
        sm.run()
    assert [e.src for e in sm.events] == ["SM"]  # the request is in the ladder, no answer
