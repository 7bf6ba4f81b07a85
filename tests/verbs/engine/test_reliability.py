"""RC reliability on a faulty fabric: retransmission, duplicates, replay, coalescing."""

from __future__ import annotations

import struct

import rdmalab.verbs.enums as e
from rdmalab.fabric import Fabric
from rdmalab.fabric.harness import EndpointPair
from rdmalab.wire.opcodes import OPCODES, Op


def test_write_survives_loss_with_go_back_n() -> None:
    fab = Fabric(seed=7)
    fab.set_faults(loss=0.3)
    p = EndpointPair(fab, timeout=10)
    data = bytes(range(256)) * 64
    p.a.mr.write(data, len(data))
    p.send(p.a, e.IBV_WR_RDMA_WRITE, length=len(data))
    assert [w.status for w in p.wait(p.a.cq)] == [0]
    assert p.b.mr.read(len(data), 0) == data
    assert fab.stats["lost"] > 0
    assert fab.trace.of_kind("retransmitted")


def test_psn_sequence_nak_is_sent_once_per_gap() -> None:
    fab = Fabric(seed=2)
    fab.set_faults(reorder=0.5, src="soft0", dst="soft1")
    p = EndpointPair(fab)
    p.a.mr.write(b"q" * 20000, 20000)
    p.send(p.a, e.IBV_WR_RDMA_WRITE, length=20000)
    assert [w.status for w in p.wait(p.a.cq)] == [0]
    naks = [ev for ev in fab.trace.of_kind("acked") if ev.detail.get("syndrome", "").startswith("NAK, PSN")]
    assert naks and p.b.ctx.device.counters["out_of_seq_request"] >= len(naks)


def test_duplicated_requests_execute_once() -> None:
    fab = Fabric(seed=3)
    fab.set_faults(duplicate=1.0, src="soft0", dst="soft1")
    p = EndpointPair(fab)
    for i in range(5):
        p.send(p.a, e.IBV_WR_ATOMIC_FETCH_AND_ADD, length=8, offset=8 * i, remote=0, compare_add=1, wr_id=i)
    p.b.recv(offset=1000)
    p.send(p.a, e.IBV_WR_SEND, length=100, wr_id=9)
    assert all(w.status == 0 for w in p.wait(p.a.cq, 6))
    assert struct.unpack("=Q", p.b.mr.read(8, 0)) == (5,)
    assert sorted(struct.unpack("=5Q", p.a.mr.read(40, 0))) == [0, 1, 2, 3, 4]
    assert p.b.qp.engine.resp.atomics_executed == 5
    assert p.b.ctx.device.counters["duplicate_request"] >= 5
    assert len(p.wait(p.b.cq, 2)) == 1  # the duplicated SEND completed once


def test_lost_atomic_ack_is_replayed_not_reexecuted() -> None:
    fab = Fabric(seed=11)
    fab.set_faults(loss=0.5, src="soft1", dst="soft0")  # responses only
    p = EndpointPair(fab, timeout=9)
    for i in range(8):
        p.send(p.a, e.IBV_WR_ATOMIC_FETCH_AND_ADD, length=8, offset=8 * i, remote=64, compare_add=10, wr_id=i)
    wcs = p.wait(p.a.cq, 8)
    assert [w.status for w in wcs] == [0] * 8
    assert struct.unpack("=Q", p.b.mr.read(8, 64)) == (80,)
    assert sorted(struct.unpack("=8Q", p.a.mr.read(64, 0))) == list(range(0, 80, 10))
    assert p.b.qp.engine.resp.atomics_executed == 8 and p.b.ctx.device.counters["duplicate_request"] > 0


def test_lost_read_responses_are_replayed() -> None:
    fab = Fabric(seed=5)
    fab.set_faults(loss=0.25, src="soft1", dst="soft0")
    p = EndpointPair(fab, timeout=9)
    src = bytes((i * 7) & 0xFF for i in range(9000))
    p.b.mr.write(src, len(src), 100)
    p.send(p.a, e.IBV_WR_RDMA_READ, length=9000, offset=20000, remote=100)
    assert [w.status for w in p.wait(p.a.cq)] == [0]
    assert p.a.mr.read(9000, 20000) == src


def test_corrupted_frames_fail_the_icrc_and_are_recovered() -> None:
    fab = Fabric(seed=9)
    fab.set_faults(corrupt=0.2)
    p = EndpointPair(fab, timeout=9)
    p.a.mr.write(b"c" * 8000, 8000)
    p.b.recv()
    p.send(p.a, e.IBV_WR_SEND, length=8000)
    assert [w.status for w in p.wait(p.a.cq)] == [0]
    assert p.b.mr.read(8000, 0) == b"c" * 8000
    assert fab.stats["corrupted"] > 0
    assert any(ev.detail.get("reason", "").startswith("bad ICRC") for ev in fab.trace.of_kind("dropped"))


def test_acks_are_coalesced_within_a_time_step() -> None:
    fab = Fabric(seed=1, bandwidth_gbps=1e12)  # everything posted together arrives together
    p = EndpointPair(fab)
    for i in range(10):
        p.send(p.a, e.IBV_WR_RDMA_WRITE, length=16, wr_id=i)
    assert len(p.wait(p.a.cq, 10)) == 10
    acks = [ev for ev in fab.trace.packets() if OPCODES[ev.opcode or 0].op == Op.ACKNOWLEDGE]
    assert len(acks) == 1


def test_ackreq_at_least_every_64_packets_and_window() -> None:
    fab = Fabric(seed=1, mtu=256)
    p = EndpointPair(fab, path_mtu=e.IBV_MTU_256, size=1 << 17)
    p.send(p.a, e.IBV_WR_RDMA_WRITE, length=300 * 256)
    assert [w.status for w in p.wait(p.a.cq)] == [0]
    sent = [ev for ev in fab.trace.packets() if ev.node == "soft0"]
    assert len(sent) == 300
    flags = [ev.detail["ackreq"] for ev in sent]
    gaps = [i for i, f in enumerate(flags) if f]
    assert gaps[-1] == 299 and all(b - a <= 64 for a, b in zip([-1, *gaps], gaps, strict=False))


def test_timeout_uses_4096ns_times_2_to_the_timeout() -> None:
    fab = Fabric(seed=1)
    p = EndpointPair(fab, timeout=12, retry_cnt=1)
    fab.set_faults(loss=1.0, src="soft0", dst="soft1")
    p.send(p.a, e.IBV_WR_RDMA_WRITE, length=8)
    (wc,) = p.wait(p.a.cq)
    assert wc.status == e.IBV_WC_RETRY_EXC_ERR
    assert fab.now_ns == 2 * (4096 << 12)
