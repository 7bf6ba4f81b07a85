"""The connection manager of a soft device: QP1 (the GSI) and the IB CM state machine, as Linux 6.1 runs them.

For kernel rxe, the whole CM runs in the kernel: ``ib_mad`` owns QP1 of each port (``core/mad.c``),
``ib_cm`` runs the state machine of IBA Vol 1 chapter 12 (``core/cm.c``) and ``rdma_cm``
(``core/cma.c``) puts IP addressing on top.  The engine is not part of that stack, so each
:class:`~rdmalab.verbs.engine.node.SoftDevice` has its own: a :class:`GSI` on QP1 that sends and
receives MADs as UD SEND Only packets (P_Key 0xFFFF, Q_Key 0x80010000, source QP 1) and a
:class:`CMAgent` that keeps the connections.  The rdma_cm layer (``rdmalab.verbs.cmid``) drives the
agent and gets its events through a :class:`CMHandler`.

What follows Linux 6.1 (line numbers of ``drivers/infiniband/core/cm.c`` in 6.1.20):

* **Timeouts** are ``cm_convert_to_ms(t) = 1 << max(t - 8, 0)`` ms (l.918).  A REQ waits
  ``2 * 2^(PLT-8) + 2^(RemoteCMResponseTimeout-8)`` ms per try, PLT being the path's packet life
  time 18 on RoCE (``CMA_IBOE_PACKET_LIFETIME``): 6144 ms, 15 tries (``ib_send_cm_req`` l.1473).  A REP
  waits ``2^(REQ.LocalCMResponseTimeout-8)`` ms, ``REQ.MaxCMRetries`` tries; a DREQ the
  connection's timeout; an MRA replaces the timer with ``2^(ServiceTimeout-8) + 2^(PLT+1-8)`` ms
  (``cm_mra_handler`` l.3164).  Every retry sends the same MAD (``mad.c retry_send``).
* **Duplicates.** A REQ seen again (same remote comm ID and source) while the application has not
  answered is answered with an MRA of service timeout 24 (``cm_dup_req_handler``; rdma_cm arms
  ``CMA_CM_MRA_SETTING``); after the REP is sent it is dropped (the REP has its own retries).  A
  REP seen again once the RTU is sent is answered with the same RTU (``cm_dup_rep_handler`` l.2410).
* **Stale connections.** A REQ from a QPN and source that a live connection already uses gets
  REJ 10 and the old connection a DREQ (``cm_insert_remote_qpn`` l.746).
* **No listener**: REJ 8, invalid service ID (``cm_match_req`` l.1965).
* **Disconnect.** A DREQ is ignored unless its Remote QPN is the receiver's QPN; a DREQ for an
  unknown connection still gets a DREP (``cm_dreq_handler`` l.2796); a DREQ that crosses our own
  DREQ is answered with a DREP.  Then timewait, ``2^(PLT+1-8)`` ms, and its exit event
  (``cm_enter_timewait`` l.972).
* **LAP/APR** (alternate paths) are refused as ib_cm refuses them on RoCE: dropped, counted.
* **ECE** fields stay 0 (librdmacm moves the QP to error on a REP with a foreign vendor ID).
* **PSNs.** The REQ's starting PSN is the one the *passive* side sends with, the REP's the one the
  active side sends with (``cm_req_handler``/``cm_rep_handler``; ``captures/rxe_rping.pcap``: the
  REQ carries 0x9d04f9 and the server's first READ request has that PSN).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from rdmalab.verbs import enums as e
from rdmalab.verbs.engine.packet import Pkt
from rdmalab.wire import cm as w
from rdmalab.wire.errors import DecodeError
from rdmalab.wire.ib import DETH, psn_add
from rdmalab.wire.mad import (
    CM_ATTR_DREP,
    CM_ATTR_DREQ,
    CM_ATTR_MRA,
    CM_ATTR_REJ,
    CM_ATTR_REP,
    CM_ATTR_REQ,
    CM_ATTR_RTU,
    CM_ATTR_SIDR_REP,
    CM_ATTR_SIDR_REQ,
    MAD_SIZE,
    METHOD_SEND,
    MGMT_CLASS_CM,
)

GSI_QPN = 1
GSI_QKEY = 0x80010000  # IBA Vol 1 10.2.5; rxe_hdr.h GSI_QKEY: rxe drops QP1 packets with another Q_Key
GSI_SPORT = 0xC000 + 0x1B72  # 55410 = 0xC000 + hash_32(1, 14): rxe's QP1 source port (never modified with an AV)
UD_SEND_ONLY = 0x64
CM_ATTR_LAP, CM_ATTR_APR = 0x0019, 0x001A
PACKET_LIFE_TIME = 18  # CMA_IBOE_PACKET_LIFETIME (cma.c l.50)
CM_RESPONSE_TIMEOUT = 20  # CMA_CM_RESPONSE_TIMEOUT
MAX_CM_RETRIES = 15
MRA_SERVICE_TIMEOUT = 24  # CMA_CM_MRA_SETTING's timeout (cma.c l.49)
SIDR_TIMEOUT = 20  # cma_resolve_ib_udp: 1 << (20 - 8) ms
RDMA_UDP_QKEY = 0x01234567  # include/rdma/rdma_cm_ib.h
SIDR_SUCCESS, SIDR_UNSUPPORTED, SIDR_REJECT = 0, 1, 2


def cm_ms(t: int) -> int:
    """``cm_convert_to_ms``: a CM timeout code as milliseconds, ``1 << max(t - 8, 0)``."""
    return 1 << max(t - 8, 0)


def req_timeout_ms(remote_cm_response_timeout: int = CM_RESPONSE_TIMEOUT, plt: int = PACKET_LIFE_TIME) -> int:
    """How long an active side waits for the REP per try (``ib_send_cm_req``): 6144 ms by default."""
    return 2 * cm_ms(plt) + cm_ms(remote_cm_response_timeout)


class State(enum.Enum):
    IDLE = "idle"
    REQ_SENT = "REQ sent"
    REQ_RCVD = "REQ received"
    MRA_REQ_SENT = "MRA for the REQ sent"
    REP_SENT = "REP sent"
    REP_RCVD = "REP received"
    ESTABLISHED = "established"
    DREQ_SENT = "DREQ sent"
    DREQ_RCVD = "DREQ received"
    TIMEWAIT = "timewait"
    SIDR_REQ_SENT = "SIDR_REQ sent"
    SIDR_REQ_RCVD = "SIDR_REQ received"
    CLOSED = "closed"


class CMHandler(Protocol):
    """What the rdma_cm layer gives the agent for each connection: one method, the events."""

    def cm_event(self, conn: CMConn, kind: str, msg: w.CMMessage | None, **info: Any) -> None:
        """``kind``: req, rep, established, rejected, unreachable, mra, dreq, disconnected,
        timewait_exit, sidr_rep."""


@dataclass(eq=False)
class CMConn:
    """One connection (or one SIDR look-up) as ib_cm keeps it: a ``cm_id``."""

    agent: CMAgent
    local_id: int
    handler: CMHandler
    active: bool
    state: State = State.IDLE
    remote_id: int = 0
    remote_gid: int = 0
    local_gid: int = 0
    local_qpn: int = 0
    remote_qpn: int = 0
    service_id: int = 0
    tid: int = 0
    timeout_ms: int = 0
    retries: int = 0
    tries: int = 0
    req: w.CMMessage | None = None
    rep: w.CMMessage | None = None
    last: bytes = b""  # the MAD the timer resends
    last_name: str = ""
    rtu: bytes = b""
    timer: Any = None
    started_ns: int = 0
    history: list[str] = field(default_factory=list)

    # ------------------------------------------------------------------ calls from rdma_cm
    def accept(self, *, local_qpn: int, starting_psn: int, responder_resources: int, initiator_depth: int,
               rnr_retry_count: int = 7, srq: int = 0, private_data: bytes = b"") -> None:
        """Passive side: send the REP (the QP is already in RTR/RTS, as librdmacm does it)."""
        if self.state not in (State.REQ_RCVD, State.MRA_REQ_SENT) or self.req is None:
            raise CMStateError(f"accept: connection 0x{self.local_id:08x} is {self.state.value}, not waiting for an answer")
        self.local_qpn = local_qpn
        rep = w.build_rep(self.req, local_comm_id=self.local_id, local_qpn=local_qpn, starting_psn=starting_psn,
                          responder_resources=responder_resources, initiator_depth=initiator_depth,
                          rnr_retry_count=rnr_retry_count, srq=srq, local_ca_guid=self.agent.guid,
                          target_ack_delay=15, private_data=private_data)
        req = self.req.body
        assert isinstance(req, w.CMReq)
        self.rep = rep
        self._send(rep, State.REP_SENT, cm_ms(req.local_cm_response_timeout), req.max_cm_retries)

    def reject(self, reason: int = w.REJ_CONSUMER_DEFINED, private_data: bytes = b"") -> None:
        msg = self.req if not self.active else self.rep
        if msg is None:
            raise CMStateError(f"reject: connection 0x{self.local_id:08x} has no REQ or REP to reject")
        self.agent.send(self.remote_gid, w.build_rej(msg, reason, local_comm_id=self.local_id,
                                                     private_data=private_data))
        self._close()

    def establish(self) -> None:
        """Active side, after the REP: send the RTU (the QP is in RTS now) and be established."""
        if self.state != State.REP_RCVD or self.rep is None:
            raise CMStateError(f"establish: connection 0x{self.local_id:08x} is {self.state.value}, not REP received")
        rtu = w.build_rtu(self.rep)
        self.rtu = rtu.encode()
        self.agent.send(self.remote_gid, rtu)
        self._cancel()
        self._set(State.ESTABLISHED)

    def disconnect(self, private_data: bytes = b"") -> None:
        """``rdma_disconnect``: a DREQ from ESTABLISHED, the DREP when the peer's DREQ came first."""
        if self.state == State.ESTABLISHED:
            dreq = w.build_dreq(self.local_id, self.remote_id, self.remote_qpn, private_data=private_data)
            self._send(dreq, State.DREQ_SENT, self.timeout_ms or req_timeout_ms(), MAX_CM_RETRIES)
        elif self.state == State.DREQ_RCVD:  # the peer's DREQ came first: answer it now (rdma_disconnect's DREP)
            self.agent.send_raw(self.remote_gid, self.last)
            self._timewait()
        elif self.state in (State.REQ_RCVD, State.MRA_REQ_SENT):
            self.reject(w.REJ_CONSUMER_DEFINED)
        elif self.state in (State.REQ_SENT, State.REP_SENT, State.REP_RCVD):
            self._close()
        # already disconnecting or closed: nothing to do, as rdma_disconnect then

    def sidr_reply(self, qpn: int, qkey: int, status: int, private_data: bytes = b"") -> None:
        """Passive side of a SIDR_REQ: the SIDR_REP (``rdma_accept``/``rdma_reject`` on RDMA_PS_UDP)."""
        req = self.req
        if req is None or not isinstance(req.body, w.CMSidrReq):
            raise CMStateError("sidr_reply: no SIDR_REQ to answer")
        rep = w.CMSidrRep(request_id=req.body.request_id, status=status, qpn=qpn, service_id=req.body.service_id,
                          qkey=qkey)
        self.agent.send(self.remote_gid, w.cm_mad(rep, req.tid, private_data))
        self._close()

    # ------------------------------------------------------------------ internals
    def _set(self, state: State) -> None:
        self.state = state
        self.history.append(state.value)
        dev = self.agent.dev
        if dev.tracing:
            dev.trace(GSI_QPN, "cm state", detail=f"0x{self.local_id:08x} {state.value}")

    def _send(self, msg: w.CMMessage, state: State, timeout_ms: int, retries: int) -> None:
        self._cancel()
        self.last = msg.encode()
        self.last_name = msg.name
        self.tid = msg.tid
        self.timeout_ms = timeout_ms
        self.retries = retries
        self.tries = 1
        self.agent.send_raw(self.remote_gid, self.last)
        self._set(state)
        self._arm(timeout_ms)

    def _arm(self, ms: int) -> None:
        self._cancel()
        self.timer = self.agent.dev.schedule(ms * 1_000_000, self._expired, None)

    def _cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _expired(self, _: Any) -> None:
        self.timer = None
        if self.state == State.TIMEWAIT:
            self._set(State.CLOSED)
            self.agent.forget(self)
            self.handler.cm_event(self, "timewait_exit", None)
            return
        if self.tries <= self.retries:
            self.tries += 1
            self.agent.counters["cm_tx_retries"] += 1
            self.agent.send_raw(self.remote_gid, self.last)
            self._arm(self.timeout_ms)
            return
        waited = self.tries * self.timeout_ms
        state = self.state
        if state == State.DREQ_SENT:  # cma_ib_handler: DISCONNECTED even when the DREQ times out
            self._timewait()
            self.handler.cm_event(self, "disconnected", None, timed_out=True)
            return
        self._close()
        self.handler.cm_event(self, "unreachable", None, message=self.last_name, tries=self.tries,
                              waited_ms=waited, state=state.value)

    def _timewait(self) -> None:
        self._cancel()
        self.agent.unlink_remote(self)
        self._set(State.TIMEWAIT)
        self._arm(cm_ms(PACKET_LIFE_TIME + 1))

    def _close(self) -> None:
        self._cancel()
        self._set(State.CLOSED)
        self.agent.forget(self)


class CMStateError(Exception):
    """A call the connection's state does not allow (the message says which state it is in)."""


Listener = Callable[[CMConn, w.CMMessage], bool]


class CMAgent:
    """ib_cm for one soft device: connections by local comm ID, listeners by service ID."""

    def __init__(self, dev: Any) -> None:
        self.dev = dev
        self.guid = (dev.mac << 16) | 0xFFFE
        self.conns: dict[int, CMConn] = {}
        self.by_remote: dict[tuple[int, int], CMConn] = {}  # (remote comm ID, remote GID)
        self.by_remote_qpn: dict[tuple[int, int], CMConn] = {}  # (remote QPN, remote GID)
        #: service ID -> what makes the handler of a REQ or SIDR_REQ for it (None: it refused, and answered)
        self.listeners: dict[int, Callable[[CMConn, w.CMMessage], CMHandler | None]] = {}
        self.psn = dev.rng.getrandbits(24)
        self.counters = {"cm_tx_msgs": 0, "cm_tx_retries": 0, "cm_rx_msgs": 0, "cm_rx_duplicates": 0,
                         "cm_rx_dropped": 0}
        self.log: list[str] = []
        #: the other processes of a device they share (rdmalab.fabric.shared.SharedDevice), else None:
        #: a REQ for a service ID one of them listens on is theirs to answer
        self.shared: Any = None
        #: CM message name -> how many of the next ones arriving are lost (for tests and the notebook)
        self.lose: dict[str, int] = {}

    def lose_next(self, name: str, count: int = 1) -> None:
        """Lose the next ``count`` arriving CM messages called ``name`` ("REP", "RTU" ...) as if the wire dropped them."""
        self.lose[name] = self.lose.get(name, 0) + count

    # ------------------------------------------------------------------ ids
    def new_id(self) -> int:
        while True:
            cid = self.dev.rng.getrandbits(32) or 1
            if cid not in self.conns:
                return cid

    def new_conn(self, handler: CMHandler, active: bool) -> CMConn:
        conn = CMConn(self, self.new_id(), handler, active, started_ns=self.dev.now)
        conn.local_gid = self.dev.gids[1]
        self.conns[conn.local_id] = conn
        return conn

    def forget(self, conn: CMConn) -> None:
        self.conns.pop(conn.local_id, None)
        self.unlink_remote(conn)

    def unlink_remote(self, conn: CMConn) -> None:
        for table, key in ((self.by_remote, (conn.remote_id, conn.remote_gid)),
                           (self.by_remote_qpn, (conn.remote_qpn, conn.remote_gid))):
            if table.get(key) is conn:
                del table[key]

    # ------------------------------------------------------------------ sending
    def send(self, dst_gid: int, msg: w.CMMessage) -> None:
        self.send_raw(dst_gid, msg.encode())

    def send_raw(self, dst_gid: int, mad: bytes) -> None:
        dev = self.dev
        p = Pkt(UD_SEND_ONLY, self.psn, GSI_QPN, dev.gids[1], dst_gid, GSI_SPORT, dev.mac,
                dev.resolve_mac(dst_gid) or 0, mad, ackreq=1)
        p.deth = DETH(q_key=GSI_QKEY, src_qp=GSI_QPN)
        p.srcqp = GSI_QPN
        self.psn = psn_add(self.psn, 1)
        self.counters["cm_tx_msgs"] += 1
        dev.transmit(p)

    def connect(self, handler: CMHandler, dst_gid: int, req: Callable[[int], w.CMMessage]) -> CMConn:
        """Active side: send the REQ ``req(local_comm_id)`` builds; events go to ``handler``."""
        conn = self.new_conn(handler, active=True)
        conn.remote_gid = dst_gid
        msg = req(conn.local_id)
        body = msg.body
        assert isinstance(body, w.CMReq)
        conn.req = msg
        conn.local_qpn = body.local_qpn
        conn.service_id = body.service_id
        self._send_req(conn, msg, body)
        return conn

    def _send_req(self, conn: CMConn, msg: w.CMMessage, body: w.CMReq) -> None:
        conn._send(msg, State.REQ_SENT, req_timeout_ms(body.remote_cm_response_timeout), body.max_cm_retries)

    def sidr_request(self, handler: CMHandler, dst_gid: int, service_id: int, private_data: bytes) -> CMConn:
        conn = self.new_conn(handler, active=True)
        conn.remote_gid = dst_gid
        conn.service_id = service_id
        body = w.CMSidrReq(request_id=conn.local_id, service_id=service_id)
        msg = w.cm_mad(body, w.default_tid(conn.local_id), private_data)
        conn._send(msg, State.SIDR_REQ_SENT, cm_ms(SIDR_TIMEOUT), MAX_CM_RETRIES)
        return conn

    # ------------------------------------------------------------------ receiving
    def on_mad(self, mad: bytes, src_gid: int, packet_id: int | None = None) -> None:
        self.counters["cm_rx_msgs"] += 1
        try:  # lenient: a REQ whose cma_hdr is malformed still reaches rdma_cm, which refuses it with REJ 28
            msg = w.CMMessage.decode(mad, lenient=True)
        except DecodeError as exc:
            self._dropped(f"undecodable CM MAD from {_ip(src_gid)}: {exc}")
            return
        if self.lose.get(msg.name):
            self.lose[msg.name] -= 1
            self._dropped(f"{msg.name} lost on the way (lose_next)", packet_id)
            return
        hdr = msg.mad
        if hdr.base_version != 1 or hdr.method != METHOD_SEND or hdr.class_version != w.CM_CLASS_VERSION:
            self._dropped(f"MAD base version {hdr.base_version} method {hdr.method:#x} class version "
                          f"{hdr.class_version}: ib_mad takes CM Sends of base version 1, class version 2")
            return
        handler = {CM_ATTR_REQ: self._on_req, CM_ATTR_REP: self._on_rep, CM_ATTR_RTU: self._on_rtu,
                   CM_ATTR_REJ: self._on_rej, CM_ATTR_MRA: self._on_mra, CM_ATTR_DREQ: self._on_dreq,
                   CM_ATTR_DREP: self._on_drep, CM_ATTR_SIDR_REQ: self._on_sidr_req,
                   CM_ATTR_SIDR_REP: self._on_sidr_rep}.get(hdr.attr_id)
        if handler is None:
            self._dropped(f"CM attribute {hdr.attr_id:#x} refused (LAP/APR: no alternate paths on RoCE)")
            return
        handler(msg, src_gid)

    def _dropped(self, why: str, packet_id: int | None = None) -> None:
        self.counters["cm_rx_dropped"] += 1
        self.log.append(why)
        if self.dev.tracing:
            if packet_id is not None:
                self.dev.trace(GSI_QPN, "dropped", packet_id=packet_id, reason=why)
            else:
                self.dev.trace(GSI_QPN, "dropped", reason=why)

    def _mine(self, msg: w.CMMessage) -> CMConn | None:
        rid = msg.remote_comm_id
        return None if rid is None else self.conns.get(rid)

    def _on_req(self, msg: w.CMMessage, src: int) -> None:
        body = msg.body
        assert isinstance(body, w.CMReq)
        dup = self.by_remote.get((body.local_comm_id, src))
        if dup is not None:
            self.counters["cm_rx_duplicates"] += 1
            if dup.state in (State.REQ_RCVD, State.MRA_REQ_SENT):
                self.send(src, w.build_mra(msg, local_comm_id=dup.local_id, service_timeout=MRA_SERVICE_TIMEOUT))
                dup._set(State.MRA_REQ_SENT)
            return
        stale = self.by_remote_qpn.get((body.local_qpn, src))
        if stale is not None and stale.state not in (State.TIMEWAIT, State.CLOSED):
            self.send(src, w.build_rej(msg, w.REJ_STALE_CONN))
            if stale.state == State.ESTABLISHED:
                stale.disconnect()
                stale.handler.cm_event(stale, "disconnected", None, stale=True)
            return
        if body.transport_service_type != w.TST_RC:
            self.send(src, w.build_rej(msg, w.REJ_INVALID_TRANSPORT_TYPE))
            return
        factory = self.listeners.get(body.service_id)
        if factory is None:
            if self.shared is not None and self.shared.listened_elsewhere(body.service_id):
                return  # another process of this device listens on it: its CM answers
            self.send(src, w.build_rej(msg, w.REJ_INVALID_SERVICE_ID))
            return
        conn = CMConn(self, self.new_id(), _NoHandler(), active=False, started_ns=self.dev.now)
        conn.remote_id, conn.remote_gid, conn.remote_qpn = body.local_comm_id, src, body.local_qpn
        conn.local_gid, conn.service_id, conn.req, conn.tid = self.dev.gids[1], body.service_id, msg, msg.tid
        conn.timeout_ms = cm_ms(body.local_cm_response_timeout)
        handler = factory(conn, msg)
        if handler is None:  # the listener refused it (e.g. a malformed cma_hdr): it has sent the REJ
            return
        conn.handler = handler
        self.conns[conn.local_id] = conn
        self.by_remote[(conn.remote_id, src)] = conn
        self.by_remote_qpn[(conn.remote_qpn, src)] = conn
        conn._set(State.REQ_RCVD)
        handler.cm_event(conn, "req", msg)

    def _on_rep(self, msg: w.CMMessage, src: int) -> None:
        body = msg.body
        assert isinstance(body, w.CMRep)
        conn = self._mine(msg)
        if conn is None:
            self._dropped(f"REP for unknown connection 0x{body.remote_comm_id:08x}")
            return
        if conn.state == State.ESTABLISHED and conn.rtu:
            self.counters["cm_rx_duplicates"] += 1
            self.send_raw(conn.remote_gid, conn.rtu)
            return
        if conn.state == State.REP_RCVD:
            self.counters["cm_rx_duplicates"] += 1
            self.send(src, w.build_mra(msg, local_comm_id=conn.local_id, service_timeout=MRA_SERVICE_TIMEOUT))
            return
        if conn.state != State.REQ_SENT:
            self._dropped(f"REP in state {conn.state.value}")
            return
        stale = self.by_remote_qpn.get((body.local_qpn, src))
        if stale is not None and stale is not conn and stale.state not in (State.TIMEWAIT, State.CLOSED):
            self.send(src, w.build_rej(msg, w.REJ_STALE_CONN, local_comm_id=conn.local_id))
            conn._close()
            conn.handler.cm_event(conn, "rejected", msg, reason=w.REJ_STALE_CONN, by="this side")
            return
        conn._cancel()
        conn.rep, conn.remote_id, conn.remote_qpn = msg, body.local_comm_id, body.local_qpn
        self.by_remote[(conn.remote_id, src)] = conn
        self.by_remote_qpn[(conn.remote_qpn, src)] = conn
        conn._set(State.REP_RCVD)
        conn.handler.cm_event(conn, "rep", msg)

    def _on_rtu(self, msg: w.CMMessage, src: int) -> None:
        conn = self._mine(msg)
        if conn is None or conn.state != State.REP_SENT:
            self._dropped("RTU for no connection waiting for one")
            return
        conn._cancel()
        conn._set(State.ESTABLISHED)
        conn.handler.cm_event(conn, "established", msg)

    def _on_rej(self, msg: w.CMMessage, src: int) -> None:
        body = msg.body
        assert isinstance(body, w.CMRej)
        conn = self._mine(msg)
        if conn is None:  # a REJ of a REQ we never got a comm ID back for: match the REQ's TID
            conn = next((c for c in self.conns.values() if c.active and c.tid == msg.tid
                         and c.remote_gid == src), None)
        if conn is None or conn.state in (State.CLOSED, State.TIMEWAIT):
            self._dropped("REJ for no connection")
            return
        conn._close()
        conn.handler.cm_event(conn, "rejected", msg, reason=body.reason, by="peer")

    def _on_mra(self, msg: w.CMMessage, src: int) -> None:
        body = msg.body
        assert isinstance(body, w.CMMra)
        conn = self._mine(msg)
        if conn is None or conn.state not in (State.REQ_SENT, State.REP_SENT):
            self._dropped("MRA for no connection waiting for an answer")
            return
        ms = cm_ms(body.service_timeout) + cm_ms(PACKET_LIFE_TIME + 1)
        conn._arm(ms)
        conn.tries = conn.retries + 1  # after an MRA, the next expiry is final (cm_mra_handler: no resend)
        conn.timeout_ms = ms
        conn.handler.cm_event(conn, "mra", msg, timeout_ms=ms)

    def _on_dreq(self, msg: w.CMMessage, src: int) -> None:
        body = msg.body
        assert isinstance(body, w.CMDreq)
        conn = self._mine(msg)
        if conn is None:
            self.send(src, w.build_drep(msg))  # cm_issue_drep: unknown IDs still get a DREP
            return
        if body.remote_qpn_eecn != conn.local_qpn:
            self._dropped(f"DREQ naming QPN {body.remote_qpn_eecn:#x}, not this connection's {conn.local_qpn:#x}")
            return
        if conn.state == State.TIMEWAIT:
            self.counters["cm_rx_duplicates"] += 1
            self.send(src, w.build_drep(msg))
            return
        if conn.state == State.DREQ_SENT:  # both sides disconnect at once
            self.send(src, w.build_drep(msg))
            conn._timewait()
            conn.handler.cm_event(conn, "disconnected", msg)
            return
        if conn.state not in (State.ESTABLISHED, State.REP_SENT, State.DREQ_RCVD):
            self._dropped(f"DREQ in state {conn.state.value}")
            return
        if conn.state == State.DREQ_RCVD:
            self.counters["cm_rx_duplicates"] += 1
            return
        conn.last = w.build_drep(msg).encode()  # sent when the application calls disconnect (rdma_disconnect)
        conn._cancel()
        conn._set(State.DREQ_RCVD)
        conn.handler.cm_event(conn, "disconnected", msg)

    def _on_drep(self, msg: w.CMMessage, src: int) -> None:
        conn = self._mine(msg)
        if conn is None or conn.state != State.DREQ_SENT:
            self._dropped("DREP for no DREQ")
            return
        conn._timewait()
        conn.handler.cm_event(conn, "disconnected", msg)

    def _on_sidr_req(self, msg: w.CMMessage, src: int) -> None:
        body = msg.body
        assert isinstance(body, w.CMSidrReq)
        conn = CMConn(self, self.new_id(), _NoHandler(), active=False, started_ns=self.dev.now)
        conn.remote_id, conn.remote_gid, conn.service_id, conn.req = body.request_id, src, body.service_id, msg
        dup = self.by_remote.get((body.request_id, src))
        if dup is not None and dup.state == State.SIDR_REQ_RCVD:
            self.counters["cm_rx_duplicates"] += 1
            return
        factory = self.listeners.get(body.service_id)
        if factory is None:
            if self.shared is not None and self.shared.listened_elsewhere(body.service_id):
                return
            conn.sidr_reply(0, 0, SIDR_UNSUPPORTED)
            return
        handler = factory(conn, msg)
        if handler is None:
            return
        conn.handler = handler
        self.conns[conn.local_id] = conn
        self.by_remote[(conn.remote_id, src)] = conn
        conn._set(State.SIDR_REQ_RCVD)
        handler.cm_event(conn, "sidr_req", msg)

    def _on_sidr_rep(self, msg: w.CMMessage, src: int) -> None:
        body = msg.body
        assert isinstance(body, w.CMSidrRep)
        conn = self.conns.get(body.request_id)
        if conn is None or conn.state != State.SIDR_REQ_SENT:
            self._dropped("SIDR_REP for no SIDR_REQ")
            return
        conn._close()
        conn.handler.cm_event(conn, "sidr_rep", msg, status=body.status, qpn=body.qpn, qkey=body.qkey)


class _NoHandler:
    def cm_event(self, conn: CMConn, kind: str, msg: w.CMMessage | None, **info: Any) -> None:
        pass


def _ip(gid: int) -> str:
    if gid >> 32 == 0xFFFF:
        return ".".join(str((gid >> s) & 0xFF) for s in (24, 16, 8, 0))
    return hex(gid)


def _pkey_match(a: int, b: int) -> bool:
    """rxe's ``pkey_match`` (rxe_recv.c): the same partition (low 15 bits, not 0), one of them a full member."""
    return (a & 0x7FFF) != 0 and (a & 0x7FFF) == (b & 0x7FFF) and bool((a | b) & 0x8000)


class GSI:
    """QP1 of a soft device: UD, Q_Key 0x80010000; it takes CM MADs and gives them to the agent."""

    qp_num = GSI_QPN
    qp_type = e.IBV_QPT_UD

    def __init__(self, dev: Any) -> None:
        self.dev = dev
        self.agent = CMAgent(dev)

    def on_request(self, pkt: Pkt) -> None:
        deth = pkt.deth
        if pkt.opcode != UD_SEND_ONLY or deth is None:
            self.agent._dropped(f"QP1 takes UD SEND Only, not opcode {pkt.opcode:#x}")
            return
        if not _pkey_match(pkt.pkey, 0xFFFF):  # rxe_recv.c check_keys: QP1 takes the default partition's
            self.agent._dropped(f"QP1 packet with P_Key {pkt.pkey:#06x}, not the default partition's 0xffff")
            return
        if deth.q_key != GSI_QKEY:  # rxe_recv.c check_keys
            self.agent._dropped(f"QP1 packet with Q_Key {deth.q_key:#x}, not 0x80010000")
            return
        mad = bytes(pkt.payload)  # the carrier may reuse its buffer once this returns
        frame = pkt._frame
        if len(mad) != MAD_SIZE and frame is not None:
            # a packet decoded from a whole frame: the frame decoder went on into the MAD and left only
            # the private data as payload; the UD payload is what lies between the DETH and the ICRC
            ip4 = frame[12:14] == b"\x08\x00"
            start = 14 + ((frame[14] & 0x0F) * 4 if ip4 else 40) + 8 + 12 + 8
            pad = (frame[start - 20 + 1] >> 4) & 3
            mad = bytes(frame[start:len(frame) - 4 - pad])
        if len(mad) < MAD_SIZE:
            self.agent._dropped(f"a MAD of {len(mad)} bytes (MADs are 256)")
            return
        if mad[1] != MGMT_CLASS_CM:
            self.agent._dropped(f"MAD of management class {mad[1]:#x}: only the CM (0x07) is served")
            return
        self.agent.on_mad(mad[:MAD_SIZE], pkt.src_gid, pkt.id)

    def on_response(self, pkt: Pkt) -> None:
        self.agent._dropped("a response opcode to QP1")

    def segment(self, *args: Any) -> bool:
        return False

    def flush_ack(self) -> None:
        pass
