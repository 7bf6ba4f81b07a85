"""The engine's packets: every one is a real RoCEv2 frame, built only when someone looks.

A :class:`Pkt` carries the BTH fields, the extended headers as :mod:`rdmalab.wire` header
values, and the payload as a ``memoryview``/``bytes``.  :meth:`Pkt.frame` encodes the full
Ethernet/IPv4/UDP(4791)/BTH/.../ICRC frame with :func:`rdmalab.wire.encode_rocev2`, exactly
once and only when asked (a tap, a pcap writer, a fault that corrupts bytes).
:func:`from_frame` goes the other way, checking the ICRC as rxe does (``rxe_icrc.c``: a bad
ICRC is dropped silently).

A *burst* (``count > 1``) stands for ``count`` consecutive packets of one message, as the
requester built them: PSNs ``psn .. psn+count-1``, every packet ``mtu`` bytes except the last,
``opcode`` is the first packet's opcode and ``last_opcode`` the last's; RETH only on the first,
ImmDt/IETH and SE only on the last; AckReq on the last and on the packets listed in ``acks``.
Bursts exist only on a fault-free, untapped carrier (``burst_ok``); :meth:`Pkt.expand` and
:meth:`Pkt.sub` give its packets whenever anything needs them.
"""

from __future__ import annotations

import itertools
from typing import Any

from rdmalab.verbs.engine.datagram import V4_MAPPED, Datagram
from rdmalab.wire.errors import DecodeError
from rdmalab.wire.frame import decode_ethernet, encode_rocev2
from rdmalab.wire.header import Header
from rdmalab.wire.ib import AETH, BTH, DETH, GRH, IETH, RETH, AtomicAckETH, AtomicETH, ImmDt
from rdmalab.wire.ib import PSN_HALF as PSN_HALF  # (PSN arithmetic, IBA Vol 1 9.7.1: re-exported for the
from rdmalab.wire.ib import PSN_MASK as PSN_MASK  # engine's modules and carriers, as module-level aliases)
from rdmalab.wire.ib import psn_add as psn_add
from rdmalab.wire.ib import psn_diff as psn_diff
from rdmalab.wire.net import UDP, Ethernet, IPv4, IPv6
from rdmalab.wire.opcodes import ACK_OPCODE as ACK_OPCODE  # (re-exported: the table's RC Acknowledge)
from rdmalab.wire.opcodes import CNP_OPCODE, OPCODES, Op, OpcodeInfo, Pos, Transport, find_opcode

MCAST_QPN = 0xFFFFFF  # IBA Vol 1 9.8.1: the destination QP of every multicast packet
ROCE_OVERHEAD = 14 + 20 + 8 + 12 + 4  # Ethernet, IPv4, UDP, BTH, ICRC
_ids = itertools.count(1)
#: the next packet id (every Pkt takes one; a carrier that traces the packets of a burst without
#: building them takes theirs here, in the order Pkt.expand would)
next_id = _ids.__next__


# opcode -> OpcodeInfo, and (transport, op, pos, imm, inv) -> opcode, built from the one table
INFO: dict[int, OpcodeInfo] = OPCODES
_ATTR = {RETH: "reth", AETH: "aeth", DETH: "deth", ImmDt: "imm", IETH: "ieth", AtomicETH: "atomic",
         AtomicAckETH: "atomic_ack"}


def opcode(transport: Transport, op: Op, pos: Pos | None, imm: bool = False, inv: bool = False) -> int:
    return _OPC[(transport, op, pos, imm, inv)]


_OPC: dict[tuple[Transport, Op, Pos | None, bool, bool], int] = {}
for _info in OPCODES.values():
    if _info.transport in (Transport.RC, Transport.UC, Transport.UD):
        _OPC[(_info.transport, _info.op, _info.pos, _info.imm, _info.inv)] = _info.code
assert find_opcode(Transport.RC, Op.SEND, Pos.ONLY) == _OPC[(Transport.RC, Op.SEND, Pos.ONLY, False, False)]


# opcode -> the Pkt attributes of the extended headers it carries (a CNP's padding has none)
_ATTRS: dict[int, tuple[str, ...]] = {
    code: tuple(_ATTR[cls] for cls in info.headers if cls in _ATTR) for code, info in INFO.items()}

# The packets a carrier may hand over without a Pkt (SoftDevice.receive_segment): the FIRST,
# MIDDLE, LAST and ONLY packets of RC/UC RDMA WRITEs and the MIDDLE and LAST ones of SENDs, without
# immediate data or invalidation; of their extended headers only a WRITE's RETH.
SEGMENT: dict[int, OpcodeInfo] = {
    code: info for code, info in OPCODES.items()
    if info.transport in (Transport.RC, Transport.UC) and not info.imm and not info.inv
    and (info.op == Op.RDMA_WRITE or (info.op == Op.SEND and info.pos in (Pos.MIDDLE, Pos.LAST)))}


def middle_of(code: int) -> int:
    """The MIDDLE opcode of the operation ``code`` belongs to."""
    return _MIDDLE[code]


# opcode -> the MIDDLE opcode of its operation, for the operations that have one (SEND, WRITE, READ response)
_MIDDLE: dict[int, int] = {
    code: _OPC[(info.transport, info.op, Pos.MIDDLE, False, False)] for code, info in INFO.items()
    if (info.transport, info.op, Pos.MIDDLE, False, False) in _OPC}


class Pkt:
    """One packet (or a burst of packets, see the module docstring) between two GIDs."""

    __slots__ = ("opcode", "psn", "destqp", "ackreq", "se", "src_gid", "dst_gid", "sport", "src_mac", "dst_mac",
                 "reth", "aeth", "deth", "imm", "ieth", "atomic", "atomic_ack", "payload", "count", "last_opcode",
                 "mtu", "_frame", "id", "srcqp", "acks", "ecn", "pkey")

    def __init__(self, opcode: int, psn: int, destqp: int, src_gid: int, dst_gid: int, sport: int,
                 src_mac: int, dst_mac: int, payload: Any = b"", ackreq: int = 0, se: int = 0) -> None:
        self.opcode = opcode
        self.psn = psn
        self.destqp = destqp
        self.ackreq = ackreq
        self.se = se
        self.src_gid = src_gid
        self.dst_gid = dst_gid
        self.sport = sport
        self.src_mac = src_mac
        self.dst_mac = dst_mac
        self.payload = payload
        self.reth: RETH | None = None
        self.aeth: AETH | None = None
        self.deth: DETH | None = None
        self.imm: ImmDt | None = None
        self.ieth: IETH | None = None
        self.atomic: AtomicETH | None = None
        self.atomic_ack: AtomicAckETH | None = None
        self.count = 1
        self.last_opcode = opcode
        self.mtu = 0
        self._frame: bytes | None = None
        self.id = next(_ids)
        self.srcqp = 0  # the sending QP (engine bookkeeping for the trace; not on the wire)
        self.acks: tuple[int, ...] = ()  # burst: indices (before the last) of packets with AckReq
        self.ecn = 0  # IP ECN bits (RFC 3168): 2 = ECT(0) from a DCQCN sender, 3 = CE set by a switch
        self.pkey = 0xFFFF  # the BTH P_Key as received (the engine sends the default partition's)

    # ------------------------------------------------------------------ info
    @property
    def info(self) -> OpcodeInfo:
        return INFO[self.opcode]

    @property
    def wire_size(self) -> int:
        """Bytes on the wire (all packets of a burst), Ethernet header to ICRC."""
        info = INFO[self.opcode]
        n = len(self.payload)
        return self.count * (ROCE_OVERHEAD + info.header_size) + n + (-n % 4)

    def copy(self) -> Pkt:
        p = Pkt.__new__(Pkt)
        for name in Pkt.__slots__:
            setattr(p, name, getattr(self, name))
        p.id = next(_ids)
        return p

    # ------------------------------------------------------------------ bursts
    def expand(self) -> list[Pkt]:
        """The single packets a burst stands for (``[self]`` for a single packet)."""
        if self.count == 1:
            return [self]
        data = memoryview(self.payload)
        return [self.sub(i, data) for i in range(self.count)]

    def sub(self, i: int, data: memoryview | None = None) -> Pkt:
        """Packet ``i`` of a burst, with the headers its opcode carries (``data``: the burst's
        payload as a memoryview, if the caller has one)."""
        mtu = self.mtu
        if data is None:
            data = memoryview(self.payload)
        if 0 < i < self.count - 1:  # a MIDDLE packet: no extended header, no SE; AckReq where acks says
            p = Pkt(_MIDDLE[self.opcode], psn_add(self.psn, i), self.destqp, self.src_gid, self.dst_gid,
                    self.sport, self.src_mac, self.dst_mac, data[i * mtu:(i + 1) * mtu], 1 if i in self.acks else 0)
            p.srcqp = self.srcqp
            p.ecn = self.ecn
            return p
        last = i == self.count - 1
        code = self.last_opcode if last else self.opcode
        p = Pkt(code, psn_add(self.psn, i), self.destqp, self.src_gid, self.dst_gid, self.sport,
                self.src_mac, self.dst_mac, data[i * mtu:(i + 1) * mtu],
                self.ackreq if last else int(i in self.acks), self.se if last else 0)
        p.srcqp = self.srcqp
        p.ecn = self.ecn
        for attr in _ATTRS[code]:
            setattr(p, attr, getattr(self, attr))
        return p

    # ------------------------------------------------------------------ frames
    def headers(self) -> tuple[Header, ...]:
        out = []
        for cls in INFO[self.opcode].headers:
            attr = _ATTR.get(cls)  # a CNP's reserved bytes (CNPPad) have no attribute: zeros
            h = getattr(self, attr) if attr is not None else None
            out.append(h if h is not None else cls())
        return tuple(out)

    def frame(self) -> bytes:
        """The complete RoCEv2 Ethernet frame, ICRC included (built once, then cached)."""
        if self.count != 1:
            raise ValueError("a burst has no single frame; expand() it first")
        if self._frame is None:
            bth = BTH(opcode=self.opcode, se=self.se, destqp=self.destqp, ackreq=self.ackreq, psn=self.psn,
                      becn=int(self.opcode == CNP_OPCODE))  # a CNP sets BECN (RoCEv2 annex A17.9.3)
            src, dst = self.src_gid, self.dst_gid
            v4 = (src >> 32) == 0xFFFF and (dst >> 32) == 0xFFFF
            self._frame = encode_rocev2(
                bth, self.headers(), bytes(self.payload),
                src_ip=src & 0xFFFFFFFF if v4 else src, dst_ip=dst & 0xFFFFFFFF if v4 else dst,
                ipv6=not v4, src_port=self.sport, src_mac=self.src_mac, dst_mac=self.dst_mac, ecn=self.ecn)
        return self._frame

    def datagram(self) -> Datagram:
        """This packet as a UDP payload (BTH..ICRC) with the IP/UDP fields the ICRC covers."""
        frame = self.frame()
        v4 = (self.src_gid >> 32) == 0xFFFF and (self.dst_gid >> 32) == 0xFFFF
        start = 14 + (20 if v4 else 40) + 8
        # the fields encode_rocev2 used in frame(): IP id 0, TOS = the ECN bits, TTL 64, DF set (as rxe)
        return Datagram(frame[start:], self.src_gid, self.dst_gid, self.sport, tos=self.ecn)

    def __repr__(self) -> str:
        extra = f" x{self.count}" if self.count > 1 else ""
        return f"<Pkt {INFO[self.opcode].name} psn={self.psn} dqp={self.destqp:#x}{extra} len={len(self.payload)}>"


def ack_packet(fields: tuple[int, ...]) -> Pkt:
    """A plain ACK (AETH syndrome ACK) from its fields ``(dqpn, psn, msn, sgid, dgid, sport, smac,
    dmac, sqpn)``: what the responder sends, and what an ACK lane carries instead of the packet
    (``SoftDevice.ack_lane``, ``SoftDevice.receive_ack``)."""
    dqpn, psn, msn, sgid, dgid, sport, smac, dmac, sqpn = fields
    p = Pkt(ACK_OPCODE, psn, dqpn, sgid, dgid, sport, smac, dmac)
    p.srcqp = sqpn
    p.aeth = AETH.ack(msn)
    return p


def from_frame(frame: bytes) -> Pkt | None:
    """Decode a RoCEv2 frame (or a RoCEv1 one: EtherType 0x8915, the GIDs from its GRH) into a
    :class:`Pkt`; ``None`` if it is malformed or its ICRC is bad."""
    try:
        d = decode_ethernet(frame)
    except DecodeError:
        return None
    bth = d.bth
    if d.encap not in ("rocev2", "rocev1") or bth is None or d.crc_status != "good" or bth.opcode not in INFO:
        return None
    eth = d[Ethernet]
    ip4 = d.get(IPv4)
    if d.encap == "rocev1":
        grh = d[GRH]
        p = Pkt(bth.opcode, bth.psn, bth.destqp, grh.sgid, grh.dgid, 0, eth.src, eth.dst, d.payload, bth.ackreq, bth.se)
        for layer in d.layers:
            attr = _ATTR.get(type(layer.header))
            if attr is not None:
                setattr(p, attr, layer.header)
        p.pkey = bth.p_key
        p._frame = bytes(frame)
        return p
    if ip4 is not None:
        src, dst = V4_MAPPED | ip4.src, V4_MAPPED | ip4.dst
    else:
        ip6 = d[IPv6]
        src, dst = ip6.src, ip6.dst
    p = Pkt(bth.opcode, bth.psn, bth.destqp, src, dst, d[UDP].sport, eth.src, eth.dst, d.payload, bth.ackreq, bth.se)
    for layer in d.layers:
        attr = _ATTR.get(type(layer.header))
        if attr is not None:
            setattr(p, attr, layer.header)
    p.ecn = ip4.ecn if ip4 is not None else d[IPv6].tclass & 3
    p.pkey = bth.p_key
    p._frame = bytes(frame)
    return p


def from_datagram(dgram: Datagram, src_mac: int = 0, dst_mac: int = 0) -> Pkt | None:
    """Decode a :class:`Datagram` into a :class:`Pkt`; ``None`` if malformed or its ICRC is bad."""
    return from_frame(dgram.frame(src_mac, dst_mac))
