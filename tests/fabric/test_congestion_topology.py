"""Topologies: ECMP spreads flows over a leaf-spine's spines; a dumbbell's bottleneck is shared."""

from __future__ import annotations

from rdmalab.fabric.congestion_scenarios import NS3_RDMA, flow_table
from rdmalab.fabric.switched import SwitchedFabric
from rdmalab.fabric.topology import dumbbell, leaf_spine, star


def test_leaf_spine_ecmp_and_incast() -> None:
    fab = SwitchedFabric(dcqcn=NS3_RDMA, seed=3)
    rows = leaf_spine(fab, leaves=2, spines=2, hosts_per_leaf=4)
    assert len(fab.switches) == 4 and len(fab.hosts) == 8
    flows = [fab.add_flow(src, rows[1][0]) for src in rows[0]]  # 4:1 incast across the spines
    spines = {p.peer.node.name for f in flows for p in f.fwd.values() if p.peer is not None
              and p.peer.node.name.startswith("spine")}
    assert spines == {"spine1", "spine2"}  # ECMP used both
    for f in flows:  # and each flow keeps one path (no reordering): leaf -> spine -> leaf -> host
        assert [p.node.name for p in f.fwd.values()][0] == f.src.name and len(f.fwd) == 4
    fab.watch = [fab.port("leaf2", rows[1][0].name)]
    fab.run(20_000)
    rates = [r["goodput_gbps"] for r in flow_table(fab)]
    assert fab.drops == 0 and all(r > 0 for r in rates)
    assert abs(sum(rates) - 37.8) < 2.0  # the receiver's link stays full


def test_dumbbell_and_star() -> None:
    fab = SwitchedFabric(dcqcn=NS3_RDMA)
    left, right = dumbbell(fab, 2, 2, bottleneck_gbps=10.0)
    for a, b in zip(left, right, strict=True):
        fab.add_flow(a, b)
    fab.watch = [fab.port("L", "R")]
    fab.run(20_000)
    assert abs(sum(r["goodput_gbps"] for r in flow_table(fab)) - 10 * 1024 / 1082) < 1.0
    fab2 = SwitchedFabric()
    hosts = star(fab2, 3)
    assert [h.name for h in hosts] == ["h1", "h2", "h3"] and fab2.switches[0].name == "sw"
