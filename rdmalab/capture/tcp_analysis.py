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

Not given: ``tcp.analysis`` itself (tshark's SEQ/ACK analysis tree, on nearly every segment) and its
other fields (``acks_frame``, ``ack_rtt``, ``bytes_in_flight`` ...), ``tcp.analysis.reused_ports``, the
TCP Fast Open flags, and the flags in the summary lines' Info (``[TCP Retransmission]``).
"""

from __future__ import annotations

from typing import Any

from rdmalab.wire.net import SEQ_HALF as _SEQ_HALF
from rdmalab.wire.net import SEQ_MASK as _SEQ_MASK
from rdmalab.wire.net import TCP

#: the flags, as tshark names them (FT_NONE labels: present or not), in the order of its -T fields
FLAG_FIELDS = ("tcp.analysis.retransmission", "tcp.analysis.fast_retransmission",
               "tcp.analysis.spurious_retransmission", "tcp.analysis.out_of_order", "tcp.analysis.lost_segment",
               "tcp.analysis.ack_lost_segment", "tcp.analysis.duplicate_ack", "tcp.analysis.keep_alive",
               "tcp.analysis.keep_alive_ack", "tcp.analysis.window_update", "tcp.analysis.window_full",
               "tcp.analysis.zero_window", "tcp.analysis.zero_window_probe", "tcp.analysis.zero_window_probe_ack")
#: every field :class:`TcpAnalysis` gives: ``tcp.analysis.flags`` (any flag), the flags, and a duplicate
#: ACK's number and the frame of the ACK it repeats
ANALYSIS_FIELDS = ("tcp.analysis.flags", *FLAG_FIELDS, "tcp.analysis.duplicate_ack_num",
                   "tcp.analysis.duplicate_ack_frame")
#: the label fields (no value: a filter tests them alone, as tshark, which refuses to compare them)
LABEL_FIELDS = ("tcp.analysis.flags", *FLAG_FIELDS)

_SYN_FIN_RST = TCP.SYN | TCP.FIN | TCP.RST
#: a retransmission within this long after the reverse direction's second duplicate ACK is a fast one
FAST_RETRANSMISSION_NS = 20_000_000
#: out of order: a segment this soon after the direction's highest one (without a first round trip time)
OUT_OF_ORDER_NS = 3_000_000
_U64 = 1 << 64


class _Direction:
    """One direction of a TCP conversation as Wireshark's analysis follows it (``tcp_flow_t``)."""

    __slots__ = ("nextseq", "nextseq_ns", "lastack", "lastack_ns", "window", "dupacks", "lastnondupack",
                 "maxseqtobeacked", "last_flags")

    def __init__(self) -> None:
        self.nextseq = 0  # the highest sequence number seen, after the segment (0: none seen)
        self.nextseq_ns = 0  # when it was seen
        self.lastack = 0
        self.lastack_ns = 0
        self.window = 0  # the last segment's window field, unscaled
        self.dupacks = 0  # duplicate ACKs in a row (-1: data past this direction's was ACKed)
        self.lastnondupack = 0  # the frame of the last ACK that was not a duplicate
        self.maxseqtobeacked = 0  # the highest sequence number seen without a hole before it
        self.last_flags: frozenset[str] = frozenset()


class _Conversation:
    __slots__ = ("dirs", "syn_ns", "first_rtt_ns")

    def __init__(self) -> None:
        self.dirs: dict[Any, _Direction] = {}
        self.syn_ns = 0  # the last SYN without ACK
        self.first_rtt_ns = 0  # from it to the first ACK without SYN (tshark's iRTT)


class TcpAnalysis:
    """The ``tcp.analysis.*`` fields of TCP segments fed in capture order (:meth:`add`).  Bounded: past
    ``most`` conversations, the oldest is forgotten."""

    def __init__(self, most: int = 1 << 20) -> None:
        self._conv: dict[int, _Conversation] = {}
        self._most = most

    def add(self, fields: dict[str, Any], stream: int, src: tuple[Any, int], dst: tuple[Any, int],
            rev_shift: int) -> None:
        """Put the analysis fields of the TCP segment in ``fields`` (a frame's field dictionary with its
        raw numbers, ``tcp.len`` and ``frame.time_ns``) into it.  ``stream`` is its ``tcp.stream``,
        ``src`` and ``dst`` its (address, port) ends, ``rev_shift`` the window scaling shift its receiver
        announced (:meth:`rdmalab.capture.render.TcpWindowScaling.shifts`: -1 not known, -2 none): a segment
        fills the window the receiver last offered (window full) only where that is known.  The caller
        leaves out a segment an ICMP error quotes (as tshark)."""
        seq, ack, flags = fields.get("tcp.seq_raw"), fields.get("tcp.ack_raw"), fields.get("tcp.flags")
        seglen, window, now = fields.get("tcp.len"), fields.get("tcp.window_size_value"), fields.get("frame.time_ns")
        if not (isinstance(seq, int) and isinstance(ack, int) and isinstance(flags, int) and isinstance(seglen, int)
                and isinstance(window, int) and isinstance(now, int)):
            return  # (a header tshark stops in before its analysis)
        names, dup = self.segment(stream, src, dst, rev_shift, seq, ack, flags, seglen, window, now,
                                  int(fields["frame.number"]))
        if names:
            fields["tcp.analysis.flags"] = 1
            for name in names:
                # (tshark gives a duplicate ACK's label twice: in the flags and under the frame it repeats)
                fields[name] = [1, 1] if name == "tcp.analysis.duplicate_ack" else 1
        if dup is not None:
            fields["tcp.analysis.duplicate_ack_num"], fields["tcp.analysis.duplicate_ack_frame"] = dup

    def segment(self, stream: int, src: Any, dst: Any, rev_shift: int, seq: int, ack: int, flags: int, seglen: int,
                window: int, now: int, frame: int) -> tuple[list[str], tuple[int, int] | None]:
        """:meth:`add` of one segment given by its numbers (raw sequence and acknowledgment numbers, flags,
        ``tcp.len``, raw window, time in nanoseconds, frame number; ``src`` and ``dst`` its ends, any values
        that tell the two directions apart): the names of its flags, in :data:`FLAG_FIELDS` order, and a
        duplicate ACK's number and the frame of the ACK it repeats (else None)."""
        conv = self._conv.get(stream)
        if conv is None:
            if len(self._conv) >= self._most:
                self._conv.pop(next(iter(self._conv)))
            conv = self._conv[stream] = _Conversation()
        dirs = conv.dirs
        fwd = dirs.get(src)
        if fwd is None:
            fwd = dirs[src] = _Direction()
        rev = dirs.get(dst)
        if rev is None:
            rev = dirs[dst] = _Direction()
        if flags & TCP.SYN and not flags & TCP.ACK:
            conv.syn_ns = now
        elif flags & TCP.ACK and not flags & TCP.SYN and conv.syn_ns and not conv.first_rtt_ns:
            conv.first_rtt_ns = now - conv.syn_ns
        return self._flags(fwd, rev, seq, ack, flags, seglen, window, now, frame, rev_shift, conv.first_rtt_ns)

    @staticmethod
    def _flags(fwd: _Direction, rev: _Direction, seq: int, ack: int, flags: int, seglen: int, window: int, now: int,
               frame: int, rev_shift: int, first_rtt_ns: int) -> tuple[list[str], tuple[int, int] | None]:
        """The flags of one segment, and the direction's state moved past it (packet-tcp.c's order).
        (Sequence arithmetic written out: ``(a + n) & M`` is :func:`~rdmalab.wire.net.seq_add`, and
        ``((a - b + H) & M) - H`` is :func:`~rdmalab.wire.net.seq_diff`; this runs for every segment.)"""
        M, H = _SEQ_MASK, _SEQ_HALF
        ta: set[str] = set()
        dup: tuple[int, int] | None = None
        plain = not flags & _SYN_FIN_RST
        nextseq_was = fwd.nextseq
        repeats = seq == nextseq_was and ack == fwd.lastack  # (the window and ACK of the last segment again)
        probe = seglen == 1 and seq == nextseq_was and rev.window == 0
        if probe:
            ta.add("tcp.analysis.zero_window_probe")
        else:
            if window == 0 and plain:
                ta.add("tcp.analysis.zero_window")
            if nextseq_was and ((seq - nextseq_was + H) & M) > H and not flags & TCP.RST:
                ta.add("tcp.analysis.lost_segment")
            if seglen <= 1 and seq == (nextseq_was - 1) & M and plain:
                ta.add("tcp.analysis.keep_alive")
            if plain and seglen == 0:
                if window and window != fwd.window and repeats:
                    ta.add("tcp.analysis.window_update")
            elif plain and rev_shift != -1 and (seq + seglen) & M == (rev.lastack + (rev.window << max(rev_shift, 0))) & M:
                ta.add("tcp.analysis.window_full")
            if seglen == 0 and repeats and plain:
                if window and window == fwd.window and "tcp.analysis.keep_alive" in rev.last_flags:
                    ta.add("tcp.analysis.keep_alive_ack")
                elif window == 0 and fwd.window == 0 and "tcp.analysis.zero_window_probe" in rev.last_flags:
                    ta.add("tcp.analysis.zero_window_probe_ack")
                elif window and window == fwd.window:
                    fwd.dupacks = 1 if fwd.dupacks == -1 else fwd.dupacks + 1  # (-1: an ACK of unseen data was said)
                    ta.add("tcp.analysis.duplicate_ack")
                    dup = (fwd.dupacks, fwd.lastnondupack)
        if ack != fwd.lastack:
            fwd.lastnondupack = frame
            fwd.dupacks = 0
        rev_max = rev.maxseqtobeacked
        if rev_max and ((ack - rev_max + H) & M) > H and flags & TCP.ACK:
            if rev_max != rev.nextseq:  # it acknowledges octets in a hole of the other direction
                rev.maxseqtobeacked = rev.nextseq
                ta.add("tcp.analysis.ack_lost_segment")
            else:  # octets past all the other direction sent: said once, until that direction's ACK moves
                if rev.dupacks == 0:
                    ta.add("tcp.analysis.ack_lost_segment")
                rev.dupacks = -1
        syn_fin = 1 if flags & (TCP.SYN | TCP.FIN) else 0
        ends = (seq + seglen + syn_fin) & M
        if (seglen > 0 or syn_fin) and "tcp.analysis.keep_alive" not in ta:
            behind = bool(nextseq_was) and ((seq - nextseq_was + H) & M) < H
            if seglen > 1 and (nextseq_was - 1) & M == seq:
                behind = False  # (more than the octet before a zero window probe: new data)
            # (times as tshark's unsigned nanoseconds: a segment before the one compared with is long after it)
            if seglen > 0 and rev.lastack and ((seq + seglen - rev.lastack + H) & M) <= H:
                ta.update(("tcp.analysis.spurious_retransmission", "tcp.analysis.retransmission"))  # (acknowledged)
            elif (behind and (rev.dupacks >= 2 or rev.dupacks == -1) and rev.lastack == seq  # (-1: unsigned in tshark)
                    and (now - rev.lastack_ns) % _U64 < FAST_RETRANSMISSION_NS):
                ta.update(("tcp.analysis.fast_retransmission", "tcp.analysis.retransmission"))
            elif behind and (now - fwd.nextseq_ns) % _U64 < (first_rtt_ns or OUT_OF_ORDER_NS) and nextseq_was != ends:
                ta.add("tcp.analysis.out_of_order")
            elif behind:
                ta.add("tcp.analysis.retransmission")
        if (not fwd.nextseq or ((ends - fwd.nextseq + H) & M) > H) and not probe:
            fwd.nextseq, fwd.nextseq_ns = ends, now
        if (not fwd.maxseqtobeacked or seq == fwd.maxseqtobeacked) and not probe:
            fwd.maxseqtobeacked = fwd.nextseq
        fwd.window, fwd.lastack, fwd.lastack_ns = window, ack, now
        if not ta:
            fwd.last_flags = frozenset()
            return [], dup
        fwd.last_flags = frozenset(ta)
        return [n for n in FLAG_FIELDS if n in ta], dup
