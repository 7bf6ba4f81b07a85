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

import numpy as np

from rdmalab.capture.columnar_schema import Columns, link_header_length
from rdmalab.capture.linktypes import COLUMNAR_LINKTYPES
from rdmalab.capture.pcapio import RecordBlock
from rdmalab.wire.net import TCP, tcp_flag_names

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
