"""An InfiniBand subnet in memory: nodes, ports, links, and on every port the agents a subnet manager talks to.

Built from ibsim's topology file (:mod:`rdmalab.fabric.ibsubnet_netfile`), it answers management datagrams as
ibsim 0.10 (the version Debian 12 ships, github.com/linux-rdma/ibsim tag ibsim-0.10: ibsim/sim_net.c,
ibsim/sim_mad.c) answers them, so that the stock OpenSM and infiniband-diags cannot tell the two apart:

* GUIDs as ibsim numbers them: CAs from 0x100000 and switches from 0x200000, in file order; a CA takes its
  node GUID and one per port (port *i*'s GUID is the node GUID + *i*), a switch one GUID for all its ports.
* A subnet management agent (IBA Vol 1 14.2.5) on every CA port and on every switch's port 0, answering
  LID-routed and directed-route SMPs (Get/Set) for NodeDescription, NodeInfo, SwitchInfo, PortInfo
  (LID, LMC, SM LID, port state Down/Init/Armed/Active as the SM moves it, MTU, width, speed),
  LinearForwardingTable, MulticastForwardingTable, P_KeyTable, SLtoVLMappingTable, VLArbitrationTable,
  GUIDInfo and Mellanox ExtendedPortInfo.  SMInfo is the SM's: it goes to the SM client on that port.
* A performance management agent (IBA 16.1): ClassPortInfo, PortCounters, PortCountersExtended, whose
  counters count the MADs the subnet carries (each link a MAD crosses: one packet and 72 dwords, the
  288-byte sim_request, as ibsim counts them), and the detail and per-VL counters (16.1.4), which read 0.
* Directed-route SMPs go hop by hop along the initial path, building the return path (IBA 14.2.2), and
  come back along it; LID-routed MADs follow the switches' linear forwarding tables, only through
  LinkUp/Active ports; what cannot be routed comes back to its sender with status 110 (ibsim's timeout).

:meth:`Subnet.send` is the one entry point: a MAD from a client attached to a node, as ibsim's
``struct sim_request``, and the deliveries it causes (the reply to the sender, or the request forwarded to
another client, such as an SA query to the SM).  :mod:`rdmalab.fabric.ibsim_server` serves it over ibsim's
sockets; the lab's own subnet manager can call it in-process.

Unknown input never raises: a MAD of a wrong size or bad version is dropped (no reply, as ibsim), an
attribute no agent has gets status 0x000C (method/attribute not supported, IBA 13.4.7) where ibsim would
drop it, a method other than Get/Set gets 0x0008 (method not supported).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from rdmalab.fabric import ibsubnet_netfile as nf
from rdmalab.wire import pma as P
from rdmalab.wire import smp as S
from rdmalab.wire.ibsim import IBSIM_MAX_CLIENTS, SIM_REPLY_TIMEOUT_STATUS, SimRequest
from rdmalab.wire.mad import (
    ATTR_NOTICE,
    MAD_HEADER_SIZE,
    MAD_SIZE,
    METHOD_GET,
    METHOD_GET_RESP,
    METHOD_SET,
    METHOD_TRAP,
    METHOD_TRAP_REPRESS,
    MGMT_CLASS_PERF,
    MGMT_CLASS_SM_DIRECTED_ROUTE,
    MGMT_CLASS_SM_LID_ROUTED,
    STATUS_INVALID_VALUE,
    STATUS_METHOD_ATTR_UNSUPPORTED,
    STATUS_METHOD_UNSUPPORTED,
    MADHeader,
)

PI = S.PortInfo

# ibsim 0.10's limits (sim.h): the linear and multicast forwarding table capacities of every switch
LINEAR_CAP = 30 * 1024
MCAST_CAP = 1024
MAX_HOPS = 16  # a LID-routed MAD crosses at most this many switches (sim.h MAXHOPS)
MAD_DWORDS = 72  # what ibsim counts per MAD in PortXmitData/PortRcvData: the 288-byte sim_request / 4

# PortInfo.CapabilityMask bits (IBA 14.2.5.6 table 147)
CAP_IS_SM = S.CAPMASK_IS_SM
CAP_IS_NOTICE = 1 << 2
CAP_IS_TRAP = 1 << 3
CAP_IS_CAPMASK_TRAP = 1 << 22

# What a port's PortInfo holds before the SM touches it, as ibsim 0.10 starts it (sim_net.c smaport,
# swport, swport_down, hcaport, hcaport_down); the fields the agent keeps itself (LID, state, widths,
# speeds ...) are written over these on every read.
_PI_COMMON = dict(link_width_enabled=3, link_width_supported=3, link_speed_supported=1, link_down_default_state=2,
                  link_speed_active=1, link_speed_enabled=1, vl_cap=4, vl_arb_high_cap=8,
                  vl_arb_low_cap=8)
PI_SWITCH_PORT0 = dict(_PI_COMMON, gid_prefix=0xFE80000000000000, lid=1, master_sm_lid=1, capability_mask=0xC048,
                       m_key_lease_period=0xFF9, link_width_active=1, port_state=4, port_phys_state=5,
                       neighbor_mtu=1, mtu_cap=3, operational_vls=4, guid_cap=1, subnet_timeout=0x1F,
                       resp_time_value=8, capability_mask2=0x30)
_PI_EXTERNAL = dict(_PI_COMMON, neighbor_mtu=4, mtu_cap=4, vl_stall_count=7, link_speed_ext_supported=1,
                    link_speed_ext_enabled=1)
PI_SWITCH_UP = dict(_PI_EXTERNAL, link_width_active=2, port_state=2, port_phys_state=5, hoq_life=0x1F,
                    operational_vls=1)
PI_SWITCH_DOWN = dict(_PI_EXTERNAL, link_width_active=1, port_state=1, port_phys_state=2, hoq_life=9,
                      operational_vls=4, local_phy_errors=4)
_PI_CA = dict(_PI_EXTERNAL, gid_prefix=0xFE80000000000000, lid=2, master_sm_lid=1, m_key_lease_period=0xFF9,
              local_port_num=1, operational_vls=1, guid_cap=0x20, subnet_timeout=0x1F, capability_mask2=0x30)
PI_CA_UP = dict(_PI_CA, capability_mask=0x50C048, link_width_active=2, port_state=2, port_phys_state=5,
                hoq_life=0x1F)
PI_CA_DOWN = dict(_PI_CA, capability_mask=0x10C048, link_width_active=1, port_state=1, port_phys_state=2,
                  hoq_life=9)
# SwitchInfo as ibsim starts it (sim_net.c switchinfo, new_switch)
SWITCH_INFO_INIT = dict(linear_fdb_cap=LINEAR_CAP, multicast_fdb_cap=MCAST_CAP, linear_fdb_top=4,
                        partition_enforcement_cap=64, filter_raw_inbound_cap=1, filter_raw_outbound_cap=1)
PARTITION_CAP = {nf.SWITCH: 8, nf.HCA: 64, nf.ROUTER: 64}  # NodeInfo.PartitionCap ibsim gives
NODE_REVISION = 0xA1
DEFAULT_SL2VL = bytes.fromhex("0123456789abcde7")  # SL i -> VL i, SL 15 -> VL 7 (sim_net.c default_sl2vl)
# VLArbitration (VL, weight) pairs (sim_net.c default_vlarb_high/low), 15 of 64 entries
DEFAULT_VLARB_HIGH = bytes([0, 4] + [b for vl in range(1, 15) for b in (vl, 0)]).ljust(128, b"\0")
DEFAULT_VLARB_LOW = bytes([0, 0] + [b for vl in range(1, 15) for b in (vl, 4)]).ljust(128, b"\0")


# PMA attributes whose counters nothing in this model increments (ibsim 0.10 answers them, all 0)
ZERO_COUNTER_ATTRIBUTES = frozenset({
    P.ATTR_PORT_RCV_ERROR_DETAILS, P.ATTR_PORT_XMIT_DISCARD_DETAILS, P.ATTR_PORT_OP_RCV_COUNTERS,
    P.ATTR_PORT_FLOW_CTL_COUNTERS, P.ATTR_PORT_VL_OP_PACKETS, P.ATTR_PORT_VL_OP_DATA,
    P.ATTR_PORT_VL_XMIT_FLOW_CTL_UPDATE_ERRORS, P.ATTR_PORT_VL_XMIT_WAIT_COUNTERS,
})


def _speed_active(enabled: int) -> int:
    return 4 if enabled & 4 else 2 if enabled & 2 else 1 if enabled & 1 else 0


def _width_active(enabled: int) -> int:
    for w in (8, 4, 2, 16, 1):  # 12x, 8x, 4x, 2x, 1x: the widest both ends enable (sim_net.c)
        if enabled & w:
            return w
    return 0


def _ext_active(enabled: int) -> int:
    for s in (4, 2, 1):
        if enabled & s:
            return s
    return 0


@dataclass
class Counters:
    """A port's performance counters (IBA 16.1.3.5, 16.1.4.11): those the subnet's traffic moves."""

    xmit_pkts: int = 0
    rcv_pkts: int = 0
    xmit_data: int = 0  # in dwords
    rcv_data: int = 0
    xmit_discards: int = 0
    rcv_errors: int = 0
    rcv_switch_relay_errors: int = 0
    ext_xmit_data: int = 0
    ext_rcv_data: int = 0
    ext_xmit_pkts: int = 0
    ext_rcv_pkts: int = 0


def _add(value: int, delta: int, limit: int) -> int:
    return min(value + delta, limit)


@dataclass(eq=False)
class Port:
    """One port: its number, GUID, the link, and the state its agent keeps (PortInfo's changing fields)."""

    node: Node
    num: int
    guid: int
    width_enabled: int
    speed_enabled: int
    speed_ext_enabled: int
    remote: Port | None = None
    lid: int = 0
    lmc: int = 0
    sm_lid: int = 0
    state: int = 1  # PortState: 1 Down, 2 Init, 3 Armed, 4 Active
    phys_state: int = 2  # 2 Polling, 5 LinkUp
    width_active: int = 2
    speed_active: int = 1
    speed_ext_active: int = 0
    hoq_life: int = 0
    op_vls: int = 0
    subnet_prefix: int = 0
    portinfo: bytearray = field(default_factory=lambda: bytearray(64))
    ext_portinfo: bytearray = field(default_factory=lambda: bytearray(64))
    pkeys: bytearray = field(default_factory=bytearray)
    sl2vl: bytearray = field(default_factory=bytearray)
    vlarb_high: bytearray = field(default_factory=lambda: bytearray(DEFAULT_VLARB_HIGH))
    vlarb_low: bytearray = field(default_factory=lambda: bytearray(DEFAULT_VLARB_LOW))
    counters: Counters = field(default_factory=Counters)

    def set_template(self, values: dict[str, int]) -> None:
        self.portinfo = bytearray(PI(**values).encode())
        if not self.op_vls:
            self.op_vls = PI.get_field(self.portinfo, "vl_cap")

    def has_lid(self, lid: int) -> bool:
        return self.lid <= lid <= self.lid + (1 << self.lmc) - 1

    @property
    def link_up(self) -> bool:
        return self.phys_state == 5

    @property
    def active(self) -> bool:
        return self.phys_state == 5 and self.state == 4

    def refresh_portinfo(self) -> bytearray:
        """PortInfo with the agent's current values written in (sim_net.c update_portinfo)."""
        pi = self.portinfo
        PI.set_field(pi, "local_port_num", 0 if self.node.is_switch else self.num)
        PI.set_field(pi, "gid_prefix", self.subnet_prefix)
        PI.set_field(pi, "lid", self.lid)
        PI.set_field(pi, "master_sm_lid", self.sm_lid)
        PI.set_field(pi, "operational_vls", self.op_vls)
        PI.set_field(pi, "link_width_enabled", self.width_enabled)
        PI.set_field(pi, "link_width_supported", 31)  # 1x, 2x, 4x, 8x, 12x
        PI.set_field(pi, "link_width_active", self.width_active)
        PI.set_field(pi, "link_speed_enabled", self.speed_enabled)
        PI.set_field(pi, "link_speed_supported", 7)  # SDR, DDR, QDR
        PI.set_field(pi, "link_speed_active", self.speed_active)
        PI.set_field(pi, "lmc", self.lmc)
        PI.set_field(pi, "hoq_life", self.hoq_life)
        PI.set_field(pi, "port_phys_state", self.phys_state)
        PI.set_field(pi, "port_state", self.state)
        ext = self.speed_ext_active
        PI.set_field(pi, "link_speed_ext_enabled", self.speed_ext_enabled if ext else 0)
        PI.set_field(pi, "link_speed_ext_supported", 7 if ext else 0)  # FDR, EDR, HDR
        PI.set_field(pi, "link_speed_ext_active", ext)
        return pi

    def __repr__(self) -> str:
        return f"<Port {self.node.nodeid}[{self.num}] lid {self.lid} state {self.state}>"


@dataclass(eq=False)
class Node:
    """A CA, switch or router: its record, its ports (``ports[0]`` is a switch's management port 0; a CA's
    ports are 1..n, ``ports[0]`` is ``None``) and, for a switch, SwitchInfo and the forwarding tables."""

    type: int
    nodeid: str
    description: str
    guid: int
    num_ports: int
    nodeinfo: bytearray
    ports: list[Port | None] = field(default_factory=list)
    switchinfo: bytearray = field(default_factory=bytearray)
    lft: bytearray = field(default_factory=bytearray)
    mft: dict[tuple[int, int], bytes] = field(default_factory=dict)
    linear_fdb_top: int = 0
    life_time: int = 0
    port_change: int = 0

    @property
    def is_switch(self) -> bool:
        return self.type == nf.SWITCH

    @property
    def num_port_masks(self) -> int:
        return (self.num_ports + 16) // 16

    def port(self, num: int) -> Port | None:
        """Port ``num`` (0 on a CA: its first port, as ibsim's node_get_port), or ``None`` out of range."""
        if num == 0 and not self.is_switch:
            num = 1
        if not 0 <= num <= self.num_ports:
            return None
        return self.ports[num]

    def first_port(self) -> Port:
        p = self.port(0)
        assert p is not None
        return p


@dataclass(eq=False)
class Client:
    """A program attached to a node's port (an ibsim client): its id, its QP and whether it is an SM."""

    id: int
    port: Port
    pid: int = 0
    qp: int = 0
    issm: bool = False


#: an agent's answer to one attribute: (the port the MAD reached, method, attribute modifier, the 64 data bytes
#: to read and rewrite, traps to send) -> the MAD status
Agent = Callable[["Port", int, int, bytearray, list["Delivery"]], int]


@dataclass
class Delivery:
    """A MAD the subnet hands to a client: ``request`` is the ``sim_request`` as that client reads it."""

    client: Client
    request: SimRequest


class Subnet:
    """The subnet of a net file, its agents and the clients attached to it (see the module's docstring)."""

    def __init__(self, specs: list[nf.NodeSpec]) -> None:
        if not specs:
            raise nf.NetFileError("<net>", None, "no nodes")
        self.nodes: list[Node] = []
        self.by_id: dict[str, Node] = {}
        self.clients: list[Client | None] = [None] * IBSIM_MAX_CLIENTS
        self.dropped = 0  # MADs that could not be routed or handled (answered with status 110)
        for spec in specs:
            self._add_node(spec)
        for spec in specs:
            self._connect(spec)
        self.default_port = self.nodes[0].first_port()

    @classmethod
    def from_file(cls, path: str) -> Subnet:
        return cls(nf.read_netfile(path))

    @classmethod
    def from_text(cls, text: str, path: str = "<net>") -> Subnet:
        return cls(nf.parse_netfile(text, path))

    # ------------------------------------------------------------------ building
    def _add_node(self, spec: nf.NodeSpec) -> None:
        switch = spec.type == nf.SWITCH
        ni = bytearray(S.attribute_data(S.NodeInfo(
            base_version=1, class_version=1, node_type=spec.type, num_ports=spec.num_ports,
            system_image_guid=spec.system_image_guid or spec.guid, node_guid=spec.guid, port_guid=spec.guid,
            partition_cap=PARTITION_CAP[spec.type], device_id=spec.device_id, revision=NODE_REVISION,
            local_port_num=0 if switch else 1, vendor_id=spec.vendor_id)))
        node = Node(spec.type, spec.nodeid, spec.description[:64], spec.guid, spec.num_ports, ni)
        if switch:
            si = dict(SWITCH_INFO_INIT)
            if spec.enhanced_port0:
                si["enhanced_port0"] = 1 if spec.enhanced_port0 > 0 else 0
            node.switchinfo = bytearray(S.attribute_data(S.SwitchInfo(**si)))
            node.lft = bytearray(b"\xff" * LINEAR_CAP)
        for num in range(0 if switch else 1, spec.num_ports + 1):
            ps = spec.ports.get(num)
            port = Port(node, num, spec.guid if switch else spec.guid + num,
                        (ps.width_enabled if ps and ps.width_enabled else spec.width_enabled),
                        (ps.speed_enabled if ps and ps.speed_enabled else spec.speed_enabled),
                        (ps.speed_ext_enabled if ps and ps.speed_ext_enabled is not None else spec.speed_ext_enabled))
            psize = S.SwitchInfo.get_field(node.switchinfo, "partition_enforcement_cap") if switch and num else \
                PARTITION_CAP[spec.type]
            port.pkeys = bytearray(2 * psize)
            port.pkeys[0:2] = b"\xff\xff"
            port.sl2vl = bytearray(DEFAULT_SL2VL * ((spec.num_ports + 1) if switch else 1))
            if switch and num == 0:
                port.set_template(PI_SWITCH_PORT0)
                port.state, port.phys_state = 4, 5
                port.lid = spec.lid
            node.ports.append(port)
        if not switch:
            node.ports.insert(0, None)
        self.nodes.append(node)
        self.by_id[spec.nodeid] = node

    def _connect(self, spec: nf.NodeSpec) -> None:
        node = self.by_id[spec.nodeid]
        for num in range(1, spec.num_ports + 1):
            port = node.ports[num]
            assert port is not None
            ps = spec.ports.get(num)
            if port.remote is not None:
                continue
            if ps is None:
                port.set_template(PI_SWITCH_DOWN if node.is_switch else PI_CA_DOWN)
                port.state, port.phys_state = 1, 2
                continue
            other = self.by_id[ps.remote].ports[ps.remote_port]
            assert other is not None
            port.remote, other.remote = other, port
            for p in (port, other):
                p.set_template(PI_SWITCH_UP if p.node.is_switch else PI_CA_UP)
                p.state, p.phys_state = 2, 5
                if p.node.is_switch:
                    p.node.port_change = 1
            w = _width_active(port.width_enabled & other.width_enabled)
            s = _speed_active(port.speed_enabled & other.speed_enabled)
            e = _ext_active(port.speed_ext_enabled & other.speed_ext_enabled)
            if not w or not s:
                raise nf.NetFileError("<net>", ps.line, f'port {num} of "{node.nodeid}" and its peer enable no common '
                                                        "link width or speed")
            for p in (port, other):
                p.width_active, p.speed_active, p.speed_ext_active = w, s, e

    # ------------------------------------------------------------------ lookups
    def node(self, name: str) -> Node:
        """A node by its id, or else by its description (as ibsim attaches ``SIM_HOST``); KeyError."""
        if name in self.by_id:
            return self.by_id[name]
        for n in self.nodes:
            if n.description == name:
                return n
        raise KeyError(name)

    def ports(self) -> Iterable[Port]:
        for n in self.nodes:
            for p in n.ports:
                if p is not None:
                    yield p

    def port_by_lid(self, lid: int) -> Port | None:
        for p in self.ports():
            if p.lid and p.has_lid(lid) and (p.node.is_switch is False or p.num == 0):
                return p
        return None

    # ------------------------------------------------------------------ clients
    def attach(self, node: str | None = None, *, pid: int = 0, qp: int = 0, issm: bool = False) -> Client:
        """A new client on ``node`` (its first port; ``None``: the file's first port).  Raises KeyError for an
        unknown node, ValueError when all clients are taken or the node has an SM already."""
        port = self.node(node).first_port() if node else self.default_port
        free = next((i for i, c in enumerate(self.clients) if c is None), None)
        if free is None:
            raise ValueError(f"all {IBSIM_MAX_CLIENTS} clients are attached")
        if issm and any(c is not None and c.issm and c.port.node is port.node for c in self.clients):
            raise ValueError(f'an SM is attached to "{port.node.nodeid}" already')
        client = Client(free, port, pid, qp, issm)
        self.clients[free] = client
        return client

    def detach(self, client: Client) -> None:
        if self.clients[client.id] is client:
            self.clients[client.id] = None
            if client.issm:
                self.set_issm(client, False)

    def set_issm(self, client: Client, issm: bool) -> list[Delivery]:
        """The client's IsSM (and the port's CapabilityMask.IsSM); a change traps 144 to the SM where ibsim does."""
        client.issm = issm
        pi = client.port.portinfo
        old = PI.get_field(pi, "capability_mask")
        new = (old | CAP_IS_SM) if issm else (old & ~CAP_IS_SM)
        PI.set_field(pi, "capability_mask", new)
        if old != new and new & (CAP_IS_NOTICE | CAP_IS_TRAP) and new & CAP_IS_CAPMASK_TRAP:
            return self._trap(client.port, 144)
        return []

    def _find_client(self, port: Port, response: bool, qp: int, tid: int) -> Client | None:
        if response:
            i = tid >> 48
            if i < IBSIM_MAX_CLIENTS:
                c = self.clients[i]
                if c is not None and c.port.guid == port.guid:
                    return c
        for c in self.clients:
            if c is None or c.port.guid != port.guid:
                continue
            if qp > 1:
                if qp == c.qp:
                    return c
            elif not response and c.issm:
                return c
        return None

    # ------------------------------------------------------------------ counting and routing
    def _cross(self, src: Port, dst: Port) -> None:
        """A MAD leaves ``src`` and enters ``dst`` (ibsim's pc_updated)."""
        a, b = src.counters, dst.counters
        a.xmit_pkts = _add(a.xmit_pkts, 1, 0xFFFFFFFF)
        a.xmit_data = _add(a.xmit_data, MAD_DWORDS, 0xFFFFFFFF)
        a.ext_xmit_data = _add(a.ext_xmit_data, MAD_DWORDS, (1 << 64) - 1)
        a.ext_xmit_pkts = _add(a.ext_xmit_pkts, 1, (1 << 64) - 1)
        b.rcv_pkts = _add(b.rcv_pkts, 1, 0xFFFFFFFF)
        b.rcv_data = _add(b.rcv_data, MAD_DWORDS, 0xFFFFFFFF)
        b.ext_rcv_data = _add(b.ext_rcv_data, MAD_DWORDS, (1 << 64) - 1)
        b.ext_rcv_pkts = _add(b.ext_rcv_pkts, 1, (1 << 64) - 1)

    @staticmethod
    def _discard(port: Port) -> None:
        port.counters.xmit_discards = _add(port.counters.xmit_discards, 1, 0xFFFF)

    def route_lid(self, port: Port, lid: int) -> Port | None:
        """The port a MAD from ``port`` to ``lid`` reaches, following the forwarding tables (None: lost)."""
        if lid == 0:
            return None
        if port.has_lid(lid):
            return port
        node = port.node
        tport = port
        if not node.is_switch:
            if port.remote is None:
                self._discard(port)
                return None
            port = port.remote
            node = port.node
        if tport is not port:
            self._cross(tport, port)
        hop = 0
        while not port.has_lid(lid) and hop < MAX_HOPS:
            hop += 1
            if not node.is_switch or lid > node.linear_fdb_top or node.lft[lid] == 0xFF \
                    or node.lft[lid] > node.num_ports:
                port.counters.rcv_switch_relay_errors = _add(port.counters.rcv_switch_relay_errors, 1, 0xFFFF)
                return None
            out = node.ports[node.lft[lid]]
            assert out is not None
            if not out.active:
                self._discard(out)
                return None
            tport = out
            if out.has_lid(lid):
                port = out
                break
            if out.remote is None:
                self._discard(out)
                return None
            port = out.remote
            node = port.node
            if not port.active:
                self._discard(tport)
                return None
            self._cross(tport, port)
        return port

    def _next_port(self, node: Node, port: Port, num: int) -> Port | None:
        out = node.port(num) if node.is_switch else node.port(num) if num else node.port(1)
        if out is None:
            port.counters.rcv_switch_relay_errors = _add(port.counters.rcv_switch_relay_errors, 1, 0xFFFF)
            return None
        if not out.link_up:
            self._discard(out)
            return None
        if out.remote is None:
            return out  # a switch's port 0
        there = out.remote
        if not there.link_up:
            self._discard(out)
            there.counters.rcv_errors = _add(there.counters.rcv_errors, 1, 0xFFFF)
            return None
        self._cross(out, there)
        return there

    def route_dr_out(self, port: Port, path: bytearray, count: int) -> Port | None:
        """A directed-route request along ``path[1..count]``; writes the ports it enters into ``path[0..count]``
        (the return path), as ibsim does."""
        ptr = 0
        while ptr < count:
            if ptr and not port.node.is_switch:
                return None
            path[ptr] = port.num
            ptr += 1
            nxt = self._next_port(port.node, port, path[ptr])
            if nxt is None:
                return None
            port = nxt
        path[ptr] = port.num
        return port

    def route_dr_in(self, port: Port, path: bytes | bytearray, count: int) -> Port | None:
        """A directed-route response back along the return path ``path[count..1]``."""
        for ptr in range(count, 0, -1):
            if ptr < count and not port.node.is_switch:
                return None
            nxt = self._next_port(port.node, port, path[ptr])
            if nxt is None:
                return None
            port = nxt
        return port

    # ------------------------------------------------------------------ in-process use
    def request(self, client: Client, mad: bytes, *, dlid: int = S.PERMISSIVE_LID, dqp: int = 0,
                sqp: int = 0) -> SimRequest | None:
        """``mad`` from ``client`` (to ``dlid``; permissive: directed route) and what comes back to that client
        (the reply, or the request with status 110 when it was lost), or None when nothing comes back to it
        (forwarded to another client, or dropped).  For the lab's own SM and tools in-process."""
        slid = S.PERMISSIVE_LID if dlid == S.PERMISSIVE_LID else 0
        for d in self.send(client, SimRequest(dlid, slid, dqp, sqp, mad)):
            if d.client is client:
                return d.request
        return None

    # ------------------------------------------------------------------ the entry point
    def send(self, client: Client, req: SimRequest) -> list[Delivery]:
        """A MAD ``req`` from ``client``: what the subnet delivers because of it (empty: dropped unanswered).

        A request an agent answers comes back to ``client`` as the reply; one for another client (an SA query,
        SMInfo for the SM, a response to a client's request) is forwarded to it; one that is lost comes back to
        ``client`` unchanged with status 110.  Never raises for a bad MAD."""
        mad = bytearray(req.mad.ljust(MAD_SIZE, b"\0")[:MAD_SIZE])
        if mad[0] != 1 or mad[2] > 2:  # base version 1; class version 1 (SMA, PMA) or 2 (SA)
            return []
        response = bool(mad[3] & 0x80)
        method = mad[3]
        mclass = mad[1]
        directed = mclass == MGMT_CLASS_SM_DIRECTED_ROUTE
        slid, dlid = req.slid, req.dlid
        path = bytearray(S.DR_PATH_SIZE)
        count = 0
        hdr = MADHeader.decode(mad)
        if directed:
            # the DR SMP's status word is the D bit and the status, its ClassSpecific the hop pointer and
            # hop count (IBA 14.2.1.2)
            if hdr.class_specific >> 8 != 0 or hdr.status >> 15 != int(response):
                return []
            count = hdr.class_specific & 0xFF
            dr = S.SMPDirectedFields.decode(mad, MAD_HEADER_SIZE)
            if count > S.DR_MAX_HOPS or dr.dr_slid != S.PERMISSIVE_LID or dr.dr_dlid != S.PERMISSIVE_LID:
                return []
        elif slid == 0:
            slid = client.port.lid
        tid = hdr.tid
        if not response:
            tid = (tid & 0xFFFFFFFFFFFF) | (client.id << 48)
            MADHeader.set_field(mad, "tid", tid)
        attr_id, attr_mod = hdr.attr_id, hdr.attr_mod
        if directed:
            off = S.DR_RETURN_PATH_OFFSET if response else S.DR_INITIAL_PATH_OFFSET
            path[:] = mad[off:off + S.DR_PATH_SIZE]
        if method == METHOD_TRAP_REPRESS:
            return []
        lost = SimRequest(dlid, slid, req.dqp, req.sqp, bytes(mad), SIM_REPLY_TIMEOUT_STATUS, req.length)
        if 0 <= dlid < 0xFFFF:
            port = self.route_lid(client.port, dlid)
        elif response:
            port = self.route_dr_in(client.port, path, count)
        else:
            port = self.route_dr_out(client.port, path, count)
        if port is None:
            self.dropped += 1
            return [Delivery(client, lost)]
        handler = None if response else self._handler(mclass, attr_id)
        if handler is None:
            dest = self._find_client(port, response, req.dqp, tid)
            if dest is None:
                if not response and mclass in (MGMT_CLASS_SM_LID_ROUTED, MGMT_CLASS_SM_DIRECTED_ROUTE, MGMT_CLASS_PERF) \
                        and not self._forwarded_only(mclass, attr_id):
                    return self._answer(client, req, mad, port, path, count, slid, dlid, STATUS_METHOD_ATTR_UNSUPPORTED,
                                        None)
                self.dropped += 1
                return [Delivery(client, lost)]
            if directed:
                mad[S.DR_RETURN_PATH_OFFSET:S.DR_RETURN_PATH_OFFSET + S.DR_PATH_SIZE] = path
            return [Delivery(dest, SimRequest(dlid, slid, req.dqp, req.sqp, bytes(mad), req.status, req.length))]
        size = P.PMA_DATA_SIZE if mclass == MGMT_CLASS_PERF else S.SMP_DATA_SIZE
        data = bytearray(mad[S.SMP_DATA_OFFSET:S.SMP_DATA_OFFSET + size])
        traps: list[Delivery] = []
        if method in (METHOD_GET, METHOD_SET):
            status = handler(port, method, attr_mod, data, traps)
        else:
            status = STATUS_METHOD_UNSUPPORTED
        return self._answer(client, req, mad, port, path, count, slid, dlid, status, data) + traps

    def _answer(self, client: Client, req: SimRequest, mad: bytearray, port: Port, path: bytearray, count: int,
                slid: int, dlid: int, status: int, data: bytearray | None) -> list[Delivery]:
        mad[3] = METHOD_GET_RESP  # (IBA 13.4.5): the R bit and Get
        if mad[1] == MGMT_CLASS_SM_DIRECTED_ROUTE:
            MADHeader.set_field(mad, "status", 0x8000 | status & 0x7FFF)  # D bit: returning (14.2.1.2)
            mad[S.DR_RETURN_PATH_OFFSET:S.DR_RETURN_PATH_OFFSET + S.DR_PATH_SIZE] = path
        else:
            MADHeader.set_field(mad, "status", status)
        if data is not None:
            mad[S.SMP_DATA_OFFSET:S.SMP_DATA_OFFSET + len(data)] = data
        back = self.route_lid(port, slid) if 0 <= slid < 0xFFFF else self.route_dr_in(port, path, count)
        if back is None or back.node is not client.port.node:
            self.dropped += 1
            return [Delivery(client, SimRequest(dlid, slid, req.dqp, req.sqp, bytes(mad), SIM_REPLY_TIMEOUT_STATUS,
                                                req.length))]
        return [Delivery(client, SimRequest(slid, dlid, req.sqp, req.dqp, bytes(mad), 0, req.length))]

    @staticmethod
    def _forwarded_only(mclass: int, attr_id: int) -> bool:
        """Attributes ibsim hands to a client (the SM's SMInfo; the PMA's samples) and drops when none takes them."""
        if mclass == MGMT_CLASS_PERF:
            return attr_id in (P.ATTR_PORT_SAMPLES_CONTROL, P.ATTR_PORT_SAMPLES_RESULT)
        return attr_id == S.ATTR_SM_INFO

    # ------------------------------------------------------------------ traps
    def _trap(self, port: Port, number: int) -> list[Delivery]:
        """Trap 144 (capability mask / link change) from ``port`` to its SM, as ibsim's send_trap."""
        if not port.lid or not port.sm_lid:
            return []
        # DataDetails of trap 144 (IBA 14.2.5.1): 2 reserved bytes, LIDADDR, a byte of OtherLocalChanges,
        # then the port's CapabilityMask
        details = (bytes(2) + port.lid.to_bytes(2, "big") + bytes(1)
                   + PI.get_field(port.portinfo, "capability_mask").to_bytes(4, "big")).ljust(54, b"\0")
        notice = S.Notice(is_generic=1, type=4, producer_type=port.node.type, trap_number=number,
                          issuer_lid=port.lid, data_details=int.from_bytes(details, "big"))
        mad = bytearray(S.SMP(METHOD_TRAP, ATTR_NOTICE, data=S.attribute_data(notice), directed=False).encode())
        dest = self.route_lid(port, port.sm_lid)
        if dest is None:
            return []
        sm = self._find_client(dest, False, 1, 0)
        if sm is None:
            return []
        return [Delivery(sm, SimRequest(port.sm_lid, port.lid, 0, 0, bytes(mad)))]

    # ------------------------------------------------------------------ the agents
    def _handler(self, mclass: int, attr_id: int) -> Agent | None:
        """The agent's function for an attribute of a class, or None (ibsim's smp_handlers_array)."""
        if mclass in (MGMT_CLASS_SM_LID_ROUTED, MGMT_CLASS_SM_DIRECTED_ROUTE):
            return {
                S.ATTR_NODE_DESCRIPTION: self._nodedesc, S.ATTR_NODE_INFO: self._nodeinfo,
                S.ATTR_SWITCH_INFO: self._switchinfo, S.ATTR_PORT_INFO: self._portinfo,
                S.ATTR_LINEAR_FORWARDING_TABLE: self._lft, S.ATTR_MULTICAST_FORWARDING_TABLE: self._mft,
                S.ATTR_PKEY_TABLE: self._pkeys, S.ATTR_SL_TO_VL_TABLE: self._sl2vl,
                S.ATTR_VL_ARB_TABLE: self._vlarb, S.ATTR_GUID_INFO: self._guidinfo,
                S.ATTR_MLNX_EXT_PORT_INFO: self._extportinfo,
            }.get(attr_id)
        if mclass == MGMT_CLASS_PERF:
            if attr_id in ZERO_COUNTER_ATTRIBUTES:
                return self._zero_counters
            return {P.ATTR_CLASS_PORT_INFO: self._cpi, P.ATTR_PORT_COUNTERS: self._portcounters,
                    P.ATTR_PORT_COUNTERS_EXTENDED: self._extcounters}.get(attr_id)
        return None

    @staticmethod
    def _nodedesc(port: Port, op: int, mod: int, data: bytearray, traps: list[Delivery]) -> int:
        data[:] = S.node_description_data(port.node.description)
        return STATUS_METHOD_UNSUPPORTED if op != METHOD_GET else 0

    @staticmethod
    def _nodeinfo(port: Port, op: int, mod: int, data: bytearray, traps: list[Delivery]) -> int:
        node = port.node
        data[:] = node.nodeinfo
        S.NodeInfo.set_field(data, "local_port_num", port.num)
        S.NodeInfo.set_field(data, "port_guid", node.guid if node.is_switch else node.guid + port.num)
        return STATUS_METHOD_UNSUPPORTED if op != METHOD_GET else 0

    @staticmethod
    def _switchinfo(port: Port, op: int, mod: int, data: bytearray, traps: list[Delivery]) -> int:
        node = port.node
        if not node.is_switch:
            return STATUS_METHOD_ATTR_UNSUPPORTED
        si = S.SwitchInfo
        if op == METHOD_SET:
            if si.get_field(data, "port_state_change"):
                node.port_change = 0
            node.linear_fdb_top = si.get_field(data, "linear_fdb_top")
            node.life_time = si.get_field(data, "life_time_value")
        data[:] = node.switchinfo
        si.set_field(data, "port_state_change", node.port_change)
        si.set_field(data, "linear_fdb_top", node.linear_fdb_top)
        si.set_field(data, "life_time_value", node.life_time)
        return 0

    @staticmethod
    def _pkeys(port: Port, op: int, mod: int, data: bytearray, traps: list[Delivery]) -> int:
        block, num = mod & 0xFFFF, mod >> 16
        if port.node.is_switch:
            p = port.node.port(num)
            if p is None:
                return STATUS_INVALID_VALUE
            port = p
        size = len(port.pkeys) // 2
        if block * S.PKEY_BLOCK_SIZE >= size:
            return STATUS_INVALID_VALUE
        lo = block * 64
        hi = min(len(port.pkeys), lo + 64)
        if op == METHOD_SET:
            port.pkeys[lo:hi] = data[:hi - lo]
        else:
            data[:64] = bytes(port.pkeys[lo:hi]).ljust(64, b"\0")
        return 0

    @staticmethod
    def _sl2vl(port: Port, op: int, mod: int, data: bytearray, traps: list[Delivery]) -> int:
        n = 0
        if port.node.is_switch:
            p = port.node.port((mod >> 8) & 0xFF)
            n = mod & 0xFF
            if p is None or n > port.node.num_ports:
                return STATUS_INVALID_VALUE
            port = p
        if op == METHOD_SET:
            port.sl2vl[8 * n:8 * n + 8] = data[:8]
        else:
            data[:8] = port.sl2vl[8 * n:8 * n + 8]
        return 0

    @staticmethod
    def _vlarb(port: Port, op: int, mod: int, data: bytearray, traps: list[Delivery]) -> int:
        if port.node.is_switch:
            p = port.node.port(mod & 0xFFFF)
            if p is None:
                return STATUS_INVALID_VALUE
            port = p
        n = (mod >> 16) - 1
        if not 0 <= n <= 3:
            return STATUS_INVALID_VALUE
        size = PI.get_field(port.portinfo, "vl_arb_high_cap" if n // 2 else "vl_arb_low_cap")
        if not size or n % 2 > size // 32:
            return STATUS_INVALID_VALUE
        table = port.vlarb_high if n // 2 else port.vlarb_low
        start = (n % 2) * 64
        if size > 32 and n % 2:
            size %= 32
        length = min(size, 32) * 2
        if op == METHOD_SET:
            table[start:start + length] = data[:length]
        else:
            data[:] = bytes(table[start:start + length]).ljust(64, b"\0")
        return 0

    @staticmethod
    def _guidinfo(port: Port, op: int, mod: int, data: bytearray, traps: list[Delivery]) -> int:
        data[:] = bytes(64)
        if mod == 0:
            data[0:8] = port.guid.to_bytes(8, "big")
        return STATUS_METHOD_UNSUPPORTED if op != METHOD_GET else 0

    def _portinfo(self, port: Port, op: int, mod: int, data: bytearray, traps: list[Delivery]) -> int:
        node = port.node
        num = mod & 0x7FFFFFFF
        if num > node.num_ports:
            return STATUS_INVALID_VALUE
        if num == 0 and not node.is_switch:
            num = port.num
        p = node.port(num)
        assert p is not None
        if op == METHOD_SET:
            status = self._set_portinfo(port, p, data, traps)
            if status:
                return status
        data[:] = p.refresh_portinfo()
        PI.set_field(data, "local_port_num", port.num)
        return 0

    def _set_portinfo(self, port: Port, p: Port, data: bytearray, traps: list[Delivery]) -> int:
        """PortInfo Set (IBA 14.2.5.6, the port state machine of 7.2): what ibsim's do_portinfo takes."""
        if not p.node.is_switch and port.num != p.num:
            return STATUS_INVALID_VALUE
        p.lid = PI.get_field(data, "lid")
        p.sm_lid = PI.get_field(data, "master_sm_lid")
        p.lmc = PI.get_field(data, "lmc")
        p.hoq_life = PI.get_field(data, "hoq_life")
        phys = PI.get_field(data, "port_phys_state")
        if phys:
            p.phys_state = phys
        state = PI.get_field(data, "port_state")
        rp = p.remote
        if state > 0 and rp is not None:
            if state == 1:  # Down: both ends back to Init
                p.state = rp.state = 2
                if rp.node.is_switch:
                    rp.node.port_change = 1
            elif state > 2:
                if abs(rp.state - state) <= 1 and abs(p.state - state) == 1:
                    p.state = state
                else:
                    return STATUS_INVALID_VALUE
        elif state > 1:
            return STATUS_INVALID_VALUE  # a port that is down stays down
        vls = PI.get_field(data, "operational_vls")
        if vls > PI.get_field(data, "vl_cap"):
            return STATUS_INVALID_VALUE
        p.op_vls = vls
        # NeighborMTU, as the SM negotiates it (IBA 14.2.5.6: at most MTUCap; 0 leaves it).  ibsim 0.10 ignores
        # it and keeps 2048; OpenSM sets min(MTUCap) of the two ends, which is that same 2048 on ibsim's ports
        mtu = PI.get_field(data, "neighbor_mtu")
        if mtu:
            if mtu > PI.get_field(p.portinfo, "mtu_cap"):
                return STATUS_INVALID_VALUE
            PI.set_field(p.portinfo, "neighbor_mtu", mtu)
        p.subnet_prefix = PI.get_field(data, "gid_prefix")
        if rp is None:
            return 0
        speed = PI.get_field(data, "link_speed_enabled")
        active = {1: 1, 3: 2, 5: 4, 7: 4}.get(speed)
        if active:
            p.speed_active = rp.speed_active = active
        speed_changed = bool(active) and speed != p.speed_enabled
        if speed_changed:
            p.speed_enabled = speed
        espeed = PI.get_field(data, "link_speed_ext_enabled")
        eactive = {1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 4}.get(espeed)
        if eactive:
            p.speed_ext_active = rp.speed_ext_active = eactive
        espeed_changed = bool(eactive) and espeed != p.speed_ext_enabled
        if espeed_changed:
            p.speed_ext_enabled = espeed
        width = PI.get_field(data, "link_width_enabled")
        wactive = 0
        if 1 <= width <= 31:
            wactive = 8 if width & 8 else 4 if width & 4 else 2 if width & 2 else 16 if width & 16 else 1
        if wactive:
            p.width_active = rp.width_active = wactive
        width_changed = bool(wactive) and width != p.width_enabled
        if width_changed:
            p.width_enabled = width
        if speed_changed or espeed_changed or width_changed:
            traps.extend(self._trap(port, 144))
        return 0

    @staticmethod
    def _extportinfo(port: Port, op: int, mod: int, data: bytearray, traps: list[Delivery]) -> int:
        node = port.node
        if mod > node.num_ports:
            return STATUS_INVALID_VALUE
        p = node.port(mod if mod or node.is_switch else port.num)
        assert p is not None
        if op == METHOD_SET:
            p.ext_portinfo[:] = data
        else:
            data[:] = p.ext_portinfo
        return 0

    @staticmethod
    def _lft(port: Port, op: int, mod: int, data: bytearray, traps: list[Delivery]) -> int:
        node = port.node
        if not node.is_switch:
            return STATUS_METHOD_ATTR_UNSUPPORTED
        if mod >= LINEAR_CAP // S.LFT_BLOCK_SIZE:
            return STATUS_INVALID_VALUE
        lo = mod * S.LFT_BLOCK_SIZE
        if op == METHOD_SET:
            node.lft[lo:lo + 64] = data[:64]
        data[:64] = node.lft[lo:lo + 64]
        return 0

    @staticmethod
    def _mft(port: Port, op: int, mod: int, data: bytearray, traps: list[Delivery]) -> int:
        node = port.node
        if not node.is_switch:
            return STATUS_METHOD_ATTR_UNSUPPORTED
        mask, block = mod >> 28, mod & 0x1FF
        if block > MCAST_CAP // 32 - 1 or mask >= node.num_port_masks:
            data[:] = bytes(64)
            return 0
        if op == METHOD_SET:
            node.mft[(block, mask)] = bytes(data[:64])
        data[:] = node.mft.get((block, mask), bytes(64))
        return 0

    # ------------------------------------------------------------------ performance management
    @staticmethod
    def _cpi(port: Port, op: int, mod: int, data: bytearray, traps: list[Delivery]) -> int:
        # AllPortSelect (switches), PortCountersExtended without IETF, PortXmitWait (IBA 16.1.2 table 227)
        caps = (P.CAP_ALL_PORT_SELECT if port.node.is_switch else 0) | P.CAP_EXTENDED_WIDTH_NOIETF \
            | P.CAP_PORT_XMIT_WAIT
        data[:] = P.ClassPortInfo(capability_mask=caps, resp_time_value=0x12).encode().ljust(len(data), b"\0")
        return STATUS_METHOD_UNSUPPORTED if op != METHOD_GET else 0

    def _counter_ports(self, port: Port, select: int) -> list[Port] | None:
        node = port.node
        if not node.is_switch and select != port.num:
            return None
        if node.is_switch and select > node.num_ports and select != 0xFF:
            return None
        if select != 0xFF:
            p = node.port(select)
            return None if p is None else [p]
        return [p for p in node.ports if p is not None]

    def _portcounters(self, port: Port, op: int, mod: int, data: bytearray, traps: list[Delivery]) -> int:
        pc = P.PortCounters
        ports = self._counter_ports(port, pc.get_field(data, "port_select"))
        if ports is None:
            return STATUS_INVALID_VALUE
        mask = pc.get_field(data, "counter_select")
        if op == METHOD_SET:
            for p in ports:
                c = p.counters
                if mask & 1 << 3:
                    c.rcv_errors = 0
                if mask & 1 << 5:
                    c.rcv_switch_relay_errors = 0
                if mask & 1 << 6:
                    c.xmit_discards = 0
                if mask & 1 << 12:
                    c.xmit_data = 0
                if mask & 1 << 13:
                    c.rcv_data = 0
                if mask & 1 << 14:
                    c.xmit_pkts = 0
                if mask & 1 << 15:
                    c.rcv_pkts = 0
        total = Counters()
        for p in ports:
            c = p.counters
            total.xmit_pkts = _add(total.xmit_pkts, c.xmit_pkts, 0xFFFFFFFF)
            total.xmit_data = _add(total.xmit_data, c.xmit_data, 0xFFFFFFFF)
            total.rcv_pkts = _add(total.rcv_pkts, c.rcv_pkts, 0xFFFFFFFF)
            total.rcv_data = _add(total.rcv_data, c.rcv_data, 0xFFFFFFFF)
            # (ibsim sums PortXmitDiscards with the 8-bit limit of PortXmitConstraintErrors: kept)
            total.xmit_discards = _add(total.xmit_discards, c.xmit_discards, 0xFFFF if len(ports) == 1 else 0xFF)
            total.rcv_errors = _add(total.rcv_errors, c.rcv_errors, 0xFFFF)
            total.rcv_switch_relay_errors = _add(total.rcv_switch_relay_errors, c.rcv_switch_relay_errors, 0xFFFF)
        for name in P.COUNTER_SELECT_BITS:  # the counters nothing moves here read 0
            pc.set_field(data, name, 0)
        pc.set_field(data, "port_xmit_pkts", total.xmit_pkts)
        pc.set_field(data, "port_xmit_data", total.xmit_data)
        pc.set_field(data, "port_rcv_pkts", total.rcv_pkts)
        pc.set_field(data, "port_rcv_data", total.rcv_data)
        pc.set_field(data, "port_xmit_discards", total.xmit_discards)
        pc.set_field(data, "port_rcv_errors", total.rcv_errors)
        pc.set_field(data, "port_rcv_switch_relay_errors", total.rcv_switch_relay_errors)
        return 0

    def _zero_counters(self, port: Port, op: int, mod: int, data: bytearray, traps: list[Delivery]) -> int:
        """The detail and per-VL counter attributes (IBA 16.1.4): nothing here moves them, they read 0 (ibsim's
        do_portcounters_common with counters nothing increments); PortSelect is checked as for PortCounters."""
        if self._counter_ports(port, P.PortCounters.get_field(data, "port_select")) is None:
            return STATUS_INVALID_VALUE
        data[4:] = bytes(len(data) - 4)  # the counters follow PortSelect and CounterSelect
        return 0

    def _extcounters(self, port: Port, op: int, mod: int, data: bytearray, traps: list[Delivery]) -> int:
        pce = P.PortCountersExtended
        ports = self._counter_ports(port, pce.get_field(data, "port_select"))
        if ports is None:
            return STATUS_INVALID_VALUE
        mask = pce.get_field(data, "counter_select")
        if op == METHOD_SET:
            for p in ports:
                c = p.counters
                if mask & 1:
                    c.ext_xmit_data = 0
                if mask & 2:
                    c.ext_rcv_data = 0
                if mask & 4:
                    c.ext_xmit_pkts = 0
                if mask & 8:  # (ibsim 0.10 clears the transmitted packets here too: pc_ext_reset)
                    c.ext_xmit_pkts = 0
        lim = (1 << 64) - 1
        vals = [0, 0, 0, 0]
        for p in ports:
            c = p.counters
            for i, v in enumerate((c.ext_xmit_data, c.ext_rcv_data, c.ext_xmit_pkts, c.ext_rcv_pkts)):
                vals[i] = _add(vals[i], v, lim)
        names = ("port_xmit_data", "port_rcv_data", "port_xmit_pkts", "port_rcv_pkts", "port_unicast_xmit_pkts",
                 "port_unicast_rcv_pkts", "port_multicast_xmit_pkts", "port_multicast_rcv_pkts")
        for name, v in zip(names, vals + [0, 0, 0, 0], strict=True):  # unicast/multicast ones stay 0
            pce.set_field(data, name, v)
        return 0
