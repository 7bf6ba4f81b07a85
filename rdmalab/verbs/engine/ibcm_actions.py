"""The actions the IB CM's table names: what each (state, event) pair of
:data:`~rdmalab.verbs.engine.ibcm_table.TABLE` does, after Linux 6.1 ``core/cm.c``'s handlers.

Each action takes (agent, connection or None, message or None, source GID, call arguments) and
returns the connection the event concerned afterwards (a new one for a REQ or SIDR_REQ, None if
nothing is kept).  What it tells rdma_cm (``agent.notify``) is delivered after the dispatch has
checked the state it left against the table: the handler may move the connection on at once (a
REP's handler sends the RTU).  An action is a function ``_a_<name>`` registered by :func:`action`
in :data:`ACTIONS` under ``<name>``, the name the table uses.  The actions use the agent only
through :class:`~rdmalab.verbs.engine.ibcm_conn.CMAgentLike`; the agent
(:class:`rdmalab.verbs.engine.ibcm.CMAgent`) runs them from its dispatch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rdmalab.verbs.engine.gsi_link import cm_gid
from rdmalab.verbs.engine.ibcm_conn import CMAgentLike, CMConn, CMStateError, NoHandler
from rdmalab.verbs.engine.ibcm_table import (
    MAX_CM_RETRIES,
    MRA_SERVICE_TIMEOUT,
    PACKET_LIFE_TIME,
    REFUSALS,
    SIDR_TIMEOUT,
    SIDR_UNSUPPORTED,
    State,
    cm_ms,
    req_timeout_ms,
)
from rdmalab.wire import cm as w

Action = Callable[[CMAgentLike, "CMConn | None", "w.CMMessage | None", int, dict[str, Any]], "CMConn | None"]

#: The actions the table names, by name (each registered by :func:`action`).
ACTIONS: dict[str, Action] = {}


def action(fn: Action) -> Action:
    """Register ``fn``, a function named ``_a_<name>``, as the table's action ``<name>``.

    A function named otherwise, a name registered already or a refusal's name (drop, duplicate,
    ignore, refuse) is a :class:`ValueError` naming the function."""
    fname = getattr(fn, "__name__", repr(fn))
    name = fname.removeprefix("_a_")
    if name == fname or not name:
        raise ValueError(f"action {fname}: an action's function is named _a_<the name the table uses>")
    if name in ACTIONS or name in REFUSALS:
        raise ValueError(f"action {fname}: {name!r} is " + ("registered already" if name in ACTIONS
                                                               else "a refusal's name, not an action's"))
    ACTIONS[name] = fn
    return fn


def _need(conn: CMConn | None) -> CMConn:
    assert conn is not None, "the table gives this action only to a matched connection"
    return conn


def _msg(msg: w.CMMessage | None) -> w.CMMessage:
    assert msg is not None, "the table gives this action only to a message"
    return msg


@action
def _a_new_req(agent: CMAgentLike, conn: CMConn | None, msg: w.CMMessage | None, src: int,
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
    new = CMConn(agent, agent.new_id(), NoHandler(), active=False, started_ns=agent.dev.now)
    new.remote_id, new.remote_gid, new.remote_qpn = body.local_comm_id, src, body.local_qpn
    new.local_gid, new.service_id, new.req, new.tid = cm_gid(agent.dev), body.service_id, msg, msg.tid
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


@action
def _a_mra_dup_req(agent: CMAgentLike, conn: CMConn | None, msg: w.CMMessage | None, src: int,
                   kw: dict[str, Any]) -> CMConn | None:
    conn = _need(conn)
    agent.counters["cm_rx_duplicates"] += 1
    agent.send(src, w.build_mra(_msg(msg), local_comm_id=conn.local_id, service_timeout=MRA_SERVICE_TIMEOUT))
    conn._set(State.MRA_REQ_SENT)
    return conn


@action
def _a_rep(agent: CMAgentLike, conn: CMConn | None, msg: w.CMMessage | None, src: int,
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


@action
def _a_mra_dup_rep(agent: CMAgentLike, conn: CMConn | None, msg: w.CMMessage | None, src: int,
                   kw: dict[str, Any]) -> CMConn | None:
    conn = _need(conn)
    agent.counters["cm_rx_duplicates"] += 1
    agent.send(src, w.build_mra(_msg(msg), local_comm_id=conn.local_id, service_timeout=MRA_SERVICE_TIMEOUT))
    return conn


@action
def _a_resend_rtu(agent: CMAgentLike, conn: CMConn | None, msg: w.CMMessage | None, src: int,
                  kw: dict[str, Any]) -> CMConn | None:
    conn = _need(conn)
    if not conn.rtu:  # the passive side of an established connection sent no RTU: nothing to repeat
        agent.dropped(f"REP in state {conn.state.value}")
        return conn
    agent.counters["cm_rx_duplicates"] += 1
    agent.send_raw(conn.remote_gid, conn.rtu)
    return conn


@action
def _a_rtu(agent: CMAgentLike, conn: CMConn | None, msg: w.CMMessage | None, src: int,
           kw: dict[str, Any]) -> CMConn | None:
    conn = _need(conn)
    conn._cancel()
    conn._set(State.ESTABLISHED)
    agent.notify(conn, "established", msg)
    return conn


@action
def _a_rej(agent: CMAgentLike, conn: CMConn | None, msg: w.CMMessage | None, src: int,
           kw: dict[str, Any]) -> CMConn | None:
    conn, msg = _need(conn), _msg(msg)
    body = msg.body
    assert isinstance(body, w.CMRej)
    conn._close()
    agent.notify(conn, "rejected", msg, reason=body.reason, by="peer")
    return conn


@action
def _a_mra(agent: CMAgentLike, conn: CMConn | None, msg: w.CMMessage | None, src: int,
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


@action
def _a_drep_unknown(agent: CMAgentLike, conn: CMConn | None, msg: w.CMMessage | None, src: int,
                    kw: dict[str, Any]) -> CMConn | None:
    agent.send(src, w.build_drep(_msg(msg)))
    return conn


@action
def _a_drep_again(agent: CMAgentLike, conn: CMConn | None, msg: w.CMMessage | None, src: int,
                  kw: dict[str, Any]) -> CMConn | None:
    agent.counters["cm_rx_duplicates"] += 1
    agent.send(src, w.build_drep(_msg(msg)))
    return conn


@action
def _a_dreq_crossed(agent: CMAgentLike, conn: CMConn | None, msg: w.CMMessage | None, src: int,
                    kw: dict[str, Any]) -> CMConn | None:
    conn = _need(conn)
    agent.send(src, w.build_drep(_msg(msg)))
    conn._timewait()
    agent.notify(conn, "disconnected", msg)
    return conn


@action
def _a_dreq(agent: CMAgentLike, conn: CMConn | None, msg: w.CMMessage | None, src: int,
            kw: dict[str, Any]) -> CMConn | None:
    conn = _need(conn)
    conn.last = w.build_drep(_msg(msg)).encode()  # sent when the application calls disconnect (rdma_disconnect)
    conn._cancel()
    conn._set(State.DREQ_RCVD)
    agent.notify(conn, "disconnected", msg)
    return conn


@action
def _a_drep(agent: CMAgentLike, conn: CMConn | None, msg: w.CMMessage | None, src: int,
            kw: dict[str, Any]) -> CMConn | None:
    conn = _need(conn)
    conn._timewait()
    agent.notify(conn, "disconnected", msg)
    return conn


@action
def _a_new_sidr_req(agent: CMAgentLike, conn: CMConn | None, msg: w.CMMessage | None, src: int,
                    kw: dict[str, Any]) -> CMConn | None:
    msg = _msg(msg)
    body = msg.body
    assert isinstance(body, w.CMSidrReq)
    new = CMConn(agent, agent.new_id(), NoHandler(), active=False, started_ns=agent.dev.now)
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


@action
def _a_sidr_rep(agent: CMAgentLike, conn: CMConn | None, msg: w.CMMessage | None, src: int,
                kw: dict[str, Any]) -> CMConn | None:
    conn, msg = _need(conn), _msg(msg)
    body = msg.body
    assert isinstance(body, w.CMSidrRep)
    conn._close()
    agent.notify(conn, "sidr_rep", msg, status=body.status, qpn=body.qpn, qkey=body.qkey)
    return conn


def _retry(agent: CMAgentLike, conn: CMConn) -> bool:
    """Resend the last MAD if tries are left (``mad.c retry_send``)."""
    if conn.tries > conn.retries:
        return False
    conn.tries += 1
    agent.counters["cm_tx_retries"] += 1
    agent.send_raw(conn.remote_gid, conn.last)
    conn._arm(conn.timeout_ms)
    return True


@action
def _a_retry_or_unreachable(agent: CMAgentLike, conn: CMConn | None, msg: w.CMMessage | None, src: int,
                            kw: dict[str, Any]) -> CMConn | None:
    conn = _need(conn)
    if _retry(agent, conn):
        return conn
    waited, state = conn.tries * conn.timeout_ms, conn.state
    conn._close()
    agent.notify(conn, "unreachable", None, message=conn.last_name, tries=conn.tries,
                          waited_ms=waited, state=state.value)
    return conn


@action
def _a_retry_or_timewait(agent: CMAgentLike, conn: CMConn | None, msg: w.CMMessage | None, src: int,
                         kw: dict[str, Any]) -> CMConn | None:
    conn = _need(conn)
    if _retry(agent, conn):
        return conn
    conn._timewait()
    agent.notify(conn, "disconnected", None, timed_out=True)
    return conn


@action
def _a_timewait_exit(agent: CMAgentLike, conn: CMConn | None, msg: w.CMMessage | None, src: int,
                     kw: dict[str, Any]) -> CMConn | None:
    conn = _need(conn)
    conn._set(State.CLOSED)
    agent.forget(conn)
    agent.notify(conn, "timewait_exit", None)
    return conn


@action
def _a_send_req(agent: CMAgentLike, conn: CMConn | None, msg: w.CMMessage | None, src: int,
                kw: dict[str, Any]) -> CMConn | None:
    conn, msg = _need(conn), _msg(msg)
    body = msg.body
    assert isinstance(body, w.CMReq)
    conn.req = msg
    conn.local_qpn = body.local_qpn
    conn.service_id = body.service_id
    conn._send(msg, State.REQ_SENT, req_timeout_ms(body.remote_cm_response_timeout), body.max_cm_retries)
    return conn


@action
def _a_send_sidr_req(agent: CMAgentLike, conn: CMConn | None, msg: w.CMMessage | None, src: int,
                     kw: dict[str, Any]) -> CMConn | None:
    conn, msg = _need(conn), _msg(msg)
    conn._send(msg, State.SIDR_REQ_SENT, cm_ms(SIDR_TIMEOUT), MAX_CM_RETRIES)
    return conn


@action
def _a_send_rep(agent: CMAgentLike, conn: CMConn | None, msg: w.CMMessage | None, src: int,
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


@action
def _a_send_rtu(agent: CMAgentLike, conn: CMConn | None, msg: w.CMMessage | None, src: int,
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


@action
def _a_send_dreq(agent: CMAgentLike, conn: CMConn | None, msg: w.CMMessage | None, src: int,
                 kw: dict[str, Any]) -> CMConn | None:
    conn = _need(conn)
    dreq = w.build_dreq(conn.local_id, conn.remote_id, conn.remote_qpn, private_data=kw.get("private_data", b""))
    conn._send(dreq, State.DREQ_SENT, conn.timeout_ms or req_timeout_ms(), MAX_CM_RETRIES)
    return conn


@action
def _a_send_drep(agent: CMAgentLike, conn: CMConn | None, msg: w.CMMessage | None, src: int,
                 kw: dict[str, Any]) -> CMConn | None:
    conn = _need(conn)
    agent.send_raw(conn.remote_gid, conn.last)
    conn._timewait()
    return conn


@action
def _a_send_rej(agent: CMAgentLike, conn: CMConn | None, msg: w.CMMessage | None, src: int,
                kw: dict[str, Any]) -> CMConn | None:
    conn = _need(conn)
    msg = conn.req if not conn.active else conn.rep
    if msg is None:
        raise CMStateError(f"reject: connection 0x{conn.local_id:08x} has no REQ or REP to reject")
    agent.send(conn.remote_gid, w.build_rej(msg, kw.get("reason", w.REJ_CONSUMER_DEFINED), local_comm_id=conn.local_id,
                                            private_data=kw.get("private_data", b"")))
    conn._close()
    return conn


@action
def _a_send_sidr_rep(agent: CMAgentLike, conn: CMConn | None, msg: w.CMMessage | None, src: int,
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


@action
def _a_reject_req(agent: CMAgentLike, conn: CMConn | None, msg: w.CMMessage | None, src: int,
                  kw: dict[str, Any]) -> CMConn | None:
    conn = _need(conn)
    conn.reject(w.REJ_CONSUMER_DEFINED)
    return conn


@action
def _a_abandon(agent: CMAgentLike, conn: CMConn | None, msg: w.CMMessage | None, src: int,
               kw: dict[str, Any]) -> CMConn | None:
    conn = _need(conn)
    conn._close()
    return conn
