"""RDMA-aware analysis of a capture: connections, messages, and what went wrong on the wire.

Wireshark decodes RoCE packets but has no counterpart of its TCP analysis (``tcp.analysis.*``):
nothing pairs a NAK with the retransmission it caused.  This module does, on the columns of
:mod:`rdmalab.capture.columnar`:

* **Connections**: each RC/UC requester stream (source IP, destination IP, destination QP) is
  paired with the responder stream coming back (ACKs, READ responses, atomic ACKs) whose PSNs
  fall in the requests' PSNs.  The requester's QPN is the responses' destination QP.
* **Messages**: SEND and RDMA WRITE First..Last, READ request to its last response, atomics to
  their atomic ACK; size, start, completion, duration, result.
* **Findings** (``kind``, connection, ``frames``), per go-back-N state machines that follow
  IBA Vol 1 9.7 (and Lumina's checkers, SIGCOMM 2023: reference/congestion-and-analysis.md B3-B6):

  ==================  =======================================================================
  ``psn_gap``         request PSNs missing on the wire: holes inside one pass of the sender,
                      or a retransmission pass that does not start at the first missing PSN
  ``retransmission``  the sender goes back (go-back-N): from which PSN, how long after the
                      first copy (and after the NAK: ``nak_response_us``, Lumina's NAK
                      response latency), and the trigger: ``nak`` (a PSN sequence error NAK came
                      back), ``implied_nak`` (READ responses skipped a PSN), ``rnr`` or
                      ``timeout`` (nothing from the responder explains it)
  ``timeout``         a retransmission that only a timer explains (inferred)
  ``duplicate``       a request the responder had already accepted in order
  ``nak_seq_err``     NAK, PSN sequence error; ``detail.expected_psn`` is the first missing
                      PSN, ``detail.names_first_missing`` says whether the NAK names it, and
                      ``generation_us`` how long after the packet that revealed the gap it came
  ``nak_rnr``         RNR NAK, with the wait it caused until the request came again
  ``nak_other``       NAK invalid request / remote access / remote operational error
  ``implied_nak``     READ responses resumed past a missing one (IBA 9.7.5.1.x implied NAK)
  ``cnp``             a RoCEv2 congestion notification packet (opcode 0x81)
  ``ecn_ce``          a request marked Congestion Experienced, with the CE-to-CNP reaction time
  ``bad_icrc``        an ICRC that does not verify
  ``opcode_sequence`` a Middle/Last without its First, or a First while a message is open
  ``msn_jump``        the MSN in the ACKs goes backwards
  ``time_backwards``  capture timestamps that go backwards (can the capture be trusted?)
  ==================  =======================================================================

The analysis reads what is on the capture.  A capture taken at the receiver (or after the lossy
link) shows losses as PSN gaps; one taken at the sender shows every packet once and losses only
through the NAKs and retransmissions they cause.
"""

from __future__ import annotations

import html
import io
import ipaddress
import math
import os
import re
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from rdmalab.capture.columnar import Columns, read_columns
from rdmalab.capture.fields import frame_fields
from rdmalab.capture.reader import decode_record, read, records
from rdmalab.wire.ib import IB_MTUS
from rdmalab.wire.opcodes import CNP_OPCODE, OPCODES, Op, Pos, Transport, opcode_name
from rdmalab.wire.rdmap import TERM_ETYPE_NAMES, TERM_LAYER_NAMES, Terminate, term_errcode_names

_PSN_MOD = 1 << 24
_HALF = 1 << 23
_NAK_NAMES = {0: "PSN sequence error", 1: "invalid request", 2: "remote access error",
              3: "remote operational error", 4: "invalid RD request"}


@dataclass
class Finding:
    kind: str
    connection: int | None
    frames: list[int]
    time: float
    text: str
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
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
    id: int
    transport: str
    requester: str
    responder: str
    requester_qpn: int | None
    responder_qpn: int
    requester_port: int | None = None
    #: the connection manager exchange that set this connection up, when the capture holds it
    cm: dict[str, Any] | None = None
    packets: int = 0
    request_bytes: int = 0
    retransmitted_bytes: int = 0
    first: float = 0.0
    last: float = 0.0
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        rq = f"{self.requester_qpn:#x}" if self.requester_qpn is not None else "?"
        return f"{self.requester} QP {rq} -> {self.responder} QP {self.responder_qpn:#x} ({self.transport})"


@dataclass
class Analysis:
    path: str | None
    packets: int
    rdma_packets: int
    connections: list[Connection]
    messages: list[Message]
    findings: list[Finding]
    mtu: int
    throughput: dict[int, list[tuple[float, float]]] = field(default_factory=dict)
    #: per connection: (time, PSN - first PSN, 0 first copy / 1 sent again / 2 NAK) for the PSN plot
    psn_time: dict[int, list[tuple[float, int, int]]] = field(default_factory=dict)
    #: checks over the whole capture: ``cnp_pacing`` (per hypothesis), ``capture`` (trust)
    checks: dict[str, Any] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for f in self.findings:
            out[f.kind] += 1
        return dict(sorted(out.items()))

    def of_kind(self, kind: str) -> list[Finding]:
        return [f for f in self.findings if f.kind == kind]

    def to_dict(self) -> dict[str, Any]:
        msgs = []
        for m in self.messages:
            d = asdict(m)
            d["duration"] = m.duration
            msgs.append(d)
        conns = []
        for c in self.connections:
            d = asdict(c)
            d["name"] = c.name
            conns.append(d)
        return {"file": self.path, "packets": self.packets, "rdma_packets": self.rdma_packets, "mtu": self.mtu,
                "counts": self.counts(), "connections": conns, "messages": msgs,
                "findings": [asdict(f) for f in self.findings], "checks": self.checks}

    def text(self, limit: int = 200) -> str:
        lines = [f"{self.path or 'capture'}: {self.packets} frames, {self.rdma_packets} RDMA packets, "
                 f"{len(self.connections)} connection(s), {len(self.messages)} message(s), path MTU ~{self.mtu}"]
        for c in self.connections:
            s = c.summary
            lines.append(f"\nConnection {c.id}: {c.name}")
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
        lines.append("\nFindings: " + (", ".join(f"{n} {k}" for k, n in counts.items()) if counts else "none"))
        for f in self.findings[:limit]:
            conn = f"conn {f.connection}" if f.connection is not None else "capture"
            frames = ",".join(str(x) for x in f.frames[:8]) + ("..." if len(f.frames) > 8 else "")
            lines.append(f"  {f.kind:<16} {conn:<8} frames {frames:<20} {f.text}")
        if len(self.findings) > limit:
            lines.append(f"  ... {len(self.findings) - limit} more (use -T json for all)")
        return "\n".join(lines) + "\n"


def _opcode_classes() -> dict[str, np.ndarray]:
    t = {k: np.zeros(256, dtype=bool) for k in ("request", "response", "ack", "read_resp", "atomic_ack", "read_req",
                                                  "atomic", "first", "middle", "last", "only", "rc", "uc", "ud")}
    for code, info in OPCODES.items():
        if info.op in (Op.RDMA_READ_RESPONSE, Op.ACKNOWLEDGE, Op.ATOMIC_ACKNOWLEDGE):
            t["response"][code] = True
        elif info.op is not Op.CNP:
            t["request"][code] = True
        t["ack"][code] = info.op is Op.ACKNOWLEDGE
        t["read_resp"][code] = info.op is Op.RDMA_READ_RESPONSE
        t["atomic_ack"][code] = info.op is Op.ATOMIC_ACKNOWLEDGE
        t["read_req"][code] = info.op is Op.RDMA_READ_REQUEST
        t["atomic"][code] = info.op in (Op.CMP_SWAP, Op.FETCH_ADD)
        t["first"][code] = info.pos is Pos.FIRST
        t["middle"][code] = info.pos is Pos.MIDDLE
        t["last"][code] = info.pos is Pos.LAST
        t["only"][code] = info.pos is Pos.ONLY or info.pos is None
        t["rc"][code] = info.transport is Transport.RC
        t["uc"][code] = info.transport is Transport.UC
        t["ud"][code] = info.transport is Transport.UD
    return t


def _op_family(name: str) -> str:
    for fam in ("SEND", "RDMA WRITE", "RDMA READ Request", "RDMA READ Response", "CmpSwap", "FetchAdd",
                "Acknowledge"):
        if fam in name:
            return {"RDMA READ Request": "READ", "RDMA READ Response": "READ", "RDMA WRITE": "WRITE"}.get(fam, fam)
    return name


def _addr(cols: Columns, i: int, which: str) -> str:
    if cols.layers["ip"][i]:
        v = int(cols.data[f"ip.{which}"][i])
        return f"{v >> 24}.{(v >> 16) & 255}.{(v >> 8) & 255}.{v & 255}"

    return str(ipaddress.IPv6Address(bytes(cols.data[f"ipv6.{which}"][i]).ljust(16, b"\0")))


def _rel(psn: int, ref: int) -> int:
    """``psn`` unwrapped next to ``ref`` (24-bit PSN arithmetic, IBA Vol 1 9.7.1)."""
    return ref + ((psn - ref + _HALF) % _PSN_MOD - _HALF)


def analyze(source: str | os.PathLike[str] | Columns, *, sent: str | os.PathLike[str] | Columns | None = None,
            cnp_window_us: float = 1000.0, cnp_min_gap_us: float = 4.0) -> Analysis:
    """Analyse a capture file (or its columns).

    ``sent`` is a second capture of the same traffic taken before the lossy part of the path
    (at the sender, or a switch's ingress mirror) while ``source`` was taken after it: every RDMA
    packet the first holds and the second lacks is then a ``lost`` finding, exactly, including
    the losses no gap reveals (a packet the go-back-N restart would have discarded anyway).
    """
    cols = source if isinstance(source, Columns) else read_columns(source)
    path = cols.path if isinstance(source, Columns) else os.fspath(source)

    n = cols.n
    findings: list[Finding] = []
    frame = cols.data["frame.number"].astype(np.int64)
    ts = cols.data["frame.time_epoch"]
    # capture trust: timestamps that go backwards
    if n > 1:
        back = np.nonzero(np.diff(cols.data["frame.time_ns"]) < 0)[0]
        for i in back.tolist():
            findings.append(Finding("time_backwards", None, [int(frame[i]), int(frame[i + 1])], float(ts[i + 1]),
                                    f"timestamp goes back {(ts[i] - ts[i + 1]) * 1e6:.3f} us"))
    ib = cols.present("infiniband.bth")
    idx = np.nonzero(ib)[0]
    T = _opcode_classes()
    op = cols.data["infiniband.bth.opcode"]
    psn = cols.data["infiniband.bth.psn"].astype(np.int64)
    dqp = cols.data["infiniband.bth.destqp"].astype(np.int64)
    syn = cols.data["infiniband.aeth.syndrome"].astype(np.int64)
    has_aeth = cols.layers["infiniband.aeth"]
    msn = cols.data["infiniband.aeth.msn"].astype(np.int64)
    plen = cols.data["rdmalab.payload.len"].astype(np.int64)
    dmalen = cols.data["infiniband.reth.dmalen"].astype(np.int64)
    ecn = cols.data["ip.dsfield.ecn"]
    v6 = cols.layers["ipv6"] | cols.layers["rocev1"]
    ecn = np.where(v6, cols.data["ipv6.tclass"] & 3, ecn)
    icrc = cols.data["rdmalab.icrc.ok"]
    sport = cols.data["udp.srcport"]
    # path MTU: the largest payload seen, rounded up to an IB MTU
    big = int(plen[idx].max()) if len(idx) else 0
    mtu = next((m for m in IB_MTUS if m >= big), 4096)
    src = {}
    dst = {}
    for i in idx.tolist():
        src[i] = _addr(cols, i, "src")
        dst[i] = _addr(cols, i, "dst")
    # ---------------------------------------------------------------- streams and connections
    req_streams: dict[tuple[str, str, int], list[int]] = defaultdict(list)
    resp_streams: dict[tuple[str, str, int], list[int]] = defaultdict(list)
    cnps: list[int] = []
    for i in idx.tolist():
        o = int(op[i])
        if icrc[i] == 2:
            findings.append(Finding("bad_icrc", None, [int(frame[i])], float(ts[i]),
                                    f"{opcode_name(o)} PSN {psn[i]}: ICRC does not verify"))
        if o == CNP_OPCODE:
            cnps.append(i)
            continue
        key = (src[i], dst[i], int(dqp[i]))
        if T["response"][o]:
            resp_streams[key].append(i)
        elif T["request"][o] and not T["ud"][o]:
            req_streams[key].append(i)
    conns: list[Connection] = []
    conn_of_req: dict[tuple[str, str, int], int] = {}
    used_resp: set[tuple[str, str, int]] = set()
    for key, rows in sorted(req_streams.items(), key=lambda kv: kv[1][0]):
        a, b, q = key
        req_psns = {int(psn[i]) for i in rows}
        best, score = None, 0
        for rkey, rrows in resp_streams.items():
            if rkey[0] != b or rkey[1] != a or rkey in used_resp:
                continue
            s = sum(1 for i in rrows if int(psn[i]) in req_psns or (T["read_resp"][op[i]]))
            if s > score:
                best, score = rkey, s
        if best is not None:
            used_resp.add(best)
        transport = "UC" if T["uc"][op[rows[0]]] else "RC"
        c = Connection(len(conns), transport, a, b, best[2] if best else None, q, int(sport[rows[0]]))
        conns.append(c)
        conn_of_req[key] = c.id
    resp_of_conn = {}
    for cid in conn_of_req.values():
        c = conns[cid]
        if c.requester_qpn is not None:
            resp_of_conn[cid] = resp_streams[(c.responder, c.requester, c.requester_qpn)]
    if path is not None and not isinstance(source, Columns):
        _cm_exchanges(path, cols, dqp, conns)
    messages: list[Message] = []
    for key, cid in conn_of_req.items():
        _analyze_connection(conns[cid], req_streams[key], resp_of_conn.get(cid, []), cols, T, frame, ts, op, psn,
                            syn, has_aeth, msn, plen, dmalen, mtu, findings, messages)
    # ---------------------------------------------------------------- congestion: CE marks and CNPs
    cnp_by_pair: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i in cnps:
        cnp_by_pair[(src[i], dst[i])].append(i)
        owner = next((c.id for c in conns if c.requester == dst[i] and c.responder == src[i]
                      and c.requester_qpn == int(dqp[i])), None)
        findings.append(Finding("cnp", owner, [int(frame[i])], float(ts[i]),
                                f"CNP from {src[i]} to {dst[i]} QP {int(dqp[i]):#x}"))
    for key, rows in req_streams.items():
        cid = conn_of_req[key]
        for i in rows:
            if int(ecn[i]) != 3:
                continue
            later = [j for j in cnp_by_pair.get((dst[i], src[i]), []) if ts[j] >= ts[i]
                     and (ts[j] - ts[i]) * 1e6 <= cnp_window_us]
            react = (float(ts[later[0]] - ts[i]) * 1e6) if later else None
            frames = [int(frame[i])] + ([int(frame[later[0]])] if later else [])
            text = (f"PSN {psn[i]} marked CE; CNP {react:.3f} us later" if react is not None
                    else f"PSN {psn[i]} marked CE; no CNP back within {cnp_window_us:g} us")
            findings.append(Finding("ecn_ce", cid, frames, float(ts[i]), text, {"cnp_after_us": react}))
    ackreq = cols.data["infiniband.bth.a"]
    for key, cid in conn_of_req.items():
        findings.extend(_ack_coalescing(cid, req_streams[key], resp_of_conn.get(cid, []), T, op, psn, syn, has_aeth,
                                        ackreq, frame, ts))
    if path is not None and not isinstance(source, Columns) and bool(cols.layers["tcp"].any()):
        findings.extend(_iwarp_findings(path))
    findings.extend(_capture_gaps(findings))
    triggers = [(i, conns[conn_of_req[key]].requester_qpn) for key, rows in req_streams.items()
                for i in rows if int(ecn[i]) == 3]
    checks = {"cnp_pacing": cnp_pacing(cols, triggers, cnps, src, dst, dqp, cnp_min_gap_us)}
    if sent is not None:
        findings.extend(_lost(cols, sent if isinstance(sent, Columns) else read_columns(sent), conns))
    findings.sort(key=lambda f: (f.time, f.frames[0] if f.frames else 0))
    throughput = {c.id: c.summary.pop("_series", []) for c in conns}
    psn_time = {c.id: c.summary.pop("_psn", []) for c in conns}
    return Analysis(path, n, len(idx), conns, messages, findings, mtu, throughput, psn_time, checks)


def _ack_coalescing(cid: int, reqs: list[int], resps: list[int], T: dict[str, np.ndarray], op: np.ndarray,
                    psn: np.ndarray, syn: np.ndarray, has_aeth: np.ndarray, ackreq: np.ndarray, frame: np.ndarray,
                    ts: np.ndarray) -> list[Finding]:
    """``ack_coalescing`` anomalies of one connection's acknowledgements.

    A responder may coalesce: one ACK acknowledges every request up to its PSN (IBA Vol 1
    9.7.5.1.3), so fewer ACKs than requests is normal.  Anomalies: an ACK whose PSN goes below an
    earlier ACK's (ACKs must not decrease: Lumina's ``GBNCheck``, congestion-and-analysis.md B3),
    an ACK for a PSN the requester has not sent, and a request with the AckReq bit that no later
    acknowledgement covers although the responder went on answering."""
    out: list[Finding] = []
    if not reqs or not resps:
        return out
    base = int(psn[reqs[0]])
    top = None  # highest request PSN sent so far (relative to the first)
    last_ack: tuple[int, int] | None = None  # (relative PSN, row)
    acks: list[tuple[float, int]] = []  # (time, relative PSN) of every acknowledgement
    for i in sorted(reqs + resps, key=lambda r: (ts[r], r)):
        o = int(op[i])
        p = _rel(int(psn[i]), base)
        if T["request"][o]:
            top = p if top is None or p > top else top
            continue
        if not (has_aeth[i] and T["ack"][o] and int(syn[i]) >> 5 == 0):
            if has_aeth[i] and int(syn[i]) >> 5 == 3 and int(syn[i]) & 0x1F:
                # a NAK other than PSN sequence error (invalid request, remote access or remote
                # operation error) answers the request it names and ends the connection: the
                # responder goes to the error state and drops what follows, the requester flushes
                # the rest (IBA Vol 1 9.7.5.2.5 and 9.9.3): every request from its PSN on is answered
                acks.append((float(ts[i]), 1 << 62))
            elif has_aeth[i] or T["read_resp"][o] or T["atomic_ack"][o]:
                acks.append((float(ts[i]), p if not (has_aeth[i] and int(syn[i]) >> 5 == 3) else p - 1))
            continue
        acks.append((float(ts[i]), p))
        unsent = False
        if last_ack is not None and p < last_ack[0]:
            out.append(Finding("ack_coalescing", cid, [int(frame[last_ack[1]]), int(frame[i])], float(ts[i]),
                               f"ACK PSN {int(psn[i])} is below the earlier ACK's {int(psn[last_ack[1]])}: "
                               f"acknowledgements went backwards", {"anomaly": "ack_backwards"}))
        if top is not None and p > top:
            unsent = True
            out.append(Finding("ack_coalescing", cid, [int(frame[i])], float(ts[i]),
                               f"ACK PSN {int(psn[i])} acknowledges a request not sent yet (highest sent "
                               f"{(base + top) % _PSN_MOD})", {"anomaly": "ack_unsent"}))
        if not unsent and (last_ack is None or p >= last_ack[0]):
            last_ack = (p, i)
    last_t = max(t for t, _ in acks) if acks else None
    for i in reqs:
        if not ackreq[i] or last_t is None or ts[i] >= last_t:
            continue
        p = _rel(int(psn[i]), base)
        if not any(t >= ts[i] and q >= p for t, q in acks):
            out.append(Finding("ack_coalescing", cid, [int(frame[i])], float(ts[i]),
                               f"PSN {int(psn[i])} asked for an ACK (AckReq) and no later acknowledgement covers "
                               f"it, though the responder answered later requests", {"anomaly": "ackreq_unanswered"}))
    return out


def _iwarp_findings(path: str) -> list[Finding]:
    """``bad_crc32c`` and ``terminate`` from the iWARP PDUs of the capture's TCP streams.

    iWARP needs TCP reassembly, which the columns do not do: the per-packet decoder
    (:mod:`rdmalab.capture.iwarp`) finds the MPA FPDUs; a Terminate (RDMAP opcode 7, RFC 5040
    4.8) is explained by its layer, error type and error code (RFC 5040 7, RFC 5044 8, RFC 6581)."""
    out: list[Finding] = []
    for cp in read(path):
        for pdu in cp.pdus:
            if pdu.crc_kind == "crc32c" and pdu.crc_status == "bad":
                exp = f", should be {pdu.crc_expected:#010x}" if pdu.crc_expected is not None else ""
                out.append(Finding("bad_crc32c", None, [cp.frame_number], cp.timestamp,
                                   f"{pdu.summary()}: MPA CRC32c {pdu.crc or 0:#010x} does not verify{exp}"))
            term = pdu.get(Terminate)
            if term is not None:
                layer = TERM_LAYER_NAMES.get(term.layer, f"layer {term.layer}")
                etype = TERM_ETYPE_NAMES.get(term.layer, {}).get(term.etype, f"type {term.etype}")
                err = term_errcode_names(term.layer, term.etype).get(term.errcode, f"code {term.errcode:#04x}")
                out.append(Finding("terminate", None, [cp.frame_number], cp.timestamp,
                                   f"Terminate: {layer} error, {etype}: {err} (layer {term.layer}, type {term.etype}, "
                                   f"code {term.errcode:#04x}); the connection is closed after it (RFC 5040 7.1)",
                                   {"layer": term.layer, "etype": term.etype, "errcode": term.errcode,
                                    "ddp_header": bool(term.hdrct_d), "rdmap_header": bool(term.hdrct_r)}))
    return out


def _capture_gaps(findings: list[Finding], burst_us: float = 50.0) -> list[Finding]:
    """Gaps in the capture rather than losses on the wire.

    A PSN gap whose packets the sender never sends again (no go-back-N restart from a PSN in it)
    was received: the responder would otherwise have NAKed or timed out and the requester resent
    them, so the capture (a mirror port, an offloaded sniffer) missed them.  Such gaps on several
    connections within ``burst_us`` of each other are a capture drop burst."""
    retrans: dict[int | None, list[tuple[float, int]]] = defaultdict(list)
    for f in findings:
        if f.kind == "retransmission":
            retrans[f.connection].append((f.time, int(f.detail.get("from_psn", -1))))
    out: list[Finding] = []
    for f in findings:
        if f.kind != "psn_gap":
            continue
        missing = set(f.detail.get("missing", []))
        lo = f.detail.get("missing", [0])[0]
        # a later go-back-N restart from the first missing PSN or before it sends them again
        if any(t >= f.time and 0 <= (lo - p) % _PSN_MOD < _PSN_MOD // 2 for t, p in retrans.get(f.connection, [])):
            continue
        out.append(Finding("capture_gap", f.connection, list(f.frames), f.time,
                           f"{f.text.split(':')[0]} never sent again: received but not captured "
                           f"(a capture drop, not a loss on the wire)", {"missing": sorted(missing)}))
    out.sort(key=lambda f: f.time)
    k = 0
    while k < len(out):
        j = k
        while j + 1 < len(out) and (out[j + 1].time - out[k].time) * 1e6 <= burst_us:
            j += 1
        conns = {f.connection for f in out[k:j + 1]}
        if len(conns) > 1:
            for f in out[k:j + 1]:
                f.detail["burst_connections"] = len(conns)
                f.text += f"; one of {len(conns)} connections with gaps within {burst_us:g} us"
        k = j + 1
    return out


#: What the capture shows against the NIC counters that count the same events: (row, finding
#: kinds counted in the capture, counter names).  mlx5 names from Lumina's counter checks
#: (congestion-and-analysis.md B3, B5); rxe names from rxe_hw_counters.c (soft-engine-interop.md 1.4).
COUNTER_ROWS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("sequence-error NAKs", ("nak_seq_err",), ("out_of_sequence", "rcvd_seq_err", "out_of_seq_request")),
    ("NAK-triggered retransmissions", ("retransmission:nak",), ("packet_seq_err",)),
    ("timeouts", ("timeout",), ("local_ack_timeout_err",)),
    # rxe counts every go-back-N retry, NAK- or timer-triggered (rxe_comp.c rxe_completer(), COMPST_ERROR_RETRY)
    ("go-back-N retries", ("retransmission",), ("completer_retry_err",)),
    ("duplicate requests", ("duplicate",), ("duplicate_request",)),
    ("implied NAKs", ("implied_nak",), ("implied_nak_seq_err",)),
    ("CNPs sent", ("cnp",), ("np_cnp_sent",)),
    ("CNPs handled", ("cnp",), ("rp_cnp_handled",)),
    ("ECN-marked packets", ("ecn_ce",), ("np_ecn_marked_roce_packets",)),
    ("bad ICRC", ("bad_icrc",), ("rx_icrc_encapsulated",)),
)

_COUNTER_PAIR = re.compile(r"(?<![\w/.-])([A-Za-z_][\w.]*)\s*:?\s+(\d+)(?![\w/.])")


def parse_counters(text: str, where: str = "counters") -> dict[str, int]:
    """Counters from ``rdma statistic show`` (``link rxe0/1 name value ...``) or ``ethtool -S``
    (``name: value`` lines) text; several dumps in one file add up (several ports)."""
    out: dict[str, int] = defaultdict(int)
    for m in _COUNTER_PAIR.finditer(text):
        out[m.group(1)] += int(m.group(2))
    if not out:
        raise ValueError(f"{where}: no counters found (expected the output of `rdma statistic show` "
                         f"or `ethtool -S IFACE`)")
    return dict(out)


def counters_side_by_side(a: Analysis, before: dict[str, int], after: dict[str, int]) -> list[dict[str, Any]]:
    """One row per kind of event: the capture's count and each matching counter's change."""
    counts = a.counts()
    nak_retrans = sum(1 for f in a.findings if f.kind == "retransmission" and f.detail.get("trigger") == "nak")
    rows = []
    for what, kinds, names in COUNTER_ROWS:
        seen = sum(nak_retrans if k == "retransmission:nak" else counts.get(k, 0) for k in kinds)
        ctr = {n: after[n] - before.get(n, 0) for n in names if n in after}
        rows.append({"what": what, "capture": seen, "counters": ctr,
                     "agree": None if not ctr else any(v == seen for v in ctr.values())})
    return rows


#: CNP pacing hypotheses (congestion-and-analysis.md B5; rdmalab.verbs.engine.cnp.CnpPacer's
#: scopes): what one "last CNP" timer covers.  Keys are built from (sender IP, receiver IP,
#: sender QPN), the sender being the one the CE-marked data came from and the CNP goes to.
PACING_HYPOTHESES: dict[str, Any] = {
    "qp": lambda s, r, q: (s, r, q),
    "ip_pair": lambda s, r, q: (s, r),
    "port": lambda s, r, q: (r,),
}


def cnp_pacing(cols: Columns, triggers: list[tuple[int, int | None]], cnps: list[int], src: dict[int, str],
               dst: dict[int, str], dqp: np.ndarray, min_gap_us: float) -> dict[str, Any]:
    """Check the CNPs against each pacing hypothesis, as Lumina's ``CNPCheck`` does.

    Under a hypothesis, a CE-marked request produces a CNP when no CNP was expected in its scope
    within the last ``min_gap_us`` (the notification point's ``min_time_between_cnps``); the
    capture is consistent with the hypothesis when, scope by scope, the CNPs seen equal the CNPs
    expected.  Also reports the smallest gap between two CNPs seen in one scope (below the
    minimum gap means the NIC does not pace in that scope)."""
    tns = cols.data["frame.time_ns"].astype(np.int64)
    gap_ns = round(min_gap_us * 1000)
    trig = sorted(triggers, key=lambda t: int(tns[t[0]]))
    out: dict[str, Any] = {"min_gap_us": min_gap_us, "triggers": len(trig), "cnps": len(cnps), "hypotheses": {},
                           "consistent": []}
    for name, key in PACING_HYPOTHESES.items():
        expected: dict[Any, int] = defaultdict(int)
        last: dict[Any, int] = {}
        for i, qpn in trig:
            k = key(src[i], dst[i], qpn)
            t = int(tns[i])
            if k in last and t - last[k] < gap_ns:
                continue
            last[k] = t
            expected[k] += 1
        seen: dict[Any, int] = defaultdict(int)
        prev: dict[Any, int] = {}
        min_gap: int | None = None
        for j in sorted(cnps, key=lambda j: int(tns[j])):
            k = key(dst[j], src[j], int(dqp[j]))
            seen[k] += 1
            t = int(tns[j])
            if k in prev:
                d = t - prev[k]
                min_gap = d if min_gap is None else min(min_gap, d)
            prev[k] = t
        scopes = set(expected) | set(seen)
        mismatched = sorted((list(k), expected.get(k, 0), seen.get(k, 0)) for k in scopes
                            if expected.get(k, 0) != seen.get(k, 0))
        out["hypotheses"][name] = {
            "expected": sum(expected.values()), "seen": sum(seen.values()), "scopes": len(scopes),
            "mismatched_scopes": [{"scope": k, "expected": e, "seen": n} for k, e, n in mismatched],
            "min_observed_gap_us": None if min_gap is None else min_gap / 1000,
        }
        if not mismatched and scopes:
            out["consistent"].append(name)
    return out


def _analyze_connection(c: Connection, reqs: list[int], resps: list[int], cols: Columns, T: dict[str, np.ndarray],
                        frame: np.ndarray, ts: np.ndarray, op: np.ndarray, psn: np.ndarray, syn: np.ndarray,
                        has_aeth: np.ndarray, msn: np.ndarray, plen: np.ndarray, dmalen: np.ndarray, mtu: int,
                        findings: list[Finding], messages: list[Message]) -> None:
    rows = sorted(reqs + resps)
    is_req = set(reqs)
    c.packets = len(rows)
    c.first, c.last = float(ts[rows[0]]), float(ts[rows[-1]])
    ref = int(psn[reqs[0]])
    epsn = ref  # the responder's expected PSN
    prev = None  # last request PSN seen (unwrapped)
    first_seen: dict[int, int] = {}  # unwrapped PSN -> row of its first copy
    pending_nak: int | None = None  # row of a NAK (seq err) not yet answered by a retransmission
    pending_rnr: int | None = None
    read_gap: int | None = None  # row of READ responses resuming past a missing PSN
    last_msn: int | None = None
    open_msg: Message | None = None
    open_reads: list[tuple[Message, int]] = []  # (message, last response PSN)
    unacked: list[Message] = []
    resp_expect: int | None = None  # next READ response PSN the requester expects
    read_windows: list[tuple[int, int]] = []  # response PSNs of the READ requests not yet answered
    read_end: dict[int, Message] = {}
    cid = c.id
    uniq_bytes = 0
    series: list[tuple[float, int]] = []
    psn_points: list[tuple[float, int, int]] = []  # (time, PSN - first PSN, 0 first copy / 1 again / 2 NAK)
    gap_seen: dict[int, float] = {}  # first missing PSN -> when the capture last showed that gap
    for i in rows:
        t = float(ts[i])
        o = int(op[i])
        name = opcode_name(o)
        if i in is_req:
            p = _rel(int(psn[i]), prev if prev is not None else ref)
            nps = max(1, math.ceil(int(dmalen[i]) / mtu)) if T["read_req"][o] else 1
            retrans = prev is not None and p <= prev
            if retrans:
                trigger = "timeout"
                cause: list[int] = []
                response_us = None
                if pending_nak is not None:
                    trigger, cause = "nak", [int(frame[pending_nak])]
                    response_us = (t - float(ts[pending_nak])) * 1e6
                elif pending_rnr is not None:
                    trigger, cause = "rnr", [int(frame[pending_rnr])]
                elif read_gap is not None and T["read_req"][o]:
                    trigger, cause = "implied_nak", [int(frame[read_gap])]
                orig = first_seen.get(p)
                after = (t - float(ts[orig])) * 1e6 if orig is not None else None
                txt = f"go-back-N from PSN {p % _PSN_MOD} ({trigger}"
                txt += f", {after:.1f} us after the first copy)" if after is not None else ")"
                findings.append(Finding("retransmission", cid, [int(frame[i])] + cause, t, txt,
                                        {"from_psn": p % _PSN_MOD, "trigger": trigger, "after_us": after,
                                         "nak_response_us": response_us}))
                if trigger == "timeout":
                    findings.append(Finding("timeout", cid, [int(frame[i])], t,
                                            f"PSN {p % _PSN_MOD} sent again with no NAK to explain it (timer)",
                                            {"psn": p % _PSN_MOD, "after_us": after}))
                if pending_rnr is not None:
                    wait = (t - float(ts[pending_rnr])) * 1e6
                    for f in reversed(findings):
                        if f.kind == "nak_rnr" and f.frames[0] == int(frame[pending_rnr]):
                            f.detail["wait_us"] = wait
                            f.text += f"; the request came again {wait:.1f} us later"
                            break
                pending_nak = pending_rnr = read_gap = None
                if p > epsn:
                    _gap(findings, cid, epsn, p, i, frame, t, "the retransmission pass starts past it")
                    gap_seen[epsn] = t
            elif prev is not None and p > prev + 1 and p > epsn:
                _gap(findings, cid, max(prev + 1, epsn), p, i, frame, t, "")
                gap_seen[max(prev + 1, epsn)] = t
            if p < epsn and not (retrans and p >= epsn):
                findings.append(Finding("duplicate", cid, [int(frame[i])], t,
                                        f"{name} PSN {p % _PSN_MOD} was already accepted", {"psn": p % _PSN_MOD}))
            if p not in first_seen:
                first_seen[p] = i
                uniq_bytes += int(plen[i])
                c.request_bytes += int(plen[i])
                psn_points.append((t, p - ref, 0))
            else:
                c.retransmitted_bytes += int(plen[i])
                psn_points.append((t, p - ref, 1))
            prev = p
            series.append((t, int(plen[i])))
            if T["read_req"][o] and not any(w[0] == p for w in read_windows) and p >= epsn:
                read_windows.append((p, p + nps - 1))
            if p == epsn:  # accepted in order
                epsn += nps
                open_msg = _message_step(c, open_msg, i, o, p, nps, name, T, frame, t, plen, dmalen, findings,
                                         messages, unacked, open_reads, read_end)
        else:  # a response
            p = _rel(int(psn[i]), prev if prev is not None else ref)
            if has_aeth[i]:
                s = int(syn[i])
                kind = (s >> 5) & 3
                m = int(msn[i])
                if last_msn is not None and ((m - last_msn) % _PSN_MOD) > _HALF:
                    findings.append(Finding("msn_jump", cid, [int(frame[i])], t,
                                            f"MSN goes back from {last_msn} to {m}", {"from": last_msn, "to": m}))
                last_msn = m
                if kind == 3:
                    code = s & 0x1F
                    if code == 0:
                        ok = p == epsn
                        txt = f"NAK PSN sequence error at PSN {p % _PSN_MOD}"
                        txt += "" if ok else f" (the first missing PSN is {epsn % _PSN_MOD})"
                        psn_points.append((t, p - ref, 2))
                        seen = gap_seen.pop(p, None)
                        gen = (t - seen) * 1e6 if seen is not None else None
                        findings.append(Finding("nak_seq_err", cid, [int(frame[i])], t, txt,
                                                {"psn": p % _PSN_MOD, "expected_psn": epsn % _PSN_MOD,
                                                 "names_first_missing": ok, "generation_us": gen}))
                        pending_nak = i
                    else:
                        nm = _NAK_NAMES.get(code, f"code {code}")
                        findings.append(Finding("nak_other", cid, [int(frame[i])], t, f"NAK {nm} at PSN {p % _PSN_MOD}",
                                                {"psn": p % _PSN_MOD, "code": code, "name": nm}))
                        for msg in unacked:
                            if msg.first_psn <= p % _PSN_MOD <= msg.last_psn or msg.first_psn == p % _PSN_MOD:
                                msg.result, msg.completion = f"NAK {nm}", t
                        unacked[:] = [x for x in unacked if x.result == "incomplete"]
                    continue
                if kind == 1:
                    findings.append(Finding("nak_rnr", cid, [int(frame[i])], t,
                                            f"RNR NAK at PSN {p % _PSN_MOD} (timer code {s & 0x1F})",
                                            {"psn": p % _PSN_MOD, "timer": s & 0x1F}))
                    pending_rnr = i
                    continue
                # an ACK (or a READ response / atomic ACK carrying an AETH): completes messages up to PSN p
                for msg in unacked:
                    if msg.op in ("SEND", "WRITE") and _rel(msg.last_psn, p) <= p:
                        msg.completion, msg.result = t, "ok"
                    elif msg.op in ("CmpSwap", "FetchAdd") and T["atomic_ack"][o] and _rel(msg.first_psn, p) == p:
                        msg.completion, msg.result = t, "ok"
                unacked[:] = [x for x in unacked if x.result == "incomplete"]
            if T["read_resp"][o]:
                # the READ requests' response windows, oldest first (IBA 9.7.5.1.4: responses in order)
                while read_windows and p > read_windows[0][1]:  # past the oldest window: its tail is missing
                    lo, hi = read_windows.pop(0)
                    want = resp_expect if resp_expect is not None and lo <= resp_expect <= hi else lo
                    if read_gap is None:
                        read_gap = i
                        findings.append(Finding("implied_nak", cid, [int(frame[i])], t,
                                                f"READ response PSN {p % _PSN_MOD} arrives while {want % _PSN_MOD} "
                                                "is missing: the requester must re-issue the READ",
                                                {"psn": p % _PSN_MOD, "expected_psn": want % _PSN_MOD}))
                    resp_expect = None
                if read_windows and read_windows[0][0] <= p <= read_windows[0][1]:
                    want = resp_expect if resp_expect is not None else read_windows[0][0]
                    if p > want and read_gap is None:
                        read_gap = i
                        findings.append(Finding("implied_nak", cid, [int(frame[i])], t,
                                                f"READ response PSN {p % _PSN_MOD} arrives while {want % _PSN_MOD} "
                                                "is missing: the requester must re-issue the READ",
                                                {"psn": p % _PSN_MOD, "expected_psn": want % _PSN_MOD}))
                    resp_expect = p + 1
                    if p == read_windows[0][1]:
                        read_windows.pop(0)
                        resp_expect = None
                rmsg = read_end.get(p % _PSN_MOD)
                if rmsg is not None and rmsg.result == "incomplete":
                    rmsg.completion, rmsg.result = t, "ok"
                    if rmsg in unacked:
                        unacked.remove(rmsg)
    dur = c.last - c.first
    done = [m for m in messages if m.connection == cid and m.duration is not None]
    lat = np.array([m.duration for m in done], dtype=float) * 1e6 if done else np.zeros(0)
    fam: dict[str, int] = defaultdict(int)
    for mm in messages:
        if mm.connection == cid:
            fam[mm.op] += 1
    c.summary = {
        "duration_s": dur,
        "goodput_mbps": (uniq_bytes * 8 / dur / 1e6) if dur > 0 else 0.0,
        "throughput_mbps": ((c.request_bytes + c.retransmitted_bytes) * 8 / dur / 1e6) if dur > 0 else 0.0,
        "retransmitted_fraction": (c.retransmitted_bytes / max(1, c.request_bytes + c.retransmitted_bytes)),
        "latency_us": ({"p50": float(np.percentile(lat, 50)), "p90": float(np.percentile(lat, 90)),
                        "p99": float(np.percentile(lat, 99)), "max": float(lat.max())} if len(lat) else {}),
        "messages": dict(fam),
        "_series": _series(series, c.first, c.last),
        "_psn": psn_points,
    }


def _cm_exchanges(path: str, cols: Columns, dqp: np.ndarray, conns: list[Connection]) -> None:
    """Attach the CM REQ/REP exchange (IBA Vol 1 12.6) to the connection whose QPNs it names.

    CM MADs are UD SENDs to QP 1; only those frames go through the per-packet decoder."""
    want = set((cols.data["frame.number"][cols.layers["infiniband.deth"] & (dqp == 1)]).tolist())
    if not want:
        return
    reqs: dict[int, dict[str, Any]] = {}
    reps: list[dict[str, Any]] = []
    for rec in records(path):
        if rec.frame_number not in want:
            continue
        f = frame_fields(decode_record(rec))
        if "infiniband.cm.req.localqpn" in f:
            reqs[int(f["infiniband.cm.req"])] = {"frame": rec.frame_number, "qpn": int(f["infiniband.cm.req.localqpn"]),
                                                 "psn": int(f.get("infiniband.cm.req.startpsn", 0)),
                                                 "service_id": f.get("infiniband.cm.req.serviceid"),
                                                 "ip": f.get("ip.src")}
        elif "infiniband.cm.rep.localqpn" in f:
            reps.append({"frame": rec.frame_number, "qpn": int(f["infiniband.cm.rep.localqpn"]),
                         "psn": int(f.get("infiniband.cm.rep.startpsn", 0)),
                         "remote_comm_id": int(f.get("infiniband.cm.rep.remotecommid", -1)), "ip": f.get("ip.src")})
    for rep in reps:
        req = reqs.get(rep["remote_comm_id"])
        if req is None:
            continue
        for c in conns:
            if {(c.requester, c.requester_qpn), (c.responder, c.responder_qpn)} == {(req["ip"], req["qpn"]),
                                                                                   (rep["ip"], rep["qpn"])}:
                c.cm = {"req_frame": req["frame"], "rep_frame": rep["frame"], "service_id": req["service_id"],
                        "req_ip": req["ip"], "rep_ip": rep["ip"],
                        "req_qpn": req["qpn"], "rep_qpn": rep["qpn"], "req_starting_psn": req["psn"],
                        "rep_starting_psn": rep["psn"]}


def _packet_keys(cols: Columns) -> dict[tuple[Any, ...], list[int]]:
    """RDMA packet identity (addresses, QP, PSN, opcode, payload length) -> its rows, in time order."""
    out: dict[tuple[Any, ...], list[int]] = defaultdict(list)
    rows = np.nonzero(cols.present("infiniband.bth"))[0]
    for i in rows.tolist():
        out[(_addr(cols, i, "src"), _addr(cols, i, "dst"), int(cols.data["infiniband.bth.destqp"][i]),
             int(cols.data["infiniband.bth.psn"][i]), int(cols.data["infiniband.bth.opcode"][i]),
             int(cols.data["rdmalab.payload.len"][i]))].append(i)
    return out


def _lost(after: Columns, before: Columns, conns: list[Connection]) -> list[Finding]:
    """Packets in ``before`` that never show up in ``after``: each arrival is matched to the earliest
    unmatched copy sent no later than it; the copies left over were lost."""
    got = _packet_keys(after)
    out = []
    t_a, t_b = after.data["frame.time_ns"], before.data["frame.time_ns"]
    for key, rows in _packet_keys(before).items():
        arrivals = got.get(key, [])
        matched = [False] * len(rows)
        for j in arrivals:
            for k, i in enumerate(rows):
                if not matched[k] and t_b[i] <= t_a[j]:
                    matched[k] = True
                    break
            else:  # arrived with no earlier send: clocks differ; match the first unmatched copy
                for k in range(len(rows)):
                    if not matched[k]:
                        matched[k] = True
                        break
        src, dst, qp, psn, op, _ = key
        cid = next((c.id for c in conns if (c.requester, c.responder, c.responder_qpn) == (src, dst, qp)
                    or (c.responder, c.requester, c.requester_qpn) == (src, dst, qp)), None)
        for k, i in enumerate(rows):
            if not matched[k]:
                out.append(Finding("lost", cid, [int(before.data["frame.number"][i])],
                                   float(before.data["frame.time_epoch"][i]),
                                   f"{opcode_name(op)} PSN {psn} from {src} to QP {qp:#x} was sent and never arrived "
                                   "(frame number in the sender's capture)", {"psn": psn, "qp": qp, "opcode": op}))
    return out


def _series(points: list[tuple[float, int]], t0: float, t1: float, bins: int = 50) -> list[tuple[float, float]]:
    """Throughput over time: (seconds since the connection's first packet, Mbit/s) per bin."""
    if not points or t1 <= t0:
        return []
    width = (t1 - t0) / bins
    acc = np.zeros(bins)
    for t, b in points:
        acc[min(bins - 1, int((t - t0) / width))] += b
    return [(k * width, float(acc[k] * 8 / width / 1e6)) for k in range(bins)]


def _gap(findings: list[Finding], cid: int, lo: int, hi: int, i: int, frame: np.ndarray, t: float, why: str) -> None:
    missing = [p % _PSN_MOD for p in range(lo, hi)]
    txt = f"PSN {missing[0]}" + (f"..{missing[-1]}" if len(missing) > 1 else "") + \
        f" missing ({len(missing)} packet{'s' if len(missing) > 1 else ''})" + (f": {why}" if why else "")
    findings.append(Finding("psn_gap", cid, [int(frame[i])], t, txt, {"missing": missing}))


def _message_step(c: Connection, open_msg: Message | None, i: int, o: int, p: int, nps: int, name: str,
                  T: dict[str, np.ndarray], frame: np.ndarray, t: float, plen: np.ndarray, dmalen: np.ndarray,
                  findings: list[Finding], messages: list[Message], unacked: list[Message],
                  open_reads: list[tuple[Message, int]], read_end: dict[int, Message]) -> Message | None:
    fam = _op_family(name)
    first, middle, last, only = T["first"][o], T["middle"][o], T["last"][o], T["only"][o]
    if (middle or last) and (open_msg is None or open_msg.op != fam):
        findings.append(Finding("opcode_sequence", c.id, [int(frame[i])], t,
                                f"{name} PSN {p % _PSN_MOD} without a {fam} First before it"))
        return open_msg
    if (first or only) and open_msg is not None:
        findings.append(Finding("opcode_sequence", c.id, [int(frame[i])], t,
                                f"{name} PSN {p % _PSN_MOD} while the {open_msg.op} from PSN {open_msg.first_psn} "
                                "is not finished"))
        open_msg = None
    if first or only:
        size = int(dmalen[i]) if T["read_req"][o] else 8 if T["atomic"][o] else int(plen[i])
        msg = Message(c.id, fam, p % _PSN_MOD, (p + nps - 1) % _PSN_MOD, size, t, frames=[int(frame[i])])
        if only:
            messages.append(msg)
            if T["read_req"][o]:
                read_end[(p + nps - 1) % _PSN_MOD] = msg
            if c.transport == "UC":
                msg.result, msg.completion = "sent (UC: no acknowledgement)", t
            else:
                unacked.append(msg)
            return None
        return msg
    assert open_msg is not None
    open_msg.size += int(plen[i])
    open_msg.frames.append(int(frame[i]))
    open_msg.last_psn = p % _PSN_MOD
    if last:
        messages.append(open_msg)
        if c.transport == "UC":
            open_msg.result, open_msg.completion = "sent (UC: no acknowledgement)", t
        else:
            unacked.append(open_msg)
        return None
    return open_msg


# ============================================================================ HTML report


def html_report(a: Analysis) -> str:
    """A self-contained HTML page: summary table, findings, and plots (inline SVG, matplotlib)."""
    import matplotlib  # optional: matplotlib (analysis extra)

    matplotlib.use("Agg")  # no display: render to SVG text
    import matplotlib.pyplot as plt

    def svg(fig: Any) -> str:
        buf = io.StringIO()
        fig.savefig(buf, format="svg", bbox_inches="tight")
        plt.close(fig)
        text = buf.getvalue()
        return text[text.find("<svg"):]

    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>rdmalab analysis: "
             f"{html.escape(str(a.path))}</title><style>body{{font-family:sans-serif;margin:2em;max-width:1100px}}"
             "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}"
             ".k{font-family:monospace}</style></head><body>",
             f"<h1>{html.escape(os.path.basename(str(a.path)))}</h1>",
             f"<p>{a.packets} frames, {a.rdma_packets} RDMA packets, {len(a.connections)} connection(s), "
             f"{len(a.messages)} message(s). Findings: "
             + (", ".join(f"<b>{n}</b> {html.escape(k)}" for k, n in a.counts().items()) or "none") + "</p>",
             "<h2>Connections</h2><table><tr><th>#</th><th>requester → responder</th><th>packets</th>"
             "<th>goodput Mbit/s</th><th>retransmitted bytes</th><th>latency p50/p99 (µs)</th></tr>"]
    for c in a.connections:
        lat = c.summary.get("latency_us") or {}
        parts.append(f"<tr><td>{c.id}</td><td>{html.escape(c.name)}</td><td>{c.packets}</td>"
                     f"<td>{c.summary.get('goodput_mbps', 0):.2f}</td><td>{c.retransmitted_bytes}</td>"
                     f"<td>{lat.get('p50', float('nan')):.1f} / {lat.get('p99', float('nan')):.1f}</td></tr>")
    parts.append("</table>")
    if a.connections:
        fig, axes = plt.subplots(len(a.connections), 1, figsize=(10, 2.6 * len(a.connections)), squeeze=False)
        for ax, c in zip(axes[:, 0], a.connections, strict=True):
            ser = a.throughput.get(c.id) or []
            if ser:
                ax.step([x * 1e3 for x, _ in ser], [y for _, y in ser], where="post")
            for f in a.findings:
                if f.connection == c.id and f.kind in ("retransmission", "nak_seq_err", "psn_gap", "cnp"):
                    ax.axvline((f.time - c.first) * 1e3, color={"retransmission": "tab:red", "nak_seq_err": "tab:orange",
                                                               "psn_gap": "tab:purple", "cnp": "tab:green"}[f.kind],
                               alpha=0.5, lw=1)
            ax.set_title(f"connection {c.id}: throughput (red: retransmission, orange: NAK, purple: gap, green: CNP)",
                         fontsize=9)
            ax.set_xlabel("ms since the first packet")
            ax.set_ylabel("Mbit/s")
        parts.append("<h2>Throughput over time</h2>" + svg(fig))
        fig, axes = plt.subplots(len(a.connections), 1, figsize=(10, 3.2 * len(a.connections)), squeeze=False)
        for ax, c in zip(axes[:, 0], a.connections, strict=True):
            pts = a.psn_time.get(c.id) or []
            for kind, color, label, marker in ((0, "tab:blue", "request", "."), (1, "tab:red", "sent again", "x"),
                                               (2, "tab:orange", "NAK (PSN it names)", "v")):
                sel = [(x, y) for x, y, k in pts if k == kind]
                if sel:
                    ax.scatter([(x - c.first) * 1e3 for x, _ in sel], [y for _, y in sel], s=12, c=color,
                               marker=marker, label=label)
            ax.set_title(f"connection {c.id}: request PSNs over time (go-back-N shows as red steps back)", fontsize=9)
            ax.set_xlabel("ms since the first packet")
            ax.set_ylabel("PSN - first PSN")
            ax.legend(fontsize=8, loc="upper left")
        parts.append("<h2>PSN over time</h2>" + svg(fig))
        done = [m.duration * 1e6 for m in a.messages if m.duration is not None]
        if done:
            fig, ax = plt.subplots(figsize=(10, 2.6))
            ax.hist(done, bins=min(50, max(5, len(done) // 2)))
            ax.set_xlabel("message latency (µs)")
            ax.set_ylabel("messages")
            parts.append("<h2>Message latency</h2>" + svg(fig))
    parts.append("<h2>Findings</h2><table><tr><th>kind</th><th>conn</th><th>frames</th><th>what</th></tr>")
    for f in a.findings:
        parts.append(f"<tr><td class=k>{html.escape(f.kind)}</td><td>{'' if f.connection is None else f.connection}"
                     f"</td><td>{', '.join(map(str, f.frames))}</td><td>{html.escape(f.text)}</td></tr>")
    parts.append("</table><h2>Messages</h2><table><tr><th>conn</th><th>op</th><th>PSN</th><th>size</th>"
                 "<th>duration (µs)</th><th>result</th></tr>")
    for m in a.messages[:2000]:
        d = "" if m.duration is None else f"{m.duration * 1e6:.1f}"
        parts.append(f"<tr><td>{m.connection}</td><td>{html.escape(m.op)}</td><td>{m.first_psn}..{m.last_psn}</td>"
                     f"<td>{m.size}</td><td>{d}</td><td>{html.escape(m.result)}</td></tr>")
    parts.append("</table></body></html>")
    return "\n".join(parts)
