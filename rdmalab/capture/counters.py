"""Kernel rxe counters beside the capture, device by device (``rdmalab analyze --counters FILE.counters.json``).

``rdmalab capture`` stores next to each capture the counters of both devices dumped before and
after the run (``NAME.counters.json``, :func:`rdmalab.live.captures.counters_json`): rxe's
``hw_counters`` (the same numbers ``rdma statistic show link DEV/1`` prints), the veths' packet
counters and the netem qdisc's statistics.  Knowing which device has which IP address, each rxe
counter can be set against the events of the capture that the same device caused or saw:
packets it sent and received, NAKs it generated or took, retries, duplicates.

Every counter, what it counts and where Linux 6.1 increments it (``drivers/infiniband/sw/rxe``;
the names are in ``rxe_hw_counters.c``) is in :data:`RXE_COUNTERS`.  Where a counter and the
capture legitimately differ, the row says why, with the numbers (a packet netem dropped on the
sender's egress before the tap; a NAK the requester does not count), instead of hiding it.
"""

from __future__ import annotations

import ipaddress
import json
import os
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from rdmalab.capture.analysis import Analysis
from rdmalab.capture.columnar import Columns, read_columns
from rdmalab.wire.ib import AETH_ACK, AETH_NAK, NAK_PSN_SEQUENCE_ERROR, psn_add, psn_diff

#: rxe counter -> (what it counts, where Linux 6.1 increments it).
RXE_COUNTERS: dict[str, tuple[str, str]] = {
    "sent_pkts": ("RoCEv2 packets the device handed to the IP stack without error (requests, ACKs/NAKs, READ "
                  "responses); counted after rxe_send() returns, so a packet a qdisc such as netem drops afterwards "
                  "still counts", "rxe_net.c rxe_xmit_packet()"),
    "rcvd_pkts": ("RoCEv2 packets received that passed the length, header and ICRC checks, before any QP or PSN "
                  "check (a packet the responder then drops as out of sequence still counts)", "rxe_recv.c rxe_rcv()"),
    "duplicate_request": ("responder: an RC request whose PSN is before the expected one (a duplicate: re-ACKed, "
                          "or a READ/atomic replayed)", "rxe_resp.c check_psn()"),
    "out_of_seq_request": ("responder: an RC request whose PSN is past the expected one, the first of its run only "
                           "(qp->resp.sent_psn_nak): one NAK PSN sequence error (AETH syndrome 0x60) is sent, later "
                           "out-of-sequence requests are dropped silently", "rxe_resp.c check_psn()"),
    "rcvd_rnr_err": ("requester: an RNR NAK received", "rxe_comp.c check_ack()"),
    "send_rnr_err": ("responder: an RNR NAK sent (a SEND found no receive WQE)", "rxe_resp.c rxe_responder()"),
    "rcvd_seq_err": ("requester: a NAK PSN sequence error received whose PSN is past the completer's PSN "
                     "(qp->comp.psn: one past the last acknowledged PSN); a NAK naming a PSN already "
                     "acknowledged or equal to comp.psn is acted on but not counted", "rxe_comp.c check_ack()"),
    "ack_deferred": ("completer: a response arrived while earlier ones were still queued, so the completer task "
                     "was scheduled instead of run at once (internal)", "rxe_comp.c rxe_comp_queue_pkt()"),
    "retry_exceeded_err": ("requester: the retry count ran out; the WQE completes with IBV_WC_RETRY_EXC_ERR",
                           "rxe_comp.c rxe_completer() (COMPST_ERROR_RETRY)"),
    "retry_rnr_exceeded_err": ("requester: the RNR retry count ran out (IBV_WC_RNR_RETRY_EXC_ERR)",
                               "rxe_comp.c rxe_completer() (COMPST_RNR_RETRY)"),
    "completer_retry_err": ("requester: a go-back-N retry started, after a NAK sequence error or a retransmission "
                            "timeout, when something sent is still unacknowledged (req.psn past comp.psn); one per "
                            "retry, not per packet resent", "rxe_comp.c rxe_completer() (COMPST_ERROR_RETRY)"),
    "send_err": ("the IP stack refused a packet (rxe_send() failed)", "rxe_net.c rxe_xmit_packet()"),
    "link_downed": ("the port went down with its netdev", "rxe_net.c rxe_port_down()"),
    "rdma_sends": ("requester: SEND work requests completed", "rxe_comp.c do_complete()"),
    "rdma_recvs": ("responder: receive WQEs completed successfully (by a SEND, or a WRITE with immediate)",
                   "rxe_resp.c do_complete()"),
}

_AETH_NAK_SEQ = AETH_NAK << 5 | NAK_PSN_SEQUENCE_ERROR  # the AETH syndrome of a PSN sequence error NAK


@dataclass
class CounterRow:
    device: str
    counter: str
    value: int | None          # after - before
    capture: int | None        # what the capture shows for the same events (None: not visible on the wire)
    status: str                # "agree", "explained", "DIFFER", "not on the wire", "absent"
    note: str = ""
    meaning: str = ""
    source: str = ""


def load_counters_json(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read ``NAME.counters.json``; a clear ``ValueError`` naming the file when it is not one."""
    name = os.fspath(path)
    try:
        with open(name, encoding="utf-8") as f:
            data = json.load(f)
    except json.JSONDecodeError as err:
        raise ValueError(f"{name}: not JSON ({err.msg} at line {err.lineno})") from None
    for key in ("server", "client", "before", "after"):
        if not isinstance(data, dict) or key not in data:
            raise ValueError(f"{name}: no '{key}' entry (expected a NAME.counters.json written by `rdmalab capture`)")
    for side in ("server", "client"):
        if not isinstance(data[side], dict) or not {"device", "ip"} <= set(data[side]):
            raise ValueError(f"{name}: '{side}' needs 'device' and 'ip'")
    out: dict[str, Any] = data
    return out


def _counted_naks(a: Analysis, cols: Columns, conn_ids: set[int], requester_ip: int) -> tuple[list[int], list[int]]:
    """NAK sequence errors sent to ``requester_ip``, split by rxe's rule for ``rcvd_seq_err``: replaying the
    ACKs and NAKs the requester received in order, a NAK counts when its PSN is past ``comp.psn`` (one past
    the highest PSN acknowledged so far, or the PSN of the last counted NAK).  Returns (counted, not counted)
    frame numbers."""
    has_bth = cols.present("infiniband.bth")
    dst = cols.data["ip.dst"]
    has_aeth = cols.layers["infiniband.aeth"]
    syn = cols.data["infiniband.aeth.syndrome"].astype(np.int64)
    psn = cols.data["infiniband.bth.psn"].astype(np.int64)
    frame = cols.data["frame.number"].astype(np.int64)
    dqp = cols.data["infiniband.bth.destqp"].astype(np.int64)
    src = cols.data["ip.src"]
    counted: list[int] = []
    skipped: list[int] = []
    for cid in sorted(conn_ids):
        c = a.connections[cid]
        first = next((m.first_psn for m in a.messages if m.connection == cid), None)
        if first is None or c.requester_qpn is None:
            continue
        comp = first
        resp_ip = int(ipaddress.IPv4Address(c.responder))
        rows = np.nonzero(has_bth & has_aeth & (dst == requester_ip) & (src == resp_ip) & (dqp == c.requester_qpn))[0]
        for i in rows.tolist():
            p, s = int(psn[i]), int(syn[i])
            if s >> 5 == AETH_ACK:                        # ACK (or an ATOMIC/READ response's AETH)
                if psn_diff(p, comp) >= 0:
                    comp = psn_add(p, 1)
            elif s == _AETH_NAK_SEQ:
                if psn_diff(p, comp) > 0:
                    counted.append(int(frame[i]))
                    comp = p
                else:
                    skipped.append(int(frame[i]))
    return counted, skipped


def rxe_side_by_side(a: Analysis, counters: dict[str, Any], cols: Columns | None = None) -> list[CounterRow]:
    """Each rxe counter of both devices (after - before) beside what the capture shows."""
    if cols is None:
        if a.path is None:
            raise ValueError("the analysis has no capture file to read the packets from")
        cols = read_columns(a.path)
    before = counters["before"].get("hw_counters", {})
    after = counters["after"].get("hw_counters", {})
    netem_b = counters["before"].get("netem", {})
    netem_a = counters["after"].get("netem", {})
    has_bth = cols.present("infiniband.bth")
    icrc_ok = cols.data["rdmalab.icrc.ok"].astype(bool)
    src, dst = cols.data["ip.src"], cols.data["ip.dst"]
    frames_from: dict[int, int] = {}
    rows: list[CounterRow] = []
    ip_of = {counters[s]["device"]: int(ipaddress.IPv4Address(counters[s]["ip"])) for s in ("server", "client")}
    netdev_of = {counters[s]["device"]: counters[s].get("netdev") for s in ("server", "client")}
    tap_dev = counters["server"]["device"]   # the capture is taken on the server's netdev
    for side in ("server", "client"):
        dev = counters[side]["device"]
        ip = ip_of[dev]
        other_ip = next(v for k, v in ip_of.items() if k != dev)
        if dev not in after:
            rows.append(CounterRow(dev, "*", None, None, "absent", f"no hw_counters for {dev} in the dump "
                                   "(siw has none)"))
            continue
        delta = {k: v - before.get(dev, {}).get(k, 0) for k, v in after[dev].items()}
        frames_from[ip] = int(np.count_nonzero(has_bth & (src == ip)))
        as_req = {i for i, c in enumerate(a.connections) if c.requester == str(ipaddress.IPv4Address(ip))}
        as_resp = {i for i, c in enumerate(a.connections) if c.responder == str(ipaddress.IPv4Address(ip))}

        def kinds(kind: str, conns: set[int]) -> list[Any]:
            return [f for f in a.findings if f.kind == kind and f.connection in conns]

        def row(name: str, seen: int | None, note: str = "", explained: bool = False, *, dev: str = dev,
                delta: dict[str, int] = delta) -> None:
            if name not in delta:
                return
            v = delta[name]
            if seen is None:
                status = "not on the wire"
            elif v == seen:
                status = "agree"
            else:
                status = "explained" if explained else "DIFFER"
            meaning, source = RXE_COUNTERS.get(name, ("", ""))
            rows.append(CounterRow(dev, name, v, seen, status, note, meaning, source))

        # packets sent: the tap is on the server's side, so what the client sent crosses its own netdev
        # (and any netem there) first
        sent_seen = frames_from[ip]
        nd = netdev_of[dev]
        dropped = (netem_a.get(nd, {}).get("dropped", 0) - netem_b.get(nd, {}).get("dropped", 0)) if nd else 0
        missing = delta.get("sent_pkts", 0) - sent_seen
        if dev == tap_dev or missing == 0:
            row("sent_pkts", sent_seen, f"RoCEv2 packets from {ipaddress.IPv4Address(ip)} in the capture")
        else:
            ok = 0 < missing <= dropped
            row("sent_pkts", sent_seen,
                f"{sent_seen} RoCEv2 packets from {ipaddress.IPv4Address(ip)} reached the tap; the other {missing} "
                f"were dropped before it: netem on {nd} dropped {dropped} packets during the run"
                + (f" ({dropped - missing} of them not RoCE, e.g. the TCP exchange)" if dropped > missing else "")
                if ok else f"{missing} packets sent by {dev} are not in the capture and netem on {nd} dropped "
                           f"{dropped}: unexplained", explained=ok)
        rcvd_seen = int(np.count_nonzero(has_bth & (dst == ip) & (src == other_ip) & icrc_ok))
        row("rcvd_pkts", rcvd_seen, f"RoCEv2 packets to {ipaddress.IPv4Address(ip)} in the capture, good ICRC")
        naks = kinds("nak_seq_err", as_resp)
        row("out_of_seq_request", a.events_where("nak_seq_err", as_resp), f"NAK sequence errors sent by {dev} (frames "
            f"{','.join(str(f.frames[0]) for f in naks[:12])}{'...' if len(naks) > 12 else ''})" if naks else
            f"no NAK sequence error from {dev} in the capture")
        row("duplicate_request", a.events_where("duplicate", as_resp),
            f"duplicate requests to {dev}")
        counted, skipped = _counted_naks(a, cols, as_req, ip)
        all_naks = len(counted) + len(skipped)
        row("rcvd_seq_err", len(counted),
            f"{all_naks} NAK sequence errors reached {dev}; {len(counted)} name a PSN past its completer's PSN"
            + (f"; frame(s) {','.join(map(str, skipped))} name the PSN the completer already expects (or an "
               "earlier one), after the ACK before them: rxe_comp.c check_ack() retries on such a NAK without "
               "counting it" if skipped else ""))
        by = {t: a.events_where("retransmission", as_req, trigger=t) for t in ("nak", "implied_nak", "timeout")}
        row("completer_retry_err", a.events_where("retransmission", as_req), f"go-back-N retries by {dev} in the capture: {by['nak']} after a NAK, "
            f"{by['timeout']} after a timeout" + (f", {by['implied_nak']} after an implied NAK" if by["implied_nak"]
                                                  else ""))
        row("rcvd_rnr_err", a.events_where("nak_rnr", as_req), f"RNR NAKs to {dev}")
        row("send_rnr_err", a.events_where("nak_rnr", as_resp), f"RNR NAKs from {dev}")
        sends_ok = sum(1 for m in a.messages if m.op == "SEND" and m.result == "ok" and m.connection in as_req)
        sends_in = sum(1 for m in a.messages if m.op == "SEND" and m.connection in as_resp)
        row("rdma_sends", sends_ok, f"SEND messages from {dev} acknowledged in the capture")
        row("rdma_recvs", sends_in, f"SEND messages to {dev} in the capture (a WRITE with immediate would also "
                                    "count)")
        for name in ("retry_exceeded_err", "retry_rnr_exceeded_err", "ack_deferred", "send_err", "link_downed"):
            row(name, None, "a local event: the wire shows at most its cause")
    return rows


def rows_text(rows: list[CounterRow]) -> str:
    lines = ["Kernel counters (after - before) against the capture, device by device:",
             f"  {'device':<6} {'counter':<22} {'kernel':>7} {'capture':>8}  status"]
    for r in rows:
        v = "-" if r.value is None else str(r.value)
        c = "-" if r.capture is None else str(r.capture)
        lines.append(f"  {r.device:<6} {r.counter:<22} {v:>7} {c:>8}  {r.status}" + (f": {r.note}" if r.note else ""))
    return "\n".join(lines) + "\n"


def rows_json(rows: list[CounterRow]) -> list[dict[str, Any]]:
    return [asdict(r) for r in rows]
