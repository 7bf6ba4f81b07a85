"""The responder's fast path (``SoftDevice.receive_segment``) does exactly what the full path does.

A carrier that has bytes (the UDP carrier) hands the bulk of WRITEs and SENDs to
``receive_segment`` without building a ``Pkt``, and falls back to ``receive`` when it says no.
Each scenario runs twice on identically seeded pairs: once with every packet through
``receive``, once fast path first.  B's memory, its responder state, its counters, its
completions and every packet it sends (ACKs, NAKs) must be the same.
"""

from __future__ import annotations

from typing import Any

import pytest

from rdmalab.fabric.harness import EndpointPair
from rdmalab.verbs import enums as e
from rdmalab.verbs.engine.packet import SEGMENT, Pkt, opcode
from rdmalab.wire.ib import RETH
from rdmalab.wire.opcodes import Op, Pos, Transport

MTU = 1024
F, M, L, ONLY = Pos.FIRST, Pos.MIDDLE, Pos.LAST, Pos.ONLY


def _pair(qp_type: int, access: int | None = None) -> EndpointPair:
    p = EndpointPair(qp_type=qp_type, seed=3, psn=(0x10, 0xFFFFFE), qp_access=access)  # B's PSNs wrap past 0xFFFFFF
    p.b.recv(wr_id=77, offset=1 << 15, length=4 * MTU)
    return p


# (op, pos, PSN offset from B's expected, payload length, AckReq, rkey ok?, remote offset); a WRITE's
# FIRST announces 2 * MTU + 100 bytes, an ONLY its own length
Step = tuple[Op, Pos, int, int, int, bool, int]
SCENARIOS: dict[str, list[Step]] = {
    "write in order": [(Op.RDMA_WRITE, F, 0, MTU, 0, True, 0), (Op.RDMA_WRITE, M, 1, MTU, 1, True, 0),
                       (Op.RDMA_WRITE, L, 2, 100, 1, True, 0), (Op.RDMA_WRITE, ONLY, 3, 8, 1, True, 4096)],
    "gap": [(Op.RDMA_WRITE, F, 0, MTU, 0, True, 0), (Op.RDMA_WRITE, L, 2, 100, 1, True, 0),
            (Op.RDMA_WRITE, M, 1, MTU, 0, True, 0), (Op.RDMA_WRITE, L, 2, 100, 1, True, 0)],
    "duplicate": [(Op.RDMA_WRITE, ONLY, 0, 64, 1, True, 0), (Op.RDMA_WRITE, ONLY, 0, 64, 1, True, 0),
                  (Op.RDMA_WRITE, ONLY, 1, 64, 1, True, 128)],
    "middle without first": [(Op.RDMA_WRITE, M, 0, MTU, 0, True, 0), (Op.RDMA_WRITE, L, 1, 4, 1, True, 0)],
    "wrong rkey": [(Op.RDMA_WRITE, F, 0, MTU, 0, False, 0), (Op.RDMA_WRITE, L, 1, 4, 1, True, 0)],
    "short middle": [(Op.RDMA_WRITE, F, 0, MTU, 0, True, 0), (Op.RDMA_WRITE, M, 1, 100, 0, True, 0)],
    "write past its length": [(Op.RDMA_WRITE, F, 0, MTU, 0, True, 0), (Op.RDMA_WRITE, L, 1, MTU, 1, True, 0)],
    "send": [(Op.SEND, F, 0, MTU, 0, True, 0), (Op.SEND, M, 1, MTU, 0, True, 0), (Op.SEND, M, 2, MTU, 0, True, 0),
             (Op.SEND, L, 3, 10, 1, True, 0)],
    "send too long": [(Op.SEND, F, 0, MTU, 0, True, 0), (Op.SEND, M, 1, MTU, 0, True, 0),
                      (Op.SEND, M, 2, MTU, 0, True, 0), (Op.SEND, M, 3, MTU, 0, True, 0),
                      (Op.SEND, L, 4, 10, 1, True, 0)],
}


def _packets(p: EndpointPair, qp_type: int, steps: list[Step]) -> list[Pkt]:
    a, b = p.a.qp.engine, p.b.qp.engine
    t = Transport.RC if qp_type == e.IBV_QPT_RC else Transport.UC
    base = b.resp.psn
    out = []
    for i, (op, pos, dpsn, n, ackreq, key_ok, remote) in enumerate(steps):
        payload = bytes((i * 7 + j) & 0xFF for j in range(n))
        pkt = Pkt(opcode(t, op, pos), (base + dpsn) & 0xFFFFFF, b.qp_num, a.sgid, a.dgid, a.sport, 0, 0, payload,
                  ackreq if t == Transport.RC else 0, 0)
        if op == Op.RDMA_WRITE and pos in (F, ONLY):
            rkey = p.b.mr.rkey if key_ok else p.b.mr.rkey ^ 0x40
            pkt.reth = RETH(va=p.b.mr.buf + remote, r_key=rkey, dma_length=n if pos == ONLY else 2 * MTU + 100)
        out.append(pkt)
    return out


def _run(qp_type: int, steps: list[Step], fast: bool, access: int | None = None) -> tuple[Any, ...]:
    p = _pair(qp_type, access)
    dev = p.b.ctx.device
    sent: list[tuple[int, int, str | None]] = []
    dev.transmit = lambda pkt: sent.append((pkt.opcode, pkt.psn, pkt.aeth.syndrome_text() if pkt.aeth else None))
    took = 0
    for pkt in _packets(p, qp_type, steps):
        reth = (pkt.reth.va, pkt.reth.r_key, pkt.reth.dma_length) if pkt.reth is not None else None
        if fast and pkt.opcode in SEGMENT and dev.receive_segment(pkt.destqp, pkt.opcode, pkt.psn, pkt.ackreq,
                                                                  pkt.src_gid, pkt.dst_gid, memoryview(pkt.payload),
                                                                  reth):
            took += 1
        else:
            dev.receive(pkt)
        dev.flush()  # the end of one carrier step: coalesced ACKs leave
    r = p.b.qp.engine.resp
    wcs = [(w.wr_id, w.status, w.opcode, w.byte_len) for w in p.b.cq.poll(16)[1]]
    state = (r.psn, r.msn, r.op, r.write_off, r.write_len, r.off, r.sent_psn_nak, r.uc_drop, r.pending_ack,
             p.b.qp.engine.qp_state)
    return p.b.mr.read(1 << 16, 0), state, dict(dev.counters), wcs, sent, took


@pytest.mark.parametrize("qp_type", [e.IBV_QPT_RC, e.IBV_QPT_UC], ids=["rc", "uc"])
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_fast_path_is_the_full_path(name: str, qp_type: int) -> None:
    full = _run(qp_type, SCENARIOS[name], fast=False)
    fast = _run(qp_type, SCENARIOS[name], fast=True)
    assert fast[:5] == full[:5]
    assert full[5] == 0


def test_a_qp_without_remote_write_access_refuses_the_write_either_way() -> None:
    access = e.IBV_ACCESS_REMOTE_READ
    full = _run(e.IBV_QPT_RC, SCENARIOS["write in order"], False, access)
    fast = _run(e.IBV_QPT_RC, SCENARIOS["write in order"], True, access)
    assert fast[:5] == full[:5] and fast[5] == 0
    assert full[1][-1] == e.IBV_QPS_ERR  # NAK invalid request, QP in error


def test_the_fast_path_is_taken_for_the_bulk() -> None:
    # in order, every packet of the WRITE goes the fast way; of the SEND, the MIDDLEs
    assert _run(e.IBV_QPT_RC, SCENARIOS["write in order"], fast=True)[5] == 4
    assert _run(e.IBV_QPT_RC, SCENARIOS["send"], fast=True)[5] == 2
    assert _run(e.IBV_QPT_RC, SCENARIOS["gap"], fast=True)[5] == 3  # FIRST, then MIDDLE and LAST after the gap
