"""The results of :func:`rdmalab.capture.analysis.analyze`: findings, messages, connections."""

from __future__ import annotations

from array import array
from collections import defaultdict
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np

#: finding kinds where one finding stands for ``detail["count"]`` events of the same kind (readable
#: findings: "frames duplicated in the capture: N, e.g. 12/13", not one finding a frame)
AGGREGATED = frozenset({"duplicate", "duplicate_frames", "capture_seam", "time_backwards"})


@dataclass(slots=True)
class Finding:
    kind: str
    connection: int | None
    frames: list[int]
    time: float
    text: str
    detail: dict[str, Any] = field(default_factory=dict)
    #: the capture the frames are in, when several captures are analysed together
    capture: str | None = None


@dataclass(slots=True)
class Message:
    connection: int
    op: str
    first_psn: int
    last_psn: int
    size: int
    start: float
    completion: float | None = None
    result: str = "incomplete"
    frames: list[int] = field(default_factory=list)

    @property
    def duration(self) -> float | None:
        return None if self.completion is None else self.completion - self.start


@dataclass
class Connection:
    """One connection: a RoCE/InfiniBand queue pair's requests and their responses (``transport`` RC,
    UC ...), or a TCP connection that carries iWARP (``transport`` ``"iWARP"``: no QPNs on the wire;
    ``requester`` and ``requester_port`` are MPA's initiator, ``responder`` and ``responder_port`` its
    responder, :mod:`rdmalab.capture.iwarp_conns`)."""

    id: int
    transport: str
    requester: str
    responder: str
    requester_qpn: int | None
    responder_qpn: int | None
    #: RoCEv2: the requester's UDP source port; iWARP: the initiator's TCP port
    requester_port: int | None = None
    #: which run of the capture the connection is in (0, then one more after each seam where the
    #: capture's time goes back: captures appended to each other)
    run: int = 0
    #: the capture the connection is in, when several captures are analysed together
    capture: str | None = None
    #: the connection manager exchange that set this connection up, when the capture holds it
    cm: dict[str, Any] | None = None
    packets: int = 0
    request_bytes: int = 0
    retransmitted_bytes: int = 0
    first: float = 0.0
    last: float = 0.0
    summary: dict[str, Any] = field(default_factory=dict)
    #: iWARP: the responder's TCP port (the port it listens on)
    responder_port: int | None = None

    @property
    def name(self) -> str:
        if self.transport == "iWARP":
            arrow = "->" if self.summary.get("initiator_known_by") else "<->"
            return f"{self.requester}:{self.requester_port} {arrow} {self.responder}:{self.responder_port} (iWARP)"
        rq = f"{self.requester_qpn:#x}" if self.requester_qpn is not None else "?"
        rs = f"{self.responder_qpn:#x}" if self.responder_qpn is not None else "?"
        return f"{self.requester} QP {rq} -> {self.responder} QP {rs} ({self.transport})"


#: findings of one kind kept one by one over a whole capture; past this, each connection's further
#: findings of that kind are one ``folded`` finding (their count, their first frames): memory stays
#: bounded whatever the capture holds (a million packets that are each a finding)
KIND_BUDGET = 50_000
#: frames a folded finding lists (the first ones; ``detail["count"]`` says how many it stands for)
FOLDED_FRAMES = 1000
#: detail keys a folded finding still counts value by value (``detail["by"]["trigger"]["nak"]``)
FOLD_BY = ("trigger",)
#: kinds whose folded findings keep each event's (time, PSN, first frame, packets) in compact arrays,
#: with the PSN from this detail key: the capture-gap check needs every gap and every restart
FOLD_PSNS = {"psn_gap": "first_missing", "retransmission": "from_psn"}


class FoldedPsns:
    """The events of one folded kind on one connection, 28 bytes each: time (s), PSN, first frame,
    packets (``detail["count"]``)."""

    __slots__ = ("time", "psn", "frame", "count")

    def __init__(self) -> None:
        self.time, self.psn, self.frame, self.count = array("d"), array("l"), array("q"), array("l")

    def add(self, f: Finding, key: str) -> None:
        self.time.append(f.time)
        self.psn.append(int(f.detail.get(key, 0)))
        self.frame.append(f.frames[0] if f.frames else 0)
        self.count.append(int(f.detail.get("count", 1)))

    def __len__(self) -> int:
        return len(self.time)


class Findings(list[Finding]):
    """The findings of an analysis: a list that keeps at most :data:`KIND_BUDGET` findings of each
    kind one by one and folds the rest, per kind and connection, into one finding with
    ``detail = {"folded": True, "count": N, ...}`` (N events: what the folded findings stood for)."""

    def __init__(self, budget: int | None = None) -> None:
        super().__init__()
        self.budget = KIND_BUDGET if budget is None else budget
        self.per_kind: dict[str, int] = {}
        self.folded: dict[tuple[str, int | None], Finding] = {}
        #: (kind, connection) -> the folded events' PSNs, for the kinds in :data:`FOLD_PSNS`
        self.folded_psns: dict[tuple[str, int | None], FoldedPsns] = {}

    def append(self, f: Finding) -> None:
        n = self.per_kind.get(f.kind, 0) + 1
        self.per_kind[f.kind] = n
        if n <= self.budget or f.detail.get("folded"):
            super().append(f)
            return
        k = (f.kind, f.connection)
        events = int(f.detail.get("count", 1)) if f.kind in AGGREGATED else 1
        agg = self.folded.get(k)
        if agg is None:
            agg = Finding(f.kind, f.connection, [], f.time, "", {"folded": True, "count": 0, "findings": 0},
                          f.capture)
            self.folded[k] = agg
            super().append(agg)
        d = agg.detail
        d["count"] += events
        d["findings"] += 1
        for key in FOLD_BY:
            if key in f.detail:
                by = d.setdefault("by", {}).setdefault(key, {})
                by[f.detail[key]] = by.get(f.detail[key], 0) + 1
        if f.kind in FOLD_PSNS:
            self.folded_psns.setdefault(k, FoldedPsns()).add(f, FOLD_PSNS[f.kind])
        room = FOLDED_FRAMES - len(agg.frames)
        if room > 0:
            agg.frames.extend(f.frames[:room])
        agg.text = (f"{d['findings']} more {f.kind} findings ({d['count']} events) on this "
                    f"{'connection' if f.connection is not None else 'capture'}, not listed one by one "
                    f"(the capture has more than {self.budget} of this kind): the first from frame {agg.frames[0]}, "
                    f"time {agg.time:.6f}" if agg.frames else f"{d['findings']} more {f.kind} findings")

    def extend(self, items: Any) -> None:
        for f in items:
            self.append(f)


def _counted(c: dict[str, int]) -> str:
    return ", ".join(f"{n} {k}" for k, n in sorted(c.items(), key=lambda x: -x[1]))


def _iwarp_lines(c: Connection) -> list[str]:
    """The text of an iWARP connection (:meth:`Analysis.text`)."""
    s = c.summary
    out = []
    mpa = s.get("mpa") or {}
    if mpa:
        parts = [f"{w.capitalize()} frame {m['frame']} (markers {m['markers']}, CRC {m['crc']}"
                 + (", REJECTED)" if m.get("reject") else ")") for w, m in mpa.items()]
        out.append(f"  MPA rev {next(iter(mpa.values()))['rev']}: " + ", ".join(parts))
    if not s.get("initiator_known_by"):
        out.append("  the capture holds neither its SYN nor its MPA Request: which end is the initiator is not known")
    out.append(f"  {c.packets} frames with iWARP, {s.get('fpdus', 0)} FPDUs, {c.request_bytes} data bytes; "
               f"{s.get('throughput_mbps', 0):.2f} Mbit/s over {s.get('duration_s', 0) * 1e3:.3f} ms")
    for d in s.get("directions", []):
        if not d["fpdus"]:
            out.append(f"  {d['from']} -> {d['to']}: no FPDU")
            continue
        bad = "".join(f", {d[k]} {w}" for k, w in (("bad_crc32c", "bad MPA CRC"), ("terminates", "Terminate"))
                      if d[k])
        if d.get("retransmissions"):
            bad += f", {d['retransmissions']} TCP retransmission(s) ({d['retransmitted_bytes']} bytes)"
        if d.get("resyncs"):
            bad += f", followed again {d['resyncs']} time(s) past {d['octets_skipped']} octets not read as FPDUs"
        out.append(f"  {d['from']} -> {d['to']}: {d['fpdus']} FPDUs ({_counted(d['opcodes'])}), "
                   f"{sum(d['messages'].values())} messages ({_counted(d['messages'])}), {d['bytes']} bytes{bad}")
    return out


@dataclass
class Analysis:
    path: str | None
    packets: int
    rdma_packets: int
    connections: list[Connection]
    messages: list[Message]
    findings: list[Finding]
    mtu: int
    #: per connection: (seconds since its first packet, Mbit/s) per bin
    throughput: dict[int, list[tuple[float, float]]] = field(default_factory=dict)
    #: per connection, for the PSN plot: arrays ``t`` (seconds since the connection's first packet),
    #: ``psn`` (PSN - first PSN), ``kind`` (0 first copy / 1 sent again / 2 NAK)
    psn_time: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)
    #: checks over the whole capture: ``cnp_pacing`` (per hypothesis), ``capture`` (trust)
    checks: dict[str, Any] = field(default_factory=dict)
    #: frames that carry iWARP (MPA frames and FPDUs; ``rdma_packets`` counts RoCE and InfiniBand packets)
    iwarp_frames: int = 0
    #: the TCP connections that carry iWARP (``transport`` ``"iWARP"``), numbered after ``connections``
    iwarp_connections: list[Connection] = field(default_factory=list)
    #: per iWARP connection, for its TCP sequence plot: its segments with data
    #: (:func:`~rdmalab.capture.analysis_iwarp.iwarp_seq_time`)
    iwarp_seq_time: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for f in self.findings:
            out[f.kind] += 1
        return dict(sorted(out.items()))

    def events(self, kind: str) -> int:
        """How many events the findings of ``kind`` stand for: a finding of a kind in
        :data:`AGGREGATED` holds ``detail["count"]`` of them (the duplicate requests of one pass,
        every copied frame, every seam, every step back in time), and so does a folded finding
        (:class:`Findings`); any other finding one."""
        return sum(int(f.detail.get("count", 1)) if kind in AGGREGATED or f.detail.get("folded") else 1
                   for f in self.findings if f.kind == kind)

    def events_where(self, kind: str, connections: set[int] | None = None, **detail: Any) -> int:
        """:meth:`events` of ``kind`` on ``connections`` (all when None) whose ``detail`` has the
        given values; a folded finding answers for a key in :data:`FOLD_BY` from its counts."""
        n = 0
        for f in self.findings:
            if f.kind != kind or (connections is not None and f.connection not in connections):
                continue
            if f.detail.get("folded"):
                if not detail:
                    n += int(f.detail.get("count", 1))
                elif len(detail) == 1 and next(iter(detail)) in FOLD_BY:
                    (key, value), = detail.items()
                    n += int(f.detail.get("by", {}).get(key, {}).get(value, 0))
                else:
                    raise ValueError(f"folded {kind} findings keep only {', '.join(FOLD_BY)}: cannot count by "
                                     f"{', '.join(detail)}")
            elif all(f.detail.get(k) == v for k, v in detail.items()):
                n += int(f.detail.get("count", 1)) if kind in AGGREGATED else 1
        return n

    def all_events(self) -> dict[str, int]:
        """:meth:`events` of every kind found (``counts()`` counts the findings)."""
        out: dict[str, int] = defaultdict(int)
        for f in self.findings:
            out[f.kind] += int(f.detail.get("count", 1)) if f.kind in AGGREGATED or f.detail.get("folded") else 1
        return dict(sorted(out.items()))

    def of_kind(self, kind: str) -> list[Finding]:
        return [f for f in self.findings if f.kind == kind]

    def to_dict(self) -> dict[str, Any]:
        names = [f.name for f in fields(Message)]
        msgs = []
        for m in self.messages:  # not asdict: it deep-copies every value, slow on a million packets
            d = {k: getattr(m, k) for k in names}
            d["duration"] = m.duration
            msgs.append(d)
        conns: list[dict[str, Any]] = []
        iwarp: list[dict[str, Any]] = []
        for c in self.connections + self.iwarp_connections:
            d = asdict(c)
            d["name"] = c.name
            (iwarp if c.transport == "iWARP" else conns).append(d)
        return {"file": self.path, "packets": self.packets, "rdma_packets": self.rdma_packets,
                "iwarp_frames": self.iwarp_frames, "iwarp_connections": iwarp, "mtu": self.mtu,
                "counts": self.counts(), "events": self.all_events(), "connections": conns, "messages": msgs,
                "findings": [{"kind": f.kind, "connection": f.connection, "frames": f.frames, "time": f.time,
                              "text": f.text, "detail": f.detail, "capture": f.capture} for f in self.findings],
                "checks": self.checks}

    def text(self, limit: int = 200, conn_limit: int = 50) -> str:
        iw = self.iwarp_connections
        rdma = "RDMA packets (RoCE, InfiniBand)" if self.iwarp_frames else "RDMA packets"
        msgs = len(self.messages) + sum(sum(c.summary.get("messages", {}).values()) for c in iw)
        conns = f"{len(self.connections) + len(iw)} connection(s) ({len(self.connections)} RoCE, {len(iw)} iWARP)" \
            if iw else f"{len(self.connections)} connection(s)"
        lines = [f"{self.path or 'capture'}: {self.packets} frames, {self.rdma_packets} {rdma}, "
                 + (f"{self.iwarp_frames} iWARP frames, " if self.iwarp_frames else "")
                 + f"{conns}, {msgs} message(s)"
                 + (f", path MTU ~{self.mtu}" if self.rdma_packets else "")]  # (RoCE's and InfiniBand's MTU)
        runs = any(c.run for c in self.connections)
        every = self.connections + iw
        for c in every[:conn_limit]:
            s = c.summary
            where = f" [{c.capture}]" if c.capture else ""
            lines.append(f"\nConnection {c.id}{where}: {c.name}" + (f" (run {c.run} of the capture)" if runs else ""))
            if c.transport == "iWARP":
                lines.extend(_iwarp_lines(c))
                continue
            if c.cm:
                lines.append(f"  set up by CM REQ frame {c.cm['req_frame']} / REP frame {c.cm['rep_frame']} "
                             f"(service ID {c.cm['service_id']:#x})" if isinstance(c.cm["service_id"], int) else
                             f"  set up by CM REQ frame {c.cm['req_frame']} / REP frame {c.cm['rep_frame']}")
            lines.append(f"  {c.packets} packets, {c.request_bytes} payload bytes requested, "
                         f"{c.retransmitted_bytes} retransmitted; goodput {s.get('goodput_mbps', 0):.2f} Mbit/s "
                         f"over {s.get('duration_s', 0) * 1e3:.3f} ms")
            lat = s.get("latency_us")
            if lat:
                lines.append("  message latency (us): " + ", ".join(f"{k} {v:.1f}" for k, v in lat.items()))
            ops = s.get("messages")
            if ops:
                lines.append("  messages: " + ", ".join(f"{n} {k}" for k, n in ops.items()))
        if len(every) > conn_limit:
            lines.append(f"\n... {len(every) - conn_limit} more connections (use -T json for all)")
        pacing = self.checks.get("cnp_pacing")
        if pacing and pacing["triggers"]:
            lines.append(f"\nCNP pacing (minimum gap {pacing['min_gap_us']:g} us, {pacing['triggers']} CE-marked "
                         f"requests, {pacing['cnps']} CNPs): consistent with "
                         + (", ".join(pacing["consistent"]) or "no hypothesis"))
            for name, h in pacing["hypotheses"].items():
                gap = h["min_observed_gap_us"]
                lines.append(f"  per {name:<8} expected {h['expected']:>5}, seen {h['seen']:>5}, "
                             f"{len(h['mismatched_scopes'])} scope(s) differ; smallest gap between CNPs "
                             + (f"{gap:.3f} us" if gap is not None else "-"))
        ctr_rows = self.checks.get("counters")
        if ctr_rows:
            lines.append("\nCounters (after - before) against the capture:")
            for r in ctr_rows:
                ctr = ", ".join(f"{k} {v}" for k, v in r["counters"].items()) or "no such counter in the dumps"
                mark = {True: "agree", False: "DIFFER", None: ""}[r["agree"]]
                lines.append(f"  {r['what']:<30} capture {r['capture']:>6}   {ctr}  {mark}")
        counts = self.counts()
        events = self.all_events()
        lines.append("\nFindings: " + (", ".join(f"{n} {k}" + (f" ({events[k]} events)" if events[k] != n else "")
                                                 for k, n in counts.items()) if counts else "none"))
        for f in self.findings[:limit]:
            conn = f"conn {f.connection}" if f.connection is not None else "capture"
            frames = ",".join(str(x) for x in f.frames[:8]) + ("..." if len(f.frames) > 8 else "")
            lines.append(f"  {f.kind:<16} {conn:<8} frames {frames:<20} {f.text}")
        if len(self.findings) > limit:
            lines.append(f"  ... {len(self.findings) - limit} more (use -T json for all)")
        return "\n".join(lines) + "\n"
