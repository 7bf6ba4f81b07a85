"""Text views of captured packets: tshark-style summary lines and the full field tree (``-V``)."""

from __future__ import annotations

import datetime as _dt
import ipaddress
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from rdmalab.capture.header_text import header_int_fn, header_lines, header_text_fn, templatable
from rdmalab.capture.linktypes import LINKTYPE_NAMES, SLL, SLL2
from rdmalab.capture.pcapio import epoch_ns
from rdmalab.capture.tcp_analysis import TcpAnalysis
from rdmalab.wire.control import ECHO_TYPES, ICMPEcho, ICMPv6Echo
from rdmalab.wire.frame import tcp_segment_length
from rdmalab.wire.header import Header
from rdmalab.wire.ib import GRH, LRH, IPoIB
from rdmalab.wire.net import (
    TCP,
    Ethernet,
    EthernetBadType,
    EthernetLength,
    EthernetTrailer,
    IPv4,
    IPv4RouteDestination,
    IPv6,
    tcp_flag_names,
)
from rdmalab.wire.packet import Packet, SendMessage

if TYPE_CHECKING:
    from rdmalab.capture.reader import CapturedPacket

_PROTOCOL = {"rocev2": "RRoCE", "rocev1": "RoCE", "ib": "InfiniBand", "iwarp": "iWARP", "tcp": "TCP", "pfc": "MAC CTRL"}


def _ipv4_dst(pkt: Packet) -> int:
    """The destination of a packet's IPv4 datagram: a source route's last address where its options hold one
    with addresses left (wire.net.IPv4RouteDestination), as tshark's ip.dst, else the header's."""
    route = pkt.get(IPv4RouteDestination)
    return route.dst if route is not None else pkt[IPv4].dst


def endpoints(pkt: Packet) -> tuple[str, str]:
    """Source and destination as tshark's columns show them (IP, else GID, else LID, else MAC, else a
    Linux cooked capture's source address)."""
    for cls in (IPv4, IPv6):
        ip = pkt.get(cls)
        if ip is not None:
            if cls is IPv4:
                return str(ipaddress.IPv4Address(ip.src)), str(ipaddress.IPv4Address(_ipv4_dst(pkt)))  # type: ignore[attr-defined]
            return str(ipaddress.IPv6Address(ip.src)), str(ipaddress.IPv6Address(ip.dst))  # type: ignore[attr-defined]
    grh = pkt.get(GRH)
    if grh is not None:
        return str(ipaddress.IPv6Address(grh.sgid)), str(ipaddress.IPv6Address(grh.dgid))
    lrh = pkt.get(LRH)
    if lrh is not None:
        return f"LID {lrh.slid}", f"LID {lrh.dlid}"
    eth = pkt.get(Ethernet) or pkt.get(EthernetLength) or pkt.get(EthernetBadType)  # (its type, a length or neither)
    if eth is not None:
        return eth.src.to_bytes(6, "big").hex(":"), eth.dst.to_bytes(6, "big").hex(":")
    cooked = pkt.get(SLL) or pkt.get(SLL2)
    if cooked is not None:  # a Linux cooked capture: the sender's address alone (tshark's columns: no destination)
        return cooked.addr.to_bytes(8, "big")[:min(cooked.halen, 8)].hex(":") or "-", ""
    return "-", "-"


def protocol(cp: CapturedPacket) -> str:
    if cp.pdus:
        return "iWARP"
    pkt = cp.packet
    ipoib = pkt.get(IPoIB)
    if ipoib is not None:  # tshark names what IPoIB carries (UDP, ARP, ICMPv6, ...)
        return ipoib.protocol(list(pkt.headers()))
    name = _PROTOCOL.get(pkt.encap)
    if name:
        return name
    return pkt.layers[-1].name if pkt.layers else "Unknown"


def tcp_window_shift(pkt: Packet) -> int | None:
    """The shift count of the Window Scale option (RFC 7323 2.2) of a TCP segment, capped at 14
    (RFC 7323 2.3), or None when the segment has no such option."""
    layer = next((la for la in pkt.layers if isinstance(la.header, TCP)), None)
    if layer is None:
        return None
    return window_shift_option(pkt.data, layer.offset + 20, layer.offset + layer.header.header_len)  # type: ignore[attr-defined]


def window_shift_option(data: bytes | bytearray | memoryview, start: int, end: int) -> int | None:
    """The Window Scale shift count in the TCP options ``data[start:end]`` (capped at 14), or None."""
    o = start
    end = min(end, len(data))
    while o < end:
        kind = data[o]
        if kind == 0:  # end of option list
            return None
        if kind == 1:  # no-operation
            o += 1
            continue
        if o + 1 >= end or data[o + 1] < 2:
            return None  # a damaged option list: no scale option can be trusted
        if kind == 3 and data[o + 1] == 3 and o + 2 < end:
            return min(int(data[o + 2]), 14)
        o += data[o + 1]
    return None


def sack_delivered(data: bytes | bytearray | memoryview, start: int, end: int) -> int:
    """The octets the SACK option (RFC 2018) in the TCP options ``data[start:end]`` says were received, as
    tshark's bytes in flight subtract them: the sum of the first three blocks (right edge less left edge,
    modulo 2**32) of the segment's last SACK option that has one; 0 without one (packet-tcp.c,
    ``dissect_tcpopt_sack``, which keeps up to three blocks of each option for ``tcp.analysis.bytes_in_flight``).
    A damaged option list is read up to the damage."""
    if 5 not in data[start:end]:  # (no octet 5 among the options: no SACK option)
        return 0
    got = 0
    o = start
    end = min(end, len(data))
    while o < end:
        kind = data[o]
        if kind == 0:  # end of option list
            break
        if kind == 1:  # no-operation
            o += 1
            continue
        if o + 1 >= end or data[o + 1] < 2:
            break
        size = data[o + 1]
        if kind == 5:
            blocks = [(int.from_bytes(data[b:b + 4], "big"), int.from_bytes(data[b + 4:b + 8], "big"))
                      for b in range(o + 2, min(o + size, end) - 7, 8)]
            if blocks:
                got = sum((right - left) & 0xFFFFFFFF for left, right in blocks[:3]) & 0xFFFFFFFF
        o += size
    return got


def tcp_sack_delivered(pkt: Packet) -> int:
    """:func:`sack_delivered` of a TCP segment's options (0 without a TCP header)."""
    layer = next((la for la in pkt.layers if isinstance(la.header, TCP)), None)
    if layer is None:
        return 0
    return sack_delivered(pkt.data, layer.offset + 20, layer.offset + layer.header.header_len)  # type: ignore[attr-defined]


class Conversations:
    """tshark's ``tcp.stream`` and ``udp.stream``: each TCP or UDP conversation (both directions between
    two address:port endpoints) numbered from 0 in the order of its first frame, TCP and UDP apart.  A
    TCP SYN whose sender's relative numbers already start somewhere (its base: :meth:`_relative`, from its
    last SYN, else from its first segment or from the other side's first ACK of it) and whose sequence
    number is not that base has the ports reused: without ACK it starts a new conversation, whose state
    starts afresh; with ACK it stays in its conversation (packet-tcp.c, tshark 4.0: dissect_tcp, after
    find_conversation_pinfo; the frames go into the analysis' :attr:`~TcpAnalysis.syns`, with those of the
    SYNs without ACK on their base, which have tshark's analysis tree).  A TCP segment also gets tshark's relative
    sequence numbers (:meth:`_relative`).  Feed it every frame in capture order, one at a time
    (:meth:`add`, a frame's field dictionary, :func:`rdmalab.capture.fields.frame_fields`) or a block
    of them at a time (:meth:`streams_many` and :meth:`relative_many`, the columns':
    :func:`rdmalab.capture.columnar_decode.fill_conversations`): the same numbers and the same state."""

    def __init__(self, most: int = 1 << 20, *, analysis: bool = False, values: bool = True) -> None:
        # protocol -> key -> its stream (the last one of those endpoints)
        self._index: dict[str, dict[tuple[Any, ...], int]] = {"tcp": {}, "udp": {}}
        self._next = {"tcp": 0, "udp": 0}
        self._most = most  # (bounded: the oldest conversations of a protocol forgotten past it; numbers go on)
        self._base: dict[tuple[Any, ...], int] = {}  # (TCP stream, address, port) -> its sequence base
        # tshark's tcp.analysis.* flags, when asked for (they follow every TCP segment in order)
        #: the TCP analysis these conversations feed (``analysis=True``), else None; the columnar decoder
        #: feeds the same one (:func:`rdmalab.capture.columnar_decode.fill_tcp_analysis`), so that a capture
        #: read partly from columns and partly packet by packet follows one analysis; ``values`` False: its flags
        #: alone (:attr:`TcpAnalysis.values`, for a caller that reads no value nor the tree)
        self.analysis = TcpAnalysis(most, values=values) if analysis else None

    def add(self, fields: dict[str, Any], pkt: Packet | None = None, windows: TcpWindowScaling | None = None) -> None:
        """Put the frame's ``tcp.stream`` or ``udp.stream`` (and ``tcp.seq``, ``tcp.ack``, ``tcp.nxtseq``;
        made with ``analysis=True``: the ``tcp.analysis.*`` fields of :mod:`rdmalab.capture.tcp_analysis`,
        given the frame's packet ``pkt`` and the :class:`TcpWindowScaling` that has seen it, which
        ``fields`` came with) into its field dictionary."""
        for proto in ("tcp", "udp"):
            sport, dport = fields.get(proto + ".srcport"), fields.get(proto + ".dstport")
            if not isinstance(sport, int) or not isinstance(dport, int):
                continue  # (none, or an ICMP error's quoted header as well: not counted)
            if proto == "tcp" and "tcp.flags" not in fields and "tcp.hdr_len" not in fields:  # a quote of 8 to 15
                return  # octets: no conversation (its tcp.seq, an IPv4 quote's, the header's own: wire.net.TCPQuoted)
            if proto == "udp" and fields.get(HIDDEN_UDP_CUT):  # a header its datagram cut, or a length under 8
                return  # (wire.net.UDPPorts, UDPNoChecksum): no conversation, tshark counts none
            six = "ip.src" not in fields
            src = fields.get("ip.src", fields.get("ipv6.src"))
            dst = fields.get("ip.dst", fields.get("ipv6.dst"))
            if isinstance(src, list) and isinstance(dst, list):
                # an ICMP error that quotes a datagram: the only UDP or TCP header is the quote's, and
                # its conversation is the quoted IP header's (the last), counted as tshark counts it
                src, dst = src[-1], dst[-1]
            if src is None or dst is None:
                return
            a, b = (src, sport), (dst, dport)
            flags = fields.get("tcp.flags", fields.get(HIDDEN_TCP_FLAGS, 0)) if proto == "tcp" else 0
            seq = quoted_seq(fields)
            stream, mark = self._stream(conversation_key(proto, six, a, b), flags if isinstance(flags, int) else 0,
                                        seq if isinstance(seq, int) else 0, a, self._base.get)
            fields[proto + ".stream"] = stream
            if proto == "tcp":
                self._relative(fields, stream, a, b)
                if self.analysis is not None and pkt is not None and windows is not None and "tcp.flags" in fields \
                        and not isinstance(fields.get("ip.src", fields.get("ipv6.src")), list):
                    # (not a segment an ICMP error quotes)
                    if mark is not None:
                        self.analysis.syns[int(fields["frame.number"])] = mark
                    self.analysis.add(fields, stream, a, b, windows.shifts(pkt)[1], tcp_sack_delivered(pkt))
                    if mark is not None:
                        self.analysis.syns.pop(int(fields["frame.number"]), None)
            return

    def _stream(self, key: tuple[Any, ...], flags: int, seq: int, a: tuple[Any, int],
                bases: Callable[[tuple[Any, ...]], int | None]) -> tuple[int, bool | None]:
        """The stream of one frame of conversation ``key`` (TCP flags ``flags``, 0 for UDP; sequence number
        ``seq``; sent by endpoint ``a``), and for a SYN whose sender's base (``bases`` of (stream, address,
        port), None: not known yet) is known, whether it has the ports reused (True: ``seq`` is not the
        base; such a SYN without ACK starts a new stream), else None (a SYN with ACK on its base too)."""
        index = self._index[key[0]]
        got = index.get(key)
        mark = None
        if got is not None and flags & 0x02:
            base = bases((got, *a))
            if base is not None and base != seq:
                mark = True
            elif base is not None and not flags & 0x10:
                mark = False  # (a SYN without ACK on its base: tshark's analysis tree, if empty)
        if got is None or (mark and not flags & 0x10):
            if len(index) >= self._most:
                index.pop(next(iter(index)))
            got = self._next[key[0]]
            self._next[key[0]] += 1
        index[key] = got
        return got, mark

    def _relative(self, fields: dict[str, Any], stream: int, a: tuple[Any, int], b: tuple[Any, int]) -> None:
        """tshark's relative ``tcp.seq``, ``tcp.ack`` and ``tcp.nxtseq`` (packet-tcp.c, its default
        tcp.relative_sequence_numbers): counted from each direction's SYN (0), or, a direction whose SYN
        the capture missed, from one before its first sequence number (1); the acknowledgment from the
        other direction's (without the ACK flag: the field as it is); the next sequence number after the segment's length,
        and one more for a SYN or a FIN: one, not two, for a segment with both (packet-tcp.c tests the two flags
        together)."""
        # (a bogus header length: its flags and acknowledgment number not shown, but counted, as tshark)
        flags, seq = fields.get("tcp.flags", fields.get(HIDDEN_TCP_FLAGS, 0)), quoted_seq(fields)
        ack = fields.get("tcp.ack_raw", fields.get(HIDDEN_TCP_ACK))
        if not isinstance(seq, int) or not isinstance(ack, int) or not isinstance(flags, int):
            return
        length = fields.get("tcp.len")
        got = self._relative_one(stream, a, b, flags, seq, ack, fields.get("tcp.hdr_len", 20),
                                 length if isinstance(length, int) else None)
        fields["tcp.seq"] = got[0]
        if got[1] is not None:
            fields["tcp.ack"] = got[1]
        if got[2] is not None:
            fields["tcp.nxtseq"] = got[2]

    def _relative_one(self, stream: int, a: tuple[Any, int], b: tuple[Any, int], flags: int, seq: int, ack: int,
                      hdr_len: int, length: int | None) -> tuple[int, int | None, int | None]:
        """:meth:`_relative` of one segment: (tcp.seq, tcp.ack, tcp.nxtseq), None where it has none.
        ``length`` None: a header past its datagram (tshark stops before counting: the raw numbers)."""
        if length is None:
            return seq, ack, None
        mine = self._base.get((stream, *a))
        if mine is None or flags & 0x02:
            mine = seq if flags & 0x02 else (seq - 1) % (1 << 32)
            self._remember((stream, *a), mine)
        rel = (seq - mine) % (1 << 32)
        if hdr_len < 20:  # a bogus header length: tshark stops after the sequence number
            return rel, None, None
        if flags & 0x10:
            theirs = self._base.get((stream, *b))
            if theirs is None:  # (its first bytes not seen yet: the first it acknowledges are its 1)
                theirs = (ack - 1) % (1 << 32)
                self._remember((stream, *b), theirs)
            rel_ack = (ack - theirs) % (1 << 32)
        else:  # (no acknowledgment: the field as it is, tshark shows it raw)
            rel_ack = ack
        return rel, rel_ack, (rel + length + (flags & 0x03 != 0)) % (1 << 32)

    def _remember(self, key: tuple[Any, ...], base: int) -> None:
        if len(self._base) >= 2 * self._most:
            self._base.pop(next(iter(self._base)))
        self._base[key] = base

    def streams_many(self, keys: Sequence[tuple[Any, ...]], conv: np.ndarray, flags: np.ndarray, seq: np.ndarray,
                     ends: Sequence[tuple[Any, int]] = (), src: np.ndarray | None = None, dst: np.ndarray | None = None,
                     ack: np.ndarray | None = None, hdr_len: np.ndarray | None = None,
                     length: np.ndarray | None = None) -> tuple[np.ndarray, dict[int, bool]]:
        """The streams of many frames in capture order, at once: row ``i`` belongs to conversation
        ``keys[conv[i]]`` (:func:`conversation_key`, one protocol), with TCP flags ``flags[i]`` (0: UDP)
        and sequence number ``seq[i]``; and the SYNs' marks (:meth:`_stream`: row -> ports reused).  A TCP
        block's SYNs need their senders' bases: row ``i`` goes from endpoint ``ends[src[i]]`` to
        ``ends[dst[i]]``, with acknowledgment number ``ack[i]``, header length ``hdr_len[i]`` and segment
        length ``length[i]`` (-1: not known), as :meth:`relative_many` takes them.  The state is left as
        :meth:`add` one by one leaves it, less the bases (:meth:`relative_many` or :meth:`follow_bases`
        next): only the rows that can change a stream (a conversation's first row here, a SYN) go through
        :meth:`_stream` in Python, and before a SYN the rows of its conversation (for the bases, followed
        here apart from the state); the others take their conversation's stream at their place."""
        n = len(conv)
        if n == 0:
            return np.zeros(0, dtype=np.int64), {}
        syn = (flags & 0x02) != 0
        if keys and len(self._index[keys[0][0]]) + len(keys) + int(np.count_nonzero(syn)) >= self._most:
            ev = np.arange(n)  # it may forget a conversation on the way: every row, in order
        else:
            _u, first = np.unique(conv, return_index=True)
            at = np.zeros(n, dtype=bool)  # (the union of the two, sorted: np.union1d would load numpy.ma)
            at[first] = True
            ev = np.flatnonzero(at | syn)
        if not syn.any():
            conv_l = conv[ev].tolist()
            got = np.array([self._stream(keys[c], 0, 0, ("", 0), _no_base)[0] for c in conv_l], dtype=np.int64)
            return got[_last_event(conv, ev)], {}
        assert src is not None and dst is not None and ack is not None and hdr_len is not None and length is not None
        # the rows of the conversations with a SYN here, up to their last SYN: their bases followed, from
        # those that can set one (a SYN; after each SYN, or from the block's start, the first segment each
        # end sends and the first ACK of each end: later ones find their base known)
        last_syn = np.full(len(keys), -1, dtype=np.int64)
        at = np.flatnonzero(syn)
        np.maximum.at(last_syn, conv[at], at)
        walked = np.arange(n) <= last_syn[conv]
        w_rows = np.flatnonzero(walked)
        w_conv = conv[w_rows]
        order = np.argsort(w_conv, kind="stable")  # (by conversation, then in order)
        w_rows, w_conv = w_rows[order], w_conv[order]
        part = np.cumsum(syn[w_rows])  # (the SYNs before: counted in the whole, a part of a conversation each)
        e = max(len(ends), 1)
        part_key = (w_conv * (n + 1) + part) * e
        has_len = length[w_rows] >= 0
        sends = has_len & ~syn[w_rows]
        acks = has_len & (hdr_len[w_rows] >= 20) & ((flags[w_rows] & 0x10) != 0)
        picked = [at, ev]
        for sel, end in ((sends, src), (acks, dst)):
            if sel.any():
                _u, first = np.unique(part_key[sel] + end[w_rows[sel]], return_index=True)
                picked.append(w_rows[sel][first])
        rows = np.unique(np.concatenate(picked), return_index=True)[0]  # (return_index: no numpy.ma loaded)
        pos = np.minimum(np.searchsorted(ev, rows), len(ev) - 1)  # (np.isin would load numpy.ma; both sorted)
        is_ev = ev[pos] == rows if len(ev) else np.zeros(len(rows), dtype=bool)
        over: dict[tuple[Any, ...], int] = {}  # (the bases these rows give, apart from the state)

        def bases(k: tuple[Any, ...]) -> int | None:
            got = over.get(k)
            return self._base.get(k) if got is None else got

        streams: list[int] = []
        marks: dict[int, bool] = {}
        current: dict[int, int] = {}
        for r, c, e, w, f, q, k, s, d, h, ln in zip(
                rows.tolist(), conv[rows].tolist(), is_ev.tolist(), walked[rows].tolist(), flags[rows].tolist(),
                seq[rows].tolist(), ack[rows].tolist(), src[rows].tolist(), dst[rows].tolist(), hdr_len[rows].tolist(),
                length[rows].tolist(), strict=True):
            a = ends[s]
            if e:
                st, mark = self._stream(keys[c], f, q, a, bases)
                streams.append(st)
                current[c] = st
                if mark is not None:
                    marks[r] = mark
            else:
                st = current[c]
            if w and ln >= 0:  # (the bases as _relative_one leaves them)
                mine = (st, *a)
                if f & 0x02 or bases(mine) is None:
                    over[mine] = q if f & 0x02 else (q - 1) % (1 << 32)
                theirs = (st, *ends[d])
                if h >= 20 and f & 0x10 and bases(theirs) is None:
                    over[theirs] = (k - 1) % (1 << 32)
        got = np.array(streams, dtype=np.int64)
        return got[_last_event(conv, ev)], marks

    def follow_bases(self, stream: np.ndarray, ends: Sequence[tuple[Any, int]], src: np.ndarray, dst: np.ndarray,
                     flags: np.ndarray, seq: np.ndarray, ack: np.ndarray, hdr_len: np.ndarray,
                     length: np.ndarray | None) -> None:
        """:meth:`relative_many`'s state alone, without the numbers (the streams of later SYNs read it): of
        the rows of the streams that may change it, those with a SYN here or a direction whose base is not
        known yet (the others' bases stay)."""
        if not len(stream):
            return
        streams, first, which = np.unique(stream, return_index=True, return_inverse=True)
        syn_streams = np.zeros(len(streams), dtype=bool)
        syn_streams[which[(flags & 0x02) != 0]] = True
        base = self._base
        open_ = np.array([bool(x) or (s, *ends[a]) not in base or (s, *ends[b]) not in base for s, a, b, x in zip(
            streams.tolist(), src[first].tolist(), dst[first].tolist(), syn_streams.tolist(), strict=True)])
        if not open_.any():
            return
        rows = np.flatnonzero(open_[which])
        self.relative_many(stream[rows], ends, src[rows], dst[rows], flags[rows], seq[rows], ack[rows], hdr_len[rows],
                           None if length is None else length[rows], values=False)

    def relative_many(self, stream: np.ndarray, ends: Sequence[tuple[Any, int]], src: np.ndarray, dst: np.ndarray,
                      flags: np.ndarray, seq: np.ndarray, ack: np.ndarray, hdr_len: np.ndarray,
                      length: np.ndarray | None, *,
                      values: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`_relative_one` of many TCP segments in capture order, at once: row ``i`` of stream
        ``stream[i]`` goes from endpoint ``ends[src[i]]`` (address, port) to ``ends[dst[i]]``;
        ``length`` None: every header within its datagram, else a row's length, -1: not.  Returns
        tcp.seq, tcp.ack, tcp.nxtseq (uint32) and where tcp.ack and where tcp.nxtseq are present
        (tcp.seq always is); the state as one by one.

        Each direction's base is the sequence number of its last SYN at or before the row, else
        the one known before the block, else the first it got in the block at or before the row
        (from its first segment, or from the first acknowledgment of it, whichever came first)."""
        n = len(stream)
        empty = np.zeros(n, dtype=np.uint32)
        if n == 0:
            return empty, empty.copy(), empty.copy(), np.zeros(0, dtype=bool), np.zeros(0, dtype=bool)
        fl = flags.astype(np.int64)
        sq, ak = seq.astype(np.int64), ack.astype(np.int64)
        has_len = np.ones(n, dtype=bool) if length is None else length >= 0
        ln = np.zeros(n, dtype=np.int64) if length is None else np.maximum(length.astype(np.int64), 0)
        is_syn, is_ack = (fl & 0x02) != 0, (fl & 0x10) != 0
        full = has_len & (hdr_len >= 20)
        acked = full & is_ack
        # the directions (stream, endpoint) of the senders and of the acknowledged
        e = max(len(ends), 1)
        code = np.concatenate([stream.astype(np.int64) * e + src, stream.astype(np.int64) * e + dst])
        dcodes, dinv = np.unique(code, return_inverse=True)
        dkeys = [(int(c) // e, *ends[int(c) % e]) for c in dcodes.tolist()]
        if len(self._base) + len(dkeys) >= 2 * self._most:  # it may forget a base on the way: one by one
            return self._relative_rows(stream, ends, src, dst, fl, sq, ak, hdr_len, has_len, ln)
        sdir, rdir = dinv[:n], dinv[n:]
        rows = np.arange(n, dtype=np.int64)
        # events (direction, time: 2 * row for the sender's number, 2 * row + 1 for the acknowledged's)
        firm = has_len & is_syn  # a SYN sets its direction's base
        soft_s = has_len & ~is_syn  # one before the first number, if none yet
        ev_dir = np.concatenate([sdir[firm], sdir[soft_s], rdir[acked]])
        ev_t = np.concatenate([2 * rows[firm], 2 * rows[soft_s], 2 * rows[acked] + 1])
        ev_val = np.concatenate([sq[firm], (sq[soft_s] - 1) % (1 << 32), (ak[acked] - 1) % (1 << 32)])
        ev_firm = np.concatenate([np.ones(int(firm.sum()), dtype=bool), np.zeros(int(soft_s.sum()) + int(acked.sum()),
                                                                                 dtype=bool)])
        nd = len(dkeys)
        prior = np.array([self._base.get(k, -1) for k in dkeys], dtype=np.int64)
        # the first soft event of each direction
        soft = ~ev_firm
        first_soft = np.full(nd, -1, dtype=np.int64)
        first_soft_t = np.full(nd, np.iinfo(np.int64).max, dtype=np.int64)
        if soft.any():
            sd, st, sv = ev_dir[soft], ev_t[soft], ev_val[soft]
            o = np.lexsort((st, sd))
            head = np.r_[True, sd[o][1:] != sd[o][:-1]]
            first_soft[sd[o][head]] = sv[o][head]
            first_soft_t[sd[o][head]] = st[o][head]
        # the last firm event at or before a time, per direction
        fd, ft, fv = ev_dir[ev_firm], ev_t[ev_firm], ev_val[ev_firm]
        fo = np.lexsort((ft, fd))
        fkey = fd[fo] * (2 * n + 2) + ft[fo]

        def base_at(d: np.ndarray, t: np.ndarray) -> np.ndarray:
            out = np.where(prior[d] >= 0, prior[d], np.where(first_soft_t[d] <= t, first_soft[d], -1))
            if len(fkey):
                pos = np.searchsorted(fkey, d * (2 * n + 2) + t, side="right") - 1
                ok = pos >= 0
                pos = np.maximum(pos, 0)
                ok &= fd[fo][pos] == d
                out = np.where(ok, fv[fo][pos], out)
            return out

        if values:
            rel = np.where(has_len, (sq - base_at(sdir, 2 * rows)) % (1 << 32), sq)
            rel_ack = np.where(acked, (ak - base_at(rdir, 2 * rows + 1)) % (1 << 32), ak)
            nxt = (rel + ln + ((fl & 0x03) != 0)) % (1 << 32)  # (SYN or FIN: one, as _relative_one)
        else:  # (the state alone: follow_bases)
            rel = rel_ack = nxt = empty
        # the state the rows one by one leave: each direction's last firm base, else its prior, else its first
        # soft one; new directions in the order of their first event
        last = np.full(nd, -1, dtype=np.int64)
        if len(fkey):
            tail = np.r_[fd[fo][1:] != fd[fo][:-1], True]
            last[fd[fo][tail]] = fv[fo][tail]
        final = np.where(last >= 0, last, np.where(prior >= 0, prior, first_soft))
        first_t = np.full(nd, np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(first_t, ev_dir, ev_t)
        for d in np.argsort(first_t, kind="stable").tolist():
            if final[d] >= 0 and (prior[d] < 0 or last[d] >= 0):
                self._remember(dkeys[d], int(final[d]))
        return rel.astype(np.uint32), rel_ack.astype(np.uint32), nxt.astype(np.uint32), full | ~has_len, full

    def _relative_rows(self, stream: np.ndarray, ends: Sequence[tuple[Any, int]], src: np.ndarray, dst: np.ndarray,
                       fl: np.ndarray, sq: np.ndarray, ak: np.ndarray, hdr_len: np.ndarray, has_len: np.ndarray,
                       ln: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        n = len(stream)
        out = np.zeros((3, n), dtype=np.uint32)
        have = np.zeros((2, n), dtype=bool)
        for i, (s, a, b, f, q, k, h, hl, x) in enumerate(zip(
                stream.tolist(), src.tolist(), dst.tolist(), fl.tolist(), sq.tolist(), ak.tolist(), hdr_len.tolist(),
                has_len.tolist(), ln.tolist(), strict=True)):
            got = self._relative_one(s, ends[a], ends[b], f, q, k, h, x if hl else None)
            out[0, i] = got[0]
            if got[1] is not None:
                out[1, i] = got[1]
                have[0, i] = True
            if got[2] is not None:
                out[2, i] = got[2]
                have[1, i] = True
        return out[0], out[1], out[2], have[0], have[1]


def conversation_key(proto: str, six: bool, a: tuple[Any, int], b: tuple[Any, int]) -> tuple[Any, ...]:
    """The key of the conversation between endpoints ``a`` and ``b`` (address, port), the same
    either way round (:class:`Conversations`)."""
    return (proto, six, *(a + b if a <= b else b + a))


def _no_base(_key: tuple[Any, ...]) -> int | None:
    """(No SYN: no base read)"""
    return None


def _last_event(group: np.ndarray, ev: np.ndarray) -> np.ndarray:
    """For each row, the index into ``ev`` (rows, ascending) of the last of its group's rows among
    them at or before it (every group's first row is among them)."""
    n = len(group)
    g = group.astype(np.int64)
    order = np.lexsort((ev, g[ev]))
    key = g[ev][order] * (n + 1) + ev[order]
    pos = np.searchsorted(key, g * (n + 1) + np.arange(n), side="right") - 1
    out: np.ndarray = order[pos]
    return out


class TcpWindowScaling:
    """Window scaling per TCP direction, learnt from the handshake as Wireshark does.

    Each side's SYN (or SYN-ACK) carries its shift count; the window of later segments is the
    raw field shifted by the sender's count (``tcp.window_size`` against the raw
    ``tcp.window_size_value``).  A SYN without the option, or a SYN-ACK answering a SYN that
    had it (or the reverse), turns scaling off in both directions (RFC 7323 2.2: scaling is used
    only if both sides sent the option); a direction whose SYN was not captured is left unscaled.
    Windows of SYN segments are never scaled (RFC 7323 2.2)."""

    NONE = -2  # no scaling on this connection
    UNKNOWN = -1  # the handshake was not seen

    def __init__(self) -> None:
        self._shift: dict[tuple[object, int, object, int], int] = {}

    def window(self, pkt: Packet) -> int | None:
        """The scaled window of a TCP segment (None if it has no TCP header)."""
        tcp = pkt.get(TCP)
        if tcp is None:
            return None
        src, dst = _ip_pair(pkt)
        syn = bool(tcp.flags & TCP.SYN)
        return self.update(src, tcp.sport, dst, tcp.dport, tcp.flags, int(tcp.window),
                           tcp_window_shift(pkt) if syn else None)

    def shifts(self, pkt: Packet) -> tuple[int, int]:
        """The shift counts learnt so far of a TCP segment's sender and of its receiver (:data:`NONE`:
        no scaling, :data:`UNKNOWN`: the handshake was not seen)."""
        tcp = pkt.get(TCP)
        if tcp is None:
            return self.UNKNOWN, self.UNKNOWN
        src, dst = _ip_pair(pkt)
        return self._shift.get((src, tcp.sport, dst, tcp.dport), self.UNKNOWN), self.receiver(src, tcp.sport, dst, tcp.dport)

    def receiver(self, src: object, sport: int, dst: object, dport: int) -> int:
        """The shift count learnt so far of the receiver of a segment from ``src``:``sport`` to
        ``dst``:``dport`` (:meth:`shifts`' second, from the ends' numbers)."""
        return self._shift.get((dst, dport, src, sport), self.UNKNOWN)

    def update(self, src: object, sport: int, dst: object, dport: int, flags: int, window: int,
               shift: int | None) -> int:
        """The scaled window of one segment, given its addresses, ports, flags, raw window and (for
        a SYN) its Window Scale option's shift count; learns from SYNs."""
        fwd = (src, sport, dst, dport)
        if flags & TCP.SYN:
            self._shift[fwd] = self.NONE if shift is None else shift
            if flags & TCP.ACK:  # SYN-ACK: scaling only if both sides offered it
                rev = (dst, dport, src, sport)
                if self.NONE in (self._shift[fwd], self._shift.get(rev, self.UNKNOWN)):
                    self._shift[fwd] = self._shift[rev] = self.NONE
            return window
        sh = self._shift.get(fwd, self.UNKNOWN)
        return window << sh if sh >= 0 else window

    def update_many(self, keys: Sequence[tuple[object, int, object, int]], dirs: np.ndarray, flags: np.ndarray,
                    windows: np.ndarray, shift: Callable[[int], int | None]) -> np.ndarray:
        """:meth:`update` for many segments in capture order, at once: row ``i`` goes from
        ``keys[dirs[i]]`` (source, source port, destination, destination port) with ``flags[i]`` and
        raw window ``windows[i]``; ``shift(i)`` is the Window Scale shift count of SYN row ``i``
        (asked for SYN rows only).  The scaled windows, and the state left as the calls one by one
        would leave it: SYN rows are learnt from in order, every other row takes the shift its
        direction has at its place in the sequence (a later SYN resets a direction)."""
        n = len(dirs)
        raw = windows.astype(np.int64)
        syn = (flags & TCP.SYN) != 0
        index = {k: i for i, k in enumerate(keys)}
        # each direction's shift before the first row, then (row, direction, shift) after each SYN
        start = np.array([self._shift.get(k, self.UNKNOWN) for k in keys] or [0], dtype=np.int64)
        ev_row: list[int] = []
        ev_dir: list[int] = []
        ev_val: list[int] = []
        dl, fl, wl = dirs.tolist(), flags.tolist(), raw.tolist()
        for i in np.flatnonzero(syn).tolist():
            k = keys[dl[i]]
            self.update(k[0], k[1], k[2], k[3], fl[i], wl[i], shift(i))
            for kk in (k, (k[2], k[3], k[0], k[1])):
                j = index.get(kk)
                if j is not None:
                    ev_row.append(i)
                    ev_dir.append(j)
                    ev_val.append(self._shift[kk] if kk in self._shift else self.UNKNOWN)
        sh = start[dirs] if n else np.zeros(0, dtype=np.int64)
        if ev_row:
            er, ed, ev = np.array(ev_row, dtype=np.int64), np.array(ev_dir, dtype=np.int64), np.array(ev_val)
            order = np.lexsort((er, ed))  # by direction, then row (a SYN-ACK's two entries: the same row)
            ekey = ed[order] * (n + 1) + er[order]
            pos = np.searchsorted(ekey, dirs.astype(np.int64) * (n + 1) + np.arange(n), side="left") - 1
            ok = pos >= 0
            pos = np.maximum(pos, 0)
            ok &= ed[order][pos] == dirs
            sh = np.where(ok, ev[order][pos], sh)
        out: np.ndarray = np.where(~syn & (sh >= 0), raw << np.maximum(sh, 0), raw)
        return out


def _ones_add(a: int, b: int) -> int:
    """16-bit one's complement addition (RFC 1071)."""
    s = a + b
    return (s & 0xFFFF) + (s >> 16)


#: (IP version, echo request type) -> (reply type, what the reply's checksum adds to the request's): the
#: type word's change, request minus reply in one's complement (RFC 1624 3)
_ECHO_REQUESTS = {(v, req): (rep, _ones_add(req << 8, 0xFFFF ^ (rep << 8))) for v, (req, rep) in ECHO_TYPES.items()}
_ECHO_REPLIES = {(v, rep) for v, (_req, rep) in ECHO_TYPES.items()}


class EchoPairs:
    """Echo replies matched with their requests in one pass over a capture, as tshark matches them
    (and words it: "(request in N)" after a reply's Info).

    Fed every frame in capture order (:meth:`note`).  A request waits for the reply of the same
    identifier, sequence number and data between the same two addresses (either way round); the
    data is compared through the checksum: the reply's is the request's with the type changed
    (RFC 1624).  A later request of the same key takes the earlier one's place; a reply answers one
    request, and a second reply of it answers none.  At most ``limit`` requests wait (the oldest
    goes first); tshark keeps them all."""

    def __init__(self, limit: int = 1 << 16) -> None:
        self._waiting: dict[tuple[int, int, int, int, int, int], int] = {}
        self._limit = limit

    def note(self, frame: int, pkt: Packet) -> int | None:
        """Feed frame ``frame``: for an echo reply that answers a request fed before, that request's
        frame number (the request is answered then), else None."""
        echo = echo_message(pkt)
        if echo is None:
            return None
        return self.pair(frame, *echo, *_ip_pair(pkt))

    def pair(self, frame: int, version: int, kind: int, ident_seq: int, checksum: int, src: int, dst: int) -> int | None:
        """:meth:`note` of an echo given by its values (:func:`echo_message`'s, and the IP addresses as
        integers), as the summary lines' columns give them."""
        req = _ECHO_REQUESTS.get((version, kind))
        if req is not None:
            key = (version, min(src, dst), max(src, dst), req[0], ident_seq, _ones_add(checksum, req[1]))
            self._waiting.pop(key, None)
            if len(self._waiting) >= self._limit:
                del self._waiting[next(iter(self._waiting))]
            self._waiting[key] = frame
            return None
        return self._waiting.pop((version, min(src, dst), max(src, dst), kind, ident_seq, checksum), None)


def echo_message(pkt: Packet) -> tuple[int, int, int, int] | None:
    """An ICMP or ICMPv6 echo request or reply: IP version, type, identifier and sequence number (as one
    32-bit number) and checksum; None for any other frame (what :class:`EchoPairs` looks at)."""
    last = pkt.layers[-1].header if pkt.layers else None
    if isinstance(last, ICMPEcho):
        version = 4
    elif isinstance(last, ICMPv6Echo):
        version = 6
    else:
        return None
    if (version, last.type) not in _ECHO_REQUESTS and (version, last.type) not in _ECHO_REPLIES:
        return None
    return version, last.type, last.ident << 16 | last.seq, last.checksum


def _ip_pair(pkt: Packet) -> tuple[int, int]:
    for cls in (IPv4, IPv6):
        ip = pkt.get(cls)
        if ip is not None:
            return ip.src, _ipv4_dst(pkt) if cls is IPv4 else ip.dst  # type: ignore[attr-defined]
    return 0, 0


def tcp_info(pkt: Packet, window: int | None = None) -> str | None:
    """tshark's Info for a TCP segment: ports, flags, raw sequence numbers, window, length.

    As ``tshark -o tcp.relative_sequence_numbers:false``.  ``window`` is the scaled window
    (:class:`TcpWindowScaling`); without it the raw field is shown.  As tshark (packet-tcp.c):
    a header length under 20 octets ends the text with ``, bogus TCP header length (N, must be at
    least 20)`` in place of ``Len=``, and a header that runs past its datagram (no ``tcp.len``)
    has no ``Len=`` (:func:`info` gives it no ``window``: tshark shows such a segment's raw window)."""
    tcp = pkt.get(TCP)
    if tcp is None:
        return None
    shown = tcp.window if window is None else window
    if tcp.data_offset < 5:
        return tcp_info_text(tcp.sport, tcp.dport, tcp.all_flags, tcp.seq, tcp.ack, shown, None) \
            + f", bogus TCP header length ({tcp.data_offset * 4}, must be at least 20)"
    return tcp_info_text(tcp.sport, tcp.dport, tcp.all_flags, tcp.seq, tcp.ack, shown, tcp_segment_length(pkt))


_FLAG_TEXT: dict[int, str] = {}

#: a TCP header of bogus length (under 20 octets) shows no flags nor acknowledgment number (tshark's fields
#: stop at the header length), but tshark still counts them in its conversations: fields.frame_fields puts
#: them under these names (rdmalab's own, no field's), for :class:`Conversations`
HIDDEN_TCP_FLAGS = "rdmalab.tcp_flags_unshown"
HIDDEN_TCP_ACK = "rdmalab.tcp_ack_unshown"
#: a UDP header tshark stops in (its datagram ends inside it, or its length is under 8): in no conversation
HIDDEN_UDP_CUT = "rdmalab.udp_header_cut"


def quoted_seq(fields: dict[str, Any]) -> Any:
    """A TCP header's raw sequence number in its fields: tcp.seq_raw, or for the header of an ICMP error's
    quote of an IPv4 datagram, which tshark shows as tcp.seq alone (wire.net.TCPQuoted4), tcp.seq (None:
    neither)."""
    return fields.get("tcp.seq_raw", fields.get("tcp.seq"))


def tcp_info_text(sport: int, dport: int, flags: int, seq: int, ack: int, window: int, length: int | None) -> str:
    """:func:`tcp_info` from the segment's numbers (``window`` as shown: raw or scaled; ``length``
    None: no ``Len=``)."""
    names = _FLAG_TEXT.get(flags)
    if names is None:  # (12 bits: at most 4096 texts)
        names = _FLAG_TEXT[flags] = ", ".join(tcp_flag_names(flags))  # in tshark's order (lowest bit first)
    tail = "" if length is None else f" Len={length}"
    if flags & TCP.ACK:
        return f"{sport} → {dport} [{names}] Seq={seq} Ack={ack} Win={window}{tail}"
    return f"{sport} → {dport} [{names}] Seq={seq} Win={window}{tail}"


def info(cp: CapturedPacket, tcp_windows: TcpWindowScaling | None = None, request_in: int | None = None) -> str:
    """tshark's Info column.  ``tcp_windows``, fed every frame in capture order, scales TCP
    windows as tshark does; without it they are shown raw.  ``request_in``: the frame of the echo
    request an echo reply answers (:class:`EchoPairs`), said after the reply's Info."""
    window = tcp_windows.window(cp.packet) if tcp_windows is not None else None
    if cp.pdus:
        text = "; ".join(p.summary() for p in cp.pdus)
    else:
        # (a TCP header the decoder did not take whole, its options past the datagram's end: its
        # numbers all the same, as tshark shows them before it calls the segment malformed; its
        # window raw, as tshark's)
        if cp.packet.encap == "tcp":
            text = tcp_info(cp.packet, window) or cp.packet.summary()
        elif cp.packet.layers and isinstance(cp.packet.layers[-1].header, TCP):
            text = tcp_info(cp.packet) or cp.packet.summary()
        else:
            text = cp.packet.summary()
        if request_in is not None and cp.packet.info and text.endswith(cp.packet.info):  # (IPoIB's too)
            text += f" (request in {request_in})"
    return _with_problems(text, (cp.packet, *cp.pdus), cp.packet.internal_error)


def pdus_info(pdus: list[Packet]) -> str:
    """:func:`info` of a frame that has no problem of its own and completes the iWARP ``pdus``."""
    return _with_problems("; ".join(p.summary() for p in pdus), pdus, None)


def _with_problems(text: str, packets: Sequence[Packet], internal: str | None) -> str:
    for pkt in packets:
        if pkt.problems and str(pkt.problems[0]) not in text:
            text += f" [{len(pkt.problems)} problem(s): {pkt.problems[0]}]"
    if internal and internal not in text:
        text += f" [rdmalab could not fully decode this frame: {internal}]"
    return text


def summary_line(cp: CapturedPacket, t0_ns: int | float, tcp_windows: TcpWindowScaling | None = None,
                 request_in: int | None = None, when: str | None = None, text: str | None = None) -> str:
    """One line, as tshark prints: number, relative time, source, destination, protocol, length, info.

    ``t0_ns``: the first frame's time (:attr:`CapturedPacket.epoch_ns`; a float: in seconds, as
    :attr:`CapturedPacket.timestamp`); the time column is the seconds since it to the frame's precision
    (:func:`time_text`).  Pass one :class:`TcpWindowScaling`
    for all frames of a capture, in order, for TCP windows scaled as tshark shows them, and for an echo
    reply the frame of its request (:class:`EchoPairs`).  ``when``: the time column's text in another
    format (:class:`TimeColumn`).  ``text``: the Info column, made before (:func:`info`: a TCP segment's
    window scaled in capture order, its line written once a filter has shown it)."""
    src, dst = endpoints(cp.packet)
    if isinstance(t0_ns, float):
        t0_ns = epoch_ns(t0_ns)
    return format_summary(cp.frame_number, time_text(cp.epoch_ns - t0_ns, cp.digits) if when is None else when, src,
                          dst, protocol(cp), cp.wire_length or len(cp.packet.data),
                          info(cp, tcp_windows, request_in) if text is None else text)


def time_text(ns: int, digits: int = 6) -> str:
    """A time in nanoseconds (signed: a frame before the first is negative) as tshark's time column shows
    it: seconds, cut (not rounded) to ``digits`` decimals, the capture's precision
    (:func:`~rdmalab.capture.pcapio.time_digits`: 6 for microseconds, 9 for nanoseconds and ERF)."""
    sign = "-" if ns < 0 else ""
    secs, frac = divmod(abs(ns), 1_000_000_000)
    if digits <= 0:
        return f"{sign}{secs}"
    return f"{sign}{secs}.{frac // 10 ** (9 - digits):0{digits}d}"


def format_summary(frame: int, t: float | str, src: str, dst: str, proto: str, length: int, text: str) -> str:
    """The summary line's layout (tshark's columns: No., Time, Source, Destination, Protocol, Length, Info);
    ``t`` seconds, or a time's text (:class:`TimeColumn`)."""
    if isinstance(t, str):
        return f"{frame:5d} {t:>11} {src:>15} → {dst:<15} {proto:<10} {length:5d} {text}"
    return f"{frame:5d} {t:11.6f} {src:>15} → {dst:<15} {proto:<10} {length:5d} {text}"


#: where :func:`format_summary`'s Info starts: after the addresses' arrow, the destination, the protocol and the length
_INFO_AT = re.compile(r" → \S+ +\S+ +\d+ ")


def with_info_prefix(line: str, prefix: str) -> str:
    """A summary line (:func:`format_summary`) with ``prefix`` in front of its Info, where tshark puts its
    TCP analysis flags (:func:`rdmalab.capture.tcp_analysis.info_prefix`)."""
    m = _INFO_AT.search(line) if prefix else None
    if m is None:
        return line
    return line[:m.end()] + prefix + line[m.end():]


#: where the TCP header's lines of a frame's tree (:func:`frame_tree`) end: the first line after its
#: heading that is not one of its fields (a heading of its own, or the blank line after the frame)
TCP_HEADING = "\n    TCP  ["
NOT_A_FIELD = re.compile(r"\n(?!        )")


def with_analysis_tree(tree: str, lines: list[str]) -> str:
    """A frame's tree (:func:`frame_tree`) with ``lines`` (tshark's SEQ/ACK analysis tree:
    :func:`rdmalab.capture.tcp_analysis.tree_lines`) after its TCP header's fields, as their last child."""
    if not lines:
        return tree
    at = tree.find(TCP_HEADING)
    if at < 0:
        return tree
    m = NOT_A_FIELD.search(tree, at + len(TCP_HEADING))
    end = m.start() if m is not None else len(tree.rstrip("\n"))
    return tree[:end] + "".join("\n        " + line for line in lines) + tree[end:]


#: tshark's time formats (``-t``): what each shows
TIME_FORMATS = {
    "r": "seconds since the first frame (the default)", "a": "the time of day (local)",
    "ad": "date and time of day (local)", "d": "seconds since the frame before",
    "dd": "seconds since the frame shown before", "e": "seconds since the epoch (1970, UTC)",
    "u": "the time of day (UTC)", "ud": "date and time of day (UTC)",
}


class TimeColumn:
    """The summary line's time as tshark's ``-t FORMAT`` shows it (:data:`TIME_FORMATS`), to the
    frame's precision (:func:`time_text`).  Feed it every frame in capture order (:meth:`seen`), and
    ask for the text of the frames shown (:meth:`text`, after :meth:`seen` of that frame)."""

    def __init__(self, fmt: str) -> None:
        if fmt not in TIME_FORMATS:
            raise ValueError(f"-t {fmt}: not a time format ({', '.join(f'{k}: {v}' for k, v in TIME_FORMATS.items())})")
        self.fmt = fmt
        self._first: int | None = None
        self._before = self._now = 0
        self._shown: int | None = None

    def seen(self, ns: int) -> None:
        """The next frame's time (nanoseconds since the epoch, :attr:`CapturedPacket.epoch_ns`)."""
        if self._first is None:
            self._first = self._before = self._now = ns
        self._before, self._now = self._now, ns

    def text(self, digits: int = 6) -> str:
        """The time column of the frame last :meth:`seen`, which is shown, to ``digits`` decimals
        (:attr:`CapturedPacket.digits`)."""
        ns, fmt = self._now, self.fmt
        shown, self._shown = self._shown, ns
        if fmt in ("r", "d", "dd"):
            since = {"r": self._first, "d": self._before, "dd": ns if shown is None else shown}[fmt]
            return time_text(ns - (since or 0), digits)
        if fmt == "e":
            return time_text(ns, digits)
        secs = ns // 1_000_000_000
        frac = time_text(ns - secs * 1_000_000_000, digits)[1:]  # (".123456", or "" without decimals)
        try:
            when = (_dt.datetime.fromtimestamp(secs, tz=_dt.UTC) if fmt in ("u", "ud")
                    else _dt.datetime.fromtimestamp(secs))
        except (ValueError, OverflowError, OSError):  # a time datetime does not hold: seconds since the epoch
            return f"{secs}{frac}"
        return f"{when:%Y-%m-%d %H:%M:%S}{frac}" if fmt in ("ad", "ud") else f"{when:%H:%M:%S}{frac}"


#: (header class, offset, indent) -> its template (:func:`~rdmalab.capture.header_text.header_text_fn`) and
#: the reader of a header's integer (:func:`~rdmalab.capture.header_text.header_int_fn`; None: the class spells a field its own way, or its
#: template did not give a header's lines as :func:`~rdmalab.capture.header_text.header_lines` does)
_TEMPLATES: dict[tuple[type[Header], int, str], tuple[Callable[[int], str], Callable[[Header], int | None]] | None] = {}


def _template(cls: type[Header], offset: int, indent: str,
              ) -> tuple[Callable[[int], str], Callable[[Header], int | None]] | None:
    key = (cls, offset, indent)
    try:
        return _TEMPLATES[key]
    except KeyError:
        pass
    made = None
    if templatable(cls):
        made = (header_text_fn(cls, offset, indent), header_int_fn(cls))
    if len(_TEMPLATES) >= 4096:
        _TEMPLATES.clear()
        _CHECKED.clear()  # (a template dropped as wrong is made, and checked, again)
    _TEMPLATES[key] = made
    return made


def _header_lines(h: Header, offset: int, indent: str) -> list[str]:
    """:func:`~rdmalab.capture.header_text.header_lines`, by the header class's template where it has
    one (most headers: a call over the header's integer instead of a span and a ``describe`` per
    field), checked against the spans on the first header of each class, offset and indentation."""
    cls = type(h)
    made = _template(cls, offset, indent)
    if made is None:
        return list(_remembered_lines(h, offset, indent))
    text, value = made
    v = value(h)
    if v is None:  # (a value the field cannot hold: a header made by hand)
        return header_lines(h, offset, indent)
    lines = text(v).split("\n")
    if not _CHECKED.get((cls, offset, indent)):
        _CHECKED[(cls, offset, indent)] = True
        if lines != header_lines(h, offset, indent):
            _TEMPLATES[(cls, offset, indent)] = None
            return header_lines(h, offset, indent)
    return lines


_CHECKED: dict[tuple[type[Header], int, str], bool] = {}

#: (header, offset, indent) -> its lines, for the classes without a template: a header's lines depend on
#: its values, where it starts and the indentation alone, and most headers repeat from frame to frame.
#: Bounded.
_LINES: dict[tuple[Header, int, str], tuple[str, ...]] = {}


def _remembered_lines(h: Header, offset: int, indent: str) -> tuple[str, ...]:
    key = (h, offset, indent)
    try:
        hit = _LINES.get(key)
    except TypeError:  # a header with an unhashable field: not remembered
        return tuple(header_lines(h, offset, indent))
    if hit is None:
        if len(_LINES) >= 8192:
            _LINES.clear()
        hit = _LINES[key] = tuple(header_lines(h, offset, indent))
    return hit


def packet_tree(pkt: Packet, indent: str = "    ") -> list[str]:
    """Every layer and field of a packet, with values, descriptions and byte offsets."""
    out: list[str] = []
    for layer in pkt.layers:
        out.extend(_header_lines(layer.header, layer.offset, indent))
    po, pl = pkt.payload_offset, pkt.payload_length
    if pl:
        out.append(payload_line(indent, po, pl, pkt.data[po:po + min(pl, 32)], pkt.payload_wire))
    if pkt.pad:
        out.append(pad_line(indent, po + pl, pkt.pad))
    if pkt.crc is not None and pkt.crc_offset is not None:
        status = pkt.crc_status
        out.append(crc_line(indent, "ICRC" if pkt.crc_kind == "icrc" else "MPA CRC32c", pkt.crc_offset, pkt.crc,
                            status, pkt.crc_expected if status == "bad" else None))
        if pkt.vcrc is not None:
            vs = pkt.vcrc_status or "unchecked"
            out.append(f"{indent}VCRC: {pkt.vcrc.to_bytes(2, 'little').hex(' ')} ({vs}) "
                       f"@ bytes {pkt.crc_offset + 4}-{pkt.crc_offset + 5}")
    if pkt.eth_trailer is not None:
        out.extend(trailer_lines(indent, pkt.eth_trailer))
    for p in pkt.problems:
        out.append(f"{indent}Problem: {p}")
    q = pkt.quoted
    if q is not None and q.layers:  # an ICMP error's quote: the datagram that caused it, as far as it was quoted
        start = q.layers[0].offset
        out.append(f"{indent}Quoted datagram (the packet this error answers): {len(q.data) - start} bytes "
                   f"@ bytes {start}-{len(q.data) - 1}")
        out.extend(packet_tree(q, indent + "    "))
    return out


def trailer_lines(indent: str, t: EthernetTrailer) -> list[str]:
    """A tree's lines for the octets of an Ethernet frame after its datagram: padding, a trailer, the FCS
    (checked here, where tshark leaves it unverified unless told)."""
    out = []
    if t.padding:
        out.append(f"{indent}Ethernet padding: {len(t.padding)} byte(s) @ bytes {t.padding_at}-"
                   f"{t.padding_at + len(t.padding) - 1}  {{eth.padding}}")
    if t.trailer:
        more = " ..." if len(t.trailer) > 32 else ""
        label = "Linux cooked trailer" if t.trailer_name == "sll.trailer" else "Ethernet trailer"
        out.append(f"{indent}{label}: {len(t.trailer)} byte(s) @ bytes {t.trailer_at}-"
                   f"{t.trailer_at + len(t.trailer) - 1}: {t.trailer[:32].hex(' ')}{more}  {{{t.trailer_name}}}")
    if t.fcs is not None and t.fcs_at is not None:
        if t.fcs_expected is None:
            status = "unchecked: the frame was not captured whole"
        else:
            status = "good" if t.fcs == t.fcs_expected else f"bad, should be 0x{t.fcs_expected:08x}"
        out.append(f"{indent}Ethernet FCS: 0x{t.fcs:08x} ({status}) @ bytes {t.fcs_at}-{t.fcs_at + 3}  {{eth.fcs}}")
    return out


def payload_line(indent: str, offset: int, length: int, head: bytes | bytearray | memoryview,
                 wire: int | None = None) -> str:
    """A tree's payload line: ``length`` bytes from ``offset``, shown by their first (up to 32) bytes ``head``;
    ``wire``: the payload's length on the wire, when a snap length cut it to ``length``."""
    more = " ..." if length > 32 else ""
    size = f"{length} bytes" if wire is None else f"{length} of {wire} bytes captured"
    return f"{indent}Payload: {size} @ bytes {offset}-{offset + length - 1}: {head.hex(' ')}{more}"


def pad_line(indent: str, offset: int, pad: int) -> str:
    return f"{indent}Pad: {pad} byte(s) @ bytes {offset}-{offset + pad - 1}"


def crc_line(indent: str, name: str, offset: int, crc: int, status: str | None, expected: int | None) -> str:
    """A tree's ICRC (or MPA CRC) line: the CRC as on the wire, its status, what it should be if bad."""
    exp = f", should be {expected.to_bytes(4, 'little').hex(' ')}" if expected is not None else ""
    return f"{indent}{name}: {crc.to_bytes(4, 'little').hex(' ')} ({status or 'unchecked'}{exp}) @ bytes {offset}-{offset + 3}"


def frame_line(frame_number: int, wire_length: int, captured: int, linktype: int, timestamp: float) -> str:
    """A tree's first line: the frame's number, lengths, link type and time."""
    lt = LINKTYPE_NAMES.get(linktype) or f"link type {linktype}"
    return (f"Frame {frame_number}: {wire_length or captured} bytes on wire, {captured} bytes captured, {lt}, "
            f"time {timestamp:.6f}")


#: a byte as the ASCII column of a hex dump shows it: printable ASCII as itself, anything else a dot
_ASCII = bytes(b if 0x20 <= b < 0x7F else 0x2E for b in range(256))


def hex_dump(data: bytes | bytearray | memoryview) -> str:
    """Bytes as tshark's ``-x`` prints them: 16 a line, each line its offset (four hex digits, more
    past 64 KiB), the bytes in hex and the same as ASCII (a dot for what does not print)::

        0000  52 54 00 00 01 01 52 54 00 00 01 02 08 00 45 00   RT....RT......E.
    """
    raw = bytes(data)
    width = max(4, len(f"{max(len(raw) - 1, 0):x}"))
    lines = []
    for at in range(0, len(raw), 16):
        row = raw[at:at + 16]
        lines.append(f"{at:0{width}x}  {row.hex(' '):<47}   {row.translate(_ASCII).decode('ascii')}")
    return "\n".join(lines)


def frame_hex(cp: CapturedPacket) -> str:
    """``rdmalab decode -x`` of one frame: the frame's bytes (tshark's frame: an ERF record's after its
    header), and after them the bytes of the iWARP PDUs that complete here and were not sent as they
    are in this segment, each source under tshark's name for it: an FPDU whose bytes began in earlier
    segments (``Reassembled TCP (1448 bytes):``), an FPDU of this segment with its markers taken out
    (``FPDU without Markers (324 bytes):``), a Send message of several FPDUs that one of them ends
    (``Reassembled SMB Direct (4096 bytes):``, tshark's title for any Send message it puts together:
    ``Packet.send_message``); with the frame itself then named (``Frame (70 bytes):``).
    As tshark, only for a stream whose MPA negotiation is in the capture."""
    frame = cp.frame_bytes
    sources: list[tuple[str, bytes]] = []
    tcp = cp.packet.get(TCP)
    if cp.pdus and tcp is not None:
        spanning = b""
        # where each PDU's bytes end in the stream: the next one's start, the last one's the segment's end
        ends = [p.stream.seq if p.stream is not None else None for p in cp.pdus[1:]]
        ends.append((tcp.seq + cp.packet.payload_length) % (1 << 32))
        for p, end in zip(cp.pdus, ends, strict=True):
            fpdu = bytes(p.data)
            if p.stream is None or not p.stream.handshake:
                continue
            if len(p.stream.frames) > 1:
                spanning += fpdu
            elif end is not None and (end - p.stream.seq) % (1 << 32) > len(fpdu):  # markers among its bytes
                sources.append(("FPDU without Markers", fpdu))
            if p.send_message is not None:  # (packet-iwarp-ddp-rdmap.c's title for it, whatever the ULP)
                sources.append(("Reassembled SMB Direct", p.send_message.data))
        if spanning:
            sources.insert(0, ("Reassembled TCP", spanning))
    if not sources:
        return hex_dump(frame)
    return "\n".join(f"{name} ({len(b)} bytes):\n{hex_dump(b)}" for name, b in [("Frame", bytes(frame)), *sources])


def frame_tree(cp: CapturedPacket) -> str:
    """The full tree of one frame (``rdmalab decode -V``)."""
    pkt = cp.packet
    lines = [frame_line(cp.frame_number, cp.wire_length, len(pkt.data), cp.linktype, cp.timestamp),
             f"    Summary: {info(cp)}"]
    lines.extend(packet_tree(pkt))
    internal = pkt.internal_error
    if internal:
        lines.append(f"    Problem: rdmalab could not fully decode this frame: {internal}")
    if cp.pdus:
        lines.extend(pdu_lines(cp.pdus))
    return "\n".join(lines)


def pdu_lines(pdus: list[Packet]) -> list[str]:
    """The trees of the iWARP PDUs a frame completes (the end of :func:`frame_tree`)."""
    out: list[str] = []
    for i, pdu in enumerate(pdus, 1):
        out.append(f"    PDU {i} of {len(pdus)} ({pdu.encap}; offsets within the PDU): {pdu.summary()}")
        out.extend(packet_tree(pdu, "        "))
        if pdu.send_message is not None:
            out.append(send_message_line("        ", pdu.send_message))
    return out


def send_message_line(indent: str, msg: SendMessage) -> str:
    """The line that says which FPDUs a Send message was put together from (tshark's "Reassembled SMB
    Direct Fragments" tree, in one line): its length and each FPDU's frame and payload octets."""
    parts = ", ".join(f"#{'?' if f is None else f}({n})" for f, n in msg.fragments)
    return f"{indent}Send message: {len(msg.data)} bytes in {len(msg.fragments)} FPDUs: {parts} (the data of this PDU)"
