"""The live view's core (``rdmalab top``): RDMA connections counted packet by packet, in bounded memory.

:class:`LiveTop` is fed frames (``feed``: timestamp in ns, frame bytes, link type) or blocks of
records (``feed_block``) and keeps, per connection, the counters a live table shows; ``rows()`` is
the current table and ``findings`` the recent findings (a bounded deque).  No terminal code here:
:mod:`rdmalab.cli.top` draws it with rich.

Its numbers are :func:`rdmalab.capture.analysis.analyze`'s, defined the same way but without
looking ahead:

* frames are decoded as analyze decodes them (:func:`~rdmalab.capture.analysis_rows.block_columns`
  with analyze's :data:`~rdmalab.capture.analysis_rows.FIELDS`, the rows kept by the same
  collector, so payload lengths of cut frames and IPv6 addresses are analyze's);
* a **connection** is a requester stream (source IP, destination IP, destination QP) of RC/UC
  requests; a PSN jump of more than :data:`~rdmalab.capture.analysis_conn.RUN_JUMP` starts a new
  one.  A response stream (same addresses the other way, its destination QP the requester's QP) is
  bound to the connection whose request PSNs its PSN falls in, when it first does (or whose first
  request PSN is after it, a NAK's after the first requests were lost, when that connection is the
  only one of these addresses without a response stream yet); responses
  before that are counted as packets of that connection once it is bound (analyze gives them to
  the run named after them);
* the **go-back-N walk** is analyze's (:func:`~rdmalab.capture.analysis_conn.walk`), per packet: a
  request whose PSN is not past the previous one is a **retransmission** (trigger ``nak``, ``rnr``,
  else ``timeout``: analyze's ``implied_nak`` trigger, which needs the READ response windows, is
  ``timeout`` here), a request PSN seen before adds to the retransmitted bytes, one accepted in
  order (the responder's expected PSN) steps the **messages** (SEND/WRITE First..Last, or Only; READ
  and atomics); a NAK is ``nak_seq_err``, ``nak_rnr`` or ``nak_other`` by its AETH syndrome;
  **CNPs** go to the connection whose requester QP they notify (or, before that QP is known from a
  response, to the only connection between those addresses whose requester QP is not known yet); a bad ICRC is ``bad_icrc``, iWARP MPA
  CRC failures and Terminates are ``bad_crc32c`` and ``terminate``;
* the path MTU (for a READ's response PSNs) is analyze's rule applied to what was seen so far: the
  smallest IB MTU not below the largest payload.  A READ's PSN span is computed when the next
  request needs it, so a READ seen before the first full-size payload is counted right.

At the end of a replay of a capture the per-connection packets, payload and retransmitted bytes,
messages by operation, NAKs by kind, retransmissions (and those after a NAK or an RNR NAK), CNPs and
bad ICRCs equal analyze's (tests/capture/test_top.py checks every capture of ``captures/``), as long
as the capture has no seam (time going back by more than 1 ms: analyze starts over there), no
copied frames (analyze leaves them out), no frames out of time order, and no connection expired
(below).

Bounded memory, whatever the run's length:

* at most ``max_conns`` connections are kept; past that, and for every connection idle for more
  than ``idle_s`` seconds of capture time, the least recently active one is retired: its counts go
  into :attr:`LiveTop.retired` (the totals stay whole), its row goes away;
* each connection keeps a fixed set of counters and at most :data:`HOLES_MAX` ranges of PSNs not seen
  yet (a PSN in a forgotten hole counts as sent again when it comes);
* responses not bound to any connection yet are counted per response stream, at most
  :data:`PENDING_MAX` streams;
* the findings are a deque of the last ``max_findings``; :attr:`LiveTop.kinds` counts them all.
"""

from __future__ import annotations

import math
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rdmalab.capture.analysis_conn import NAK_NAMES, RUN_JUMP, T, op_family
from rdmalab.capture.analysis_iwarp import iwarp_finding_texts, resync_text
from rdmalab.capture.analysis_rows import _TERM_EXTRA, FIELDS, _Collector, block_columns, unreachable_text
from rdmalab.capture.iwarp_conns import IwarpConn
from rdmalab.capture.linktypes import LINKTYPE_ETHERNET
from rdmalab.capture.pcapio import RecordBlock
from rdmalab.wire.ib import IB_MTUS, PSN_HALF, PSN_MOD, psn_unwrap
from rdmalab.wire.opcodes import opcode_name
from rdmalab.wire.pfc import ETHERTYPE_MAC_CONTROL, PAUSE_OPCODE, PFC, PFC_OPCODE

__all__ = ["LiveTop", "LiveConn", "LiveFinding", "HOLES_MAX", "PENDING_MAX"]

#: ranges of PSNs skipped (not seen yet) a connection remembers
HOLES_MAX = 64
#: response streams waiting for a connection to be bound to
PENDING_MAX = 1024
_NAMES = [opcode_name(i) for i in range(256)]
#: MAC control (IEEE 802.3 Annex 31B) ethertype, and the opcodes of PAUSE and of priority-based PAUSE (802.1Qbb)


@dataclass(slots=True)
class LiveFinding:
    """One finding as it happens: capture time (s), connection id (None: the capture), kind, text."""

    time: float
    connection: int | None
    kind: str
    text: str


@dataclass
class LiveConn:
    """One connection's counters and the state of its go-back-N walk (fixed size)."""

    id: int
    transport: str
    requester: str
    responder: str
    responder_qpn: int
    requester_qpn: int | None = None
    #: its request stream: (source, destination, destination QP) as address ids
    key: tuple[int, int, int] = (0, 0, 0)
    #: the response streams bound to it (usually one)
    resp_keys: list[tuple[int, int, int]] = field(default_factory=list)
    first_ns: int = 0
    last_ns: int = 0
    packets: int = 0
    request_bytes: int = 0
    retransmitted_bytes: int = 0
    messages: Counter[str] = field(default_factory=Counter)
    #: requests by opcode name
    opcodes: Counter[str] = field(default_factory=Counter)
    #: finding kinds on this connection, counted (``retransmission_nak`` and ``retransmission_rnr``:
    #: the retransmissions after a NAK and after an RNR NAK)
    kinds: Counter[str] = field(default_factory=Counter)
    # ---- the walk (analysis_conn.walk's variables)
    ref: int = 0
    prev: int | None = None
    epsn_base: int = 0
    epsn_read: int | None = None  # DMA length of the READ accepted last: the expected PSN is past its responses
    max_seen: int | None = None
    min_seen: int = 0
    holes: list[list[int]] = field(default_factory=list)  # [lo, hi) ranges below max_seen not seen yet
    pending_nak: bool = False
    pending_rnr: bool = False
    open_fam: str | None = None
    # ---- rates (since the last tick)
    tick_bytes: int = 0
    tick_msgs: int = 0
    tick_ns: int = 0
    mbps: float = 0.0
    msg_rate: float = 0.0

    @property
    def name(self) -> str:
        rq = f"{self.requester_qpn:#x}" if self.requester_qpn is not None else "?"
        return f"{self.requester} QP {rq} -> {self.responder} QP {self.responder_qpn:#x} ({self.transport})"

    def epsn(self, mtu: int) -> int:
        if self.epsn_read is None:
            return self.epsn_base
        return self.epsn_base + max(1, math.ceil(self.epsn_read / mtu))

    def seen_add(self, p: int) -> bool:
        """Record request PSN ``p``; True when it is its first copy (PSNs between the lowest and the
        highest seen are seen unless in one of the :data:`HOLES_MAX` holes remembered)."""
        if self.max_seen is None:
            self.max_seen = self.min_seen = p
            return True
        if p > self.max_seen:
            self._hole(self.max_seen + 1, p)
            self.max_seen = p
            return True
        if p < self.min_seen:
            self._hole(p + 1, self.min_seen)
            self.min_seen = p
            return True
        for i, h in enumerate(self.holes):
            if h[0] <= p < h[1]:
                if h[1] - h[0] == 1:
                    del self.holes[i]
                elif h[0] == p:
                    h[0] += 1
                elif h[1] == p + 1:
                    h[1] -= 1
                else:
                    self.holes.insert(i + 1, [p + 1, h[1]])
                    h[1] = p
                    self._trim()
                return True
        return False

    def _hole(self, lo: int, hi: int) -> None:
        if hi > lo:
            self.holes.append([lo, hi])
            self._trim()

    def _trim(self) -> None:
        if len(self.holes) > HOLES_MAX:  # the oldest forgotten: its PSNs count as seen
            del self.holes[0]

    def row(self) -> dict[str, Any]:
        k = self.kinds
        return {"id": self.id, "name": self.name, "transport": self.transport, "requester": self.requester,
                "responder": self.responder, "requester_qpn": self.requester_qpn,
                "responder_qpn": self.responder_qpn, "packets": self.packets, "request_bytes": self.request_bytes,
                "retransmitted_bytes": self.retransmitted_bytes, "messages": dict(self.messages),
                "opcodes": dict(self.opcodes), "mbps": self.mbps, "msg_rate": self.msg_rate,
                "nak_seq_err": k["nak_seq_err"], "nak_rnr": k["nak_rnr"], "nak_other": k["nak_other"],
                "retransmissions": k["retransmission"], "cnps": k["cnp"], "bad_icrc": k["bad_icrc"],
                "psn_gaps": k["psn_gap"], "first": self.first_ns / 1e9, "last": self.last_ns / 1e9,
                "avg_mbps": self.request_bytes * 8 / dur / 1e6 if (dur := (self.last_ns - self.first_ns) / 1e9) > 0
                else 0.0,
                "avg_msg_rate": sum(self.messages.values()) / dur if dur > 0 else 0.0,
                "kinds": dict(k)}


def iwarp_row(c: IwarpConn) -> dict[str, Any]:
    """An iWARP connection's row of the table: :meth:`LiveConn.row`'s keys (the RoCE-only counts
    None: NAKs, CNPs, ICRCs and PSNs are not iWARP's; retransmissions are TCP's), and its directions,
    MPA CRC failures and Terminates."""
    dur = (c.last_ns - c.first_ns) / 1e9
    s = c.summary()
    return {"id": c.id, "name": c.name, "transport": "iWARP", "requester": c.requester, "responder": c.responder,
            "requester_qpn": None, "responder_qpn": None, "requester_port": c.requester_port,
            "responder_port": c.responder_port, "packets": c.packets, "request_bytes": c.request_bytes,
            "retransmitted_bytes": c.retransmitted_bytes, "messages": dict(c.messages), "opcodes": dict(c.opcodes),
            "mbps": c.mbps, "msg_rate": c.msg_rate, "nak_seq_err": None, "nak_rnr": None, "nak_other": None,
            "retransmissions": s["retransmissions"],
            "cnps": None, "bad_icrc": None, "psn_gaps": None, "bad_crc32c": s["bad_crc32c"],
            "terminates": s["terminates"], "directions": s["directions"], "mpa": s["mpa"],
            "first": c.first_ns / 1e9, "last": c.last_ns / 1e9,
            "avg_mbps": c.request_bytes * 8 / dur / 1e6 if dur > 0 else 0.0,
            "avg_msg_rate": sum(c.messages.values()) / dur if dur > 0 else 0.0, "kinds": dict(c.kinds)}


def _retired() -> dict[str, Any]:
    return {"connections": 0, "packets": 0, "request_bytes": 0, "retransmitted_bytes": 0, "messages": Counter(),
            "kinds": Counter()}


class LiveTop:
    """Per-connection counters of an RDMA capture, fed a frame or a block at a time (module docstring)."""

    def __init__(self, *, max_conns: int = 4096, idle_s: float | None = 60.0, max_findings: int = 200,
                 batch: int = 4096) -> None:
        if max_conns < 1 or max_findings < 1 or batch < 1:
            raise ValueError(f"max_conns ({max_conns}), max_findings ({max_findings}) and batch ({batch}) "
                             "must be at least 1")
        self.max_conns = max_conns
        self.idle_ns = None if idle_s is None else round(idle_s * 1e9)
        self.batch = batch
        self.findings: deque[LiveFinding] = deque(maxlen=max_findings)
        #: every finding kind counted, over the whole run (also those of retired connections)
        self.kinds: Counter[str] = Counter()
        self.frames = 0
        self.rdma_packets = 0
        self.pauses = 0  # 802.3x PAUSE frames
        self.pfc = 0  # priority-based flow control frames
        self.pfc_by_priority = [0] * 8  # PFC frames that pause each priority (a nonzero quanta)
        self.retired = _retired()
        #: frames the packet source lost (a live socket's drops), set by whoever feeds the view
        self.dropped = 0
        self.now_ns: int | None = None
        #: the first frame's time (ns): findings are shown relative to it
        self.start_ns: int | None = None
        self._conns: OrderedDict[int, LiveConn] = OrderedDict()  # least recently active first
        self._by_req: dict[tuple[int, int, int], LiveConn] = {}  # (src, dst, dest QP) -> connection
        self._by_resp: dict[tuple[int, int, int], LiveConn] = {}  # response (src, dst, dest QP) -> connection
        self._by_pair: dict[tuple[int, int], list[LiveConn]] = {}  # (requester, responder) -> its connections
        self._pending: OrderedDict[tuple[int, int, int], int] = OrderedDict()  # unbound responses, counted
        self._next_id = 0
        self._max_plen = 0
        self._collector = _Collector(1 << 62, 0)  # rows only: seams and copies are analyze's, not ours
        #: the iWARP connections (TCP connections that carry MPA), counted as analyze counts them, numbered
        #: among the RoCE ones; at most ``max_conns`` of them kept too
        self._iwarp = self._collector.rows.iwarp_conns
        self._iwarp.max_conns = max_conns
        self._iwarp.keep_ended = False  # (a connection whose ports a new one reuses: retired into the totals)
        self._iwarp.on_new = self._iwarp_new
        # the findings of iWARP holes not filled yet, (direction, FPDU start) -> finding: one that fills
        # after all (late bytes completed its FPDUs) is taken back, as analyze leaves it out
        self._holes: OrderedDict[tuple[Any, int], LiveFinding] = OrderedDict()
        self._tracker = self._collector.tracker  # (the collector counts its resynchronisations)
        self._buf = bytearray()
        self._off: list[int] = []
        self._cap: list[int] = []
        self._wire: list[int] = []
        self._ts: list[int] = []
        self._lt: list[int] = []

    # ------------------------------------------------------------------ input
    @property
    def frames_fed(self) -> int:
        """Frames fed so far (decoded or waiting for the next flush)."""
        return self.frames + len(self._off)

    def feed(self, ts_ns: int, data: bytes, linktype: int = LINKTYPE_ETHERNET, wirelen: int | None = None) -> None:
        """One frame; decoded with the others of its batch at :meth:`flush` (called every ``batch`` frames)."""
        if linktype == LINKTYPE_ETHERNET and len(data) >= 18:
            self._mac_control(data)
        self._off.append(len(self._buf))
        self._buf += data
        self._cap.append(len(data))
        self._wire.append(len(data) if wirelen is None else wirelen)
        self._ts.append(ts_ns)
        self._lt.append(linktype)
        if len(self._off) >= self.batch:
            self.flush()

    def flush(self) -> None:
        """Decode the frames fed since the last flush and count them."""
        if not self._off:
            return
        blk = RecordBlock(bytes(self._buf), np.array(self._off, dtype=np.int64), np.array(self._cap, dtype=np.int64),
                          np.array(self._wire, dtype=np.int64), np.array(self._ts, dtype=np.int64),
                          np.array(self._lt, dtype=np.int32), self.frames + 1, 0)
        self._buf = bytearray()
        self._off, self._cap, self._wire, self._ts, self._lt = [], [], [], [], []
        self._block(blk)

    def feed_block(self, blk: RecordBlock) -> None:
        """A block of records (as :func:`rdmalab.capture.pcapio.record_blocks` gives them), frame numbers
        renumbered from this run's count."""
        self.flush()
        eth = np.nonzero(blk.linktype == LINKTYPE_ETHERNET)[0]
        buf = blk.buf
        for off, cap in zip(blk.offset[eth].tolist(), blk.caplen[eth].tolist(), strict=True):
            if cap >= 18 and buf[off + 12:off + 14] in (b"\x88\x08", b"\x81\x00"):
                self._mac_control(bytes(buf[off:off + min(cap, 38)]))  # 802.1Q tag + PFC: 38 bytes
        blk.first = self.frames + 1
        self._block(blk)

    def _mac_control(self, data: bytes) -> None:
        at = 12
        if data[at:at + 2] == b"\x81\x00":
            at += 4
        if int.from_bytes(data[at:at + 2], "big") != ETHERTYPE_MAC_CONTROL or len(data) < at + 6:
            return
        code = int.from_bytes(data[at + 2:at + 4], "big")
        if code == PAUSE_OPCODE:
            self.pauses += 1
        elif code == PFC_OPCODE:
            self.pfc += 1
            if len(data) >= at + 2 + PFC.LAYOUT.size:
                for prio, quanta in PFC.decode(data, at + 2).paused().items():
                    if quanta:  # a pause, not an XON
                        self.pfc_by_priority[prio] += 1

    def _block(self, blk: RecordBlock) -> None:
        if not len(blk):
            return
        cols = block_columns(blk, FIELDS + _TERM_EXTRA, self._tracker)
        c = self._collector
        c.add(cols)
        self.frames += len(blk)
        if self.start_ns is None:
            self.start_ns = int(blk.ts_ns[0])
        self.now_ns = int(blk.ts_ns.max()) if self.now_ns is None else max(self.now_ns, int(blk.ts_ns.max()))
        rows = c.rows
        part = {k: v[-1] for k, v in c.parts.items()} if c.parts else None
        c.parts, c.back = {}, []
        addr_v6 = list(c.v6)
        by_id = {c.id: c for c in self._iwarp.conns.values()} \
            if rows.iwarp or rows.iwarp_resyncs or rows.iwarp_filled else {}
        for w in rows.iwarp:
            t = w["time_ns"] / 1e9
            iw = by_id.get(w.get("conn"))  # type: ignore[arg-type]
            for kind, text, _ in iwarp_finding_texts(w, {}):
                self._finding(iw, kind, t, f"{text} (frame {w['frame']})")
        for w in rows.iwarp_resyncs:
            f = self._finding(by_id.get(w["conn"]), "iwarp_resync", w["time_ns"] / 1e9,
                              f"{resync_text(w)} (frame {w['frame']})")
            if w["kind"] == "hole":
                self._holes[(w["key"], w["seq"])] = f
                if len(self._holes) > PENDING_MAX:
                    self._holes.popitem(last=False)
        for w in rows.iwarp_filled:  # a hole that filled after all (bytes that came late): its finding taken back
            if (w["key"], w["seq"]) not in self._holes:
                continue
            f = self._holes.pop((w["key"], w["seq"]))
            if f in self.findings:
                self.findings.remove(f)
            self.kinds["iwarp_resync"] -= 1
            conn = by_id.get(w["conn"])
            if conn is not None:
                conn.kinds["iwarp_resync"] -= 1
        rows.iwarp_resyncs, rows.iwarp_filled = [], []
        for u in rows.unreachable:
            self._finding(None, "unreachable", u["time_ns"] / 1e9, f"{unreachable_text(u)} (frame {u['frame']})")
        rows.iwarp, rows.cm_frames, rows.unreachable = [], [], []
        if part is None:
            return
        rows.addr_v6 = addr_v6
        self._rows(part, rows.addr)

    # ------------------------------------------------------------------ the walk
    def _iwarp_new(self, conn: IwarpConn) -> None:
        conn.id = self._next_id
        self._next_id += 1

    def _finding(self, conn: LiveConn | IwarpConn | None, kind: str, t: float, text: str) -> LiveFinding:
        self.kinds[kind] += 1
        if conn is not None:
            conn.kinds[kind] += 1
        f = LiveFinding(t, None if conn is None else conn.id, kind, text)
        self.findings.append(f)
        return f

    def damaged(self, damage: str) -> LiveFinding:
        """The capture being replayed cannot be read past here (``damage``: :attr:`CaptureError.damage
        <rdmalab.capture.pcapio.CaptureError.damage>`): the frames fed so far counted, and a
        ``capture_damaged`` finding for the capture, as :func:`~rdmalab.capture.analysis.analyze` makes."""
        self.flush()
        last = self._collector.rows.last_ns
        return self._finding(None, "capture_damaged", (last or 0) / 1e9,
                             f"the capture {damage}: the numbers cover the {self.frames} frames before it")

    @property
    def mtu(self) -> int:
        return next((m for m in IB_MTUS if m >= self._max_plen), 4096)

    def _rows(self, a: dict[str, np.ndarray], addr: Any) -> None:
        n = len(a["frame"])
        self.rdma_packets += n
        if n:
            self._max_plen = max(self._max_plen, int(a["plen"].max()))
        op_a = a["op"]
        is_req = (T["request"][op_a] & ~T["ud"][op_a]).tolist()
        is_resp = T["response"][op_a].tolist()
        is_cnp = T["cnp"][op_a].tolist()
        bad = ((a["icrc_ok"] == 2) & (a["caplen"] >= a["flen"])).tolist()
        cols = [a[k].tolist() for k in ("frame", "tns", "op", "psn", "dqp", "syn", "aeth", "msn", "plen", "dmalen",
                                        "src", "dst")]
        for i, (fr, tn, o, ps, q, s, has, _m, pl, dml, src, dst) in enumerate(zip(*cols, strict=True)):
            t = tn / 1e9
            conn: LiveConn | None = None
            if is_req[i]:
                conn = self._request(fr, tn, o, ps, q, pl, dml, src, dst, addr)
            elif is_resp[i]:
                conn = self._response(tn, ps, q, s, has, src, dst)
            elif is_cnp[i]:
                conn = self._cnp_owner(src, dst, q)
                self._finding(conn, "cnp", t, f"CNP from {addr(src)} to {addr(dst)} QP {q:#x}")
            if bad[i]:
                self._finding(conn, "bad_icrc", t, f"{_NAMES[o]} PSN {ps}: ICRC does not verify (frame {fr})")

    def _touch(self, conn: LiveConn, tn: int) -> None:
        conn.packets += 1
        conn.last_ns = max(conn.last_ns, tn)
        self._conns.move_to_end(conn.id)

    def _new_conn(self, tn: int, o: int, ps: int, q: int, src: int, dst: int, addr: Any) -> LiveConn:
        conn = LiveConn(self._next_id, "UC" if T["uc"][o] else "RC", addr(src), addr(dst), q, first_ns=tn,
                        last_ns=tn, ref=ps, epsn_base=ps)
        self._next_id += 1
        self._conns[conn.id] = conn
        self._by_req[(src, dst, q)] = conn
        self._by_pair.setdefault((src, dst), []).append(conn)
        conn.key = (src, dst, q)
        while len(self._conns) > self.max_conns:
            self._retire(next(iter(self._conns.values())))
        return conn

    def _request(self, fr: int, tn: int, o: int, ps: int, q: int, pl: int, dml: int, src: int, dst: int,
                 addr: Any) -> LiveConn:
        t = tn / 1e9
        conn = self._by_req.get((src, dst, q))
        if conn is not None and conn.prev is not None:
            d = (ps - conn.prev % PSN_MOD + PSN_HALF) % PSN_MOD - PSN_HALF
            if abs(d) > RUN_JUMP:  # a new run of the test with the same QPN: a new connection
                self._retire(conn)
                conn = None
        if conn is None:
            conn = self._new_conn(tn, o, ps, q, src, dst, addr)
        self._touch(conn, tn)
        conn.opcodes[_NAMES[o]] += 1
        mtu = self.mtu
        p = psn_unwrap(ps, conn.prev if conn.prev is not None else conn.ref)
        rdreq = bool(T["read_req"][o])
        epsn = conn.epsn(mtu)
        if p < epsn and not conn.messages and conn.open_fam is None and (T["first"][o] or T["only"][o]):
            # the first message's first copy lost before the capture point, sent again: expected here
            # (as analysis_conn.walk)
            conn.epsn_base, conn.epsn_read = p, None
            epsn = p
        if conn.prev is not None and p <= conn.prev:
            trigger = "nak" if conn.pending_nak else "rnr" if conn.pending_rnr else "timeout"
            self._finding(conn, "retransmission", t, f"go-back-N from PSN {p % PSN_MOD} ({trigger})")
            if trigger != "timeout":
                conn.kinds["retransmission_" + trigger] += 1
                self.kinds["retransmission_" + trigger] += 1
            else:
                self._finding(conn, "timeout", t, f"PSN {p % PSN_MOD} sent again with no NAK to explain it (timer)")
            conn.pending_nak = conn.pending_rnr = False
            if p > epsn:
                self._finding(conn, "psn_gap", t, f"PSN {epsn % PSN_MOD}.. missing: the retransmission pass "
                                                  "starts past it")
        elif conn.prev is not None and p > conn.prev + 1 and p > epsn:
            lo = max(conn.prev + 1, epsn)
            self._finding(conn, "psn_gap", t, f"PSN {lo % PSN_MOD}" + (f"..{(p - 1) % PSN_MOD}" if p - lo > 1 else "")
                          + f" missing ({p - lo} packet{'s' if p - lo > 1 else ''})")
        if conn.seen_add(p):
            conn.request_bytes += pl
            conn.tick_bytes += pl
        else:
            conn.retransmitted_bytes += pl
        conn.prev = p
        if p == epsn:
            if rdreq:
                conn.epsn_base, conn.epsn_read = p, dml
            else:
                conn.epsn_base, conn.epsn_read = p + 1, None
            self._message_step(conn, o, p, fr, t)
        return conn

    def _message_step(self, conn: LiveConn, o: int, p: int, fr: int, t: float) -> None:
        name = _NAMES[o]
        fam = op_family(name)
        first, middle, last, only = T["first"][o], T["middle"][o], T["last"][o], T["only"][o]
        if (middle or last) and conn.open_fam != fam:
            self._finding(conn, "opcode_sequence", t, f"{name} PSN {p % PSN_MOD} without a {fam} First before it")
            return
        if (first or only) and conn.open_fam is not None:
            self._finding(conn, "opcode_sequence", t, f"{name} PSN {p % PSN_MOD} while the {conn.open_fam} "
                                                      "before it is not finished")
            conn.open_fam = None
        if only or last:
            conn.messages[fam] += 1
            conn.tick_msgs += 1
            conn.open_fam = None
        elif first:
            conn.open_fam = fam

    def _response(self, tn: int, ps: int, q: int, s: int, has: bool, src: int, dst: int) -> LiveConn | None:
        key = (src, dst, q)
        conn = self._by_resp.get(key)
        if conn is None:
            conn = self._bind(key, ps)
            if conn is None:
                self._pending[key] = self._pending.get(key, 0) + 1
                self._pending.move_to_end(key)
                while len(self._pending) > PENDING_MAX:
                    self._pending.popitem(last=False)
                return None
        self._touch(conn, tn)
        if not has:
            return conn
        t = tn / 1e9
        kind = (s >> 5) & 3
        if kind == 3:
            code = s & 0x1F
            if code == 0:
                self._finding(conn, "nak_seq_err", t, f"NAK PSN sequence error at PSN {ps} (expected "
                                                      f"{conn.epsn(self.mtu) % PSN_MOD})")
                conn.pending_nak = True
            else:
                self._finding(conn, "nak_other", t, f"NAK {NAK_NAMES.get(code, f'code {code}')} at PSN {ps}")
        elif kind == 1:
            self._finding(conn, "nak_rnr", t, f"RNR NAK at PSN {ps} (timer code {s & 0x1F})")
            conn.pending_rnr = True
        return conn

    def _cnp_owner(self, src: int, dst: int, q: int) -> LiveConn | None:
        """The connection a CNP notifies (it goes from the responder to the requester's QP): the one
        whose requester QP is known to be ``q``, else the only one between these addresses whose
        requester QP is not known yet (analyze learns it from responses that come later)."""
        unknown = []
        for conn in self._by_pair.get((dst, src), ()):
            if conn.requester_qpn == q:
                return conn
            if conn.requester_qpn is None:
                unknown.append(conn)
        return unknown[0] if len(unknown) == 1 else None

    def _bind(self, key: tuple[int, int, int], ps: int) -> LiveConn | None:
        """The connection a response stream answers: a request stream the other way whose PSNs (a READ's
        response PSNs included) hold the response's PSN."""
        src, dst, q = key
        mtu = self.mtu
        for conn in self._by_pair.get((dst, src), ()):
            if conn.prev is None or conn.max_seen is None:
                continue
            p = psn_unwrap(ps, conn.prev)
            top = max(conn.max_seen, conn.epsn(mtu) - 1)
            if conn.ref <= p <= top + 1:
                return self._bound(key, conn)
        # A NAK names the PSN the responder expects, which is before the first request seen when the
        # first requests were lost on the way to the capture point: it belongs to the one connection of
        # these addresses that no response stream answers yet, as analyze gives it to the run named after it.
        below = [conn for conn in self._by_pair.get((dst, src), ()) if conn.prev is not None
                 and conn.requester_qpn is None and 0 < conn.ref - psn_unwrap(ps, conn.ref) <= RUN_JUMP]
        return self._bound(key, below[0]) if len(below) == 1 else None

    def _bound(self, key: tuple[int, int, int], conn: LiveConn) -> LiveConn:
        self._by_resp[key] = conn
        conn.resp_keys.append(key)
        conn.requester_qpn = key[2]
        conn.packets += self._pending.pop(key, 0)
        return conn

    def _retire(self, conn: LiveConn) -> None:
        r = self.retired
        r["connections"] += 1
        r["packets"] += conn.packets
        r["request_bytes"] += conn.request_bytes
        r["retransmitted_bytes"] += conn.retransmitted_bytes
        r["messages"].update(conn.messages)
        r["kinds"].update(conn.kinds)
        self._conns.pop(conn.id, None)
        if self._by_req.get(conn.key) is conn:
            del self._by_req[conn.key]
        pair = self._by_pair.get(conn.key[:2])
        if pair is not None:
            pair.remove(conn)
            if not pair:
                del self._by_pair[conn.key[:2]]
        for k in conn.resp_keys:
            if self._by_resp.get(k) is conn:
                del self._by_resp[k]

    # ------------------------------------------------------------------ output
    def tick(self, now_ns: int | None = None) -> None:
        """Rates since the last tick (Mbit/s of first copies, messages per second), at capture time
        ``now_ns`` (default: the latest frame's); retire connections idle past ``idle_s``."""
        self.flush()
        now = now_ns if now_ns is not None else self.now_ns
        if now is None:
            return
        for conn in list(self._conns.values()):
            if self.idle_ns is not None and now - conn.last_ns > self.idle_ns:
                self._retire(conn)
                continue
            since = conn.tick_ns or conn.first_ns
            dt = (now - since) / 1e9
            if dt > 0:
                conn.mbps = conn.tick_bytes * 8 / dt / 1e6
                conn.msg_rate = conn.tick_msgs / dt
                conn.tick_bytes = conn.tick_msgs = 0
                conn.tick_ns = now
        for iw in list(self._iwarp.conns.values()):
            if self.idle_ns is not None and now - iw.last_ns > self.idle_ns:
                self._iwarp.retire(iw)
        self._iwarp.tick(now)

    @property
    def connections(self) -> list[LiveConn]:
        """The RoCE connections kept, by id (order of their first packet)."""
        return sorted(self._conns.values(), key=lambda c: c.id)

    @property
    def iwarp_connections(self) -> list[IwarpConn]:
        """The iWARP connections kept (TCP connections that carry MPA), by id."""
        return sorted(self._iwarp.conns.values(), key=lambda c: c.id)

    def rows(self) -> list[dict[str, Any]]:
        """The table: one dict per RoCE connection kept (:meth:`LiveConn.row`)."""
        return [c.row() for c in self.connections]

    def iwarp_rows(self) -> list[dict[str, Any]]:
        """The iWARP connections kept, a dict each (:func:`iwarp_row`)."""
        return [iwarp_row(c) for c in self.iwarp_connections]

    def totals(self) -> dict[str, Any]:
        """Whole-run totals: RoCE connections (kept and retired), packets, bytes, messages, finding kinds;
        iWARP frames, connections, data bytes and messages (``iwarp_*``)."""
        r = self.retired
        msgs: Counter[str] = Counter(r["messages"])
        for c in self._conns.values():
            msgs.update(c.messages)
        iw = self._iwarp
        iw_msgs: Counter[str] = Counter(iw.retired["messages"])
        for ic in iw.conns.values():
            iw_msgs.update(ic.messages)
        return {"frames": self.frames, "rdma_packets": self.rdma_packets,
                "connections": len(self._conns) + r["connections"],
                "packets": sum(c.packets for c in self._conns.values()) + r["packets"],
                "request_bytes": sum(c.request_bytes for c in self._conns.values()) + r["request_bytes"],
                "iwarp_frames": iw.frames, "iwarp_connections": len(iw.conns) + iw.retired["connections"],
                "iwarp_bytes": sum(c.request_bytes for c in iw.conns.values()) + iw.retired["bytes"],
                "iwarp_messages": dict(iw_msgs),
                "retransmitted_bytes": sum(c.retransmitted_bytes for c in self._conns.values())
                + r["retransmitted_bytes"],
                "messages": dict(msgs), "kinds": dict(sorted(self.kinds.items())), "mtu": self.mtu,
                "dropped": self.dropped, "pause_frames": self.pauses, "pfc_frames": self.pfc, "pfc_by_priority": list(self.pfc_by_priority)}

    def to_dict(self) -> dict[str, Any]:
        return {"totals": self.totals(), "connections": self.rows(), "iwarp_connections": self.iwarp_rows(),
                "findings": [{"time": f.time, "connection": f.connection, "kind": f.kind, "text": f.text}
                             for f in self.findings]}
