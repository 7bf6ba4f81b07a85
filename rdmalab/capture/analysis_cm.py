"""The CM exchanges in the analysis of a capture (:mod:`rdmalab.capture.analysis`): the CM
REQ/REP exchange (IBA Vol 1 12.6) attached to the connection whose QPNs it names; only the CM
frames (UD SENDs to QP 1) are read again, raw, and go through the per-packet decoder."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from rdmalab.capture.analysis_model import Connection
from rdmalab.capture.columnar import record_blocks
from rdmalab.capture.fields import frame_fields
from rdmalab.capture.reader import RawRecord, decode_record


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
                               int(blk.wirelen[i]), fcs_len=int(blk.fcs_lens()[i]))
        if hi >= len(want):
            break
    return out


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
