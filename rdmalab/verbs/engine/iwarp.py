"""The iWARP transport: RDMAP over DDP over MPA, on a byte stream, beside the InfiniBand transport.

An :class:`IwQP` is a :class:`~rdmalab.verbs.engine.qpcore.QPCore` (the same send and receive
queues, memory keys and checks, completions and QP states as the RoCE engine), with a transport
of its own instead of ``requester``/``responder``/``completer``: nothing of the RC machinery of
PSNs, ACKs, retransmission and RNR carries over, because TCP does the reliability.

**The seam is a stream, not a datagram carrier.**  The RoCE engine hands whole packets to a
:class:`~rdmalab.verbs.engine.carrier.Carrier`; an iWARP QP instead writes bytes to a
:class:`Stream` (one TCP connection, after the MPA exchange) and is fed bytes by it
(:meth:`IwQP.on_bytes`) cut wherever the stream's segments happened to end.  The QP frames them
back into FPDUs itself, by MPA's ``ULPDU_Length`` (RFC 5044 4.1): an FPDU split over three
segments and three FPDUs in one segment are the same thing to it.  Two streams plug in:
the simulated fabric's TCP model (:mod:`rdmalab.fabric.simtcp`) and kernel TCP sockets
(:mod:`rdmalab.fabric.tcpkernel`), the peer of Linux siw.

What goes on the stream is built with the wire codecs (:mod:`rdmalab.wire.iwarp`,
:mod:`rdmalab.wire.mpa`); the rules are RFC 5040 (RDMAP), RFC 5041 (DDP) and what Linux 6.1 siw
does (``drivers/infiniband/sw/siw/siw_qp_rx.c``, ``siw_qp_tx.c``):

* **Untagged** messages (Send, Send with Invalidate / Solicited Event, Read Request, Terminate)
  carry a queue number (0 Send, 1 Read Request, 2 Terminate), an MSN that starts at 1 per queue
  and advances on the last segment of a message, and an MO that must equal the bytes of the
  message already placed.  A wrong QN, MSN or MO is answered with a Terminate (DDP, untagged).
* **Tagged** messages (RDMA Write, Read Response) carry an STag and a tagged offset; every
  segment is placed where it says (after the key, protection domain, access and bounds checks
  of :mod:`rdmalab.verbs.engine.memory`'s rules).  A multi-segment message keeps its STag and a
  contiguous TO.  A Read Response must use exactly the sink STag and TO of the oldest
  outstanding Read Request and add up to its length (``siw_rresp_check_ntoh``).
* A Read Request takes the sink STag/TO from the first SGE of the READ (its lkey and address,
  as siw does); at most ORD Read Requests are outstanding (the negotiated ORD); one that
  arrives when the negotiated IRD is 0 is refused.
* **No RNR**: a Send that finds no posted receive is answered with Terminate (DDP, untagged,
  0x02 "no buffer") and the connection ends (``siw_proc_send``).  Every error sends one
  Terminate (QN 2, MSN 1) naming its layer, error type and code, with the offending DDP header
  when there is one, and takes the QP to the error state; a Terminate received does the same.
* **Completions**: Sends and Writes complete when their last FPDU is handed to the stream (TCP
  will deliver it or the connection dies), READs when the last Read Response segment is placed;
  completions of one send queue stay in order (a WRITE after a READ waits for the READ).
* **CRC32c** is computed and checked when MPA negotiated it; otherwise the field is sent as
  zeros and ignored (``siw_get_trailer``).  Markers are never used (siw refuses them).
* The **MPA responder sends no FPDU before the initiator's first FPDU** (RFC 5044 7.1; siw's
  ``siw_recv_mpa_rr`` fails with -EPROTO otherwise): until one arrives, what the QP would send is
  held back (``hold_tx``).
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from rdmalab.verbs import enums as e
from rdmalab.verbs.engine.memory import AccessError, gather, local_views, scatter
from rdmalab.verbs.engine.qpcore import QPCore
from rdmalab.verbs.engine.wqe import RecvWQE, SendWQE
from rdmalab.wire import crc as _crc
from rdmalab.wire.iwarp import (
    DDP_TAGGED_SIZE,
    DDP_UNTAGGED_SIZE,
    read_request,
    terminate,
)
from rdmalab.wire.mpa import (
    MAX_ULPDU,
    MPA_CRC_SIZE,
    MPA_HEADER_SIZE,
    fpdu_length,
    frame_fpdu,
    mulpdu,
    pad_length,
    ulpdu_length_at,
)
from rdmalab.wire.rdmap import (
    OP_READ_REQUEST,
    OP_READ_RESPONSE,
    OP_SEND,
    OP_SEND_INVALIDATE,
    OP_SEND_SE,
    OP_SEND_SE_INVALIDATE,
    OP_TERMINATE,
    OP_WRITE,
    QN_READ_REQUEST,
    QN_SEND,
    QN_TERMINATE,
    ReadRequest,
    Terminate,
)

# Terminate layers, error types and codes (RFC 5040 4.8; RFC 5041 7.2; RFC 5044 / 6581 for the LLP)
LAYER_RDMAP, LAYER_DDP, LAYER_LLP = 0, 1, 2
RDMAP_LOCAL_CATASTROPHIC, RDMAP_REMOTE_PROTECTION, RDMAP_REMOTE_OPERATION = 0, 1, 2
DDP_TAGGED, DDP_UNTAGGED = 1, 2
LLP_MPA = 0
# RDMAP error codes
RDMAP_INVALID_STAG, RDMAP_BASE_BOUNDS, RDMAP_ACCESS, RDMAP_UNEXPECTED_OPCODE = 0x00, 0x01, 0x02, 0x06
RDMAP_CATASTROPHIC_STREAM, RDMAP_CANNOT_INVALIDATE = 0x07, 0x09
# DDP tagged / untagged error codes
DDP_T_INVALID_STAG, DDP_T_BASE_BOUNDS, DDP_T_STAG_NOT_ASSOC = 0x00, 0x01, 0x02
DDP_UT_INVALID_QN, DDP_UT_NO_BUFFER, DDP_UT_INVALID_MSN_RANGE, DDP_UT_INVALID_MO, DDP_UT_TOO_LONG = 1, 2, 3, 4, 5
# MPA error codes
MPA_CRC_ERROR, MPA_INVALID_REQ_REP, MPA_INSUFFICIENT_IRD = 0x02, 0x04, 0x06

#: the IRD/ORD most a soft iWARP device offers (siw: SIW_MAX_IRD_QP = SIW_MAX_ORD_QP = 128)
MAX_IRD_ORD = 128
#: what the engine's iWARP QPs accept as work requests: siw 6.1 has no atomics and no immediate data
SUPPORTED_WR = {e.IBV_WR_SEND, e.IBV_WR_SEND_WITH_INV, e.IBV_WR_RDMA_WRITE, e.IBV_WR_RDMA_READ,
                e.IBV_WR_LOCAL_INV}
_SEND_OPCODE = {(False, False): OP_SEND, (True, False): OP_SEND_SE, (False, True): OP_SEND_INVALIDATE,
                (True, True): OP_SEND_SE_INVALIDATE}
_QN_OF = {OP_SEND: QN_SEND, OP_SEND_SE: QN_SEND, OP_SEND_INVALIDATE: QN_SEND, OP_SEND_SE_INVALIDATE: QN_SEND,
          OP_READ_REQUEST: QN_READ_REQUEST, OP_TERMINATE: QN_TERMINATE}


# The FPDUs of the data-carrying messages, framed in one step (the hot path): ULPDU_Length, the DDP
# control byte (T 0x80, L 0x40, DV 1), the RDMAP control byte (RV 1, opcode), then the tagged header's
# STag and TO, or the untagged header's Invalidate STag, QN, MSN and MO (RFC 5041 4.2/4.3, RFC 5040 4.1).
# The wire codecs are the reference: tests/verbs/test_iwarp_framing.py checks these bytes against
# rdmalab.wire.iwarp.segment_tagged/segment_untagged and rdmalab.wire.mpa.frame_fpdu.
_TAGGED = struct.Struct(">HBBIQ")
_UNTAGGED = struct.Struct(">HBBIIII")
_PADS = (b"", b"\0", b"\0\0", b"\0\0\0")
_NO_CRC = b"\0\0\0\0"
_U64 = (1 << 64) - 1


def _seal(parts: list[Any], crc: bool) -> bytes:
    body = b"".join(parts)
    return body + (_crc.crc32c(body).to_bytes(4, "little") if crc else _NO_CRC)


def _cut(payload: Any, room: int, hdr_size: int, crc: bool, head: Callable[[int, bool, int], bytes]) -> list[bytes]:
    """``payload`` cut into ULPDUs of at most ``room`` octets, each sealed as an FPDU; ``head(ulen, last,
    offset)`` packs the DDP/RDMAP header of one (tagged or untagged)."""
    chunk = min(room, MAX_ULPDU) - hdr_size
    n = len(payload)
    out = []
    off = 0
    while True:
        data = payload[off:off + chunk]
        last = off + chunk >= n
        ulen = hdr_size + len(data)
        out.append(_seal([head(ulen, last, off), data, _PADS[pad_length(ulen)]], crc))
        off += chunk
        if last:
            return out


def tagged_fpdus(opcode: int, stag: int, to: int, payload: Any, room: int, crc: bool) -> list[bytes]:
    """The FPDUs of a tagged message (RDMA Write, Read Response): the TO advances, L on the last."""
    rctl = 0x40 | opcode
    return _cut(payload, room, DDP_TAGGED_SIZE, crc,
                lambda ulen, last, off: _TAGGED.pack(ulen, 0xC1 if last else 0x81, rctl, stag, (to + off) & _U64))


def untagged_fpdus(opcode: int, qn: int, msn: int, payload: Any, room: int, crc: bool, inv_stag: int = 0) -> list[bytes]:
    """The FPDUs of an untagged message with a payload (the Sends): one MSN, MO advancing, L on the last."""
    rctl = 0x40 | opcode
    return _cut(payload, room, DDP_UNTAGGED_SIZE, crc,
                lambda ulen, last, off: _UNTAGGED.pack(ulen, 0x41 if last else 0x01, rctl, inv_stag, qn, msn, off))


class Stream(Protocol):
    """One direction-pair of a reliable byte stream (a TCP connection) as an iWARP QP uses it.

    The stream calls back its ``receiver`` (set by whoever owns it): ``receiver.on_bytes(data)``
    with the next bytes in order, however the segments were cut, and ``receiver.on_closed(why)``
    once when the peer closed or the connection failed.  ``mss`` is the largest TCP payload a
    segment carries (the QP sizes FPDUs to fit one, as siw sizes them by ``mss_cache``)."""

    receiver: Any
    mss: int

    def write(self, data: bytes) -> None:
        """Queue ``data`` for the peer, in order (never calls back into the receiver)."""

    def close(self) -> None:
        """Send what is queued, then FIN (no more writes)."""


class IwQP(QPCore):
    """An engine QP on the iWARP transport (RC only): RDMAP/DDP/MPA over a :class:`Stream`."""

    def __init__(self, dev: Any, pd: Any, qp_type: int, scq: Any, rcq: Any, srq: Any, sq_sig_all: bool,
                 owner: Any = None) -> None:
        if qp_type != e.IBV_QPT_RC:
            raise ValueError(f"an iWARP device has RC QPs only, not {e.QP_TYPE_NAMES.get(qp_type, qp_type)}")
        super().__init__(dev, pd, qp_type, scq, rcq, srq, sq_sig_all, owner)
        self.llp: Stream | None = None
        self.crc = False
        self.ird = self.ord = 0
        self.mulpdu = mulpdu(1460)
        self.hold_tx = False
        self._held: list[bytes] = []
        self._rx = bytearray()
        self._rx_pos = 0
        self.tx_msn = [0, 0, 0]  # per queue: the last MSN sent (pre-incremented, so the first is 1)
        self.rx_msn = [1, 1, 1]  # per queue: the MSN expected next (siw: ddp_msn[] = 1)
        self.rx_send: RecvWQE | None = None  # the receive WQE of the Send being placed
        self.rx_views: list[memoryview] = []
        self.rx_mo = 0  # bytes of that Send placed (the next MO expected)
        self.rx_write: tuple[int, int] | None = None  # a multi-segment Write in progress: (STag, next TO)
        self.reads_out: deque[SendWQE] = deque()  # READs waiting for their Read Response, oldest first
        self.fpdus_received = 0
        self.fpdus_sent = 0
        #: (layer, etype, errcode, why) of the Terminate this QP sent, or received, if any
        self.terminate_sent: tuple[int, int, int, str] | None = None
        self.terminate_received: tuple[int, int, int] | None = None
        #: called once when the stream ends (peer FIN, Terminate, error): rdma_cm's DISCONNECTED
        self.on_disconnect: Callable[[str], None] | None = None
        self._closed = False

    # ------------------------------------------------------------------ the stream
    def attach(self, llp: Stream, *, crc: bool, ird: int, ord: int, responder: bool,
               initial: bytes = b"") -> None:
        """Bind the QP to a stream after the MPA exchange: negotiated CRC, IRD and ORD; a responder
        holds its FPDUs back until the initiator's first FPDU (``initial``: bytes already read
        past the MPA frame)."""
        self.llp = llp
        llp.receiver = self
        self.crc = crc
        self.ird, self.ord = ird, ord
        self.mulpdu = mulpdu(max(64, llp.mss))
        self.hold_tx = responder
        if initial:
            self.on_bytes(initial)

    def _write(self, fpdu: bytes) -> None:
        self.fpdus_sent += 1
        if self.hold_tx:
            self._held.append(fpdu)
        elif self.llp is not None:
            self.llp.write(fpdu)

    def _fpdu(self, ulpdu: bytes) -> None:
        self._write(frame_fpdu(ulpdu, crc=self.crc))

    def _writes(self, fpdus: list[bytes]) -> None:
        """Several FPDUs of one message: one write to the stream."""
        self.fpdus_sent += len(fpdus)
        if self.hold_tx:
            self._held.extend(fpdus)
        elif self.llp is not None:
            self.llp.write(fpdus[0] if len(fpdus) == 1 else b"".join(fpdus))

    def on_bytes(self, data: bytes) -> None:
        """Bytes arrived on the stream, in order: frame them into FPDUs by ULPDU_Length and process each."""
        if self._closed:
            return
        rx = self._rx
        rx += data
        pos = self._rx_pos
        n = len(rx)
        while n - pos >= MPA_HEADER_SIZE and not self._closed:
            ulen = ulpdu_length_at(rx, pos)
            size = fpdu_length(ulen)
            if n - pos < size:
                break
            fpdu = bytes(rx[pos:pos + size])
            pos += size
            self._on_fpdu(fpdu, ulen)
        if pos >= n:
            rx.clear()
            pos = 0
        elif pos > 65536:
            del rx[:pos]
            pos = 0
        self._rx_pos = pos

    def on_closed(self, why: str) -> None:
        """The stream ended (the peer's FIN, a reset, or our own close)."""
        self._end(why)

    def _end(self, why: str) -> None:
        if self._closed:
            return
        self._closed = True
        if self.llp is not None:
            self.llp.close()
        self.to_error()
        if self.on_disconnect is not None:
            self.on_disconnect(why)

    def disconnect(self) -> None:
        """``rdma_disconnect`` on iWARP: a plain TCP FIN, no Terminate (siw: SQD -> CLOSING -> sock_release)."""
        self._end("local disconnect")

    # ------------------------------------------------------------------ Terminate
    def _terminate(self, layer: int, etype: int, code: int, why: str, ddp_hdr: bytes | None = None,
                   seg_len: int | None = None) -> None:
        """Send a Terminate (QN 2, MSN 1, as siw_send_terminate) and end the connection."""
        if self._closed:
            return
        self.terminate_sent = (layer, etype, code, why)
        if self.dev.carrier.tracing:
            self.dev.trace(self.qp_num, "terminate", layer=layer, etype=etype, errcode=code, why=why)
        self.tx_msn[QN_TERMINATE] += 1
        ulpdu = terminate(layer, etype, code, msn=1, terminated_ddp=ddp_hdr,
                          ddp_seg_len=seg_len if ddp_hdr is not None else None)
        self.hold_tx = False
        for h in self._held:
            if self.llp is not None:
                self.llp.write(h)
        self._held.clear()
        self._fpdu(ulpdu)
        self._end(f"Terminate sent: {why}")

    # ------------------------------------------------------------------ work requests (the requester)
    def post_send(self, wqes: list[SendWQE]) -> None:
        self.sq.extend(wqes)
        if self.qp_state == e.IBV_QPS_ERR:
            self.flush()
        else:
            self.kick()

    def post_recv(self, wqes: list[RecvWQE]) -> None:
        self.rq.extend(wqes)
        if self.qp_state == e.IBV_QPS_ERR:
            self.flush()

    def kick(self) -> None:
        """Send what the send queue allows now; complete the finished WQEs at its head, in order."""
        if self.qp_state == e.IBV_QPS_RTS and self.llp is not None and not self._closed:
            req = self.req
            sq = self.sq
            while req.wqe_index < len(sq):
                w = sq[req.wqe_index]
                if not self._start(w):
                    break
                req.wqe_index += 1
        self._complete_head()

    def _complete_head(self) -> None:
        sq = self.sq
        while sq and sq[0].complete and self.qp_state != e.IBV_QPS_ERR:
            self.complete_send(self.pop_head())

    def _start(self, w: SendWQE) -> bool:
        """Put one WQE on the stream (READ: its Read Request); False to stop here for now."""
        op = w.opcode
        if op not in SUPPORTED_WR:
            self.fail_wqe(w, e.IBV_WC_LOC_QP_OP_ERR)
            return False
        if w.send_flags & e.IBV_SEND_FENCE and self.reads_out:
            return False
        if op == e.IBV_WR_LOCAL_INV:
            if self.req.wqe_index:
                return False  # waits for every earlier WQE
            return self.local_invalidate(w)
        if op == e.IBV_WR_RDMA_READ:
            if len(self.reads_out) >= self.ord:
                if self.ord == 0:  # nothing negotiated: the READ can never go
                    self.fail_wqe(w, e.IBV_WC_LOC_QP_OP_ERR)
                return False
            try:
                w.dest = local_views(self.dev, self.pd, w.sg, write=True)
            except AccessError:
                self.fail_wqe(w, e.IBV_WC_LOC_PROT_ERR)
                return False
            sink = w.sg[0] if w.sg else None
            sink_stag = sink.lkey if sink is not None else 0
            sink_to = sink.addr if sink is not None else 0
            self.tx_msn[QN_READ_REQUEST] += 1
            w.started = w.done_sending = True
            w.read_off = 0
            w.payload = (sink_stag, sink_to)
            self.reads_out.append(w)
            self._fpdu(read_request(sink_stag, sink_to, w.length, w.rkey, w.remote_addr,
                                    msn=self.tx_msn[QN_READ_REQUEST]))
            return True
        try:
            payload = w.inline if w.inline is not None else gather(local_views(self.dev, self.pd, w.sg, write=False))
        except AccessError:
            self.fail_wqe(w, e.IBV_WC_LOC_PROT_ERR)
            return False
        if op == e.IBV_WR_RDMA_WRITE:
            self._writes(tagged_fpdus(OP_WRITE, w.rkey, w.remote_addr, payload, self.mulpdu, self.crc))
        else:
            se = bool(w.send_flags & e.IBV_SEND_SOLICITED)
            inv = op == e.IBV_WR_SEND_WITH_INV
            self.tx_msn[QN_SEND] += 1
            self._writes(untagged_fpdus(_SEND_OPCODE[(se, inv)], QN_SEND, self.tx_msn[QN_SEND], payload, self.mulpdu,
                                        self.crc, w.inv_rkey if inv else 0))
        w.started = w.done_sending = w.complete = True  # handed to TCP: siw completes it now
        return True

    # ------------------------------------------------------------------ arriving FPDUs (the responder)
    def _on_fpdu(self, fpdu: bytes, ulen: int) -> None:
        self.fpdus_received += 1
        if self.hold_tx:  # the initiator's first FPDU: the responder may send from now on
            self.hold_tx = False
            held, self._held = self._held, []
            for h in held:
                if self.llp is not None:
                    self.llp.write(h)
        if self.crc:
            end = len(fpdu) - MPA_CRC_SIZE
            if _crc.crc32c(fpdu[:end]) != int.from_bytes(fpdu[end:], "little"):
                self._terminate(LAYER_LLP, LLP_MPA, MPA_CRC_ERROR, "MPA CRC32c error")
                return
        if ulen == 0:
            return  # a zero-length FPDU (RFC 6581 RTR): nothing to place
        u = memoryview(fpdu)[MPA_HEADER_SIZE:MPA_HEADER_SIZE + ulen]
        if self.qp_state not in (e.IBV_QPS_RTS, e.IBV_QPS_SQD):
            return
        if u[0] & 0x80:
            if ulen < DDP_TAGGED_SIZE:
                self._terminate(LAYER_LLP, LLP_MPA, MPA_INVALID_REQ_REP, f"ULPDU of {ulen} bytes < a tagged header")
                return
            _, ctrl, rctl, stag, to = _TAGGED.unpack_from(fpdu, 0)
            if not self._versions(ctrl, rctl, DDP_TAGGED, 0x04, u, ulen):
                return
            self._tagged(ctrl, rctl & 0x0F, stag, to, u, ulen)
        else:
            if ulen < DDP_UNTAGGED_SIZE:
                self._terminate(LAYER_LLP, LLP_MPA, MPA_INVALID_REQ_REP, f"ULPDU of {ulen} bytes < an untagged header")
                return
            _, ctrl, rctl, inv, qn, msn, mo = _UNTAGGED.unpack_from(fpdu, 0)
            if not self._versions(ctrl, rctl, DDP_UNTAGGED, 0x06, u, ulen):
                return
            self._untagged(ctrl, rctl & 0x0F, inv, qn, msn, mo, u, ulen)

    def _versions(self, ctrl: int, rctl: int, etype: int, code: int, u: memoryview, ulen: int) -> bool:
        """DDP version 1 and RDMAP version 1, else a Terminate (RFC 5041 7.2, RFC 5040 4.8)."""
        if ctrl & 0x03 != 1:
            size = DDP_TAGGED_SIZE if etype == DDP_TAGGED else DDP_UNTAGGED_SIZE
            self._terminate(LAYER_DDP, etype, code, f"DDP version {ctrl & 0x03}", bytes(u[:size]), ulen)
            return False
        if rctl >> 6 != 1:
            self._terminate(LAYER_RDMAP, RDMAP_REMOTE_OPERATION, 0x05, f"RDMAP version {rctl >> 6}")
            return False
        return True

    def _tagged(self, ctrl: int, op: int, stag: int, to: int, u: memoryview, ulen: int) -> None:
        last = ctrl & 0x40
        hdr = bytes(u[:DDP_TAGGED_SIZE])
        data = u[DDP_TAGGED_SIZE:]
        if op == OP_WRITE:
            if self.rx_write is not None and self.rx_write != (stag, to):
                want_stag, want_to = self.rx_write
                code = DDP_T_INVALID_STAG if want_stag != stag else DDP_T_BASE_BOUNDS
                self._terminate(LAYER_DDP, DDP_TAGGED, code, f"Write segment at STag {stag:#x} TO {to:#x}, "
                                f"expected STag {want_stag:#x} TO {want_to:#x}", hdr, ulen)
                return
            view = self._remote(stag, to, len(data), e.IBV_ACCESS_REMOTE_WRITE, hdr, ulen)
            if view is None:
                return
            view[:] = data
            self.rx_write = None if last else (stag, to + len(data))
            return
        if op == OP_READ_RESPONSE:
            if not self.reads_out:
                self._terminate(LAYER_RDMAP, RDMAP_REMOTE_OPERATION, RDMAP_UNEXPECTED_OPCODE,
                                "Read Response with no Read Request outstanding", hdr, ulen)
                return
            w = self.reads_out[0]
            sink_stag, sink_to = w.payload
            want_to = sink_to + w.read_off
            if stag != sink_stag or to != want_to or w.read_off + len(data) > w.length:
                code = DDP_T_INVALID_STAG if stag != sink_stag else DDP_T_BASE_BOUNDS
                self._terminate(LAYER_DDP, DDP_TAGGED, code,
                                f"Read Response to STag {stag:#x} TO {to:#x} (+{len(data)}), expected STag "
                                f"{sink_stag:#x} TO {want_to:#x} of a {w.length}-byte READ", hdr, ulen)
                return
            assert w.dest is not None
            scatter(w.dest, w.read_off, data)
            w.read_off += len(data)
            if last:
                if w.read_off != w.length:
                    self._terminate(LAYER_DDP, DDP_TAGGED, DDP_T_BASE_BOUNDS,
                                    f"Read Response ended after {w.read_off} of {w.length} bytes", hdr, ulen)
                    return
                self.reads_out.popleft()
                w.complete = True
                self.kick()
            return
        self._terminate(LAYER_RDMAP, RDMAP_REMOTE_OPERATION, RDMAP_UNEXPECTED_OPCODE,
                        f"opcode {op:#x} in a tagged segment", hdr, ulen)

    def _remote(self, stag: int, to: int, length: int, access: int, hdr: bytes | None, ulen: int | None,
                ddp_layer: bool = True) -> memoryview | None:
        """The memory an STag and TO name, or None after sending the Terminate the failed check calls for."""
        if length == 0:
            return memoryview(bytearray())
        mr = self.dev.mrs.get(stag >> 8)
        if ddp_layer:
            layer, etype, bad_stag, bounds, assoc = LAYER_DDP, DDP_TAGGED, DDP_T_INVALID_STAG, DDP_T_BASE_BOUNDS, \
                DDP_T_STAG_NOT_ASSOC
        else:
            layer, etype, bad_stag, bounds, assoc = LAYER_RDMAP, RDMAP_REMOTE_PROTECTION, RDMAP_INVALID_STAG, \
                RDMAP_BASE_BOUNDS, 0x03
        if mr is None or mr.rkey != stag or not mr.valid:
            self._terminate(layer, etype, bad_stag, f"STag {stag:#x} is not a valid remote key", hdr, ulen)
            return None
        if mr.pd is not self.pd:
            self._terminate(layer, etype, assoc, f"STag {stag:#x} belongs to another protection domain", hdr, ulen)
            return None
        if not (mr.access & access) or not (self.access & access):
            self._terminate(LAYER_RDMAP, RDMAP_REMOTE_PROTECTION, RDMAP_ACCESS,
                            f"STag {stag:#x} (or the QP) does not allow access {access:#x}", hdr, ulen)
            return None
        off = to - mr.buf
        if off < 0 or off + length > mr.length:
            self._terminate(layer, etype, bounds, f"[{to:#x}, +{length}) is outside the MR of STag {stag:#x}",
                            hdr, ulen)
            return None
        view: memoryview = mr.view[off:off + length]
        return view

    def _untagged(self, ctrl: int, op: int, inv: int, qn: int, msn: int, mo: int, u: memoryview, ulen: int) -> None:
        hdr = bytes(u[:DDP_UNTAGGED_SIZE])
        if qn > QN_TERMINATE:
            self._terminate(LAYER_DDP, DDP_UNTAGGED, DDP_UT_INVALID_QN, f"queue number {qn}", hdr, ulen)
            return
        if _QN_OF.get(op) != qn:
            self._terminate(LAYER_RDMAP, RDMAP_REMOTE_OPERATION, RDMAP_UNEXPECTED_OPCODE,
                            f"opcode {op:#x} on queue {qn}", hdr, ulen)
            return
        if op == OP_TERMINATE:
            term = Terminate.decode(u, DDP_UNTAGGED_SIZE) if ulen >= DDP_UNTAGGED_SIZE + 4 else None
            self.terminate_received = (term.layer, term.etype, term.errcode) if term else (0, 0, 0)
            if self.dev.carrier.tracing:
                self.dev.trace(self.qp_num, "terminate received", layer=self.terminate_received[0],
                               etype=self.terminate_received[1], errcode=self.terminate_received[2])
            self._end("Terminate received")
            return
        if msn != self.rx_msn[qn]:
            self._terminate(LAYER_DDP, DDP_UNTAGGED, DDP_UT_INVALID_MSN_RANGE,
                            f"MSN {msn} on queue {qn}, expected {self.rx_msn[qn]}", hdr, ulen)
            return
        if op == OP_READ_REQUEST:
            self._read_request(mo, u, ulen, hdr)
            return
        self._send(ctrl & 0x40, op, inv, msn, mo, u[DDP_UNTAGGED_SIZE:], ulen, hdr)

    def _send(self, last: int, op: int, inv: int, msn: int, mo: int, data: memoryview, ulen: int, hdr: bytes) -> None:
        if mo != self.rx_mo:
            self._terminate(LAYER_DDP, DDP_UNTAGGED, DDP_UT_INVALID_MO, f"MO {mo}, expected {self.rx_mo}",
                            hdr, ulen)
            return
        w = self.rx_send
        if w is None:
            w = self.srq.take() if self.srq is not None else (self.rq.popleft() if self.rq else None)
            if w is None:  # no RNR on iWARP
                self._terminate(LAYER_DDP, DDP_UNTAGGED, DDP_UT_NO_BUFFER,
                                f"Send MSN {msn} found no posted receive", hdr, ulen)
                return
            try:
                self.rx_views = local_views(self.dev, self.pd, w.sg, write=True)
            except AccessError as exc:
                self.complete_recv(w, e.IBV_WC_LOC_PROT_ERR)
                self._terminate(LAYER_RDMAP, RDMAP_LOCAL_CATASTROPHIC, 0, f"receive buffer: {exc.why}", hdr, ulen)
                return
            self.rx_send = w
        if self.rx_mo + len(data) > w.length:
            self.rx_send = None
            self.complete_recv(w, e.IBV_WC_LOC_LEN_ERR)
            self._terminate(LAYER_DDP, DDP_UNTAGGED, DDP_UT_TOO_LONG,
                            f"Send of more than {w.length} bytes (the posted receive's length)", hdr, ulen)
            return
        scatter(self.rx_views, self.rx_mo, data)
        self.rx_mo += len(data)
        if not last:
            return
        self.rx_send = None
        self.rx_msn[QN_SEND] += 1
        length, self.rx_mo = self.rx_mo, 0
        flags = value = 0
        if op in (OP_SEND_INVALIDATE, OP_SEND_SE_INVALIDATE):
            stag = inv
            mr = self.dev.mrs.get(stag >> 8)
            if mr is None or mr.rkey != stag or mr.pd is not self.pd:
                self.complete_recv(w, e.IBV_WC_REM_INV_REQ_ERR)
                self._terminate(LAYER_RDMAP, RDMAP_REMOTE_PROTECTION, RDMAP_CANNOT_INVALIDATE,
                                f"Send with Invalidate of STag {stag:#x}, not a remote key of this PD", hdr, ulen)
                return
            mr.invalidate()
            flags, value = e.IBV_WC_WITH_INV, stag
        self.complete_recv(w, e.IBV_WC_SUCCESS, e.IBV_WC_RECV, length, value, flags,
                           solicited=op in (OP_SEND_SE, OP_SEND_SE_INVALIDATE))

    def _read_request(self, mo: int, u: memoryview, ulen: int, hdr: bytes) -> None:
        if ulen < DDP_UNTAGGED_SIZE + ReadRequest.LAYOUT.size or mo != 0:
            self._terminate(LAYER_DDP, DDP_UNTAGGED, DDP_UT_INVALID_MO, "malformed Read Request", hdr, ulen)
            return
        if self.ird == 0:  # siw_init_rresp: IRD 0 (or full) is an error
            self._terminate(LAYER_RDMAP, RDMAP_REMOTE_OPERATION, RDMAP_CATASTROPHIC_STREAM,
                            "Read Request with a negotiated IRD of 0", hdr, ulen)
            return
        rr = ReadRequest.decode(u, DDP_UNTAGGED_SIZE)
        self.rx_msn[QN_READ_REQUEST] += 1
        view = self._remote(rr.src_stag, rr.src_to, rr.size, e.IBV_ACCESS_REMOTE_READ, hdr, ulen, ddp_layer=False)
        if view is None:
            return
        self._writes(tagged_fpdus(OP_READ_RESPONSE, rr.sink_stag, rr.sink_to, view, self.mulpdu, self.crc))

    # ------------------------------------------------------------------ errors
    def flush(self) -> None:
        super().flush()
        self.reads_out.clear()
        self.rx_send = None

    def segment(self, *args: Any, **kw: Any) -> bool:
        return False

    def on_request(self, pkt: Any) -> None:
        self.dev.drop(pkt, "a RoCE packet for an iWARP QP")

    on_response = on_request

    def flush_ack(self) -> None:
        pass

    def close(self) -> None:
        if not self._closed and self.llp is not None:
            self._end("QP destroyed")
        super().close()
