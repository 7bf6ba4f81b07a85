"""``rdmalab decode`` one-line summaries from columns: the same text as the per-packet path, faster.

The per-packet path (:func:`rdmalab.capture.render.summary_line` over
:func:`rdmalab.capture.read`) builds a :class:`~rdmalab.capture.reader.CapturedPacket` per frame.
Here each block of records is decoded into columns (:mod:`rdmalab.capture.columnar_decode`) and
the lines of the frames the columns fully describe, well-formed RoCEv2 packets (which the
per-packet decoder would decode without a problem), are formatted from the columns, with one
format string per kind of packet.  Every other frame (TCP and iWARP, whose windows and streams
need per-frame state; RoCEv1; MADs; anything the per-packet decoder would report a problem
for; other link types) goes through the per-packet path, in capture order, with the same TCP
window and iWARP stream state it has always had.  ``tests/capture/test_columnar_summary.py``
holds the two paths to the same bytes on every capture in ``captures/`` and on damaged ones.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from rdmalab.capture.columnar_decode import _opt, decode_block
from rdmalab.capture.columnar_schema import Columns
from rdmalab.capture.fields import frame_fields
from rdmalab.capture.linktypes import LINKTYPE_ETHERNET
from rdmalab.capture.pcapio import RecordBlock, record_blocks
from rdmalab.capture.reader import RawRecord, decode_record
from rdmalab.capture.render import TcpWindowScaling, summary_line
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


class _Shapes:
    """One %-format string per kind of packet (opcode, flags, headers, payload, ICRC)."""

    def __init__(self) -> None:
        self._cache: dict[int, str] = {}

    def get(self, key: int) -> str:
        t = self._cache.get(key)
        if t is None:
            t = self._cache[key] = self._make(key)
        return t

    @staticmethod
    def _make(key: int) -> str:
        op = key & 255
        ack, se, fecn, becn, reth, atomic, aeth, deth, imm, pay, bad = ((key >> (8 + i)) & 1 for i in range(11))
        s = "%5d %11.6f %15s \u2192 %-15s RRoCE      %5d " + opcode_name(op).replace("%", "%%") + " QP=0x%06x PSN=%d"
        s += " A" * ack + " SE" * se + " FECN" * fecn + " BECN" * becn
        if reth:
            s += " VA=0x%x rkey=0x%x len=%d"
        if atomic:
            s += " VA=0x%x rkey=0x%x swap/add=0x%x cmp=0x%x"
        if aeth:
            s += " [%s] MSN=%d"
        if deth:
            s += " QKey=0x%08x SrcQP=0x%06x"
        if imm:
            s += " Imm=0x%08x"
        if pay:
            s += " payload=%d"
        if bad:
            s += " [BAD ICRC]"
        return s


def _ipv4_texts(v: np.ndarray) -> list[str]:
    uniq, inv = np.unique(v, return_inverse=True)
    names = [f"{a >> 24}.{(a >> 16) & 255}.{(a >> 8) & 255}.{a & 255}" for a in uniq.tolist()]
    return np.array(names, dtype=object)[inv].tolist()  # type: ignore[no-any-return]


def _ipv6_texts(v: np.ndarray) -> list[str]:
    import ipaddress

    uniq, inv = np.unique(v, return_inverse=True)
    names = [str(ipaddress.IPv6Address(bytes(a).ljust(16, b"\0"))) for a in uniq.tolist()]
    return np.array(names, dtype=object)[inv].tolist()  # type: ignore[no-any-return]


def _fast_lines(blk: RecordBlock, c: Columns, rows: np.ndarray, t0: float, shapes: _Shapes) -> list[str]:
    d, L = c.data, c.layers
    op = d["infiniband.bth.opcode"][rows].astype(np.int64)
    has = {k: L[k][rows] for k in ("infiniband.reth", "infiniband.atomiceth", "infiniband.aeth",
                                   "infiniband.deth", "infiniband.immdt")}
    pay = d["rdmalab.payload.len"][rows]
    key = (op | d["infiniband.bth.a"][rows].astype(np.int64) << 8 | d["infiniband.bth.se"][rows].astype(np.int64) << 9
           | d["rdmalab.bth.fecn"][rows].astype(np.int64) << 10 | d["rdmalab.bth.becn"][rows].astype(np.int64) << 11
           | has["infiniband.reth"].astype(np.int64) << 12 | has["infiniband.atomiceth"].astype(np.int64) << 13
           | has["infiniband.aeth"].astype(np.int64) << 14 | has["infiniband.deth"].astype(np.int64) << 15
           | has["infiniband.immdt"].astype(np.int64) << 16 | (pay > 0).astype(np.int64) << 17
           | (d["rdmalab.icrc.ok"][rows] == 2).astype(np.int64) << 18)
    v6 = L["ipv6"][rows]
    if v6.any():
        src = np.array(_ipv4_texts(d["ip.src"][rows]), dtype=object)
        dst = np.array(_ipv4_texts(d["ip.dst"][rows]), dtype=object)
        src[v6] = _ipv6_texts(d["ipv6.src"][rows][v6])
        dst[v6] = _ipv6_texts(d["ipv6.dst"][rows][v6])
        srcs, dsts = src.tolist(), dst.tolist()
    else:
        srcs, dsts = _ipv4_texts(d["ip.src"][rows]), _ipv4_texts(d["ip.dst"][rows])
    wire = blk.wirelen[rows]
    length = np.where(wire != 0, wire, blk.caplen[rows])
    common = [(d["frame.number"][rows]).tolist(), (blk.seconds()[rows] - t0).tolist(), srcs, dsts, length.tolist(),
              d["infiniband.bth.destqp"][rows].tolist(), d["infiniband.bth.psn"][rows].tolist()]
    out: list[str] = [""] * len(rows)
    uniq, inv = np.unique(key, return_inverse=True)
    order = np.argsort(inv, kind="stable")
    bounds = np.searchsorted(inv[order], np.arange(len(uniq) + 1))
    for u, k in enumerate(uniq.tolist()):
        sel = order[bounds[u]:bounds[u + 1]]
        fmt = shapes.get(k)
        cols: list[list[Any]] = [[lst[i] for i in sel.tolist()] for lst in common]
        r = rows[sel]
        if k >> 12 & 1:
            cols += [d["infiniband.reth.va"][r].tolist(), d["infiniband.reth.r_key"][r].tolist(),
                     d["infiniband.reth.dmalen"][r].tolist()]
        if k >> 13 & 1:
            cols += [d["infiniband.reth.va"][r].tolist(), d["infiniband.reth.r_key"][r].tolist(),
                     d["infiniband.atomiceth.swapdt"][r].tolist(), d["infiniband.atomiceth.cmpdt"][r].tolist()]
        if k >> 14 & 1:
            cols += [[_SYNDROME[s] for s in d["infiniband.aeth.syndrome"][r].tolist()],
                     d["infiniband.aeth.msn"][r].tolist()]
        if k >> 15 & 1:
            cols += [d["infiniband.deth.q_key"][r].tolist(), d["infiniband.deth.srcqp"][r].tolist()]
        if k >> 16 & 1:
            cols += [d["infiniband.immdt"][r].tolist()]
        if k >> 17 & 1:
            cols += [d["rdmalab.payload.len"][r].tolist()]
        for i, args in zip(sel.tolist(), zip(*cols, strict=True), strict=True):
            out[i] = fmt % args
    return out


def summary_lines(path: str | os.PathLike[str], *, count: int | None = None, flt: Any = None, lenient: bool = True,
                  iwarp: bool = True, block_bytes: int = 4 << 20) -> Iterator[str]:
    """The text of ``rdmalab decode -r FILE`` (one summary line a frame, each ending in a newline),
    in pieces.  ``flt`` is a compiled display filter whose fields are all columns (or None).

    A frame the per-packet decoder must read raises what it raises (``lenient=False``: the
    first :class:`~rdmalab.wire.errors.DecodeError`), after the lines before it."""
    tracker = None
    if iwarp:
        from rdmalab.capture.iwarp import IwarpTracker  # lazy: only captures with TCP need it

        tracker = IwarpTracker()
    windows = TcpWindowScaling()  # follows every frame, filtered out or not, as tshark does
    shapes = _Shapes()
    t0: float | None = None
    left = count
    for blk in record_blocks(path, block_bytes):
        n = len(blk)
        if left is not None and n > left:
            n = left
        if t0 is None:
            t0 = float(blk.seconds()[0])
        cols = decode_block(blk, verify_icrc=True)
        fast = _fast_rows(blk, cols)
        if n < cols.n:
            fast[n:] = False
        keep = np.ones(cols.n, dtype=bool) if flt is None else np.asarray(flt.mask(cols, cols.present, cols.n))
        rows = np.flatnonzero(fast & keep)
        lines = dict(zip(rows.tolist(), _fast_lines(blk, cols, rows, t0, shapes), strict=True))
        slow = np.flatnonzero(~fast[:n]).tolist()
        out: list[str] = []
        i = 0
        failed: BaseException | None = None
        try:
            for j in slow:
                out.extend(lines[r] for r in rows[(rows >= i) & (rows < j)].tolist())
                i = j + 1
                off, cap = int(blk.offset[j]), int(blk.caplen[j])
                rec = RawRecord(blk.first + j, float(blk.seconds()[j]), int(blk.linktype[j]),
                                bytes(blk.buf[off:off + cap]), int(blk.wirelen[j]), int(blk.interfaces()[j]))
                cp = decode_record(rec, lenient=lenient, tracker=tracker)
                if cp.packet.encap == "tcp" and not cp.pdus:
                    line = summary_line(cp, t0, windows)
                else:
                    windows.window(cp.packet)
                    line = None
                if flt is not None and not flt(frame_fields(cp)):
                    continue
                out.append(line if line is not None else summary_line(cp, t0))
        except Exception as err:  # the lines before the frame that failed, then the error
            failed = err
        if out:
            yield "\n".join(out) + "\n"
        if failed is not None:
            raise failed
        rest = rows[rows >= i].tolist()
        if rest:
            yield "\n".join(lines[r] for r in rest) + "\n"
        if left is not None:
            left -= n
            if left <= 0:
                return
