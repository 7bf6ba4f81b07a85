"""Every completion status, provoked the way a user would provoke it.

Statuses and which side sees them follow rxe (``rxe_resp.c``/``rxe_comp.c``) except where
noted: a too-small receive buffer gives the receiver LOC_LEN_ERR (IBA o9-?; rxe reports
REM_INV_REQ_ERR there), and the sender REM_INV_REQ_ERR.
"""

from __future__ import annotations

import errno
from typing import Any

import pytest

import rdmalab.verbs.enums as e
from rdmalab.fabric.harness import ALL_ACCESS, EndpointPair
from rdmalab.verbs.mr import MR
from rdmalab.verbs.pyverbs_error import PyverbsRDMAError, PyverbsUserError
from rdmalab.verbs.wr import SGE, SendWR


def statuses(wcs: list[Any]) -> list[int]:
    return [w.status for w in wcs]


def test_rem_access_err_wrong_rkey_lkey_mixup() -> None:
    p = EndpointPair()
    p.send(p.a, e.IBV_WR_RDMA_WRITE, length=16, rkey=p.b.mr.lkey)  # the classic mix-up
    (wc,) = p.wait(p.a.cq)
    assert wc.status == e.IBV_WC_REM_ACCESS_ERR
    assert e.ibv_wc_status_str(wc.status) == "remote access error"
    assert p.a.qp.qp_state == e.IBV_QPS_ERR


def test_rem_access_err_missing_mr_access_flag() -> None:
    p = EndpointPair(mr_access=e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)  # no REMOTE_READ on the MR
    p.send(p.a, e.IBV_WR_RDMA_READ, length=16)
    assert statuses(p.wait(p.a.cq)) == [e.IBV_WC_REM_ACCESS_ERR]


def test_rem_access_err_out_of_bounds() -> None:
    p = EndpointPair(size=4096)
    p.send(p.a, e.IBV_WR_RDMA_WRITE, length=100, remote=4000)
    assert statuses(p.wait(p.a.cq)) == [e.IBV_WC_REM_ACCESS_ERR]


def test_rem_access_err_other_pd() -> None:
    from rdmalab.verbs.pd import PD

    p = EndpointPair()
    other = MR(PD(p.b.ctx), 64, ALL_ACCESS)
    wr = SendWR(opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[p.a.sge(0, 8)])
    wr.set_wr_rdma(other.rkey, other.buf)
    p.a.qp.post_send(wr)
    assert statuses(p.wait(p.a.cq)) == [e.IBV_WC_REM_ACCESS_ERR]


def test_rem_inv_req_err_missing_qp_access_flag() -> None:
    p = EndpointPair(qp_access=e.IBV_ACCESS_REMOTE_READ)  # QP does not allow remote writes
    p.send(p.a, e.IBV_WR_RDMA_WRITE, length=16)
    assert statuses(p.wait(p.a.cq)) == [e.IBV_WC_REM_INV_REQ_ERR]
    assert p.b.qp.qp_state == e.IBV_QPS_ERR  # rxe: class C error takes the responder to ERR too


def test_rem_inv_req_err_no_rd_atomic_resources() -> None:
    p = EndpointPair(max_dest_rd_atomic=0)
    p.send(p.a, e.IBV_WR_RDMA_READ, length=16)
    assert statuses(p.wait(p.a.cq)) == [e.IBV_WC_REM_INV_REQ_ERR]


def test_receive_buffer_too_small_rc() -> None:
    p = EndpointPair()
    p.b.recv(wr_id=1, length=100)
    p.send(p.a, e.IBV_WR_SEND, length=200)
    assert statuses(p.wait(p.a.cq)) == [e.IBV_WC_REM_INV_REQ_ERR]
    (wc,) = p.wait(p.b.cq)
    assert (wc.wr_id, wc.status) == (1, e.IBV_WC_LOC_LEN_ERR)


@pytest.mark.parametrize("qp_type", [e.IBV_QPT_UC, e.IBV_QPT_UD])
def test_loc_len_err_unreliable(qp_type: int) -> None:
    p = EndpointPair(qp_type=qp_type)
    p.b.recv(wr_id=1, length=20)  # UD needs 40 bytes of GRH on top
    p.send(p.a, e.IBV_WR_SEND, length=30)
    (wc,) = p.wait(p.b.cq)
    assert wc.status == e.IBV_WC_LOC_LEN_ERR
    assert p.b.qp.qp_state == e.IBV_QPS_ERR


def test_rem_op_err_receive_with_bad_lkey() -> None:
    p = EndpointPair()
    p.b.recv(wr_id=4, sges=[SGE(p.b.mr.buf, 100, p.b.mr.rkey)])  # rkey where the lkey belongs
    p.send(p.a, e.IBV_WR_SEND, length=10)
    assert statuses(p.wait(p.a.cq)) == [e.IBV_WC_REM_OP_ERR]
    assert statuses(p.wait(p.b.cq)) == [e.IBV_WC_LOC_QP_OP_ERR]  # rxe: RESPST_ERR_MALFORMED_WQE


def test_rnr_retry_exc_err_no_receive_posted() -> None:
    p = EndpointPair(rnr_retry=2, min_rnr_timer=1)
    p.send(p.a, e.IBV_WR_SEND, length=10)
    (wc,) = p.wait(p.a.cq)
    assert wc.status == e.IBV_WC_RNR_RETRY_EXC_ERR
    assert p.a.ctx.device.counters["rcvd_rnr_err"] == 3  # the first try and two retries


def test_rnr_then_success_when_receive_arrives() -> None:
    p = EndpointPair(rnr_retry=7, min_rnr_timer=14)
    p.send(p.a, e.IBV_WR_SEND, length=10)
    p.fabric.advance(5_000_000)  # a few RNR NAKs go by (1.28 ms each)
    assert len(p.a.cq) == 0
    p.b.recv()
    assert statuses(p.wait(p.a.cq)) == [e.IBV_WC_SUCCESS]
    assert p.a.ctx.device.counters["rcvd_rnr_err"] >= 3


def test_retry_exc_err_peer_gone() -> None:
    p = EndpointPair(retry_cnt=3, timeout=10)
    p.b.qp.close()
    p.send(p.a, e.IBV_WR_RDMA_WRITE, length=10)
    (wc,) = p.wait(p.a.cq)
    assert wc.status == e.IBV_WC_RETRY_EXC_ERR
    assert p.fabric.now_ns >= 4 * (4096 << 10)  # four timeouts: the first try and three retries


def test_retry_exc_err_peer_not_ready() -> None:
    p = EndpointPair(retry_cnt=1, timeout=8)
    p.b.qp.to_error()
    p.send(p.a, e.IBV_WR_SEND, length=10)
    assert statuses(p.wait(p.a.cq)) == [e.IBV_WC_RETRY_EXC_ERR]


def test_loc_prot_err_rkey_as_lkey() -> None:
    p = EndpointPair()
    p.send(p.a, e.IBV_WR_RDMA_WRITE, sges=[SGE(p.a.mr.buf, 8, p.a.mr.rkey)])
    assert statuses(p.wait(p.a.cq)) == [e.IBV_WC_LOC_PROT_ERR]


def test_loc_prot_err_sge_out_of_bounds() -> None:
    p = EndpointPair(size=4096)
    p.send(p.a, e.IBV_WR_SEND, sges=[SGE(p.a.mr.buf + 4000, 200, p.a.mr.lkey)])
    assert statuses(p.wait(p.a.cq)) == [e.IBV_WC_LOC_PROT_ERR]


def test_loc_prot_err_read_into_read_only_mr() -> None:
    p = EndpointPair()
    ro = MR(p.a.pd, 64, 0)
    p.send(p.a, e.IBV_WR_RDMA_READ, sges=[SGE(ro.buf, 8, ro.lkey)])
    assert statuses(p.wait(p.a.cq)) == [e.IBV_WC_LOC_PROT_ERR]


def test_loc_prot_err_after_local_inv() -> None:
    p = EndpointPair()
    p.send(p.a, e.IBV_WR_LOCAL_INV, length=0, invalidate=p.a.mr.lkey, wr_id=1)
    p.send(p.a, e.IBV_WR_RDMA_WRITE, length=8, wr_id=2)
    assert statuses(p.wait(p.a.cq, 2)) == [e.IBV_WC_SUCCESS, e.IBV_WC_LOC_PROT_ERR]


def test_rem_access_err_after_send_with_invalidate() -> None:
    p = EndpointPair()
    p.b.recv()
    p.send(p.a, e.IBV_WR_SEND_WITH_INV, length=8, invalidate=p.b.mr.rkey, wr_id=1)
    p.send(p.a, e.IBV_WR_RDMA_WRITE, length=8, wr_id=2)
    assert statuses(p.wait(p.a.cq, 2)) == [e.IBV_WC_SUCCESS, e.IBV_WC_REM_ACCESS_ERR]


@pytest.mark.parametrize("qp_type,op", [(e.IBV_QPT_UC, e.IBV_WR_RDMA_READ), (e.IBV_QPT_UC, e.IBV_WR_ATOMIC_FETCH_AND_ADD),
                                        (e.IBV_QPT_UD, e.IBV_WR_RDMA_WRITE), (e.IBV_QPT_UD, e.IBV_WR_RDMA_READ)])
def test_loc_qp_op_err_operation_not_supported_by_qp_type(qp_type: int, op: int) -> None:
    p = EndpointPair(qp_type=qp_type)
    p.send(p.a, op, length=8)
    assert statuses(p.wait(p.a.cq)) == [e.IBV_WC_LOC_QP_OP_ERR]


def test_wr_flush_err_behind_an_error_and_on_the_receive_queue() -> None:
    p = EndpointPair()
    p.a.recv(wr_id=70)
    p.send(p.a, e.IBV_WR_RDMA_WRITE, length=8, rkey=12345, wr_id=1)
    p.send(p.a, e.IBV_WR_RDMA_WRITE, length=8, wr_id=2)
    p.send(p.a, e.IBV_WR_RDMA_WRITE, length=8, wr_id=3, flags=0)
    wcs = p.wait(p.a.cq, 4)
    got = sorted((w.wr_id, w.status) for w in wcs)
    assert got == [(1, e.IBV_WC_REM_ACCESS_ERR), (2, e.IBV_WC_WR_FLUSH_ERR), (3, e.IBV_WC_WR_FLUSH_ERR),
                   (70, e.IBV_WC_WR_FLUSH_ERR)]  # errors complete even when unsignaled


def test_wr_flush_err_posting_to_a_qp_in_error() -> None:
    p = EndpointPair()
    p.a.qp.to_error()
    p.send(p.a, e.IBV_WR_SEND, length=8, wr_id=5)
    p.a.recv(wr_id=6)
    assert sorted((w.wr_id, w.status) for w in p.wait(p.a.cq, 2)) == [(5, 5), (6, 5)]


def test_post_send_before_rts_fails_like_the_kernel() -> None:
    p = EndpointPair(connect=False)
    with pytest.raises(PyverbsRDMAError) as err:
        p.send(p.a, e.IBV_WR_SEND, length=8)
    assert err.value.error_code == errno.EINVAL


def test_post_errors_are_raised() -> None:
    p = EndpointPair()
    with pytest.raises(PyverbsRDMAError):  # atomics take exactly 8 bytes
        p.send(p.a, e.IBV_WR_ATOMIC_FETCH_AND_ADD, length=16)
    with pytest.raises(PyverbsRDMAError):  # more SGEs than max_send_sge
        p.send(p.a, e.IBV_WR_SEND, sges=[p.a.sge(0, 1)] * 5)
    with pytest.raises(PyverbsRDMAError):  # inline beyond max_inline_data
        p.send(p.a, e.IBV_WR_SEND, length=1000, flags=e.IBV_SEND_INLINE)
    with pytest.raises(PyverbsUserError):
        SendWR(num_sge=2, sg=[p.a.sge(0, 1)])


def test_mr_access_rules() -> None:
    p = EndpointPair()
    with pytest.raises(PyverbsRDMAError) as err:
        MR(p.a.pd, 64, e.IBV_ACCESS_REMOTE_WRITE)  # REMOTE_WRITE needs LOCAL_WRITE
    assert err.value.error_code == errno.EINVAL
    with pytest.raises(PyverbsRDMAError):
        MR(p.a.pd, 64, e.IBV_ACCESS_LOCAL_WRITE, address=b"read-only bytes")
