"""Notebook 14 (InfiniBand's own network): the in-process agents the SM sweeps, and the checkers' verdicts.

* FabricAgents: rdmalab's SM brings the fabric up through them (LIDs in the HCAs' verbs, tables in the
  switches, every port Active), a refused Set and a route through no link are named; and, where the stock
  OpenSM and ibsim are installed, OpenSM on the same subnet's net file gives the same LIDs to the same nodes
  and tables of the same hop counts (the oracle);
* ib.lft, ib.lrh, ib.hol are the student's own (a classmate's right answer fails); near misses explained;
* ib.why: the mechanism.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator

import pytest

from rdmalab import lab
from rdmalab.lab import FAIL, PASS
from rdmalab.lab.checkers.infiniband import (
    FabricAgents,
    SMPLost,
    book_subnet,
    bring_up,
    hol_runs,
    lft_answer,
    lrh_answer,
    run_opensm,
    stock_tools,
    victim_gbps,
)
from rdmalab.lab.variant import as_student
from rdmalab.wire.smp import ATTR_NODE_INFO, ATTR_PORT_INFO, SMP, PortInfo, attribute_data, dr_get, dr_set

STUDENTS = ("alice", "bob", "")


@pytest.fixture(params=STUDENTS, ids=[s or "book" for s in STUDENTS])
def student(request: pytest.FixtureRequest) -> Iterator[str]:
    with as_student(request.param):
        yield request.param


def test_the_sm_brings_the_fabric_up_through_the_agents() -> None:
    fab = book_subnet()
    assert all(not sw.lft for sw in fab.switches)
    sm = bring_up(fab)
    assert sm.state_name == "Master" and len(sm.nodes) == 5
    assert set(sm.port_states().values()) == {"Active"}
    by_name = {sm.nodes[p.node_guid].name: lid for lid, p in sm.lids.items()}
    assert by_name["ha"] == 1  # the SM's own port first
    for h in fab.hcas:
        assert h.device.lid == by_name[h.name]  # what the HCA's verbs report is what the SM set
    for sw in fab.switches:
        assert sw.lft == next(n.lft for n in sm.nodes.values() if n.name == sw.name)  # the tables written
    assert sm.hops(sm.lids[by_name["ha"]], sm.lids[by_name["hb"]]) == 3


def test_agents_refuse_what_a_real_agent_refuses() -> None:
    fab = book_subnet()
    agents = FabricAgents(fab, "ha")
    with pytest.raises(SMPLost, match="sw1 port 2 has no link"):
        agents.exchange(dr_get(ATTR_NODE_INFO, (1, 2)).encode(), 0xFFFF, 0)
    # a port may not jump from Init to Active (IBA 7.2): the Set is refused with a status
    info = PortInfo.decode(SMP.decode(agents.exchange(dr_get(ATTR_PORT_INFO, (), 1).encode(), 0xFFFF, 0)).data)
    assert info.state_name == "Initialize" and info.lid == 0
    bad = SMP.decode(agents.exchange(dr_set(ATTR_PORT_INFO, (), attribute_data(info.replace(port_state=4)), 1)
                                     .encode(), 0xFFFF, 0))
    assert bad.status != 0 and PortInfo.decode(bad.data).state_name == "Initialize"
    with pytest.raises(ValueError, match="is a switch"):
        FabricAgents(fab, "sw1")


@pytest.mark.skipif(not stock_tools()[0], reason=f"the stock tools: {stock_tools()[1]}")
def test_opensm_gives_the_same_lids_and_hop_counts() -> None:
    """The oracle: the stock OpenSM on the same subnet (its net file) numbers the same nodes alike, and its
    tables cross as many links as ours between every two HCAs."""
    sm = bring_up(book_subnet())
    with tempfile.TemporaryDirectory() as tmp:
        out = run_opensm(book_subnet(), tmp)
    theirs = {m.group(1): int(m.group(2)) for m in re.finditer(r'# "(\w+)"(?: base port 0)? lid (\d+)',
                                                                out["ibnetdiscover"])}
    ours = {sm.nodes[p.node_guid].name: lid for lid, p in sm.lids.items()}
    assert theirs == ours, (theirs, ours)
    routes = {sw: {int(m.group(1), 16): int(m.group(2)) for m in re.finditer(r"^0x([0-9a-f]+) (\d+) :",
                                                                            out[f"ibroute {sw}"], re.M)}
              for sw in ("sw1", "sw2")}
    for sw, table in routes.items():
        mine = next(n.lft for n in sm.nodes.values() if n.name == sw)
        assert set(table) == set(mine)
        for lid, port in table.items():  # the same port, or the other of the two parallel links
            assert port == mine[lid] or {port, mine[lid]} == {3, 4}, (sw, lid, port, mine[lid])


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
