"""MPA connection setup (RFC 5044 7.1, RFC 6581 enhanced mode), sans I/O, as Linux 6.1 siw does it.

After TCP connects, the initiator sends an MPA Request and the responder answers with an MPA
Reply (or rejects with the R flag); both carry private data, and in enhanced mode (Rev 2, the
0x10 flag) the first 4 octets of it are the IRD and ORD words.  Sources for every rule below:
``siw_cm.c`` (``siw_send_mpareqrep``, ``siw_recv_mpa_rr``, ``siw_proc_mpareq``,
``siw_proc_mpareply``) in Linux 6.1's ``drivers/infiniband/sw/siw``.

* The engine sends Rev 2, enhanced, no markers, no P2P/RTR, CRC only if asked (siw's defaults:
  ``mpa_crc_required`` false), real IRD/ORD values of at most 128 (never 0x3FFF).
* **Markers are refused** (M flag, either frame): siw never uses them.
* **CRC** is used if either side sets C; the Reply echoes it (RFC 5044 7.1.1).
* **Private data**: at most 256 octets in a frame, IRD/ORD words included (siw's
  ``MPA_MAX_PRIVATE_DATA``, not RFC 5044's 512); so an application has 252 with Rev 2.
* **IRD/ORD**: the responder clamps them to 128 and negotiates with relaxed IRD (siw's
  ``relaxed_ird_negotiation``: it raises its IRD to the initiator's ORD); an initiator refuses a
  Reply whose ORD exceeds 128 with TERMINATE (LLP, MPA, 0x06 insufficient IRD), as siw does.
* A Reply that is not Rev 2 / enhanced when the Request was, a wrong key, or a frame with more
  private data than 256 octets ends the connection with an error naming it.
* **Nothing may follow the Request** before the Reply (siw: -EPROTO "peer sent extra data").

Both classes take bytes (``feed``) and return what happened; they never touch a socket.

The connection around them (TCP, the exchange, the QP taking the stream) is :data:`TABLE`,
``(MPAState, MPAEvent) -> Rule`` as :mod:`rdmalab.verbs.engine.ibcm` has the IB CM's; its actions,
which touch the stream and the CMID, are ``rdmalab.verbs.cmid_iwarp.ACTIONS``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from rdmalab.verbs.engine.ibcm_table import IGNORE, REFUSALS, REFUSE, Rule
from rdmalab.wire.errors import Picklable
from rdmalab.wire.iwarp import encode_mpa_frame
from rdmalab.wire.mpa import (
    MPA_FLAG_ENHANCED,
    MPA_KEY_REP_INT,
    MPA_KEY_REQ_INT,
    MPA_V2_IRD_ORD_MASK,
    MPA_V2_NO_IRD_ORD,
    MPAReqRep,
    MPAv2IRDORD,
)

#: siw: MPA_MAX_PRIVDATA = RDMA_MAX_PRIVATE_DATA (256), the IRD/ORD words included
MAX_PRIVATE_DATA = 256
IRD_ORD_WORDS = 4
#: what an application may give with Rev 2 (the IRD/ORD words take 4 of the 256)
MAX_USER_PRIVATE_DATA = MAX_PRIVATE_DATA - IRD_ORD_WORDS
#: siw: SIW_MAX_IRD_QP / SIW_MAX_ORD_QP
MAX_IRD_ORD = 128
FRAME_HEADER = 20


class MPAError(Picklable, Exception):
    """The MPA exchange failed; ``terminate`` is the (layer, etype, errcode) to send, if any."""

    def __init__(self, why: str, terminate: tuple[int, int, int] | None = None, reject: bool = False) -> None:
        super().__init__(why)
        self.why = why
        self.terminate = terminate
        #: a responder answers with a Reply that has R set (siw does for a Request with M set)
        self.reject = reject


@dataclass
class MPAFrame:
    """A Request or Reply as read: flags, revision, IRD/ORD words (or None) and the application's private data."""

    request: bool
    markers: bool
    crc: bool
    reject: bool
    rev: int
    enhanced: bool
    ird: int | None
    ord: int | None
    private_data: bytes
    raw: bytes


def request_frame(*, ird: int, ord: int, crc: bool, private_data: bytes = b"") -> bytes:
    """The initiator's MPA Request: Rev 2, enhanced, IRD/ORD words, no markers."""
    _check_user_pd(private_data)
    return encode_mpa_frame(False, crc=crc, rev=2, ird=_clamp(ird), ord=_clamp(ord), private_data=private_data)


def reply_frame(*, ird: int, ord: int, crc: bool, private_data: bytes = b"", reject: bool = False) -> bytes:
    """The responder's MPA Reply (Rev 2, enhanced); ``reject`` sets R (the private data goes with it)."""
    _check_user_pd(private_data)
    return encode_mpa_frame(True, crc=crc, reject=reject, rev=2, ird=_clamp(ird), ord=_clamp(ord),
                            private_data=private_data)


def _clamp(v: int) -> int:
    return max(0, min(MAX_IRD_ORD, v))


def _check_user_pd(pd: bytes) -> None:
    if len(pd) > MAX_USER_PRIVATE_DATA:
        raise MPAError(f"{len(pd)} bytes of private data: an MPA Rev 2 frame holds at most {MAX_USER_PRIVATE_DATA} "
                       f"after the IRD/ORD words ({MAX_PRIVATE_DATA} in all, siw's MPA_MAX_PRIVDATA)")


def read_frame(buf: bytes | bytearray, want_request: bool) -> tuple[MPAFrame, int] | None:
    """The MPA frame at the start of ``buf`` and its length, or None while it is incomplete.
    Raises :class:`MPAError` for a frame siw would refuse."""
    what = "MPA Request" if want_request else "MPA Reply"
    if len(buf) < FRAME_HEADER:
        return None
    hdr = MPAReqRep.decode(bytes(buf[:FRAME_HEADER]), 0)
    key = MPA_KEY_REQ_INT if want_request else MPA_KEY_REP_INT
    if hdr.key != key:
        raise MPAError(f"{what} expected, but the first 16 bytes are {bytes(buf[:16])!r}",
                       None if want_request else (2, 0, 0x04))
    if hdr.rev > 2:
        raise MPAError(f"{what} of revision {hdr.rev} (siw takes 0, 1 and 2)")
    if hdr.pd_length > MAX_PRIVATE_DATA:
        raise MPAError(f"{what} with {hdr.pd_length} bytes of private data (at most {MAX_PRIVATE_DATA}, "
                       "siw's MPA_MAX_PRIVDATA: -EPROTO)")
    total = FRAME_HEADER + hdr.pd_length
    if len(buf) < total:
        return None
    pd = bytes(buf[FRAME_HEADER:total])
    enhanced = hdr.rev == 2 and bool(hdr.res & MPA_FLAG_ENHANCED)
    ird = ord_ = None
    if enhanced:
        if hdr.pd_length < IRD_ORD_WORDS:
            raise MPAError(f"enhanced Rev 2 {what} with {hdr.pd_length} bytes of private data (the IRD/ORD words "
                           "need 4)")
        words = MPAv2IRDORD.decode(pd, 0)
        ird, ord_ = words.ird & MPA_V2_IRD_ORD_MASK, words.ord & MPA_V2_IRD_ORD_MASK
        pd = pd[IRD_ORD_WORDS:]
    frame = MPAFrame(want_request, bool(hdr.marker_flag), bool(hdr.crc_flag), bool(hdr.rej_flag), hdr.rev, enhanced,
                     ird, ord_, pd, bytes(buf[:total]))
    return frame, total


class Initiator:
    """The active side after TCP connected: :meth:`request` to send, then :meth:`feed` the bytes that arrive.

    ``feed`` returns None until the Reply is complete, then the Reply (check ``reject``); the
    negotiated ``crc``, ``ird`` and ``ord`` are set, and ``rest`` holds bytes that followed it."""

    def __init__(self, *, ird: int, ord: int, crc: bool, private_data: bytes = b"") -> None:
        self.ird, self.ord, self.want_crc = _clamp(ird), _clamp(ord), crc
        self.private_data = private_data
        self.crc = crc
        self._buf = bytearray()
        self.reply: MPAFrame | None = None
        self.rest = b""

    def request(self) -> bytes:
        return request_frame(ird=self.ird, ord=self.ord, crc=self.want_crc, private_data=self.private_data)

    def feed(self, data: bytes) -> MPAFrame | None:
        self._buf += data
        got = read_frame(self._buf, want_request=False)
        if got is None:
            return None
        rep, n = got
        self.reply, self.rest = rep, bytes(self._buf[n:])
        if rep.reject:
            return rep
        if rep.markers:
            raise MPAError("the MPA Reply asks for markers (M flag): refused, as siw refuses them")
        if not rep.enhanced:
            raise MPAError(f"the MPA Reply is Rev {rep.rev} without the enhanced flag, but the Request was Rev 2 "
                           "enhanced (siw: ECONNRESET)")
        if rep.ord is not None and rep.ord != MPA_V2_NO_IRD_ORD and rep.ord > MAX_IRD_ORD:
            raise MPAError(f"the MPA Reply's ORD is {rep.ord} > {MAX_IRD_ORD}: insufficient IRD", (2, 0, 0x06))
        self.crc = self.want_crc or rep.crc
        peer_ird = rep.ird if rep.ird is not None and rep.ird != MPA_V2_NO_IRD_ORD else self.ord
        peer_ord = rep.ord if rep.ord is not None and rep.ord != MPA_V2_NO_IRD_ORD else self.ird
        self.ord = min(self.ord, peer_ird)
        self.ird = max(self.ird, min(MAX_IRD_ORD, peer_ord))
        return rep


class Responder:
    """The passive side after TCP accepted: :meth:`feed` bytes until it returns the Request, then
    :meth:`accept` or :meth:`reject` give the Reply to send."""

    def __init__(self, *, crc: bool = False) -> None:
        self.want_crc = crc
        self.crc = crc
        self._buf = bytearray()
        self.request: MPAFrame | None = None
        self.ird = self.ord = 0

    def feed(self, data: bytes) -> MPAFrame | None:
        if self.request is not None:
            raise MPAError("bytes after the MPA Request before the Reply was sent (siw: -EPROTO, peer sent "
                           "extra data)")
        self._buf += data
        got = read_frame(self._buf, want_request=True)
        if got is None:
            return None
        req, n = got
        if n != len(self._buf):
            raise MPAError(f"{len(self._buf) - n} bytes followed the MPA Request before the Reply (siw: -EPROTO, "
                           "peer sent extra data)")
        if req.reject:
            raise MPAError("an MPA Request with the R flag")
        self.request = req
        if req.markers:
            raise MPAError("the MPA Request asks for markers (M flag): refused, as siw refuses them", reject=True)
        self.crc = self.want_crc or req.crc
        return req

    def negotiate(self, responder_resources: int, initiator_depth: int) -> tuple[int, int]:
        """Our (IRD, ORD) for the Reply: ORD no more than the initiator's IRD, IRD raised to the
        initiator's ORD (relaxed IRD negotiation), both at most 128."""
        req = self.request
        assert req is not None
        peer_ird = req.ird if req.ird is not None and req.ird != MPA_V2_NO_IRD_ORD else MAX_IRD_ORD
        peer_ord = req.ord if req.ord is not None and req.ord != MPA_V2_NO_IRD_ORD else 0
        self.ord = min(_clamp(initiator_depth), peer_ird)
        self.ird = min(MAX_IRD_ORD, max(_clamp(responder_resources), peer_ord))
        return self.ird, self.ord

    def accept(self, responder_resources: int, initiator_depth: int, private_data: bytes = b"") -> bytes:
        ird, ord_ = self.negotiate(responder_resources, initiator_depth)
        return reply_frame(ird=ird, ord=ord_, crc=self.crc, private_data=private_data)

    def reject(self, private_data: bytes = b"") -> bytes:
        return reply_frame(ird=0, ord=0, crc=self.crc, private_data=private_data, reject=True)


# ---------------------------------------------------------------------- the connection's states as a table
class MPAState(enum.Enum):
    """An iWARP connection of rdma_cm from TCP to the QP taking the stream (siw_cm.c's ``SIW_EPSTATE_*``,
    named for what each waits for).  The role is in the state: the first two are the initiator's, the
    next two the responder's."""

    TCP_CONNECTING = "TCP connecting"  # siw: CONNECTING
    REQUEST_SENT = "MPA Request sent"  # siw: AWAIT_MPAREP
    AWAIT_REQUEST = "waiting for the MPA Request"  # siw: AWAIT_MPAREQ
    REQUEST_RCVD = "MPA Request received"  # siw: RECVD_MPAREQ
    ESTABLISHED = "established"  # siw: RDMA_MODE, the QP has the stream
    DISCONNECTED = "disconnected"  # it was established, and the stream closed
    CLOSED = "closed"  # it never was: refused, rejected, timed out, or the stream closed first


class MPAEvent(enum.Enum):
    TCP_CONNECTED = "TCP connected"
    TCP_FAILED = "TCP failed"
    BYTES = "bytes"  # bytes on the stream before the QP has it
    TIMER = "timer"  # MPA_REQ_TIMEOUT (10 s) or the responder's 5 s
    STREAM_CLOSED = "stream closed"  # FIN, reset, or a Terminate the QP received
    ACCEPT = "accept()"
    REJECT = "reject()"
    DISCONNECT = "disconnect()"


M, ME = MPAState, MPAEvent
#: ``(state, event) -> Rule``; actions are ``rdmalab.verbs.cmid_iwarp.ACTIONS``; every other pair is the
#: event's refusal in :data:`OTHERWISE`.
TABLE: dict[tuple[MPAState, MPAEvent], Rule] = {
    (M.TCP_CONNECTING, ME.TCP_CONNECTED): Rule("send_request", (M.REQUEST_SENT,), "the MPA Request, the 10 s timer"),
    (M.TCP_CONNECTING, ME.TCP_FAILED): Rule("tcp_failed", (M.CLOSED,), "REJECTED -ECONNREFUSED or UNREACHABLE"),
    (M.REQUEST_SENT, ME.BYTES): Rule("read_reply", (M.REQUEST_SENT, M.ESTABLISHED, M.CLOSED),
                                     "wait for the rest, ESTABLISHED, REJECTED (R), or CONNECT_ERROR"),
    (M.REQUEST_SENT, ME.TIMER): Rule("reply_timeout", (M.CLOSED,), "UNREACHABLE -ETIMEDOUT"),
    (M.REQUEST_SENT, ME.STREAM_CLOSED): Rule("closed_before_reply", (M.CLOSED,), "REJECTED -ECONNRESET"),
    (M.AWAIT_REQUEST, ME.BYTES): Rule("read_request", (M.AWAIT_REQUEST, M.REQUEST_RCVD, M.CLOSED),
                                      "wait for the rest, CONNECT_REQUEST, or the connection refused"),
    (M.AWAIT_REQUEST, ME.TIMER): Rule("give_up", (M.CLOSED,), "no Request within 5 s: the connection is dropped"),
    (M.AWAIT_REQUEST, ME.STREAM_CLOSED): Rule("forget", (M.CLOSED,), "closed before its Request: nothing to tell"),
    (M.REQUEST_RCVD, ME.BYTES): Rule("read_request", (M.CLOSED,), "siw: -EPROTO, peer sent extra data"),
    (M.REQUEST_RCVD, ME.STREAM_CLOSED): Rule("forget", (M.CLOSED,), "closed before the application answered"),
    (M.REQUEST_RCVD, ME.ACCEPT): Rule("send_reply", (M.ESTABLISHED,), "the QP takes the stream, ESTABLISHED at once"),
    (M.REQUEST_RCVD, ME.REJECT): Rule("send_reject", (M.CLOSED,), "a Reply with R, then FIN"),
    (M.ESTABLISHED, ME.STREAM_CLOSED): Rule("disconnected", (M.DISCONNECTED,), "DISCONNECTED; the QP to ERR"),
    (M.ESTABLISHED, ME.DISCONNECT): Rule("fin", (M.ESTABLISHED, M.DISCONNECTED), "the QP to ERR and FIN; "
                                                                               "DISCONNECTED when the stream closes"),
    (M.REQUEST_SENT, ME.DISCONNECT): Rule("close", (M.CLOSED,), "FIN before the Reply: REJECTED -ECONNRESET"),
    (M.AWAIT_REQUEST, ME.DISCONNECT): Rule("close", (M.CLOSED,), "FIN"),
    (M.REQUEST_RCVD, ME.DISCONNECT): Rule("close", (M.CLOSED,), "FIN"),
    (M.TCP_CONNECTING, ME.DISCONNECT): Rule(REFUSE, (), "Failed to Disconnect: the CMID is not connected yet "
                                                        "({state})"),
}

#: What every pair not in :data:`TABLE` does, per event (nothing reaches a state that is over).
OTHERWISE: dict[MPAEvent, Rule] = {
    ME.TCP_CONNECTED: Rule(IGNORE, (), "TCP connected in state {state}: only a connecting initiator waits for it"),
    ME.TCP_FAILED: Rule(IGNORE, (), "TCP failed in state {state}: only a connecting initiator waits for it"),
    ME.BYTES: Rule(IGNORE, (), "bytes in state {state}: the QP has the stream, or it is over"),
    ME.TIMER: Rule(IGNORE, (), "no MPA timer runs in state {state}"),
    ME.STREAM_CLOSED: Rule(IGNORE, (), "the stream closed again ({state})"),
    ME.ACCEPT: Rule(REFUSE, (), "Failed to Accept Connection: no MPA Request waiting on this CMID ({state})"),
    ME.REJECT: Rule(REFUSE, (), "Failed to Reject Connection: no MPA Request waiting on this CMID ({state})"),
    ME.DISCONNECT: Rule(IGNORE, (), "disconnect in state {state}: nothing to close"),
}


def rule(state: MPAState, event: MPAEvent) -> Rule:
    """What ``event`` does in ``state``: its entry in :data:`TABLE`, else the event's refusal."""
    return TABLE.get((state, event)) or OTHERWISE[event]


def edges() -> list[tuple[str, str, str]]:
    """``(from, to, event)`` for every transition of :data:`TABLE`: the MPA state diagram's edges."""
    return [(s.name, to.name, ev.value) for (s, ev), r in TABLE.items() if r.do not in REFUSALS for to in r.to]
