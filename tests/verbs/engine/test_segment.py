"""The responder's fast path (``SoftDevice.receive_segment``) does exactly what the full path does.

A carrier that has bytes (the UDP carrier) hands the bulk of WRITEs and SENDs to
``receive_segment`` without building a ``Pkt``, and falls back to ``receive`` when it says no.
Each scenario runs twice on identically seeded pairs: once with every packet through
``receive``, once fast path first.  B's memory, its responder state, its counters, its
completions and every packet it sends (ACKs, NAKs) must be the same.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from rdmalab.fabric.harness import Pair
from rdmalab.verbs import enums as e
from rdmalab.verbs.engine.packet import INFO, SEGMENT, Pkt, opcode
from rdmalab.wire.ib import RETH
from rdmalab.wire.opcodes import Op, Pos, Transport

MTU = 1024
F, M, L, ONLY = Pos.FIRST, Pos.MIDDLE, Pos.LAST, Pos.ONLY


def _pair(qp_type: int, access: int | None = None) -> Pair:
    p = Pair(qp_type=qp_type, seed=3, psn=(0x10, 0xFFFFFE), qp_access=access)  # B's PSNs wrap past 0xFFFFFF
    p.b.recv(wr_id=77, offset=1 << 15, length=4 * MTU)
    return p


# (op, pos, PSN offset from B's expected, payload length, AckReq, rkey ok?, remote offset); a WRITE's
# FIRST announces 2 * MTU + 100 bytes, an ONLY its own length
Step = tuple[Op, Pos, int, int, int, bool, int]
FIRST_LEN = {"write with middles": 4 * MTU + 100, "middles with a gap": 4 * MTU + 100}  # else 2 * MTU + 100
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
    "write with middles": [(Op.RDMA_WRITE, F, 0, MTU, 0, True, 0), (Op.RDMA_WRITE, M, 1, MTU, 0, True, 0),
                           (Op.RDMA_WRITE, M, 2, MTU, 1, True, 0), (Op.RDMA_WRITE, M, 3, MTU, 0, True, 0),
                           (Op.RDMA_WRITE, L, 4, 100, 1, True, 0)],
    "middles with a gap": [(Op.RDMA_WRITE, F, 0, MTU, 0, True, 0), (Op.RDMA_WRITE, M, 1, MTU, 0, True, 0),
                           (Op.RDMA_WRITE, M, 3, MTU, 1, True, 0), (Op.RDMA_WRITE, M, 2, MTU, 0, True, 0),
                           (Op.RDMA_WRITE, M, 3, MTU, 1, True, 0), (Op.RDMA_WRITE, L, 4, 100, 1, True, 0)],
    "middles past the length": [(Op.RDMA_WRITE, F, 0, MTU, 0, True, 0), (Op.RDMA_WRITE, M, 1, MTU, 0, True, 0),
                                (Op.RDMA_WRITE, M, 2, MTU, 1, True, 0), (Op.RDMA_WRITE, L, 3, 100, 1, True, 0)],
    "send too long": [(Op.SEND, F, 0, MTU, 0, True, 0), (Op.SEND, M, 1, MTU, 0, True, 0),
                      (Op.SEND, M, 2, MTU, 0, True, 0), (Op.SEND, M, 3, MTU, 0, True, 0),
                      (Op.SEND, L, 4, 10, 1, True, 0)],
}


def _packets(p: Pair, qp_type: int, steps: list[Step], first_len: int = 2 * MTU + 100) -> list[Pkt]:
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
            pkt.reth = RETH(va=p.b.mr.buf + remote, r_key=rkey, dma_length=n if pos == ONLY else first_len)
        out.append(pkt)
    return out


def _groups(pkts: list[Pkt]) -> list[list[Pkt]]:
    """The packets as a carrier that batches would hand them over: runs of MIDDLEs of one opcode
    with consecutive PSNs and full payloads together, everything else alone."""
    out: list[list[Pkt]] = []
    for pkt in pkts:
        g = out[-1] if out else None
        if g is not None and INFO[pkt.opcode].pos == M and g[-1].opcode == pkt.opcode \
                and pkt.psn == (g[-1].psn + 1) & 0xFFFFFF and len(pkt.payload) == len(g[-1].payload) == MTU:
            g.append(pkt)
        else:
            out.append([pkt])
    return out


def _run(qp_type: int, steps: list[Step], fast: bool, access: int | None = None, runs: bool = False,
         first_len: int = 2 * MTU + 100) -> tuple[Any, ...]:
    """``fast``: the fast paths first; ``runs``: packets grouped as :func:`_groups` says, a group
    of MIDDLEs through ``segment_run`` (when ``fast``), the coalesced ACKs sent after each group."""
    p = _pair(qp_type, access)
    dev = p.b.ctx.device
    qp = p.b.qp.engine
    sent: list[tuple[int, int, str | None]] = []
    dev.transmit = lambda pkt: sent.append((pkt.opcode, pkt.psn, pkt.aeth.syndrome_text() if pkt.aeth else None))
    took = 0
    pkts = _packets(p, qp_type, steps, first_len)
    for group in _groups(pkts) if runs else [[x] for x in pkts]:
        if fast and len(group) > 1:
            acks = [x.psn for x in group if x.ackreq]
            block = np.array([np.frombuffer(x.payload, np.uint8) for x in group])
            if dev.receive_run(qp.qp_num, group[0].opcode, group[0].psn, len(group), acks[-1] if acks else -1,
                               group[0].src_gid, group[0].dst_gid, block):
                took += len(group)
                dev.flush()
                continue
        for pkt in group:
            reth = (pkt.reth.va, pkt.reth.r_key, pkt.reth.dma_length) if pkt.reth is not None else None
            if fast and pkt.opcode in SEGMENT and dev.receive_segment(pkt.destqp, pkt.opcode, pkt.psn, pkt.ackreq,
                                                                      pkt.src_gid, pkt.dst_gid,
                                                                      memoryview(pkt.payload), reth):
                took += 1
            else:
                dev.receive(pkt)
            if not runs:
                dev.flush()  # the end of one carrier step: coalesced ACKs leave
        dev.flush()
    r = qp.resp
    wcs = [(w.wr_id, w.status, w.opcode, w.byte_len) for w in p.b.cq.poll(16)[1]]
    state = (r.psn, r.msn, r.op, r.write_off, r.write_len, r.off, r.sent_psn_nak, r.uc_drop, r.pending_ack,
             qp.qp_state)
    return p.b.mr.read(1 << 16, 0), state, dict(dev.counters), wcs, sent, took


@pytest.mark.parametrize("qp_type", [e.IBV_QPT_RC, e.IBV_QPT_UC], ids=["rc", "uc"])
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_fast_path_is_the_full_path(name: str, qp_type: int) -> None:
    n = FIRST_LEN.get(name, 2 * MTU + 100)
    full = _run(qp_type, SCENARIOS[name], fast=False, first_len=n)
    fast = _run(qp_type, SCENARIOS[name], fast=True, first_len=n)
    assert fast[:5] == full[:5]
    assert full[5] == 0
    # the same with the MIDDLEs handed over in runs (SoftQP.segment_run, as the UDP carrier does)
    full = _run(qp_type, SCENARIOS[name], fast=False, runs=True, first_len=n)
    fast = _run(qp_type, SCENARIOS[name], fast=True, runs=True, first_len=n)
    assert fast[:5] == full[:5]


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
    n = FIRST_LEN["write with middles"]
    assert _run(e.IBV_QPT_RC, SCENARIOS["write with middles"], fast=True, runs=True, first_len=n)[5] == 5
    # after the gap: FIRST, MIDDLE 1, then the run of MIDDLEs 2 and 3 and the LAST
    assert _run(e.IBV_QPT_RC, SCENARIOS["middles with a gap"], fast=True, runs=True, first_len=n)[5] == 5
