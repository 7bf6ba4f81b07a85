"""Summary lines of plain TCP segments from columns (``rdmalab decode -r FILE``).

A TCP segment's summary line (:func:`rdmalab.capture.render.summary_line`) depends on the
segment's own headers except for two things that follow the capture in order: the window, scaled
by the shift count its direction's SYN offered (:class:`~rdmalab.capture.render.TcpWindowScaling`),
and whether the segment completes iWARP PDUs (the stream reassembly of
:class:`rdmalab.capture.iwarp.IwarpTracker`).  So the line is cut in three: everything up to
``Win=`` and everything after the window (`` Len=N`` and the newline) are formatted for a block
of rows at a time, with numpy (:func:`rdmalab.capture.columnar_summary.tcp_text`); the caller feeds
the block's segments, in capture order, to the window scaling
(:meth:`~rdmalab.capture.render.TcpWindowScaling.update_many`) and to the tracker
(:meth:`~rdmalab.capture.iwarp.IwarpTracker.process_many`, which feeds one by one only the
segments it does not provably ignore or move past), writes the window between the two pieces when
the segment completes no PDU, and writes the line of an iWARP frame from its PDUs (from columns
for segments of whole FPDUs the tracker took in step).

Only *clean* segments are formatted here (:func:`clean_tcp`): those the per-packet decoder reads
without a problem or a special case (Ethernet, at most one 802.1Q tag, IPv4 without fragments or
IPv6 with TCP as the next header, the IP length within the capture, a TCP header of at least 20
bytes within the IP packet).  Every other TCP frame goes through the per-packet path, as before.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rdmalab.capture.columnar_schema import Columns, link_header_length
from rdmalab.capture.linktypes import COLUMNAR_LINKTYPES
from rdmalab.capture.pcapio import RecordBlock
from rdmalab.wire import crc as _crc
from rdmalab.wire.iwarp import DDP_TAGGED_SIZE, DDP_UNTAGGED_SIZE
from rdmalab.wire.net import TCP, tcp_flag_names
from rdmalab.wire.rdmap import OP_READ_REQUEST, OP_READ_RESPONSE, OP_SEND, OP_SEND_SE, OP_WRITE, ReadRequest

#: the columns clean_tcp and tcp_text read (for decode_block's ``fields``)
TCP_FIELDS = ("frame.number", "ip.src", "ip.dst", "ip.hdr_len", "ip.flags", "ip.len", "ipv6.src", "ipv6.dst",
              "ipv6.plen", "tcp.srcport", "tcp.dstport", "tcp.seq_raw", "tcp.ack_raw", "tcp.hdr_len", "tcp.flags",
              "tcp.window_size_value", "tcp.len")


def _flag_table() -> np.ndarray:
    texts = [", ".join(tcp_flag_names(f)).encode() for f in range(512)]
    w = max(len(t) for t in texts)
    out = np.zeros((512, w), dtype=np.uint8)
    for i, t in enumerate(texts):
        out[i, :len(t)] = np.frombuffer(t, dtype=np.uint8)
    return out


FLAG_TEXT = _flag_table()


def tcp_offsets(c: Columns) -> tuple[np.ndarray, np.ndarray]:
    """Per row: where the IP header starts and where the TCP header starts, in the frame."""
    d, L = c.data, c.layers
    l3 = link_header_length(L)
    l4 = l3 + np.where(L["ipv6"], 40, d["ip.hdr_len"].astype(np.int64))
    return l3, l4


def ip_end(c: Columns, l3: np.ndarray) -> np.ndarray:
    """Per row: where its IP datagram ends in the frame, as its header counts it (``l3``: where the
    header starts, :func:`tcp_offsets`)."""
    d = c.data
    out: np.ndarray = np.where(c.layers["ipv6"], l3 + 40 + d["ipv6.plen"].astype(np.int64),
                               l3 + d["ip.len"].astype(np.int64))
    return out


def frame_end(blk: RecordBlock, c: Columns) -> np.ndarray:
    """Per row: where its frame ends on the wire, its FCS off where the capture says its Ethernet frames
    keep one: an IP datagram said to go past it is a problem for the per-packet decoder
    (:func:`rdmalab.wire.frame._ip`'s ``reported``), even within what was captured (a record whose
    captured length is more than its length on the wire)."""
    out: np.ndarray = (np.where(blk.wirelen > 0, blk.wirelen, blk.caplen).astype(np.int64)
                       - np.where(c.layers["eth"], np.maximum(blk.fcs_lens(), 0), 0))
    return out


def clean_tcp(blk: RecordBlock, c: Columns) -> np.ndarray:
    """Rows that are TCP segments the per-packet decoder reads without a problem or special case
    (the checks of :func:`rdmalab.wire.frame._ip` for TCP, as masks)."""
    d, L = c.data, c.layers
    v4, v6 = L["ip"], L["ipv6"]
    l3, l4 = tcp_offsets(c)
    end = ip_end(c, l3)
    thl = d["tcp.hdr_len"].astype(np.int64)
    ok = L["tcp"] & np.isin(blk.linktype, COLUMNAR_LINKTYPES) & (v4 | v6)
    ok &= ~(v4 & ((d["ip.flags"] & 1) != 0))  # more fragments: a fragment (an offset is already not TCP)
    ok &= ~(v6 & (d["ipv6.nxt"] != 6))
    ok &= end <= blk.caplen  # else the per-packet decoder reports the IP length truncated
    ok &= end <= frame_end(blk, c)  # (or past the frame on the wire)
    ok &= (thl >= 20) & (l4 + thl <= end)  # a data offset below 5, or options past the packet: problems
    ok &= (d["tcp.flags"] & TCP.RES) == 0  # (reserved bits set: rare, their line by the per-packet decoder)
    result: np.ndarray = ok
    return result


def split_rows(m: np.ndarray) -> list[bytes]:
    """The rows of a byte matrix (0: no character) as bytes, one a row."""
    starts = np.zeros(len(m) + 1, dtype=np.int64)
    np.cumsum(np.count_nonzero(m, axis=1), out=starts[1:])
    text = m.tobytes().translate(None, b"\0")
    at = starts.tolist()
    return [text[a:b] for a, b in zip(at[:-1], at[1:], strict=True)]


# ============================================================================ whole FPDUs, from columns

#: the FPDUs :func:`fpdu_chains` describes itself: (tagged, RDMAP opcode) -> its kind (a row of the tables below)
FPDU_KINDS = {(1, OP_WRITE): 0, (1, OP_READ_RESPONSE): 1, (0, OP_SEND): 2, (0, OP_SEND_SE): 3,
              (0, OP_READ_REQUEST): 4}
#: the kind of a Read Request (its own header after DDP's)
READ_REQUEST_KIND = FPDU_KINDS[(0, OP_READ_REQUEST)]
#: the octets of each kind's headers in the ULPDU (DDP, RDMAP and a Read Request's own; the last row: no kind)
FPDU_HEADERS = np.array([DDP_TAGGED_SIZE, DDP_TAGGED_SIZE, DDP_UNTAGGED_SIZE, DDP_UNTAGGED_SIZE,
                         DDP_UNTAGGED_SIZE + ReadRequest.LAYOUT.size, 0], dtype=np.int64)
#: (tagged << 4 | RDMAP opcode) -> the kind (-1: not one :func:`fpdu_chains` describes)
FPDU_KIND = np.full(32, -1, dtype=np.int64)
for (_t, _op), _k in FPDU_KINDS.items():
    FPDU_KIND[_t << 4 | _op] = _k
#: at most this many FPDUs in one segment are described from columns (more: the tracker decodes them)
MOST_FPDUS = 64


def fpdu_chains(data: Any, start: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, ...]]:
    """Which of the TCP payloads ``data[start[i]:start[i] + length[i]]`` hold whole FPDUs without markers, each
    an RDMA Write, RDMA Read Response, Send, Send with SE or RDMA Read Request that
    :func:`rdmalab.wire.iwarp.decode_fpdu` decodes without a problem (DDP Rsvd 0 and DV 1, RDMAP RV 1 and Rsv
    0, the Invalidate STag 0 of an untagged one, the ULPDU long enough for its headers, a Read Request's
    exactly: RFC 5041 4, RFC 5040 4), its CRC32c good (the first mask) or not looked at (the second), as
    :meth:`~rdmalab.capture.iwarp.IwarpTracker.process_many` takes them; and those FPDUs (payload, start in
    ``data``, ULPDU_Length, tagged, kind, DDP control octet), in order."""
    k = len(start)
    buf = np.frombuffer(data, dtype=np.uint8)
    top = len(buf) - 1
    end = start + length
    cand = np.flatnonzero(length > 0)
    pos = start[cand].copy()
    stop = end[cand]
    ok = np.ones(len(cand), dtype=bool)
    f_seg: list[np.ndarray] = []
    f_at: list[np.ndarray] = []
    f_len: list[np.ndarray] = []
    for _ in range(MOST_FPDUS):
        act = np.flatnonzero(ok & (pos < stop))
        if not len(act):
            break
        p = pos[act]
        ul = buf[np.minimum(p, top)].astype(np.int64) << 8 | buf[np.minimum(p + 1, top)]
        total = (2 + ul + 3) // 4 * 4 + 4  # header, ULPDU, pad (RFC 5044 4.1), CRC
        fits = (p + 2 <= stop[act]) & (p + total <= stop[act])
        ok[act[~fits]] = False
        good = act[fits]
        f_seg.append(cand[good])
        f_at.append(p[fits])
        f_len.append(ul[fits])
        pos[good] = p[fits] + total[fits]
    ok &= pos == stop
    seg = np.concatenate(f_seg) if f_seg else np.zeros(0, dtype=np.int64)
    at = np.concatenate(f_at) if f_at else np.zeros(0, dtype=np.int64)
    ul = np.concatenate(f_len) if f_len else np.zeros(0, dtype=np.int64)
    order = np.lexsort((at, seg))
    seg, at, ul = seg[order], at[order], ul[order]
    ctl, rd = buf[np.minimum(at + 2, top)], buf[np.minimum(at + 3, top)]
    tagged = (ctl >> 7).astype(np.int64)
    kind = FPDU_KIND[tagged << 4 | (rd & 15)]
    need = FPDU_HEADERS[kind]
    simple = (kind >= 0) & ((ctl & 0x3F) == 0x01) & ((rd & 0xF0) == 0x40) & (ul >= need)
    simple &= (kind != 4) | (ul == need)  # a Read Request carries no payload
    inval = np.zeros(len(at), dtype=np.int64)
    for b in range(4, 8):
        inval |= buf[np.minimum(at + b, top)]
    simple &= (tagged == 1) | (inval == 0)
    crc_good = np.zeros(len(at), dtype=bool)
    covered = 2 + ul + (-(ul + 2) % 4)
    idx = np.flatnonzero(simple)
    if len(idx):
        a, c = at[idx], covered[idx]
        crc32c = _crc.crc32c_function()
        with memoryview(data) as view:
            got = np.array([crc32c(view[x:y]) for x, y in zip(a.tolist(), (a + c).tolist(), strict=True)],
                           dtype=np.uint32)
        e = a + c  # the CRC, least-significant octet first (RFC 5044 4.1)
        want = (buf[e].astype(np.uint32) | buf[e + 1].astype(np.uint32) << 8 | buf[e + 2].astype(np.uint32) << 16
                | buf[e + 3].astype(np.uint32) << 24)
        crc_good[idx] = got == want
    bad_plain = np.bincount(seg[~simple], minlength=k)
    bad_crc = np.bincount(seg[~(simple & crc_good)], minlength=k)
    whole = np.zeros(k, dtype=bool)
    whole[cand[ok]] = True
    return (whole & (bad_crc == 0), whole & (bad_plain == 0),
            (seg, at, ul, tagged, kind, ctl))
