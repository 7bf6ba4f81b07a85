"""Can the capture be trusted? (:mod:`rdmalab.capture.analysis`): the ``capture_seam``,
``time_backwards``, ``capture_damaged`` and ``duplicate_frames`` findings, one each for the whole
capture, and the ``capture_gap`` findings: PSN gaps the sender never sent again, so the capture
missed them and the wire did not (IBA Vol 1 9.7 go-back-N: a loss on the wire is resent)."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from rdmalab.capture.analysis_conn import gap_text
from rdmalab.capture.analysis_model import Finding
from rdmalab.capture.analysis_rows import Rows
from rdmalab.wire.ib import psn_unwrap as _rel


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
