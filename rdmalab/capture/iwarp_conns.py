"""iWARP connections of a capture, counted block by block: what ``rdmalab analyze`` and ``rdmalab top``
show for each TCP connection that carries MPA and RDMAP, as they show RoCE's queue pairs.

An iWARP connection is one TCP connection (RFC 5044: MPA runs on one TCP connection; DDP and RDMAP
on MPA).  Its ends are named as MPA names them (RFC 5044 7.1): the **initiator** (who sends the MPA
Request; it is the TCP client, who sent the SYN) and the **responder** (who listens).  The initiator is
known from the SYN when the capture holds it, else from the MPA Request (the first MPA frame of the
connection), else it is not known: the capture began after the MPA exchange, and the first side
seen sending FPDUs is written first.

Counted per direction, from the decoder's iWARP columns (the TCP stream reassembly of
:mod:`rdmalab.capture.iwarp`: each FPDU where it completes, several in a frame from
:attr:`~rdmalab.capture.columnar.Columns.multi`):

* **FPDUs** by RDMAP opcode (RFC 5040 4.2; RFC 7306 5 and 6 for the atomic and immediate ones);
* **messages** by opcode: an FPDU with the DDP Last flag set ends one (RFC 5041 5.1: a message is
  the DDP segments up to the one with L set);
* **bytes**: the data the FPDUs carry (RDMA Write, Read Response and the Sends: the ULPDU length of
  the MPA header less the DDP header, 14 octets tagged and 18 untagged, RFC 5041 4.2 and 4.3, and less
  the headers RDMAP adds for the opcode); a Read Request carries none (its size is in its header);
* **bad MPA CRCs** (where negotiated, RFC 5044 4.4) and **Terminates** (RFC 5040 4.8);
* **resynchronisations**: where the reassembly followed the stream again past octets it could not
  read as FPDUs (a hole in the capture, a capture that begins inside an FPDU), and those octets;
* **TCP retransmissions**: segments that carry octets of the direction seen before, and those octets
  (a segment that fills a hole is out of order, not sent again; a keep-alive, one octet just below the
  highest, RFC 1122 4.2.3.6, neither), counted from the connection's first frame with iWARP on.

Bounded memory: each connection is a fixed set of counters; at most ``max_conns`` are kept and the
SYNs of at most :data:`SYN_MAX` TCP connections not (yet) known as iWARP are remembered.  A SYN on the
ports of a connection ends it (a new connection reuses the ports, as tshark starts a new ``tcp.stream``):
``analyze`` keeps the ended ones (:attr:`IwarpConns.ended`), ``top`` retires them.
:meth:`IwarpConns.retire` hands a connection's counts to :attr:`IwarpConns.retired` (``top`` retires
idle ones; ``analyze`` keeps them all).
"""

from __future__ import annotations

from array import array
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rdmalab.capture.columnar import Columns
from rdmalab.capture.columnar_schema import _ipv6_text
from rdmalab.wire.net import SEQ_MASK, TCP, seq_diff
from rdmalab.wire.rdmap import RDMAP_OPCODES, DDPTagged, DDPUntagged

__all__ = ["IwarpConn", "IwarpConns", "IWARP_FIELDS", "SEGMENT_KINDS", "SEQ_POINTS_MAX", "SYN_MAX", "rdmap_name",
           "data_octets"]

#: the columns the counting reads (added to what analyze and top decode)
IWARP_FIELDS: tuple[str, ...] = (
    "tcp.srcport", "tcp.dstport", "tcp.flags", "iwarp_mpa.rev", "iwarp_mpa.marker_flag", "iwarp_mpa.crc_flag",
    "iwarp_mpa.rej_flag", "iwarp_mpa.ulpdulength", "iwarp_ddp.tagged_flag", "iwarp_ddp.last_flag",
    "iwarp_rdma.opcode", "rdmalab.pdus", "rdmalab.crc32c.ok", "tcp.seq_raw", "tcp.len",
)
#: ranges of sequence space skipped (not seen yet) a direction remembers for its retransmission count
HOLES_MAX = 16
#: what a TCP segment with data is to its direction (:meth:`_Side.segment`): octets past the highest
#: seen (a gap before it is a hole), octets seen before (some or all: sent again), octets of holes alone
#: (out of order: sent before, seen late), a keep-alive
SEGMENT_KINDS = ("new", "retransmission", "out of order", "keep-alive")
NEW, RETRANSMISSION, OUT_OF_ORDER, KEEP_ALIVE = range(4)
#: segments recorded for the pictures of analyze (``Analysis.iwarp_seq_time``), over all the connections:
#: five 8-byte numbers each, 20 MB at most
SEQ_POINTS_MAX = 500_000
#: SYNs remembered of TCP connections not known as iWARP (yet): the oldest is forgotten past this
SYN_MAX = 4096


def rdmap_name(opcode: int) -> str:
    """An RDMAP opcode's short name (``Write``, ``Read Request``, ``Send with SE`` ...)."""
    info = RDMAP_OPCODES.get(opcode)
    if info is None:
        return f"opcode {opcode:#x}"
    return info.ws_name or info.name


def data_octets(opcode: int, tagged: int, ulpdu_length: int) -> int:
    """The data an FPDU carries: its MPA ULPDU length less the DDP header (14 octets tagged, 18 untagged,
    RFC 5041 4.2/4.3: :class:`~rdmalab.wire.rdmap.DDPTagged`, :class:`~rdmalab.wire.rdmap.DDPUntagged`)
    and the headers RDMAP puts after it for ``opcode`` (0 for an opcode that carries no data, RFC 5040
    4.3-4.8)."""
    info = RDMAP_OPCODES.get(opcode)
    if info is None or not info.payload:
        return 0
    head = (DDPTagged if tagged else DDPUntagged).LAYOUT.size + sum(h.LAYOUT.size for h in info.headers)
    return max(0, ulpdu_length - head)


@dataclass
class _Side:
    """One direction's counts."""

    fpdus: int = 0
    frames: int = 0
    octets: int = 0
    opcodes: Counter[str] = field(default_factory=Counter)
    messages: Counter[str] = field(default_factory=Counter)
    bad_crc: int = 0
    terminates: int = 0
    #: times the stream was followed again past octets not read as FPDUs, and those octets
    resyncs: int = 0
    skipped: int = 0
    #: TCP segments that carried octets of this direction seen before, and those octets
    retx: int = 0
    retx_octets: int = 0
    # sequence space: the first number seen, the end of the highest segment (unwrapped, from it), the
    # ranges below it not seen yet (a segment in one fills it: out of order, not sent again)
    base: int | None = None
    hi: int = 0
    holes: list[list[int]] = field(default_factory=list)

    #: the segments recorded for a picture (:attr:`IwarpConns.points_left`), five numbers each: frame,
    #: time (ns), where it starts (octets after the first octet seen of the direction), length, what it is
    #: (:data:`SEGMENT_KINDS`)
    points: array[int] | None = None

    def segment(self, seq: int, length: int) -> tuple[int, int]:
        """Count one TCP segment of ``length`` octets at ``seq``: a retransmission when it carries octets
        seen before (not a keep-alive: one octet just below the highest, RFC 1122 4.2.3.6).  Return where
        it starts (octets after the direction's first octet seen, unwrapped) and what it is, an index of
        :data:`SEGMENT_KINDS`."""
        if self.base is None:
            self.base, self.hi = seq, length
            return 0, NEW
        at = self.hi + seq_diff(seq, (self.base + self.hi) & SEQ_MASK)  # unwrapped, near the highest
        end = at + length
        if at >= self.hi:
            if at > self.hi:
                self.holes.append([self.hi, at])
                if len(self.holes) > HOLES_MAX:
                    del self.holes[0]  # (the oldest forgotten: its octets count as seen)
            self.hi = end
            return at, NEW
        if length == 1 and at == self.hi - 1:
            return at, KEEP_ALIVE
        new = max(0, end - self.hi)
        for h in self.holes:  # octets of holes this segment fills were not seen before
            lo, up = max(h[0], at), min(h[1], end)
            if lo < up:
                new += up - lo
        self._fill(at, min(end, self.hi))
        self.hi = max(self.hi, end)
        if new < length:
            self.retx += 1
            self.retx_octets += length - new
            return at, RETRANSMISSION
        return at, OUT_OF_ORDER

    def _fill(self, lo: int, up: int) -> None:
        out = []
        for a, b in self.holes:
            if up <= a or b <= lo:
                out.append([a, b])
                continue
            if a < lo:
                out.append([a, lo])
            if up < b:
                out.append([up, b])
        self.holes = out

    def row(self) -> dict[str, Any]:
        return {"frames": self.frames, "fpdus": self.fpdus, "bytes": self.octets, "opcodes": dict(self.opcodes),
                "messages": dict(self.messages), "bad_crc32c": self.bad_crc, "terminates": self.terminates,
                "resyncs": self.resyncs, "octets_skipped": self.skipped, "retransmissions": self.retx,
                "retransmitted_bytes": self.retx_octets}


@dataclass
class IwarpConn:
    """One TCP connection that carries iWARP: its ends (``requester``: MPA's initiator, when known),
    each direction's counts, the MPA exchange when the capture holds it.  It answers the questions
    ``top`` asks of a RoCE connection (``packets``: frames with iWARP, ``request_bytes``: data bytes of
    both directions, ``messages``; no QPNs on the wire, no retransmitted bytes counted: TCP's)."""

    id: int
    requester: str
    requester_port: int
    responder: str
    responder_port: int
    #: how the initiator is known: ``"syn"``, ``"mpa"`` (the MPA Request), or None (not known)
    known_by: str | None
    first_ns: int
    last_ns: int
    #: [initiator -> responder, responder -> initiator]
    sides: tuple[_Side, _Side] = field(default_factory=lambda: (_Side(), _Side()))
    #: the MPA Request and Reply: frame, revision, Markers and CRC flags (M, C), Reject
    mpa: dict[str, dict[str, int]] = field(default_factory=dict)
    # ---- rates for a live view (since the last tick)
    tick_octets: int = 0
    tick_msgs: int = 0
    tick_ns: int = 0
    mbps: float = 0.0
    msg_rate: float = 0.0
    #: finding kinds on this connection, counted (by ``top``)
    kinds: Counter[str] = field(default_factory=Counter)
    transport = "iWARP"
    requester_qpn = None
    responder_qpn = None

    @property
    def key(self) -> tuple[str, int, str, int]:
        return self.requester, self.requester_port, self.responder, self.responder_port

    @property
    def name(self) -> str:
        arrow = "->" if self.known_by else "<->"
        return f"{self.requester}:{self.requester_port} {arrow} {self.responder}:{self.responder_port} (iWARP)"

    @property
    def packets(self) -> int:
        return self.sides[0].frames + self.sides[1].frames

    @property
    def request_bytes(self) -> int:
        return self.sides[0].octets + self.sides[1].octets

    @property
    def messages(self) -> Counter[str]:
        return self.sides[0].messages + self.sides[1].messages

    @property
    def retransmitted_bytes(self) -> int:
        """Octets of TCP segments sent again (both directions: :meth:`_Side.segment`)."""
        return self.sides[0].retx_octets + self.sides[1].retx_octets

    @property
    def opcodes(self) -> Counter[str]:
        return self.sides[0].opcodes + self.sides[1].opcodes

    def summary(self) -> dict[str, Any]:
        dur = (self.last_ns - self.first_ns) / 1e9
        a, b = (f"{self.requester}:{self.requester_port}", f"{self.responder}:{self.responder_port}")
        return {"duration_s": dur, "throughput_mbps": self.request_bytes * 8 / dur / 1e6 if dur > 0 else 0.0,
                "initiator_known_by": self.known_by, "mpa": self.mpa, "fpdus": self.sides[0].fpdus + self.sides[1].fpdus,
                "bytes": self.request_bytes, "messages": dict(self.messages), "opcodes": dict(self.opcodes),
                "directions": [{"from": a, "to": b, **self.sides[0].row()}, {"from": b, "to": a, **self.sides[1].row()}],
                "retransmissions": self.sides[0].retx + self.sides[1].retx,
                "retransmitted_bytes": self.retransmitted_bytes,
                "bad_crc32c": self.sides[0].bad_crc + self.sides[1].bad_crc,
                "terminates": self.sides[0].terminates + self.sides[1].terminates}


Key = tuple[str, int, str, int]


class IwarpConns:
    """The iWARP connections of the blocks :meth:`add` was given (module docstring)."""

    def __init__(self, max_conns: int | None = None) -> None:
        self.max_conns = max_conns
        self.conns: OrderedDict[Key, IwarpConn] = OrderedDict()  # (initiator, port, responder, port), least recent first
        self.syns: OrderedDict[Key, None] = OrderedDict()  # (client, port, server, port) of SYNs seen
        #: connections that ended (a new SYN on their ports: the ports reused by a new connection), kept
        #: when ``keep_ended`` (analyze), else retired (top)
        self.ended: list[IwarpConn] = []
        self.keep_ended = True
        self.frames = 0  # frames with iWARP (MPA frames and FPDUs), over the whole run
        self.retired: dict[str, Any] = {"connections": 0, "frames": 0, "bytes": 0, "messages": Counter()}
        self.next_id = 0
        #: called with each new connection (top numbers it among its own)
        self.on_new: Any = None
        #: segments still to record for the pictures (:attr:`_Side.points`): 0, none (top); analyze
        #: gives it :data:`SEQ_POINTS_MAX`
        self.points_left = 0

    def add(self, cols: Columns) -> list[tuple[int, int | None]]:
        """Count one block; return (frame, connection id) of each frame with a bad MPA CRC or a
        Terminate, for the findings."""
        L, d = cols.layers, cols.data
        if "tcp" not in L or any(name not in d for name in ("tcp.flags", "tcp.srcport", "tcp.dstport")):
            return []
        syn = L["tcp"] & ((d["tcp.flags"] & (TCP.SYN | TCP.ACK)) == TCP.SYN)
        iw = L.get("iwarp")
        if iw is None:
            iw = np.zeros(cols.n, dtype=bool)
        # segments with data, for the retransmissions of the connections known (all rows: few are TCP's)
        seg = L["tcp"] & L["tcp.len"] & (d["tcp.len"] > 0) if (self.conns or iw.any()) and "tcp.len" in d else iw
        rows = np.nonzero(syn | iw | seg)[0]
        if not len(rows):
            return []
        out: list[tuple[int, int | None]] = []
        fr = d["frame.number"][rows].tolist()
        tns = d["frame.time_ns"][rows].tolist()
        src, dst = _texts(cols, rows, "src"), _texts(cols, rows, "dst")
        sport, dport = d["tcp.srcport"][rows].tolist(), d["tcp.dstport"][rows].tolist()
        is_syn = syn[rows].tolist()
        is_iw = iw[rows].tolist()
        seq = d["tcp.seq_raw"][rows].tolist() if "tcp.seq_raw" in d else [0] * len(rows)
        seg_len = np.where(L["tcp.len"][rows], d["tcp.len"][rows], 0).tolist() if "tcp.len" in d else [0] * len(rows)
        cols_of = {name: (d[name][rows].tolist(), L[name][rows].tolist()) for name in
                   ("iwarp_mpa.rev", "iwarp_mpa.marker_flag", "iwarp_mpa.crc_flag", "iwarp_mpa.rej_flag",
                    "iwarp_mpa.ulpdulength", "iwarp_ddp.tagged_flag", "iwarp_ddp.last_flag", "iwarp_rdma.opcode")
                   if name in d}
        bad_crc = ((L["rdmalab.crc32c"] & (d["rdmalab.crc32c.ok"] == 2))[rows].tolist()
                   if "rdmalab.crc32c" in L and "rdmalab.crc32c.ok" in d else [False] * len(rows))
        for j in range(len(rows)):
            key: Key = (src[j], sport[j], dst[j], dport[j])
            if is_syn[j]:
                self._syn(key)
                old = self.conns.get(key) or self.conns.get((key[2], key[3], key[0], key[1]))
                if old is not None:  # the ports reused: a new connection begins (as tshark's tcp.stream)
                    self._end(old)
                continue
            if not is_iw[j]:  # a segment of a connection known, perhaps: counted for its retransmissions
                c, way = self._known(key)
                if c is not None:
                    self._segment(c.sides[way], fr[j], tns[j], seq[j], seg_len[j])
                continue
            self.frames += 1
            conn, side = self._conn(key, tns[j])
            if seg_len[j]:
                self._segment(conn.sides[side], fr[j], tns[j], seq[j], seg_len[j])
            conn.last_ns = max(conn.last_ns, tns[j])
            s = conn.sides[side]
            s.frames += 1
            got = cols.multi.get(fr[j])
            # (a frame's several values from multi; a field multi does not hold from its column)
            vals: dict[str, Any] = {name: (got[name] if got is not None and name in got else (v[j] if has[j] else None))
                                    for name, (v, has) in cols_of.items()}
            if vals.get("iwarp_mpa.rev") is not None:  # (only an MPA Request or Reply has a revision)
                self._mpa(conn, key, side, fr[j], vals)
                s = conn.sides[0 if key == conn.key else 1]
            before = s.messages.total()
            self._fpdus(s, vals)
            if bad_crc[j]:
                s.bad_crc += 1
            if bad_crc[j] or _has_terminate(vals):
                out.append((fr[j], conn.id))
            conn.tick_msgs += s.messages.total() - before
        return out

    def _segment(self, s: _Side, frame: int, tns: int, seq: int, length: int) -> None:
        """A TCP segment with data of direction ``s``: counted, and recorded while :attr:`points_left`."""
        at, kind = s.segment(seq, length)
        if self.points_left > 0:
            self.points_left -= 1
            if s.points is None:
                s.points = array("q")
            s.points.extend((frame, tns, at, length, kind))

    def resynced(self, frame: int, tns: int, key: Key, octets: int) -> int:
        """The direction ``key`` was followed again past ``octets`` it could not read as FPDUs (the
        tracker's :attr:`~rdmalab.capture.iwarp.IwarpTracker.resyncs`): counted; the connection's id."""
        conn, side = self._conn(key, tns)
        s = conn.sides[side]
        s.resyncs += 1
        s.skipped += octets
        return conn.id

    def filled(self, key: Key, octets: int) -> int | None:
        """A hole counted by :meth:`resynced` filled after all (bytes that came late completed its
        FPDUs): taken back; the connection's id (None if it was retired meanwhile)."""
        back: Key = (key[2], key[3], key[0], key[1])
        conn = self.conns.get(key) or self.conns.get(back)
        if conn is None:
            return None
        s = conn.sides[0 if conn.key == key else 1]
        s.resyncs -= 1
        s.skipped -= octets
        return conn.id

    # ------------------------------------------------------------------ the pieces
    def _syn(self, key: Key) -> None:
        self.syns[key] = None
        self.syns.move_to_end(key)
        if len(self.syns) > SYN_MAX:
            self.syns.popitem(last=False)

    def _known(self, key: Key) -> tuple[IwarpConn | None, int]:
        """The connection kept of a frame sent along ``key``, and its direction; (None, 0) if none."""
        conn = self.conns.get(key)
        if conn is not None:
            return conn, 0
        conn = self.conns.get((key[2], key[3], key[0], key[1]))
        return conn, 1

    def _conn(self, key: Key, tns: int) -> tuple[IwarpConn, int]:
        """The connection of a frame sent along ``key`` (source, port, destination, port), and its
        direction (0: initiator to responder)."""
        back: Key = (key[2], key[3], key[0], key[1])
        conn = self.conns.get(key)
        if conn is not None:
            self.conns.move_to_end(key)
            return conn, 0
        conn = self.conns.get(back)
        if conn is not None:
            self.conns.move_to_end(back)
            return conn, 1
        if back in self.syns:  # the other end sent the SYN: it is the initiator
            self.syns.pop(back)
            conn = self._new(back, "syn", tns)
            return conn, 1
        known = "syn" if self.syns.pop(key, 0) is None else None
        conn = self._new(key, known, tns)
        return conn, 0

    def _new(self, key: Key, known_by: str | None, tns: int) -> IwarpConn:
        conn = IwarpConn(self.next_id, key[0], key[1], key[2], key[3], known_by, tns, tns)
        self.next_id += 1
        self.conns[key] = conn
        if self.on_new is not None:
            self.on_new(conn)
        if self.max_conns is not None and len(self.conns) > self.max_conns:
            self.retire(next(iter(self.conns.values())))
        return conn

    def _mpa(self, conn: IwarpConn, key: Key, side: int, frame: int, vals: dict[str, Any]) -> None:
        """An MPA Request or Reply: the first MPA frame of the connection is the Request (the Reply
        answers it), so without a SYN its sender is the initiator."""
        if "request" not in conn.mpa and side == 1 and conn.known_by is None:
            self._swap(conn, key)
            side = 0
        which = "request" if "request" not in conn.mpa else "reply"
        if which == "request" and conn.known_by is None:
            conn.known_by = "mpa"
        conn.mpa[which] = {"frame": frame, "rev": _first(vals.get("iwarp_mpa.rev")),
                           "markers": _first(vals.get("iwarp_mpa.marker_flag")),
                           "crc": _first(vals.get("iwarp_mpa.crc_flag")),
                           "reject": _first(vals.get("iwarp_mpa.rej_flag"))}

    def _swap(self, conn: IwarpConn, key: Key) -> None:
        """The sender of ``key`` is the initiator after all: turn the connection round."""
        self.conns.pop(conn.key, None)
        conn.requester, conn.requester_port, conn.responder, conn.responder_port = key
        conn.sides = (conn.sides[1], conn.sides[0])
        self.conns[key] = conn

    @staticmethod
    def _fpdus(s: _Side, vals: dict[str, Any]) -> None:
        ops = _list(vals.get("iwarp_rdma.opcode"))
        if not ops:
            return
        s.fpdus += len(ops)
        lengths = _list(vals.get("iwarp_mpa.ulpdulength"))
        tagged = _list(vals.get("iwarp_ddp.tagged_flag"))
        last = _list(vals.get("iwarp_ddp.last_flag"))
        aligned = len(lengths) == len(tagged) == len(last) == len(ops)
        for k, op in enumerate(ops):
            name = rdmap_name(op)
            s.opcodes[name] += 1
            if op == 7:
                s.terminates += 1
            if aligned:
                s.octets += data_octets(op, tagged[k], lengths[k])
                if last[k]:
                    s.messages[name] += 1
            elif op in (1, 7):  # (the fields of a Terminate's copied headers: one FPDU a message all the same)
                s.messages[name] += 1

    def _end(self, conn: IwarpConn) -> None:
        if self.keep_ended:
            self.conns.pop(conn.key, None)
            self.ended.append(conn)
        else:
            self.retire(conn)

    def every(self) -> list[IwarpConn]:
        """Every connection kept, ended or not, by id (the order of their first frame)."""
        return sorted([*self.ended, *self.conns.values()], key=lambda c: c.id)

    def retire(self, conn: IwarpConn) -> None:
        """Forget ``conn``, its counts kept in :attr:`retired`."""
        r = self.retired
        r["connections"] += 1
        r["frames"] += conn.packets
        r["bytes"] += conn.request_bytes
        r["messages"].update(conn.messages)
        self.conns.pop(conn.key, None)

    def tick(self, now_ns: int) -> None:
        """Rates since the last tick (Mbit/s of data, messages per second)."""
        for conn in self.conns.values():
            since = conn.tick_ns or conn.first_ns
            dt = (now_ns - since) / 1e9
            if dt > 0:
                octets = conn.request_bytes
                conn.mbps = (octets - conn.tick_octets) * 8 / dt / 1e6
                conn.msg_rate = conn.tick_msgs / dt
                conn.tick_octets, conn.tick_msgs, conn.tick_ns = octets, 0, now_ns


def _first(v: Any) -> Any:
    return v[0] if isinstance(v, list) else v


def _list(v: Any) -> list[int]:
    if v is None:
        return []
    return [int(x) for x in v] if isinstance(v, list) else [int(v)]


def _has_terminate(vals: dict[str, Any]) -> bool:
    return 7 in _list(vals.get("iwarp_rdma.opcode"))


def _texts(cols: Columns, rows: np.ndarray, which: str) -> list[str]:
    """The ``which`` (src or dst) IP address of each row, as text: as the columnar decoder writes it for
    the iWARP tracker (:func:`~rdmalab.capture.columnar_schema._ipv6_text` for IPv6), so a connection's
    key here is the tracker's (:meth:`IwarpConns.resynced`)."""
    v4 = cols.data[f"ip.{which}"][rows].tolist()
    six = cols.layers["ipv6"][rows].tolist() if "ipv6" in cols.layers else [False] * len(rows)
    out = []
    raw6 = cols.data[f"ipv6.{which}"][rows].tolist() if any(six) else None
    for k, a in enumerate(v4):
        if six[k] and raw6 is not None:
            out.append(_ipv6_text(bytes(raw6[k]).ljust(16, b"\0")))  # (numpy drops an address's trailing zeros)
        else:
            out.append(f"{a >> 24}.{(a >> 16) & 255}.{(a >> 8) & 255}.{a & 255}")
    return out
