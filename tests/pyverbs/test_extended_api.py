"""The extended verbs API on its own (no rdma-core suite needed): memory windows, QPEx, CQEX, the alias."""

from __future__ import annotations

import errno
import random

import pytest

import rdmalab.fabric  # noqa: F401 - registers the default soft devices
import rdmalab.verbs.libibverbs_enums as e
from rdmalab.verbs.addr import AHAttr, GlobalRoute
from rdmalab.verbs.cqex import CQ, CQEX, CqInitAttrEx, PollCqAttr
from rdmalab.verbs.device_ex import Context
from rdmalab.verbs.mr_ex import MR, MW, MWBind, MWBindInfo
from rdmalab.verbs.pd import PD
from rdmalab.verbs.pyverbs_error import PyverbsRDMAError
from rdmalab.verbs.qp import QPAttr, QPCap
from rdmalab.verbs.qpex import QPEx, QPInitAttrEx
from rdmalab.verbs.wr import SGE
from rdmalab.verbs.wr_ex import SendWR

ACC = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ


class Side:
    def __init__(self, ops: int, mr_access: int = ACC | e.IBV_ACCESS_MW_BIND, cq_ex: bool = False) -> None:
        self.ctx = Context(name="soft0")
        self.pd = PD(self.ctx)
        self.cq = CQEX(self.ctx, CqInitAttrEx(cqe=64, wc_flags=e.IBV_WC_STANDARD_FLAGS)) if cq_ex else CQ(self.ctx, 64)
        self.mr = MR(self.pd, 4096, mr_access)
        qia = QPInitAttrEx(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, pd=self.pd,
                           cap=QPCap(max_send_wr=16, max_recv_wr=16), send_ops_flags=ops,
                           comp_mask=e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)
        qa = QPAttr(port_num=1)
        qa.qp_access_flags = ACC
        self.qp = QPEx(self.ctx, qia, qa)
        self.psn = random.getrandbits(24)

    def connect(self, other: Side) -> None:
        a = QPAttr(port_num=1)
        a.qp_access_flags = ACC
        a.path_mtu, a.max_dest_rd_atomic, a.max_rd_atomic = e.IBV_MTU_1024, 1, 1
        a.timeout, a.retry_cnt, a.rnr_retry, a.min_rnr_timer = 14, 7, 7, 12
        a.ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=self.ctx.query_gid(1, 1), sgid_index=1))
        a.dest_qp_num, a.rq_psn, a.sq_psn = other.qp.qp_num, self.psn, other.psn
        self.qp.to_rts(a)

    def poll(self) -> object:
        n, wcs = self.cq.poll(1)
        assert n == 1
        return wcs[0]


@pytest.fixture
def pair() -> tuple[Side, Side]:
    ops = (e.IBV_QP_EX_WITH_RDMA_WRITE | e.IBV_QP_EX_WITH_SEND | e.IBV_QP_EX_WITH_BIND_MW
           | e.IBV_QP_EX_WITH_LOCAL_INV)
    a, b = Side(ops), Side(ops)
    a.connect(b)
    b.connect(a)
    return a, b


def write(a: Side, rkey: int, addr: int, data: bytes) -> object:
    a.mr.write(data, len(data))
    a.qp.wr_start()
    a.qp.wr_id, a.qp.wr_flags = 7, e.IBV_SEND_SIGNALED
    a.qp.wr_rdma_write(rkey, addr)
    a.qp.wr_set_sge(SGE(a.mr.buf, len(data), a.mr.lkey))
    a.qp.wr_complete()
    return a.poll()


def test_type2_window_grants_its_range_only_until_invalidated(pair: tuple[Side, Side]) -> None:
    a, b = pair
    mw = MW(b.pd, e.IBV_MW_TYPE_2)
    wr = SendWR(opcode=e.IBV_WR_BIND_MW)
    wr.set_bind_wr(mw, MWBindInfo(b.mr, b.mr.buf + 1024, 512, e.IBV_ACCESS_REMOTE_WRITE))
    b.qp.post_send(wr)
    wc = b.poll()
    assert (wc.status, wc.opcode) == (e.IBV_WC_SUCCESS, e.IBV_WC_BIND_MW)
    assert wr.rkey & 0xFF == (mw.rkey & 0xFF) and wr.rkey != b.mr.rkey
    assert write(a, wr.rkey, b.mr.buf + 1024, b"window").status == e.IBV_WC_SUCCESS
    assert b.mr.read(6, 1024) == b"window"
    # outside the window (but inside the MR): refused
    assert write(a, wr.rkey, b.mr.buf, b"x").status == e.IBV_WC_REM_ACCESS_ERR


def test_local_inv_frees_a_type2_window(pair: tuple[Side, Side]) -> None:
    a, b = pair
    mw = MW(b.pd, e.IBV_MW_TYPE_2)
    wr = SendWR(opcode=e.IBV_WR_BIND_MW)
    wr.set_bind_wr(mw, MWBindInfo(b.mr, b.mr.buf, 4096, e.IBV_ACCESS_REMOTE_WRITE))
    b.qp.post_send(wr)
    assert b.poll().status == e.IBV_WC_SUCCESS
    inv = SendWR(opcode=e.IBV_WR_LOCAL_INV)
    inv.imm_data = wr.rkey  # the libibverbs union: imm_data is invalidate_rkey
    b.qp.post_send(inv)
    assert b.poll().status == e.IBV_WC_SUCCESS
    assert write(a, wr.rkey, b.mr.buf, b"late").status == e.IBV_WC_REM_ACCESS_ERR


def test_type1_bind_and_dealloc(pair: tuple[Side, Side]) -> None:
    a, b = pair
    mw = MW(b.pd, e.IBV_MW_TYPE_1)
    old = mw.rkey
    b.qp.bind_mw(mw, MWBind(MWBindInfo(b.mr, b.mr.buf, 64, e.IBV_ACCESS_REMOTE_WRITE), e.IBV_SEND_SIGNALED))
    assert b.poll().status == e.IBV_WC_SUCCESS and mw.rkey != old
    assert write(a, mw.rkey, b.mr.buf, b"t1").status == e.IBV_WC_SUCCESS
    mw.close()  # ibv_dealloc_mw: the key is gone
    assert write(a, mw.rkey, b.mr.buf, b"t1").status == e.IBV_WC_REM_ACCESS_ERR


def test_bind_to_mr_without_mw_bind_fails_the_qp() -> None:
    ops = e.IBV_QP_EX_WITH_BIND_MW | e.IBV_QP_EX_WITH_SEND
    a, b = Side(ops), Side(ops, mr_access=ACC)
    b.connect(a)
    mw = MW(b.pd, e.IBV_MW_TYPE_2)
    wr = SendWR(opcode=e.IBV_WR_BIND_MW)
    wr.set_bind_wr(mw, MWBindInfo(b.mr, b.mr.buf, 16, e.IBV_ACCESS_REMOTE_WRITE))
    b.qp.post_send(wr)
    assert b.poll().status == e.IBV_WC_MW_BIND_ERR
    assert b.qp.qp_state == e.IBV_QPS_ERR


def test_mw_type_must_be_1_or_2() -> None:
    with pytest.raises(PyverbsRDMAError) as ex:
        MW(PD(Context(name="soft0")), 3)
    assert ex.value.error_code == errno.EINVAL


def test_cqex_poll_loop_and_accessors() -> None:
    ops = e.IBV_QP_EX_WITH_SEND_WITH_IMM
    a, b = Side(ops, cq_ex=True), Side(ops, cq_ex=True)
    a.connect(b)
    b.connect(a)
    from rdmalab.verbs.wr import RecvWR
    b.qp.post_recv(RecvWR(wr_id=5, num_sge=1, sg=[SGE(b.mr.buf, 64, b.mr.lkey)]))
    assert b.cq.start_poll(PollCqAttr()) == errno.ENOENT  # nothing sent yet: the fabric is idle
    b.cq.end_poll()
    a.mr.write(b"hello", 5)
    a.qp.wr_start()
    a.qp.wr_id, a.qp.wr_flags = 9, e.IBV_SEND_SIGNALED
    a.qp.wr_send_imm(0x1234)
    a.qp.wr_set_sge(SGE(a.mr.buf, 5, a.mr.lkey))
    a.qp.wr_complete()
    assert b.cq.start_poll(PollCqAttr()) == 0
    try:
        assert (b.cq.status, b.cq.wr_id, b.cq.read_opcode(), b.cq.read_byte_len()) == (0, 5, e.IBV_WC_RECV, 5)
        import socket
        assert socket.ntohl(b.cq.read_imm_data()) == 0x1234
        assert b.cq.read_wc_flags() & e.IBV_WC_WITH_IMM
        assert b.cq.poll_next() == errno.ENOENT
    finally:
        b.cq.end_poll()
    assert b.mr.read(5, 0) == b"hello"


def test_cqex_rejects_flags_rxe_lacks() -> None:
    with pytest.raises(PyverbsRDMAError) as ex:
        CQEX(Context(name="soft0"), CqInitAttrEx(wc_flags=e.IBV_WC_EX_WITH_COMPLETION_TIMESTAMP))
    assert ex.value.error_code == errno.EOPNOTSUPP


def test_alias_routes_pyverbs_imports() -> None:
    import rdmalab.verbs.pyverbs_alias as alias

    alias.install()
    try:
        import pyverbs.device as d
        import pyverbs.enums as pe
        from pyverbs.providers.mlx5.mlx5dv import Mlx5Context
        from pyverbs.pyverbs_error import PyverbsUserError
        from pyverbs.qp import QPEx as AliasQPEx

        assert AliasQPEx is QPEx and d.Context is Context and pe.IBV_WR_SEND == 2
        with pytest.raises(PyverbsUserError, match="not an MLX5 device"):
            Mlx5Context(None, name="soft0")
    finally:
        alias.uninstall()
