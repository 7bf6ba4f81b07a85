"""rdma_cm on a soft iWARP device: a TCP connection and the MPA Request/Reply instead of CM MADs.

:class:`rdmalab.verbs.cmid.CMID` hands its connection calls here when its device's transport is
iWARP (:class:`~rdmalab.verbs.engine.iwdevice.IwDevice`), so a program uses the same API
(pyverbs.cmid) on both transports.  What changes is what the kernel's ``rdma_cm`` does for an
iWARP device (``cma.c`` ``cma_connect_iw``/``cma_iw_handler``, ``iwcm.c``, ``siw_cm.c``;
``/work/shared/reference/connection-management.md`` B.1):

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
"""

from __future__ import annotations

import errno
from typing import Any

from rdmalab.verbs import enums as e
from rdmalab.verbs.cm_enums import rdma_cm_event_type
from rdmalab.verbs.engine import mpacm
from rdmalab.verbs.engine.iwarp import IwQP
from rdmalab.verbs.engine.iwdevice import IwDevice
from rdmalab.verbs.pyverbs_error import PyverbsRDMAError
from rdmalab.wire.iwarp import terminate
from rdmalab.wire.mpa import frame_fpdu

# rdmalab.verbs.cmid.CMID and ConnParam (cmid imports this module, so they are not imported here)
CMID = Any
ConnParam = Any
EV = rdma_cm_event_type
MPA_REQ_TIMEOUT_NS = 10_000_000_000  # siw_cm.h MPAREQ_TIMEOUT: the initiator waits 10 s for the Reply
MPA_REP_TIMEOUT_NS = 5_000_000_000  # the responder waits 5 s for the Request (siw_accept_newconn)


class IwConn:
    """One iWARP connection of a CMID: the TCP stream and the MPA exchange, until the QP takes the stream."""

    def __init__(self, cmid: CMID, mpa: mpacm.Initiator | mpacm.Responder) -> None:
        self.cmid = cmid
        self.mpa = mpa
        self.stream: Any = None
        self.established = False
        self.done = False  # the MPA exchange is over (the QP has the stream, or it failed)
        self.disconnected = False
        self._timer: Any = None

    @property
    def target(self) -> CMID:
        return getattr(self.cmid, "_adopted_by", self.cmid)

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
        if self.done:
            return
        self.done = True
        if self.stream is not None:
            self.stream.close()
        if isinstance(self.mpa, mpacm.Initiator):
            self.target._post(EV.RDMA_CM_EVENT_UNREACHABLE, status=-errno.ETIMEDOUT, why=what)

    # ------------------------------------------------------------------ active side
    def on_connected(self, stream: Any, why: str | None) -> None:
        if stream is None:
            self.done = True
            refused = why is not None and "refused" in why
            self.target.state = "rejected" if refused else "unreachable"
            self.target._post(EV.RDMA_CM_EVENT_REJECTED if refused else EV.RDMA_CM_EVENT_UNREACHABLE,
                              status=-(errno.ECONNREFUSED if refused else errno.ETIMEDOUT), why=why or "")
            return
        self.stream = stream
        stream.receiver = self
        assert isinstance(self.mpa, mpacm.Initiator)
        stream.write(self.mpa.request())
        self._arm(MPA_REQ_TIMEOUT_NS, "no MPA Reply within 10 s")

    # ------------------------------------------------------------------ bytes before the QP has the stream
    def on_bytes(self, data: bytes) -> None:
        if self.done:
            return
        try:
            if isinstance(self.mpa, mpacm.Initiator):
                self._reply(data)
            else:
                self._request(data)
        except mpacm.MPAError as exc:
            self._mpa_failed(exc)

    def on_closed(self, why: str) -> None:
        if self.done:
            if self.established and not self.disconnected:
                self.disconnected = True
                self.target.state = "disconnected"
                self.target._post(EV.RDMA_CM_EVENT_DISCONNECTED, why=why)
            return
        self.done = True
        self._disarm()
        if isinstance(self.mpa, mpacm.Initiator):
            self.target.state = "rejected"
            self.target._post(EV.RDMA_CM_EVENT_REJECTED, status=-errno.ECONNRESET, why=f"before the MPA Reply: {why}")

    def _mpa_failed(self, exc: mpacm.MPAError) -> None:
        self.done = True
        self._disarm()
        mpa = self.mpa
        if exc.terminate is not None and isinstance(mpa, mpacm.Initiator) and mpa.reply is not None:
            layer, etype, code = exc.terminate
            crc = mpa.want_crc or mpa.reply.crc
            self.stream.write(frame_fpdu(terminate(layer, etype, code, msn=1), crc=crc))
        if exc.reject and isinstance(mpa, mpacm.Responder):
            self.stream.write(mpa.reject())
        self.stream.close()
        if isinstance(mpa, mpacm.Initiator):
            self.target.state = "error"
            self.target._post(EV.RDMA_CM_EVENT_CONNECT_ERROR, status=-errno.ECONNRESET, why=exc.why)
        else:
            dev = self.cmid.device
            if dev is not None and dev.tracing:
                dev.trace(0, "dropped", reason=f"MPA Request refused: {exc.why}")

    def _reply(self, data: bytes) -> None:
        mpa = self.mpa
        assert isinstance(mpa, mpacm.Initiator)
        rep = mpa.feed(data)
        if rep is None:
            return
        self.done = True
        self._disarm()
        cmid = self.target
        if rep.reject:
            self.stream.close()
            cmid.state = "rejected"
            cmid._post(EV.RDMA_CM_EVENT_REJECTED, status=-errno.ECONNREFUSED, private_data=rep.private_data,
                       why="the MPA Reply has R set")
            return
        qp = cmid.qp
        if qp is None:
            self.stream.close()
            cmid._post(EV.RDMA_CM_EVENT_CONNECT_ERROR, status=-errno.EINVAL, why="the CMID has no QP")
            return
        self._attach(qp.engine, responder=False, crc=mpa.crc, ird=mpa.ird, ord=mpa.ord, initial=mpa.rest)
        cmid.state = "established"
        self.established = True
        cmid._post(EV.RDMA_CM_EVENT_ESTABLISHED, private_data=rep.private_data)

    def _attach(self, eng: Any, *, responder: bool, crc: bool, ird: int, ord: int, initial: bytes = b"") -> None:
        if not isinstance(eng, IwQP):
            raise PyverbsRDMAError("the CMID's QP is not an iWARP QP", errno.EINVAL)
        eng.on_disconnect = self.on_closed
        eng.attach(self.stream, crc=crc, ird=ird, ord=ord, responder=responder)
        if eng.qp_state != e.IBV_QPS_RTS:
            eng.set_state(e.IBV_QPS_RTS)  # iw_cm moves the QP to RTS itself (iw_cm_init_qp_attr)
        if initial:
            eng.on_bytes(initial)

    # ------------------------------------------------------------------ passive side
    def _request(self, data: bytes) -> None:
        mpa = self.mpa
        assert isinstance(mpa, mpacm.Responder)
        req = mpa.feed(data)
        if req is None:
            return
        self._disarm()
        listener = self.cmid
        child = _child(listener, self)
        self.cmid = child
        listener.backlog.append(child)
        listener._channel_post_request(child, req.private_data)


def _child(listener: CMID, conn: IwConn) -> CMID:
    child = type(listener)()
    child.port_space = listener.port_space
    child._channel = listener._channel
    child.sync = listener.sync
    stream = conn.stream
    dev = getattr(stream, "dev", None) or listener.device
    if listener.device is dev or dev is None:
        child._share(listener)
    else:
        child._attach(dev)
    child.src_addr, child.src_port = stream.local
    child.dst_addr, child.dst_port = stream.peer
    child._iw = conn
    child.state = "connect request"
    if child._channel is not None:
        child._channel.ids.append(child)
    return child


def _device(cmid: CMID) -> IwDevice:
    dev = cmid.device
    if not isinstance(dev, IwDevice):
        raise PyverbsRDMAError(f"{cmid!r} is not bound to an iWARP device", errno.EINVAL)
    return dev


def listen(cmid: CMID) -> None:
    dev = _device(cmid)
    if not cmid.src_port:
        cmid.src_port = dev.rng.randrange(32768, 61000)
    ip = cmid.src_addr or "0.0.0.0"

    def incoming(stream: Any) -> None:
        owner = getattr(stream, "dev", dev)
        conn = IwConn(cmid, mpacm.Responder(crc=owner.mpa_crc if isinstance(owner, IwDevice) else dev.mpa_crc))
        conn.stream = stream
        stream.receiver = conn
        conn._arm(MPA_REP_TIMEOUT_NS, "no MPA Request within 5 s")

    try:
        dev.tcp.listen(ip, cmid.src_port, incoming)
    except OSError as exc:
        raise PyverbsRDMAError(f"Listen Failed: TCP port {cmid.src_port} on {ip}: {exc.strerror or exc}",
                               errno.EADDRINUSE) from None
    cmid._iw = ("listen", ip, cmid.src_port)
    cmid.listening = True
    cmid.state = "listen"


def unlisten(cmid: CMID) -> None:
    if isinstance(cmid._iw, tuple):
        _, ip, port = cmid._iw
        _device(cmid).tcp.unlisten(ip, port)


def connect(cmid: CMID, param: ConnParam) -> None:
    dev = _device(cmid)
    assert cmid.dst_addr is not None
    pd = param.private_data
    if len(pd) > mpacm.MAX_USER_PRIVATE_DATA:
        raise PyverbsRDMAError(f"Failed to Connect: {len(pd)} bytes of private data (an MPA Rev 2 Request holds "
                               f"{mpacm.MAX_USER_PRIVATE_DATA} after the IRD/ORD words)", errno.EINVAL)
    if cmid.qp is None:
        raise PyverbsRDMAError("Failed to Connect: on iWARP the CMID needs its QP (create_qp first)", errno.EINVAL)
    mpa = mpacm.Initiator(ird=param.responder_resources, ord=param.initiator_depth, crc=dev.mpa_crc, private_data=pd)
    conn = IwConn(cmid, mpa)
    cmid._iw = conn
    cmid.state = "connecting"
    try:
        dev.tcp.connect((cmid.src_addr or "0.0.0.0", cmid.src_port), (cmid.dst_addr, cmid.dst_port),
                        conn.on_connected)
    except OSError as exc:
        raise PyverbsRDMAError(f"Failed to Connect: {exc.strerror or exc}", exc.errno or errno.EINVAL) from None
    if cmid.sync:
        _take(cmid, EV.RDMA_CM_EVENT_ESTABLISHED, "connect")


def _take(cmid: CMID, kind: int, what: str) -> Any:
    ch = cmid._channel
    assert ch is not None
    me = getattr(cmid, "_adopted_by", cmid)
    ev = ch.wait(lambda x: x.cmid is me, what=f"{what} on {cmid._where()}")
    if ev.kind != kind:
        why = ev.info.get("why", "")
        raise PyverbsRDMAError(f"{what}: {EV(ev.kind).name} (status {ev.status}) from {cmid.dst_addr}:"
                               f"{cmid.dst_port}{': ' + why if why else ''}",
                               errno.ECONNREFUSED if ev.kind == EV.RDMA_CM_EVENT_REJECTED else errno.ETIMEDOUT)
    return ev


def _conn(cmid: CMID, what: str) -> IwConn:
    conn = cmid._iw
    if not isinstance(conn, IwConn):
        raise PyverbsRDMAError(f"Failed to {what}: no connection request on this CMID", errno.EINVAL)
    return conn


def accept(cmid: CMID, param: ConnParam) -> None:
    conn = _conn(cmid, "Accept Connection")
    mpa = conn.mpa
    if not isinstance(mpa, mpacm.Responder) or mpa.request is None or conn.done:
        raise PyverbsRDMAError("Failed to Accept Connection: no MPA Request waiting on this CMID", errno.EINVAL)
    if cmid.qp is None:
        raise PyverbsRDMAError("Failed to Accept Connection: on iWARP the CMID needs its QP (create_qp first)",
                               errno.EINVAL)
    if len(param.private_data) > mpacm.MAX_USER_PRIVATE_DATA:
        raise PyverbsRDMAError(f"Failed to Accept Connection: {len(param.private_data)} bytes of private data "
                               f"(at most {mpacm.MAX_USER_PRIVATE_DATA})", errno.EINVAL)
    conn.cmid = cmid
    reply = mpa.accept(param.responder_resources, param.initiator_depth, param.private_data)
    conn.done = True
    conn._attach(cmid.qp.engine, responder=True, crc=mpa.crc, ird=mpa.ird, ord=mpa.ord)
    conn.stream.write(reply)
    conn.established = True
    cmid.state = "established"
    cmid._post(EV.RDMA_CM_EVENT_ESTABLISHED)  # siw_accept reports it at once (no RTR mode)
    if cmid.sync:
        _take(cmid, EV.RDMA_CM_EVENT_ESTABLISHED, "accept")


def reject(cmid: CMID, private_data: bytes) -> None:
    conn = _conn(cmid, "Reject Connection")
    mpa = conn.mpa
    if not isinstance(mpa, mpacm.Responder) or mpa.request is None or conn.done:
        raise PyverbsRDMAError("Failed to Reject Connection: no MPA Request waiting on this CMID", errno.EINVAL)
    if len(private_data) > mpacm.MAX_USER_PRIVATE_DATA:
        raise PyverbsRDMAError(f"Failed to Reject Connection: {len(private_data)} bytes of private data (at most "
                               f"{mpacm.MAX_USER_PRIVATE_DATA})", errno.EINVAL)
    conn.done = True
    conn.stream.write(mpa.reject(private_data))
    conn.stream.close()
    cmid.state = "rejected"


def disconnect(cmid: CMID) -> None:
    conn = cmid._iw
    if not isinstance(conn, IwConn) or conn.stream is None:
        raise PyverbsRDMAError("Failed to Disconnect: the CMID is not connected", errno.EINVAL)
    eng = cmid.qp.engine if cmid.qp is not None else None
    if isinstance(eng, IwQP) and eng.llp is conn.stream:
        eng.disconnect()  # QP to ERR, FIN; on_closed posts DISCONNECTED
    else:
        conn.stream.close()
        conn.on_closed("local disconnect")
    cmid.state = "disconnecting" if cmid.state != "disconnected" else cmid.state
