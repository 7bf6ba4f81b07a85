"""Every (state, event) pair of the connection managers' tables, walked one by one.

The IB CM, the iWARP connection (MPA) and rdma_cm's CMID states.

The IB CM (``rdmalab.verbs.engine.ibcm_table.TABLE``, run by ``ibcm.CMAgent`` through
``ibcm_actions.ACTIONS``): an agent on a fake device, a connection put in each
state, each message (built with the wire's builders, addressed to it), its timer and each call from
rdma_cm; the expected next state and what went on the wire are written here, independently of the
table, and every other pair must be the event's stated refusal.
"""

from __future__ import annotations

import errno
import random
import re
from typing import Any

import pytest

from rdmalab.verbs import cmid_iwarp
from rdmalab.verbs.cm_enums import rdma_cm_event_type as EV
from rdmalab.verbs.cmid import CMID, CMEventChannel, ConnParam
from rdmalab.verbs.cmstate import TRANSITIONS, CMIDEvent, CMIDState
from rdmalab.verbs.engine import ibcm, ibcm_actions, ibcm_conn, ibcm_table, mpacm
from rdmalab.verbs.pyverbs_error import PyverbsRDMAError
from rdmalab.wire import cm as w

S, E = ibcm_table.State, ibcm_table.Event
PEER_GID = 0xFFFF_0A00_0002
PEER_ID, PEER_QPN, OUR_QPN = 0x1111, 0x22, 0x33
SID = 0x0106_1C06


class _Timer:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class _Dev:
    def __init__(self) -> None:
        self.mac = 0x02_00_00_00_00_01
        self.rng = random.Random(1)
        self.gids = {1: 0xFFFF_0A00_0001}
        self.now = 0
        self.tracing = False
        self.sent: list[str] = []
        self.timers: list[tuple[int, Any, _Timer]] = []

    def schedule(self, ns: int, fn: Any, arg: Any) -> _Timer:
        t = _Timer()
        self.timers.append((ns, fn, t))
        return t

    def transmit(self, p: Any) -> None:
        self.sent.append(w.CMMessage.decode(bytes(p.payload), lenient=True).name)

    def resolve_mac(self, gid: int) -> int:
        return 0


class _Handler:
    def __init__(self) -> None:
        self.events: list[str] = []

    def cm_event(self, conn: ibcm_conn.CMConn, kind: str, msg: Any, **info: Any) -> None:
        self.events.append(kind)


ACTIVE = {S.REQ_SENT, S.REP_RCVD, S.SIDR_REQ_SENT}
SIDR = {S.SIDR_REQ_SENT, S.SIDR_REQ_RCVD}


def _peer_req(comm_id: int = PEER_ID) -> w.CMMessage:
    return w.build_req("10.0.0.2", "10.0.0.1", 40000, 7174, local_comm_id=comm_id, local_qpn=PEER_QPN,
                       starting_psn=1)


def _setup(state: ibcm_table.State, fresh: bool = False) -> tuple[ibcm.CMAgent, ibcm_conn.CMConn | None, _Handler]:
    """An agent with a listener on SID, and (unless IDLE) one connection in ``state``; IDLE and
    ``fresh``: a connection just made, as connect() and sidr_request() make it."""
    dev = _Dev()
    agent = ibcm.CMAgent(dev)
    h = _Handler()
    agent.listeners[SID] = lambda conn, msg: h
    if state == S.IDLE:
        if fresh:
            conn = agent.new_conn(h, active=True)
            conn.remote_gid = PEER_GID
            return agent, conn, h
        return agent, None, h
    conn = agent.new_conn(h, active=state in ACTIVE)
    conn.remote_gid, conn.remote_id, conn.remote_qpn, conn.local_qpn = PEER_GID, PEER_ID, PEER_QPN, OUR_QPN
    if state in SIDR:
        conn.req = w.cm_mad(w.CMSidrReq(request_id=conn.local_id if conn.active else PEER_ID, service_id=SID),
                            w.default_tid(PEER_ID))
    elif conn.active:
        conn.req = w.build_req("10.0.0.1", "10.0.0.2", 40000, 7174, local_comm_id=conn.local_id,
                               local_qpn=OUR_QPN, starting_psn=1)
        conn.rep = w.build_rep(conn.req, local_comm_id=PEER_ID, local_qpn=PEER_QPN, starting_psn=2)
    else:
        conn.req = _peer_req()
        conn.rep = w.build_rep(conn.req, local_comm_id=conn.local_id, local_qpn=OUR_QPN, starting_psn=2)
    if state == S.ESTABLISHED:  # the active side of it: it has an RTU to repeat
        conn.active = True
        conn.req = w.build_req("10.0.0.1", "10.0.0.2", 40000, 7174, local_comm_id=conn.local_id,
                               local_qpn=OUR_QPN, starting_psn=1)
        conn.rep = w.build_rep(conn.req, local_comm_id=PEER_ID, local_qpn=PEER_QPN, starting_psn=2)
        conn.rtu = w.build_rtu(conn.rep).encode()
    assert conn.req is not None
    dreq = w.build_dreq(conn.local_id, PEER_ID, PEER_QPN)
    last = {S.REP_SENT: conn.rep, S.DREQ_SENT: dreq,
            S.DREQ_RCVD: w.build_drep(w.build_dreq(PEER_ID, conn.local_id, OUR_QPN))}.get(state, conn.req)
    assert last is not None
    conn.last, conn.last_name = last.encode(), last.name
    conn.timeout_ms, conn.retries, conn.tries = 100, 1, 1
    agent.by_remote[(PEER_ID, PEER_GID)] = conn
    agent.by_remote_qpn[(PEER_QPN, PEER_GID)] = conn
    conn.state = state
    return agent, conn, h


def _message(event: ibcm_table.Event, conn: ibcm_conn.CMConn | None) -> w.CMMessage:
    lid = conn.local_id if conn is not None else 0x7777
    if event == E.REQ:
        return _peer_req(PEER_ID if conn is not None else 0x5555)
    if event == E.REP:
        req = conn.req if conn is not None and conn.active and conn.req is not None and \
            isinstance(conn.req.body, w.CMReq) else w.build_req("10.0.0.1", "10.0.0.2", 40000, 7174,
                                                                local_comm_id=lid, local_qpn=OUR_QPN, starting_psn=1)
        return w.build_rep(req, local_comm_id=PEER_ID, local_qpn=0x44, starting_psn=2)
    if event == E.RTU:
        return w.cm_mad(w.CMRtu(local_comm_id=PEER_ID, remote_comm_id=lid), 1)
    if event == E.REJ:
        return w.cm_mad(w.CMRej(local_comm_id=PEER_ID, remote_comm_id=lid, reason=w.REJ_CONSUMER_DEFINED), 1)
    if event == E.MRA:
        return w.cm_mad(w.CMMra(local_comm_id=PEER_ID, remote_comm_id=lid, service_timeout=20), 1)
    if event == E.DREQ:
        return w.build_dreq(PEER_ID, lid, OUR_QPN)
    if event == E.DREP:
        return w.cm_mad(w.CMDrep(local_comm_id=PEER_ID, remote_comm_id=lid), 1)
    if event == E.SIDR_REQ:
        return w.cm_mad(w.CMSidrReq(request_id=PEER_ID if conn is not None else 0x5555, service_id=SID), 1)
    assert event == E.SIDR_REP
    return w.cm_mad(w.CMSidrRep(request_id=lid, status=ibcm_table.SIDR_SUCCESS, qpn=0x44, service_id=SID, qkey=1), 1)


def _fire(agent: ibcm.CMAgent, conn: ibcm_conn.CMConn | None, event: ibcm_table.Event) -> None:
    if event == E.SIDR_REQ and conn is not None and conn.state != S.SIDR_REQ_RCVD:
        # only a pending look-up is matched to a SIDR_REQ (test_a_sidr_req_matches_only_a_pending_look_up):
        # the pair is walked by giving it to the dispatcher directly
        agent.dispatch(event, conn, _message(event, conn), PEER_GID)
    elif event in ibcm_table.MESSAGES:
        agent.on_mad(_message(event, conn).encode(), PEER_GID)
    elif event == E.TIMEOUT:
        assert conn is not None
        conn._expired(None)
    elif event == E.CONNECT:
        assert conn is not None
        agent.dispatch(event, conn, w.build_req("10.0.0.1", "10.0.0.2", 40000, 7174, local_comm_id=conn.local_id,
                                                local_qpn=OUR_QPN, starting_psn=1))
    elif event == E.LOOKUP:
        assert conn is not None
        agent.dispatch(event, conn, w.cm_mad(w.CMSidrReq(request_id=conn.local_id, service_id=SID), 1))
    elif event == E.ACCEPT:
        assert conn is not None
        conn.accept(local_qpn=OUR_QPN, starting_psn=2, responder_resources=1, initiator_depth=1)
    elif event == E.REJECT:
        assert conn is not None
        conn.reject()
    elif event == E.SIDR_REPLY:
        assert conn is not None
        if conn.req is None:  # IDLE: the look-up a listener refuses before keeping it
            conn.req = w.cm_mad(w.CMSidrReq(request_id=PEER_ID, service_id=SID), 1)
        conn.sidr_reply(0x44, ibcm_table.RDMA_UDP_QKEY, ibcm_table.SIDR_SUCCESS)
    elif event == E.ESTABLISH:
        assert conn is not None
        conn.establish()
    else:
        assert conn is not None
        conn.disconnect()


# (state, event) -> (next state, CM messages sent).  IDLE: no connection matched (the next state of
# a REQ or SIDR_REQ is the new connection's).  The timer here still has a retry left.
EXPECTED: dict[tuple[ibcm_table.State, ibcm_table.Event], tuple[ibcm_table.State, list[str]]] = {
    (S.IDLE, E.REQ): (S.REQ_RCVD, []),
    (S.REQ_RCVD, E.REQ): (S.MRA_REQ_SENT, ["MRA"]),
    (S.MRA_REQ_SENT, E.REQ): (S.MRA_REQ_SENT, ["MRA"]),
    (S.REQ_SENT, E.REP): (S.REP_RCVD, []),
    (S.REP_RCVD, E.REP): (S.REP_RCVD, ["MRA"]),
    (S.ESTABLISHED, E.REP): (S.ESTABLISHED, ["RTU"]),
    (S.REP_SENT, E.RTU): (S.ESTABLISHED, []),
    (S.REQ_SENT, E.MRA): (S.REQ_SENT, []),
    (S.REP_SENT, E.MRA): (S.REP_SENT, []),
    (S.IDLE, E.DREQ): (S.IDLE, ["DREP"]),
    (S.ESTABLISHED, E.DREQ): (S.DREQ_RCVD, []),
    (S.REP_SENT, E.DREQ): (S.DREQ_RCVD, []),
    (S.DREQ_SENT, E.DREQ): (S.TIMEWAIT, ["DREP"]),
    (S.TIMEWAIT, E.DREQ): (S.TIMEWAIT, ["DREP"]),
    (S.DREQ_SENT, E.DREP): (S.TIMEWAIT, []),
    (S.SIDR_REQ_SENT, E.SIDR_REP): (S.CLOSED, []),
    (S.REQ_SENT, E.TIMEOUT): (S.REQ_SENT, ["REQ"]),
    (S.REP_SENT, E.TIMEOUT): (S.REP_SENT, ["REP"]),
    (S.SIDR_REQ_SENT, E.TIMEOUT): (S.SIDR_REQ_SENT, ["SIDR_REQ"]),
    (S.DREQ_SENT, E.TIMEOUT): (S.DREQ_SENT, ["DREQ"]),
    (S.TIMEWAIT, E.TIMEOUT): (S.CLOSED, []),
    (S.IDLE, E.CONNECT): (S.REQ_SENT, ["REQ"]),
    (S.IDLE, E.LOOKUP): (S.SIDR_REQ_SENT, ["SIDR_REQ"]),
    (S.REQ_RCVD, E.ACCEPT): (S.REP_SENT, ["REP"]),
    (S.MRA_REQ_SENT, E.ACCEPT): (S.REP_SENT, ["REP"]),
    (S.REP_RCVD, E.ESTABLISH): (S.ESTABLISHED, ["RTU"]),
    (S.REQ_RCVD, E.REJECT): (S.CLOSED, ["REJ"]),
    (S.MRA_REQ_SENT, E.REJECT): (S.CLOSED, ["REJ"]),
    (S.REP_RCVD, E.REJECT): (S.CLOSED, ["REJ"]),
    (S.SIDR_REQ_RCVD, E.SIDR_REPLY): (S.CLOSED, ["SIDR_REP"]),
    (S.IDLE, E.SIDR_REPLY): (S.CLOSED, ["SIDR_REP"]),
    (S.ESTABLISHED, E.DISCONNECT): (S.DREQ_SENT, ["DREQ"]),
    (S.DREQ_RCVD, E.DISCONNECT): (S.TIMEWAIT, ["DREP"]),
    (S.REQ_RCVD, E.DISCONNECT): (S.CLOSED, ["REJ"]),
    (S.MRA_REQ_SENT, E.DISCONNECT): (S.CLOSED, ["REJ"]),
    (S.REQ_SENT, E.DISCONNECT): (S.CLOSED, []),
    (S.REP_SENT, E.DISCONNECT): (S.CLOSED, []),
    (S.REP_RCVD, E.DISCONNECT): (S.CLOSED, []),
}
for _s in ibcm_table.State:
    if _s not in (S.IDLE, S.TIMEWAIT, S.CLOSED):
        EXPECTED[(_s, E.REJ)] = (S.CLOSED, [])
EXPECTED[(S.IDLE, E.SIDR_REQ)] = (S.SIDR_REQ_RCVD, [])


@pytest.mark.parametrize("event", list(ibcm_table.Event), ids=lambda e: e.name)
@pytest.mark.parametrize("state", list(ibcm_table.State), ids=lambda s: s.name)
def test_every_pair_of_the_ib_cm_table(state: ibcm_table.State, event: ibcm_table.Event) -> None:
    # IDLE: for a message, no connection matches it; for a call or the timer, a connection just made
    agent, conn, h = _setup(state, fresh=event not in ibcm_table.MESSAGES)
    dev = agent.dev
    expected = EXPECTED.get((state, event))
    rule = ibcm_table.rule(state, event)
    before = dict(agent.counters)
    if expected is None:  # the documented refusal
        assert rule.do in ibcm_table.REFUSALS, f"{state.name} + {event.name}: the table acts ({rule.do}), this test expects a refusal"
        if rule.do == ibcm_table.REFUSE:
            with pytest.raises(ibcm_conn.CMStateError, match=state.value):
                _fire(agent, conn, event)
        else:
            _fire(agent, conn, event)
        if conn is not None:
            assert conn.state == state
        assert dev.sent == []
        counter = {ibcm_table.DROP: "cm_rx_dropped", ibcm_table.DUPLICATE: "cm_rx_duplicates"}.get(rule.do)
        for k, v in agent.counters.items():
            if k in ("cm_rx_msgs",):
                continue
            assert v == before[k] + (1 if k == counter else 0), (k, rule)
        return
    nxt, sent = expected
    _fire(agent, conn, event)
    if state == S.IDLE and event in (E.REQ, E.SIDR_REQ):
        new = [c for c in agent.conns.values() if c is not conn]
        assert len(new) == 1 and new[0].state == nxt
        assert h.events == [event.name.lower()]
        if conn is not None:
            assert conn.state == state  # the connection found is left alone
    elif conn is None:
        assert agent.conns == {} and nxt == S.IDLE
        assert rule.to == (S.IDLE,)
    else:
        assert conn is not None and conn.state == nxt, f"{state.name} + {event.name}: {conn and conn.state.name}"
    assert dev.sent == sent
    assert nxt in rule.to


@pytest.mark.parametrize(("state", "after", "kind"), [(S.REQ_SENT, S.CLOSED, "unreachable"),
                                                     (S.REP_SENT, S.CLOSED, "unreachable"),
                                                     (S.SIDR_REQ_SENT, S.CLOSED, "unreachable"),
                                                     (S.DREQ_SENT, S.TIMEWAIT, "disconnected")])
def test_the_last_expiry_gives_up(state: ibcm_table.State, after: ibcm_table.State, kind: str) -> None:
    agent, conn, h = _setup(state)
    assert conn is not None
    conn.tries = conn.retries + 1
    conn._expired(None)
    assert conn.state == after and h.events == [kind] and agent.dev.sent == []


def test_a_sidr_req_matches_only_a_pending_look_up() -> None:
    agent, conn, h = _setup(S.ESTABLISHED)  # a connection whose remote comm ID is the look-up's request ID
    assert conn is not None
    agent.on_mad(_message(E.SIDR_REQ, conn).encode(), PEER_GID)
    new = [c for c in agent.conns.values() if c is not conn]
    assert conn.state == S.ESTABLISHED and len(new) == 1 and new[0].state == S.SIDR_REQ_RCVD
    agent.on_mad(_message(E.SIDR_REQ, conn).encode(), PEER_GID)  # now it repeats the pending look-up
    assert agent.counters["cm_rx_duplicates"] == 1 and len(agent.conns) == 2


def test_a_req_for_no_listener_is_rejected_and_nothing_is_kept() -> None:
    agent, _, h = _setup(S.IDLE)
    agent.listeners.clear()
    agent.on_mad(_peer_req(0x5555).encode(), PEER_GID)
    assert agent.dev.sent == ["REJ"] and agent.conns == {} and h.events == []


def test_the_table_is_total_and_names_only_known_actions() -> None:
    for s in ibcm_table.State:
        for ev in ibcm_table.Event:
            r = ibcm_table.rule(s, ev)
            assert r.do in ibcm_table.REFUSALS or r.do in ibcm_actions.ACTIONS, (s, ev, r)
            assert (r.do in ibcm_table.REFUSALS) == (r.to == ()), (s, ev, r)
    assert set(ibcm_table.OTHERWISE) == set(ibcm_table.Event)
    # every action is used by the table (no dead handler)
    assert {r.do for r in ibcm_table.TABLE.values()} - set(ibcm_table.REFUSALS) == set(ibcm_actions.ACTIONS)


def test_an_action_that_leaves_an_unlisted_state_is_a_table_error(monkeypatch: pytest.MonkeyPatch) -> None:
    agent, conn, _ = _setup(S.REP_SENT)
    monkeypatch.setitem(ibcm_table.TABLE, (S.REP_SENT, E.RTU), ibcm_table.Rule("rtu", (S.REP_SENT,)))
    with pytest.raises(ibcm_conn.CMTableError, match="left ESTABLISHED"):
        agent.on_mad(_message(E.RTU, conn).encode(), PEER_GID)


def test_the_agent_module_gives_the_same_table_actions_and_connection() -> None:
    # ``from rdmalab.verbs.engine.ibcm import X`` (rdma_cm, mpacm, the viz, notebooks) must get the very
    # objects the dispatch uses: a patched TABLE entry is then the one it runs
    for name in ("State", "Event", "Rule", "TABLE", "OTHERWISE", "REFUSALS", "REFUSE", "DROP", "DUPLICATE",
                 "IGNORE", "MESSAGES", "CALLS", "rule", "edges", "cm_ms", "req_timeout_ms", "PACKET_LIFE_TIME",
                 "RDMA_UDP_QKEY", "SIDR_SUCCESS", "SIDR_REJECT", "GSI_QPN"):
        assert getattr(ibcm, name) is getattr(ibcm_table, name), name
    for name in ("CMConn", "CMHandler", "CMStateError", "CMTableError", "CMAgentLike", "Listener"):
        assert getattr(ibcm, name) is getattr(ibcm_conn, name), name
    assert ibcm.ACTIONS is ibcm_actions.ACTIONS


def test_an_action_is_registered_once_under_the_name_the_table_uses() -> None:
    before = dict(ibcm_actions.ACTIONS)
    assert ibcm_actions.ACTIONS["rtu"] is ibcm_actions._a_rtu

    def misnamed(*args: Any) -> None:
        return None

    def _a_rtu(*args: Any) -> None:
        return None

    def _a_drop(*args: Any) -> None:
        return None

    with pytest.raises(ValueError, match="misnamed: an action's function is named _a_"):
        ibcm_actions.action(misnamed)
    with pytest.raises(ValueError, match="_a_rtu: 'rtu' is registered already"):
        ibcm_actions.action(_a_rtu)
    with pytest.raises(ValueError, match="_a_drop: 'drop' is a refusal's name"):
        ibcm_actions.action(_a_drop)
    assert ibcm_actions.ACTIONS == before


# ---------------------------------------------------------------------- iWARP: mpacm.TABLE through cmid_iwarp's actions
MS, MEV = mpacm.MPAState, mpacm.MPAEvent
CS = CMIDState


class _Stream:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closed = False
        self.local, self.peer = ("10.0.0.2", 7174), ("10.0.0.1", 40000)
        self.dev = None
        self.receiver: Any = None

    def write(self, data: bytes) -> None:
        self.written.append(bytes(data))

    def close(self) -> None:
        self.closed = True


class _QP:
    engine = None  # not an IwQP: a disconnect closes the stream itself


def _iw_setup(state: mpacm.MPAState) -> tuple[cmid_iwarp.IwConn, CMID, _Stream]:
    dev = _Dev()
    ch = CMEventChannel()
    cmid = CMID(ch)
    cmid.device = dev  # type: ignore[assignment]
    cmid.qp = _QP()  # type: ignore[assignment]
    stream = _Stream()
    responder = state in (MS.AWAIT_REQUEST, MS.REQUEST_RCVD)
    mpa: mpacm.Initiator | mpacm.Responder = mpacm.Responder() if responder else \
        mpacm.Initiator(ird=4, ord=4, crc=False)
    conn = cmid_iwarp.IwConn(cmid, mpa, state)
    conn.stream = None if state == MS.TCP_CONNECTING else stream
    cmid._iw = conn
    cmid.state = {MS.TCP_CONNECTING: CS.CONNECTING, MS.REQUEST_SENT: CS.CONNECTING, MS.AWAIT_REQUEST: CS.LISTEN,
                  MS.REQUEST_RCVD: CS.CONNECT_REQUEST, MS.ESTABLISHED: CS.ESTABLISHED,
                  MS.DISCONNECTED: CS.DISCONNECTED, MS.CLOSED: CS.REJECTED}[state]
    if state == MS.REQUEST_RCVD:
        assert isinstance(mpa, mpacm.Responder)
        mpa.feed(mpacm.request_frame(ird=4, ord=4, crc=False))
    return conn, cmid, stream


def _iw_arg(event: mpacm.MPAEvent, state: mpacm.MPAState, cmid: CMID, stream: _Stream) -> Any:
    if event == MEV.TCP_CONNECTED:
        return stream
    if event == MEV.TCP_FAILED:
        return "Connection refused"
    if event == MEV.BYTES:
        if state == MS.AWAIT_REQUEST:
            return mpacm.request_frame(ird=4, ord=4, crc=False)
        return mpacm.reply_frame(ird=4, ord=4, crc=False)
    if event == MEV.ACCEPT:
        return (cmid, ConnParam())
    if event == MEV.REJECT:
        return b"no"
    return "FIN" if event == MEV.STREAM_CLOSED else None


# (state, event) -> (next state, the CMID's state after, what was written, stream closed)
IW_EXPECTED: dict[tuple[mpacm.MPAState, mpacm.MPAEvent], tuple[mpacm.MPAState, CMIDState, int, bool]] = {
    (MS.TCP_CONNECTING, MEV.TCP_CONNECTED): (MS.REQUEST_SENT, CS.CONNECTING, 1, False),
    (MS.TCP_CONNECTING, MEV.TCP_FAILED): (MS.CLOSED, CS.REJECTED, 0, False),
    (MS.REQUEST_SENT, MEV.BYTES): (MS.ESTABLISHED, CS.ESTABLISHED, 0, False),
    (MS.REQUEST_SENT, MEV.TIMER): (MS.CLOSED, CS.UNREACHABLE, 0, True),
    (MS.REQUEST_SENT, MEV.STREAM_CLOSED): (MS.CLOSED, CS.REJECTED, 0, False),
    (MS.REQUEST_SENT, MEV.DISCONNECT): (MS.CLOSED, CS.REJECTED, 0, True),
    (MS.AWAIT_REQUEST, MEV.BYTES): (MS.REQUEST_RCVD, CS.CONNECT_REQUEST, 0, False),  # the new child CMID's
    (MS.AWAIT_REQUEST, MEV.TIMER): (MS.CLOSED, CS.LISTEN, 0, True),
    (MS.AWAIT_REQUEST, MEV.STREAM_CLOSED): (MS.CLOSED, CS.LISTEN, 0, False),
    (MS.AWAIT_REQUEST, MEV.DISCONNECT): (MS.CLOSED, CS.LISTEN, 0, True),
    (MS.REQUEST_RCVD, MEV.BYTES): (MS.CLOSED, CS.CONNECT_REQUEST, 0, True),
    (MS.REQUEST_RCVD, MEV.STREAM_CLOSED): (MS.CLOSED, CS.CONNECT_REQUEST, 0, False),
    (MS.REQUEST_RCVD, MEV.ACCEPT): (MS.ESTABLISHED, CS.ESTABLISHED, 1, False),
    (MS.REQUEST_RCVD, MEV.REJECT): (MS.CLOSED, CS.CONNECT_REQUEST, 1, True),
    (MS.REQUEST_RCVD, MEV.DISCONNECT): (MS.CLOSED, CS.CONNECT_REQUEST, 0, True),
    (MS.ESTABLISHED, MEV.STREAM_CLOSED): (MS.DISCONNECTED, CS.DISCONNECTED, 0, False),
    (MS.ESTABLISHED, MEV.DISCONNECT): (MS.DISCONNECTED, CS.DISCONNECTED, 0, True),
}


@pytest.mark.parametrize("event", list(mpacm.MPAEvent), ids=lambda e: e.name)
@pytest.mark.parametrize("state", list(mpacm.MPAState), ids=lambda s: s.name)
def test_every_pair_of_the_mpa_table(state: mpacm.MPAState, event: mpacm.MPAEvent,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cmid_iwarp.IwConn, "_attach", lambda self, *a, **k: None)  # no QP engine here
    conn, cmid, stream = _iw_setup(state)
    before = cmid.state
    arg = _iw_arg(event, state, cmid, stream)
    rule = mpacm.rule(state, event)
    expected = IW_EXPECTED.get((state, event))
    if expected is None:
        assert rule.do in ibcm_table.REFUSALS, f"{state.name} + {event.name}: the table acts ({rule.do})"
        if rule.do == ibcm_table.REFUSE:
            with pytest.raises(PyverbsRDMAError, match=state.value):
                conn.dispatch(event, arg)
        else:
            conn.dispatch(event, arg)
        assert conn.state == state and cmid.state == before and stream.written == [] and not stream.closed
        return
    nxt, cmid_after, writes, closed = expected
    conn.dispatch(event, arg)
    assert conn.state == nxt, f"{state.name} + {event.name}: {conn.state.name}"
    assert conn.target.state == cmid_after
    assert len(stream.written) == writes and stream.closed == closed
    assert nxt in rule.to
    if (state, event) == (MS.AWAIT_REQUEST, MEV.BYTES):  # the child CMID of the request, with its event
        child = conn.cmid
        assert child is not cmid and child.state == CS.CONNECT_REQUEST and cmid.backlog[0] is child
        assert cmid._channel is not None and cmid._channel.queue[0].kind == EV.RDMA_CM_EVENT_CONNECT_REQUEST


def test_the_mpa_table_names_only_cmid_iwarp_actions() -> None:
    for s in mpacm.MPAState:
        for ev in mpacm.MPAEvent:
            r = mpacm.rule(s, ev)
            assert r.do in ibcm_table.REFUSALS or r.do in cmid_iwarp.ACTIONS, (s, ev, r)
    assert {r.do for r in mpacm.TABLE.values()} - set(ibcm_table.REFUSALS) == set(cmid_iwarp.ACTIONS)
    assert set(mpacm.OTHERWISE) == set(mpacm.MPAEvent)


# ---------------------------------------------------------------------- rdma_cm's CMID states
@pytest.mark.parametrize("event", list(CMIDEvent), ids=lambda e: e.name)
@pytest.mark.parametrize("state", list(CMIDState), ids=lambda s: s.name)
def test_every_pair_of_the_cmid_table(state: CMIDState, event: CMIDEvent) -> None:
    cmid = CMID()
    cmid.state = state
    nxt = TRANSITIONS.get((state, event))
    if nxt is None:
        with pytest.raises(PyverbsRDMAError, match=f"{re.escape(event.value)} is not allowed on a CMID in state "
                                                   f"'{state.value}'") as exc:
            cmid._move(event)
        assert exc.value.error_code == errno.EINVAL
        assert cmid.state == state
    else:
        cmid._move(event)
        assert cmid.state == nxt


def test_the_cmid_states_are_the_strings_they_were() -> None:
    assert {s.value for s in CMIDState} == {"idle", "addr resolved", "route resolved", "listen", "connect request",
                                          "connecting", "accepted", "established", "rejected", "unreachable",
                                          "error", "disconnecting", "disconnected"}
    assert CMIDState.ESTABLISHED == "established" and f"{CMIDState.LISTEN}" == "listen"


def test_an_illegal_call_names_the_state_and_changes_nothing() -> None:
    cmid = CMID(CMEventChannel())
    with pytest.raises(PyverbsRDMAError, match=r"Failed to Resolve Route: resolve_route\(\) is not allowed on a "
                                               r"CMID in state 'idle' \(there: .*resolve_addr\(\)"):
        cmid.resolve_route()
    assert cmid.state == CMIDState.IDLE


# ---------------------------------------------------------------------- the one wait for a CM event
class _Ev:
    def __init__(self, kind: int, cmid: Any, status: int = 0, listen: Any = None, **info: Any) -> None:
        self.kind, self.cmid, self.status, self.listen, self.info = kind, cmid, status, listen, info


class _Channel:
    """Takes the first queued event ``match`` accepts, as CMEventChannel.wait does."""

    def __init__(self, *events: _Ev) -> None:
        self.queue = list(events)

    def wait(self, match: Any, what: str, timeout_ms: int | None = None) -> _Ev:
        for i, ev in enumerate(self.queue):
            if match(ev):
                return self.queue.pop(i)
        raise PyverbsRDMAError(f"waiting for {what}: nothing", errno.ENODATA)


def test_wait_event_takes_this_cmids_event_skipping_others_and_speaks_for_an_adopted_child() -> None:
    from rdmalab.verbs.cmstate import CMEventError, owner, wait_event

    a, b, child = CMID(), CMID(), CMID()
    child._adopted_by = a
    assert owner(child) is a and owner(a) is a and owner(None) is None
    ch = _Channel(_Ev(EV.RDMA_CM_EVENT_ESTABLISHED, b), _Ev(EV.RDMA_CM_EVENT_TIMEWAIT_EXIT, a),
                  _Ev(EV.RDMA_CM_EVENT_ESTABLISHED, a))
    got = wait_event(ch, child, EV.RDMA_CM_EVENT_ESTABLISHED, "connect", skip=(EV.RDMA_CM_EVENT_TIMEWAIT_EXIT,))
    assert got.cmid is a and [e.cmid for e in ch.queue] == [b, a]
    req = _Ev(EV.RDMA_CM_EVENT_CONNECT_REQUEST, child, listen=b)
    assert wait_event(_Channel(_Ev(EV.RDMA_CM_EVENT_ESTABLISHED, child), req), None, (), "a request",
                      listen=b) is req
    with pytest.raises(CMEventError, match=r"connect: the connection to 10\.0\.0\.2:7 was rejected: reason 8 "
                                           r"\(Invalid Service ID\)") as exc:
        wait_event(_Channel(_Ev(EV.RDMA_CM_EVENT_REJECTED, a, status=8)), a, EV.RDMA_CM_EVENT_ESTABLISHED,
                   "connect", where="10.0.0.2:7")
    assert exc.value.error_code == errno.ECONNREFUSED and exc.value.event.status == 8
    with pytest.raises(CMEventError, match=r"ECONNREFUSED \(Connection refused\): TCP said no"):
        wait_event(_Channel(_Ev(EV.RDMA_CM_EVENT_REJECTED, a, status=-errno.ECONNREFUSED, why="TCP said no")), a,
                   EV.RDMA_CM_EVENT_ESTABLISHED, "connect", where="x")
    with pytest.raises(CMEventError, match=r"is unreachable: no answer to the REQ after 16 tries over 98\.3 s") as un:
        wait_event(_Channel(_Ev(EV.RDMA_CM_EVENT_UNREACHABLE, a, status=-errno.ETIMEDOUT, tries=16,
                                waited_ms=98304)), a, EV.RDMA_CM_EVENT_ESTABLISHED, "connect", where="x")
    assert un.value.error_code == errno.ETIMEDOUT


def test_perftest_says_once_what_it_waited_for() -> None:
    """A wait of perftest's (and udaddy's) rdma_cm that ends without its event names what it waited for once (it read
    "the client's data connection: waiting for waiting for the client's data connection: ...")."""
    from rdmalab.tools.perftest.options import PerftestError
    from rdmalab.tools.perftest.rdmacm import _event

    for what in ("the client's data connection", "the control QP's connection", "rdma_resolve_addr"):
        with pytest.raises(PerftestError) as exc:
            _event(_Channel(), None, (), what, "10.0.0.2:7", 1.0)  # type: ignore[arg-type]
        assert str(exc.value).startswith(f"waiting for {what}: nothing"), str(exc.value)
        assert str(exc.value).count(what) == 1 and str(exc.value).count("waiting for") == 1, str(exc.value)
    from rdmalab.tools.udaddy import UdaddyError
    from rdmalab.tools.udaddy import _event as udaddy_event

    with pytest.raises(UdaddyError) as uerr:
        udaddy_event(_Channel(), EV.RDMA_CM_EVENT_CONNECT_REQUEST, "a connection request")  # type: ignore[arg-type]
    assert str(uerr.value).startswith("waiting for a connection request: nothing"), str(uerr.value)
    assert str(uerr.value).count("waiting for") == 1, str(uerr.value)
    with pytest.raises(PerftestError, match=r"^the control QP's connection: rejected by 10\.0\.0\.2:7: "):
        rej = _Channel(_Ev(EV.RDMA_CM_EVENT_REJECTED, None, status=8))
        _event(rej, None, (EV.RDMA_CM_EVENT_ESTABLISHED,), "the control QP's connection", "10.0.0.2:7",  # type: ignore[arg-type]
               1.0)


# ---------------------------------------------------------------------- the CMID table on a real connection
@pytest.mark.parametrize("transport", ["roce", "iwarp"])
def test_a_connection_and_its_disconnect_walk_the_cmid_table(transport: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from rdmalab.fabric import reset_default_fabric
    from rdmalab.fabric.simtcp import iwarp_fabric
    from rdmalab.verbs import enums as ve
    from rdmalab.verbs.cm_enums import RAI_PASSIVE
    from rdmalab.verbs.cmid import AddrInfo, CMEvent
    from rdmalab.verbs.qp import QPCap, QPInitAttr

    moves: dict[int, list[str]] = {}
    real_move = CMID._move

    def move(self: CMID, event: CMIDEvent, what: str = "") -> None:
        real_move(self, event, what)
        moves.setdefault(id(self), []).append(str(self.state))

    monkeypatch.setattr(CMID, "_move", move)
    if transport == "iwarp":
        reset_default_fabric(iwarp_fabric(seed=5))
    else:
        reset_default_fabric()
    try:
        init = QPInitAttr(qp_type=ve.IBV_QPT_RC, cap=QPCap(max_send_wr=4, max_recv_wr=4))
        sch, cch = CMEventChannel(), CMEventChannel()
        lid = CMID(sch)
        lid.bind_addr(AddrInfo(src="10.0.0.2", src_service=7174, flags=RAI_PASSIVE))
        lid.listen()
        cid = CMID(cch)
        cid.resolve_addr(AddrInfo(dst="10.0.0.2", dst_service=7174))
        assert CMEvent(cch).event_type == EV.RDMA_CM_EVENT_ADDR_RESOLVED
        cid.resolve_route()
        assert CMEvent(cch).event_type == EV.RDMA_CM_EVENT_ROUTE_RESOLVED
        cid.create_qp(init)
        cid.connect(ConnParam())
        ev = CMEvent(sch)
        assert ev.event_type == EV.RDMA_CM_EVENT_CONNECT_REQUEST
        child = ev.id
        sid = CMID(ev, listen_id=lid)
        sid.create_qp(init)
        sid.accept(ConnParam())
        assert CMEvent(cch).event_type == EV.RDMA_CM_EVENT_ESTABLISHED
        assert CMEvent(sch).event_type == EV.RDMA_CM_EVENT_ESTABLISHED
        # rdma_establish and init_qp_attr's RTR/RTS attributes are the transport's
        if transport == "iwarp":
            with pytest.raises(PyverbsRDMAError, match="on iWARP the MPA Reply establishes the connection") as est:
                cid.establish()
            with pytest.raises(PyverbsRDMAError, match="an iWARP connection has no REQ or REP") as attr:
                cid.init_qp_attr(ve.IBV_QPS_RTR)
            assert est.value.error_code == attr.value.error_code == errno.EINVAL
        else:
            with pytest.raises(PyverbsRDMAError, match=r"Failed to Complete an active connection request: "
                                                       r"ESTABLISHED is not allowed on a CMID in state 'established'"):
                cid.establish()
            assert cid.qp is not None and sid.qp is not None
            (a_rtr, _), (a_rts, _) = cid.init_qp_attr(ve.IBV_QPS_RTR), cid.init_qp_attr(ve.IBV_QPS_RTS)
            (p_rtr, _), (p_rts, _) = sid.init_qp_attr(ve.IBV_QPS_RTR), sid.init_qp_attr(ve.IBV_QPS_RTS)
            assert (a_rtr.dest_qp_num, p_rtr.dest_qp_num) == (sid.qp.qp_num, cid.qp.qp_num)
            assert (a_rtr.rq_psn, a_rts.sq_psn) == (p_rts.sq_psn, p_rtr.rq_psn)  # each side's send PSN is the other's
        cid.disconnect()
        assert CMEvent(sch).event_type == EV.RDMA_CM_EVENT_DISCONNECTED
        sid.disconnect()
        assert CMEvent(cch).event_type == EV.RDMA_CM_EVENT_DISCONNECTED
    finally:
        reset_default_fabric()
    assert moves[id(lid)] == ["listen"]
    assert moves[id(cid)] == ["addr resolved", "route resolved", "connecting", "established", "disconnecting",
                              "disconnected"]
    assert moves[id(child)] == ["connect request"]
    assert moves[id(sid)] == ["accepted", "established", "disconnected", "disconnected"]
    with pytest.raises(PyverbsRDMAError, match=r"Failed to Accept Connection: accept\(\) is not allowed on a CMID "
                                               r"in state 'disconnected'"):
        sid.accept(ConnParam())
