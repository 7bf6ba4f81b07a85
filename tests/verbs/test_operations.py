"""Every operation on every QP type, through the pyverbs-shaped API, on a fault-free fabric."""

from __future__ import annotations

import socket
import struct

import pytest

import rdmalab.verbs.enums as e
from rdmalab.fabric import Fabric
from rdmalab.fabric.harness import EndpointPair
from rdmalab.verbs.mr import MR
from rdmalab.verbs.wr import SGE, SendWR

SIZES = [0, 1, 1023, 1024, 1025, 5000]


@pytest.mark.parametrize("size", SIZES)
def test_send(connected: EndpointPair, size: int) -> None:
    p = connected
    p.a.mr.write(bytes(range(256)) * 20, size)
    p.b.recv(wr_id=9, offset=100)
    p.send(p.a, e.IBV_WR_SEND, length=size)
    (wc,) = p.wait(p.b.cq)
    assert (wc.status, wc.opcode, wc.byte_len, wc.wr_id) == (e.IBV_WC_SUCCESS, e.IBV_WC_RECV, size, 9)
    assert wc.wc_flags == 0
    (sc,) = p.wait(p.a.cq)
    assert (sc.status, sc.opcode) == (e.IBV_WC_SUCCESS, e.IBV_WC_SEND)
    assert p.b.mr.read(size, 100) == p.a.mr.read(size, 0)


def test_send_with_imm(connected: EndpointPair) -> None:
    p = connected
    p.b.recv(wr_id=3)
    p.send(p.a, e.IBV_WR_SEND_WITH_IMM, length=2000, imm=0xCAFE)
    (wc,) = p.wait(p.b.cq)
    assert wc.status == e.IBV_WC_SUCCESS and wc.wc_flags & e.IBV_WC_WITH_IMM
    assert socket.ntohl(wc.imm_data) == 0xCAFE


def test_send_with_invalidate() -> None:
    p = EndpointPair()
    extra = MR(p.b.pd, 4096, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)
    p.b.recv()
    p.send(p.a, e.IBV_WR_SEND_WITH_INV, length=10, invalidate=extra.rkey)
    (wc,) = p.wait(p.b.cq)
    assert wc.status == e.IBV_WC_SUCCESS and wc.wc_flags & e.IBV_WC_WITH_INV
    assert wc.imm_data == extra.rkey and not extra.valid


@pytest.mark.parametrize("size", SIZES)
def test_rdma_write(connected: EndpointPair, size: int) -> None:
    p = connected
    p.a.mr.write(bytes(range(7, 256)) * 30, size)
    p.send(p.a, e.IBV_WR_RDMA_WRITE, length=size, remote=333)
    (wc,) = p.wait(p.a.cq)
    assert (wc.status, wc.opcode) == (e.IBV_WC_SUCCESS, e.IBV_WC_RDMA_WRITE)
    p.run()  # UC completes when the last packet leaves; let it arrive
    assert p.b.mr.read(size, 333) == p.a.mr.read(size, 0)
    assert len(p.b.cq) == 0  # a plain WRITE consumes no receive and makes no completion


def test_rdma_write_with_imm(connected: EndpointPair) -> None:
    p = connected
    p.a.mr.write(b"w" * 3000, 3000)
    p.b.recv(wr_id=5, length=0)
    p.send(p.a, e.IBV_WR_RDMA_WRITE_WITH_IMM, length=3000, remote=8, imm=77)
    (wc,) = p.wait(p.b.cq)
    assert (wc.status, wc.opcode, wc.byte_len) == (e.IBV_WC_SUCCESS, e.IBV_WC_RECV_RDMA_WITH_IMM, 3000)
    assert socket.ntohl(wc.imm_data) == 77
    assert p.b.mr.read(3000, 8) == b"w" * 3000


@pytest.mark.parametrize("size", SIZES)
def test_rdma_read(size: int) -> None:
    p = EndpointPair()
    p.b.mr.write(bytes(range(256)) * 20, size, 50)
    p.send(p.a, e.IBV_WR_RDMA_READ, length=size, offset=9000, remote=50)
    (wc,) = p.wait(p.a.cq)
    assert (wc.status, wc.opcode, wc.byte_len) == (e.IBV_WC_SUCCESS, e.IBV_WC_RDMA_READ, size)
    assert p.a.mr.read(size, 9000) == p.b.mr.read(size, 50)


def test_atomics() -> None:
    p = EndpointPair()
    p.b.mr.write(struct.pack("=Q", 40), 8, 64)
    p.send(p.a, e.IBV_WR_ATOMIC_FETCH_AND_ADD, length=8, offset=0, remote=64, compare_add=2, wr_id=1)
    p.send(p.a, e.IBV_WR_ATOMIC_CMP_AND_SWP, length=8, offset=8, remote=64, compare_add=42, swap=1000, wr_id=2)
    p.send(p.a, e.IBV_WR_ATOMIC_CMP_AND_SWP, length=8, offset=16, remote=64, compare_add=42, swap=5, wr_id=3)
    wcs = p.wait(p.a.cq, 3)
    assert [(w.wr_id, w.status, w.opcode) for w in wcs] == [
        (1, 0, e.IBV_WC_FETCH_ADD), (2, 0, e.IBV_WC_COMP_SWAP), (3, 0, e.IBV_WC_COMP_SWAP)]
    assert struct.unpack("=3Q", p.a.mr.read(24, 0)) == (40, 42, 1000)
    assert struct.unpack("=Q", p.b.mr.read(8, 64)) == (1000,)
    assert p.b.qp.engine.resp.atomics_executed == 3


def test_local_inv(connected: EndpointPair) -> None:
    p = connected
    mine = MR(p.a.pd, 64, e.IBV_ACCESS_LOCAL_WRITE)
    p.send(p.a, e.IBV_WR_LOCAL_INV, length=0, invalidate=mine.lkey, wr_id=4)
    (wc,) = p.wait(p.a.cq)
    assert (wc.status, wc.opcode) == (e.IBV_WC_SUCCESS, e.IBV_WC_LOCAL_INV)
    assert not mine.valid


def test_scatter_gather(connected: EndpointPair) -> None:
    p = connected
    p.a.mr.write(b"A" * 100 + b"B" * 1500 + b"C" * 7, 1607)
    sg = [p.a.sge(0, 100), p.a.sge(100, 1500), p.a.sge(1600, 7)]
    p.b.recv(sges=[p.b.sge(0, 10), p.b.sge(5000, 1000), p.b.sge(9000, 1000)])
    p.send(p.a, e.IBV_WR_SEND, sges=sg)
    (wc,) = p.wait(p.b.cq)
    assert wc.byte_len == 1607
    got = p.b.mr.read(10, 0) + p.b.mr.read(1000, 5000) + p.b.mr.read(597, 9000)
    assert got == b"A" * 100 + b"B" * 1500 + b"C" * 7


def test_inline_data_is_copied_at_post_time(connected: EndpointPair) -> None:
    p = connected
    p.a.mr.write(b"inline!!", 8)
    p.b.recv()
    p.send(p.a, e.IBV_WR_SEND, length=8, flags=e.IBV_SEND_SIGNALED | e.IBV_SEND_INLINE)
    p.a.mr.write(b"changed!", 8)
    p.wait(p.b.cq)
    assert p.b.mr.read(8, 0) == b"inline!!"


def test_unsignaled_wrs_make_no_completion(connected: EndpointPair) -> None:
    p = connected
    p.send(p.a, e.IBV_WR_RDMA_WRITE, length=10, flags=0, wr_id=1)
    p.send(p.a, e.IBV_WR_RDMA_WRITE, length=10, flags=e.IBV_SEND_SIGNALED, wr_id=2)
    wcs = p.wait(p.a.cq, 2)
    assert [w.wr_id for w in wcs] == [2]


def test_solicited_event(connected: EndpointPair) -> None:
    from rdmalab.verbs.cq import CQ, CompChannel

    p = connected
    ch = CompChannel(p.b.ctx)
    cq = CQ(p.b.ctx, 10, None, ch, 0)
    p.b.cq.channel = ch  # the harness CQ reports to this channel
    del cq
    p.b.cq.req_notify(solicited_only=True)
    p.b.recv(wr_id=1)
    p.b.recv(wr_id=2)
    p.send(p.a, e.IBV_WR_SEND, length=4)
    p.wait(p.b.cq)
    assert not ch.events  # not solicited: no event
    p.send(p.a, e.IBV_WR_SEND, length=4, flags=e.IBV_SEND_SIGNALED | e.IBV_SEND_SOLICITED)
    ch.get_cq_event(p.b.cq)
    (wc,) = p.wait(p.b.cq)
    assert wc.wr_id == 2


def test_psn_wraps_around(connected: EndpointPair) -> None:
    q = EndpointPair(qp_type=connected.qp_type, connect=False)
    q.a.psn = q.b.psn = 0xFFFFFD
    q.connect()
    q.a.mr.write(b"z" * 6000, 6000)
    q.send(q.a, e.IBV_WR_RDMA_WRITE, length=6000)
    q.b.recv()
    q.send(q.a, e.IBV_WR_SEND, length=100, wr_id=2)
    assert [w.status for w in q.wait(q.a.cq, 2)] == [0, 0]
    assert q.a.qp.engine.req.psn == (0xFFFFFD + 7) & 0xFFFFFF
    q.run()
    assert q.b.mr.read(6000, 0)[:100] == b"z" * 100


@pytest.mark.parametrize("imm", [False, True])
def test_ud_send(imm: bool) -> None:
    p = EndpointPair(qp_type=e.IBV_QPT_UD)
    p.a.mr.write(b"datagram", 8)
    p.b.recv(wr_id=6, length=100)
    op = e.IBV_WR_SEND_WITH_IMM if imm else e.IBV_WR_SEND
    p.send(p.a, op, length=8, imm=9)
    (sc,) = p.wait(p.a.cq)
    assert sc.status == e.IBV_WC_SUCCESS
    (wc,) = p.wait(p.b.cq)
    assert (wc.status, wc.byte_len, wc.src_qp) == (0, 48, p.a.qp.qp_num)
    assert wc.wc_flags & e.IBV_WC_GRH
    assert bool(wc.wc_flags & e.IBV_WC_WITH_IMM) == imm
    grh = p.b.mr.read(40, 0)
    assert grh[:20] == bytes(20) and grh[20] == 0x45  # IPv4 header after 20 zero bytes
    assert socket.inet_ntoa(grh[32:36]) == "10.0.0.1"
    assert p.b.mr.read(8, 40) == b"datagram"


def test_ud_reply_with_ah_from_wc() -> None:
    from rdmalab.verbs.addr import AH

    p = EndpointPair(qp_type=e.IBV_QPT_UD)
    p.b.recv(length=100)
    p.send(p.a, e.IBV_WR_SEND, length=8)
    (wc,) = p.wait(p.b.cq)
    ah = AH(p.b.pd, wc=wc, port_num=1)
    assert ah.dgid == p.a.ctx.device.gids[1]


def test_ud_oversized_completes_without_sending() -> None:
    fab = Fabric(seed=3, mtu=1024)
    p = EndpointPair(fab, qp_type=e.IBV_QPT_UD)
    p.b.recv(length=4000)
    p.send(p.a, e.IBV_WR_SEND, length=2000)
    (sc,) = p.wait(p.a.cq)
    assert sc.status == e.IBV_WC_SUCCESS
    assert fab.stats["sent"] == 0 and p.wait(p.b.cq) == []


def test_ud_wrong_qkey_is_dropped() -> None:
    p = EndpointPair(qp_type=e.IBV_QPT_UD)
    p.b.recv(length=100)
    wr = p.send(p.a, e.IBV_WR_SEND, length=8)
    del wr
    p.wait(p.b.cq)  # first one delivered
    p.b.recv(length=100)
    from rdmalab.verbs.wr import SendWR

    wr2 = SendWR(num_sge=1, sg=[p.a.sge(0, 8)])
    wr2.set_wr_ud(p.ah(p.a, p.b), p.b.qp.qp_num, 0x1234)
    p.a.qp.post_send(wr2)
    assert p.wait(p.b.cq) == []


@pytest.mark.parametrize("qp_type", [e.IBV_QPT_RC, e.IBV_QPT_UC, e.IBV_QPT_UD])
def test_srq(qp_type: int) -> None:
    p = EndpointPair(qp_type=qp_type, srq=True)
    for i in range(3):
        p.b.recv(wr_id=10 + i, length=200)
    for _ in range(3):
        p.send(p.a, e.IBV_WR_SEND, length=16)
    wcs = p.wait(p.b.cq, 3)
    assert [w.wr_id for w in wcs] == [10, 11, 12]
    assert all(w.status == 0 for w in wcs)


def test_mr_over_numpy_and_mmap_without_copies() -> None:
    import mmap

    import numpy as np

    p = EndpointPair()
    arr = np.zeros(1024, dtype=np.uint32)
    mr_b = MR(p.b.pd, arr.nbytes, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE, address=arr)
    assert mr_b.buf == arr.ctypes.data
    region = mmap.mmap(-1, 4096)
    mr_a = MR(p.a.pd, 4096, e.IBV_ACCESS_LOCAL_WRITE, address=region)
    region[:8] = struct.pack("=2I", 7, 0xDEADBEEF)
    wr = SendWR(opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(mr_a.buf, 8, mr_a.lkey)])
    wr.set_wr_rdma(mr_b.rkey, mr_b.buf + 16)
    p.a.qp.post_send(wr)
    (wc,) = p.wait(p.a.cq)
    assert wc.status == e.IBV_WC_SUCCESS
    assert list(arr[4:6]) == [7, 0xDEADBEEF]  # the engine wrote into the numpy array itself


def test_lkey_and_rkey_always_differ() -> None:
    p = EndpointPair()
    mrs = [MR(p.a.pd, 16, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ) for _ in range(50)]
    assert all(m.lkey != m.rkey for m in mrs)

