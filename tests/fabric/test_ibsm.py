"""rdmalab's subnet manager against the stock ibsim, checked by the stock diags and by OpenSM.

* Our SM brings the subnet up: every linked port Active, one LID per CA port and switch.
* ``ibnetdiscover``, ``ibroute`` and ``sminfo`` (infiniband-diags, under ibsim-run) see the LIDs and
  the forwarding tables our SM wrote, and our SM as master.
* The oracle: OpenSM's min-hop (``opensm -R minhop``) on the same net, in a fresh ibsim, gives tables
  with which every pair of HCA ports reaches each other in the same number of hops as with ours, and
  that number is the shortest in the graph.  Both sides are read the same way, by the stock diags
  (``ibnetdiscover -p`` for the links, ``ibroute`` for each switch's table), and compared by port GUID
  (the LIDs differ).
"""

from __future__ import annotations

import collections
import subprocess
import threading
from pathlib import Path

import pytest
from ibsm_util import (
    Sim,
    ibroute_table,
    ibsim,
    net_file,
    netdiscover_ports,
    rdmalab_ibsim,
    requires_diags,
    requires_ibsim,
    requires_opensm,
    wait_master,
)

from rdmalab.cli import main
from rdmalab.fabric.ibsim_client import IBSimClient
from rdmalab.fabric.ibsm import SubnetManager, route_hops
from rdmalab.fabric.ibsm_sa import serve
from rdmalab.wire.smp import PORT_STATE_ACTIVE, SMP, PortInfo, SMInfo

NETS = ["net.2sw2path4hca", "net.2sw2path4hca2port", "fattree-2x4.net", "ring5-chord.net"]

pytestmark = [requires_ibsim, requires_diags]


def stock_view(sim: Sim, node: str) -> tuple[dict[tuple[int, int], tuple[int, int]], dict[int, int], set[int],
                                             dict[int, dict[int, tuple[int, int]]]]:
    """The subnet as the stock diags print it: links, port GUID -> LID, switch GUIDs, and each
    switch's ``ibroute`` table (LID -> (port, destination port GUID))."""
    links, lids, switches = netdiscover_ports(sim.run(node, "ibnetdiscover", "-p"))
    tables = {sw: ibroute_table(sim.run(node, "ibroute", str(lids[sw]))) for sw in switches}
    return links, lids, switches, tables


def all_hops(links: dict[tuple[int, int], tuple[int, int]], lids: dict[int, int], switches: set[int],
             tables: dict[int, dict[int, tuple[int, int]]]) -> dict[tuple[int, int], int | None]:
    """(source CA port GUID, destination CA port GUID) -> links crossed following the tables."""
    lfts = {sw: {guid: port for port, guid in table.values()} for sw, table in tables.items()}
    port_guids = {key: key[0] for key in links if key[0] not in switches}
    port_guids.update({(sw, 0): sw for sw in switches})
    cas = [key for key in links if key[0] not in switches]
    return {(s[0], d[0]): route_hops(links, switches, lfts, s, d[0], port_guids) for s in cas for d in cas if s != d}


def shortest(links: dict[tuple[int, int], tuple[int, int]], switches: set[int]) -> dict[tuple[int, int], int]:
    """The fewest links between every two CA ports, by breadth-first search (through switches only)."""
    adjacent = collections.defaultdict(set)
    for (a, _), (b, _) in links.items():
        adjacent[a].add(b)
    cas = [key[0] for key in links if key[0] not in switches]
    out = {}
    for src in cas:
        dist = {src: 0}
        queue = collections.deque([src])
        while queue:
            here = queue.popleft()
            if here != src and here not in switches:
                continue  # a CA does not forward
            for nxt in adjacent[here]:
                if nxt not in dist:
                    dist[nxt] = dist[here] + 1
                    queue.append(nxt)
        out.update({(src, d): dist[d] for d in cas if d != src and d in dist})
    return out


def run_our_sm(sim: Sim, node: str = "Hca1") -> SubnetManager:
    with IBSimClient(node, sockname=sim.sockname, issm=True) as client:
        sm = SubnetManager(client)
        sm.run()
    return sm


@pytest.mark.parametrize("net", NETS)
def test_our_sm_brings_the_subnet_up_and_the_diags_see_it(net: str, tmp_path: Path) -> None:
    with ibsim(net_file(net), tmp_path) as sim, IBSimClient("Hca1", sockname=sim.sockname, issm=True) as client:
        sm = SubnetManager(client)
        sm.run()
        assert sm.state_name == "Master"
        # every linked port, switch and CA, reported Active by ibsim in answer to the last Set
        assert set(sm.port_states().values()) == {"Active"}, sm.port_states()
        # one LID per CA port and switch, 1.. without gaps, the SM's port first
        assert sorted(sm.lids) == list(range(1, len(sm.lids) + 1))
        assert sm.sm_port is not None and sm.sm_port.lid == 1
        # ask ibsim afresh (not our record of its answers): the SM's port is Active with LID 1
        assert (client.port().lid, client.port().state) == (1, PORT_STATE_ACTIVE)

        links, lids, switches, tables = stock_view(sim, "Hca2")
        ours = {p.guid: lid for lid, p in sm.lids.items()}
        assert lids == ours  # ibnetdiscover's LIDs are the ones we assigned
        assert switches == {n.guid for n in sm.nodes.values() if n.is_switch}
        for sw in switches:  # ibroute prints the tables we wrote, LID by LID
            mine = sm.nodes[sw].lft
            assert {lid: port for lid, (port, _) in tables[sw].items()} == mine
            assert {lid: guid for lid, (_, guid) in tables[sw].items()} == {lid: sm.lids[lid].guid for lid in mine}
        # the links ibnetdiscover finds are the ones our sweep found
        our_links = {(n if n in switches else sm.nodes[n].ports[p].guid, p) for n, p in sm.links()}
        assert set(links) == our_links

        stop = threading.Event()
        server = threading.Thread(target=serve, args=(sm, client, stop))
        server.start()
        try:
            line = sim.run("Hca3" if "Hca3" in sim.net.read_text() else "Hca2", "sminfo")
        finally:
            stop.set()
            server.join()
        assert "SMINFO_MASTER" in line and f"sm lid 1 sm guid 0x{sm.sm_port.guid:x}" in line, line


@requires_opensm
@pytest.mark.parametrize("net", NETS)
def test_same_hops_as_opensm_minhop(net: str, tmp_path: Path) -> None:
    """The oracle: every pair of HCA ports is reachable with our tables and with OpenSM's min-hop
    tables, in the same number of hops, the shortest in the graph."""
    path = net_file(net)
    with ibsim(path, tmp_path) as sim:
        sm = run_our_sm(sim)
        ours = stock_view(sim, "Hca2")
    with ibsim(path, tmp_path) as sim:
        log = tmp_path / "osm.log"
        osm = subprocess.Popen(["ibsim-run", "opensm", "-e", "-f", str(log), "-s", "0", "-R", "minhop"],
                               env=sim.env("Hca1"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_master(sim, "Hca2")
            theirs = stock_view(sim, "Hca2")
        finally:
            osm.terminate()
            osm.wait(timeout=10)
    assert ours[0] == theirs[0], "the two runs see different links"
    assert set(ours[1]) == set(theirs[1]), "the two runs see different ports"
    our_hops = all_hops(*ours)
    osm_hops = all_hops(*theirs)
    best = shortest(ours[0], ours[2])
    cas = {k[0] for k in ours[0] if k[0] not in ours[2]}
    assert len(our_hops) == len(cas) * (len(cas) - 1) > 0
    assert None not in our_hops.values(), [k for k, v in our_hops.items() if v is None]
    assert None not in osm_hops.values(), [k for k, v in osm_hops.items() if v is None]
    assert our_hops == osm_hops
    assert our_hops == best
    # and our SM's own view of its hops agrees with the walk of what ibroute printed
    by_guid = {p.guid: p for p in sm.lids.values()}
    assert {(s, d): sm.hops(by_guid[s], by_guid[d]) for s, d in our_hops} == our_hops


def test_port_info_set_keeps_what_it_does_not_change() -> None:
    """The SM writes PortInfo back as read, with only the fields it means to change (the read-modify-
    write every Set relies on): encode/decode keep every field."""
    read = PortInfo(lid=0, master_sm_lid=0, capability_mask=0x0250C04A, local_port_num=1, link_width_enabled=2,
                    link_width_supported=3, link_width_active=2, link_speed_supported=7, port_state=2,
                    port_phys_state=5, link_down_default_state=2, link_speed_active=1, link_speed_enabled=1,
                    neighbor_mtu=4, vl_cap=4, mtu_cap=4, vl_stall_count=7, hoq_life=18, operational_vls=4,
                    subnet_timeout=18, capability_mask2=0x30)
    back = PortInfo.decode(read.replace(lid=7, master_sm_lid=1, port_state=3).encode())
    assert back == read.replace(lid=7, master_sm_lid=1, port_state=3)
    assert len(read.encode()) == 64


@pytest.mark.parametrize("net", NETS)
def test_the_same_sweep_on_rdmalab_ibsim_as_on_stock_ibsim(net: str, tmp_path: Path) -> None:
    """Our SM against the lab's own simulator (``rdmalab ibsim``, branch ibsim) and against the stock
    ibsim: the same MADs in the same order, every answer byte for byte, the same LIDs and tables."""
    pytest.importorskip("rdmalab.fabric.ibsim_server", reason="rdmalab ibsim (rdmalab.fabric.ibsim_server) "
                                                               "is not in this tree")
    path = net_file(net)
    with ibsim(path, tmp_path) as sim:
        stock = run_our_sm(sim)
    with rdmalab_ibsim(path, tmp_path) as sim:
        ours = run_our_sm(sim)
        diags = stock_view(sim, "Hca2")
    assert ours.ladder() == stock.ladder()
    assert [e.mad for e in ours.events] == [e.mad for e in stock.events]
    assert {lid: p.guid for lid, p in ours.lids.items()} == {lid: p.guid for lid, p in stock.lids.items()}
    assert ours.lfts_by_guid() == stock.lfts_by_guid()
    assert {sw: {lid: port for lid, (port, _) in t.items()} for sw, t in diags[3].items()} == \
        {n.guid: n.lft for n in ours.nodes.values() if n.is_switch}


@requires_opensm
def test_with_opensm_master_already_our_sm_stands_by(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """IBA 14.4.1: an SM that finds a master (Get(SMInfo) of the ports whose CapabilityMask says IsSM)
    goes Standby and programs nothing; OpenSM stays master and its tables stay."""
    with ibsim(net_file("net.2sw2path4hca"), tmp_path) as sim:
        osm = subprocess.Popen(["ibsim-run", "opensm", "-e", "-f", str(tmp_path / "osm.log"), "-s", "0"],
                               env=sim.env("Hca1"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_master(sim, "Hca2")
            before = stock_view(sim, "Hca3")
            with IBSimClient("Hca2", sockname=sim.sockname, issm=True) as client:
                sm = SubnetManager(client)
                sm.run()
            after = stock_view(sim, "Hca3")
            line = sim.run("Hca3", "sminfo")
            assert main(["sm", "--node", "Hca3", "--sockname", sim.sockname]) == 0
            told = capsys.readouterr().out
        finally:
            osm.terminate()
            osm.wait(timeout=10)
    assert sm.state_name == "Standby" and sm.masters == [0x100001]  # OpenSM's port, Hca1/1
    polled = [e for e in sm.events if "SMInfo" in e.summary]
    # Hca2 -> Switch2 (out of port 3) -> Switch1 (out of port 1) -> Hca1, where OpenSM answers
    assert [e.summary for e in polled] == ["Get SMInfo DR path [1, 3, 1]", "GetResp SMInfo DR path [1, 3, 1]"]
    assert SMInfo.decode(SMP.decode(polled[1].mad).data).sm_state == 3
    assert not any(e.summary.startswith("Set") for e in sm.events)  # it changed nothing
    assert sm.lids == {} and after == before
    assert "sm guid 0x100001" in line and "SMINFO_MASTER" in line
    assert told.startswith("SM on Hca3 port 1: Standby, 6 nodes") and "0x0000000000100001: nothing changed" in told


def test_an_sm_that_died_with_its_port_saying_issm_does_not_stop_ours(tmp_path: Path) -> None:
    with ibsim(net_file("net.2sw2path4hca"), tmp_path) as sim:
        dead = IBSimClient("Hca4", sockname=sim.sockname, issm=True)
        for sock in (dead._ctl, dead._data):  # gone without a word: its port keeps IsSM
            assert sock is not None
            sock.close()
        with IBSimClient("Hca1", sockname=sim.sockname, issm=True) as client:
            sm = SubnetManager(client)
            sm.run()
    # the sweep saw Hca4/1 say IsSM and asked it; no answer came (ibsim found the client dead)
    asked = [(e.src, e.dst, e.summary) for e in sm.events if e.phase == "poll sms"]
    assert asked == [("SM", "Hca4", "Get SMInfo DR path [1, 3, 2]")]
    assert sm.masters == []
    assert sm.state_name == "Master" and set(sm.port_states().values()) == {"Active"}
