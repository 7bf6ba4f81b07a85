"""The engine QP's state, split as rxe splits it (qp->req, qp->comp, qp->resp), seen after real traffic."""

from __future__ import annotations

import rdmalab.verbs.enums as e
from rdmalab.fabric.harness import EndpointPair
from rdmalab.verbs.engine.packet import psn_add
from rdmalab.verbs.engine.qpcore import CompleterState, QPCore, RequesterState, ResponderState
from rdmalab.verbs.engine.softqp import SoftQP


def test_the_front_qp_owns_one_engine_qp_that_the_device_dispatches_to() -> None:
    p = EndpointPair(psn=(100, 500))
    eng = p.a.qp.engine
    assert isinstance(eng, SoftQP) and isinstance(eng, QPCore)
    assert p.a.ctx.device.qps[p.a.qp.qp_num] is eng and eng.owner is p.a.qp
    assert isinstance(eng.req, RequesterState) and isinstance(eng.comp, CompleterState)
    assert isinstance(eng.resp, ResponderState)


def test_a_write_moves_requester_and_completer_psns_and_the_peers_responder() -> None:
    p = EndpointPair(psn=(100, 500), path_mtu=e.IBV_MTU_1024)
    a, b = p.a.qp.engine, p.b.qp.engine
    assert (a.req.psn, a.comp.psn, b.resp.psn, b.resp.msn) == (100, 100, 100, 0)
    p.send(p.a, e.IBV_WR_RDMA_WRITE, length=3000)  # 3 packets
    assert a.req.psn == 103 and a.comp.psn == 100  # sent, not yet acknowledged
    assert p.wait(p.a.cq)[0].status == e.IBV_WC_SUCCESS
    assert (a.req.psn, a.comp.psn) == (103, 103) and not a.sq
    assert (b.resp.psn, b.resp.msn) == (103, 1)
    assert b.req.psn == 500 and b.comp.psn == 500  # B's own send side did nothing
    attr, _ = p.a.qp.query()
    assert (attr.sq_psn, attr.rq_psn) == (103, 500)  # query reads the engine's state


def test_a_read_takes_a_credit_until_its_response_and_is_kept_as_a_responder_resource() -> None:
    p = EndpointPair(psn=(0xFFFFFE, 7), path_mtu=e.IBV_MTU_1024, max_rd_atomic=1)
    a, b = p.a.qp.engine, p.b.qp.engine
    p.send(p.a, e.IBV_WR_RDMA_READ, length=2048)  # 2 response packets: PSNs wrap
    assert a.req.rd_out == 1 and a.req.psn == psn_add(0xFFFFFE, 2) == 0
    assert p.wait(p.a.cq)[0].status == e.IBV_WC_SUCCESS
    assert a.req.rd_out == 0 and a.comp.psn == 0
    res = [r for r in b.resp.resources if r is not None]
    assert [(r.kind, r.first_psn, r.last_psn, r.length) for r in res] == [("read", 0xFFFFFE, 0xFFFFFF, 2048)]


def test_reset_clears_the_protocol_state_and_keeps_the_qp_number() -> None:
    p = EndpointPair(psn=(100, 500))
    p.send(p.a, e.IBV_WR_RDMA_WRITE, length=100)
    p.wait(p.a.cq)
    eng = p.a.qp.engine
    qpn, gen = eng.qp_num, eng.gen
    attr, _ = p.a.qp.query()
    attr.qp_state = e.IBV_QPS_RESET
    p.a.qp.modify(attr, e.IBV_QP_STATE)
    assert eng.qp_state == e.IBV_QPS_RESET and eng.qp_num == qpn and eng.gen == gen + 1
    assert (eng.req.psn, eng.comp.psn, eng.resp.psn, eng.resp.msn, eng.timeout) == (0, 0, 0, 0, 0)
