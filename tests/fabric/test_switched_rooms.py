"""switched.py in rooms: the names it exports are the rooms' own objects (one class each, not copies)."""

from rdmalab.fabric import switched, switched_carrier, switched_flows, switched_topology


def test_switched_reexports_the_rooms_names() -> None:
    rooms = {"Flow": switched_flows, "Host": switched_topology, "Node": switched_topology,
             "Port": switched_topology, "Switch": switched_topology, "SwitchConfig": switched_topology,
             "PcapTap": switched_topology, "mark_ce": switched_topology, "CE": switched_carrier,
             "ECT0": switched_carrier}
    for name in switched.__all__:
        if name == "SwitchedFabric":
            assert switched.SwitchedFabric.__module__ == "rdmalab.fabric.switched"
            continue
        assert getattr(switched, name) is getattr(rooms[name], name), name
        if isinstance(getattr(switched, name), type):
            assert getattr(switched, name).__module__ == rooms[name].__name__, name


def test_a_built_fabric_is_made_of_the_rooms_types() -> None:
    fab = switched.SwitchedFabric(seed=1)
    a, b = fab.add_host("a"), fab.add_host("b")
    sw = fab.add_switch("s")
    pa, _ = fab.link(a, sw)
    fab.link(sw, b)
    flow = fab.add_flow("a", "b", size=4096)
    assert isinstance(a, switched_topology.Host) and isinstance(sw, switched_topology.Switch)
    assert isinstance(pa, switched_topology.Port) and isinstance(flow, switched_flows.Flow)
    assert flow.fabric is fab and a.fabric is fab
    fab.run(200.0)
    assert flow.done and flow.intact()
