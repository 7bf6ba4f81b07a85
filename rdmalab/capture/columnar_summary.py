"""``rdmalab decode`` one-line summaries from columns: the same text as the per-packet path, faster.

The per-packet path (:func:`rdmalab.capture.render.summary_line` over
:func:`rdmalab.capture.read`) builds a :class:`~rdmalab.capture.reader.CapturedPacket` per frame.
Here each block of records is decoded into columns (:mod:`rdmalab.capture.columnar_decode`) and
the lines of the frames the columns fully describe, well-formed RoCEv2 packets (which the
per-packet decoder would decode without a problem), are formatted from the columns with numpy,
a block of lines at a time.  Every other frame (TCP and iWARP, whose windows and streams
need per-frame state; RoCEv1; MADs; anything the per-packet decoder would report a problem
for; other link types) goes through the per-packet path, in capture order, with the same TCP
window and iWARP stream state it has always had.  ``tests/capture/test_columnar_summary.py``
holds the two paths to the same bytes on every capture in ``captures/`` and on damaged ones.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from rdmalab.capture.columnar_decode import _opt, decode_block
from rdmalab.capture.columnar_schema import Columns
from rdmalab.capture.fields import frame_fields
from rdmalab.capture.fieldtext import _OCTET_DOT32, _dec, _hex, _strings
from rdmalab.capture.linktypes import LINKTYPE_ETHERNET
from rdmalab.capture.pcapio import PCAP_MAGICS, RecordBlock, open_capture, pcap_block, pcap_raw, record_blocks
from rdmalab.capture.reader import RawRecord, decode_record
from rdmalab.capture.render import TcpWindowScaling, endpoints, format_summary, info, protocol, summary_line
from rdmalab.wire.ib import AETH, Transport
from rdmalab.wire.mad import GSI_QPN
from rdmalab.wire.opcodes import OPCODES, opcode_name

_PAYLOAD = np.zeros(256, dtype=bool)
for _code, _info in OPCODES.items():
    _PAYLOAD[_code] = bool(_info.payload)
_KNOWN = np.zeros(256, dtype=bool)
_KNOWN[list(OPCODES)] = True
_SYNDROME = [AETH(reserved=s >> 7, type=(s >> 5) & 3, value=s & 31).syndrome_text() for s in range(256)]


def _fast_rows(blk: RecordBlock, c: Columns) -> np.ndarray:
    """Rows whose summary the columns fully give: RoCEv2 packets the per-packet decoder reads
    without a problem (the checks of rdmalab.wire.frame / rdmalab.wire.packet, as masks)."""
    d, L = c.data, c.layers
    cap = blk.caplen
    v4, v6 = L["ip"], L["ipv6"]
    l3 = np.where(L["vlan"], 18, 14)
    l4 = np.where(v6, l3 + 40, l3 + d["ip.hdr_len"].astype(np.int64))
    ip_end = np.where(v6, l3 + 40 + d["ipv6.plen"].astype(np.int64), l3 + d["ip.len"].astype(np.int64))
    udplen = d["udp.length"].astype(np.int64)
    ok = L["rocev2"] & (v4 | v6) & (blk.linktype == LINKTYPE_ETHERNET)
    ok &= ~(v4 & ((d["ip.flags"] & 1) != 0))  # a fragment
    ok &= ip_end <= cap  # IP length within the capture (else: truncated, a problem)
    ok &= (udplen >= 8) & (l4 + udplen <= ip_end)
    op = d["infiniband.bth.opcode"]
    ok &= _KNOWN[op] & (d["infiniband.bth.tver"] == 0) & L["infiniband.crc"]
    # the payload the opcode allows: none, or at least the pad (IBA Vol 1 9.2, table 38)
    body = (l4 + udplen - 4) - (l4 + 8 + 12 + _opt()["extlen"][op].astype(np.int64))  # before the ICRC
    ok &= body >= 0
    ok &= np.where(_PAYLOAD[op], d["infiniband.bth.padcnt"].astype(np.int64) <= body, body == 0)
    ok &= ~(L["infiniband.aeth"] & (((d["infiniband.aeth.syndrome"] >> 5) & 3) == 2))  # reserved AETH type
    # datagrams to or from QP0/QP1 carry MADs (rdmalab.wire.mad.carries_mad): per packet
    ud = (op >> 5) == int(Transport.UD)
    ok &= ~(ud & ((d["infiniband.bth.destqp"] <= GSI_QPN) | (d["infiniband.deth.srcqp"] <= GSI_QPN)))
    result: np.ndarray = ok
    return result


# ---------------------------------------------------------------------------- text as byte matrices
# Each piece of a line is an (n, width) matrix of bytes in which 0 means "no character"; the
# pieces are laid side by side and the zeros dropped in one pass (as rdmalab.capture.fieldtext
# does for -T fields).  The layout is render.format_summary's:
#   f"{frame:5d} {t:11.6f} {src:>15} → {dst:<15} {proto:<10} {length:5d} {info}"
# and the info text rdmalab.wire.packet.Packet.summary's for a RoCE packet.


def _const(text: str, n: int) -> np.ndarray:
    row = np.frombuffer(text.encode(), dtype=np.uint8)
    return np.broadcast_to(row, (n, len(row)))


def _width(m: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.count_nonzero(m, axis=1)
    return out


def _pad(m: np.ndarray, width: int) -> np.ndarray:
    """Spaces that right-align (put before) or left-align (put after) ``m`` in ``width`` characters."""
    short = np.maximum(width - _width(m), 0)
    table = _PADS.get(width)
    if table is None:
        table = _PADS[width] = np.where(np.arange(width)[None, :] < np.arange(width + 1)[:, None], 32, 0).astype(
            np.uint8)
    out: np.ndarray = table[short]
    return out


_PADS: dict[int, np.ndarray] = {}


def _varhex(v: np.ndarray) -> np.ndarray:
    """Hexadecimal without leading zeros (Python's ``%x``)."""
    top = int(v.max()) if len(v) else 0
    digits = max(1, (top.bit_length() + 3) // 4)
    m = _hex(v.astype(np.uint64), digits, prefix=False).copy()
    nz = m != ord("0")
    nz[:, -1] = True
    m[~np.logical_or.accumulate(nz, axis=1)] = 0
    return m


def _table(texts: list[str]) -> np.ndarray:
    """Strings as the rows of a byte matrix (0-padded), for look-ups by index."""
    w = max(1, max(len(t.encode()) for t in texts))
    out = np.zeros((len(texts), w), dtype=np.uint8)
    for i, t in enumerate(texts):
        b = t.encode()
        out[i, :len(b)] = np.frombuffer(b, dtype=np.uint8)
    return out


_OPNAMES = _table([opcode_name(i) for i in range(256)])
_SYNDROMES = _table(_SYNDROME)


def _seconds(t: np.ndarray) -> np.ndarray:
    """``%11.6f`` of relative times.  t * 1e6 is rounded with numpy to the nearest integer, which is
    Python's (correctly rounded) answer unless t * 1e6 lies within a few units in the last place of
    a half (then the product's own rounding could decide); those, negative times and huge ones are
    formatted by Python."""
    n = len(t)
    y = t * 1e6
    k = np.rint(y)
    exact = ~np.signbit(t) & (t < 1e9) & (0.5 - np.abs(y - k) > 8 * np.spacing(y))
    ki = np.where(exact, k, 0).astype(np.int64)
    m = np.hstack([_dec(ki // 1_000_000), _const(".", n), _dec(ki % 1_000_000, 6, pad_zeros=True)])
    m = np.hstack([_pad(m, 11), m])
    if not exact.all():
        odd = np.flatnonzero(~exact)
        strs = _strings([f"{x:11.6f}" for x in t[odd].tolist()])
        w = max(m.shape[1], strs.shape[1])
        m = np.hstack([m, np.zeros((n, w - m.shape[1]), dtype=np.uint8)])
        m[odd] = 0
        m[odd, :strs.shape[1]] = strs
    return m


def _addresses(c: Columns, rows: np.ndarray, which: str) -> np.ndarray:
    v4 = c.data[f"ip.{which}"][rows]
    octets = v4.astype(">u4").view(np.uint8).reshape(len(v4), 4)
    m = _OCTET_DOT32[octets].view(np.uint8).reshape(len(v4), 16).copy()
    m[:, 15] = 0  # no dot after the last octet
    v6 = c.layers["ipv6"][rows]
    if v6.any():
        import ipaddress

        uniq, inv = np.unique(c.data[f"ipv6.{which}"][rows][v6], return_inverse=True)
        names = _table([str(ipaddress.IPv6Address(bytes(a).ljust(16, b"\0"))) for a in uniq.tolist()])
        w = max(16, names.shape[1])
        m = np.hstack([m, np.zeros((len(v4), w - 16), dtype=np.uint8)])
        m[v6] = 0
        m[np.flatnonzero(v6)[:, None], np.arange(names.shape[1])[None, :]] = names[inv]
    out: np.ndarray = m
    return out


class _Taken(dict[str, np.ndarray]):
    """The rows of the columns, taken when first asked for."""

    def __init__(self, data: dict[str, np.ndarray], rows: np.ndarray) -> None:
        super().__init__()
        self._data, self._rows = data, rows

    def __missing__(self, key: str) -> np.ndarray:
        v: np.ndarray = self._data[key][self._rows]
        self[key] = v
        return v


def _fast_text(blk: RecordBlock, c: Columns, rows: np.ndarray, t0: float) -> tuple[bytes, np.ndarray]:
    """The lines of ``rows`` (each ending in a newline) and where each starts in that text."""
    d, L = c.data, c.layers
    n = len(rows)
    if n == 0:
        return b"", np.zeros(1, dtype=np.int64)
    get = _Taken(d, rows)
    has = {k: L[k][rows] for k in ("infiniband.reth", "infiniband.atomiceth", "infiniband.aeth",
                                   "infiniband.deth", "infiniband.immdt")}
    wire = blk.wirelen[rows]
    length = _dec(np.where(wire != 0, wire, blk.caplen[rows]).astype(np.uint64))
    frame = _dec(get["frame.number"])
    src, dst = _addresses(c, rows, "src"), _addresses(c, rows, "dst")
    parts = [_pad(frame, 5), frame, _const(" ", n), _seconds(blk.seconds()[rows] - t0), _const(" ", n),
             _pad(src, 15), src, _const(" \u2192 ", n), dst, _pad(dst, 15), _const(" RRoCE      ", n),
             _pad(length, 5), length, _const(" ", n), _OPNAMES[get["infiniband.bth.opcode"]],
             _const(" QP=0x", n), _hex(get["infiniband.bth.destqp"].astype(np.uint64), 6, prefix=False),
             _const(" PSN=", n), _dec(get["infiniband.bth.psn"])]

    def seg(where: np.ndarray, *pieces: np.ndarray | str) -> None:
        """Pieces of text that only the rows ``where`` show."""
        if where.any():
            m = np.hstack([_const(p, n) if isinstance(p, str) else p for p in pieces])
            if not where.all():
                m[~where] = 0
            parts.append(m)

    for name, word in (("infiniband.bth.a", " A"), ("infiniband.bth.se", " SE"), ("rdmalab.bth.fecn", " FECN"),
                       ("rdmalab.bth.becn", " BECN")):
        seg(get[name] != 0, word)
    if has["infiniband.reth"].any():
        seg(has["infiniband.reth"], " VA=0x", _varhex(get["infiniband.reth.va"]), " rkey=0x",
            _varhex(get["infiniband.reth.r_key"]), " len=", _dec(get["infiniband.reth.dmalen"]))
    if has["infiniband.atomiceth"].any():
        seg(has["infiniband.atomiceth"], " VA=0x", _varhex(get["infiniband.reth.va"]), " rkey=0x",
            _varhex(get["infiniband.reth.r_key"]), " swap/add=0x", _varhex(get["infiniband.atomiceth.swapdt"]),
            " cmp=0x", _varhex(get["infiniband.atomiceth.cmpdt"]))
    if has["infiniband.aeth"].any():
        seg(has["infiniband.aeth"], " [", _SYNDROMES[get["infiniband.aeth.syndrome"]], "] MSN=",
            _dec(get["infiniband.aeth.msn"]))
    if has["infiniband.deth"].any():
        seg(has["infiniband.deth"], " QKey=0x", _hex(get["infiniband.deth.q_key"].astype(np.uint64), 8, prefix=False),
            " SrcQP=0x", _hex(get["infiniband.deth.srcqp"].astype(np.uint64), 6, prefix=False))
    if has["infiniband.immdt"].any():
        seg(has["infiniband.immdt"], " Imm=0x", _hex(get["infiniband.immdt"].astype(np.uint64), 8, prefix=False))
    pay = get["rdmalab.payload.len"]
    seg(pay > 0, " payload=", _dec(pay))
    seg(get["rdmalab.icrc.ok"] == 2, " [BAD ICRC]")
    parts.append(_const("\n", n))
    m = np.hstack(parts)
    starts = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(_width(m), out=starts[1:])
    # bytes.translate deletes the 0 bytes in one C pass
    return m.tobytes().translate(None, b"\0"), starts


@dataclass(slots=True)
class _BlockText:
    """One block's lines: the text of the frames formatted from columns, and the frames left for
    the per-packet path (row, seconds, link type, bytes, wire length, interface)."""

    first: int
    text: bytes
    starts: np.ndarray  # where each fast line starts in text (and its end)
    rows: np.ndarray  # the rows of those lines, ascending
    slow: list[tuple[int, float, int, bytes, int, int]]


def _render_block(blk: RecordBlock, t0: float, flt: Any, n: int) -> _BlockText:
    """The first ``n`` records of a block: decoded into columns, the fast rows formatted."""
    cols = decode_block(blk, verify_icrc=True, fields=_FIELDS if flt is None else (*_FIELDS, *flt.fields))
    fast = _fast_rows(blk, cols)
    fast[n:] = False
    if flt is not None:
        rows = np.flatnonzero(fast & np.asarray(flt.mask(cols, cols.present, cols.n)))
    else:
        rows = np.flatnonzero(fast)
    text, starts = _fast_text(blk, cols, rows, t0)
    secs, ifs = blk.seconds(), blk.interfaces()
    slow = []
    for j in np.flatnonzero(~fast[:n]).tolist():
        off, cap = int(blk.offset[j]), int(blk.caplen[j])
        slow.append((j, float(secs[j]), int(blk.linktype[j]), bytes(blk.buf[off:off + cap]), int(blk.wirelen[j]),
                     int(ifs[j])))
    return _BlockText(blk.first, text, starts, rows, slow)


_WORKER_FILTERS: dict[str, Any] = {}


def _render_task(task: tuple[Any, ...]) -> _BlockText:
    """In a worker process: read one block of pcap records again (pread) and render it."""
    path, start, end, offs, first, order, ns_mult, linktype, t0, expr, n = task
    with open(path, "rb") as f:
        buf = os.pread(f.fileno(), end - start, start)
    flt = None
    if expr:
        flt = _WORKER_FILTERS.get(expr)
        if flt is None:
            from rdmalab.capture.filter import compile_filter  # lazy: only filtered runs need it

            flt = _WORKER_FILTERS[expr] = compile_filter(expr)
    return _render_block(pcap_block(buf, offs, order, ns_mult, linktype, first, end), t0, flt, n)


def _sequential(path: str, block_bytes: int, count: int | None, flt: Any) -> Iterator[tuple[_BlockText, float]]:
    t0: float | None = None
    left = count
    for blk in record_blocks(path, block_bytes):
        n = len(blk) if left is None else min(len(blk), left)
        if t0 is None:
            t0 = float(blk.seconds()[0])
        yield _render_block(blk, t0, flt, n), t0
        if left is not None:
            left -= n
            if left <= 0:
                return


def _parallel(path: str, block_bytes: int, count: int | None, expr: str | None,
              workers: int) -> Iterator[tuple[_BlockText, float]]:
    """As :func:`_sequential`, for a plain pcap file: this process follows the record headers and
    hands each block's offsets to a worker, which reads the block again and renders it; the
    results come back in file order (at most ``2 * workers`` blocks ahead)."""
    import multiprocessing  # lazy: only the parallel path needs it (start-up, memory)

    with open_capture(path) as f:
        head = f.read(24)
        order, ns_mult = PCAP_MAGICS[head[:4]]
        linktype = int.from_bytes(head[20:24], "little" if order == "<" else "big") & 0x0FFFFFFF
        ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
        with ctx.Pool(workers) as pool:
            pending: list[tuple[Any, float]] = []
            t0: float | None = None
            left = count
            for raw in pcap_raw(path, f, order, block_bytes):
                n = len(raw.offs) if left is None else min(len(raw.offs), left)
                if t0 is None:
                    t0 = float(pcap_block(raw.buf, raw.offs[:1], order, ns_mult, linktype, 1, 0).seconds()[0])
                task = (path, raw.file_start, raw.file_end, raw.offs, raw.first, order, ns_mult, linktype, t0, expr, n)
                pending.append((pool.apply_async(_render_task, (task,)), t0))
                while len(pending) > 2 * workers:
                    res, t = pending.pop(0)
                    yield res.get(), t
                if left is not None:
                    left -= n
                    if left <= 0:
                        break
            for res, t in pending:
                yield res.get(), t


def summary_lines(path: str | os.PathLike[str], *, count: int | None = None, flt: Any = None,
                  filter_expr: str | None = None, lenient: bool = True, iwarp: bool = True,
                  block_bytes: int = 4 << 20, workers: int | None = 1,
                  parallel_min_bytes: int = 32 << 20) -> Iterator[str]:
    """The text of ``rdmalab decode -r FILE`` (one summary line a frame, each ending in a newline),
    in pieces.  ``flt`` is the compiled display filter ``filter_expr`` (or None); its fields must
    all be columns.

    ``workers`` (None: one fewer than the cores) above 1 renders the blocks of a plain pcap file
    of at least ``parallel_min_bytes`` in worker processes; this process follows the record
    headers, decodes the frames left for the per-packet path (in order: TCP windows and iWARP
    streams follow the capture) and writes.  A frame the per-packet decoder must read raises
    what it raises (``lenient=False``: the first :class:`~rdmalab.wire.errors.DecodeError`),
    after the lines before it."""
    p = os.fspath(path)
    tracker = None
    if iwarp:
        from rdmalab.capture.iwarp import IwarpTracker  # lazy: only captures with TCP need it

        tracker = IwarpTracker()
    windows = TcpWindowScaling()  # follows every frame, filtered out or not, as tshark does
    # what the per-packet path says of a frame that is not TCP depends on its bytes alone (no
    # stream or window state): the same bytes again (repeated test runs, duplicated frames) are
    # not decoded again.  Bounded: emptied when full.
    seen: dict[tuple[int, bytes], tuple[str, str, str, str]] = {}
    if workers is None:
        workers = max(1, (os.cpu_count() or 1) - 1)
    if workers > 1 and _plain_pcap(p) and os.path.getsize(p) >= parallel_min_bytes and (flt is None or filter_expr):
        blocks = _parallel(p, block_bytes, count, filter_expr, workers)
    else:
        blocks = _sequential(p, block_bytes, count, flt)
    for bt, t0 in blocks:
        text, starts, rows = bt.text, bt.starts, bt.rows
        out: list[str] = []
        done = 0  # fast rows written
        failed: BaseException | None = None
        try:
            cut = np.searchsorted(rows, [j for j, *_ in bt.slow]).tolist()
            for (j, ts, lt, data, wire, iface), upto in zip(bt.slow, cut, strict=True):
                if upto > done:
                    out.append(text[starts[done]:starts[upto]].decode())
                    done = upto
                key = (lt, data)
                parts = seen.get(key) if flt is None else None
                if parts is None:
                    cp = decode_record(RawRecord(bt.first + j, ts, lt, data, wire, iface), lenient=lenient,
                                       tracker=tracker)
                    if cp.packet.encap == "tcp":
                        if not cp.pdus:
                            line = summary_line(cp, t0, windows)
                        else:
                            windows.window(cp.packet)
                            line = summary_line(cp, t0)
                        if flt is None or flt(frame_fields(cp, windows=windows)):
                            out.append(line + "\n")
                        continue
                    if flt is not None and not flt(frame_fields(cp, windows=windows)):
                        continue
                    parts = (*endpoints(cp.packet), protocol(cp), info(cp))
                    if flt is None:
                        if len(seen) >= 4096:
                            seen.clear()
                        seen[key] = parts
                out.append(format_summary(bt.first + j, ts - t0, parts[0], parts[1], parts[2], wire or len(data),
                                          parts[3]) + "\n")
        except Exception as err:  # the lines before the frame that failed, then the error
            failed = err
        if failed is None and done < len(rows):
            out.append(text[starts[done]:].decode())
        if out:
            yield "".join(out)
        if failed is not None:
            raise failed


def _plain_pcap(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) in PCAP_MAGICS
    except OSError:
        return False


#: The columns the summary lines read (decode_block skips the work for the others).
_FIELDS = ("frame.number", "ip", "ipv6.src", "ipv6.dst", "udp.length", "infiniband", "rdmalab.payload.len",
           "rdmalab.bth", "rdmalab.icrc")
