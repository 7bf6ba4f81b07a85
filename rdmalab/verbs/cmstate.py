"""rdma_cm's identifiers as a table, the transport interface under them, and the one wait for a CM event.

Shared by :mod:`rdmalab.verbs.cmid` (the pyverbs API), :mod:`rdmalab.verbs.cmid_ib` (RoCE's CM MADs) and
:mod:`rdmalab.verbs.cmid_iwarp` (iWARP's TCP and MPA), which take it from here rather than from one another.

* :class:`CMIDState` is what ``CMID.state`` holds (the strings it always held: they are what a
  learner reads in ``repr(cmid)`` and in the lab's connection tables).  :data:`TRANSITIONS` is
  ``(state, event) -> next state``; a ``CMID`` changes state only through ``CMID._move(event)``,
  which refuses a pair that is not in the table with ``EINVAL``, naming both.  The states follow
  the kernel's ``enum rdma_cm_state`` (``cma_priv.h``: IDLE, ADDR_RESOLVED, ROUTE_RESOLVED,
  CONNECT, DISCONNECT, LISTEN), with CONNECT split into what rdma_cm's events tell apart
  (connect request, connecting, accepted, established) and its failures named.
* :class:`CMTransport` is what a CMID asks of its device's connection manager: IB CM MADs
  (``cmid_ib._IBTransport``) or TCP and MPA (``cmid_iwarp.IWTransport``).
* :func:`wait_event` waits for a CM event of one CMID (or a connection request on a listener), and
  turns the wrong one into :class:`CMEventError` saying why in words.  :func:`owner` is the CMID that
  speaks for another (the one a program made from its CONNECT_REQUEST event).
"""

from __future__ import annotations

import enum
import errno
import os
from typing import Any, Protocol

from rdmalab.verbs.cm_enums import rdma_cm_event_type
from rdmalab.verbs.pyverbs_error import PyverbsRDMAError
from rdmalab.wire.cm import rej_reason_name

EV = rdma_cm_event_type


class CMIDState(enum.StrEnum):
    IDLE = "idle"
    ADDR_RESOLVED = "addr resolved"
    ROUTE_RESOLVED = "route resolved"
    LISTEN = "listen"
    CONNECT_REQUEST = "connect request"
    CONNECTING = "connecting"
    ACCEPTED = "accepted"
    ESTABLISHED = "established"
    REJECTED = "rejected"
    UNREACHABLE = "unreachable"
    ERROR = "error"
    DISCONNECTING = "disconnecting"
    DISCONNECTED = "disconnected"


class CMIDEvent(enum.Enum):
    """A call on the CMID (``name()``) or an event its connection manager reports (capitals)."""

    RESOLVE_ADDR = "resolve_addr()"
    RESOLVE_ROUTE = "resolve_route()"
    LISTEN = "listen()"
    REQUEST = "CONNECT_REQUEST"  # the child CMID a listener makes for a request
    CONNECT = "connect()"
    ACCEPT = "accept()"
    REJECT = "reject()"
    ESTABLISHED = "ESTABLISHED"  # also rdma_establish() after CONNECT_RESPONSE, which reports no event
    REJECTED = "REJECTED"
    UNREACHABLE = "UNREACHABLE"
    CONNECT_ERROR = "CONNECT_ERROR"
    DISCONNECT = "disconnect()"
    DISCONNECTED = "DISCONNECTED"


St, Ev = CMIDState, CMIDEvent
_LIVE = (St.CONNECT_REQUEST, St.CONNECTING, St.ACCEPTED, St.ESTABLISHED, St.DISCONNECTING, St.DISCONNECTED)

#: ``(state, event) -> next state``; any other pair is refused (``CMID._move``).
TRANSITIONS: dict[tuple[CMIDState, CMIDEvent], CMIDState] = {
    (St.IDLE, Ev.RESOLVE_ADDR): St.ADDR_RESOLVED,
    (St.ADDR_RESOLVED, Ev.RESOLVE_ROUTE): St.ROUTE_RESOLVED,
    (St.IDLE, Ev.LISTEN): St.LISTEN,
    (St.IDLE, Ev.REQUEST): St.CONNECT_REQUEST,
    (St.ROUTE_RESOLVED, Ev.CONNECT): St.CONNECTING,
    (St.CONNECT_REQUEST, Ev.ACCEPT): St.ACCEPTED,  # IB RC: the REP is out, the RTU to come
    (St.CONNECT_REQUEST, Ev.REJECT): St.REJECTED,
    (St.CONNECTING, Ev.ESTABLISHED): St.ESTABLISHED,  # the REP (RTU sent), a SIDR_REP, the MPA Reply
    (St.ACCEPTED, Ev.ESTABLISHED): St.ESTABLISHED,  # the RTU; at once on iWARP and for SIDR
    (St.CONNECTING, Ev.UNREACHABLE): St.UNREACHABLE,  # the REQ's retries, no TCP connection, no MPA Reply
    (St.ACCEPTED, Ev.UNREACHABLE): St.UNREACHABLE,  # the REP's retries
    (St.CONNECTING, Ev.CONNECT_ERROR): St.ERROR,  # a REP or MPA Reply the QP cannot take
    (St.DISCONNECTING, Ev.DISCONNECTED): St.DISCONNECTED,
    (St.DISCONNECTED, Ev.DISCONNECT): St.DISCONNECTED,  # the peer's came first: ours answers it
    # a failed connection may be disconnected: nothing happens (rdma_disconnect then is harmless)
    (St.REJECTED, Ev.DISCONNECT): St.REJECTED,
    (St.UNREACHABLE, Ev.DISCONNECT): St.UNREACHABLE,
    (St.ERROR, Ev.DISCONNECT): St.ERROR,
}
for _s in _LIVE:
    TRANSITIONS[(_s, Ev.REJECTED)] = St.REJECTED  # a REJ ends a connection at any point (cm_rej_handler)
    if _s not in (St.DISCONNECTING, St.DISCONNECTED):
        TRANSITIONS[(_s, Ev.DISCONNECTED)] = St.DISCONNECTED  # the peer's DREQ, a stale connection, TCP closed
        TRANSITIONS[(_s, Ev.DISCONNECT)] = St.DISCONNECTING


def next_state(state: CMIDState, event: CMIDEvent) -> CMIDState:
    """Where ``event`` takes a CMID in ``state``; :class:`PyverbsRDMAError` (EINVAL) if the table has no such move."""
    nxt = TRANSITIONS.get((state, event))
    if nxt is None:
        allowed = sorted({e.value for (s, e) in TRANSITIONS if s == state})
        raise PyverbsRDMAError(f"{event.value} is not allowed on a CMID in state {state.value!r} (there: "
                               f"{', '.join(allowed) or 'nothing'})", errno.EINVAL)
    return nxt


def edges() -> list[tuple[str, str, str]]:
    """``(from, to, event)`` for every transition: the CMID state diagram's edges."""
    return [(s.name, to.name, ev.value) for (s, ev), to in TRANSITIONS.items()]


class CMTransport(Protocol):
    """What a CMID asks of its device's connection manager once addresses are resolved."""

    def listen(self, cmid: Any) -> None: ...

    def unlisten(self, cmid: Any) -> None: ...

    def connect(self, cmid: Any, param: Any) -> None: ...

    def accept(self, cmid: Any, param: Any) -> None: ...

    def reject(self, cmid: Any, private_data: bytes) -> None: ...

    def disconnect(self, cmid: Any) -> None: ...

    def establish(self, cmid: Any) -> None:
        """``rdma_establish``: complete an active connection a CMID without a QP was told of (CONNECT_RESPONSE)."""

    def qp_path(self, cmid: Any) -> dict[str, Any]:
        """What ``init_qp_attr`` needs for RTR and RTS: mtu, ah, dest_qp, rq_psn, sq_psn, resp_res,
        init_depth, timeout, retry, rnr_retry (EINVAL if the connection cannot tell yet)."""


def owner(cmid: Any) -> Any:
    """The CMID that speaks for ``cmid``: the one a program made from its CONNECT_REQUEST event
    (``CMID(event, listen_id=...)`` adopts the listener's child), else ``cmid`` itself."""
    return cmid._adopted_by or cmid if cmid is not None else None


def unreachable_text(info: dict[str, Any]) -> str:
    """Why an UNREACHABLE event came, in words: the CM's REQ (or SIDR_REQ) retries, or on iWARP the
    TCP connection or the MPA Reply that did not come (``why``)."""
    if "tries" not in info and info.get("why"):
        return f"no connection: {info['why']}"
    return (f"no answer to the {info.get('message', 'REQ')} after {info.get('tries', 0)} tries over "
            f"{info.get('waited_ms', 0) / 1000:.1f} s")


def rejection_text(status: int) -> str:
    """A REJECTED event's status in words: an errno (iWARP, negative) or the REJ reason (IB)."""
    if status < 0:
        return f"{errno.errorcode.get(-status, str(-status))} ({os.strerror(-status)})"
    return f"reason {status} ({rej_reason_name(status)})"


class CMEventError(PyverbsRDMAError):
    """Another event came than the one waited for; ``event`` is it (its ``kind``, ``status``, ``info``)."""

    def __init__(self, text: str, err: int, event: Any) -> None:
        super().__init__(text, err)
        self.event = event


def failure_text(ev: Any, what: str, where: str) -> str:
    """``what`` failed because ``ev`` came, in words (REJ reason or errno, retries, the transport's why)."""
    why = ev.info.get("why", "") if ev.info else ""
    if ev.kind == EV.RDMA_CM_EVENT_REJECTED:
        text = f"{what}: the connection to {where} was rejected: {rejection_text(ev.status)}"
    elif ev.kind == EV.RDMA_CM_EVENT_UNREACHABLE:
        text = f"{what}: {where} is unreachable: {unreachable_text(ev.info)}"
    else:
        text = f"{what}: got {_name(ev.kind)} (status {ev.status}) from {where}"
    return text if not why or why in text else f"{text}: {why}"


def _name(kind: int) -> str:
    try:
        return EV(kind).name
    except ValueError:
        return "UNKNOWN EVENT"


def wait_event(channel: Any, cmid: Any, kinds: int | tuple[int, ...], what: str, *, where: str = "",
               timeout_ms: int | None = None, listen: Any = None, skip: tuple[int, ...] = ()) -> Any:
    """The next event of ``cmid`` on ``channel`` (any CMID's if None; with ``listen``, the next
    CONNECT_REQUEST on that listener), skipping kinds in ``skip``; it advances the devices' carriers
    meanwhile.  Not one of ``kinds`` (empty: any): :class:`CMEventError` saying why.  A wait the
    channel says can never end raises its :class:`PyverbsRDMAError`."""
    want = (kinds,) if isinstance(kinds, int) else kinds
    me = owner(cmid)

    def mine(ev: Any) -> bool:
        if listen is not None:
            return bool(ev.kind == EV.RDMA_CM_EVENT_CONNECT_REQUEST and ev.listen is listen)
        if ev.kind in skip:
            return False
        return me is None or owner(ev.cmid) is me

    ev = channel.wait(mine, what=what + (f" on {where}" if where else ""), timeout_ms=timeout_ms)
    if want and ev.kind not in want:
        raise CMEventError(failure_text(ev, what, where), errno.ECONNREFUSED if ev.kind ==
                           EV.RDMA_CM_EVENT_REJECTED else errno.ETIMEDOUT, ev)
    return ev
