"""``pyverbs.cmid`` on soft devices: the :class:`CMID`, rdma_cm's identifier, over the engine's own CM.

The names, arguments and events are pyverbs' (rdma-core ``pyverbs/cmid.pyx``).  The CMID's life is
what the kernel's ``rdma_cm`` (``drivers/infiniband/core/cma.c``) does for rxe; its rooms:

* the value types :class:`AddrInfo`, :class:`CMEventChannel`, :class:`CMEvent`, :class:`ConnParam`,
  :class:`UDParam`, :class:`JoinMCAttrEx` are in :mod:`rdmalab.verbs.cmtypes`;
* addressing and routing (service IDs, the device that has or reaches an address, address
  handles, flow labels) in :mod:`rdmalab.verbs.cmroute`;
* the state table, the transport interface and the wait for an event in :mod:`rdmalab.verbs.cmstate`;
* the transports: IB CM MADs (:mod:`rdmalab.verbs.cmid_ib`: the REQ with its cma_hdr, REP, REJ,
  DREQ, SIDR; the passive side's checks of the cma_hdr; the IB CM's reports as rdma_cm events) and
  iWARP's TCP and MPA (:mod:`rdmalab.verbs.cmid_iwarp`).  A transport reports to the CMID that
  speaks for a connection (``cmstate.owner``) through its ``_move``, ``_post`` and, for a listener,
  ``_child`` and ``_request``; the CMID itself names no transport but to pick one (:func:`_transport`).

This module re-exports all of their public names (and the private ones callers used), so
``from rdmalab.verbs.cmid import X`` (and ``pyverbs.cmid``, served from it) works as before.
What stays here, in :class:`CMID`:

* **What librdmacm does for a QP made with** :meth:`CMID.create_qp`: INIT at once (UD: RTS with
  Q_Key 0x01234567, ``RDMA_UDP_QKEY``); :meth:`CMID.init_qp_attr` gives the attributes for RTR and
  RTS, with which the transport moves it on (the active side on the REP before the RTU,
  ``ucma_process_conn_resp``; the passive side's before the REP) and a program its own QP.
* **Events**: ADDR_RESOLVED and ROUTE_RESOLVED (the path is built locally), CONNECT_REQUEST queued
  on the listener's channel, MULTICAST_JOIN; the rest are the transport's (``cmid_ib._IBHandler``,
  ``cmid_iwarp``), posted through :meth:`CMID._post` with the state moved by :meth:`CMID._move`.
* **Multicast** as rdma_cm does it on RoCE (``cma_iboe_join_multicast``: no SA, the IPv4-mapped MGID).

A :class:`CMID` made from an :class:`AddrInfo` is synchronous, as ``rdma_create_ep`` makes it:
``connect``, ``get_request`` and ``accept`` wait for their events themselves.  Waiting advances
the device's carrier (the simulated fabric's virtual clock, or the UDP carrier's event loop); on
the simulated fabric, a wait for an event that nothing left to happen can bring raises
:class:`~rdmalab.verbs.pyverbs_error.PyverbsRDMAError` instead of hanging.
"""

from __future__ import annotations

import copy
import errno
import ipaddress
from collections import deque
from typing import Any

from rdmalab.verbs import enums as e
from rdmalab.verbs.addr import GID as GID
from rdmalab.verbs.addr import AHAttr as AHAttr
from rdmalab.verbs.addr import GlobalRoute as GlobalRoute
from rdmalab.verbs.cm_enums import RAI_PASSIVE as RAI_PASSIVE
from rdmalab.verbs.cm_enums import RDMA_OPTION_ID_ACK_TIMEOUT, RDMA_PS_TCP, RDMA_PS_UDP, rdma_cm_event_type
from rdmalab.verbs.cm_enums import RDMA_PS_IB as RDMA_PS_IB
from rdmalab.verbs.cmid_ib import CMA_HDR_SIZE as CMA_HDR_SIZE
from rdmalab.verbs.cmid_ib import IB as IB
from rdmalab.verbs.cmid_ib import MAX_REJ_PRIVATE as MAX_REJ_PRIVATE
from rdmalab.verbs.cmid_ib import MAX_REP_PRIVATE as MAX_REP_PRIVATE
from rdmalab.verbs.cmid_ib import MAX_REQ_PRIVATE as MAX_REQ_PRIVATE
from rdmalab.verbs.cmid_ib import MAX_SIDR_PRIVATE as MAX_SIDR_PRIVATE
from rdmalab.verbs.cmid_ib import _IBTransport as _IBTransport
from rdmalab.verbs.cmid_ib import _OneDevice as _OneDevice
from rdmalab.verbs.cmroute import _ah_to as _ah_to
from rdmalab.verbs.cmroute import _device_with as _device_with
from rdmalab.verbs.cmroute import _devices as _devices
from rdmalab.verbs.cmroute import _flow_label as _flow_label
from rdmalab.verbs.cmroute import _ip as _ip
from rdmalab.verbs.cmroute import _ipv4 as _ipv4
from rdmalab.verbs.cmroute import _port as _port
from rdmalab.verbs.cmroute import _route as _route
from rdmalab.verbs.cmroute import e_max_rd as e_max_rd
from rdmalab.verbs.cmroute import service_id as service_id
from rdmalab.verbs.cmroute_ib import IBPath, ib_path, peer_gid
from rdmalab.verbs.cmroute_ib import route as _route_ib
from rdmalab.verbs.cmstate import CMIDEvent, CMIDState, CMTransport, next_state, owner, wait_event
from rdmalab.verbs.cmstate import unreachable_text as unreachable_text
from rdmalab.verbs.cmtypes import AddrInfo as AddrInfo
from rdmalab.verbs.cmtypes import CMEvent as CMEvent
from rdmalab.verbs.cmtypes import CMEventChannel as CMEventChannel
from rdmalab.verbs.cmtypes import ConnParam as ConnParam
from rdmalab.verbs.cmtypes import JoinMCAttrEx as JoinMCAttrEx
from rdmalab.verbs.cmtypes import UDParam as UDParam
from rdmalab.verbs.cmtypes import _Event as _Event
from rdmalab.verbs.cmtypes import _external as _external
from rdmalab.verbs.cmtypes import event_str as event_str
from rdmalab.verbs.cq import CQ
from rdmalab.verbs.device import MAX_QP_RD_ATOM as MAX_QP_RD_ATOM
from rdmalab.verbs.device import Context, is_iwarp
from rdmalab.verbs.engine.gsi_link import on_ib
from rdmalab.verbs.engine.ibcm_conn import CMConn
from rdmalab.verbs.engine.ibcm_table import RDMA_UDP_QKEY
from rdmalab.verbs.engine.node import SoftDevice
from rdmalab.verbs.engine.packet import MCAST_QPN
from rdmalab.verbs.mr import MR
from rdmalab.verbs.pd import PD
from rdmalab.verbs.pyverbs_error import PyverbsRDMAError, PyverbsUserError
from rdmalab.verbs.qp import ECE, QP, QPAttr, QPInitAttr
from rdmalab.verbs.wr import SGE, RecvWR, SendWR
from rdmalab.wire import cm as w

EV = rdma_cm_event_type
#: what librdmacm's rdma_resolve_addr/route default to in pyverbs
DEFAULT_TIMEOUT_MS = 2000
RNR_TIMER = 12  # the QP's min_rnr_timer librdmacm leaves to the device default; 0.64 ms


def _transport(dev: Any) -> CMTransport:
    """The connection manager of ``dev``: IB CM MADs (:data:`IB`), or TCP and MPA on a soft iWARP device."""
    if not is_iwarp(dev):
        return IB
    # imported here, and only for an iWARP device: a RoCE program does not load the iWARP modules
    from rdmalab.verbs import cmid_iwarp

    return cmid_iwarp.TRANSPORT


class CMID:
    """``CMID(creator=None, qp_init_attr=None, pd=None, port_space=RDMA_PS_TCP, listen_id=None)``.

    ``creator`` is an :class:`AddrInfo` (synchronous, ``rdma_create_ep``), a :class:`CMEventChannel`
    (asynchronous, ``rdma_create_id``) or a CONNECT_REQUEST :class:`CMEvent` with ``listen_id``.
    """

    def __init__(self, creator: Any = None, qp_init_attr: QPInitAttr | None = None, pd: PD | None = None,
                 port_space: int = RDMA_PS_TCP, listen_id: CMID | None = None) -> None:
        self.ctx: Context | None = None
        self._pd: PD | None = pd
        self.qp: QP | None = None
        self.device: SoftDevice | None = None
        self.port_space = port_space
        self.src_addr: str | None = None
        self.src_port = 0
        self.dst_addr: str | None = None
        self.dst_port = 0
        self.dst_gid: int | None = None  # the peer's GID, from resolve_addr (on IB its port GID)
        self.ib_path: IBPath | None = None  # on IB: the path resolve_route found
        self.conn: CMConn | None = None
        self.backlog: deque[CMID] = deque()
        self.remote_qpn = 0
        self.req: w.CMMessage | None = None
        self.sync = False
        self.closed = False
        self._channel: CMEventChannel | None = None
        self._own_cqs: list[CQ] = []
        self._psn = 0
        self._accept_res = (0, 0)
        self._qp_init: QPInitAttr | None = None
        self._ack_timeout: int | None = None
        self._groups: set[str] = set()
        self._devs_listening: list[SoftDevice] = []
        self._iw: Any = None  # iWARP (rdmalab.verbs.cmid_iwarp): the TCP/MPA connection, or the listener's address
        #: the CMID made from this one's CONNECT_REQUEST event, which speaks for it (cmstate.owner)
        self._adopted_by: CMID | None = None
        self.state = CMIDState.IDLE  # changed only by _move, through cmstate.TRANSITIONS
        if creator is None:
            return
        if isinstance(creator, AddrInfo):
            self.sync = True
            self.port_space = creator.port_space
            self._set_channel(CMEventChannel())
            if creator.passive:
                self._bind(creator.src_addr or "0.0.0.0", creator.src_port)
            else:
                self._resolve(creator.src_addr, creator.dst_addr or "", creator.dst_port, DEFAULT_TIMEOUT_MS)
                self._take(EV.RDMA_CM_EVENT_ADDR_RESOLVED, "ADDR_RESOLVED")
                self.resolve_route()
                self._take(EV.RDMA_CM_EVENT_ROUTE_RESOLVED, "ROUTE_RESOLVED")
            if qp_init_attr is not None and not creator.passive:
                self.create_qp(qp_init_attr)
            self._qp_init = qp_init_attr if creator.passive else None
        elif isinstance(creator, CMEventChannel):
            self._set_channel(creator)
        elif isinstance(creator, CMEvent):
            if listen_id is None:
                raise PyverbsUserError("listen ID not provided")
            child = creator.id
            if creator.event_type != EV.RDMA_CM_EVENT_CONNECT_REQUEST or child is None:
                raise PyverbsUserError(f"a CMID is made from a CONNECT_REQUEST event, not {creator.event_str()}")
            self.__dict__.update(child.__dict__)
            child._adopted_by = self  # the child's events now come here (cmstate.owner)
            if self._channel is not None:
                self._channel.ids.append(self)
        else:
            raise PyverbsRDMAError(f"Cannot create CM ID from {type(creator)}", errno.EINVAL)

    @property
    def listening(self) -> bool:
        """Whether ``listen`` has been called (the state says so: a listener stays in LISTEN)."""
        return self.state == CMIDState.LISTEN

    # ------------------------------------------------------------------ properties pyverbs has
    @property
    def event_channel(self) -> CMEventChannel | None:
        return None if self.sync else self._channel

    @property
    def context(self) -> Context | None:
        return self.ctx

    @property
    def pd(self) -> PD | None:
        return self._pd

    @property
    def handle(self) -> int:
        """So that ``MR(cmid, ...)`` and ``PD(cmid)`` work, as they do in pyverbs."""
        return self._need_pd().handle

    @property
    def qpn(self) -> int | None:
        return None if self.qp is None else self.qp.qp_num

    @property
    def dev_name(self) -> str | None:
        return None if self.device is None else self.device.name

    @property
    def port_num(self) -> int:
        return 1

    def _need_pd(self) -> PD:
        if self._pd is None:
            raise PyverbsUserError("this CMID is not bound to a device yet (bind_addr or resolve_route first)")
        return self._pd

    def _set_channel(self, ch: CMEventChannel) -> None:
        self._channel = ch
        ch.ids.append(self)

    def _post(self, kind: int, **kw: Any) -> None:
        if self._channel is not None:
            self._channel.post(_Event(kind, owner(self), **kw))

    def _take(self, kind: int, what: str, timeout_ms: int | None = None) -> _Event:
        """Wait for this CMID's next event, which must be ``kind`` (cmstate.wait_event)."""
        assert self._channel is not None
        where = f"{self.dst_addr}:{self.dst_port}" if self.dst_addr is not None else self._where()
        ev: _Event = wait_event(self._channel, self, kind, what, where=where, timeout_ms=timeout_ms)
        return ev

    def _move(self, event: CMIDEvent, what: str = "") -> None:
        """The one way ``state`` changes: ``cmstate.TRANSITIONS[(state, event)]``, else EINVAL naming both."""
        self.state = self._check(event, what)

    def _check(self, event: CMIDEvent, what: str = "") -> CMIDState:
        """Where ``event`` would take this CMID (EINVAL if nowhere), without moving it."""
        try:
            return next_state(self.state, event)
        except PyverbsRDMAError as exc:
            if not what:
                raise
            raise PyverbsRDMAError(f"Failed to {what}: {exc.args[0]}", errno.EINVAL) from None

    def _transport(self) -> CMTransport:
        return _transport(self.device)

    def _where(self) -> str:
        if self.dst_addr is not None:
            return f"{self.src_addr}:{self.src_port} -> {self.dst_addr}:{self.dst_port}"
        return f"{self.src_addr}:{self.src_port}"

    # ------------------------------------------------------------------ addresses
    def _attach(self, dev: SoftDevice) -> None:
        self.device = dev
        if self.ctx is None:
            self.ctx = Context(name=dev.name, fabric=_OneDevice(dev))
        if self._pd is None:
            self._pd = PD(self.ctx)

    def _bind(self, addr: str, port: int) -> None:
        if addr != "0.0.0.0":
            dev = _device_with(addr)
            if dev is None:
                have = ", ".join(f"{n} {_ip(d.ipv4)}" for n, d in _devices().items())
                raise PyverbsRDMAError(f"Failed to Bind ID: no soft device has address {addr} (have: {have})",
                                       errno.EADDRNOTAVAIL)
            self._attach(dev)
        else:
            devs = list(_devices().values())
            if devs:
                self._attach(devs[0])
        self.src_addr, self.src_port = addr, port

    def bind_addr(self, lai: AddrInfo) -> None:
        """``rdma_bind_addr`` to the source of ``lai`` (its address picks the device)."""
        self._bind(lai.src_addr or "0.0.0.0", lai.src_port)

    def _resolve(self, src: str | None, dst: str, port: int, timeout_ms: int) -> None:
        dev = _device_with(src) if src and src != "0.0.0.0" else _route_ib(dst)
        if dev is None:
            raise PyverbsRDMAError(f"Failed to Resolve Address: no soft device has source address {src}",
                                   errno.EADDRNOTAVAIL)
        self._attach(dev)
        self.src_addr = _ip(dev.ipv4)
        if not self.src_port:
            self.src_port = dev.rng.randrange(32768, 61000)  # Linux's ip_local_port_range
        self.dst_gid = peer_gid(dev, dst)
        if self.dst_gid is None:  # IB: the neighbour (IPoIB's ARP) never answers
            dev.schedule(timeout_ms * 1_000_000, lambda _: self._post(EV.RDMA_CM_EVENT_ADDR_ERROR,
                                                                      status=-errno.ETIMEDOUT))
            return
        self.dst_addr, self.dst_port = dst, port
        self._move(CMIDEvent.RESOLVE_ADDR)
        self._post(EV.RDMA_CM_EVENT_ADDR_RESOLVED)

    def resolve_addr(self, rai: AddrInfo, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> None:
        """``rdma_resolve_addr``: pick the local device; ADDR_RESOLVED follows on the channel."""
        if rai.dst_addr is None:
            raise PyverbsRDMAError("Failed to Resolve Address: the AddrInfo has no destination", errno.EINVAL)
        self._check(CMIDEvent.RESOLVE_ADDR, "Resolve Address")
        self._resolve(rai.src_addr if rai.src_addr else self.src_addr, rai.dst_addr, rai.dst_port, timeout_ms)

    def resolve_route(self, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> None:
        """``rdma_resolve_route``: the path is built locally (no SA on RoCE), on IB asked of the SA
        (:mod:`rdmalab.verbs.cmroute_ib`); ROUTE_RESOLVED follows."""
        self._check(CMIDEvent.RESOLVE_ROUTE, "Resolve Route")
        if on_ib(self.device) and self.dst_gid is not None:
            try:
                self.ib_path = ib_path(self.device, self.dst_gid)
            except PyverbsRDMAError as exc:  # the SA's answer (cma_query_handler): an event, not the call's error
                self._post(EV.RDMA_CM_EVENT_ROUTE_ERROR, status=-exc.error_code, why=exc.msg)
                return
        self._move(CMIDEvent.RESOLVE_ROUTE, "Resolve Route")
        self._post(EV.RDMA_CM_EVENT_ROUTE_RESOLVED)

    # ------------------------------------------------------------------ QP
    def create_qp(self, qp_init: QPInitAttr) -> None:
        """``rdma_create_qp``: a QP on this CMID's PD, with CQs of its own if ``qp_init`` has none;
        INIT for a connected QP, RTS with Q_Key 0x01234567 for UD (as librdmacm leaves them)."""
        pd = self._need_pd()
        assert self.ctx is not None
        qp_init = copy.copy(qp_init)  # the caller's attributes stay as they were (a listener reuses them)
        if qp_init.send_cq is None or qp_init.recv_cq is None:
            depth = max(qp_init.cap.max_send_wr + qp_init.cap.max_recv_wr, 1)
            cq = CQ(self.ctx, depth)
            self._own_cqs.append(cq)
            qp_init.send_cq = qp_init.send_cq or cq
            qp_init.recv_cq = qp_init.recv_cq or cq
        if self.port_space == RDMA_PS_UDP:
            qp_init.qp_type = e.IBV_QPT_UD
        attr = QPAttr(port_num=1)
        attr.pkey_index = 0
        if qp_init.qp_type == e.IBV_QPT_UD:
            attr.qkey = RDMA_UDP_QKEY
            attr.sq_psn = self.device.rng.getrandbits(24) if self.device else 0
        else:
            attr.qp_access_flags = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
                                    | e.IBV_ACCESS_REMOTE_ATOMIC)
        self.qp = QP(pd, qp_init, attr)

    def query_qp(self, attr_mask: int) -> tuple[QPAttr, QPInitAttr]:
        if self.qp is None:
            raise PyverbsRDMAError("Failed to query QP: the CMID has no QP", errno.EINVAL)
        return self.qp.query(attr_mask)

    def init_qp_attr(self, qp_state: int) -> tuple[QPAttr, int]:
        """``rdma_init_qp_attr``: the attributes an external QP needs for ``qp_state``, and their mask."""
        a = QPAttr(qp_state=qp_state, port_num=1)
        mask: int = e.IBV_QP_STATE
        if qp_state == e.IBV_QPS_INIT:
            a.pkey_index, a.port_num = 0, 1
            a.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
            mask |= e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS
            if self.port_space == RDMA_PS_UDP:
                a.qkey = RDMA_UDP_QKEY
                mask = e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_QKEY
            return a, mask
        p = self._transport().qp_path(self)
        if qp_state == e.IBV_QPS_RTR:
            a.path_mtu, a.dest_qp_num, a.rq_psn = p["mtu"], p["dest_qp"], p["rq_psn"]
            a.ah_attr = p["ah"]
            a.max_dest_rd_atomic, a.min_rnr_timer = p["resp_res"], RNR_TIMER
            return a, (mask | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN | e.IBV_QP_RQ_PSN
                       | e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER)
        if qp_state == e.IBV_QPS_RTS:
            a.sq_psn, a.retry_cnt, a.rnr_retry = p["sq_psn"], p["retry"], p["rnr_retry"]
            a.timeout = self._ack_timeout if self._ack_timeout is not None else p["timeout"]
            a.max_rd_atomic = p["init_depth"]
            return a, (mask | e.IBV_QP_SQ_PSN | e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT | e.IBV_QP_RNR_RETRY
                       | e.IBV_QP_MAX_QP_RD_ATOMIC)
        return a, mask

    def _modify(self, state: int) -> None:
        assert self.qp is not None
        a, mask = self.init_qp_attr(state)
        self.qp.modify(a, mask)

    # ------------------------------------------------------------------ passive side
    def listen(self, backlog: int = 0) -> None:
        """``rdma_listen`` on the bound address and port (0.0.0.0: every device)."""
        if self.device is None:
            raise PyverbsRDMAError("Listen Failed: bind_addr first", errno.EINVAL)
        self._check(CMIDEvent.LISTEN, "Listen")
        self._transport().listen(self)
        self._move(CMIDEvent.LISTEN)

    def _child(self, dev: SoftDevice | None) -> CMID:
        """The CMID of a connection request to this listener (on ``dev``, the device it came to)."""
        child = CMID()
        child.port_space = self.port_space
        child._channel = self._channel
        child.sync = self.sync
        if self.device is dev or dev is None:
            child._share(self)
        else:
            child._attach(dev)
        child._move(CMIDEvent.REQUEST)
        return child

    def _request(self, child: CMID, private_data: bytes) -> None:
        """Queue ``child``'s CONNECT_REQUEST (it is complete: addresses and connection set)."""
        if self._channel is not None:
            self._channel.ids.append(child)
        self.backlog.append(child)
        if self._channel is not None:
            self._channel.post(_Event(EV.RDMA_CM_EVENT_CONNECT_REQUEST, child, listen=self,
                                      private_data=private_data))

    def _share(self, parent: CMID) -> None:
        self.device, self.ctx, self._pd = parent.device, parent.ctx, parent._pd

    def get_request(self) -> CMID:
        """``rdma_get_request`` (synchronous listener): wait for a connection request, return its CMID."""
        if not self.listening:
            raise PyverbsRDMAError("Failed to get request: the CMID is not listening", errno.EINVAL)
        assert self._channel is not None
        ev = wait_event(self._channel, None, (), "a connection request", where=self._where(), listen=self)
        child: CMID = ev.cmid
        if self.backlog and self.backlog[0] is child:
            self.backlog.popleft()
        self.ctx, self._pd = child.ctx, child._pd
        if self._qp_init is not None and child.qp is None:  # rdma_get_request makes the QP of an endpoint
            child.create_qp(self._qp_init)
        return child

    def accept(self, param: ConnParam | None = None) -> None:
        """``rdma_accept``: QP to RTR and RTS (if the CMID has one), then the REP (SIDR_REP for UD);
        on iWARP the MPA Reply."""
        param = param or ConnParam(resources=e_max_rd(), depth=e_max_rd())
        self._check(CMIDEvent.ACCEPT, "Accept Connection")
        self._transport().accept(self, param)  # a synchronous CMID waits there for ESTABLISHED

    def reject(self, private_data: bytes | None = None, private_data_len: int = 0) -> None:
        """``rdma_reject``: REJ reason 28 (consumer defined) with the private data (SIDR: status reject);
        on iWARP an MPA Reply with R and the private data."""
        self._check(CMIDEvent.REJECT, "Reject Connection")
        self._transport().reject(self, bytes(private_data or b"")[:private_data_len or None])
        self._move(CMIDEvent.REJECT)

    # ------------------------------------------------------------------ active side
    def connect(self, param: ConnParam | None = None) -> None:
        """``rdma_connect``: the REQ (SIDR_REQ in RDMA_PS_UDP); the REP and RTU follow on the channel.
        On iWARP: the TCP connection, then the MPA Request."""
        if self.device is None or self.dst_addr is None:
            raise PyverbsRDMAError("Failed to Connect: resolve the address and the route first", errno.EINVAL)
        self._check(CMIDEvent.CONNECT, "Connect")
        param = param or ConnParam(resources=e_max_rd(), depth=e_max_rd(), retry=7, rnr_retry=7)
        self._transport().connect(self, param)
        if self.sync:
            self._take(EV.RDMA_CM_EVENT_ESTABLISHED, "connect")

    def establish(self) -> None:
        """``rdma_establish`` (a CMID without a QP, after CONNECT_RESPONSE): send the RTU.  The active
        side gets no ESTABLISHED event for it (librdmacm ``rdma_establish``); the passive side does."""
        self._transport().establish(self)

    def disconnect(self) -> None:
        """``rdma_disconnect``: the QP to ERR, then the DREQ (or the DREP answering the peer's); on iWARP a TCP FIN."""
        self._transport().disconnect(self)

    # ------------------------------------------------------------------ rdma_verbs.h helpers
    def reg_msgs(self, size: int) -> MR:
        return MR(self._need_pd(), size, e.IBV_ACCESS_LOCAL_WRITE)

    def reg_read(self, size: int = 0) -> MR:
        return MR(self._need_pd(), size, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ)

    def reg_write(self, size: int = 0) -> MR:
        return MR(self._need_pd(), size, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)

    def _need_qp(self, what: str) -> QP:
        if self.qp is None:
            raise PyverbsRDMAError(f"Failed to {what}: the CMID has no QP (create_qp first)", errno.EINVAL)
        return self.qp

    def post_recv(self, mr: MR, length: int | None = None) -> None:
        self._need_qp("Post Receive").post_recv(RecvWR(num_sge=1, sg=[SGE(mr.buf, length or mr.length, mr.lkey)]))

    def post_send(self, mr: MR, flags: int = e.IBV_SEND_SIGNALED, length: int | None = None) -> None:
        wr = SendWR(opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(mr.buf, length or mr.length, mr.lkey)], send_flags=flags)
        self._need_qp("Post Send").post_send(wr)

    def post_read(self, mr: MR, length: int, remote_addr: int, rkey: int, flags: int = 0) -> None:
        wr = SendWR(opcode=e.IBV_WR_RDMA_READ, num_sge=1, sg=[SGE(mr.buf, length, mr.lkey)], send_flags=flags)
        wr.set_wr_rdma(rkey, remote_addr)
        self._need_qp("Post Read").post_send(wr)

    def post_write(self, mr: MR, length: int, remote_addr: int, rkey: int, flags: int = 0) -> None:
        wr = SendWR(opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(mr.buf, length, mr.lkey)], send_flags=flags)
        wr.set_wr_rdma(rkey, remote_addr)
        self._need_qp("Post Write").post_send(wr)

    def post_ud_send(self, mr: MR, ah: Any, rqpn: int = 0, flags: int = e.IBV_SEND_SIGNALED,
                     length: int | None = None) -> None:
        wr = SendWR(opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(mr.buf, length or mr.length, mr.lkey)], send_flags=flags)
        wr.set_wr_ud(ah, rqpn, RDMA_UDP_QKEY)
        self._need_qp("Post Send").post_send(wr)

    def _comp(self, cq: Any) -> Any:
        while True:
            n, wcs = cq.poll(1)
            if n:
                return wcs[0]

    def get_recv_comp(self) -> Any:
        qp = self._need_qp("retrieve receive completion")
        return self._comp(qp.rcq)

    def get_send_comp(self) -> Any:
        qp = self._need_qp("retrieve send completion")
        return self._comp(qp.scq)

    def set_option(self, level: int, optname: int, optval: int, optlen: int) -> None:
        """``rdma_set_option``: only RDMA_OPTION_ID_ACK_TIMEOUT, as pyverbs: the QP's ACK timeout
        (and the REQ's local ACK timeout) from now on (cma.c ``rdma_set_ack_timeout``)."""
        if optname != RDMA_OPTION_ID_ACK_TIMEOUT:
            raise PyverbsUserError("Currently only RDMA_OPTION_ID_ACK_TIMEOUT is supported in Pyverbs.")
        if not 0 <= optval <= 31:
            raise PyverbsRDMAError(f"Failed to set option: ACK timeout {optval} is not 0..31", errno.EINVAL)
        self._ack_timeout = optval

    def get_remote_ece(self) -> ECE:
        """``rdma_get_remote_ece``: the peer's ECE from the REQ/REP, zeros (the soft devices send none, as rxe)."""
        return ECE()

    def set_local_ece(self, ece: Any) -> None:
        raise PyverbsRDMAError("Failed to set local ECE: the soft devices have no ECE (as rxe)", errno.EOPNOTSUPP)

    def join_multicast(self, addr: AddrInfo | None = None, mc_attr: JoinMCAttrEx | None = None,
                       context: int = 0) -> None:
        """``rdma_join_multicast``: on RoCE no SA is asked (``cma_iboe_join_multicast``): the group's MGID
        is its IPv4-mapped address, the Q_Key RDMA_UDP_QKEY; the carrier joins the IP group, the CMID's
        QP is attached to the MGID and MULTICAST_JOIN follows with the group's address handle."""
        if addr is None and mc_attr is None:
            raise PyverbsUserError("Join to multicast must have AddrInfo or JoinMCAttrEx arguments")
        ai = mc_attr.addr if mc_attr is not None else addr
        assert ai is not None
        group = ai.src_addr or ai.dst_addr
        if group is None or not ipaddress.IPv4Address(group).is_multicast:
            raise PyverbsRDMAError(f"Failed to Join multicast: {group} is not an IPv4 multicast address",
                                   errno.EINVAL)
        if self.device is None:
            raise PyverbsRDMAError("Failed to Join multicast: bind or resolve an address first", errno.EINVAL)
        join = getattr(self.device.carrier, "join_group", None)
        if join is not None:
            join(group)
        mgid = 0xFFFF00000000 | int(ipaddress.IPv4Address(group))
        if self.qp is not None:
            self.qp.attach_mcast(mgid)
        self._groups.add(group)
        self._post(EV.RDMA_CM_EVENT_MULTICAST_JOIN, ud=(MCAST_QPN, RDMA_UDP_QKEY, _ah_to(group)))

    def leave_multicast(self, addr: AddrInfo) -> None:
        """``rdma_leave_multicast``: the QP detached, the IP group left."""
        group = addr.src_addr or addr.dst_addr
        if group not in self._groups:
            raise PyverbsRDMAError(f"Failed to leave multicast: this CMID has not joined {group}", errno.EINVAL)
        self._groups.discard(group)
        mgid = 0xFFFF00000000 | int(ipaddress.IPv4Address(group))
        if self.qp is not None:
            self.qp.detach_mcast(mgid)
        leave = getattr(self.device.carrier, "leave_group", None) if self.device is not None else None
        if leave is not None:
            leave(group)

    def set_log_level(self, level: int) -> None:
        pass

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.listening and self.device is not None:
            self._transport().unlisten(self)
        if self.qp is not None:
            self.qp.close()
        if self._channel is not None and self in self._channel.ids:
            self._channel.ids.remove(self)

    def __enter__(self) -> CMID:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<CMID {self._where()} {self.state}>"

