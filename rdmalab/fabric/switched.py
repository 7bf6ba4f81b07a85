"""A switched RoCEv2 fabric: links, store-and-forward switches, ECN marking, PFC, DCQCN, and the engine.

The fabric is in three rooms: the topology (:mod:`rdmalab.fabric.switched_topology`: the switch
parameters, ports, hosts, switches, :func:`mark_ce` and the pcap tap), the flows
(:mod:`rdmalab.fabric.switched_flows`: RC QP pairs of the engine) and, here,
:class:`SwitchedFabric`, which builds them and moves the frames; its carrier for the hosts' soft
devices is :mod:`rdmalab.fabric.switched_carrier`.  This module re-exports the names of the
other rooms, so ``from rdmalab.fabric.switched import Flow, Host, ...`` keeps working.

Hosts and switches are joined by full-duplex links, each direction with a rate (Gb/s = bits
per ns, a whole number of Mbit/s) and a propagation delay (:meth:`SwitchedFabric.link`).  A
switch receives a whole frame before forwarding it (store-and-forward), puts it on one of eight
per-priority egress queues of the output port, all of them sharing the switch's buffer, and
serves the queues in strict priority order (7 first), skipping the priorities the next hop has
paused.

* **ECN** (the DCQCN congestion point): when an ECN-capable frame leaves an egress queue, it is
  marked CE with the RED probability of that queue's byte count: 0 up to Kmin, Pmax
  (q-Kmin)/(Kmax-Kmin) up to Kmax, 1 beyond (HPCC's ``SwitchMmu::ShouldSendCN``, which tests the
  egress queue at dequeue; reference A1).  Marking rewrites the ECN bits of the real IPv4 header
  (and its checksum, :func:`mark_ce`) when frames are carried; the ICRC masks the TOS byte, so it
  stays valid.
* **PFC** (802.1Qbb, :mod:`rdmalab.wire.pfc`): bytes are counted per ingress port and
  priority.  When an ingress queue reaches the XOFF threshold the switch sends a PFC frame
  upstream pausing that priority (65535 quanta, refreshed while the queue stays above XON); when
  it drains to XON it sends the XON (time 0).  The threshold is HPCC's dynamic one (free shared
  buffer >> ``pfc_shift``; ``switch-mmu.cc``) unless ``pfc_xoff`` fixes it; each ingress queue
  has a headroom of 3 x rate x delay + 2 frames for what is in flight when the pause goes out.
  A frame that would overflow the buffer or the headroom is dropped and counted; with ``pfc=0``
  the buffer is the only limit, so congestion drops packets.
* **Hosts** are soft RoCEv2 devices of the verbs engine (:class:`rdmalab.verbs.engine.node.SoftDevice`,
  one per host, ``host.device``); the fabric is their carrier (:mod:`rdmalab.fabric.switched_carrier`).
  A **flow** (:meth:`SwitchedFabric.add_flow`, :class:`~rdmalab.fabric.switched_flows.Flow`) is an
  RC QP pair of the engine whose sender posts RDMA WRITEs of ``msg_packets`` packets; the
  engine's requester, responder and completer do the PSNs, ACKs, NAKs and go-back-N, so a packet
  a switch drops is resent and the resend is on the wire.  With DCQCN each sending QP has the
  engine's reaction point (:func:`rdmalab.verbs.engine.dcqcn.attach`, pacing its packets at the
  current rate) and every host the notification point (:func:`rdmalab.verbs.engine.cnp.enable_np`,
  CNPs paced by ``min_time_between_cnps`` in the chosen scope).

A packet crosses the fabric as a short Python list around the engine's own
:class:`~rdmalab.verbs.engine.packet.Pkt` (no bytes are built).  When a :class:`PcapTap` is attached
(or ``frames=True``), every packet carries its real frame from the sender on (the engine's
WRITE First/Middle/Last with RETH, ACKs and NAKs with AETH, CNPs; and PFC frames), the switch
marks the bytes, the receiving device decodes the frame and checks its ICRC, and the tap writes
the frames to a pcap that tshark and ``rdmalab decode`` read.  Not modelled: the inter-frame gap
and preamble, and the link time of PFC frames themselves (64 bytes).

Everything runs on one event loop (``fabric.loop``, a :class:`~rdmalab.fabric.loop.VirtualLoop`:
one heap of ``(time_ns, seq, fn, arg)``) with a seeded ``random.Random``, so the same seed gives
the same run, event for event.  Its times are integer nanoseconds, as on every carrier.  A frame's
serialisation time is rarely a whole number of them (a 1082-byte frame at 40 Gb/s takes 216.4
ns), so each port divides exactly: a frame of n bytes takes ``(n * 8000 + r) // mbps`` ns, where
``mbps`` is the link's rate in Mbit/s and ``r`` the remainder the frame before it left
(``Port.tx_rem``, kept while the port sends back to back, 0 after it idled).  The clock is whole,
a frame leaves at most a nanosecond before its exact end, and a busy port's long-run rate is
exactly its own: a 40 Gb/s port sends 40 Gb/s, not 216 ns worth of frames per 216.4.  For the
same reason a link's rate must be a whole number of Mbit/s (40, 25, 100, 2.5, 0.1 Gb/s ...; 1.0001
is refused with an error); the other times the fabric is given (link delays, ``add_flow``'s
start and stop, ``run``'s end, ``sample_ns``) are rounded to the nearest ns, and the length of a
PFC frame (64 bytes) and of a pause (512 bit times a quantum) rounded up to whole ns.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable
from typing import IO, Any

from rdmalab.fabric.loop import VirtualLoop
from rdmalab.fabric.switched_carrier import (
    CE,
    ECN,
    ECT0,
    FLOW,
    FRAME,
    INPORT,
    KIND,
    PKT,
    PRIO,
    ROUTE,
    SIZE,
    SwitchedCarrier,
)
from rdmalab.fabric.switched_flows import Flow
from rdmalab.fabric.switched_topology import Host, Node, PcapTap, Port, Switch, SwitchConfig, mark_ce
from rdmalab.verbs.engine.cnp import CNP_PCP, enable_np
from rdmalab.verbs.engine.dcqcn import MLX5, DcqcnParams
from rdmalab.verbs.engine.node import SoftDevice
from rdmalab.verbs.engine.packet import ROCE_OVERHEAD, SEGMENT
from rdmalab.wire.ib import ACK_OPCODE, CNP_OPCODE, REQUEST_OPCODES, check_mtu, psn_add, psn_diff
from rdmalab.wire.pfc import MAX_QUANTA, QUANTUM_BITS, encode_pfc_frame

__all__ = ["CE", "ECT0", "Flow", "Host", "Port", "Switch", "SwitchConfig", "SwitchedFabric", "PcapTap", "mark_ce"]

HEADER_BYTES = ROCE_OVERHEAD  # Ethernet, IPv4, UDP, BTH, ICRC: 58 bytes around every payload
PFC_BYTES = 64
RESUME_OFFSET = 3 * 1024  # HPCC switch-mmu.cc resume_offset


def link_mbps(rate_gbps: float, where: str) -> int:
    """A link's rate in whole Mbit/s; ``where`` names the link in the error for any other rate."""
    if isinstance(rate_gbps, bool) or not isinstance(rate_gbps, int | float) or not math.isfinite(rate_gbps):
        raise ValueError(f"{where}: the rate is a number of Gb/s, not {rate_gbps!r}")
    mbps = round(rate_gbps * 1000)
    if mbps < 1 or abs(rate_gbps * 1000 - mbps) > 1e-6:
        raise ValueError(f"{where}: rate {rate_gbps!r} Gb/s is not a whole number of Mbit/s (the fabric's clock "
                         "is in whole ns and its ports send at exact rates: give e.g. 40, 25, 2.5 or 0.001)")
    return mbps


def whole_ns(us: float, what: str) -> int:
    """``us`` microseconds to the nearest nanosecond (``what`` names the value in the error for a non-number)."""
    if isinstance(us, bool) or not isinstance(us, int | float) or not math.isfinite(us):
        raise ValueError(f"{what} is a finite number of microseconds, not {us!r}")
    return round(us * 1000)


def _ceil_ns(bits: int, mbps: int) -> int:
    """The time ``bits`` take at ``mbps`` Mbit/s, rounded up to whole ns."""
    return -(-bits * 1000 // mbps)


class SwitchedFabric:
    """Hosts, switches and links on one virtual clock (ns); the hosts are soft devices of the engine.

    ``payload`` is the path MTU of the flows' QPs (an IB MTU: 256 .. 4096 bytes), ``msg_packets``
    the packets per RDMA WRITE, ``qp_timeout`` the flows' local ACK timeout exponent
    (4.096 us x 2^qp_timeout, IBA 9.7.6.1.3) and ``depth`` the WRITEs each flow keeps posted.
    ``devices`` maps host names to their soft devices, so ``Context(name=..., fabric=fab)`` opens
    one; ``carrier`` is the engine's view of the fabric (:class:`SwitchedCarrier`); ``loop`` the event
    loop everything runs on (``now`` is its clock, integer ns; ``events`` the events it ran).
    ``sample_ns`` is the period of the time series (rounded to whole ns, at least 1).
    """

    def __init__(self, *, seed: int = 0, switch: SwitchConfig | None = None, dcqcn: DcqcnParams | None = MLX5,
                 cnp_scope: str = "qp", payload: int = 1024, msg_packets: int = 64, data_prio: int = 3,
                 cnp_prio: int = CNP_PCP, ack_prio: int | None = None, sample_ns: float = 10_000.0,
                 frames: bool = False, qp_timeout: int = 10, depth: int = 3) -> None:
        check_mtu(payload, "payload (the QPs' path MTU)")
        if msg_packets < 1:
            raise ValueError(f"msg_packets must be at least 1, not {msg_packets}")
        if not 0 <= qp_timeout <= 31:
            raise ValueError(f"qp_timeout is a 5-bit exponent (0..31), not {qp_timeout}")
        if depth < 1:
            raise ValueError(f"depth (WRITEs posted per flow) must be at least 1, not {depth}")
        if isinstance(sample_ns, bool) or not isinstance(sample_ns, int | float) or not sample_ns >= 0.5 \
                or not math.isfinite(sample_ns):
            raise ValueError(f"sample_ns (the period of the time series) must be at least 1 ns, not {sample_ns!r}")
        sample = round(sample_ns)
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
        self.sample_ns: int = sample
        self.frames = frames
        self.qp_timeout = qp_timeout
        self.depth = depth
        self.loop = VirtualLoop(0)
        self._push, self._tickets = self.loop.push, self.loop.tickets  # the loop's per-packet fast path
        self.nodes: list[Node] = []
        self.by_name: dict[str, Node] = {}
        self.hosts: list[Host] = []
        self.switches: list[Switch] = []
        self.flows: list[Flow] = []
        self.devices: dict[str, SoftDevice] = {}
        self._by_gid: dict[int, Host] = {}
        self._qp_flow: dict[tuple[int, int], Flow] = {}  # (host id, QPN) -> the flow that QP belongs to
        self._touched: list[Host] = []
        self.loop.on_instant_end(self._touched, self._flush)  # the hosts that received send their coalesced ACKs
        self._adj: dict[int, list[Port]] = {}
        self.carrier = SwitchedCarrier(self)
        # time series, one entry per sample
        self.samples: list[int] = []  # the time of each sample (ns)
        self.rate_series: list[list[float]] = []
        self.rx_series: list[list[int]] = []
        self.queue_series: list[list[int]] = []
        self.mark_series: list[int] = []
        self.cnp_series: list[int] = []
        self.pause_series: list[int] = []
        self.drop_series: list[int] = []
        self.retx_series: list[int] = []
        self.watch: list[Port] = []
        self.marks = 0
        self.cnps = 0
        self.pauses = 0
        self.resumes = 0
        self.drops = 0
        self.drop_bytes = 0
        self.retx_bytes = 0
        self._rx_last: list[int] = []
        self._mark_last = self._cnp_last = self._pause_last = self._drop_last = self._retx_last = 0

    # ------------------------------------------------------------------ building
    def add_host(self, name: str) -> Host:
        n = len(self.hosts) + 1
        if name in self.by_name:
            raise ValueError(f"a node named {name!r} already exists")
        h = Host(self, name, len(self.nodes), (10 << 24) | n, 0x020000000000 | n)
        if self.dcqcn is not None:  # the notification point: CE-marked requests are answered with CNPs
            enable_np(h.device, self.dcqcn.min_time_between_cnps, self.cnp_scope)
        self._add(h)
        self.hosts.append(h)
        self.devices[name] = h.device
        for gid in h.device.gids:
            self._by_gid[gid] = h
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
        """A full-duplex link of ``rate_gbps`` each way (a whole number of Mbit/s: 40, 25, 2.5 ...; any
        other rate is refused with a ValueError) and ``delay_us`` of propagation (rounded to whole ns)."""
        na = self.by_name[a] if isinstance(a, str) else a
        nb = self.by_name[b] if isinstance(b, str) else b
        if isinstance(na, Host) and na.ports or isinstance(nb, Host) and nb.ports:
            raise ValueError("a host has exactly one port")
        where = f"link {na.name}-{nb.name}"
        if not isinstance(rate_gbps, int | float) or rate_gbps <= 0:
            raise ValueError(f"{where}: rate must be > 0, not {rate_gbps!r}")
        mbps = link_mbps(rate_gbps, where)
        delay = whole_ns(delay_us, f"{where}: delay_us")
        if delay < 0:
            raise ValueError(f"{where}: delay must be >= 0, not {delay_us!r} us")
        pa = Port(na, len(na.ports), float(rate_gbps), delay, mbps)
        pb = Port(nb, len(nb.ports), float(rate_gbps), delay, mbps)
        pa.peer, pb.peer = pb, pa
        frame = self.payload + HEADER_BYTES + 16
        for p in (pa, pb):
            p.headroom = 3 * mbps * delay // 8000 + 2 * frame + PFC_BYTES
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
        """An RC QP pair from ``src`` to ``dst`` writing ``size`` bytes (None: until the run ends, or
        ``stop_us``), starting at ``start_us`` (both rounded to whole ns); ``via`` names the nodes the data
        goes through."""
        s = self.by_name[src] if isinstance(src, str) else src
        d = self.by_name[dst] if isinstance(dst, str) else dst
        if not isinstance(s, Host) or not isinstance(d, Host):
            raise ValueError("flows run between hosts")
        if s is d:
            raise ValueError(f"a flow needs two hosts, not {s.name} twice")
        if not s.ports or not d.ports:
            raise ValueError(f"{s.name} and {d.name} must be linked to the fabric first")
        if size is not None and size <= 0:
            raise ValueError(f"size must be positive, not {size}")
        fid = len(self.flows)
        via = None if via is None else list(via)
        fwd = self._path(s, d, via, fid)
        rev = self._path(d, s, None if via is None else list(reversed(via)), fid)
        start = whole_ns(start_us, "start_us")
        stop = None if stop_us is None else whole_ns(stop_us, "stop_us")
        if start < self.now:
            raise ValueError(f"start_us={start_us} is before the fabric's clock ({self.now} ns)")
        f = Flow(self, fid, s, d, size, start, stop,
                 self.payload * self.msg_packets, self.dcqcn if dcqcn else None, name or f"f{fid}:{s.name}->{d.name}",
                 self.depth, self.qp_timeout)
        f.fwd = {p.node.id: p for p in fwd}
        f.rev = {p.node.id: p for p in rev}
        self._qp_flow[(s.id, f.qpn_src)] = f
        self._qp_flow[(d.id, f.qpn_dst)] = f
        self.flows.append(f)
        self._rx_last.append(0)
        self.schedule(f.start, f._begin, None)
        if f.stop is not None:
            self.schedule(f.stop, f._halt, None)
        return f

    def tap(self, a: str, b: str, dest: str | IO[bytes]) -> PcapTap:
        """Capture the link between nodes ``a`` and ``b`` (both directions) to ``dest``."""
        t = PcapTap(dest)
        p = self.port(a, b)
        p.taps.append(t)
        assert p.peer is not None
        p.peer.taps.append(t)
        self.frames = True
        return t

    # ------------------------------------------------------------------ the clock
    @property
    def now(self) -> int:
        """The virtual clock in integer ns (the loop's ``now_ns``)."""
        return self.loop.now_ns

    @property
    def events(self) -> int:
        """The events the loop has run."""
        return self.loop.events

    def schedule(self, at: int, fn: Callable[[Any], None], arg: Any = None) -> None:
        """Run ``fn(arg)`` at virtual time ``at`` (integer ns; not cancellable: the engine's timers are
        ``carrier.call_later``)."""
        self.loop.call_at(at, fn, arg)

    def run(self, until_us: float, progress: Callable[[float], None] | None = None) -> None:
        """Run the events up to ``until_us`` microseconds of virtual time; the clock then reads it.
        ``progress(fraction)`` is called every few thousand events and at the end (with 1.0).
        (Microseconds, as the scenarios give durations: the loop's ``advance_to`` of them in whole ns.)"""
        until = whole_ns(until_us, "until_us")
        if not self.samples:
            self.watch = self.watch or [p for s in self.switches for p in s.ports]
            self.schedule(self.now, self._sample, None)
        self.loop.advance_to(until, progress)

    def step(self) -> bool:
        """Run every event of the next instant (then flush the devices); False if nothing is left."""
        return self.loop.step()

    def _flush(self) -> None:
        hosts = self._touched
        for h in hosts:  # (a device's flush sends ACKs: none arrives in this instant, so none is added here)
            h.touched = False
            h.device.flush()
        hosts.clear()  # in place: the loop holds this list

    def _sample(self, _: Any) -> None:
        self.samples.append(self.now)
        self.rate_series.append([f.rate if f.active else 0.0 for f in self.flows])
        rx = []
        for i, f in enumerate(self.flows):
            rx.append(f.rcvd - self._rx_last[i])
            self._rx_last[i] = f.rcvd
        self.rx_series.append(rx)
        self.queue_series.append([sum(p.qbytes) for p in self.watch])
        self.mark_series.append(self.marks - self._mark_last)
        self.cnp_series.append(self.cnps - self._cnp_last)
        self.pause_series.append(self.pauses - self._pause_last)
        self.drop_series.append(self.drops - self._drop_last)
        self.retx_series.append(self.retx_bytes - self._retx_last)
        self._mark_last, self._cnp_last, self._pause_last = self.marks, self.cnps, self.pauses
        self._drop_last, self._retx_last = self.drops, self.retx_bytes
        self.schedule(self.now + self.sample_ns, self._sample, None)

    # ------------------------------------------------------------------ the engine's packets
    def send(self, host: Host, eng: Any) -> None:
        """A packet of ``host``'s device (an engine :class:`~rdmalab.verbs.engine.packet.Pkt`) onto its port."""
        dst = self._by_gid.get(eng.dst_gid)
        if dst is None:
            return  # nobody has that address: the packet goes nowhere, as on a wire
        f = self._qp_flow.get((host.id, eng.srcqp))
        opcode = eng.opcode
        if f is not None:
            if host is f.src:
                route = f.fwd
                if opcode in REQUEST_OPCODES:  # a request: new bytes, or a resend of a PSN sent before
                    n = len(eng.payload)
                    if psn_diff(eng.psn, f.sent_psn) < 0:  # behind the next new PSN: go-back-N resends it
                        f.retx_bytes += n
                        f.retx_pkts += 1
                        self.retx_bytes += n
                    else:
                        f.sent += n
                        f.sent_psn = psn_add(eng.psn, 1)
            else:
                route = f.rev
        else:
            known = host.routes.get(dst.id)
            if known is None:
                known = {p.node.id: p for p in self._path(host, dst, None, host.id * 7919 + dst.id)}
                host.routes[dst.id] = known
            route = known
        if opcode == CNP_OPCODE:  # CNP (RoCEv2 annex A17.9.3)
            prio = self.cnp_prio
            self.cnps += 1
            host.cnp_sent += 1
        elif opcode == ACK_OPCODE:  # ACK / NAK
            prio = self.ack_prio
        else:
            prio = self.data_prio
        frame = eng.frame() if self.frames else None
        size = eng.wire_size
        pkt = [opcode, f, size, prio, eng.ecn, eng.psn, None, frame, eng, route]
        port = host.ports[0]
        if opcode in REQUEST_OPCODES:
            # onto the port's queue for its priority, and start it if the port is free
            port.queues[prio].append(pkt)
            port.active |= 1 << prio
            qb = port.qbytes[prio] + size
            port.qbytes[prio] = qb
            if qb > port.qmax:
                port.qmax = qb
            if not port.free_ev:
                self._kick(port)
            return
        # An ACK, NAK, READ response or CNP: the NIC's responder is a pipeline of its own (rxe's resp
        # task beside req), so it does not wait behind the requests the requester has queued: it goes
        # ahead of them, behind the responses already waiting (same priority on the wire, same pauses).
        i = port.ahead[prio]
        port.ahead[prio] = i + 1
        port.queues[prio].insert(i, pkt)
        port.active |= 1 << prio
        qb = port.qbytes[prio] + size
        port.qbytes[prio] = qb
        if qb > port.qmax:
            port.qmax = qb
        if not port.free_ev:
            self._kick(port)

    def _deliver(self, host: Host, pkt: list[Any]) -> None:
        """A packet reached ``host``: hand it to the device (as a frame when it crossed as one) and count it."""
        eng = pkt[PKT]
        dev = host.device
        f: Flow | None = pkt[FLOW]
        ce = pkt[ECN] == CE
        if not host.touched:
            host.touched = True
            self._touched.append(host)
        if f is not None and host is f.dst and eng.opcode in REQUEST_OPCODES:
            if ce:
                f.marked += 1
                host.ce_rcvd += 1
            r = f.peer_engine.resp
            before = r.psn
            if pkt[FRAME] is not None:
                dev.receive_frame(pkt[FRAME], eng.id)  # the frame the switches marked: decoded, its ICRC checked
            elif ce:
                eng.ecn = CE
                dev.receive(eng)  # (the full path: the responder answers a CE mark with a CNP)
            elif eng.opcode not in SEGMENT or not dev.receive_segment(
                    eng.destqp, eng.opcode, eng.psn, eng.ackreq, eng.src_gid, eng.dst_gid, eng.payload,
                    None if eng.reth is None else (eng.reth.va, eng.reth.r_key, eng.reth.dma_length)):
                dev.receive(eng)  # anything the responder's fast path for a WRITE/SEND packet does not take
            if r.psn != before:  # the responder took it: payload delivered in sequence
                f.rcvd += len(eng.payload)
                f.pkts_rcvd += 1
            return
        if eng.opcode == CNP_OPCODE:
            host.cnp_rcvd += 1
            if f is None:
                f = self._qp_flow.get((host.id, eng.destqp))
            if f is not None:
                f.cnps += 1
        self._hand(dev, pkt, eng, ce)

    @staticmethod
    def _hand(dev: SoftDevice, pkt: list[Any], eng: Any, ce: bool) -> None:
        frame = pkt[FRAME]
        if frame is not None:
            dev.receive_frame(frame, eng.id)  # the frame the switches marked: decoded, its ICRC checked
            return
        if ce:
            eng.ecn = CE
        dev.receive(eng)

    # ------------------------------------------------------------------ ports
    def _kick(self, port: Port) -> None:
        """Start the next frame on ``port`` if it is free (strict priority, skipping paused ones)."""
        now = self.loop.now_ns
        if port.busy_until > now:
            if not port.free_ev:
                port.free_ev = True
                self._push((port.busy_until, next(self._tickets), self._kick, port))
            return
        port.free_ev = False  # (this may be the free event: the port's transmission ended now)
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
            wake = 0
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
        elif port.ahead[pick]:
            port.ahead[pick] -= 1
        # the serialisation time in whole ns, the fraction carried to the next frame while the port
        # sends back to back (busy_until == now: this is its free event), dropped after it idled
        # (divmod written out: a tuple and a call fewer on the per-packet path)
        num = size * 8000 + (port.tx_rem if port.busy_until == now else 0)  # (the time in 1/mbps ns)
        mbps = port.mbps
        ns = num // mbps
        port.tx_rem = num - ns * mbps
        end = now + ns
        port.busy_until = end
        port.tx_bytes += size
        port.tx_pkts += 1
        if port.taps and pkt[FRAME] is not None:
            for t in port.taps:
                t.write(now, pkt[FRAME])
        pkt[INPORT] = port.peer  # where it arrives (its ingress port there)
        push, tickets = self._push, self._tickets
        push((end + port.delay, next(tickets), self._arrive, pkt))
        if port.active:
            port.free_ev = True
            push((end, next(tickets), self._kick, port))  # the free event: the next frame then

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
        if cfg.ecn and pkt[ECN] == ECT0:  # an ECN-capable packet: a DCQCN sender's requests
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
        if sw.xoff:
            # XON for every paused ingress queue now under the threshold, not only the packet's own:
            # the threshold moves with the shared buffer, so a queue that emptied while the buffer was
            # full must be resumed when the buffer drains (HPCC's switch checks all of them on dequeue)
            thr = self._threshold(sw)
            for port_, prio_ in sw.xoff:
                if port_.in_bytes[prio_] + RESUME_OFFSET <= thr:
                    self._resume(sw, port_, prio_)
                    break  # one XON per dequeue; the list changed

    def _arrive(self, pkt: list[Any]) -> None:
        port: Port = pkt[INPORT]
        node = port.node
        if not node.is_switch:
            self._deliver(node, pkt)  # type: ignore[arg-type]
            return
        sw: Switch = node  # type: ignore[assignment]
        out = pkt[ROUTE][sw.id]
        size = pkt[SIZE]
        prio = pkt[PRIO]
        cfg = sw.cfg
        lossless = cfg.pfc and cfg.pfc_prios >> prio & 1
        if sw.used + size > sw.buffer or (lossless and port.xoff[prio]
                                          and port.in_bytes[prio] + size > port.xoff_level[prio] + port.headroom) \
                or (cfg.loss and pkt[KIND] in REQUEST_OPCODES and self.rng.random() < cfg.loss):
            port.drops += 1
            self.drops += 1
            self.drop_bytes += size
            f = pkt[FLOW]
            if f is not None:
                f.drops += 1
                if pkt[KIND] in REQUEST_OPCODES:
                    f.data_drops += 1
            return
        sw.used += size
        port.in_bytes[prio] += size
        if lossless and not port.xoff[prio] and port.in_bytes[prio] >= self._threshold(sw):
            port.xoff[prio] = True
            port.xoff_level[prio] = port.in_bytes[prio]
            port.xoff_gen[prio] += 1
            sw.xoff.append((port, prio))
            self._send_pfc(port, prio, MAX_QUANTA)
        # onto the egress port's queue for its priority, and start it if the port is free
        out.queues[prio].append(pkt)
        out.active |= 1 << prio
        qb = out.qbytes[prio] + size
        out.qbytes[prio] = qb
        if qb > out.qmax:
            out.qmax = qb
        if not out.free_ev:
            self._kick(out)

    def _resume(self, sw: Switch, port: Port, prio: int) -> None:
        port.xoff[prio] = False
        port.xoff_gen[prio] += 1
        sw.xoff.remove((port, prio))
        self._send_pfc(port, prio, 0)

    def _send_pfc(self, port: Port, prio: int, quanta: int) -> None:
        """Send a PFC frame out of ``port`` (to the upstream peer) for ``prio``."""
        peer = port.peer
        assert peer is not None
        sent = max(self.now, port.busy_until)  # after the frame on the wire (the PFC frame is not queued)
        at = sent + _ceil_ns(PFC_BYTES * 8, port.mbps)
        if quanta:
            port.pause_tx += 1
            self.pauses += 1
            # refresh before the pause runs out, while the queue stays above XON
            self.schedule(self.now + _ceil_ns(quanta * QUANTUM_BITS, port.mbps) // 2, self._pfc_refresh,
                          (port, prio, port.xoff_gen[prio]))
        else:
            port.resume_tx += 1
            self.resumes += 1
        if port.taps:
            fr = encode_pfc_frame({prio: quanta}, src_mac=0x02FF00000000 | (port.node.id << 8) | port.index)
            for t in port.taps:
                t.write(sent, fr)
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
            port.paused_until[prio] = now + _ceil_ns(quanta * QUANTUM_BITS, port.mbps)
        else:
            port.paused_until[prio] = now
            if paused and not any(pu > now for pu in port.paused_until):
                port.paused_ns += now - port.pause_start
                port.pause_start = now
            if not port.free_ev:
                self._kick(port)

    def _expired_pause(self, port: Port) -> int:
        """A pause that ran out without an XON (no refresh came): its length, counted once."""
        end = max(port.paused_until)
        if end > port.pause_start:
            length = end - port.pause_start
            port.pause_start = end
            return length
        return 0

    # ------------------------------------------------------------------ results
    def paused_time_ns(self, port: Port) -> int:
        """How long ``port`` has been paused (any priority) up to now, in ns."""
        end = max(port.paused_until)
        extra = 0
        if end > port.pause_start:
            extra = min(end, self.now) - port.pause_start
        return port.paused_ns + max(0, extra)
