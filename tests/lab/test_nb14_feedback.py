"""Notebook 14 (InfiniBand's own network): the notebook's path through the house's subnet model, and the
checkers' verdicts.

* the book's net file read into a Subnet, swept by rdmalab's SM through SubnetMADs: LIDs in the HCAs'
  PortInfo and verbs, the SM's tables in the switches' agents and the data path's switches, every port
  Active; the PathRecords asked of the SA through the subnet; the WRITE addressed by them, crossing the
  links the tables name; bad input named;
* where the stock OpenSM is installed, OpenSM on the same net file (served by rdmalab ibsim's server) gives
  the same LIDs to the same nodes and tables of the same hop counts (the oracle), and the WRITE runs on the
  tables it wrote, by its SA's PathRecords;
* ib.lft, ib.lrh, ib.hol are the student's own (a classmate's right answer fails); near misses explained;
* ib.why: the mechanism.
"""

from __future__ import annotations

import dataclasses
import re
import tempfile
from collections.abc import Iterator

import pytest

from rdmalab import lab
from rdmalab.fabric.ibfabric_subnet import SubnetFabricError, SubnetMADs, fabric_on_subnet, own_port_info
from rdmalab.fabric.ibsubnet import Subnet
from rdmalab.fabric.ibsubnet_netfile import NetFileError
from rdmalab.lab import FAIL, PASS
from rdmalab.lab.checkers.infiniband import (
    BOOK_LINKS,
    ask_paths,
    book_subnet,
    bring_up,
    hol_runs,
    lft_answer,
    lft_of,
    lrh_answer,
    net_file,
    requests_of,
    run_opensm,
    stock_tools,
    tapped_write,
    victim_gbps,
    write_across,
)
from rdmalab.lab.variant import as_student
from rdmalab.wire.ib import LRH

STUDENTS = ("alice", "bob", "")


@pytest.fixture(params=STUDENTS, ids=[s or "book" for s in STUDENTS])
def student(request: pytest.FixtureRequest) -> Iterator[str]:
    with as_student(request.param):
        yield request.param


def sent(fab: object, switch: str, ports: tuple[int, ...] = (3, 4)) -> dict[int, int]:
    """Packets ``switch`` sent on each of ``ports`` (the links between sw1 and sw2)."""
    return {n: fab.node(switch).ports[n].counters["PortXmitPkts"] for n in ports}  # type: ignore[attr-defined]


def test_the_sm_brings_the_subnet_up_and_the_fabric_follows_it() -> None:
    subnet = book_subnet()
    assert own_port_info(subnet, "hb").lid == 0 and all(n.lft.count(0xFF) == len(n.lft) for n in subnet.nodes
                                                         if n.is_switch)
    with pytest.raises(SubnetFabricError, match="no subnet manager"):
        fabric_on_subnet(subnet)  # no LIDs: no data path yet
    mads = SubnetMADs(subnet)
    sm = bring_up(mads, "ha")
    assert sm.state_name == "Master" and len(sm.nodes) == 5
    assert set(sm.port_states().values()) == {"Active"}
    by_name = {sm.nodes[p.node_guid].name: lid for lid, p in sm.lids.items()}
    assert by_name["ha"] == 1  # the SM's own port first
    fab = fabric_on_subnet(subnet, mtu=1024)
    for h in fab.hcas:
        info = own_port_info(subnet, h.name)
        # what the HCA's port and its verbs report is what the SM set
        assert h.device.lid == info.lid == by_name[h.name] and h.device.sm_lid == info.master_sm_lid == 1
    for sw in fab.switches:
        assert dict(sw.lft) == lft_of(sm, sw.name)  # the tables written, in the agents the data path reads
    assert sm.hops(sm.lids[by_name["ha"]], sm.lids[by_name["hb"]]) == 3


def test_the_write_goes_by_the_sas_paths_and_the_sms_tables() -> None:
    subnet = book_subnet()
    mads = SubnetMADs(subnet)
    sm = bring_up(mads)
    fab = fabric_on_subnet(subnet, mtu=1024, vls=4)
    ha, hb = fab.node("ha"), fab.node("hb")
    before = len(sm.events)
    there, back = ask_paths(mads, fab, "ha", "hb")
    # each HCA asked the SA through the subnet, and the SA answered it
    assert [(ev.src, ev.dst) for ev in sm.events[before:]] == [("ha", "SM"), ("SM", "ha"), ("hb", "SM"), ("SM", "hb")]
    assert (there.slid, there.dlid, back.slid, back.dlid) == (ha.lid, hb.lid, hb.lid, ha.lid)
    with tempfile.TemporaryDirectory() as tmp:
        packets = tapped_write(fab, 3000, there, back, f"{tmp}/w.pcap", sl=6)
    reqs = requests_of(packets)
    assert [p[LRH].pktlen for p in reqs] == [(8 + 12 + 16 + 1024 + 4) // 4, (8 + 12 + 1024 + 4) // 4,
                                             (8 + 12 + 952 + 4) // 4]  # path MTU: the ports' 1024
    assert {(p[LRH].dlid, p[LRH].slid, p[LRH].sl, p[LRH].vl) for p in reqs} == {(hb.lid, ha.lid, 6, 6 % 4)}
    # the requests left sw1 by the port its table names for hb's LID; the ACK left sw2 by its entry for ha's
    up = lft_of(sm, "sw1")[hb.lid]
    assert sent(fab, "sw1") == {up: 3, 7 - up: 0}
    assert sum(sent(fab, "sw2").values()) == 1 and sent(fab, "sw2")[lft_of(sm, "sw2")[ha.lid]] == 1
    assert len(packets) == 4 and fab.drops() == 0


def test_bad_input_is_named() -> None:
    subnet = book_subnet()
    mads = SubnetMADs(subnet)
    bring_up(mads)
    fab = fabric_on_subnet(subnet)
    with pytest.raises(ValueError, match="'sw1' is not an HCA"):
        ask_paths(mads, fab, "ha", "sw1")
    there, back = ask_paths(mads, fab, "ha", "hc")
    with pytest.raises(ValueError, match="destination LID 77 is no HCA's"):
        write_across(fab, 64, dataclasses.replace(there, dlid=77), back)
    with pytest.raises(ValueError, match="back goes from LID 5 to 1, not from 4 to 1"):
        write_across(fab, 64, dataclasses.replace(there, dlid=4), back)
    with pytest.raises(ValueError, match="'sw9' is not one of the nodes"):
        net_file([*BOOK_LINKS, ("sw1", 5, "sw9", 1)], hcas=["ha", "hb", "hc"], switches=["sw1", "sw2"])
    twice = net_file([*BOOK_LINKS, ("sw1", 3, "sw2", 5)], hcas=["ha", "hb", "hc"], switches=["sw1", "sw2"])
    with pytest.raises(NetFileError, match=r'twice.net:\d+: port 3 of "sw1" is listed twice'):
        Subnet.from_text(twice, "twice.net")


@pytest.mark.skipif(bool(stock_tools()), reason=f"the stock tools: {stock_tools()}")
def test_opensm_gives_the_same_lids_and_hop_counts_and_carries_the_write() -> None:
    """The oracle: the stock OpenSM on the same subnet (its net file, served by rdmalab ibsim's server) numbers the
    same nodes alike, and its tables cross as many links as ours between every two HCAs; the WRITE then runs on
    the tables OpenSM wrote, by the PathRecords of OpenSM's SA."""
    sm = bring_up(SubnetMADs(book_subnet()))
    osm_subnet = book_subnet()
    with tempfile.TemporaryDirectory() as tmp:
        out = run_opensm(osm_subnet, tmp, pairs=(("ha", "hb"), ("hb", "ha")))
    theirs = {m.group(1): int(m.group(2)) for m in re.finditer(r'# "(\w+)"(?: base port 0)? lid (\d+)',
                                                                out.ibnetdiscover)}
    ours = {sm.nodes[p.node_guid].name: lid for lid, p in sm.lids.items()}
    assert theirs == ours, (theirs, ours)
    routes = {sw: {int(m.group(1), 16): int(m.group(2)) for m in re.finditer(r"^0x([0-9a-f]+) (\d+) :",
                                                                            out.ibroute[sw], re.M)}
              for sw in ("sw1", "sw2")}
    for sw, table in routes.items():
        mine = lft_of(sm, sw)
        assert set(table) == set(mine)
        for lid, port in table.items():  # the same port, or the other of the two parallel links
            assert port == mine[lid] or {port, mine[lid]} == {3, 4}, (sw, lid, port, mine[lid])
    # the data path on OpenSM's LIDs and tables (what ibroute printed), by OpenSM's SA's PathRecords
    fab = fabric_on_subnet(osm_subnet, mtu=1024)
    for sw, table in routes.items():
        assert dict(fab.node(sw).lft) == table
    there, back = out.paths[("ha", "hb")], out.paths[("hb", "ha")]
    assert (there.slid, there.dlid) == (theirs["ha"], theirs["hb"]) == (back.dlid, back.slid)
    with tempfile.TemporaryDirectory() as tmp:
        packets = tapped_write(fab, 3000, there, back, f"{tmp}/osm.pcap")
    assert len(requests_of(packets)) == 3 and fab.drops() == 0
    assert sent(fab, "sw1")[routes["sw1"][theirs["hb"]]] == 3


def test_lft(student: str) -> None:
    lid, port, _ = lft_answer()
    assert lab.check("ib.lft", {"lid": lid, "port": port}).status == PASS
    off = lab.check("ib.lft", {"lid": lid % 6 + 1, "port": port})
    assert off.status == FAIL and "LID" in off.message
    wrong_port = lab.check("ib.lft", {"lid": lid, "port": port % 6 + 1})
    assert wrong_port.status == FAIL and "forwarding table" in wrong_port.message


def test_lrh(student: str) -> None:
    s = lab.scenario("ib.lrh")
    right = lrh_answer(s)
    assert lab.check("ib.lrh", right).status == PASS
    tail = s.length - (right["packets"] - 1) * s.mtu
    in_bytes = lab.check("ib.lrh", {**right, "last_pktlen": right["last_pktlen"] * 4})
    assert in_bytes.status == FAIL and "4-byte words" in in_bytes.message
    with_vcrc = lab.check("ib.lrh", {**right, "last_pktlen": right["last_pktlen"] + 1})  # the VCRC's 2 bytes, rounded up
    assert with_vcrc.status == FAIL and "VCRC" in with_vcrc.message
    with_reth = lab.check("ib.lrh", {**right, "last_pktlen": (tail + 3) // 4 + (8 + 12 + 16 + 4) // 4})
    assert with_reth.status == FAIL and "RETH" in with_reth.message
    sl_not_vl = lab.check("ib.lrh", {**right, "vl": s.sl})
    assert sl_not_vl.status == FAIL and ("VL" in sl_not_vl.message)


def test_hol(student: str) -> None:
    s = lab.scenario("ib.hol")
    shared, own = (victim_gbps(r) for r in hol_runs(s.senders, s.rate_gbps))
    assert own > 0.9 * s.rate_gbps > shared  # the premise: blocked on the shared VL, free on its own
    for r in hol_runs(s.senders, s.rate_gbps):
        assert r.summary["drops"] == 0
    assert lab.check("ib.hol", {"shared_vl_gbps": shared, "own_vl_gbps": own}).status == PASS
    swapped = lab.check("ib.hol", {"shared_vl_gbps": own, "own_vl_gbps": shared})
    assert swapped.status == FAIL and "other run" in swapped.message


def test_a_classmates_answers_fail() -> None:
    with as_student("alice"):
        lid, port, _ = lft_answer()
        lft = {"lid": lid, "port": port}
        lrh = lrh_answer(lab.scenario("ib.lrh"))
        s = lab.scenario("ib.hol")
        hol = dict(zip(("shared_vl_gbps", "own_vl_gbps"),
                       (victim_gbps(r) for r in hol_runs(s.senders, s.rate_gbps)), strict=True))
    with as_student("bob"):
        verdicts = [lab.check("ib.lft", lft).status, lab.check("ib.lrh", lrh).status,
                    lab.check("ib.hol", hol).status]
    assert verdicts.count(FAIL) >= 2, verdicts


def test_why() -> None:
    assert lab.check("ib.why", "B").status == PASS
    a = lab.check("ib.why", "A")
    assert a.status == FAIL and "dropped" in a.message
    assert lab.check("ib.why", "C").status == FAIL
    assert lab.check("ib.why", "D").status == FAIL
