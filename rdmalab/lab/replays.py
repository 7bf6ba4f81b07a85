"""Deterministic engine runs that notebooks show and checkers replay.

Each function builds a fresh :class:`rdmalab.lab.pair.SoftPair` (the simulator, whatever the
backend) with a fixed seed, runs one operation, and returns the pair (its trace, frames and memory
are then there to look at).  A checker calls the same function, so the notebook and its exercise
always see the same run.
"""

from __future__ import annotations

from typing import Any

import rdmalab.verbs.enums as e
from rdmalab.lab.pair import Pair, SoftPair
from rdmalab.verbs.wr import SGE, SendWR
from rdmalab.wire.opcodes import OPCODES


def rdma_write(pair: Pair, length: int, *, wr_id: int = 1, offset: int = 0, remote_offset: int = 0,
               imm: int | None = None, fill: bytes = b"RDMA! ") -> Any:
    """A writes ``length`` bytes of its MR into B's MR and waits for its completion."""
    a, b = pair.a, pair.b
    data = (fill * (length // len(fill) + 1))[:length]
    a.mr.write(data, length, offset)
    op = e.IBV_WR_RDMA_WRITE if imm is None else e.IBV_WR_RDMA_WRITE_WITH_IMM
    wr = SendWR(wr_id=wr_id, opcode=op, num_sge=1, sg=[SGE(a.mr.buf + offset, length, a.mr.lkey)],
                imm_data=imm or 0)
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf + remote_offset)
    a.qp.post_send(wr)
    return a.poll()


def lossy_write(seed: int, *, length: int = 8192, mtu: int = 1024, loss: float = 0.1) -> SoftPair:
    """An RDMA WRITE of ``length`` bytes over a fabric that loses ``loss`` of the packets."""
    pair = SoftPair(seed=seed, mtu=mtu, loss=loss)
    rdma_write(pair, length)
    pair.run()
    return pair


#: Seeds picked so that the runs show what the notebook discusses (found by scanning seeds;
#: the fabric's faults are a pure function of the seed).
NAK_SEED = 5
TIMEOUT_SEED = 16


def nak_run() -> SoftPair:
    """A lost packet in the middle of a message: the responder NAKs the gap (PSN sequence error)."""
    return lossy_write(NAK_SEED)


def timeout_run() -> SoftPair:
    """The last packet of a message is lost: nothing tells the requester, so it times out."""
    return lossy_write(TIMEOUT_SEED)


def retransmitted(pair: SoftPair) -> list[Any]:
    """The ``sent`` request events that repeat an earlier PSN (retransmissions)."""
    seen: set[tuple[str, int | None]] = set()
    out = []
    for ev in pair.trace:
        if ev.kind != "sent" or ev.opcode is None or OPCODES[ev.opcode].is_response:
            continue
        key = (ev.node, ev.psn)
        if key in seen:
            out.append(ev)
        seen.add(key)
    return out


def naks(pair: SoftPair) -> list[Any]:
    """The ``acked`` events whose syndrome is a NAK or RNR NAK."""
    return [ev for ev in pair.trace if ev.kind == "acked" and "NAK" in str(ev.detail.get("syndrome", ""))]
