"""Congestion in the analysis of a capture (:mod:`rdmalab.capture.analysis`): the ``cnp`` and
``ecn_ce`` findings (the CNP's connection, each CE mark's reaction time), the check of the CNPs
against each pacing hypothesis (Lumina's ``CNPCheck``, SIGCOMM 2023: reference
Lumina's ``checker/cnp_check.py``), and the throughput over time of each connection."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from rdmalab.capture.analysis_conn import ConnRows, T
from rdmalab.capture.analysis_model import Finding
from rdmalab.capture.analysis_rows import Rows
from rdmalab.capture.pcapio import seconds_ns


def _series_all(r: Rows, pairs: list[ConnRows], bins: int = 50) -> dict[int, list[tuple[float, float]]]:
    """Throughput over time per connection: (seconds since the connection's first packet, Mbit/s)
    per bin, its requests' payload bytes in ``bins`` bins from its first to its last packet; all
    the connections in one pass of array operations."""
    out: dict[int, list[tuple[float, float]]] = {}
    if not pairs:
        return out
    a = r.a
    t0 = np.array([seconds_ns(cr.conn.first) for cr in pairs], dtype=np.int64)
    t1 = np.array([seconds_ns(cr.conn.last) for cr in pairs], dtype=np.int64)
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


#: CNP pacing hypotheses (Lumina's ``checker/cnp_check.py``; rdmalab.verbs.engine.cnp.CnpPacer's
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
