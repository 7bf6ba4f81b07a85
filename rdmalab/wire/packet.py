"""Whole packets: a decoded frame as an ordered list of headers, payload and trailer.

:class:`Packet` is what every decoder returns, for RoCEv1, RoCEv2, native IB and (from
:mod:`rdmalab.wire.iwarp`) iWARP.  Decoding is strict by default: the first problem raises a
:class:`~rdmalab.wire.errors.DecodeError`.  With ``lenient=True`` the decoder keeps going as far
as it can and records each problem in ``Packet.problems``, so one bad frame never stops a
capture.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from rdmalab.wire import crc as _crc
from rdmalab.wire.errors import DecodeError, EncodeError, MalformedError, TruncatedError
from rdmalab.wire.header import Header, Span
from rdmalab.wire.ib import AETH, BTH, DETH, GRH, LNH_IBA_GLOBAL, LNH_IBA_LOCAL, LRH, RETH, AtomicETH, ImmDt
from rdmalab.wire.mpa import MPAMarker
from rdmalab.wire.opcodes import OPCODES, opcode_name

if TYPE_CHECKING:
    from rdmalab.wire.net import EthernetTrailer

H = TypeVar("H", bound=Header)


@dataclass(frozen=True, slots=True)
class Layer:
    """A decoded header and the byte offset where it starts in ``Packet.data``."""

    header: Header
    offset: int

    @property
    def name(self) -> str:
        return self.header.LAYOUT.name

    @property
    def end(self) -> int:
        return self.offset + self.header.LAYOUT.size


@dataclass(frozen=True, slots=True)
class StreamPosition:
    """Where a PDU sat in its TCP stream (set by :mod:`rdmalab.capture.iwarp` on iWARP PDUs)."""

    frame: int | None  # the capture frame that completed the PDU
    frames: tuple[int, ...]  # every frame that carried part of it
    tuple4: tuple[str, int, str, int]  # (source IP, source port, destination IP, destination port)
    seq: int  # TCP sequence number of the PDU's first byte
    direction: str | None  # "initiator" or "responder" of the MPA connection (None before it is known)
    resync: bool  # found after resynchronising mid-stream
    handshake: bool = False  # both MPA frames of the connection were in the capture before it (Wireshark needs them)

    @property
    def src(self) -> str:
        return self.tuple4[0]

    @property
    def sport(self) -> int:
        return self.tuple4[1]

    @property
    def dst(self) -> str:
        return self.tuple4[2]

    @property
    def dport(self) -> int:
        return self.tuple4[3]


@dataclass(frozen=True, slots=True)
class SendMessage:
    """An RDMAP Send message of several untagged DDP segments, put together as tshark 4.0 puts it
    together (set by :mod:`rdmalab.capture.iwarp` on the FPDU that ends it): its octets and, for each
    segment, the frame that carried it and its payload's length."""

    data: bytes
    fragments: tuple[tuple[int | None, int], ...]


@dataclass
class Packet:
    """A decoded frame.

    ``encap`` is one of ``"rocev2"``, ``"rocev1"``, ``"ib"``, ``"iwarp"``, ``"pfc"``, ``"ip"``/``"eth"``
    (not RDMA).  ``crc_status`` is ``"good"``, ``"bad"`` or ``None`` (absent or not checked);
    ``crc`` is the CRC as read from the wire (little-endian value) and ``crc_expected`` what it
    should be.
    """

    data: bytes
    layers: list[Layer] = field(default_factory=list)
    encap: str = "eth"
    payload_offset: int = 0
    payload_length: int = 0
    pad: int = 0
    crc: int | None = None
    crc_expected: int | None = None
    crc_offset: int | None = None
    crc_kind: str | None = None  # "icrc" or "crc32c"
    vcrc: int | None = None
    vcrc_expected: int | None = None
    problems: list[DecodeError] = field(default_factory=list)
    # what a decoder learnt beyond the headers (each set by the decoder named)
    info: str | None = None  # the summary line of a packet without a BTH (MPA, iWARP, an unsupported link type)
    internal_error: str | None = None  # rdmalab failed on this frame (a bug): what happened (capture.reader)
    ip_fragment: bool = False  # an IPv4 fragment: its payload is not decoded (wire.frame)
    zero_length: bool = False  # an MPA FPDU with ULPDU length 0 (wire.iwarp)
    markers: list[tuple[int, MPAMarker]] | None = None  # MPA markers (wire offset, marker), stripped from data
    wire: bytes | None = None  # the FPDU's bytes as on the wire, markers included (wire.iwarp)
    private_data: bytes | None = None  # an MPA Request/Reply's private data (wire.iwarp)
    stream: StreamPosition | None = None  # where an iWARP PDU sat in its TCP stream (capture.iwarp)
    #: the datagram an ICMP or ICMPv6 error message quotes, decoded as the frame's bytes from its IP
    #: header on (wire.frame): its own layers, apart from the frame's, so that ``get`` and whatever
    #: counts a frame's headers (a RoCE packet, a TCP segment) never take the quote for the frame
    quoted: Packet | None = None
    #: where the datagram an EtherType carries ends, as its own header says (an IP datagram's length,
    #: an ARP packet's size, ...), when it says so (wire.frame); None: it takes the rest of the frame
    datagram_end: int | None = None
    #: the octets of an Ethernet frame after that datagram: padding, a trailer, the FCS (wire.frame)
    eth_trailer: EthernetTrailer | None = None
    #: a payload the capture cut (a snap length): its length on the wire, of which ``payload_length``
    #: octets were captured (wire.packet.decode_transport); None: the payload is whole
    payload_wire: int | None = None
    #: the Send message an iWARP FPDU ends, when it took several FPDUs (capture.iwarp): what tshark shows
    #: as the FPDU's ``data`` (and, with ``-x``, as "Reassembled SMB Direct")
    send_message: SendMessage | None = None

    #: the fields above that a decoder sets beyond the headers (what ``annotate_from`` copies)
    ANNOTATIONS: ClassVar[tuple[str, ...]] = ("info", "internal_error", "ip_fragment", "zero_length", "markers",
                                              "wire", "private_data", "stream", "quoted", "datagram_end",
                                              "eth_trailer", "send_message")

    def annotate_from(self, other: Packet) -> None:
        """Take ``other``'s annotations (``info``, ``markers``, ``stream``, ...) as this packet's."""
        for name in self.ANNOTATIONS:
            setattr(self, name, getattr(other, name))

    # ---------------------------------------------------------------- access
    def get(self, cls: type[H]) -> H | None:
        for layer in self.layers:
            if isinstance(layer.header, cls):
                return layer.header
        return None

    def __getitem__(self, cls: type[H]) -> H:
        h = self.get(cls)
        if h is None:
            raise KeyError(f"packet has no {cls.LAYOUT.name} header")
        return h

    def __contains__(self, cls: object) -> bool:
        return isinstance(cls, type) and any(isinstance(layer.header, cls) for layer in self.layers)

    def headers(self) -> Iterator[Header]:
        for layer in self.layers:
            yield layer.header

    @property
    def payload(self) -> bytes:
        return self.data[self.payload_offset : self.payload_offset + self.payload_length]

    @property
    def bth(self) -> BTH | None:
        return self.get(BTH)

    @property
    def opcode_name(self) -> str | None:
        bth = self.bth
        return None if bth is None else opcode_name(bth.opcode)

    @property
    def crc_status(self) -> str | None:
        if self.crc is None or self.crc_expected is None:
            return None
        return "good" if self.crc == self.crc_expected else "bad"

    @property
    def vcrc_status(self) -> str | None:
        if self.vcrc is None or self.vcrc_expected is None:
            return None
        return "good" if self.vcrc == self.vcrc_expected else "bad"

    @property
    def ok(self) -> bool:
        return not self.problems and self.crc_status != "bad" and self.vcrc_status != "bad"

    def spans(self) -> list[Span]:
        """Every field's byte span, for coloured hex dumps; payload and trailer included."""
        out: list[Span] = []
        for layer in self.layers:
            out.extend(layer.header.spans(layer.offset))
        if self.payload_length:
            out.append(Span("Payload", "data", self.payload_offset, self.payload_offset + self.payload_length,
                            0, self.payload_length * 8, None, f"{self.payload_length} bytes", None))
        if self.pad:
            start = self.payload_offset + self.payload_length
            out.append(Span("Pad", "pad", start, start + self.pad, 0, self.pad * 8, None, f"{self.pad} bytes", None))
        if self.crc_offset is not None and self.crc is not None:
            name = "ICRC" if self.crc_kind == "icrc" else "CRC32c"
            status = self.crc_status or "unchecked"
            out.append(Span(name, "crc", self.crc_offset, self.crc_offset + 4, 0, 32, self.crc,
                            f"{self.crc.to_bytes(4, 'little').hex()} ({status})", None))
            if self.vcrc is not None:
                out.append(Span("VCRC", "vcrc", self.crc_offset + 4, self.crc_offset + 6, 0, 16, self.vcrc,
                                f"{self.vcrc.to_bytes(2, 'little').hex()} ({self.vcrc_status or 'unchecked'})", None))
        return out

    def payload_text(self) -> str | None:
        """The payload's size as a summary line shows it: ``payload=N``, or ``payload=N (C captured)`` when a
        snap length cut it (:attr:`payload_wire`); None without payload."""
        if self.payload_wire is not None:
            return f"payload={self.payload_wire} ({self.payload_length} captured)"
        return f"payload={self.payload_length}" if self.payload_length else None

    def summary(self) -> str:
        """One line: what a packet list shows (tshark's Info column, in our words)."""
        # the first header of each class, as self.get finds it (no header class here subclasses another)
        get: Any = {type(la.header): la.header for la in reversed(self.layers)}.get
        bth = get(BTH)
        if bth is None:
            if self.info is not None:
                return self.info
            names = [layer.name for layer in self.layers if not layer.header.PSEUDO]
            return " / ".join(names) + (f" ({self.payload_length} bytes)" if self.payload_length else "")
        parts = [f"{opcode_name(bth.opcode)} QP=0x{bth.destqp:06x} PSN={bth.psn}"]
        if bth.ackreq or bth.se or bth.fecn or bth.becn:
            parts += [word for flag, word in ((bth.ackreq, "A"), (bth.se, "SE"), (bth.fecn, "FECN"), (bth.becn, "BECN"))
                      if flag]
        reth = get(RETH)
        if reth is not None:
            parts.append(f"VA=0x{reth.va:x} rkey=0x{reth.r_key:x} len={reth.dma_length}")
        atomic = get(AtomicETH)
        if atomic is not None:
            parts.append(f"VA=0x{atomic.va:x} rkey=0x{atomic.r_key:x} swap/add=0x{atomic.swap_add:x} "
                         f"cmp=0x{atomic.compare:x}")
        aeth = get(AETH)
        if aeth is not None:
            parts.append(f"[{aeth.syndrome_text()}] MSN={aeth.msn}")
        deth = get(DETH)
        if deth is not None:
            parts.append(f"QKey=0x{deth.q_key:08x} SrcQP=0x{deth.src_qp:06x}")
        imm = get(ImmDt)
        if imm is not None:
            parts.append(f"Imm=0x{imm.imm:08x}")
        headers = [la.header for la in self.layers]
        infos = [text for h in headers if (text := h.info(headers)) is not None]  # MAD, CM
        if infos:
            parts.append(" ".join(infos))
            if self.info is not None:  # the message an IPoIB datagram carries (ARP, ICMP), in tshark's words
                parts.append(self.info)
        elif (size := self.payload_text()) is not None:
            parts.append(size)
        if self.crc_status == "bad":
            parts.append("[BAD ICRC]")
        if self.problems:
            parts.append(f"[{len(self.problems)} problem(s): {self.problems[0]}]")
        return " ".join(parts)


# ============================================================================ IB transport


def _problem(pkt: Packet, err: DecodeError, lenient: bool) -> None:
    if not lenient:
        raise err
    pkt.problems.append(err)


def decode_transport(
    data: bytes,
    pkt: Packet,
    offset: int,
    end: int,
    trailer: int,
    *,
    lenient: bool,
    captured: int | None = None,
) -> int:
    """Decode BTH, extended headers and payload from ``offset`` up to ``end``.

    ``trailer`` is the number of CRC bytes between the payload and ``end`` (4 for RoCE, 6
    for native IB).  Fills ``pkt`` and returns the offset of the first trailer byte.

    ``captured``: the capture holds the packet only up to there, before ``end`` (a snap length):
    the headers are decoded as far as they were captured whole (one cut short is a problem, and nothing
    after it payload), the payload is the part of it captured (its pad left out; its length on the
    wire in ``pkt.payload_wire`` when the cut is in it), and the CRC, not captured, is left alone."""
    have = end - trailer if captured is None else min(captured, end - trailer)  # the bytes there are to read
    bth = BTH.decode(data, offset)
    if end - offset < bth.size + trailer:
        raise TruncatedError("BTH", None, offset, end - offset, f"at least {bth.size + trailer} bytes (BTH + CRC)")
    pkt.layers.append(Layer(bth, offset))
    for p in bth.check(offset):
        _problem(pkt, p, lenient)
    pos = offset + bth.size
    info = OPCODES.get(bth.opcode)
    crc_at = end - trailer
    if info is None:
        _problem(pkt, MalformedError("BTH", "opcode", offset, bth.opcode,
                                     "an opcode of IBA Vol 1 table 38", detail=opcode_name(bth.opcode)), lenient)
        pkt.payload_offset, pkt.payload_length = pos, max(0, have - pos)
        return crc_at
    for cls in info.headers:
        if pos + cls.LAYOUT.size > have:
            err = TruncatedError(cls.LAYOUT.name, None, pos, max(0, have - pos),
                                 f"{cls.LAYOUT.size} bytes for {info.name}")
            _problem(pkt, err, lenient)
            # (a header the capture cut: no payload after it was captured)
            pkt.payload_offset, pkt.payload_length = pos, max(0, have - pos) if captured is None else 0
            return crc_at
        h = cls.decode(data, pos)
        pkt.layers.append(Layer(h, pos))
        for p in h.check(pos):
            _problem(pkt, p, lenient)
        pos += cls.LAYOUT.size
    body = crc_at - pos
    if not info.payload:
        if body:
            _problem(pkt, MalformedError("Payload", None, pos, body, f"no payload after the headers of {info.name}"),
                     lenient)
        pkt.payload_offset, pkt.payload_length, pkt.pad = pos, max(0, have - pos), 0
        return crc_at
    if bth.padcnt > body:
        _problem(pkt, MalformedError("BTH", "padcnt", offset + 1, bth.padcnt,
                                     f"at most {body} (bytes left before the CRC)"), lenient)
        pkt.payload_offset, pkt.payload_length = pos, max(0, have - pos)
        return crc_at
    pkt.payload_offset, pkt.payload_length, pkt.pad = pos, min(have, crc_at - bth.padcnt) - pos, bth.padcnt
    if have < crc_at - bth.padcnt:
        pkt.payload_wire = crc_at - bth.padcnt - pos
    return crc_at


def encode_transport(bth: BTH, headers: Sequence[Header] = (), payload: bytes = b"", *, check: bool = True) -> bytes:
    """BTH + extended headers + payload + pad, with ``padcnt`` set to pad the payload to 4 bytes.

    With ``check`` (the default) the headers must be the ones the opcode table lists for
    ``bth.opcode``, and a payload only where the opcode carries one.
    """
    pad = -len(payload) % 4
    info = OPCODES.get(bth.opcode)
    if check:
        if info is None:
            raise EncodeError("BTH", "opcode", bth.opcode, "an opcode of the opcode table")
        want = [c.LAYOUT.name for c in info.headers]
        got = [type(h).LAYOUT.name for h in headers]
        if want != got:
            raise EncodeError(info.name, "headers", got, f"{want} after the BTH")
        if payload and not info.payload:
            raise EncodeError(info.name, "payload", len(payload), "no payload")
    if bth.padcnt != pad:
        bth = bth.replace(padcnt=pad)
    return b"".join([bth.encode(), *(h.encode() for h in headers), bytes(payload), b"\0" * pad])


# ============================================================================ native IB


def guarded(pkt: Packet, lenient: bool, fn: Callable[[], None]) -> Packet:
    """Run a decoding step; in lenient mode a DecodeError is recorded instead of raised."""
    try:
        fn()
    except DecodeError as err:
        if not lenient:
            raise
        pkt.problems.append(err)
    return pkt


def encode_ib(
    bth: BTH,
    headers: Sequence[Header] = (),
    payload: bytes = b"",
    *,
    lrh: LRH | None = None,
    grh: GRH | None = None,
    vcrc: bool = True,
    check: bool = True,
) -> bytes:
    """A native IB packet: LRH [GRH] BTH ... ICRC VCRC, with lengths and CRCs computed."""
    body = encode_transport(bth, headers, payload, check=check)
    lrh = lrh or LRH()
    if grh is not None:
        grh = grh.replace(paylen=len(body) + 4)
        lrh = lrh.replace(lnh=LNH_IBA_GLOBAL)
        body = grh.encode() + body
    elif lrh.lnh == LNH_IBA_GLOBAL:
        lrh = lrh.replace(lnh=LNH_IBA_LOCAL)
    lrh = lrh.replace(pktlen=(8 + len(body) + 4) // 4)
    raw = lrh.encode() + body
    raw += _crc.icrc_ib(raw).to_bytes(4, "little")
    if vcrc:
        raw += _crc.vcrc(raw).to_bytes(2, "little")
    return raw
