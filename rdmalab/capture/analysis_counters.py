"""The capture against the NIC counters (:mod:`rdmalab.capture.analysis`, ``rdmalab analyze
--counters``): the counter dumps parsed (``rdma statistic show``, ``ethtool -S``) and each kind
of event the capture shows beside the counters that count it (mlx5 names from Lumina's counter
checks, Lumina's ``checker/gbn_check.py`` and ``checker/cnp_check.py``; rxe names from Linux 6.1
``drivers/infiniband/sw/rxe/rxe_hw_counters.c``)."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

from rdmalab.capture.analysis_model import Analysis

#: What the capture shows against the NIC counters that count the same events: (row, finding
#: kinds counted in the capture, counter names).  mlx5 names from Lumina's counter checks
#: (Lumina's gbn_check.py, cnp_check.py); rxe names from rxe_hw_counters.c.
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
