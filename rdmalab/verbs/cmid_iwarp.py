"""rdma_cm on a soft iWARP device: a TCP connection and the MPA Request/Reply instead of CM MADs.

:class:`rdmalab.verbs.cmid.CMID` hands its connection calls here when its device's transport is
iWARP (:class:`~rdmalab.verbs.engine.iwdevice.IwDevice`), so a program uses the same API
(pyverbs.cmid) on both transports.  What changes is what the kernel's ``rdma_cm`` does for an
iWARP device (Linux 6.1 ``drivers/infiniband/core/cma.c`` ``cma_connect_iw``/``cma_iw_handler``,
``core/iwcm.c``, ``sw/siw/siw_cm.c``):

* **The TCP port is the rdma_cm port** (rping's 7174, perftest's 18515): ``listen`` opens a TCP
  listener on the bound address and port, ``connect`` a TCP connection to the destination's.
* **No cma_hdr**: the application's private data goes into the MPA frames unchanged (after the
  IRD/ORD words), at most 252 octets (siw's 256 with the words).
* ``connect``'s ``responder_resources``/``initiator_depth`` become the Request's IRD/ORD (≤ 128);
  the Reply's give the QP its ORD (how many READs it may have outstanding) and IRD.
* The passive side raises CONNECT_REQUEST when the MPA Request has arrived; ``accept`` moves the
  QP to RTS, attaches the connection to it, sends the Reply, and reports ESTABLISHED at once
  (``siw_accept``); the QP sends no FPDU before the initiator's first.  ``reject`` sends a Reply
  with R and the private data, then closes.
* Events and statuses as ``cma_iw_handler`` maps them: a Reply with R, or a refused TCP
  connection, is REJECTED with status -ECONNREFUSED; no Reply within the MPA timer (10 s,
  ``MPAREQ_TIMEOUT``) is UNREACHABLE -ETIMEDOUT; a Reply the engine must refuse is CONNECT_ERROR.
  A passive side drops a connection whose Request does not come within 5 s.
* ``disconnect`` is a plain TCP FIN (no Terminate); either side's close, a Terminate or a reset
  gives DISCONNECTED, and the QP goes to the error state (its WQEs flush).

An :class:`IwConn` moves through ``rdmalab.verbs.engine.mpacm.TABLE`` (``MPAState`` x ``MPAEvent``)
by :meth:`IwConn.dispatch` alone; :data:`ACTIONS` are the table's actions.  :data:`TRANSPORT` is
what a CMID on an iWARP device uses (``rdmalab.verbs.cmstate.CMTransport``).
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from typing import Any

from rdmalab.verbs import enums as e
from rdmalab.verbs.cm_enums import rdma_cm_event_type
from rdmalab.verbs.cmstate import CMIDEvent, owner
from rdmalab.verbs.cmtypes import ConnParam
from rdmalab.verbs.engine import mpacm
from rdmalab.verbs.engine.ibcm_conn import CMTableError
from rdmalab.verbs.engine.ibcm_table import REFUSALS, REFUSE
from rdmalab.verbs.engine.iwarp import IwQP
from rdmalab.verbs.engine.iwdevice import IwDevice
from rdmalab.verbs.engine.mpacm import MPAEvent, MPAState
from rdmalab.verbs.pyverbs_error import PyverbsRDMAError
from rdmalab.wire.iwarp import terminate
from rdmalab.wire.mpa import frame_fpdu

# rdmalab.verbs.cmid.CMID (cmid imports this module, so it is not imported here)
CMID = Any
EV = rdma_cm_event_type
MPA_REQ_TIMEOUT_NS = 10_000_000_000  # siw_cm.h MPAREQ_TIMEOUT: the initiator waits 10 s for the Reply
MPA_REP_TIMEOUT_NS = 5_000_000_000  # the responder waits 5 s for the Request (siw_accept_newconn)
M, ME = MPAState, MPAEvent


class IwConn:
    """One iWARP connection of a CMID: the TCP stream and the MPA exchange, until the QP takes the stream.
    ``state`` is an :class:`~rdmalab.verbs.engine.mpacm.MPAState`, moved only by :meth:`dispatch`."""

    def __init__(self, cmid: CMID, mpa: mpacm.Initiator | mpacm.Responder, state: MPAState) -> None:
        self.cmid = cmid
        self.mpa = mpa
        self.stream: Any = None
        self.state = state
        self.history = [state.value]
        self._timer: Any = None

    @property
    def target(self) -> CMID:
        return owner(self.cmid)

    # ------------------------------------------------------------------ the one dispatch
    def allowed(self, event: MPAEvent) -> None:
        """Raise the table's refusal (PyverbsRDMAError EINVAL) if ``event`` is refused in this state."""
        r = mpacm.rule(self.state, event)
        if r.do == REFUSE:
            raise PyverbsRDMAError(r.why.format(state=self.state.value), errno.EINVAL)

    def dispatch(self, event: MPAEvent, arg: Any = None) -> None:
        """Apply ``mpacm.TABLE[(state, event)]``; an action must leave a state its entry lists."""
        state = self.state
        r = mpacm.rule(state, event)
        if r.do in REFUSALS:
            self.allowed(event)
            return
        ACTIONS[r.do](self, arg)
        if self.state not in r.to:
            raise CMTableError(f"MPA {event.value} in {state.name}: action {r.do} left {self.state.name}, the table "
                               f"says {' or '.join(s.name for s in r.to)}")

    def _set(self, state: MPAState) -> None:
        self.state = state
        self.history.append(state.value)

    # ------------------------------------------------------------------ what the stream and the timer call
    def on_connected(self, stream: Any, why: str | None) -> None:
        if stream is None:
            self.dispatch(ME.TCP_FAILED, why)
        else:
            self.dispatch(ME.TCP_CONNECTED, stream)

    def on_bytes(self, data: bytes) -> None:
        self.dispatch(ME.BYTES, data)

    def on_closed(self, why: str) -> None:
        self.dispatch(ME.STREAM_CLOSED, why)

    def _arm(self, ns: int, what: str) -> None:
        dev = self.cmid.device
        assert dev is not None
        self._timer = dev.schedule(ns, self._expired, what)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self, what: str) -> None:
        self._timer = None
        self.dispatch(ME.TIMER, what)

    def _attach(self, eng: Any, *, responder: bool, crc: bool, ird: int, ord: int, initial: bytes = b"") -> None:
        if not isinstance(eng, IwQP):
            raise PyverbsRDMAError("the CMID's QP is not an iWARP QP", errno.EINVAL)
        eng.on_disconnect = self.on_closed
        eng.attach(self.stream, crc=crc, ird=ird, ord=ord, responder=responder)
        if eng.qp_state != e.IBV_QPS_RTS:
            eng.set_state(e.IBV_QPS_RTS)  # iw_cm moves the QP to RTS itself (iw_cm_init_qp_attr)
        if initial:
            eng.on_bytes(initial)

    def _initiator(self) -> mpacm.Initiator:
        assert isinstance(self.mpa, mpacm.Initiator), "the table gives this action only to an initiator's state"
        return self.mpa

    def _responder(self) -> mpacm.Responder:
        assert isinstance(self.mpa, mpacm.Responder), "the table gives this action only to a responder's state"
        return self.mpa


# ---------------------------------------------------------------------- the actions mpacm.TABLE names
def _send_request(conn: IwConn, stream: Any) -> None:
    conn.stream = stream
    stream.receiver = conn
    stream.write(conn._initiator().request())
    conn._set(M.REQUEST_SENT)
    conn._arm(MPA_REQ_TIMEOUT_NS, "no MPA Reply within 10 s")


def _tcp_failed(conn: IwConn, why: str | None) -> None:
    conn._set(M.CLOSED)
    refused = why is not None and "refused" in why
    conn.target._move(CMIDEvent.REJECTED if refused else CMIDEvent.UNREACHABLE)
    conn.target._post(EV.RDMA_CM_EVENT_REJECTED if refused else EV.RDMA_CM_EVENT_UNREACHABLE,
                      status=-(errno.ECONNREFUSED if refused else errno.ETIMEDOUT), why=why or "")


def _read_reply(conn: IwConn, data: bytes) -> None:
    mpa = conn._initiator()
    try:
        rep = mpa.feed(data)
    except mpacm.MPAError as exc:
        conn._set(M.CLOSED)
        conn._disarm()
        if exc.terminate is not None and mpa.reply is not None:
            layer, etype, code = exc.terminate
            conn.stream.write(frame_fpdu(terminate(layer, etype, code, msn=1), crc=mpa.want_crc or mpa.reply.crc))
        conn.stream.close()
        conn.target._move(CMIDEvent.CONNECT_ERROR)
        conn.target._post(EV.RDMA_CM_EVENT_CONNECT_ERROR, status=-errno.ECONNRESET, why=exc.why)
        return
    if rep is None:
        return
    conn._disarm()
    cmid = conn.target
    if rep.reject:
        conn._set(M.CLOSED)
        conn.stream.close()
        cmid._move(CMIDEvent.REJECTED)
        cmid._post(EV.RDMA_CM_EVENT_REJECTED, status=-errno.ECONNREFUSED, private_data=rep.private_data,
                   why="the MPA Reply has R set")
        return
    qp = cmid.qp
    if qp is None:
        conn._set(M.CLOSED)
        conn.stream.close()
        cmid._move(CMIDEvent.CONNECT_ERROR)
        cmid._post(EV.RDMA_CM_EVENT_CONNECT_ERROR, status=-errno.EINVAL, why="the CMID has no QP")
        return
    conn._set(M.ESTABLISHED)
    conn._attach(qp.engine, responder=False, crc=mpa.crc, ird=mpa.ird, ord=mpa.ord, initial=mpa.rest)
    cmid._move(CMIDEvent.ESTABLISHED)
    cmid._post(EV.RDMA_CM_EVENT_ESTABLISHED, private_data=rep.private_data)


def _reply_timeout(conn: IwConn, what: str) -> None:
    conn._set(M.CLOSED)
    conn.stream.close()
    conn.target._move(CMIDEvent.UNREACHABLE)
    conn.target._post(EV.RDMA_CM_EVENT_UNREACHABLE, status=-errno.ETIMEDOUT, why=what)


def _closed_before_reply(conn: IwConn, why: str) -> None:
    conn._set(M.CLOSED)
    conn._disarm()
    conn.target._move(CMIDEvent.REJECTED)
    conn.target._post(EV.RDMA_CM_EVENT_REJECTED, status=-errno.ECONNRESET, why=f"before the MPA Reply: {why}")


def _read_request(conn: IwConn, data: bytes) -> None:
    mpa = conn._responder()
    try:
        req = mpa.feed(data)
    except mpacm.MPAError as exc:
        conn._set(M.CLOSED)
        conn._disarm()
        if exc.reject:
            conn.stream.write(mpa.reject())
        conn.stream.close()
        dev = conn.cmid.device
        if dev is not None and dev.tracing:
            dev.trace(0, "dropped", reason=f"MPA Request refused: {exc.why}")
        return
    if req is None:
        return
    conn._disarm()
    listener = conn.cmid
    stream = conn.stream
    child = listener._child(getattr(stream, "dev", None) or listener.device)
    child.src_addr, child.src_port = stream.local
    child.dst_addr, child.dst_port = stream.peer
    child._iw = conn
    conn.cmid = child
    conn._set(M.REQUEST_RCVD)
    listener._request(child, req.private_data)


def _give_up(conn: IwConn, what: str) -> None:
    conn._set(M.CLOSED)
    conn.stream.close()


def _forget(conn: IwConn, why: str) -> None:
    conn._set(M.CLOSED)
    conn._disarm()


def _send_reply(conn: IwConn, arg: tuple[CMID, ConnParam]) -> None:
    cmid, param = arg
    mpa = conn._responder()
    conn.cmid = cmid
    reply = mpa.accept(param.responder_resources, param.initiator_depth, param.private_data)
    conn._attach(cmid.qp.engine, responder=True, crc=mpa.crc, ird=mpa.ird, ord=mpa.ord)
    conn.stream.write(reply)
    conn._set(M.ESTABLISHED)
    cmid._move(CMIDEvent.ACCEPT)
    cmid._move(CMIDEvent.ESTABLISHED)
    cmid._post(EV.RDMA_CM_EVENT_ESTABLISHED)  # siw_accept reports it at once (no RTR mode)


def _send_reject(conn: IwConn, private_data: bytes) -> None:
    conn._set(M.CLOSED)
    conn.stream.write(conn._responder().reject(private_data))
    conn.stream.close()


def _disconnected(conn: IwConn, why: str) -> None:
    conn._set(M.DISCONNECTED)
    conn.target._move(CMIDEvent.DISCONNECTED)
    conn.target._post(EV.RDMA_CM_EVENT_DISCONNECTED, why=why)


def _fin(conn: IwConn, _: Any) -> None:
    cmid = conn.target
    eng = cmid.qp.engine if cmid.qp is not None else None
    if isinstance(eng, IwQP) and eng.llp is conn.stream:
        eng.disconnect()  # QP to ERR, FIN; the stream's close comes back as STREAM_CLOSED
    else:
        conn.stream.close()
        conn.dispatch(ME.STREAM_CLOSED, "local disconnect")


def _close(conn: IwConn, _: Any) -> None:
    conn.stream.close()
    conn.dispatch(ME.STREAM_CLOSED, "local disconnect")


#: The actions ``mpacm.TABLE`` names.
ACTIONS: dict[str, Callable[[IwConn, Any], None]] = {
    "send_request": _send_request, "tcp_failed": _tcp_failed, "read_reply": _read_reply,
    "reply_timeout": _reply_timeout, "closed_before_reply": _closed_before_reply, "read_request": _read_request,
    "give_up": _give_up, "forget": _forget, "send_reply": _send_reply, "send_reject": _send_reject,
    "disconnected": _disconnected, "fin": _fin, "close": _close,
}


# ---------------------------------------------------------------------- rdma_cm's calls (cmstate.CMTransport)
def _device(cmid: CMID) -> IwDevice:
    dev = cmid.device
    if not isinstance(dev, IwDevice):
        raise PyverbsRDMAError(f"{cmid!r} is not bound to an iWARP device", errno.EINVAL)
    return dev


def _conn(cmid: CMID, what: str) -> IwConn:
    conn = cmid._iw
    if not isinstance(conn, IwConn):
        raise PyverbsRDMAError(f"Failed to {what}: no connection request on this CMID", errno.EINVAL)
    return conn


class IWTransport:
    """rdma_cm on a soft iWARP device: a TCP listener or connection, then MPA (:class:`IwConn`)."""

    def listen(self, cmid: CMID) -> None:
        dev = _device(cmid)
        if not cmid.src_port:
            cmid.src_port = dev.rng.randrange(32768, 61000)
        ip = cmid.src_addr or "0.0.0.0"

        def incoming(stream: Any) -> None:
            owner_dev = getattr(stream, "dev", dev)
            crc = owner_dev.mpa_crc if isinstance(owner_dev, IwDevice) else dev.mpa_crc
            conn = IwConn(cmid, mpacm.Responder(crc=crc), M.AWAIT_REQUEST)
            conn.stream = stream
            stream.receiver = conn
            conn._arm(MPA_REP_TIMEOUT_NS, "no MPA Request within 5 s")

        try:
            dev.tcp.listen(ip, cmid.src_port, incoming)
        except OSError as exc:
            raise PyverbsRDMAError(f"Listen Failed: TCP port {cmid.src_port} on {ip}: {exc.strerror or exc}",
                                   errno.EADDRINUSE) from None
        cmid._iw = ("listen", ip, cmid.src_port)

    def unlisten(self, cmid: CMID) -> None:
        if isinstance(cmid._iw, tuple):
            _, ip, port = cmid._iw
            _device(cmid).tcp.unlisten(ip, port)

    def connect(self, cmid: CMID, param: ConnParam) -> None:
        dev = _device(cmid)
        assert cmid.dst_addr is not None
        pd = param.private_data
        if len(pd) > mpacm.MAX_USER_PRIVATE_DATA:
            raise PyverbsRDMAError(f"Failed to Connect: {len(pd)} bytes of private data (an MPA Rev 2 Request "
                                   f"holds {mpacm.MAX_USER_PRIVATE_DATA} after the IRD/ORD words)", errno.EINVAL)
        if cmid.qp is None:
            raise PyverbsRDMAError("Failed to Connect: on iWARP the CMID needs its QP (create_qp first)",
                                   errno.EINVAL)
        mpa = mpacm.Initiator(ird=param.responder_resources, ord=param.initiator_depth, crc=dev.mpa_crc,
                              private_data=pd)
        conn = IwConn(cmid, mpa, M.TCP_CONNECTING)
        cmid._iw = conn
        cmid._move(CMIDEvent.CONNECT)
        try:
            dev.tcp.connect((cmid.src_addr or "0.0.0.0", cmid.src_port), (cmid.dst_addr, cmid.dst_port),
                            conn.on_connected)
        except OSError as exc:
            raise PyverbsRDMAError(f"Failed to Connect: {exc.strerror or exc}", exc.errno or errno.EINVAL) from None

    def accept(self, cmid: CMID, param: ConnParam) -> None:
        conn = _conn(cmid, "Accept Connection")
        conn.allowed(ME.ACCEPT)
        if cmid.qp is None:
            raise PyverbsRDMAError("Failed to Accept Connection: on iWARP the CMID needs its QP (create_qp first)",
                                   errno.EINVAL)
        if len(param.private_data) > mpacm.MAX_USER_PRIVATE_DATA:
            raise PyverbsRDMAError(f"Failed to Accept Connection: {len(param.private_data)} bytes of private data "
                                   f"(at most {mpacm.MAX_USER_PRIVATE_DATA})", errno.EINVAL)
        conn.dispatch(ME.ACCEPT, (cmid, param))
        if cmid.sync:
            cmid._take(EV.RDMA_CM_EVENT_ESTABLISHED, "accept")

    def reject(self, cmid: CMID, private_data: bytes) -> None:
        conn = _conn(cmid, "Reject Connection")
        conn.allowed(ME.REJECT)
        if len(private_data) > mpacm.MAX_USER_PRIVATE_DATA:
            raise PyverbsRDMAError(f"Failed to Reject Connection: {len(private_data)} bytes of private data (at "
                                   f"most {mpacm.MAX_USER_PRIVATE_DATA})", errno.EINVAL)
        conn.dispatch(ME.REJECT, private_data)

    def disconnect(self, cmid: CMID) -> None:
        conn = cmid._iw
        if not isinstance(conn, IwConn):
            raise PyverbsRDMAError("Failed to Disconnect: the CMID is not connected", errno.EINVAL)
        cmid._check(CMIDEvent.DISCONNECT, "Disconnect")
        conn.allowed(ME.DISCONNECT)
        cmid._move(CMIDEvent.DISCONNECT)
        conn.dispatch(ME.DISCONNECT)


    def establish(self, cmid: CMID) -> None:
        raise PyverbsRDMAError("Failed to Complete an active connection request: on iWARP the MPA Reply "
                               "establishes the connection (there is no CONNECT_RESPONSE to complete)", errno.EINVAL)

    def qp_path(self, cmid: CMID) -> dict[str, Any]:
        raise PyverbsRDMAError("Failed to get QP attributes: an iWARP connection has no REQ or REP to take RTR "
                               "and RTS attributes from (its QP goes to RTS when the MPA exchange ends)", errno.EINVAL)

TRANSPORT = IWTransport()
