"""The requester: send WQEs -> request packets (rxe ``rxe_req.c``; reference section 1.5).

For each WQE, in order: the opcode comes from the opcode table (FIRST/MIDDLE/LAST/ONLY by
whether the rest fits one path MTU), PSNs are assigned once (a READ takes one PSN per
response packet it expects), AckReq is set on the last packet of every RC message and after
``ACK_EVERY`` packets without one, and the RC window stops the requester ``WINDOW`` PSNs
ahead of the oldest unacknowledged one.  READs and atomics need a ``max_rd_atomic`` credit.
UC and UD WQEs complete as soon as their last packet is sent (rxe ``wqe_state_done``).

Go-back-N retransmission re-enters here: the completer rewinds ``next_pkt`` of the WQEs from
the oldest unacknowledged PSN, and this loop sends them again with the same PSNs.
"""

from __future__ import annotations

from typing import Any

from rdmalab.verbs import enums as e
from rdmalab.verbs.engine import dcqcn
from rdmalab.verbs.engine.memory import AccessError, gather, local_view, local_views
from rdmalab.verbs.engine.packet import Pkt, opcode
from rdmalab.verbs.engine.qpcore import QPCore
from rdmalab.verbs.engine.wqe import ATOMICS, READ_ATOMIC, SUPPORTED, SendWQE
from rdmalab.wire.ib import DETH, IETH, RETH, AtomicETH, ImmDt, make_reth, psn_add, psn_diff
from rdmalab.wire.opcodes import Op, Pos, Transport

WINDOW = 128  # RXE_MAX_UNACKED_PSNS
ACK_EVERY = 64  # RXE_MAX_PKT_PER_ACK: AckReq at least every 64 packets
_T: dict[int, Transport] = {e.IBV_QPT_RC: Transport.RC, e.IBV_QPT_UC: Transport.UC, e.IBV_QPT_UD: Transport.UD}
_SEND_OPS = {e.IBV_WR_SEND, e.IBV_WR_SEND_WITH_IMM, e.IBV_WR_SEND_WITH_INV}
_WRITE_OPS = {e.IBV_WR_RDMA_WRITE, e.IBV_WR_RDMA_WRITE_WITH_IMM}
_IMM_OPS = {e.IBV_WR_SEND_WITH_IMM, e.IBV_WR_RDMA_WRITE_WITH_IMM}


def _codes(t: Transport, op: int) -> tuple[int | None, int | None, int, int]:
    """The BTH opcodes of a message of work request ``op`` on transport ``t``: its FIRST, MIDDLE,
    LAST and ONLY packets (immediate data and invalidation ride on the LAST or ONLY one)."""
    family = Op.SEND if op in _SEND_OPS else Op.RDMA_WRITE
    imm, inv = op in _IMM_OPS, op == e.IBV_WR_SEND_WITH_INV
    only = opcode(t, family, Pos.ONLY, imm, inv)
    if t == Transport.UD:  # UD messages are one packet
        return None, None, only, only
    return opcode(t, family, Pos.FIRST), opcode(t, family, Pos.MIDDLE), opcode(t, family, Pos.LAST, imm, inv), only


# (QP type, SEND/WRITE work request opcode) -> its packets' opcodes, looked up once per WQE sent
_CODES: dict[tuple[int, int], tuple[Any, Any, int, int]] = {
    (qpt, op): _codes(_T[qpt], op) for qpt, ops in SUPPORTED.items() for op in ops
    if op in _SEND_OPS or op in _WRITE_OPS}

# QP type -> {SEND/WRITE work request opcode -> what its message needs, as plain ints and bools}:
# (FIRST, MIDDLE, LAST, ONLY opcodes, a WRITE, immediate data, an IETH, whether SE may be set (SENDs
# and WRITE with immediate)); looked up once per message
_PLAN: dict[int, dict[int, tuple[Any, Any, int, int, bool, bool, bool, bool]]] = {
    qpt: {op: (*_CODES[(qpt, op)], op in _WRITE_OPS, op in _IMM_OPS, op == e.IBV_WR_SEND_WITH_INV,
               op not in _WRITE_OPS or op in _IMM_OPS)
          for q, op in _CODES if q == qpt}
    for qpt in SUPPORTED}
_RTS, _SQD = e.IBV_QPS_RTS, e.IBV_QPS_SQD


def send_queued(qp: QPCore) -> None:
    """Send what the send queue allows now."""
    state = qp.qp_state
    req = qp.req
    if (state != _RTS and state != _SQD) or req.rnr_wait:
        return
    rc = qp.qp_type == e.IBV_QPT_RC
    sq = qp.sq
    comp = qp.comp
    while req.wqe_index < len(sq):
        w = sq[req.wqe_index]
        if not w.started:
            if qp.qp_state != _RTS:
                return  # SQD: finish what was started, start nothing new
            if rc and psn_diff(req.psn, comp.psn) >= WINDOW:
                return  # the RC window is full: an ACK will run the requester again
            if not _start(qp, w):
                return
            if w.complete:  # executed locally (LOCAL_INV) or a UD message too big to send
                continue
        if not _send(qp, w):
            return
        if rc:
            req.wqe_index += 1
        else:
            qp.pop_head()
            qp.complete_send(w)


def _start(qp: QPCore, w: SendWQE) -> bool:
    """Checks before a WQE's first packet; False to stop the requester (for now or for good)."""
    op = w.opcode
    if w.send_flags & e.IBV_SEND_FENCE and qp.req.rd_out:
        return False  # a fence waits for earlier READs and atomics
    if op == e.IBV_WR_LOCAL_INV:
        if qp.req.wqe_index:
            return False  # LOCAL_INV waits for every earlier WQE
        if not qp.local_invalidate(w):
            return False
        qp.pop_head()
        qp.complete_send(w)
        return True
    if op not in SUPPORTED[qp.qp_type]:
        qp.fail_wqe(w, e.IBV_WC_LOC_QP_OP_ERR)  # rxe next_opcode() < 0
        return False
    read_atomic = op in READ_ATOMIC
    req = qp.req
    if read_atomic and req.rd_out >= max(1, qp.max_rd_atomic):
        return False
    # (the RC window: send_queued() checks it before it starts a WQE)
    try:
        if read_atomic:
            w.dest = local_views(qp.dev, qp.pd, w.sg, write=True)
        elif w.inline is not None:
            w.payload = w.inline
        elif len(w.sg) == 1:  # one SGE (the usual case): its view is the payload, no copy
            s = w.sg[0]
            w.payload = local_view(qp.dev, qp.pd, s.addr, s.length, s.lkey, False)
        else:
            w.payload = memoryview(gather(local_views(qp.dev, qp.pd, w.sg, write=False)))
    except AccessError:
        qp.fail_wqe(w, e.IBV_WC_LOC_PROT_ERR)
        return False
    length = w.length
    if qp.qp_type == e.IBV_QPT_UD:
        mtu = qp.dev.active_mtu
        if length > mtu:
            # C10-93.1.1 as rxe does it: an oversized UD message is not sent but completes successfully
            w.started = w.complete = True
            qp.pop_head()
            qp.complete_send(w)
            return True
    else:
        mtu = qp.mtu
    n = 1 if op in ATOMICS else (length + mtu - 1) // mtu or 1  # packets (a zero-length message has one)
    first = req.psn
    w.npkts = n
    w.first_psn = first
    w.last_psn = psn_add(first, n - 1)
    req.psn = psn_add(first, n)
    w.started = True
    w.next_pkt = 0
    if read_atomic:
        w.credit = True
        req.rd_out += 1
    return True


def _pkt(qp: QPCore, code: int, psn: int, payload: object = b"", ackreq: int = 0, se: int = 0,
         dgid: int | None = None, dqpn: int | None = None, dmac: int | None = None, sgid: int | None = None) -> Pkt:
    p = Pkt(code, psn, qp.dest_qp_num if dqpn is None else dqpn, qp.sgid if sgid is None else sgid,
            qp.dgid if dgid is None else dgid, qp.sport, qp.dev.mac, qp.dmac if dmac is None else dmac,
            payload, ackreq, se)
    p.srcqp = qp.qp_num
    return p


def _send(qp: QPCore, w: SendWQE) -> bool:
    """Send the WQE's packets from ``next_pkt``; False if the window stopped it."""
    op = w.opcode
    rc = qp.qp_type == e.IBV_QPT_RC
    if op == e.IBV_WR_RDMA_READ:
        if w.next_pkt:
            return True
        mtu = qp.mtu
        done = w.read_off
        p = _pkt(qp, opcode(_T[qp.qp_type], Op.RDMA_READ_REQUEST, None), psn_add(w.first_psn, done // mtu), ackreq=1)
        p.reth = RETH(va=w.remote_addr + done, r_key=w.rkey, dma_length=w.length - done)
        w.next_pkt = w.npkts
        qp.req.noack_pkts = 0
        _xmit(qp, p)
        return True
    if op in ATOMICS:
        if w.next_pkt:
            return True
        which = Op.CMP_SWAP if op == e.IBV_WR_ATOMIC_CMP_AND_SWP else Op.FETCH_ADD
        p = _pkt(qp, opcode(_T[qp.qp_type], which, None), w.first_psn, ackreq=1)
        compare = w.compare_add if which == Op.CMP_SWAP else 0
        swap_add = w.swap if which == Op.CMP_SWAP else w.compare_add
        p.atomic = AtomicETH(va=w.remote_addr, r_key=w.rkey, swap_add=swap_add & (2**64 - 1),
                             compare=compare & (2**64 - 1))
        w.next_pkt = 1
        qp.req.noack_pkts = 0
        _xmit(qp, p)
        return True
    # SEND and RDMA WRITE: segmentation by the path MTU (UD: the port MTU)
    first_code, middle_code, last_code, only_code, write, imm, inv, se_ok = _PLAN[qp.qp_type][op]
    ud = qp.qp_type == e.IBV_QPT_UD
    dev = qp.dev
    carrier = dev.carrier
    mtu = carrier.mtu if ud else qp.mtu
    n = w.npkts
    solicited = se_ok and w.send_flags & e.IBV_SEND_SOLICITED  # SE: SENDs and WRITEs with immediate
    paced = qp.dcqcn is not None
    marks = paced or qp.ecn_capable
    burst_ok = not ud and not paced and carrier.burst_ok  # DCQCN paces single packets
    payload = w.payload
    req, comp = qp.req, qp.comp
    counters = dev.counters
    k = w.next_pkt
    while k < n:
        # DCQCN: not before the QP's rate allows (a timer resumes the requester); the time is compared here
        # first, dcqcn.wait arms the timer
        if paced and qp.dcqcn_next_ns > carrier.now_ns and dcqcn.wait(qp):
            return False
        psn = psn_add(w.first_psn, k)
        if rc:
            room = WINDOW - psn_diff(psn, comp.psn)
            if room <= 0:
                return False
        else:
            room = n
        cnt = min(n - k, room) if burst_ok else 1
        last_i = k + cnt - 1
        end = last_i == n - 1
        acks: tuple[int, ...] = ()
        if rc and cnt > 1:  # AckReq inside a burst, where single packets would carry it
            # packet i (of the first cnt - 1) asks for an ACK when it is the ACK_EVERY-th since the last
            acks = tuple(range(max(0, ACK_EVERY - 1 - req.noack_pkts), cnt - 1, ACK_EVERY))
            req.noack_pkts = cnt - 2 - acks[-1] if acks else req.noack_pkts + cnt - 1
        code = only_code if n == 1 else first_code if k == 0 else last_code if k == n - 1 else middle_code
        ackreq = 0
        if rc:
            if end:
                ackreq, req.noack_pkts = 1, 0
            else:
                req.noack_pkts += 1
                if req.noack_pkts >= ACK_EVERY:
                    ackreq, req.noack_pkts = 1, 0
        data = payload if cnt == n else payload[k * mtu:(last_i + 1) * mtu]  # (a whole message: no slice)
        if ud:
            ah = w.ah
            qkey = qp.qkey if w.remote_qkey & 0x80000000 else w.remote_qkey
            p = _pkt(qp, code, psn, data, 0, 1 if end and solicited else 0, dgid=ah.dgid, dqpn=w.remote_qpn,
                     dmac=dev.resolve_mac(ah.dgid) or 0, sgid=ah.sgid)
            p.deth = DETH(q_key=qkey, src_qp=qp.qp_num)
        else:
            p = Pkt(code, psn, qp.dest_qp_num, qp.sgid, qp.dgid, qp.sport, dev.mac, qp.dmac, data, ackreq,
                    1 if end and solicited else 0)
            p.srcqp = qp.qp_num
        if cnt > 1:
            p.acks = acks
            p.count = cnt
            p.mtu = mtu
            p.last_opcode = (last_code if n > 1 else only_code) if end else middle_code
        if write and k == 0:
            p.reth = make_reth(w.remote_addr, w.rkey, w.length)
        if end:
            if imm:
                p.imm = ImmDt(w.imm)
            if inv:
                p.ieth = IETH(w.inv_rkey)
        k = w.next_pkt = last_i + 1
        if marks:
            dcqcn.sent(qp, p)
        counters["sent_pkts"] += cnt  # dev.transmit(p), spelled out
        carrier.send(dev, p)
        if rc and not comp.timer_armed:
            qp.arm_timer()
    return True


def _xmit(qp: QPCore, p: Pkt) -> None:
    if qp.dcqcn is not None or qp.ecn_capable:
        dcqcn.sent(qp, p)
    qp.dev.transmit(p)
    if qp.qp_type == e.IBV_QPT_RC:
        qp.arm_timer()
