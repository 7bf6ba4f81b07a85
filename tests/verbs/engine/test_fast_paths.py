"""The engine's fast paths do what the readable paths do.

* Bursts (a run of packets of one message as one object) and, with the trace off, trains (what
  one instant puts on a link, arriving as one event) against one object and one event per packet
  (``Fabric(bursts=False)``): the same memory and completions and, with the trace on, the same
  counters and the same trace event for event (packet ids aside: a burst takes an id of its own).
* The requester's opcode table against the opcode table of ``rdmalab.wire.opcodes``.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

import rdmalab.verbs.enums as e
from rdmalab.fabric import Fabric
from rdmalab.fabric.harness import EndpointPair
from rdmalab.verbs.engine import requester
from rdmalab.verbs.engine.packet import ACK_OPCODE
from rdmalab.verbs.engine.wqe import SUPPORTED
from rdmalab.wire.opcodes import Op, Pos, Transport, find_opcode

MIB = 1 << 20


def _run(bursts: bool, trace: bool, workload: str) -> dict[str, Any]:
    fab = Fabric(seed=5, trace=trace, bursts=bursts, mtu=1024)
    p = EndpointPair(fab, size=MIB, path_mtu=e.IBV_MTU_1024, psn=(0xFFFFF0, 0x10))  # A's PSNs wrap
    p.a.mr.write(bytes(range(256)) * (MIB // 256), MIB)
    wcs: list[tuple[int, int, int, int]] = []
    if workload == "writes":  # 300 KiB, 1 byte, 64 KiB + 3: bursts longer than the window, ragged ends
        for i, n in enumerate((300 << 10, 1, (64 << 10) + 3)):
            p.send(p.a, e.IBV_WR_RDMA_WRITE, length=n, wr_id=i, offset=i * 7, remote=i * 4096)
    elif workload == "sends":
        for i, n in enumerate((5000, 64, 70000)):
            p.b.recv(wr_id=100 + i, offset=i * 100_000, length=100_000)
            p.send(p.a, e.IBV_WR_SEND, length=n, wr_id=i, offset=i * 3)
    elif workload == "trains":
        # many small messages both ways in one instant (trains), with WRITEs, READs and atomics among
        # them; B runs out of receives (RNR NAK, then retried once it posts more) and A's SENDs use
        # every opcode that completes a receive
        for i in range(40):
            p.b.recv(wr_id=1000 + i, offset=i * 256, length=256)  # (every SEND fits)
            p.a.recv(wr_id=2000 + i, offset=600_000 + i * 256, length=256)
        ops = (e.IBV_WR_SEND, e.IBV_WR_SEND_WITH_IMM, e.IBV_WR_RDMA_WRITE, e.IBV_WR_RDMA_WRITE_WITH_IMM,
               e.IBV_WR_RDMA_READ, e.IBV_WR_ATOMIC_FETCH_AND_ADD)
        for i in range(150):
            op = ops[i % len(ops)] if i % 7 else e.IBV_WR_SEND
            n = 8 if op == e.IBV_WR_ATOMIC_FETCH_AND_ADD else \
                64 + i % 5 * 700 if op in (e.IBV_WR_RDMA_WRITE, e.IBV_WR_RDMA_READ) else 64 + i
            flags = e.IBV_SEND_SIGNALED if i % 3 == 0 or i == 149 else 0
            # (what READs and atomics write at A lies apart from what the others send: no result depends
            # on when a response arrives)
            local = 200_000 + i * 500 if op == e.IBV_WR_RDMA_READ else 290_000 + i * 8 \
                if op == e.IBV_WR_ATOMIC_FETCH_AND_ADD else 100_000 + i * 8
            p.send(p.a, op, length=n, wr_id=i, offset=local, remote=300_000 + i * 4096, flags=flags, imm=i,
                   compare_add=i)
            if i < 30:
                p.send(p.b, e.IBV_WR_SEND, length=64 + i, wr_id=500 + i, offset=700_000 + i * 128)
        p.fabric.run(until_ns=p.fabric.now_ns + 50_000)
        for i in range(40, 120):
            p.b.recv(wr_id=1000 + i, offset=i * 256, length=256)  # (every SEND fits)
    else:  # READs: the responses come back in bursts
        for i, n in enumerate((200_000, 10)):
            p.send(p.a, e.IBV_WR_RDMA_READ, length=n, wr_id=i, offset=500_000 + i * 300_000, remote=i * 4096)
    p.run()
    for ep in (p.a, p.b):
        wcs += [(wc.wr_id, wc.status, wc.opcode, wc.byte_len) for wc in ep.completions()]
    out: dict[str, Any] = {"a": p.a.mr.read(MIB, 0), "b": p.b.mr.read(MIB, 0), "wcs": sorted(wcs),
                           "counters": [dict(ep.ctx.device.counters) for ep in (p.a, p.b)],
                           "sent": fab.stats["sent"], "now": fab.now_ns}
    if trace:
        events = []
        for ev in fab.trace:
            detail = {k: v for k, v in ev.detail.items() if k != "packet_id"}
            events.append((ev.time_ns, ev.node, ev.qpn, ev.kind, ev.psn, ev.opcode, sorted(detail.items())))
        out["trace"] = events
        # the received event of every packet pairs with its sent event
        sent = {ev.detail["packet_id"]: ev for ev in fab.trace if ev.kind == "sent"}
        got = [ev for ev in fab.trace if ev.kind == "received"]
        assert got and all(sent[ev.detail["packet_id"]].psn == ev.psn for ev in got)
    return out


@pytest.mark.parametrize("trace", [False, True], ids=["trace off", "trace on"])
@pytest.mark.parametrize("workload", ["writes", "sends", "reads", "trains"])
def test_bursts_equal_single_packets(workload: str, trace: bool) -> None:
    single = _run(False, trace, workload)
    burst = _run(True, trace, workload)
    assert len(single["wcs"]) >= 2 and single["sent"] > 50
    if not trace:
        # Untraced, a burst (and a train) arrives as one event, so the responder coalesces the ACKs
        # its packets ask for into fewer ACKs (and the clock ends elsewhere): the packet counts
        # differ by those
        for run in (single, burst):
            for key in ("counters", "sent", "now"):
                run.pop(key)
    assert burst == single


def test_bursts_are_used() -> None:
    # the comparison above compares something: with the trace on, a burst reaches the fabric
    fab = Fabric(trace=True, mtu=1024)
    counts = []
    send = fab.send
    fab.send = lambda src, pkt: (counts.append(pkt.count), send(src, pkt))[1]  # type: ignore[method-assign]
    p = EndpointPair(fab, size=MIB, path_mtu=e.IBV_MTU_1024)
    p.send(p.a, e.IBV_WR_RDMA_WRITE, length=64 << 10)
    p.wait(p.a.cq)
    assert max(counts) == 64


def test_trains_form_and_keep_the_order_of_the_link() -> None:
    # With the trace off, the SENDs one instant puts on a link arrive as one event, when the last would
    # have arrived; an ACK put on the link closes the train, so nothing sent after it arrives before it.
    fab = Fabric(trace=False, mtu=1024)
    p = EndpointPair(fab, size=MIB, path_mtu=e.IBV_MTU_1024)
    for i in range(20):
        p.b.recv(wr_id=i, offset=i * 64)
        p.send(p.a, wr_id=i, offset=i * 64, flags=e.IBV_SEND_SIGNALED if i == 19 else 0)
    assert fab.pending == 2  # one train for the 20 packets, and A's retransmit timer
    got: list[tuple[int, int]] = []
    receive = p.b.ctx.device.receive
    p.b.ctx.device.receive = lambda pkt: (got.append((fab.now_ns, pkt.psn)), receive(pkt))[1]  # type: ignore[method-assign]
    assert len(p.wait(p.b.cq, 20)) == 20 and len(p.wait(p.a.cq)) == 1
    last_alone = got[-1][0]
    assert [t for t, _ in got] == [last_alone] * 20  # all at once ...
    assert [psn for _, psn in got] == sorted(psn for _, psn in got)  # ... in the order sent
    single = Fabric(trace=False, mtu=1024, bursts=False)
    q = EndpointPair(single, size=MIB, path_mtu=e.IBV_MTU_1024)
    times = []
    receive2 = q.b.ctx.device.receive
    q.b.ctx.device.receive = lambda pkt: (times.append(single.now_ns), receive2(pkt))[1]  # type: ignore[method-assign]
    for i in range(20):
        q.b.recv(wr_id=i, offset=i * 64)
        q.send(q.a, wr_id=i, offset=i * 64)
    assert single.pending == 21
    q.run()
    assert times[-1] == last_alone and len(set(times)) == 20  # ... when the last would have arrived
    # B's SENDs, its coalesced ACK, then more SENDs, all in one instant: the ACK closes the first train,
    # so it arrives after the SENDs before it and before those after it
    order: list[str] = []
    a_dev = p.a.ctx.device
    ack, rcv = a_dev.receive_ack, a_dev.receive
    a_dev.receive_ack = lambda f: (order.append("ack"), ack(f))[1]  # type: ignore[method-assign]
    a_dev.receive = lambda pkt: (order.append("send"), rcv(pkt))[1]  # type: ignore[method-assign]
    for i in range(3):
        p.a.recv(wr_id=50 + i, offset=50_000 + i * 64)
        p.b.recv(wr_id=60 + i, offset=60_000 + i * 64)
    for i in range(3):
        p.send(p.a, wr_id=70 + i, offset=i * 64)
    fab.step()  # A's three SENDs arrive at B: B holds one ACK for them
    flush = p.b.qp.engine.flush_ack

    def ack_between_sends() -> None:
        p.send(p.b, wr_id=80, offset=80_000)
        p.send(p.b, wr_id=81, offset=80_064)
        flush()
        p.send(p.b, wr_id=82, offset=80_128)

    p.b.qp.engine.flush_ack = ack_between_sends  # type: ignore[method-assign]
    fab.held_acks.add(p.b.qp.engine)
    while fab.step():
        pass
    assert order[:4] == ["send", "send", "ack", "send"]


def test_requester_opcode_table() -> None:
    names = {e.IBV_QPT_RC: Transport.RC, e.IBV_QPT_UC: Transport.UC, e.IBV_QPT_UD: Transport.UD}
    checked = 0
    for qpt, ops in SUPPORTED.items():
        for op in ops:
            if op not in requester._SEND_OPS and op not in requester._WRITE_OPS:
                continue
            t = names[qpt]
            family = Op.SEND if op in requester._SEND_OPS else Op.RDMA_WRITE
            imm = op in (e.IBV_WR_SEND_WITH_IMM, e.IBV_WR_RDMA_WRITE_WITH_IMM)
            inv = op == e.IBV_WR_SEND_WITH_INV
            first, middle, last, only = requester._CODES[(qpt, op)]
            assert only == find_opcode(t, family, Pos.ONLY, imm=imm, inv=inv)
            assert last == (only if t == Transport.UD else find_opcode(t, family, Pos.LAST, imm=imm, inv=inv))
            if t != Transport.UD:
                assert (first, middle) == (find_opcode(t, family, Pos.FIRST), find_opcode(t, family, Pos.MIDDLE))
            checked += 1
    assert checked == 5 + 4 + 2  # RC, UC, UD


def _writes_with(bursts: bool, rkey_delta: int, remote: int, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ...]:
    from rdmalab.verbs.engine import responder

    taken: list[bool] = []
    whole = responder._whole_write
    monkeypatch.setattr(responder, "_whole_write", lambda qp, pkt: (taken.append(r := whole(qp, pkt)), r)[1])
    fab = Fabric(seed=3, trace=False, bursts=bursts, mtu=1024)
    p = EndpointPair(fab, size=MIB, path_mtu=e.IBV_MTU_1024)
    p.a.mr.write(bytes(range(256)) * (MIB // 256), MIB)
    p.send(p.a, e.IBV_WR_RDMA_WRITE, length=(16 << 10) + 5, offset=3, remote=remote,
           rkey=p.b.mr.rkey + rkey_delta)
    p.run()
    monkeypatch.undo()
    wcs = [(wc.wr_id, wc.status, wc.opcode) for ep in (p.a, p.b) for wc in ep.completions()]
    return wcs, p.b.mr.read(MIB, 0), p.b.qp.qp_state, taken


@pytest.mark.parametrize(("rkey_delta", "remote", "placed"), [(0, 4096, True), (1, 4096, False), (0, MIB - 100, False)],
                         ids=["whole WRITE", "bad R_Key", "past the MR's end"])
def test_a_whole_write_burst_equals_its_packets(rkey_delta: int, remote: int, placed: bool,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # a burst that is a whole WRITE is placed in one go (responder._whole_write) when every packet would
    # pass; otherwise its packets go their own way: either way, what the packets one by one do
    *single, not_taken = _writes_with(False, rkey_delta, remote, monkeypatch)
    *burst, taken = _writes_with(True, rkey_delta, remote, monkeypatch)
    assert burst == single and not not_taken
    assert taken == [placed]
    assert (single[0] == [(1, e.IBV_WC_SUCCESS, e.IBV_WC_RDMA_WRITE)]) == placed


# ---------------------------------------------------------------------------- traced bursts
# With the trace on, the fabric sends a burst's packets without building them (Fabric._traced_burst)
# and hands each, when it arrives, to the responder's fast path (Fabric._part); anything that path
# does not take is built and received as a single packet.  The reference is the fabric with one
# object per packet (bursts=False): the same trace event for event, memory, completions, counters.

def _traced(bursts: bool, scenario: str) -> tuple[dict[str, Any], int]:
    fab = Fabric(seed=9, trace=True, bursts=bursts, mtu=1024)
    parts = 0
    part = fab._part

    def counting(arg: Any) -> None:
        nonlocal parts
        parts += 1
        part(arg)

    fab._part = counting  # type: ignore[method-assign]
    qpt = e.IBV_QPT_UC if scenario == "uc writes" else e.IBV_QPT_RC
    mtu = e.IBV_MTU_4096 if scenario == "path MTU above the port's" else e.IBV_MTU_1024
    p = EndpointPair(fab, qpt, size=MIB, path_mtu=mtu, rnr_retry=1, min_rnr_timer=1, retry_cnt=1)
    pairs = [p]
    p.a.mr.write(bytes(range(256)) * (MIB // 256), MIB)
    if scenario == "two pairs, both ways":  # a second pair on the same devices, and B writing to A
        q = EndpointPair(fab, size=MIB, path_mtu=e.IBV_MTU_1024)
        q.b.mr.write(bytes(range(255, -1, -1)) * (MIB // 256), MIB)
        pairs.append(q)
        for i in range(3):
            p.send(p.a, e.IBV_WR_RDMA_WRITE, length=(20 << 10) + i, wr_id=i, offset=i, remote=i * 65536)
            q.send(q.b, e.IBV_WR_RDMA_WRITE, length=(9 << 10) + 7 * i, wr_id=10 + i, remote=i * 4096)
            p.send(p.b, e.IBV_WR_RDMA_WRITE, length=5000, wr_id=20 + i, offset=300_000, remote=600_000 + i * 8192)
    elif scenario == "bad R_Key":
        p.send(p.a, e.IBV_WR_RDMA_WRITE, length=(12 << 10) + 1, rkey=p.b.mr.rkey + 1)
    elif scenario == "past the MR's end":
        p.send(p.a, e.IBV_WR_RDMA_WRITE, length=12 << 10, remote=MIB - 5000)
    elif scenario == "SEND without a receive (RNR)":
        p.send(p.a, e.IBV_WR_SEND, length=10_000, wr_id=1)
        p.send(p.a, e.IBV_WR_SEND, length=3000, wr_id=2)
    elif scenario == "SEND larger than the receive":
        p.b.recv(wr_id=7, length=4000)
        p.send(p.a, e.IBV_WR_SEND, length=9000)
    elif scenario == "WRITE with immediate":
        p.b.recv(wr_id=7, length=64)
        p.send(p.a, e.IBV_WR_RDMA_WRITE_WITH_IMM, length=7000, imm=0x1234, remote=100)
    else:  # UC writes, path MTU above the port's
        for i in range(2):
            p.send(p.a, e.IBV_WR_RDMA_WRITE, length=(6 << 10) + i, wr_id=i, remote=i * 65536)
    fab.run()
    # (packet ids aside, and the buffers' addresses, which a drop's reason names: each run has its own)
    events = [(ev.time_ns, ev.node, ev.qpn, ev.kind, ev.psn, ev.opcode,
               sorted((k, re.sub("0x[0-9a-f]+", "0x?", v) if k == "reason" else v)
                      for k, v in ev.detail.items() if k != "packet_id")) for ev in fab.trace]
    sent = {ev.detail["packet_id"]: ev for ev in fab.trace if ev.kind == "sent"}
    for ev in fab.trace:  # every received event pairs with the sent event of its packet
        if ev.kind == "received":
            assert sent[ev.detail["packet_id"]].psn == ev.psn
    out = {"trace": events, "stats": dict(fab.stats), "now": fab.now_ns,
           "counters": [dict(d.counters) for d in fab.devices.values()],
           "memory": [ep.mr.read(MIB, 0) for pair in pairs for ep in (pair.a, pair.b)],
           "wcs": [(wc.wr_id, wc.status, wc.opcode, wc.byte_len) for pair in pairs for ep in (pair.a, pair.b)
                   for wc in ep.completions()],
           "states": [ep.qp.qp_state for pair in pairs for ep in (pair.a, pair.b)]}
    return out, parts


@pytest.mark.parametrize("scenario", ["two pairs, both ways", "bad R_Key", "past the MR's end",
                                      "SEND without a receive (RNR)", "SEND larger than the receive",
                                      "WRITE with immediate", "uc writes", "path MTU above the port's"])
def test_traced_bursts_equal_single_packets(scenario: str) -> None:
    single, none = _traced(False, scenario)
    burst, parts = _traced(True, scenario)
    assert none == 0
    assert burst == single
    assert len(single["trace"]) > 20
    if scenario == "path MTU above the port's":  # oversized: dropped as single packets, not as parts
        assert parts == 0 and single["stats"]["oversized"] > 0
    else:
        assert parts > 5


# ---------------------------------------------------------------------------- the ACK lane
# While nothing observes the bytes of packets, the simulated fabric carries a plain ACK as its
# fields (Fabric.send_ack) and the requester's device takes it without a Pkt (SoftDevice.receive_ack,
# completer.ack).  The reference is the same fabric with the lane closed (SoftDevice.ack_lane None):
# the ACK then goes as a Pkt through SoftDevice.receive and completer.on_response.  Everything must
# agree: memory, completions, counters, the fabric's stats, the clock, the QP states and, from the
# moment a scenario turns the trace on, the trace.

def _acked(lane: bool, scenario: str) -> tuple[dict[str, Any], int]:
    fab = Fabric(seed=11, trace=False, mtu=1024)
    p = EndpointPair(fab, size=MIB, path_mtu=e.IBV_MTU_1024, psn=(0xFFFFF8, 0x20), rnr_retry=7, min_rnr_timer=1,
                     retry_cnt=7, timeout=10)
    p.a.mr.write(bytes(range(256)) * (MIB // 256), MIB)
    taken = 0
    for ep in (p.a, p.b):
        if not lane:
            ep.ctx.device.ack_lane = None
            continue
        qp = ep.qp.engine

        def counting(psn: int, _ack: Any = qp.ack) -> bool:  # the completer's fast path, which the lane calls
            nonlocal taken
            ok: bool = _ack(psn)
            taken += ok
            return ok

        qp.ack = counting  # type: ignore[method-assign]
    a_sent = p.b.ctx.device.counters

    def until_an_ack_is_on_the_wire() -> None:  # B (the responder) has sent one more packet
        before = a_sent["sent_pkts"]
        while a_sent["sent_pkts"] == before and fab.step():
            pass

    for i in range(3):
        p.b.recv(wr_id=100 + i, offset=200_000 + i * 10_000, length=10_000)
    if scenario.startswith("writes, sends, reads"):
        fab.tracing = scenario.endswith("traced")
        for i, n in enumerate((64, 5000, 70_000)):
            p.send(p.a, e.IBV_WR_SEND, length=min(n, 10_000), wr_id=i, offset=i * 5)
            p.send(p.a, e.IBV_WR_RDMA_WRITE, length=n, wr_id=10 + i, offset=i, remote=i * 100_000)
        p.send(p.a, e.IBV_WR_RDMA_READ, length=9000, wr_id=20, offset=600_000, remote=4096)
        p.send(p.b, e.IBV_WR_RDMA_WRITE, length=3000, wr_id=30, offset=700_000, remote=800_000)
    elif scenario == "trace on while an ACK is in flight":
        for i in range(3):
            p.send(p.a, e.IBV_WR_SEND, length=64, wr_id=i, offset=i * 64)
        until_an_ack_is_on_the_wire()
        fab.tracing = True
        p.send(p.a, e.IBV_WR_RDMA_WRITE, length=3000, wr_id=9, remote=4096)
    elif scenario == "requester in ERR while an ACK is in flight":
        p.send(p.a, e.IBV_WR_RDMA_WRITE, length=5000, wr_id=1)
        p.send(p.a, e.IBV_WR_RDMA_WRITE, length=64, wr_id=2, remote=8192)
        until_an_ack_is_on_the_wire()
        p.a.qp.to_error()
    elif scenario == "RNR, then ACKs":
        for i in range(5):  # three receives are posted: the fourth SEND is NAKed (RNR) until one more is
            p.send(p.a, e.IBV_WR_SEND, length=100, wr_id=i, offset=i * 100)
        for _ in range(40):
            fab.step()
        p.b.recv(wr_id=103, offset=300_000, length=10_000)
        p.b.recv(wr_id=104, offset=310_000, length=10_000)
    else:  # loss switched on after the first ACK: the lane closes, go-back-N recovers
        for i in range(2):
            p.send(p.a, e.IBV_WR_RDMA_WRITE, length=20_000, wr_id=i, remote=i * 32768)
        until_an_ack_is_on_the_wire()
        fab.set_faults(loss=0.3)
        for i in range(2, 6):
            p.send(p.a, e.IBV_WR_RDMA_WRITE, length=20_000, wr_id=i, remote=i * 32768)
        for _ in range(300):
            fab.step()
        fab.clear_faults()
        for i in range(6, 9):
            p.send(p.a, e.IBV_WR_SEND, length=64, wr_id=i)
    fab.run()
    events = [(ev.time_ns, ev.node, ev.qpn, ev.kind, ev.psn, ev.opcode,
               sorted((k, v) for k, v in ev.detail.items() if k != "packet_id")) for ev in fab.trace]
    out = {"trace": events, "stats": dict(fab.stats), "now": fab.now_ns,
           "counters": [dict(d.counters) for d in fab.devices.values()],
           "memory": [ep.mr.read(MIB, 0) for ep in (p.a, p.b)],
           "wcs": [(wc.wr_id, wc.status, wc.opcode, wc.byte_len) for ep in (p.a, p.b) for wc in ep.completions()],
           "states": [ep.qp.qp_state for ep in (p.a, p.b)]}
    return out, taken


@pytest.mark.parametrize("scenario", ["writes, sends, reads", "writes, sends, reads, traced",
                                      "trace on while an ACK is in flight",
                                      "requester in ERR while an ACK is in flight", "RNR, then ACKs",
                                      "loss from the first ACK on"])
def test_ack_lane_equals_ack_packets(scenario: str) -> None:
    closed, none = _acked(False, scenario)
    lane, taken = _acked(True, scenario)
    assert none == 0
    assert lane == closed
    assert closed["wcs"] and closed["counters"][0]["rcvd_pkts"] > 0
    if scenario == "trace on while an ACK is in flight":
        # the ACK sent before the trace was on is received as a packet; those sent after, on the lane
        assert any(ev[3] == "acked" for ev in closed["trace"]) and taken >= 1
    elif scenario.endswith("traced"):
        kinds = {ev[3] for ev in closed["trace"] if ev[5] == ACK_OPCODE}
        assert kinds == {"sent", "received", "acked"} and taken >= 2
    elif scenario == "requester in ERR while an ACK is in flight":
        assert closed["states"][0] == e.IBV_QPS_ERR and closed["counters"][0]["dropped"] > 0 and taken == 0
    elif scenario == "loss from the first ACK on":
        assert closed["stats"]["lost"] > 0 and closed["counters"][0]["completer_retry_err"] > 0 and taken > 0
    else:
        assert taken >= 2  # (a train's packets arrive in one instant: their ACKs coalesce)
