"""The default devices keep a bounded trace (the latest RING_EVENTS events); a Fabric a program builds keeps all."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import rdmalab.verbs.engine.trace as trace_module
import rdmalab.verbs.enums as e
from rdmalab.fabric import Fabric, default_fabric, reset_default_fabric
from rdmalab.lab.pair import Pair
from rdmalab.verbs.addr import AHAttr, GlobalRoute
from rdmalab.verbs.cq import CQ
from rdmalab.verbs.device import Context, get_device_list
from rdmalab.verbs.mr import MR
from rdmalab.verbs.pd import PD
from rdmalab.verbs.qp import QP, QPAttr, QPCap, QPInitAttr
from rdmalab.verbs.trace import RING_EVENTS, RingTrace, Trace, TraceEvent
from rdmalab.verbs.wr import SGE, RecvWR, SendWR

BATCH = 128
ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE


@pytest.fixture(autouse=True)
def _fresh_default() -> Iterator[None]:
    reset_default_fabric()
    yield
    reset_default_fabric()


def _ev(i: int) -> TraceEvent:
    return TraceEvent(i, "soft0", 17, "sent", i, 4)


def _side(name: str) -> tuple[Context, MR, CQ, QP]:
    ctx = Context(name=name)  # no fabric=: the default devices
    pd = PD(ctx)
    mr = MR(pd, 64 * BATCH, ACCESS)
    cq = CQ(ctx, 4 * BATCH, None, None, 0)
    attr = QPAttr(port_num=1)
    attr.qp_access_flags = ACCESS
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, sq_sig_all=0,
                           cap=QPCap(max_send_wr=BATCH, max_recv_wr=BATCH)), attr)
    return ctx, mr, cq, qp


def _connect(qp: QP, ctx: Context, remote: QP, remote_ctx: Context) -> None:
    attr = QPAttr(port_num=1)
    attr.qp_access_flags = ACCESS
    attr.path_mtu = e.IBV_MTU_4096
    attr.min_rnr_timer, attr.timeout, attr.retry_cnt, attr.rnr_retry = 12, 14, 7, 7
    attr.ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=remote_ctx.query_gid(1, 1), sgid_index=1))
    attr.dest_qp_num, attr.rq_psn, attr.sq_psn = remote.qp_num, 100, 100
    qp.to_rts(attr)


def _sends(batches: int) -> None:
    """A pyverbs program on the default devices: ``batches`` x BATCH 64-byte SENDs soft0 -> soft1."""
    names = [d.name.decode() for d in get_device_list()]
    (ca, ma, qa_cq, qa), (cb, mb, qb_cq, qb) = _side(names[0]), _side(names[1])
    _connect(qa, ca, qb, cb)
    _connect(qb, cb, qa, ca)
    for _ in range(batches):
        for i in range(BATCH):
            qb.post_recv(RecvWR(wr_id=i, num_sge=1, sg=[SGE(mb.buf + 64 * i, 64, mb.lkey)]))
        for i in range(BATCH):
            qa.post_send(SendWR(wr_id=i, opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(ma.buf + 64 * i, 64, ma.lkey)],
                                send_flags=e.IBV_SEND_SIGNALED if i == BATCH - 1 else 0))
        got = 0
        while got < BATCH:
            n, wcs = qb_cq.poll(BATCH - got)
            assert n and not any(wc.status for wc in wcs)
            got += n
        n, wcs = qa_cq.poll(1)
        assert n == 1 and wcs[0].status == e.IBV_WC_SUCCESS


def _key(ev: TraceEvent) -> tuple[object, ...]:
    # packet ids come from one counter for the whole process, so two runs number their packets apart
    return ev.time_ns, ev.node, ev.qpn, ev.kind, ev.psn, ev.opcode, {k: v for k, v in ev.detail.items()
                                                                     if k != "packet_id"}


def test_the_default_devices_keep_the_latest_ring_events_and_count_the_rest() -> None:
    # the same program twice on fresh default devices: once as they come, once given a full trace
    batches = RING_EVENTS // (6 * BATCH) + 1  # a SEND is at least 6 events: more than RING_EVENTS in all
    trace = default_fabric().trace
    assert isinstance(trace, RingTrace) and trace.maxlen == RING_EVENTS
    _sends(batches)
    ring = default_fabric().trace
    reset_default_fabric()
    default_fabric().trace = full = Trace()
    _sends(batches)
    assert len(full) > RING_EVENTS
    assert len(ring) == RING_EVENTS
    assert ring.dropped == len(full) - RING_EVENTS
    assert [_key(ev) for ev in ring] == [_key(ev) for ev in full[-RING_EVENTS:]]
    assert ring.dump().splitlines()[0] == (f"({ring.dropped} earlier events let go: this trace keeps the "
                                           f"latest {RING_EVENTS})")
    assert repr(ring) == (f"<RingTrace: {RING_EVENTS} events kept (the latest, at most {RING_EVENTS}), "
                          f"{ring.dropped} let go>")


def test_tracing_off_on_the_default_devices_records_nothing() -> None:
    default_fabric().tracing = False
    _sends(2)
    assert len(default_fabric().trace) == 0 and default_fabric().trace.dropped == 0


def test_a_pair_and_a_fabric_a_program_builds_keep_every_event() -> None:
    assert type(Fabric().trace) is Trace and Fabric().trace.dropped == 0
    p = Pair()
    assert type(p.trace) is Trace


def test_a_ring_lets_the_oldest_go_and_reads_as_a_trace() -> None:
    r = RingTrace(maxlen=5)
    for i in range(12):
        r.append(_ev(i))
    assert [ev.time_ns for ev in r] == [7, 8, 9, 10, 11]
    assert r.dropped == 7 and len(r) == 5
    assert r[-1].time_ns == 11 and r[0].time_ns == 7
    assert isinstance(r[1:3], Trace) and [ev.time_ns for ev in r[1:3]] == [8, 9]
    assert [ev.time_ns for ev in r.between(8, 10)] == [8, 9, 10]
    assert r.nodes() == ["soft0"] and len(r.packets()) == 5
    r.extend(_ev(i) for i in range(12, 14))
    assert r.dropped == 9 and r[0].time_ns == 9
    r.clear()
    assert len(r) == 0 and r.dropped == 0 and r.dump() == ""
    assert Trace([_ev(1)]).dump() == str(_ev(1))  # a full trace lets nothing go and says nothing of it


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "100"])
def test_a_ring_of_no_events_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match=r"maxlen is how many events to keep, a positive int, not"):
        RingTrace(maxlen=bad)  # type: ignore[arg-type]


def test_the_docs_say_how_many_events_the_default_devices_keep() -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "architecture.md").read_text()
    assert f"`RING_EVENTS` = {RING_EVENTS:,} events" in docs
    assert f":data:`RING_EVENTS` ({RING_EVENTS:,})" in (trace_module.__doc__ or "")
