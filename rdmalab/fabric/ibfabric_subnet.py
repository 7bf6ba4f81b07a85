"""The engine's data path on a managed subnet: the switches forward by the tables a subnet manager
wrote, and an HCA learns its LID and the path to its peer from the SM.

A :class:`~rdmalab.fabric.ibsubnet.Subnet` (an ibsim net file, its agents) is what a subnet
manager sees and programs, by SMPs: the lab's own :class:`~rdmalab.fabric.ibsm.SubnetManager`
in-process (:class:`SubnetMADs`), or the stock OpenSM under ``ibsim-run`` through
:class:`~rdmalab.fabric.ibsim_server.IbsimServer`.  :func:`fabric_on_subnet` then builds the
:class:`~rdmalab.fabric.ibfabric.IBFabric` the engine's QPs run on, from that subnet's state, with
no second copy of what the SM set:

* every switch's forwarding table *is* the one its subnet management agent holds: ``IBSwitch.lft``
  is a :class:`SubnetLFT`, a view of the agent's LinearForwardingTable (LIDs above LinearFDBTop
  have no route, as in ibsim's ``route_lid``), so a later Set(LinearForwardingTable) by the SM
  changes where the next packet goes;
* every HCA's LID and SM LID come from its own PortInfo, read by a local SMP (hop count 0) as
  the HCA's driver reads it; a port the SM has not made Active is an error;
* the links, their port numbers and the nodes' GUIDs are the net file's; a link's rate is its
  width times its lane rate from PortInfo (LinkWidthActive, LinkSpeedActive/LinkSpeedExtActive).

The path to a peer comes from the SM's Subnet Administrator: :func:`path_record` sends a
SubnAdmGet(PathRecord) from the HCA's port to the SM's LID on QP1, through the subnet, and
decodes the answer, whichever SM gives it (the lab's :mod:`rdmalab.fabric.ibsm_sa` or OpenSM's).

Limits: an HCA here has one port (a CA of the net file with more than one linked port is
refused); LMC 0 (one LID a port).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

from rdmalab.fabric import ibsubnet_netfile as nf
from rdmalab.fabric.ibfabric import SUBNET_PREFIX, IBFabric
from rdmalab.fabric.ibsubnet import Client, Delivery, Node, Port, Subnet
from rdmalab.wire.errors import RdmalabError
from rdmalab.wire.ibsim import SIM_REPLY_TIMEOUT_STATUS, SimRequest
from rdmalab.wire.mad import GSI_QPN, METHOD_GET, MADHeader
from rdmalab.wire.sa import ATTR_PATH_RECORD, PR_DLID, PR_SLID, PathRecord, SAMad, sa_request
from rdmalab.wire.smp import (
    ATTR_PORT_INFO,
    LFT_NO_PORT,
    PERMISSIVE_LID,
    PORT_STATE_ACTIVE,
    PORT_STATE_NAMES,
    PortInfo,
    dr_get,
)

# Data rate of one lane in Mbit/s after line coding (IBA Vol 2, 5.6 and 6.x): SDR 2.5, DDR 5, QDR
# 10 Gbaud with 8b/10b; FDR 14.0625 and EDR 25.78125 Gbaud with 64b/66b (FDR rounded down to whole
# Mbit/s), HDR 50 Gb/s
LANE_MBPS = {1: 2000, 2: 4000, 4: 8000}  # LinkSpeedActive
LANE_MBPS_EXT = {1: 13636, 2: 25000, 4: 50000}  # LinkSpeedExtActive
WIDTH_LANES = {1: 1, 2: 4, 4: 8, 8: 12, 16: 2}  # LinkWidthActive: 1x, 4x, 8x, 12x, 2x


class SubnetFabricError(RdmalabError, ValueError):
    """The subnet cannot carry the engine's data as asked (not brought up, an HCA with two links ...)."""


class SubnetLFT(MutableMapping[int, int]):
    """A switch's linear forwarding table as its subnet management agent holds it: LID -> output
    port, for the LIDs up to LinearFDBTop whose entry names a port (0xFF: none, IBA 14.2.5.10).
    Writing it writes the agent's table (as a Set(LinearForwardingTable) would)."""

    def __init__(self, node: Node) -> None:
        if not node.is_switch:
            raise SubnetFabricError(f'"{node.nodeid}" is not a switch: it has no forwarding table')
        self.node = node

    def __getitem__(self, lid: int) -> int:
        node = self.node
        if not isinstance(lid, int) or not 0 <= lid <= node.linear_fdb_top or lid >= len(node.lft) \
                or node.lft[lid] == LFT_NO_PORT:
            raise KeyError(lid)
        return node.lft[lid]

    def __setitem__(self, lid: int, port: int) -> None:
        if not 0 <= lid < len(self.node.lft):
            raise KeyError(lid)
        self.node.lft[lid] = port
        self.node.linear_fdb_top = max(self.node.linear_fdb_top, lid)

    def __delitem__(self, lid: int) -> None:
        self[lid]  # KeyError when there is no entry, as a dict
        self.node.lft[lid] = LFT_NO_PORT

    def __iter__(self) -> Iterator[int]:
        lft = self.node.lft
        return (lid for lid in range(min(self.node.linear_fdb_top + 1, len(lft))) if lft[lid] != LFT_NO_PORT)

    def __len__(self) -> int:
        return sum(1 for _ in self)


#: what an in-process client answers a request with (None: no answer)
Responder = Callable[[SimRequest], SimRequest | None]


class SubnetMADs:
    """In-process MADs on a :class:`Subnet`: :meth:`port` attaches a client whose ``exchange`` is a
    :class:`~rdmalab.fabric.ibsm.MADPort` (what the lab's SM sends by), and :meth:`serve` makes a
    client answer the requests the subnet hands it (the SM's SMInfo and SA queries), so that a MAD
    from one in-process client to another comes back with the other's answer."""

    def __init__(self, subnet: Subnet) -> None:
        self.subnet = subnet
        self.responders: dict[int, Responder] = {}

    def port(self, node: str, *, issm: bool = False) -> SubnetMADPort:
        """A client on ``node`` (its first port); ``issm`` also sets its port's CapabilityMask.IsSM."""
        client = self.subnet.attach(node)
        if issm:
            self.subnet.set_issm(client, True)
        return SubnetMADPort(self, client)

    def serve(self, port: SubnetMADPort, responder: Responder) -> None:
        self.responders[port.client.id] = responder

    def deliver(self, sender: Client, req: SimRequest) -> list[Delivery]:
        """``req`` from ``sender`` through the subnet, and the answers of served clients to what
        reaches them; returns the deliveries to the sender and to clients that are not served."""
        out: list[Delivery] = []
        todo = self.subnet.send(sender, req)
        for _ in range(64):  # a request, an answer: a few rounds at most
            if not todo:
                break
            nxt: list[Delivery] = []
            for d in todo:
                responder = self.responders.get(d.client.id)
                if responder is None or d.client is sender:  # the sender's own answers come back to it
                    out.append(d)
                    continue
                reply = responder(d.request)
                if reply is not None:
                    nxt.extend(self.subnet.send(d.client, reply))
            todo = nxt
        return out


class SubnetMADPort:
    """One in-process client of a subnet: ``exchange(mad, dlid, dqp) -> reply MAD``."""

    def __init__(self, mads: SubnetMADs, client: Client) -> None:
        self.mads = mads
        self.client = client

    def exchange(self, mad: bytes, dlid: int, dqp: int) -> bytes:
        """Send a request MAD (``dlid`` 0xFFFF: directed route) and return the reply; a MAD the
        subnet could not deliver, or that nobody answered, raises :class:`SubnetFabricError`."""
        slid = PERMISSIVE_LID if dlid == PERMISSIVE_LID else 0
        req = SimRequest(dlid, slid, dqp, 0 if dqp == 0 else GSI_QPN, mad, length=len(mad))
        what = MADHeader.decode(mad).summary()
        for d in self.mads.deliver(self.client, req):
            if d.client is self.client:
                if d.request.status == SIM_REPLY_TIMEOUT_STATUS:
                    raise SubnetFabricError(f"{what} to LID 0x{dlid:04x} was lost in the subnet")
                return d.request.mad
        raise SubnetFabricError(f"nobody answered {what} to LID 0x{dlid:04x}")

    def close(self) -> None:
        self.mads.responders.pop(self.client.id, None)
        self.mads.subnet.detach(self.client)


def own_port_info(subnet: Subnet, node: str, port: int = 0) -> PortInfo:
    """PortInfo of ``node``'s port ``port`` (0: the one its clients attach to), as its driver reads
    it: a directed-route Get with hop count 0 to the local agent (IBA 14.2.2)."""
    client = subnet.attach(node)
    try:
        reply = subnet.request(client, dr_get(ATTR_PORT_INFO, (), attr_mod=port or client.port.num).encode())
    finally:
        subnet.detach(client)
    if reply is None or reply.status:
        raise SubnetFabricError(f'"{node}" did not answer its own PortInfo')
    return PortInfo.decode(reply.mad, 64)


def _linked_port(node: Node) -> Port:
    linked = [p for p in node.ports[1:] if p is not None and p.remote is not None]
    if len(linked) != 1:
        raise SubnetFabricError(f'CA "{node.nodeid}" has {len(linked)} linked ports; an HCA of the engine has one')
    return linked[0]


def _link_gbps(port: Port) -> float:
    lane = LANE_MBPS_EXT.get(port.speed_ext_active) or LANE_MBPS.get(port.speed_active, 2000)
    return WIDTH_LANES.get(port.width_active, 1) * lane / 1000


def fabric_on_subnet(subnet: Subnet, **fabric_args: Any) -> IBFabric:
    """The :class:`IBFabric` of ``subnet`` after a subnet manager brought it up (see the module's
    docstring); ``fabric_args`` go to :class:`IBFabric` (``mtu``, ``vls``, ``frames`` ...).  HCAs and
    switches are named by their net file node ids.  :class:`SubnetFabricError` when an HCA's port is
    not Active with a LID."""
    fab = IBFabric(**fabric_args)
    for node in subnet.nodes:
        if node.is_switch:
            port0 = node.first_port()
            if not port0.lid:
                raise SubnetFabricError(f'switch "{node.nodeid}" has no LID: no subnet manager has swept the subnet')
            sw = fab.add_switch(node.nodeid, node.num_ports, lid=port0.lid)
            sw.guid = node.guid
            sw.lft = SubnetLFT(node)
        elif node.type == nf.HCA:
            port = _linked_port(node)
            info = own_port_info(subnet, node.nodeid, port.num)
            if not info.lid or info.port_state != PORT_STATE_ACTIVE:
                raise SubnetFabricError(f'"{node.nodeid}" port {port.num} is {PORT_STATE_NAMES.get(info.port_state)} '
                                        f"with LID {info.lid}: no subnet manager has brought it up")
            hca = fab.add_hca(node.nodeid, lid=info.lid)
            hca.device.sm_lid = info.master_sm_lid
            hca.guid = port.guid
            hca.device.gids = [(SUBNET_PREFIX << 64) | port.guid]
        else:
            raise SubnetFabricError(f'"{node.nodeid}" is a router: the engine has no routers')
    done: set[int] = set()
    for node in subnet.nodes:
        for p in node.ports:
            if p is None or p.num == 0 or p.remote is None or id(p) in done:
                continue
            r = p.remote
            done.update((id(p), id(r)))
            a_num = 1 if not node.is_switch else p.num
            b_num = 1 if not r.node.is_switch else r.num
            fab.link(node.nodeid, r.node.nodeid, _link_gbps(p), port_a=a_num, port_b=b_num)
    return fab


def path_record(port: Any, sm_lid: int, slid: int, dlid: int, *, tid: int = 0x5A) -> PathRecord:
    """The PathRecord from LID ``slid`` to LID ``dlid``, asked of the SA at ``sm_lid`` (QP1) by a
    SubnAdmGet through ``port`` (anything with ``exchange(mad, dlid, dqp)``: a
    :class:`SubnetMADPort` or an :class:`~rdmalab.fabric.ibsim_client.IBSimClient`).
    :class:`SubnetFabricError` with the SA's status when it has none."""
    query = sa_request(METHOD_GET, ATTR_PATH_RECORD, PathRecord(slid=slid, dlid=dlid).encode(), PR_SLID | PR_DLID,
                       tid=tid)
    reply = SAMad.decode(port.exchange(query, sm_lid, GSI_QPN))
    if reply.mad.status:
        raise SubnetFabricError(f"the SA at LID {sm_lid} has no path from LID {slid} to LID {dlid}: "
                                f"status 0x{reply.mad.status:04x}")
    return PathRecord.decode(reply.data[:64])


def use_sa(fab: IBFabric, mads: SubnetMADs) -> None:
    """Let rdma_cm on ``fab`` (:mod:`rdmalab.verbs.cmroute_ib`) resolve its routes by the SM's SA, as
    ``cma_query_ib_route`` does: ``fab.sa(slid, dlid)`` is :func:`path_record` asked from the port of
    the HCA with LID ``slid`` (a client of ``mads`` on that node) to its SM LID.  A LID no HCA has is
    a :class:`SubnetFabricError`, as is a path the SA does not have."""

    def sa(slid: int, dlid: int) -> PathRecord:
        hca = next((h for h in fab.hcas if h.lid == slid), None)
        if hca is None:
            raise SubnetFabricError(f"no HCA of the subnet has LID {slid} to ask the SA from")
        port = mads.port(hca.name)
        try:
            return path_record(port, hca.device.sm_lid, slid, dlid)
        finally:
            port.close()

    fab.sa = sa
