"""A small subnet manager, written to be read: how an InfiniBand subnet comes up.

An InfiniBand subnet does nothing until its subnet manager (SM) has done five things, each with
Subnet Management Packets (SMPs, :mod:`rdmalab.wire.smp`) to QP0 of every port (IBA Vol 1 14.4):

1. **Sweep** (:meth:`SubnetManager.discover`).  No port has a LID yet, so the SM steers its SMPs
   by *directed route*: the list of output ports, hop by hop, from its own port.  It asks each node
   it reaches for NodeInfo (what it is, its GUIDs, by which port the SMP came in), NodeDescription,
   SwitchInfo for a switch, and PortInfo of every port; for every switch port whose link is up it
   sends NodeInfo one hop further, and so finds the whole graph, breadth first.
2. **LIDs** (:meth:`SubnetManager.assign_lids`): one 16-bit local ID per CA port and per switch
   (its port 0), from 1 up, the SM's own port first, then in the order the sweep met them.
3. **Routes** (:meth:`SubnetManager.compute_routes`): for every switch and every LID, the output port
   on a shortest path to that LID ("min-hop"); among equally short ports the one that carries the
   fewest routes so far, then the lowest number, so parallel links share the load.  The result is
   each switch's linear forwarding table (LFT): LID -> port.
4. **Programming** (:meth:`SubnetManager.configure`): Set(PortInfo) with each port's LID and the
   SM's LID; Set(SwitchInfo) with LinearFDBTop, the highest LID; Set(LinearForwardingTable) 64
   LIDs a block; then every linked port Init -> Armed, and Armed -> Active (a port may only go one
   step at a time, and to Active only when the other end is Armed or Active, 7.2).
5. **Master** (:meth:`SubnetManager.run`): it asks any other SM the sweep found (a port whose
   PortInfo.CapabilityMask says IsSM) for its SMInfo; if one is master already, this SM goes
   Standby and changes nothing.  Otherwise its SMInfo says Master; from now on it answers
   SMInfo queries and, as the Subnet Administrator (SA, IBA chapter 15, :mod:`rdmalab.fabric.ibsm_sa`),
   PathRecord queries (:func:`rdmalab.fabric.ibsm_sa.serve`).

Every SMP sent and every answer is recorded as an :class:`SMEvent` (step, from, to, summary and
the MAD with its addressing), which :meth:`SubnetManager.ladder` lists for a ladder diagram and
:meth:`SubnetManager.write_capture` writes as native InfiniBand packets (LRH, BTH, DETH, MAD, ICRC,
VCRC) in ERF records that tshark decodes: SMPs on VL15 to QP0, directed-route ones between the
permissive LIDs 0xFFFF.

The SM talks through a :class:`MADPort`: anything with ``exchange(mad, dlid, dqp) -> reply`` (the
:class:`~rdmalab.fabric.ibsim_client.IBSimClient` of a stock ``ibsim``, for one).
"""

from __future__ import annotations

import collections
import dataclasses
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import IO, Protocol

from rdmalab.capture.linktypes import LINKTYPE_ERF, erf_ib_record
from rdmalab.capture.pcapwriter import CaptureWriter
from rdmalab.wire.errors import RdmalabError
from rdmalab.wire.frame import mad_ib_packet
from rdmalab.wire.mad import MADHeader
from rdmalab.wire.smp import (
    ATTR_LINEAR_FORWARDING_TABLE,
    ATTR_NODE_DESCRIPTION,
    ATTR_NODE_INFO,
    ATTR_PORT_INFO,
    ATTR_SM_INFO,
    ATTR_SWITCH_INFO,
    CAPMASK_IS_SM,
    LFT_BLOCK_SIZE,
    LFT_NO_PORT,
    PERMISSIVE_LID,
    PHYS_STATE_LINKUP,
    PORT_STATE_ACTIVE,
    PORT_STATE_ARMED,
    PORT_STATE_NAMES,
    PORT_STATE_NOP,
    SM_STATE_DISCOVERING,
    SM_STATE_MASTER,
    SM_STATE_NAMES,
    SM_STATE_STANDBY,
    SMP,
    NodeInfo,
    PortInfo,
    SMInfo,
    SwitchInfo,
    attribute_data,
    dr_get,
    dr_set,
    lft_block,
    node_description,
)

SM = "SM"  # the name of the subnet manager itself in events


class SMError(RdmalabError, RuntimeError):
    """The subnet could not be brought up: an SMP failed or the subnet is not what was expected."""


class MADPort(Protocol):
    """Where the SM's MADs go: send one request MAD to ``dlid`` (0xFFFF: directed route), QP
    ``dqp``, and return the response MAD (256 bytes)."""

    def exchange(self, mad: bytes, dlid: int, dqp: int) -> bytes: ...


# ====================================================================== the subnet as the SM sees it
@dataclass
class Port:
    """One port of a node: its PortInfo as last read, its LID (switches: port 0 only) and the
    node and port at the other end of its link."""

    node_guid: int
    num: int
    guid: int
    info: PortInfo
    path: tuple[int, ...]  # the directed route to reach this port
    lid: int = 0
    peer: tuple[int, int] | None = None  # (node GUID, port number)

    @property
    def key(self) -> tuple[int, int]:
        return (self.node_guid, self.num)


@dataclass
class Node:
    """A switch or a channel adapter (CA), as the sweep found it."""

    guid: int
    info: NodeInfo
    path: tuple[int, ...]  # the directed route by which the sweep first reached it
    description: str = ""
    switch_info: SwitchInfo | None = None
    ports: dict[int, Port] = field(default_factory=dict)
    lft: dict[int, int] = field(default_factory=dict)  # switches: LID -> output port

    @property
    def is_switch(self) -> bool:
        return self.info.is_switch

    @property
    def name(self) -> str:
        return self.description or f"0x{self.guid:016x}"

    @property
    def lid(self) -> int:
        """A switch's LID (its port 0's); a CA's first port's."""
        for port in self.ports.values():
            if port.lid:
                return port.lid
        return 0


@dataclass(frozen=True)
class SMEvent:
    """One MAD the SM sent or received.  ``src``/``dst`` are node names (:data:`SM` for the SM);
    ``dlid``/``slid``/``dqp``/``sqp`` its addressing on the wire (0xFFFF: permissive)."""

    step: int
    src: str
    dst: str
    summary: str
    mad: bytes
    dlid: int
    slid: int
    dqp: int
    sqp: int
    phase: str


# ====================================================================== walking forwarding tables
def route_hops(links: Mapping[tuple[int, int], tuple[int, int]], switches: Iterable[int],
               lfts: Mapping[int, Mapping[int, int]], src: tuple[int, int], dst_port_guid: int,
               port_guids: Mapping[tuple[int, int], int]) -> int | None:
    """How many links a packet from CA port ``src`` (node GUID, port) crosses to reach the port whose
    GUID is ``dst_port_guid``, following the switches' forwarding tables ``lfts`` (switch GUID ->
    {destination port GUID: output port}); ``links`` maps each (node GUID, port) to the other end.
    None when a table has no entry, a port leads nowhere, or the walk loops."""
    switch_set = set(switches)
    here = links.get(src)
    hops = 1
    seen: set[int] = set()
    while here is not None:
        node, port = here
        if port_guids.get(here) == dst_port_guid:
            return hops
        if node not in switch_set or node in seen:
            return None
        if port_guids.get((node, 0)) == dst_port_guid:
            return hops  # the switch itself (its port 0) is the destination
        seen.add(node)
        out = lfts.get(node, {}).get(dst_port_guid)
        if out is None or out == 0:
            return None
        here = links.get((node, out))
        hops += 1
    return None


# ====================================================================== the subnet manager
class SubnetManager:
    """Brings a subnet up through ``port`` (see the module's docstring for the steps).

    ``sm_priority`` goes into SMInfo; ``subnet_prefix`` into every port's GID prefix and the SA's
    GIDs.  After :meth:`run`, :attr:`nodes` holds the subnet (node GUID -> :class:`Node`),
    :attr:`lids` LID -> :class:`Port`, each switch's :attr:`Node.lft` its table, :attr:`events`
    every MAD.
    """

    def __init__(self, port: MADPort, *, sm_priority: int = 0, subnet_prefix: int = 0xFE80_0000_0000_0000) -> None:
        self.mad_port = port
        self.priority = sm_priority
        self.subnet_prefix = subnet_prefix
        self.nodes: dict[int, Node] = {}
        self.lids: dict[int, Port] = {}
        self.events: list[SMEvent] = []
        self.state = SM_STATE_DISCOVERING
        self.act_count = 0
        self.sm_node: Node | None = None
        self.sm_port: Port | None = None
        self.masters: list[int] = []  # port GUIDs of other SMs found master (then this one is Standby)
        self._tid = 0x1000
        self._phase = "start"
        # ports met by a probe before their node's ports were read: (node GUID, port) -> the far end
        self._pending_peer: dict[tuple[int, int], tuple[int, int]] = {}

    # ------------------------------------------------------------------ MADs, recorded
    def _next_tid(self) -> int:
        self._tid += 1
        return self._tid

    def _name_at(self, path: tuple[int, ...]) -> str:
        for node in self.nodes.values():
            if node.path == path or any(p.path == path for p in node.ports.values()):
                return node.name
        return f"path {list(path)}"

    def record(self, src: str, dst: str, mad: bytes, *, dlid: int, slid: int, dqp: int, sqp: int) -> None:
        """Add one MAD to :attr:`events`."""
        hdr = MADHeader.decode(mad)
        text = SMP.decode(mad).summary() if hdr.mgmt_class in (0x01, 0x81) else hdr.summary()
        self.events.append(SMEvent(len(self.events), src, dst, text, mad, dlid, slid, dqp, sqp, self._phase))

    def smp(self, request: SMP, *, what: str = "") -> SMP:
        """Send a directed-route SMP, record it and its answer, and return the answer.  A failed or
        refused SMP raises :class:`SMError`, naming it and where it went."""
        request = dataclasses.replace(request, tid=self._next_tid())
        mad = request.encode()
        dst = self._name_at(request.initial_path)
        self.record(SM, dst, mad, dlid=PERMISSIVE_LID, slid=PERMISSIVE_LID, dqp=0, sqp=0)
        try:
            raw = self.mad_port.exchange(mad, PERMISSIVE_LID, 0)
        except Exception as err:
            raise SMError(f"{request.summary()} to {dst}{' (' + what + ')' if what else ''} failed: {err}") from err
        reply = SMP.decode(raw)
        if reply.attr_id == ATTR_NODE_INFO and not reply.status:
            info = NodeInfo.decode(reply.data)
            dst = self.nodes[info.node_guid].name if info.node_guid in self.nodes else f"0x{info.node_guid:016x}"
        self.record(dst, SM, raw, dlid=PERMISSIVE_LID, slid=PERMISSIVE_LID, dqp=0, sqp=0)
        if reply.status:
            raise SMError(f"{request.summary()} to {dst}: status 0x{reply.status:04x}")
        return reply

    def get(self, attr_id: int, path: tuple[int, ...], attr_mod: int = 0) -> bytes:
        return self.smp(dr_get(attr_id, path, attr_mod)).data

    def set(self, attr_id: int, path: tuple[int, ...], data: bytes, attr_mod: int = 0) -> bytes:
        return self.smp(dr_set(attr_id, path, data, attr_mod)).data

    # ------------------------------------------------------------------ 1. the sweep
    def discover(self) -> None:
        """Find every node and link by directed-route SMPs, breadth first from the SM's port."""
        self._phase = "discover"
        arrivals: collections.deque[tuple[tuple[int, ...], NodeInfo]] = collections.deque()
        first = NodeInfo.decode(self.get(ATTR_NODE_INFO, ()))
        arrivals.append(((), first))
        while arrivals:
            path, info = arrivals.popleft()
            node = self.nodes.get(info.node_guid)
            if node is None:
                node = self._meet(path, info)
            if not node.is_switch:
                # a CA: read the port the SMP came in by (another port is met by another path)
                port = self._read_port(node, info.local_port_num, path, info.port_guid)
                out_ports = [port.num] if path == () else []  # only the SM's own CA sends SMPs out
            else:
                out_ports = [n for n, p in node.ports.items() if n > 0 and p.path == path]
            for num in out_ports:
                port = node.ports[num]
                if port.info.port_phys_state != PHYS_STATE_LINKUP or port.peer is not None:
                    continue
                there = path + (num,)
                peer = NodeInfo.decode(self.get(ATTR_NODE_INFO, there))
                port.peer = (peer.node_guid, peer.local_port_num)
                if peer.node_guid in self.nodes and peer.local_port_num in self.nodes[peer.node_guid].ports:
                    self.nodes[peer.node_guid].ports[peer.local_port_num].peer = port.key
                else:
                    self._pending_peer[(peer.node_guid, peer.local_port_num)] = port.key
                    arrivals.append((there, peer))
        self._pending_peer.clear()
        if self.sm_node is None or self.sm_port is None:
            raise SMError("the sweep did not find the SM's own port")
        self._name_events()

    def _name_events(self) -> None:
        """Events recorded before a node's name was known name it by GUID or path: use its name."""
        names = {f"0x{g:016x}": n.name for g, n in self.nodes.items()}
        for node in self.nodes.values():
            names[f"path {list(node.path)}"] = node.name
            for port in node.ports.values():
                names[f"path {list(port.path)}"] = node.name
        self.events = [dataclasses.replace(e, src=names.get(e.src, e.src), dst=names.get(e.dst, e.dst))
                       for e in self.events]

    def _meet(self, path: tuple[int, ...], info: NodeInfo) -> Node:
        """A node seen for the first time: its description, SwitchInfo, and (switch) every port."""
        node = Node(info.node_guid, info, path)
        self.nodes[node.guid] = node
        node.description = node_description(self.get(ATTR_NODE_DESCRIPTION, path))
        if path == ():
            self.sm_node = node
        if node.is_switch:
            node.switch_info = SwitchInfo.decode(self.get(ATTR_SWITCH_INFO, path))
            for num in range(info.num_ports + 1):
                self._read_port(node, num, path, node.guid)  # a switch's ports share its GUID
        return node

    def _read_port(self, node: Node, num: int, path: tuple[int, ...], guid: int) -> Port:
        info = PortInfo.decode(self.get(ATTR_PORT_INFO, path, num))
        port = Port(node.guid, num, guid, info, path)
        node.ports[num] = port
        waiting = self._pending_peer.pop(port.key, None)
        if waiting is not None:
            port.peer = waiting
        if path == () and (num == 0 or not node.is_switch):
            self.sm_port = port  # the SM's own port: its CA port, or port 0 of the switch it runs on
        return port

    # ------------------------------------------------------------------ 2. LIDs
    def endpoints(self) -> list[Port]:
        """The ports that get a LID: the SM's first, then each CA port and switch port 0 in the
        order the sweep met them."""
        out = []
        for node in self.nodes.values():
            if node.is_switch:
                out.append(node.ports[0])
            else:
                out.extend(p for _, p in sorted(node.ports.items()) if p.peer is not None or p is self.sm_port)
        out.sort(key=lambda p: p is not self.sm_port)
        return out

    def assign_lids(self) -> None:
        """LID 1 for the SM's port, then 2, 3, ... in sweep order (LMC 0: one LID per port)."""
        self._phase = "lids"
        self.lids.clear()
        for lid, port in enumerate(self.endpoints(), start=1):
            port.lid = lid
            self.lids[lid] = port

    # ------------------------------------------------------------------ 3. min-hop routes
    def distances(self, dest: Port) -> dict[int, int]:
        """Switch GUID -> how many links a packet at that switch still has to cross to reach
        ``dest`` (a CA port, or a switch's port 0: distance 0 at that switch)."""
        dist: dict[int, int] = {}
        if self.nodes[dest.node_guid].is_switch:
            dist[dest.node_guid] = 0
        elif dest.peer is not None and self.nodes[dest.peer[0]].is_switch:
            dist[dest.peer[0]] = 1
        queue = collections.deque(dist)
        while queue:
            guid = queue.popleft()
            for port in self.nodes[guid].ports.values():
                if port.peer is None:
                    continue
                other = self.nodes[port.peer[0]]
                if other.is_switch and other.guid not in dist:
                    dist[other.guid] = dist[guid] + 1
                    queue.append(other.guid)
        return dist

    def compute_routes(self) -> None:
        """Each switch's LFT: for each LID, an output port on a shortest path, the least loaded."""
        self._phase = "routes"
        load: dict[tuple[int, int], int] = collections.Counter()
        switches = [n for n in self.nodes.values() if n.is_switch]
        for sw in switches:
            sw.lft = {}
        for lid, dest in sorted(self.lids.items()):
            dist = self.distances(dest)
            for sw in switches:
                if sw.guid not in dist:
                    continue  # unreachable from this switch: no entry (0xFF)
                if dist[sw.guid] == 0:
                    sw.lft[lid] = 0  # the switch's own LID: port 0, its management port
                    continue
                choices = [p.num for p in sw.ports.values() if p.peer is not None and p.num > 0
                           and (p.peer == dest.key or dist.get(p.peer[0], -1) == dist[sw.guid] - 1
                                and self.nodes[p.peer[0]].is_switch)]
                best = min(choices, key=lambda n: (load[(sw.guid, n)], n))
                sw.lft[lid] = best
                load[(sw.guid, best)] += 1

    # ------------------------------------------------------------------ 4. programming the subnet
    def _set_port(self, port: Port, **changes: int) -> None:
        """Read-modify-write of PortInfo: the values last read, with ``changes``."""
        info = port.info.replace(**changes)
        back = PortInfo.decode(self.set(ATTR_PORT_INFO, port.path, attribute_data(info), port.num))
        port.info = back

    def configure(self) -> None:
        """LIDs into PortInfo, LFTs into the switches, then every linked port Armed, then Active."""
        assert self.sm_port is not None
        sm_lid = self.sm_port.lid
        self._phase = "set lids"
        for port in self.endpoints():
            self._set_port(port, lid=port.lid, master_sm_lid=sm_lid, lmc=0, gid_prefix=self.subnet_prefix,
                           port_state=PORT_STATE_NOP, port_phys_state=0)
        self._phase = "set lfts"
        top = max(self.lids)
        for node in self.nodes.values():
            if not node.is_switch or node.switch_info is None:
                continue
            node.switch_info = SwitchInfo.decode(
                self.set(ATTR_SWITCH_INFO, node.path, attribute_data(node.switch_info.replace(linear_fdb_top=top))))
            for block in range(top // LFT_BLOCK_SIZE + 1):
                lids = range(block * LFT_BLOCK_SIZE, min((block + 1) * LFT_BLOCK_SIZE, top + 1))
                self.set(ATTR_LINEAR_FORWARDING_TABLE, node.path,
                         lft_block([node.lft.get(lid, LFT_NO_PORT) for lid in lids]), block)
        for state in (PORT_STATE_ARMED, PORT_STATE_ACTIVE):
            self._phase = f"ports {PORT_STATE_NAMES[state]}"
            for port in self.linked_ports():
                if port.info.port_state == state - 1:
                    self._set_port(port, port_state=state, port_phys_state=0, master_sm_lid=sm_lid)

    def linked_ports(self) -> list[Port]:
        """Every port with a link, switch and CA, in sweep order."""
        return [p for n in self.nodes.values() for _, p in sorted(n.ports.items()) if p.peer is not None]

    # ------------------------------------------------------------------ 5. master
    def sm_info(self) -> SMInfo:
        """What this SM answers to Get(SMInfo)."""
        guid = self.sm_port.guid if self.sm_port else 0
        return SMInfo(guid=guid, sm_key=0, act_count=self.act_count, priority=self.priority, sm_state=self.state)

    def other_sms(self) -> list[Port]:
        """The CA ports, other than ours, whose PortInfo says an SM runs there (CapabilityMask.IsSM)."""
        return [p for n in self.nodes.values() if not n.is_switch for p in n.ports.values()
                if p.info.capability_mask & CAPMASK_IS_SM and p is not self.sm_port]

    def poll_sms(self) -> dict[int, SMInfo]:
        """Get(SMInfo) from every other SM the sweep found (IBA 14.4.1): port GUID -> its SMInfo.  A
        port that says IsSM but does not answer (its SM is gone) is left out."""
        self._phase = "poll sms"
        found = {}
        for port in self.other_sms():
            try:
                found[port.guid] = SMInfo.decode(self.get(ATTR_SM_INFO, port.path))
            except SMError:
                continue  # the request stays in the ladder, unanswered
        return found

    def run(self) -> None:
        """All five steps: sweep, LIDs, routes, programming; then Master.  If the sweep finds another
        SM that is master already, this one goes Standby after the sweep and programs nothing."""
        self._phase = "discover"
        self.state = SM_STATE_DISCOVERING
        self.discover()
        self.masters = [guid for guid, info in self.poll_sms().items() if info.sm_state == SM_STATE_MASTER]
        if self.masters:
            self.state = SM_STATE_STANDBY
            self._phase = "standby"
            return
        self.assign_lids()
        self.compute_routes()
        self.configure()
        self.state = SM_STATE_MASTER
        self._phase = "master"
        self.act_count += 1

    @property
    def state_name(self) -> str:
        return SM_STATE_NAMES[self.state]

    def port_states(self) -> dict[tuple[str, int], str]:
        """(node name, port) -> the state the port last reported, for every linked port."""
        return {(self.nodes[p.node_guid].name, p.num): p.info.state_name for p in self.linked_ports()}

    # ------------------------------------------------------------------ what a learner looks at
    def ladder(self) -> list[tuple[int, str, str, str]]:
        """``(step, from, to, MAD summary)`` for every MAD, in order: a ladder diagram's rows."""
        return [(e.step, e.src, e.dst, e.summary) for e in self.events]

    def lft_table(self, node: Node) -> list[tuple[int, int, str]]:
        """A switch's forwarding table as ``(LID, output port, destination name)`` rows."""
        return [(lid, out, f"{self.nodes[self.lids[lid].node_guid].name}/{self.lids[lid].num}")
                for lid, out in sorted(node.lft.items())]

    def links(self) -> dict[tuple[int, int], tuple[int, int]]:
        """(node GUID, port) -> (node GUID, port) at the other end, both directions."""
        return {p.key: p.peer for n in self.nodes.values() for p in n.ports.values() if p.peer is not None}

    def port_guids(self) -> dict[tuple[int, int], int]:
        """(node GUID, port) -> port GUID, for the ports with a LID (switches: port 0)."""
        return {p.key: p.guid for p in self.lids.values()}

    def lfts_by_guid(self) -> dict[int, dict[int, int]]:
        """Switch GUID -> {destination port GUID: output port}: the tables without their LIDs."""
        return {n.guid: {self.lids[lid].guid: out for lid, out in n.lft.items() if lid in self.lids}
                for n in self.nodes.values() if n.is_switch}

    def hops(self, src: Port, dst: Port) -> int | None:
        """Links crossed from CA port ``src`` to ``dst`` following the tables this SM computed."""
        return route_hops(self.links(), [n.guid for n in self.nodes.values() if n.is_switch], self.lfts_by_guid(),
                          src.key, dst.guid, self.port_guids())

    # ------------------------------------------------------------------ capture
    def frames(self) -> list[tuple[int, bytes]]:
        """Each recorded MAD as a native IB packet in an ERF record, 1 µs apart: ``(ns, record)``."""
        out = []
        for e in self.events:
            pkt = mad_ib_packet(e.mad, dlid=e.dlid, slid=e.slid, dqp=e.dqp, sqp=e.sqp, psn=e.step)
            ts = (e.step + 1) * 1000
            out.append((ts, erf_ib_record(ts, pkt)))
        return out

    def write_capture(self, dest: str | os.PathLike[str] | IO[bytes], *, format: str = "pcap") -> int:
        """Write every recorded MAD to a capture (ERF link type, records of native InfiniBand, which
        tshark dissects as InfiniBand); returns how many packets."""
        frames = self.frames()
        with CaptureWriter(dest, format="pcapng" if format == "pcapng" else "pcap", linktype=LINKTYPE_ERF) as w:
            for ts, rec in frames:
                w.write(rec, ts)
        return len(frames)

