"""iWARP over TCP in a capture: per-connection reassembly of MPA frames and FPDUs.

:class:`IwarpTracker` is fed decoded Ethernet frames in capture order and returns the iWARP
PDUs (MPA Request/Reply frames and FPDUs) that *complete* in each frame, decoded by
:mod:`rdmalab.wire.iwarp`.  Per TCP direction it

* orders segments by sequence number, drops retransmitted/duplicate bytes, holds a bounded
  number of out-of-order segments, and treats a hole that does not fill as lost data;
* reads the MPA Request and Reply (markers and CRC are negotiated there: a side that sets M
  wants markers in the FPDUs it *receives*, RFC 5044; CRC is used if either side sets C);
* cuts the stream into FPDUs, with markers stripped and CRC32c checked; FPDUs split across
  segments and several FPDUs in one segment both work;
* when the capture starts mid-stream (no MPA frames seen), resynchronises by looking for an
  offset where ULPDU_Length, pad and CRC32c check out for two consecutive FPDUs (with markers, a
  marker's FPDUPTR proposes the offset).  Wireshark does not decode such streams at all;
* after a hole (the capture missed bytes: a TCP sequence jump), resynchronises at the first
  segment after it in which an FPDU start can be proven, as below;
* starts a direction again at a SYN (a new connection on the same ports: an MPA frame must come
  next), unless the SYN's payload starts at the octet the direction is at (a damaged flag, whose
  FPDUs go on the stream: :func:`_in_step`).

Holes, keep-alives and retransmissions, the exact rules:

1. A segment that starts beyond the next expected sequence number is held (reordering).  While a
   hole is open, each held segment proposes FPDU starts: its first octet (an MPA sender that
   aligns FPDUs with TCP segments starts each segment with an FPDU header: RFC 5044 Appendix A,
   "optimized" MPA/TCP senders, as RNICs and siw send and as Wireshark's one-FPDU-per-segment
   reading assumes); with markers on (the M flag, RFC 5044 4.3), every marker in it, whose place in
   sequence space is known (every 512th octet counted from the first FPDU) and whose FPDUPTR
   points back to the start of the FPDU it sits in; with CRC32c negotiated (the C flag), every
   FPDU header the cheap header test finds inside it.
2. A proposed start is *proven* when the FPDU there decodes without problems and, with CRC32c
   negotiated (RFC 5044 4.4), its CRC is good; without CRC, its header passes the ULPDU_Length +
   DDP/RDMAP sanity test (DDP Rsvd 0 and DV 1, RDMAP RV 1, a known opcode whose fixed header size
   fits ULPDU_Length and whose tagged flag matches), its CRC field is zero (what a sender without
   CRC sends there; siw does), and the next four octets, when held, pass the header test too.  A
   start whose FPDU is not all held yet waits (at most ``max_waiting`` of them).
3. At the first proven start ``s`` the bytes of the hole are declared lost: the stream restarts at
   the earliest held octet from which proven FPDUs follow one another up to ``s`` exactly (so the
   FPDUs that began inside the first segments after the hole are not lost either), and
   continues in step from there.  Its PDUs carry ``resync=True``.
4. What the stream held below that point is *parked* (one park per direction, the latest): a
   segment that arrives late for the hole (a reordered segment, a retransmission the capture
   saw after the segments that followed it) goes to the park and completes its FPDUs, reported
   in the frame it arrives in, as Wireshark does.  Bytes already seen are dropped
   (retransmissions).
5. A keep-alive (one octet, one below the highest sequence number seen: RFC 1122 4.2.3.6) is not
   stream data; zero-length segments never are.
6. No start proven before ``max_pending_bytes`` are held: the hole is declared lost at the
   first held segment and the stream is hunted as for a mid-stream capture.

Flows that are not iWARP are dropped cheaply: a connection whose handshake was seen must start
with an MPA Request, and a mid-stream flow is given up after ``give_up_bytes`` octets without a
resynchronisation.  Memory is bounded: at most ``max_connections`` flows (least recently used
dropped first), and per direction one FPDU's worth of bytes plus ``max_pending_bytes`` of
out-of-order data.

Each returned packet has ``encap="iwarp"`` and a ``stream``
(:class:`~rdmalab.wire.packet.StreamPosition`): ``frame`` (the frame in which the PDU completed),
``frames`` (all frames that carried its bytes), ``tuple4`` (``(src, sport, dst, dport)``), ``seq``
(TCP sequence number of its first byte), ``direction`` (``"initiator"``, ``"responder"`` or
``None`` if unknown), ``resync`` (``True`` when found by resynchronisation rather than by
following the stream from the MPA frames) and ``handshake`` (``True`` when both MPA frames of the
connection were seen before it: Wireshark decodes only such streams).
"""

from __future__ import annotations

import copy
import ipaddress
import re
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from rdmalab.wire import crc as _crc
from rdmalab.wire.errors import DecodeError
from rdmalab.wire.frame import tcp_segment_length
from rdmalab.wire.iwarp import decode_cut_fpdu, decode_fpdu, decode_mpa_frame
from rdmalab.wire.mpa import (
    MARKER_INTERVAL,
    MARKER_SIZE,
    MAX_ULPDU,
    MPA_KEY_PREFIX,
    MPA_KEY_REP,
    MPA_KEY_REQ,
    MPAReqRep,
    fpdu_length,
    fpdu_wire_length,
    ulpdu_length_at,
)
from rdmalab.wire.net import SEQ_MOD, TCP, IPv4, IPv6, seq_add, seq_diff
from rdmalab.wire.packet import Packet, SendMessage, StreamPosition
from rdmalab.wire.rdmap import OP_TERMINATE, RDMAP_OPCODES, SEND_OPCODES, DDPUntagged, RDMAPUntagged

MAX_FPDU_WIRE = fpdu_length(MAX_ULPDU) + 4 * (fpdu_length(MAX_ULPDU) // MARKER_INTERVAL + 2)

Tuple4 = tuple[str, int, str, int]
#: what the tracker reads of a TCP segment besides its payload (:meth:`IwarpTracker.segment_of`): source,
#: source port, destination, destination port, sequence number, flags, octets on the wire (None: all captured)
Segment = tuple[str, int, str, int, int, int, int | None]

# Direction states
START = "start"  # handshake seen: the next bytes must be an MPA frame
MPA_MAYBE = "mpa"  # mid-stream, but the bytes start like an MPA frame
AWAIT = "await"  # own MPA frame done, waiting for the peer's to learn markers/CRC
FPDU = "fpdu"  # full operation, in sync
HUNT = "hunt"  # looking for FPDU boundaries
DEAD = "dead"  # not iWARP (or given up)


# ULPDU_Length (any), DDP control (Rsvd 0, DV 1), RDMAP control (RV 1, Rsv 0): a fast prefilter
_HEADER_RE = re.compile(rb"(?=[\x00-\xff]{2}[\x01\x41\x81\xc1][\x40-\x4f])", re.DOTALL)


def _plausible_header(buf: bytearray, i: int) -> bool:
    """Cheap test that ``buf[i:]`` could start an FPDU (ULPDU_Length, DDP and RDMAP control)."""
    if i + 4 > len(buf):
        return False
    length = ulpdu_length_at(buf, i)
    ddp = buf[i + 2]
    rd = buf[i + 3]
    if ddp & 0x3F != 0x01 or rd & 0xF0 != 0x40:  # Rsvd 0, DV 1; RV 1, Rsv 0
        return False
    bounds = _ULPDU_BOUNDS.get(rd & 0x0F)
    if bounds is None or bounds[2] != bool(ddp & 0x80):
        return False
    return bounds[0] <= length <= bounds[1]


def _ulpdu_bounds() -> dict[int, tuple[int, int, bool]]:
    """opcode -> (shortest ULPDU, longest ULPDU, tagged): messages without payload have fixed sizes."""
    out = {}
    for op, info in RDMAP_OPCODES.items():
        low = (14 if info.tagged else 18) + sum(h.LAYOUT.size for h in info.headers)
        high = MAX_ULPDU if info.payload else low
        if op == OP_TERMINATE:
            high = low + 2 + 18 + 28  # DDP Segment Length, terminated DDP and RDMAP headers
        out[op] = (low, high, info.tagged)
    return out


_ULPDU_BOUNDS = _ulpdu_bounds()


#: (IP version, address) -> its text: the few addresses of a capture, named once.  Bounded.
_ADDRESS_TEXT: dict[tuple[int, int], str] = {}


def _address_text(version: int, value: int) -> str:
    key = (version, value)
    text = _ADDRESS_TEXT.get(key)
    if text is None:
        text = str(ipaddress.IPv4Address(value) if version == 4 else ipaddress.IPv6Address(value))
        if len(_ADDRESS_TEXT) >= 4096:
            _ADDRESS_TEXT.clear()
        _ADDRESS_TEXT[key] = text
    return text


@dataclass
class _Dir:
    tuple4: Tuple4
    state: str = "new"
    next_seq: int | None = None
    buf: bytearray = field(default_factory=bytearray)
    buf_seq: int = 0
    chunks: list[tuple[int, int]] = field(default_factory=list)  # (offset in buf, frame)
    pending: dict[int, tuple[bytes, int]] = field(default_factory=dict)  # seq -> (data, frame)
    pending_bytes: int = 0
    markers: bool | None = None  # markers in the FPDUs this direction sends
    crc: bool | None = None
    first_fpdu_seq: int | None = None
    hunted: int = 0  # bytes given up while hunting
    resynced: bool = False
    role: str | None = None
    # hunting bookkeeping: candidate starts that need more bytes, and where scanning resumes
    waiting: list[tuple[int, int | None]] = field(default_factory=list)  # (offset, stream pos or None)
    scan_pos: int = 0
    # after a hole: sequence numbers where an FPDU may start (held segment starts, marker targets)
    # that wait for more bytes before they can be checked
    gap_starts: dict[int, int] = field(default_factory=dict)  # seq -> the held segment (its seq) it is in
    # the stream before the last resynchronisation point, kept for bytes that arrive late (a
    # reordered or retransmitted segment fills the hole) up to ``limit``
    park: _Dir | None = None
    limit: int | None = None


@dataclass
class _Conn:
    dirs: dict[Tuple4, _Dir] = field(default_factory=dict)
    request: MPAReqRep | None = None
    reply: MPAReqRep | None = None
    initiator: Tuple4 | None = None
    dead: bool = False
    #: the untagged Send segments of the message being put together, either direction's (:func:`_sent`)
    sends: list[tuple[int | None, bytes]] = field(default_factory=list)
    send_bytes: int = 0


#: the octets of a Send message put together at most (a stream of segments without a last one, hostile or
#: cut, is bounded: past this its segments are dropped, and the message is not shown whole)
MAX_SEND_MESSAGE = 16 << 20


def _sent(conn: _Conn, pkt: Packet) -> None:
    """An FPDU of ``conn`` in the order tshark dissects it: an untagged Send segment (Send, with Invalidate,
    with Solicited Event) is added to the message being put together, and the last one ends it; a message of
    several segments is put on the last one (``Packet.send_message``).  packet-iwarp-ddp-rdmap.c does it so
    (``dissect_rdmap_payload``: ``fragment_add_seq_next`` keyed by the TCP conversation, both directions in
    one sequence, "more fragments" while the DDP last flag is clear)."""
    rdmap = pkt.get(RDMAPUntagged)
    ddp = pkt.get(DDPUntagged)
    if rdmap is None or ddp is None or rdmap.opcode not in SEND_OPCODES:
        return
    part = bytes(pkt.data[pkt.payload_offset:pkt.payload_offset + pkt.payload_length])
    frame = pkt.stream.frame if pkt.stream is not None else None
    if conn.send_bytes + len(part) <= MAX_SEND_MESSAGE:
        conn.sends.append((frame, part))
        conn.send_bytes += len(part)
    else:  # (too long to hold: nothing more of it held, and the message not shown whole)
        conn.sends.clear()
        conn.send_bytes = MAX_SEND_MESSAGE + 1
    if not ddp.last:
        return
    parts = conn.sends
    conn.sends, conn.send_bytes = [], 0
    if len(parts) > 1:
        pkt.send_message = SendMessage(b"".join(p for _f, p in parts), tuple((f, len(p)) for f, p in parts))


def _fresh(pkt: Packet) -> Packet:
    """A copy of a decoded packet whose lists (layers, problems) are its own; the headers, immutable,
    are shared."""
    out = copy.copy(pkt)
    out.layers, out.problems = list(pkt.layers), list(pkt.problems)
    return out


def _in_step(d: _Dir, seq: int, length: int) -> bool:
    """Whether a segment with SYN set and ``length`` octets of payload at ``seq`` goes on with a direction
    that follows FPDUs (or looks for them) rather than starting it again: its payload starts at the
    direction's next sequence number.  A SYN starts a direction's sequence numbers at a new initial one
    (RFC 9293 3.4.1); one that lands on the octet the stream is at, payload and all, is a damaged flag (a
    new connection would have to pick that number out of 2**32), and its FPDUs go on the stream, as
    tshark decodes them."""
    return length > 0 and d.state in (FPDU, HUNT) and d.next_seq == seq


#: resynchronisations an :class:`IwarpTracker` keeps between two :meth:`~IwarpTracker.take_resyncs`
RESYNCS_MAX = 10_000


class IwarpTracker:
    """Stateful iWARP reassembly over every TCP connection of a capture (see module docs)."""

    def __init__(
        self,
        *,
        max_connections: int = 1024,
        max_pending_bytes: int = 1 << 20,
        give_up_bytes: int = 256 * 1024,
        max_waiting: int = 16,
    ) -> None:
        self.max_connections = max_connections
        self.max_pending_bytes = max_pending_bytes
        self.give_up_bytes = give_up_bytes
        self.max_waiting = max_waiting
        self._conns: OrderedDict[tuple[Tuple4, Tuple4], _Conn] = OrderedDict()
        # MPA frames decoded, by their bytes: the connections of one application send the same
        # Request and Reply again and again (bounded: emptied when full)
        self._mpa_frames: dict[bytes, Packet] = {}
        #: where a direction was followed again past octets it could not read as FPDUs, since the
        #: last :meth:`take_resyncs`: (frame, (src, sport, dst, dport), kind, octets, seq); ``kind``
        #: ``"hole"`` (past a hole in the capture: a TCP sequence jump that nothing filled, rule 3 or 6
        #: of the module docstring) or ``"hunt"`` (octets passed over looking for an FPDU start: a
        #: capture that begins inside an FPDU, or after rule 6); ``octets`` from the first octet not
        #: read to the FPDU start, ``seq`` that start.  ``"filled"`` takes a ``"hole"`` back: bytes that
        #: came late for the hole (a retransmission or a reordered segment seen after the segments that
        #: followed it) completed every FPDU up to that start (rule 4), ``octets`` and ``seq`` the hole's.
        #: At most :data:`RESYNCS_MAX` kept between two takes.
        self.resyncs: list[tuple[int, Tuple4, str, int, int]] = []
        self.resyncs_dropped = 0
        self._frame = 0
        # per direction, its last "hole" (seq, octets): a park that fills takes it back
        self._holes: OrderedDict[Tuple4, tuple[int, int]] = OrderedDict()

    # ---------------------------------------------------------------- public
    def take_resyncs(self) -> list[tuple[int, Tuple4, str, int, int]]:
        """The :attr:`resyncs` since the last call (and forget them)."""
        out, self.resyncs = self.resyncs, []
        return out

    def _resynced(self, d: _Dir, kind: str, octets: int, seq: int) -> None:
        if octets <= 0:
            return
        if len(self.resyncs) >= RESYNCS_MAX:
            self.resyncs_dropped += 1
            return
        self.resyncs.append((self._frame, d.tuple4, kind, octets, seq))
        if kind == "hole":
            self._holes[d.tuple4] = (seq, octets)
            self._holes.move_to_end(d.tuple4)
            if len(self._holes) > 2 * self.max_connections:
                self._holes.popitem(last=False)

    def process(self, frame_number: int, pkt: Packet) -> list[Packet]:
        """The iWARP PDUs that complete with this frame (empty for non-TCP frames)."""
        seg = self.segment_of(pkt)
        if seg is None:
            return []
        src, sport, dst, dport, seq, flags, wire = seg
        return self.process_segment(frame_number, src, sport, dst, dport, seq, flags, pkt.payload, wire)

    def process_frame(self, frame_number: int, data: bytes | memoryview) -> list[Packet] | None:
        """:meth:`process` of an untagged Ethernet frame ``data`` that holds a whole TCP segment over IPv4
        without options, not a fragment, without decoding it (what the lenient decoder finds in it: the
        segment's addresses, ports, sequence number, flags and payload, the datagram's own length); None,
        nothing fed, for any other frame (decode it and :meth:`process` the packet)."""
        if len(data) < 54 or data[12] != 8 or data[13] != 0 or data[14] != 0x45 or data[23] != 6 \
                or data[20] & 0x3F or data[21]:  # (IPv4 without options, TCP; MF or an offset: a fragment)
            return None
        total = data[16] << 8 | data[17]
        hl = (data[46] >> 4) * 4
        if hl < 20 or 20 + hl > total or 14 + total > len(data):
            return None
        src, dst = int.from_bytes(data[26:30], "big"), int.from_bytes(data[30:34], "big")
        return self.process_segment(frame_number, _address_text(4, src), data[34] << 8 | data[35],
                                    _address_text(4, dst), data[36] << 8 | data[37],
                                    int.from_bytes(data[38:42], "big"), (data[46] & 1) << 8 | data[47],
                                    data[34 + hl:14 + total])

    @staticmethod
    def segment_of(pkt: Packet) -> Segment | None:
        """What :meth:`process` feeds :meth:`process_segment` with for ``pkt`` but its payload (source,
        source port, destination, destination port, sequence number, flags, ``wire_length``), or None
        for a frame without TCP: a worker process that decodes a segment sends it so to the process that
        reads the streams in order (:func:`rdmalab.capture.json_blocks.iter_json_file`)."""
        tcp = pkt.get(TCP)
        if tcp is None:
            return None
        src, dst = IwarpTracker._addresses(pkt)
        wire = tcp_segment_length(pkt) if pkt.payload_length and pkt.problems else None  # (cut: a problem says so)
        return src, tcp.sport, dst, tcp.dport, tcp.seq, tcp.flags, wire

    def follows(self, pkt: Packet) -> bool:
        """Whether the direction of ``pkt``'s TCP stream is one this tracker reads as MPA (its
        negotiation seen, or FPDUs found in step mid-stream): its payload is iWARP's bytes, whole
        FPDUs or parts of them, not bytes of no protocol (tshark's ``data``)."""
        tcp = pkt.get(TCP)
        if tcp is None:
            return False
        src, dst = self._addresses(pkt)
        return self.follows_segment(src, tcp.sport, dst, tcp.dport)

    def follows_segment(self, src: str, sport: int, dst: str, dport: int) -> bool:
        """:meth:`follows` of a segment from ``src``:``sport`` to ``dst``:``dport``."""
        fwd: Tuple4 = (src, sport, dst, dport)
        rev: Tuple4 = (dst, dport, src, sport)
        conn = self._conns.get((fwd, rev) if fwd <= rev else (rev, fwd))
        if conn is None or conn.dead:
            return False
        d = conn.dirs.get(fwd)
        return d is not None and d.state in (START, MPA_MAYBE, AWAIT, FPDU)

    def process_segment(self, frame_number: int, src: str, sport: int, dst: str, dport: int, seq: int, flags: int,
                        payload: bytes | memoryview, wire_length: int | None = None) -> list[Packet]:
        """The same as :meth:`process`, given one TCP segment's addresses, ports, sequence number,
        flags and payload (what the columnar decoder has without decoding a packet object).
        ``wire_length``: the segment's payload octets on the wire, when the capture cut it (a snap
        length): on a direction that follows FPDUs in step, a segment of whole FPDUs whose last one the
        capture cut gives those FPDUs (the last one as far as it was captured:
        :func:`~rdmalab.wire.iwarp.decode_cut_fpdu`) and keeps the direction in step
        (:meth:`_cut_segment`)."""
        fwd: Tuple4 = (src, sport, dst, dport)
        rev: Tuple4 = (dst, dport, src, sport)
        key = (fwd, rev) if fwd <= rev else (rev, fwd)
        self._frame = frame_number
        conn = self._conns.get(key)
        if conn is None:
            if flags & TCP.RST:
                return []
            conn = _Conn()
            self._conns[key] = conn
            while len(self._conns) > self.max_connections:
                self._conns.popitem(last=False)
        else:
            self._conns.move_to_end(key)
        if conn.dead:
            return []
        if flags & TCP.RST:
            del self._conns[key]
            return []
        d = conn.dirs.get(fwd)
        if d is None:
            d = conn.dirs[fwd] = _Dir(fwd)
        if flags & TCP.SYN and not _in_step(d, seq, len(payload)):
            d.next_seq = d.buf_seq = seq_add(seq, 1)
            d.buf.clear()
            d.chunks.clear()
            d.state = START
            return []
        if not payload or d.state == DEAD:
            return []
        out: list[Packet] = []
        if d.next_seq is None:  # first bytes of a direction whose handshake we missed
            d.next_seq = d.buf_seq = seq
            d.state = MPA_MAYBE if payload[: len(MPA_KEY_PREFIX)] == MPA_KEY_PREFIX[: len(payload)] else HUNT
            if d.state == HUNT:
                self._inherit(conn, d)
                self._request_missed(conn, d, out)
        if wire_length is not None and wire_length > len(payload) and self._cut_segment(
                conn, d, seq, bytes(payload), wire_length, frame_number, out):
            return out
        self._add_segment(conn, d, seq, bytes(payload), frame_number, out)
        self._parse(conn, d, out)
        return out

    def _cut_segment(self, conn: _Conn, d: _Dir, seq: int, data: bytes, wire_length: int, frame: int,
                     out: list[Packet]) -> bool:
        """A segment the capture cut (``data`` of its ``wire_length`` payload octets) on a direction
        that follows FPDUs in step, no segment held after a hole (no markers: their places are not known in
        the octets not captured), perhaps the first octets of an FPDU the segments before began (GSO
        segments do not end with an FPDU): its FPDUs, by their MPA lengths, that one first, up to the one
        the capture cut, go to ``out``
        (the whole ones decoded, the cut one as far as it was captured).  When the last ends where the
        segment does on the wire (an iWARP sender aligns FPDUs to segments, RFC 5044 8), or goes on
        past it, the direction moves past it, still in step; when more FPDUs follow it in the octets
        not captured, the direction looks for FPDU starts again after the segment, as after a hole;
        looking so, a cut segment that follows the last one and starts like an FPDU (its DDP and RDMAP
        control octets) is taken as above (an iWARP sender starts a segment with an FPDU), and one that does
        not is passed over (it goes on with an FPDU begun in the octets not captured); the octets looked
        through before it, where no FPDU start was proven, are given up.  A cut FPDU
        that does not end with the segment must show an FPDU's control octets too.  True when so;
        otherwise (False) the segment is taken as before, its octets not captured a hole in the stream
        (looking for FPDUs, the octets looked through before it are given up all the same)."""
        if (d.state not in (FPDU, HUNT) or d.markers or d.pending or d.next_seq != seq
                or (d.park is not None and d.park.limit is not None and seq_diff(seq, d.park.limit) < 0)):
            return False
        held = bytes(d.buf)  # (in step: the first octets of an FPDU the segments before began)
        if held and seq_add(d.buf_seq, len(held)) != seq:
            return False
        if d.state == HUNT:
            if d.crc is None:
                return False
            if held:  # (octets looked through for an FPDU start, none proven: given up at a cut segment)
                d.hunted += len(held)
                d.buf.clear()
                d.chunks.clear()
                d.waiting.clear()
                d.scan_pos = 0
                d.buf_seq = seq
                held = b""
        if not held and (d.chunks or d.buf_seq != seq):
            return False
        if d.state == HUNT and not _plausible_header(bytearray(data), 0):
            # (looking for FPDUs after a cut segment: a segment that follows the last one, cut too, that does
            # not start like an FPDU goes on with one begun in octets not captured: passed over, still looking)
            d.next_seq = d.buf_seq = seq_add(seq, wire_length)
            d.gap_starts.clear()
            return True
        base, before = d.buf_seq, list(d.chunks)
        data, wire_length = held + data, len(held) + wire_length
        got: list[tuple[Packet, int]] = []
        pos = 0
        while (size := fpdu_wire_length(data, pos)) is not None:  # (its length field captured)
            if pos + size <= len(data):  # captured whole
                try:
                    pkt, n = decode_fpdu(data, pos, crc=d.crc is not False, lenient=True)
                except DecodeError:
                    return False
                if pkt.crc_status == "bad" and pkt.problems:
                    return False  # (not FPDU boundaries after all)
                got.append((pkt, pos))
                pos += n
                continue
            # the FPDU the capture cut: it ends with the segment, goes on in the next ones (its CRC
            # alone, as siw sends a large FPDU's), or others follow it in octets not captured; its DDP and
            # RDMAP control octets those of an FPDU, unless it ends exactly with the segment
            if pos + size != wire_length and not _plausible_header(bytearray(data), pos):
                return False
            got.append((decode_cut_fpdu(data[pos:], size), pos))
            pos += size
            break
        if not got:
            return False
        handshake = conn.request is not None and conn.reply is not None
        for pkt, at in got:
            # (an FPDU begun in the octets held: the frames that carried them too)
            ends = [off for off, _f in before[1:]] + [len(held)]  # (where each held chunk ends)
            frames = tuple(f for (_off, f), end in zip(before, ends, strict=True) if end > at) if at < len(held) else ()
            pkt.stream = StreamPosition(frame, (*frames, frame), d.tuple4, seq_add(base, at), d.role, d.resynced,
                                        handshake)
            _sent(conn, pkt)
            out.append(pkt)
        d.buf.clear()
        d.chunks.clear()
        if pos >= wire_length:
            # past the last FPDU: the octets of it in the segments after this one are taken for ones already seen
            d.next_seq = d.buf_seq = seq_add(base, pos)
            d.state = FPDU
        else:  # FPDUs in the octets not captured, where they end not known: found again as after a hole
            d.next_seq = d.buf_seq = seq_add(base, wire_length)
            d.state = HUNT
            d.waiting.clear()
            d.scan_pos = 0
        d.gap_starts.clear()
        return True

    def process_many(self, frames: Sequence[int], keys: Sequence[Tuple4], dirs: np.ndarray, seqs: Sequence[int],
                     flags: np.ndarray, lengths: np.ndarray, payload: Callable[[int], bytes | memoryview],
                     whole: tuple[np.ndarray, np.ndarray] | None = None,
                     pairs: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
                     plain: list[int] | None = None,
                     ) -> tuple[dict[int, list[Packet]], dict[int, Exception], list[int], list[int]]:
        """:meth:`process_segment` for many segments in capture order, at once: row ``i`` is frame
        ``frames[i]`` from ``keys[dirs[i]]`` (source, source port, destination, destination port)
        with sequence number ``seqs[i]``, ``flags[i]``, ``lengths[i]`` octets of payload and
        ``payload(i)`` for them (asked for only when the row is fed to :meth:`process_segment`).

        Returns the rows that complete PDUs (row -> PDUs) and the rows on which
        :meth:`process_segment` raised (row -> the error; the rows after it are processed as if it
        had returned nothing, as a lenient caller carries on).  Every other row returns nothing.
        The rows the tracker provably ignores (a connection it gave up on or a direction it
        gave up on, a segment without payload, flags RST and SYN aside, on a direction it
        knows, an RST of a connection it does not track, a retransmission of bytes a direction
        that follows FPDUs already has: :meth:`_seen_before`) are not fed one by one: their only
        effect, how recently their connection was used, is applied at the end, and the state
        is what the calls one by one would leave, the order of the connections (which decides
        which is dropped at ``max_connections``) included.  When this block could make the
        tracker drop a connection, every row is fed one by one.

        ``whole``, when given, says of each row whether its payload is whole FPDUs without markers,
        each of which decodes without a problem, its CRC good (``whole[0]``) or not looked at
        (``whole[1]``).  Such a row, in order on a direction that follows FPDUs with nothing held
        (:meth:`_whole_fpdus`), is not fed either: the tracker's state moves past it as
        :meth:`process_segment` would move it, and the row is listed in the third value returned
        (its PDUs are the caller's to describe).

        ``pairs``, when given with ``whole``, names for each row ``a`` a row ``b`` after it (-1: none)
        such that ``a`` holds no whole FPDU and the two payloads together are whole FPDUs as
        ``whole`` says (CRC good: ``pairs[1]``; not looked at: ``pairs[2]``).  When the tracker
        would take ``a`` in step as above, ``b`` is the connection's next row that matters and
        starts where ``a`` ends, the two are not fed either (``a`` would complete nothing, ``b`` those FPDUs): ``b`` is listed
        in the fourth value returned (its PDUs are those of the two payloads together).

        ``plain``, when given, gets the rows of the third value taken on a direction without the CRC
        (``whole[1]``'s: their FPDUs' CRC fields not looked at), in no particular order."""
        out: dict[int, list[Packet]] = {}
        errors: dict[int, Exception] = {}
        lane: list[int] = []
        paired: list[int] = []
        n = len(dirs)
        if n == 0:
            return out, errors, lane, paired

        def feed(i: int) -> None:
            k = keys[dl[i]]
            try:
                pdus = self.process_segment(frames[i], k[0], k[1], k[2], k[3], seqs[i], fl[i], payload(i))
            except Exception as err:  # noqa: BLE001 - the caller reports it, as it would one by one
                errors[i] = err
                return
            if pdus:
                out[i] = pdus

        dl, fl = dirs.tolist(), flags.tolist()
        conn_keys: list[tuple[Tuple4, Tuple4]] = []
        conn_of_key: dict[tuple[Tuple4, Tuple4], int] = {}
        conn_of_dir: list[int] = []
        for fwd in keys:
            rev = (fwd[2], fwd[3], fwd[0], fwd[1])
            ck = (fwd, rev) if fwd <= rev else (rev, fwd)
            cid = conn_of_key.get(ck)
            if cid is None:
                cid = conn_of_key[ck] = len(conn_keys)
                conn_keys.append(ck)
            conn_of_dir.append(cid)
        rst = (flags & TCP.RST) != 0
        created = sum(ck not in self._conns for ck in conn_keys) + int(np.count_nonzero(rst))
        if len(self._conns) + created > self.max_connections:  # it may drop one: the order matters
            for i in range(n):
                feed(i)
            return out, errors, lane, paired
        ok_crc, ok_plain = ([], []) if whole is None else (whole[0].tolist(), whole[1].tolist())
        ln = lengths.tolist()
        conn = np.asarray(conn_of_dir, dtype=np.int64)[dirs]
        order = np.argsort(conn, kind="stable")  # the rows of each connection, in order
        co, do = conn[order], dirs[order]
        heads = np.flatnonzero(np.r_[True, co[1:] != co[:-1]])
        ends = np.r_[heads[1:], n]
        size = np.diff(np.r_[heads, n])
        end_at = np.repeat(ends, size)  # where each row's connection ends (in ``order``)
        first_dir = np.repeat(do[heads], size)
        other = do != first_dir  # the rows of a connection's second direction
        special = rst | ((flags & TCP.SYN) != 0)
        pay = lengths[order] > 0
        k = np.arange(n)

        def next_true(mask: np.ndarray) -> list[int]:
            """For each place in ``order``: the first place at or after it, in the same connection,
            where ``mask`` holds (the connection's end if none)."""
            at = np.where(mask, k, end_at)
            nxt: list[int] = np.minimum.accumulate(at[::-1])[::-1].tolist()
            return nxt

        nxt_special = next_true(special[order])
        nxt_row = (next_true(~other), next_true(other))
        nxt_pay = (next_true(pay & ~other), next_true(pay & other))
        second = np.full(len(heads), -1, dtype=np.int64)  # a connection's second direction, if it has rows
        has_other = np.flatnonzero(other)
        if len(has_other):
            conn_no = np.repeat(np.arange(len(heads)), size)
            second[conn_no[has_other[::-1]]] = do[has_other[::-1]]
        ol, sp = order.tolist(), special.tolist()
        runs = self._lane_runs(order, co, do, special, lengths, seqs, whole) if whole is not None else None
        if runs is not None and pairs is not None:
            partner, pair_crc, pair_plain = pairs[0].tolist(), pairs[1].tolist(), pairs[2].tolist()
            place = np.empty(n, dtype=np.int64)
            place[order] = k  # each row's place in order
            where = place.tolist()
            after = np.full(n + 1, n, dtype=np.int64)  # the next place that matters after each (n: none)
            after[runs[2][:-1]] = runs[2][1:]
            next_place = after.tolist()
        else:
            partner = []
        touched: list[tuple[int, tuple[Tuple4, Tuple4]]] = []
        for h, e, d0, d1 in zip(heads.tolist(), ends.tolist(), do[heads].tolist(), second.tolist(), strict=True):
            ck = conn_keys[conn_of_dir[d0]]
            sides = ((0, keys[d0]),) if d1 < 0 else ((0, keys[d0]), (1, keys[d1]))
            last = -1  # the last row that used the connection
            p = h
            c: _Conn | None = None
            nexts: list[list[int]] = []  # for each direction: where its next row that matters is
            stale = True  # the connection and its directions looked up again (a row was fed)
            steady = False  # both directions known: only rows with payload, SYN or RST matter
            while p < e:
                if stale:
                    stale = False
                    c = self._conns.get(ck)
                    if c is not None:
                        nexts = []
                        steady = True
                        for j, key in sides:
                            dd = c.dirs.get(key)
                            if dd is None:  # any row makes it
                                nexts.append(nxt_row[j])
                                steady = False
                            elif dd.state != DEAD:  # a segment with payload
                                nexts.append(nxt_pay[j])
                if c is None:
                    i = ol[p]
                    if not fl[i] & TCP.RST:  # it opens the connection
                        feed(i)
                        stale = True
                        last = i
                    p += 1
                    continue
                if c.dead:  # nothing but the order changes
                    last = ol[e - 1]
                    break
                q = nxt_special[p]
                for nx in nexts:
                    if nx[p] < q:
                        q = nx[p]
                if q > p:
                    last = ol[q - 1]
                if q >= e:
                    break
                i = ol[q]
                ki = keys[dl[i]]
                if sp[i]:
                    stale = True
                    if fl[i] & TCP.RST or not self._syn_again(c, ki, seqs[i], ln[i]):
                        feed(i)
                elif ok_crc and (ok_crc[i] or ok_plain[i]) and self._whole_fpdus(c, ki, seqs[i], ln[i], ok_crc[i],
                                                                                 ok_plain[i]):
                    lane.append(i)
                    dd = c.dirs[ki]
                    if plain is not None and dd.crc is False:
                        plain.append(i)
                    if steady and runs is not None:  # the segments after it in step go the same way
                        got = self._lane_run(dd, q, runs[0] if dd.crc is not False else runs[1], runs[2], runs[3], ol,
                                             lane, seqs, ln, plain if dd.crc is False else None)
                        if got > q:
                            q = got
                            i = ol[q]
                elif (partner and (b := partner[i]) >= 0 and steady and next_place[q] == where[b]
                      and seqs[b] == seq_add(seqs[i], ln[i])
                      and self._whole_fpdus(c, ki, seqs[i], ln[i] + ln[b], pair_crc[i], pair_plain[i])):
                    paired.append(b)  # a completes nothing, b the FPDUs of the two
                    q, i = where[b], b
                elif not self._seen_before(c, ki, seqs[i], ln[i]):
                    feed(i)
                    stale = True
                last = i
                p = q + 1
            if last >= 0:
                touched.append((last, ck))
        touched.sort()
        for _, ck in touched:  # the order of use the calls one by one leave
            if ck in self._conns:
                self._conns.move_to_end(ck)
        lane.sort()
        paired.sort()
        return out, errors, lane, paired

    @staticmethod
    def _lane_runs(order: np.ndarray, co: np.ndarray, do: np.ndarray, special: np.ndarray, lengths: np.ndarray,
                   seqs: Sequence[int], whole: tuple[np.ndarray, np.ndarray],
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """For :meth:`process_many`: runs of segments that would follow one another into the FPDU lane.

        Among the rows that matter once both directions of a connection are known (payload, SYN or
        RST; places in ``order``, each connection's together), a run is a row followed by rows of
        the same connection and direction, each without SYN and RST, whole FPDUs (``whole[0]`` for
        a direction checking the CRC, ``whole[1]`` for one without), its sequence number where the
        row before it ends, or the row before it again (the same sequence number and length).
        Returned: for each such row, where (place in ``order``) the run from it ends, under
        ``whole[0]`` and under ``whole[1]``; the places of the rows that matter, and which of those
        repeat the row before them."""
        n = len(order)
        ln = lengths[order]
        sp = special[order]
        at = np.flatnonzero((ln > 0) | sp)  # the rows that matter, places in order
        seq = np.asarray(seqs, dtype=np.int64)[order[at]]
        nxt_seq = (seq + ln[at]) & 0xFFFFFFFF
        same = (co[at][1:] == co[at][:-1]) & (do[at][1:] == do[at][:-1]) & ~sp[at][1:] & ~sp[at][:-1]
        step = same & (seq[1:] == nxt_seq[:-1])
        # row t + 1 the same octets as row t again (a capture on both ends of a link, a retransmission):
        # dropped as seen before (:meth:`_seen_before`) on a direction in step
        again = np.r_[False, same & (seq[1:] == seq[:-1]) & (ln[at][1:] == ln[at][:-1])]
        reach = []
        for mask in whole:
            link = (step & mask[order[at]][1:]) | again[1:]  # row t and row t + 1 in one run
            k = np.arange(len(at))
            stop = np.where(np.r_[link, False], len(at), k)  # a run ends at the first row with no link after it
            end = np.minimum.accumulate(stop[::-1])[::-1]
            full = np.full(n, -1, dtype=np.int64)
            full[at] = at[end]
            reach.append(full)
        return reach[0], reach[1], at, again

    @staticmethod
    def _lane_run(d: _Dir, q: int, reach: np.ndarray, at: np.ndarray, again: np.ndarray, ol: list[int],
                  lane: list[int], seqs: Sequence[int], ln: list[int], plain: list[int] | None = None) -> int:
        """The rows of the run that starts at place ``q`` (:meth:`_lane_runs`) after it, into ``lane``
        and past ``d`` as :meth:`_whole_fpdus` would take them one by one (nothing held, so each is
        next in sequence; a park's limit the first passed, the later ones pass), but for the rows
        that repeat the one before them (``again``), which change nothing; the run's last place.  ``plain``
        gets the same rows (a direction without the CRC)."""
        r = int(reach[q])
        if r <= q:
            return q
        lo, hi = np.searchsorted(at, [q + 1, r + 1])
        rows = [ol[x] for x in at[lo:hi][~again[lo:hi]].tolist()]
        if rows:
            lane.extend(rows)
            if plain is not None:
                plain.extend(rows)
            d.next_seq = d.buf_seq = seq_add(seqs[rows[-1]], ln[rows[-1]])
        return r

    def take_whole(self, frame_number: int, src: str, sport: int, dst: str, dport: int, seq: int, flags: int,
                   length: int, crc_good: bool, plain: bool, sends: bool) -> bool:
        """What :meth:`process_segment` does with a segment whose ``length`` octets of payload are whole
        FPDUs without markers, each decoding without a problem, the CRC good (``crc_good``) or not looked at
        (``plain``), when it would emit exactly those FPDUs (:meth:`_whole_fpdus`: a direction of a
        connection it follows that is in step on FPDUs, nothing held, the segment next in sequence), done
        without decoding them (True: the caller has them); False, nothing done, otherwise (give the
        segment to :meth:`process_segment`).  ``sends``: some of the FPDUs are untagged Sends, each the last
        of its message (taken only when the connection puts no message together: each is then a message
        of one FPDU, shown without a Send message, and none is left begun)."""
        if flags & (TCP.SYN | TCP.RST) or not length:
            return False
        fwd: Tuple4 = (src, sport, dst, dport)
        rev: Tuple4 = (dst, dport, src, sport)
        key = (fwd, rev) if fwd <= rev else (rev, fwd)
        conn = self._conns.get(key)
        if conn is None or conn.dead or (sends and conn.sends):
            return False
        if not self._whole_fpdus(conn, fwd, seq, length, crc_good, plain):
            return False
        self._frame = frame_number
        self._conns.move_to_end(key)
        if sends:  # (_sent of each: a message of one FPDU, begun and ended)
            conn.sends, conn.send_bytes = [], 0
        return True

    def _whole_fpdus(self, conn: _Conn, key: Tuple4, seq: int, length: int, crc_good: bool, plain: bool) -> bool:
        """A segment of whole FPDUs (without markers, each decoding without a problem, the CRC good
        or, without CRC, not looked at) on a direction of ``conn`` that follows FPDUs in step, with
        nothing held and the segment next in sequence: what :meth:`process_segment` would do with
        it, without decoding it (True), or nothing (False).  It would append the payload, cut it
        into those FPDUs and emit them, leaving the direction as before, only further on."""
        d = conn.dirs.get(key)
        if (d is None or d.state != FPDU or d.markers or d.buf or d.chunks or d.pending or d.next_seq != seq
                or d.buf_seq != seq or not (crc_good if d.crc is not False else plain)):
            return False
        p = d.park
        if p is not None and p.limit is not None and seq_diff(seq, p.limit) < 0:
            return False  # the park takes (some of) it
        d.next_seq = d.buf_seq = seq_add(seq, length)
        d.gap_starts.clear()
        return True

    def _syn_again(self, conn: _Conn, key: Tuple4, seq: int, length: int) -> bool:
        """A SYN (without RST) of ``length`` octets of payload on a direction ``conn`` (alive) already has:
        what :meth:`process_segment` would do with it (the direction starts again, before an MPA frame),
        done (True); False, nothing done, for a direction it does not have or that the SYN does not
        start again (:func:`_in_step`)."""
        d = conn.dirs.get(key)
        if d is None or _in_step(d, seq, length):
            return False
        d.next_seq = d.buf_seq = seq_add(seq, 1)
        d.buf.clear()
        d.chunks.clear()
        d.state = START
        return True

    def _seen_before(self, conn: _Conn, key: Tuple4, seq: int, length: int) -> bool:
        """Whether :meth:`process_segment` would drop this segment (SYN and RST aside) on a direction
        of ``conn`` that follows FPDUs as a retransmission of bytes it already has, and change nothing
        else: all of it lies before the next sequence number, it is no keep-alive that held segments
        could make of it, and no park (the stream before a resynchronisation) takes it."""
        d = conn.dirs.get(key)
        if d is None or d.state != FPDU or d.next_seq is None or length == 1 and d.pending:
            return False
        if seq_diff(seq, d.next_seq) + length > 0:
            return False
        p = d.park
        return p is None or p.limit is None or seq_diff(seq, p.limit) >= 0

    def connections(self) -> int:
        """Number of TCP connections currently tracked."""
        return len(self._conns)

    # ---------------------------------------------------------------- TCP
    @staticmethod
    def _addresses(pkt: Packet) -> tuple[str, str]:
        ip4 = pkt.get(IPv4)
        if ip4 is not None:
            return _address_text(4, ip4.src), _address_text(4, ip4.dst)
        ip6 = pkt.get(IPv6)
        if ip6 is not None:
            return _address_text(6, ip6.src), _address_text(6, ip6.dst)
        return "?", "?"

    def _add_segment(self, conn: _Conn, d: _Dir, seq: int, data: bytes, frame: int, out: list[Packet]) -> None:
        assert d.next_seq is not None
        # without held segments next_seq is the highest seen, and a keep-alive at next_seq - 1 is
        # dropped below as a retransmission
        if len(data) == 1 and d.pending:
            nxt = d.next_seq
            high = max((seq_add(s, len(v[0])) for s, v in d.pending.items()), key=lambda e: seq_diff(e, nxt))
            if seq_diff(seq_add(seq, 1), high) == 0:
                return  # a keep-alive (one octet below the highest sequence number seen): not stream data
        p = d.park
        if p is not None and p.limit is not None and seq_diff(seq, p.limit) < 0:
            cut = min(len(data), seq_diff(p.limit, seq))
            self._add_to_park(conn, d, p, seq, data[:cut], frame, out)
            data, seq = data[cut:], seq_add(seq, cut)
            if not data:
                return
        rel = seq_diff(seq, d.next_seq)
        if rel < 0:
            if rel + len(data) <= 0:
                return  # retransmission of bytes we already have
            data = data[-rel:]
            seq = d.next_seq
            rel = 0
        if rel > 0:
            old = d.pending.get(seq)
            if old is None or len(old[0]) < len(data):
                d.pending_bytes += len(data) - (len(old[0]) if old else 0)
                d.pending[seq] = (data, frame)
            if d.pending_bytes > self.max_pending_bytes:
                self._skip_gap(d)
            elif d.limit is None and d.state in (FPDU, HUNT):
                self._gap_resync(conn, d, seq, data)
            return
        self._append(d, data, frame)
        self._drain_pending(d)
        if d.gap_starts and not d.pending:
            d.gap_starts.clear()

    def _append(self, d: _Dir, data: bytes, frame: int) -> None:
        assert d.next_seq is not None
        if d.state == DEAD:
            return
        d.chunks.append((len(d.buf), frame))
        d.buf += data
        d.next_seq = seq_add(d.next_seq, len(data))

    def _drain_pending(self, d: _Dir) -> None:
        while d.pending:
            assert d.next_seq is not None
            progress = False
            for seq in list(d.pending):
                data, frame = d.pending[seq]
                rel = seq_diff(seq, d.next_seq)
                if rel > 0:
                    continue
                del d.pending[seq]
                d.pending_bytes -= len(data)
                if rel + len(data) > 0:
                    self._append(d, data[-rel:], frame)
                    progress = True
            if not progress:
                return

    def _skip_gap(self, d: _Dir) -> None:
        """Bytes were lost: jump to the earliest held segment and look for FPDUs again."""
        assert d.next_seq is not None
        nxt = d.next_seq
        first = min(d.pending, key=lambda s: seq_diff(s, nxt))
        self._resynced(d, "hole", seq_diff(first, nxt), first)
        self._park(d, first)
        d.next_seq = d.buf_seq = first
        if d.state in (FPDU, HUNT, AWAIT):
            d.state = HUNT
        elif d.state in (START, MPA_MAYBE):
            d.state = HUNT
        d.waiting.clear()
        d.scan_pos = 0
        self._drain_pending(d)

    # ---------------------------------------------------------------- holes
    def _park(self, d: _Dir, limit: int) -> None:
        """Move what ``d`` holds below ``limit`` (its buffer, held segments) to its park, so that
        bytes arriving late for the hole still complete the FPDUs they belong to; ``d`` restarts
        empty at ``limit``.  Only a stream that was in step keeps a park (one, the latest)."""
        below = {s: v for s, v in d.pending.items() if seq_diff(s, limit) < 0}
        park = None
        if d.limit is None and d.state == FPDU:
            park = _Dir(d.tuple4, state=FPDU, next_seq=d.next_seq, buf=d.buf, buf_seq=d.buf_seq,
                        chunks=d.chunks, markers=d.markers, crc=d.crc, first_fpdu_seq=d.first_fpdu_seq,
                        resynced=d.resynced, role=d.role, limit=limit)
        for s, (data, frame) in below.items():
            del d.pending[s]
            d.pending_bytes -= len(data)
            keep = seq_diff(limit, s)
            if keep < len(data):  # the part at and after ``limit`` stays with ``d``
                rest = data[keep:]
                old = d.pending.get(limit)
                if old is None or len(old[0]) < len(rest):
                    d.pending_bytes += len(rest) - (len(old[0]) if old else 0)
                    d.pending[limit] = (rest, frame)
                data = data[:keep]
            if park is not None:
                park.pending[s] = (data, frame)
                park.pending_bytes += len(data)
        d.park = park
        d.buf = bytearray()
        d.chunks = []
        d.buf_seq = limit
        d.gap_starts.clear()

    def _add_to_park(self, conn: _Conn, d: _Dir, p: _Dir, seq: int, data: bytes, frame: int,
                     out: list[Packet]) -> None:
        """Late bytes for the stream before the last resynchronisation point."""
        self._add_segment(conn, p, seq, data, frame, out)
        if p.pending_bytes > self.max_pending_bytes:
            d.park = None
            return
        self._parse_fpdus(conn, p, out)
        assert p.next_seq is not None and p.limit is not None
        if p.state != FPDU or (seq_diff(p.next_seq, p.limit) >= 0 and not p.pending):
            d.park = None  # lost step, or every byte up to the resynchronisation point is in
            hole = self._holes.get(d.tuple4)
            if p.state == FPDU and hole is not None and hole[0] == p.limit:
                del self._holes[d.tuple4]
                self.resyncs.append((frame, d.tuple4, "filled", hole[1], hole[0]))

    def _gap_resync(self, conn: _Conn, d: _Dir, seq: int, data: bytes) -> None:
        """A segment at ``seq`` arrived past a hole: resynchronise at once if an FPDU start can be
        proven in the bytes held after the hole (see the module docstring for the rules)."""
        assert d.next_seq is not None
        starts = d.gap_starts
        starts[seq] = seq
        pos0 = self._marker_origin(d)
        if pos0 is not None:  # RFC 5044 4.3: a marker's FPDUPTR points back to the FPDU it sits in
            m = seq_add(seq, (pos0 - seq) % MARKER_INTERVAL)
            while seq_diff(seq_add(m, MARKER_SIZE), seq_add(seq, len(data))) <= 0:
                off = seq_diff(m, seq)
                if data[off] == 0 and data[off + 1] == 0:
                    ptr = (data[off + 2] << 8) | data[off + 3]
                    start = seq_add(m, -ptr) if ptr else m
                    if seq_diff(start, d.next_seq) > 0 and start not in starts:
                        starts[start] = seq if seq_diff(start, seq) >= 0 else self._holder(d, start)
                m = seq_add(m, MARKER_INTERVAL)
        if d.crc and pos0 is None:  # with CRC32c to prove them, FPDU headers inside the segment too
            for mt in _HEADER_RE.finditer(data, 1):
                i = mt.start()
                if i + 4 > len(data):
                    break
                if _plausible_header(bytearray(data[i : i + 4]), 0):
                    starts[seq_add(seq, i)] = seq
        nxt = d.next_seq
        keep: list[tuple[int, int]] = []
        for s in sorted(starts, key=lambda x: seq_diff(x, nxt)):
            verdict = self._proves_start(d, s, starts[s])
            if verdict:
                self._resync_at(d, self._chain_back(d, s, verdict == "zero"), verdict == "zero")
                return
            if verdict is None:
                keep.append((s, starts[s]))
        d.gap_starts = dict(keep[-self.max_waiting :])

    @staticmethod
    def _marker_origin(d: _Dir) -> int | None:
        """The sequence number markers are counted from, when markers are known to be on."""
        return d.first_fpdu_seq if d.markers and d.first_fpdu_seq is not None else None

    @staticmethod
    def _holder(d: _Dir, s: int) -> int:
        """The sequence number of a held segment that holds octet ``s`` (``s`` if none does)."""
        for seq, (data, _frame) in d.pending.items():
            if 0 <= seq_diff(s, seq) < len(data):
                return seq
        return s

    def _held(self, d: _Dir, s: int, need: int, holder: int | None = None) -> bytes:
        """Up to ``need`` contiguous held octets from sequence number ``s`` (in the held segment
        that starts at ``holder``, when known: then no search of the held segments is needed)."""
        out = bytearray()
        cur = s
        pending = d.pending
        if holder is None or holder not in pending:
            holder = self._holder(d, s)
        hit = pending.get(holder)
        off = seq_diff(s, holder)
        while hit is not None and len(out) < need and 0 <= off < len(hit[0]):
            data = hit[0]
            out += data[off : off + need - len(out)]
            cur = seq_add(cur, len(data) - off)
            hit = pending.get(cur)  # held segments follow one another: the next one's key is ``cur``
            off = 0
        return bytes(out)

    def _reaches(self, d: _Dir, s: int, need: int, holder: int | None) -> bool:
        """Are ``need`` contiguous octets held from ``s``?  (What :meth:`_held` would give, uncopied.)"""
        pending = d.pending
        if holder is None or holder not in pending:
            holder = self._holder(d, s)
        hit = pending.get(holder)
        got = -seq_diff(s, holder)
        cur = holder
        while hit is not None and got < need:
            got += len(hit[0])
            cur = seq_add(cur, len(hit[0]))
            hit = pending.get(cur)
        return got >= need

    def _proves_start(self, d: _Dir, s: int, holder: int | None = None) -> str | bool | None:
        """Does an FPDU start at held sequence number ``s`` (in the held segment at ``holder``)?
        ``"crc"`` (its CRC32c is good) or ``"zero"`` (no CRC: sanity and a zero CRC field), ``False``,
        or ``None`` when the held bytes do not reach far enough."""
        pos0 = self._marker_origin(d)
        pos = None if pos0 is None else (s - pos0) % SEQ_MOD
        head = self._held(d, s, 4 + MARKER_SIZE, holder)
        need = fpdu_wire_length(head, 0, pos)
        if need is None:
            return None if len(head) < 4 + MARKER_SIZE else False
        if not self._reaches(d, s, need, holder):
            return None if pos is not None or _plausible_header(bytearray(head), 0) else False
        buf = self._held(d, s, need + 4, holder)
        try:
            pkt, n = decode_fpdu(buf, 0, markers=pos, crc=d.crc is not False, lenient=True)
        except DecodeError:
            return False
        if pkt.problems or pkt.zero_length and d.crc is False:
            return False
        if d.crc is not False and pkt.crc_status == "good":
            return "crc"
        if d.crc is True:
            return False
        if pkt.crc:  # no CRC negotiated: the sender puts zero there (siw); a non-zero value is no FPDU
            return False
        if pos is None and len(buf) >= n + 4 and not _plausible_header(bytearray(buf), n):
            return False  # what follows it is no FPDU header either
        return "zero"

    def _chain_back(self, d: _Dir, s: int, zero_crc: bool) -> int:
        """The earliest held sequence number from which FPDUs, each proven as at ``s``, follow one
        another up to ``s`` exactly (``s`` itself if none): the FPDUs after the hole that begin
        inside a segment."""
        assert d.next_seq is not None
        nxt = d.next_seq
        firsts = sorted((seq for seq in d.pending if 0 < seq_diff(seq, nxt) and seq_diff(seq, s) < 0),
                        key=lambda x: seq_diff(x, nxt))
        for c in firsts:
            n = seq_diff(s, c)
            run = self._held(d, c, n, c)
            if len(run) < n:
                continue  # another hole between c and s
            pos0 = self._marker_origin(d)
            crc = d.crc is not False and not zero_crc
            rb = bytearray(run)
            offsets = range(n - 3) if pos0 is not None else [m.start() for m in _HEADER_RE.finditer(rb)]
            for i in offsets:
                pos = None if pos0 is None else (seq_add(c, i) - pos0) % SEQ_MOD
                if pos is None and not _plausible_header(rb, i):
                    continue
                j = i
                while j < n:
                    need = fpdu_wire_length(run, j, None if pos is None else (pos + j - i) % SEQ_MOD)
                    if need is None or j + need > n:
                        break
                    try:
                        pkt, used = decode_fpdu(run, j, markers=None if pos is None else (pos + j - i) % SEQ_MOD,
                                                crc=crc, lenient=True)
                    except DecodeError:
                        break
                    if pkt.problems or (pkt.crc_status != "good" if crc else pkt.crc != 0):
                        break
                    j += used
                if j == n:
                    return seq_add(c, i)
            return s
        return s

    def _resync_at(self, d: _Dir, s: int, zero_crc: bool) -> None:
        """Declare the bytes before ``s`` lost and follow the stream from ``s``, an FPDU start."""
        if d.next_seq is not None:
            self._resynced(d, "hole", seq_diff(s, d.next_seq), s)
        self._park(d, s)
        d.next_seq = d.buf_seq = s
        d.state = FPDU
        d.resynced = True
        d.waiting.clear()
        d.scan_pos = 0
        if d.crc is None:
            d.crc = not zero_crc
        if d.markers is None:
            d.markers = False
        self._drain_pending(d)

    def _discard(self, d: _Dir, n: int) -> list[int]:
        """Drop ``n`` bytes from the front of the buffer; return the frames that carried them."""
        frames: list[int] = []
        keep: list[tuple[int, int]] = []
        for i, (off, frame) in enumerate(d.chunks):
            end = d.chunks[i + 1][0] if i + 1 < len(d.chunks) else len(d.buf)
            if off < n and end > off:
                frames.append(frame)
            if end > n:
                keep.append((max(0, off - n), frame))
        d.chunks = keep
        del d.buf[:n]
        d.buf_seq = seq_add(d.buf_seq, n)
        return frames

    # ---------------------------------------------------------------- MPA
    def _inherit(self, conn: _Conn, d: _Dir) -> None:
        """Marker/CRC settings a direction takes from the MPA frames seen on the connection.

        Markers go in the FPDUs a side *sends* when its peer's frame set M (RFC 5044); CRC is
        used in both directions when either frame set C.
        """
        if conn.initiator is None:
            return
        peer = conn.reply if d.tuple4 == conn.initiator else conn.request
        if peer is not None:
            d.markers = bool(peer.marker_flag)
        flags = [f.crc_flag for f in (conn.request, conn.reply) if f is not None]
        if any(flags):
            d.crc = True
        elif len(flags) == 2:
            d.crc = False

    def _parse(self, conn: _Conn, d: _Dir, out: list[Packet]) -> None:
        while True:
            before = (d.state, len(d.buf))
            if d.state in (START, MPA_MAYBE):
                self._parse_mpa(conn, d, out)
            elif d.state == FPDU:
                self._parse_fpdus(conn, d, out)
            elif d.state == HUNT:
                self._hunt(conn, d)
            elif d.state == AWAIT:
                if len(d.buf) > self.give_up_bytes:  # the peer's frame never came: look for FPDUs
                    d.state = HUNT
            if conn.dead or (d.state, len(d.buf)) == before:
                return

    def _parse_mpa(self, conn: _Conn, d: _Dir, out: list[Packet]) -> None:
        head = bytes(d.buf[:16])
        if not (MPA_KEY_REQ.startswith(head) or MPA_KEY_REP.startswith(head)):
            if d.state == START:  # a connection we saw open must begin with MPA: not iWARP
                self._kill(conn)
            else:
                d.state = HUNT
                self._inherit(conn, d)
                self._request_missed(conn, d, out)
            return
        if len(d.buf) < 20:
            return
        pd_length = int.from_bytes(d.buf[18:20], "big")
        if len(d.buf) < 20 + pd_length:
            return
        pkt, n = self._mpa_frame(bytes(d.buf[:20 + pd_length]))
        hdr = pkt[MPAReqRep]
        if hdr.is_request:
            conn.request = hdr
            conn.initiator = d.tuple4
            d.role = "initiator"
        else:
            conn.reply = hdr
            d.role = "responder"
            if conn.initiator is None:
                conn.initiator = (d.tuple4[2], d.tuple4[3], d.tuple4[0], d.tuple4[1])
        self._emit(conn, d, pkt, n, out)
        d.first_fpdu_seq = d.buf_seq
        d.state = AWAIT
        if conn.request is None:
            # No Request yet.  If the initiator has already sent other bytes, the Request was
            # not captured: our own markers/CRC are unknown, so hunt.  Otherwise keep waiting.
            init = conn.dirs.get(conn.initiator) if conn.initiator else None
            if init is not None and init.state not in ("new", START, MPA_MAYBE):
                d.state = HUNT
            for x in conn.dirs.values():
                self._inherit(conn, x)
            return
        if conn.reply is not None:
            if conn.reply.rej_flag:
                self._kill(conn)
                return
            for x in conn.dirs.values():
                self._inherit(conn, x)
                if x.role is None:
                    x.role = "initiator" if x.tuple4 == conn.initiator else "responder"
                if x.state == AWAIT:
                    x.state = FPDU
            for x in conn.dirs.values():
                if x is not d and x.state == FPDU:
                    self._parse(conn, x, out)

    def _mpa_frame(self, frame: bytes) -> tuple[Packet, int]:
        """:func:`~rdmalab.wire.iwarp.decode_mpa_frame` of a whole MPA frame, a new packet each time
        (the tracker sets its stream position), decoded once for the same bytes."""
        seen = self._mpa_frames.get(frame)
        if seen is None:
            pkt, n = decode_mpa_frame(frame, 0, lenient=True)
            if len(self._mpa_frames) >= 256:
                self._mpa_frames.clear()
            self._mpa_frames[frame] = _fresh(pkt)
            return pkt, n
        return _fresh(seen), len(frame)

    def _request_missed(self, conn: _Conn, d: _Dir, out: list[Packet]) -> None:
        """``d`` turned out not to start with an MPA frame: a peer waiting for it hunts."""
        for x in list(conn.dirs.values()):
            if x is not d and x.state == AWAIT and (conn.request is None or conn.reply is None):
                x.state = HUNT
                self._parse(conn, x, out)

    def _kill(self, conn: _Conn) -> None:
        conn.dead = True
        conn.dirs.clear()

    # ---------------------------------------------------------------- FPDUs
    def _stream_pos(self, d: _Dir, at: int = 0) -> int | None:
        if not d.markers or d.first_fpdu_seq is None:
            return None
        return (d.buf_seq + at - d.first_fpdu_seq) % SEQ_MOD

    def _parse_fpdus(self, conn: _Conn, d: _Dir, out: list[Packet]) -> None:
        while d.state == FPDU:
            pos = self._stream_pos(d)
            need = fpdu_wire_length(d.buf, 0, pos)
            if need is None or need > len(d.buf):
                return
            try:
                pkt, n = decode_fpdu(d.buf, 0, markers=pos, crc=d.crc is not False, lenient=True)
            except DecodeError:
                d.state = HUNT
                return
            if pkt.crc_status == "bad" and pkt.problems and not (
                    n == len(d.buf) or any(off == n for off, _frame in d.chunks)):
                # Nonsense headers and a wrong CRC: we have lost the FPDU boundaries.  Unless the FPDU
                # ends where a segment does (an iWARP sender aligns FPDUs to segments, RFC 5044 8): a
                # damaged FPDU in step, shown with its problems, the stream kept (as tshark shows it).
                d.state = HUNT
                d.waiting.clear()
                d.scan_pos = 1
                return
            self._emit(conn, d, pkt, n, out)

    def _emit(self, conn: _Conn, d: _Dir, pkt: Packet, n: int, out: list[Packet]) -> None:
        seq = d.buf_seq
        frames = self._discard(d, n)
        pkt.stream = StreamPosition(frames[-1] if frames else None, tuple(frames), d.tuple4, seq, d.role,
                                    d.resynced, conn.request is not None and conn.reply is not None)
        _sent(conn, pkt)
        out.append(pkt)

    # ---------------------------------------------------------------- resynchronisation
    def _verify(self, d: _Dir, i: int, pos: int | None, count: int, *, zero_crc: bool = False) -> bool | None:
        """Do ``count`` consecutive FPDUs start at ``i`` (stream position ``pos``)?

        ``True``/``False``, or ``None`` when the buffer does not hold them yet.  With
        ``zero_crc`` (CRC not known to be negotiated) the chain must instead carry CRC fields of
        zero, what a sender without CRC puts there (RFC 5044 4.4; Linux siw does so), and one
        FPDU more must line up, since no CRC vouches for the boundaries.
        """
        crc = d.crc is not False and not zero_crc
        for _ in range(count if crc else count + 1):
            if i + 4 > len(d.buf):
                return None
            if pos is None:
                if not _plausible_header(d.buf, i):
                    return False
                n = fpdu_length(ulpdu_length_at(d.buf, i))
                if i + n > len(d.buf):
                    return None
                if crc and _crc.crc32c(d.buf[i : i + n - 4]) != int.from_bytes(d.buf[i + n - 4 : i + n], "little"):
                    return False
                if zero_crc and any(d.buf[i + n - 4 : i + n]):
                    return False
            else:
                n_opt = fpdu_wire_length(d.buf, i, pos)
                if n_opt is None or i + n_opt > len(d.buf):
                    return None
                try:
                    pkt, n = decode_fpdu(d.buf, i, markers=pos, crc=crc, lenient=True)
                except DecodeError:
                    return False
                if pkt.problems or pkt.crc_status == "bad" or pkt.zero_length:
                    return False
                if zero_crc and pkt.crc:
                    return False
                pos = seq_add(pos, n)
            i += n
        return True

    def _candidates(self, d: _Dir, start: int) -> list[tuple[int, int | None]]:
        """Possible FPDU starts from ``start`` on: (offset, stream position or None)."""
        out: list[tuple[int, int | None]] = []
        buf = d.buf
        end = len(buf) - 4
        if d.markers is not True:
            for mt in _HEADER_RE.finditer(buf, start):
                i = mt.start()
                if i >= end:
                    break
                if _plausible_header(buf, i):
                    out.append((i, None))
        if d.markers is not False:
            # A marker (0x0000 | FPDUPTR) at m says an FPDU began FPDUPTR octets earlier.
            m = buf.find(b"\0\0", start)
            while 0 <= m < end:
                ptr = (buf[m + 2] << 8) | buf[m + 3]
                s = m - ptr
                if s >= 0 and (ptr == 0 and _plausible_header(buf, m + 4) or ptr and _plausible_header(buf, s)):
                    out.append((s, (-ptr) % MARKER_INTERVAL))
                m = buf.find(b"\0\0", m + 1)
        return out

    def _hunt(self, conn: _Conn, d: _Dir) -> None:
        found: tuple[int, int | None] | None = None
        waiting: list[tuple[int, int | None]] = []
        scanned = max(0, len(d.buf) - 4)
        crc_off = False
        for i, pos in d.waiting + self._candidates(d, d.scan_pos):
            ok = self._verify(d, i, pos, 2)
            if not ok and d.crc is None:  # perhaps a stream without CRC (siw's default)
                ok_zero = self._verify(d, i, pos, 2, zero_crc=True)
                if ok_zero:
                    ok, crc_off = True, True
                elif ok is False:
                    ok = ok_zero
            if ok:
                found = (i, pos)
                break
            if ok is None:
                if len(waiting) < self.max_waiting:
                    waiting.append((i, pos))
                else:  # no room to remember it: scan from here again next time
                    scanned = min(scanned, i)
        if found is not None:
            i, pos = found
            self._resynced(d, "hunt", i, seq_add(d.buf_seq, i))
            self._discard(d, i)
            d.hunted += i
            d.state = FPDU
            d.resynced = True
            d.waiting.clear()
            d.scan_pos = 0
            if d.crc is None:
                d.crc = not crc_off
            if pos is None:
                if d.markers is None:
                    d.markers = False
            else:
                d.markers = True
                d.first_fpdu_seq = (d.buf_seq - pos) % SEQ_MOD
            return
        # Nothing yet: keep only what a later FPDU could still start in.
        keep_from = min([w[0] for w in waiting] + [scanned])
        keep_from = max(keep_from, len(d.buf) - MAX_FPDU_WIRE)
        waiting = [(w - keep_from, p) for w, p in waiting if w >= keep_from]
        self._discard(d, keep_from)
        d.hunted += keep_from
        d.waiting = waiting
        d.scan_pos = scanned - keep_from
        if d.hunted > self.give_up_bytes:
            d.state = DEAD
            d.buf.clear()
            d.chunks.clear()
            d.pending.clear()
            d.pending_bytes = 0
            if all(x.state == DEAD for x in conn.dirs.values()) and conn.request is None:
                self._kill(conn)
