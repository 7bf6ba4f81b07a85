"""The subnet manager's Subnet Administrator (SA): PathRecords, and the SM answering the subnet.

Once the subnet is up, a host that wants to talk to another asks the SA (IBA Vol 1 chapter 15) for
a PathRecord: "from my port to that LID (or GID), which LIDs, SL, MTU and rate?".  The SA knows,
because its SM computed the routes: :class:`SubnetAdministrator` walks the SM's forwarding tables
from source to destination and reports the smallest MTU and rate on the way.

Two ways to ask:

* in-process: :meth:`SubnetAdministrator.path` (source and destination LIDs) or
  :meth:`SubnetAdministrator.query` (a record and a ComponentMask, as on the wire);
* as SA MADs (class 0x03) to the SM's LID, QP1: SubnAdmGet / SubnAdmGetTable of PathRecord
  with SLID/DLID/SGID/DGID in the ComponentMask; :func:`answer` builds the reply, and :func:`serve`
  answers every request an :class:`~rdmalab.fabric.ibsim_client.IBSimClient` receives, SMInfo
  queries (``sminfo``) included.

Limits: one MAD per answer (at most three PathRecords; a GetTable matching more is answered with
status ERR_NO_RESOURCES: multi-segment RMPP is not implemented, and ibsim's ``sim_request`` carries
256 bytes anyway); no multipath, no partitions (P_Key 0xFFFF), no QoS (SL 0).  HopLimit is 0 in a
record, as OpenSM gives it inside a subnet, and NumbPath 0 (a query's field), as OpenSM answers;
:attr:`Path.hops` has the number of links.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from rdmalab.fabric.ibsim_client import IBSimClient
from rdmalab.fabric.ibsm import SM, Port, SubnetManager
from rdmalab.wire.errors import Picklable
from rdmalab.wire.ibsim import SimRequest
from rdmalab.wire.mad import (
    METHOD_GET,
    METHOD_GET_RESP,
    METHOD_GET_TABLE,
    METHOD_GET_TABLE_RESP,
    METHOD_TRAP,
    MGMT_CLASS_SA,
    MGMT_CLASS_SM_DIRECTED_ROUTE,
    MGMT_CLASS_SM_LID_ROUTED,
    STATUS_METHOD_ATTR_UNSUPPORTED,
    MADHeader,
)
from rdmalab.wire.sa import (
    ATTR_PATH_RECORD,
    PATH_RECORD_SIZE,
    PR_DGID,
    PR_DLID,
    PR_PKEY,
    PR_SGID,
    PR_SL,
    PR_SLID,
    SA_DATA_OFFSET,
    SA_DATA_SIZE,
    SA_HEADER_SIZE,
    SA_STATUS_NO_RECORDS,
    SA_STATUS_REQ_INVALID,
    STATUS_UNSUPPORTED_ATTR,
    PathRecord,
    SAMad,
    sa_response,
)
from rdmalab.wire.smp import ATTR_SM_INFO, SMP, attribute_data, get_response

SA_STATUS_NO_RESOURCES = 0x0100  # IBA Vol 1 15.2.1.2, ERR_NO_RESOURCES
STATUS_UNSUPPORTED_METHOD_ATTR = STATUS_METHOD_ATTR_UNSUPPORTED  # 13.4.7: method/attribute combination not supported
SELECTOR_EXACTLY = 2  # MTU/rate/packet-life selectors (15.2.5.16): "exactly this value"

# PortInfo LinkWidthActive code -> lanes, LinkSpeedActive code -> Gb/s per lane (14.2.5.6)
_WIDTH_LANES = {1: 1, 2: 4, 4: 8, 8: 12, 16: 2}
_SPEED_GBPS = {1: 2.5, 2: 5.0, 4: 10.0}
# PathRecord Rate codes (15.2.5.16, table 205 and its later additions) by Gb/s
_RATE_CODES = {2.5: 2, 10.0: 3, 30.0: 4, 5.0: 5, 20.0: 6, 40.0: 7, 60.0: 8, 80.0: 9, 120.0: 10}


class SAError(Picklable, ValueError):
    """A PathRecord query the SA cannot answer; ``status`` is the MAD status it returns for it."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Path:
    """A path the SA found: its record, and the ports it crosses (``hops`` links)."""

    record: PathRecord
    hops: int
    ports: tuple[Port, ...]  # the ports it leaves by, source first


class SubnetAdministrator:
    """Answers PathRecord queries from what ``sm`` set up (run :meth:`SubnetManager.run` first)."""

    def __init__(self, sm: SubnetManager) -> None:
        self.sm = sm

    def gid(self, port: Port) -> int:
        """A port's GID: the subnet prefix and its port GUID (IBA Vol 1 4.1.1)."""
        return self.sm.subnet_prefix << 64 | port.guid

    def trace(self, src: Port, dst: Port) -> tuple[Port, ...] | None:
        """The ports a packet from ``src`` to ``dst``'s LID leaves by (switch tables followed), or None."""
        links = self.sm.links()
        out = [src]
        here = links.get(src.key) if src is not dst else None
        while here is not None:
            if here == dst.key:
                return tuple(out)
            node = self.sm.nodes[here[0]]
            if not node.is_switch or len(out) > len(self.sm.nodes):
                return None
            port = node.lft.get(dst.lid)
            if port is None:
                return None
            if port == 0:
                return tuple(out) if dst.node_guid == node.guid else None
            out.append(node.ports[port])
            here = links.get(node.ports[port].key)
        return tuple(out) if src is dst else None

    def path_between(self, src: Port, dst: Port) -> Path:
        """The PathRecord from port ``src`` to port ``dst``; :class:`SAError` if no route."""
        ports = self.trace(src, dst)
        if ports is None:
            raise SAError(f"no route from LID {src.lid} to LID {dst.lid} in the forwarding tables", SA_STATUS_NO_RECORDS)
        crossed = [*ports, dst]
        mtu = min(p.info.mtu_cap for p in crossed if p.info.mtu_cap)
        gbps = min(_WIDTH_LANES.get(p.info.link_width_active, 1) * _SPEED_GBPS.get(p.info.link_speed_active, 2.5)
                   for p in ports) if ports and src is not dst else 2.5 * 4
        record = PathRecord(dgid=self.gid(dst), sgid=self.gid(src), dlid=dst.lid, slid=src.lid, hop_limit=0,
                            reversible=1, numb_path=0, p_key=0xFFFF, sl=0, mtu_selector=SELECTOR_EXACTLY, mtu=mtu,
                            rate_selector=SELECTOR_EXACTLY, rate=_RATE_CODES.get(gbps, 2),
                            packet_life_time_selector=SELECTOR_EXACTLY, packet_life_time=18)
        return Path(record, len(ports) if src is not dst else 0, ports)

    def _port(self, lid: int) -> Port:
        if lid not in self.sm.lids:
            raise SAError(f"no port has LID {lid}", SA_STATUS_NO_RECORDS)
        return self.sm.lids[lid]

    def path(self, slid: int, dlid: int) -> Path:
        """The path from LID ``slid`` to LID ``dlid``."""
        return self.path_between(self._port(slid), self._port(dlid))

    def query(self, record: PathRecord, mask: int, requester_lid: int = 0) -> list[Path]:
        """The paths matching ``record`` in the fields ``mask`` names (SLID/SGID, DLID/DGID, P_Key,
        SL); without a source, the requester's port is the source (as OpenSM does)."""
        by_gid = {self.gid(p): p for p in self.sm.lids.values()}
        ports = list(self.sm.lids.values())

        def pick(lid_bit: int, gid_bit: int, lid: int, gid: int) -> list[Port]:
            chosen = ports
            if mask & lid_bit:
                chosen = [p for p in chosen if p.lid == lid]
            if mask & gid_bit:
                chosen = [p for p in chosen if by_gid.get(gid) is p]
            return chosen

        if mask & (PR_SLID | PR_SGID):
            sources = pick(PR_SLID, PR_SGID, record.slid, record.sgid)
        elif requester_lid in self.sm.lids:
            sources = [self.sm.lids[requester_lid]]
        else:
            raise SAError("a PathRecord query needs SLID or SGID (or a requester with a LID)", SA_STATUS_REQ_INVALID)
        dests = pick(PR_DLID, PR_DGID, record.dlid, record.dgid)
        out = []
        for s in sources:
            for d in dests:
                try:
                    path = self.path_between(s, d)
                except SAError:
                    continue
                if mask & PR_PKEY and record.p_key != path.record.p_key:
                    continue
                if mask & PR_SL and record.sl != path.record.sl:
                    continue
                out.append(path)
        return out

    # ------------------------------------------------------------------ as MADs
    def answer(self, mad: bytes, requester_lid: int = 0) -> bytes:
        """The SA's reply to a request MAD (class 0x03): PathRecord Get/GetTable answered, anything
        else a reply with the status a real SA gives (unsupported attribute, no records...)."""
        req = SAMad.decode(mad)
        method = req.mad.method
        reply_method = METHOD_GET_TABLE_RESP if method == METHOD_GET_TABLE else METHOD_GET_RESP
        if req.mad.attr_id != ATTR_PATH_RECORD or method not in (METHOD_GET, METHOD_GET_TABLE):
            return sa_response(req, reply_method, [], status=STATUS_UNSUPPORTED_ATTR)
        try:
            paths = self.query(PathRecord.decode(req.data[:PATH_RECORD_SIZE].ljust(PATH_RECORD_SIZE, b"\0")),
                               req.sa.component_mask, requester_lid)
        except SAError as err:
            return sa_response(req, reply_method, [], status=err.status)
        if not paths:
            return sa_response(req, reply_method, [], status=SA_STATUS_NO_RECORDS)
        if method == METHOD_GET:
            return sa_response(req, reply_method, [paths[0].record.encode()])
        if len(paths) * PATH_RECORD_SIZE > SA_DATA_SIZE:
            return sa_response(req, reply_method, [], status=SA_STATUS_NO_RESOURCES)
        return sa_response(req, reply_method, [p.record.encode() for p in paths])


# ====================================================================== the SM answering the subnet
def answer(sm: SubnetManager, sa: SubnetAdministrator, req: SimRequest) -> SimRequest | None:
    """The reply to one request ibsim handed the SM (QP0: SMInfo; QP1: the SA), or None for
    what needs none (a Trap: recorded, not answered).  Records both in ``sm.events``."""
    hdr = MADHeader.decode(req.mad)
    requester = f"LID {req.slid}" if req.slid not in (0, 0xFFFF) else "a port"
    if req.slid in sm.lids:
        requester = sm.nodes[sm.lids[req.slid].node_guid].name
    sm_lid = sm.sm_port.lid if sm.sm_port else 0
    sm.record(requester, SM, req.mad, dlid=req.dlid or sm_lid, slid=req.slid, dqp=req.dqp, sqp=req.sqp)
    if hdr.method == METHOD_TRAP or hdr.is_response:
        return None
    if hdr.mgmt_class in (MGMT_CLASS_SM_LID_ROUTED, MGMT_CLASS_SM_DIRECTED_ROUTE):
        smp = SMP.decode(req.mad)
        if smp.attr_id == ATTR_SM_INFO and smp.method == METHOD_GET:
            out = get_response(smp, attribute_data(sm.sm_info())).encode()
        else:
            out = get_response(smp, bytes(64), status=STATUS_UNSUPPORTED_METHOD_ATTR).encode()
    elif hdr.mgmt_class == MGMT_CLASS_SA:
        out = sa.answer(req.mad, req.slid)
    else:
        out = hdr.replace(method=hdr.method | 0x80, status=STATUS_UNSUPPORTED_METHOD_ATTR).encode() + req.mad[24:]
    directed = hdr.mgmt_class == MGMT_CLASS_SM_DIRECTED_ROUTE
    length = len(out)
    if hdr.mgmt_class == MGMT_CLASS_SA:
        # what the requester's umad read returns: the reassembled RMPP payload after the headers,
        # which is how libibmad (saquery) counts the records of a GetTableResp
        got = SAMad.decode(out)
        if got.rmpp.active:
            length = SA_DATA_OFFSET + got.rmpp.data2 - SA_HEADER_SIZE
    reply = SimRequest(dlid=0xFFFF if directed else req.slid, slid=0xFFFF if directed else 0,
                       dqp=req.sqp, sqp=req.dqp, mad=out, length=length)
    sm.record(SM, requester, out, dlid=reply.dlid, slid=0xFFFF if directed else sm_lid, dqp=reply.dqp, sqp=reply.sqp)
    return reply


def serve(sm: SubnetManager, client: IBSimClient, stop: threading.Event, *, poll: float = 0.05) -> int:
    """Answer the subnet's requests to the SM (SMInfo, PathRecord) until ``stop`` is set; returns
    how many were answered."""
    sa = SubnetAdministrator(sm)
    count = 0
    while not stop.is_set():
        for req in client.requests(timeout=poll):
            reply = answer(sm, sa, req)
            if reply is not None:
                client.send(reply)
                count += 1
    return count
