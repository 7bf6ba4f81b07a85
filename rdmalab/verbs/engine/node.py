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
from collections.abc import Callable
from typing import Any

from rdmalab.verbs import enums as e
from rdmalab.verbs.engine import cnp
from rdmalab.verbs.engine.carrier import Carrier, Datagram, Scheduler, TimerHandle
from rdmalab.verbs.engine.packet import ACK_OPCODE, INFO, MCAST_QPN, Pkt, ack_packet, from_datagram, from_frame
from rdmalab.verbs.engine.trace import TraceEvent
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
        #: the port's link layer (``IBV_LINK_LAYER_*``): Ethernet (RoCE) unless an InfiniBand carrier
        #: (rdmalab.fabric.ibfabric) makes it InfiniBand, with the port's ``lid`` and its SM's ``sm_lid``
        self.link_layer: int = e.IBV_LINK_LAYER_ETHERNET
        self.lid = 0
        self.sm_lid = 0
        #: what ``ibv_query_gid_type`` answers for its GIDs: RoCEv2 unless the carrier sends RoCEv1 or IB
        self.gid_type: int = e.IBV_GID_TYPE_ROCE_V2
        self.rng = random.Random(seed)
        self.qps: dict[int, Any] = {}
        self.mrs: dict[int, Any] = {}
        self._next_qpn = 0x11  # rxe: QP pool indices from 16; the GSI QP takes one, users start at 0x11
        self._next_mr = 1
        #: the QPs holding back an ACK until flush() (see mark_dirty); a carrier that flushes every device
        #: after each instant may offer one set for all its devices (``carrier.held_acks``), so that it
        #: finds out whether any device holds an ACK with one look instead of a look at each device
        shared: set[Any] | None = getattr(carrier, "held_acks", None)
        self.held_acks: set[Any] = set() if shared is None else shared
        #: the carrier's lane for plain ACKs, if it has one: ``send_ack(station, fields)`` carries an ACK
        #: given as ``(dqpn, psn, msn, sgid, dgid, sport, smac, dmac, sqpn)`` without a Pkt and returns True,
        #: or returns False (lane closed: a tap, a fault, frames...) and the responder sends a Pkt
        self.ack_lane: Callable[[Any, tuple[int, ...]], bool] | None = getattr(carrier, "send_ack", None)
        #: where QP numbers come from when other processes share the device (else 0x11, 0x12, ...)
        self.qpn_source: Callable[[], int] | None = None
        self._gsi: Any = None
        #: multicast GID -> the UD QPs attached to it (ibv_attach_mcast)
        self.mcast: dict[int, list[Any]] = {}
        #: the NIC cost model's state for this device (:class:`rdmalab.verbs.engine.nicmodel.Nic`), or None:
        #: no model, posting and completing cost no virtual time (``nicmodel.attach``, ``Fabric(nic=...)``)
        self.nic: Any = None
        self.counters = {"rcvd_pkts": 0, "sent_pkts": 0, "dropped": 0, "duplicate_request": 0,
                         "out_of_seq_request": 0, "rcvd_rnr_err": 0, "send_rnr_err": 0, "rcvd_seq_err": 0,
                         "retry_exceeded_err": 0, "retry_rnr_exceeded_err": 0, "completer_retry_err": 0}

    @property
    def gsi(self) -> Any:
        """QP1, the GSI: the device's connection manager answers CM MADs (:mod:`rdmalab.verbs.engine.ibcm`).
        Made on first use (a MAD arriving, a CMID binding): the CM's codecs are not loaded by programs
        that never connect through it (the live tools' start-up)."""
        if self._gsi is None:
            from rdmalab.verbs.engine.ibcm import GSI  # lazy: a program that never connects does not load the CM

            self._gsi = GSI(self)
            self.qps[1] = self._gsi
        return self._gsi

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
        if self.qpn_source is not None:  # a device several processes share (rdmalab.fabric.shared)
            qpn = self.qpn_source()
        else:
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
        """``qp`` holds back an ACK for coalescing: :meth:`flush` sends it (a carrier may skip
        ``flush`` while ``held_acks`` is empty)."""
        self.held_acks.add(qp)

    def flush(self) -> None:
        """Send the ACKs held back for coalescing (the fabric calls this after each time step)."""
        dirty = self.held_acks
        if not dirty:
            return
        if len(dirty) == 1:  # the usual case: one QP has an ACK held back
            qp = dirty.pop()
            if qp.dev is self:
                qp.flush_ack()
            else:  # another device's, in the set its carrier shares
                dirty.add(qp)
            return
        qps = sorted((q for q in dirty if q.dev is self), key=lambda q: q.qp_num)
        dirty.difference_update(qps)
        for qp in qps:
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
            self.discard("bad ICRC or malformed frame")
            return
        self.receive(pkt)

    def discard(self, reason: str) -> None:
        """Something arrived that is no packet of ours (malformed, or its ICRC is bad: rxe drops those
        silently, ``rxe_icrc.c``): counted as dropped, and traced with ``reason``."""
        self.counters["dropped"] += 1
        if self.carrier.tracing:
            self.trace(0, "dropped", reason=reason)

    def drop(self, pkt: Pkt, reason: str) -> None:
        """``pkt`` is dropped here: counted, and traced with ``reason``."""
        self.counters["dropped"] += pkt.count
        if self.carrier.tracing:
            self.trace(pkt.destqp, "dropped", pkt.psn, pkt.opcode, packet_id=pkt.id, reason=reason)

    def receive_segment(self, destqp: int, code: int, psn: int, ackreq: int, src_gid: int, dst_gid: int,
                        data: Any, reth: tuple[int, int, int] | None = None) -> bool:
        """The fast path for a carrier that has a packet's fields but no :class:`Pkt`: one packet of
        an RC/UC RDMA WRITE or SEND (``code`` in :data:`~rdmalab.verbs.engine.packet.SEGMENT`), its
        payload ``data`` (which the carrier may reuse once this returns) and a WRITE's RETH as
        ``(va, r_key, dma_length)``.  It does what :meth:`receive` would do when the packet is the
        next one expected and every check passes; otherwise it changes nothing and returns False,
        and the carrier hands the packet to :meth:`receive` (which NAKs, drops or traces it).
        It records no trace event: a carrier that calls it while tracing records the "received" event
        that :meth:`receive` would have (the simulated fabric's ``Fabric._part`` does)."""
        qp = self.qps.get(destqp)
        if qp is None or not qp.segment(code, psn, ackreq, src_gid, dst_gid, data, reth):
            return False
        self.counters["rcvd_pkts"] += 1
        return True

    def receive_ack(self, fields: tuple[int, ...]) -> None:
        """A plain ACK (AETH syndrome ACK) that a carrier's ACK lane (:attr:`ack_lane`) carried as its
        fields ``(dqpn, psn, msn, sgid, dgid, sport, smac, dmac, sqpn)`` and, when the carrier traced
        its sending, a tenth: the packet id of its "sent" event.  The fast path does what
        :meth:`receive` would do with it when every check passes and the completer takes it
        (``QPCore.ack``), the "received" event included while tracing (only for an ACK traced when
        it was sent); anything else is built into its :class:`Pkt` (with that packet id) and
        received as any packet."""
        dqpn, psn, _, sgid, dgid = fields[:5]
        qp = self.qps.get(dqpn)
        if qp is not None and dgid == qp.sgid and sgid == qp.dgid and dgid in self.gids:
            carrier = self.carrier
            if not carrier.tracing:
                if qp.ack(psn):
                    self.counters["rcvd_pkts"] += 1
                    return
            elif len(fields) == 10 and qp.takes_acks():
                self.counters["rcvd_pkts"] += 1
                carrier.record(TraceEvent(carrier.now_ns, self.name, qp.qp_num, "received", psn, ACK_OPCODE,
                                          {"packet_id": fields[9], "len": 0}))
                qp.ack(psn)
                return
        pkt = ack_packet(fields[:9])
        if len(fields) > 9:
            pkt.id = fields[9]  # the id of its "sent" event
        self.receive(pkt)

    def attach_mcast(self, mgid: int, qp: Any) -> None:
        """``ibv_attach_mcast``: UD packets to QP 0xFFFFFF and ``mgid`` reach ``qp`` (each attached QP
        gets its own copy, as rxe's ``rxe_rcv_mcast_pkt``)."""
        qps = self.mcast.setdefault(mgid, [])
        if qp not in qps:
            qps.append(qp)

    def detach_mcast(self, mgid: int, qp: Any) -> bool:
        qps = self.mcast.get(mgid, [])
        if qp not in qps:
            return False
        qps.remove(qp)
        if not qps:
            del self.mcast[mgid]
        return True

    def _receive_mcast(self, pkt: Pkt) -> None:
        qps = self.mcast.get(pkt.dst_gid)
        if not qps:
            self.drop(pkt, "multicast to a group no QP of this device is attached to")
            return
        for qp in list(qps):
            if TRANSPORT.get(qp.qp_type) != INFO[pkt.opcode].transport:
                continue
            self.counters["rcvd_pkts"] += 1
            if self.carrier.tracing:
                self.carrier.record(TraceEvent(self.carrier.now_ns, self.name, qp.qp_num, "received", pkt.psn,
                                               pkt.opcode, {"packet_id": pkt.id, "len": len(pkt.payload)}))
            qp.on_request(pkt)

    def receive(self, pkt: Pkt) -> None:
        qp = self.qps.get(pkt.destqp)
        if qp is None:
            qp = self._receive_unknown(pkt)
            if qp is None:
                return
        code = pkt.opcode
        if code == CNP_OPCODE:  # DCQCN: a CNP for this sender QP feeds its rate limiter
            cnp.on_cnp(self, qp, pkt)
            return
        info = INFO[code]
        if TRANSPORT.get(qp.qp_type) != info.transport:
            self.drop(pkt, "opcode transport does not match the QP type")
            return
        dst = pkt.dst_gid
        if dst not in self.gids:
            self.drop(pkt, "destination IP is not one of this device's GIDs")
            return
        if qp.qp_type != e.IBV_QPT_UD and (dst != qp.sgid or pkt.src_gid != qp.dgid):
            self.drop(pkt, "address check: IP source/destination do not match the QP's path")
            return
        self.counters["rcvd_pkts"] += pkt.count
        carrier = self.carrier
        if carrier.tracing:  # self.trace(...), spelled out: this runs for every packet received
            carrier.record(TraceEvent(carrier.now_ns, self.name, qp.qp_num, "received", pkt.psn, code,
                                      {"packet_id": pkt.id, "len": len(pkt.payload)}))
        if info.is_request:
            qp.on_request(pkt)
        else:
            qp.on_response(pkt)

    def _receive_unknown(self, pkt: Pkt) -> Any:
        """A packet for a QP number not in ``qps``: QP1 (the GSI, made on first use) is returned;
        multicast is delivered to the attached QPs, anything else dropped (both return None)."""
        if pkt.destqp == 1:
            return self.gsi
        if pkt.destqp == MCAST_QPN:
            self._receive_mcast(pkt)
        else:
            self.drop(pkt, f"no QP {pkt.destqp:#x}")
        return None
