"""Columnar decoding: a capture file into numpy columns with Wireshark's field names.

Per-packet objects (:func:`rdmalab.capture.read`) are for reading one packet; the columnar
decoder is for a million.  It is three modules, one concern each, and this one, which puts them
together for whole files and re-exports their public names:

* :mod:`rdmalab.capture.pcapio`: reading records, in blocks (the record walker the per-packet
  reader shares);
* :mod:`rdmalab.capture.columnar_schema`: what the columns are (:data:`COLUMNS`, the
  :class:`Columns` table) and how tshark prints them;
* :mod:`rdmalab.capture.columnar_decode`: a block of records into columns, with numpy.

Memory is bounded by the block size (:func:`iter_columns` yields one :class:`Columns` per block);
:func:`read_columns` concatenates them.  Files may be pcap or pcapng, plain or gzip-compressed.
Frames of link types other than Ethernet are decoded by the per-packet decoder instead
(:func:`columns_from_packets`), with the same column names.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from rdmalab.capture.blockpool import worker_pool
from rdmalab.capture.columnar_decode import (  # noqa: F401 - the public names of the columnar decoder
    columns_from_block,
    columns_from_dicts,
    columns_from_packets,
    decode_block,
    erf_ethernet_view,
    fill_conversations,
    fill_iwarp,
    fill_tcp_analysis,
    fill_tcp_windows,
    iter_columns_from_packets,
    wants_analysis,
    wants_analysis_values,
    wants_conversations,
    wants_iwarp,
    wants_windows,
)
from rdmalab.capture.columnar_schema import (  # noqa: F401 - the public names of the columnar decoder
    COLUMN_BY_NAME,
    COLUMN_NAMES,
    COLUMNS,
    CONVERSATION_FIELDS,
    DERIVED,
    FILTER_PROTOCOLS,
    FILTER_TIMES,
    IWARP_COLUMNS,
    IWARP_LAYERS,
    IWARP_PREFIXES,
    WINDOW,
    Col,
    Columns,
    _ipv6_text,
    columns_answer,
    empty_columns,
    format_column,
)
from rdmalab.capture.iwarp import IwarpTracker
from rdmalab.capture.linktypes import (
    COLUMNAR_LINKTYPES,
    LINKTYPE_ETHERNET,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2,
    RAW_IP_LINKTYPES,
)
from rdmalab.capture.pcapio import (  # noqa: F401 - the public names of the columnar decoder
    CaptureError,
    RecordBlock,
    is_stream,
    record_blocks,
)
from rdmalab.capture.render import Conversations, TcpWindowScaling
from rdmalab.wire.net import ETHERTYPE_QINQ, ETHERTYPE_VLAN, ETHERTYPE_VLAN_9100, IPV6_EXTENSIONS, ROCEV2_PORT

__all__ = ["COLUMNS", "COLUMN_BY_NAME", "COLUMN_NAMES", "CONVERSATION_FIELDS", "DERIVED",
           "FILTER_PROTOCOLS", "FILTER_TIMES", "columns_answer", "IWARP_COLUMNS", "IWARP_LAYERS", "IWARP_PREFIXES",
           "LINKTYPE_ETHERNET", "ROCEV2_PORT", "WINDOW", "CaptureError", "Col", "Columns", "RecordBlock",
           "columns_from_dicts", "columns_from_packets", "decode_block", "empty_columns", "fill_conversations",
           "fill_iwarp", "fill_tcp_analysis", "fill_tcp_windows", "format_column", "iter_columns", "read_columns",
           "read_many", "record_blocks", "wants_analysis", "wants_conversations", "wants_iwarp", "wants_windows"]

# ============================================================================ whole files


def stacked_tags(blk: RecordBlock) -> np.ndarray:
    """Per frame: whether its tags are more than the columns hold (an 802.1ad tag then an 802.1Q
    tag at most): two 802.1Q tags, two 802.1ad tags, a third tag.  Ethernet frames only."""
    buf = np.frombuffer(blk.buf, dtype=np.uint8)
    n = len(blk.offset)
    if n == 0 or len(buf) == 0:
        return np.zeros(n, dtype=bool)
    top = len(buf) - 1

    def etype(at: int) -> np.ndarray:
        i = blk.offset + at
        inside = blk.caplen >= at + 2
        got = buf[np.minimum(i, top)].astype(np.int64) << 8 | buf[np.minimum(i + 1, top)]
        return np.where(inside, got, 0)

    tag = (ETHERTYPE_VLAN, ETHERTYPE_QINQ, ETHERTYPE_VLAN_9100)
    t1 = etype(12)
    first = np.isin(t1, tag)
    if not first.any():
        return np.zeros(n, dtype=bool)
    t2 = etype(16)
    second = first & np.isin(t2, tag)
    allowed = (t1 == ETHERTYPE_QINQ) & (t2 == ETHERTYPE_VLAN)
    eth = blk.linktype == LINKTYPE_ETHERNET
    # (a tag of TPID 0x9100, which the columns do not read: rare, left to the per-packet decoder)
    old = (t1 == ETHERTYPE_VLAN_9100) | (second & (t2 == ETHERTYPE_VLAN_9100))
    out: np.ndarray = eth & ((second & (~allowed | np.isin(etype(20), tag))) | old)
    return out


def cooked_tags(blk: RecordBlock) -> np.ndarray:
    """Per frame: a Linux cooked capture whose EtherType is a VLAN tag's (the per-packet decoder reads
    the tags after it; the columns read tags after an Ethernet header only)."""
    buf = np.frombuffer(blk.buf, dtype=np.uint8)
    out = np.zeros(len(blk.offset), dtype=bool)
    for lt, at in ((LINKTYPE_LINUX_SLL, 14), (LINKTYPE_LINUX_SLL2, 0)):
        rows = np.flatnonzero((blk.linktype == lt) & (blk.caplen >= at + 2))
        if len(rows):
            i = blk.offset[rows] + at
            etype = buf[i].astype(np.int64) << 8 | buf[i + 1]
            out[rows] = np.isin(etype, (ETHERTYPE_VLAN, ETHERTYPE_QINQ, ETHERTYPE_VLAN_9100))
    return out


#: the IPv6 extension headers the per-packet decoder reads past (rdmalab.wire.net.IPV6_EXTENSIONS)
_IPV6_EXTENSIONS = tuple(IPV6_EXTENSIONS)


class _FrameOctets:
    """Octets of a block's frames read a row at a time, vectorised: ``at(rows, pos)`` the octet at ``pos`` of
    each row's frame (0 past what was captured), ``u16`` a big-endian word."""

    def __init__(self, blk: RecordBlock) -> None:
        self.blk = blk
        self.buf = np.frombuffer(blk.buf, dtype=np.uint8)
        self.top = len(self.buf) - 1

    def at(self, rows: np.ndarray, pos: np.ndarray) -> np.ndarray:
        got = self.buf[np.minimum(self.blk.offset[rows] + pos, self.top)].astype(np.int64)
        octet: np.ndarray = np.where(pos < self.blk.caplen[rows], got, 0)
        return octet

    def u16(self, rows: np.ndarray, pos: np.ndarray) -> np.ndarray:
        word: np.ndarray = self.at(rows, pos) << 8 | self.at(rows, pos + 1)
        return word

    def ip_start(self, ethertype: int, version: int) -> np.ndarray:
        """Per frame: where the IP header of ``ethertype`` starts as the columns find it (after an Ethernet
        header and up to two tags, a Linux cooked header, or at 0 in a raw IP record of that ``version``),
        -1 where there is none."""
        blk = self.blk
        n = len(blk.offset)
        rows = np.arange(n)
        eth = blk.linktype == LINKTYPE_ETHERNET
        etype = np.where(eth, self.u16(rows, np.full(n, 12)), 0)
        pos = np.full(n, 14, dtype=np.int64)
        for _ in range(2):  # (an 802.1ad tag, an 802.1Q tag: the columns read two at most)
            tagged = eth & np.isin(etype, (ETHERTYPE_VLAN, ETHERTYPE_QINQ))
            etype = np.where(tagged, self.u16(rows, pos + 2), etype)
            pos = np.where(tagged, pos + 4, pos)
        l3 = np.where(eth & (etype == ethertype), pos, -1)
        for lt, type_at, start in ((LINKTYPE_LINUX_SLL, 14, 16), (LINKTYPE_LINUX_SLL2, 0, 20)):
            l3 = np.where((blk.linktype == lt) & (self.u16(rows, np.full(n, type_at)) == ethertype), start, l3)
        raw = np.isin(blk.linktype, RAW_IP_LINKTYPES) & (self.at(rows, np.zeros(n, dtype=np.int64)) >> 4 == version)
        found: np.ndarray = np.where(raw, 0, l3)
        return found


def ipv6_extensions(blk: RecordBlock) -> np.ndarray:
    """Per frame: an IPv6 datagram whose first next header is an extension header the per-packet decoder reads
    past (Hop-by-Hop, Routing, Fragment, Destination Options) to what the columns do not follow (UDP or TCP
    after it, an ICMPv6 error and its quote); but for the common one the columns hold as it is: a Hop-by-Hop
    header before an ICMPv6 message that is no error (MLD: nothing in it is a column)."""
    n = len(blk.offset)
    out = np.zeros(n, dtype=bool)
    if n == 0 or len(blk.buf) == 0 or (b"\x86\xdd" not in blk.buf and not np.isin(blk.linktype, RAW_IP_LINKTYPES).any()):
        return out  # (no IPv6 EtherType anywhere in the block: most blocks, looked through at memchr's speed)
    octets = _FrameOctets(blk)
    at = octets.at
    l3 = octets.ip_start(0x86DD, 6)
    six = np.flatnonzero(l3 >= 0)
    if not len(six):
        return out
    base = l3[six]
    first = at(six, base + 6)
    ext = np.isin(first, _IPV6_EXTENSIONS) & (base + 40 < blk.caplen[six])
    if not ext.any():
        return out
    six, base, first = six[ext], base[ext], first[ext]
    nxt = at(six, base + 40)
    after = base + 40 + 8 + 8 * at(six, base + 41)
    mld = (first == 0) & (nxt == 58) & (at(six, after) >= 128) & (after < blk.caplen[six])
    out[six[~mld]] = True
    return out


def source_routes(blk: RecordBlock) -> np.ndarray:
    """Per frame: an IPv4 header with options (after an Ethernet header and up to two tags, a Linux cooked
    header, or none) that may hold a loose or strict source route (an option octet of 131 or 137 anywhere among
    them): its ``ip.dst`` is the route's last address (wire.net.source_route_destination), which the columns do
    not read; the per-packet decoder does.  Rare: headers with options mostly carry none."""
    n = len(blk.offset)
    out = np.zeros(n, dtype=bool)
    if n == 0 or len(blk.buf) == 0 or (b"\x83" not in blk.buf and b"\x89" not in blk.buf):
        return out
    octets = _FrameOctets(blk)
    at = octets.at
    l3 = octets.ip_start(0x0800, 4)
    four = np.flatnonzero(l3 >= 0)
    first = at(four, l3[four])
    opts = (first >> 4 == 4) & ((first & 0x0F) > 5)
    four = four[opts]
    if not len(four):
        return out
    base, end = l3[four] + 20, l3[four] + (first[opts] & 0x0F) * 4
    for k in range(40):
        octet = at(four, base + k)
        out[four[(base + k < end) & ((octet == 131) | (octet == 137))]] = True
    return out


def _ethernet_only(blk: RecordBlock) -> bool:
    """Whether the columns hold every frame of the block: Ethernet (or a Linux cooked capture:
    :data:`COLUMNAR_LINKTYPES`), with at most one 802.1ad tag and then at most one 802.1Q tag before
    what it carries (:func:`stacked_tags`, :func:`cooked_tags`: the others are for the per-packet
    decoder, which reads any number of tags), and no IPv6 extension header but a Hop-by-Hop one before an
    ICMPv6 message that is no error (:func:`ipv6_extensions`), and no IPv4 source route (:func:`source_routes`)."""
    return (bool(np.isin(blk.linktype, COLUMNAR_LINKTYPES).all()) and not stacked_tags(blk).any()
            and not cooked_tags(blk).any() and not ipv6_extensions(blk).any() and not source_routes(blk).any())


def iter_columns(path: str | os.PathLike[str], *, block_bytes: int = 16 << 20, verify_icrc: bool = True,
                 progress: bool = False, fields: Iterable[str] | None = None) -> Iterator[Columns]:
    """Columns of a capture, one :class:`Columns` per block of records (bounded memory).

    A file with frames of other link types than Ethernet is decoded with the per-packet decoder
    (a stream, ``-`` or a FIFO, from the first block with such a frame on).
    """
    p = os.fspath(path)
    bar = _progress(p) if progress else None
    if fields is not None:
        fields = tuple(fields)
    tracker = _tracker() if wants_iwarp(fields) else None
    windows = TcpWindowScaling() if wants_windows(fields) else None
    conversations = Conversations(analysis=wants_analysis(fields),
                                  values=wants_analysis_values(fields)) if wants_conversations(fields) else None
    stream = is_stream(p)
    try:
        per_packet = False
        for raw in record_blocks(p, block_bytes):
            blk = erf_ethernet_view(raw)  # (ERF Ethernet records: their frames, for the columns)
            if not per_packet and not _ethernet_only(blk):
                if not stream:
                    yield from iter_columns_from_packets(p, first=blk.first)
                    return
                per_packet = True  # a stream is not read again: this block and the rest, frame by frame
            if per_packet:
                cols = columns_from_block(blk, tracker=tracker, windows=windows, conversations=conversations)
                cols.path = p
                yield cols
                continue
            cols = decode_block(blk, verify_icrc=verify_icrc, fields=fields, tracker=tracker, windows=windows,
                                conversations=conversations)
            cols.path = p
            if bar is not None:
                bar.update(blk.file_pos - bar.n)
            yield cols
    finally:
        if bar is not None:
            bar.close()


def _tracker() -> Any:

    return IwarpTracker()


def _progress(path: str) -> Any:
    """A progress bar on stderr (tqdm), by bytes read, for files large enough to wait for."""
    try:
        size = os.path.getsize(path)
    except OSError:
        return None
    if size < 64 << 20:
        return None
    try:
        from tqdm import tqdm  # optional dependency (the "analysis" extra)
    except ImportError:
        return None
    return tqdm(total=size, unit="B", unit_scale=True, desc=os.path.basename(path), leave=False)


def read_columns(path: str | os.PathLike[str], *, verify_icrc: bool = True, progress: bool = False,
                 workers: int = 1, block_bytes: int = 16 << 20) -> Columns:
    """All columns of one capture file.  ``workers > 1`` decodes blocks in worker processes."""
    p = os.fspath(path)
    if workers <= 1:
        return Columns.concat(list(iter_columns(p, verify_icrc=verify_icrc, progress=progress,
                                                block_bytes=block_bytes)))

    parts: list[Columns] = []
    tracker = _tracker()
    windows = TcpWindowScaling()
    conversations = Conversations(analysis=True)

    def done(item: tuple[RecordBlock, Any]) -> Columns:
        # the iWARP reassembly follows TCP streams across blocks: it runs here, in block order
        blk, fut = item
        cols: Columns = fut.result()
        fill_iwarp(blk, cols, tracker)
        ends = fill_tcp_windows(blk, cols, windows, ends=True)
        fill_conversations(cols, conversations)
        assert ends is not None and conversations.analysis is not None
        fill_tcp_analysis(cols, conversations.analysis, ends)
        return cols

    with worker_pool(workers) as pool:
        futs: list[tuple[RecordBlock, Any]] = []
        for raw in record_blocks(p, block_bytes):
            blk = erf_ethernet_view(raw)
            if not _ethernet_only(blk):
                for _b, fu in futs:
                    fu.cancel()
                return columns_from_packets(p)
            futs.append((blk, pool.submit(decode_block, blk, verify_icrc=verify_icrc)))
            if len(futs) > 2 * workers:  # bounded: do not read ahead of the workers
                parts.append(done(futs.pop(0)))
        parts.extend(done(f) for f in futs)
    out = Columns.concat(parts)
    out.path = p
    return out


def read_many(paths: Sequence[str | os.PathLike[str]], *, workers: int = 1,
              verify_icrc: bool = True) -> list[Columns]:
    """Columns of many files, one file per worker process."""
    if workers <= 1 or len(paths) <= 1:
        return [read_columns(p, verify_icrc=verify_icrc) for p in paths]

    with worker_pool(workers) as pool:
        return list(pool.map(_read_one, [(os.fspath(p), verify_icrc) for p in paths]))


def _read_one(arg: tuple[str, bool]) -> Columns:
    return read_columns(arg[0], verify_icrc=arg[1])
