"""DCQCN's notification point: when CE-marked data arrives, send a CNP back, paced.

A RoCEv2 receiver that gets a data packet whose IP ECN field is CE (``0b11``, RFC 3168) answers
with a Congestion Notification Packet (IBA RoCEv2 Annex A17.9.3): BTH opcode 0x81 (the opcode
table's CNP entry), BECN set, DestQP = the QP of the *sender* of the marked packet (so its
reaction point finds the flow), PSN 0, 16 reserved bytes, then the ICRC.  mlx5 sends it with
DSCP 48 and PCP 6 (``cnp_dscp``/``cnp_802p_prio``; reference A1b) and ECN ECT(0), as the
ConnectX-4 Lx CNP in ``captures/public_hw_byte_vectors.pcap`` shows.

CNPs are paced by ``min_time_between_cnps``: after a CNP, no other CNP goes out *in the same
scope* for that long.  NICs differ in the scope (Lumina's ``CNPCheck`` tests three): per QP
(``"qp"``, the DCQCN paper's per-flow NP), per IP pair (``"ip_pair"``) and per port
(``"port"``, as the mlx5 kernel patch words ``np_min_time_between_cnps``).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from rdmalab.verbs.engine.packet import Pkt
from rdmalab.wire.frame import AddressLike, encode_rocev2
from rdmalab.wire.ib import BTH, CNPPad
from rdmalab.wire.opcodes import CNP_OPCODE

CE = 0b11
ECT0 = 0b10
SCOPES = ("qp", "ip_pair", "port")
CNP_DSCP = 48  # mlx5 np_cnp_dscp default
CNP_PCP = 6  # mlx5 np_cnp_prio default


def cnp_bth(sender_qpn: int, pkey: int = 0xFFFF) -> BTH:
    """The BTH of a CNP addressed to the sender's QP."""
    return BTH(opcode=CNP_OPCODE, p_key=pkey, destqp=sender_qpn, becn=1, psn=0)


def cnp_frame(sender_qpn: int, *, src_ip: AddressLike, dst_ip: AddressLike, src_mac: int = 0x020000000002,
              dst_mac: int = 0x020000000001, src_port: int = 49152, dscp: int = CNP_DSCP, ecn: int = ECT0) -> bytes:
    """A complete CNP frame from the notification point (``src_ip``) to the sender (``dst_ip``)."""
    return encode_rocev2(cnp_bth(sender_qpn), [CNPPad()], src_ip=src_ip, dst_ip=dst_ip, src_mac=src_mac,
                         dst_mac=dst_mac, src_port=src_port, dscp=dscp, ecn=ecn)


class CnpPacer:
    """Decides whether a CE-marked arrival produces a CNP, given the pacing scope.

    ``min_gap_ns`` is ``min_time_between_cnps`` in ns (0: a CNP for every marked packet).
    """

    __slots__ = ("min_gap_ns", "scope", "_last", "sent", "suppressed")

    def __init__(self, min_gap_ns: int, scope: str = "qp") -> None:
        if scope not in SCOPES:
            raise ValueError(f"CNP pacing scope must be one of {', '.join(SCOPES)}, not {scope!r}")
        self.min_gap_ns = min_gap_ns
        self.scope = scope
        self._last: dict[Hashable, int] = {}
        self.sent = 0
        self.suppressed = 0

    def key(self, sender_ip: int, receiver_ip: int, sender_qpn: int) -> Hashable:
        if self.scope == "qp":
            return (sender_ip, sender_qpn)
        if self.scope == "ip_pair":
            return (sender_ip, receiver_ip)
        return None

    def on_ce(self, now: int, sender_ip: int, receiver_ip: int, sender_qpn: int) -> bool:
        """A CE-marked data packet arrived: True if a CNP goes out now."""
        k = self.key(sender_ip, receiver_ip, sender_qpn)
        last = self._last.get(k)
        if last is not None and now - last < self.min_gap_ns:
            self.suppressed += 1
            return False
        self._last[k] = now
        self.sent += 1
        return True


# ---------------------------------------------------------------------------- the engine's hooks


def enable_np(dev: Any, min_time_between_cnps_us: float = 4.0, scope: str = "qp") -> CnpPacer:
    """Make soft device ``dev`` a notification point: CE-marked requests are answered with CNPs."""
    pacer = CnpPacer(round(min_time_between_cnps_us * 1000), scope)
    dev.cnp_pacer = pacer
    return pacer


def notify(qp: Any, pkt: Any) -> None:
    """The responder of ``qp`` got a request ``pkt`` marked CE: send a CNP if the pacing allows."""
    dev = qp.dev
    dev.counters["np_ecn_marked_roce_packets"] = dev.counters.get("np_ecn_marked_roce_packets", 0) + 1
    pacer: CnpPacer | None = getattr(dev, "cnp_pacer", None)
    if pacer is None:
        return
    sender_qpn = pkt.deth.src_qp if pkt.deth is not None else qp.dest_qp_num
    if not pacer.on_ce(dev.now, pkt.src_gid, pkt.dst_gid, sender_qpn):
        return
    c = Pkt(CNP_OPCODE, 0, sender_qpn, pkt.dst_gid, pkt.src_gid, qp.sport, dev.mac, pkt.src_mac)
    c.srcqp = qp.qp_num
    dev.counters["np_cnp_sent"] = dev.counters.get("np_cnp_sent", 0) + 1
    if dev.tracing:
        dev.trace(qp.qp_num, "cnp", 0, CNP_OPCODE, to_qp=sender_qpn)
    dev.transmit(c)


def on_cnp(dev: Any, qp: Any, pkt: Any) -> None:
    """A CNP arrived for ``qp`` (the sender): feed its DCQCN limiter, if it has one."""
    dev.counters["rp_cnp_handled"] = dev.counters.get("rp_cnp_handled", 0) + 1
    lim = getattr(qp, "dcqcn", None)
    if lim is not None:
        lim.on_cnp(dev.now)
