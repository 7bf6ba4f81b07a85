"""The rows :func:`rdmalab.capture.analysis.analyze` works on, read block by block in bounded memory.

``analyze`` needs about twenty numbers per RDMA packet, not the 111 columns of the decoder: the
capture is decoded block by block (:func:`rdmalab.capture.columnar.iter_columns` with only the
fields named in :data:`FIELDS`), each block's RDMA rows are kept in narrow arrays (about 110
bytes a packet) and the block is dropped, whatever else the capture holds; addresses are small integers (IPv4 as its 32-bit value, IPv6 and RoCEv1 GIDs
numbered as they come) so no Python object is made per packet.

Three things about the capture itself are found here, where every frame passes once:

* **seams**: a timestamp that goes back by more than ``seam_ms`` (captures appended to each
  other with ``mergecap -a``, a clock step).  The analysis starts over at each seam: the same
  QPNs, PSNs and addresses after it are a new run, not duplicates of the first.
* smaller steps back in time (reordered timestamps: can the capture be trusted?).
* **identical frames**: an RDMA frame equal to one of the few RDMA frames before it (addresses,
  QP, PSN, opcode, length and ICRC, hence its bytes) within ``dup_us``, with nothing from the
  other direction in between: a mirror port or a merge that copied the frame twice.  The copy is
  left out of the analysis and reported once for the whole capture.  A response (an ACK, a NAK,
  a Read response, an atomic ACK) or a CNP counts so only when it has an IPv4 identification that
  is not 0: a responder answers each duplicate request again, with the same bytes but for that
  number (IBA 9.7.5.1, C9-105; rxe's ``duplicate_request``), and IPv6 has none, nor does a sender that sets it to 0 (RFC 6864 4.1),
  so identical responses back to back are the protocol's there, not the capture's.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rdmalab.capture.columnar import (
    COLUMN_BY_NAME,
    Columns,
    _progress,
    _tracker,
    columns_from_dicts,
    cooked_tags,
    decode_block,
    ipv6_extensions,
    record_blocks,
    source_routes,
    stacked_tags,
)
from rdmalab.capture.columnar_decode import QUOTED, QUOTING, erf_ethernet_view, per_packet_row
from rdmalab.capture.iwarp_conns import IWARP_FIELDS, SEQ_POINTS_MAX, IwarpConns
from rdmalab.capture.linktypes import COLUMNAR_LINKTYPES
from rdmalab.capture.pcapio import RecordBlock
from rdmalab.capture.reader import CaptureError, RawRecord, decode_record
from rdmalab.wire.opcodes import OPCODES, REQUEST_OPCODES, opcode_name

#: the columns ``analyze`` reads (the decoder computes these and what they depend on only)
FIELDS: tuple[str, ...] = (
    "frame.number", "frame.time_ns", "frame.len", "frame.cap_len", "ip.src", "ip.dst", "ipv6.src", "ipv6.dst", "ip.dsfield.ecn",
    "ipv6.tclass", "udp.srcport", "infiniband.bth.opcode", "infiniband.bth.psn", "infiniband.bth.destqp",
    "infiniband.bth.a", "infiniband.aeth.syndrome", "infiniband.aeth.msn", "infiniband.reth.dmalen",
    "rdmalab.payload.len", "infiniband.invariant.crc", "rdmalab.icrc.ok", "infiniband.deth.srcqp", "ip.id",
    "rdmalab.crc32c.ok", "iwarp_mpa.crc", "iwarp_mpa.crc_check", "iwarp_rdma.opcode", "iwarp_rdma.term_layer",
    "udp.length", "ipv6.plen", "infiniband.bth.padcnt",
)
#: ... and those the iWARP connections are counted from (:mod:`rdmalab.capture.iwarp_conns`)
FIELDS = tuple(dict.fromkeys(FIELDS + IWARP_FIELDS))
#: Terminate error type and code columns (one per layer, as tshark's ``iwarp_rdma.term_etype_ddp`` ...):
#: a Terminate has its type and code in the columns of its layer
_TERM_ETYPE = tuple(n for n in COLUMN_BY_NAME if n.startswith("iwarp_rdma.term_etype"))
_TERM_ERRCODE = tuple(n for n in COLUMN_BY_NAME if n.startswith("iwarp_rdma.term_errcode"))
_TERM_EXTRA = _TERM_ETYPE + _TERM_ERRCODE

#: per RDMA row: name -> (source column, dtype kept)
_KEEP: dict[str, tuple[str, str]] = {
    "frame": ("frame.number", "i8"), "tns": ("frame.time_ns", "i8"), "flen": ("frame.len", "u4"),
    "caplen": ("frame.cap_len", "u4"),
    "ecn": ("ip.dsfield.ecn", "u1"), "sport": ("udp.srcport", "u2"), "op": ("infiniband.bth.opcode", "u1"),
    "psn": ("infiniband.bth.psn", "i8"), "dqp": ("infiniband.bth.destqp", "i8"), "ackreq": ("infiniband.bth.a", "u1"),
    "syn": ("infiniband.aeth.syndrome", "i8"), "msn": ("infiniband.aeth.msn", "i8"),
    "dmalen": ("infiniband.reth.dmalen", "i8"), "plen": ("rdmalab.payload.len", "i8"),
    "icrc": ("infiniband.invariant.crc", "u4"), "icrc_ok": ("rdmalab.icrc.ok", "i1"),
    "ipid": ("ip.id", "u2"),  # (0 where there is none: IPv6, InfiniBand)
}


@dataclass
class Rows:
    """The RDMA packets of a capture, one array element per packet, in capture order."""

    frames: int = 0  #: frames in the capture (all protocols)
    a: dict[str, np.ndarray] = field(default_factory=dict)  #: per-row arrays (see _KEEP, src, dst, aeth, deth)
    addr_v6: list[bytes] = field(default_factory=list)  #: address id - 2**32 -> 16 address bytes
    #: steps back in time: (frame before, frame, nanoseconds back), every one
    back: np.ndarray = field(default_factory=lambda: np.zeros((0, 3), dtype=np.int64))
    seam_frames: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  #: first frame of each new run
    #: identical copies left out: (frame of the copy, frame it copies)
    dup_pairs: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), dtype=np.int64))
    #: iWARP rows worth a finding (bad MPA CRC, Terminate): dicts of their columns (``conn``: the
    #: id of their connection in :attr:`iwarp_conns`)
    iwarp: list[dict[str, Any]] = field(default_factory=list)
    #: the TCP connections that carry iWARP, counted (:mod:`rdmalab.capture.iwarp_conns`)
    iwarp_conns: IwarpConns = field(default_factory=IwarpConns)
    #: where an iWARP stream was followed again past octets not read as FPDUs (the first
    #: :data:`RESYNC_ROWS`; the connections count them all): frame, time, connection id, direction
    #: (src, sport, dst, dport), kind (``hole``, ``hunt``), octets
    iwarp_resyncs: list[dict[str, Any]] = field(default_factory=list)
    #: holes of iWARP streams that filled after all (taken out of :attr:`iwarp_resyncs`; ``top`` takes
    #: back the finding it showed): frame, connection id, direction, the hole's FPDU start
    iwarp_filled: list[dict[str, Any]] = field(default_factory=list)
    #: ICMP errors that quote a RoCE packet (port unreachable: nothing takes RoCEv2 there): frame, time,
    #: the error's summary, who sent it, and the quoted packet's addresses, opcode, QP and PSN
    unreachable: list[dict[str, Any]] = field(default_factory=list)
    #: frames of UD packets to QP 1 (CM MADs), decoded one by one afterwards
    cm_frames: list[int] = field(default_factory=list)
    first_ns: int | None = None
    last_ns: int | None = None
    #: what stopped the reading early (a capture that ends in the middle of a record), if anything
    damage: str | None = None

    def __len__(self) -> int:
        return len(self.a.get("frame", ()))

    def addr(self, aid: int) -> str:
        if aid < 1 << 32:
            return f"{aid >> 24}.{(aid >> 16) & 255}.{(aid >> 8) & 255}.{aid & 255}"
        return str(ipaddress.IPv6Address(self.addr_v6[aid - (1 << 32)].ljust(16, b"\0")))


def _extlen() -> np.ndarray:
    """Per BTH opcode: the length of the extended headers after the BTH (the opcode table's)."""
    t = np.zeros(256, dtype=np.int64)
    for code, info in OPCODES.items():
        t[code] = sum(h.LAYOUT.size for h in info.headers)
    return t


_EXTLEN = _extlen()


def _payload_on_the_wire(cols: Columns, sel: np.ndarray, plen: np.ndarray, caplen: np.ndarray,
                         flen: np.ndarray) -> np.ndarray:
    """The payload length of frames the capture cut short (a snap length): the decoder gives what
    was captured; the UDP length (RoCEv2) or the GRH's payload length (RoCEv1) in the headers that
    were captured give what was sent: that length less the BTH, the extended headers, the pad and
    the ICRC (IBA Vol 1 9.2, Annex A17 for the UDP encapsulation)."""
    cut = caplen < flen
    if not cut.any():
        return plen
    rows = sel[cut]
    udp = cols.layers["udp"][rows]
    ib_len = np.where(udp, cols.data["udp.length"][rows].astype(np.int64) - 8,
                      cols.data["ipv6.plen"][rows].astype(np.int64))
    known = udp | cols.layers["rocev1"][rows]
    op = cols.data["infiniband.bth.opcode"][rows].astype(np.int64)
    full = ib_len - 12 - _EXTLEN[op] - cols.data["infiniband.bth.padcnt"][rows].astype(np.int64) - 4
    out = plen.copy()
    out[cut] = np.where(known & (full >= 0), full, plen[cut])
    return out


def unreachable_text(u: dict[str, Any]) -> str:
    """A finding's text for one of :attr:`Rows.unreachable` (``analyze`` and ``top`` say the same)."""
    psn = f" PSN {u['psn']}" if u["psn"] is not None else ""
    return f"{u['what']} from {u['from']} for {opcode_name(int(u['opcode']))} to {u['dst']} QP {int(u['qp']):#x}{psn}"


def _last(v: Any) -> Any:
    """The last occurrence of a field's value (a list for a field that occurs more than once)."""
    return v[-1] if isinstance(v, list) else v


#: resynchronisations of iWARP streams kept one by one in :attr:`Rows.iwarp_resyncs`
RESYNC_ROWS = 10_000


class _Collector:
    def __init__(self, seam_ns: int, dup_ns: int) -> None:
        #: the iWARP reassembly the blocks are decoded with (its resynchronisations are counted here)
        self.tracker = _tracker()
        self.seam_ns = seam_ns
        self.dup_ns = dup_ns
        self.parts: dict[str, list[np.ndarray]] = {}
        self.v6: dict[bytes, int] = {}
        self.rows = Rows()
        self.back: list[np.ndarray] = []
        self.prev_ns: int | None = None
        self.prev_frame = 0

    def _ids(self, cols: Columns, sel: np.ndarray, which: str) -> np.ndarray:
        ip4 = cols.layers["ip"][sel]
        out: np.ndarray = cols.data[f"ip.{which}"][sel].astype(np.int64)
        if not ip4.all():
            raw = cols.data[f"ipv6.{which}"][sel][~ip4]
            uniq, inv = np.unique(raw, return_inverse=True)
            ids = np.array([self.v6.setdefault(bytes(u), len(self.v6)) for u in uniq.tolist()], dtype=np.int64)
            out[~ip4] = (1 << 32) + ids[inv]
        return out

    def add(self, cols: Columns) -> None:
        n = cols.n
        if n == 0:
            return
        r = self.rows
        r.frames += n
        tns = cols.data["frame.time_ns"].astype(np.int64)
        fr = cols.data["frame.number"].astype(np.int64)
        r.first_ns = int(tns[0]) if r.first_ns is None else r.first_ns
        r.last_ns = int(tns[-1])
        prev = np.concatenate(([self.prev_ns if self.prev_ns is not None else tns[0]], tns[:-1]))
        prev_fr = np.concatenate(([self.prev_frame], fr[:-1]))
        step = tns - prev
        k = np.nonzero(step < 0)[0]
        if len(k):
            self.back.append(np.stack([prev_fr[k], fr[k], -step[k]], axis=1))
        self.prev_ns, self.prev_frame = int(tns[-1]), int(fr[-1])
        sel = np.nonzero(cols.layers["infiniband.bth"])[0]
        if len(sel):
            part = {k: cols.data[src][sel].astype(dt) for k, (src, dt) in _KEEP.items()}
            part["plen"] = _payload_on_the_wire(cols, sel, part["plen"], part["caplen"], part["flen"])
            part["src"] = self._ids(cols, sel, "src")
            part["dst"] = self._ids(cols, sel, "dst")
            v6 = (cols.layers["ipv6"] | cols.layers["rocev1"])[sel]
            if v6.any():
                part["ecn"] = np.where(v6, cols.data["ipv6.tclass"][sel] & 3, part["ecn"]).astype("u1")
            part["ipid"] = np.where(cols.layers["ip"][sel], part["ipid"], 0).astype("u2")  # (none but IPv4's)
            part["aeth"] = cols.layers["infiniband.aeth"][sel]
            part["deth"] = cols.layers["infiniband.deth"][sel]
            for key, arr in part.items():
                self.parts.setdefault(key, []).append(arr)
            cm = part["deth"] & (part["dqp"] == 1)
            if cm.any():
                r.cm_frames.extend(part["frame"][cm].tolist())
        conn_of = dict(r.iwarp_conns.add(cols))
        resyncs = self.tracker.take_resyncs()
        if resyncs:
            first = int(fr[0])
            for frame, key, kind, octets, seq in resyncs:
                i = min(max(frame - first, 0), n - 1)
                if kind == "filled":
                    cid = r.iwarp_conns.filled(key, octets)
                    r.iwarp_resyncs = [w for w in r.iwarp_resyncs if (w["key"], w["seq"], w["kind"]) != (key, seq, "hole")]
                    r.iwarp_filled.append({"frame": frame, "conn": cid, "key": key, "seq": seq})
                    continue
                cid = r.iwarp_conns.resynced(frame, int(tns[i]), key, octets)
                if len(r.iwarp_resyncs) < RESYNC_ROWS:
                    r.iwarp_resyncs.append({"frame": frame, "time_ns": int(tns[i]), "conn": cid, "key": key,
                                            "kind": kind, "octets": octets, "seq": seq})
        if "rdmalab.crc32c" in cols.layers:
            bad = cols.layers["rdmalab.crc32c"] & (cols.data["rdmalab.crc32c.ok"] == 2)
            term = cols.layers["iwarp_rdma.opcode"] & (cols.data["iwarp_rdma.opcode"] == 7)
            for i in np.nonzero(bad | term)[0].tolist():
                row = {"frame": int(fr[i]), "time_ns": int(tns[i]), "bad_crc": bool(bad[i]), "terminate": bool(term[i]),
                       "crc": int(cols.data["iwarp_mpa.crc"][i]), "crc_check": int(cols.data["iwarp_mpa.crc_check"][i]),
                       "term_layer": int(cols.data["iwarp_rdma.term_layer"][i]), "conn": conn_of.get(int(fr[i]))}
                for key, names in (("term_etype", _TERM_ETYPE), ("term_errcode", _TERM_ERRCODE)):
                    for name in names:
                        if name in cols.layers and cols.layers[name][i]:
                            row[key] = int(cols.data[name][i])
                            break
                r.iwarp.append(row)

        for number, got in cols.multi.items():
            if QUOTED not in got or "infiniband.bth.destqp" not in got:
                continue
            src, dst = got.get("ip.src", got.get("ipv6.src")), got.get("ip.dst", got.get("ipv6.dst"))
            if not isinstance(src, list) or not isinstance(dst, list):
                continue
            i = number - int(fr[0])
            r.unreachable.append({"frame": number, "time_ns": int(tns[i]), "what": got[QUOTING], "from": src[0],
                                  "src": src[-1], "dst": dst[-1], "opcode": _last(got["infiniband.bth.opcode"]),
                                  "qp": _last(got["infiniband.bth.destqp"]), "psn": _last(got.get("infiniband.bth.psn"))})

    def finish(self) -> Rows:
        r = self.rows
        r.a = {k: np.concatenate(v) for k, v in self.parts.items()} if self.parts else _empty()
        self.parts = {}
        r.addr_v6 = list(self.v6)
        r.back = np.concatenate(self.back) if self.back else np.zeros((0, 3), dtype=np.int64)
        r.seam_frames = _seams(r, self.seam_ns)
        r.dup_pairs = _drop_identical(r, self.dup_ns)
        return r


#: a step back in time is a seam when the next this many RDMA packets all stay before the time reached
#: before the step (reordered frames catch up within a few packets; an appended capture does not)
SEAM_LOOKAHEAD = 64
#: ... and when the time after the step is also before the time reached this many RDMA packets before it:
#: otherwise the few frames just before the step were stamped late and the clock goes on from the frames
#: before them (tcpdump in the lab VM under load stamped one NAK 6.9 ms late among WRITEs that came 64 to
#: the 6.9 ms: not a second capture appended, whose first frame is before the whole run before it)
SEAM_LATE_FRAMES = 8


def _seams(r: Rows, seam_ns: int) -> np.ndarray:
    if not len(r.back):
        return np.zeros(0, dtype=np.int64)
    sel = r.back[:, 2] > seam_ns
    cand: np.ndarray = r.back[sel, 1]
    step = r.back[sel, 2]
    if not len(cand):
        return cand
    fr, tns = r.a["frame"], r.a["tns"]
    peak = np.maximum.accumulate(tns) if len(tns) else tns
    out = []
    for f, back in zip(cand.tolist(), step.tolist(), strict=True):
        j = int(np.searchsorted(fr, f))
        if j == 0 or j >= len(fr):  # no RDMA packet on both sides to look at: a step of a second or more
            if back >= 1_000_000_000:
                out.append(f)
            continue
        if j > SEAM_LATE_FRAMES and int(tns[j]) >= int(peak[j - 1 - SEAM_LATE_FRAMES]):
            continue  # frames stamped late, then the clock goes on: reordered (time_backwards), not a seam
        if int(tns[j:j + SEAM_LOOKAHEAD].max()) < int(peak[j - 1]):
            out.append(f)
    res: np.ndarray = np.array(out, dtype=np.int64)
    return res


def _empty() -> dict[str, np.ndarray]:
    out = {k: np.zeros(0, dtype=dt) for k, (_, dt) in _KEEP.items()}
    out.update(src=np.zeros(0, np.int64), dst=np.zeros(0, np.int64), aeth=np.zeros(0, bool), deth=np.zeros(0, bool))
    return out


_DUP_LAGS = 4
#: per BTH opcode: a request (whose repetition, back to back with nothing from the other direction, the
#: protocol never sends: a requester sends again after a NAK or its timer)
_REQUEST = np.zeros(256, dtype=bool)
_REQUEST[sorted(REQUEST_OPCODES)] = True
_SAME = ("src", "dst", "dqp", "psn", "op", "plen", "icrc", "flen", "syn", "msn")


def _drop_identical(r: Rows, dup_ns: int) -> np.ndarray:
    """Find the identical copies (module docstring), drop them from the rows, return the pairs."""
    a = r.a
    n = len(a["frame"])
    dup = np.zeros(n, dtype=bool)
    orig = np.full(n, -1, dtype=np.int64)
    reverse_between = np.zeros(n, dtype=bool)  # a frame of the other direction lies between row i-L and i
    for lag in range(1, _DUP_LAGS + 1):
        if n <= lag:
            break
        i = np.arange(lag, n)
        j = i - lag
        if lag > 1:  # the row just before i-(lag-1)... i-1: is it the reverse direction of i?
            k = i - (lag - 1)
            reverse_between[lag:] |= (a["src"][k] == a["dst"][i]) & (a["dst"][k] == a["src"][i])
        same = ~reverse_between[lag:] & ~dup[lag:] & (orig[lag:] < 0)
        for name in _SAME:
            same &= a[name][i] == a[name][j]
        same &= np.abs(a["tns"][i] - a["tns"][j]) <= dup_ns
        same &= ~dup[j]
        same &= _REQUEST[a["op"][i]] | (a["ipid"][i] != 0)  # (module docstring: responses need the number)
        hit = i[same]
        dup[hit] = True
        orig[hit] = j[same]
    pairs = np.stack([a["frame"][dup], a["frame"][orig[dup]]], axis=1) if dup.any() else np.zeros((0, 2), np.int64)
    if dup.any():
        keep = ~dup
        r.a = {k: v[keep] for k, v in a.items()}
    return pairs


def block_columns(blk: RecordBlock, fields: tuple[str, ...], tracker: Any) -> Columns:
    """One block of records as columns: its Ethernet frames, Linux cooked captures' and ERF Ethernet
    records' by the columnar decoder (:data:`~rdmalab.capture.linktypes.COLUMNAR_LINKTYPES`,
    :func:`~rdmalab.capture.columnar_decode.erf_ethernet_view`), frames of other link types (and
    cooked ones with a VLAN tag) one by one by the per-packet decoder (also used by
    :mod:`rdmalab.capture.top`)."""
    blk = erf_ethernet_view(blk)
    cols = decode_block(blk, fields=fields, tracker=tracker)
    # (the frames the columns do not read whole go one by one, as :func:`~rdmalab.capture.columnar._ethernet_only`
    # says of a block: tags past an 802.1ad one and an 802.1Q one, IPv6 extension headers, IPv4 source routes)
    eth = (np.isin(blk.linktype, COLUMNAR_LINKTYPES) & ~cooked_tags(blk) & ~stacked_tags(blk)
           & ~ipv6_extensions(blk) & ~source_routes(blk))
    if not eth.all():
        other = np.nonzero(~eth)[0].tolist()
        dicts = []
        quoting: dict[int, dict[str, Any]] = {}
        for i in other:
            off, cap = int(blk.offset[i]), int(blk.caplen[i])
            rec = RawRecord(blk.first + i, int(blk.ts_ns[i]) / 1e9, int(blk.linktype[i]),
                            bytes(blk.buf[off:off + cap]), int(blk.wirelen[i]), fcs_len=int(blk.fcs_lens()[i]))
            row, entry = per_packet_row(decode_record(rec), None, None)  # (an ICMP error's quote: in multi)
            dicts.append(row)
            if entry is not None:
                quoting[blk.first + i] = entry
        oc = columns_from_dicts(dicts, quoting)
        oc.data["frame.time_ns"] = blk.ts_ns[other].astype(oc.data["frame.time_ns"].dtype)
        both = Columns.concat([cols.take(eth), oc])
        cols = both.take(np.argsort(both.data["frame.number"], kind="stable"))
    return cols


def _columns(path: str | os.PathLike[str], fields: tuple[str, ...], progress: bool,
             block_bytes: int, tracker: Any = None) -> Iterator[Columns]:
    """The capture's columns block by block.  Unlike :func:`~rdmalab.capture.columnar.iter_columns`,
    which hands the rest of the file to the per-packet decoder at the first frame of another link
    type than Ethernet, only those frames go through the per-packet decoder here (a merged capture
    with one native InfiniBand frame in it stays fast)."""
    p = os.fspath(path)
    bar = _progress(p) if progress else None
    tracker = _tracker() if tracker is None else tracker
    try:
        for blk in record_blocks(p, block_bytes):
            cols = block_columns(blk, fields, tracker)
            cols.path = p
            if bar is not None:
                bar.update(blk.file_pos - bar.n)
            yield cols
    finally:
        if bar is not None:
            bar.close()


def load_rows(source: str | os.PathLike[str] | Columns, *, seam_ms: float = 1.0, dup_us: float = 20.0,
              progress: bool = False, block_bytes: int = 8 << 20) -> Rows:
    """The rows of a capture file (read block by block) or of columns already in memory."""
    c = _Collector(round(seam_ms * 1e6), round(dup_us * 1e3))
    c.rows.iwarp_conns.points_left = SEQ_POINTS_MAX  # (the segments of the iWARP connections' pictures)
    if isinstance(source, Columns):
        c.add(source)
    else:
        try:
            for cols in _columns(source, FIELDS + _TERM_EXTRA, progress, block_bytes, c.tracker):
                c.add(cols)
        except CaptureError as err:
            if c.rows.frames == 0:  # nothing readable: not a capture, or damaged from the start
                raise
            c.rows.damage = err.damage
    return c.finish()
