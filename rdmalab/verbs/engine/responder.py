"""The responder: request packets -> execution, ACKs and NAKs (rxe ``rxe_resp.c``; reference 1.6).

The checks run in rxe's order: PSN (RC: a gap gets one PSN-sequence NAK carrying the expected
PSN; an older PSN is a duplicate; UC: resynchronise on the next FIRST/ONLY), opcode sequence,
operation allowed by the QP's access flags, resources (a receive WQE, else RNR NAK; READ and
atomics need ``max_dest_rd_atomic``), lengths, the R_Key, then execution.  ACKs answer packets
with AckReq; those produced within one fabric time step are coalesced into the last one
(IBA 9.7.5.1.1 allows a responder to coalesce).  Duplicates are never executed again: a
duplicate SEND/WRITE is re-ACKed, a duplicate READ replayed from its responder resource,
a duplicate atomic answered from the replay cache with its original value (IBA 9.7.5.1.4,
C9-105; rxe ``duplicate_request``).  Class A/C errors NAK and take the QP to ERR.
"""

from __future__ import annotations

import socket
import sys
from typing import Any

from rdmalab.verbs import enums as e
from rdmalab.verbs.engine import cnp
from rdmalab.verbs.engine.memory import AccessError, local_view, local_views, remote_view, scatter
from rdmalab.verbs.engine.packet import ACK_OPCODE, INFO, PSN_MASK, SEGMENT, Pkt, ack_packet, opcode, psn_add, psn_diff
from rdmalab.verbs.engine.qpcore import QPCore
from rdmalab.verbs.engine.wqe import RecvWQE, Resource
from rdmalab.wire.ib import (
    AETH,
    NAK_INVALID_REQUEST,
    NAK_PSN_SEQUENCE_ERROR,
    NAK_REMOTE_ACCESS_ERROR,
    NAK_REMOTE_OPERATIONAL_ERROR,
    AtomicAckETH,
)
from rdmalab.wire.net import IPv4, IPv6
from rdmalab.wire.opcodes import Op, Pos, Transport

_READY = (e.IBV_QPS_RTR, e.IBV_QPS_RTS, e.IBV_QPS_SQD, e.IBV_QPS_SQE)
_ACCESS = {Op.RDMA_WRITE: e.IBV_ACCESS_REMOTE_WRITE, Op.RDMA_READ_REQUEST: e.IBV_ACCESS_REMOTE_READ,
           Op.CMP_SWAP: e.IBV_ACCESS_REMOTE_ATOMIC, Op.FETCH_ADD: e.IBV_ACCESS_REMOTE_ATOMIC}
_ATOMIC_ACK = opcode(Transport.RC, Op.ATOMIC_ACKNOWLEDGE, None)
_RR = {p: opcode(Transport.RC, Op.RDMA_READ_RESPONSE, p) for p in Pos}
M64 = 2**64 - 1

# Enum members as module constants for the hot paths: on CPython 3.11 reading a member from its class
# (``Op.SEND``) goes through the enum metaclass and costs 0.4-0.8 us, a module global a few ns
_SEND, _WRITE, _READ_REQUEST, _CMP_SWAP, _FETCH_ADD = Op.SEND, Op.RDMA_WRITE, Op.RDMA_READ_REQUEST, Op.CMP_SWAP, Op.FETCH_ADD
_FIRST, _MIDDLE, _LAST, _ONLY = Pos.FIRST, Pos.MIDDLE, Pos.LAST, Pos.ONLY


class _Drop(Exception):
    """Stop processing this packet (it was dropped or answered)."""


def on_request(qp: QPCore, pkt: Pkt) -> None:
    if pkt.ecn == 3:  # CE: the DCQCN notification point answers with a CNP (rdmalab.verbs.engine.cnp)
        cnp.notify(qp, pkt)
    if qp.qp_state not in _READY:
        qp.dev.drop(pkt, f"responder not ready (QP in {qp.qp_state_name})")
        return
    if pkt.count > 1:
        # a whole WRITE in one copy (_burst's first case, here to save it a call), else the burst's packets
        if pkt.opcode not in _WRITE_FIRST or pkt.last_opcode != _WRITE_FIRST[pkt.opcode] or pkt.ecn == 3 \
                or not _whole_write(qp, pkt):
            _burst(qp, pkt)
        return
    try:
        if qp.qp_type == e.IBV_QPT_UD:
            _ud(qp, pkt)
        else:
            _request(qp, pkt)
    except _Drop:
        pass


def _burst(qp: QPCore, pkt: Pkt) -> None:
    """A burst that is not a whole WRITE placed in one copy (:func:`on_request` tried
    :func:`_whole_write`): first and last packet as single packets, the middle ones copied in one go.

    The first and last packets take :func:`segment` when it applies (a WRITE's), the full path
    (:func:`on_request` of the packet itself) otherwise; either does the same to the QP."""
    n = pkt.count
    mtu = pkt.mtu
    payload = memoryview(pkt.payload)
    src, dst, psn0 = pkt.src_gid, pkt.dst_gid, pkt.psn
    reth = pkt.reth
    if pkt.ecn == 3 or reth is None or not segment(qp, pkt.opcode, psn0, int(0 in pkt.acks), src, dst,
                                                   payload[:mtu], (reth.va, reth.r_key, reth.dma_length)):
        on_request(qp, pkt.sub(0))
    op = INFO[pkt.opcode].op
    mid = n - 2
    data = payload[mtu:(n - 1) * mtu]
    r = qp.resp
    ok = (mid > 0 and qp.qp_state in _READY and r.op is not None and r.op.op is op
          and r.psn == (psn0 + 1) & PSN_MASK and not r.uc_drop and len(data) == mid * mtu)
    if ok and op is _WRITE and r.write is not None and r.write_off + len(data) <= r.write_len:
        r.write[r.write_off:r.write_off + len(data)] = data
        r.write_off += len(data)
    elif ok and op is _SEND and r.wqe is not None and r.wqe.views is not None \
            and r.off + len(data) <= r.wqe.length:
        scatter(r.wqe.views, r.off, data)
        r.off += len(data)
    else:
        for i in range(1, n - 1):
            on_request(qp, pkt.sub(i))
        on_request(qp, pkt.sub(n - 1))
        return
    r.psn = (r.psn + mid) & PSN_MASK
    if qp.qp_type == e.IBV_QPT_RC and pkt.acks and pkt.acks[-1] > 0:
        queue_ack(qp, psn_add(psn0, pkt.acks[-1]))  # middle AckReqs, coalesced
    last = n - 1
    if pkt.ecn == 3 or not segment(qp, pkt.last_opcode, (psn0 + last) & PSN_MASK, pkt.ackreq, src, dst,
                                   payload[last * mtu:]):
        on_request(qp, pkt.sub(last))


# RC/UC WRITE FIRST opcode -> the WRITE LAST opcode of the same transport
_WRITE_FIRST = {opcode(t, Op.RDMA_WRITE, Pos.FIRST): opcode(t, Op.RDMA_WRITE, Pos.LAST)
                for t in (Transport.RC, Transport.UC)}


def _whole_write(qp: QPCore, pkt: Pkt) -> bool:
    """A burst that is a whole WRITE (FIRST .. LAST, no immediate data): placed with one copy when
    every packet would pass :func:`segment` (the next PSN expected, no message in progress, the
    path MTU, a RETH whose R_Key, range and length fit), with the state and the ACK that the
    packets one by one would leave; False, with nothing changed, otherwise (the packets then go
    their own way)."""
    r = qp.resp
    reth = pkt.reth
    mtu = qp.mtu
    payload = pkt.payload
    total = len(payload)
    n = pkt.count
    if pkt.psn != r.psn or r.uc_drop or r.op is not None or reth is None or pkt.mtu != mtu \
            or not qp.access & _WRITE_OK or total != reth.dma_length or not (n - 1) * mtu < total <= n * mtu \
            or pkt.dst_gid != qp.sgid or pkt.src_gid != qp.dgid:
        return False
    try:
        view = remote_view(qp.dev, qp.pd, reth.r_key, reth.va, total, _WRITE_OK)
    except AccessError:
        return False
    view[:] = payload
    psn0 = pkt.psn
    r.write, r.write_off, r.write_len = view, total, total
    r.psn = (psn0 + n) & PSN_MASK
    r.op = None
    r.msn = (r.msn + 1) & PSN_MASK
    if qp.qp_type == e.IBV_QPT_RC:
        r.sent_psn_nak = False
        # the ACK the last packet asking for one would queue (ACKs queued in one instant coalesce)
        last = n - 1 if pkt.ackreq else max(pkt.acks, default=-1)
        if last >= 0:  # queue_ack, spelled out
            r.pending_ack = (psn0 + last) & PSN_MASK
            qp.dev.held_acks.add(qp)
    return True


# ---------------------------------------------------------------------------- the fast path

_WRITE_OK = e.IBV_ACCESS_REMOTE_WRITE
_QPT = {Transport.RC: e.IBV_QPT_RC, Transport.UC: e.IBV_QPT_UC}
# opcode -> (QP type, op is WRITE, pos is FIRST/ONLY, pos is LAST/ONLY, pos is FIRST/MIDDLE, info)
_SEG = {code: (_QPT[i.transport], i.op == Op.RDMA_WRITE, i.first_or_only, i.last_or_only,
               i.pos in (Pos.FIRST, Pos.MIDDLE), i) for code, i in SEGMENT.items()}


def segment(qp: QPCore, code: int, psn: int, ackreq: int, src_gid: int, dst_gid: int, data: Any,
            reth: tuple[int, int, int] | None = None) -> bool:
    """One packet of an RC/UC WRITE or SEND that is the next one expected and passes every check
    ``SoftDevice.receive`` and :func:`_request` apply, executed as they would; False, with nothing
    changed, for anything else (a gap, a duplicate, an opcode out of sequence, a bad length,
    address or R_Key, a SEND's LAST that completes a receive WQE, a QP not ready ...), which then
    takes the full path.  No ``Pkt`` is built: see ``SoftDevice.receive_segment``."""
    kind = _SEG.get(code)
    if kind is None:
        return False
    qpt, write, first, last, full, info = kind
    r = qp.resp
    if qpt != qp.qp_type or psn != r.psn or r.uc_drop or dst_gid != qp.sgid or src_gid != qp.dgid \
            or qp.qp_state not in _READY or dst_gid not in qp.dev.gids:
        return False
    n = len(data)
    mtu = qp.mtu
    if n > mtu or (full and n != mtu):
        return False
    if first:  # a WRITE's FIRST or ONLY (SEND FIRST/ONLY take a receive WQE: the full path)
        if r.op is not None or reth is None or not qp.access & _WRITE_OK:
            return False
        va, rkey, dlen = reth
        if n > dlen or (last and n != dlen):
            return False
        try:
            view = remote_view(qp.dev, qp.pd, rkey, va, dlen, _WRITE_OK)
        except AccessError:
            return False
        view[:n] = data
        r.write, r.write_off, r.write_len = view, n, dlen
    else:
        prev = r.op
        if prev is None or prev.op != info.op:
            return False
        if write:
            target = r.write
            off = r.write_off
            end = off + n
            if target is None or end > r.write_len or (last and end != r.write_len):
                return False
            target[off:end] = data
            r.write_off = end
        else:  # a SEND's MIDDLE
            w = r.wqe
            if last or w is None or w.views is None or r.off + n > w.length:
                return False
            scatter(w.views, r.off, data)
            r.off += n
    rc = qpt == e.IBV_QPT_RC
    if rc:
        r.sent_psn_nak = False
    r.psn = (psn + 1) & PSN_MASK
    if last:
        r.op = None
        r.msn = (r.msn + 1) & 0xFFFFFF
    else:
        r.op = info
    if rc and ackreq:
        queue_ack(qp, psn)
    return True


# ---------------------------------------------------------------------------- RC and UC

def _request(qp: QPCore, pkt: Pkt) -> None:
    info = INFO[pkt.opcode]
    r = qp.resp
    rc = qp.qp_type == e.IBV_QPT_RC
    psn = pkt.psn
    if rc:
        if psn != r.psn:
            if psn_diff(psn, r.psn) > 0:  # a gap: one NAK per gap, later out-of-order packets dropped silently
                qp.dev.counters["out_of_seq_request"] += 1
                if not r.sent_psn_nak:
                    r.sent_psn_nak = True
                    _send_aeth(qp, r.psn, AETH.nak(r.msn, NAK_PSN_SEQUENCE_ERROR))
                return
            _duplicate(qp, pkt)
            return
        r.sent_psn_nak = False
    elif r.uc_drop or psn != r.psn:
        if not info.first_or_only:
            r.uc_drop = True
            r.op = None
            return
        r.uc_drop = False
        _abandon(qp)
    op = info.op
    # CHK_OP_SEQ (a MIDDLE or LAST packet is one that is not FIRST or ONLY)
    prev = r.op
    if prev is not None:
        if op is not prev.op or info.first_or_only:
            if rc:
                _fail(qp, psn, NAK_INVALID_REQUEST, e.IBV_WC_REM_INV_REQ_ERR, "opcode out of sequence")
            if not info.first_or_only:
                _uc_drop(qp)
            _abandon(qp)
    elif not info.first_or_only:
        if rc:
            _fail(qp, psn, NAK_INVALID_REQUEST, e.IBV_WC_REM_INV_REQ_ERR, "MIDDLE/LAST without FIRST")
        _uc_drop(qp)
    # CHK_OP_VALID
    need = _ACCESS.get(op)
    if need and not qp.access & need:
        if rc:
            _fail(qp, psn, NAK_INVALID_REQUEST, e.IBV_WC_REM_INV_REQ_ERR, "QP access flags do not allow it")
        _uc_drop(qp)
    # CHK_RESOURCE
    if op is _READ_REQUEST or op is _CMP_SWAP or op is _FETCH_ADD:
        if not qp.max_dest_rd_atomic:
            _fail(qp, psn, NAK_INVALID_REQUEST, e.IBV_WC_REM_INV_REQ_ERR, "max_dest_rd_atomic is 0")
        r.sent_psn_nak = False
        if op is _READ_REQUEST:
            _read(qp, pkt)
        else:
            _atomic(qp, pkt)
        return
    mtu = qp.mtu
    payload = pkt.payload
    n = len(payload)
    if (n != mtu and not info.last_or_only) or n > mtu:  # FIRST and MIDDLE packets are full
        if rc:
            _fail(qp, psn, NAK_INVALID_REQUEST, e.IBV_WC_REM_INV_REQ_ERR, "payload length does not fit the MTU rules")
        _uc_drop(qp)
    write = op is _WRITE
    send = op is _SEND
    needs_wqe = (send and info.first_or_only) or (write and info.imm)
    if needs_wqe and r.wqe is None:
        _take_wqe(qp, pkt, rc)
    # CHK_RKEY and EXECUTE
    if write:
        if info.first_or_only:
            reth = pkt.reth
            assert reth is not None
            try:
                r.write = remote_view(qp.dev, qp.pd, reth.r_key, reth.va, reth.dma_length, e.IBV_ACCESS_REMOTE_WRITE)
            except AccessError as err:
                if rc:
                    _fail(qp, psn, NAK_REMOTE_ACCESS_ERROR, e.IBV_WC_LOC_PROT_ERR, err.why)
                _uc_drop(qp)
            r.write_off, r.write_len = 0, reth.dma_length
        view = r.write
        off = r.write_off
        if view is None or off + n > r.write_len or (info.last_or_only and off + n != r.write_len):
            if rc:
                _fail(qp, psn, NAK_INVALID_REQUEST, e.IBV_WC_REM_INV_REQ_ERR, "WRITE length mismatch")
            _uc_drop(qp)
        assert view is not None
        view[off:off + n] = payload
        r.write_off = off + n
    else:  # SEND
        w = r.wqe
        assert w is not None and w.views is not None
        if r.off + n > w.length:
            if rc:
                _fail(qp, psn, NAK_INVALID_REQUEST, e.IBV_WC_LOC_LEN_ERR, "receive buffer too small")
            _fail_uc(qp, e.IBV_WC_LOC_LEN_ERR)
        views = w.views
        if len(views) == 1 and r.off + n <= len(views[0]):  # memory.scatter for the one-SGE case
            views[0][r.off:r.off + n] = payload
        else:
            scatter(views, r.off, payload)
        r.off += n
    r.psn = (psn + 1) & PSN_MASK
    if info.last_or_only:
        r.op = None
        r.msn = (r.msn + 1) & PSN_MASK
        if send and not info.imm and not info.inv:  # a plain SEND: _complete_message, spelled out
            w = r.wqe
            if w is not None:
                r.wqe = None
                qp.complete_recv(w, e.IBV_WC_SUCCESS, e.IBV_WC_RECV, r.off, 0, 0, 0, bool(pkt.se))
        elif needs_wqe or send:
            _complete_message(qp, pkt, info.imm, info.inv, op)
    else:
        r.op = info
    if rc and pkt.ackreq:
        r.pending_ack = psn  # queue_ack, spelled out: held until the end of the time step, so ACKs coalesce
        qp.dev.held_acks.add(qp)


def _take_wqe(qp: QPCore, pkt: Pkt, rc: bool) -> RecvWQE:
    w = qp.srq.take() if qp.srq is not None else (qp.rq.popleft() if qp.rq else None)
    if w is None:
        if rc:  # RNR NAK with the responder's min_rnr_timer; the packet is not executed
            qp.dev.counters["send_rnr_err"] += 1
            _send_aeth(qp, pkt.psn, AETH.rnr_nak(qp.resp.msn, qp.min_rnr_timer))
            raise _Drop
        _uc_drop(qp)
    assert w is not None
    try:
        sg = w.sg
        if len(sg) == 1:  # local_views for the usual one SGE
            sge = sg[0]
            w.views = [local_view(qp.dev, qp.pd, sge.addr, sge.length, sge.lkey, True)]
        else:
            w.views = local_views(qp.dev, qp.pd, sg, write=True)
    except AccessError:
        qp.resp.wqe = w
        if rc:  # rxe RESPST_ERR_MALFORMED_WQE: class A, NAK remote operational error
            _fail(qp, pkt.psn, NAK_REMOTE_OPERATIONAL_ERROR, e.IBV_WC_LOC_QP_OP_ERR, "receive WQE has a bad SGE")
        _fail_uc(qp, e.IBV_WC_LOC_QP_OP_ERR)
    qp.resp.wqe, qp.resp.off = w, 0
    return w


def _complete_message(qp: QPCore, pkt: Pkt, imm: bool, inv: bool, op: Op) -> None:
    w = qp.resp.wqe
    if w is None:
        return
    flags, value = 0, 0
    if imm and pkt.imm is not None:
        flags, value = e.IBV_WC_WITH_IMM, socket.htonl(pkt.imm.imm)
    if inv and pkt.ieth is not None:
        rkey = pkt.ieth.r_key
        mr = qp.dev.mrs.get(rkey >> 8)
        if mr is None or mr.rkey != rkey or mr.pd is not qp.pd:
            _fail(qp, pkt.psn, NAK_INVALID_REQUEST, e.IBV_WC_REM_INV_REQ_ERR, f"cannot invalidate rkey {rkey:#x}")
        assert mr is not None
        mr.invalidate()
        flags, value = e.IBV_WC_WITH_INV, rkey
    r = qp.resp
    r.wqe = None
    if op is _WRITE:
        qp.complete_recv(w, e.IBV_WC_SUCCESS, e.IBV_WC_RECV_RDMA_WITH_IMM, r.write_len, value, flags, 0,
                         bool(pkt.se))
    else:
        qp.complete_recv(w, e.IBV_WC_SUCCESS, e.IBV_WC_RECV, r.off, value, flags, 0, bool(pkt.se))


def _abandon(qp: QPCore) -> None:
    """UC: a new message starts before the last one ended; its receive WQE is reused."""
    qp.resp.op = None
    qp.resp.off = 0


def _uc_drop(qp: QPCore) -> None:
    qp.resp.uc_drop = True
    qp.resp.op = None
    raise _Drop


def _fail_uc(qp: QPCore, status: int) -> None:
    w, qp.resp.wqe = qp.resp.wqe, None
    if w is not None:
        qp.complete_recv(w, status)
    qp.to_error()
    raise _Drop


def _fail(qp: QPCore, psn: int, nak: int, status: int | None, why: str) -> None:
    """RC class A/C error: NAK the packet's PSN, complete the receive WQE in error, QP to ERR."""
    _send_aeth(qp, psn, AETH.nak(qp.resp.msn, nak))
    if qp.dev.tracing:
        qp.dev.trace(qp.qp_num, "dropped", psn, None, reason=why)
    w, qp.resp.wqe = qp.resp.wqe, None
    if w is not None and status is not None:
        qp.complete_recv(w, status)
    qp.to_error()
    raise _Drop


# ---------------------------------------------------------------------------- READ and atomics

def _add_resource(qp: QPCore, res: Resource) -> None:
    if not qp.resp.resources:
        qp.resp.resources = [None]
    qp.resp.resources[qp.resp.res_head] = res
    qp.resp.res_head = (qp.resp.res_head + 1) % len(qp.resp.resources)


def _read(qp: QPCore, pkt: Pkt) -> None:
    reth = pkt.reth
    assert reth is not None
    try:
        view = remote_view(qp.dev, qp.pd, reth.r_key, reth.va, reth.dma_length, e.IBV_ACCESS_REMOTE_READ)
    except AccessError as err:
        _fail(qp, pkt.psn, NAK_REMOTE_ACCESS_ERROR, None, err.why)
        return
    mtu = qp.mtu
    npkts = max(1, -(-reth.dma_length // mtu))
    _add_resource(qp, Resource("read", pkt.psn, psn_add(pkt.psn, npkts - 1), reth.r_key, reth.va, reth.dma_length))
    qp.resp.msn = (qp.resp.msn + 1) & 0xFFFFFF
    qp.resp.psn = psn_add(pkt.psn, npkts)
    _read_reply(qp, pkt, pkt.psn, bytes(view), True)


def _read_reply(qp: QPCore, req: Pkt, psn: int, data: bytes, from_first: bool) -> None:
    """READ responses (rxe ``read_reply``): FIRST/MIDDLE/LAST or ONLY; AETH on all but MIDDLE."""
    flush_ack(qp)
    mtu = qp.mtu
    n = max(1, -(-len(data) // mtu))
    aeth = AETH.ack(qp.resp.msn)
    if n == 1:
        first = last = _ONLY if from_first else _LAST
    else:
        first, last = (_FIRST if from_first else _MIDDLE), _LAST
    if qp.dev.burst_ok and n > 1:
        p = _reply(qp, req, _RR[first], psn, data)
        p.count, p.mtu, p.last_opcode, p.aeth = n, mtu, _RR[last], aeth
        qp.dev.transmit(p)
        return
    for i in range(n):
        pos = first if i == 0 else last if i == n - 1 else _MIDDLE
        p = _reply(qp, req, _RR[pos], psn_add(psn, i), data[i * mtu:(i + 1) * mtu])
        if pos != _MIDDLE:
            p.aeth = aeth
        qp.dev.transmit(p)


def _atomic(qp: QPCore, pkt: Pkt) -> None:
    a = pkt.atomic
    assert a is not None
    if a.va & 7:
        _fail(qp, pkt.psn, NAK_INVALID_REQUEST, None, "atomic address not 8-byte aligned")
    try:
        view = remote_view(qp.dev, qp.pd, a.r_key, a.va, 8, e.IBV_ACCESS_REMOTE_ATOMIC)
    except AccessError as err:
        _fail(qp, pkt.psn, NAK_REMOTE_ACCESS_ERROR, None, err.why)
        return
    orig = int.from_bytes(view, sys.byteorder)
    if INFO[pkt.opcode].op == _CMP_SWAP:
        new = a.swap_add if orig == a.compare else orig
    else:
        new = (orig + a.swap_add) & M64
    view[:] = new.to_bytes(8, sys.byteorder)
    qp.resp.atomics_executed += 1
    qp.resp.msn = (qp.resp.msn + 1) & 0xFFFFFF
    qp.resp.psn = psn_add(pkt.psn, 1)
    _add_resource(qp, Resource("atomic", pkt.psn, pkt.psn, a.r_key, a.va, 8, orig))
    _atomic_ack(qp, pkt, orig)


def _atomic_ack(qp: QPCore, req: Pkt, orig: int) -> None:
    flush_ack(qp)
    p = _reply(qp, req, _ATOMIC_ACK, req.psn)
    p.aeth = AETH.ack(qp.resp.msn)
    p.atomic_ack = AtomicAckETH(orig_data=orig)
    qp.dev.transmit(p)


def _duplicate(qp: QPCore, pkt: Pkt) -> None:
    qp.dev.counters["duplicate_request"] += 1
    op = INFO[pkt.opcode].op
    psn = pkt.psn
    if op in (_SEND, _WRITE):
        queue_ack(qp, psn_add(qp.resp.psn, -1))  # re-ACK the last executed PSN; execute nothing
        return
    for res in qp.resp.resources:
        if res is None or psn_diff(psn, res.first_psn) < 0 or psn_diff(psn, res.last_psn) > 0:
            continue
        if op == _READ_REQUEST and res.kind == "read":
            reth = pkt.reth
            assert reth is not None
            if reth.r_key != res.rkey or reth.va < res.va or reth.va + reth.dma_length > res.va + res.length:
                return  # not a subset of the original: dropped
            try:
                view = remote_view(qp.dev, qp.pd, reth.r_key, reth.va, reth.dma_length, e.IBV_ACCESS_REMOTE_READ)
            except AccessError:
                return
            _read_reply(qp, pkt, psn, bytes(view), psn == res.first_psn)
            return
        if op in (_CMP_SWAP, _FETCH_ADD) and res.kind == "atomic" and res.first_psn == psn:
            _atomic_ack(qp, pkt, res.orig)  # replayed, never executed twice
            return
    # no resource: dropped silently (class D)


# ---------------------------------------------------------------------------- UD

def _ud(qp: QPCore, pkt: Pkt) -> None:
    deth = pkt.deth
    if deth is None or deth.q_key != qp.qkey:
        qp.dev.drop(pkt, "Q_Key violation")
        return
    w = qp.srq.take() if qp.srq is not None else (qp.rq.popleft() if qp.rq else None)
    if w is None:
        qp.dev.drop(pkt, "no receive WQE (UD drops)")
        return
    qp.resp.wqe = w
    try:
        w.views = local_views(qp.dev, qp.pd, w.sg, write=True)
    except AccessError:
        _fail_uc(qp, e.IBV_WC_LOC_QP_OP_ERR)
    assert w.views is not None
    n = len(pkt.payload)
    if 40 + n > w.length:
        _fail_uc(qp, e.IBV_WC_LOC_LEN_ERR)
    # On an InfiniBand port a packet of the subnet has no GRH: the buffer's first 40 bytes are left as
    # they were, IBV_WC_GRH is not set, and the WC names the sender by its LID (the LRH's SLID, which
    # the carrier gives as the packet's source link-layer address)
    local_ib = qp.dev.link_layer == e.IBV_LINK_LAYER_INFINIBAND
    if not local_ib:
        scatter(w.views, 0, _grh(pkt))
    scatter(w.views, 40, pkt.payload)
    qp.resp.wqe = None
    info = INFO[pkt.opcode]
    flags: int = 0 if local_ib else e.IBV_WC_GRH
    value = 0
    if info.imm and pkt.imm is not None:
        flags, value = flags | e.IBV_WC_WITH_IMM, socket.htonl(pkt.imm.imm)
    qp.complete_recv(w, e.IBV_WC_SUCCESS, e.IBV_WC_RECV, 40 + n, value, flags, deth.src_qp, bool(pkt.se),
                     None if local_ib else (pkt.src_gid, pkt.dst_gid), slid=pkt.src_mac if local_ib else 0)


def _grh(pkt: Pkt) -> bytes:
    """The 40 bytes a UD receive buffer starts with: for IPv4, 20 zero bytes and the IPv4 header."""
    src, dst = pkt.src_gid, pkt.dst_gid
    size = 8 + 12 + 8 + len(pkt.payload) + (-len(pkt.payload) % 4) + 4
    if (src >> 32) == 0xFFFF:
        ip = IPv4(total_length=20 + size, src=src & 0xFFFFFFFF, dst=dst & 0xFFFFFFFF).with_checksum()
        return bytes(20) + ip.encode()
    return IPv6(payload_length=size, next_header=17, hop_limit=64, src=src, dst=dst).encode()


# ---------------------------------------------------------------------------- ACKs

def _reply(qp: QPCore, req: Pkt, code: int, psn: int, payload: object = b"") -> Pkt:
    p = Pkt(code, psn, qp.dest_qp_num, qp.sgid, qp.dgid, qp.sport, qp.dev.mac, qp.dmac, payload)
    p.srcqp = qp.qp_num
    return p


def queue_ack(qp: QPCore, psn: int) -> None:
    """Hold an ACK until the end of the fabric's time step, so ACKs coalesce."""
    qp.resp.pending_ack = psn
    qp.dev.mark_dirty(qp)


def flush_ack(qp: QPCore) -> None:
    r = qp.resp
    psn = r.pending_ack
    if psn is None:
        return
    r.pending_ack = None
    dev = qp.dev
    lane = dev.ack_lane
    fields = (qp.dest_qp_num, psn, r.msn, qp.sgid, qp.dgid, qp.sport, dev.mac, qp.dmac, qp.qp_num)
    dev.counters["sent_pkts"] += 1  # dev.transmit(p), spelled out
    # the carrier's lane for a plain ACK, without a Pkt (SoftDevice.ack_lane); if it is closed, the packet
    if lane is None or not lane(dev, fields):
        dev.carrier.send(dev, ack_packet(fields))


def _send_aeth(qp: QPCore, psn: int, aeth: AETH) -> None:
    flush_ack(qp)
    p = _reply(qp, None, ACK_OPCODE, psn)  # type: ignore[arg-type]
    p.aeth = aeth
    qp.dev.transmit(p)
