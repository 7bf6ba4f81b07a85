"""The simulated fabric: a virtual clock, links with latency and bandwidth, seeded faults, taps.

A :class:`Fabric` is a carrier (:class:`rdmalab.verbs.engine.carrier.Carrier`) that connects
soft devices (:class:`rdmalab.verbs.engine.node.SoftDevice`), and it is its own scheduler
(:class:`rdmalab.verbs.engine.carrier.Scheduler`).  It owns the only clock the engine sees, a
nanosecond counter that moves only when events run, and one event queue (packet deliveries and
QP timers): the fabric is a :class:`~rdmalab.fabric.loop.VirtualLoop`.  Nothing runs on its own: ``CQ.poll`` asks the scheduler to make progress, or a
program calls :meth:`Fabric.advance` / :meth:`Fabric.run`.
So there are no threads, and a run with the same seed is the same run, event for event.

Each direction between two devices is a link: a packet takes ``wire_size * 8 / bandwidth`` to
serialise behind the packets before it, then ``latency_ns`` to arrive.  Faults are drawn from
one ``random.Random(seed)`` per fabric, per packet, in this order: loss, corruption (one bit
flipped in the frame, so the receiver's ICRC check drops it as rxe does), reordering (an extra
delay of up to a few packet times) and duplication (a second copy, delayed the same way).

Taps see every frame as the sender transmits it (before faults) as complete RoCEv2 frames;
:meth:`Fabric.write_pcap` is a tap that writes them, with virtual timestamps, as a pcap file.
"""

from __future__ import annotations

import ipaddress
import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import IO, Any

from rdmalab.capture.pcapwriter import CaptureWriter
from rdmalab.fabric.loop import VirtualLoop
from rdmalab.verbs.engine.carrier import Scheduler, Station
from rdmalab.verbs.engine.nicmodel import NicModel, attach
from rdmalab.verbs.engine.node import SoftDevice
from rdmalab.verbs.engine.packet import ACK_OPCODE, INFO, PSN_MASK, ROCE_OVERHEAD, SEGMENT, Pkt, middle_of, next_id
from rdmalab.verbs.engine.trace import RingTrace, Trace, TraceEvent
from rdmalab.wire.ib import check_mtu

FrameTap = Callable[[int, str, str, bytes], None]
_ACK_WIRE = ROCE_OVERHEAD + INFO[ACK_OPCODE].header_size  # an ACK on the wire: no payload


@dataclass(frozen=True)
class Faults:
    """Per-packet probabilities (0..1) of loss, duplication, reordering and corruption."""

    loss: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0
    corrupt: float = 0.0

    @property
    def any(self) -> bool:
        return bool(self.loss or self.duplicate or self.reorder or self.corrupt)


@dataclass
class Wire:
    """One direction between two devices on the simulated fabric: when it is free again, and its open train.
    (A *link* in rdmalab is what ``rdmalab link add`` makes: :mod:`rdmalab.fabric.links`.)"""

    busy_until: int = 0
    #: the train still open on this link: the packets put on it in one instant with the trace off
    #: (see ``Fabric._carry``); None once anything else is put on the link or the train has arrived
    train: _Train | None = None


class _Train:
    """Packets put on one link in one instant, arriving together when the last of them would."""

    __slots__ = ("link", "dst", "pkts", "sent_ns", "at")

    def __init__(self, link: Wire, dst: SoftDevice, pkt: Pkt, sent_ns: int, at: int) -> None:
        self.link = link
        self.dst = dst
        self.pkts = [pkt]
        self.sent_ns = sent_ns
        self.at = at


class PcapTap:
    """Writes every frame the fabric carries to a pcap file (LINKTYPE_ETHERNET, ns timestamps)
    through :class:`~rdmalab.capture.pcapwriter.CaptureWriter`; ``dest`` is a path, ``"-"`` or a
    binary file object (left open)."""

    def __init__(self, fabric: Fabric, dest: str | IO[bytes]) -> None:
        self._writer = CaptureWriter(dest, nano=True)
        self._fabric = fabric
        self.count = 0
        fabric.tap(self)

    def __call__(self, time_ns: int, src: str, dst: str, frame: bytes) -> None:
        self._writer.write(frame, time_ns)
        self.count += 1

    def close(self) -> None:
        if self._writer.closed:
            return
        self._fabric.untap(self)
        self._writer.close()

    def __enter__(self) -> PcapTap:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Fabric(VirtualLoop):
    """An in-process network of soft RoCEv2 devices on a virtual clock.

    ``mtu`` is the IB MTU the ports offer (``port.active_mtu``; 4096 is like a 9000-byte
    Ethernet MTU); a packet whose payload exceeds it is dropped, like a DF packet that does not
    fit.  ``frames=True`` sends every packet as bytes and decodes it at the receiver (slower;
    every packet then really crosses as a frame).  ``trace=False`` skips the trace.  With
    ``bursts`` (the default) and nothing observing the bytes (no tap or fault), the engine may move
    a run of consecutive packets of one message as one burst object (see
    :mod:`rdmalab.verbs.engine.packet`) and, while the trace is off, what one instant puts on a
    link arrives as one *train*, when its last packet would (so ACKs coalesce as they do for a
    burst); ``bursts=False`` forces one object and one arrival per packet.

    The fabric is its own event loop (a :class:`~rdmalab.fabric.loop.VirtualLoop`): ``now_ns``,
    ``call_at``/``call_later``, ``step``/``run``/``advance``/``progress`` and ``pending`` are the loop's.

    ``nic`` (a :class:`~rdmalab.verbs.engine.nicmodel.NicModel`, e.g. ``NicModel.connectx3()``) gives every
    device added a NIC that charges virtual time for doorbells, DMA over PCIe, its processing units and its
    caches (:mod:`rdmalab.verbs.engine.nicmodel`); None (the default): links only, posting is free.
    """

    def __init__(self, *, seed: int = 0, mtu: int = 4096, latency_ns: int = 1000, bandwidth_gbps: float = 100.0,
                 trace: bool = True, frames: bool = False, bursts: bool = True, nic: NicModel | None = None) -> None:
        check_mtu(mtu)
        if nic is not None and not isinstance(nic, NicModel):
            raise TypeError(f"Fabric(nic=...): a NicModel (NicModel.connectx3()), not {nic!r}")
        #: the NIC cost model every device added gets (None: none)
        self.nic = nic
        #: whether any device has a NIC model (``nicmodel.attach`` keeps it up to date through
        #: :meth:`nic_attached`): the wire then asks the NICs when packets leave and arrive
        self.timed = False
        super().__init__(0)  # the virtual clock (``now_ns``, a plain attribute the engine reads often) at 0
        self.seed = seed
        self.rng = random.Random(seed)
        self.mtu = mtu
        self.latency_ns = latency_ns
        self.bandwidth_gbps = bandwidth_gbps
        self.frames = frames
        self.bursts = bursts
        self.devices: dict[str, SoftDevice] = {}
        self._trace: Trace | RingTrace = Trace()
        #: keep one trace event (the carrier's trace sink, called for every event while tracing): the
        #: trace's own ``append``, so that recording costs no Python call; see ``trace``
        self.record: Callable[[TraceEvent], None] = self._trace.append
        #: whether the engine records trace events (a plain attribute: the engine reads it for every
        #: packet; switching it on or off at any time is fine, bursts do not depend on it)
        self.tracing = trace
        #: the QPs of all this fabric's devices that hold back an ACK (``SoftDevice.held_acks``: one set for
        #: all, so that ``step`` sees with one look whether any device has an ACK to send)
        self.held_acks: set[Any] = set()
        self.on_instant_end(self.held_acks, self._flush_held)
        self._by_gid: dict[int, SoftDevice] = {}
        self._links: dict[tuple[str, str], Wire] = {}
        self._faults: dict[tuple[str | None, str | None], Faults] = {}
        self._taps: list[FrameTap] = []
        self.stats = {"sent": 0, "delivered": 0, "lost": 0, "duplicated": 0, "reordered": 0, "corrupted": 0,
                      "oversized": 0, "unroutable": 0}
        self._update_mode()

    # ------------------------------------------------------------------ devices
    def add_device(self, name: str | None = None, ip: str | None = None, mac: int | None = None) -> SoftDevice:
        """A new soft device on this fabric, with GID 0 link-local and GID 1 ``::ffff:<ip>`` (as rxe)."""
        name, ip, mac = self.new_device_address(name, ip, mac, "soft")
        dev = SoftDevice(name, int(ipaddress.IPv4Address(ip)), mac, self, seed=self.rng.getrandbits(32))
        self.attach(dev)
        if self.nic is not None:
            attach(dev, self.nic)
        return dev

    def nic_attached(self) -> None:
        """A device got or lost a NIC model (``nicmodel.attach`` calls this)."""
        self.timed = any(d.nic is not None for d in self.devices.values())

    def new_device_address(self, name: str | None, ip: str | None, mac: int | None,
                           prefix: str) -> tuple[str, str, int]:
        """The name, IPv4 address and MAC of the next device (the n-th, from 0): those given, else
        ``<prefix><n>``, ``10.0.0.<n+1>`` and ``02:00:00:00:00:<n+1>``; a name already taken is an error."""
        n = len(self.devices)
        name = name or f"{prefix}{n}"
        if name in self.devices:
            raise ValueError(f"a device named {name!r} already exists on this fabric")
        return name, ip or f"10.0.0.{n + 1}", mac if mac is not None else 0x020000000001 + n

    def attach(self, dev: SoftDevice) -> None:
        """Put a new device (made with this fabric as its carrier) on the fabric: by name and by its GIDs."""
        self.devices[dev.name] = dev
        for gid in dev.gids:
            self._by_gid[gid] = dev

    def resolve_mac(self, gid: int) -> int | None:
        """The MAC of the device owning ``gid`` (what ARP/ND would answer), or None."""
        dev = self._by_gid.get(gid)
        return None if dev is None else dev.mac

    # ------------------------------------------------------------------ clock and events
    def schedule(self, delay_ns: int, fn: Callable[[Any], None], arg: Any = None) -> None:
        """Run ``fn(arg)`` ``delay_ns`` of virtual time from now (not cancellable; see ``call_later``)."""
        self.call_at(self.now_ns + max(0, int(delay_ns)), fn, arg)

    @property
    def scheduler(self) -> Scheduler:
        """The simulated fabric drives itself: its loop's ``step``/``progress``/``run``."""
        return self

    def _flush_held(self) -> None:
        """The end of an instant in which some QP held an ACK back for coalescing (the loop calls it)."""
        held = self.held_acks
        if len(held) == 1:
            held.pop().flush_ack()
        else:  # device by device, as SoftDevice.flush orders them
            for dev in self.devices.values():
                dev.flush()

    # ------------------------------------------------------------------ faults and taps
    def set_faults(self, loss: float = 0.0, duplicate: float = 0.0, reorder: float = 0.0, corrupt: float = 0.0,
                   *, src: str | None = None, dst: str | None = None) -> None:
        """Seeded faults for packets from ``src`` to ``dst`` (device names; ``None`` = any)."""
        for v in (loss, duplicate, reorder, corrupt):
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"fault probabilities are between 0 and 1, not {v}")
        self._faults[(src, dst)] = Faults(loss, duplicate, reorder, corrupt)
        self._update_mode()

    def clear_faults(self) -> None:
        self._faults.clear()
        self._update_mode()

    def faults(self, src: str, dst: str) -> Faults | None:
        f = self._faults
        got = f.get((src, dst)) or f.get((src, None)) or f.get((None, dst)) or f.get((None, None))
        return got if got is not None and got.any else None

    def tap(self, fn: FrameTap) -> FrameTap:
        """Call ``fn(time_ns, src_name, dst_name, frame)`` for every frame sent."""
        self._taps.append(fn)
        self._update_mode()
        return fn

    def untap(self, fn: FrameTap) -> None:
        self._taps.remove(fn)
        self._update_mode()

    def write_pcap(self, dest: str | IO[bytes]) -> PcapTap:
        """Start writing every frame to ``dest`` (a path or a binary file); ``close()`` the result."""
        return PcapTap(self, dest)

    def _update_mode(self) -> None:
        # Bursts (see rdmalab.verbs.engine.packet) only when nothing can tell them apart: the trace can't,
        # send() expands a burst into the packets it stands for, each traced and delivered on its own.
        self.burst_ok = self.bursts and not (self._taps or self.frames or any(f.any for f in self._faults.values()))

    @property
    def trace(self) -> Trace | RingTrace:
        """The events recorded while ``tracing`` (a :class:`~rdmalab.verbs.engine.trace.Trace`, or the
        bounded :class:`~rdmalab.verbs.engine.trace.RingTrace` of :func:`default_fabric`); a program
        may also give the fabric a new one (``fabric.trace = Trace()``)."""
        return self._trace

    @trace.setter
    def trace(self, trace: Trace | RingTrace) -> None:
        self._trace = trace
        self.record = trace.append

    # ------------------------------------------------------------------ the wire
    def send(self, src: Station, pkt: Pkt) -> None:
        """Put a packet on the wire from ``src``; it arrives later at the device owning its DGID."""
        dst = self._by_gid.get(pkt.dst_gid)
        count = pkt.count
        self.stats["sent"] += count
        if self._taps or self.tracing:
            if count > 1 and dst is not None:
                # A burst while tracing: the receiver gets the very packets the trace shows as sent, one
                # by one, each when it would have arrived had the requester sent them singly (it sends
                # a run of packets at one instant either way).
                # (no tap, frame or fault needs the packets; a NIC model times each packet in _carry)
                if self.burst_ok and pkt.mtu <= self.mtu and not self.timed:
                    self._traced_burst(src, dst, pkt)  # (the same, without building the packets)
                    return
                for p in pkt.expand():  # each packet's "sent" event, then its link or its drop
                    self._observe(src, dst, p)
                    if len(p.payload) > self.mtu:
                        self.stats["oversized"] += 1
                        self._drop(dst, p, "larger than the port MTU")
                    else:
                        self._carry(src, dst, p)
                return
            self._observe(src, dst, pkt)
        if dst is None:
            members = [d for d in self.devices.values() if pkt.dst_gid in d.mcast] if count == 1 else []
            if members:  # multicast: a copy to every device with a QP attached to the group, the sender's too
                for d in members:
                    self._carry(src, d, pkt)
                return
            self.stats["unroutable"] += count
            return
        if count == 1 and len(pkt.payload) > self.mtu:
            self.stats["oversized"] += 1
            self._drop(dst, pkt, "larger than the port MTU")
            return
        self._carry(src, dst, pkt)

    def _carry(self, src: Station, dst: SoftDevice, pkt: Pkt) -> None:
        """Serialise ``pkt`` on the link behind what is queued there, and deliver it (or fault it)."""
        key = (src.name, dst.name)
        link = self._links.get(key)
        if link is None:
            link = self._links[key] = Wire()
        n = len(pkt.payload)
        # Pkt.wire_size, spelled out: Ethernet to ICRC of every packet, payload padded to 4 bytes
        wire_size = pkt.count * (ROCE_OVERHEAD + INFO[pkt.opcode].header_size) + n + (-n & 3)
        tx = int(wire_size * 8 / self.bandwidth_gbps)
        now = self.now_ns
        start = link.busy_until if link.busy_until > now else now
        if self.timed:  # the NIC model: the sender's NIC and then the receiver's take their time
            start, arrival = self._nic_times(src, dst, pkt, start, tx)
            link.busy_until = start + tx
        else:
            link.busy_until = start + tx
            arrival = link.busy_until + self.latency_ns
        faults = self.faults(src.name, dst.name) if self._faults else None
        if faults is None:
            if self.burst_ok and not self.tracing:
                # A train: what one instant puts on a link arrives as one event, when its last packet
                # would (as a burst does for the packets of one message), so the responder coalesces
                # the ACKs its packets ask for.  Anything else put on the link closes the train.
                train = link.train
                if train is not None and train.sent_ns == now:
                    train.pkts.append(pkt)
                    train.at = arrival
                    return
                train = link.train = _Train(link, dst, pkt, now, arrival)
                self.push((arrival, next(self.tickets), self._arrive, train))  # (the loop's call_at: VirtualLoop.push)
                return
            link.train = None
            if self.frames:
                deliver: Callable[[Any], None] = partial(dst.receive_frame, packet_id=pkt.id)
                self.call_at(arrival, deliver, pkt.frame())
            else:
                self.push((arrival, next(self.tickets), dst.receive, pkt))
            return
        link.train = None
        for p in pkt.expand():
            self._faulty(dst, p, faults, arrival, tx)

    def _nic_times(self, src: Station, dst: SoftDevice, pkt: Pkt, start: int, tx: int,
                   reth: tuple[int, int, int] | None = None) -> tuple[int, int]:
        """With a NIC model: when ``pkt`` may start on the link (the sending NIC works on it from now; it
        goes at ``start``, when the link is free, at the earliest) and when the receiving NIC hands it on (after the link and its own work)."""
        n = len(pkt.payload)
        snic = getattr(src, "nic", None)
        if snic is not None:
            start = max(start, int(-(-snic.tx(self.now_ns, pkt.opcode, n, pkt.count, pkt.srcqp) // 1)))
        arrival = start + tx + self.latency_ns
        dnic = dst.nic
        if dnic is not None:
            r = pkt.reth
            if reth is None and r is not None:
                reth = (r.va, r.r_key, r.dma_length)
            arrival = int(-(-dnic.rx(arrival, pkt.opcode, n, pkt.count, pkt.destqp, reth) // 1))
        return start, arrival

    def _arrive(self, train: _Train) -> None:
        """A train's first packet is due: if more packets joined it, it comes again when the last is;
        otherwise its packets are received, in the order they were sent."""
        if train.at > self.now_ns:
            self.call_at(train.at, self._arrive, train)
            return
        if train.link.train is train:
            train.link.train = None
        receive = train.dst.receive
        for p in train.pkts:
            receive(p)

    def send_ack(self, src: Station, fields: tuple[int, ...]) -> bool:
        """The ACK lane (``SoftDevice.ack_lane``): a plain ACK given as fields, carried as :meth:`send`
        and :meth:`_carry` would carry its packet, without building one.  Only while nothing observes
        the packet's bytes (``burst_ok``: no tap, frame or fault); False otherwise.  While tracing,
        the lane records the "sent" event :meth:`_observe` would and adds its packet id to the fields
        (the receiver builds the packet with that id, see ``SoftDevice.receive_ack``)."""
        if not self.burst_ok:
            return False
        dst = self._by_gid.get(fields[4])
        if dst is None:
            return False
        self.stats["sent"] += 1
        if self.tracing:
            pid = next_id()
            self.record(TraceEvent(self.now_ns, src.name, fields[8], "sent", fields[1], ACK_OPCODE,
                                   {"packet_id": pid, "dqpn": fields[0], "len": 0, "ackreq": 0}, None))
            fields += (pid,)
        key = (src.name, dst.name)
        link = self._links.get(key)
        if link is None:
            link = self._links[key] = Wire()
        now = self.now_ns
        start = link.busy_until if link.busy_until > now else now
        tx = int(_ACK_WIRE * 8 / self.bandwidth_gbps)
        arrival = start + tx + self.latency_ns
        if self.timed:  # the NIC model: the ACK's PU work at both ends
            snic, dnic = getattr(src, "nic", None), dst.nic
            if snic is not None:
                start = max(start, int(-(-snic.tx(now, ACK_OPCODE, 0, 1, fields[8]) // 1)))
            arrival = start + tx + self.latency_ns
            if dnic is not None:
                arrival = int(-(-dnic.rx(arrival, ACK_OPCODE, 0, 1, fields[0], None) // 1))
        link.busy_until = start + tx
        link.train = None  # (a packet put on the link after this ACK must not arrive before it)
        self.push((arrival, next(self.tickets), dst.receive_ack, fields))
        return True

    def _traced_burst(self, src: Station, dst: SoftDevice, burst: Pkt) -> None:
        """A burst while tracing: what :meth:`_observe` and :meth:`_carry` do for each of its packets
        (a "sent" event now, then the link), without building the packets.  Each arrives on its own,
        when it would have as a single packet, at :meth:`_part`."""
        n = burst.count
        mtu = burst.mtu
        data = memoryview(burst.payload)
        name, qpn, dqpn, psn0, last = src.name, burst.srcqp, burst.destqp, burst.psn, n - 1
        middle = middle_of(burst.opcode)
        reth = burst.reth
        acks = burst.acks
        now = self.now_ns
        record = self.record
        key = (name, dst.name)
        link = self._links.get(key)
        if link is None:
            link = self._links[key] = Wire()
        rate, latency = self.bandwidth_gbps, self.latency_ns
        push, tickets, part = self.push, self.tickets, self._part  # (the loop's call_at without a Python call)
        first_code, last_code = burst.opcode, burst.last_opcode
        overhead = {c: ROCE_OVERHEAD + INFO[c].header_size for c in (first_code, middle, last_code)}
        # which of its opcodes the responder's fast path may take (a CE mark takes the full path,
        # which answers it with a CNP)
        seg = {c: burst.ecn != 3 and c in SEGMENT for c in (first_code, middle, last_code)}
        # _carry, spelled out for each packet: serialised behind what the link has queued (the first
        # waits for the link; each one after it, for the one before)
        busy = max(link.busy_until, now)
        link.train = None
        # a MIDDLE packet is full (the path MTU), has no RETH, and takes its AckReq from ``acks``
        mid_tx = int((overhead[middle] + mtu + (-mtu & 3)) * 8 / rate)
        mid_fast = seg[middle]
        for i in range(n):
            if i == 0 or i == last:
                code = first_code if i == 0 else last_code
                piece = data[i * mtu:(i + 1) * mtu]
                length = len(piece)
                ackreq = burst.ackreq if i == last else 1 if i in acks else 0
                tx = int((overhead[code] + length + (-length & 3)) * 8 / rate)
                fast = seg[code]
                fields = (reth.va, reth.r_key, reth.dma_length) if i == 0 and reth is not None else None
            else:
                code, length, tx, fast, fields = middle, mtu, mid_tx, mid_fast, None
                piece = data[i * mtu:i * mtu + mtu]
                ackreq = 1 if i in acks else 0
            psn = (psn0 + i) & PSN_MASK
            pid = next_id()
            record(TraceEvent(now, name, qpn, "sent", psn, code,
                              {"packet_id": pid, "dqpn": dqpn, "len": length, "ackreq": ackreq}, None))
            busy += tx
            push((busy + latency, next(tickets), part, (dst, burst, i, pid, fast, code, psn, ackreq, piece, fields)))
        link.busy_until = busy

    def _part(self, arg: tuple[Any, ...]) -> None:
        """Packet ``i`` of a traced burst arrives: the responder's fast path for the next packet of a
        WRITE or SEND takes it (``SoftDevice.receive_segment``, then the "received" event that
        ``SoftDevice.receive`` would record) or, for anything else, the packet is built (``Pkt.sub``,
        with the id of its "sent" event) and received as any other."""
        dst, burst, i, pid, fast, code, psn, ackreq, data, reth = arg
        if fast and dst.receive_segment(burst.destqp, code, psn, ackreq, burst.src_gid, burst.dst_gid, data, reth):
            if self.tracing:
                self.record(TraceEvent(self.now_ns, dst.name, burst.destqp, "received", psn, code,
                                       {"packet_id": pid, "len": len(data)}))
            return
        p = burst.sub(i)
        p.id = pid
        dst.receive(p)

    def _observe(self, src: Station, dst: SoftDevice | None, pkt: Pkt) -> None:
        """The trace's "sent" events and the taps' frames for ``pkt`` (each packet of a burst)."""
        want_frame = bool(self._taps) or self.frames
        for p in pkt.expand():
            frame = p.frame() if want_frame else None
            if self.tracing:
                self.record(TraceEvent(self.now_ns, src.name, p.srcqp, "sent", p.psn, p.opcode,
                                             {"packet_id": p.id, "dqpn": p.destqp, "len": len(p.payload),
                                              "ackreq": p.ackreq}, frame))
            if frame is not None:
                for tap in self._taps:
                    tap(self.now_ns, src.name, dst.name if dst else "?", frame)

    def _faulty(self, dst: SoftDevice, p: Pkt, f: Faults, arrival: int, tx: int) -> None:
        rng = self.rng
        if f.loss and rng.random() < f.loss:
            self.stats["lost"] += 1
            self._drop(dst, p, "lost by the fabric")
            return
        copies = 2 if f.duplicate and rng.random() < f.duplicate else 1
        if copies == 2:
            self.stats["duplicated"] += 1
        for _ in range(copies):
            t = arrival
            if f.reorder and rng.random() < f.reorder:
                self.stats["reordered"] += 1
                t += rng.randint(1, 4 * (tx + 1) + self.latency_ns)
            elif _:
                t += rng.randint(1, tx + 1)
            frame = p.frame()
            if f.corrupt and rng.random() < f.corrupt:
                self.stats["corrupted"] += 1
                b = bytearray(frame)
                i = rng.randrange(14, len(b))
                b[i] ^= 1 << rng.randrange(8)
                frame = bytes(b)
            deliver: Callable[[Any], None] = partial(dst.receive_frame, packet_id=p.id)
            self.call_at(t, deliver, frame)

    def _drop(self, dst: SoftDevice, p: Pkt, reason: str) -> None:
        if self.tracing:
            self.record(TraceEvent(self.now_ns, dst.name, p.destqp, "dropped", p.psn, p.opcode,
                                         {"packet_id": p.id, "reason": reason}))


_DEFAULT: Fabric | None = None


def default_fabric() -> Fabric:
    """The fabric ``get_device_list()`` uses when nothing else is configured: soft0 and soft1.

    Its trace is a :class:`~rdmalab.verbs.engine.trace.RingTrace`: the latest
    :data:`~rdmalab.verbs.engine.trace.RING_EVENTS` events, with ``trace.dropped`` counting those it
    let go, so that a pyverbs program that loops does not grow without end (give it ``Trace()`` to
    keep everything, or set ``tracing = False`` to record nothing)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = Fabric()
        _DEFAULT.trace = RingTrace()
        _DEFAULT.add_device("soft0", "10.0.0.1")
        _DEFAULT.add_device("soft1", "10.0.0.2")
    return _DEFAULT


def reset_default_fabric(fabric: Fabric | None = None) -> Fabric:
    """Replace the default fabric (a fresh one with soft0/soft1 if ``fabric`` is None)."""
    global _DEFAULT
    _DEFAULT = fabric
    return default_fabric()
