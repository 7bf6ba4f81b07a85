"""Connections of a capture and the go-back-N state machine run over each one.

Pairing (:func:`connections`) and the per-connection walk (:func:`walk`) behind
:func:`rdmalab.capture.analysis.analyze`; the finding kinds are described there.

Everything here is linear in the packets (sorting aside): streams and their pairing are found
with array sorts, never by comparing every stream with every other, and the walk keeps its
outstanding messages and READ windows in queues ordered by PSN, so a capture of 10,000
connections or of a run repeated a thousand times costs what its packets cost.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rdmalab.capture.analysis_model import Connection, Finding, Message
from rdmalab.capture.analysis_rows import Rows
from rdmalab.wire.ib import PSN_HALF, PSN_MOD
from rdmalab.wire.ib import psn_unwrap as rel  # (rel: the walk's name for it, read many times below)
from rdmalab.wire.opcodes import CNP_OPCODE, OPCODES, Op, Pos, Transport, opcode_name

#: a request PSN this far from the stream's previous one starts a new run (a test run again with
#: the same QPN): go-back-N never goes back this far, no real gap is this long
RUN_JUMP = 1 << 20
NAK_NAMES = {0: "PSN sequence error", 1: "invalid request", 2: "remote access error",
             3: "remote operational error", 4: "invalid RD request"}
#: largest missing-PSN list kept in a psn_gap finding (``detail["missing"]``); longer gaps give
#: their first PSN and their length only
GAP_LIST_MAX = 4096


def opcode_classes() -> dict[str, np.ndarray]:
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
    t["cnp"] = np.zeros(256, dtype=bool)
    t["cnp"][CNP_OPCODE] = True
    return t


T = opcode_classes()
_NAMES = [opcode_name(i) for i in range(256)]
_FAMILY_OF: dict[str, str] = {}


def op_family(name: str) -> str:
    fam = _FAMILY_OF.get(name)
    if fam is None:
        fam = name
        for f in ("SEND", "RDMA WRITE", "RDMA READ Request", "RDMA READ Response", "CmpSwap", "FetchAdd",
                  "Acknowledge"):
            if f in name:
                fam = {"RDMA READ Request": "READ", "RDMA READ Response": "READ", "RDMA WRITE": "WRITE"}.get(f, f)
                break
        _FAMILY_OF[name] = fam
    return fam


def _group_ids(*keys: np.ndarray) -> tuple[np.ndarray, int]:
    """A group number per row for the distinct tuples of ``keys``, numbered in the tuples' sorted
    order (one lexsort: sorting a record array of the keys is several times slower)."""
    n = len(keys[0])
    if n == 0:
        return np.zeros(0, dtype=np.int64), 0
    order = np.lexsort(keys[::-1])  # the first key is the primary one
    new = np.zeros(n, dtype=bool)
    new[0] = True
    for k in keys:
        ks = k[order]
        new[1:] |= ks[1:] != ks[:-1]
    gid = np.cumsum(new) - 1
    inv = np.empty(n, dtype=np.int64)
    inv[order] = gid
    return inv, int(gid[-1]) + 1


@dataclass
class ConnRows:
    """One connection: its Connection and the row numbers (into :class:`Rows`) of its requests and responses."""

    conn: Connection
    reqs: np.ndarray
    resps: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


def connections(r: Rows, mtu: int) -> tuple[list[ConnRows], np.ndarray]:
    """Request streams, split into runs, paired with the response streams that answer them.

    A request stream is (run of the capture between seams, source, destination, destination QP);
    a PSN jump of more than :data:`RUN_JUMP` inside it starts a new run.  A response stream
    (same key, the other way) answers the run whose request PSNs its PSNs name most often (READ
    responses: the PSNs their READ request reserved).  Returns the connections, ordered by their
    first packet, and the run number of every row (for the CNP and ECN checks)."""
    a = r.a
    n = len(a["frame"])
    seg = np.searchsorted(r.seam_frames, a["frame"], side="right").astype(np.int64)
    op = a["op"]
    is_resp = T["response"][op]
    is_req = T["request"][op] & ~T["ud"][op]
    req_rows = np.nonzero(is_req)[0]
    resp_rows = np.nonzero(is_resp)[0]
    if len(req_rows) == 0:
        return [], seg
    # ---- request streams and their runs
    sid, _ = _group_ids(seg[req_rows], a["src"][req_rows], a["dst"][req_rows], a["dqp"][req_rows])
    order = np.lexsort((req_rows, sid))
    rr = req_rows[order]
    ss = sid[order]
    psn = a["psn"]
    d = (psn[rr][1:] - psn[rr][:-1] + PSN_HALF) % PSN_MOD - PSN_HALF  # psn_diff, on arrays
    new = np.ones(len(rr), dtype=bool)
    new[1:] = (ss[1:] != ss[:-1]) | (np.abs(d) > RUN_JUMP)
    run_of_sorted = np.cumsum(new) - 1
    run = np.empty(len(rr), dtype=np.int64)
    run[order] = run_of_sorted
    n_runs = int(run_of_sorted[-1]) + 1
    row_run = np.full(n, -1, dtype=np.int64)
    row_run[req_rows] = run
    # ---- the PSNs each run uses (READ requests: their responses' PSNs too)
    nps = np.ones(len(req_rows), dtype=np.int64)
    rd = T["read_req"][op[req_rows]]
    nps[rd] = np.clip(-(-a["dmalen"][req_rows][rd] // mtu), 1, 4096)
    rep = np.repeat(np.arange(len(req_rows)), nps)
    off = np.arange(len(rep)) - np.repeat(np.cumsum(nps) - nps, nps)
    t_psn = (psn[req_rows][rep] + off) % PSN_MOD
    t_seg, t_src, t_dst, t_run = seg[req_rows][rep], a["src"][req_rows][rep], a["dst"][req_rows][rep], run[rep]
    # ---- responses vote for the run whose PSNs they name
    pairs: list[ConnRows] = []
    runs_first = np.full(n_runs, n, dtype=np.int64)
    np.minimum.at(runs_first, run, req_rows)
    resp_of_run: dict[int, np.ndarray] = {}
    rqpn_of_run: dict[int, int] = {}
    if len(resp_rows):
        # key the request table and the responses together: (run of capture, requester, responder, PSN)
        k_seg = np.concatenate([t_seg, seg[resp_rows]])
        k_a = np.concatenate([t_src, a["dst"][resp_rows]])
        k_b = np.concatenate([t_dst, a["src"][resp_rows]])
        k_p = np.concatenate([t_psn, psn[resp_rows]])
        kid, nk = _group_ids(k_seg, k_a, k_b, k_p)
        run_of_key = np.full(nk, -1, dtype=np.int64)
        run_of_key[kid[:len(t_psn)]] = t_run
        vote = run_of_key[kid[len(t_psn):]]  # per response row: the run its PSN names, or -1
        rsid, n_rs = _group_ids(seg[resp_rows], a["src"][resp_rows], a["dst"][resp_rows], a["dqp"][resp_rows])
        # within each response stream, rows that name no run belong to the run named before them (or after)
        order2 = np.lexsort((resp_rows, rsid))
        v = vote[order2]
        s2 = rsid[order2]
        idx = np.where(v >= 0, np.arange(len(v)), -1)
        start = np.ones(len(v), dtype=bool)
        start[1:] = s2[1:] != s2[:-1]
        ff = _ffill(idx, start)
        bf = _ffill(idx[::-1], np.concatenate([start[1:], [True]])[::-1])[::-1]
        pick = np.where(ff >= 0, ff, bf)
        filled = np.where(pick >= 0, v[np.maximum(pick, 0)], -1)
        # the response stream + run pairs, by votes; each run takes its best-voted stream
        ok = v >= 0
        if ok.any():
            pr, cnt = np.unique(np.stack([s2[ok], v[ok]], axis=1), axis=0, return_counts=True)
            best: dict[int, tuple[int, int]] = {}
            for (stream, rn), c in zip(pr.tolist(), cnt.tolist(), strict=True):
                if rn not in best or c > best[rn][1]:
                    best[rn] = (stream, c)
            sorted_rows = resp_rows[order2]
            # rows of each (stream, run) after filling
            key2 = s2 * n_runs + filled
            o3 = np.argsort(key2, kind="stable")
            k3 = key2[o3]
            for rn, (stream, _c) in best.items():
                want = stream * n_runs + rn
                lo, hi = np.searchsorted(k3, want), np.searchsorted(k3, want, side="right")
                rows_ = np.sort(sorted_rows[o3[lo:hi]])
                resp_of_run[rn] = rows_
                rqpn_of_run[rn] = int(a["dqp"][rows_[0]]) if len(rows_) else -1
    run_rows_order = np.argsort(runs_first, kind="stable")
    by_run = np.argsort(run, kind="stable")  # request rows grouped by run, in capture order within each
    bounds = np.searchsorted(run[by_run], np.arange(n_runs + 1))
    empty = np.zeros(0, dtype=np.int64)
    for rn in run_rows_order.tolist():
        reqs = req_rows[by_run[bounds[rn]:bounds[rn + 1]]]
        i0 = int(reqs[0])
        transport = "UC" if T["uc"][op[i0]] else "RC"
        rq = rqpn_of_run.get(rn)
        c = Connection(len(pairs), transport, r.addr(int(a["src"][i0])), r.addr(int(a["dst"][i0])),
                       rq if rq is not None and rq >= 0 else None, int(a["dqp"][i0]), int(a["sport"][i0]))
        c.run = int(seg[i0])
        pairs.append(ConnRows(c, reqs, resp_of_run.get(rn, empty)))
    return pairs, seg


def _ffill(idx: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Carry the last non-negative value forward, starting afresh where ``start`` is set."""
    if len(idx) == 0:
        return idx
    pos = np.arange(len(idx))
    last = np.where(idx >= 0, pos, -1)
    # the group start resets: mark starts with a sentinel below every real position
    base = np.where(start, pos, -1)
    grp_start = np.maximum.accumulate(base)
    got = np.maximum.accumulate(last)
    out = np.where(got >= grp_start, idx[np.maximum(got, 0)], -1)
    return np.where(got >= 0, out, -1)


# ============================================================================ the walk


class _Out:
    """Where the walk of one connection puts what it finds."""

    def __init__(self) -> None:
        self.findings: list[Finding] = []
        self.messages: list[Message] = []


_CHUNK = 1 << 16
#: the columns the walk reads, gathered in walk order (:class:`WalkOrder`)
_WALK_COLS = ("frame", "tns", "op", "psn", "syn", "aeth", "msn", "plen", "dmalen", "ackreq")


@dataclass
class WalkOrder:
    """Every connection's rows in the order its walk takes them, found with one sort for all the
    connections (a sort and a gather per connection cost more than the walk of a small one):
    connection ``k`` is ``rows[bounds[k]:bounds[k + 1]]``, in time order (capture order unless
    the timestamps go back), and ``cols`` holds the columns the walk reads, in that order."""

    rows: np.ndarray
    isreq: np.ndarray
    bounds: np.ndarray
    cols: dict[str, np.ndarray]
    #: the rows of one chunk of the walk order as Python lists (``_WALK_COLS`` and is-a-request):
    #: made once for the many small connections in it, not a ``tolist`` a column a connection
    _chunk_no: int = -1
    _lists: list[list[Any]] = field(default_factory=list)

    def span(self, k: int) -> tuple[int, int]:
        return int(self.bounds[k]), int(self.bounds[k + 1])

    def lists(self, c: int) -> list[list[Any]]:
        if c != self._chunk_no:
            lo, hi = c * _CHUNK, min(len(self.rows), (c + 1) * _CHUNK)
            self._lists = [self.cols[name][lo:hi].tolist() for name in _WALK_COLS] + [self.isreq[lo:hi].tolist()]
            self._chunk_no = c
        return self._lists


def walk_order(pairs: list[ConnRows], r: Rows) -> WalkOrder:
    a = r.a
    n = len(r)
    owner = np.full(n, -1, dtype=np.int64)
    isreq = np.zeros(n, dtype=bool)
    for k, cr in enumerate(pairs):
        owner[cr.reqs] = k
        owner[cr.resps] = k
        isreq[cr.reqs] = True
    sel = np.nonzero(owner >= 0)[0]
    # by connection, then time (frames captured out of order are walked in the order they were on
    # the wire, as the timestamps give it; seams split runs before this), then capture order
    rows = sel[np.lexsort((sel, a["tns"][sel], owner[sel]))]
    bounds = np.searchsorted(owner[rows], np.arange(len(pairs) + 1))
    return WalkOrder(rows, isreq[rows], bounds, {name: a[name][rows] for name in _WALK_COLS})


def _rows(wo: WalkOrder, lo: int, hi: int) -> Iterator[tuple[Any, ...]]:
    """(frame, ns, opcode, PSN, syndrome, has AETH, MSN, payload length, DMA length, AckReq, is a
    request) per row, as Python values made a chunk of the walk order at a time (a list per column
    of a million rows is 40 MB)."""
    while lo < hi:
        c = lo // _CHUNK
        base = c * _CHUNK
        e = min(hi, base + _CHUNK)
        yield from zip(*(col[lo - base:e - base] for col in wo.lists(c)))  # noqa: B905 (same lengths)
        lo = e


def walk(cr: ConnRows, r: Rows, mtu: int, out: _Out, wo: WalkOrder, k: int) -> dict[str, Any]:
    """Walk connection ``k``'s packets in time order (capture order unless the timestamps go back)
    as its responder and requester would.

    Returns the connection's plot data: ``psn`` (time, PSN - first, kind 0 first copy / 1 sent
    again / 2 NAK) as arrays."""
    c = cr.conn
    lo, hi = wo.span(k)
    isreq_a = wo.isreq[lo:hi]
    tns_w = wo.cols["tns"]
    findings = out.findings
    messages: list[Message] = []
    c.packets = hi - lo
    c.first, c.last = int(tns_w[lo]) / 1e9, int(tns_w[hi - 1]) / 1e9
    ref = int(wo.cols["psn"][lo + int(np.argmax(isreq_a))])  # the first request walked
    epsn = ref  # the responder's expected PSN
    prev: int | None = None  # last request PSN seen (unwrapped)
    first_seen = _FirstSeen(ref)  # unwrapped PSN -> time (ns) of its first copy
    pending_nak: tuple[int, int] | None = None  # (frame, ns) of a NAK (seq err) not yet answered by a retransmission
    pending_rnr: tuple[int, int, Finding] | None = None
    read_gap: int | None = None  # frame of READ responses resuming past a missing PSN
    last_msn: int | None = None
    open_msg: Message | None = None
    unacked: deque[Message] = deque()  # PSN order
    resp_expect: int | None = None  # next READ response PSN the requester expects
    read_windows: deque[tuple[int, int]] = deque()  # response PSNs of the READ requests not yet answered
    window_starts: set[int] = set()
    read_end: dict[int, Message] = {}
    cid = c.id
    uniq_bytes = 0
    pts_t = array("q")  # machine integers, not Python objects: a connection may have a million packets
    pts_p = array("q")
    pts_k = array("b")
    gap_seen: dict[int, float] = {}  # first missing PSN -> when the capture last showed that gap
    T_read_req, T_read_resp, T_atomic_ack = T["read_req"], T["read_resp"], T["atomic_ack"]
    uc = c.transport == "UC"
    dup: Finding | None = None  # the duplicate requests of the current pass (one finding)
    for fr, tn, o, ps, s, has_aeth, m, pl, dml, _ar, is_req in _rows(wo, lo, hi):
        t = tn / 1e9
        if is_req:
            p = rel(ps, prev if prev is not None else ref)
            rdreq = bool(T_read_req[o])
            nps = max(1, math.ceil(dml / mtu)) if rdreq else 1
            retrans = prev is not None and p <= prev
            if p < epsn and not messages and open_msg is None and (T["first"][o] or T["only"][o]):
                # the capture began inside the first message, whose first copy it did not see (lost before
                # the capture point): the requester went back to it, and the responder expects it here
                epsn = p
            if retrans:
                trigger = "timeout"
                cause: list[int] = []
                response_us = None
                if pending_nak is not None:
                    trigger, cause = "nak", [pending_nak[0]]
                    response_us = (tn - pending_nak[1]) / 1e3
                elif pending_rnr is not None:
                    trigger, cause = "rnr", [pending_rnr[0]]
                elif read_gap is not None and rdreq:
                    trigger, cause = "implied_nak", [read_gap]
                orig = first_seen.get(p)
                after = (tn - orig) / 1e3 if orig is not None else None
                txt = f"go-back-N from PSN {p % PSN_MOD} ({trigger}"
                txt += f", {after:.1f} us after the first copy)" if after is not None else ")"
                findings.append(Finding("retransmission", cid, [fr] + cause, t, txt,
                                        {"from_psn": p % PSN_MOD, "trigger": trigger, "after_us": after,
                                         "nak_response_us": response_us}))
                if trigger == "timeout":
                    findings.append(Finding("timeout", cid, [fr], t,
                                            f"PSN {p % PSN_MOD} sent again with no NAK to explain it (timer)",
                                            {"psn": p % PSN_MOD, "after_us": after}))
                if pending_rnr is not None:
                    wait = (tn - pending_rnr[1]) / 1e3
                    f = pending_rnr[2]
                    f.detail["wait_us"] = wait
                    f.text += f"; the request came again {wait:.1f} us later"
                pending_nak = pending_rnr = read_gap = None
                if p > epsn:
                    _gap(findings, cid, epsn, p, fr, t, "the retransmission pass starts past it")
                    gap_seen[epsn] = t
            elif prev is not None and p > prev + 1 and p > epsn:
                lo = max(prev + 1, epsn)
                _gap(findings, cid, lo, p, fr, t, "")
                gap_seen[lo] = t
            if retrans and dup is not None:  # a new go-back-N pass: its duplicates are a finding of their own
                _close_dup(dup, findings)
                dup = None
            if p < epsn:
                if dup is None:  # appended when the pass ends (a full count for a folded list)
                    dup = Finding("duplicate", cid, [fr], t, f"{_NAMES[o]} PSN {p % PSN_MOD} was already accepted",
                                  {"psn": p % PSN_MOD, "count": 1, "last_psn": p % PSN_MOD})
                else:  # one finding for the duplicates of one pass: their count, every frame
                    dup.frames.append(fr)
                    dd = dup.detail
                    dd["count"] += 1
                    dd["last_psn"] = p % PSN_MOD
            elif dup is not None:
                _close_dup(dup, findings)
                dup = None
            if first_seen.add(p, tn):
                uniq_bytes += pl
                c.request_bytes += pl
                kind = 0
            else:
                c.retransmitted_bytes += pl
                kind = 1
            pts_t.append(tn)
            pts_p.append(p - ref)
            pts_k.append(kind)
            prev = p
            if rdreq and p not in window_starts and p >= epsn:
                read_windows.append((p, p + nps - 1))
                window_starts.add(p)
            if p == epsn:  # accepted in order
                epsn += nps
                open_msg = _message_step(c, open_msg, o, p, nps, fr, t, pl, dml, findings, messages,
                                         unacked, read_end, uc)
            continue
        # a response
        p = rel(ps, prev if prev is not None else ref)
        if has_aeth:
            kind = (s >> 5) & 3
            if last_msn is not None and ((m - last_msn) % PSN_MOD) > PSN_HALF:
                findings.append(Finding("msn_jump", cid, [fr], t, f"MSN goes back from {last_msn} to {m}",
                                        {"from": last_msn, "to": m}))
            last_msn = m
            if kind == 3:
                code = s & 0x1F
                if code == 0:
                    ok = p == epsn
                    txt = f"NAK PSN sequence error at PSN {p % PSN_MOD}"
                    txt += "" if ok else f" (the first missing PSN is {epsn % PSN_MOD})"
                    pts_t.append(tn)
                    pts_p.append(p - ref)
                    pts_k.append(2)
                    seen = gap_seen.pop(p, None)
                    gen = (t - seen) * 1e6 if seen is not None else None
                    findings.append(Finding("nak_seq_err", cid, [fr], t, txt,
                                            {"psn": p % PSN_MOD, "expected_psn": epsn % PSN_MOD,
                                             "names_first_missing": ok, "generation_us": gen}))
                    pending_nak = (fr, tn)
                else:
                    nm = NAK_NAMES.get(code, f"code {code}")
                    findings.append(Finding("nak_other", cid, [fr], t, f"NAK {nm} at PSN {p % PSN_MOD}",
                                            {"psn": p % PSN_MOD, "code": code, "name": nm}))
                    pm = p % PSN_MOD
                    for msg in unacked:
                        if msg.result == "incomplete" and (msg.first_psn <= pm <= msg.last_psn or msg.first_psn == pm):
                            msg.result, msg.completion = f"NAK {nm}", t
                    if any(x.result != "incomplete" for x in unacked):
                        unacked = deque(x for x in unacked if x.result == "incomplete")
                continue
            if kind == 1:
                f = Finding("nak_rnr", cid, [fr], t, f"RNR NAK at PSN {p % PSN_MOD} (timer code {s & 0x1F})",
                            {"psn": p % PSN_MOD, "timer": s & 0x1F})
                findings.append(f)
                pending_rnr = (fr, tn, f)
                continue
            # an ACK (or a READ response / atomic ACK carrying an AETH): completes the messages up to PSN p.
            # Responses come in PSN order (IBA Vol 1 9.7.5.1.x), so what is left below p is done too or
            # was answered out of the capture's sight: the queue drops it either way.
            atomic_ack = bool(T_atomic_ack[o])
            while unacked:
                msg = unacked[0]
                if rel(msg.last_psn, p) > p:
                    break
                if msg.result == "incomplete":
                    if msg.op in ("SEND", "WRITE"):
                        msg.completion, msg.result = t, "ok"
                    elif msg.op in ("CmpSwap", "FetchAdd") and rel(msg.first_psn, p) == p:
                        if not atomic_ack:
                            break  # an acknowledgement at the atomic's PSN that is not its atomic ACK
                        msg.completion, msg.result = t, "ok"
                unacked.popleft()
        if T_read_resp[o]:
            # the READ requests' response windows, oldest first (IBA 9.7.5.1.4: responses in order)
            while read_windows and p > read_windows[0][1]:  # past the oldest window: its tail is missing
                lo, hi = read_windows.popleft()
                window_starts.discard(lo)
                want = resp_expect if resp_expect is not None and lo <= resp_expect <= hi else lo
                if read_gap is None:
                    read_gap = fr
                    findings.append(Finding("implied_nak", cid, [fr], t,
                                            f"READ response PSN {p % PSN_MOD} arrives while {want % PSN_MOD} "
                                            "is missing: the requester must re-issue the READ",
                                            {"psn": p % PSN_MOD, "expected_psn": want % PSN_MOD}))
                resp_expect = None
            if read_windows and read_windows[0][0] <= p <= read_windows[0][1]:
                want = resp_expect if resp_expect is not None else read_windows[0][0]
                if p > want and read_gap is None:
                    read_gap = fr
                    findings.append(Finding("implied_nak", cid, [fr], t,
                                            f"READ response PSN {p % PSN_MOD} arrives while {want % PSN_MOD} "
                                            "is missing: the requester must re-issue the READ",
                                            {"psn": p % PSN_MOD, "expected_psn": want % PSN_MOD}))
                resp_expect = p + 1
                if p == read_windows[0][1]:
                    window_starts.discard(read_windows.popleft()[0])
                    resp_expect = None
            rmsg = read_end.get(p % PSN_MOD)
            if rmsg is not None and rmsg.result == "incomplete":
                rmsg.completion, rmsg.result = t, "ok"
    if dup is not None:
        _close_dup(dup, findings)
    dur = c.last - c.first
    out.messages.extend(messages)
    mine = messages
    lat = [d * 1e6 for m in mine if (d := m.duration) is not None]
    fam: dict[str, int] = {}
    for mm in mine:
        fam[mm.op] = fam.get(mm.op, 0) + 1
    c.summary = {
        "duration_s": dur,
        "goodput_mbps": (uniq_bytes * 8 / dur / 1e6) if dur > 0 else 0.0,
        "throughput_mbps": ((c.request_bytes + c.retransmitted_bytes) * 8 / dur / 1e6) if dur > 0 else 0.0,
        "retransmitted_fraction": (c.retransmitted_bytes / max(1, c.request_bytes + c.retransmitted_bytes)),
        "latency_us": _percentiles(lat),
        "messages": fam,
    }
    return {"psn": (np.frombuffer(pts_t, dtype=np.int64).copy(), np.frombuffer(pts_p, dtype=np.int64).copy(),
                    np.frombuffer(pts_k, dtype=np.int8).copy())}


_UNSEEN = -(1 << 63)


class _FirstSeen:
    """Unwrapped PSN -> time (ns) of its first copy: machine integers in an array indexed from the
    connection's first PSN (8 bytes a PSN, where a dict of a million PSNs is 100 MB), PSNs before
    it or far past the last one in a dict."""

    __slots__ = ("base", "t", "other")

    def __init__(self, base: int) -> None:
        self.base = base
        self.t = array("q")
        self.other: dict[int, int] = {}

    def get(self, p: int) -> int | None:
        i = p - self.base
        if 0 <= i < len(self.t):
            v = self.t[i]
            if v != _UNSEEN:
                return v
        return self.other.get(p) if self.other else None

    def add(self, p: int, tn: int) -> bool:
        """Record ``p`` first seen at ``tn``; False (nothing changed) when it was seen before."""
        t = self.t
        i = p - self.base
        n = len(t)
        if 0 <= i < n:
            if t[i] != _UNSEEN:
                return False
        elif not n <= i < n + 65536:
            if p in self.other:
                return False
            self.other[p] = tn
            return True
        if self.other and p in self.other:  # seen when it was far ahead of the array
            return False
        if i < n:
            t[i] = tn
        else:
            if i > n:
                t.extend(array("q", [_UNSEEN]) * (i - n))
            t.append(tn)
        return True


def _close_dup(f: Finding, findings: list[Finding]) -> None:
    """A ``duplicate`` finding, its pass ended: its text when it holds several requests."""
    findings.append(f)
    d = f.detail
    n = d["count"]
    if n > 1:
        f.text = (f"{n} requests the responder had already accepted came again, PSN {d['psn']}..{d['last_psn']} "
                  f"(frames {f.frames[0]}..{f.frames[-1]})")


def _percentiles(x: list[float]) -> dict[str, float]:
    """p50, p90, p99 (linear interpolation, as numpy.percentile's default) and max."""
    if not x:
        return {}
    s = sorted(x)
    out = {}
    for name, q in (("p50", 50), ("p90", 90), ("p99", 99)):
        pos = (len(s) - 1) * q / 100
        lo = int(pos)
        hi = min(lo + 1, len(s) - 1)
        out[name] = float(s[lo] + (s[hi] - s[lo]) * (pos - lo))
    out["max"] = float(s[-1])
    return out


def gap_text(first: int, n: int) -> str:
    """``PSN 5..7 missing (3 packets)``: a PSN gap in words (24-bit PSNs)."""
    last = (first + n - 1) % PSN_MOD
    return f"PSN {first}" + (f"..{last}" if n > 1 else "") + f" missing ({n} packet{'s' if n > 1 else ''})"


def _gap(findings: list[Finding], cid: int, lo: int, hi: int, fr: int, t: float, why: str) -> None:
    n = hi - lo
    first = lo % PSN_MOD
    txt = gap_text(first, n) + (f": {why}" if why else "")
    detail: dict[str, Any] = {"first_missing": first, "count": n}
    if n <= GAP_LIST_MAX:
        detail["missing"] = [p % PSN_MOD for p in range(lo, hi)]
    findings.append(Finding("psn_gap", cid, [fr], t, txt, detail))


def _message_step(c: Connection, open_msg: Message | None, o: int, p: int, nps: int, fr: int, t: float,
                  plen: int, dmalen: int, findings: list[Finding], messages: list[Message], unacked: deque[Message],
                  read_end: dict[int, Message], uc: bool) -> Message | None:
    name = _NAMES[o]
    fam = op_family(name)
    first, middle, last, only = T["first"][o], T["middle"][o], T["last"][o], T["only"][o]
    if (middle or last) and (open_msg is None or open_msg.op != fam):
        findings.append(Finding("opcode_sequence", c.id, [fr], t,
                                f"{name} PSN {p % PSN_MOD} without a {fam} First before it"))
        return open_msg
    if (first or only) and open_msg is not None:
        findings.append(Finding("opcode_sequence", c.id, [fr], t,
                                f"{name} PSN {p % PSN_MOD} while the {open_msg.op} from PSN {open_msg.first_psn} "
                                "is not finished"))
        open_msg = None
    if first or only:
        size = dmalen if T["read_req"][o] else 8 if T["atomic"][o] else plen
        msg = Message(c.id, fam, p % PSN_MOD, (p + nps - 1) % PSN_MOD, size, t, frames=[fr])
        if only:
            if T["read_req"][o]:
                read_end[(p + nps - 1) % PSN_MOD] = msg
            _sent_whole(msg, t, uc, messages, unacked)
            return None
        return msg
    assert open_msg is not None
    open_msg.size += plen
    open_msg.frames.append(fr)
    open_msg.last_psn = p % PSN_MOD
    if last:
        _sent_whole(open_msg, t, uc, messages, unacked)
        return None
    return open_msg


def _sent_whole(msg: Message, t: float, uc: bool, messages: list[Message], unacked: deque[Message]) -> None:
    """A message's last packet went out (at ``t``): UC's ends there, RC's waits for its acknowledgement."""
    messages.append(msg)
    if uc:
        msg.result, msg.completion = "sent (UC: no acknowledgement)", t
    else:
        unacked.append(msg)


def ack_coalescing(cr: ConnRows, r: Rows, wo: WalkOrder, k: int) -> list[Finding]:
    """``ack_coalescing`` anomalies of one connection's acknowledgements.

    A responder may coalesce: one ACK acknowledges every request up to its PSN (IBA Vol 1
    9.7.5.1.3), so fewer ACKs than requests is normal.  Anomalies: an ACK whose PSN goes below an
    earlier ACK's (ACKs must not decrease: Lumina's ``GBNCheck``, ``checker/gbn_check.py``),
    an ACK for a PSN the requester has not sent, and a request with the AckReq bit that no later
    acknowledgement covers although the responder went on answering."""
    out: list[Finding] = []
    if not len(cr.reqs) or not len(cr.resps):
        return out
    cid = cr.conn.id
    psn_raw = r.a["psn"]
    base = int(psn_raw[cr.reqs[0]])
    top = None  # highest request PSN sent so far (relative to the first)
    last_ack: tuple[int, int, int] | None = None  # (relative PSN, raw PSN, frame)
    # acknowledgements in time order (the walk's order): time and the highest PSN each answers;
    # the AckReq requests: time, raw PSN, frame (machine integers: a connection may have a million)
    ack_t, ack_q = array("q"), array("q")
    ar_t, ar_p, ar_f = array("q"), array("q"), array("q")
    T_ack, T_read_resp, T_atomic_ack = T["ack"], T["read_resp"], T["atomic_ack"]
    lo, hi = wo.span(k)
    for fr, tn, o, ps, s, has, _m, _pl, _dml, ackreq, is_req in _rows(wo, lo, hi):
        p = rel(ps, base)
        if is_req:
            top = p if top is None or p > top else top
            if ackreq:
                ar_t.append(tn)
                ar_p.append(ps)
                ar_f.append(fr)
            continue
        if not (has and T_ack[o] and s >> 5 == 0):
            if has and s >> 5 == 3 and s & 0x1F:
                # a NAK other than PSN sequence error (invalid request, remote access or remote
                # operation error) answers the request it names and ends the connection: the
                # responder goes to the error state and drops what follows, the requester flushes
                # the rest (IBA Vol 1 9.7.5.2.5 and 9.9.3): every request from its PSN on is answered
                ack_t.append(tn)
                ack_q.append(1 << 62)
            elif has or T_read_resp[o] or T_atomic_ack[o]:
                ack_t.append(tn)
                ack_q.append(p if not (has and s >> 5 == 3) else p - 1)
            continue
        ack_t.append(tn)
        ack_q.append(p)
        unsent = False
        if last_ack is not None and p < last_ack[0]:
            out.append(Finding("ack_coalescing", cid, [last_ack[2], fr], tn / 1e9,
                               f"ACK PSN {ps} is below the earlier ACK's {last_ack[1]}: "
                               f"acknowledgements went backwards", {"anomaly": "ack_backwards"}))
        if top is not None and p > top:
            unsent = True
            out.append(Finding("ack_coalescing", cid, [fr], tn / 1e9,
                               f"ACK PSN {ps} acknowledges a request not sent yet (highest sent "
                               f"{(base + top) % PSN_MOD})", {"anomaly": "ack_unsent"}))
        if not unsent and (last_ack is None or p >= last_ack[0]):
            last_ack = (p, ps, fr)
    if not ack_t:
        return out
    # the highest PSN acknowledged at or after each time: suffix maxima over the acknowledgements
    # (already in time order)
    suffix = array("q", ack_q)
    for x in range(len(suffix) - 2, -1, -1):
        if suffix[x + 1] > suffix[x]:
            suffix[x] = suffix[x + 1]
    last_t = ack_t[-1]
    for tn, ps, fr in zip(ar_t, ar_p, ar_f, strict=True):
        if tn >= last_t:
            continue
        p = rel(ps, base)
        x = bisect_left(ack_t, tn)
        if x >= len(ack_t) or suffix[x] < p:
            out.append(Finding("ack_coalescing", cid, [fr], tn / 1e9,
                               f"PSN {ps} asked for an ACK (AckReq) and no later acknowledgement covers "
                               f"it, though the responder answered later requests", {"anomaly": "ackreq_unanswered"}))
    return out
