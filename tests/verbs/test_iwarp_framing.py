"""The stream seam: FPDUs framed by ULPDU_Length whatever the segment boundaries, TCP loss and
retransmission under iWARP, and the same transport over the kernel's TCP (loopback sockets)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rdmalab.fabric import reset_default_fabric
from rdmalab.fabric.iwpair import IwPair
from rdmalab.fabric.simtcp import SimTcp, iwarp_fabric
from rdmalab.verbs import enums as e
from rdmalab.verbs.cq import CQ
from rdmalab.verbs.device import Context
from rdmalab.verbs.engine.iwarp import IwQP
from rdmalab.verbs.mr import MR
from rdmalab.verbs.pd import PD
from rdmalab.verbs.qp import QP, QPAttr, QPCap, QPInitAttr
from rdmalab.verbs.wr import SGE, RecvWR
from rdmalab.wire.iwarp import rdma_write, segment_untagged
from rdmalab.wire.mpa import frame_fpdu
from rdmalab.wire.rdmap import OP_SEND


@pytest.fixture(autouse=True)
def _default_fabric() -> Iterator[None]:
    yield
    reset_default_fabric()


class NullStream:
    """A stream that keeps what the QP writes (the QP under test is fed by hand)."""

    mss = 1460

    def __init__(self) -> None:
        self.receiver: Any = None
        self.out = bytearray()
        self.closed = False

    def write(self, data: bytes) -> None:
        self.out += data

    def close(self) -> None:
        self.closed = True


def _bare_qp(crc: bool) -> tuple[QP, MR, CQ, NullStream]:
    fab = iwarp_fabric(seed=2)
    ctx = Context(name="siw1", fabric=fab)
    pd = PD(ctx)
    cq = CQ(ctx, 64)
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(max_recv_wr=16)), QPAttr())
    qp.attr.qp_access_flags = 0
    mr = MR(pd, 1 << 16, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)
    eng = qp.engine
    assert isinstance(eng, IwQP)
    eng.access = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
    stream = NullStream()
    eng.attach(stream, crc=crc, ird=1, ord=1, responder=False)
    eng.set_state(e.IBV_QPS_RTS)
    return qp, mr, cq, stream


def _stream_of(mr: MR, crc: bool) -> tuple[bytes, list[tuple[int, bytes]], bytes]:
    """Three Sends (one of 3 segments) and a Write of 2 segments, as one byte stream."""
    msgs = [b"a" * 10, bytes(range(256)) * 12, b""]
    ulpdus: list[bytes] = []
    for i, m in enumerate(msgs):
        ulpdus += segment_untagged(OP_SEND, m, 1454, msn=i + 1)
    wdata = bytes((7 * i) & 0xFF for i in range(2000))
    ulpdus.append(rdma_write(mr.rkey, mr.buf + 40000, wdata[:1000], last=False))
    ulpdus.append(rdma_write(mr.rkey, mr.buf + 41000, wdata[1000:], last=True))
    return b"".join(frame_fpdu(u, crc=crc) for u in ulpdus), [(i, m) for i, m in enumerate(msgs)], wdata


@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(min_value=1, max_value=700), min_size=0, max_size=40), crc=st.booleans())
def test_fpdus_split_at_any_byte_boundaries_place_the_same_bytes(cuts: list[int], crc: bool) -> None:
    qp, mr, cq, _ = _bare_qp(crc)
    for i in range(3):
        qp.post_recv(RecvWR(wr_id=i, num_sge=1, sg=[SGE(mr.buf + i * 8192, 8192, mr.lkey)]))
    data, msgs, wdata = _stream_of(mr, crc)
    pos = 0
    eng = qp.engine
    assert isinstance(eng, IwQP)
    for c in cuts:  # the chunks a TCP receiver might be handed: any sizes, 1 byte included
        eng.on_bytes(data[pos:pos + c])
        pos += c
        if pos >= len(data):
            break
    eng.on_bytes(data[pos:])
    assert eng.terminate_sent is None
    n, wcs = cq.poll(8)
    assert [(w.wr_id, w.status, w.byte_len) for w in wcs] == [(i, e.IBV_WC_SUCCESS, len(m)) for i, m in msgs]
    for i, m in msgs:
        assert mr.read(len(m), i * 8192) == m
    assert mr.read(2000, 40000) == wdata


def test_one_byte_at_a_time() -> None:
    qp, mr, cq, _ = _bare_qp(True)
    for i in range(3):
        qp.post_recv(RecvWR(wr_id=i, num_sge=1, sg=[SGE(mr.buf + i * 8192, 8192, mr.lkey)]))
    data, msgs, wdata = _stream_of(mr, True)
    for b in range(len(data)):
        qp.engine.on_bytes(data[b:b + 1])
    assert cq.poll(8)[0] == 3 and mr.read(2000, 40000) == wdata


@pytest.mark.parametrize("mss", [1, 7, 100, 536])
def test_tiny_tcp_segments_cut_every_fpdu_and_the_transfer_is_intact(mss: int) -> None:
    pair = IwPair(mss=mss, recv_len=4096)
    data = bytes(random.Random(mss).randbytes(3000))
    pair.a.mr.write(data, 3000, 0)
    pair.a.post(e.IBV_WR_SEND, 0, 3000, wr_id=1)
    pair.a.post(e.IBV_WR_RDMA_WRITE, 0, 3000, wr_id=2, remote=pair.b.mr.buf + 8192, rkey=pair.b.mr.rkey)
    pair.a.post(e.IBV_WR_RDMA_READ, 16384, 3000, wr_id=3, remote=pair.b.mr.buf + 8192, rkey=pair.b.mr.rkey)
    wcs = pair.wait(pair.a, 3)
    assert [(w.wr_id, w.status) for w in wcs] == [(1, 0), (2, 0), (3, 0)]
    (rwc,) = pair.wait(pair.b)
    assert rwc.byte_len == 3000 and pair.b.mr.read(3000, 0) == data
    assert pair.a.mr.read(3000, 16384) == data
    assert SimTcp.of(pair.fabric).stats["segments"] > 3 * 3000 // max(mss, 64)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_lost_and_duplicated_segments_are_repaired_by_tcp_not_by_iwarp(seed: int) -> None:
    pair = IwPair(seed=seed, record=True, recv_len=20000)
    pair.fabric.set_faults(loss=0.1, duplicate=0.05)
    rng = random.Random(seed)
    data = bytes(rng.randbytes(20000))
    pair.a.mr.write(data, 20000, 0)
    pair.a.post(e.IBV_WR_SEND, 0, 20000, wr_id=1)
    pair.a.post(e.IBV_WR_RDMA_WRITE, 0, 20000, wr_id=2, remote=pair.b.mr.buf + 20000, rkey=pair.b.mr.rkey)
    pair.a.post(e.IBV_WR_RDMA_READ, 40000, 20000, wr_id=3, remote=pair.b.mr.buf + 20000, rkey=pair.b.mr.rkey)
    wcs = pair.wait(pair.a, 3, max_steps=1_000_000)
    assert [(w.wr_id, w.status) for w in wcs] == [(1, 0), (2, 0), (3, 0)]
    assert pair.a.mr.read(20000, 40000) == data
    (rwc,) = pair.wait(pair.b)
    assert rwc.byte_len == 20000 and pair.b.mr.read(20000, 0) == data
    stats = SimTcp.of(pair.fabric).stats
    assert stats["lost"] > 0 and stats["retransmitted"] + stats["fast_retransmits"] > 0
    assert pair.a.engine.terminate_sent is None and pair.b.engine.terminate_sent is None


def test_a_retransmission_shows_in_the_capture_as_the_same_sequence_number_again() -> None:
    pair = IwPair(seed=4, record=True)
    pair.fabric.set_faults(loss=1.0, src="siw0")
    pair.a.post(e.IBV_WR_RDMA_WRITE, 0, 100, remote=pair.b.mr.buf, rkey=pair.b.mr.rkey)
    pair.fabric.run(until_ns=pair.fabric.now_ns + 150_000_000)
    pair.fabric.clear_faults()
    pair.run()
    import dpkt

    seqs = []
    for f in pair.frames:
        eth = dpkt.ethernet.Ethernet(f)
        tcp = eth.data.data
        if eth.data.src == bytes([10, 0, 0, 1]) and len(tcp.data) > 100:
            seqs.append(tcp.seq)
    assert len(seqs) >= 2 and len(set(seqs)) == 1  # sent, lost, sent again after the RTO (200 ms)


# ============================================================================ kernel TCP (loopback sockets)


def _kernel_pair(crc: bool) -> tuple[Any, Any, Any]:
    from rdmalab.fabric.tcpkernel import KernelTcp
    from rdmalab.verbs.cm_enums import RAI_PASSIVE
    from rdmalab.verbs.cm_enums import rdma_cm_event_type as EV
    from rdmalab.verbs.cmid import CMID, AddrInfo, CMEvent, CMEventChannel, ConnParam
    from rdmalab.verbs.device import set_default_devices

    kt = KernelTcp()
    kt.add_device("ksiw0", "127.0.0.1")
    kt.add_device("ksiw1", "127.0.0.2", mpa_crc=crc)
    set_default_devices(lambda: kt)
    port = 20000 + random.Random().randrange(20000)
    init = QPInitAttr(qp_type=e.IBV_QPT_RC, cap=QPCap(max_send_wr=8, max_recv_wr=8), sq_sig_all=0)
    sch, cch = CMEventChannel(), CMEventChannel()
    lid = CMID(sch)
    lid.bind_addr(AddrInfo(src="127.0.0.2", src_service=port, flags=RAI_PASSIVE))
    lid.listen()
    cli = CMID(cch)
    cli.resolve_addr(AddrInfo(dst="127.0.0.2", dst_service=port))
    CMEvent(cch)
    cli.resolve_route()
    CMEvent(cch)
    cli.create_qp(init)
    cli.connect(ConnParam(resources=2, depth=2))
    ev = CMEvent(sch)
    assert ev.event_type == EV.RDMA_CM_EVENT_CONNECT_REQUEST
    srv = CMID(ev, listen_id=lid)
    srv.create_qp(init)
    srv.accept(ConnParam(resources=2, depth=2))
    assert CMEvent(cch).event_type == EV.RDMA_CM_EVENT_ESTABLISHED
    return kt, cli, srv


@pytest.mark.parametrize("crc", [False, True], ids=["crc-off", "crc-on"])
def test_write_read_send_over_kernel_tcp_sockets(crc: bool) -> None:
    from rdmalab.verbs.device import set_default_devices

    kt, cli, srv = _kernel_pair(crc)
    try:
        assert cli.qp.engine.crc is crc and srv.qp.engine.crc is crc
        n = 200_000
        rx = srv.reg_msgs(64)
        srv.post_recv(rx)
        hello = cli.reg_msgs(64)
        hello.write(b"hello iwarp".ljust(64, b"."), 64)
        cli.post_send(hello, flags=0)  # the initiator's first FPDU
        wc = srv.get_recv_comp()
        assert wc.status == e.IBV_WC_SUCCESS and rx.read(11, 0) == b"hello iwarp"
        target = MR(srv.pd, n, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ)
        src = cli.reg_read(n)
        data = random.Random(5).randbytes(n)
        src.write(data, n)
        cli.post_write(src, n, target.buf, target.rkey, flags=e.IBV_SEND_SIGNALED)
        assert cli.get_send_comp().status == e.IBV_WC_SUCCESS
        sink = cli.reg_write(n)
        cli.post_read(sink, n, target.buf, target.rkey, flags=e.IBV_SEND_SIGNALED)
        wc = cli.get_send_comp()
        assert wc.status == e.IBV_WC_SUCCESS and sink.read(n, 0) == data == target.read(n, 0)
    finally:
        kt.close()
        set_default_devices(None)


# ============================================================================ the engine's fast framing against the codecs


@settings(max_examples=80, deadline=None)
@given(n=st.integers(min_value=0, max_value=5000), room=st.integers(min_value=40, max_value=3000),
       crc=st.booleans(), opcode=st.sampled_from([0x0, 0x2]), to=st.integers(min_value=0, max_value=2**64 - 1),
       stag=st.integers(min_value=0, max_value=2**32 - 1))
def test_tagged_fpdus_are_the_codecs_segments_framed(n: int, room: int, crc: bool, opcode: int, to: int,
                                                     stag: int) -> None:
    from rdmalab.verbs.engine.iwarp import tagged_fpdus
    from rdmalab.wire.iwarp import segment_tagged

    payload = bytes(random.Random(n).randbytes(n))
    want = [frame_fpdu(u, crc=crc) for u in segment_tagged(opcode, stag, to, payload, room)]
    assert tagged_fpdus(opcode, stag, to, payload, room, crc) == want


@settings(max_examples=80, deadline=None)
@given(n=st.integers(min_value=0, max_value=5000), room=st.integers(min_value=40, max_value=3000),
       crc=st.booleans(), opcode=st.sampled_from([0x3, 0x4, 0x5, 0x6]), msn=st.integers(min_value=1, max_value=2**32 - 1),
       inv=st.integers(min_value=0, max_value=2**32 - 1))
def test_untagged_fpdus_are_the_codecs_segments_framed(n: int, room: int, crc: bool, opcode: int, msn: int,
                                                       inv: int) -> None:
    from rdmalab.verbs.engine.iwarp import untagged_fpdus

    payload = bytes(random.Random(n).randbytes(n))
    inv_stag = inv if opcode in (0x4, 0x6) else 0
    want = [frame_fpdu(u, crc=crc) for u in segment_untagged(opcode, payload, room, msn=msn, inv_stag=inv_stag)]
    assert untagged_fpdus(opcode, 0, msn, payload, room, crc, inv_stag) == want


def test_a_kernel_tcp_device_on_an_interface_takes_its_address() -> None:
    from rdmalab.fabric.tcpkernel import KernelTcp
    from rdmalab.verbs.device import get_device_list

    with KernelTcp() as kt:
        dev = kt.add_interface_device("kiw0", "lo")
        assert (dev.ipv4, dev.ifname) == (0x7F000001, "lo")
        (entry,) = get_device_list(kt)
        assert (entry.name, entry.node_type, entry.transport_type) == (b"kiw0", 4, 1)
