"""TCP on the simulated fabric: the stream that carries iWARP between soft iWARP devices, on the virtual clock.

iWARP needs a reliable byte stream (MPA over TCP).  On the simulated fabric the engine gets one
from this model, not from the kernel's TCP over a local socket pair, for three reasons: the
fabric's virtual clock and seeded faults must govern it (a run with the same seed is the same
run, segment for segment; the kernel's timers run on the wall clock); a notebook must be able
to *show* TCP at work (segments, cumulative ACKs, a lost segment and its retransmission in a
ladder and in a pcap), which kernel sockets hide; and it needs no sockets, so it runs anywhere
a notebook runs.  The kernel's TCP is what :mod:`rdmalab.fabric.tcpkernel` uses, against siw.

What the model does (RFC 9293 in outline; deliberately small):

* three-way handshake (SYN with an MSS option, SYN-ACK, ACK); a SYN to a port nobody listens on
  is answered with RST (the connect fails: "connection refused");
* segments of at most ``mss`` payload octets, sequence numbers from a random ISS (32-bit on the
  wire), a fixed receive window (``window``, no scaling) and no congestion control (no slow
  start, no cwnd: the window is the only limit);
* cumulative ACKs, piggybacked on data, else one ACK for every second in-order segment or after
  ``delack_ns`` (delayed ACK, 40 ms as Linux's maximum); an out-of-order or duplicate segment
  gets an immediate duplicate ACK and is dropped (no SACK, no out-of-order queue);
* retransmission: go-back-N from the oldest unacknowledged octet when the retransmission timer
  (``rto_ns``, 200 ms as Linux's minimum RTO, doubling per retry) expires, and fast retransmit of
  one segment after three duplicate ACKs; a connection gives up after ``max_retries``;
* FIN in each direction (a close sends what is queued, then FIN); RST ends a connection at once.

Segments cross the fabric's links like packets (serialisation at the link bandwidth behind what
is queued there, then the latency) and meet the fabric's faults (``Fabric.set_faults``): loss,
duplication, and corruption (which the receiver's TCP checksum would catch: it is dropped);
``SimTcp.drop`` drops chosen segments.
Taps (``Fabric.write_pcap``) see every segment as an Ethernet/IPv4/TCP frame, so tshark and
``rdmalab decode`` read the iWARP inside.  The receiver is handed the bytes in order, however
the segments were cut: the iWARP QP frames FPDUs itself (:mod:`rdmalab.verbs.engine.iwarp`).

:func:`add_iwarp_device` puts a soft iWARP device on a fabric.
"""

from __future__ import annotations

import ipaddress
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rdmalab.fabric.sim import Fabric, Wire
from rdmalab.verbs.engine.carrier import TimerHandle
from rdmalab.verbs.engine.iwdevice import ConnectResult, IwDevice
from rdmalab.verbs.engine.trace import TraceEvent
from rdmalab.wire.net import ETHERTYPE_IPV4, IPPROTO_TCP, SEQ_MASK, TCP, Ethernet, IPv4, tcp_checksum, tcp_flag_names

FIN, SYN, RST, PSH, ACK = TCP.FIN, TCP.SYN, TCP.RST, TCP.PSH, TCP.ACK
ETH_IP_TCP = 14 + 20 + 20  # header octets of a segment without options

_STACKS: weakref.WeakKeyDictionary[Fabric, SimTcp] = weakref.WeakKeyDictionary()


def flag_names(flags: int) -> str:
    return ",".join(tcp_flag_names(flags))


@dataclass(slots=True)
class Segment:
    """One TCP segment in flight (absolute sequence numbers; the wire keeps their low 32 bits)."""

    src: tuple[str, int]
    dst: tuple[str, int]
    seq: int
    ack: int
    flags: int
    data: bytes = b""
    window: int = 65535
    mss: int | None = None


class TcpEndpoint:
    """One end of a simulated TCP connection; the :class:`~rdmalab.verbs.engine.iwarp.Stream` an iWARP QP uses."""

    def __init__(self, tcp: SimTcp, dev: IwDevice, local: tuple[str, int], peer: tuple[str, int]) -> None:
        self.tcp, self.dev, self.local, self.peer = tcp, dev, local, peer
        self.receiver: Any = None
        self.mss = tcp.mss
        self.state = "closed"
        self.iss = dev.rng.getrandbits(32)
        self.snd_una = self.snd_nxt = self.iss
        self.buf_seq = self.iss + 1  # the sequence number of sndbuf[0]
        self.sndbuf = bytearray()
        self.rcv_nxt = 0
        self.peer_window = tcp.window
        self.fin_pending = self.fin_sent = self.fin_received = False
        self.fin_seq = 0
        self.dupacks = 0
        self.retries = 0
        self.rto = tcp.rto_ns
        self._rto_timer: TimerHandle | None = None
        self._delack_timer: TimerHandle | None = None
        self._rx_unacked = 0
        self.on_result: ConnectResult | None = None
        self.on_accept: Callable[[Any], None] | None = None
        self.closed_why: str | None = None

    # ------------------------------------------------------------------ the Stream interface
    def write(self, data: bytes) -> None:
        if self.fin_pending or self.state in ("closed", "reset"):
            return
        self.sndbuf += data
        self._output()

    def close(self) -> None:
        if self.fin_pending or self.state in ("closed", "reset"):
            return
        self.fin_pending = True
        self._output()

    # ------------------------------------------------------------------ sending
    def _send(self, flags: int, seq: int, data: bytes = b"") -> None:
        ack = self.rcv_nxt if flags & ACK else 0
        if flags & ACK:
            self._rx_unacked = 0
            if self._delack_timer is not None:
                self._delack_timer.cancel()
                self._delack_timer = None
        seg = Segment(self.local, self.peer, seq, ack, flags, data, self.tcp.window,
                      self.tcp.mss if flags & SYN else None)
        self.tcp.carry(self.dev, seg)

    def _output(self) -> None:
        if self.state not in ("established", "close_wait"):
            return
        while True:
            inflight = self.snd_nxt - self.snd_una
            off = self.snd_nxt - self.buf_seq
            if off < len(self.sndbuf):
                n = min(self.mss, len(self.sndbuf) - off, self.peer_window - inflight)
                if n <= 0:
                    return
                data = bytes(self.sndbuf[off:off + n])
                last = off + n == len(self.sndbuf)
                self._send(ACK | (PSH if last else 0), self.snd_nxt, data)
                self.snd_nxt += n
                self._arm_rto()
            elif self.fin_pending and not self.fin_sent:
                self.fin_seq = self.snd_nxt
                self._send(FIN | ACK, self.snd_nxt)
                self.snd_nxt += 1
                self.fin_sent = True
                self._arm_rto()
            else:
                return

    def _arm_rto(self, restart: bool = False) -> None:
        if self._rto_timer is not None:
            if not restart:
                return
            self._rto_timer.cancel()
        self._rto_timer = self.tcp.fabric.call_later(self.rto, self._on_rto)

    def _stop_rto(self) -> None:
        if self._rto_timer is not None:
            self._rto_timer.cancel()
            self._rto_timer = None

    def _on_rto(self, _: Any) -> None:
        self._rto_timer = None
        if self.state in ("closed", "reset"):
            return
        self.retries += 1
        if self.retries > self.tcp.max_retries:
            self._fail(f"no ACK after {self.tcp.max_retries} retransmissions")
            return
        self.rto *= 2
        self.tcp.stats["timeouts"] += 1
        if self.state == "syn_sent":
            self._send(SYN, self.iss)
            self._arm_rto()
            return
        if self.state == "syn_rcvd":
            self._send(SYN | ACK, self.iss)
            self._arm_rto()
            return
        if self.snd_una < self.snd_nxt:  # go back N: everything from the oldest unacknowledged octet again
            self.tcp.stats["retransmitted"] += 1
            self.snd_nxt = self.snd_una
            if self.fin_sent and self.snd_una <= self.fin_seq:
                self.fin_sent = False
            self._output()

    # ------------------------------------------------------------------ receiving
    def on_segment(self, seg: Segment) -> None:
        if seg.flags & RST:
            if self.state == "syn_sent":
                self._connect_failed("connection refused (RST)")
            else:
                self._fail("connection reset by the peer (RST)")
            return
        if self.state == "syn_sent":
            if seg.flags & SYN and seg.flags & ACK and seg.ack == self.iss + 1:
                self.rcv_nxt = seg.seq + 1
                self.snd_una = self.snd_nxt = self.iss + 1
                self.peer_window = seg.window
                if seg.mss:
                    self.mss = min(self.mss, seg.mss)
                self.state = "established"
                self._stop_rto()
                self.rto, self.retries = self.tcp.rto_ns, 0
                self._send(ACK, self.snd_nxt)
                cb, self.on_result = self.on_result, None
                if cb is not None:
                    cb(self, None)
                self._output()
            return
        if self.state == "syn_rcvd":
            if seg.flags & SYN:  # our SYN-ACK was lost: the SYN came again
                self._send(SYN | ACK, self.iss)
                return
            if seg.flags & ACK and seg.ack == self.iss + 1:
                self.snd_una = self.snd_nxt = self.iss + 1
                self.state = "established"
                self._stop_rto()
                self.rto, self.retries = self.tcp.rto_ns, 0
                accepted, self.on_accept = self.on_accept, None
                if accepted is not None:
                    accepted(self)
            else:
                return
        if self.state in ("closed", "reset"):
            return
        if seg.flags & SYN:  # a retransmitted SYN-ACK: our ACK of it was lost
            self._send(ACK, self.snd_nxt)
            return
        if seg.flags & ACK:
            self._on_ack(seg)
        if not seg.data and not seg.flags & FIN:
            return
        if seg.seq != self.rcv_nxt:
            self.tcp.stats["out_of_order"] += 1
            self._send(ACK, self.snd_nxt)  # an immediate duplicate ACK
            return
        if seg.data:
            self.rcv_nxt += len(seg.data)
            if self.receiver is not None:
                self.receiver.on_bytes(seg.data)
        if seg.flags & FIN and not self.fin_received:
            self.fin_received = True
            self.rcv_nxt += 1
            self._send(ACK, self.snd_nxt)
            self.state = "close_wait" if not self.fin_sent else self.state
            if self.receiver is not None:
                self.receiver.on_closed("the peer closed the connection (FIN)")
            self._maybe_done()
            return
        self._rx_unacked += 1
        if self._rx_unacked >= 2:
            self._send(ACK, self.snd_nxt)
        elif self._delack_timer is None:
            self._delack_timer = self.tcp.fabric.call_later(self.tcp.delack_ns, self._on_delack)

    def _on_delack(self, _: Any) -> None:
        self._delack_timer = None
        if self._rx_unacked and self.state not in ("closed", "reset"):
            self._send(ACK, self.snd_nxt)

    def _on_ack(self, seg: Segment) -> None:
        self.peer_window = seg.window
        ack = seg.ack
        if ack > self.snd_una:
            if ack > self.snd_nxt:  # acknowledges what a go-back-N rewind had not resent yet
                self.snd_nxt = ack
            n = min(ack, self.buf_seq + len(self.sndbuf)) - self.buf_seq
            if n > 0:
                del self.sndbuf[:n]
                self.buf_seq += n
            self.snd_una = ack
            self.dupacks = 0
            self.retries = 0
            self.rto = self.tcp.rto_ns
            if self.snd_una == self.snd_nxt:
                self._stop_rto()
            else:
                self._arm_rto(restart=True)
            self._output()
            self._maybe_done()
        elif ack == self.snd_una and self.snd_nxt > self.snd_una and not seg.data and not seg.flags & (SYN | FIN):
            self.dupacks += 1
            if self.dupacks == 3:  # fast retransmit: the one segment at snd_una
                self.tcp.stats["fast_retransmits"] += 1
                off = self.snd_una - self.buf_seq
                data = bytes(self.sndbuf[off:off + self.mss])
                if data:
                    self._send(ACK, self.snd_una, data)
                elif self.fin_sent:
                    self._send(FIN | ACK, self.fin_seq)

    def _maybe_done(self) -> None:
        if self.fin_received and self.fin_sent and self.snd_una > self.fin_seq:
            self.state = "closed"
            self._stop_rto()
            self.tcp.forget(self)

    def _connect_failed(self, why: str) -> None:
        self.state = "closed"
        self._stop_rto()
        self.tcp.forget(self)
        cb, self.on_result = self.on_result, None
        if cb is not None:
            cb(None, why)

    def _fail(self, why: str) -> None:
        if self.state == "syn_sent":
            self._connect_failed(why)
            return
        self.state = "reset"
        self.closed_why = why
        self._stop_rto()
        self.tcp.forget(self)
        if self.receiver is not None:
            self.receiver.on_closed(why)

    def __repr__(self) -> str:
        return f"<TCP {self.local[0]}:{self.local[1]} -> {self.peer[0]}:{self.peer[1]} {self.state}>"


class SimTcp:
    """The TCP of one simulated fabric (every soft iWARP device on it shares it): listeners,
    connections, and the segments' way across the fabric."""

    def __init__(self, fabric: Fabric, *, mss: int = 1460, window: int = 65535, rto_ns: int = 200_000_000,
                 delack_ns: int = 40_000_000, max_retries: int = 15) -> None:
        self.fabric = fabric
        self.mss, self.window, self.rto_ns, self.delack_ns, self.max_retries = mss, window, rto_ns, delack_ns, \
            max_retries
        self.devices: dict[str, IwDevice] = {}
        self.listeners: dict[tuple[str, int], Callable[[Any], None]] = {}
        self.conns: dict[tuple[str, int, str, int], TcpEndpoint] = {}
        self.stats = {"segments": 0, "delivered": 0, "lost": 0, "duplicated": 0, "corrupted": 0, "timeouts": 0,
                      "retransmitted": 0, "fast_retransmits": 0, "out_of_order": 0}
        self._ip_id = 0
        #: a test or notebook may drop chosen segments: ``drop(src_device, segment)`` true = lost
        #: (after the taps saw it, as a lost frame is seen where it was sent)
        self.drop: Callable[[IwDevice, Segment], bool] | None = None

    @classmethod
    def of(cls, fabric: Fabric) -> SimTcp:
        """The fabric's TCP (made on first use)."""
        tcp = _STACKS.get(fabric)
        if tcp is None:
            tcp = _STACKS[fabric] = cls(fabric)
        return tcp

    # ------------------------------------------------------------------ TcpStack
    def listen(self, ip: str, port: int, on_accept: Callable[[Any], None]) -> None:
        if (ip, port) in self.listeners or ("0.0.0.0", port) in self.listeners:
            raise OSError(98, f"address {ip}:{port} is already in use")
        self.listeners[(ip, port)] = on_accept

    def unlisten(self, ip: str, port: int) -> None:
        self.listeners.pop((ip, port), None)

    def connect(self, src: tuple[str, int], dst: tuple[str, int], on_result: ConnectResult) -> None:
        dev = self.devices.get(src[0])
        if dev is None:
            raise OSError(99, f"no soft iWARP device has address {src[0]}")
        ep = TcpEndpoint(self, dev, src, dst)
        ep.on_result = on_result
        ep.state = "syn_sent"
        self.conns[(src[0], src[1], dst[0], dst[1])] = ep
        ep._send(SYN, ep.iss)
        ep._arm_rto()

    def forget(self, ep: TcpEndpoint) -> None:
        key = (ep.local[0], ep.local[1], ep.peer[0], ep.peer[1])
        if self.conns.get(key) is ep:
            del self.conns[key]

    # ------------------------------------------------------------------ the wire
    def carry(self, src: IwDevice, seg: Segment) -> None:
        """Serialise ``seg`` on the link from ``src`` to the device that owns its destination, then deliver it."""
        fab = self.fabric
        dst = self.devices.get(seg.dst[0])
        self.stats["segments"] += 1
        size = ETH_IP_TCP + (4 if seg.mss else 0) + len(seg.data)
        taps = fab._taps  # the fabric's taps (a PcapTap, or any function): each sees the frame as sent
        if taps:
            frame = self.frame(src, dst, seg)
            for tap in list(taps):
                tap(fab.now_ns, src.name, dst.name if dst is not None else "?", frame)
        if fab.tracing:
            fab.record(TraceEvent(fab.now_ns, src.name, 0, "tcp sent", None, None, _seg_detail(seg)))
        if dst is None:
            return
        link = fab._links.get((src.name, dst.name))
        if link is None:
            link = fab._links[(src.name, dst.name)] = Wire()
        tx = int(size * 8 / fab.bandwidth_gbps)
        start = max(fab.now_ns, link.busy_until)
        link.busy_until = start + tx
        arrival = start + tx + fab.latency_ns
        if self.drop is not None and self.drop(src, seg):
            self.stats["lost"] += 1
            self._dropped(dst, seg, "dropped on purpose")
            return
        f = fab.faults(src.name, dst.name)
        if f is not None:
            rng = fab.rng
            if f.loss and rng.random() < f.loss:
                self.stats["lost"] += 1
                self._dropped(dst, seg, "lost")
                return
            if f.corrupt and rng.random() < f.corrupt:
                self.stats["corrupted"] += 1
                self._dropped(dst, seg, "corrupted (the TCP checksum drops it)")
                return
            if f.duplicate and rng.random() < f.duplicate:
                self.stats["duplicated"] += 1
                fab.schedule(arrival - fab.now_ns + tx, self._deliver, (dst, seg))
        fab.schedule(arrival - fab.now_ns, self._deliver, (dst, seg))

    def _dropped(self, dst: IwDevice, seg: Segment, why: str) -> None:
        fab = self.fabric
        if fab.tracing:
            fab.record(TraceEvent(fab.now_ns, dst.name, 0, "dropped", None, None, {**_seg_detail(seg), "reason": why}))

    def _deliver(self, arg: tuple[IwDevice, Segment]) -> None:
        dst, seg = arg
        self.stats["delivered"] += 1
        fab = self.fabric
        if fab.tracing:
            fab.record(TraceEvent(fab.now_ns, dst.name, 0, "tcp received", None, None, _seg_detail(seg)))
        ep = self.conns.get((seg.dst[0], seg.dst[1], seg.src[0], seg.src[1]))
        if ep is not None:
            ep.on_segment(seg)
            return
        if seg.flags & SYN and not seg.flags & ACK:
            on_accept = self.listeners.get(seg.dst) or self.listeners.get(("0.0.0.0", seg.dst[1]))
            if on_accept is not None:
                ep = TcpEndpoint(self, dst, seg.dst, seg.src)
                ep.on_accept = on_accept
                ep.state = "syn_rcvd"
                ep.rcv_nxt = seg.seq + 1
                ep.peer_window = seg.window
                if seg.mss:
                    ep.mss = min(ep.mss, seg.mss)
                self.conns[(seg.dst[0], seg.dst[1], seg.src[0], seg.src[1])] = ep
                ep._send(SYN | ACK, ep.iss)
                ep._arm_rto()
                return
        if not seg.flags & RST:  # nobody has this connection or port: reset
            ack = seg.seq + len(seg.data) + (1 if seg.flags & (SYN | FIN) else 0)
            self.carry(dst, Segment(seg.dst, seg.src, seg.ack if seg.flags & ACK else 0, ack, RST | ACK))

    def frame(self, src: IwDevice, dst: IwDevice | None, seg: Segment) -> bytes:
        """The segment as an Ethernet/IPv4/TCP frame (checksums computed), for taps; the headers are
        :mod:`rdmalab.wire.net`'s (IPv4 with DF and a running identification, TTL 64; the MSS option
        on a SYN)."""
        opts = b"\x02\x04" + seg.mss.to_bytes(2, "big") if seg.mss else b""
        self._ip_id = (self._ip_id + 1) & 0xFFFF
        ip = IPv4(total_length=40 + len(opts) + len(seg.data), identification=self._ip_id, ttl=64,
                  protocol=IPPROTO_TCP, src=int(ipaddress.IPv4Address(seg.src[0])),
                  dst=int(ipaddress.IPv4Address(seg.dst[0]))).with_checksum()
        tcp = TCP(sport=seg.src[1], dport=seg.dst[1], seq=seg.seq & SEQ_MASK, ack=seg.ack & SEQ_MASK,
                  data_offset=(20 + len(opts)) // 4, flags=seg.flags, window=min(seg.window, 0xFFFF))
        segment = tcp.encode() + opts + seg.data
        tcp = tcp.replace(checksum=tcp_checksum(ip, segment))
        eth = Ethernet(dst=dst.mac if dst is not None else 0, src=src.mac, ethertype=ETHERTYPE_IPV4)
        return eth.encode() + ip.encode() + tcp.encode() + opts + seg.data


def _seg_detail(seg: Segment) -> dict[str, Any]:
    return {"src": f"{seg.src[0]}:{seg.src[1]}", "dst": f"{seg.dst[0]}:{seg.dst[1]}", "seq": seg.seq & SEQ_MASK,
            "ack": seg.ack & SEQ_MASK, "flags": flag_names(seg.flags), "len": len(seg.data)}


def add_iwarp_device(fabric: Fabric, name: str | None = None, ip: str | None = None, mac: int | None = None,
                     *, mpa_crc: bool = False) -> IwDevice:
    """A soft iWARP device (node type RNIC, transport iWARP) on ``fabric``, carried by the fabric's TCP model.

    ``mpa_crc`` makes it ask for CRC32c in its MPA frames (siw's default is not to)."""
    name, ip, mac = fabric.new_device_address(name, ip, mac, "siw")
    tcp = SimTcp.of(fabric)
    if ip in tcp.devices:
        raise ValueError(f"address {ip} is already taken by {tcp.devices[ip].name}")
    dev = IwDevice(name, int(ipaddress.IPv4Address(ip)), mac, fabric, tcp, seed=fabric.rng.getrandbits(32),
                   mpa_crc=mpa_crc)
    fabric.attach(dev)
    tcp.devices[ip] = dev
    return dev


def iwarp_fabric(seed: int = 0, *, mpa_crc: bool = False, **kw: Any) -> Fabric:
    """A fabric with two soft iWARP devices, ``siw0`` (10.0.0.1) and ``siw1`` (10.0.0.2)."""
    fab = Fabric(seed=seed, **kw)
    add_iwarp_device(fab, "siw0", "10.0.0.1", mpa_crc=mpa_crc)
    add_iwarp_device(fab, "siw1", "10.0.0.2", mpa_crc=mpa_crc)
    return fab
