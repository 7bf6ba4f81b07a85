"""rdmalab.tools.kv on native InfiniBand (kv.on_ib): server and client on two HCAs across two switches of an
IBFabric, QPs addressed by LID (no GRH), the UD answers by LID too.

The oracles: a Python dict of what was stored; the bytes of the two values a torn bucket is made of; tshark
for the packets on the wire (InfiniBand, not RoCE: an LRH, no GRH); the fabric's virtual clock for the ordering.
"""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest
from tshark_util import requires_tshark

from rdmalab.capture.reader import read
from rdmalab.fabric.ibfabric_subnet import SubnetMADs, fabric_on_subnet
from rdmalab.fabric.ibsm import SubnetManager
from rdmalab.fabric.ibsubnet import Subnet
from rdmalab.tools.kv import KEY_SIZE, KvError, Layout, Store, key_at_distance, on_ib, simulated
from rdmalab.verbs import enums as e
from rdmalab.wire.ib import BTH, LNH_IBA_LOCAL, LRH

NET = Path(__file__).resolve().parent.parent / "data" / "ib" / "fattree2.net"
READ_REQUEST, READ_RESPONSE_ONLY = 0x0C, 0x10  # RC opcodes (IBA 9.2, table 38)


def _agree_with_a_dict(st: Store, seed: int = 5) -> int:
    """PUT by RPC or locally (overwrites), then every key GET both ways; the number of keys checked."""
    s, c = st.server, st.client
    s.start()
    r = random.Random(seed)
    want: dict[bytes, tuple[bytes, int]] = {}
    for i in range(60):
        k = b"key%d" % r.randrange(40)
        v = r.randbytes(r.randrange(1, 37)).rstrip(b"\0") or b"z"
        version = c.put_rpc(k, v).version if i % 2 else s.put_local(k, v).version
        want[k] = (v, want.get(k, (b"", 0))[1] + 1)
        assert version == want[k][1]
    for k, (v, version) in want.items():
        for got in (c.get_read(k), c.get_rpc(k)):
            assert (got.value, got.version) == (v, version), k
    for k in (b"never", b"stored"):
        assert c.get_read(k).value is None and c.get_rpc(k).value is None
    s.stop()
    return len(want)


def test_the_ports_are_infiniband_and_the_qps_are_addressed_by_lid() -> None:
    st = on_ib()
    for ctx in (st.server.ctx, st.client.ctx):
        assert ctx.query_port(1).link_layer == e.IBV_LINK_LAYER_INFINIBAND
    assert st.client.address()["lid"] == 2 and "gid" not in st.client.address()
    assert st.client.server["lid"] == 1 and "gid" not in st.client.server
    assert st.server.clients[0].ah.attr.dlid == 2 and not st.server.clients[0].ah.attr.is_global


@pytest.mark.parametrize("window", [1, 3])
def test_get_and_put_both_ways_agree_with_a_dict_on_ib(window: int) -> None:
    st = on_ib(window=window, layout=Layout(buckets=48))
    assert _agree_with_a_dict(st) >= 30
    assert st.fabric.drops() == 0  # type: ignore[union-attr]


def test_on_a_subnet_our_sm_brought_up() -> None:
    """fattree2.net (8 HCAs, leaves and spines), swept by our SM: the store between H1 and H8 by the LIDs the SM
    gave, forwarded by the tables it wrote."""
    subnet = Subnet.from_file(str(NET))
    mads = SubnetMADs(subnet)
    sm = SubnetManager(mads.port("H1", issm=True))
    sm.run()
    fab = fabric_on_subnet(subnet)
    st = on_ib(fabric=fab, server="H1", client="H8")
    by_guid = {p.guid: lid for lid, p in sm.lids.items()}
    assert st.client.server["lid"] == by_guid[fab.node("H1").guid]
    assert st.server.clients[0].ah.attr.dlid == by_guid[fab.node("H8").guid]
    assert _agree_with_a_dict(st, seed=7) >= 25
    with pytest.raises(KvError, match="'H9' is not an HCA"):
        on_ib(fabric=fab, server="H1", client="H9")


# ---------------------------------------------------------------------------- torn reads, as on RoCE


def _torn_sweep(verify: bool, fabric: str) -> dict[int, tuple[bytes | None, int, int, int]]:
    """A local PUT written in halves at 2 us and 3.5 us; a READ GET started every 100 ns from 0 to 5 us (a fresh
    store each).  start -> (value, version, retries, torn)."""
    out = {}
    for at in range(0, 5000, 100):
        st = on_ib() if fabric == "ib" else simulated()
        s, c = st.server, st.client
        s.put_local(b"hot", b"O" * 36)
        s.put_local(b"hot", b"N" * 36, at_ns=2000, split_ns=1500)
        st.fabric.loop.advance_to(at) if fabric == "ib" else st.fabric.advance_to(at)  # type: ignore[union-attr]
        got = c.get_read(b"hot", verify=verify)
        out[at] = (got.value, got.version, got.retries, got.torn)
    return out


def test_a_torn_read_is_caught_on_ib_as_on_roce() -> None:
    """Checked: the GET returns the old or the new value whole, and it retried exactly for one run of starts
    about as long as the PUT's halves are apart (1.5 us: 15 starts).  Unchecked, at those same starts: the
    new value's first 8 bytes in front of the old one's, under the new version."""
    half = 64 // 2 - 8 - KEY_SIZE
    for fabric in ("ib", "roce"):
        checked = _torn_sweep(True, fabric)
        assert all((v, ver) in ((b"O" * 36, 1), (b"N" * 36, 2)) for v, ver, _, _ in checked.values())
        retried = sorted(at for at, (_, _, r, _) in checked.items() if r)
        assert 14 <= len(retried) <= 16 and retried == list(range(retried[0], retried[-1] + 1, 100)), (fabric, retried)
        assert checked[0][:2] == (b"O" * 36, 1) and checked[4900][:2] == (b"N" * 36, 2)
        unchecked = _torn_sweep(False, fabric)
        for at, (v, ver, r, torn) in unchecked.items():
            assert r == 0
            if at in retried:
                assert (v, ver, torn) == (b"N" * half + b"O" * (36 - half), 2, 1), (fabric, at)
            else:
                assert torn == 0 and v in (b"O" * 36, b"N" * 36), (fabric, at)
        if fabric == "ib":
            ib_retried = retried
    # a READ is torn when it reaches the server between the halves (2 .. 3.5 us): on IB (three 0.1 us links)
    # it gets there sooner than over the simulated fabric's 1 us, so the starts it is torn from come later
    assert 2000 - retried[0] > 2000 - ib_retried[0] > 0


# ---------------------------------------------------------------------------- the wire


@requires_tshark
@pytest.mark.tshark
def test_a_read_gets_packets_decode_in_tshark_as_infiniband(tmp_path: Path) -> None:
    st = on_ib(frames=True)
    path = tmp_path / "kv-read.erf"
    st.fabric.tap("sw1", "sw2", str(path))  # type: ignore[union-attr]
    st.server.put_local(b"k", b"value")
    assert st.client.get_read(b"k").value == b"value"
    st.fabric.close()
    out = subprocess.run(["tshark", "-n", "-r", str(path), "-T", "json", "-e", "frame.protocols",
                          "-e", "infiniband.lrh.slid", "-e", "infiniband.lrh.dlid", "-e", "infiniband.lrh.lnh",
                          "-e", "infiniband.bth.opcode", "-e", "infiniband.bth.destqp", "-e", "_ws.malformed"],
                         capture_output=True, text=True, check=True).stdout
    rows = [r["_source"]["layers"] for r in json.loads(out)]
    assert len(rows) == 2 and not any("_ws.malformed" in r for r in rows)
    assert all("infiniband" in r["frame.protocols"][0] and "ip" not in r["frame.protocols"][0].split(":")
               for r in rows)
    got = [(int(r["infiniband.lrh.slid"][0], 0), int(r["infiniband.lrh.dlid"][0], 0), int(r["infiniband.lrh.lnh"][0], 0),
            int(r["infiniband.bth.opcode"][0], 0), int(r["infiniband.bth.destqp"][0], 0)) for r in rows]
    server_qp, client_qp = st.server.clients[0].qp.qp_num, st.client.rc.qp_num
    assert got == [(2, 1, LNH_IBA_LOCAL, READ_REQUEST, server_qp), (1, 2, LNH_IBA_LOCAL, READ_RESPONSE_ONLY, client_qp)]
    # our decoder reads the same headers from the capture
    assert [(p[LRH].slid, p[LRH].dlid, p[BTH].opcode) for p in (cp.packet for cp in read(path))] == \
        [(a, b, op) for a, b, _, op, _ in got]


# ---------------------------------------------------------------------------- the ordering (HERD, SIGCOMM'14)


def test_rpc_beats_read_gets_from_two_reads_on_ib() -> None:
    """Virtual time on the IB fabric: a READ GET costs a round trip per READ; the RPC one round trip plus the
    server's CPU (service 200 ns, polled every 100 ns).  One READ beats the RPC; from two READs on, the RPC wins."""
    lay = Layout(buckets=64)
    st = on_ib(layout=lay)
    s, c = st.server, st.client
    keys = key_at_distance(lay, 10, 4)
    for k in keys:
        s.put_local(k, k)
    s.start()
    c.get_read(keys[-1])
    for _ in range(c.recv_depth):
        c.get_rpc(keys[0])
    read_ = [c.get_read(k) for k in keys]
    rpc = [c.get_rpc(k) for k in keys]
    s.stop()
    assert [r.round_trips for r in read_] == [1, 2, 3, 4, 5]
    per_trip = read_[0].ns
    for d, r in enumerate(read_):
        assert r.ns == (d + 1) * per_trip
    assert all((r.value, r.version) == (k, 1) for r, k in zip(rpc, keys, strict=True))
    assert read_[0].ns < min(r.ns for r in rpc) and max(r.ns for r in rpc) < read_[1].ns, \
        (per_trip, [r.ns for r in rpc])


def _rpc_and_read_ns(st: Store) -> tuple[int, int]:
    """The slowest of 5 warm GETs by RPC, and one GET by one READ, of a key in its home bucket."""
    s, c = st.server, st.client
    s.put_local(b"k", b"v")
    s.start()
    for _ in range(c.recv_depth):
        c.get_rpc(b"k")
    rpc = max(c.get_rpc(b"k").ns for _ in range(5))
    s.stop()
    return rpc, c.get_read(b"k").ns


def test_shorter_round_trips_make_the_servers_cpu_weigh_more() -> None:
    """IB's READ round trip is shorter than the simulated fabric's, so a server CPU time under which the RPC still
    beats two READs there (1 us) makes it lose to them on IB; with a short one (200 ns) it wins on both."""
    for service, wins_on_ib in ((200, True), (1000, False)):
        rpc, one_read = _rpc_and_read_ns(on_ib(service_ns=service))
        sim_rpc, sim_read = _rpc_and_read_ns(simulated(service_ns=service))
        assert one_read < sim_read and one_read < rpc
        assert (rpc < 2 * one_read) == wins_on_ib, (service, rpc, one_read)
        assert sim_rpc < 2 * sim_read, (service, sim_rpc, sim_read)
