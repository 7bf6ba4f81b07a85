"""The completer: ACKs, NAKs and responses -> completions and retries (rxe ``rxe_comp.c``; reference 1.7).

* An ACK is cumulative: it completes every SEND/WRITE WQE whose last PSN it covers.  If it
  covers a READ or atomic whose response has not arrived, that response was lost: an implied
  NAK, so go back.
* READ responses are accepted only at the next expected PSN (rxe ignores out-of-order ones)
  and also acknowledge the SEND/WRITEs before them.
* PSN-sequence NAK: PSNs below it are acknowledged; go back to it.  RNR NAK: wait the timer
  of its syndrome (``RNR_TIMER_US``) then go back, counting ``rnr_retry`` (7 = infinite).
  Other NAKs end the WQE with REM_INV_REQ_ERR / REM_ACCESS_ERR / REM_OP_ERR and the QP in ERR.
* Local ACK timeout (4.096 us x 2^timeout): go back, counting ``retry_cnt``; as in rxe, 7 means
  infinite.  Exhausted: RETRY_EXC_ERR / RNR_RETRY_EXC_ERR.
* Going back is go-back-N: the requester resends from the oldest unacknowledged PSN.
"""

from __future__ import annotations

import sys

from rdmalab.verbs import enums as e
from rdmalab.verbs.engine import requester
from rdmalab.verbs.engine.memory import scatter
from rdmalab.verbs.engine.packet import ACK_OPCODE, INFO, PSN_HALF, PSN_MASK, Pkt, psn_add, psn_diff
from rdmalab.verbs.engine.qpcore import QPCore
from rdmalab.verbs.engine.wqe import ATOMICS, READ_ATOMIC
from rdmalab.wire.ib import (
    AETH,
    AETH_ACK,
    AETH_NAK,
    AETH_RNR_NAK,
    NAK_INVALID_REQUEST,
    NAK_PSN_SEQUENCE_ERROR,
    NAK_REMOTE_ACCESS_ERROR,
    RNR_TIMER_US,
)
from rdmalab.wire.opcodes import Op, Pos

_READY = (e.IBV_QPS_RTS, e.IBV_QPS_SQD, e.IBV_QPS_SQE)
_NAK_STATUS = {NAK_INVALID_REQUEST: e.IBV_WC_REM_INV_REQ_ERR, NAK_REMOTE_ACCESS_ERROR: e.IBV_WC_REM_ACCESS_ERR}

# Enum members as module constants for the hot paths: on CPython 3.11 reading a member from its class
# (``Op.SEND``) goes through the enum metaclass and costs 0.4-0.8 us, a module global a few ns
_ACKNOWLEDGE, _READ_RESPONSE, _ATOMIC_ACKNOWLEDGE = Op.ACKNOWLEDGE, Op.RDMA_READ_RESPONSE, Op.ATOMIC_ACKNOWLEDGE
_LAST_OR_ONLY = (Pos.LAST, Pos.ONLY)
_ACK_SYNDROME = AETH.ack(0).syndrome_text()  # a plain ACK's (packet.ack_packet), whatever its MSN


def on_response(qp: QPCore, pkt: Pkt) -> None:
    if qp.qp_state not in _READY or qp.qp_type != e.IBV_QPT_RC:
        qp.dev.drop(pkt, f"completer not ready (QP in {qp.qp_state_name})")
        return
    if pkt.count == 1:
        _one(qp, pkt)
    else:
        for p in pkt.expand():
            _one(qp, p)
            if qp.qp_state not in _READY:
                return
    _after(qp)  # (which does nothing if the QP left the ready states)


def takes_acks(qp: QPCore) -> bool:
    """Whether :func:`ack` would take an ACK now (an RC QP in a state whose completer runs)."""
    return qp.qp_state in _READY and qp.qp_type == e.IBV_QPT_RC


def ack(qp: QPCore, psn: int) -> bool:
    """The fast path for an ACK (AETH syndrome ACK) that arrived without a :class:`Pkt`
    (``SoftDevice.receive_ack``): what :func:`on_response` does with it, the "acked" event included
    while tracing.  False, with nothing changed, when the QP is not ready to take it."""
    if not takes_acks(qp):
        return False
    if qp.dev.carrier.tracing:  # what _one records
        qp.dev.trace(qp.qp_num, "acked", psn, ACK_OPCODE, syndrome=_ACK_SYNDROME)
    # _one for an ACK: neither a ghost (a PSN never sent) nor behind the oldest unacknowledged PSN
    if (psn - qp.req.psn) & PSN_MASK >= PSN_HALF and (psn - qp.comp.psn) & PSN_MASK < PSN_HALF:
        _complete_through(qp, psn)
    _after(qp)
    return True


def _one(qp: QPCore, pkt: Pkt) -> None:
    info = INFO[pkt.opcode]
    psn = pkt.psn
    aeth = pkt.aeth
    if qp.dev.carrier.tracing:
        qp.dev.trace(qp.qp_num, "acked", psn, pkt.opcode, syndrome=aeth.syndrome_text() if aeth else None)
    # psn_diff(a, b) >= 0, written out here and below as (a - b) & PSN_MASK < PSN_HALF: these run for every ACK
    if (psn - qp.req.psn) & PSN_MASK < PSN_HALF:
        return  # a "ghost" response for a PSN never sent
    op = info.op
    if op is _ACKNOWLEDGE:
        assert aeth is not None
        kind = aeth.type  # (AETH.is_ack, is_rnr_nak and is_nak, without their calls)
        if kind == AETH_ACK:
            if (psn - qp.comp.psn) & PSN_MASK < PSN_HALF:  # psn_diff(psn, comp.psn) >= 0
                _complete_through(qp, psn)
        elif kind == AETH_RNR_NAK:
            _rnr(qp, psn, aeth.value)
        elif kind == AETH_NAK:
            _nak(qp, psn, aeth.value)
    elif op is _READ_RESPONSE:
        _read_response(qp, pkt, info.pos)
    elif op is _ATOMIC_ACKNOWLEDGE:
        _atomic_ack(qp, pkt)


def _progress(qp: QPCore, new_comp: int) -> None:
    comp = qp.comp
    if psn_diff(new_comp, comp.psn) > 0:
        comp.psn = new_comp
        comp.retry_left = qp.retry_cnt
        comp.rnr_left = qp.rnr_retry


def _complete_through(qp: QPCore, psn: int) -> bool:
    """Complete SEND/WRITE WQEs up to ``psn``; False if a READ/atomic in between is missing (implied NAK)."""
    sq = qp.sq
    comp, req = qp.comp, qp.req
    while sq:
        w = sq[0]
        if not w.started or (psn - w.last_psn) & PSN_MASK >= PSN_HALF:  # psn_diff(psn, w.last_psn) < 0
            break
        if w.opcode in READ_ATOMIC:
            _retry(qp, "implied NAK")
            return False
        del sq[0]  # qp.pop_head(), spelled out: this runs for every WQE completed
        if req.wqe_index:
            req.wqe_index -= 1
        new_comp = (w.last_psn + 1) & PSN_MASK
        if 0 < (new_comp - comp.psn) & PSN_MASK < PSN_HALF:  # _progress(qp, new_comp), spelled out
            comp.psn = new_comp
            comp.retry_left = qp.retry_cnt
            comp.rnr_left = qp.rnr_retry
        if w.signaled or w.credit:  # (complete_send does nothing for the others)
            qp.complete_send(w)
        if qp.qp_state not in _READY:
            return False
    if sq:
        w = sq[0]
        if w.started and w.opcode not in READ_ATOMIC and (psn - w.first_psn) & PSN_MASK < PSN_HALF:
            _progress(qp, (psn + 1) & PSN_MASK)  # part of a multi-packet SEND/WRITE
    return True


def _read_response(qp: QPCore, pkt: Pkt, pos: Pos | None) -> None:
    psn = pkt.psn
    if not _complete_through(qp, psn_add(psn, -1)) and qp.qp_state not in _READY:
        return
    sq = qp.sq
    if not sq or psn != qp.comp.psn:
        return  # stale or out of order: ignored, the timer will recover
    w = sq[0]
    if w.opcode != e.IBV_WR_RDMA_READ or not w.started:
        return
    off = psn_diff(psn, w.first_psn) * qp.mtu
    n = len(pkt.payload)
    if off != w.read_off or off + n > w.length:
        return
    assert w.dest is not None
    scatter(w.dest, off, pkt.payload)
    w.read_off = off + n
    _progress(qp, psn_add(psn, 1))
    if pos in (Pos.LAST, Pos.ONLY) and w.read_off == w.length:
        qp.pop_head()
        qp.complete_send(w)


def _atomic_ack(qp: QPCore, pkt: Pkt) -> None:
    psn = pkt.psn
    if not _complete_through(qp, psn_add(psn, -1)) and qp.qp_state not in _READY:
        return
    sq = qp.sq
    if not sq or psn != qp.comp.psn or sq[0].opcode not in ATOMICS or sq[0].first_psn != psn:
        return
    w = sq[0]
    assert w.dest is not None and pkt.atomic_ack is not None
    scatter(w.dest, 0, pkt.atomic_ack.orig_data.to_bytes(8, sys.byteorder))
    _progress(qp, psn_add(psn, 1))
    qp.pop_head()
    qp.complete_send(w)


def _rnr(qp: QPCore, psn: int, timer: int) -> None:
    if psn_diff(psn, qp.comp.psn) < 0:
        return
    qp.dev.counters["rcvd_rnr_err"] += 1
    _complete_through(qp, psn_add(psn, -1))
    if qp.qp_state not in _READY or not qp.sq:
        return
    if qp.rnr_retry != 7:
        if qp.comp.rnr_left <= 0:
            qp.dev.counters["retry_rnr_exceeded_err"] += 1
            qp.fail_wqe(qp.sq[0], e.IBV_WC_RNR_RETRY_EXC_ERR)
            return
        qp.comp.rnr_left -= 1
    qp.req.rnr_wait = True
    qp.comp.timer_armed = False
    qp.dev.schedule(RNR_TIMER_US[timer] * 1000, _rnr_fire, (qp, qp.gen))


def _rnr_fire(arg: tuple[QPCore, int]) -> None:
    qp, gen = arg
    if gen != qp.gen or not qp.req.rnr_wait:
        return
    qp.req.rnr_wait = False
    if qp.qp_state in _READY:
        _go_back(qp, "RNR NAK")
        _after(qp)


def _nak(qp: QPCore, psn: int, code: int) -> None:
    if psn_diff(psn, qp.comp.psn) < 0:
        return
    if code == NAK_PSN_SEQUENCE_ERROR:
        qp.dev.counters["rcvd_seq_err"] += 1
        if not _complete_through(qp, psn_add(psn, -1)) or qp.qp_state not in _READY:
            return
        _progress(qp, psn)
        _retry(qp, "PSN sequence NAK")
        return
    _complete_through(qp, psn_add(psn, -1))
    if qp.qp_state not in _READY or not qp.sq:
        return
    qp.fail_wqe(qp.sq[0], _NAK_STATUS.get(code, e.IBV_WC_REM_OP_ERR))


def on_timeout(qp: QPCore) -> None:
    if qp.qp_state not in _READY or qp.req.rnr_wait:
        return
    if qp.sq and qp.sq[0].started:
        _retry(qp, "timeout")
        _after(qp)


def _retry(qp: QPCore, why: str) -> None:
    if not (qp.sq and qp.sq[0].started):
        return
    if qp.retry_cnt != 7:  # rxe: 7 means retry forever
        if qp.comp.retry_left <= 0:
            qp.dev.counters["retry_exceeded_err"] += 1
            qp.fail_wqe(qp.sq[0], e.IBV_WC_RETRY_EXC_ERR)
            return
        qp.comp.retry_left -= 1
    qp.dev.counters["completer_retry_err"] += 1
    _go_back(qp, why)


def _go_back(qp: QPCore, why: str) -> None:
    """Go-back-N: resend from ``comp_psn`` (rxe ``req_retry``)."""
    if qp.dev.carrier.tracing:
        qp.dev.trace(qp.qp_num, "retransmitted", qp.comp.psn, None, reason=why)
    mtu = qp.mtu
    for w in qp.sq:
        if not w.started:
            break
        d = psn_diff(qp.comp.psn, w.first_psn)
        if d > 0 and psn_diff(qp.comp.psn, w.last_psn) <= 0:
            w.next_pkt = 0 if w.opcode in READ_ATOMIC else d
            if w.opcode == e.IBV_WR_RDMA_READ:
                w.read_off = d * mtu
        else:
            w.next_pkt = 0
            if w.opcode == e.IBV_WR_RDMA_READ:
                w.read_off = 0
    qp.req.wqe_index = 0
    qp.req.noack_pkts = 0
    qp.comp.timer_armed = False


def _after(qp: QPCore) -> None:
    if qp.qp_state not in _READY:
        return
    sq = qp.sq
    if sq and sq[0].started and not qp.req.rnr_wait:
        qp.arm_timer(True)  # restart
    else:
        qp.comp.timer_armed = False
    if qp.req.wqe_index < len(sq):  # (requester.send_queued sends nothing otherwise)
        requester.send_queued(qp)
