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

from rdmalab.wire.frame import AddressLike, encode_rocev2
from rdmalab.wire.ib import BTH, CNPPad
from rdmalab.wire.opcodes import OPCODES, Op

#: the CNP opcode, from the opcode table (0x81)
CNP_OPCODE = next(code for code, info in OPCODES.items() if info.op == Op.CNP)
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
