"""Sent against received in the analysis of a capture (:mod:`rdmalab.capture.analysis`, the
``sent`` capture): every RDMA packet a capture taken before the lossy part of the path holds and
the analysed capture lacks is a ``lost`` finding."""

from __future__ import annotations

import ipaddress
from collections import defaultdict
from typing import Any

import numpy as np

from rdmalab.capture.analysis_model import Connection, Finding
from rdmalab.capture.columnar import Columns
from rdmalab.wire.opcodes import opcode_name


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
