"""A switched RoCEv2 fabric: links, store-and-forward switches, ECN marking, PFC, DCQCN.

Hosts and switches are joined by full-duplex links, each direction with a rate (Gb/s = bits
per ns) and a propagation delay.  A switch receives a whole frame before forwarding it
(store-and-forward), puts it on one of eight per-priority egress queues of the output port,
all of them sharing the switch's buffer, and serves the queues in strict priority order
(7 first), skipping the priorities the next hop has paused.

* **ECN** (the DCQCN congestion point): when a data frame leaves an egress queue, it is marked
  CE with the RED probability of that queue's byte count: 0 up to Kmin, Pmax (q-Kmin)/(Kmax-Kmin)
  up to Kmax, 1 beyond (HPCC's ``SwitchMmu::ShouldSendCN``, which tests the egress queue at
  dequeue; reference A1).  Marking rewrites the ECN bits of the real IPv4 header (and its
  checksum) when frames are carried; the ICRC masks the TOS byte, so it stays valid.
* **PFC** (802.1Qbb, :mod:`rdmalab.wire.pfc`): bytes are counted per ingress port and
  priority.  When an ingress queue reaches the XOFF threshold the switch sends a PFC frame
  upstream pausing that priority (65535 quanta, refreshed while the queue stays above XON); when
  it drains to XON it sends the XON (time 0).  The threshold is HPCC's dynamic one (free shared
  buffer >> ``pfc_shift``; ``switch-mmu.cc``) unless ``pfc_xoff`` fixes it; each ingress queue
  has a headroom of 3 x rate x delay + 2 frames for what is in flight when the pause goes out.
  A frame that would overflow the buffer or the headroom is dropped and counted.
* **Hosts** run the DCQCN reaction point (:class:`rdmalab.verbs.engine.dcqcn.RateLimiter`) per
  flow, pacing each flow's packets at its current rate, and the notification point
  (:class:`rdmalab.verbs.engine.cnp.CnpPacer`): a CE-marked data frame produces a CNP back to the
  sender's QP, paced by ``min_time_between_cnps`` in the chosen scope.  The receiver ACKs each
  message (RDMA WRITE, ``msg_packets`` packets, AckReq on the last).

For speed, a packet is a short Python list, not a frame: bulk flows are simulated packet by
packet without building bytes.  When a :class:`Tap` is attached (or ``frames=True``), every
packet carries its real frame from the sender on (RoCEv2 RDMA WRITE with RETH on the first
packet, ACK with AETH, CNP; PFC frames), the switch marks the bytes, and the tap writes them to a
pcap that tshark and ``rdmalab decode`` read.  Not modelled: retransmission (a dropped packet is
counted, not resent; with PFC on nothing is dropped), the inter-frame gap and preamble, and the
link time of PFC frames themselves (64 bytes).

Everything runs on one ``heapq`` of ``(time_ns, seq, fn, arg)`` with a seeded
``random.Random``, so the same seed gives the same run, event for event.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from heapq import heappush
from typing import IO, Any

import dpkt

from rdmalab.verbs.engine.cnp import CE, CNP_PCP, ECT0, CnpPacer, cnp_frame
from rdmalab.verbs.engine.dcqcn import MLX5, DcqcnParams, RateLimiter
from rdmalab.wire.frame import encode_rocev2
from rdmalab.wire.ib import AETH, BTH, RETH
from rdmalab.wire.net import internet_checksum
from rdmalab.wire.opcodes import Op, Pos, Transport, find_opcode
from rdmalab.wire.pfc import MAX_QUANTA, encode_pfc_frame, pause_ns

# packet list fields
KIND, FLOW, SIZE, PRIO, ECN, PSN, INPORT, FRAME = range(8)  # an engine packet adds its Pkt at index 8
DATA, ACK, CNP, ENGINE = 0, 1, 2, 3
KIND_NAMES = ("data", "ack", "cnp", "engine")
HEADER_BYTES = 14 + 20 + 8 + 12 + 4  # Ethernet, IPv4, UDP, BTH, ICRC
ACK_BYTES = HEADER_BYTES + 4  # + AETH
CNP_BYTES = HEADER_BYTES + 16  # + 16 reserved bytes
PFC_BYTES = 64
RESUME_OFFSET = 3 * 1024  # HPCC switch-mmu.cc resume_offset

_OP_FIRST = find_opcode(Transport.RC, Op.RDMA_WRITE, Pos.FIRST)
_OP_MIDDLE = find_opcode(Transport.RC, Op.RDMA_WRITE, Pos.MIDDLE)
_OP_LAST = find_opcode(Transport.RC, Op.RDMA_WRITE, Pos.LAST)
_OP_ONLY = find_opcode(Transport.RC, Op.RDMA_WRITE, Pos.ONLY)
_OP_ACK = find_opcode(Transport.RC, Op.ACKNOWLEDGE)


def mark_ce(frame: bytes, ip_offset: int = 14) -> bytes:
    """``frame`` with its IPv4 ECN set to CE and the header checksum recomputed, as a switch does."""
    b = bytearray(frame)
    b[ip_offset + 1] |= CE
    ihl = (b[ip_offset] & 0x0F) * 4
    b[ip_offset + 10] = b[ip_offset + 11] = 0
    b[ip_offset + 10:ip_offset + 12] = internet_checksum(bytes(b[ip_offset:ip_offset + ihl])).to_bytes(2, "big")
    return bytes(b)


@dataclass
class SwitchConfig:
    """Switch parameters (the names ``--set`` accepts).  Sizes in KB/MB as the simulators give them."""

    kmin: float = 40.0  # KB (ns3-rdma mix/config.txt KMIN 40)
    kmax: float = 1000.0  # KB (KMAX 1000)
    pmax: float = 1.0  # (PMAX 1.0)
    ecn: int = 1
    pfc: int = 1
    buffer: float = 12.0  # MB of shared buffer (a Broadcom Trident II has 12 MB)
    pfc_shift: int = 3  # dynamic XOFF threshold = free shared buffer >> pfc_shift (HPCC)
    pfc_xoff: float = 0.0  # KB, a fixed XOFF threshold per ingress queue instead (0: dynamic)
    pfc_prios: int = 0b00001000  # priorities PFC protects (bit n = priority n): 3


@dataclass(eq=False, slots=True)
class Port:
    """One end of a link: the egress queues towards ``peer`` and the ingress counters from it."""

    node: Node
    index: int
    rate: float  # Gb/s = bits per ns
    delay: float  # ns
    peer: Port | None = None
    queues: list[deque[list[Any]]] = field(default_factory=lambda: [deque() for _ in range(8)])
    qbytes: list[int] = field(default_factory=lambda: [0] * 8)
    active: int = 0  # bit n set: queue n has frames
    busy_until: float = 0.0
    free_ev: bool = False
    wake_at: float = -1.0
    paused_until: list[float] = field(default_factory=lambda: [0.0] * 8)
    in_bytes: list[int] = field(default_factory=lambda: [0] * 8)
    xoff: list[bool] = field(default_factory=lambda: [False] * 8)
    xoff_gen: list[int] = field(default_factory=lambda: [0] * 8)
    xoff_level: list[int] = field(default_factory=lambda: [0] * 8)
    pause_start: float = 0.0
    headroom: int = 0
    taps: list[Tap] = field(default_factory=list)
    tx_bytes: int = 0
    tx_pkts: int = 0
    marks: int = 0
    drops: int = 0
    pause_tx: int = 0
    resume_tx: int = 0
    pause_rx: int = 0
    paused_ns: float = 0.0
    qmax: int = 0

    @property
    def name(self) -> str:
        return f"{self.node.name}->{self.peer.node.name if self.peer else '?'}"

    def __repr__(self) -> str:
        return f"Port({self.name})"


class Node:
    def __init__(self, fabric: SwitchedFabric, name: str, nid: int) -> None:
        self.fabric = fabric
        self.name = name
        self.id = nid
        self.ports: list[Port] = []
        self.is_switch = False


class Host(Node):
    """A RoCEv2 NIC: one port, DCQCN reaction point per flow, notification point for arrivals."""

    def __init__(self, fabric: SwitchedFabric, name: str, nid: int, ip: int, mac: int) -> None:
        super().__init__(fabric, name, nid)
        self.ip = ip
        self.mac = mac
        self.pacer = CnpPacer(0)
        self.cnp_sent = 0
        self.cnp_rcvd = 0
        self.ce_rcvd = 0
        self.next_qpn = 0x11
        self.engine_deliver: Callable[[list[Any]], None] | None = None


class Switch(Node):
    def __init__(self, fabric: SwitchedFabric, name: str, nid: int, cfg: SwitchConfig) -> None:
        super().__init__(fabric, name, nid)
        self.is_switch = True
        self.cfg = cfg
        self.buffer = int(cfg.buffer * 1e6)
        self.used = 0
        self.headroom_total = 0


class Flow:
    """One RC QP pair moving RDMA WRITEs from ``src`` to ``dst``."""

    def __init__(self, fid: int, src: Host, dst: Host, size: int | None, start: float, stop: float | None,
                 prio: int, payload: int, msg_packets: int, limiter: RateLimiter | None, name: str) -> None:
        self.id = fid
        self.name = name
        self.src = src
        self.dst = dst
        self.size = size
        self.start = start
        self.stop = stop
        self.prio = prio
        self.payload = payload
        self.msg_packets = msg_packets
        self.limiter = limiter
        self.qpn_src = src.next_qpn
        src.next_qpn += 1
        self.qpn_dst = dst.next_qpn
        dst.next_qpn += 1
        self.sent = 0
        self.rcvd = 0
        self.pkts_rcvd = 0
        self.psn = 0
        self.msn = 0
        self.next_t = start
        self.inq = False
        self.blocked = False
        self.done = False
        self.finish_ns: float | None = None
        self.fwd: dict[int, Port] = {}
        self.rev: dict[int, Port] = {}
        self.marked = 0
        self.cnps = 0
        self.drops = 0

    @property
    def rate(self) -> float:
        return self.limiter.rate if self.limiter is not None else self.src.ports[0].rate


class Tap:
    """Writes every frame crossing one link (both directions) to a pcap (ns timestamps, via dpkt)."""

    def __init__(self, dest: str | IO[bytes]) -> None:
        self._own = isinstance(dest, str)
        self._file: IO[bytes] = open(dest, "wb") if isinstance(dest, str) else dest  # noqa: SIM115
        self._writer = dpkt.pcap.Writer(self._file, linktype=dpkt.pcap.DLT_EN10MB, nano=True)
        self.count = 0

    def write(self, t_ns: float, frame: bytes) -> None:
        self._writer.writepkt(frame, ts=t_ns / 1e9)
        self.count += 1

    def close(self) -> None:
        self._file.flush()
        if self._own:
            self._file.close()


class SwitchedFabric:
    """Hosts, switches and links on one virtual clock (ns)."""

    def __init__(self, *, seed: int = 0, switch: SwitchConfig | None = None, dcqcn: DcqcnParams | None = MLX5,
                 cnp_scope: str = "qp", payload: int = 1000, msg_packets: int = 64, data_prio: int = 3,
                 cnp_prio: int = CNP_PCP, ack_prio: int | None = None, sample_ns: float = 10_000.0,
                 frames: bool = False) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.cfg = switch or SwitchConfig()
        self.dcqcn = dcqcn
        self.cnp_scope = cnp_scope
        self.payload = payload
        self.msg_packets = msg_packets
        self.data_prio = data_prio
        self.cnp_prio = cnp_prio
        self.ack_prio = data_prio if ack_prio is None else ack_prio
        self.sample_ns = sample_ns
        self.frames = frames
        self.now = 0.0
        self.events = 0
        self._q: list[tuple[float, int, Callable[[Any], None], Any]] = []
        self._seq = 0
        self.nodes: list[Node] = []
        self.by_name: dict[str, Node] = {}
        self.hosts: list[Host] = []
        self.switches: list[Switch] = []
        self.flows: list[Flow] = []
        self._adj: dict[int, list[Port]] = {}
        # time series, one entry per sample
        self.samples: list[float] = []
        self.rate_series: list[list[float]] = []
        self.rx_series: list[list[int]] = []
        self.queue_series: list[list[int]] = []
        self.mark_series: list[int] = []
        self.cnp_series: list[int] = []
        self.pause_series: list[int] = []
        self.watch: list[Port] = []
        self.marks = 0
        self.cnps = 0
        self.pauses = 0
        self.resumes = 0
        self.drops = 0
        self._rx_last: list[int] = []
        self._mark_last = self._cnp_last = self._pause_last = 0

    # ------------------------------------------------------------------ building
    def add_host(self, name: str) -> Host:
        n = len(self.hosts) + 1
        h = Host(self, name, len(self.nodes), (10 << 24) | n, 0x020000000000 | n)
        h.pacer = CnpPacer(0 if self.dcqcn is None else round(self.dcqcn.min_time_between_cnps * 1000), self.cnp_scope)
        self._add(h)
        self.hosts.append(h)
        return h

    def add_switch(self, name: str) -> Switch:
        s = Switch(self, name, len(self.nodes), self.cfg)
        self._add(s)
        self.switches.append(s)
        return s

    def _add(self, node: Node) -> None:
        if node.name in self.by_name:
            raise ValueError(f"a node named {node.name!r} already exists")
        self.nodes.append(node)
        self.by_name[node.name] = node
        self._adj[node.id] = []

    def link(self, a: Node | str, b: Node | str, rate_gbps: float = 40.0, delay_us: float = 1.0) -> tuple[Port, Port]:
        na = self.by_name[a] if isinstance(a, str) else a
        nb = self.by_name[b] if isinstance(b, str) else b
        if isinstance(na, Host) and na.ports or isinstance(nb, Host) and nb.ports:
            raise ValueError("a host has exactly one port")
        if rate_gbps <= 0 or delay_us < 0:
            raise ValueError(f"link {na.name}-{nb.name}: rate must be > 0 and delay >= 0")
        pa = Port(na, len(na.ports), rate_gbps, delay_us * 1000)
        pb = Port(nb, len(nb.ports), rate_gbps, delay_us * 1000)
        pa.peer, pb.peer = pb, pa
        frame = self.payload + HEADER_BYTES + 16
        for p in (pa, pb):
            p.headroom = int(3 * p.rate * p.delay / 8) + 2 * frame + PFC_BYTES
            if isinstance(p.node, Switch):
                p.node.headroom_total += p.headroom * bin(self.cfg.pfc_prios).count("1")
        na.ports.append(pa)
        nb.ports.append(pb)
        self._adj[na.id].append(pa)
        self._adj[nb.id].append(pb)
        return pa, pb

    def port(self, a: str, b: str) -> Port:
        """The port of node ``a`` facing node ``b``."""
        for p in self.by_name[a].ports:
            if p.peer is not None and p.peer.node.name == b:
                return p
        raise KeyError(f"no link {a}-{b}")

    def _path(self, src: Node, dst: Node, via: Iterable[str] | None, key: int = 0) -> list[Port]:
        """Egress ports along a shortest path (or through the named nodes, in order).

        Where several next hops are equally short (ECMP, e.g. the spines of a leaf-spine), the
        flow's ``key`` picks one, the same one for every packet of the flow (no reordering).
        """
        if via is not None:
            names = [src.name, *via, dst.name]
            return [self.port(a, b) for a, b in zip(names, names[1:], strict=False)]
        dist = {dst.id: 0}
        frontier = [dst]
        while frontier:
            nxt = []
            for n in frontier:
                for p in self._adj[n.id]:
                    assert p.peer is not None
                    m = p.peer.node
                    if m.id not in dist and (isinstance(m, Switch) or m is src):
                        dist[m.id] = dist[n.id] + 1
                        nxt.append(m)
            frontier = nxt
        if src.id not in dist:
            raise ValueError(f"no path from {src.name} to {dst.name}")
        path: list[Port] = []
        cur = src
        while cur is not dst:
            cands = [p for p in self._adj[cur.id]
                     if p.peer is not None and dist.get(p.peer.node.id, -1) == dist[cur.id] - 1]
            hop = cands[(key * 2654435761 + cur.id * 40503) % len(cands) if len(cands) > 1 else 0]
            path.append(hop)
            assert hop.peer is not None
            cur = hop.peer.node
        return path

    def add_flow(self, src: Host | str, dst: Host | str, *, size: int | None = None, start_us: float = 0.0,
                 stop_us: float | None = None, via: Iterable[str] | None = None, name: str | None = None,
                 dcqcn: bool = True) -> Flow:
        """A flow of RDMA WRITEs (``size`` bytes, None = until the run ends) starting at ``start_us``."""
        s = self.by_name[src] if isinstance(src, str) else src
        d = self.by_name[dst] if isinstance(dst, str) else dst
        if not isinstance(s, Host) or not isinstance(d, Host):
            raise ValueError("flows run between hosts")
        if not s.ports or not d.ports:
            raise ValueError(f"{s.name} and {d.name} must be linked to the fabric first")
        limiter = None
        if dcqcn and self.dcqcn is not None:
            limiter = RateLimiter(self.dcqcn, s.ports[0].rate, self._sched_delay)
        fid = len(self.flows)
        f = Flow(fid, s, d, size, start_us * 1000, None if stop_us is None else stop_us * 1000, self.data_prio,
                 self.payload, self.msg_packets, limiter, name or f"f{fid}:{s.name}->{d.name}")
        fwd = self._path(s, d, via, fid)
        rev = self._path(d, s, None if via is None else list(reversed(list(via))), fid)
        f.fwd = {p.node.id: p for p in fwd}
        f.rev = {p.node.id: p for p in rev}
        self.flows.append(f)
        self._rx_last.append(0)
        self.schedule(f.start, self._flow_send, f)
        return f

    def tap(self, a: str, b: str, dest: str | IO[bytes]) -> Tap:
        """Capture the link between nodes ``a`` and ``b`` (both directions) to ``dest``."""
        t = Tap(dest)
        p = self.port(a, b)
        p.taps.append(t)
        assert p.peer is not None
        p.peer.taps.append(t)
        self.frames = True
        return t

    # ------------------------------------------------------------------ the clock
    def schedule(self, at: float, fn: Callable[[Any], None], arg: Any = None) -> None:
        self._seq += 1
        heappush(self._q, (at, self._seq, fn, arg))

    def _sched_delay(self, delay: float, fn: Callable[[Any], None], arg: Any = None) -> None:
        self._seq += 1
        heappush(self._q, (self.now + delay, self._seq, fn, arg))

    def run(self, until_us: float, progress: Callable[[float], None] | None = None) -> None:
        """Run the events up to ``until_us`` (virtual time)."""
        until = until_us * 1000
        if not self.samples:
            self.watch = self.watch or [p for s in self.switches for p in s.ports]
            self.schedule(0.0, self._sample, None)
        q = self._q
        pop = heapq.heappop
        n = self.events
        step = 1 << 15
        while q:
            ev = q[0]
            if ev[0] > until:
                break
            pop(q)
            self.now = ev[0]
            ev[2](ev[3])
            n += 1
            if progress is not None and not n % step:
                progress(self.now / until)
        self.events = n
        self.now = max(self.now, until)
        if progress is not None:
            progress(1.0)

    def _sample(self, _: Any) -> None:
        self.samples.append(self.now)
        self.rate_series.append([f.rate if not f.done and f.next_t >= f.start and self.now >= f.start else 0.0
                                 for f in self.flows])
        rx = []
        for i, f in enumerate(self.flows):
            rx.append(f.rcvd - self._rx_last[i])
            self._rx_last[i] = f.rcvd
        self.rx_series.append(rx)
        self.queue_series.append([sum(p.qbytes) for p in self.watch])
        self.mark_series.append(self.marks - self._mark_last)
        self.cnp_series.append(self.cnps - self._cnp_last)
        self.pause_series.append(self.pauses - self._pause_last)
        self._mark_last, self._cnp_last, self._pause_last = self.marks, self.cnps, self.pauses
        self.schedule(self.now + self.sample_ns, self._sample, None)

    # ------------------------------------------------------------------ senders
    def _flow_send(self, f: Flow) -> None:
        if f.done:
            return
        if f.stop is not None and self.now >= f.stop:
            f.done = True
            return
        if f.inq:
            f.blocked = True
            return
        payload = f.payload
        if f.size is not None:
            payload = min(payload, f.size - f.sent)
        size = payload + HEADER_BYTES
        idx = f.psn % f.msg_packets
        frame = None
        last = idx == f.msg_packets - 1 or (f.size is not None and f.sent + payload >= f.size)
        if self.frames:
            frame = self._data_frame(f, idx, last, payload)
        if idx == 0:
            size += 16  # RETH
        pkt = [DATA, f, size, f.prio, ECT0, f.psn, None, frame]
        f.psn += 1
        f.sent += payload
        f.inq = True
        self._enqueue(f.src.ports[0], pkt)
        lim = f.limiter
        rate = f.src.ports[0].rate
        if lim is not None:
            lim.on_sent(size)
            rate = lim.rate
        if f.size is not None and f.sent >= f.size:
            f.done = True
            return
        f.next_t = self.now + size * 8 / rate
        self.schedule(f.next_t, self._flow_send, f)

    def _data_frame(self, f: Flow, idx: int, last: bool, payload: int) -> bytes:
        headers: list[Any] = []
        if idx == 0:
            op = _OP_ONLY if last else _OP_FIRST
            headers = [RETH(va=0x10000 + f.sent, r_key=0x1234, dma_length=f.payload * f.msg_packets)]
        else:
            op = _OP_LAST if last else _OP_MIDDLE
        bth = BTH(opcode=op, destqp=f.qpn_dst, psn=f.psn & 0xFFFFFF, ackreq=int(last))
        return encode_rocev2(bth, headers, bytes(payload), src_ip=f.src.ip, dst_ip=f.dst.ip, src_mac=f.src.mac,
                             dst_mac=f.dst.mac, src_port=0xC000 | f.qpn_src, dscp=26, ecn=ECT0)

    # ------------------------------------------------------------------ ports
    def _enqueue(self, port: Port, pkt: list[Any]) -> None:
        prio = pkt[PRIO]
        port.queues[prio].append(pkt)
        port.active |= 1 << prio
        qb = port.qbytes[prio] + pkt[SIZE]
        port.qbytes[prio] = qb
        if qb > port.qmax:
            port.qmax = qb
        if not port.free_ev:
            self._kick(port)

    def _kick(self, port: Port) -> None:
        """Start the next frame on ``port`` if it is free (strict priority, skipping paused ones)."""
        now = self.now
        if port.busy_until > now:
            if not port.free_ev:
                port.free_ev = True
                self._seq += 1
                heappush(self._q, (port.busy_until, self._seq, self._free, port))
            return
        active = port.active
        if not active:
            return
        paused = port.paused_until
        pick = -1
        if not active & (active - 1):  # one priority has frames: the usual case
            prio = active.bit_length() - 1
            if paused[prio] <= now:
                pick = prio
        if pick < 0:
            wake = 0.0
            for prio in range(active.bit_length() - 1, -1, -1):
                if active >> prio & 1:
                    pu = paused[prio]
                    if pu > now:
                        if wake == 0.0 or pu < wake:
                            wake = pu
                        continue
                    pick = prio
                    break
            if pick < 0:
                if wake and port.wake_at != wake:
                    port.wake_at = wake
                    self.schedule(wake, self._kick, port)
                return
        q = port.queues[pick]
        pkt = q.popleft()
        if not q:
            port.active = active & ~(1 << pick)
        size = pkt[SIZE]
        port.qbytes[pick] -= size
        if port.node.is_switch:
            self._dequeued(port.node, pkt, port, pick)  # type: ignore[arg-type]
        elif pkt[KIND] == DATA:
            f = pkt[FLOW]
            f.inq = False
            if f.blocked:
                f.blocked = False
                self.schedule(max(now, f.next_t), self._flow_send, f)
        end = now + size * 8 / port.rate
        port.busy_until = end
        port.tx_bytes += size
        port.tx_pkts += 1
        if port.taps and pkt[FRAME] is not None:
            for t in port.taps:
                t.write(now, pkt[FRAME])
        pkt[INPORT] = port.peer  # where it arrives (its ingress port there)
        self._seq += 2
        heappush(self._q, (end + port.delay, self._seq - 1, self._arrive, pkt))
        if port.active:
            port.free_ev = True
            heappush(self._q, (end, self._seq, self._free, port))
        else:
            port.free_ev = False

    def _free(self, port: Port) -> None:
        port.free_ev = False
        self._kick(port)

    # ------------------------------------------------------------------ switches
    def _threshold(self, sw: Switch) -> int:
        cfg = sw.cfg
        if cfg.pfc_xoff:
            return int(cfg.pfc_xoff * 1024)
        return max(0, sw.buffer - sw.headroom_total - sw.used) >> cfg.pfc_shift

    def _dequeued(self, sw: Switch, pkt: list[Any], port: Port, prio: int) -> None:
        size = pkt[SIZE]
        sw.used -= size
        inport: Port = pkt[INPORT]
        inport.in_bytes[prio] -= size
        cfg = sw.cfg
        if cfg.ecn and pkt[ECN] == ECT0 and pkt[KIND] != ACK:  # data (bulk flows or the engine's requests)
            q = port.qbytes[prio]
            kmin = cfg.kmin * 1024
            if q > kmin:
                kmax = cfg.kmax * 1024
                if q >= kmax or self.rng.random() < cfg.pmax * (q - kmin) / (kmax - kmin):
                    pkt[ECN] = CE
                    port.marks += 1
                    self.marks += 1
                    fr = pkt[FRAME]
                    if fr is not None:
                        pkt[FRAME] = mark_ce(fr)
        if inport.xoff[prio] and inport.in_bytes[prio] + RESUME_OFFSET <= self._threshold(sw):
            inport.xoff[prio] = False
            inport.xoff_gen[prio] += 1
            self._send_pfc(inport, prio, 0)

    def _arrive(self, pkt: list[Any]) -> None:
        port: Port = pkt[INPORT]
        node = port.node
        if not node.is_switch:
            self._host_receive(node, pkt)  # type: ignore[arg-type]
            return
        sw: Switch = node  # type: ignore[assignment]
        f: Flow = pkt[FLOW]
        out = f.fwd[sw.id] if pkt[KIND] == DATA else f.rev[sw.id]
        size = pkt[SIZE]
        prio = pkt[PRIO]
        cfg = sw.cfg
        lossless = cfg.pfc and cfg.pfc_prios >> prio & 1
        if sw.used + size > sw.buffer or (lossless and port.xoff[prio]
                                          and port.in_bytes[prio] + size > port.xoff_level[prio] + port.headroom):
            port.drops += 1
            self.drops += 1
            f.drops += 1
            return
        sw.used += size
        port.in_bytes[prio] += size
        if lossless and not port.xoff[prio] and port.in_bytes[prio] >= self._threshold(sw):
            port.xoff[prio] = True
            port.xoff_level[prio] = port.in_bytes[prio]
            port.xoff_gen[prio] += 1
            self._send_pfc(port, prio, MAX_QUANTA)
        self._enqueue(out, pkt)

    def _send_pfc(self, port: Port, prio: int, quanta: int) -> None:
        """Send a PFC frame out of ``port`` (to the upstream peer) for ``prio``."""
        peer = port.peer
        assert peer is not None
        at = max(self.now, port.busy_until) + PFC_BYTES * 8 / port.rate
        if quanta:
            port.pause_tx += 1
            self.pauses += 1
            # refresh before the pause runs out, while the queue stays above XON
            self.schedule(self.now + pause_ns(quanta, port.rate) / 2, self._pfc_refresh, (port, prio, port.xoff_gen[prio]))
        else:
            port.resume_tx += 1
            self.resumes += 1
        if port.taps:
            fr = encode_pfc_frame({prio: quanta}, src_mac=0x02FF00000000 | (port.node.id << 8) | port.index)
            for t in port.taps:
                t.write(at - PFC_BYTES * 8 / port.rate, fr)
        self.schedule(at + port.delay, self._pfc_arrive, (peer, prio, quanta))

    def _pfc_refresh(self, arg: tuple[Port, int, int]) -> None:
        port, prio, gen = arg
        if port.xoff[prio] and port.xoff_gen[prio] == gen:
            port.xoff_gen[prio] += 1
            self._send_pfc(port, prio, MAX_QUANTA)

    def _pfc_arrive(self, arg: tuple[Port, int, int]) -> None:
        port, prio, quanta = arg
        now = self.now
        paused = any(pu > now for pu in port.paused_until)
        if quanta:
            port.pause_rx += 1
            if not paused:
                port.paused_ns += self._expired_pause(port)
                port.pause_start = now
            port.paused_until[prio] = now + pause_ns(quanta, port.rate)
        else:
            port.paused_until[prio] = now
            if paused and not any(pu > now for pu in port.paused_until):
                port.paused_ns += now - port.pause_start
                port.pause_start = now
            if not port.free_ev:
                self._kick(port)

    def _expired_pause(self, port: Port) -> float:
        """A pause that ran out without an XON (no refresh came): its length, counted once."""
        end = max(port.paused_until)
        if end > port.pause_start:
            length = end - port.pause_start
            port.pause_start = end
            return length
        return 0.0

    # ------------------------------------------------------------------ receivers
    def _host_receive(self, host: Host, pkt: list[Any]) -> None:
        kind = pkt[KIND]
        if kind == ENGINE:
            assert host.engine_deliver is not None
            host.engine_deliver(pkt)  # a soft device's packet (rdmalab.fabric.switched_carrier)
            return
        f: Flow = pkt[FLOW]
        if kind == DATA:
            payload = pkt[SIZE] - HEADER_BYTES - (16 if pkt[PSN] % f.msg_packets == 0 else 0)
            f.rcvd += payload
            f.pkts_rcvd += 1
            if f.size is not None and f.rcvd >= f.size and f.finish_ns is None:
                f.finish_ns = self.now
            if pkt[ECN] == CE:
                f.marked += 1
                host.ce_rcvd += 1
                if f.limiter is not None and host.pacer.on_ce(int(self.now), f.src.ip, host.ip, f.qpn_src):
                    host.cnp_sent += 1
                    self.cnps += 1
                    fr = None
                    if self.frames:
                        fr = cnp_frame(f.qpn_src, src_ip=host.ip, dst_ip=f.src.ip, src_mac=host.mac,
                                       dst_mac=f.src.mac, src_port=0xC000 | f.qpn_dst)
                    self._enqueue(host.ports[0], [CNP, f, CNP_BYTES, self.cnp_prio, 0, 0, None, fr])
            if (pkt[PSN] % f.msg_packets == f.msg_packets - 1) or (f.size is not None and f.rcvd >= f.size):
                f.msn += 1
                fr = None
                if self.frames:
                    fr = encode_rocev2(BTH(opcode=_OP_ACK, destqp=f.qpn_src, psn=pkt[PSN] & 0xFFFFFF),
                                       [AETH.ack(f.msn & 0xFFFFFF, 31)], src_ip=host.ip, dst_ip=f.src.ip,
                                       src_mac=host.mac, dst_mac=f.src.mac, src_port=0xC000 | f.qpn_dst, dscp=26,
                                       ecn=ECT0)
                self._enqueue(host.ports[0], [ACK, f, ACK_BYTES, self.ack_prio, ECT0, pkt[PSN], None, fr])
        elif kind == CNP:
            f.cnps += 1
            host.cnp_rcvd += 1
            if f.limiter is not None:
                f.limiter.on_cnp(int(self.now))

    # ------------------------------------------------------------------ results
    def paused_time_ns(self, port: Port) -> float:
        """How long ``port`` has been paused (any priority) up to now."""
        end = max(port.paused_until)
        extra = 0.0
        if end > port.pause_start:
            extra = min(end, self.now) - port.pause_start
        return port.paused_ns + max(0.0, extra)
