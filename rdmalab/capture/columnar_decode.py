"""Decoding blocks of records into columns, with numpy over a byte matrix.

Each block of records (:class:`rdmalab.capture.pcapio.RecordBlock`) has the first
:data:`~rdmalab.capture.columnar_schema.WINDOW` bytes of every packet copied into one
``(n, WINDOW)`` byte matrix, and every field is taken with numpy over that matrix: each row
carries its own offsets (VLAN tag or not, IPv4 header length, IPv4/IPv6, the extended headers
the BTH opcode implies, looked up in the opcode table of :mod:`rdmalab.wire.opcodes`), so no
Python code runs per packet except the ICRC (``zlib.crc32`` over the header row, masked with the
masks of :mod:`rdmalab.wire.crc`, and the payload bytes).  iWARP columns come from the TCP
stream reassembly of :mod:`rdmalab.capture.iwarp`, fed the block's TCP segments in order
(:func:`fill_iwarp`).  Frames of other link types are decoded by the per-packet decoder
(:func:`columns_from_packets`), into the same columns.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterable, Iterator
from functools import lru_cache
from typing import Any

import numpy as np

from rdmalab.capture.columnar_schema import (
    _LAYER_NAMES,
    COLUMN_BY_NAME,
    COLUMNS,
    CONVERSATION_FIELDS,
    DERIVED,
    FILTER_PROTOCOLS,
    IWARP_COLUMNS,
    IWARP_LAYERS,
    IWARP_PREFIXES,
    WINDOW,
    Columns,
    _fmt_values,
    _ipv6_text,
    link_header_length,
)
from rdmalab.capture.columnar_tcp import FPDU_HEADERS, fpdu_chains
from rdmalab.capture.fields import (  # the per-packet field names, one source of truth
    CRC_OK,
    frame_fields,
    packet_fields,
    shown_window,
)
from rdmalab.capture.linktypes import (
    ERF_ETHERNET_TYPES,
    LINKTYPE_ERF,
    LINKTYPE_ETHERNET,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2,
    RAW_IP_LINKTYPES,
    erf_time_ns,
)
from rdmalab.capture.pcapio import RecordBlock
from rdmalab.capture.reader import CapturedPacket, RawRecord, decode_record, read
from rdmalab.capture.render import (
    HIDDEN_UDP_CUT,
    Conversations,
    TcpWindowScaling,
    conversation_key,
    quoted_seq,
    sack_delivered,
    window_shift_option,
)
from rdmalab.capture.tcp_analysis import ANALYSIS_FIELDS, FLAG_FIELDS, LABEL_FIELDS, TREE, VALUE_FIELDS, TcpAnalysis
from rdmalab.wire.control import (
    ETHERTYPE_ARP,
    ICMP_ERRORS,
    ICMPV6_ERRORS,
    IPPROTO_ICMP,
    IPPROTO_ICMPV6,
    icmp_summary,
    icmpv6_summary,
)
from rdmalab.wire.crc import ICRC_SEED, crc32, icrc_masks
from rdmalab.wire.errors import DecodeError
from rdmalab.wire.ib import GRH_NXTHDR_IBA
from rdmalab.wire.iwarp import decode_fpdu
from rdmalab.wire.net import ETHERTYPE_QINQ, ETHERTYPE_VLAN, MIN_ETHERTYPE, ROCEV2_PORT, TCP, IPv4
from rdmalab.wire.opcodes import CNP_OPCODE, OPCODES


def _opcode_tables() -> dict[str, np.ndarray]:
    """Per BTH opcode: byte offset after the BTH of each extended header (-1: absent), and the
    total length of the extended headers; from the opcode table (the one source of truth)."""
    names = {"RDETH": "rdeth", "DETH": "deth", "RETH": "reth", "AtomicETH": "atomiceth", "AETH": "aeth",
             "AtomicAckETH": "atomicacketh", "ImmDt": "immdt", "IETH": "ieth", "XRCETH": "xrceth"}
    t = {k: np.full(256, -1, dtype=np.int16) for k in names.values()}
    t["extlen"] = np.zeros(256, dtype=np.int16)
    t["known"] = np.zeros(256, dtype=bool)
    t["payload"] = np.zeros(256, dtype=bool)
    most = max(len(info.headers) for info in OPCODES.values())
    # where each extended header starts and ends after the BTH, in order (past the last: never reached)
    t["starts"] = np.full((256, most + 1), 1 << 20, dtype=np.int64)
    t["ends"] = np.full((256, most + 1), 1 << 20, dtype=np.int64)
    for code, info in OPCODES.items():
        pos = 0
        for k, h in enumerate(info.headers):
            key = names.get(h.__name__)
            if key is not None:
                t[key][code] = pos
            t["starts"][code, k] = pos
            pos += h.LAYOUT.size
            t["ends"][code, k] = pos
        t["extlen"][code] = pos
        t["known"][code] = True
        t["payload"][code] = info.payload
    return t


_OPT: dict[str, np.ndarray] | None = None


def _opt() -> dict[str, np.ndarray]:
    global _OPT
    if _OPT is None:
        _OPT = _opcode_tables()
    return _OPT


# ============================================================================ vectorised fields


def _realign(H: np.ndarray, base: np.ndarray, width: int) -> np.ndarray:
    """Row i of the result is ``H[i, base[i]:base[i] + width]`` (zeros past the window).

    Rows are grouped by their offset (a block of one capture has very few distinct ones: with or
    without a VLAN tag, IPv4 options, the extended headers of each opcode), so this is a few
    slices rather than a gather per byte."""
    n, hw = H.shape
    if n == 0:
        return np.zeros((0, width), dtype=np.uint8)
    b = int(base[0])
    if 0 <= b and b + width <= hw and (base == b).all():
        return H[:, b:b + width]
    lo, hi = int(base.min()), int(base.max())
    # the few distinct offsets: a count per possible offset is much cheaper than np.unique
    uniq = np.flatnonzero(np.bincount(base - lo)) + lo if 0 <= lo and hi < 4 * hw else np.unique(base)
    out = np.zeros((n, width), dtype=np.uint8)
    for b in uniq.tolist():
        if b < 0 or b >= hw:
            continue
        m = base == b
        w = min(width, hw - b)
        out[m, :w] = H[m, b:b + w]
    return out


def _be(M: np.ndarray, a: int, nbytes: int, dtype: Any = np.uint64) -> np.ndarray:
    """Big-endian unsigned integer of bytes ``a .. a+nbytes-1`` of every row, as ``dtype``."""
    if nbytes == 1:
        return M[:, a].astype(dtype)
    # copy the bytes into rows of 2, 4 or 8 (zero-padded in front) and read them as big-endian
    # integers: one copy and one conversion instead of a shift and an OR per byte
    w = 2 if nbytes == 2 else 4 if nbytes <= 4 else 8
    if w == nbytes:
        rows = np.ascontiguousarray(M[:, a:a + nbytes])
    else:
        rows = np.zeros((M.shape[0], w), dtype=np.uint8)
        rows[:, w - nbytes:] = M[:, a:a + nbytes]
    return rows.view(f">u{w}").reshape(-1).astype(dtype)


def wants_iwarp(fields: Iterable[str] | None) -> bool:
    """Whether decoding ``fields`` (None: all) needs the iWARP stream reassembly."""
    return fields is None or any(f.startswith(IWARP_PREFIXES) for f in fields)


#: The columns the iWARP reassembly reads (added to the fields asked for when it runs).
_TCP_INPUTS = ("ip.src", "ip.dst", "ip.hdr_len", "ipv6.src", "ipv6.dst", "tcp.srcport", "tcp.dstport",
               "tcp.seq_raw", "tcp.flags", "tcp.hdr_len", "tcp.len", "tcp.window_size_value", "vlan.id")


def wants_windows(fields: Iterable[str] | None) -> bool:
    """Whether decoding ``fields`` (None: all) needs the TCP handshakes followed (``tcp.window_size``,
    and the TCP analysis, which weighs a segment against the window its receiver offered)."""
    return fields is None or "tcp.window_size" in fields or wants_analysis(fields)


def wants_analysis(fields: Iterable[str] | None) -> bool:
    """Whether decoding ``fields`` (None: all) needs tshark's TCP sequence analysis followed
    (:data:`~rdmalab.capture.tcp_analysis.ANALYSIS_FIELDS`: :func:`fill_tcp_analysis`)."""
    return fields is None or not set(fields).isdisjoint(ANALYSIS_FIELDS)


def wants_analysis_values(fields: Iterable[str] | None) -> bool:
    """Whether decoding ``fields`` (None: all) needs the TCP analysis' values or its tree
    (:data:`~rdmalab.capture.tcp_analysis.VALUE_FIELDS`, ``tcp.analysis``), not its flags alone."""
    return fields is None or not set(fields).isdisjoint((*VALUE_FIELDS, TREE))


#: The columns :func:`fill_conversations` reads (added to the fields asked for when it runs).
CONVERSATION_INPUTS = ("ip.src", "ip.dst", "ipv6.src", "ipv6.dst", "tcp.srcport", "tcp.dstport", "udp.srcport",
                       "udp.dstport", "tcp.seq_raw", "tcp.ack_raw", "tcp.flags", "tcp.hdr_len", "tcp.len")


def wants_conversations(fields: Iterable[str] | None) -> bool:
    """Whether decoding ``fields`` (None: all) needs the conversations followed (``tcp.stream``,
    ``udp.stream``, the relative ``tcp.seq``, ``tcp.ack`` and ``tcp.nxtseq``; the TCP analysis, which
    follows each conversation)."""
    return fields is None or not set(fields).isdisjoint(CONVERSATION_FIELDS) or wants_analysis(fields)


def decode_block(blk: RecordBlock, *, verify_icrc: bool = True, fields: Iterable[str] | None = None,
                 tracker: Any = None, windows: TcpWindowScaling | None = None,
                 conversations: Conversations | None = None, quotes: bool = True) -> Columns:
    """Decode one block of Ethernet records into columns.

    ``fields`` (default: all) limits the work to the columns named (and what they depend on);
    the others are left as zeros with their layer absent.  ``tracker`` (an
    :class:`rdmalab.capture.iwarp.IwarpTracker`, kept from block to block) fills the iWARP
    columns; without one they are absent.  ``windows`` (a
    :class:`~rdmalab.capture.render.TcpWindowScaling`, kept from block to block) fills
    ``tcp.window_size``; without it that column is absent.  ``conversations`` (the same) fills
    :data:`~rdmalab.capture.columnar_schema.CONVERSATION_FIELDS` (:func:`fill_conversations`).
    ``quotes``: the ICMP errors that quote a datagram get their per-packet fields in
    :attr:`Columns.multi` (:func:`fill_quotes`); False leaves them out (for a caller that decodes
    those frames one by one anyway).  Conversations made with ``analysis=True`` also fill the TCP
    analysis' columns (:func:`fill_tcp_analysis`; ``windows`` must then be given)."""
    analysis = conversations.analysis if conversations is not None else None
    if analysis is not None and windows is None:
        raise ValueError("the TCP analysis weighs each segment against its receiver's window: give the windows too")
    if fields is not None and (tracker is not None or windows is not None):
        fields = (*fields, *_TCP_INPUTS)
    if fields is not None and conversations is not None:
        fields = (*fields, *CONVERSATION_INPUTS)
    cols = _decode(blk, verify_icrc, None if fields is None else frozenset(fields), tracker, quotes)
    ends = None
    if windows is not None:
        ends = fill_tcp_windows(blk, cols, windows, ends=analysis is not None,
                                sacks=analysis is not None and analysis.values)
    if conversations is not None:
        fill_conversations(cols, conversations)
    if analysis is not None:
        assert ends is not None
        fill_tcp_analysis(cols, analysis, ends)
    return cols


def erf_ethernet_view(blk: RecordBlock) -> RecordBlock:
    """The block with its ERF records (pcap link type 197) seen as the Ethernet frames they hold, as
    the per-packet reader gives them (:func:`rdmalab.capture.reader.decode_record`,
    :func:`rdmalab.capture.linktypes.erf_frame`): each frame from after the record's 16-octet header
    and its two offset and pad octets, ``wlen`` octets on the wire and at most that many captured, at
    the record's own time (nanoseconds, 9 decimal places), so that the columns read them as Ethernet
    frames.  Only when every ERF record of the block is an Ethernet record without extension headers
    whose ``rlen`` is the record's length and ``wlen`` is not 0; else the block as it is (its frames
    for the per-packet decoder, which shows the ERF header too)."""
    erf = blk.linktype == LINKTYPE_ERF
    if not erf.any():
        return blk
    rows = np.flatnonzero(erf)
    buf = np.frombuffer(blk.buf, dtype=np.uint8)
    off, cap = blk.offset[rows], blk.caplen[rows]
    if (cap < 18).any() or (off + cap > len(buf)).any():
        return blk
    rlen = buf[off + 10].astype(np.int64) << 8 | buf[off + 11]
    wlen = buf[off + 14].astype(np.int64) << 8 | buf[off + 15]
    if not (np.isin(buf[off + 8], list(ERF_ETHERNET_TYPES)) & (rlen == cap) & (wlen > 0)).all():
        return blk  # (another record type, an extension header: the type's top bit, a damaged length)
    ts = np.zeros(len(rows), dtype=np.uint64)
    for k in range(8):  # the timestamp is little-endian: 32.32 fixed-point seconds
        ts |= buf[off + k].astype(np.uint64) << np.uint64(8 * k)
    frac = ((ts & np.uint64(0xFFFFFFFF)) * np.uint64(1_000_000_000) + np.uint64(1 << 31)) >> np.uint64(32)
    ns = ((ts >> np.uint64(32)) * np.uint64(1_000_000_000) + frac).astype(np.int64)  # (erf_time_ns's rounding)
    offset, caplen, wirelen = blk.offset.copy(), blk.caplen.copy(), blk.wirelen.copy()
    offset[rows] = off + 18
    caplen[rows] = np.minimum(wlen, cap - 18)
    wirelen[rows] = wlen
    ts_ns = blk.ts_ns.copy()
    ts_ns[rows] = ns
    secs = blk.seconds().astype(np.float64)  # (a copy)
    secs[rows] = ns / 1e9
    digits = blk.time_digits().copy()
    digits[rows] = 9
    linktype = blk.linktype.copy()
    linktype[rows] = LINKTYPE_ETHERNET
    return RecordBlock(blk.buf, offset, caplen, wirelen, ts_ns, linktype, blk.first, blk.file_pos, secs,
                       blk.interface, blk.from_file, digits)


def fill_conversations(cols: Columns, conversations: Conversations, *, udp: bool = True,
                       relative: bool = True) -> None:
    """:data:`~rdmalab.capture.columnar_schema.CONVERSATION_FIELDS` of a block's frames, in order
    (:meth:`Conversations.streams_many` and :meth:`Conversations.relative_many`: Python per
    conversation and per SYN, not per frame).  An ICMP error that quotes a UDP or TCP header
    (:func:`fill_quotes`) counts in its place, with the quote's addresses and ports, as tshark counts
    it (a quoted segment keeps its raw numbers); its numbers go into its fields in :attr:`Columns.multi`.
    ``udp`` False: ``tcp.stream`` alone (``conversations`` then follows TCP alone), ``relative`` False:
    without the relative sequence numbers (what the TCP analysis needs, for the summary lines' flags)."""
    d, L = cols.data, cols.layers
    n = cols.n
    for name in CONVERSATION_FIELDS:
        L[name] = np.zeros(n, dtype=bool)
        d[name] = np.zeros(n, dtype=np.uint32)
    ip = L["ip.rest"]  # (ip.src's layer: the per-packet fields: ip.src if any, else ipv6.src)
    ip6 = L["ipv6"] & ~ip
    frames = d["frame.number"]
    quoting = {int(r): cols.multi[int(frames[r])] for r in _quote_rows(cols).tolist()}
    if conversations.analysis is not None:
        conversations.analysis.syns.clear()  # (those of the block before: analysed, or never to be)
    stream_of = np.full(n, -1, dtype=np.int64)
    for proto in ("tcp", "udp") if udp else ("tcp",):
        # (a UDP header tshark stops in is in no conversation: udp.cut, as Conversations.add)
        counted = L[proto] & ~L["udp.cut"] if proto == "udp" and "udp.cut" in L else L[proto]
        mine = np.flatnonzero(counted & (ip | ip6) & (stream_of < 0))
        quotes: list[tuple[int, dict[str, Any]]] = []
        for r, got in quoting.items():
            raw = got[QUOTED]
            if not isinstance(raw.get(proto + ".srcport"), int) or not isinstance(raw.get(proto + ".dstport"), int):
                continue
            if proto == "tcp" and "tcp.flags" not in raw and "tcp.hdr_len" not in raw:  # a quote of 8 to 15 octets:
                continue  # no conversation (an IPv4 quote's tcp.seq: its header's own, wire.net.TCPQuoted)
            quotes.append((r, raw))
        if not len(mine) and not quotes:
            continue
        rows = np.concatenate([mine, np.array([r for r, _ in quotes], dtype=np.int64)])
        order = np.argsort(rows, kind="stable")  # capture order, the quotes in their places
        rows, k = rows[order], len(mine)
        m = len(rows)
        # each row's two endpoints (IPv6 as 16 bytes; an IPv4 address in the last 4), a family byte before
        ends = np.zeros((m, 2, 19), dtype=np.uint8)
        six = np.zeros(m, dtype=bool)
        at = np.argsort(order)  # where each of mine and of the quotes went
        mi = at[:k]
        six[mi] = ip6[mine]
        for j, which in ((0, "src"), (1, "dst")):
            ends[mi, j, 13:17] = d[f"ip.{which}"][mine].astype(">u4").view(np.uint8).reshape(-1, 4)
            if six[mi].any():
                sel = mi[six[mi]]
                ends[sel, j, 1:17] = np.ascontiguousarray(d[f"ipv6.{which}"][mine[six[mi]]]).view(np.uint8).reshape(-1, 16)
            ends[mi, j, 17:19] = d[f"{proto}.{which}port"][mine].astype(">u2").view(np.uint8).reshape(-1, 2)
        flags = np.zeros(m, dtype=np.int64)
        seq = np.zeros(m, dtype=np.int64)
        ack = np.zeros(m, dtype=np.int64)
        hdr = np.full(m, 20, dtype=np.int64)
        length = np.full(m, -1, dtype=np.int64)  # (a quote: its raw numbers, as tshark's)
        if proto == "tcp":  # (a bogus header length too: its flags and number not shown, but counted, as tshark)
            flags[mi] = d["tcp.flags"][mine]
            seq[mi] = d["tcp.seq_raw"][mine]
            ack[mi] = d["tcp.ack_raw"][mine]
            hdr[mi] = d["tcp.hdr_len"][mine]
            length[mi] = np.where(L["tcp.len"][mine], d["tcp.len"][mine].astype(np.int64), -1)
        for (_r, raw), q in zip(quotes, at[k:].tolist(), strict=True):
            four = "ip.src" in raw
            six[q] = not four
            for j, which in ((0, "src"), (1, "dst")):
                addr = raw["ip." + which] if four else raw["ipv6." + which]
                addr = addr[-1] if isinstance(addr, list) else addr  # (the quote's, after the frame's)
                ends[q, j, 1:17] = np.frombuffer(int(addr).to_bytes(16, "big"), dtype=np.uint8)
                ends[q, j, 17:19] = np.frombuffer(int(raw[f"{proto}.{which}port"]).to_bytes(2, "big"), dtype=np.uint8)
            if proto == "tcp":
                # (a quote cut after its ports and sequence number, as an ICMP error may carry it, has no flags)
                flags[q], seq[q] = raw.get("tcp.flags", 0), quoted_seq(raw) or 0
                ack[q], hdr[q] = raw.get("tcp.ack_raw", 0), raw.get("tcp.hdr_len", 20)
        ends[:, :, 0] = six[:, None]
        flat = ends.reshape(-1, 19)
        codes, inv = np.unique(flat.view(np.dtype((np.void, 19))).reshape(-1), return_inverse=True)
        points = [(int.from_bytes(c[1:17], "big"), int.from_bytes(c[17:19], "big"))
                  for c in (bytes(x) for x in codes.tolist())]
        fam = [bool(bytes(x)[0]) for x in codes.tolist()]
        inv = inv.reshape(-1, 2)
        src, dst = inv[:, 0], inv[:, 1]
        # the conversations: the pairs of endpoints, either way round
        pair, pinv = np.unique(np.minimum(src, dst) * len(points) + np.maximum(src, dst), return_inverse=True)
        keys = [conversation_key(proto, fam[a], points[a], points[b])
                for a, b in ((p // len(points), p % len(points)) for p in pair.tolist())]
        stream, marks = conversations.streams_many(keys, pinv.reshape(-1), flags, seq, points, src, dst, ack, hdr,
                                                    length)
        stream_of[mine] = stream[mi]
        d[f"{proto}.stream"][mine] = stream[mi]
        L[f"{proto}.stream"][mine] = True
        if marks and conversations.analysis is not None:
            # (the SYNs on a known base, for the analysis of this block: not the quotes)
            mine_at = np.full(m, -1, dtype=np.int64)
            mine_at[mi] = mine
            syns = conversations.analysis.syns
            for q, mark in marks.items():
                if mine_at[q] >= 0:
                    syns[int(frames[mine_at[q]])] = mark
        if proto == "tcp" and not relative:
            conversations.follow_bases(stream, points, src, dst, flags, seq, ack, hdr, length)
            for (r, _raw), q in zip(quotes, at[k:].tolist(), strict=True):
                quoting[r]["tcp.stream"] = int(stream[q])
            continue
        if proto == "tcp":
            seq_rel, ack_rel, nxt, has_ack, has_nxt = conversations.relative_many(
                stream, points, src, dst, flags, seq, ack, hdr, length)
            for name, values, where in (("tcp.seq", seq_rel, np.ones(m, dtype=bool)), ("tcp.ack", ack_rel, has_ack),
                                        ("tcp.nxtseq", nxt, has_nxt)):
                w = where[mi]
                d[name][mine[w]] = values[mi][w]
                L[name][mine[w]] = True
        for (r, _raw), q in zip(quotes, at[k:].tolist(), strict=True):
            got = quoting[r]
            got[f"{proto}.stream"] = int(stream[q])
            if proto == "tcp":
                got["tcp.seq"] = int(seq_rel[q])
                if has_ack[q]:
                    got["tcp.ack"] = int(ack_rel[q])


def _quote_rows(cols: Columns) -> np.ndarray:
    """The rows of ICMP errors that quote a datagram (:func:`fill_quotes`), in order."""
    if not cols.multi:
        return np.zeros(0, dtype=np.int64)
    frames = cols.data["frame.number"]
    quoting = [f for f, got in cols.multi.items() if QUOTED in got]
    return np.flatnonzero(np.isin(frames, np.asarray(quoting, dtype=frames.dtype)))


#: the TCP segments of a block as :func:`fill_tcp_windows` followed them, for :func:`fill_tcp_analysis`: their
#: rows, each one's ends ((address, port) of its source and of its destination), its receiver's
#: window scaling shift after the segment (:meth:`TcpWindowScaling.receiver`), and the octets its SACK
#: option says were received (:func:`~rdmalab.capture.render.sack_delivered`)
TcpEnds = tuple[np.ndarray, list[tuple[int, int]], list[tuple[int, int]], list[int], list[int]]


def fill_tcp_windows(blk: RecordBlock, cols: Columns, windows: TcpWindowScaling, *, ends: bool = False,
                     sacks: bool = True) -> TcpEnds | None:
    """``tcp.window_size`` of the block's TCP segments, in order: the raw window scaled by the
    shift count each direction's SYN offered (Python per TCP segment; other frames cost nothing).
    ``ends``: return the segments' :data:`TcpEnds` as well (``sacks`` False: their SACK options not
    read, 0 each, for an analysis of the flags alone)."""
    d, L = cols.data, cols.layers
    idx = np.flatnonzero(L["tcp"])
    if len(idx) == 0:
        return (idx, [], [], [], []) if ends else None
    v6 = L["ipv6"][idx]
    l4 = link_header_length(L)[idx] + np.where(v6, 40, d["ip.hdr_len"][idx].astype(np.int64))
    opt = blk.offset[idx] + l4
    opt_end = np.minimum(opt + d["tcp.hdr_len"][idx].astype(np.int64), blk.offset[idx] + blk.caplen[idx])
    if v6.any():
        src = [int.from_bytes(a, "big") if six else s for a, six, s in
               zip(d["ipv6.src"][idx].tolist(), v6.tolist(), d["ip.src"][idx].tolist(), strict=True)]
        dst = [int.from_bytes(a, "big") if six else s for a, six, s in
               zip(d["ipv6.dst"][idx].tolist(), v6.tolist(), d["ip.dst"][idx].tolist(), strict=True)]
    else:
        src, dst = d["ip.src"][idx].tolist(), d["ip.dst"][idx].tolist()
    buf = blk.buf
    update = windows.update
    sports, dports = d["tcp.srcport"][idx].tolist(), d["tcp.dstport"][idx].tolist()
    rows = zip(src, sports, dst, dports, d["tcp.flags"][idx].tolist(), d["tcp.window_size_value"][idx].tolist(),
               opt.tolist(), opt_end.tolist(), strict=True)
    got: TcpEnds | None = None
    if not ends:
        out = [update(s, sp, t, dp, fl, w, window_shift_option(buf, a + 20, e) if fl & 0x02 else None)
               for s, sp, t, dp, fl, w, a, e in rows]
    else:  # (and each receiver's shift as the segment left it: a SYN may change it)
        out, rev = [], []
        # (update and receiver written out for a segment without SYN: the shift each direction's SYN offered)
        shift_of = windows._shift.get
        unknown = windows.UNKNOWN
        for s, sp, t, dp, fl, w, a, e in rows:
            if fl & 0x02:
                out.append(update(s, sp, t, dp, fl, w, window_shift_option(buf, a + 20, e)))
            else:
                sh = shift_of((s, sp, t, dp), unknown)
                out.append(w << sh if sh >= 0 else w)
            rev.append(shift_of((t, dp, s, sp), unknown))
        if sacks:
            delivered = [sack_delivered(buf, a + 20, e) if e > a + 20 else 0 for a, e in
                         zip(opt.tolist(), opt_end.tolist(), strict=True)]
        else:
            delivered = [0] * len(rev)
        got = (idx, list(zip(src, sports, strict=True)), list(zip(dst, dports, strict=True)), rev, delivered)
    # (a header past its datagram, no tcp.len: the raw window, as fields.shown_window)
    d["tcp.window_size"][idx] = np.where(L["tcp.len"][idx], out, d["tcp.window_size_value"][idx])
    L["tcp.window_size"][idx] = L["tcp.rest"][idx]  # (a bogus header length: its window in the line alone, as tshark)
    return got


def fill_tcp_analysis(cols: Columns, analysis: TcpAnalysis, ends: TcpEnds) -> None:
    """The TCP analysis' columns (:data:`~rdmalab.capture.tcp_analysis.ANALYSIS_FIELDS`) of a block's
    segments, in order: each fed to ``analysis`` (kept from block to block) with its ``tcp.stream``
    (:func:`fill_conversations` first), its ends and its receiver's window scaling shift (``ends``, from
    :func:`fill_tcp_windows`), as the per-packet path feeds it (:class:`~rdmalab.capture.render.Conversations`).
    Python runs per TCP segment.  A segment tshark does not analyse has none: a header cut before its
    window or past its datagram (no ``tcp.len``); an ICMP error's quote is not a row of the ``tcp`` layer."""
    d, L = cols.data, cols.layers
    n = cols.n
    for name in ANALYSIS_FIELDS:
        L[name] = np.zeros(n, dtype=bool)
    idx, srcs, dsts, revs, sacks = ends
    if not len(idx):
        return
    frames = d["frame.number"]
    dups: list[int] = []
    dup_values: list[tuple[int, int]] = []
    valued: list[int] = []  # (the rows with the analysis tree, and their values)
    values: list[tuple[int, ...]] = []
    if not analysis.values:  # (the flags alone: TcpAnalysis.flags_many's one loop, the same rules)
        got = tcp_flags(cols, analysis, ends)
        if got:  # (each flag's rows set at once from the flags' bits)
            rows = np.fromiter((g[0] for g in got), dtype=np.intp, count=len(got))
            bits = np.fromiter((g[1] for g in got), dtype=np.int64, count=len(got))
            L["tcp.analysis.flags"][rows[bits != 0]] = True
            for i, name in enumerate(FLAG_FIELDS):
                L[name][rows[(bits >> i & 1) != 0]] = True
            for row, _bits, dup in got:
                if dup is not None:
                    dups.append(row)
                    dup_values.append(dup)
    else:
        hits: list[tuple[int, list[str], tuple[int, int] | None]] = []
        ok = (L["tcp.stream"] & L["tcp.rest"] & L["tcp.len"])[idx]
        segment = analysis.segment
        for k, row, stream, seq, ack, flags, seglen, window, now, frame in zip(
                np.flatnonzero(ok).tolist(), idx[ok].tolist(), d["tcp.stream"][idx[ok]].tolist(),
                d["tcp.seq_raw"][idx[ok]].tolist(), d["tcp.ack_raw"][idx[ok]].tolist(), d["tcp.flags"][idx[ok]].tolist(),
                d["tcp.len"][idx[ok]].tolist(), d["tcp.window_size_value"][idx[ok]].tolist(),
                d["frame.time_ns"][idx[ok]].tolist(), frames[idx[ok]].tolist(), strict=True):
            names, dup, value = segment(stream, srcs[k], dsts[k], revs[k], seq, ack, flags, seglen, window, now, frame,
                                        sacks[k])
            if names or dup is not None:
                hits.append((row, names, dup))
            if value is not None:
                valued.append(row)
                values.append(value)
        # (the rows of each flag gathered, then set a column at a time)
        named: dict[str, list[int]] = {"tcp.analysis.flags": []}
        for row, names, dup in hits:
            if names:
                named["tcp.analysis.flags"].append(row)
                for name in names:
                    some = named.get(name)
                    if some is None:
                        named[name] = [row]
                    else:
                        some.append(row)
            if dup is not None:
                dups.append(row)
                dup_values.append(dup)
        for name, flagged in named.items():
            L[name][flagged] = True
    if dups:
        table = np.asarray(dup_values, dtype=np.int64)
        for j, name in enumerate(("tcp.analysis.duplicate_ack_num", "tcp.analysis.duplicate_ack_frame")):
            L[name][dups] = True
            d[name][dups] = table[:, j]
        multi = cols.multi
        for frame in frames[dups].tolist():
            # (tshark gives a duplicate ACK's label twice: Columns.multi holds both, the column the first)
            multi.setdefault(frame, {})["tcp.analysis.duplicate_ack"] = [1, 1]
    for name in LABEL_FIELDS:  # (present: 1)
        d[name] = L[name].astype(np.uint8)
    if values:  # (0: absent, as tshark leaves it out)
        at = np.asarray(valued, dtype=np.intp)
        L[TREE][at] = True
        d[TREE][at] = 1
        table = np.asarray(values, dtype=np.int64)
        for j, name in enumerate(VALUE_FIELDS):
            v = table[:, j]
            d[name][at] = v
            L[name][at] = v != 0


def tcp_flags(cols: Columns, analysis: TcpAnalysis, ends: TcpEnds) -> list[tuple[int, int, tuple[int, int] | None]]:
    """:func:`fill_tcp_analysis` for an analysis of the flags alone (``analysis.values`` False), without
    its columns: the (row, flags as bits of :data:`~rdmalab.capture.tcp_analysis.FLAG_FIELDS` order, a
    duplicate ACK's number and the frame it repeats) of each of the block's segments with a flag
    (:meth:`TcpAnalysis.flags_many`), the segments fed as :func:`fill_tcp_analysis` feeds them."""
    d, L = cols.data, cols.layers
    idx, srcs, dsts, revs, _sacks = ends
    if not len(idx):
        return []
    ok = (L["tcp.stream"] & L["tcp.rest"] & L["tcp.len"])[idx]
    if ok.all():
        rows = idx
    else:
        keep = np.flatnonzero(ok).tolist()
        rows = idx[ok]
        srcs, dsts, revs = [srcs[k] for k in keep], [dsts[k] for k in keep], [revs[k] for k in keep]
    got = analysis.flags_many(
        d["tcp.stream"][rows].tolist(), srcs, dsts, revs, d["tcp.seq_raw"][rows].tolist(),
        d["tcp.ack_raw"][rows].tolist(), d["tcp.flags"][rows].tolist(), d["tcp.len"][rows].tolist(),
        d["tcp.window_size_value"][rows].tolist(), d["frame.time_ns"][rows].tolist(),
        d["frame.number"][rows].tolist())
    if not got:
        return []
    at = rows[[i for i, _ta, _dup in got]].tolist()
    return [(row, ta, dup) for row, (_i, ta, dup) in zip(at, got, strict=True)]


def _wanted(wanted: frozenset[str] | None, prefixes: tuple[str, ...]) -> bool:
    return wanted is None or any(f.startswith(p) or p.startswith(f + ".") or p == f
                                 for f in wanted for p in prefixes)


#: The extended headers' fields: (column, header, first byte, bytes, dtype); the RETH's and
#: AtomicETH's shared address and key are taken apart in ``_decode``.
_EXT_FIELDS = (
    ("infiniband.rdeth.eecnxt", "rdeth", 1, 3, np.uint32),
    ("infiniband.deth.q_key", "deth", 0, 4, np.uint64),
    ("infiniband.deth.srcqp", "deth", 5, 3, np.uint32),
    ("infiniband.reth.dmalen", "reth", 12, 4, np.uint32),
    ("infiniband.atomiceth.swapdt", "atomiceth", 12, 8, np.uint64),
    ("infiniband.atomiceth.cmpdt", "atomiceth", 20, 8, np.uint64),
    ("infiniband.aeth.syndrome", "aeth", 0, 1, np.uint8),
    ("infiniband.aeth.msn", "aeth", 1, 3, np.uint32),
    ("infiniband.atomicacketh.origremdt", "atomicacketh", 0, 8, np.uint64),
    ("infiniband.immdt", "immdt", 0, 4, np.uint32),
    ("infiniband.ieth", "ieth", 0, 4, np.uint32),
    ("rdmalab.xrceth.xrcsrq", "xrceth", 1, 3, np.uint32),
)

_NEED_CACHE: dict[tuple[frozenset[str] | None, tuple[str, ...]], bool] = {}


def _decode(blk: RecordBlock, verify_icrc: bool, wanted: frozenset[str] | None, tracker: Any,
            quotes: bool = True) -> Columns:
    n = len(blk.offset)

    def need(*prefixes: str) -> bool:
        key = (wanted, prefixes)
        hit = _NEED_CACHE.get(key)
        if hit is None:
            if len(_NEED_CACHE) > 4096:
                _NEED_CACHE.clear()
            hit = _NEED_CACHE[key] = _wanted(wanted, prefixes)
        return hit

    bufnp = np.frombuffer(blk.buf, dtype=np.uint8)
    # one row copy per packet: fancy indexing over a sliding-window view of the block; the last
    # records, whose window runs past the buffer, are copied one by one and zero-padded
    inside = blk.offset <= len(bufnp) - WINDOW
    if len(bufnp) >= WINDOW and inside.all():
        H = np.lib.stride_tricks.sliding_window_view(bufnp, WINDOW)[blk.offset]
    else:
        H = np.zeros((n, WINDOW), dtype=np.uint8)
        if len(bufnp) >= WINDOW:
            H[inside] = np.lib.stride_tricks.sliding_window_view(bufnp, WINDOW)[blk.offset[inside]]
        for i in np.flatnonzero(~inside).tolist():
            row = bufnp[int(blk.offset[i]):int(blk.offset[i]) + WINDOW]
            H[i, :len(row)] = row
    # bytes past a packet's captured length are the next record's: every field below is only
    # marked present where the captured length covers it
    caplen = blk.caplen
    u64 = np.uint64

    data: dict[str, np.ndarray] = {}
    L: dict[str, np.ndarray] = {}
    data["frame.number"] = np.arange(blk.first, blk.first + n, dtype=np.uint64)
    data["frame.time_ns"] = blk.ts_ns
    data["frame.time_epoch"] = blk.seconds()  # as the per-packet reader has them (float seconds)
    # a record without a length on the wire (0): its captured length, as the per-packet reader, the summary
    # lines, the trees and the JSON take it (linktypes.decode_frame, fields.frame_fields)
    data["frame.len"] = np.where(blk.wirelen != 0, blk.wirelen, caplen).astype(np.uint32)
    data["frame.cap_len"] = caplen.astype(np.uint32)
    L["frame"] = np.ones(n, dtype=bool)
    eth = (blk.linktype == LINKTYPE_ETHERNET) & (caplen >= 14)
    L["eth"] = eth
    if need("eth.src", "eth.dst"):
        data["eth.dst"] = _be(H, 0, 6)
        data["eth.src"] = _be(H, 6, 6)
    etype = _be(H, 12, 2)
    data["eth.type"] = etype.astype(np.uint16)
    # (a length (eth.len) or neither is no type; 0 is one all the same: wire.frame._eth)
    L["eth.type"] = eth & ((etype >= MIN_ETHERTYPE) | (etype == 0))
    # a Linux cooked capture (tcpdump -i any): its header, then what its EtherType says, as after Ethernet
    sll1 = (blk.linktype == LINKTYPE_LINUX_SLL) & (caplen >= 16)
    sll2 = (blk.linktype == LINKTYPE_LINUX_SLL2) & (caplen >= 20)
    sll = sll1 | sll2
    L["sll"], L["sll.ifindex"] = sll, sll2
    if sll.any():
        etype = np.where(sll1, _be(H, 14, 2), np.where(sll2, _be(H, 0, 2), etype))
        data["sll.etype"] = etype.astype(np.uint16)
        data["sll.pkttype"] = np.where(sll2, H[:, 10], _be(H, 0, 2)).astype(np.uint16)
        data["sll.hatype"] = np.where(sll2, _be(H, 8, 2), _be(H, 2, 2)).astype(np.uint16)
        data["sll.halen"] = np.where(sll2, H[:, 11], _be(H, 4, 2)).astype(np.uint16)
        data["sll.ifindex"] = _be(H, 4, 4).astype(np.uint32)
    # raw IP: no link header; the version nibble stands for the EtherType (as the per-packet decode_ip reads it)
    rawip = np.isin(blk.linktype, RAW_IP_LINKTYPES) & (caplen >= 1)
    L["rawip"] = rawip
    if rawip.any():
        nibble = H[:, 0] >> 4
        etype = np.where(rawip, np.where(nibble == 4, 0x0800, np.where(nibble == 6, 0x86DD, 0)), etype)
    link = eth | sll | rawip  # (a header the columns read: what follows its EtherType is read the same way)
    # an 802.1ad S-TAG, then an 802.1Q tag (frames of more tags are not given to the columns:
    # columnar.stacked_tags)
    qinq = eth & (etype == ETHERTYPE_QINQ) & (caplen >= 18)
    L["ieee8021ad"] = qinq
    if need("ieee8021ad"):
        tci = _be(H, 14, 2)
        data["ieee8021ad.id"] = (tci & u64(0xFFF)).astype(np.uint16)
        data["ieee8021ad.priority"] = (tci >> u64(13)).astype(np.uint8)
    etype = np.where(qinq, _be(H, 16, 2), etype)
    vlan = eth & (etype == ETHERTYPE_VLAN) & (caplen >= np.where(qinq, 22, 18))
    L["vlan"] = vlan
    if need("vlan"):
        tci = np.where(qinq, _be(H, 18, 2), _be(H, 14, 2))
        data["vlan.id"] = (tci & u64(0xFFF)).astype(np.uint16)
        data["vlan.priority"] = (tci >> u64(13)).astype(np.uint8)
    etype = np.where(vlan, np.where(qinq, _be(H, 20, 2), _be(H, 16, 2)), etype)
    l3 = link_header_length(L)
    IP = _realign(H, l3, 40)
    b0 = IP[:, 0]
    ip = link & (etype == 0x0800) & (b0 >> 4 == 4) & (caplen >= l3 + 20)
    ihl = (b0 & 0x0F).astype(np.int64)
    L["ip"] = ip
    data["ip.len"] = _be(IP, 2, 2).astype(np.uint16)
    # what tshark shows of a bogus header (packet-ip.c; wire.net.IPv4Bogus, IPv4BogusLength): a header
    # length under 20, its first octet; a total length shorter than the header, up to the total length
    L["ip.front"] = ip & (ihl >= 5)
    L["ip.rest"] = L["ip.front"] & ((data["ip.len"] == 0) | (data["ip.len"] >= ihl * 4))
    ff = _be(IP, 6, 2)
    frag = (ff & u64(0x1FFF)).astype(np.uint16)
    data["ip.frag_offset"] = frag
    proto4 = IP[:, 9]
    data["ip.proto"] = proto4
    if need("ip.version"):
        data["ip.version"] = (b0 >> 4).astype(np.uint8)
    if need("ip.hdr_len"):
        data["ip.hdr_len"] = (ihl * 4).astype(np.uint8)
    if need("ip.dsfield"):
        tos = IP[:, 1]
        data["ip.dsfield"] = tos
        data["ip.dsfield.dscp"] = tos >> 2
        data["ip.dsfield.ecn"] = tos & 3
    if need("ip.id"):
        data["ip.id"] = _be(IP, 4, 2, np.uint16)
    if need("ip.flags"):
        data["ip.flags"] = (ff >> u64(13)).astype(np.uint8)
        for name, bit in IPv4.FLAG_FIELDS:
            if need(name):
                data[name] = ((data["ip.flags"] & bit) != 0).astype(np.uint8)
    if need("ip.ttl"):
        data["ip.ttl"] = IP[:, 8]
    if need("ip.checksum"):
        data["ip.checksum"] = _be(IP, 10, 2, np.uint16)
    # (the addresses also for the conversation an ICMP error's quote counts in: _quotes_in_columns)
    if need("ip.src") or quotes:
        data["ip.src"] = _be(IP, 12, 4, np.uint32)
    if need("ip.dst") or quotes:
        data["ip.dst"] = _be(IP, 16, 4, np.uint32)
    ip6 = link & (etype == 0x86DD) & (b0 >> 4 == 6) & (caplen >= l3 + 40)
    L["ipv6"] = ip6
    L["ipver"] = ip | ip6
    need6 = need("ipv6", "infiniband.grh") or quotes
    if need6:
        w0 = _be(IP, 0, 4)
        data["ipv6.tclass"] = ((w0 >> u64(20)) & u64(0xFF)).astype(np.uint8)
        data["ipv6.flow"] = (w0 & u64(0xFFFFF)).astype(np.uint32)
    data["ipv6.plen"] = _be(IP, 4, 2).astype(np.uint16)
    nxt6 = IP[:, 6]
    data["ipv6.nxt"] = nxt6
    if need6:
        data["ipv6.hlim"] = IP[:, 7]
        data["ipv6.src"] = np.ascontiguousarray(IP[:, 8:24]).view("S16").reshape(n)
        data["ipv6.dst"] = np.ascontiguousarray(IP[:, 24:40]).view("S16").reshape(n)
    l4 = np.where(ip6, l3 + 40, l3 + ihl * 4)
    proto = np.where(ip6, nxt6, proto4)
    # (a total length shorter than the header: nothing after it is read, as per packet; 0: the frame's;
    # a first fragment, More Fragments set: its payload is not read either, as per packet, unless the capture
    # cut it (a snap length): tshark then reads its headers, as wire.frame._ip; such a segment has no tcp.len)
    len4 = data["ip.len"].astype(np.int64)
    mf = ip & ((ff >> u64(13)) & u64(1) != 0)
    l4ok = (ip & (frag == 0) & (~mf | (l3 + len4 > caplen)) & (ihl >= 5) & ((len4 == 0) | (len4 >= ihl * 4))) | ip6
    udp = l4ok & (proto == 17) & (caplen >= l4 + 8)
    tcp = l4ok & (proto == 6) & (caplen >= l4 + 20)
    L["udp"], L["tcp"] = udp, tcp
    # the UDP/TCP header and, for RoCEv2, the BTH and extended headers after it
    T = _realign(H, l4, 8 + 12 + 48)
    data["udp.srcport"] = _be(T, 0, 2).astype(np.uint16)
    data["udp.dstport"] = _be(T, 2, 2).astype(np.uint16)
    udplen = _be(T, 4, 2).astype(np.int64)
    data["udp.length"] = udplen.astype(np.uint16)
    if need("udp.checksum"):
        data["udp.checksum"] = _be(T, 6, 2).astype(np.uint16)
    # a TCP header within its datagram as its IP header counts it (a total length of 0 is the frame's):
    # its segment has a length (tcp.len) and is a segment (rdmalab.encap "tcp"); a header the datagram
    # ends inside leaves TCP's fields without them, as wire.frame.tcp_segment_length and tshark
    thl = (T[:, 12] >> 4).astype(np.int64) * 4
    L["tcp.rest"] = tcp & (thl >= 20)  # (a bogus header length: nothing of the header after it, as tshark)
    iplen = np.where(ip6, data["ipv6.plen"].astype(np.int64) + 40, data["ip.len"].astype(np.int64))
    # a datagram whose header says it goes on past the frame's end on the wire (its FCS off, where the
    # capture says it keeps one) ends there, as wire.frame._ip and tshark's reported length have it
    frame_end = (np.where(blk.wirelen > 0, blk.wirelen, caplen).astype(np.int64)
                 - np.where(eth, np.maximum(blk.fcs_lens(), 0), 0))
    iplen = np.where((ip6 | (iplen != 0)) & (l3 + iplen > frame_end) & (frame_end >= l3), frame_end - l3, iplen)
    # an IPv4 total length of 0 (left for the NIC to fill in: segmentation offload): the datagram is the rest
    # of the frame on the wire, and ip.len that length, as tshark presumes it (packet-ip.c) and wire.frame._ip
    tso = ip & ~ip6 & (iplen == 0) & (frame_end >= l3)
    if tso.any():
        iplen = np.where(tso, frame_end - l3, iplen)
        data["ip.len"] = np.where(tso, iplen, data["ip.len"]).astype(np.uint16)
    L["tcp.len"] = tcp & ~mf & ((~ip6 & (iplen == 0)) | (l3 + iplen >= l4 + thl))
    # a UDP header its datagram ends inside: the fields it holds whole (wire.net.UDPPorts, UDPNoChecksum), as
    # tshark shows it; fewer than 4 octets, no UDP header
    dgram = l3 + iplen
    L["udp"] = udp = udp & (dgram >= l4 + 4)
    L["udp.length"] = udp & (dgram >= l4 + 6)
    # (a length field under 8 but to RoCEv2's port, or IPv6's 0 of a jumbogram: a header without its checksum
    # nor a conversation, as wire.frame._ip)
    L["udp.rest"] = udp & (dgram >= l4 + 8) & ((udplen >= 8) | (ip6 & (udplen == 0))
                                               | (data["udp.dstport"] == ROCEV2_PORT))
    L["udp.cut"] = udp & ~L["udp.rest"]  # (fields.HIDDEN_UDP_CUT: in no conversation)
    # ICMP, ICMPv6 and ARP are no columns, but a filter tests that they are there (-Y icmpv6), as the
    # per-packet decoder reads them (wire.frame._ip: the 4 octets of type, code and checksum within the
    # datagram as captured; control.decode_arp: 8 octets at least); ICMPv6 after a Hop-by-Hop header too
    # (MLD: the one extension header a block the columns read holds, columnar.ipv6_extensions)
    avail = np.minimum(l3 + iplen, caplen)
    # (the message's protocol is the datagram's, whatever the IP version: wire.frame._ip reads an ICMPv6
    # message in an IPv4 datagram as ICMPv6, an ICMP one in IPv6 as ICMP, as tshark does)
    L["icmp"] = l4ok & (proto == IPPROTO_ICMP) & (avail >= l4 + 4)
    after_hbh = l4 + 8 + 8 * T[:, 1].astype(np.int64)
    L["icmpv6"] = l4ok & (((proto == IPPROTO_ICMPV6) & (avail >= l4 + 4))
                          | (ip6 & (nxt6 == 0) & (T[:, 0] == IPPROTO_ICMPV6) & (caplen >= l4 + 2)
                             & (avail >= after_hbh + 4)))
    L["arp"] = link & (etype == ETHERTYPE_ARP) & (caplen >= l3 + 8)
    if need("tcp"):
        data["tcp.srcport"] = data["udp.srcport"]
        data["tcp.dstport"] = data["udp.dstport"]
        data["tcp.seq_raw"] = _be(T, 4, 4).astype(np.uint32)
        data["tcp.ack_raw"] = _be(T, 8, 4).astype(np.uint32)
        data["tcp.hdr_len"] = thl.astype(np.uint8)
        data["tcp.flags"] = (_be(T, 12, 2) & u64(0xFFF)).astype(np.uint16)  # (the reserved bits too: Wireshark's)
        for name, bit in TCP.FLAG_FIELDS:
            if need(name):
                data[name] = ((data["tcp.flags"] & bit) != 0).astype(np.uint8)
        data["tcp.window_size_value"] = _be(T, 14, 2).astype(np.uint16)
        data["tcp.len"] = np.maximum(iplen - (l4 - l3) - thl, 0).astype(np.uint32)
    # RoCEv2: UDP to port 4791; RoCEv1: EtherType 0x8915 and a GRH
    rocev2 = udp & (data["udp.dstport"] == ROCEV2_PORT) & (caplen >= l4 + 8 + 12)
    rocev1 = link & (etype == 0x8915) & (caplen >= l3 + 40 + 12)
    L["rocev2"], L["rocev1"] = rocev2, rocev1
    L["infiniband.grh"] = link & (etype == 0x8915) & (caplen >= l3 + 40)  # (its BTH may be cut by the capture)
    if need6:
        data["infiniband.grh.tclass"] = data["ipv6.tclass"]
        data["infiniband.grh.flowlabel"] = data["ipv6.flow"]
        data["infiniband.grh.paylen"] = data["ipv6.plen"]
        data["infiniband.grh.nxthdr"] = nxt6
        data["infiniband.grh.hoplmt"] = data["ipv6.hlim"]
        data["infiniband.grh.sgid"] = data["ipv6.src"]
        data["infiniband.grh.dgid"] = data["ipv6.dst"]
    bth = np.where(rocev1, l3 + 40, l4 + 8)
    B = T[:, 8:] if not rocev1.any() else _realign(H, bth, 12 + 48)
    # a BTH only where the datagram holds one and its ICRC (rdmalab.wire.packet.decode_transport: 16
    # octets at least), or the capture cut it: not out of the Ethernet padding after a short datagram
    ip_end = l3 + iplen  # (a length of 0: the frame's, as per packet, above)
    v1_end = l3 + 40 + data["ipv6.plen"].astype(np.int64)
    # (a GRH that says the packet goes on past a frame the capture holds whole: it ends with its frame,
    # as wire.frame.decode_grh_packet has it with the frame's length known)
    v1_end = np.where((v1_end > frame_end) & (blk.wirelen > 0) & (l3 + 40 <= frame_end) & (frame_end <= caplen),
                      frame_end, v1_end)
    dgram_end = np.where(rocev1, np.where(data["ipv6.plen"] > 0, v1_end, caplen),
                         np.where(udplen >= 8, np.minimum(ip_end, l4 + udplen), ip_end))
    ib = (rocev1 | rocev2) & ((dgram_end > caplen) | (dgram_end - bth >= 16))
    ib &= ~(rocev1 & (nxt6 != GRH_NXTHDR_IBA))  # (a GRH whose next header is not IBA's: no BTH after it)
    L["infiniband.bth"] = ib
    opcode = B[:, 0].copy()
    data["infiniband.bth.opcode"] = opcode
    # each field below only where asked for (``need``): a column not computed is left as zeros
    b1 = B[:, 1]
    if need("infiniband.bth.se"):
        data["infiniband.bth.se"] = b1 >> 7
    if need("infiniband.bth.m"):
        data["infiniband.bth.m"] = (b1 >> 6) & 1
    need_payload = need("rdmalab.payload.len")
    if need_payload or need("infiniband.bth.padcnt"):
        pad = ((b1 >> 4) & 3).astype(np.int64)
        data["infiniband.bth.padcnt"] = pad.astype(np.uint8)
    if need("infiniband.bth.tver"):
        data["infiniband.bth.tver"] = b1 & 0x0F
    if need("infiniband.bth.p_key"):
        data["infiniband.bth.p_key"] = _be(B, 2, 2, np.uint16)
    if need("rdmalab.bth.fecn", "rdmalab.bth.becn"):
        b4 = B[:, 4]
        data["rdmalab.bth.fecn"] = b4 >> 7
        data["rdmalab.bth.becn"] = (b4 >> 6) & 1
    if need("infiniband.bth.destqp"):
        data["infiniband.bth.destqp"] = _be(B, 5, 3, np.uint32)
    if need("infiniband.bth.a"):
        data["infiniband.bth.a"] = B[:, 8] >> 7
    if need("infiniband.bth.psn"):
        data["infiniband.bth.psn"] = _be(B, 9, 3, np.uint32)
    # the IB packet's end (ICRC included): from the UDP length (within the IP datagram's) or the GRH
    # payload length, as the per-packet decoder takes it
    wire_end = dgram_end
    ib_end = np.minimum(wire_end, caplen)
    # a RoCE packet cut by the capture (a snap length): its headers as far as captured, its captured
    # payload, no ICRC (rdmalab.wire.packet.decode_transport's ``captured``)
    cut = ib & (wire_end > caplen)
    # what there is to read of its headers and payload: up to the ICRC, or to what the capture holds
    have = np.where(cut, np.minimum(caplen, wire_end - 4), wire_end - 4)
    t = _opt()
    ext0 = bth + 12
    extlen = t["extlen"][opcode].astype(np.int64)
    fits = ib & (ext0 + extlen <= have)
    sizes = {"rdeth": 4, "deth": 8, "reth": 16, "atomiceth": 28, "aeth": 4, "atomicacketh": 8, "immdt": 4,
             "ieth": 4, "xrceth": 4}
    X: dict[str, np.ndarray] = {}
    layer_of = {"rdeth": ("infiniband.rdeth",), "deth": ("infiniband.deth",), "reth": ("infiniband.reth",),
                "atomiceth": ("infiniband.atomiceth", "infiniband.reth"), "aeth": ("infiniband.aeth",),
                "atomicacketh": ("infiniband.atomicacketh",), "immdt": ("infiniband.immdt",),
                "ieth": ("infiniband.ieth",), "xrceth": ("rdmalab.xrceth",)}
    for key, size in sizes.items():
        o = t[key][opcode].astype(np.int64)
        # each header there whole, before the ICRC or the capture's end, as the per-packet decoder has them
        L[f"_{key}"] = ib & (o >= 0) & (ext0 + o + size <= have)
        if need(*layer_of[key]):
            X[key] = _realign(B, 12 + np.where(o >= 0, o, 48), size)
        else:
            X[key] = np.zeros((n, size), dtype=np.uint8)
    for name, key, at, size, dtype in _EXT_FIELDS:
        if need(name):
            data[name] = X[key][:, at].copy() if size == 1 else _be(X[key], at, size, dtype)
    R = X["reth"]
    A = X["atomiceth"]
    for key, layer in (("rdeth", "infiniband.rdeth"), ("deth", "infiniband.deth"), ("reth", "infiniband.reth"),
                       ("atomiceth", "infiniband.atomiceth"), ("aeth", "infiniband.aeth"),
                       ("atomicacketh", "infiniband.atomicacketh"), ("immdt", "infiniband.immdt"),
                       ("ieth", "infiniband.ieth"), ("xrceth", "rdmalab.xrceth")):
        L[layer] = L.pop(f"_{key}")
    # RETH and AtomicETH share Wireshark's names for the address and key
    is_at = L["infiniband.atomiceth"]
    if need("infiniband.reth.va"):
        data["infiniband.reth.va"] = np.where(is_at, _be(A, 0, 8), _be(R, 0, 8))
    if need("infiniband.reth.r_key"):
        data["infiniband.reth.r_key"] = np.where(is_at, _be(A, 8, 4), _be(R, 8, 4)).astype(np.uint32)
    L["infiniband.va"] = L["infiniband.reth"] | is_at
    L["rdmalab.cnp"] = ib & (opcode == CNP_OPCODE)
    data["rdmalab.cnp"] = L["rdmalab.cnp"].astype(np.uint8)
    if need_payload:
        # rdmalab.wire.packet.decode_transport's payload: after the headers, before the pad; what is left
        # after the BTH of an unknown opcode, after the first header cut short (none when the capture cut
        # it), after the headers of an opcode without payload or with a pad larger than what is there
        end_h = ext0 + extlen
        crc_at = wire_end - 4
        over = t["ends"][opcode] > (have - ext0)[:, None]
        cut_at = ext0 + t["starts"][opcode][np.arange(n), np.argmax(over, axis=1)]
        plen = np.where(~t["known"][opcode], have - ext0,
                        np.where(~fits, np.where(cut, 0, have - cut_at),
                                 np.where(~t["payload"][opcode] | (pad > crc_at - end_h), have - end_h,
                                          np.minimum(have, crc_at - pad) - end_h)))
        data["rdmalab.payload.len"] = np.maximum(plen, 0).astype(np.uint32)
    L["rdmalab.payload.len"] = ib.copy()  # (and the iWARP PDUs with a payload: fill_iwarp)
    crc_ok = ib & ~cut  # (the ICRC is read at the packet's end whatever its headers: the per-packet decoder's)
    L["infiniband.crc"] = crc_ok
    status = np.zeros(n, dtype=np.int8)
    if need("infiniband.invariant", "rdmalab.icrc") or verify_icrc:
        # (a block whose frames hold fewer than 4 octets in all, empty records: no RoCE packet, nothing to read)
        src = bufnp if len(bufnp) >= 4 else np.zeros(4, dtype=np.uint8)
        crc_at = np.clip(blk.offset + np.maximum(ib_end - 4, 0), 0, len(src) - 4)
        wire = ((src[crc_at].astype(np.uint32) << 24) | (src[crc_at + 1].astype(np.uint32) << 16)
                | (src[crc_at + 2].astype(np.uint32) << 8) | src[crc_at + 3])
        data["infiniband.invariant.crc"] = wire
    if verify_icrc and crc_ok.any():
        status = _verify_icrc(blk, H, crc_ok, rocev1, l3, bth, ib_end, wire)
    data["rdmalab.icrc.ok"] = status
    for c in COLUMNS:  # the columns not asked for
        if c.name not in data:
            data[c.name] = np.zeros(n, dtype=c.dtype)
    for name in (*IWARP_LAYERS, *(c.layer for c in IWARP_COLUMNS), "tcp.window_size", *CONVERSATION_FIELDS,
                 *ANALYSIS_FIELDS):
        L[name] = np.zeros(n, dtype=bool)
    cols = Columns(n, data, L)
    # ICMP errors that quote a datagram (rare): their fields by the per-packet decoder (a quote's ip.src
    # is the frame's second); the type at the ICMP header's first byte (T's)
    quoting = (l4ok & (caplen > l4 + 8) & ((ip & (proto4 == IPPROTO_ICMP) & ((ff >> u64(13)) & u64(1) == 0)
                                            & np.isin(T[:, 0], list(ICMP_ERRORS)))
                                           | (ip6 & (nxt6 == IPPROTO_ICMPV6) & np.isin(T[:, 0], list(ICMPV6_ERRORS)))))
    if quotes and quoting.any() and need("ip", "udp", "tcp", "infiniband", "icmp", "data", "rdmalab"):
        rows = np.flatnonzero(quoting)  # (not for fields no quote has: frame.len ...)
        # the quote: after the ICMP header, to the end of the ICMP message (of the datagram, as captured)
        q_at, q_to = l4[rows] + 8, np.minimum(ip_end[rows], caplen[rows])
        done = np.zeros(len(rows), dtype=bool) if wanted is None else _quotes_in_columns(
            blk, cols, rows, q_at, q_to, wanted, verify_icrc, np.where(ip6[rows], IP[rows, 7], IP[rows, 8]))
        fill_quotes(blk, cols, rows[~done])
    if tracker is not None:
        fill_iwarp(blk, cols, tracker)
    return cols


#: the key that marks the per-packet fields of an ICMP error that quotes a datagram in :attr:`Columns.multi`
#: (:func:`fill_quotes`; a NUL first: no field's name)
QUOTED = "\0quoted"
#: beside :data:`QUOTED`: the ICMP error's summary (``Destination unreachable (Port unreachable)``)
QUOTING = "\0quoting"


#: the fields :meth:`Conversations.add` reads (addresses as integers, as the columns key conversations)
_CONVERSATION_INPUT = ("tcp.srcport", "tcp.dstport", "udp.srcport", "udp.dstport", "tcp.flags", "tcp.seq_raw",
                       "tcp.seq", "tcp.ack_raw", "tcp.len", "tcp.hdr_len")


def _conversation_fields(got: dict[str, Any], addresses: dict[str, Any] | None = None) -> dict[str, Any]:
    """What :meth:`Conversations.add` reads of a frame's per-packet fields, its addresses as integers
    (``addresses``: those integers, already known, for the addresses the frame has)."""
    out = {k: got[k] for k in _CONVERSATION_INPUT if k in got}
    if addresses is not None:
        out.update(addresses)
        return out
    for name in _ADDRESSES:
        v = got.get(name)
        if v is not None:
            out[name] = [_address_int(a) for a in v] if isinstance(v, list) else _address_int(v)
    return out


@lru_cache(maxsize=4096)
def _address_int(text: str) -> int:
    """An address's text as an integer (the same few hosts again and again: each read once)."""
    return int(ipaddress.ip_address(text))


#: what a quote's entry in :attr:`Columns.multi` takes from the frame alone: the frame's and its link's
#: fields (the quote is an IP datagram), and the frame's name
_FRAME_OWN = ("frame.", "eth.", "sll.", "vlan.", "ieee8021ad.", "rdmalab.encap")
_ADDRESSES = ("ip.src", "ip.dst", "ipv6.src", "ipv6.dst")


def _quotes_in_columns(blk: RecordBlock, cols: Columns, rows: np.ndarray, at: np.ndarray, to: np.ndarray,
                       wanted: frozenset[str], verify_icrc: bool, hops: np.ndarray) -> np.ndarray:
    """The entries :func:`quote_fields` makes, for the ICMP errors ``rows`` whose quote (from ``at`` to
    ``to`` in the frame) is a UDP datagram (RoCEv2 among them: a host where nothing takes RoCEv2 answers
    each packet so), from columns rather than frame by frame: the quotes decoded as a block of raw IP
    datagrams, each ending where its quote ends (as :func:`rdmalab.wire.frame._quoted` has it: an ICRC
    at the quote's end, shown unchecked when the quote is shorter than the datagram), the fields
    ``wanted`` (and what :func:`fill_conversations` counts) of the frame and of the quote joined as the
    per-packet fields join them (the frame's, then the quote's).  Which rows were done: the others
    (another protocol quoted, an IPv6 extension header, a fragment, no IP header at all) are left for
    :func:`fill_quotes`."""
    n = len(rows)
    # (a filter's protocol name, -Y infiniband: the protocol's columns, whose presence in the entry says it is
    # there, as in the per-packet fields)
    named = wanted & FILTER_PROTOCOLS
    if named:
        wanted = wanted | {c.name for c in COLUMNS if c.name.startswith(tuple(p + "." for p in named))}
    length = np.maximum(to - at, 0).astype(np.int64)
    sub = RecordBlock(blk.buf, (blk.offset[rows] + at).astype(np.int64), length, length.copy(), blk.ts_ns[rows],
                      np.full(n, RAW_IP_LINKTYPES[0], dtype=np.int32), 0, blk.file_pos)
    names = sorted(f for f in {*wanted, *CONVERSATION_INPUTS}
                   if (f in COLUMN_BY_NAME or f in DERIVED) and not f.startswith(_FRAME_OWN))
    inner = _decode(sub, verify_icrc, frozenset(names), None, quotes=False)
    IL, idata = inner.layers, inner.data
    done = np.asarray(IL["udp"] & (IL["ip.rest"] | IL["ipv6"]) & ~IL["tcp"], dtype=bool)
    if not done.any():
        return done
    # a quote shorter than the datagram it quotes: its last octets are shown as the ICRC, unchecked
    declared = np.where(IL["ipv6"], idata["ipv6.plen"].astype(np.int64) + 40, idata["ip.len"].astype(np.int64))
    idata["rdmalab.icrc.ok"] = np.where(declared > length, 0, idata["rdmalab.icrc.ok"]).astype(np.int8)
    # (the frame's own columns: those it was asked for and its addresses, the others were not computed)
    outer_vals = _field_values(cols, rows, sorted(f for f in {*wanted, *_ADDRESSES} if f in COLUMN_BY_NAME or f in DERIVED))
    inner_vals = _field_values(inner, np.arange(n), names)
    outer_ints = {name: _address_ints(cols, rows, name) for name in _ADDRESSES}
    inner_ints = {name: _address_ints(inner, np.arange(n), name) for name in _ADDRESSES}
    # ip.version: each IPv4 header's, as the per-packet fields have it; where neither is IPv4, the IPv6
    # headers' (Wireshark's IPv6 dissector adds a hidden ip.version: fields.frame_fields)
    versions = []
    for vals, c, r in ((outer_vals, cols, rows), (inner_vals, inner, np.arange(n))):
        if "ip.version" in vals:
            versions.append(vals["ip.version"])
            four = c.layers["ip"][r].tolist()
            vals["ip.version"] = [v if f else None for v, f in zip(vals["ip.version"], four, strict=True)]
    frames = cols.data["frame.number"][rows].tolist()
    msgs = (blk.offset[rows] + at - 8).tolist()
    six = cols.layers["ipv6"][rows].tolist()
    hop_list = hops.tolist()
    for k in np.flatnonzero(done).tolist():
        entry: dict[str, Any] = {}
        for name, values in outer_vals.items():
            v = values[k]
            if v is not None:
                entry[name] = v
        for name, values in inner_vals.items():
            v = values[k]
            if v is None:
                continue
            mine = entry.get(name)
            entry[name] = v if mine is None else [mine, v]
        if versions and "ip.version" not in entry:  # (no IPv4 header: the IPv6 headers')
            six_versions = [vs[k] for vs in versions if vs[k] is not None]
            if six_versions:
                entry["ip.version"] = six_versions[0] if len(six_versions) == 1 else six_versions
        ints = {}
        for name in _ADDRESSES:  # (the frame's, then the quote's)
            o, q = outer_ints[name][k], inner_ints[name][k]
            if o is not None or q is not None:
                ints[name] = q if o is None else o if q is None else [o, q]
        entry[QUOTED] = _conversation_fields(entry, ints)
        m = msgs[k]
        msg = bytes(blk.buf[m:m + 8])
        entry[QUOTING] = icmpv6_summary(msg, hop_list[k]) if six[k] else icmp_summary(msg, None)
        cols.multi[frames[k]] = entry
    return done


def _field_values(cols: Columns, rows: np.ndarray, names: Iterable[str]) -> dict[str, list[Any]]:
    """Each of ``names`` (columns and :data:`DERIVED` fields) in ``rows``, as the per-packet fields have
    them (addresses as text, numbers as ints), None where the row has none."""
    out: dict[str, list[Any]] = {}
    for name in names:
        present = cols.present(name)[rows].tolist()
        if not any(present):
            continue
        col = COLUMN_BY_NAME.get(name)
        if col is not None and col.fmt in ("ipv4", "ipv6", "mac"):  # (the same few addresses: each written once)
            distinct, inv = np.unique(cols.data[name][rows], return_inverse=True)
            texts = _fmt_values(col, distinct)
            values = [texts[i] for i in inv.reshape(-1).tolist()]
        else:
            values = cols[name][rows].tolist()
        out[name] = [v if p else None for v, p in zip(values, present, strict=True)]
    return out


def _address_ints(cols: Columns, rows: np.ndarray, name: str) -> list[int | None]:
    """The address ``name`` (ip.src ... ipv6.dst) in ``rows`` as integers, None where the row has none."""
    present = cols.present(name)[rows]
    if not present.any():
        return [None] * len(rows)
    values = cols.data[name][rows]
    ints = values.tolist() if values.dtype.kind in "iu" else [int.from_bytes(v.ljust(16, b"\0"), "big") for v in values.tolist()]
    return [v if p else None for v, p in zip(ints, present.tolist(), strict=True)]


def fill_quotes(blk: RecordBlock, cols: Columns, rows: np.ndarray) -> None:
    """The fields of the ICMP errors ``rows`` that quote a datagram, as the per-packet decoder has them
    (:attr:`rdmalab.wire.packet.Packet.quoted`: the quote's ip.src after the frame's, its UDP, TCP and
    BTH), into :attr:`Columns.multi`, which the ``-T fields`` text and the display filter read for them.
    A row whose quote is no IP datagram is left as it is."""
    secs, ifs, fcss = blk.seconds(), blk.interfaces(), blk.fcs_lens()
    for i in rows.tolist():
        off, cap = int(blk.offset[i]), int(blk.caplen[i])
        cp = decode_record(RawRecord(blk.first + i, float(secs[i]), int(blk.linktype[i]), bytes(blk.buf[off:off + cap]),
                                     int(blk.wirelen[i]), int(ifs[i]), int(blk.ts_ns[i]), fcs_len=int(fcss[i])))
        if cp.packet.quoted is None:
            continue
        cols.multi[blk.first + i] = quote_fields(cp)


def quote_fields(cp: CapturedPacket) -> dict[str, Any]:
    """An ICMP error that quotes a datagram, as :attr:`Columns.multi` holds it: its per-packet fields
    (the quote's after the frame's), what :func:`fill_conversations` counts of them (:data:`QUOTED`)
    and its summary (:data:`QUOTING`)."""
    got = frame_fields(cp, windows=TcpWindowScaling())  # (a quoted segment's window, unscaled)
    got[QUOTED] = _conversation_fields(got)  # (what fill_conversations counts)
    got[QUOTING] = cp.packet.info or ""
    return got


def per_packet_row(cp: CapturedPacket, conversations: Conversations | None,
                   windows: TcpWindowScaling | None) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """A frame the per-packet decoder read, for :func:`columns_from_dicts`: its fields (addresses as
    integers, the conversations' numbers and the scaled TCP window, ``conversations`` and ``windows``
    fed in capture order) and, for an ICMP error that quotes a datagram, its :attr:`Columns.multi`
    entry: the columns keep the frame's own headers (as :func:`fill_quotes` leaves them), the entry
    all of its fields, the quote's conversation numbers among them."""
    row = frame_fields(cp, raw=True)
    w = windows.window(cp.packet) if windows is not None else None
    if conversations is not None:
        conversations.add(row, cp.packet, windows)  # (the TCP analysis, if it follows it: after the window)
    if cp.packet.quoted is None:
        if w is not None and "tcp.window_size_value" in row:  # (a bogus header length: no field, as tshark)
            row["tcp.window_size"] = shown_window(row, w)
        return row, None
    entry = quote_fields(cp)
    for name in CONVERSATION_FIELDS:
        if name in row:
            entry[name] = row[name]
    own = frame_fields(cp, raw=True, quotes=False)
    if w is not None:
        own["tcp.window_size"] = w
    return own, entry


#: a PDU's field (packet_fields) -> the column that holds it (its first occurrence), and that column's layer: the
#: iWARP fields that are a layer of their own (Col.layer), and the CRC's status as its number (CRC_OK)
_IWARP_COLUMN = {c.name: c.name for c in COLUMNS if c.layer == c.name} | {"rdmalab.crc32c.status": "rdmalab.crc32c.ok"}
_IWARP_LAYER = {name: name for name in _IWARP_COLUMN.values()} | {"rdmalab.crc32c.ok": "rdmalab.crc32c"}


def fill_iwarp(blk: RecordBlock, cols: Columns, tracker: Any) -> None:
    """Feed the block's TCP segments, in order, to the iWARP stream reassembly (the same
    :class:`~rdmalab.capture.iwarp.IwarpTracker` the per-packet decoder uses) and put the fields
    of the PDUs each frame completes into the iWARP columns.

    Reassembly is sequential by nature, but most segments of a stream in step are whole FPDUs
    (:func:`~rdmalab.capture.columnar_tcp.fpdu_chains`): the tracker moves past those without decoding
    them (:meth:`~rdmalab.capture.iwarp.IwarpTracker.process_many`, as the summary lines have it), and
    their fields are read from their octets here, a column at a time (:class:`_FpduColumns`: the
    fields an FPDU of that kind decoded one by one has, at the places its headers declare).  The other
    segments are fed one by one and their PDUs' fields taken (:func:`packet_fields`); frames of other
    protocols cost nothing.  A block with a segment the capture cut (a snap length) feeds every segment
    one by one (:meth:`~rdmalab.capture.iwarp.IwarpTracker.process_segment` takes its length on the wire)."""
    tcp = cols.layers["tcp"]
    idx = np.nonzero(tcp & (cols.data["tcp.len"] > 0) | tcp & ((cols.data["tcp.flags"] & 0x06) != 0))[0]
    if len(idx) == 0:
        return
    d, L = cols.data, cols.layers
    v6 = L["ipv6"][idx]
    l3 = link_header_length(L)[idx]
    l4 = l3 + np.where(v6, 40, d["ip.hdr_len"][idx].astype(np.int64))
    hdr = d["tcp.hdr_len"][idx].astype(np.int64)
    start = blk.offset[idx] + l4 + hdr
    end = np.minimum(start + d["tcp.len"][idx].astype(np.int64), blk.offset[idx] + blk.caplen[idx])
    end = np.where(hdr < 20, start, np.maximum(end, start))  # (a bogus header length: no payload, as tshark reads it)
    if v6.any():
        src = [_ipv6_text(a) if six else "" for a, six in zip(d["ipv6.src"][idx].tolist(), v6.tolist(), strict=True)]
        dst = [_ipv6_text(a) if six else "" for a, six in zip(d["ipv6.dst"][idx].tolist(), v6.tolist(), strict=True)]
    else:
        src, dst = [""] * len(idx), [""] * len(idx)
    for k, (s4, d4, six) in enumerate(zip(d["ip.src"][idx].tolist(), d["ip.dst"][idx].tolist(), v6.tolist(),
                                          strict=True)):
        if not six:
            src[k] = f"{s4 >> 24}.{(s4 >> 16) & 255}.{(s4 >> 8) & 255}.{s4 & 255}"
            dst[k] = f"{d4 >> 24}.{(d4 >> 16) & 255}.{(d4 >> 8) & 255}.{d4 & 255}"
    frame0 = int(d["frame.number"][0]) if cols.n else 0
    frames = (frame0 + idx).tolist()
    sports, dports = d["tcp.srcport"][idx].tolist(), d["tcp.dstport"][idx].tolist()
    seqs, flags = d["tcp.seq_raw"][idx].tolist(), d["tcp.flags"][idx].astype(np.int64)
    # a segment the capture cut: its length on the wire, for the FPDUs it holds (IwarpTracker.process_segment)
    wire = np.where(L["tcp.len"][idx], d["tcp.len"][idx].astype(np.int64), -1)
    buf = blk.buf
    got_of: dict[int, dict[str, Any]] = {}  # row (of idx) -> its PDUs' fields
    npdus: dict[int, int] = {}
    lane: list[int] = []
    plain: list[int] = []
    fpdus: tuple[np.ndarray, ...] = ()
    if (wire > end - start).any() or not hasattr(tracker, "process_many"):
        process = tracker.process_segment
        for k, (a, b, w) in enumerate(zip(start.tolist(), end.tolist(), wire.tolist(), strict=True)):
            try:
                pdus = process(frames[k], src[k], sports[k], dst[k], dports[k], seqs[k], int(flags[k]), buf[a:b],
                               w if w > b - a else None)
            except DecodeError:  # a damaged stream: the per-packet decoder reports it, columns skip it
                continue
            if pdus:
                got_of[k] = _pdu_fields(pdus)
                npdus[k] = len(pdus)
    else:
        keys: dict[tuple[str, int, str, int], int] = {}
        dirs = np.array([keys.setdefault(key, len(keys)) for key in zip(src, sports, dst, dports, strict=True)],
                        dtype=np.int64)
        length = end - start
        ok_crc, ok_plain, fpdus = fpdu_chains(buf, start, length)
        a_list = start.tolist()

        def payload(k: int) -> Any:
            return buf[a_list[k]:a_list[k] + int(length[k])]

        out, errors, lane, _paired = tracker.process_many(frames, list(keys), dirs, seqs, flags, length, payload,
                                                          (ok_crc, ok_plain), None, plain)
        for k in sorted(errors):
            if not isinstance(errors[k], DecodeError):  # (a damaged stream: reported frame by frame, skipped here)
                raise errors[k]
        for k, pdus in out.items():
            got_of[k] = _pdu_fields(pdus)
            npdus[k] = len(pdus)
    _put_pdu_fields(cols, idx[list(got_of)].tolist(), list(got_of.values()), [npdus[k] for k in got_of])
    if lane:
        _lane_columns(blk, cols, idx, np.asarray(lane, dtype=np.int64), np.asarray(plain, dtype=np.int64), fpdus)
    for proto in ("iwarp_mpa", "iwarp_ddp", "iwarp_rdma"):
        L[proto] = np.logical_or.reduce([L[c.name] for c in IWARP_COLUMNS if c.name.startswith(proto + ".")])


def _pdu_fields(pdus: list[Any]) -> dict[str, Any]:
    """The fields of a frame's PDUs (:func:`packet_fields`, raw; a field of several: a list)."""
    got: dict[str, Any] = {}
    for pdu in pdus:
        packet_fields(pdu, got, raw=True)
    return got


def _put_pdu_fields(cols: Columns, rows: list[int], gots: list[dict[str, Any]], counts: list[int]) -> None:
    """The iWARP columns of the block's ``rows`` from their PDUs' fields ``gots`` (:func:`_pdu_fields`; the
    first occurrence of each), ``counts`` PDUs each; a row with several PDUs or markers (a field that occurs
    more than once) keeps its fields in :attr:`Columns.multi`.  Each column's rows are set at once."""
    d, L = cols.data, cols.layers
    frame0 = int(d["frame.number"][0]) if cols.n else 0
    at: dict[str, list[int]] = {}
    values: dict[str, list[Any]] = {}
    for i, got, count in zip(rows, gots, counts, strict=True):
        several = count > 1
        for key, v in got.items():
            if isinstance(v, list):
                several = True  # (several PDUs, or markers)
                v = v[0]
            name = _IWARP_COLUMN.get(key)
            if name is None:
                continue
            if name == "rdmalab.crc32c.ok":
                v = CRC_OK.get(v, 0)
            if name not in at:
                at[name], values[name] = [], []
            at[name].append(i)
            values[name].append(v)
        if several:
            cols.multi[frame0 + i] = got
    for name, rows_of in at.items():
        d[name][rows_of] = values[name]
        L[_IWARP_LAYER[name]][rows_of] = True
    d["rdmalab.pdus"][rows] = counts
    L["iwarp"][rows] = True


#: how one field of an FPDU of one kind (:data:`~rdmalab.capture.columnar_tcp.FPDU_KINDS`) is read from its
#: octets: its column, and where (from the FPDU's first octet: the octets read as one big-endian number, the
#: shift right and the mask); or a value of its own: ``"crc"`` (the CRC field, as packet_fields shows it),
#: ``"payload"`` (the ULPDU's payload octets: there when not 0), or a constant
_Read = tuple[str, int, int, int, int] | tuple[str, str, int]
#: RDMAPUntagged's Wireshark field that is not its own field's name (rdmalab.wire.rdmap: RDMAPUntagged.ws_fields)
_WS_FIELD = {"iwarp_rdma.reserved": "inval_stag"}
_PLANS: dict[tuple[int, bool], list[_Read] | None] = {}


def _fpdu_plan(data: Any, at: int, kind: int, crc: bool) -> list[_Read] | None:
    """How the columns of an FPDU of ``kind`` are read from its octets (:data:`_Read`), made from the one at
    ``data[at:]`` decoded (:func:`~rdmalab.wire.iwarp.decode_fpdu`, as the tracker decodes it: without
    markers, the CRC checked where negotiated, ``crc``) and checked against its fields; None when a field
    is not read so (then the FPDUs of that kind are decoded one by one)."""
    pkt, _n = decode_fpdu(data, at, markers=None, crc=crc, lenient=True)
    fields: dict[str, Any] = {}
    packet_fields(pkt, fields, raw=True)
    reads: dict[str, _Read] = {}
    for layer in pkt.layers:
        h = layer.header
        specs = {f.name: f for f in h.LAYOUT.fields}
        for key in h.ws_fields():
            f = next((x for x in h.LAYOUT.fields if x.ws == key), None) or specs.get(_WS_FIELD.get(key, ""))
            if f is None or f.byte_end - f.byte_start > 8:
                return None
            nb = f.byte_end - f.byte_start
            reads[key] = (key, layer.offset + f.byte_start, nb, 8 * nb - f.bit_offset % 8 - f.bits, f.mask)
    for key in fields:
        if key in reads:
            continue
        if key in ("iwarp_mpa.crc", "iwarp_mpa.crc_check", "rdmalab.crc32c.expected"):
            reads[key] = (key, "crc", 0)
        elif key == "rdmalab.payload.len":
            reads[key] = (key, "payload", 0)
        elif key == "rdmalab.crc32c.status":
            reads[key] = (key, "const", CRC_OK.get(fields[key], 0))
        else:
            return None
    # (the payload's length: a field of the FPDUs that carry a payload, whether this one does or not)
    reads.setdefault("rdmalab.payload.len", ("rdmalab.payload.len", "payload", 0))
    plan = [r for key, r in reads.items()
            if (key in fields or key == "rdmalab.payload.len") and _IWARP_COLUMN.get(key) is not None]
    # (checked: each read of this FPDU gives its decoded field)
    one = np.array([at], dtype=np.int64)
    buf = np.frombuffer(data, dtype=np.uint8)
    ul = int(buf[at]) << 8 | int(buf[at + 1])
    for r in plan:
        got = _read(buf, one, np.array([ul], dtype=np.int64), kind, r)
        if r[0] not in fields:  # (no payload: none shown, and none read: _lane_columns sets it where not 0)
            if r[1] != "payload" or int(got[0]):
                return None
            continue
        want = fields[r[0]]
        if r[1] == "const":
            want = CRC_OK.get(want, 0)
        if isinstance(want, list) or int(got[0]) != int(want):
            return None
    return plan


def _read(buf: np.ndarray, at: np.ndarray, ul: np.ndarray, kind: int, r: _Read) -> np.ndarray:
    """The values of one :data:`_Read` for the FPDUs at ``at`` (ULPDU_Length ``ul``)."""
    if r[1] == "crc":
        e = at + 2 + ul + (-(ul + 2) % 4)  # the CRC, as packet_fields shows it: its octets in order
        out = np.zeros(len(at), dtype=np.uint64)
        for b in range(4):
            out = out << np.uint64(8) | buf[e + b].astype(np.uint64)
        return out
    if r[1] == "payload":
        pay: np.ndarray = (ul - FPDU_HEADERS[kind]).astype(np.uint64)
        return pay
    if r[1] == "const":
        return np.full(len(at), r[2], dtype=np.uint64)
    _key, off, nb, shift, mask = r  # type: ignore[misc]
    out = np.zeros(len(at), dtype=np.uint64)
    for b in range(nb):
        out = out << np.uint64(8) | buf[at + off + b].astype(np.uint64)
    return (out >> np.uint64(shift)) & np.uint64(mask)


def _lane_columns(blk: RecordBlock, cols: Columns, idx: np.ndarray, lane: np.ndarray, plain: np.ndarray,
                  fpdus: tuple[np.ndarray, ...]) -> None:
    """The iWARP columns of the segments ``lane`` (of ``idx``, the block's rows fed to the tracker) that the
    tracker took in step without decoding them: whole FPDUs (``fpdus``:
    :func:`~rdmalab.capture.columnar_tcp.fpdu_chains`), without their CRC on a direction that negotiated none
    (``plain``).  A segment of one FPDU: its fields read a column at a time (:func:`_fpdu_plan`); of several,
    each decoded (:func:`~rdmalab.wire.iwarp.decode_fpdu`), as the tracker decodes them."""
    seg, at, ul, _tagged, kind, _ctl = fpdus
    take = np.isin(seg, lane)
    seg, at, ul, kind = seg[take], at[take], ul[take], kind[take]
    no_crc = np.isin(seg, plain)
    count = np.bincount(seg, minlength=len(idx))
    one = count[seg] == 1
    d, L = cols.data, cols.layers
    buf = np.frombuffer(blk.buf, dtype=np.uint8)
    slow: list[int] = []  # (places in seg: the FPDUs decoded one by one)
    for kd in np.unique(kind[one]).tolist():
        for crc in (True, False):
            sel = np.flatnonzero(one & (kind == kd) & (no_crc != crc))
            if not len(sel):
                continue
            key = (kd, crc)
            if key not in _PLANS:
                _PLANS[key] = _fpdu_plan(blk.buf, int(at[sel[0]]), kd, crc)
            plan = _PLANS[key]
            if plan is None:
                slow += sel.tolist()
                continue
            rows = idx[seg[sel]]
            for r in plan:
                got = _read(buf, at[sel], ul[sel], kd, r)
                name = _IWARP_COLUMN[r[0]]
                there = got > 0 if r[1] == "payload" else np.ones(len(sel), dtype=bool)
                d[name][rows[there]] = got[there]
                L[_IWARP_LAYER[name]][rows[there]] = True
            d["rdmalab.pdus"][rows] = 1
            L["iwarp"][rows] = True
    slow += np.flatnonzero(~one).tolist()
    if not slow:
        return
    by_row: dict[int, list[Any]] = {}
    for j in sorted(slow, key=lambda j: (int(seg[j]), int(at[j]))):
        pkt, _n = decode_fpdu(blk.buf, int(at[j]), markers=None, crc=not bool(no_crc[j]), lenient=True)
        by_row.setdefault(int(idx[seg[j]]), []).append(pkt)
    _put_pdu_fields(cols, list(by_row), [_pdu_fields(p) for p in by_row.values()], [len(p) for p in by_row.values()])


#: The CRC function the ICRC check calls: rdmalab.wire.crc's (zlib's CRC-32 as zlib-ng computes
#: it).  A test replaces it to see the bytes it is given.
_crc32 = crc32
_MASKS_V2 = icrc_masks("rocev2")
_MASKS_V1 = icrc_masks("rocev1")


def _mask(buf: np.ndarray, at: np.ndarray, masks: tuple[tuple[int, int], ...]) -> None:
    """Set the variant bits ``masks`` (:func:`rdmalab.wire.crc.icrc_masks`) of the headers that
    start at the byte offsets ``at`` of ``buf``."""
    if len(at):
        for i, bits in masks:
            buf[at + i] |= bits


def _verify_icrc(blk: RecordBlock, H: np.ndarray, sel: np.ndarray, rocev1: np.ndarray, l3: np.ndarray,
                 bth: np.ndarray, ib_end: np.ndarray, wire: np.ndarray) -> np.ndarray:
    """ICRC status per row (1 good, 2 bad, 0 unchecked): the variant fields are masked with numpy
    in a copy of the block's buffer, with the masks of :func:`rdmalab.wire.crc.icrc_masks` (IBA
    Vol 1 7.8.1, RoCEv2 Annex A17.3.3), then the CRC runs over each packet from
    :data:`rdmalab.wire.crc.ICRC_SEED` (one ``zlib.crc32`` call a packet)."""
    idx = np.nonzero(sel)[0]
    start = blk.offset[idx] + l3[idx]
    bths = blk.offset[idx] + bth[idx]
    v1 = rocev1[idx]
    v6 = ~v1 & ((H[idx, l3[idx]] >> 4) == 6)
    v4 = ~v1 & ~v6
    v2 = ~v1
    masks = [(start[v4], _MASKS_V2["IPv4"]),  # TOS, TTL, header checksum
             (start[v6], _MASKS_V2["IPv6"]),  # traffic class, flow label, hop limit
             (start[v1], _MASKS_V1["GRH"]),
             (bths[v2] - 8, _MASKS_V2["UDP"]),  # UDP checksum
             (bths[v2], _MASKS_V2["BTH"]),  # BTH byte 4: FECN, BECN, Resv6
             (bths[v1], _MASKS_V1["BTH"])]
    # a block read into a bytearray is masked in place and put back after (the bytes masked are
    # saved first): no copy of the whole block; an immutable one is copied
    inplace = isinstance(blk.buf, bytearray)
    copy = blk.buf if inplace else bytearray(blk.buf)
    B = np.frombuffer(copy, dtype=np.uint8)
    if inplace:
        where = np.concatenate([at + i for at, ms in masks for i, _ in ms] or [np.zeros(0, dtype=np.int64)])
        saved = B[where]
    for at, ms in masks:
        _mask(B, at, ms)
    end = blk.offset[idx] + ib_end[idx] - 4
    crc32 = _crc32
    seed = ICRC_SEED
    try:
        with memoryview(copy) as mv:
            got = np.array([crc32(mv[a:e], seed) for a, e in zip(start.tolist(), end.tolist(), strict=True)],
                           dtype=np.uint32)
    finally:
        if inplace:
            B[where[::-1]] = saved[::-1]  # the first value saved of a byte masked twice is its own
    del B
    out = np.zeros(len(H), dtype=np.int8)
    # the ICRC goes least-significant byte first; ``wire`` reads its bytes big-endian
    want = wire[idx].byteswap()
    out[idx] = np.where(got == want, 1, 2)
    return out


# ============================================================================ objects -> columns


def columns_from_packets(path: str | os.PathLike[str], *, first: int = 1, limit: int | None = None) -> Columns:
    """Columns made with the per-packet decoder (other link types, iWARP): slower, same names."""
    got = list(iter_columns_from_packets(path, first=first, limit=limit, rows=None))
    return got[0] if got else columns_from_dicts([], {})


def iter_columns_from_packets(path: str | os.PathLike[str], *, first: int = 1, limit: int | None = None,
                              rows: int | None = 1 << 16) -> Iterator[Columns]:
    """:func:`columns_from_packets` of the frames from ``first`` on, ``rows`` frames at a time (None: all in
    one), so that memory does not grow with the file and the frames before a damaged record (a file cut
    mid-record) are given before its error is raised.  Every frame is followed, in order, from the file's
    first: the handshakes and conversations before ``first`` too."""
    n_max = limit
    got: list[dict[str, Any]] = []
    windows = TcpWindowScaling()
    conversations = Conversations(analysis=True)
    quoting: dict[int, dict[str, Any]] = {}
    taken = 0
    try:
        for cp in read(path):
            row, entry = per_packet_row(cp, conversations, windows)
            if cp.frame_number < first:
                continue
            if "ipv6.version" in row and "ip.version" not in row:
                row["ip.version"] = row["ipv6.version"]  # as the fast path and tshark: ip.version of an IPv6 packet is 6
            got.append(row)
            taken += 1
            if entry is not None:
                quoting[cp.frame_number] = entry
            if n_max is not None and taken >= n_max:
                break
            if rows is not None and len(got) >= rows:
                yield columns_from_dicts(got, quoting)
                got, quoting = [], {}
    except Exception:
        if got:  # (the frames before the error, then the error)
            yield columns_from_dicts(got, quoting)
        raise
    if got or taken == 0:
        yield columns_from_dicts(got, quoting)


def columns_from_block(blk: RecordBlock, *, tracker: Any = None, windows: TcpWindowScaling | None = None,
                       conversations: Conversations | None = None) -> Columns:
    """Columns of one block made with the per-packet decoder, for a stream (which cannot be read
    again from its start as :func:`columns_from_packets` reads a file): ``tracker``,
    ``windows`` and ``conversations`` carry the iWARP streams, TCP windows and conversations from
    block to block (None: not followed)."""
    rows: list[dict[str, Any]] = []
    quoting: dict[int, dict[str, Any]] = {}
    secs, ifs, fcss = blk.seconds(), blk.interfaces(), blk.fcs_lens()
    for i in range(len(blk)):
        off, cap = int(blk.offset[i]), int(blk.caplen[i])
        rec = RawRecord(blk.first + i, float(secs[i]), int(blk.linktype[i]), bytes(blk.buf[off:off + cap]),
                        int(blk.wirelen[i]), int(ifs[i]), int(blk.ts_ns[i]), fcs_len=int(fcss[i]))
        cp = decode_record(rec, tracker=tracker)
        row, entry = per_packet_row(cp, conversations, windows)
        rows.append(row)
        if entry is not None:
            quoting[cp.frame_number] = entry
    return columns_from_dicts(rows, quoting)


def columns_from_dicts(rows: list[dict[str, Any]], quoting: dict[int, dict[str, Any]] | None = None) -> Columns:
    """Columns of frames given as per-packet field dictionaries (:func:`frame_fields`, addresses as
    integers); ``quoting``: the :attr:`Columns.multi` entries of the ICMP errors among them that quote a
    datagram (:func:`per_packet_row`)."""
    n = len(rows)
    data: dict[str, np.ndarray] = {}
    L: dict[str, np.ndarray] = {k: np.zeros(n, dtype=bool) for k in _LAYER_NAMES}
    layer_hits: dict[str, np.ndarray] = {}
    multi: dict[int, dict[str, Any]] = {}
    for c in COLUMNS:
        arr = np.zeros(n, dtype=c.dtype)
        hit = np.zeros(n, dtype=bool)
        for i, row in enumerate(rows):
            v = row.get(c.name)
            if isinstance(v, list):
                v = v[0] if v else None
            if v is None:
                continue
            if c.name == "frame.time_epoch":
                arr[i] = v
            elif c.dtype == "S16":
                arr[i] = int(v).to_bytes(16, "big")
            else:
                arr[i] = int(v)
            hit[i] = True
        data[c.name] = arr
        layer_hits.setdefault(c.layer, np.zeros(n, dtype=bool))
        layer_hits[c.layer] |= hit
    # frame_fields gives frame.time_ns, exact (an ERF record's own time too: CapturedPacket.epoch_ns);
    # a row without it takes its ERF timestamp, else its float seconds
    for i, row in enumerate(rows):
        if "frame.time_ns" not in row:
            data["frame.time_ns"][i] = erf_time_ns(int(row["erf.ts"])) if "erf.ts" in row else \
                round(row["frame.time_epoch"] * 1e9)
    L.update(layer_hits)
    for i, row in enumerate(rows):
        enc = row.get("rdmalab.encap")
        if enc in ("rocev1", "rocev2"):
            L[enc][i] = True
        if row.get(HIDDEN_UDP_CUT):  # (a UDP header tshark stops in: in no conversation)
            L["udp.cut"][i] = True
        if "iwarp_ddp.qn" in row or "iwarp_ddp.stag" in row:
            L["iwarp"][i] = True
        st = row.get("rdmalab.icrc.status")
        data["rdmalab.icrc.ok"][i] = CRC_OK.get(st if isinstance(st, str) else "", 0)
        if "rdmalab.icrc.status" in row:
            L["infiniband.crc"][i] = True
        st = row.get("rdmalab.crc32c.status")
        if isinstance(st, list):
            st = st[0] if st else None
        if st is not None:
            data["rdmalab.crc32c.ok"][i] = CRC_OK.get(st, 0)
            L["rdmalab.crc32c"][i] = True
        if int(row.get("rdmalab.pdus", 0) or 0) > 1:
            multi[int(row["frame.number"])] = {k: v for k, v in row.items() if k.startswith(IWARP_PREFIXES)}
        if "tcp.analysis.duplicate_ack" in row:  # (its label twice, as tshark's: fill_tcp_analysis)
            multi.setdefault(int(row["frame.number"]), {})["tcp.analysis.duplicate_ack"] = row["tcp.analysis.duplicate_ack"]
    multi.update(quoting or {})
    L["frame"] = np.ones(n, dtype=bool)
    for proto in ("icmp", "icmpv6", "arp"):  # (no columns: there when a field of theirs is, as a filter has it)
        prefix = proto + "."
        L[proto] = np.array([any(k.startswith(prefix) for k in row) for row in rows], dtype=bool)
    # (the BTH as its fields say: a RoCE frame whose BTH is cut or not after a GRH of IBA has none, as in decode_block)
    for proto in ("iwarp_mpa", "iwarp_ddp", "iwarp_rdma"):
        L[proto] = np.logical_or.reduce([L[c.name] for c in IWARP_COLUMNS if c.name.startswith(proto + ".")])
    return Columns(n, data, L, multi=multi)
