"""``rdmalab decode``: print the packets of a capture, like tshark.

Only argument handling lives here: the filter language is :mod:`rdmalab.capture.filter`, the
per-packet decoder :mod:`rdmalab.capture.reader`, the fast path for ``-T fields``
:mod:`rdmalab.capture.columnar` and :mod:`rdmalab.capture.fieldtext`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import deque
from typing import Any, TextIO

from rdmalab.cli import Fail, settled

_QUOTES = {"d": b'"', "s": b"'", "n": b""}


def _field_options(opts: list[str]) -> dict[str, Any]:
    """tshark's ``-E`` options: separator, header, quote (occurrence/aggregator accepted)."""
    out: dict[str, Any] = {"separator": b"\t", "header": False, "quote": b"", "occurrence": "a", "aggregator": ","}
    for opt in opts:
        key, eq, val = opt.partition("=")
        if not eq:
            raise Fail(f"-E {opt}: expected NAME=VALUE (separator=, header=y, quote=d, occurrence=f, aggregator=,)")
        if key == "separator":
            special = {"/t": "\t", "/s": " "}
            out["separator"] = special.get(val, val).encode()
        elif key == "header":
            if val not in ("y", "n"):
                raise Fail(f"-E header={val}: must be y or n")
            out["header"] = val == "y"
        elif key == "quote":
            if val not in _QUOTES:
                raise Fail(f"-E quote={val}: must be d (double), s (single) or n (none)")
            out["quote"] = _QUOTES[val]
        elif key == "occurrence":
            if val not in ("f", "l", "a"):  # (tshark's three: print.c output_fields_set_option)
                raise Fail(f"-E occurrence={val}: must be f (first), l (last) or a (all)")
            out["occurrence"] = val
        elif key == "aggregator":
            out["aggregator"] = {"/s": " ", "/t": "\t"}.get(val, val)
        elif key == "bom":
            continue
        else:
            raise Fail(f"-E {key}: unknown option (separator, header, quote, occurrence, aggregator)")
    return out


def _compile(expr: str | None) -> Any:
    if not expr:
        return None
    from rdmalab.capture.filter import FilterError, compile_filter  # lazy: keeps `rdmalab --help` fast

    try:
        return compile_filter(expr)
    except FilterError as err:
        raise Fail(str(err)) from None


class _Flushed:
    """Standard output for ``-l``: what is written is flushed at once (tcpdump's and tshark's
    ``-l``), so that a reader at the other end of a pipe sees each packet as it is decoded."""

    def __init__(self, out: Any) -> None:
        self._out = out
        buf = getattr(out, "buffer", None)
        self.buffer = _Flushed(buf) if buf is not None else None

    def write(self, text: Any) -> int:
        n: int = self._out.write(text)
        self._out.flush()
        return n

    def flush(self) -> None:
        self._out.flush()


def _write_bytes(out: TextIO, data: bytes) -> None:
    buf = getattr(out, "buffer", None)
    if buf is not None:
        out.flush()
        buf.write(data)
    else:
        out.write(data.decode())


def _write_pieces(out: TextIO, pieces: list[bytes | memoryview]) -> None:
    """``pieces`` written in turn, as :func:`_write_bytes` writes them joined, but to a file descriptor
    without joining them first (``os.writev``, ``IOV_MAX`` at a time: a copy of the text less)."""
    buf = getattr(out, "buffer", None)
    try:
        fd = buf.fileno() if buf is not None else -1
    except (AttributeError, OSError, ValueError):  # (a stream without a descriptor: a test's)
        fd = -1
    if fd < 0 or not hasattr(os, "writev"):
        _write_bytes(out, b"".join(pieces))
        return
    out.flush()
    assert buf is not None
    buf.flush()
    views: list[bytes | memoryview] = [p for p in pieces if p]
    limit = os.sysconf("SC_IOV_MAX") if "SC_IOV_MAX" in os.sysconf_names else 1024
    while views:
        batch = views[:limit]
        n = os.writev(fd, batch)
        done = 0
        while done < len(batch) and n >= len(batch[done]):
            n -= len(batch[done])
            done += 1
        views = views[done:]
        if n:  # (a write cut short in a piece: its rest next)
            views[0] = memoryview(views[0])[n:]


def run_fields(path: str, args: argparse.Namespace, flt: Any, out: TextIO) -> int:
    """``-T fields``: columnar when every field (and the filter's) is a column, else per packet."""
    from rdmalab.capture.columnar import COLUMN_NAMES, columns_answer  # lazy: keeps `rdmalab --help` fast
    from rdmalab.capture.filter import (  # lazy: `rdmalab --help` fast
        ABSOLUTE_TIME,
        EITHER_FIELDS,
        RELATIVE_TIMES,
        known_fields,
    )
    from rdmalab.capture.pcapio import FRAME_META_FIELDS, is_pcapng_file  # lazy: keeps `rdmalab --help` fast

    names: list[str] = args.fields or []
    if not names:
        raise Fail("-T fields needs at least one -e FIELD (e.g. -e ip.src -e infiniband.bth.psn)")
    unknown = [n for n in names if n not in COLUMN_NAMES and n not in known_fields() and n not in RELATIVE_TIMES]
    if unknown:
        raise Fail(f"-e {unknown[0]}: not a field rdmalab knows" + (f" (also {', '.join(unknown[1:])})"
                                                                     if unknown[1:] else ""))
    opts = _field_options(args.field_opts or [])
    if opts["header"]:
        _write_bytes(out, opts["separator"].join(n.encode() for n in names) + b"\n")
    wanted = {part for n in set(names) - set(RELATIVE_TIMES) for part in EITHER_FIELDS.get(n, (n,))}
    if ABSOLUTE_TIME in wanted:  # (its text is made from frame.time_ns)
        wanted = (wanted - {ABSOLUTE_TIME}) | {"frame.time_ns"}
    # (the columns join ip.addr's two values with a comma: another aggregator or one occurrence per packet)
    either = [n for n in names if n in EITHER_FIELDS]
    plain_either = not either or (opts["occurrence"] == "a" and opts["aggregator"] == ",")
    if not wanted.isdisjoint(FRAME_META_FIELDS) and (flt is None or flt.fields.isdisjoint(FRAME_META_FIELDS)) \
            and is_pcapng_file(path):  # (written beside the columns; an ERF record's port needs its header)
        wanted -= set(FRAME_META_FIELDS)
    if wanted <= COLUMN_NAMES and (flt is None or columns_answer(flt)) and plain_either and not args.no_columnar \
            and not (args.no_iwarp and any(
            n.startswith(("iwarp", "rdmalab.crc32c", "rdmalab.pdus")) for n in wanted)):
        return _fields_columnar(path, names, flt, args, opts, out)
    return _fields_objects(path, names, flt, args, opts, out)


def _fields_columnar(path: str, names: list[str], flt: Any, args: argparse.Namespace, opts: dict[str, Any],
                     out: TextIO) -> int:
    from rdmalab.capture.fieldtext import field_text  # lazy: keeps `rdmalab --help` fast

    sep, quote = opts["separator"], opts["quote"]
    verify = any(n.startswith("rdmalab.icrc") for n in names) or (
        flt is not None and any(n.startswith("rdmalab.icrc") for n in flt.fields))
    for text in field_text(path, names, filter_expr=args.filter, count=args.count, separator=sep, quote=quote,
                           verify_icrc=verify, workers=args.workers, progress=sys.stderr.isatty(),
                           occurrence=opts["occurrence"], aggregator=opts["aggregator"]):
        _write_bytes(out, text)
    return 0


def _fields_objects(path: str, names: list[str], flt: Any, args: argparse.Namespace, opts: dict[str, Any],
                    out: TextIO) -> int:
    from rdmalab.capture import read  # lazy: keeps `rdmalab --help` fast
    from rdmalab.capture.fieldtext import (  # lazy: `rdmalab --help` fast
        absolute_text,
        epoch_text,
        field_cell,
        pick_occurrence,
        relative_text,
    )
    from rdmalab.capture.filter import ABSOLUTE_TIME, EITHER_FIELDS, either_values  # lazy: `rdmalab --help` fast
    from rdmalab.capture.render import TcpWindowScaling  # lazy: keeps `rdmalab --help` fast

    sep = opts["separator"].decode()
    q = opts["quote"].decode()
    occ = opts["occurrence"]
    windows = TcpWindowScaling()  # tcp.window_size: every frame's handshake, in order
    clock = _clock(flt)
    conversations = _conversations(flt, names)
    meta = _meta(path, flt, names)
    first: int | None = None  # the relative times (fieldtext.Clock counts them the same way over columns)
    before = 0
    shown: int | None = None
    for cp in read(path, lenient=not args.strict, iwarp=not args.no_iwarp, count=args.count):
        ns = cp.epoch_ns
        if first is None:
            first = before = ns
        fields = _filter_fields(flt, clock, cp, windows, conversations, meta)
        _asked(fields, cp, names)
        times = {"frame.time_relative": ns - first, "frame.time_delta": ns - before}
        before = ns
        if flt is not None and not flt(fields):
            continue
        times["frame.time_delta_displayed"] = 0 if shown is None else ns - shown
        shown = ns
        cells = []
        for n in names:
            if n in times:
                cells.append(f"{q}{relative_text(times[n])}{q}")
                continue
            if n == ABSOLUTE_TIME:
                cells.append(f"{q}{absolute_text(ns)}{q}")
                continue
            v = pick_occurrence(either_values(fields, n) if n in EITHER_FIELDS else fields.get(n), occ)
            text = field_cell(n, v)
            if n == "frame.time_epoch":  # exact nanoseconds (a record's, an ERF record's own), finer than a float
                text = epoch_text(cp.epoch_ns)
            if isinstance(v, list):
                text = text.replace(",", opts["aggregator"])
            cells.append(f"{q}{text}{q}" if text else "")  # tshark quotes values, not absent fields
        out.write(sep.join(cells) + "\n")
    return 0


def run_json(path: str, args: argparse.Namespace, flt: Any, out: TextIO) -> int:
    """``-T json``: tshark's layout (an array of ``{"_index", "_type", "_score", "_source": {"layers"}}``)."""
    from rdmalab.capture import read  # lazy: keeps `rdmalab --help` fast
    from rdmalab.capture.blockpool import (  # lazy: keeps `rdmalab --help` fast
        JSON_PARALLEL_MIN_BYTES,
        default_workers,
        parallel_capture,
    )
    from rdmalab.capture.columnar_summary import AnalysisFeed  # lazy: keeps `rdmalab --help` fast
    from rdmalab.capture.json_blocks import iter_json_file  # lazy: keeps `rdmalab --help` fast
    from rdmalab.capture.pcapio import FrameMeta  # lazy: keeps `rdmalab --help` fast
    from rdmalab.capture.render import TcpWindowScaling  # lazy: keeps `rdmalab --help` fast
    from rdmalab.capture.tcp_analysis import insert_json  # lazy: keeps `rdmalab --help` fast
    from rdmalab.capture.tsjson import iter_json  # lazy: keeps `rdmalab --help` fast

    workers = default_workers() if args.workers is None else args.workers
    # the pcapng fields (comments, sections, interfaces: tshark's pkt_comment layer and the frame layer's
    # first keys) are read from the file's blocks a second time (a stream's as its reader reads them)
    meta = _meta(path, flt) or FrameMeta(path)
    if flt is None and parallel_capture(path):
        # in blocks, in workers for a file big enough, else here (tshark's tcp.analysis: the analysis follows
        # the file, read again here, beside them)
        feed = AnalysisFeed(json=True)
        feed.read_from(path, 4 << 20)
        big = os.path.getsize(path) >= JSON_PARALLEL_MIN_BYTES
        try:
            for piece in iter_json_file(path, workers=workers if big else 1, lenient=not args.strict,
                                        iwarp=not args.no_iwarp, count=args.count, meta=meta, analysis=feed):
                out.write(feed.apply_json(piece))
        finally:
            feed.close()
        return 0
    if flt is not None and parallel_capture(path) and not args.strict and _columns_filter(flt, args):
        # a filter the columns answer: the frames it shows found first (-T fields -e frame.number, in
        # blocks, in workers), then only those and the TCP segments (the iWARP streams) decoded one by one
        return _json_shown(path, args, flt, meta, out)
    windows = TcpWindowScaling()  # tcp.window_size for the filter: every frame, in order
    clock = _clock(flt)
    conversations = _conversations(flt)
    keep = None if flt is None else (lambda cp: flt(_filter_fields(flt, clock, cp, windows, conversations, meta)))
    packets = read(path, lenient=not args.strict, iwarp=not args.no_iwarp, count=args.count)
    seq_ack: deque[tuple[int, list[str]]] = deque()  # (frame, its tcp.analysis member), read before its text
    for piece in iter_json(_analysed(packets, seq_ack), keep, meta):
        out.write(insert_json(piece, seq_ack))
    return 0


def _columns_filter(flt: Any, args: argparse.Namespace) -> bool:
    """Whether ``-T fields -e frame.number`` answers a display filter from the columns, as ``run_fields``
    decides it (its fields all columns, none of the pcapng blocks' fields; iWARP's only with the iWARP
    reassembly on)."""
    from rdmalab.capture.columnar import columns_answer  # lazy: keeps `rdmalab --help` fast
    from rdmalab.capture.pcapio import FRAME_META_FIELDS  # lazy: keeps `rdmalab --help` fast

    fields = set(flt.fields)
    return (columns_answer(flt) and fields.isdisjoint(FRAME_META_FIELDS) and not args.no_columnar
            and not (args.no_iwarp and any(n.startswith(("iwarp", "rdmalab.crc32c", "rdmalab.pdus")) for n in fields)))


class _Ascending:
    """Frame numbers given in ascending order, asked in ascending order (``frame in shown``): read as they are
    asked, so that memory does not grow with the capture."""

    def __init__(self, numbers: Any, source: Any = None) -> None:
        self._numbers, self._source = numbers, source
        self._next: int | None = 0  # (read when first asked: an error reading them comes after the output's start)

    def close(self) -> None:
        """Stop reading the numbers (and their source, whose worker processes end now, not when the
        interpreter ends)."""
        for gen in (self._numbers, self._source):
            if gen is not None and hasattr(gen, "close"):
                gen.close()

    def __contains__(self, frame: int) -> bool:
        while self._next is not None and self._next < frame:  # (frame numbers begin at 1)
            self._next = next(self._numbers, None)
        return self._next == frame


def _shown_and_decoded(path: str, args: argparse.Namespace, flt: Any) -> tuple[_Ascending, Any]:
    """For ``-T json -Y`` and ``-V -Y`` of a file whose filter the columns answer: the frames the filter shows
    (found by the columnar ``-T fields -e frame.number`` path, in worker processes), and the file's frames in
    order, those shown and the TCP segments decoded (:func:`~rdmalab.capture.reader.read_selected`)."""
    from rdmalab.capture.fieldtext import field_text  # lazy: keeps `rdmalab --help` fast
    from rdmalab.capture.reader import read_selected  # lazy: keeps `rdmalab --help` fast

    verify = any(n.startswith("rdmalab.icrc") for n in flt.fields)  # (as run_fields: the ICRC checked if asked)
    texts = field_text(path, ["frame.number"], filter_expr=args.filter, count=args.count, verify_icrc=verify,
                       workers=args.workers, progress=False)
    numbers = (int(x) for text in texts for x in text.split())
    shown = _Ascending(numbers, texts)
    return shown, read_selected(path, shown, lenient=not args.strict, iwarp=not args.no_iwarp, count=args.count)


def _trees_shown(path: str, args: argparse.Namespace, flt: Any, out: TextIO) -> int:
    """``-V -Y FILTER`` of a file whose filter the columns answer (:func:`_shown_and_decoded`): each frame shown
    written as the per-packet path writes it, tshark's SEQ/ACK analysis from the analysis that follows the file
    beside (as ``-V`` without a filter)."""
    from rdmalab.capture.columnar_summary import AnalysisFeed  # lazy: keeps `rdmalab --help` fast
    from rdmalab.capture.render import frame_tree  # lazy: keeps `rdmalab --help` fast

    shown, packets = _shown_and_decoded(path, args, flt)
    feed = AnalysisFeed(trees=True, later=True)
    feed.read_from(path, 1 << 20)
    try:
        for cp in packets:
            if cp.frame_number in shown:
                _write_bytes(out, feed.apply_tree(cp.frame_number, frame_tree(cp).encode()) + b"\n\n")
    finally:
        shown.close()
        feed.close()
    return 0


def _json_shown(path: str, args: argparse.Namespace, flt: Any, meta: Any, out: TextIO) -> int:
    """``-T json -Y FILTER`` of a file whose filter the columns answer (:func:`_shown_and_decoded`): each
    frame shown written as the per-packet path writes it, tshark's ``tcp.analysis`` members from the analysis
    that follows the file beside (as without a filter).  The same text as the per-packet path: what it costs
    is the frames shown and the TCP ones."""
    from rdmalab.capture.columnar_summary import AnalysisFeed  # lazy: keeps `rdmalab --help` fast
    from rdmalab.capture.tsjson import iter_json  # lazy: keeps `rdmalab --help` fast

    shown, packets = _shown_and_decoded(path, args, flt)
    feed = AnalysisFeed(json=True, later=True)
    feed.read_from(path, 4 << 20)
    try:
        for piece in iter_json(packets, lambda cp: cp.frame_number in shown, meta):
            out.write(feed.apply_json(piece))
    finally:
        shown.close()
        feed.close()
    return 0


def _analysed(packets: Any, seq_ack: Any) -> Any:
    """The frames, each TCP segment's ``tcp.analysis`` member (-T json) noted in ``seq_ack`` as it passes
    (the analysis fed every TCP segment, and an ICMP error's quote, in order, as decode -V feeds it)."""
    from rdmalab.capture.fields import frame_fields  # lazy: keeps `rdmalab --help` fast
    from rdmalab.capture.render import Conversations, TcpWindowScaling  # lazy: the same
    from rdmalab.capture.tcp_analysis import fields_json  # lazy: the same
    from rdmalab.wire.net import TCP  # lazy: the same

    conversations = Conversations(analysis=True)
    windows = TcpWindowScaling()
    for cp in packets:
        if cp.packet.get(TCP) is not None or cp.packet.quoted is not None:
            fields = frame_fields(cp, windows=windows)
            conversations.add(fields, cp.packet, windows)
            lines = fields_json(fields)
            if lines:
                seq_ack.append((cp.frame_number, lines))
        yield cp


def _filter_fields(flt: Any, clock: Any, cp: Any, windows: Any, conversations: Any = None,
                   meta: Any = None) -> dict[str, Any]:
    """A frame's fields as a display filter reads them (:func:`rdmalab.capture.frame_fields`), with
    the times relative to other frames (``clock``, :func:`_clock`), the conversation numbers
    (``conversations``, :func:`_conversations`) and the frame's bytes when it asks."""
    from rdmalab.capture.fields import (  # lazy: keeps `rdmalab --help` fast
        IWARP_BYTE_PROTOCOLS,
        frame_fields,
        pdu_bytes,
        protocol_bytes,
    )
    from rdmalab.capture.filter import FRAME_BYTES, PROTOCOL_BYTES  # lazy: keeps `rdmalab --help` fast

    fields: dict[str, Any] = frame_fields(cp, windows=windows)
    if clock is not None:
        clock.stamp(fields, cp.epoch_ns)
    if conversations is not None:
        conversations.add(fields, cp.packet, windows)  # (windows: fed this frame by frame_fields)
    if meta is not None:
        meta.add(fields, cp.frame_number)
    if flt is not None and flt.needs_frame:
        fields[FRAME_BYTES] = cp.frame_bytes
    if flt is not None and flt.byte_protocols:
        fields[PROTOCOL_BYTES] = {p: pdu_bytes(cp, p) if p in IWARP_BYTE_PROTOCOLS else protocol_bytes(cp.packet, p)
                                  for p in flt.byte_protocols}
    if flt is not None:
        _asked(fields, cp, flt.fields)
    return fields


def _asked(fields: dict[str, Any], cp: Any, names: Any) -> None:
    """Put the per-packet fields only computed when asked for (``filter.ASKED_FIELDS`` but the
    conversations') among ``names`` into a frame's field dictionary."""
    from rdmalab.capture.tsjson import frame_data, frame_protocols  # lazy: keeps `rdmalab --help` fast

    if "frame.protocols" in names:
        fields["frame.protocols"] = frame_protocols(cp)
    if not {"data", "data.data", "data.len"}.isdisjoint(names):
        data = frame_data(cp)
        if data:
            fields["data.data"] = [d.hex() for d in data] if len(data) > 1 else data[0].hex()
            fields["data.len"] = [len(d) for d in data] if len(data) > 1 else len(data[0])
    if "tcp.payload" in names:
        q = cp.packet.quoted  # (an ICMP error's quoted segment: its payload, as tshark's)
        seg = cp.packet if cp.packet.encap == "tcp" else q if q is not None and q.encap == "tcp" else None
        if seg is not None and seg.payload_length:
            fields["tcp.payload"] = bytes(seg.payload).hex()


def _write(path: str, args: argparse.Namespace, flt: Any) -> int:
    """``-w FILE``: the packets the filter shows (all without one) copied into a new capture file, as
    tshark -w (pcapng unless -F pcap); nothing printed."""
    from rdmalab.capture.reader import write_shown  # lazy: keeps `rdmalab --help` fast
    from rdmalab.capture.render import TcpWindowScaling  # lazy: keeps `rdmalab --help` fast

    keep = None
    if flt is not None:
        windows, clock, conversations, meta = TcpWindowScaling(), _clock(flt), _conversations(flt), _meta(path, flt)
        keep = lambda cp: flt(_filter_fields(flt, clock, cp, windows, conversations, meta))  # noqa: E731
    dest = sys.stdout.buffer if args.write == "-" else args.write
    if args.write != "-" and os.path.abspath(args.write) == os.path.abspath(path):
        raise Fail(f"-w {args.write}: that is the file being read")
    try:
        write_shown(path, dest, keep=keep, format=args.out_format or "pcapng", count=args.count,
                    lenient=not args.strict, iwarp=not args.no_iwarp)
    except OSError as err:
        if err.filename is None or os.fspath(err.filename) != args.write:
            raise
        raise Fail(f"-w {args.write}: cannot write the file there ({err.strerror})") from None
    return 0


def _meta(path: str, flt: Any, names: Any = ()) -> Any:
    """A :class:`~rdmalab.capture.pcapio.FrameMeta` of the file when the filter or the ``-e`` fields read
    a pcapng block's fields (frame.comment, frame.interface_*, frame.section_number), else None."""
    from rdmalab.capture.pcapio import FRAME_META_FIELDS, FrameMeta  # lazy: keeps `rdmalab --help` fast

    wanted = set(names) | (set(flt.fields) if flt is not None else set())
    return FrameMeta(path) if wanted & set(FRAME_META_FIELDS) else None


def _conversations(flt: Any, names: Any = ()) -> Any:
    """A :class:`~rdmalab.capture.render.Conversations` when the filter or the ``-e`` fields read
    tcp.stream or udp.stream (fed every frame, in order), with the TCP analysis when they read one of
    its fields (:data:`rdmalab.capture.tcp_analysis.ANALYSIS_FIELDS`), else None."""
    from rdmalab.capture.render import Conversations  # lazy: keeps `rdmalab --help` fast
    from rdmalab.capture.tcp_analysis import ANALYSIS_FIELDS  # lazy: the same

    wanted = set(names) | (set(flt.fields) if flt is not None else set())
    analysis = not wanted.isdisjoint(ANALYSIS_FIELDS)  # (each segment's tcp.stream as well)
    if analysis or wanted & {"tcp.stream", "udp.stream", "tcp.seq", "tcp.ack", "tcp.nxtseq"}:
        return Conversations(analysis=analysis)
    return None


def _clock(flt: Any) -> Any:
    """A :class:`~rdmalab.capture.filter.FrameClock` when the filter reads frame.time_relative or
    frame.time_delta (fed every frame, in order), else None."""
    from rdmalab.capture.filter import FILTER_TIMES, FrameClock  # lazy: keeps `rdmalab --help` fast

    return FrameClock() if flt is not None and not flt.fields.isdisjoint(FILTER_TIMES) else None


def _columns_answer(flt: Any) -> bool:
    """Whether every field of a compiled filter is a column the summary lines can filter on (the
    conversations' and iWARP's not both: each follows the capture in its own pass)."""
    from rdmalab.capture.columnar import (  # lazy: keeps `rdmalab --help` fast
        columns_answer,
        wants_conversations,
        wants_iwarp,
    )

    return columns_answer(flt) and not (wants_conversations(flt.fields) and wants_iwarp(flt.fields))


def run_decode(args: argparse.Namespace, out: TextIO) -> int:
    # The decoders use numpy but no linear algebra: OpenBLAS's thread pool, which numpy starts when it
    # is imported, would only spin (about 70 ms of CPU time on 2 cores, for nothing).  Set before the
    # first import of numpy in this process (the command's own), unless the user set it.
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    path = args.file or args.read
    if path is not None and args.interface is not None:
        raise Fail("decode reads a capture file (-r) or an interface (-i), not both")
    if path is None and args.interface is None:
        raise Fail("decode needs a capture file or an interface: rdmalab decode -r FILE (- for standard input), "
                   "or rdmalab decode -i IFACE")
    if args.interface is None:
        live_only = [o for o, v in (("-f", args.capture_filter), ("-a", args.autostop)) if v]
        if live_only:
            raise Fail(f"{', '.join(live_only)}: for a live capture; give it with -i IFACE")
    if args.count is not None and args.count <= 0:
        raise Fail(f"-c {args.count}: the packet count must be a positive number")
    flt = _compile(args.filter)
    fmt = args.format
    if fmt != "fields" and args.fields:
        raise Fail("-e FIELD needs -T fields")
    if args.write is not None:
        shown = [o for o, v in (("-V", args.verbose), ("-x", args.hexdump), ("-P", args.print_summary),
                                (f"-T {fmt}", fmt != "text")) if v]
        if shown:
            raise Fail(f"-w {args.write} writes the packets to a file; {', '.join(shown)} prints them: give one or "
                       "the other")
        if args.interface is not None:
            raise Fail("-w with -i: rdmalab capture -i IFACE -w FILE writes a live capture (with -f, -a, -b)")
    elif args.out_format is not None:
        raise Fail(f"-F {args.out_format}: the format of the file -w writes; give -w FILE")
    if fmt != "text" and (args.hexdump or args.print_summary):
        raise Fail(f"{'-x' if args.hexdump else '-P'}: for the text output (summary lines, -V); "
                   f"-T {fmt} has its own layout")
    if args.line_flush:
        out = _Flushed(out)  # type: ignore[assignment]
    if args.interface is not None:
        return _decode_live(args, flt, out)
    return _decode(path, args, flt, out)


def _decode_live(args: argparse.Namespace, flt: Any, out: TextIO) -> int:
    """``decode -i IFACE``: the capture is written as pcap into a pipe, which the decoder reads as a
    stream (:class:`rdmalab.capture.sniff.PcapPipe`), as tshark reads what dumpcap writes."""
    from rdmalab.capture.sniff import LiveCapture, PcapPipe, Stop, parse_conditions  # lazy: `rdmalab --help` fast

    stop = parse_conditions(args.autostop or [], "-a", ("duration", "packets"))
    count = args.count
    if "packets" in stop:
        count = int(stop["packets"]) if count is None else min(count, int(stop["packets"]))
    with LiveCapture(args.interface, bpf=args.capture_filter, promisc=not args.no_promisc) as cap:
        if not args.quiet:
            print(f"Capturing on '{args.interface}'", file=sys.stderr, flush=True)  # as tshark: the socket is open
        with PcapPipe(cap, Stop(count, stop.get("duration"))) as pipe:
            try:
                rc = _decode(pipe.path, args, flt, out, shown=f"interface {args.interface}")
            except KeyboardInterrupt:
                rc = 0
        _got, dropped = cap.stats()
    if not args.quiet:
        print(f"{cap.received} packet{'s' if cap.received != 1 else ''} captured"
              + (f" ({dropped} dropped by the kernel: its buffer was full)" if dropped else ""), file=sys.stderr)
    return rc


def _decode(path: str, args: argparse.Namespace, flt: Any, out: TextIO, shown: str | None = None) -> int:
    from rdmalab.capture import read  # lazy: keeps `rdmalab --help` fast
    from rdmalab.capture.fields import frame_fields  # lazy: keeps `rdmalab --help` fast
    from rdmalab.capture.render import (  # lazy: keeps `rdmalab --help` fast
        Conversations,
        EchoPairs,
        TcpWindowScaling,
        TimeColumn,
        frame_hex,
        frame_tree,
        info,
        summary_line,
        with_analysis_tree,
        with_info_prefix,
    )
    from rdmalab.capture.tcp_analysis import fields_prefix, fields_tree  # lazy: keeps `rdmalab --help` fast
    from rdmalab.wire.errors import DecodeError  # lazy: keeps `rdmalab --help` fast
    from rdmalab.wire.net import TCP  # lazy: keeps `rdmalab --help` fast

    settled()  # (the modules above are most of what every decoder imports)
    fmt = args.format
    try:
        if args.write is not None:
            return _write(path, args, flt)
        if fmt == "fields":
            return run_fields(path, args, flt, out)
        if fmt == "json":
            return run_json(path, args, flt, out)
        hexdump = args.hexdump
        # the summary line: alone by default; with -V or -x only when asked (-P), as tshark
        summaries = args.print_summary or not (args.verbose or hexdump)
        timed = args.time_format != "r"  # another time column than seconds since the first frame (-t)
        if (not args.verbose and not hexdump and not timed and not args.no_columnar
                and (flt is None or _columns_answer(flt))):
            from rdmalab.capture.columnar_summary import summary_bytes  # lazy: keeps `rdmalab --help` fast

            for text in summary_bytes(path, count=args.count, flt=flt, filter_expr=args.filter,
                                      lenient=not args.strict, iwarp=not args.no_iwarp, workers=args.workers):
                _write_bytes(out, text)
            return 0
        if (args.verbose and not hexdump and not args.print_summary and not args.no_columnar and flt is None
                and not args.strict and not args.line_flush and shown is None):
            from rdmalab.capture.tree_templates import tree_pieces  # lazy: only -V needs it; --help fast

            for trees in tree_pieces(path, iwarp=not args.no_iwarp, count=args.count, workers=args.workers):
                _write_pieces(out, trees)
            return 0
        if (args.verbose and not hexdump and not args.print_summary and not args.no_columnar and flt is not None
                and not args.strict and not args.line_flush and shown is None and _columns_filter(flt, args)):
            from rdmalab.capture.blockpool import parallel_capture  # lazy: keeps `rdmalab --help` fast

            if parallel_capture(path):  # (a file, read again by the analysis beside)
                return _trees_shown(path, args, flt, out)
        t0: int | None = None
        write = out.write
        windows = TcpWindowScaling()  # follows every frame, filtered out or not, as tshark does
        echoes = EchoPairs()  # the same
        clock = _clock(flt)  # the same (frame.time_delta in a filter: since the frame read before)
        conversations = _conversations(flt)  # the same (tcp.stream counts every conversation)
        # the TCP analysis, for the flags in front of the lines' Info (the filter's when it follows one)
        flagged = None
        if summaries or args.verbose:  # (-V: the SEQ/ACK analysis tree, its values too)
            flagged = conversations
            if conversations is None or conversations.analysis is None:
                flagged = Conversations(analysis=True)
                assert flagged.analysis is not None
                flagged.analysis.values = bool(args.verbose)  # (else the flags alone)
        meta = _meta(path, flt)
        times = TimeColumn(args.time_format) if timed else None  # the same (-t d: since the frame read before)
        for cp in read(path, lenient=not args.strict, iwarp=not args.no_iwarp, count=args.count):
            if t0 is None:
                t0 = cp.epoch_ns
            if times is not None:
                times.seen(cp.epoch_ns)
            request_in = echoes.note(cp.frame_number, cp.packet)
            fields = _filter_fields(flt, clock, cp, windows, conversations, meta) if flt is not None else None
            prefix = ""
            seq_ack: list[str] = []
            if flagged is not None and (cp.packet.get(TCP) is not None or cp.packet.quoted is not None):
                # (an ICMP error's quote counts in the TCP conversations' numbers, as on the columnar path)
                got = fields
                if flagged is not conversations or got is None:
                    got = frame_fields(cp, windows=windows)
                    flagged.add(got, cp.packet, windows)
                prefix = fields_prefix(got)
                seq_ack = fields_tree(got) if args.verbose else []
            tcp_info = None
            if summaries and cp.packet.encap == "tcp" and not cp.pdus:
                tcp_info = info(cp, windows)  # (its window scaled in order; -t: the time put in once shown)
            elif fields is None and summaries:  # (-V shows raw windows; a filter's fields took the window)
                windows.window(cp.packet)
            if flt is not None and fields is not None and not flt(fields):
                continue
            if summaries:
                line = summary_line(cp, t0, request_in=request_in, text=tcp_info,
                                    when=times.text(cp.digits) if times is not None else None)
                if prefix:
                    line = with_info_prefix(line, prefix)
                write(line)
                write("\n")
            if args.verbose:
                write(with_analysis_tree(frame_tree(cp), seq_ack))
                write("\n\n")
            elif hexdump and summaries:
                write("\n")
            if hexdump:  # the bytes, then a blank line (tshark -x; an empty frame: the blank line alone)
                dump = frame_hex(cp)
                write(dump + "\n\n" if dump else "\n")
    except DecodeError as err:
        out.flush()
        frame = getattr(err, "frame_number", "?")
        where = shown or ("standard input" if path == "-" else path)
        raise Fail(f"{where}: frame {frame}: {err} (run without --strict to report bad frames and go on)") from None
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    d = sub.add_parser("decode", help="print the packets of a pcap/pcapng file, pipe or interface (like tshark)",
                       description="Print one summary line per packet, the full tree (-V), JSON (-T json), or "
                                   "chosen fields (-T fields -e FIELD ...). Captures may be gzip-compressed, "
                                   "read from standard input (-r -) or a FIFO, or captured live (-i IFACE).")
    d.add_argument("file", nargs="?", help="capture file (or use -r)")
    d.add_argument("-r", "--read", metavar="FILE",
                   help="capture file to read; - reads standard input (tcpdump -w - | rdmalab decode -r -), and "
                        "a FIFO is read as it fills: each packet is printed as it arrives")
    d.add_argument("-l", dest="line_flush", action="store_true",
                   help="flush standard output after each packet (as tcpdump's and tshark's -l; packets that "
                        "arrive together are written together, then flushed), for a reader at the other end of a "
                        "pipe")
    live = d.add_argument_group("live capture (as tshark -i; root or CAP_NET_RAW)")
    live.add_argument("-i", dest="interface", metavar="IFACE",
                      help="capture on this interface (any: all of them) and print the packets as they arrive (Ctrl-C stops)")
    live.add_argument("-f", dest="capture_filter", metavar="FILTER",
                      help="with -i: capture filter in tcpdump's language (pcap-filter(7)), e.g. 'udp port 4791'")
    live.add_argument("-a", dest="autostop", action="append", metavar="COND",
                      help="with -i: stop after duration:SECONDS or packets:N (as tshark -a)")
    live.add_argument("-p", dest="no_promisc", action="store_true",
                      help="with -i: do not put the interface in promiscuous mode")
    live.add_argument("-q", dest="quiet", action="store_true",
                      help="with -i: do not print 'Capturing on' and the count of packets captured on standard error")
    d.add_argument("-V", dest="verbose", action="store_true", help="print every layer and field with offsets")
    d.add_argument("-x", dest="hexdump", action="store_true",
                   help="print each packet's bytes in hex and ASCII, 16 a line (as tshark -x; after the tree with "
                        "-V; an iWARP PDU put together from earlier segments is shown as well)")
    d.add_argument("-P", dest="print_summary", action="store_true",
                   help="print the summary line also with -V or -x (as tshark -P)")
    d.add_argument("-T", dest="format", choices=("text", "json", "fields"), default="text",
                   help="output format: text (default), json (as tshark -T json: an array of objects with "
                        "_source.layers nested by protocol, Wireshark field names, string values), "
                        "fields (the -e fields, one line per packet, as tshark -T fields)")
    d.add_argument("-e", dest="fields", action="append", metavar="FIELD",
                   help="with -T fields: a field to print (repeat for more), e.g. -e infiniband.bth.psn")
    d.add_argument("-E", dest="field_opts", action="append", metavar="OPTION",
                   help="with -T fields: separator=,|/t|/s  header=y|n  quote=d|s|n  occurrence=f|l|a  aggregator=,")
    d.add_argument("-c", dest="count", type=int, metavar="N", help="read only the first N packets (as tshark)")
    d.add_argument("-w", dest="write", metavar="FILE",
                   help="write the packets (those the -Y filter shows) to FILE instead of printing them, each "
                        "record as read (as tshark -w; - for standard output)")
    d.add_argument("-F", dest="out_format", choices=("pcapng", "pcap"),
                   help="with -w: the file format (default pcapng, as tshark; pcap holds one link type)")
    d.add_argument("-t", dest="time_format", default="r", choices=("r", "a", "ad", "d", "dd", "e", "u", "ud"),
                   metavar="FORMAT",
                   help="the summary line's time as tshark -t: r seconds since the first frame (default), a/ad "
                        "time of day/with the date (local), u/ud the same in UTC, d since the frame before, dd "
                        "since the frame shown before, e seconds since the epoch")
    d.add_argument("-n", dest="no_resolve", action="store_true",
                   help="no name resolution (as tshark -n): rdmalab never resolves addresses or ports, so this is "
                        "what it always does")
    d.add_argument("-Y", dest="filter", metavar="FILTER",
                   help="display filter in Wireshark's language, e.g. "
                        "'infiniband.bth.opcode in {16, 17} && ip.src == 10.0.0.0/24'")
    mode = d.add_mutually_exclusive_group()
    mode.add_argument("--lenient", dest="strict", action="store_false",
                      help="report bad frames and go on (the default)")
    mode.add_argument("--strict", dest="strict", action="store_true", help="stop at the first bad frame")
    d.add_argument("--no-iwarp", action="store_true", help="do not reassemble TCP streams into iWARP PDUs")
    d.add_argument("--no-columnar", action="store_true",
                   help="use the per-packet decoder even where the columnar one would do (-T fields, summary lines, -V)")
    d.add_argument("-j", "--workers", type=int, metavar="N",
                   help="with -T fields, -T json (no -Y), -V and for summary lines: worker processes for a pcap or "
                        "pcapng file of 32 MiB or more (4 MiB for -T json and -V) (default: one a core not busy now, "
                        "from the tasks runnable in /proc/loadavg, at most 4)")
    d.set_defaults(func=run_decode, strict=False)
