"""One IB CM connection (a ``cm_id``), what it needs from its agent, and what it tells rdma_cm.

* :class:`CMConn` is the record ib_cm keeps per connection or SIDR look-up: its state (a
  :class:`~rdmalab.verbs.engine.ibcm_table.State`), the comm IDs, QPNs and GIDs of both ends, the
  messages exchanged so far, the MAD its timer resends and the timer itself.  Its public methods are
  the calls of rdma_cm (accept, reject, establish, disconnect, sidr_reply), each one event given to
  the agent's dispatch; its private ones the moves every action makes (send and arm the timer,
  timewait, close).
* :class:`CMAgentLike` is what a connection and the table's actions
  (:mod:`rdmalab.verbs.engine.ibcm_actions`) use of the agent
  (:class:`rdmalab.verbs.engine.ibcm.CMAgent`): its device, its indexes of connections and
  listeners, its counters, sending, dispatching and telling the handler.  The actions need nothing
  else, so they are written and tested against this interface, not the agent's module.
* :class:`CMHandler` is what rdma_cm gives for each connection (``rdmalab.verbs.cmid_ib``): one
  method, the events; :class:`NoHandler` stands in until a listener has made the real one.
* :class:`CMStateError` is a call the state refuses; :class:`CMTableError` an action that left a
  state its table entry does not list.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from rdmalab.verbs.engine.ibcm_table import GSI_QPN, PACKET_LIFE_TIME, Event, State, cm_ms
from rdmalab.wire import cm as w

E = Event


class CMHandler(Protocol):
    """What the rdma_cm layer gives the agent for each connection: one method, the events."""

    def cm_event(self, conn: CMConn, kind: str, msg: w.CMMessage | None, **info: Any) -> None:
        """``kind``: req, rep, established, rejected, unreachable, mra, dreq, disconnected,
        timewait_exit, sidr_rep."""


#: what a listener gives the agent for its service ID: it makes the handler of a REQ or SIDR_REQ for it,
#: or answers the request itself (a REJ, a SIDR_REP refusing) and gives None
Listener = Callable[["CMConn", w.CMMessage], "CMHandler | None"]


class CMAgentLike(Protocol):
    """What a :class:`CMConn` and the table's actions use of their agent (``ibcm.CMAgent`` is it)."""

    #: the soft device: ``now``, ``gids``, ``rng``, ``schedule``, ``tracing``/``trace``
    dev: Any
    guid: int
    #: connections by local comm ID, by (remote comm ID, remote GID), by (remote QPN, remote GID)
    conns: dict[int, CMConn]
    by_remote: dict[tuple[int, int], CMConn]
    by_remote_qpn: dict[tuple[int, int], CMConn]
    #: service ID -> what makes the handler of a REQ or SIDR_REQ for it (None: it refused, and answered)
    listeners: dict[int, Listener]
    counters: dict[str, int]
    #: the other processes sharing the device (rdmalab.fabric.shared.SharedDevice), else None
    shared: Any

    def new_id(self) -> int: ...

    def forget(self, conn: CMConn) -> None: ...

    def unlink_remote(self, conn: CMConn) -> None: ...

    def send(self, dst_gid: int, msg: w.CMMessage) -> None: ...

    def send_raw(self, dst_gid: int, mad: bytes) -> None: ...

    def notify(self, conn: CMConn, kind: str, msg: w.CMMessage | None, **info: Any) -> None: ...

    def dispatch(self, event: Event, conn: CMConn | None, msg: w.CMMessage | None = None, src: int = 0,
                 **kw: Any) -> CMConn | None: ...

    def dropped(self, why: str, packet_id: int | None = None) -> None: ...


class NoHandler:
    """The handler of a connection a listener has not taken yet: it hears nothing."""

    def cm_event(self, conn: CMConn, kind: str, msg: w.CMMessage | None, **info: Any) -> None:
        pass


@dataclass(eq=False)
class CMConn:
    """One connection (or one SIDR look-up) as ib_cm keeps it: a ``cm_id``."""

    agent: CMAgentLike
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
