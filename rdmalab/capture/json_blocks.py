"""``rdmalab decode -T json`` of a whole capture file, in blocks of records written by worker
processes (:mod:`rdmalab.capture.blockpool`), the same text as :func:`rdmalab.capture.tsjson.iter_json`
writes frame by frame.

A frame's JSON depends on its own bytes, the capture's first timestamp and the timestamp of the
frame before it (frame.time_delta), except for TCP segments, whose iWARP PDUs depend on the
stream before them.  A worker writes a TCP segment's JSON but for what the stream decides (its
payload as data, or the iWARP PDUs completed in it, and frame.protocols's end) and sends it with
what the tracker is fed; the process that reads the streams in order (one tracker) feeds it and
finishes the text (:func:`_tcp_text`), or, where that will not do (the tracker fails on it), decodes
the segment again, per packet.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np

from rdmalab.capture.blockpool import blocks_in_workers
from rdmalab.capture.json_templates import TCP_SHAPES, roce_json, tcp_json
from rdmalab.capture.linktypes import LINKTYPE_ERF
from rdmalab.capture.pcapio import NS_MAX, FrameMeta, record_blocks, record_ns
from rdmalab.capture.reader import CapturedPacket, RawRecord, _load_iwarp_tracker, decode_record
from rdmalab.capture.tsjson import (
    _FRAME_END,
    _LAYERS_NL,
    _comment_layer,
    _dump,
    _frame_text,
    _head_of,
    _layer_text,
    _meta_of,
    _packet_json,
    _pdus_chain,
    _quote,
    _tail_layers,
    frame_starts,
    packet_json,
)

if TYPE_CHECKING:
    from rdmalab.wire.packet import Packet

__all__ = ["iter_json_file"]


#: a frame left to this process: (index in block, timestamp, linktype, bytes, wire length,
#: interface, timestamp of the frame before): timestamps in float seconds and nanoseconds
_Left = tuple[int, float, int, int, bytes, int, int, int, int]
#: what the iWARP tracker is fed of a TCP segment (:data:`rdmalab.capture.iwarp.Segment`), where its payload
#: is in the record's bytes, its length (``Packet.payload_offset``, ``payload_length``) and, when the packet's
#: bytes are not the record's, the payload itself (else None)
_Feed = tuple[tuple[str, int, str, int, int, int, int | None], int, int, bytes | None]
#: what a worker sends of a TCP segment with a payload for the process that reads the streams to finish
#: its text (:func:`_splice_of`, :func:`_spliced`): where ``frame.protocols``'s value starts and ends in
#: the text and where the layers after the segment's own start, ``frame.protocols`` without what the
#: stream decides, the rdmalab fields of the segment's headers, the names of its layers, its header
#: classes, its internal error and its encapsulation
_Splice = tuple[int, int, int, str, dict[str, Any], tuple[str, ...], frozenset[type], str | None, str]
#: a TCP segment a worker writes (:func:`_json_block`): the frame left (:data:`_Left`, for a decode here
#: when its text cannot be finished so), its JSON (after ``",\n  "``; for a segment with a payload, as
#: if no protocol above TCP claimed it nor the payload were data: no ``data`` layer, to be finished by
#: :func:`_spliced`), what the tracker is fed (None: no TCP header, nothing to feed) and, for a segment
#: with a payload, its :data:`_Splice` (None: its text is not laid out to finish so: decoded here)
_LeftTcp = tuple[_Left, str, _Feed | None, _Splice | None]

#: the key of the frame layer's last field, ``frame.protocols``, as _frame_text writes it (a string value
#: holds no bare quote, _quote escapes it: found exactly where the key is)
_PROTOCOLS_KEY = '"frame.protocols": '
#: where rdmalab's layer starts in a frame's text, the last layer (its key at a layer's indentation)
_RDMALAB_LAYER = "," + _LAYERS_NL + '"rdmalab": '


def _splice_of(text: str, obj: dict[str, Any], seg_extras: dict[str, Any], cp: CapturedPacket) -> _Splice | None:
    """For a TCP segment with a payload (``cp``, decoded with no iWARP tracker and ``tcp_data`` False: no
    PDU, no ``data``), its JSON object ``obj``, that object's text ``text`` and the rdmalab fields of its
    headers ``seg_extras``: its :data:`_Splice`, or None when the text is not laid out so."""
    pkt = cp.packet
    layers = obj["_source"]["layers"]
    names = tuple(layers)
    if cp.tcp_data or cp.pdus or names[-1] != "rdmalab" or names[0] != "frame":
        return None
    chain = layers["frame"].get("frame.protocols")
    if not isinstance(chain, str):
        return None
    ps = text.find(_PROTOCOLS_KEY)
    value = _quote(chain)
    cut = text.rfind(_RDMALAB_LAYER)
    if ps < 0 or not text.startswith(value, ps + len(_PROTOCOLS_KEY)) or cut < ps or not text.endswith(_FRAME_END):
        return None
    ps += len(_PROTOCOLS_KEY)
    return (ps, ps + len(value), cut, chain, seg_extras, names[:-1], frozenset(type(la.header) for la in pkt.layers),
            pkt.internal_error, pkt.encap)


def _spliced(text: str, splice: _Splice, pdus: list[Packet], tcp_data: bytes | None) -> str | None:
    """The JSON of a TCP segment with a payload from its worker's ``text`` and :data:`_Splice` as a decode
    with the iWARP tracker writes it, where the tracker completes ``pdus`` (maybe none) in it, or, where
    the tracker does not read its payload as iWARP's (or there is no tracker), ``tcp_data``, its payload
    (tshark's ``data``); None where that is not so simple (a layer after the segment's with the name of
    one of the segment's): the frame is then decoded again, per packet."""
    ps, pe, cut, chain, seg_extras, names, skip, internal_error, encap = splice
    layers: dict[str, Any] = {}
    _tail_layers(layers, dict(seg_extras), tcp_data, pdus, skip, internal_error, encap)
    if any(name in layers for name in names):
        return None
    more = ["data"] if tcp_data is not None else _pdus_chain(pdus, skip)
    if more:
        chain = ":".join([chain, *more]) if chain else ":".join(more)
    parts = [text[:ps], _quote(chain), text[pe:cut]]
    for name, layer in layers.items():
        parts.append("," + _LAYERS_NL)
        parts.append(_quote(name))
        parts.append(": ")
        _layer_text(layer, parts)
    parts.append(_FRAME_END)
    return "".join(parts)


def _feed_of(pkt: Packet, data: bytes) -> _Feed | None:
    """What the iWARP tracker is fed of ``pkt``, the TCP segment decoded from the record ``data``
    (:meth:`rdmalab.capture.iwarp.IwarpTracker.segment_of`), or None."""
    seg = _load_iwarp_tracker().segment_of(pkt)
    if seg is None:
        return None
    return seg, pkt.payload_offset, pkt.payload_length, None if pkt.data is data else bytes(pkt.payload)


@contextmanager
def _no_gc() -> Iterator[None]:
    """The cyclic garbage collector off for a block's frames: a block's JSON makes tens of thousands of
    objects that live until the block is sent (its pieces), and the main process receives them all at
    once, none of them in cycles; the collections their number sets off (each one over everything
    alive) cost the workers a fifth of their time."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _per_packet(frame: int, ts: float, ns: int, lt: int, data: bytes, wire: int, iface: int, fcs: int, first_ns: int,
                before: int, lenient: bool, own: bool) -> tuple[str | None, bool, _Feed | None, _Splice | None]:
    """A worker's text of a frame, decoded per packet (None: left to the caller, as a frame that is not
    ``own``, or that fails here), whether it is a TCP segment, and for one what the tracker is fed of it and
    its :data:`_Splice` (:func:`_json_block`)."""
    try:
        cp = decode_record(RawRecord(frame, ts, lt, data, wire, iface, ns, fcs_len=fcs), lenient=lenient)
        if not own:
            return None, False, None, None
        tcp = cp.packet.encap == "tcp"
        seg: list[dict[str, Any]] | None = None
        if tcp and cp.packet.payload_length:  # (its data or PDUs put in by the stream's reader)
            seg, cp.tcp_data = [], False
        obj = _packet_json(cp, first_ns, before, before, None, seg)
        text = _frame_text(obj)
        if not tcp:
            return text, False, None, None
        return text, True, _feed_of(cp.packet, data), _splice_of(",\n  " + text, obj, seg[0], cp) if seg else None
    except Exception:  # noqa: BLE001 - decoded again, and raised in order, by the caller
        return None, False, None, None


#: the kinds of TCP segment (flags, where the payload starts, with a payload, 802.1Q tag and IP version) whose worker's piece from the templates
#: was checked against the per-packet way in this process, and those whose pieces differed (left to it)
_TCP_CHECKED: set[tuple[int, int, bool, tuple[int, int]]] = set()
TCP_REFUSED: set[tuple[int, int, bool, tuple[int, int]]] = set()


def _tcp_templated(buf: Any, o: int, cap: int, wire: int, lt: int, fcs: int, frame: int, ts: float, ns: int,
                   iface: int, first_ns: int, before: int, lenient: bool,
                   start: str | None = None) -> tuple[bytes, str, _Feed, _Splice | None] | None:
    """A TCP segment's piece (the record's bytes, its text after ``",\n  "``, what the tracker is fed, its
    :data:`_Splice`) from the templates (:func:`~rdmalab.capture.json_templates.tcp_json`), the first of each
    kind checked against :func:`_per_packet`; None for a frame they do not write.  ``start``: the frame's
    :func:`~rdmalab.capture.tsjson.frame_starts` (None: made here)."""
    got = tcp_json(buf, o, cap, wire, lt, fcs, frame, ns, first_ns, before, start)
    if got is None:
        return None
    text, extras, at, length, seg, shape = got
    kind = (seg[5], at, length > 0, shape)
    if kind in TCP_REFUSED:
        return None
    full = ",\n  " + text
    splice: _Splice | None = None
    if length:
        chain, names, classes = TCP_SHAPES[shape]
        ps = full.find(_PROTOCOLS_KEY) + len(_PROTOCOLS_KEY)
        pe = ps + len(_quote(chain))
        splice = (ps, pe, full.rfind(_RDMALAB_LAYER), chain, extras, names, classes, None, "tcp")
    data = bytes(buf[o:o + cap])
    piece = (data, full, (seg, at, length, None), splice)
    if kind not in _TCP_CHECKED:
        _TCP_CHECKED.add(kind)
        want, _tcp, feed, wsplice = _per_packet(frame, ts, ns, lt, data, wire, iface, fcs, first_ns, before, lenient, True)
        if want is None or (",\n  " + want, feed, wsplice) != piece[1:]:
            TCP_REFUSED.add(kind)
            return None
    return piece


def _json_block(blk: Any, n: int, t0: int, prev: int | None, lenient: bool) -> tuple[int, list[str | _Left | _LeftTcp]]:
    """In a worker process (:func:`rdmalab.capture.blockpool.blocks_in_workers`): the JSON of the
    first ``n`` frames of a block, each after ``",\n  "``; TCP segments are sent as :data:`_LeftTcp`
    (their JSON with no iWARP tracker, which :func:`iter_json_file` takes or not), frames that fail
    are left as records (decoded again, and any error raised in order, by :func:`iter_json_file`)."""
    first_ns = t0
    secs = blk.seconds().tolist()
    nss = [record_ns(ts, ns) for ts, ns in zip(secs, blk.ts_ns.tolist(), strict=True)]
    ifs, fcss = blk.interfaces().tolist(), blk.fcs_lens().tolist()
    offs, caps, wires, lts = blk.offset.tolist(), blk.caplen.tolist(), blk.wirelen.tolist(), blk.linktype.tolist()
    pieces: list[str | _Left | _LeftTcp] = []
    run: list[str] = []
    before = nss[0] if prev is None else prev
    starts = _starts(nss[:n], before, first_ns, blk.first, caps[:n])
    with _no_gc():
        for j in range(n):
            ts, ns = secs[j], nss[j]
            # an ERF record's time is its own (exact nanoseconds), the frame after one takes it as its
            # frame before's, and the first frame's frame before is in another block: all left to the caller
            own = lts[j] != LINKTYPE_ERF and (lts[j - 1] != LINKTYPE_ERF if j else prev is None)
            if own:
                try:
                    start = starts[j] if starts is not None else None
                    text = roce_json(blk.buf, offs[j], caps[j], wires[j], lts[j], fcss[j], blk.first + j, ts, ns,
                                     ifs[j], first_ns, before, start)
                    piece = None if text is not None else _tcp_templated(blk.buf, offs[j], caps[j], wires[j], lts[j],
                                                                         fcss[j], blk.first + j, ts, ns, ifs[j],
                                                                         first_ns, before, lenient, start)
                except Exception:  # noqa: BLE001 - the per-packet way below writes it, or raises in order
                    text = piece = None
                if text is not None:
                    run.append(",\n  " + text)
                    before = ns
                    continue
                if piece is not None:
                    if run:
                        pieces.append("".join(run))
                        run = []
                    pieces.append(((j, ts, ns, lts[j], piece[0], wires[j], ifs[j], before, fcss[j]), *piece[1:]))
                    before = ns
                    continue
            data = bytes(blk.buf[offs[j]:offs[j] + caps[j]])
            text, tcp, feed, splice = _per_packet(blk.first + j, ts, ns, lts[j], data, wires[j], ifs[j], fcss[j],
                                                  first_ns, before, lenient, own)
            if text is None or tcp:
                if run:
                    pieces.append("".join(run))
                    run = []
                left: _Left = (j, ts, ns, lts[j], data, wires[j], ifs[j], before, fcss[j])
                pieces.append(left if text is None else (left, ",\n  " + text, feed, splice))
            else:
                run.append(",\n  " + text)
            before = ns
    if run:
        pieces.append("".join(run))
    return blk.first, pieces


def _starts(nss: list[int], before: int, first_ns: int, first: int, caps: list[int]) -> list[str] | None:
    """:func:`~rdmalab.capture.tsjson.frame_starts` of a block's frames (their times ``nss``, the frame before the
    first at ``before``, numbered from ``first``, whole Ethernet frames of ``caps`` octets: what the templates
    write), or None where a time (theirs, the one before or the first) is before 1970 or past what int64
    nanoseconds hold (2262: a time a capture's record can hold), each one's made by the templates as it is
    written."""
    if not nss or min(*nss, before, first_ns) < 0 or max(*nss, before, first_ns) > NS_MAX:
        return None
    ns = np.array(nss, dtype=np.int64)
    prev = np.empty_like(ns)
    prev[0] = before
    prev[1:] = ns[:-1]
    return frame_starts(ns, prev, first_ns, np.arange(first, first + len(nss), dtype=np.int64),
                        np.array(caps, dtype=np.int64))


class _Replay:
    """An iWARP tracker for :func:`~rdmalab.capture.reader.decode_record` that gives, for the one segment
    it decodes, what the real tracker gave when fed it (its PDUs or its error, and ``follows``)."""

    __slots__ = ("err", "following", "pdus")

    def __init__(self, pdus: list[Packet], err: Exception | None, following: bool) -> None:
        self.pdus, self.err, self.following = pdus, err, following

    def process(self, _frame: int, _pkt: Packet) -> list[Packet]:
        if self.err is not None:
            raise self.err
        return self.pdus

    def follows(self, _pkt: Packet) -> bool:
        return self.following


def _fed(tracker: Any, frame: int, feed: _Feed, payload: bytes) -> _Replay:
    """Feed ``tracker`` the TCP segment ``feed`` (frame ``frame``, its payload ``payload``), as
    :func:`~rdmalab.capture.reader.decode_record` would: what it gave (:class:`_Replay`)."""
    src, sport, dst, dport, seq, flags, wire = feed[0]
    pdus: list[Packet] = []
    err: Exception | None = None
    try:
        pdus = list(tracker.process_segment(frame, src, sport, dst, dport, seq, flags, payload, wire))
    except Exception as e:  # noqa: BLE001 - given to decode_record, which reports or raises it
        err = e
    return _Replay(pdus, err, tracker.follows_segment(src, sport, dst, dport))


def _tcp_text(tracker: Any, frame: int, data: bytes, text: str, feed: _Feed | None,
              splice: _Splice | None) -> tuple[str | None, Any]:
    """The JSON of a TCP segment (frame ``frame``, record ``data``) from what its worker sent (:data:`_LeftTcp`),
    the segment fed to ``tracker`` (None: no iWARP) as :func:`~rdmalab.capture.reader.decode_record` feeds
    it; or (None, the tracker to decode the frame again with, per packet: one that gives what the real one
    gave, once it has been fed).

    A segment without payload: the tracker completes no PDU in it, and its text is its worker's unless the
    tracker fails on it.  With a payload the worker's text has neither ``data`` nor PDUs: the PDUs the
    tracker completes in it are put in (:func:`_spliced`), none where the tracker reads the payload as
    iWARP's, else the payload as ``data`` (``CapturedPacket.tcp_data``)."""
    if feed is None:  # (no TCP header: the tracker gives no PDU and does not follow it)
        return (text, None) if splice is None else (None, tracker)
    _seg, at, length, own = feed
    payload = (data[at:at + length] if own is None else own) if length else b""
    got = _fed(tracker, frame, feed, payload) if tracker is not None else None
    if got is not None and got.err is not None:
        return None, got
    if not length:
        return text, None
    if splice is None:
        return None, got
    pdus = got.pdus if got is not None else []
    new = _spliced(text, splice, pdus, payload if not pdus and (got is None or not got.following) else None)
    return (new, None) if new is not None else (None, got)


#: where a frame's layers begin in the text _frame_text writes: a string value holds no newline (_quote
#: escapes it), so this is found exactly once per frame
_LAYERS_START = '\n      "layers": {' + _LAYERS_NL + '"frame": {'


def _with_meta(text: str, meta: FrameMeta, frame: int) -> tuple[str, int]:
    """Frames ``frame``, ``frame + 1``, ... as _frame_text wrote them (``text``, made without their
    pcapng fields) with them; and the number of the frame after the last."""
    gots = [meta.of(frame + k) for k in range(text.count(_LAYERS_START))]
    if gots and all(g is gots[0] for g in gots) and "frame.comment" not in gots[0]:  # (one interface, no comments)
        head = _head_of(gots[0])[1]
        return (text.replace(_LAYERS_START, _LAYERS_START + head) if head else text), frame + len(gots)
    parts = text.split(_LAYERS_START)
    out = [parts[0]]
    for got, rest in zip(gots, parts[1:], strict=True):
        head = '\n      "layers": {' + _LAYERS_NL
        if "frame.comment" in got:
            body: list[str] = []
            _dump(_comment_layer(got["frame.comment"]), _LAYERS_NL, body)
            head += '"pkt_comment": ' + "".join(body) + "," + _LAYERS_NL
        head += '"frame": {' + _head_of(got)[1]
        out.append(head)
        out.append(rest)
    return "".join(out), frame + len(gots)


def _json_pieces(first: int, t0: int, pieces: list[str | _Left | _LeftTcp], out: list[str], tracker: Any,
                 lenient: bool, meta: FrameMeta | None, last: tuple[int, int] | None,
                 analysis: Any = None) -> tuple[int, int] | None:
    """For :func:`iter_json_file`: the text of the frames of a block (from frame ``first``) that a worker
    sent as ``pieces`` (:func:`_json_block`) appended to ``out``, each frame after ``",\\n  "``: the workers'
    text with the pcapng fields of ``meta`` put in, the frames left decoded here, in order, each TCP segment
    fed to ``tracker`` (:func:`_tcp_text`).  ``last``: the number and time (ns) of the last frame
    decoded here, before the block and (returned) after it.  ``analysis``: the ``tcp.analysis`` members
    (:meth:`~rdmalab.capture.columnar_summary.AnalysisFeed.json_frame`) put into the text of each frame
    finished or decoded here (the TCP segments, which have them), one frame's text at a time."""
    run: list[str] = []  # the workers' text of consecutive frames, from frame run_at (pcapng fields to add)
    run_at = nxt = first  # nxt: the number of the frame after the last one sent as a tuple
    for piece in pieces:
        if isinstance(piece, str):
            if not run:
                run_at = nxt
            run.append(piece)
            continue
        if len(piece) == 4:  # a TCP segment: the worker's text, changed or not, or decoded here
            left, text, feed, splice = piece
            j, data = left[0], left[4]
            nxt = first + j + 1
            new, got = _tcp_text(tracker, first + j, data, text, feed, splice)
            if new is not None:
                if analysis is not None:
                    new = analysis.json_frame(first + j, new)
                if not run:
                    run_at = first + j
                run.append(new)
                continue
        else:
            left, got = piece, tracker
            j = left[0]
            nxt = first + j + 1
        if run:
            out.append("".join(run) if meta is None else _with_meta("".join(run), meta, run_at)[0])
            run = []
        _j, ts, ns, lt, data, wire, iface, before, fcs = left
        cp = decode_record(RawRecord(first + j, ts, lt, data, wire, iface, ns, fcs_len=fcs), lenient=lenient,
                           tracker=got)
        # the time of the frame before, as iter_json takes it (an ERF record's own) when it was decoded here
        p_ns = last[1] if last is not None and last[0] == first + j - 1 else before
        last = (first + j, cp.epoch_ns)
        obj = packet_json(cp, first_ns=t0, prev_ns=p_ns, prev_displayed_ns=p_ns, meta=_meta_of(meta, cp))
        text = ",\n  " + _frame_text(obj)
        out.append(text if analysis is None else analysis.json_frame(first + j, text))
    if run:
        out.append("".join(run) if meta is None else _with_meta("".join(run), meta, run_at)[0])
    return last


def iter_json_file(path: str, *, workers: int, lenient: bool = True, iwarp: bool = True, count: int | None = None,
                   block_bytes: int = 1 << 20, meta: FrameMeta | None = None, analysis: Any = None) -> Iterator[str]:
    """:func:`iter_json` of a whole plain pcap or pcapng file (no filter), its blocks rendered in
    ``workers`` processes (:mod:`rdmalab.capture.blockpool`): the same text, in pieces (``meta``: the
    file's pcapng fields, put into the workers' text here, in frame order).  The TCP segments are fed to
    the iWARP reassembly here, in order, and their text finished here with what it decides (the PDUs
    completed in a segment, or its payload as data: :func:`_tcp_text`).  ``block_bytes``: the file is cut
    into blocks of about that many octets (1 MiB: a block's JSON text is about seven times its octets, and
    several blocks are held at once; with 4 MiB blocks the mixed benchmark's 50,000 frames held 400 MiB
    in this process, with 1 MiB 144 MiB, and took no longer).  ``workers`` 1: the blocks rendered in this
    process, the same way (:func:`_blocks_here`).  ``analysis``: an
    :class:`~rdmalab.capture.columnar_summary.AnalysisFeed` (``json``) that puts the ``tcp.analysis`` member into
    each TCP segment's text as it is finished here (:func:`_json_pieces`); its :meth:`apply_json` is then
    still to be called on each piece given, for a member of another frame (seldom one)."""
    tracker = _load_iwarp_tracker()() if iwarp else None
    yield "[\n"
    started = False
    last: tuple[int, int] | None = None  # the frame number and time (ns) of the last frame decoded here
    blocks = (blocks_in_workers(path, _json_block, (lenient,), workers=workers, block_bytes=block_bytes, count=count,
                                exact_times=True) if workers > 1 else _blocks_here(path, lenient, block_bytes, count))
    for (first, pieces), t0 in blocks:
        out: list[str] = []  # the block's frames, each after ",\n  "
        try:
            with _no_gc():
                last = _json_pieces(first, t0, pieces, out, tracker, lenient, meta, last, analysis)
        except Exception:  # the frames before the error first, as one process writes them
            text = "".join(out)
            if text:
                yield text if started else text[2:]
            raise
        text = "".join(out)
        if text:
            yield text if started else text[2:]  # the first frame has no comma before it
            started = True
    yield "\n]\n" if started else "]\n"


def _blocks_here(path: str, lenient: bool, block_bytes: int,
                 count: int | None) -> Iterator[tuple[tuple[int, list[str | _Left | _LeftTcp]], int]]:
    """What :func:`~rdmalab.capture.blockpool.blocks_in_workers` gives :func:`iter_json_file` of
    :func:`_json_block`, its blocks read by the sequential reader and rendered in this process."""
    t0: int | None = None
    prev: int | None = None
    for blk in record_blocks(path, block_bytes):
        n = len(blk) if count is None else min(len(blk), count - blk.first + 1)
        if n <= 0:
            if count is not None and blk.first > count:
                return
            continue
        nss = [record_ns(ts, ns) for ts, ns in zip(blk.seconds().tolist()[:n], blk.ts_ns.tolist()[:n], strict=True)]
        if t0 is None:
            t0 = nss[0]
        yield _json_block(blk, n, t0, prev, lenient), t0
        prev = nss[-1]
