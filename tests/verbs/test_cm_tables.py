"""Every (state, event) pair of the connection managers' tables, walked one by one.

The IB CM (``rdmalab.verbs.engine.cm.TABLE``): an agent on a fake device, a connection put in each
state, each message (built with the wire's builders, addressed to it), its timer and each call from
rdma_cm; the expected next state and what went on the wire are written here, independently of the
table, and every other pair must be the event's stated refusal.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from rdmalab.verbs.engine import cm
from rdmalab.wire import cm as w

S, E = cm.State, cm.Event
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

    def cm_event(self, conn: cm.CMConn, kind: str, msg: Any, **info: Any) -> None:
        self.events.append(kind)


ACTIVE = {S.REQ_SENT, S.REP_RCVD, S.SIDR_REQ_SENT}
SIDR = {S.SIDR_REQ_SENT, S.SIDR_REQ_RCVD}


def _peer_req(comm_id: int = PEER_ID) -> w.CMMessage:
    return w.build_req("10.0.0.2", "10.0.0.1", 40000, 7174, local_comm_id=comm_id, local_qpn=PEER_QPN,
                       starting_psn=1)


def _setup(state: cm.State) -> tuple[cm.CMAgent, cm.CMConn | None, _Handler]:
    """An agent with a listener on SID, and (unless IDLE) one connection in ``state``."""
    dev = _Dev()
    agent = cm.CMAgent(dev)
    h = _Handler()
    agent.listeners[SID] = lambda conn, msg: h
    if state == S.IDLE:
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


def _message(event: cm.Event, conn: cm.CMConn | None) -> w.CMMessage:
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
    return w.cm_mad(w.CMSidrRep(request_id=lid, status=cm.SIDR_SUCCESS, qpn=0x44, service_id=SID, qkey=1), 1)


def _fire(agent: cm.CMAgent, conn: cm.CMConn | None, event: cm.Event) -> None:
    if event in cm.MESSAGES:
        agent.on_mad(_message(event, conn).encode(), PEER_GID)
    elif event == E.TIMEOUT:
        assert conn is not None
        conn._expired(None)
    elif event == E.ACCEPT:
        assert conn is not None
        conn.accept(local_qpn=OUR_QPN, starting_psn=2, responder_resources=1, initiator_depth=1)
    elif event == E.ESTABLISH:
        assert conn is not None
        conn.establish()
    else:
        assert conn is not None
        conn.disconnect()


# (state, event) -> (next state, CM messages sent).  IDLE: no connection matched (the next state of
# a REQ or SIDR_REQ is the new connection's).  The timer here still has a retry left.
EXPECTED: dict[tuple[cm.State, cm.Event], tuple[cm.State, list[str]]] = {
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
    (S.REQ_RCVD, E.ACCEPT): (S.REP_SENT, ["REP"]),
    (S.MRA_REQ_SENT, E.ACCEPT): (S.REP_SENT, ["REP"]),
    (S.REP_RCVD, E.ESTABLISH): (S.ESTABLISHED, ["RTU"]),
    (S.ESTABLISHED, E.DISCONNECT): (S.DREQ_SENT, ["DREQ"]),
    (S.DREQ_RCVD, E.DISCONNECT): (S.TIMEWAIT, ["DREP"]),
    (S.REQ_RCVD, E.DISCONNECT): (S.CLOSED, ["REJ"]),
    (S.MRA_REQ_SENT, E.DISCONNECT): (S.CLOSED, ["REJ"]),
    (S.REQ_SENT, E.DISCONNECT): (S.CLOSED, []),
    (S.REP_SENT, E.DISCONNECT): (S.CLOSED, []),
    (S.REP_RCVD, E.DISCONNECT): (S.CLOSED, []),
}
for _s in cm.State:
    if _s not in (S.IDLE, S.TIMEWAIT, S.CLOSED):
        EXPECTED[(_s, E.REJ)] = (S.CLOSED, [])
    if _s != S.SIDR_REQ_RCVD:  # not a repeat of a pending look-up: a new one (its state is the new look-up's)
        EXPECTED[(_s, E.SIDR_REQ)] = (S.SIDR_REQ_RCVD, [])


@pytest.mark.parametrize("event", list(cm.Event), ids=lambda e: e.name)
@pytest.mark.parametrize("state", list(cm.State), ids=lambda s: s.name)
def test_every_pair_of_the_ib_cm_table(state: cm.State, event: cm.Event) -> None:
    if state == S.IDLE and event not in cm.MESSAGES:
        pytest.skip("timers and calls belong to a connection; IDLE stands for a message no connection matches")
    agent, conn, h = _setup(state)
    dev = agent.dev
    expected = EXPECTED.get((state, event))
    rule = cm.rule(state, event)
    before = dict(agent.counters)
    if expected is None:  # the documented refusal
        assert rule.do in cm.REFUSALS, f"{state.name} + {event.name}: the table acts ({rule.do}), this test expects a refusal"
        if rule.do == cm.REFUSE:
            with pytest.raises(cm.CMStateError, match=state.value):
                _fire(agent, conn, event)
        else:
            _fire(agent, conn, event)
        if conn is not None:
            assert conn.state == state
        assert dev.sent == []
        counter = {cm.DROP: "cm_rx_dropped", cm.DUPLICATE: "cm_rx_duplicates"}.get(rule.do)
        for k, v in agent.counters.items():
            if k in ("cm_rx_msgs",):
                continue
            assert v == before[k] + (1 if k == counter else 0), (k, rule)
        return
    nxt, sent = expected
    _fire(agent, conn, event)
    if (state == S.IDLE and event == E.REQ) or event == E.SIDR_REQ:
        new = [c for c in agent.conns.values() if c is not conn]
        assert len(new) == 1 and new[0].state == nxt
        assert h.events == [event.name.lower()]
        if conn is not None:
            assert conn.state == state  # the connection found is left alone
    elif conn is None:
        assert agent.conns == {} and nxt == S.IDLE
    else:
        assert conn is not None and conn.state == nxt, f"{state.name} + {event.name}: {conn and conn.state.name}"
    assert dev.sent == sent
    assert nxt in rule.to


@pytest.mark.parametrize(("state", "after", "kind"), [(S.REQ_SENT, S.CLOSED, "unreachable"),
                                                     (S.REP_SENT, S.CLOSED, "unreachable"),
                                                     (S.SIDR_REQ_SENT, S.CLOSED, "unreachable"),
                                                     (S.DREQ_SENT, S.TIMEWAIT, "disconnected")])
def test_the_last_expiry_gives_up(state: cm.State, after: cm.State, kind: str) -> None:
    agent, conn, h = _setup(state)
    assert conn is not None
    conn.tries = conn.retries + 1
    conn._expired(None)
    assert conn.state == after and h.events == [kind] and agent.dev.sent == []


def test_a_req_for_no_listener_is_rejected_and_nothing_is_kept() -> None:
    agent, _, h = _setup(S.IDLE)
    agent.listeners.clear()
    agent.on_mad(_peer_req(0x5555).encode(), PEER_GID)
    assert agent.dev.sent == ["REJ"] and agent.conns == {} and h.events == []


def test_the_table_is_total_and_names_only_known_actions() -> None:
    for s in cm.State:
        for ev in cm.Event:
            r = cm.rule(s, ev)
            assert r.do in cm.REFUSALS or r.do in cm.ACTIONS, (s, ev, r)
            assert (r.do in cm.REFUSALS) == (r.to == ()), (s, ev, r)
    assert set(cm.OTHERWISE) == set(cm.Event)
    # every action is used by the table (no dead handler)
    assert {r.do for r in cm.TABLE.values()} - set(cm.REFUSALS) == set(cm.ACTIONS)


def test_an_action_that_leaves_an_unlisted_state_is_a_table_error(monkeypatch: pytest.MonkeyPatch) -> None:
    agent, conn, _ = _setup(S.REP_SENT)
    monkeypatch.setitem(cm.TABLE, (S.REP_SENT, E.RTU), cm.Rule("rtu", (S.REP_SENT,)))
    with pytest.raises(cm.CMTableError, match="left ESTABLISHED"):
        agent.on_mad(_message(E.RTU, conn).encode(), PEER_GID)
