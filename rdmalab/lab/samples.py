"""Sample frames the notebooks and checkers share: one RDMA WRITE on four wires.

Everything is built with rdmalab's own encoders (:func:`rdmalab.wire.encode_ib`,
:func:`~rdmalab.wire.encode_rocev1`, :func:`~rdmalab.wire.encode_rocev2`,
:func:`rdmalab.wire.iwarp.encode_fpdu`) and decoded back with its decoders, so the notebook
shows real encoder output, not hand-made bytes.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from rdmalab.wire.frame import decode_ethernet, decode_ib, encode_rocev1, encode_rocev2, encode_tcp_frame
from rdmalab.wire.ib import BTH, GRH, LRH, RETH
from rdmalab.wire.iwarp import decode_fpdu, encode_fpdu, rdma_write
from rdmalab.wire.net import ROCEV2_PORT
from rdmalab.wire.opcodes import Op, Pos, Transport, find_opcode
from rdmalab.wire.packet import Packet, encode_ib

PAYLOAD = b"Hello, RDMA!"
VA = 0x7F00_0000_1000
RKEY = 0x0000_4242
QPN = 0x000011
PSN = 0x000100
SRC_IP, DST_IP = "192.168.1.1", "192.168.1.2"


def _gid(ip: str) -> int:
    return int(ipaddress.IPv6Address(f"::ffff:{ip}"))


def iwarp_frame(fpdu: bytes, *, seq: int = 1, src_port: int = 40000, dst_port: int = ROCEV2_PORT + 1) -> bytes:
    """An Ethernet/IPv4/TCP frame carrying ``fpdu`` (checksums filled in); by default to a port next to
    RoCEv2's (any TCP port carries iWARP)."""
    return encode_tcp_frame(fpdu, src_ip=SRC_IP, dst_ip=DST_IP, src_port=src_port, dst_port=dst_port, seq=seq)


@dataclass
class Wire:
    name: str  # "Native IB", "RoCEv1", "RoCEv2", "iWARP"
    kind: str  # ib, rocev1, rocev2, iwarp
    frame: bytes  # what is on the wire (for IB: LRH .. VCRC)
    packet: Packet  # the decoded RDMA packet (for iWARP: the FPDU)
    outer: Packet | None = None  # for iWARP: the Ethernet/IP/TCP frame around the FPDU


def one_write(payload: bytes = PAYLOAD, *, va: int = VA, rkey: int = RKEY, qpn: int = QPN, psn: int = PSN) -> list[Wire]:
    """The same RDMA WRITE (``payload`` to ``va``/``rkey``) on native IB, RoCEv1, RoCEv2 and iWARP."""

    bth = BTH(opcode=find_opcode(Transport.RC, Op.RDMA_WRITE, Pos.ONLY), destqp=qpn, psn=psn, ackreq=1)
    reth = RETH(va=va, r_key=rkey, dma_length=len(payload))
    ib = encode_ib(bth, [reth], payload, lrh=LRH(sl=0, dlid=0x0002, slid=0x0001))
    v1 = encode_rocev1(bth, [reth], payload, grh=GRH(sgid=_gid(SRC_IP), dgid=_gid(DST_IP), hoplmt=64))
    v2 = encode_rocev2(bth, [reth], payload, src_ip=SRC_IP, dst_ip=DST_IP)
    fpdu = encode_fpdu(rdma_write(rkey, va, payload))
    iw = iwarp_frame(fpdu)
    outer = decode_ethernet(iw)
    return [
        Wire("Native IB", "ib", ib, decode_ib(ib)),
        Wire("RoCEv1", "rocev1", v1, decode_ethernet(v1)),
        Wire("RoCEv2", "rocev2", v2, decode_ethernet(v2)),
        Wire("iWARP", "iwarp", iw, decode_fpdu(fpdu)[0], outer),
    ]


def mystery_frames() -> list[tuple[str, bytes]]:
    """The four frames of the 'which wire is which' exercise, in a fixed shuffled order."""
    wires = {w.kind: w.frame for w in one_write(b"guess me", va=0x2000, rkey=0x77, psn=9)}
    order = ["rocev2", "iwarp", "ib", "rocev1"]
    return [(k, wires[k]) for k in order]
