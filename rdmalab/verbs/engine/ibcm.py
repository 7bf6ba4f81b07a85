"""The connection manager of a soft device: QP1 (the GSI) and the IB CM state machine, as Linux 6.1 runs them.

For kernel rxe, the whole CM runs in the kernel: ``ib_mad`` owns QP1 of each port (``core/mad.c``),
``ib_cm`` runs the state machine of IBA Vol 1 chapter 12 (``core/cm.c``) and ``rdma_cm``
(``core/cma.c``) puts IP addressing on top.  The engine is not part of that stack, so each
:class:`~rdmalab.verbs.engine.node.SoftDevice` has its own: a :class:`GSI` on QP1 that sends and
receives MADs as UD SEND Only packets (P_Key 0xFFFF, Q_Key 0x80010000, source QP 1) and a
:class:`CMAgent` that keeps the connections.  The rdma_cm layer (``rdmalab.verbs.cmid``) drives the
agent and gets its events through a :class:`CMHandler`.

The state machine is one table, :data:`TABLE`: ``(State, Event) -> Rule(action, next states, why)``,
the events being the CM messages, the connection's timer and the calls from rdma_cm.  Every
change of a connection's state goes through :meth:`CMAgent.dispatch`, which runs the named action
(:data:`ACTIONS`) and checks that it left a state its entry lists (:class:`CMTableError` if not).
A pair the table does not list is the event's stated refusal (:data:`OTHERWISE`): a message is
dropped and counted, a repeated one counted as a duplicate, a call refused with
:class:`CMStateError`, a timer or a second disconnect ignored.  Which connection a message is for
(its comm IDs, a REJ's TID, a DREQ's QPN) is :meth:`CMAgent.match`, before any state.

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
    """A connection's state (IBA Vol 1 12.6, the CM state diagram; the names ib_cm's ``IB_CM_*`` states have).

    ``IDLE`` is also where a message stands that no connection matches: ib_cm has no ``cm_id`` for it."""

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


class Event(enum.Enum):
    """What moves a connection: a CM message arriving, its timer, or a call from rdma_cm."""

    REQ = "REQ"
    REP = "REP"
    RTU = "RTU"
    REJ = "REJ"
    MRA = "MRA"
    DREQ = "DREQ"
    DREP = "DREP"
    SIDR_REQ = "SIDR_REQ"
    SIDR_REP = "SIDR_REP"
    TIMEOUT = "timer"
    CONNECT = "connect()"
    LOOKUP = "sidr_request()"
    ACCEPT = "accept()"
    REJECT = "reject()"
    SIDR_REPLY = "sidr_reply()"
    ESTABLISH = "establish()"
    DISCONNECT = "disconnect()"


MESSAGES = (Event.REQ, Event.REP, Event.RTU, Event.REJ, Event.MRA, Event.DREQ, Event.DREP, Event.SIDR_REQ,
            Event.SIDR_REP)
CALLS = (Event.CONNECT, Event.LOOKUP, Event.ACCEPT, Event.REJECT, Event.SIDR_REPLY, Event.ESTABLISH,
         Event.DISCONNECT)

#: The refusals a table entry may name instead of an action.
DROP = "drop"  # a message the state does not take: counted in cm_rx_dropped, logged with the reason
DUPLICATE = "duplicate"  # a message seen before, with nothing to answer: counted in cm_rx_duplicates
IGNORE = "ignore"  # nothing to do (a timer no state runs, a disconnect already under way)
REFUSE = "refuse"  # a call the state does not allow: CMStateError
REFUSALS = (DROP, DUPLICATE, IGNORE, REFUSE)


@dataclass(frozen=True)
class Rule:
    """One entry of a transition table (:data:`TABLE`; ``mpacm.TABLE``): the action (a name in the
    table's actions, or a refusal), the states it may leave the connection in, and why (for a refusal:
    the reason logged or raised)."""

    do: str
    to: tuple[Any, ...] = ()  # states of the table's own enum (State here, mpacm.MPAState there)
    why: str = ""


S, E = State, Event
_SENT_OR_WAITING = (S.REQ_SENT, S.REP_SENT, S.SIDR_REQ_SENT)

#: ``(state, event) -> Rule``, for every pair (:func:`rule` fills the pairs not written here with each
#: event's refusal, :data:`OTHERWISE`).  Sources: IBA Vol 1 12.6 and Linux 6.1 ``core/cm.c`` handlers.
TABLE: dict[tuple[State, Event], Rule] = {
    # REQ (cm_req_handler): matched by (remote comm ID, source) to the connection it repeats
    (S.IDLE, E.REQ): Rule("new_req", (S.REQ_RCVD, S.IDLE), "a listener's new connection, or REJ (stale, transport, "
                                                            "no listener) and nothing kept"),
    (S.REQ_RCVD, E.REQ): Rule("mra_dup_req", (S.MRA_REQ_SENT,), "cm_dup_req_handler: MRA while the application "
                                                                 "has not answered"),
    (S.MRA_REQ_SENT, E.REQ): Rule("mra_dup_req", (S.MRA_REQ_SENT,), "cm_dup_req_handler: MRA again"),
    # REP (cm_rep_handler), matched by our comm ID
    (S.REQ_SENT, E.REP): Rule("rep", (S.REP_RCVD, S.CLOSED), "the REP (REJ 10 if its QPN is a live connection's)"),
    (S.REP_RCVD, E.REP): Rule("mra_dup_rep", (S.REP_RCVD,), "a repeated REP before the RTU: MRA"),
    (S.ESTABLISHED, E.REP): Rule("resend_rtu", (S.ESTABLISHED,), "cm_dup_rep_handler: the same RTU again"),
    # RTU (cm_rtu_handler)
    (S.REP_SENT, E.RTU): Rule("rtu", (S.ESTABLISHED,)),
    # MRA (cm_mra_handler): the timer becomes the service timeout, and its expiry final
    (S.REQ_SENT, E.MRA): Rule("mra", (S.REQ_SENT,)),
    (S.REP_SENT, E.MRA): Rule("mra", (S.REP_SENT,)),
    # DREQ (cm_dreq_handler), matched by our comm ID and our QPN
    (S.IDLE, E.DREQ): Rule("drep_unknown", (S.IDLE,), "cm_issue_drep: an unknown connection still gets a DREP"),
    (S.ESTABLISHED, E.DREQ): Rule("dreq", (S.DREQ_RCVD,), "the DREP waits for rdma_disconnect"),
    (S.REP_SENT, E.DREQ): Rule("dreq", (S.DREQ_RCVD,), "the DREP waits for rdma_disconnect"),
    (S.DREQ_SENT, E.DREQ): Rule("dreq_crossed", (S.TIMEWAIT,), "both sides disconnect at once: DREP"),
    (S.DREQ_RCVD, E.DREQ): Rule(DUPLICATE, (), "a repeated DREQ: the DREP is still the application's to send"),
    (S.TIMEWAIT, E.DREQ): Rule("drep_again", (S.TIMEWAIT,), "a repeated DREQ in timewait: the DREP again"),
    # DREP (cm_drep_handler)
    (S.DREQ_SENT, E.DREP): Rule("drep", (S.TIMEWAIT,)),
    # SIDR (cm_sidr_req_handler / cm_sidr_rep_handler)
    (S.IDLE, E.SIDR_REQ): Rule("new_sidr_req", (S.SIDR_REQ_RCVD, S.IDLE), "a listener's look-up, or SIDR_REP "
                                                                           "unsupported and nothing kept"),
    (S.SIDR_REQ_RCVD, E.SIDR_REQ): Rule(DUPLICATE, (), "a repeated SIDR_REQ: the application answers once"),
    (S.SIDR_REQ_SENT, E.SIDR_REP): Rule("sidr_rep", (S.CLOSED,)),
    # the timer (cm_process_send_error after the MAD's retries; cm_work_handler for timewait)
    (S.REQ_SENT, E.TIMEOUT): Rule("retry_or_unreachable", (S.REQ_SENT, S.CLOSED)),
    (S.REP_SENT, E.TIMEOUT): Rule("retry_or_unreachable", (S.REP_SENT, S.CLOSED)),
    (S.SIDR_REQ_SENT, E.TIMEOUT): Rule("retry_or_unreachable", (S.SIDR_REQ_SENT, S.CLOSED)),
    (S.DREQ_SENT, E.TIMEOUT): Rule("retry_or_timewait", (S.DREQ_SENT, S.TIMEWAIT),
                                   "cma_ib_handler: DISCONNECTED even when the DREQ times out"),
    (S.TIMEWAIT, E.TIMEOUT): Rule("timewait_exit", (S.CLOSED,)),
    # calls from rdma_cm (IDLE here: a connection just made for the call)
    (S.IDLE, E.CONNECT): Rule("send_req", (S.REQ_SENT,)),
    (S.IDLE, E.LOOKUP): Rule("send_sidr_req", (S.SIDR_REQ_SENT,)),
    (S.REQ_RCVD, E.ACCEPT): Rule("send_rep", (S.REP_SENT,)),
    (S.MRA_REQ_SENT, E.ACCEPT): Rule("send_rep", (S.REP_SENT,)),
    (S.REP_RCVD, E.ESTABLISH): Rule("send_rtu", (S.ESTABLISHED,)),
    (S.REQ_RCVD, E.REJECT): Rule("send_rej", (S.CLOSED,), "rdma_reject"),
    (S.MRA_REQ_SENT, E.REJECT): Rule("send_rej", (S.CLOSED,), "rdma_reject"),
    (S.REP_RCVD, E.REJECT): Rule("send_rej", (S.CLOSED,), "a REP the QP cannot take"),
    (S.SIDR_REQ_RCVD, E.SIDR_REPLY): Rule("send_sidr_rep", (S.CLOSED,), "rdma_accept / rdma_reject on RDMA_PS_UDP"),
    (S.IDLE, E.SIDR_REPLY): Rule("send_sidr_rep", (S.CLOSED,), "a look-up refused before it is kept"),
    (S.ESTABLISHED, E.DISCONNECT): Rule("send_dreq", (S.DREQ_SENT,)),
    (S.DREQ_RCVD, E.DISCONNECT): Rule("send_drep", (S.TIMEWAIT,), "the peer's DREQ came first: answer it now"),
    (S.REQ_RCVD, E.DISCONNECT): Rule("reject_req", (S.CLOSED,), "REJ 28 to a REQ not yet answered"),
    (S.MRA_REQ_SENT, E.DISCONNECT): Rule("reject_req", (S.CLOSED,), "REJ 28 to a REQ not yet answered"),
    (S.REQ_SENT, E.DISCONNECT): Rule("abandon", (S.CLOSED,), "nothing sent: the connection is forgotten"),
    (S.REP_SENT, E.DISCONNECT): Rule("abandon", (S.CLOSED,), "nothing sent: the connection is forgotten"),
    (S.REP_RCVD, E.DISCONNECT): Rule("abandon", (S.CLOSED,), "nothing sent: the connection is forgotten"),
}
for _s in State:  # a REJ ends every connection still alive (cm_rej_handler)
    if _s not in (S.IDLE, S.TIMEWAIT, S.CLOSED):
        TABLE[(_s, E.REJ)] = Rule("rej", (S.CLOSED,))
for _s in (S.REP_SENT, S.ESTABLISHED, S.DREQ_SENT, S.DREQ_RCVD, S.REP_RCVD, S.SIDR_REQ_RCVD, S.TIMEWAIT):
    # a REQ repeating a connection past its answer (cm_dup_req_handler: the REP has its own retries)
    TABLE[(_s, E.REQ)] = Rule(DUPLICATE, (), "a REQ of a connection already answered")

#: What every pair not in :data:`TABLE` does, per event.
OTHERWISE: dict[Event, Rule] = {
    E.REQ: Rule(DUPLICATE, (), "a REQ of a connection already answered"),
    E.REP: Rule(DROP, (), "REP for connection 0x{cid:08x} in state {state}"),
    E.RTU: Rule(DROP, (), "RTU for no connection waiting for one ({state})"),
    E.REJ: Rule(DROP, (), "REJ for no connection ({state})"),
    E.MRA: Rule(DROP, (), "MRA for no connection waiting for an answer ({state})"),
    E.DREQ: Rule(DROP, (), "DREQ in state {state}"),
    E.DREP: Rule(DROP, (), "DREP for no DREQ ({state})"),
    E.SIDR_REQ: Rule(DROP, (), "SIDR_REQ matched to a connection in state {state} (only a pending look-up, "
                               "SIDR_REQ_RCVD, is matched)"),
    E.SIDR_REP: Rule(DROP, (), "SIDR_REP for no SIDR_REQ ({state})"),
    E.TIMEOUT: Rule(IGNORE, (), "no timer runs in state {state}"),
    E.CONNECT: Rule(REFUSE, (), "connect: connection 0x{lid:08x} is {state}, not new"),
    E.LOOKUP: Rule(REFUSE, (), "sidr_request: connection 0x{lid:08x} is {state}, not new"),
    E.ACCEPT: Rule(REFUSE, (), "accept: connection 0x{lid:08x} is {state}, not waiting for an answer"),
    E.REJECT: Rule(REFUSE, (), "reject: connection 0x{lid:08x} is {state}: no REQ or REP waiting for an answer"),
    E.SIDR_REPLY: Rule(REFUSE, (), "sidr_reply: connection 0x{lid:08x} is {state}: no SIDR_REQ to answer"),
    E.ESTABLISH: Rule(REFUSE, (), "establish: connection 0x{lid:08x} is {state}, not REP received"),
    E.DISCONNECT: Rule(IGNORE, (), "already disconnecting or closed ({state}): nothing to do, as rdma_disconnect"),
}


def rule(state: State, event: Event) -> Rule:
    """What ``event`` does to a connection in ``state``: its entry in :data:`TABLE`, else the event's refusal."""
    return TABLE.get((state, event)) or OTHERWISE[event]


def edges() -> list[tuple[str, str, str]]:
    """``(from, to, event)`` for every transition the table makes: the CM state diagram's edges."""
    out: list[tuple[str, str, str]] = []
    for (s, ev), r in TABLE.items():
        if r.do in REFUSALS:
            continue
        for to in r.to:
            out.append((s.name, to.name, ev.value))
    return out


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
        self.agent.dispatch(E.ACCEPT, self, local_qpn=local_qpn, starting_psn=starting_psn,
                            responder_resources=responder_resources, initiator_depth=initiator_depth,
                            rnr_retry_count=rnr_retry_count, srq=srq, private_data=private_data)

    def reject(self, reason: int = w.REJ_CONSUMER_DEFINED, private_data: bytes = b"") -> None:
        """A REJ of the REQ (passive) or the REP (active) not yet answered; the connection closes."""
        self.agent.dispatch(E.REJECT, self, reason=reason, private_data=private_data)

    def establish(self) -> None:
        """Active side, after the REP: send the RTU (the QP is in RTS now) and be established."""
        self.agent.dispatch(E.ESTABLISH, self)

    def disconnect(self, private_data: bytes = b"") -> None:
        """``rdma_disconnect``: a DREQ from ESTABLISHED, the DREP when the peer's DREQ came first."""
        self.agent.dispatch(E.DISCONNECT, self, private_data=private_data)

    def sidr_reply(self, qpn: int, qkey: int, status: int, private_data: bytes = b"") -> None:
        """Passive side of a SIDR_REQ: the SIDR_REP (``rdma_accept``/``rdma_reject`` on RDMA_PS_UDP)."""
        self.agent.dispatch(E.SIDR_REPLY, self, qpn=qpn, qkey=qkey, status=status, private_data=private_data)

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
        self.agent.dispatch(E.TIMEOUT, self)

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


class CMTableError(AssertionError):
    """An action left a connection in a state its table entry does not list (a bug here, never the peer's)."""


# ---------------------------------------------------------------------- the actions TABLE names
# Each takes (agent, connection or None, message or None, source GID, call arguments) and returns the
# connection the event concerned afterwards (a new one for a REQ or SIDR_REQ, None if nothing is kept).
# What it tells rdma_cm (agent.notify) is delivered after the table's check of the state it left: the
# handler may move the connection on at once (a REP's handler sends the RTU).
Action = Callable[["CMAgent", "CMConn | None", "w.CMMessage | None", int, dict[str, Any]], "CMConn | None"]


def _need(conn: CMConn | None) -> CMConn:
    assert conn is not None, "the table gives this action only to a matched connection"
    return conn


def _msg(msg: w.CMMessage | None) -> w.CMMessage:
    assert msg is not None, "the table gives this action only to a message"
    return msg


def _a_new_req(agent: CMAgent, conn: CMConn | None, msg: w.CMMessage | None, src: int,
               kw: dict[str, Any]) -> CMConn | None:
    msg = _msg(msg)
    body = msg.body
    assert isinstance(body, w.CMReq)
    stale = agent.by_remote_qpn.get((body.local_qpn, src))
    if stale is not None and stale.state not in (State.TIMEWAIT, State.CLOSED):
        agent.send(src, w.build_rej(msg, w.REJ_STALE_CONN))
        if stale.state == State.ESTABLISHED:
            stale.disconnect()
            agent.notify(stale, "disconnected", None, stale=True)
        return None
    if body.transport_service_type != w.TST_RC:
        agent.send(src, w.build_rej(msg, w.REJ_INVALID_TRANSPORT_TYPE))
        return None
    factory = agent.listeners.get(body.service_id)
    if factory is None:
        if agent.shared is not None and agent.shared.listened_elsewhere(body.service_id):
            return None  # another process of this device listens on it: its CM answers
        agent.send(src, w.build_rej(msg, w.REJ_INVALID_SERVICE_ID))
        return None
    new = CMConn(agent, agent.new_id(), _NoHandler(), active=False, started_ns=agent.dev.now)
    new.remote_id, new.remote_gid, new.remote_qpn = body.local_comm_id, src, body.local_qpn
    new.local_gid, new.service_id, new.req, new.tid = agent.dev.gids[1], body.service_id, msg, msg.tid
    new.timeout_ms = cm_ms(body.local_cm_response_timeout)
    handler = factory(new, msg)
    if handler is None:  # the listener refused it (e.g. a malformed cma_hdr): it has sent the REJ
        return None
    new.handler = handler
    agent.conns[new.local_id] = new
    agent.by_remote[(new.remote_id, src)] = new
    agent.by_remote_qpn[(new.remote_qpn, src)] = new
    new._set(State.REQ_RCVD)
    agent.notify(new, "req", msg)
    return new


def _a_mra_dup_req(agent: CMAgent, conn: CMConn | None, msg: w.CMMessage | None, src: int,
                   kw: dict[str, Any]) -> CMConn | None:
    conn = _need(conn)
    agent.counters["cm_rx_duplicates"] += 1
    agent.send(src, w.build_mra(_msg(msg), local_comm_id=conn.local_id, service_timeout=MRA_SERVICE_TIMEOUT))
    conn._set(State.MRA_REQ_SENT)
    return conn


def _a_rep(agent: CMAgent, conn: CMConn | None, msg: w.CMMessage | None, src: int,
           kw: dict[str, Any]) -> CMConn | None:
    conn, msg = _need(conn), _msg(msg)
    body = msg.body
    assert isinstance(body, w.CMRep)
    stale = agent.by_remote_qpn.get((body.local_qpn, src))
    if stale is not None and stale is not conn and stale.state not in (State.TIMEWAIT, State.CLOSED):
        agent.send(src, w.build_rej(msg, w.REJ_STALE_CONN, local_comm_id=conn.local_id))
        conn._close()
        agent.notify(conn, "rejected", msg, reason=w.REJ_STALE_CONN, by="this side")
        return conn
    conn._cancel()
    conn.rep, conn.remote_id, conn.remote_qpn = msg, body.local_comm_id, body.local_qpn
    agent.by_remote[(conn.remote_id, src)] = conn
    agent.by_remote_qpn[(conn.remote_qpn, src)] = conn
    conn._set(State.REP_RCVD)
    agent.notify(conn, "rep", msg)
    return conn


def _a_mra_dup_rep(agent: CMAgent, conn: CMConn | None, msg: w.CMMessage | None, src: int,
                   kw: dict[str, Any]) -> CMConn | None:
    conn = _need(conn)
    agent.counters["cm_rx_duplicates"] += 1
    agent.send(src, w.build_mra(_msg(msg), local_comm_id=conn.local_id, service_timeout=MRA_SERVICE_TIMEOUT))
    return conn


def _a_resend_rtu(agent: CMAgent, conn: CMConn | None, msg: w.CMMessage | None, src: int,
                  kw: dict[str, Any]) -> CMConn | None:
    conn = _need(conn)
    if not conn.rtu:  # the passive side of an established connection sent no RTU: nothing to repeat
        agent._dropped(f"REP in state {conn.state.value}")
        return conn
    agent.counters["cm_rx_duplicates"] += 1
    agent.send_raw(conn.remote_gid, conn.rtu)
    return conn


def _a_rtu(agent: CMAgent, conn: CMConn | None, msg: w.CMMessage | None, src: int,
           kw: dict[str, Any]) -> CMConn | None:
    conn = _need(conn)
    conn._cancel()
    conn._set(State.ESTABLISHED)
    agent.notify(conn, "established", msg)
    return conn


def _a_rej(agent: CMAgent, conn: CMConn | None, msg: w.CMMessage | None, src: int,
           kw: dict[str, Any]) -> CMConn | None:
    conn, msg = _need(conn), _msg(msg)
    body = msg.body
    assert isinstance(body, w.CMRej)
    conn._close()
    agent.notify(conn, "rejected", msg, reason=body.reason, by="peer")
    return conn


def _a_mra(agent: CMAgent, conn: CMConn | None, msg: w.CMMessage | None, src: int,
           kw: dict[str, Any]) -> CMConn | None:
    conn, msg = _need(conn), _msg(msg)
    body = msg.body
    assert isinstance(body, w.CMMra)
    ms = cm_ms(body.service_timeout) + cm_ms(PACKET_LIFE_TIME + 1)
    conn._arm(ms)
    conn.tries = conn.retries + 1  # after an MRA, the next expiry is final (cm_mra_handler: no resend)
    conn.timeout_ms = ms
    agent.notify(conn, "mra", msg, timeout_ms=ms)
    return conn


def _a_drep_unknown(agent: CMAgent, conn: CMConn | None, msg: w.CMMessage | None, src: int,
                    kw: dict[str, Any]) -> CMConn | None:
    agent.send(src, w.build_drep(_msg(msg)))
    return conn


def _a_drep_again(agent: CMAgent, conn: CMConn | None, msg: w.CMMessage | None, src: int,
                  kw: dict[str, Any]) -> CMConn | None:
    agent.counters["cm_rx_duplicates"] += 1
    agent.send(src, w.build_drep(_msg(msg)))
    return conn


def _a_dreq_crossed(agent: CMAgent, conn: CMConn | None, msg: w.CMMessage | None, src: int,
                    kw: dict[str, Any]) -> CMConn | None:
    conn = _need(conn)
    agent.send(src, w.build_drep(_msg(msg)))
    conn._timewait()
    agent.notify(conn, "disconnected", msg)
    return conn


def _a_dreq(agent: CMAgent, conn: CMConn | None, msg: w.CMMessage | None, src: int,
            kw: dict[str, Any]) -> CMConn | None:
    conn = _need(conn)
    conn.last = w.build_drep(_msg(msg)).encode()  # sent when the application calls disconnect (rdma_disconnect)
    conn._cancel()
    conn._set(State.DREQ_RCVD)
    agent.notify(conn, "disconnected", msg)
    return conn


def _a_drep(agent: CMAgent, conn: CMConn | None, msg: w.CMMessage | None, src: int,
            kw: dict[str, Any]) -> CMConn | None:
    conn = _need(conn)
    conn._timewait()
    agent.notify(conn, "disconnected", msg)
    return conn


def _a_new_sidr_req(agent: CMAgent, conn: CMConn | None, msg: w.CMMessage | None, src: int,
                    kw: dict[str, Any]) -> CMConn | None:
    msg = _msg(msg)
    body = msg.body
    assert isinstance(body, w.CMSidrReq)
    new = CMConn(agent, agent.new_id(), _NoHandler(), active=False, started_ns=agent.dev.now)
    new.remote_id, new.remote_gid, new.service_id, new.req = body.request_id, src, body.service_id, msg
    factory = agent.listeners.get(body.service_id)
    if factory is None:
        if agent.shared is not None and agent.shared.listened_elsewhere(body.service_id):
            return None
        new.sidr_reply(0, 0, SIDR_UNSUPPORTED)
        return None
    handler = factory(new, msg)
    if handler is None:
        return None
    new.handler = handler
    agent.conns[new.local_id] = new
    agent.by_remote[(new.remote_id, src)] = new
    new._set(State.SIDR_REQ_RCVD)
    agent.notify(new, "sidr_req", msg)
    return new


def _a_sidr_rep(agent: CMAgent, conn: CMConn | None, msg: w.CMMessage | None, src: int,
                kw: dict[str, Any]) -> CMConn | None:
    conn, msg = _need(conn), _msg(msg)
    body = msg.body
    assert isinstance(body, w.CMSidrRep)
    conn._close()
    agent.notify(conn, "sidr_rep", msg, status=body.status, qpn=body.qpn, qkey=body.qkey)
    return conn


def _retry(agent: CMAgent, conn: CMConn) -> bool:
    """Resend the last MAD if tries are left (``mad.c retry_send``)."""
    if conn.tries > conn.retries:
        return False
    conn.tries += 1
    agent.counters["cm_tx_retries"] += 1
    agent.send_raw(conn.remote_gid, conn.last)
    conn._arm(conn.timeout_ms)
    return True


def _a_retry_or_unreachable(agent: CMAgent, conn: CMConn | None, msg: w.CMMessage | None, src: int,
                            kw: dict[str, Any]) -> CMConn | None:
    conn = _need(conn)
    if _retry(agent, conn):
        return conn
    waited, state = conn.tries * conn.timeout_ms, conn.state
    conn._close()
    agent.notify(conn, "unreachable", None, message=conn.last_name, tries=conn.tries,
                          waited_ms=waited, state=state.value)
    return conn


def _a_retry_or_timewait(agent: CMAgent, conn: CMConn | None, msg: w.CMMessage | None, src: int,
                         kw: dict[str, Any]) -> CMConn | None:
    conn = _need(conn)
    if _retry(agent, conn):
        return conn
    conn._timewait()
    agent.notify(conn, "disconnected", None, timed_out=True)
    return conn


def _a_timewait_exit(agent: CMAgent, conn: CMConn | None, msg: w.CMMessage | None, src: int,
                     kw: dict[str, Any]) -> CMConn | None:
    conn = _need(conn)
    conn._set(State.CLOSED)
    agent.forget(conn)
    agent.notify(conn, "timewait_exit", None)
    return conn


def _a_send_req(agent: CMAgent, conn: CMConn | None, msg: w.CMMessage | None, src: int,
                kw: dict[str, Any]) -> CMConn | None:
    conn, msg = _need(conn), _msg(msg)
    body = msg.body
    assert isinstance(body, w.CMReq)
    conn.req = msg
    conn.local_qpn = body.local_qpn
    conn.service_id = body.service_id
    conn._send(msg, State.REQ_SENT, req_timeout_ms(body.remote_cm_response_timeout), body.max_cm_retries)
    return conn


def _a_send_sidr_req(agent: CMAgent, conn: CMConn | None, msg: w.CMMessage | None, src: int,
                     kw: dict[str, Any]) -> CMConn | None:
    conn, msg = _need(conn), _msg(msg)
    conn._send(msg, State.SIDR_REQ_SENT, cm_ms(SIDR_TIMEOUT), MAX_CM_RETRIES)
    return conn


def _a_send_rep(agent: CMAgent, conn: CMConn | None, msg: w.CMMessage | None, src: int,
                kw: dict[str, Any]) -> CMConn | None:
    conn = _need(conn)
    if conn.req is None:
        raise CMStateError(f"accept: connection 0x{conn.local_id:08x} has no REQ to answer")
    conn.local_qpn = kw["local_qpn"]
    rep = w.build_rep(conn.req, local_comm_id=conn.local_id, local_ca_guid=agent.guid, target_ack_delay=15, **kw)
    req = conn.req.body
    assert isinstance(req, w.CMReq)
    conn.rep = rep
    conn._send(rep, State.REP_SENT, cm_ms(req.local_cm_response_timeout), req.max_cm_retries)
    return conn


def _a_send_rtu(agent: CMAgent, conn: CMConn | None, msg: w.CMMessage | None, src: int,
                kw: dict[str, Any]) -> CMConn | None:
    conn = _need(conn)
    if conn.rep is None:
        raise CMStateError(f"establish: connection 0x{conn.local_id:08x} has no REP to answer")
    rtu = w.build_rtu(conn.rep)
    conn.rtu = rtu.encode()
    agent.send(conn.remote_gid, rtu)
    conn._cancel()
    conn._set(State.ESTABLISHED)
    return conn


def _a_send_dreq(agent: CMAgent, conn: CMConn | None, msg: w.CMMessage | None, src: int,
                 kw: dict[str, Any]) -> CMConn | None:
    conn = _need(conn)
    dreq = w.build_dreq(conn.local_id, conn.remote_id, conn.remote_qpn, private_data=kw.get("private_data", b""))
    conn._send(dreq, State.DREQ_SENT, conn.timeout_ms or req_timeout_ms(), MAX_CM_RETRIES)
    return conn


def _a_send_drep(agent: CMAgent, conn: CMConn | None, msg: w.CMMessage | None, src: int,
                 kw: dict[str, Any]) -> CMConn | None:
    conn = _need(conn)
    agent.send_raw(conn.remote_gid, conn.last)
    conn._timewait()
    return conn


def _a_send_rej(agent: CMAgent, conn: CMConn | None, msg: w.CMMessage | None, src: int,
                kw: dict[str, Any]) -> CMConn | None:
    conn = _need(conn)
    msg = conn.req if not conn.active else conn.rep
    if msg is None:
        raise CMStateError(f"reject: connection 0x{conn.local_id:08x} has no REQ or REP to reject")
    agent.send(conn.remote_gid, w.build_rej(msg, kw.get("reason", w.REJ_CONSUMER_DEFINED), local_comm_id=conn.local_id,
                                            private_data=kw.get("private_data", b"")))
    conn._close()
    return conn


def _a_send_sidr_rep(agent: CMAgent, conn: CMConn | None, msg: w.CMMessage | None, src: int,
                     kw: dict[str, Any]) -> CMConn | None:
    conn = _need(conn)
    req = conn.req
    if req is None or not isinstance(req.body, w.CMSidrReq):
        raise CMStateError("sidr_reply: no SIDR_REQ to answer")
    rep = w.CMSidrRep(request_id=req.body.request_id, status=kw["status"], qpn=kw["qpn"],
                      service_id=req.body.service_id, qkey=kw["qkey"])
    agent.send(conn.remote_gid, w.cm_mad(rep, req.tid, kw.get("private_data", b"")))
    conn._close()
    return conn


def _a_reject_req(agent: CMAgent, conn: CMConn | None, msg: w.CMMessage | None, src: int,
                  kw: dict[str, Any]) -> CMConn | None:
    conn = _need(conn)
    conn.reject(w.REJ_CONSUMER_DEFINED)
    return conn


def _a_abandon(agent: CMAgent, conn: CMConn | None, msg: w.CMMessage | None, src: int,
               kw: dict[str, Any]) -> CMConn | None:
    conn = _need(conn)
    conn._close()
    return conn


#: The actions :data:`TABLE` names.
ACTIONS: dict[str, Action] = {name[3:]: fn for name, fn in list(globals().items()) if name.startswith("_a_")}

Listener = Callable[[CMConn, w.CMMessage], bool]

_EVENT_OF_ATTR = {CM_ATTR_REQ: E.REQ, CM_ATTR_REP: E.REP, CM_ATTR_RTU: E.RTU, CM_ATTR_REJ: E.REJ,
                  CM_ATTR_MRA: E.MRA, CM_ATTR_DREQ: E.DREQ, CM_ATTR_DREP: E.DREP, CM_ATTR_SIDR_REQ: E.SIDR_REQ,
                  CM_ATTR_SIDR_REP: E.SIDR_REP}


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
        #: what the action under way will tell the handlers (see dispatch)
        self._events: list[tuple[CMConn, str, w.CMMessage | None, dict[str, Any]]] = []

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
        self.dispatch(E.CONNECT, conn, req(conn.local_id))
        return conn

    def sidr_request(self, handler: CMHandler, dst_gid: int, service_id: int, private_data: bytes) -> CMConn:
        conn = self.new_conn(handler, active=True)
        conn.remote_gid = dst_gid
        conn.service_id = service_id
        body = w.CMSidrReq(request_id=conn.local_id, service_id=service_id)
        self.dispatch(E.LOOKUP, conn, w.cm_mad(body, w.default_tid(conn.local_id), private_data))
        return conn

    # ------------------------------------------------------------------ the one dispatch
    def dispatch(self, event: Event, conn: CMConn | None, msg: w.CMMessage | None = None, src: int = 0,
                 **kw: Any) -> CMConn | None:
        """Apply ``TABLE[(state, event)]`` to ``conn`` (None: no connection matched, state IDLE)."""
        state = conn.state if conn is not None else State.IDLE
        r = rule(state, event)
        if r.do in REFUSALS:
            why = r.why.format(state=state.value, lid=conn.local_id if conn is not None else 0,
                               cid=(msg.remote_comm_id or 0) if msg is not None else 0)
            if r.do == DROP:
                self._dropped(why)
            elif r.do == DUPLICATE:
                self.counters["cm_rx_duplicates"] += 1
            elif r.do == REFUSE:
                raise CMStateError(why)
            return conn
        outer, self._events = self._events, []
        try:
            after = ACTIONS[r.do](self, conn, msg, src, kw)
            events = self._events
        finally:
            self._events = outer
        got = after.state if after is not None else State.IDLE
        if got not in r.to:
            raise CMTableError(f"{event.value} in {state.name}: action {r.do} left {got.name}, the table says "
                               f"{' or '.join(s.name for s in r.to)}")
        for c, kind, m, info in events:
            c.handler.cm_event(c, kind, m, **info)
        return after

    def notify(self, conn: CMConn, kind: str, msg: w.CMMessage | None, **info: Any) -> None:
        """Tell ``conn``'s handler ``kind`` once the action under way has been checked against the table."""
        self._events.append((conn, kind, msg, info))

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
        event = _EVENT_OF_ATTR.get(hdr.attr_id)
        if event is None:
            self._dropped(f"CM attribute {hdr.attr_id:#x} refused (LAP/APR: no alternate paths on RoCE)")
            return
        matched = self.match(event, msg, src_gid)
        if isinstance(matched, str):
            self._dropped(matched)
            return
        self.dispatch(event, matched, msg, src_gid)

    def match(self, event: Event, msg: w.CMMessage, src: int) -> CMConn | None | str:
        """The connection a message is for (None: none, so IDLE), or why it is dropped before any state."""
        body = msg.body
        if event == E.REQ:
            assert isinstance(body, w.CMReq)
            return self.by_remote.get((body.local_comm_id, src))
        if event == E.SIDR_REQ:  # it repeats a pending look-up, or it is a new one (whatever else has its ID)
            assert isinstance(body, w.CMSidrReq)
            dup = self.by_remote.get((body.request_id, src))
            lookup = dup is not None and dup.req is not None and isinstance(dup.req.body, w.CMSidrReq)
            return dup if lookup else None
        if event == E.SIDR_REP:
            assert isinstance(body, w.CMSidrRep)
            return self.conns.get(body.request_id)
        rid = msg.remote_comm_id
        conn = None if rid is None else self.conns.get(rid)
        if event == E.REJ and conn is None:  # a REJ of a REQ we never got a comm ID back for: match the REQ's TID
            conn = next((c for c in self.conns.values() if c.active and c.tid == msg.tid
                         and c.remote_gid == src), None)
        if event == E.DREQ and conn is not None:
            assert isinstance(body, w.CMDreq)
            if body.remote_qpn_eecn != conn.local_qpn:  # cm_dreq_handler: not for this connection
                return f"DREQ naming QPN {body.remote_qpn_eecn:#x}, not this connection's {conn.local_qpn:#x}"
        return conn

    def _dropped(self, why: str, packet_id: int | None = None) -> None:
        self.counters["cm_rx_dropped"] += 1
        self.log.append(why)
        if self.dev.tracing:
            if packet_id is not None:
                self.dev.trace(GSI_QPN, "dropped", packet_id=packet_id, reason=why)
            else:
                self.dev.trace(GSI_QPN, "dropped", reason=why)


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
