"""tshark's TCP sequence analysis: the ``tcp.analysis.*`` flags of each segment (retransmissions, lost
and out-of-order segments, duplicate ACKs, keep-alives, window updates, zero windows ...).

Wireshark follows each TCP direction's highest sequence number, last acknowledgment, window and
duplicate-ACK count, and flags a segment against them (packet-tcp.c, ``tcp_analyze_sequence_number``,
tshark 4.0).  :class:`TcpAnalysis` does the same, one segment at a time, in capture order, when a display
filter or ``-T fields`` asks for one of :data:`ANALYSIS_FIELDS`: the columnar decoder feeds it each
block's segments from their columns (:func:`rdmalab.capture.columnar_decode.fill_tcp_analysis`, after the
windows and the conversations), the per-packet path every frame (:class:`rdmalab.capture.render.Conversations`
with ``analysis=True``, which gives each segment its ``tcp.stream``).  The flags are those tshark gives on the real captures of ``captures/`` and on
segments made to raise each flag (``tests/capture/test_tcp_analysis.py``).

The tree's values (:data:`VALUE_FIELDS`: the segment an ACK acknowledges and the round trip, the bytes in
flight ...) follow each direction's segments not yet acknowledged, a list as packet-tcp.c's unacked list.
The flags are also said in front of a summary line's Info, as tshark says them (:func:`info_prefix`:
``[TCP Retransmission] ``, ``[TCP Dup ACK 12#1] `` ...), and the whole SEQ/ACK analysis tree in ``-V``
(:func:`tree_lines`) and ``-T json`` (:func:`json_lines`); ``tcp.analysis`` itself (:data:`TREE`) is a
label on the segments that have it.  ``tcp.analysis.reused_ports``: a SYN whose sequence number is not
where its sender's relative numbers start (a new connection on the same ports; without ACK, a new
``tcp.stream`` too): the conversations decide it (:meth:`rdmalab.capture.render.Conversations._stream`)
and name its frame in :attr:`TcpAnalysis.syns`.  Not given: the TCP Fast Open flags.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from rdmalab.wire.net import SEQ_HALF as _SEQ_HALF
from rdmalab.wire.net import SEQ_MASK as _SEQ_MASK
from rdmalab.wire.net import TCP

#: the flags, as tshark names them (FT_NONE labels: present or not), in the order of its -T fields
FLAG_FIELDS = ("tcp.analysis.retransmission", "tcp.analysis.fast_retransmission",
               "tcp.analysis.spurious_retransmission", "tcp.analysis.out_of_order", "tcp.analysis.lost_segment",
               "tcp.analysis.ack_lost_segment", "tcp.analysis.duplicate_ack", "tcp.analysis.keep_alive",
               "tcp.analysis.keep_alive_ack", "tcp.analysis.window_update", "tcp.analysis.window_full",
               "tcp.analysis.zero_window", "tcp.analysis.zero_window_probe", "tcp.analysis.zero_window_probe_ack",
               "tcp.analysis.reused_ports")
#: the values of the analysis tree beside its flags, in the order :meth:`TcpAnalysis.segment` gives them
#: (0: absent, as tshark leaves them out): the frame of the segment this one acknowledges (its ACK is that
#: segment's end) and the time since it, the conversation's first round trip (SYN to the ACK after it),
#: the octets sent and not acknowledged (given for a segment with data), the octets since the last PSH,
#: and a plain retransmission's time since the oldest segment not acknowledged and that segment's frame
VALUE_FIELDS = ("tcp.analysis.acks_frame", "tcp.analysis.ack_rtt", "tcp.analysis.initial_rtt",
                "tcp.analysis.bytes_in_flight", "tcp.analysis.push_bytes_sent", "tcp.analysis.rto",
                "tcp.analysis.rto_frame")
#: the :data:`VALUE_FIELDS` that are times (tshark's FT_RELATIVE_TIME: nanoseconds here, written as seconds)
TIME_FIELDS = ("tcp.analysis.ack_rtt", "tcp.analysis.initial_rtt", "tcp.analysis.rto")
#: the analysis tree itself (tshark's ``tcp.analysis``, "SEQ/ACK analysis", a label): on a segment that has
#: a flag, acknowledges the end of a segment, or carries data counted in flight (:data:`Segment`)
TREE = "tcp.analysis"
#: every field :class:`TcpAnalysis` gives: ``tcp.analysis.flags`` (any flag), the flags, a duplicate
#: ACK's number and the frame of the ACK it repeats, the :data:`VALUE_FIELDS`, and the tree itself
ANALYSIS_FIELDS = ("tcp.analysis.flags", *FLAG_FIELDS, "tcp.analysis.duplicate_ack_num",
                   "tcp.analysis.duplicate_ack_frame", *VALUE_FIELDS, TREE)
#: the label fields (no value: a filter tests them alone, as tshark, which refuses to compare them)
LABEL_FIELDS = ("tcp.analysis.flags", *FLAG_FIELDS, TREE)

_SYN_FIN_RST = TCP.SYN | TCP.FIN | TCP.RST
#: a retransmission within this long after the reverse direction's second duplicate ACK is a fast one
FAST_RETRANSMISSION_NS = 20_000_000
#: out of order: a segment this soon after the direction's highest one (without a first round trip time)
OUT_OF_ORDER_NS = 3_000_000
_U64 = 1 << 64


#: a direction's segments not yet acknowledged are listed up to this many (packet-tcp.c's TCP_MAX_UNACKED_SEGMENTS)
MOST_UNACKED = 10_000
#: bytes in flight past this many are not given (packet-tcp.c: a sum gone wrong)
_BIF_MAX = 2_000_000_000


#: what tshark puts in front of the Info column for each flag, in the order it shows them: packet-tcp.c
#: (tshark 4.0, tcp_print_sequence_number_analysis) prepends each flag's text in turn, retransmissions
#: first, then lost segments, window, keep-alive, duplicate ACK, zero window, so the last one comes
#: first; the ports reused (a SYN's, tshark's TCP_A_REUSED_PORTS) are said before them all, so last.  A
#: duplicate ACK's text has its frame and number (:func:`info_prefix`); a plain retransmission's is said
#: only when it is neither fast nor spurious (packet-tcp.c keeps one kind of retransmission).
INFO_PREFIXES = (("tcp.analysis.zero_window_probe_ack", "[TCP ZeroWindowProbeAck] "),
                 ("tcp.analysis.zero_window", "[TCP ZeroWindow] "),
                 ("tcp.analysis.zero_window_probe", "[TCP ZeroWindowProbe] "),
                 ("tcp.analysis.duplicate_ack", "[TCP Dup ACK {frame}#{num}] "),
                 ("tcp.analysis.keep_alive_ack", "[TCP Keep-Alive ACK] "),
                 ("tcp.analysis.keep_alive", "[TCP Keep-Alive] "),
                 ("tcp.analysis.window_full", "[TCP Window Full] "),
                 ("tcp.analysis.window_update", "[TCP Window Update] "),
                 ("tcp.analysis.ack_lost_segment", "[TCP ACKed unseen segment] "),
                 ("tcp.analysis.lost_segment", "[TCP Previous segment not captured] "),
                 ("tcp.analysis.out_of_order", "[TCP Out-Of-Order] "),
                 ("tcp.analysis.spurious_retransmission", "[TCP Spurious Retransmission] "),
                 ("tcp.analysis.fast_retransmission", "[TCP Fast Retransmission] "),
                 ("tcp.analysis.retransmission", "[TCP Retransmission] "),
                 ("tcp.analysis.reused_ports", "[TCP Port numbers reused] "))
_KINDS_OF_RETRANSMISSION = ("tcp.analysis.spurious_retransmission", "tcp.analysis.fast_retransmission")


def info_prefix(names: Any, dup: tuple[int, int] | None = None) -> str:
    """The text tshark puts in front of a segment's Info for its flags ``names`` (a collection of
    :data:`FLAG_FIELDS`; ``dup``: a duplicate ACK's number and the frame it repeats, as
    :meth:`TcpAnalysis.segment` gives them): "" without a flag."""
    if not names:
        return ""
    out = []
    for name, text in INFO_PREFIXES:
        if name not in names:
            continue
        if name == "tcp.analysis.duplicate_ack":
            if dup is None:
                continue
            text = text.format(frame=dup[1], num=dup[0])
        elif name == "tcp.analysis.retransmission" and any(k in names for k in _KINDS_OF_RETRANSMISSION):
            continue
        out.append(text)
    return "".join(out)


def fields_prefix(fields: dict[str, Any]) -> str:
    """:func:`info_prefix` of a frame's field dictionary, after :meth:`TcpAnalysis.add`."""
    if "tcp.analysis.flags" not in fields:
        return ""
    dup = None
    if "tcp.analysis.duplicate_ack_num" in fields:
        dup = (fields["tcp.analysis.duplicate_ack_num"], fields["tcp.analysis.duplicate_ack_frame"])
    return info_prefix([n for n in FLAG_FIELDS if n in fields], dup)


#: each flag's bit in :meth:`TcpAnalysis._flags` (its place in :data:`FLAG_FIELDS`)
_BIT = {name: 1 << i for i, name in enumerate(FLAG_FIELDS)}
_RETRANSMISSION = _BIT["tcp.analysis.retransmission"]
_FAST_RETRANSMISSION = _BIT["tcp.analysis.fast_retransmission"]
_SPURIOUS_RETRANSMISSION = _BIT["tcp.analysis.spurious_retransmission"]
_OUT_OF_ORDER = _BIT["tcp.analysis.out_of_order"]
_LOST_SEGMENT = _BIT["tcp.analysis.lost_segment"]
_ACK_LOST_SEGMENT = _BIT["tcp.analysis.ack_lost_segment"]
_DUPLICATE_ACK = _BIT["tcp.analysis.duplicate_ack"]
_KEEP_ALIVE = _BIT["tcp.analysis.keep_alive"]
_KEEP_ALIVE_ACK = _BIT["tcp.analysis.keep_alive_ack"]
_WINDOW_UPDATE = _BIT["tcp.analysis.window_update"]
_WINDOW_FULL = _BIT["tcp.analysis.window_full"]
_ZERO_WINDOW = _BIT["tcp.analysis.zero_window"]
_ZERO_WINDOW_PROBE = _BIT["tcp.analysis.zero_window_probe"]
_ZERO_WINDOW_PROBE_ACK = _BIT["tcp.analysis.zero_window_probe_ack"]
_REUSED_PORTS = _BIT["tcp.analysis.reused_ports"]
_NAMES: dict[int, tuple[str, ...]] = {}


def _names(bits: int) -> tuple[str, ...]:
    """The names of the flags ``bits`` (:data:`_BIT`), in :data:`FLAG_FIELDS` order."""
    got = _NAMES.get(bits)
    if got is None:
        got = _NAMES[bits] = tuple(n for n in FLAG_FIELDS if bits & _BIT[n])
    return got


class _Direction:
    """One direction of a TCP conversation as Wireshark's analysis follows it (``tcp_flow_t``)."""

    __slots__ = ("nextseq", "nextseq_ns", "nextseq_frame", "lastack", "lastack_ns", "window", "dupacks",
                 "lastnondupack", "maxseqtobeacked", "last_flags", "base", "valid_bif", "unacked", "push_sent",
                 "push_last", "sack", "ordered")

    def __init__(self) -> None:
        self.nextseq = 0  # the highest sequence number seen, after the segment (0: none seen)
        self.nextseq_ns = 0  # when it was seen
        self.nextseq_frame = 0  # and in which frame
        self.lastack = 0
        self.lastack_ns = 0
        self.window = 0  # the last segment's window field, unscaled
        self.dupacks = 0  # duplicate ACKs in a row (-1: data past this direction's was ACKed)
        self.lastnondupack = 0  # the frame of the last ACK that was not a duplicate
        self.maxseqtobeacked = 0  # the highest sequence number seen without a hole before it
        self.last_flags = 0  # the last segment's flags (bits: _BIT)
        self.base = -1  # the sequence number before the first (the SYN's own): -1 not known yet
        self.valid_bif = True  # bytes in flight are counted (not after a hole, until the other side ACKs)
        #: the segments sent and not yet acknowledged, oldest first: [seq, end, frame, time in ns]
        self.unacked: list[list[int]] = []
        self.ordered = True  # whether each of them starts where the one before it ends
        self.push_sent = 0  # octets sent since the last segment with PSH (tshark's push_bytes_sent)
        self.push_last = False  # whether the last segment with data had PSH
        self.sack = 0  # the octets the last segment's SACK option said were received


#: the other direction of a conversation between an end and itself (:meth:`TcpAnalysis.segment`)
_SAME_END = ("the other direction of an end talking to itself",)


class _Conversation:
    __slots__ = ("dirs", "syn_ns", "first_rtt_ns")

    def __init__(self) -> None:
        self.dirs: dict[Any, _Direction] = {}
        self.syn_ns = 0  # the last SYN without ACK
        self.first_rtt_ns = 0  # from it to the first ACK without SYN (tshark's iRTT)


#: what :meth:`TcpAnalysis.segment` gives of one segment: its flags' names, a duplicate ACK's number and
#: the frame it repeats (else None), and the :data:`VALUE_FIELDS` (0 for each one absent) when the segment
#: has tshark's analysis tree at all (else None: a segment that neither has a flag, nor acknowledges the
#: end of a segment, nor carries data counted in flight)
Segment = tuple[list[str], "tuple[int, int] | None", "tuple[int, int, int, int, int, int, int] | None"]


class TcpAnalysis:
    """The ``tcp.analysis.*`` fields of TCP segments fed in capture order (:meth:`add`).  Bounded: past
    ``most`` conversations, the oldest is forgotten."""

    def __init__(self, most: int = 1 << 20, *, values: bool = True) -> None:
        self._conv: dict[int, _Conversation] = {}
        self._most = most
        #: whether the :data:`VALUE_FIELDS` are followed (False: the flags alone, for the summary lines'
        #: prefixes, at about half the cost: :meth:`segment` gives no values, and a ``sack`` is not read)
        self.values = values
        #: the SYNs whose sender's base sequence number was known, frame -> whether the ports are reused
        #: (another number than the base: tshark's TCP_A_REUSED_PORTS; False: a SYN without ACK on its
        #: base, which has the analysis tree all the same).  The conversations name them before they come
        #: here (:meth:`rdmalab.capture.render.Conversations._stream`); each is taken out as it is analysed.
        self.syns: dict[int, bool] = {}

    def add(self, fields: dict[str, Any], stream: int, src: tuple[Any, int], dst: tuple[Any, int],
            rev_shift: int, sack: int = 0) -> None:
        """Put the analysis fields of the TCP segment in ``fields`` (a frame's field dictionary with its
        raw numbers, ``tcp.len`` and ``frame.time_ns``) into it.  ``stream`` is its ``tcp.stream``,
        ``src`` and ``dst`` its (address, port) ends, ``rev_shift`` the window scaling shift its receiver
        announced (:meth:`rdmalab.capture.render.TcpWindowScaling.shifts`: -1 not known, -2 none): a segment
        fills the window the receiver last offered (window full) only where that is known.  The caller
        leaves out a segment an ICMP error quotes (as tshark).  ``sack``: the octets its SACK option says
        were received (:func:`rdmalab.capture.render.sack_delivered`), which the other direction's bytes in
        flight leave out.  The times are nanoseconds."""
        seq, ack, flags = fields.get("tcp.seq_raw"), fields.get("tcp.ack_raw"), fields.get("tcp.flags")
        seglen, window, now = fields.get("tcp.len"), fields.get("tcp.window_size_value"), fields.get("frame.time_ns")
        if not (isinstance(seq, int) and isinstance(ack, int) and isinstance(flags, int) and isinstance(seglen, int)
                and isinstance(window, int) and isinstance(now, int)):
            return  # (a header tshark stops in before its analysis)
        names, dup, values = self.segment(stream, src, dst, rev_shift, seq, ack, flags, seglen, window, now,
                                          int(fields["frame.number"]), sack)
        if names:
            fields["tcp.analysis.flags"] = 1
            for name in names:
                # (tshark gives a duplicate ACK's label twice: in the flags and under the frame it repeats)
                fields[name] = [1, 1] if name == "tcp.analysis.duplicate_ack" else 1
        if dup is not None:
            fields["tcp.analysis.duplicate_ack_num"], fields["tcp.analysis.duplicate_ack_frame"] = dup
        if values is not None:
            fields[TREE] = 1
            for name, v in zip(VALUE_FIELDS, values, strict=True):
                if v:
                    fields[name] = v

    def segment(self, stream: int, src: Any, dst: Any, rev_shift: int, seq: int, ack: int, flags: int, seglen: int,
                window: int, now: int, frame: int, sack: int = 0) -> Segment:
        """:meth:`add` of one segment given by its numbers (raw sequence and acknowledgment numbers, flags,
        ``tcp.len``, raw window, time in nanoseconds, frame number, octets its SACK option says were received;
        ``src`` and ``dst`` its ends, any values that tell the two directions apart): its :data:`Segment`, the names of its flags in
        :data:`FLAG_FIELDS` order."""
        conv = self._conv.get(stream)
        if conv is None:
            if len(self._conv) >= self._most:
                self._conv.pop(next(iter(self._conv)))
            conv = self._conv[stream] = _Conversation()
        dirs = conv.dirs
        fwd = dirs.get(src)
        if fwd is None:
            fwd = dirs[src] = _Direction()
        if dst == src:
            # a segment to its own address and port: tshark still keeps two directions (packet-tcp.c
            # orders the two ends by address, then port, and takes the same one as the sender when both are
            # equal), so each such segment is sent by the one and received by the other
            dst = _SAME_END
        rev = dirs.get(dst)
        if rev is None:
            rev = dirs[dst] = _Direction()
        mark = None
        if flags & TCP.SYN:
            if not flags & TCP.ACK:
                conv.syn_ns = now
            mark = self.syns.pop(frame, None)
        elif flags & TCP.ACK and conv.syn_ns and not conv.first_rtt_ns:
            conv.first_rtt_ns = now - conv.syn_ns
        fwd.sack = sack
        return self._flags(fwd, rev, seq, ack, flags, seglen, window, now, frame, rev_shift, conv.first_rtt_ns,
                           self.values, mark)

    def flags_many(self, streams: list[int], srcs: list[Any], dsts: list[Any], rev_shifts: list[int],
                   seqs: list[int], acks: list[int], flagss: list[int], seglens: list[int], windows: list[int],
                   nows: list[int], frames: list[int]) -> list[tuple[int, int, tuple[int, int] | None]]:
        """:meth:`segment` of many segments in capture order, for an analysis of the flags alone
        (``values`` False), one loop with the state in local names (the summary lines' prefixes: this
        runs for every TCP segment): the (place in the lists, flags as bits of :data:`_BIT`, a duplicate
        ACK's number and the frame it repeats) of each segment with a flag.  The rules are
        :meth:`_flags`' own, in its order, less what only the values read (the list of segments not
        acknowledged, where the relative numbers start, whether bytes in flight are counted)."""
        assert not self.values
        M, H, U64 = _SEQ_MASK, _SEQ_HALF, _U64
        SYN, ACK, RST, SYN_FIN, SYN_FIN_RST = TCP.SYN, TCP.ACK, TCP.RST, TCP.SYN | TCP.FIN, _SYN_FIN_RST
        convs = self._conv
        most = self._most
        syns = self.syns
        out: list[tuple[int, int, tuple[int, int] | None]] = []
        i = -1
        for stream, src, dst, rev_shift, seq, ack, flags, seglen, window, now, frame in zip(
                streams, srcs, dsts, rev_shifts, seqs, acks, flagss, seglens, windows, nows, frames, strict=True):
            i += 1
            conv = convs.get(stream)
            if conv is None:
                if len(convs) >= most:
                    convs.pop(next(iter(convs)))
                conv = convs[stream] = _Conversation()
            dirs = conv.dirs
            fwd = dirs.get(src)
            if fwd is None:
                fwd = dirs[src] = _Direction()
            if dst == src:  # (an end talking to itself: two directions still, as segment())
                dst = _SAME_END
            rev = dirs.get(dst)
            if rev is None:
                rev = dirs[dst] = _Direction()
            ta = 0
            if flags & SYN:
                if not flags & ACK:
                    conv.syn_ns = now
                if syns and syns.pop(frame, False):  # (the ports reused: the conversations said so)
                    ta = _REUSED_PORTS
            elif flags & ACK and conv.syn_ns and not conv.first_rtt_ns:
                conv.first_rtt_ns = now - conv.syn_ns
            # (from here _flags, its state read once)
            dup: tuple[int, int] | None = None
            plain = not flags & SYN_FIN_RST
            nextseq_was = fwd.nextseq
            fwd_lastack = fwd.lastack
            rev_window = rev.window
            repeats = seq == nextseq_was and ack == fwd_lastack
            probe = seglen == 1 and seq == nextseq_was and rev_window == 0
            if probe:
                ta |= _ZERO_WINDOW_PROBE
            else:
                if window == 0 and plain:
                    ta |= _ZERO_WINDOW
                if nextseq_was and ((seq - nextseq_was + H) & M) > H and not flags & RST:
                    ta |= _LOST_SEGMENT
                if seglen <= 1 and seq == (nextseq_was - 1) & M and plain:
                    ta |= _KEEP_ALIVE
                if plain and seglen == 0:
                    if window and window != fwd.window and repeats:
                        ta |= _WINDOW_UPDATE
                elif (plain and rev_shift != -1
                      and (seq + seglen) & M == (rev.lastack + (rev_window << max(rev_shift, 0))) & M):
                    ta |= _WINDOW_FULL
                if seglen == 0 and repeats and plain:
                    fwd_window = fwd.window
                    if window and window == fwd_window and rev.last_flags & _KEEP_ALIVE:
                        ta |= _KEEP_ALIVE_ACK
                    elif window == 0 and fwd_window == 0 and rev.last_flags & _ZERO_WINDOW_PROBE:
                        ta |= _ZERO_WINDOW_PROBE_ACK
                    elif window and window == fwd_window:
                        fwd.dupacks = 1 if fwd.dupacks == -1 else fwd.dupacks + 1
                        ta |= _DUPLICATE_ACK
                        dup = (fwd.dupacks, fwd.lastnondupack)
            if ack != fwd_lastack:
                fwd.lastnondupack = frame
                fwd.dupacks = 0
            rev_max = rev.maxseqtobeacked
            if rev_max and ((ack - rev_max + H) & M) > H and flags & ACK:
                if rev_max != rev.nextseq:
                    rev.maxseqtobeacked = rev.nextseq
                    ta |= _ACK_LOST_SEGMENT
                else:
                    if rev.dupacks == 0:
                        ta |= _ACK_LOST_SEGMENT
                    rev.dupacks = -1
            syn_fin = 1 if flags & SYN_FIN else 0
            ends = (seq + seglen + syn_fin) & M
            if (seglen > 0 or syn_fin) and not ta & _KEEP_ALIVE:
                behind = bool(nextseq_was) and ((seq - nextseq_was + H) & M) < H
                if seglen > 1 and (nextseq_was - 1) & M == seq:
                    behind = False
                rev_lastack = rev.lastack
                if seglen > 0 and rev_lastack and ((seq + seglen - rev_lastack + H) & M) <= H:
                    ta |= _SPURIOUS_RETRANSMISSION | _RETRANSMISSION
                elif behind:
                    if ((rev.dupacks >= 2 or rev.dupacks == -1) and rev_lastack == seq
                            and (now - rev.lastack_ns) % U64 < FAST_RETRANSMISSION_NS):
                        ta |= _FAST_RETRANSMISSION | _RETRANSMISSION
                    elif (now - fwd.nextseq_ns) % U64 < (conv.first_rtt_ns or OUT_OF_ORDER_NS) and nextseq_was != ends:
                        ta |= _OUT_OF_ORDER
                    else:
                        ta |= _RETRANSMISSION
            if not probe:
                if not nextseq_was or ((ends - nextseq_was + H) & M) > H:
                    fwd.nextseq, fwd.nextseq_ns, fwd.nextseq_frame = ends, now, frame
                maxseq = fwd.maxseqtobeacked
                if not maxseq or seq == maxseq:
                    fwd.maxseqtobeacked = fwd.nextseq
            fwd.window, fwd.lastack, fwd.lastack_ns = window, ack, now
            fwd.last_flags = ta
            if ta:
                out.append((i, ta, dup))
        return out

    @staticmethod
    def _flags(fwd: _Direction, rev: _Direction, seq: int, ack: int, flags: int, seglen: int, window: int, now: int,
               frame: int, rev_shift: int, first_rtt_ns: int, values: bool = True,
               syn: bool | None = None) -> Segment:
        """The :data:`Segment` of one segment, and the directions' state moved past it (packet-tcp.c's order,
        ``tcp_analyze_sequence_number``); ``syn``: a SYN's mark (:attr:`TcpAnalysis.syns`).  (Sequence arithmetic written out: ``(a + n) & M`` is
        :func:`~rdmalab.wire.net.seq_add`, and ``((a - b + H) & M) - H`` is :func:`~rdmalab.wire.net.seq_diff`;
        this runs for every segment.)"""
        M, H = _SEQ_MASK, _SEQ_HALF
        ta = _REUSED_PORTS if syn else 0  # (the flags: one bit each, _BIT)
        dup: tuple[int, int] | None = None
        acks_frame = rtt = bif = push = rto = rto_frame = 0
        tree = syn is not None  # (a SYN on a known base: the tree, if empty)
        if fwd.base < 0 or flags & TCP.SYN:  # (where the relative numbers start: the last SYN's, else one before the first)
            fwd.base = seq if flags & TCP.SYN else (seq - 1) & M
        if flags & TCP.ACK:
            if rev.base < 0:
                rev.base = (ack - 1) & M
            rev.valid_bif = True
        plain = not flags & _SYN_FIN_RST
        nextseq_was = fwd.nextseq
        repeats = seq == nextseq_was and ack == fwd.lastack  # (the window and ACK of the last segment again)
        probe = seglen == 1 and seq == nextseq_was and rev.window == 0
        if probe:
            ta |= _ZERO_WINDOW_PROBE
        else:
            if window == 0 and plain:
                ta |= _ZERO_WINDOW
            if nextseq_was and ((seq - nextseq_was + H) & M) > H and not flags & TCP.RST:
                ta |= _LOST_SEGMENT
                fwd.valid_bif = False  # (until the other side ACKs)
            if seglen <= 1 and seq == (nextseq_was - 1) & M and plain:
                ta |= _KEEP_ALIVE
            if plain and seglen == 0:
                if window and window != fwd.window and repeats:
                    ta |= _WINDOW_UPDATE
            elif plain and rev_shift != -1 and (seq + seglen) & M == (rev.lastack + (rev.window << max(rev_shift, 0))) & M:
                ta |= _WINDOW_FULL
            if seglen == 0 and repeats and plain:
                if window and window == fwd.window and rev.last_flags & _KEEP_ALIVE:
                    ta |= _KEEP_ALIVE_ACK
                elif window == 0 and fwd.window == 0 and rev.last_flags & _ZERO_WINDOW_PROBE:
                    ta |= _ZERO_WINDOW_PROBE_ACK
                elif window and window == fwd.window:
                    fwd.dupacks = 1 if fwd.dupacks == -1 else fwd.dupacks + 1  # (-1: an ACK of unseen data was said)
                    ta |= _DUPLICATE_ACK
                    dup = (fwd.dupacks, fwd.lastnondupack)
        if ack != fwd.lastack:
            fwd.lastnondupack = frame
            fwd.dupacks = 0
        rev_max = rev.maxseqtobeacked
        if rev_max and ((ack - rev_max + H) & M) > H and flags & TCP.ACK:
            tree = True  # (the tree, even when the flag is not said again)
            if rev_max != rev.nextseq:  # it acknowledges octets in a hole of the other direction
                rev.maxseqtobeacked = rev.nextseq
                ta |= _ACK_LOST_SEGMENT
            else:  # octets past all the other direction sent: said once, until that direction's ACK moves
                if rev.dupacks == 0:
                    ta |= _ACK_LOST_SEGMENT
                rev.dupacks = -1
        syn_fin = 1 if flags & (TCP.SYN | TCP.FIN) else 0
        ends = (seq + seglen + syn_fin) & M
        if (seglen > 0 or syn_fin) and not ta & _KEEP_ALIVE:
            behind = bool(nextseq_was) and ((seq - nextseq_was + H) & M) < H
            if seglen > 1 and (nextseq_was - 1) & M == seq:
                behind = False  # (more than the octet before a zero window probe: new data)
            # (times as tshark's unsigned nanoseconds: a segment before the one compared with is long after it)
            if seglen > 0 and rev.lastack and ((seq + seglen - rev.lastack + H) & M) <= H:
                ta |= _SPURIOUS_RETRANSMISSION | _RETRANSMISSION  # (acknowledged)
            elif (behind and (rev.dupacks >= 2 or rev.dupacks == -1) and rev.lastack == seq  # (-1: unsigned in tshark)
                    and (now - rev.lastack_ns) % _U64 < FAST_RETRANSMISSION_NS):
                ta |= _FAST_RETRANSMISSION | _RETRANSMISSION
            elif behind and (now - fwd.nextseq_ns) % _U64 < (first_rtt_ns or OUT_OF_ORDER_NS) and nextseq_was != ends:
                ta |= _OUT_OF_ORDER
            elif behind:
                ta |= _RETRANSMISSION
                # the time since the oldest segment not acknowledged (else since the highest one was sent)
                oldest = fwd.unacked[0] if fwd.unacked else None
                rto = now - (oldest[3] if oldest else fwd.nextseq_ns)
                rto_frame = (oldest[2] if oldest else fwd.nextseq_frame) if rto else 0
        if (not fwd.nextseq or ((ends - fwd.nextseq + H) & M) > H) and not probe:
            fwd.nextseq, fwd.nextseq_ns, fwd.nextseq_frame = ends, now, frame
        if (not fwd.maxseqtobeacked or seq == fwd.maxseqtobeacked) and not probe:
            fwd.maxseqtobeacked = fwd.nextseq
        fwd.window, fwd.lastack, fwd.lastack_ns = window, ack, now
        fwd.last_flags = ta
        if not values:  # (the flags alone: no list of segments, no values)
            return (list(_names(ta)), dup, None) if ta else ([], dup, None)
        unacked = fwd.unacked
        if (seglen or syn_fin) and len(unacked) < MOST_UNACKED:
            if not unacked:
                fwd.ordered = True
            elif seq != unacked[-1][1]:
                fwd.ordered = False
            unacked.append([seq, ends, frame, now])
        # the other direction's segments this one acknowledges: gone from its list; the oldest whose end it
        # acknowledges exactly is the segment it ACKs
        theirs = rev.unacked
        if theirs:
            acked = None
            last = theirs[-1]
            if rev.ordered and ((ack - last[1]) & M) >= H and ((last[1] - theirs[0][0]) & M) < H:
                # (one run of segments, each starting where the one before ends, whose last end is not
                # acknowledged: those acknowledged are the first few, and only the next can be in part)
                k = 0
                while ((ack - theirs[k][1]) & M) < H:
                    if ack == theirs[k][1]:
                        acked = theirs[k]
                    k += 1
                if ((theirs[k][0] - ack) & M) >= H:
                    theirs[k][0] = ack
                if k:
                    del theirs[:k]
            else:
                keep = []
                for s in theirs:
                    if ack == s[1]:
                        if acked is None:
                            acked = s
                    elif ((ack - s[1]) & M) >= H:  # (its end not acknowledged: it stays, less what is)
                        if ((s[0] - ack) & M) >= H:
                            s[0] = ack
                        keep.append(s)
                if len(keep) != len(theirs):
                    rev.unacked = keep
            if acked is not None:
                tree = True
                acks_frame, rtt = acked[2], now - acked[3]
        # the octets in flight after a segment with data: from the lowest start to the highest end of the
        # segments not acknowledged (counted from the direction's first number)
        if seglen and unacked and fwd.valid_bif:
            tree = True
            base = fwd.base
            first = (unacked[0][0] - base) & M
            span = (unacked[-1][1] - unacked[0][0]) & M
            if fwd.ordered and span < H and first + span <= M:  # (one run: from its start to its end)
                in_flight = span
            else:
                first = min((s[0] - base) & M for s in unacked)
                in_flight = max((s[1] - base) & M for s in unacked) - first
            in_flight = (in_flight - rev.sack) & M  # (less what the other side's last SACK said it has)
            if 0 < in_flight < _BIF_MAX:
                bif = in_flight - syn_fin  # (a SYN or FIN's octet is not data)
            if flags & TCP.PSH or fwd.push_last:
                fwd.push_sent = seglen if fwd.push_last else (fwd.push_sent + seglen) & M
                fwd.push_last = bool(flags & TCP.PSH)
            else:
                fwd.push_sent = (fwd.push_sent + seglen) & M
            if bif:
                push = fwd.push_sent
        if ta:
            return list(_names(ta)), dup, (acks_frame, rtt, first_rtt_ns, bif, push, rto, rto_frame)
        if not tree:
            return [], dup, None
        return [], dup, (acks_frame, rtt, first_rtt_ns, bif, push, rto, rto_frame)


#: each flag's expert information in tshark's SEQ/ACK analysis tree (packet-tcp.c's ei_tcp_analysis_*):
#: severity and message, in the order tshark adds them under "[TCP Analysis Flags]" (the ports reused first;
#: a fast or spurious retransmission's own, then the plain one's; a duplicate ACK's is under the frame it
#: repeats)
EXPERT = (("tcp.analysis.reused_ports", "Note",
           "A new tcp session is started with the same ports as an earlier session in this trace"),
          ("tcp.analysis.fast_retransmission", "Note", "This frame is a (suspected) fast retransmission"),
          ("tcp.analysis.spurious_retransmission", "Note", "This frame is a (suspected) spurious retransmission"),
          ("tcp.analysis.retransmission", "Note", "This frame is a (suspected) retransmission"),
          ("tcp.analysis.out_of_order", "Warning", "This frame is a (suspected) out-of-order segment"),
          ("tcp.analysis.lost_segment", "Warning", "Previous segment(s) not captured (common at capture start)"),
          ("tcp.analysis.ack_lost_segment", "Warning", "ACKed segment that wasn't captured (common at capture start)"),
          ("tcp.analysis.window_update", "Chat", "TCP window update"),
          ("tcp.analysis.window_full", "Warning", "TCP window specified by the receiver is now completely full"),
          ("tcp.analysis.keep_alive", "Note", "TCP keep-alive segment"),
          ("tcp.analysis.keep_alive_ack", "Note", "ACK to a TCP keep-alive segment"),
          ("tcp.analysis.duplicate_ack", "", ""),
          ("tcp.analysis.zero_window_probe", "Note", "TCP Zero Window Probe"),
          ("tcp.analysis.zero_window", "Warning", "TCP Zero Window segment"),
          ("tcp.analysis.zero_window_probe_ack", "Note", "ACK to a TCP Zero Window Probe"))
#: tshark's _ws.expert.severity of each (the number -T json writes) and the Sequence group's
SEVERITY = {"Chat": 2097152, "Note": 4194304, "Warning": 6291456}
SEQUENCE_GROUP = 33554432


def seconds_text(ns: int) -> str:
    """A relative time as tshark writes it: signed seconds and nine digits."""
    a = abs(ns)
    return f"{'-' if ns < 0 else ''}{a // 1_000_000_000}.{a % 1_000_000_000:09d}"


def _expert(severity: str, message: str) -> list[str]:
    return [f"[Expert Info ({severity}/Sequence): {message}]", f"    [{message}]", f"    [Severity level: {severity}]",
            "    [Group: Sequence]"]


#: (flags, whether a duplicate ACK's pair is known) -> :func:`_flag_lines`.  Bounded: there are 15 flags, and
#: few of their sets ever seen.
_FLAG_LINES: dict[tuple[tuple[str, ...], bool], tuple[list[str], list[str] | None]] = {}


def _flag_lines(names: tuple[str, ...], dup: bool) -> tuple[list[str], list[str] | None]:
    """The ``[TCP Analysis Flags]`` lines of a segment's SEQ/ACK analysis tree (:func:`tree_lines`) with the
    flags ``names``: the lines up to where a plain retransmission's RTO lines go, and those after it (None:
    no such place, not a plain retransmission).  The same for every segment with those flags: made once."""
    got = _FLAG_LINES.get((names, dup))
    if got is not None:
        return got
    before = ["    [TCP Analysis Flags]"]
    after: list[str] | None = None
    out = before
    kind = any(k in names for k in _KINDS_OF_RETRANSMISSION)
    for name, severity, message in EXPERT:
        if name not in names:
            continue
        if name == "tcp.analysis.duplicate_ack":
            if dup:
                out.append("        [This is a TCP duplicate ack]")
            continue
        out.extend("        " + line for line in _expert(severity, message))
        if name == "tcp.analysis.retransmission" and not kind:
            out = after = []
    if len(_FLAG_LINES) >= 4096:
        _FLAG_LINES.clear()
    _FLAG_LINES[names, dup] = before, after
    return before, after


def tree_lines(names: Any, dup: tuple[int, int] | None,
               values: tuple[int, int, int, int, int, int, int] | None) -> list[str]:
    """tshark's ``[SEQ/ACK analysis]`` tree of a segment (``tshark -V``, packet-tcp.c's
    tcp_print_sequence_number_analysis), its lines indented from 0, four spaces a level: from its
    :data:`Segment` (``names`` its flags); none without the tree (``values`` None)."""
    if values is None:
        return []
    acks_frame, rtt, first_rtt, bif, push, rto, rto_frame = values
    out = ["[SEQ/ACK analysis]"]
    if acks_frame:
        out.append(f"    [This is an ACK to the segment in frame: {acks_frame}]")
        if rtt:
            out.append(f"    [The RTT to ACK the segment was: {seconds_text(rtt)} seconds]")
    if first_rtt:
        out.append(f"    [iRTT: {seconds_text(first_rtt)} seconds]")
    if bif:
        out.append(f"    [Bytes in flight: {bif}]")
        out.append(f"    [Bytes sent since last PSH flag: {push}]")
    if names:
        before, after = _flag_lines(tuple(names), dup is not None)
        out += before
        if after is not None and rto:  # (a plain retransmission's RTO: after its own expert lines)
            out.append(f"        [The RTO for this segment was: {seconds_text(rto)} seconds]")
            out.append(f"        [RTO based on delta from frame: {rto_frame}]")
        if after:
            out += after
    if dup is not None:
        out.append(f"    [Duplicate ACK #: {dup[0]}]")
        out.append(f"    [Duplicate to the ACK in frame: {dup[1]}]")
        out.extend("        " + line for line in _expert("Note", f"Duplicate ACK (#{dup[0]})"))
    return out


def _of_fields(fields: dict[str, Any]) -> tuple[list[str], tuple[int, int] | None,
                                                 tuple[int, int, int, int, int, int, int]]:
    """The flags, a duplicate ACK's number and frame, and the values of a frame's field dictionary (after
    :meth:`TcpAnalysis.add`), as :func:`tree_lines` and :func:`json_lines` take them."""
    dup = None
    if "tcp.analysis.duplicate_ack_num" in fields:
        dup = (fields["tcp.analysis.duplicate_ack_num"], fields["tcp.analysis.duplicate_ack_frame"])
    v = [int(fields.get(name, 0)) for name in VALUE_FIELDS]
    return [n for n in FLAG_FIELDS if n in fields], dup, (v[0], v[1], v[2], v[3], v[4], v[5], v[6])


def fields_tree(fields: dict[str, Any]) -> list[str]:
    """:func:`tree_lines` of a frame's field dictionary, after :meth:`TcpAnalysis.add`."""
    return tree_lines(*_of_fields(fields)) if TREE in fields else []


def _json_entry(key: str, value: Any) -> list[str]:
    """A JSON member's lines (a text value, or an object given as a list of members' lines)."""
    if not isinstance(value, list):
        return [f'"{key}": "{value}"']
    lines = [f'"{key}": {{']
    for i, member in enumerate(value):
        lines.extend("  " + x for x in member[:-1])
        lines.append("  " + member[-1] + ("," if i + 1 < len(value) else ""))
    return [*lines, "}"]


def _json_expert(flag: str, severity: str, message: str) -> list[str]:
    return _json_entry("_ws.expert", [_json_entry(flag, ""), _json_entry("_ws.expert.message", message),
                                      _json_entry("_ws.expert.severity", SEVERITY[severity]),
                                      _json_entry("_ws.expert.group", SEQUENCE_GROUP)])


def json_lines(names: Any, dup: tuple[int, int] | None,
               values: tuple[int, int, int, int, int, int, int] | None) -> list[str]:
    """The ``"tcp.analysis"`` member of a segment's ``tcp`` layer as ``tshark -T json`` writes it (the
    tree of :func:`tree_lines`: its values, the flags' expert information, a duplicate ACK's), its lines
    indented from 0, two spaces a level; none without the tree."""
    if values is None:
        return []
    acks_frame, rtt, first_rtt, bif, push, rto, rto_frame = values
    members: list[list[str]] = []
    if acks_frame:
        members.append(_json_entry("tcp.analysis.acks_frame", acks_frame))
        if rtt:
            members.append(_json_entry("tcp.analysis.ack_rtt", seconds_text(rtt)))
    if first_rtt:
        members.append(_json_entry("tcp.analysis.initial_rtt", seconds_text(first_rtt)))
    if bif:
        members.append(_json_entry("tcp.analysis.bytes_in_flight", bif))
        members.append(_json_entry("tcp.analysis.push_bytes_sent", push))
    if names:
        kind = any(k in names for k in _KINDS_OF_RETRANSMISSION)
        flags: list[list[str]] = []
        for name, severity, message in EXPERT:
            if name not in names:
                continue
            if name == "tcp.analysis.duplicate_ack":
                if dup is not None:
                    flags.append(_json_entry(name, ""))
                continue
            flags.append(_json_expert(name, severity, message))
            if name == "tcp.analysis.retransmission" and not kind and rto:
                flags.append(_json_entry("tcp.analysis.rto", seconds_text(rto)))
                flags.append(_json_entry("tcp.analysis.rto_frame", rto_frame))
        members.append(_json_entry("tcp.analysis.flags", flags))
    if dup is not None:
        members.append(_json_entry("tcp.analysis.duplicate_ack_num", dup[0]))
        members.append(_json_entry("tcp.analysis.duplicate_ack_frame", dup[1]))
        members.append(_json_entry("tcp.analysis.duplicate_ack_frame_tree", [
            _json_expert("tcp.analysis.duplicate_ack", "Note", f"Duplicate ACK (#{dup[0]})")]))
    if not members:  # (the tree alone: an empty text, as tshark writes it)
        return [f'"{TREE}": ""']
    return _json_entry(TREE, members)


def fields_json(fields: dict[str, Any]) -> list[str]:
    """:func:`json_lines` of a frame's field dictionary, after :meth:`TcpAnalysis.add`."""
    return json_lines(*_of_fields(fields)) if TREE in fields else []


#: a frame's number in ``-T json`` text, and where its ``tcp`` layer starts and ends
_JSON_FRAME = re.compile(r'"frame\.number": "(\d+)"')
_JSON_TCP = '\n        "tcp": {'
_JSON_END = "\n        }"


class Later(NamedTuple):
    """A segment's analysis whose text is made when its frame is written (:meth:`json` for ``-T json``,
    :meth:`tree` for ``-V``): a display filter shows few of the segments, and most never are."""

    names: Any
    dup: tuple[int, int] | None
    values: tuple[int, int, int, int, int, int, int] | None

    def json(self) -> list[str]:
        """:func:`json_lines`."""
        return json_lines(self.names, self.dup, self.values)

    def tree(self) -> bytes:
        """The lines of :func:`tree_lines` as put after the TCP header's fields of a ``-V`` tree."""
        lines = tree_lines(self.names, self.dup, self.values)
        return ("\n        " + "\n        ".join(lines)).encode() if lines else b""


def insert_json(text: str, pending: Any) -> str:
    """``-T json`` text of some frames with the ``"tcp.analysis"`` members of ``pending`` (a deque of
    (frame, :func:`json_lines` or a :class:`Later`), in frame order: those of frames up to the text's last are
    taken) put at the end of their frames' ``tcp`` layers."""
    if not pending:
        return text
    heads = [(m.start(), int(m.group(1))) for m in _JSON_FRAME.finditer(text)]
    if not heads or pending[0][0] > heads[-1][1]:
        return text
    where = {f: (pos, heads[i + 1][0] if i + 1 < len(heads) else len(text)) for i, (pos, f) in enumerate(heads)}
    out: list[str] = []
    prev = 0
    while pending and pending[0][0] <= heads[-1][1]:
        frame, lines = pending.popleft()
        got = where.get(frame)
        if got is None:
            continue
        at = text.find(_JSON_TCP, got[0], got[1])
        end = text.find(_JSON_END, at + len(_JSON_TCP), got[1]) if at >= 0 else -1
        if end < 0:
            continue
        out.append(text[prev:end])
        out.append(_json_member(lines))
        prev = end
    out.append(text[prev:])
    return "".join(out)


def _json_member(lines: list[str] | Later) -> str:
    """The text :func:`insert_json` puts at the end of a ``tcp`` layer: a ``tcp.analysis`` member."""
    if isinstance(lines, Later):
        lines = lines.json()
    return ",\n" + "\n".join("          " + x for x in lines)


def insert_json_one(text: str, lines: list[str] | Later) -> str:
    """:func:`insert_json` of the text of one frame (``text``) and its ``tcp.analysis`` member: without
    looking for frame numbers in it (the text unchanged when it has no ``tcp`` layer at the top)."""
    at = text.find(_JSON_TCP)
    end = text.find(_JSON_END, at + len(_JSON_TCP)) if at >= 0 else -1
    if end < 0:
        return text
    return "".join((text[:end], _json_member(lines), text[end:]))
