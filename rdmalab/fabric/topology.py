"""Topologies for the switched fabric: star, dumbbell and two-tier leaf-spine.

Each builder adds switches, hosts and links to a :class:`~rdmalab.fabric.switched.SwitchedFabric`
and returns the hosts it made, so scenarios and notebooks can attach flows to them.  Routing is
by shortest path, with ECMP over equal-cost next hops (per flow), so a leaf-spine spreads flows
over its spines as up-down routing does (which is also why it has no cyclic buffer dependency).
"""

from __future__ import annotations

from rdmalab.fabric.switched import Host, SwitchedFabric


def star(fab: SwitchedFabric, hosts: int, *, rate_gbps: float = 40.0, delay_us: float = 1.0,
         prefix: str = "h") -> list[Host]:
    """``hosts`` hosts on one switch ``sw``."""
    sw = fab.add_switch("sw")
    out = []
    for i in range(hosts):
        h = fab.add_host(f"{prefix}{i + 1}")
        fab.link(h, sw, rate_gbps, delay_us)
        out.append(h)
    return out


def dumbbell(fab: SwitchedFabric, left: int, right: int, *, rate_gbps: float = 40.0,
             bottleneck_gbps: float | None = None, delay_us: float = 1.0) -> tuple[list[Host], list[Host]]:
    """Two switches ``L`` and ``R`` joined by one link, ``left`` and ``right`` hosts on them."""
    sl, sr = fab.add_switch("L"), fab.add_switch("R")
    fab.link(sl, sr, bottleneck_gbps or rate_gbps, delay_us)
    lh, rh = [], []
    for i in range(left):
        h = fab.add_host(f"l{i + 1}")
        fab.link(h, sl, rate_gbps, delay_us)
        lh.append(h)
    for i in range(right):
        h = fab.add_host(f"r{i + 1}")
        fab.link(h, sr, rate_gbps, delay_us)
        rh.append(h)
    return lh, rh


def leaf_spine(fab: SwitchedFabric, leaves: int, spines: int, hosts_per_leaf: int, *, rate_gbps: float = 40.0,
               uplink_gbps: float | None = None, delay_us: float = 1.0) -> list[list[Host]]:
    """A two-tier Clos: every leaf ``leafI`` linked to every spine ``spineJ``; hosts per leaf."""
    sp = [fab.add_switch(f"spine{j + 1}") for j in range(spines)]
    out = []
    for i in range(leaves):
        leaf = fab.add_switch(f"leaf{i + 1}")
        for s in sp:
            fab.link(leaf, s, uplink_gbps or rate_gbps, delay_us)
        row = []
        for k in range(hosts_per_leaf):
            h = fab.add_host(f"h{i + 1}.{k + 1}")
            fab.link(h, leaf, rate_gbps, delay_us)
            row.append(h)
        out.append(row)
    return out
