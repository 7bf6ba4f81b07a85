"""The QP state machine: the transition table, the masks, and what each state allows."""

from __future__ import annotations

import errno

import pytest

import rdmalab.verbs.enums as e
from rdmalab.fabric.harness import EndpointPair
from rdmalab.verbs.addr import AHAttr, GlobalRoute
from rdmalab.verbs.engine import qpstate
from rdmalab.verbs.pyverbs_error import PyverbsRDMAError
from rdmalab.verbs.qp import QP, QPAttr, QPCap, QPInitAttr


def fresh(qp_type: int = e.IBV_QPT_RC) -> QP:
    p = EndpointPair(qp_type=qp_type, connect=False)
    init = QPInitAttr(qp_type=qp_type, scq=p.a.cq, rcq=p.a.cq, cap=QPCap())
    return QP(p.a.pd, init)


def test_created_in_reset_and_pyverbs_shortcuts() -> None:
    qp = fresh()
    assert qp.qp_state == e.IBV_QPS_RESET
    p = EndpointPair(connect=False)
    assert p.a.qp.qp_state == e.IBV_QPS_INIT  # QP(pd, init, qp_attr): RC -> INIT
    u = EndpointPair(qp_type=e.IBV_QPT_UD, connect=False)
    assert u.a.qp.qp_state == e.IBV_QPS_RTS  # UD -> RTS


@pytest.mark.parametrize("cur,new", [(e.IBV_QPS_RESET, e.IBV_QPS_RTS), (e.IBV_QPS_RESET, e.IBV_QPS_RTR),
                                     (e.IBV_QPS_INIT, e.IBV_QPS_RTS), (e.IBV_QPS_RTR, e.IBV_QPS_RTR)])
def test_illegal_transitions_fail_with_einval(cur: int, new: int) -> None:
    qp = fresh()
    qp.engine.qp_state = cur  # force the state the test starts from
    attr = QPAttr(qp_state=new)
    with pytest.raises(PyverbsRDMAError) as err:
        qp.modify(attr, e.IBV_QP_STATE)
    assert err.value.error_code == errno.EINVAL
    assert "not a legal transition" in str(err.value)


def test_missing_required_attribute() -> None:
    p = EndpointPair(connect=False)
    attr = QPAttr(qp_state=e.IBV_QPS_RTR)
    with pytest.raises(PyverbsRDMAError, match="requires .*DEST_QPN"):
        p.a.qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU)


def test_attribute_not_allowed_in_transition() -> None:
    qp = fresh()
    attr = QPAttr(qp_state=e.IBV_QPS_INIT)
    mask = e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS | e.IBV_QP_SQ_PSN
    with pytest.raises(PyverbsRDMAError, match="does not accept SQ_PSN"):
        qp.modify(attr, mask)


def test_roce_needs_a_grh() -> None:
    p = EndpointPair(connect=False)
    attr = QPAttr(qp_state=e.IBV_QPS_RTR)
    attr.ah_attr = AHAttr(port_num=1, is_global=0, gr=GlobalRoute(dgid=p.b.gid))
    attr.dest_qp_num = p.b.qp.qp_num
    with pytest.raises(PyverbsRDMAError, match="is_global=1"):
        p.a.qp.to_rtr(attr)


def test_value_checks() -> None:
    p = EndpointPair(connect=False)
    qp = p.a.qp
    qp.engine.qp_state = e.IBV_QPS_SQD  # SQD -> SQD accepts TIMEOUT and PATH_MTU
    attr = QPAttr(qp_state=e.IBV_QPS_SQD)
    attr.timeout = 40
    with pytest.raises(PyverbsRDMAError, match="timeout 40 > 31"):
        qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_TIMEOUT)
    attr = QPAttr(qp_state=e.IBV_QPS_SQD, path_mtu=9)
    with pytest.raises(PyverbsRDMAError, match="(?i)path_mtu"):
        qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_PATH_MTU)


def test_every_legal_edge_of_the_table_is_accepted() -> None:
    for qp_type in (e.IBV_QPT_RC, e.IBV_QPT_UC, e.IBV_QPT_UD):
        for (cur, new), masks in qpstate.TABLE.items():
            if qp_type not in masks:
                continue
            req, _opt = masks[qp_type]
            p = EndpointPair(qp_type=qp_type, connect=False)
            qp = p.a.qp
            qp.engine.qp_state = cur  # force the state the test starts from
            attr = QPAttr(qp_state=new)
            attr.ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=p.b.gid, sgid_index=1))
            if req & e.IBV_QP_CUR_STATE:
                attr.cur_qp_state = cur
            qp.modify(attr, e.IBV_QP_STATE | req)
            assert qp.qp_state == new


def test_state_diagram_edges_come_from_the_table() -> None:
    edges = qpstate.edges(e.IBV_QPT_RC)
    assert ("RTR", "RTS", qpstate.TABLE[(2, 3)][2][0], qpstate.TABLE[(2, 3)][2][1]) in edges
    assert not any(a == "RESET" and b == "RTS" for a, b, _, _ in edges)
    assert {b for a, b, _, _ in edges if a == "SQE"} == {"RESET", "ERR"}  # RC never leaves SQE to RTS


def test_query_reports_what_was_set() -> None:
    p = EndpointPair(timeout=13, retry_cnt=5, max_rd_atomic=3)
    attr, init = p.a.qp.query(0)
    assert attr.qp_state == e.IBV_QPS_RTS and attr.timeout == 13 and attr.retry_cnt == 5
    assert attr.max_rd_atomic == 4  # rounded up to a power of two, as rxe does
    assert attr.dest_qp_num == p.b.qp.qp_num and init.qp_type == e.IBV_QPT_RC


def test_requests_to_a_qp_in_init_are_dropped() -> None:
    p = EndpointPair(connect=False, retry_cnt=1, timeout=8)
    attr = QPAttr(port_num=1)
    attr.ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=p.b.gid, sgid_index=1))
    attr.dest_qp_num, attr.path_mtu = p.b.qp.qp_num, e.IBV_MTU_1024
    attr.max_dest_rd_atomic = attr.max_rd_atomic = 1
    attr.timeout, attr.retry_cnt = 8, 1
    p.a.qp.to_rts(attr)  # b stays in INIT
    p.send(p.a, e.IBV_WR_RDMA_WRITE, length=8)
    assert [w.status for w in p.wait(p.a.cq)] == [e.IBV_WC_RETRY_EXC_ERR]


def test_sqd_holds_new_work_and_rts_resumes() -> None:
    p = EndpointPair()
    p.a.qp.modify(QPAttr(qp_state=e.IBV_QPS_SQD), e.IBV_QP_STATE)
    p.send(p.a, e.IBV_WR_RDMA_WRITE, length=8)
    p.run()
    assert len(p.a.cq) == 0
    p.a.qp.modify(QPAttr(qp_state=e.IBV_QPS_RTS), e.IBV_QP_STATE)
    assert [w.status for w in p.wait(p.a.cq)] == [0]


def test_reset_clears_and_allows_reconnect() -> None:
    p = EndpointPair()
    p.b.recv(wr_id=1)
    for x in (p.a, p.b):
        x.qp.modify(QPAttr(qp_state=e.IBV_QPS_RESET), e.IBV_QP_STATE)
    assert len(p.b.qp.engine.rq) == 0 and len(p.b.cq) == 0  # RESET drops queues without completions
    for x in (p.a, p.b):
        a = QPAttr(port_num=1)
        a.qp_access_flags = p.settings["qp_access"]
        x.qp.to_init(a)
    p.connect()
    p.send(p.a, e.IBV_WR_RDMA_WRITE, length=8)
    assert [w.status for w in p.wait(p.a.cq)] == [0]
