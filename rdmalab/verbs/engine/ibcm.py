"""The connection manager of a soft device: QP1 (the GSI) and the IB CM state machine, as Linux 6.1 runs them.

For kernel rxe, the whole CM runs in the kernel: ``ib_mad`` owns QP1 of each port (``core/mad.c``),
``ib_cm`` runs the state machine of IBA Vol 1 chapter 12 (``core/cm.c``) and ``rdma_cm``
(``core/cma.c``) puts IP addressing on top.  The engine is not part of that stack, so each
:class:`~rdmalab.verbs.engine.node.SoftDevice` has its own: a :class:`GSI` on QP1 that sends and
receives MADs as UD SEND Only packets (P_Key 0xFFFF, Q_Key 0x80010000, source QP 1; the source GID
and the envelope are the port's link layer's, :mod:`~rdmalab.verbs.engine.gsi_link`: RoCEv2 or native IB) and a
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

The rooms: the table, its states and events and the CM's numbers are in
:mod:`~rdmalab.verbs.engine.ibcm_table`; the connection (:class:`CMConn`), the interface the actions
use of the agent (:class:`~rdmalab.verbs.engine.ibcm_conn.CMAgentLike`) and the errors in
:mod:`~rdmalab.verbs.engine.ibcm_conn`; the actions in :mod:`~rdmalab.verbs.engine.ibcm_actions`.
This module keeps the agent and QP1, and re-exports the others' public names, so
``from rdmalab.verbs.engine.ibcm import X`` works as before.

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

from collections.abc import Callable
from typing import Any

from rdmalab.verbs import enums as e
from rdmalab.verbs.engine.gsi_link import cm_gid, ud_payload
from rdmalab.verbs.engine.ibcm_actions import ACTIONS as ACTIONS
from rdmalab.verbs.engine.ibcm_actions import Action as Action
from rdmalab.verbs.engine.ibcm_conn import CMAgentLike as CMAgentLike
from rdmalab.verbs.engine.ibcm_conn import CMConn as CMConn
from rdmalab.verbs.engine.ibcm_conn import CMHandler as CMHandler
from rdmalab.verbs.engine.ibcm_conn import CMStateError as CMStateError
from rdmalab.verbs.engine.ibcm_conn import CMTableError as CMTableError
from rdmalab.verbs.engine.ibcm_conn import Listener as Listener
from rdmalab.verbs.engine.ibcm_table import CALLS as CALLS
from rdmalab.verbs.engine.ibcm_table import CM_RESPONSE_TIMEOUT as CM_RESPONSE_TIMEOUT
from rdmalab.verbs.engine.ibcm_table import DROP as DROP
from rdmalab.verbs.engine.ibcm_table import DUPLICATE as DUPLICATE
from rdmalab.verbs.engine.ibcm_table import GSI_QPN as GSI_QPN
from rdmalab.verbs.engine.ibcm_table import IGNORE as IGNORE
from rdmalab.verbs.engine.ibcm_table import MAX_CM_RETRIES as MAX_CM_RETRIES
from rdmalab.verbs.engine.ibcm_table import MESSAGES as MESSAGES
from rdmalab.verbs.engine.ibcm_table import MRA_SERVICE_TIMEOUT as MRA_SERVICE_TIMEOUT
from rdmalab.verbs.engine.ibcm_table import OTHERWISE as OTHERWISE
from rdmalab.verbs.engine.ibcm_table import PACKET_LIFE_TIME as PACKET_LIFE_TIME
from rdmalab.verbs.engine.ibcm_table import RDMA_UDP_QKEY as RDMA_UDP_QKEY
from rdmalab.verbs.engine.ibcm_table import REFUSALS as REFUSALS
from rdmalab.verbs.engine.ibcm_table import REFUSE as REFUSE
from rdmalab.verbs.engine.ibcm_table import SIDR_REJECT as SIDR_REJECT
from rdmalab.verbs.engine.ibcm_table import SIDR_SUCCESS as SIDR_SUCCESS
from rdmalab.verbs.engine.ibcm_table import SIDR_TIMEOUT as SIDR_TIMEOUT
from rdmalab.verbs.engine.ibcm_table import SIDR_UNSUPPORTED as SIDR_UNSUPPORTED
from rdmalab.verbs.engine.ibcm_table import TABLE as TABLE
from rdmalab.verbs.engine.ibcm_table import Event as Event
from rdmalab.verbs.engine.ibcm_table import Rule as Rule
from rdmalab.verbs.engine.ibcm_table import State as State
from rdmalab.verbs.engine.ibcm_table import cm_ms as cm_ms
from rdmalab.verbs.engine.ibcm_table import edges as edges
from rdmalab.verbs.engine.ibcm_table import req_timeout_ms as req_timeout_ms
from rdmalab.verbs.engine.ibcm_table import rule as rule
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

GSI_QKEY = 0x80010000  # IBA Vol 1 10.2.5; rxe_hdr.h GSI_QKEY: rxe drops QP1 packets with another Q_Key
GSI_SPORT = 0xC000 + 0x1B72  # 55410 = 0xC000 + hash_32(1, 14): rxe's QP1 source port (never modified with an AV)
UD_SEND_ONLY = 0x64
CM_ATTR_LAP, CM_ATTR_APR = 0x0019, 0x001A
E = Event

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
        self.listeners: dict[int, Listener] = {}
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
        conn.local_gid = cm_gid(self.dev)
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
        p = Pkt(UD_SEND_ONLY, self.psn, GSI_QPN, cm_gid(dev), dst_gid, GSI_SPORT, dev.mac,
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
                self.dropped(why)
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
            self.dropped(f"undecodable CM MAD from {_ip(src_gid)}: {exc}")
            return
        if self.lose.get(msg.name):
            self.lose[msg.name] -= 1
            self.dropped(f"{msg.name} lost on the way (lose_next)", packet_id)
            return
        hdr = msg.mad
        if hdr.base_version != 1 or hdr.method != METHOD_SEND or hdr.class_version != w.CM_CLASS_VERSION:
            self.dropped(f"MAD base version {hdr.base_version} method {hdr.method:#x} class version "
                          f"{hdr.class_version}: ib_mad takes CM Sends of base version 1, class version 2")
            return
        event = _EVENT_OF_ATTR.get(hdr.attr_id)
        if event is None:
            self.dropped(f"CM attribute {hdr.attr_id:#x} refused (LAP/APR: no alternate paths on RoCE)")
            return
        matched = self.match(event, msg, src_gid)
        if isinstance(matched, str):
            self.dropped(matched)
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

    def dropped(self, why: str, packet_id: int | None = None) -> None:
        self.counters["cm_rx_dropped"] += 1
        self.log.append(why)
        if self.dev.tracing:
            if packet_id is not None:
                self.dev.trace(GSI_QPN, "dropped", packet_id=packet_id, reason=why)
            else:
                self.dev.trace(GSI_QPN, "dropped", reason=why)


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
            self.agent.dropped(f"QP1 takes UD SEND Only, not opcode {pkt.opcode:#x}")
            return
        if not _pkey_match(pkt.pkey, 0xFFFF):  # rxe_recv.c check_keys: QP1 takes the default partition's
            self.agent.dropped(f"QP1 packet with P_Key {pkt.pkey:#06x}, not the default partition's 0xffff")
            return
        if deth.q_key != GSI_QKEY:  # rxe_recv.c check_keys
            self.agent.dropped(f"QP1 packet with Q_Key {deth.q_key:#x}, not 0x80010000")
            return
        mad = bytes(pkt.payload)  # the carrier may reuse its buffer once this returns
        frame = pkt._frame
        if len(mad) != MAD_SIZE and frame is not None:
            # a packet decoded from a whole frame: the frame decoder went on into the MAD and left only
            # the private data as payload; the UD payload is what lies between the DETH and the ICRC
            mad = ud_payload(frame, self.dev)
        if len(mad) < MAD_SIZE:
            self.agent.dropped(f"a MAD of {len(mad)} bytes (MADs are 256)")
            return
        if mad[1] != MGMT_CLASS_CM:
            self.agent.dropped(f"MAD of management class {mad[1]:#x}: only the CM (0x07) is served")
            return
        self.agent.on_mad(mad[:MAD_SIZE], pkt.src_gid, pkt.id)

    def on_response(self, pkt: Pkt) -> None:
        self.agent.dropped("a response opcode to QP1")

    def segment(self, *args: Any) -> bool:
        return False

    def flush_ack(self) -> None:
        pass
