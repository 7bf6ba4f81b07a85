"""A soft RoCEv2 device: the QPs and MRs of one node, and the checks on arriving packets.

``receive`` applies the checks rxe's ``rxe_rcv``/``hdr_check`` applies (``rxe_recv.c``, reference
section 1.4), in order: a known destination QP, an opcode whose transport matches the QP type,
the RC/UC address check (IP destination = the QP's SGID, IP source = its DGID), then hands
requests to the responder and ACKs/responses to the completer.  Frames that arrive as bytes
are decoded and their ICRC checked first; a bad ICRC is dropped silently, as rxe does.

A device sits on a carrier (:class:`rdmalab.verbs.engine.carrier.Carrier`), which it uses for
everything outside the engine: sending, the clock and timers, neighbour resolution and the
trace.  Carriers call back through :class:`~rdmalab.verbs.engine.carrier.Station`:
``deliver`` (a datagram), ``receive_frame`` (a frame), ``receive`` (a packet object) and ``flush``.
"""

from __future__ import annotations

import random
from typing import Any

from rdmalab.verbs import enums as e
from rdmalab.verbs.engine import cnp
from rdmalab.verbs.engine.carrier import Carrier, Datagram, Scheduler, TimerHandle
from rdmalab.verbs.engine.cm import GSI
from rdmalab.verbs.engine.packet import INFO, Pkt, from_datagram, from_frame
from rdmalab.verbs.trace import TraceEvent
from rdmalab.wire.opcodes import CNP_OPCODE, Transport

TRANSPORT = {e.IBV_QPT_RC: Transport.RC, e.IBV_QPT_UC: Transport.UC, e.IBV_QPT_UD: Transport.UD}


def eui64_gid(mac: int) -> int:
    """fe80::/64 with the modified EUI-64 of ``mac`` (what ib_core puts at GID index 0)."""
    b = mac.to_bytes(6, "big")
    eui = bytes([b[0] ^ 0x02]) + b[1:3] + b"\xff\xfe" + b[3:]
    return (0xFE80 << 112) | int.from_bytes(eui, "big")


class SoftDevice:
    """One node on a fabric: name, MAC, GIDs (0: link-local, 1: ``::ffff:<ipv4>``), QPs and MRs."""

    def __init__(self, name: str, ipv4: int, mac: int, carrier: Carrier, seed: int = 0) -> None:
        self.name = name
        self.ipv4 = ipv4
        self.mac = mac
        self.carrier = carrier
        #: the network interface the device sends on (rxe's netdev), when its carrier has one
        self.ifname: str | None = None
        self.gids = [eui64_gid(mac), 0xFFFF00000000 | ipv4]
        self.rng = random.Random(seed)
        self.qps: dict[int, Any] = {}
        self.mrs: dict[int, Any] = {}
        self._next_qpn = 0x11  # rxe: QP pool indices from 16; the GSI QP takes one, users start at 0x11
        self._next_mr = 1
        self._dirty: set[Any] = set()
        #: QP1, the GSI: the device's connection manager answers CM MADs (rdmalab.verbs.engine.cm)
        self.gsi = GSI(self)
        self.qps[1] = self.gsi
        self.counters = {"rcvd_pkts": 0, "sent_pkts": 0, "dropped": 0, "duplicate_request": 0,
                         "out_of_seq_request": 0, "rcvd_rnr_err": 0, "send_rnr_err": 0, "rcvd_seq_err": 0,
                         "retry_exceeded_err": 0, "retry_rnr_exceeded_err": 0, "completer_retry_err": 0}

    # ------------------------------------------------------------------ resources
    @property
    def active_mtu(self) -> int:
        return self.carrier.mtu

    @property
    def burst_ok(self) -> bool:
        """Whether the carrier takes bursts now (see :mod:`rdmalab.verbs.engine.packet`)."""
        return self.carrier.burst_ok

    def resolve_mac(self, gid: int) -> int | None:
        return self.carrier.resolve_mac(gid)

    def alloc_qpn(self, qp: Any) -> int:
        qpn = self._next_qpn
        self._next_qpn += 1
        self.qps[qpn] = qp
        return qpn

    def alloc_mr_keys(self, mr: Any) -> tuple[int, int]:
        idx = self._next_mr
        self._next_mr += 1
        self.mrs[idx] = mr
        lk = self.rng.randrange(256)
        rk = (lk + 1 + self.rng.randrange(255)) & 0xFF  # never equal to lk
        return (idx << 8) | lk, (idx << 8) | rk

    # ------------------------------------------------------------------ time
    @property
    def now(self) -> int:
        return self.carrier.now_ns

    def schedule(self, delay_ns: int, fn: Any, arg: Any = None) -> TimerHandle:
        return self.carrier.call_later(delay_ns, fn, arg)

    @property
    def scheduler(self) -> Scheduler:
        """The event loop that advances this device (its carrier's)."""
        return self.carrier.scheduler

    @property
    def tracing(self) -> bool:
        return self.carrier.tracing

    def trace(self, qpn: int, kind: str, psn: int | None = None, opcode: int | None = None, **detail: Any) -> None:
        self.carrier.record(TraceEvent(self.carrier.now_ns, self.name, qpn, kind, psn, opcode, detail))

    # ------------------------------------------------------------------ packets
    def transmit(self, pkt: Pkt) -> None:
        self.counters["sent_pkts"] += pkt.count
        self.carrier.send(self, pkt)

    def mark_dirty(self, qp: Any) -> None:
        self._dirty.add(qp)

    def flush(self) -> None:
        """Send the ACKs held back for coalescing (the fabric calls this after each time step)."""
        if self._dirty:
            dirty = sorted(self._dirty, key=lambda q: q.qp_num)
            self._dirty.clear()
            for qp in dirty:
                qp.flush_ack()

    def deliver(self, dgram: Datagram, packet_id: int | None = None) -> None:
        """A RoCEv2 datagram arrived (UDP payload and the IP/UDP fields it came with)."""
        self._arrived(from_datagram(dgram), packet_id)

    def receive_frame(self, frame: bytes, packet_id: int | None = None) -> None:
        """A packet that crossed the carrier as an Ethernet frame; ``packet_id`` keeps the
        sender's id, so that the trace can pair the "received" event with its "sent" one."""
        self._arrived(from_frame(frame), packet_id)

    def _arrived(self, pkt: Pkt | None, packet_id: int | None) -> None:
        if pkt is not None and packet_id is not None:
            pkt.id = packet_id
        if pkt is None:
            self.counters["dropped"] += 1
            if self.tracing:
                self.trace(0, "dropped", reason="bad ICRC or malformed frame")
            return
        self.receive(pkt)

    def _drop(self, pkt: Pkt, reason: str) -> None:
        self.counters["dropped"] += pkt.count
        if self.tracing:
            self.trace(pkt.destqp, "dropped", pkt.psn, pkt.opcode, packet_id=pkt.id, reason=reason)

    def receive_segment(self, destqp: int, code: int, psn: int, ackreq: int, src_gid: int, dst_gid: int,
                        data: Any, reth: tuple[int, int, int] | None = None) -> bool:
        """The fast path for a carrier that has a packet's fields but no :class:`Pkt`: one packet of
        an RC/UC RDMA WRITE or SEND (``code`` in :data:`~rdmalab.verbs.engine.packet.SEGMENT`), its
        payload ``data`` (which the carrier may reuse once this returns) and a WRITE's RETH as
        ``(va, r_key, dma_length)``.  It does what :meth:`receive` would do when the packet is the
        next one expected and every check passes; otherwise it changes nothing and returns False,
        and the carrier hands the packet to :meth:`receive` (which NAKs, drops or traces it).
        Not while tracing: the trace has an event for every packet received, :meth:`receive` makes it.
        A carrier in a hurry may do the same in one call less: ``qp = device.qps.get(destqp)``,
        ``qp.segment(code, psn, ackreq, src_gid, dst_gid, data, reth)``, and add the packets taken
        to ``device.counters["rcvd_pkts"]`` (the UDP carrier does, once per batch)."""
        qp = self.qps.get(destqp)
        if qp is None or not qp.segment(code, psn, ackreq, src_gid, dst_gid, data, reth):
            return False
        self.counters["rcvd_pkts"] += 1
        return True

    def receive(self, pkt: Pkt) -> None:
        qp = self.qps.get(pkt.destqp)
        if qp is None:
            self._drop(pkt, f"no QP {pkt.destqp:#x}")
            return
        if pkt.opcode == CNP_OPCODE:  # DCQCN: a CNP for this sender QP feeds its rate limiter
            cnp.on_cnp(self, qp, pkt)
            return
        info = INFO[pkt.opcode]
        if TRANSPORT.get(qp.qp_type) != info.transport:
            self._drop(pkt, "opcode transport does not match the QP type")
            return
        if pkt.dst_gid not in self.gids:
            self._drop(pkt, "destination IP is not one of this device's GIDs")
            return
        if qp.qp_type != e.IBV_QPT_UD and (pkt.dst_gid != qp.sgid or pkt.src_gid != qp.dgid):
            self._drop(pkt, "address check: IP source/destination do not match the QP's path")
            return
        self.counters["rcvd_pkts"] += pkt.count
        if self.tracing:
            self.trace(qp.qp_num, "received", pkt.psn, pkt.opcode, packet_id=pkt.id, len=len(pkt.payload))
        if info.is_request:
            qp.on_request(pkt)
        else:
            qp.on_response(pkt)
