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
  IBA Vol 1 9.7 (and Lumina's checkers, SIGCOMM 2023: ``lumina/analyzer/checker/gbn_check.py``,
  ``read_gbn_check.py``, ``cnp_check.py``, ``measurer/latency_measure.py``):

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
  ``unreachable``     an ICMP or ICMPv6 error that quotes a RoCE packet (port unreachable: nothing
                      takes RoCEv2 at that address), with the quoted packet's QP, PSN and opcode
  ==================  =======================================================================

The analysis reads what is on the capture.  A capture taken at the receiver (or after the lossy
link) shows losses as PSN gaps; one taken at the sender shows every packet once and losses only
through the NAKs and retransmissions they cause.

This module runs the analysis (:func:`analyze`, :func:`analyze_rows`); the parts live in rooms by
concern: :mod:`~rdmalab.capture.analysis_rows` (the columns kept), :mod:`~rdmalab.capture.analysis_conn`
(connections, the go-back-N walk), :mod:`~rdmalab.capture.analysis_model` (the results),
:mod:`~rdmalab.capture.analysis_congestion`, :mod:`~rdmalab.capture.analysis_iwarp`,
:mod:`~rdmalab.capture.analysis_cm` (CM exchanges), :mod:`~rdmalab.capture.analysis_trust` (seams,
duplicates, capture gaps), :mod:`~rdmalab.capture.analysis_compare` (``sent`` against received) and
:mod:`~rdmalab.capture.analysis_counters`.  The public names are re-exported here.
"""


from __future__ import annotations

import os
from typing import Any

import numpy as np

from rdmalab.capture.analysis_cm import _cm_exchanges
from rdmalab.capture.analysis_compare import _lost
from rdmalab.capture.analysis_congestion import PACING_HYPOTHESES, _congestion, _series_all, cnp_pacing
from rdmalab.capture.analysis_conn import _Out, ack_coalescing, connections, walk, walk_order
from rdmalab.capture.analysis_counters import COUNTER_ROWS, counters_side_by_side, parse_counters
from rdmalab.capture.analysis_iwarp import _iwarp_findings, iwarp_connections, iwarp_seq_time, resync_findings
from rdmalab.capture.analysis_model import Analysis, Connection, Finding, Findings, Message
from rdmalab.capture.analysis_rows import Rows, load_rows, unreachable_text
from rdmalab.capture.analysis_trust import _capture_gaps, _capture_trust
from rdmalab.capture.columnar import Columns, iter_columns
from rdmalab.capture.pcapio import seconds_ns
from rdmalab.wire.ib import IB_MTUS, PSN_MOD
from rdmalab.wire.opcodes import opcode_name

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
    "iwarp_resync": "An iWARP stream followed again past octets not read as FPDUs: a hole in the capture, or a "
                    "capture that begins inside an FPDU. The FPDUs in those octets are not in the analysis.",
    "unreachable": "An ICMP error came back for a RoCE packet. Port unreachable means that nothing at that "
                   "address takes RoCEv2 (UDP 4791): no RDMA device is bound to it, or its rxe link is down.",
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


def _unreachable(r: Rows, conns: list[Connection]) -> list[Finding]:
    """``unreachable`` findings: each ICMP error that quotes a RoCE packet, given to the connection of the
    quoted packet's destination and QP when the capture has one."""
    out = []
    for u in r.unreachable:
        conn = next((c.id for c in conns if (c.responder, c.responder_qpn) == (u["dst"], u["qp"])
                     or (c.requester, c.requester_qpn) == (u["dst"], u["qp"])), None)
        out.append(Finding("unreachable", conn, [u["frame"]], u["time_ns"] / 1e9, unreachable_text(u),
                           detail={k: u[k] for k in ("from", "src", "dst", "qp", "psn")}))
    return out


#: what the comparison with a sender's capture reads of each capture (analysis_compare._packet_keys, _lost)
_SENT_FIELDS = ("frame.number", "frame.time_ns", "frame.time_epoch", "ip.src", "ip.dst", "ipv6.src", "ipv6.dst",
                "infiniband.bth.destqp", "infiniband.bth.psn", "infiniband.bth.opcode", "rdmalab.payload.len")


def _rdma_columns(path: str | os.PathLike[str]) -> Columns:
    """The few columns :func:`_lost` reads of a capture's RDMA packets alone, block by block (memory grows
    with the RDMA packets, not every frame's every column)."""
    return Columns.concat([cols.take(cols.present("infiniband.bth")) for cols in iter_columns(path, fields=_SENT_FIELDS)])


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
        first_ns = seconds_ns(c.first)
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
    iw_conns = iwarp_connections(r, len(conns))
    findings.extend(_iwarp_findings(r, path if read_file else None, len(conns)))
    findings.extend(resync_findings(r, len(conns)))
    findings.extend(_unreachable(r, conns))
    findings.extend(_capture_gaps(findings))
    if sent is not None:
        before = sent if isinstance(sent, Columns) else _rdma_columns(sent)
        # (a capture that stops part way: what was still on its way when it stopped cannot be told from a
        # loss, so nothing is compared, nor read again; the command says so)
        if not any(f.kind == "capture_damaged" for f in findings):
            after = cols if cols is not None else _rdma_columns(path) if path is not None and read_file else None
            if after is not None:
                findings.extend(_lost(after, before, conns))
    # by time, then first frame: two stable sorts with one number a key each (a (time, frame) tuple a
    # finding is 100 MB more at a million findings)
    findings.sort(key=lambda f: f.frames[0] if f.frames else 0)
    findings.sort(key=lambda f: f.time)
    # a plain list in the result (it pickles to Dask workers and back; the budget was for the analysis)
    return Analysis(path, r.frames, len(r) + len(r.dup_pairs), conns, out.messages, list(findings), mtu, series,
                    psn_time, checks, r.iwarp_conns.frames, iw_conns, iwarp_seq_time(r, len(conns)))


def _bar(total: int, what: str) -> Any:
    if total < 2000:
        return None
    try:
        from tqdm import tqdm  # optional dependency (the "analysis" extra)
    except ImportError:
        return None
    return tqdm(total=total, unit=" " + what, desc="analysing", leave=False)
