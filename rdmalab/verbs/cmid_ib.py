"""rdma_cm's IB transport: what a :class:`~rdmalab.verbs.cmid.CMID` on a RoCE or InfiniBand soft device asks of the
device's own IB CM (:mod:`rdmalab.verbs.engine.ibcm`, CM MADs on QP1), as the kernel's ``rdma_cm``
(``drivers/infiniband/core/cma.c``) does for rxe.  It implements
:class:`~rdmalab.verbs.cmstate.CMTransport`, as :mod:`rdmalab.verbs.cmid_iwarp` does for iWARP
(TCP and MPA); :data:`IB` is the transport of every device that is not iWARP.

* **Listening**: the service ID ``(port_space << 16) + port`` (``rdma_get_service_id``) on the bound
  device, or every device for 0.0.0.0; a port listened on already is EADDRINUSE.
* **The cma_hdr**: the REQ's (and SIDR_REQ's) private data starts with 36 bytes: version 0, IP
  version 4 in the high nibble, the active side's port, its address and the destination's
  (``cma_format_hdr``); the user's private data follows (REQ: 92 bytes in all, SIDR_REQ: 216).
* **The REQ**: the path built locally as ``cma_resolve_iboe_route`` does (IPv4-mapped GIDs, the
  device's MTU, the RoCE flow label of ``cma_get_roce_udp_flow_label``), retry counts capped at 7,
  the local ACK timeout ``rdma_set_ack_timeout`` set or packet life time + 1.  On an InfiniBand
  port the path is the one ``resolve_route`` found (:mod:`rdmalab.verbs.cmroute_ib`): both LIDs, the
  port GIDs, the SL, SubnetLocal, the path's MTU; the QPs' address vectors name the peer's LID.
  RDMA_PS_UDP sends a SIDR_REQ instead.
* **rdma_establish** (a CMID without a QP, after CONNECT_RESPONSE): the RTU.  **init_qp_attr**'s RTR
  and RTS attributes come from the REQ and REP (:meth:`_IBTransport.qp_path`).
* **accept**: the QP (if the CMID has one) to RTR and RTS, then the REP with responder resources
  and initiator depth limited by the REQ's; SIDR: the SIDR_REP (Q_Key ``RDMA_UDP_QKEY``).
  **reject**: REJ reason 28 (consumer defined), SIDR: status reject.  **disconnect**: the QP to
  ERR, then the DREQ (or the DREP answering the peer's).
* **The passive side's REQ** (:class:`_IBListener`, ``cma_ib_req_handler``): the cma_hdr's checks,
  refusing a header that is not version 0 / IPv4 or IPv6 with REJ 28 (``cma_save_ip_info``) and a
  destination other than the address listened on with REJ 8 (``cma_match_private_data``); a
  SIDR_REQ refused so gets a SIDR_REP with status reject.  Else a child CMID, which learns the peer's
  address and port from the header, and CONNECT_REQUEST on the listener's channel.
* **Events** (:class:`_IBHandler`, ``cma_ib_handler``): the IB CM's reports on a connection become
  rdma_cm's events on the CMID that speaks for it: CONNECT_RESPONSE (a CMID without a QP; with one,
  the QP goes to RTR and RTS and the RTU is sent, ``ucma_process_conn_resp``, then ESTABLISHED),
  ESTABLISHED, REJECTED (``status`` the REJ reason), UNREACHABLE (``status`` -ETIMEDOUT after the
  CM's retries; -ECONNREFUSED for a SIDR_REP that refuses), DISCONNECTED, TIMEWAIT_EXIT; a REP the QP
  cannot take is answered with REJ 28 and is CONNECT_ERROR.
"""

from __future__ import annotations

import errno
import ipaddress
from dataclasses import dataclass
from typing import Any

from rdmalab.verbs import enums as e
from rdmalab.verbs.cm_enums import RDMA_PS_UDP, rdma_cm_event_type
from rdmalab.verbs.cmroute import _devices, _flow_label, _ip, service_id
from rdmalab.verbs.cmroute_ib import ah_of, req_path
from rdmalab.verbs.cmstate import CMIDEvent, owner
from rdmalab.verbs.cmtypes import ConnParam
from rdmalab.verbs.device import MAX_QP_RD_ATOM
from rdmalab.verbs.engine.ibcm_conn import CMConn, CMHandler, CMStateError
from rdmalab.verbs.engine.ibcm_table import PACKET_LIFE_TIME, RDMA_UDP_QKEY, SIDR_REJECT, SIDR_SUCCESS
from rdmalab.verbs.engine.node import SoftDevice
from rdmalab.verbs.pyverbs_error import PyverbsRDMAError
from rdmalab.wire import cm as w
from rdmalab.wire.mad import CM_ATTR_SIDR_REQ

# rdmalab.verbs.cmid.CMID (cmid imports this module, so it is not imported here)
CMID = Any
EV = rdma_cm_event_type
CMA_HDR_SIZE = 36
#: REQ private data after the cma_hdr (IBA: 92 bytes in all), SIDR_REQ's (216 in all)
MAX_REQ_PRIVATE, MAX_SIDR_PRIVATE = 92 - CMA_HDR_SIZE, 216 - CMA_HDR_SIZE
MAX_REP_PRIVATE, MAX_REJ_PRIVATE = 196, 148


class _IBTransport:
    """rdma_cm over the soft device's own IB CM (:mod:`rdmalab.verbs.engine.ibcm`): CM MADs on QP1."""

    def listen(self, cmid: CMID) -> None:
        assert cmid.device is not None
        if not cmid.src_port:
            cmid.src_port = cmid.device.rng.randrange(32768, 61000)
        sid = service_id(cmid.port_space, cmid.src_port)
        devs = list(_devices().values()) if cmid.src_addr == "0.0.0.0" else [cmid.device]
        for dev in devs:
            if sid in dev.gsi.agent.listeners:
                raise PyverbsRDMAError(f"Listen Failed: port {cmid.src_port} is already listened on on {dev.name}",
                                       errno.EADDRINUSE)
        for dev in devs:
            shared = dev.gsi.agent.shared
            if shared is not None and not shared.listen(sid):
                raise PyverbsRDMAError(f"Listen Failed: another process listens on port {cmid.src_port} of "
                                       f"{dev.name}", errno.EADDRINUSE)
            dev.gsi.agent.listeners[sid] = _IBListener(cmid)
            cmid._devs_listening = devs

    def unlisten(self, cmid: CMID) -> None:
        sid = service_id(cmid.port_space, cmid.src_port)
        for dev in cmid._devs_listening:
            if dev.gsi.agent.listeners.get(sid) == _IBListener(cmid):
                del dev.gsi.agent.listeners[sid]
                if dev.gsi.agent.shared is not None:
                    dev.gsi.agent.shared.unlisten(sid)

    def connect(self, cmid: CMID, param: ConnParam) -> None:
        dev = cmid.device
        assert dev is not None and cmid.dst_addr is not None
        dst_gid = cmid.dst_gid if cmid.dst_gid is not None else 0xFFFF00000000 | int(ipaddress.IPv4Address(cmid.dst_addr))
        src = cmid.src_addr or "0.0.0.0"
        hdr = w.IPCMHeader.for_addresses(src, cmid.dst_addr, cmid.src_port)
        user = param.private_data
        agent = dev.gsi.agent
        if cmid.port_space == RDMA_PS_UDP:
            if len(user) > MAX_SIDR_PRIVATE:
                raise PyverbsRDMAError(f"Failed to Connect: {len(user)} bytes of private data (a SIDR_REQ holds "
                                       f"{MAX_SIDR_PRIVATE} after the cma_hdr)", errno.EINVAL)
            cmid._move(CMIDEvent.CONNECT)
            cmid.conn = agent.sidr_request(_IBHandler(cmid), dst_gid, service_id(cmid.port_space, cmid.dst_port),
                                           hdr.encode() + user)
            return
        if len(user) > MAX_REQ_PRIVATE:
            raise PyverbsRDMAError(f"Failed to Connect: {len(user)} bytes of private data (a REQ holds "
                                   f"{MAX_REQ_PRIVATE} after the cma_hdr)", errno.EINVAL)
        qpn = cmid.qp.qp_num if cmid.qp is not None else param.qp_num
        psn = dev.rng.getrandbits(24)
        mtu = e.bytes_to_mtu(dev.active_mtu)
        dst = cmid.dst_addr
        ack = cmid._ack_timeout if cmid._ack_timeout is not None else PACKET_LIFE_TIME + 1
        if cmid.ib_path is not None:  # IB: the path resolve_route found, with both LIDs
            mtu = min(mtu, cmid.ib_path.mtu)
            path = req_path(cmid.ib_path, ack)
        else:
            path = w.CMPath.roce(src, dst, packet_rate=0, flow_label=_flow_label(cmid.src_port, cmid.dst_port),
                                 local_ack_timeout=ack)

        def build(local_id: int) -> w.CMMessage:
            return w.build_req(src, dst, cmid.src_port, cmid.dst_port,
                               local_comm_id=local_id, local_qpn=qpn, starting_psn=psn,
                               local_ca_guid=agent.guid, responder_resources=param.responder_resources,
                               initiator_depth=param.initiator_depth, path_mtu=mtu,
                               retry_count=min(param.retry_count, 7), rnr_retry_count=min(param.rnr_retry_count, 7),
                               srq=1 if param.srq else 0, private_data=user, path=path)

        cmid._move(CMIDEvent.CONNECT)
        cmid.conn = agent.connect(_IBHandler(cmid), dst_gid, build)
        cmid.req = cmid.conn.req

    def accept(self, cmid: CMID, param: ConnParam) -> None:
        conn = cmid.conn
        if conn is None or cmid.req is None:
            raise PyverbsRDMAError("Failed to Accept Connection: no connection request on this CMID", errno.EINVAL)
        if isinstance(cmid.req.body, w.CMSidrReq):
            qpn = cmid.qp.qp_num if cmid.qp is not None else param.qp_num
            cmid._move(CMIDEvent.ACCEPT)
            conn.sidr_reply(qpn, RDMA_UDP_QKEY, SIDR_SUCCESS, param.private_data)
            cmid._move(CMIDEvent.ESTABLISHED)  # SIDR: the SIDR_REP is the whole answer, no event on this side
            return
        req = cmid.req.body
        assert isinstance(req, w.CMReq) and cmid.device is not None
        res = min(param.responder_resources, max(req.initiator_depth, 0))
        depth = min(param.initiator_depth, req.responder_resources)
        cmid._accept_res = (res, depth)
        if cmid.qp is not None:
            cmid._modify(e.IBV_QPS_RTR)
            cmid._modify(e.IBV_QPS_RTS)
        qpn = cmid.qp.qp_num if cmid.qp is not None else param.qp_num
        if len(param.private_data) > MAX_REP_PRIVATE:
            raise PyverbsRDMAError(f"Failed to Accept Connection: {len(param.private_data)} bytes of private data "
                                   f"(a REP holds {MAX_REP_PRIVATE})", errno.EINVAL)
        cmid._move(CMIDEvent.ACCEPT)
        conn.accept(local_qpn=qpn, starting_psn=cmid._psn, responder_resources=res, initiator_depth=depth,
                    rnr_retry_count=min(param.rnr_retry_count, 7), private_data=param.private_data)
        if cmid.sync:
            cmid._take(EV.RDMA_CM_EVENT_ESTABLISHED, "accept")

    def reject(self, cmid: CMID, private_data: bytes) -> None:
        if cmid.conn is None or cmid.req is None:
            raise PyverbsRDMAError("Failed to Reject Connection: no connection request on this CMID", errno.EINVAL)
        if isinstance(cmid.req.body, w.CMSidrReq):
            cmid.conn.sidr_reply(0, 0, SIDR_REJECT, private_data)
        else:
            cmid.conn.reject(w.REJ_CONSUMER_DEFINED, private_data)

    def establish(self, cmid: CMID) -> None:
        what = "Complete an active connection request"
        if cmid.conn is None:
            raise PyverbsRDMAError(f"Failed to {what}: not connecting", errno.EINVAL)
        cmid._check(CMIDEvent.ESTABLISHED, what)
        try:
            cmid.conn.establish()
        except CMStateError as exc:
            raise PyverbsRDMAError(f"Failed to {what}: {exc}", errno.EINVAL) from None
        cmid._move(CMIDEvent.ESTABLISHED)  # no event on this side: librdmacm reports none after rdma_establish

    def qp_path(self, cmid: CMID) -> dict[str, Any]:
        """What the REQ and REP say about ``cmid``'s connection, seen from its side: what
        ``init_qp_attr`` gives for RTR and RTS (the passive side's PSN and resources are what its REP
        will carry, chosen when the REQ came)."""
        req = cmid.req.body if cmid.req is not None else None
        rep = cmid.conn.rep.body if cmid.conn is not None and cmid.conn.rep is not None else None
        if not isinstance(req, w.CMReq):
            raise PyverbsRDMAError("Failed to get QP attributes: the connection has no REQ yet", errno.EINVAL)
        assert cmid.device is not None and cmid.dst_addr is not None
        mtu = min(req.path_mtu, e.bytes_to_mtu(cmid.device.active_mtu))
        ah = ah_of(cmid)
        active = cmid.conn is not None and cmid.conn.active
        if active:
            if not isinstance(rep, w.CMRep):
                raise PyverbsRDMAError("Failed to get QP attributes: no REP yet", errno.EINVAL)
            return {"mtu": mtu, "ah": ah, "dest_qp": rep.local_qpn, "rq_psn": req.starting_psn,
                    "sq_psn": rep.starting_psn, "resp_res": rep.initiator_depth, "init_depth": rep.responder_resources,
                    "timeout": req.primary_local_ack_timeout, "retry": req.retry_count,
                    "rnr_retry": rep.rnr_retry_count}
        return {"mtu": mtu, "ah": ah, "dest_qp": req.local_qpn, "rq_psn": cmid._psn, "sq_psn": req.starting_psn,
                "resp_res": cmid._accept_res[0], "init_depth": cmid._accept_res[1],
                "timeout": req.primary_local_ack_timeout, "retry": req.retry_count, "rnr_retry": req.rnr_retry_count}


    def disconnect(self, cmid: CMID) -> None:
        if cmid.conn is None:
            raise PyverbsRDMAError("Failed to Disconnect: the CMID is not connected", errno.EINVAL)
        cmid._move(CMIDEvent.DISCONNECT, "Disconnect")
        if cmid.qp is not None and cmid.qp.qp_state not in (e.IBV_QPS_RESET, e.IBV_QPS_ERR):
            cmid.qp.to_error()
        cmid.conn.disconnect()


#: the transport of every device that is not iWARP
IB = _IBTransport()


@dataclass(frozen=True)
class _IBListener:
    """``cma_ib_req_handler`` of one listening CMID: what the agents of the devices it listens on call
    with a REQ or SIDR_REQ for its service ID.  It checks the cma_hdr as cma.c does and makes the
    child CMID, whose handler it returns; a request it refuses it answers itself (REJ, or a SIDR_REP
    with status reject) and returns None.  Equal for the same CMID (``unlisten`` finds it so)."""

    cmid: CMID

    def __call__(self, conn: CMConn, msg: w.CMMessage) -> CMHandler | None:
        listener = self.cmid
        hdr = msg.ip_cm
        pd = bytes(msg.private_data)
        dev = conn.agent.dev
        raw = msg.encode()[24 + msg.body.LAYOUT.size:]
        version, ipv = raw[0], raw[1] >> 4
        sidr = msg.mad.attr_id == CM_ATTR_SIDR_REQ
        if hdr is None or version != 0 or ipv not in (4, 6):
            conn.agent.dropped(f"cma_hdr version {version}, IP version {ipv} (cma_save_ip_info wants 0 and 4 or 6)")
            return self._refuse(conn, msg, sidr, w.REJ_CONSUMER_DEFINED)
        dst = str(hdr.dst_address)
        if listener.src_addr not in ("0.0.0.0", dst) or _ip(dev.ipv4) != dst:
            conn.agent.dropped(f"REQ for {dst}, not this listener's {listener.src_addr} (cma_match_private_data)")
            return self._refuse(conn, msg, sidr, w.REJ_INVALID_SERVICE_ID)
        child = listener._child(dev)
        child.src_addr, child.src_port = dst, listener.src_port
        child.dst_addr, child.dst_port = str(hdr.src_address), hdr.src_port
        child.conn, child.req = conn, msg
        if isinstance(msg.body, w.CMReq):
            child.remote_qpn = msg.body.local_qpn
            # what accept() will put in the REP, known now for init_qp_attr (a QP the program moves itself)
            child._psn = dev.rng.getrandbits(24)
            child._accept_res = (min(MAX_QP_RD_ATOM, msg.body.initiator_depth),
                                 min(MAX_QP_RD_ATOM, msg.body.responder_resources))
        listener._request(child, pd)
        return _IBHandler(child)

    @staticmethod
    def _refuse(conn: CMConn, msg: w.CMMessage, sidr: bool, reason: int) -> None:
        if sidr:
            conn.sidr_reply(0, 0, SIDR_REJECT)
        else:
            conn.agent.send(conn.remote_gid, w.build_rej(msg, reason))


@dataclass(frozen=True)
class _IBHandler:
    """``cma_ib_handler`` of one CMID's connection (its :class:`~rdmalab.verbs.engine.ibcm_conn.CMHandler`):
    the IB CM's reports as rdma_cm events, on the CMID that speaks for it (``cmstate.owner``: the one
    a program made from its CONNECT_REQUEST event, if it did)."""

    cmid: CMID

    def cm_event(self, conn: CMConn, kind: str, msg: w.CMMessage | None, **info: Any) -> None:
        cmid = owner(self.cmid)
        pd = bytes(msg.private_data) if msg is not None else b""
        if kind == "rep":
            if cmid.qp is None:
                cmid._post(EV.RDMA_CM_EVENT_CONNECT_RESPONSE, private_data=pd)
                return
            try:
                cmid._modify(e.IBV_QPS_RTR)
                cmid._modify(e.IBV_QPS_RTS)
            except PyverbsRDMAError as exc:
                conn.reject(w.REJ_CONSUMER_DEFINED)
                cmid._move(CMIDEvent.CONNECT_ERROR)
                cmid._post(EV.RDMA_CM_EVENT_CONNECT_ERROR, status=-errno.EINVAL, why=str(exc))
                return
            conn.establish()
            cmid._move(CMIDEvent.ESTABLISHED)
            cmid._post(EV.RDMA_CM_EVENT_ESTABLISHED, private_data=pd)
        elif kind == "established":
            cmid._move(CMIDEvent.ESTABLISHED)
            cmid._post(EV.RDMA_CM_EVENT_ESTABLISHED, private_data=pd)
        elif kind == "rejected":
            cmid._move(CMIDEvent.REJECTED)
            cmid._post(EV.RDMA_CM_EVENT_REJECTED, status=info.get("reason", 0), private_data=pd, **info)
        elif kind == "unreachable":
            cmid._move(CMIDEvent.UNREACHABLE)
            cmid._post(EV.RDMA_CM_EVENT_UNREACHABLE, status=-errno.ETIMEDOUT, **info)
        elif kind == "disconnected":
            cmid._move(CMIDEvent.DISCONNECTED)
            cmid._post(EV.RDMA_CM_EVENT_DISCONNECTED, **info)
        elif kind == "timewait_exit":
            cmid._post(EV.RDMA_CM_EVENT_TIMEWAIT_EXIT)
        elif kind == "sidr_rep":
            if info.get("status") == SIDR_SUCCESS:
                assert cmid.dst_addr is not None
                ah = ah_of(cmid)
                cmid.remote_qpn = info["qpn"]
                cmid._move(CMIDEvent.ESTABLISHED)
                cmid._post(EV.RDMA_CM_EVENT_ESTABLISHED, ud=(info["qpn"], info["qkey"], ah), private_data=pd)
            else:
                cmid._move(CMIDEvent.UNREACHABLE)
                cmid._post(EV.RDMA_CM_EVENT_UNREACHABLE, status=-errno.ECONNREFUSED, sidr_status=info.get("status"))
        # req, sidr_req (the listener queued CONNECT_REQUEST already) and mra: no rdma_cm event


class _OneDevice:
    """A device set of one device, for the CMID's own Context."""

    def __init__(self, dev: SoftDevice) -> None:
        self.devices = {dev.name: dev}

