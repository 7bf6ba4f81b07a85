"""The IB CM's state machine as one table, and the numbers it runs on (Linux 6.1 ``core/cm.c``).

:data:`TABLE` is ``(State, Event) -> Rule(action, next states, why)``: the events are the CM
messages, the connection's timer and the calls from rdma_cm; the states are ib_cm's (IBA Vol 1
12.6).  A pair the table does not list is the event's stated refusal (:data:`OTHERWISE`, looked up
by :func:`rule`): a message is dropped and counted, a repeated one counted as a duplicate, a call
refused, a timer or a second disconnect ignored.  The actions the table names are in
:mod:`rdmalab.verbs.engine.ibcm_actions`; the connection they act on in
:mod:`rdmalab.verbs.engine.ibcm_conn`; the agent that dispatches events through the table, and QP1,
in :mod:`rdmalab.verbs.engine.ibcm` (which re-exports every name here).

:class:`Rule` and the refusal names are shared with the iWARP connection's table
(:mod:`rdmalab.verbs.engine.mpacm`).  :func:`edges` gives the diagram its edges
(``rdmalab.viz.states.cm_state_diagram``), so the picture is drawn from the table itself.

The timeouts are ``cm_convert_to_ms`` (``cm.c`` l.918, :func:`cm_ms`) of the codes rdma_cm uses on
RoCE (``cma.c``: packet life time 18, CM response timeout 20, MRA service timeout 24).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

GSI_QPN = 1  # QP1, the GSI: where CM MADs go
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

