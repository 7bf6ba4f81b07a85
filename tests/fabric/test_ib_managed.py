"""The engine's data on a subnet a subnet manager brought up: switches forward by the tables the SM
wrote into the subnet's agents, an HCA learns its LID from its PortInfo and the path to its peer
from the SA (rdmalab.fabric.ibfabric_subnet).  Our SM in-process; the stock OpenSM through
``rdmalab ibsim``'s server where it is installed."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
from ib_util import Side, connect_by_lid, side, wait

from rdmalab.fabric.ibfabric import IBFabric, IBSwitch
from rdmalab.fabric.ibfabric_subnet import (
    SubnetFabricError,
    SubnetLFT,
    SubnetMADs,
    fabric_on_subnet,
    own_port_info,
    path_record,
)
from rdmalab.fabric.ibsim_client import IBSimClient
from rdmalab.fabric.ibsim_server import IbsimServer
from rdmalab.fabric.ibsm import SubnetManager
from rdmalab.fabric.ibsm_sa import SubnetAdministrator, answer
from rdmalab.fabric.ibsubnet import Subnet
from rdmalab.verbs import enums as e
from rdmalab.verbs.wr import SGE, SendWR
from rdmalab.wire.sa import PathRecord
from rdmalab.wire.smp import ATTR_LINEAR_FORWARDING_TABLE, ATTR_PORT_INFO, PortInfo, dr_get

NET = Path(__file__).resolve().parent.parent / "data" / "ib" / "fattree2.net"
N = 5000  # bytes a WRITE carries: 3 packets at the path MTU of 2048 (ibsim's ports: MTUCap 4)
DATA = bytes((i * 7) % 251 for i in range(N))


def connect(a: Side, b: Side, ab: PathRecord, ba: PathRecord) -> None:
    """Both QPs to RTS, each AV (DLID, SL) and the path MTU from the PathRecord its side got from the SA."""
    assert ab.mtu == ba.mtu and ab.sl == ba.sl
    connect_by_lid(a, b, sl=ab.sl, mtu=ab.mtu, dlids=(ab.dlid, ba.dlid))


def write(fab: IBFabric, src: str, dst: str, ab: PathRecord, ba: PathRecord, n: int = N) -> bytes:
    """An RC WRITE of ``n`` bytes from ``src`` to ``dst`` by the two PathRecords; the bytes that landed."""
    a, b = side(fab, src), side(fab, dst)
    connect(a, b, ab, ba)
    a.mr.write(DATA[:n], n)
    wr = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(a.mr.buf, n, a.mr.lkey)],
                send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
    a.qp.post_send(wr)
    wcs = wait(fab, a.cq)
    assert [(w.wr_id, w.status) for w in wcs] == [(1, e.IBV_WC_SUCCESS)]
    return b.mr.read(n, 0)


def crossed(fab: IBFabric) -> dict[tuple[str, int], int]:
    """Packets each switch port sent."""
    return {(sw.name, num): p.counters["PortXmitPkts"] for sw in fab.switches for num, p in sw.ports.items()}


def test_our_sm_in_process_then_a_write_by_the_sas_path() -> None:
    subnet = Subnet.from_file(str(NET))
    mads = SubnetMADs(subnet)
    with pytest.raises(SubnetFabricError, match="no subnet manager"):
        fabric_on_subnet(subnet)  # nothing swept yet: no LIDs
    sm_port = mads.port("H1", issm=True)
    sm = SubnetManager(sm_port)
    sm.run()
    sa = SubnetAdministrator(sm)
    mads.serve(sm_port, lambda req: answer(sm, sa, req))

    fab = fabric_on_subnet(subnet, frames=True)
    # LIDs: each HCA's, read from its own PortInfo, are those the SM gave; SM LID too
    by_guid = {p.guid: lid for lid, p in sm.lids.items()}
    for hca in fab.hcas:
        assert hca.lid == by_guid[hca.guid] == hca.device.lid and hca.device.sm_lid == sm.sm_port.lid  # type: ignore[union-attr]
    # the switches' tables are the agents' (a view, not a copy) and hold what the SM computed
    for sw in fab.switches:
        assert isinstance(sw.lft, SubnetLFT) and sw.lft.node is subnet.node(sw.name)
        assert dict(sw.lft) == sm.nodes[subnet.node(sw.name).guid].lft

    # H1 asks the SA (a SubnAdmGet through the subnet to the SM's LID) for the path to H8
    h1, h8 = fab.node("H1"), fab.node("H8")
    before = len(sm.events)
    rec = path_record(mads.port("H1"), h1.device.sm_lid, h1.lid, h8.lid)  # type: ignore[attr-defined]
    back = path_record(mads.port("H8"), h8.device.sm_lid, h8.lid, h1.lid)  # type: ignore[attr-defined]
    assert (rec.slid, rec.dlid, back.dlid) == (h1.lid, h8.lid, h1.lid) and rec.dgid & (2**64 - 1) == h8.guid
    assert rec.mtu == 4 and [ev.src for ev in sm.events[before:]] == ["H1", "SM", "H8", "SM"]  # asked, answered
    assert write(fab, "H1", "H8", rec, back) == DATA
    assert fab.drops() == 0
    # the packets went the SM's way: H1's leaf to the spine its table names for H8's LID, and down
    leaf1 = fab.node("Leaf1")
    assert isinstance(leaf1, IBSwitch)
    up = leaf1.lft[h8.lid]
    spine = leaf1.ports[up].peer.node  # type: ignore[union-attr]
    sent = crossed(fab)
    assert sent[("Leaf1", up)] == 3 and sent[(spine.name, spine.lft[h8.lid])] == 3  # type: ignore[attr-defined]
    other = 15 - up  # the leaves' uplinks are ports 7 and 8
    assert sent[("Leaf1", other)] == 0

    # the SM moves H8's route on Leaf1 to the other spine (Set(LinearForwardingTable)): the next WRITE
    # follows the new table at once
    block = h8.lid // 64
    entries = [leaf1.lft.get(block * 64 + i, 0xFF) for i in range(64)]
    entries[h8.lid % 64] = other
    sm.set(ATTR_LINEAR_FORWARDING_TABLE, sm.nodes[subnet.node("Leaf1").guid].path, bytes(entries), attr_mod=block)
    assert leaf1.lft[h8.lid] == other and subnet.node("Leaf1").lft[h8.lid] == other
    assert write(fab, "H1", "H8", rec, back) == DATA
    assert crossed(fab)[("Leaf1", other)] == 3

    # and an entry the SM clears is a discard, counted at the switch's input port
    entries[h8.lid % 64] = 0xFF
    sm.set(ATTR_LINEAR_FORWARDING_TABLE, sm.nodes[subnet.node("Leaf1").guid].path, bytes(entries), attr_mod=block)
    with pytest.raises(KeyError):
        leaf1.lft[h8.lid]
    a, b = side(fab, "H1"), side(fab, "H8")
    connect(a, b, rec, back)
    wr = SendWR(wr_id=2, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(a.mr.buf, 64, a.mr.lkey)],
                send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
    a.qp.post_send(wr)
    fab.run_us(50)
    assert leaf1.ports[1].counters["PortXmitDiscards"] >= 1


def test_a_port_the_sm_has_not_activated_is_refused() -> None:
    subnet = Subnet.from_file(str(NET))
    info = own_port_info(subnet, "H3")
    assert (info.lid, info.port_state, info.local_port_num) == (0, 2, 1)  # Init, no LID: as ibsim starts it
    two = Subnet.from_text('Switch 4 "S"\n[1] "H"[1]\n[2] "H"[2]\n\nHca 2 "H"\n[1] "S"[1]\n[2] "S"[2]\n')
    for p in two.ports():
        p.lid = 1 if p.node.is_switch else 2
    with pytest.raises(SubnetFabricError, match='CA "H" has 2 linked ports'):
        fabric_on_subnet(two)


def test_the_lft_view_is_the_agents_table_up_to_linear_fdb_top() -> None:
    subnet = Subnet.from_file(str(NET))
    leaf = subnet.node("Leaf1")
    view = SubnetLFT(leaf)
    leaf.lft[5] = 2
    leaf.linear_fdb_top = 4
    assert 5 not in view and dict(view) == {}  # above LinearFDBTop: no route, as the switch forwards
    leaf.linear_fdb_top = 5
    assert view[5] == 2 and dict(view) == {5: 2} and len(view) == 1
    view[9] = 7  # written into the agent's table, LinearFDBTop raised to hold it
    assert leaf.lft[9] == 7 and leaf.linear_fdb_top == 9
    del view[5]
    assert leaf.lft[5] == 0xFF and dict(view) == {9: 7}
    with pytest.raises(KeyError):
        del view[5]
    with pytest.raises(SubnetFabricError, match="not a switch"):
        SubnetLFT(subnet.node("H1"))


requires_opensm = pytest.mark.skipif(shutil.which("opensm") is None or shutil.which("ibsim-run") is None,
                                     reason="opensm and ibsim-run (Debian: opensm, ibsim-utils) are not installed")


@requires_opensm
def test_opensm_through_rdmalab_ibsim_then_a_write_by_its_path_record(tmp_path: Path) -> None:
    """The stock OpenSM sweeps the subnet served by rdmalab ibsim's server (in this process); the
    data path then runs on the LIDs and tables OpenSM wrote, by the PathRecord of OpenSM's SA."""
    subnet = Subnet.from_file(str(NET))
    sockname = f"rdmalab-managed-{os.getpid()}"
    server = IbsimServer(subnet, sockname)
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    env = dict(os.environ, IBSIM_SOCKNAME=sockname, SIM_HOST="H1", OSM_TMP_DIR=str(tmp_path),
               OSM_CACHE_DIR=str(tmp_path))
    log = tmp_path / "osm.log"
    osm = subprocess.Popen(["ibsim-run", "opensm", "-e", "-f", str(log), "-d2", "-s", "0"], env=env,
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while "SUBNET UP" not in (log.read_text(errors="replace") if log.exists() else ""):
            assert osm.poll() is None and time.monotonic() < deadline, "OpenSM did not bring the subnet up"
            time.sleep(0.1)
        h1_info = own_port_info_over(sockname, "H1")
        h8_info = own_port_info_over(sockname, "H8")
        with IBSimClient("H1", sockname=sockname) as client:
            rec = path_record(client, h1_info.master_sm_lid, h1_info.lid, h8_info.lid)
        with IBSimClient("H8", sockname=sockname) as client:
            back = path_record(client, h8_info.master_sm_lid, h8_info.lid, h1_info.lid)
    finally:
        osm.terminate()
        osm.wait(timeout=10)
        server.stop()
        thread.join(timeout=10)
        server.close()
    fab = fabric_on_subnet(subnet)
    h1, h8 = fab.node("H1"), fab.node("H8")
    assert (h1.lid, h8.lid) == (h1_info.lid, h8_info.lid) == (rec.slid, rec.dlid)
    # OpenSM's tables, in the agents: every switch routes every HCA's LID
    for sw in fab.switches:
        assert all(h.lid in sw.lft for h in fab.hcas), sw.name
    assert write(fab, "H1", "H8", rec, back) == DATA
    leaf1 = fab.node("Leaf1")
    assert isinstance(leaf1, IBSwitch)
    assert crossed(fab)[("Leaf1", leaf1.lft[h8.lid])] == 3 and fab.drops() == 0


def own_port_info_over(sockname: str, node: str) -> PortInfo:
    """A node's own PortInfo, asked over the simulator's sockets (as the HCA's driver would)."""
    with IBSimClient(node, sockname=sockname) as client:
        return PortInfo.decode(client.exchange(dr_get(ATTR_PORT_INFO, (), attr_mod=1).encode(), 0xFFFF, 0), 64)
