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
  ``time_backwards``  capture timestamps that go back a little (can the capture be trusted?):
                      one finding for the capture, with every frame
  ``capture_seam``    time goes back more than ``seam_ms``: captures appended to each other;
                      the analysis starts over after each seam (one finding, every seam)
  ``duplicate_frames`` frames that are in the capture twice (one finding, every copy)
  ``capture_gap``     a PSN gap never sent again: the capture missed it, the wire did not
  ``ack_coalescing``  ACKs backwards, ACKs of PSNs not sent, AckReq left unanswered
  ``bad_crc32c``      (iWARP) an MPA CRC that does not verify
  ``terminate``       (iWARP) a Terminate, with its layer, type and code explained
  ==================  =======================================================================

The analysis reads what is on the capture.  A capture taken at the receiver (or after the lossy
link) shows losses as PSN gaps; one taken at the sender shows every packet once and losses only
through the NAKs and retransmissions they cause.
"""


from __future__ import annotations

import ipaddress
import os
import re
from collections import defaultdict
from typing import Any

import numpy as np

from rdmalab.capture.analysis_conn import (
    ConnRows,
    T,
    _Out,
    ack_coalescing,
    connections,
    gap_text,
    walk,
    walk_order,
)
from rdmalab.capture.analysis_model import Analysis, Connection, Finding, Findings, Message
from rdmalab.capture.analysis_rows import Rows, load_rows
from rdmalab.capture.columnar import Columns, read_columns, record_blocks
from rdmalab.capture.fields import frame_fields
from rdmalab.capture.reader import RawRecord, decode_record, read
from rdmalab.wire.ib import IB_MTUS, PSN_MOD
from rdmalab.wire.ib import psn_unwrap as _rel
from rdmalab.wire.opcodes import opcode_name
from rdmalab.wire.rdmap import TERM_ETYPE_NAMES, TERM_LAYER_NAMES, Terminate, term_errcode_names

__all__ = ["Analysis", "Connection", "Finding", "Message", "analyze", "cnp_pacing", "counters_side_by_side",
           "parse_counters", "KIND_HELP", "COUNTER_ROWS", "PACING_HYPOTHESES"]

_PSN_MOD = PSN_MOD

#: One sentence per finding kind, for readers of the report (and of ``--annotate``d captures).
KIND_HELP: dict[str, str] = {
    "psn_gap": "Request PSNs missing on the wire: packets lost before the capture point (or not captured).",
    "retransmission": "The requester went back and sent PSNs again (go-back-N), after a NAK, an implied NAK, an "
                      "RNR NAK or its timer.",
    "timeout": "A retransmission that only the requester's timer explains: nothing from the responder asked "
               "for it.",
    "duplicate": "A request the responder had already accepted in order arrives again (it answers with a "
                 "duplicate ACK).",
    "duplicate_frames": "The same frame is in the capture twice (a mirror port or a merge copied it): the copies "
                        "are left out of the analysis.",
    "capture_seam": "The capture's time jumps back: captures appended to each other (mergecap -a) or a clock step. "
                    "Each run between seams is analysed on its own.",
    "time_backwards": "Timestamps that go back a little: frames captured out of order (several queues or "
                      "sniffers). Latencies near them are not to be trusted.",
    "nak_seq_err": "The responder saw a PSN past the one it expected and asked for a retransmission from the "
                   "first missing PSN (NAK, PSN sequence error).",
    "nak_rnr": "Receiver not ready: no receive buffer was posted; the requester waits and sends again.",
    "nak_other": "A fatal NAK (invalid request, remote access or operational error): the connection goes to "
                 "the error state.",
    "implied_nak": "READ responses resumed past a missing one: the requester must issue the READ again.",
    "cnp": "A RoCEv2 congestion notification packet: the receiver saw congestion marks and asks the sender "
           "to slow down.",
    "ecn_ce": "A request marked Congestion Experienced by a switch, with how long the CNP took to come back.",
    "bad_icrc": "The packet's invariant CRC does not verify: it was damaged on the way (or the capture cut it).",
    "bad_crc32c": "An iWARP MPA FPDU whose CRC32c does not verify.",
    "terminate": "An iWARP Terminate message: the peer closes the connection, and says why.",
    "opcode_sequence": "Message packets out of order: a Middle or Last without its First, or a First while "
                       "another message is still open.",
    "msn_jump": "The message sequence number in the ACKs goes backwards.",
    "ack_coalescing": "Acknowledgements that break the coalescing rules: going backwards, acknowledging what was "
                      "not sent, or an AckReq left unanswered.",
    "capture_gap": "PSNs missing from the capture that the sender never sent again: the capture dropped them, "
                   "the wire did not.",
    "lost": "Sent (in the sender's capture) and never arrived (in this capture).",
    "capture_damaged": "The capture file is damaged or cut short (it ends in the middle of a record): what comes "
                       "after the damage is not in the analysis.",
}


def analyze(source: str | os.PathLike[str] | Columns, *, sent: str | os.PathLike[str] | Columns | None = None,
            cnp_window_us: float = 1000.0, cnp_min_gap_us: float = 4.0, progress: bool = False,
            seam_ms: float = 1.0, dup_us: float = 20.0) -> Analysis:
    """Analyse a capture file (or its columns).

    The file is read block by block and only the RDMA packets' few columns the analysis needs
    are kept (:mod:`rdmalab.capture.analysis_rows`), so memory stays bounded on long captures.
    ``progress`` shows progress bars (tqdm, on stderr) for long files.

    ``sent`` is a second capture of the same traffic taken before the lossy part of the path
    (at the sender, or a switch's ingress mirror) while ``source`` was taken after it: every RDMA
    packet the first holds and the second lacks is then a ``lost`` finding, exactly, including
    the losses no gap reveals (a packet the go-back-N restart would have discarded anyway).

    ``seam_ms``: a timestamp that goes back more than this starts a new run of the capture
    (``capture_seam``).  ``dup_us``: an RDMA frame identical to one at most this much earlier
    (with nothing from the other direction between them) is a copy (``duplicate_frames``).
    """
    path = source.path if isinstance(source, Columns) else os.fspath(source)
    r = load_rows(source, seam_ms=seam_ms, dup_us=dup_us, progress=progress)
    return analyze_rows(r, path, sent=sent, cnp_window_us=cnp_window_us, cnp_min_gap_us=cnp_min_gap_us,
                        progress=progress, read_file=not isinstance(source, Columns),
                        cols=source if isinstance(source, Columns) else None)


def analyze_rows(r: Rows, path: str | None, *, sent: str | os.PathLike[str] | Columns | None = None,
                 cnp_window_us: float = 1000.0, cnp_min_gap_us: float = 4.0, progress: bool = False,
                 read_file: bool = True, cols: Columns | None = None) -> Analysis:
    """:func:`analyze` on rows already loaded (``cols``: the capture's columns, when in memory)."""
    a = r.a
    findings = Findings()
    findings.extend(_capture_trust(r))
    op = a["op"]
    plen = a["plen"]
    big = int(plen.max()) if len(plen) else 0
    mtu = next((m for m in IB_MTUS if m >= big), 4096)
    bad = np.nonzero((a["icrc_ok"] == 2) & (a["caplen"] >= a["flen"]))[0]  # a frame cut short is not damaged
    for i in bad.tolist():
        findings.append(Finding("bad_icrc", None, [int(a["frame"][i])], int(a["tns"][i]) / 1e9,
                                f"{opcode_name(int(op[i]))} PSN {int(a['psn'][i])}: ICRC does not verify"))
    pairs, seg = connections(r, mtu)
    conns = [cr.conn for cr in pairs]
    if read_file and path is not None and r.cm_frames:
        _cm_exchanges(path, r.cm_frames, conns, r.seam_frames)
    out = _Out()
    out.findings = findings
    bar = _bar(len(pairs), "connections") if progress else None
    psn_time: dict[int, dict[str, np.ndarray]] = {}
    wo = walk_order(pairs, r)
    for k, cr in enumerate(pairs):
        got = walk(cr, r, mtu, out, wo, k)
        c = cr.conn
        first_ns = round(c.first * 1e9)
        pt, pp, pk = got["psn"]
        psn_time[c.id] = {"t": (pt - first_ns) / 1e9, "psn": pp, "kind": pk}
        findings.extend(ack_coalescing(cr, r, wo, k))
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    del wo
    series = _series_all(r, pairs)
    findings.extend(_congestion(r, pairs, seg, cnp_window_us))
    checks: dict[str, Any] = {"cnp_pacing": cnp_pacing(r, pairs, seg, cnp_min_gap_us)}
    findings.extend(_iwarp_findings(r, path if read_file else None))
    findings.extend(_capture_gaps(findings))
    if sent is not None:
        before = sent if isinstance(sent, Columns) else read_columns(sent)
        after = cols if cols is not None else read_columns(path) if path is not None and read_file else None
        if after is not None:
            findings.extend(_lost(after, before, conns))
    # by time, then first frame: two stable sorts with one number a key each (a (time, frame) tuple a
    # finding is 100 MB more at a million findings)
    findings.sort(key=lambda f: f.frames[0] if f.frames else 0)
    findings.sort(key=lambda f: f.time)
    # a plain list in the result (it pickles to Dask workers and back; the budget was for the analysis)
    return Analysis(path, r.frames, len(r) + len(r.dup_pairs), conns, out.messages, list(findings), mtu, series,
                    psn_time, checks)


def _bar(total: int, what: str) -> Any:
    if total < 2000:
        return None
    try:
        from tqdm import tqdm  # optional dependency (the "analysis" extra)
    except ImportError:
        return None
    return tqdm(total=total, unit=" " + what, desc="analysing", leave=False)


def _capture_trust(r: Rows) -> list[Finding]:
    """``capture_seam``, ``time_backwards`` and ``duplicate_frames``: one finding each, for the whole capture."""
    out: list[Finding] = []
    back = r.back
    if len(r.seam_frames):
        seams = back[np.isin(back[:, 1], r.seam_frames)]
        eg = ", ".join(str(int(f)) for f in seams[:5, 1])
        out.append(Finding("capture_seam", None, [int(f) for f in seams[:, 1]], int(r.first_ns or 0) / 1e9,
                           f"time goes back at {len(seams)} frame(s) (e.g. {eg}; by up to "
                           f"{int(seams[:, 2].max()) / 1e9:.6g} s): {len(seams) + 1} runs appended to each other "
                           "(or clock steps); each run is analysed on its own",
                           {"count": len(seams), "max_back_s": int(seams[:, 2].max()) / 1e9,
                            "seams": [[int(x), int(y)] for x, y in seams[:1000, :2]]}))
    small = back[~np.isin(back[:, 1], r.seam_frames)] if len(back) else back
    if len(small):
        eg = ", ".join(f"{int(x)}/{int(y)}" for x, y in small[:3, :2])
        out.append(Finding("time_backwards", None, [int(f) for f in small[:, 1]], int(r.first_ns or 0) / 1e9,
                           f"timestamps go back {len(small)} time(s), by up to {int(small[:, 2].max()) / 1e3:.3f} us "
                           f"(e.g. frames {eg})", {"count": len(small), "max_back_us": int(small[:, 2].max()) / 1e3}))
    if r.damage is not None:
        out.append(Finding("capture_damaged", None, [r.frames] if r.frames else [], int(r.last_ns or 0) / 1e9,
                           f"the capture {r.damage}: the analysis covers the {r.frames} frames before it",
                           {"frames_read": r.frames, "reason": r.damage}))
    d = r.dup_pairs
    if len(d):
        order = np.argsort(d[:, 0])
        d = d[order]
        eg = ", ".join(f"{int(y)}/{int(x)}" for x, y in d[:3])
        out.append(Finding("duplicate_frames", None, [int(x) for x in d[:, 0]], int(r.first_ns or 0) / 1e9,
                           f"frames duplicated in the capture: {len(d)}, e.g. {eg}",
                           {"count": len(d), "examples": [[int(y), int(x)] for x, y in d[:20]]}))
    return out


def _series_all(r: Rows, pairs: list[ConnRows], bins: int = 50) -> dict[int, list[tuple[float, float]]]:
    """Throughput over time per connection: (seconds since the connection's first packet, Mbit/s)
    per bin, its requests' payload bytes in ``bins`` bins from its first to its last packet; all
    the connections in one pass of array operations."""
    out: dict[int, list[tuple[float, float]]] = {}
    if not pairs:
        return out
    a = r.a
    t0 = np.array([round(cr.conn.first * 1e9) for cr in pairs], dtype=np.int64)
    t1 = np.array([round(cr.conn.last * 1e9) for cr in pairs], dtype=np.int64)
    nreq = np.array([len(cr.reqs) for cr in pairs], dtype=np.int64)
    rows = np.concatenate([cr.reqs for cr in pairs])
    owner = np.repeat(np.arange(len(pairs)), nreq)
    width = (t1 - t0) / bins
    ok = width > 0
    w = np.where(ok, width, 1.0)
    k = np.clip(((a["tns"][rows] - t0[owner]) / w[owner]).astype(np.int64), 0, bins - 1)
    acc = np.bincount(owner * bins + k, weights=a["plen"][rows].astype(np.float64),
                      minlength=len(pairs) * bins).reshape(len(pairs), bins)
    w_s = w / 1e9
    x = (np.arange(bins)[None, :] * w_s[:, None]).tolist()
    y = (acc * 8 / w_s[:, None] / 1e6).tolist()
    for i, cr in enumerate(pairs):
        out[cr.conn.id] = list(zip(x[i], y[i], strict=True)) if ok[i] and nreq[i] else []
    return out


def _congestion(r: Rows, pairs: list[ConnRows], seg: np.ndarray, window_us: float) -> list[Finding]:
    """``cnp`` and ``ecn_ce`` findings: the CNP's connection, and each CE mark's reaction time."""
    a = r.a
    out: list[Finding] = []
    cnps = np.nonzero(T["cnp"][a["op"]])[0]
    owner = {}
    for cr in pairs:
        c = cr.conn
        i0 = int(cr.reqs[0])
        if c.requester_qpn is not None:
            owner[(int(seg[i0]), int(a["src"][i0]), int(a["dst"][i0]), c.requester_qpn)] = c.id
    # CNP times per (run, from, to), sorted: the CNP for data from A to B goes from B to A
    by_pair: dict[tuple[int, int, int], list[int]] = defaultdict(list)
    for j in cnps.tolist():
        s, d, q = int(a["src"][j]), int(a["dst"][j]), int(a["dqp"][j])
        by_pair[(int(seg[j]), s, d)].append(j)
        out.append(Finding("cnp", owner.get((int(seg[j]), d, s, q)), [int(a["frame"][j])], int(a["tns"][j]) / 1e9,
                           f"CNP from {r.addr(s)} to {r.addr(d)} QP {q:#x}"))
    times = {k: (np.array([a["tns"][j] for j in v], dtype=np.int64), np.array(v)) for k, v in by_pair.items()}
    for k in times:
        o = np.argsort(times[k][0], kind="stable")
        times[k] = (times[k][0][o], times[k][1][o])
    win = round(window_us * 1e3)
    for cr in pairs:
        ce = cr.reqs[a["ecn"][cr.reqs] == 3]
        for i in ce.tolist():
            tn = int(a["tns"][i])
            tl = times.get((int(seg[i]), int(a["dst"][i]), int(a["src"][i])))
            hit: int | None = None
            if tl is not None:
                kk = int(np.searchsorted(tl[0], tn, side="left"))
                if kk < len(tl[0]) and tl[0][kk] - tn <= win:
                    hit = int(tl[1][kk])
            react = (int(a["tns"][hit]) - tn) / 1e3 if hit is not None else None
            frames = [int(a["frame"][i])] + ([int(a["frame"][hit])] if hit is not None else [])
            text = (f"PSN {int(a['psn'][i])} marked CE; CNP {react:.3f} us later" if react is not None
                    else f"PSN {int(a['psn'][i])} marked CE; no CNP back within {window_us:g} us")
            out.append(Finding("ecn_ce", cr.conn.id, frames, tn / 1e9, text, {"cnp_after_us": react}))
    return out


#: CNP pacing hypotheses (congestion-and-analysis.md B5; rdmalab.verbs.engine.cnp.CnpPacer's
#: scopes): what one "last CNP" timer covers.  Keys are built from (sender IP, receiver IP,
#: sender QPN), the sender being the one the CE-marked data came from and the CNP goes to.
PACING_HYPOTHESES: dict[str, Any] = {
    "qp": lambda s, r, q: (s, r, q),
    "ip_pair": lambda s, r, q: (s, r),
    "port": lambda s, r, q: (r,),
}


def cnp_pacing(r: Rows, pairs: list[ConnRows], seg: np.ndarray, min_gap_us: float) -> dict[str, Any]:
    """Check the CNPs against each pacing hypothesis, as Lumina's ``CNPCheck`` does.

    Under a hypothesis, a CE-marked request produces a CNP when no CNP was expected in its scope
    within the last ``min_gap_us`` (the notification point's ``min_time_between_cnps``); the
    capture is consistent with the hypothesis when, scope by scope, the CNPs seen equal the CNPs
    expected.  Also reports the smallest gap between two CNPs seen in one scope (below the
    minimum gap means the NIC does not pace in that scope).  Scopes are per run of the capture."""
    a = r.a
    tns = a["tns"]
    gap_ns = round(min_gap_us * 1000)
    trig = [(i, cr.conn.requester_qpn) for cr in pairs for i in cr.reqs[a["ecn"][cr.reqs] == 3].tolist()]
    trig.sort(key=lambda t: int(tns[t[0]]))
    cnps = np.nonzero(T["cnp"][a["op"]])[0].tolist()
    out: dict[str, Any] = {"min_gap_us": min_gap_us, "triggers": len(trig), "cnps": len(cnps), "hypotheses": {},
                           "consistent": []}
    for name, key in PACING_HYPOTHESES.items():
        expected: dict[Any, int] = defaultdict(int)
        last: dict[Any, int] = {}
        for i, qpn in trig:
            k = (int(seg[i]), *key(int(a["src"][i]), int(a["dst"][i]), qpn))
            t = int(tns[i])
            if k in last and t - last[k] < gap_ns:
                continue
            last[k] = t
            expected[k] += 1
        seen: dict[Any, int] = defaultdict(int)
        prev: dict[Any, int] = {}
        min_gap: int | None = None
        for j in sorted(cnps, key=lambda j: int(tns[j])):
            k = (int(seg[j]), *key(int(a["dst"][j]), int(a["src"][j]), int(a["dqp"][j])))
            seen[k] += 1
            t = int(tns[j])
            if k in prev:
                d = t - prev[k]
                min_gap = d if min_gap is None else min(min_gap, d)
            prev[k] = t
        scopes = set(expected) | set(seen)
        mismatched = sorted((k, expected.get(k, 0), seen.get(k, 0)) for k in scopes
                            if expected.get(k, 0) != seen.get(k, 0))

        def scope_text(k: tuple[Any, ...], name: str = name) -> list[Any]:
            names = {"qp": (True, True, False), "ip_pair": (True, True), "port": (True,)}[name]
            return [r.addr(v) if is_ip and v is not None else v for v, is_ip in zip(k[1:], names, strict=True)]

        out["hypotheses"][name] = {
            "expected": sum(expected.values()), "seen": sum(seen.values()), "scopes": len(scopes),
            "mismatched_scopes": [{"scope": scope_text(k), "expected": e, "seen": n} for k, e, n in mismatched],
            "min_observed_gap_us": None if min_gap is None else min_gap / 1000,
        }
        if not mismatched and scopes:
            out["consistent"].append(name)
    return out


def _iwarp_findings(r: Rows, path: str | None) -> list[Finding]:
    """``bad_crc32c`` and ``terminate`` from the iWARP columns (the decoder reassembles the TCP
    streams as it reads the blocks).  A Terminate (RDMAP opcode 7, RFC 5040 4.8) is explained by
    its layer, error type and error code (RFC 5040 7, RFC 5044 8, RFC 6581); when the columns do
    not carry the type and code, the Terminate frames alone are decoded again for them."""
    out: list[Finding] = []
    need_detail = [row["frame"] for row in r.iwarp if row["bad_crc"] or row["terminate"] and "term_etype" not in row]
    detail = _pdu_details(path, set(need_detail)) if need_detail and path is not None else {}
    for row in r.iwarp:
        t = row["time_ns"] / 1e9
        if row["bad_crc"]:
            crc = row["crc_check"]  # the CRC field of the FPDU (tshark's iwarp_mpa.crc_check)
            want = detail.get(row["frame"], {}).get("crc_expected")
            exp = f", should be {want:#010x}" if want is not None else ""
            out.append(Finding("bad_crc32c", None, [row["frame"]], t, f"MPA CRC32c {crc:#010x} does not verify{exp}",
                               {"crc": crc, "expected": want}))
        if row["terminate"]:
            layer = row["term_layer"]
            etype, code = row.get("term_etype"), row.get("term_errcode")
            extra: dict[str, Any] = {}
            if etype is None and "etype" in detail.get(row["frame"], {}):
                d = detail[row["frame"]]
                etype, code = d["etype"], d["errcode"]
                extra = {"ddp_header": d["ddp_header"], "rdmap_header": d["rdmap_header"]}
            lname = TERM_LAYER_NAMES.get(layer, f"layer {layer}")
            if etype is None or code is None:
                out.append(Finding("terminate", None, [row["frame"]], t,
                                   f"Terminate: {lname} error; the connection is closed after it (RFC 5040 7.1)",
                                   {"layer": layer}))
                continue
            ename = TERM_ETYPE_NAMES.get(layer, {}).get(etype, f"type {etype}")
            err = term_errcode_names(layer, etype).get(code, f"code {code:#04x}")
            out.append(Finding("terminate", None, [row["frame"]], t,
                               f"Terminate: {lname} error, {ename}: {err} (layer {layer}, type {etype}, "
                               f"code {code:#04x}); the connection is closed after it (RFC 5040 7.1)",
                               {"layer": layer, "etype": etype, "errcode": code, **extra}))
    return out


def _pdu_details(path: str, frames: set[int]) -> dict[int, dict[str, Any]]:
    """What the columns do not hold of the iWARP PDUs completing in ``frames``: the CRC32c a bad
    FPDU should carry, a Terminate's type and code when the decoder has no columns for them
    (per-packet decoder with the TCP reassembly, read up to the last of ``frames``)."""

    out: dict[int, dict[str, Any]] = {}
    last = max(frames)
    for cp in read(path, count=last):
        if cp.frame_number not in frames:
            continue
        d = out.setdefault(cp.frame_number, {})
        for pdu in cp.pdus:
            if pdu.crc_kind == "crc32c" and pdu.crc_status == "bad" and pdu.crc_expected is not None:
                d.setdefault("crc_expected", pdu.crc_expected)
            term = pdu.get(Terminate)
            if term is not None:
                d.update(etype=term.etype, errcode=term.errcode, ddp_header=bool(term.hdrct_d),
                         rdmap_header=bool(term.hdrct_r))
    return out


def _raw_frames(path: str, frames: set[int]) -> dict[int, Any]:
    """The raw records of ``frames``, read block by block (no decoding)."""

    out: dict[int, Any] = {}
    want = np.array(sorted(frames), dtype=np.int64)
    for blk in record_blocks(path):
        n = len(blk.offset)
        lo, hi = np.searchsorted(want, [blk.first, blk.first + n])
        for f in want[lo:hi].tolist():
            i = f - blk.first
            off, cap = int(blk.offset[i]), int(blk.caplen[i])
            out[f] = RawRecord(f, int(blk.ts_ns[i]) / 1e9, int(blk.linktype[i]), bytes(blk.buf[off:off + cap]),
                               int(blk.wirelen[i]))
        if hi >= len(want):
            break
    return out


def _capture_gaps(findings: list[Finding], burst_us: float = 50.0) -> list[Finding]:
    """Gaps in the capture rather than losses on the wire.

    A PSN gap whose packets the sender never sends again (no go-back-N restart from a PSN in it
    or before it, later) was received: the responder would otherwise have NAKed or timed out and
    the requester resent them, so the capture (a mirror port, an offloaded sniffer) missed them.
    Such gaps on several connections within ``burst_us`` of each other are a capture drop burst.
    Gaps and restarts past the budget of their kind (folded, :class:`Findings`) count too: their
    PSNs are kept compactly."""
    # per connection: (time, 0 gap / 1 restart, PSN, first frame, packets, the gap's finding or None)
    events: dict[int | None, list[tuple[float, int, int, int, int, Finding | None]]] = defaultdict(list)
    for f in findings:
        if f.detail.get("folded"):  # past the budget of its kind: its PSNs are in findings.folded_psns
            continue
        if f.kind == "retransmission":
            events[f.connection].append((f.time, 1, int(f.detail.get("from_psn", 0)), 0, 0, None))
        elif f.kind == "psn_gap":
            events[f.connection].append((f.time, 0, int(f.detail["first_missing"]), 0, 0, f))
    for (kind, conn), ev in getattr(findings, "folded_psns", {}).items():
        restart = int(kind == "retransmission")
        events[conn].extend(zip(ev.time, [restart] * len(ev), ev.psn, ev.frame, ev.count,  # noqa: B905
                                [None] * len(ev)))
    out: list[Finding] = []
    for conn, evs in events.items():
        evs.sort(key=lambda e: (e[0], e[1]))
        # PSNs unwrapped one after the other (24-bit arithmetic), then, going back in time, the
        # lowest PSN any later restart goes back to
        unw: list[int] = []
        prev: int | None = None
        for e in evs:
            prev = e[2] if prev is None else _rel(e[2], prev)
            unw.append(prev)
        lowest: int | None = None
        for (t, kind, p, fr, n, gf), u in zip(reversed(evs), reversed(unw), strict=True):
            if kind == 1:
                lowest = u if lowest is None else min(lowest, u)
                continue
            if lowest is not None and lowest <= u:
                continue
            why = "never sent again: received but not captured (a capture drop, not a loss on the wire)"
            if gf is None:  # a folded gap
                out.append(Finding("capture_gap", conn, [fr], t, f"{gap_text(p, n)} {why}",
                                   {"first_missing": p, "count": n}))
                continue
            detail = {k: v for k, v in gf.detail.items() if k in ("first_missing", "count", "missing")}
            out.append(Finding("capture_gap", gf.connection, list(gf.frames), gf.time,
                               f"{gf.text.split(':')[0]} {why}", detail))
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
    nak_retrans = a.events_where("retransmission", trigger="nak")
    rows = []
    for what, kinds, names in COUNTER_ROWS:
        seen = sum(nak_retrans if k == "retransmission:nak" else a.events(k) if k in counts else 0 for k in kinds)
        ctr = {n: after[n] - before.get(n, 0) for n in names if n in after}
        rows.append({"what": what, "capture": seen, "counters": ctr,
                     "agree": None if not ctr else any(v == seen for v in ctr.values())})
    return rows



def _cm_exchanges(path: str, cm_frames: list[int], conns: list[Connection], seams: np.ndarray) -> None:
    """Attach the CM REQ/REP exchange (IBA Vol 1 12.6) to the connection whose QPNs it names.

    CM MADs are UD SENDs to QP 1; only those frames go through the per-packet decoder.  A run of
    the capture (between seams) pairs its own REQs and REPs."""

    raw = _raw_frames(path, set(cm_frames))
    reqs: dict[int, dict[str, Any]] = {}
    reps: list[dict[str, Any]] = []
    for fr in sorted(raw):
        f = frame_fields(decode_record(raw[fr]))
        if "infiniband.cm.req.localqpn" in f:
            reqs[int(f["infiniband.cm.req"])] = {"frame": fr, "qpn": int(f["infiniband.cm.req.localqpn"]),
                                                 "psn": int(f.get("infiniband.cm.req.startpsn", 0)),
                                                 "service_id": f.get("infiniband.cm.req.serviceid"),
                                                 "ip": f.get("ip.src")}
        elif "infiniband.cm.rep.localqpn" in f:
            reps.append({"frame": fr, "qpn": int(f["infiniband.cm.rep.localqpn"]),
                         "psn": int(f.get("infiniband.cm.rep.startpsn", 0)),
                         "remote_comm_id": int(f.get("infiniband.cm.rep.remotecommid", -1)), "ip": f.get("ip.src")})
    by_ends: dict[frozenset[tuple[Any, Any]], list[Connection]] = defaultdict(list)
    for c in conns:
        by_ends[frozenset({(c.requester, c.requester_qpn), (c.responder, c.responder_qpn)})].append(c)
    for rep in reps:
        req = reqs.get(rep["remote_comm_id"])
        if req is None:
            continue
        run = int(np.searchsorted(seams, req["frame"], side="right"))
        for c in by_ends.get(frozenset({(req["ip"], req["qpn"]), (rep["ip"], rep["qpn"])}), []):
            if c.run != run:
                continue
            c.cm = {"req_frame": req["frame"], "rep_frame": rep["frame"], "service_id": req["service_id"],
                    "req_ip": req["ip"], "rep_ip": rep["ip"],
                    "req_qpn": req["qpn"], "rep_qpn": rep["qpn"], "req_starting_psn": req["psn"],
                    "rep_starting_psn": rep["psn"]}


def _addr(cols: Columns, i: int, which: str) -> str:
    if cols.layers["ip"][i]:
        v = int(cols.data[f"ip.{which}"][i])
        return f"{v >> 24}.{(v >> 16) & 255}.{(v >> 8) & 255}.{v & 255}"
    return str(ipaddress.IPv6Address(bytes(cols.data[f"ipv6.{which}"][i]).ljust(16, b"\0")))


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
