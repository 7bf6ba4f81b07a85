"""rdma_cm's IB transport: what a :class:`~rdmalab.verbs.cmid.CMID` on a RoCE soft device asks of the
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
  the local ACK timeout ``rdma_set_ack_timeout`` set or packet life time + 1.  RDMA_PS_UDP sends a
  SIDR_REQ instead.
* **accept**: the QP (if the CMID has one) to RTR and RTS, then the REP with responder resources
  and initiator depth limited by the REQ's; SIDR: the SIDR_REP (Q_Key ``RDMA_UDP_QKEY``).
  **reject**: REJ reason 28 (consumer defined), SIDR: status reject.  **disconnect**: the QP to
  ERR, then the DREQ (or the DREP answering the peer's).
"""

from __future__ import annotations

import errno
import ipaddress
from typing import Any

from rdmalab.verbs import enums as e
from rdmalab.verbs.cm_enums import RDMA_PS_UDP, rdma_cm_event_type
from rdmalab.verbs.cmroute import _devices, _flow_label, service_id
from rdmalab.verbs.cmstate import CMIDEvent
from rdmalab.verbs.cmtypes import ConnParam
from rdmalab.verbs.engine import ibcm
from rdmalab.verbs.engine.node import SoftDevice
from rdmalab.verbs.pyverbs_error import PyverbsRDMAError
from rdmalab.wire import cm as w

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
            dev.gsi.agent.listeners[sid] = cmid._incoming
            cmid._devs_listening = devs

    def unlisten(self, cmid: CMID) -> None:
        sid = service_id(cmid.port_space, cmid.src_port)
        for dev in cmid._devs_listening:
            if dev.gsi.agent.listeners.get(sid) == cmid._incoming:
                del dev.gsi.agent.listeners[sid]
                if dev.gsi.agent.shared is not None:
                    dev.gsi.agent.shared.unlisten(sid)

    def connect(self, cmid: CMID, param: ConnParam) -> None:
        dev = cmid.device
        assert dev is not None and cmid.dst_addr is not None
        dst_gid = 0xFFFF00000000 | int(ipaddress.IPv4Address(cmid.dst_addr))
        src = cmid.src_addr or "0.0.0.0"
        hdr = w.IPCMHeader.for_addresses(src, cmid.dst_addr, cmid.src_port)
        user = param.private_data
        agent = dev.gsi.agent
        if cmid.port_space == RDMA_PS_UDP:
            if len(user) > MAX_SIDR_PRIVATE:
                raise PyverbsRDMAError(f"Failed to Connect: {len(user)} bytes of private data (a SIDR_REQ holds "
                                       f"{MAX_SIDR_PRIVATE} after the cma_hdr)", errno.EINVAL)
            cmid._move(CMIDEvent.CONNECT)
            cmid.conn = agent.sidr_request(cmid, dst_gid, service_id(cmid.port_space, cmid.dst_port),
                                           hdr.encode() + user)
            return
        if len(user) > MAX_REQ_PRIVATE:
            raise PyverbsRDMAError(f"Failed to Connect: {len(user)} bytes of private data (a REQ holds "
                                   f"{MAX_REQ_PRIVATE} after the cma_hdr)", errno.EINVAL)
        qpn = cmid.qp.qp_num if cmid.qp is not None else param.qp_num
        psn = dev.rng.getrandbits(24)
        mtu = e.bytes_to_mtu(dev.active_mtu)
        dst = cmid.dst_addr
        ack = cmid._ack_timeout if cmid._ack_timeout is not None else ibcm.PACKET_LIFE_TIME + 1

        def build(local_id: int) -> w.CMMessage:
            return w.build_req(src, dst, cmid.src_port, cmid.dst_port,
                               local_comm_id=local_id, local_qpn=qpn, starting_psn=psn,
                               local_ca_guid=agent.guid, responder_resources=param.responder_resources,
                               initiator_depth=param.initiator_depth, path_mtu=mtu,
                               retry_count=min(param.retry_count, 7), rnr_retry_count=min(param.rnr_retry_count, 7),
                               srq=1 if param.srq else 0, private_data=user,
                               path=w.CMPath.roce(src, dst, packet_rate=0,
                                                  flow_label=_flow_label(cmid.src_port, cmid.dst_port),
                                                  local_ack_timeout=ack))

        cmid._move(CMIDEvent.CONNECT)
        cmid.conn = agent.connect(cmid, dst_gid, build)
        cmid.req = cmid.conn.req

    def accept(self, cmid: CMID, param: ConnParam) -> None:
        conn = cmid.conn
        if conn is None or cmid.req is None:
            raise PyverbsRDMAError("Failed to Accept Connection: no connection request on this CMID", errno.EINVAL)
        if isinstance(cmid.req.body, w.CMSidrReq):
            qpn = cmid.qp.qp_num if cmid.qp is not None else param.qp_num
            cmid._move(CMIDEvent.ACCEPT)
            conn.sidr_reply(qpn, ibcm.RDMA_UDP_QKEY, ibcm.SIDR_SUCCESS, param.private_data)
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
            cmid.conn.sidr_reply(0, 0, ibcm.SIDR_REJECT, private_data)
        else:
            cmid.conn.reject(w.REJ_CONSUMER_DEFINED, private_data)

    def disconnect(self, cmid: CMID) -> None:
        if cmid.conn is None:
            raise PyverbsRDMAError("Failed to Disconnect: the CMID is not connected", errno.EINVAL)
        cmid._move(CMIDEvent.DISCONNECT, "Disconnect")
        if cmid.qp is not None and cmid.qp.qp_state not in (e.IBV_QPS_RESET, e.IBV_QPS_ERR):
            cmid.qp.to_error()
        cmid.conn.disconnect()


#: the transport of every device that is not iWARP
IB = _IBTransport()


class _OneDevice:
    """A device set of one device, for the CMID's own Context."""

    def __init__(self, dev: SoftDevice) -> None:
        self.devices = {dev.name: dev}

