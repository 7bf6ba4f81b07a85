"""Link-level credit flow control on the InfiniBand subnet (IBA Vol 1 7.9): incast without a drop,
head-of-line blocking of a victim on the same VL (and none on a VL of its own), the lossy
comparison, and a credit loop that deadlocks."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from ib_util import connect_by_lid, side, two_switches
from tshark_util import requires_tshark

from rdmalab.capture.reader import read
from rdmalab.fabric.congestion_scenarios import run_scenario
from rdmalab.fabric.ibfabric import BLOCK_BYTES, IBFabric, blocks
from rdmalab.fabric.ibflows import ib_credit_loop, ib_incast
from rdmalab.verbs import enums as e
from rdmalab.verbs.wr import SGE, SendWR
from rdmalab.wire.ib import LRH

LINE = 40.0  # Gb/s of every host link in the incast


@pytest.fixture(scope="module")
def same_vl():  # type: ignore[no-untyped-def]
    return ib_incast(duration_us=400)


@pytest.fixture(scope="module")
def own_vl():  # type: ignore[no-untyped-def]
    return ib_incast(duration_us=400, victim_sl=1, vls=2)


def test_incast_with_credits_drops_nothing_and_fills_the_receiver_link(same_vl) -> None:  # type: ignore[no-untyped-def]
    s = same_vl.summary
    assert s["drops"] == 0 and same_vl.fabric.drops() == 0
    incast = [f for name, f in s["flows"].items() if "victim" not in name]
    assert all(f["errors"] == 0 for f in s["flows"].values())
    total = sum(f["gbps"] for f in incast)
    assert 0.8 * LINE < total <= LINE  # the receiver's link is the bottleneck, and it is used
    shares = [f["gbps"] for f in incast]
    assert max(shares) - min(shares) <= 0.25 * max(shares)  # each sender gets about a quarter


def test_the_queue_backs_up_hop_by_hop(same_vl) -> None:  # type: ignore[no-untyped-def]
    fab = same_vl.fabric
    now = fab.now_ns
    # the spine's port to the receiver never waits: it sends as fast as the link goes ...
    assert fab.port("spine", "recv").xmit_wait(now) == 0
    # ... while the leaf's port to the spine waits for credits most of the run, and so do the senders
    assert fab.port("leaf", "spine").xmit_wait(now) > 0.5 * now
    for h in ("h1", "h2", "h3", "h4"):
        assert fab.port(h, "leaf").xmit_wait(now) > 0.5 * now
    # the buffers that filled are the ones upstream of the bottleneck
    spine_in = fab.port("spine", "leaf")
    assert max(spine_in.rx_max) > spine_in.buffer_blocks // 2
    assert max(fab.port("recv", "spine").rx_max) <= blocks(1024 + 46)  # the HCA drains at once


def test_credits_are_conserved(same_vl) -> None:  # type: ignore[no-untyped-def]
    """Per link and VL: credits held + blocks in flight or buffered + credits on their way back = the buffer."""
    fab = same_vl.fabric
    fab.loop.advance_to(fab.now_ns)  # (nothing changes)
    for node in fab.nodes:
        for p in node.ports.values():
            assert p.peer is not None
            for vl in range(fab.vls):
                assert 0 <= p.credits[vl] <= p.peer.buffer_blocks
                assert 0 <= p.peer.rx_blocks[vl] <= p.peer.buffer_blocks


def test_hol_blocking_slows_the_victim_on_the_same_vl(same_vl, own_vl) -> None:  # type: ignore[no-untyped-def]
    victim = "hv->rv (victim)"
    blocked, free = same_vl.summary["flows"][victim]["gbps"], own_vl.summary["flows"][victim]["gbps"]
    assert same_vl.fabric.port("spine", "rv").xmit_wait(same_vl.fabric.now_ns) == 0  # its own link is idle ...
    assert blocked < 0.4 * LINE  # ... yet it waits behind the incast on the shared link's VL
    assert free > 0.85 * LINE  # on a VL of its own it runs at the line rate
    assert own_vl.summary["drops"] == 0


def test_without_credits_the_same_buffers_drop() -> None:
    lossy = ib_incast(duration_us=200, credits=False, victim=False)
    assert lossy.summary["drops"] > 0
    assert lossy.fabric.port("spine", "leaf").counters["PortRcvErrors"] > 0  # the buffer before the bottleneck
    assert all(p.counters["PortXmitWait"] == 0 for n in lossy.fabric.nodes for p in n.ports.values())


def test_a_credit_loop_deadlocks_and_min_hop_does_not() -> None:
    loop = ib_credit_loop(duration_us=200)
    fab = loop.fabric
    before = [f.delivered for f in loop.flows]
    sent = [fab.port(f"S{i}", f"S{(i + 1) % 3}").counters["PortXmitPkts"] for i in range(3)]
    fab.run_us(300)  # nothing moves any more
    assert [f.delivered for f in loop.flows] == before and not any(f.done_bytes for f in loop.flows)
    assert [fab.port(f"S{i}", f"S{(i + 1) % 3}").counters["PortXmitPkts"] for i in range(3)] == sent
    for i in range(3):
        ring = fab.port(f"S{i}", f"S{(i + 1) % 3}")
        assert ring.queued > 0 and ring.xmit_wait(fab.now_ns) > 0.9 * fab.now_ns  # waiting, for good
        assert max(ring.credits) < blocks(1024 + 46)  # no credit for even one packet
    assert fab.drops() == 0  # stopped, not lossy
    ok = ib_credit_loop(duration_us=200, routing="min-hop")
    assert all(f.done_bytes > 0 for f in ok.flows)
    with pytest.raises(ValueError, match="victim flow needs"):
        ib_incast(topology="star", victim=True)


def test_a_packet_waits_for_credits_it_does_not_have() -> None:
    """One link, a receive buffer of exactly one MTU packet: the second packet of a WRITE leaves
    only when the first packet's credits have come back (a round trip of the link)."""
    fab = two_switches(mtu=1024, vl_buffer=blocks(1024 + 46) * BLOCK_BYTES)
    a, b = side(fab, "hca1"), side(fab, "hca2")
    connect_by_lid(a, b)
    wr = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(a.mr.buf, 2048, a.mr.lkey)],
                send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
    a.qp.post_send(wr)
    fab.run_us(50)
    out = fab.port("hca1", "sw1")
    assert out.counters["PortXmitPkts"] == 2 and fab.drops() == 0
    # the first packet's serialisation + delay + (the switch forwards it: its serialisation) + the credits' delay
    assert out.counters["PortXmitWait"] > 2 * out.delay
    assert b.mr.read(2048, 0) == a.mr.read(2048, 0)


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ValueError, match="vl_buffer"):
        IBFabric(mtu=1024, vl_buffer=1000)
    with pytest.raises(ValueError, match="vl_buffer"):
        IBFabric(mtu=4096, vl_buffer=2048)
    with pytest.raises(ValueError, match="vls"):
        IBFabric(vls=16)
    with pytest.raises(ValueError, match="routing"):
        ib_credit_loop(routing="updown")
    with pytest.raises(ValueError, match="senders"):
        ib_incast(senders=0)


def test_the_same_incast_as_notebook_10_with_credits_instead_of_pfc() -> None:
    """The star incast of congestion_scenarios on the lossless RoCE fabric (PFC) and on IB (credits):
    neither drops, both keep the receiver's link full, so their goodputs stand in the ratio of the
    bytes each wire spends on a 1024-byte packet: RoCEv2 58 (Ethernet, IPv4, UDP, BTH, ICRC), IB 26
    (LRH, BTH, ICRC, VCRC)."""
    roce = run_scenario("incast", senders=4, duration_ms=0.3, settings={"dcqcn": "0"})
    rfab = roce.fabric
    roce_gbps = sum(f.rcvd for f in rfab.flows) * 8 / rfab.now
    ib = ib_incast(topology="star", senders=4, duration_us=300)
    ib_gbps = sum(f["gbps"] for f in ib.summary["flows"].values())
    assert rfab.drops == 0 and ib.summary["drops"] == 0
    assert ib_gbps / roce_gbps == pytest.approx((1024 + 58) / (1024 + 26), rel=0.01)
    assert ib.fabric.port("h1", "sw").xmit_wait(ib.fabric.now_ns) > 0  # the senders wait for credits


@requires_tshark
@pytest.mark.tshark
def test_the_capture_of_the_blocked_link_shows_the_shares(tmp_path: Path) -> None:
    """The leaf-to-spine link captured during the incast: tshark decodes every packet (0 malformed),
    and the victim's packets, to its own idle receiver, are only a fifth of the requests on the
    shared link, as many as each incast sender's: head-of-line blocking, in the capture."""
    path = tmp_path / "incast.pcap"
    run = ib_incast(duration_us=150, capture=str(path))
    out = subprocess.run(["tshark", "-n", "-r", str(path), "-T", "fields", "-e", "infiniband.lrh.slid",
                          "-e", "infiniband.lrh.dlid", "-e", "infiniband.bth.opcode", "-e", "_ws.malformed"],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    rows = [line.split("\t") for line in out]
    assert rows and all(r[3] == "" for r in rows)
    ours = [(cp.packet[LRH].slid, cp.packet[LRH].dlid) for cp in read(path)]
    assert [(int(r[0]), int(r[1])) for r in rows] == ours
    assert all(cp.packet.crc_status == cp.packet.vcrc_status == "good" for cp in read(path))
    fab = run.fabric
    lid = {h.name: h.lid for h in fab.hcas}
    requests = [(int(r[0]), int(r[1])) for r in rows if int(r[2]) != 0x11]
    per_sender = {name: sum(1 for s, _ in requests if s == lid[name]) for name in ("h1", "h2", "h3", "h4", "hv")}
    assert all(d == lid["rv"] for s, d in requests if s == lid["hv"])
    total = sum(per_sender.values())
    assert total == len(requests) and 0.15 * total < per_sender["hv"] < 0.25 * total
