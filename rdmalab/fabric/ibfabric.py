"""A native InfiniBand subnet for the soft engine: HCAs with LIDs, switches that forward by a linear
forwarding table, and link-level credit flow control per virtual lane.

The engine's QPs do not change: a :class:`~rdmalab.verbs.engine.node.SoftDevice` on this carrier
has an InfiniBand port (``link_layer`` IBV_LINK_LAYER_INFINIBAND, its ``lid``, one GID:
fe80::/64 and the port GUID), and a pyverbs program addresses its peer by ``ah_attr.dlid``
(``is_global=0``) as on an HCA.  Every packet crosses the subnet as a native IB packet (IBA Vol 1
chapter 7): LRH (VL, SL, LNH 2, DLID, PktLen, SLID), BTH and the engine's extended headers,
ICRC and VCRC (:func:`rdmalab.verbs.engine.ibframe.ib_frame`); a connected QP whose address vector
has a GRH (``is_global=1``, the peer named by its GID) sends one after the LRH (LNH 3).  With ``frames=True`` or a tap
the bytes themselves travel and the receiving HCA decodes them and checks both CRCs; otherwise
the engine's packet object travels with its LRH fields beside it (the same sizes, the same
timing).

**Forwarding.**  A switch forwards a packet by its DLID alone: ``switch.lft[dlid]`` is the
output port (IBA Vol 1 18.2.4.3.1, the LinearForwardingTable of 14.2.5.10, set in blocks of 64
LIDs: :meth:`IBSwitch.set_lft`).  A DLID without an entry, or to a port with no link, is
discarded and counted (``PortXmitDiscards`` of the input port).  A subnet manager writes the
tables; until one does, :meth:`IBFabric.min_hop_routes` is a stand-in: every switch's table
sends each LID out of a port on a shortest path (ties to the port with fewest LIDs routed so
far, then the lowest number, balanced like OpenSM's min-hop but not promised to equal it).

**Credits** (IBA Vol 1 7.9).  Every input port has a receive buffer per data VL of ``vl_buffer``
bytes, counted in 64-byte blocks (7.9.2: one credit is 64 bytes).  The port at the other end of
the link sends a packet on a VL only when the credits it holds for that VL cover the packet's
blocks; sending spends them.  A switch frees a packet's blocks when the packet has left through
its output port (an HCA as soon as it arrives: its memory drains it), and the freed credits
travel back to the sender in a flow control packet, after the link's delay (7.9.4; modelled as
one flow control packet per freed packet, whose own serialisation is not modelled).  Nothing
is ever dropped for congestion: a full buffer stops the link before it, that stops the one
before it, hop by hop, and every packet behind the blocked one on that VL waits too
(head-of-line blocking).  ``PortXmitWait`` counts the ns a port had a packet to send but could
send none for lack of credits (IBA 16.1.3.5 counts it in implementation ticks; here a tick is
1 ns).  With ``credits=False`` the same buffers overflow instead (a lossy comparison, not IB):
a packet that does not fit is dropped and counted in ``PortRcvErrors`` of that port.

Each output port has one FIFO per data VL and serves them round robin among the VLs whose head
packet has credits (VL arbitration tables are not modelled; no VL15).  The SL of a packet is
its QP's ``ah_attr.sl``; its VL is ``sl2vl[sl]`` (default ``sl % vls``).  Links are full
duplex with a rate in whole Mbit/s and a propagation delay; switches are store-and-forward.
Everything runs on one :class:`~rdmalab.fabric.loop.VirtualLoop` (integer ns).
"""

from __future__ import annotations

import ipaddress
from collections import deque
from collections.abc import Callable, Iterable, MutableMapping
from typing import IO, Any

from rdmalab.capture.linktypes import LINKTYPE_ERF, erf_ib_record
from rdmalab.capture.pcapwriter import CaptureWriter
from rdmalab.fabric.loop import VirtualLoop
from rdmalab.fabric.switched import link_mbps, whole_ns
from rdmalab.verbs import enums as e
from rdmalab.verbs.engine.carrier import Scheduler, Station, TimerHandle
from rdmalab.verbs.engine.ibframe import from_ib, ib_frame, ib_size
from rdmalab.verbs.engine.node import SoftDevice
from rdmalab.verbs.engine.packet import Pkt
from rdmalab.verbs.trace import TraceEvent
from rdmalab.wire.ib import GRH, check_mtu
from rdmalab.wire.smp import LFT_BLOCK_SIZE, LFT_NO_PORT

__all__ = ["BLOCK_BYTES", "IBFabric", "IBHca", "IBPort", "IBSwitch", "ErfTap", "LFT_BLOCK", "NO_PORT"]

#: bytes per flow-control credit (IBA Vol 1 7.9.2)
BLOCK_BYTES = 64
#: LIDs per LinearForwardingTable block (IBA Vol 1 14.2.5.10)
LFT_BLOCK = LFT_BLOCK_SIZE
#: an LFT entry that names no port (what OpenSM writes for an unreachable LID, OSM_NO_PATH)
NO_PORT = LFT_NO_PORT
#: the subnet prefix of every port GID here (the default, IBA Vol 1 4.1.1)
SUBNET_PREFIX = 0xFE80 << 48

# the counters of every port, by their PortCounters names (IBA Vol 1 16.1.3.5)
COUNTERS = ("PortXmitData", "PortRcvData", "PortXmitPkts", "PortRcvPkts", "PortXmitWait", "PortXmitDiscards",
            "PortRcvErrors", "FlowControlSent", "FlowControlRcvd")


def blocks(size: int) -> int:
    """Credits (64-byte blocks) a packet of ``size`` bytes takes in a receive buffer."""
    return -(-size // BLOCK_BYTES)


class IBPacket:
    """A packet in the subnet: its LRH fields, size, the engine's packet and (when carried) its bytes."""

    __slots__ = ("dlid", "slid", "sl", "vl", "size", "blocks", "pkt", "frame", "inport", "sent_ns")

    def __init__(self, dlid: int, slid: int, sl: int, vl: int, size: int, pkt: Pkt, frame: bytes | None) -> None:
        self.dlid = dlid
        self.slid = slid
        self.sl = sl
        self.vl = vl
        self.size = size
        self.blocks = blocks(size)
        self.pkt = pkt
        self.frame = frame
        self.inport: IBPort | None = None  # the input port whose buffer holds it (at a switch)
        self.sent_ns = 0


class IBPort:
    """One end of a link: per-VL output FIFOs, the credits held for the peer's buffer, this port's own
    input buffer per VL, and the PortCounters."""

    def __init__(self, node: IBNode, num: int, vls: int, buffer_blocks: int) -> None:
        self.node = node
        self.num = num
        self.peer: IBPort | None = None
        self.mbps = 1
        self.delay = 0
        self.queues: list[deque[IBPacket]] = [deque() for _ in range(vls)]
        self.credits = [0] * vls  # blocks free in the peer's input buffer, per VL (what we may send)
        self.buffer_blocks = buffer_blocks
        self.rx_blocks = [0] * vls  # blocks of our input buffer in use, per VL
        self.rx_max = [0] * vls
        self.busy_until = 0
        self.tx_rem = 0
        self.free_ev = False
        self.rr = 0
        self.wait_since: int | None = None
        self.counters = dict.fromkeys(COUNTERS, 0)
        self.taps: list[ErfTap] = []

    @property
    def name(self) -> str:
        return f"{self.node.name}/{self.num}->{self.peer.node.name if self.peer else '?'}"

    @property
    def queued(self) -> int:
        """Packets waiting in this port's output FIFOs."""
        return sum(len(q) for q in self.queues)

    def xmit_wait(self, now: int) -> int:
        """PortXmitWait at ``now``: the ns counted so far plus the wait under way."""
        w = self.counters["PortXmitWait"]
        return w + (now - self.wait_since if self.wait_since is not None else 0)

    def __repr__(self) -> str:
        return f"IBPort({self.name})"


class IBNode:
    def __init__(self, fabric: IBFabric, name: str, guid: int) -> None:
        self.fabric = fabric
        self.name = name
        self.guid = guid
        self.ports: dict[int, IBPort] = {}
        self.lid = 0


class IBHca(IBNode):
    """A one-port HCA: a soft device of the engine (``device``) with an InfiniBand port."""

    def __init__(self, fabric: IBFabric, name: str, guid: int, lid: int, mac: int, ipv4: int) -> None:
        super().__init__(fabric, name, guid)
        dev = SoftDevice(name, ipv4, mac, fabric, seed=fabric.seed * 1000 + len(fabric.nodes))
        dev.link_layer = e.IBV_LINK_LAYER_INFINIBAND
        dev.gid_type = e.IBV_GID_TYPE_IB
        dev.gids = [(SUBNET_PREFIX << 64) | guid]
        self.device = dev
        self.set_lid(lid)
        #: packets delivered to the device, per destination QP
        self.rcvd_pkts: dict[int, int] = {}

    def set_lid(self, lid: int) -> None:
        self.lid = self.device.lid = lid

    @property
    def port(self) -> IBPort:
        return self.ports[1]


class IBSwitch(IBNode):
    """A switch: ports 1..n, and the linear forwarding table ``lft`` (DLID -> output port)."""

    def __init__(self, fabric: IBFabric, name: str, guid: int, nports: int) -> None:
        super().__init__(fabric, name, guid)
        self.nports = nports
        # (a mapping: rdmalab.fabric.ibfabric_subnet makes it a view of a subnet agent's table)
        self.lft: MutableMapping[int, int] = {}

    def set_lft(self, block: int, ports: Iterable[int]) -> None:
        """Write LFT block ``block`` (LIDs ``64*block .. 64*block+63``) as a SubnSet(LinearForwardingTable)
        does: 64 port numbers; :data:`NO_PORT` (0xFF) clears an entry.  ValueError for a block outside
        0..767, a list that is not 64 long, or a port this switch does not have."""
        entries = list(ports)
        if not 0 <= block < 0xC000 // LFT_BLOCK:
            raise ValueError(f"{self.name}: LFT block {block!r} is outside 0..{0xC000 // LFT_BLOCK - 1}")
        if len(entries) != LFT_BLOCK:
            raise ValueError(f"{self.name}: an LFT block has {LFT_BLOCK} entries, not {len(entries)}")
        for i, port in enumerate(entries):
            lid = block * LFT_BLOCK + i
            if port == NO_PORT:
                self.lft.pop(lid, None)
            elif isinstance(port, int) and 0 <= port <= self.nports:
                self.lft[lid] = port
            else:
                raise ValueError(f"{self.name}: LFT entry for LID {lid:#x} is port {port!r}; "
                                 f"the switch has ports 0..{self.nports} (or {NO_PORT:#x}: none)")

    def lft_block(self, block: int) -> list[int]:
        """LFT block ``block`` as a SubnGet(LinearForwardingTable) returns it (:data:`NO_PORT` where unset)."""
        return [self.lft.get(block * LFT_BLOCK + i, NO_PORT) for i in range(LFT_BLOCK)]


class ErfTap:
    """Writes the packets sent on one link (both directions) as ERF type-21 (InfiniBand) records in a
    pcap of link type 197 (ERF), which tshark decodes as InfiniBand (tshark 4.0 does not read link
    type 247); timestamps in ns."""

    def __init__(self, dest: str | IO[bytes]) -> None:
        self.writer = CaptureWriter(dest, linktype=LINKTYPE_ERF)
        self.count = 0

    def write(self, t_ns: int, raw: bytes) -> None:
        self.writer.write(erf_ib_record(t_ns, raw), t_ns)
        self.count += 1

    def close(self) -> None:
        self.writer.close()


class IBFabric:
    """HCAs and switches of one InfiniBand subnet on a virtual clock; the carrier of the HCAs' devices.

    ``mtu`` is the IB MTU of the ports (payload bytes per packet: 256 .. 4096); ``vls`` the data
    VLs (1..15); ``vl_buffer`` the bytes of every input port's buffer per VL (a whole number of
    64-byte blocks, at least one packet of ``mtu``); ``credits=False`` turns flow control off
    (buffers overflow and drop: for comparison only); ``frames=True`` carries every packet's bytes.
    ``devices`` maps HCA names to their soft devices, so ``Context(name=..., fabric=fab)`` opens one.
    """

    burst_ok = False
    tracing = False
    call_later: Callable[..., TimerHandle]

    def __init__(self, *, mtu: int = 2048, vls: int = 1, vl_buffer: int = 16384, credits: bool = True,
                 frames: bool = False, seed: int = 0) -> None:
        check_mtu(mtu, "mtu")
        if not 1 <= vls <= 15:
            raise ValueError(f"vls (data virtual lanes) must be 1..15, not {vls!r}")
        largest = blocks(mtu + 8 + 12 + 28 + 4 + 2)  # LRH, BTH, the largest extended headers, ICRC, VCRC
        if vl_buffer % BLOCK_BYTES or vl_buffer // BLOCK_BYTES < largest:
            raise ValueError(f"vl_buffer must be a multiple of {BLOCK_BYTES} bytes holding one {mtu}-byte-MTU "
                             f"packet ({largest * BLOCK_BYTES} bytes or more), not {vl_buffer!r}")
        self._mtu = mtu
        self.vls = vls
        self.vl_buffer = vl_buffer
        self.credit_fc = credits
        self.frames = frames
        self.seed = seed
        self.sl2vl = [sl % vls for sl in range(16)]
        self.loop = VirtualLoop(0)
        self.call_later = self.loop.call_later
        self.nodes: list[IBNode] = []
        self.by_name: dict[str, IBNode] = {}
        self.hcas: list[IBHca] = []
        self.switches: list[IBSwitch] = []
        self.devices: dict[str, SoftDevice] = {}
        self._by_lid: dict[int, IBHca] = {}
        self.held_acks: set[Any] = set()
        self.loop.on_instant_end(self.held_acks, self._flush)
        self._taps: list[ErfTap] = []
        #: the subnet administrator rdma_cm asks for paths, ``sa(slid, dlid) -> PathRecord`` (set by
        #: :func:`rdmalab.fabric.ibfabric_subnet.use_sa`); None: rdma_cm takes the fabric's own routes
        self.sa: Callable[[int, int], Any] | None = None

    # ------------------------------------------------------------------ building
    def _guid(self) -> int:
        return 0x0002C90300000000 | (len(self.nodes) + 1)

    def add_hca(self, name: str, lid: int | None = None, ip: str | None = None) -> IBHca:
        """A one-port HCA named ``name`` with LID ``lid`` (default: the lowest LID no node has) and the
        IPv4 address ``ip`` rdma_cm knows its port by, as IPoIB gives one (default ``10.0.0.<n>``
        for the n-th HCA, as the RoCE fabric's ``add_device``).  ValueError for an address that is
        not IPv4 or is another HCA's."""
        self._new_name(name)
        lid = self._lid(lid, name)
        n = len(self.hcas) + 1
        try:
            ipv4 = int(ipaddress.IPv4Address(ip)) if ip is not None else (10 << 24) | n
        except ValueError:
            raise ValueError(f"{name}: {ip!r} is not an IPv4 address") from None
        if any(h.device.ipv4 == ipv4 for h in self.hcas):
            raise ValueError(f"{name}: {ipaddress.IPv4Address(ipv4)} is already another HCA's address")
        mac = 0x020000000000 | n
        # the port GUID is the node GUID the verbs report for a soft device (Context.query_device)
        hca = IBHca(self, name, (mac << 16) | 0xFFFE, lid, mac, ipv4)
        self.nodes.append(hca)
        self.hcas.append(hca)
        self.by_name[name] = hca
        self.devices[name] = hca.device
        self._by_lid[lid] = hca
        return hca

    def add_switch(self, name: str, nports: int = 36, lid: int | None = None) -> IBSwitch:
        """A switch with ports 1..``nports`` and the LID of its port 0 (default: the lowest free)."""
        self._new_name(name)
        if not 1 <= nports <= 254:
            raise ValueError(f"switch {name}: nports must be 1..254, not {nports!r}")
        sw = IBSwitch(self, name, self._guid(), nports)
        sw.lid = self._lid(lid, name)
        self.nodes.append(sw)
        self.switches.append(sw)
        self.by_name[name] = sw
        return sw

    def _new_name(self, name: str) -> None:
        if name in self.by_name:
            raise ValueError(f"a node named {name!r} already exists")

    def _lid(self, lid: int | None, name: str) -> int:
        used = {n.lid for n in self.nodes}
        if lid is None:
            lid = next(i for i in range(1, 0xC000) if i not in used)
        elif isinstance(lid, bool) or not isinstance(lid, int) or not 1 <= lid < 0xC000:
            raise ValueError(f"{name}: LID {lid!r} is not a unicast LID (0x0001..0xbfff)")
        elif lid in used:
            raise ValueError(f"{name}: LID {lid:#x} is already another node's")
        return lid

    def set_lid(self, node: str | IBNode, lid: int, sm_lid: int | None = None) -> None:
        """Give ``node`` (an HCA's port, or a switch's port 0) the LID ``lid``, as a subnet manager's
        SubnSet(PortInfo) does; an HCA's device answers ``query_port`` with it (and ``sm_lid`` when
        given).  ValueError for a LID that is not unicast or is another node's.  The switches' tables
        are not changed: route again (:meth:`min_hop_routes`, or the SM's own tables)."""
        n = self.node(node)
        if lid != n.lid:
            self._lid(lid, n.name)
        if isinstance(n, IBHca):
            self._by_lid.pop(n.lid, None)
            n.set_lid(lid)
            self._by_lid[lid] = n
            if sm_lid is not None:
                n.device.sm_lid = sm_lid
        else:
            n.lid = lid

    def node(self, name: str | IBNode) -> IBNode:
        if isinstance(name, IBNode):
            return name
        try:
            return self.by_name[name]
        except KeyError:
            raise ValueError(f"no node named {name!r} (have {sorted(self.by_name)})") from None

    def link(self, a: str | IBNode, b: str | IBNode, rate_gbps: float = 100.0, delay_us: float = 0.1, *,
             port_a: int | None = None, port_b: int | None = None) -> tuple[IBPort, IBPort]:
        """A full-duplex link between ``a`` and ``b`` (their next free ports unless given), ``rate_gbps``
        each way (a whole number of Mbit/s), ``delay_us`` of propagation (rounded to whole ns)."""
        na, nb = self.node(a), self.node(b)
        where = f"link {na.name}-{nb.name}"
        mbps = link_mbps(rate_gbps, where)
        delay = whole_ns(delay_us, f"{where}: delay_us")
        if delay < 0:
            raise ValueError(f"{where}: delay must be >= 0, not {delay_us!r} us")
        pa, pb = self._port(na, port_a, where), self._port(nb, port_b, where)
        for p in (pa, pb):
            p.mbps, p.delay = mbps, delay
        pa.peer, pb.peer = pb, pa
        for p in (pa, pb):  # each end starts with the credits of the whole buffer at the other end
            p.credits = [p.peer.buffer_blocks if p.peer else 0] * self.vls
        return pa, pb

    def _port(self, node: IBNode, num: int | None, where: str) -> IBPort:
        top = node.nports if isinstance(node, IBSwitch) else 1
        if num is None:
            num = next((i for i in range(1, top + 1) if i not in node.ports), None)
            if num is None:
                raise ValueError(f"{where}: {node.name} has no free port (it has {top})")
        elif not 1 <= num <= top:
            raise ValueError(f"{where}: {node.name} has ports 1..{top}, not {num!r}")
        elif num in node.ports:
            raise ValueError(f"{where}: port {num} of {node.name} is already linked")
        port = IBPort(node, num, self.vls, self.vl_buffer // BLOCK_BYTES)
        node.ports[num] = port
        return port

    def port(self, a: str, b: str) -> IBPort:
        """The port of node ``a`` facing node ``b`` (the lowest-numbered, if several)."""
        na = self.node(a)
        for num in sorted(na.ports):
            p = na.ports[num]
            if p.peer is not None and p.peer.node.name == b:
                return p
        raise ValueError(f"{a} has no link to {b}")

    def min_hop_routes(self) -> None:
        """Fill every switch's LFT with min-hop routes to every LID (HCAs and switches): a stand-in
        for a subnet manager's tables (see the module docstring), which anything may overwrite."""
        lids: dict[int, IBNode] = {n.lid: n for n in self.nodes}
        for sw in self.switches:
            sw.lft = {sw.lid: 0}
            routed: dict[int, int] = dict.fromkeys(sw.ports, 0)
            for lid in sorted(lids):
                target = lids[lid]
                if target is sw:
                    continue
                dist = self._hops_to(target)
                best: list[int] = []
                hop = None
                for num in sorted(sw.ports):
                    peer = sw.ports[num].peer
                    if peer is None or peer.node not in dist:
                        continue
                    d = dist[peer.node]
                    if hop is None or d < hop:
                        hop, best = d, [num]
                    elif d == hop:
                        best.append(num)
                if best:
                    num = min(best, key=lambda p: (routed[p], p))
                    routed[num] += 1
                    sw.lft[lid] = num

    def _hops_to(self, target: IBNode) -> dict[IBNode, int]:
        """Hops from every node to ``target`` (breadth first; only through switches)."""
        dist: dict[IBNode, int] = {target: 0}
        todo = deque([target])
        while todo:
            n = todo.popleft()
            if n is not target and not isinstance(n, IBSwitch):
                continue
            for p in n.ports.values():
                if p.peer is not None and p.peer.node not in dist:
                    dist[p.peer.node] = dist[n] + 1
                    todo.append(p.peer.node)
        return dist

    def tap(self, a: str, b: str, dest: str | IO[bytes]) -> ErfTap:
        """Capture every packet sent on the link between ``a`` and ``b`` (both ways) to ``dest``
        (:class:`ErfTap`); the packets carry their bytes from then on."""
        pa = self.port(a, b)
        t = ErfTap(dest)
        pa.taps.append(t)
        if pa.peer is not None:
            pa.peer.taps.append(t)
        self._taps.append(t)
        self.frames = True
        return t

    def close(self) -> None:
        for t in self._taps:
            t.close()

    # ------------------------------------------------------------------ addresses
    def gid_of_lid(self, lid: int) -> int | None:
        """The GID of the HCA port with LID ``lid`` (None if no HCA has it)."""
        hca = self._by_lid.get(lid)
        return None if hca is None else hca.device.gids[0]

    def resolve_mac(self, gid: int) -> int | None:
        """On InfiniBand the link-layer address of a GID is its port's LID (what a path record gives)."""
        return next((h.lid for h in self.hcas if gid in h.device.gids), None)

    # ------------------------------------------------------------------ the Carrier protocol
    @property
    def mtu(self) -> int:
        return self._mtu

    @property
    def now_ns(self) -> int:
        now: int = self.loop.now_ns
        return now

    @property
    def now(self) -> int:
        return self.now_ns

    @property
    def scheduler(self) -> Scheduler:
        return self

    def record(self, event: TraceEvent) -> None:  # tracing is off: the ports keep the counters
        return None

    def send(self, src: Station, pkt: Pkt) -> None:
        hca = self.by_name[src.name]
        assert isinstance(hca, IBHca)
        port = hca.ports.get(1)
        if port is None or port.peer is None:
            return  # a port without a link: the packet goes nowhere
        dev = hca.device
        for p in pkt.expand():
            qp = dev.qps.get(p.srcqp)
            sl = getattr(qp, "sl", 0)
            vl = self.sl2vl[sl]
            gr = getattr(qp, "global_route", None)  # a connected QP whose AV has a GRH: LNH 3
            grh = None if gr is None else GRH(tclass=gr.traffic_class, flowlabel=gr.flow_label,
                                              hoplmt=gr.hop_limit, sgid=p.src_gid, dgid=p.dst_gid)
            frame = ib_frame(p, slid=hca.lid, dlid=p.dst_mac, sl=sl, vl=vl, grh=grh) if self.frames else None
            size = len(frame) if frame is not None else ib_size(p, grh is not None)
            ip = IBPacket(p.dst_mac, hca.lid, sl, vl, size, p, frame)
            port.queues[vl].append(ip)
            self._kick(port)

    # ------------------------------------------------------------------ ports
    def _kick(self, port: IBPort) -> None:
        now = self.loop.now_ns
        if port.busy_until > now:
            if not port.free_ev:
                port.free_ev = True
                self.loop.call_at(port.busy_until, self._free, port)
            return
        queues = port.queues
        n = len(queues)
        pick = -1
        waiting = False
        for i in range(n):
            vl = (port.rr + i) % n
            q = queues[vl]
            if q:
                if not self.credit_fc or port.credits[vl] >= q[0].blocks:
                    pick = vl
                    break
                waiting = True
        if pick < 0:
            if waiting and port.wait_since is None:
                port.wait_since = now
            return
        if port.wait_since is not None:
            port.counters["PortXmitWait"] += now - port.wait_since
            port.wait_since = None
        port.rr = (pick + 1) % n
        ip = queues[pick].popleft()
        if self.credit_fc:
            port.credits[pick] -= ip.blocks
        num = ip.size * 8000 + (port.tx_rem if port.busy_until == now else 0)
        ns = num // port.mbps
        port.tx_rem = num - ns * port.mbps
        end = now + ns
        port.busy_until = end
        c = port.counters
        c["PortXmitPkts"] += 1
        c["PortXmitData"] += ip.size // 4
        if port.taps and ip.frame is not None:
            for t in port.taps:
                t.write(now, ip.frame)
        ip.sent_ns = now
        loop = self.loop
        if ip.inport is not None:  # it leaves the switch: its input buffer frees the blocks at the end
            loop.call_at(end, self._release, ip)
        loop.call_at(end + port.delay, self._arrive, (port.peer, ip))
        if any(queues):
            port.free_ev = True
            loop.call_at(end, self._free, port)

    def _free(self, port: IBPort) -> None:
        port.free_ev = False
        self._kick(port)

    def _release(self, ip: IBPacket) -> None:
        """``ip`` has left the node whose input port ``ip.inport`` buffered it: credits go back upstream."""
        inp = ip.inport
        assert inp is not None
        ip.inport = None
        self._return_credits(inp, ip.vl, ip.blocks)

    def _return_credits(self, inp: IBPort, vl: int, n: int) -> None:
        inp.rx_blocks[vl] -= n
        if not self.credit_fc or inp.peer is None:
            return
        inp.counters["FlowControlSent"] += 1
        self.loop.call_at(self.loop.now_ns + inp.delay, self._credit, (inp.peer, vl, n))

    def _credit(self, arg: tuple[IBPort, int, int]) -> None:
        port, vl, n = arg
        port.credits[vl] += n
        port.counters["FlowControlRcvd"] += 1
        self._kick(port)

    def _arrive(self, arg: tuple[IBPort, IBPacket]) -> None:
        inp, ip = arg
        c = inp.counters
        vl = ip.vl
        if inp.rx_blocks[vl] + ip.blocks > inp.buffer_blocks:
            # only without credits (a sender with credits never overruns): the packet is lost
            c["PortRcvErrors"] += 1
            return
        inp.rx_blocks[vl] += ip.blocks
        if inp.rx_blocks[vl] > inp.rx_max[vl]:
            inp.rx_max[vl] = inp.rx_blocks[vl]
        c["PortRcvPkts"] += 1
        c["PortRcvData"] += ip.size // 4
        node = inp.node
        if isinstance(node, IBSwitch):
            out = node.lft.get(ip.dlid)
            port = node.ports.get(out) if out else None
            if port is None or port.peer is None:
                c["PortXmitDiscards"] += 1  # no route (or to port 0, the switch's own: no agent here)
                self._return_credits(inp, vl, ip.blocks)
                return
            ip.inport = inp
            port.queues[vl].append(ip)
            self._kick(port)
            return
        assert isinstance(node, IBHca)
        self._return_credits(inp, vl, ip.blocks)  # the HCA drains it at once
        if ip.dlid != node.lid:
            node.device.discard(f"DLID {ip.dlid:#x} is not this port's LID {node.lid:#x}")
            return
        self._deliver(node, ip)

    def _deliver(self, hca: IBHca, ip: IBPacket) -> None:
        dev = hca.device
        if ip.frame is not None:
            pkt = from_ib(ip.frame, self.gid_of_lid)
            if pkt is None:
                dev.discard("bad ICRC or VCRC, or a malformed packet")
                return
            pkt.id = ip.pkt.id
        else:
            pkt = ip.pkt
            src, dst = self.gid_of_lid(ip.slid), self.gid_of_lid(ip.dlid)
            if src is None or dst is None:
                dev.discard(f"SLID {ip.slid:#x} is no port of the subnet")
                return
            pkt.src_gid, pkt.dst_gid, pkt.src_mac, pkt.dst_mac = src, dst, ip.slid, ip.dlid
        hca.rcvd_pkts[pkt.destqp] = hca.rcvd_pkts.get(pkt.destqp, 0) + 1
        dev.receive(pkt)

    def _flush(self) -> None:
        devs = sorted({qp.dev.name: qp.dev for qp in self.held_acks}.items())
        for _, dev in devs:
            dev.flush()

    # ------------------------------------------------------------------ the Scheduler protocol
    def step(self) -> bool:
        return bool(self.loop.step())

    def progress(self, done: Callable[[], bool], max_steps: int = 200_000) -> bool:
        for _ in range(max_steps):
            if done() or not self.step():
                break
        return done()

    def run(self, until_ns: int | None = None, max_events: int = 10_000_000) -> int:
        return int(self.loop.run(until_ns, max_events))

    def run_us(self, us: float) -> None:
        """Let ``us`` microseconds of virtual time pass."""
        self.loop.advance_to(self.loop.now_ns + whole_ns(us, "run_us: us"))

    # ------------------------------------------------------------------ reading
    def counters(self, node: str, port: int) -> dict[str, int]:
        """The PortCounters of port ``port`` of ``node`` (PortXmitWait including a wait under way)."""
        p = self.node(node).ports.get(port)
        if p is None:
            raise ValueError(f"{node} has no port {port}")
        c = dict(p.counters)
        c["PortXmitWait"] = p.xmit_wait(self.loop.now_ns)
        return c

    def drops(self) -> int:
        """Packets lost anywhere in the subnet (buffer overruns and discards)."""
        return sum(p.counters["PortRcvErrors"] + p.counters["PortXmitDiscards"]
                   for n in self.nodes for p in n.ports.values())
