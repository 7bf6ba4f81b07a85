"""iWARP in the analysis of a capture (:mod:`rdmalab.capture.analysis`): its connections (the TCP
connections that carry MPA, counted by :mod:`rdmalab.capture.iwarp_conns`), ``bad_crc32c`` (an MPA
FPDU whose CRC32c does not verify) and ``terminate`` findings, a Terminate explained by its
layer, error type and error code (RFC 5040 4.8 and 7, RFC 5044 8, RFC 6581); what the columns do
not hold of those PDUs is decoded again from the few frames that carry them."""

from __future__ import annotations

from typing import Any

import numpy as np

from rdmalab.capture.analysis_model import Connection, Finding
from rdmalab.capture.analysis_rows import Rows
from rdmalab.capture.reader import read
from rdmalab.wire.rdmap import TERM_ETYPE_NAMES, TERM_LAYER_NAMES, Terminate, term_errcode_names


def iwarp_connections(r: Rows, first_id: int) -> list[Connection]:
    """The iWARP connections of the rows, as :class:`Connection` s numbered from ``first_id`` in the
    order of their first frame (``packets``: frames with iWARP, ``request_bytes``: the data their
    FPDUs carry, both directions, ``retransmitted_bytes``: the octets of TCP segments sent again; the rest
    in ``summary``, :meth:`IwarpConn.summary`)."""
    out = []
    for k, c in enumerate(r.iwarp_conns.every()):
        out.append(Connection(first_id + k, "iWARP", c.requester, c.responder, None, None, c.requester_port,
                              packets=c.packets, request_bytes=c.request_bytes,
                              retransmitted_bytes=c.retransmitted_bytes, first=c.first_ns / 1e9,
                              last=c.last_ns / 1e9, summary=c.summary(), responder_port=c.responder_port))
    return out


def iwarp_seq_time(r: Rows, first_id: int) -> dict[int, dict[str, np.ndarray]]:
    """Per iWARP connection (numbered as :func:`iwarp_connections` numbers them), its TCP segments with
    data as recorded for a picture (:attr:`~rdmalab.capture.iwarp_conns.IwarpConns.points_left`): arrays
    ``dir`` (0: initiator to responder), ``frame``, ``t`` (seconds since the connection's first frame with
    iWARP), ``seq`` (where the segment starts: octets after its direction's first octet seen), ``len`` and
    ``kind`` (an index of :data:`~rdmalab.capture.iwarp_conns.SEGMENT_KINDS`), in capture order per
    direction, the initiator's first.  Connections with none recorded are left out."""
    out: dict[int, dict[str, np.ndarray]] = {}
    for k, c in enumerate(r.iwarp_conns.every()):
        parts = [(way, np.frombuffer(s.points, dtype=np.int64).reshape(-1, 5))
                 for way, s in enumerate(c.sides) if s.points]
        if not parts:
            continue
        rows = np.concatenate([p for _w, p in parts])
        out[first_id + k] = {"dir": np.concatenate([np.full(len(p), w, dtype=np.int8) for w, p in parts]),
                             "frame": rows[:, 0], "t": (rows[:, 1] - c.first_ns) / 1e9, "seq": rows[:, 2],
                             "len": rows[:, 3], "kind": rows[:, 4].astype(np.int8)}
    return out


def _iwarp_findings(r: Rows, path: str | None, first_id: int = 0) -> list[Finding]:
    """``bad_crc32c`` and ``terminate`` from the iWARP columns (the decoder reassembles the TCP
    streams as it reads the blocks).  A Terminate (RDMAP opcode 7, RFC 5040 4.8) is explained by
    its layer, error type and error code (RFC 5040 7, RFC 5044 8, RFC 6581); when the columns do
    not carry the type and code, the Terminate frames alone are decoded again for them."""
    out: list[Finding] = []
    ids = {c.id: first_id + k for k, c in enumerate(r.iwarp_conns.every())}
    need_detail = [row["frame"] for row in r.iwarp if row["bad_crc"] or row["terminate"] and "term_etype" not in row]
    detail = _pdu_details(path, set(need_detail)) if need_detail and path is not None else {}
    for row in r.iwarp:
        conn = ids.get(row.get("conn"))  # type: ignore[arg-type]
        for kind, text, info in iwarp_finding_texts(row, detail.get(row["frame"], {})):
            out.append(Finding(kind, conn, [row["frame"]], row["time_ns"] / 1e9, text, info))
    return out


def resync_text(row: dict[str, Any]) -> str:
    """The text of an ``iwarp_resync`` finding (one of :attr:`Rows.iwarp_resyncs
    <rdmalab.capture.analysis_rows.Rows.iwarp_resyncs>`; ``analyze`` and ``top`` say the same)."""
    src, sport, dst, dport = row["key"]
    way = f"{src}:{sport} -> {dst}:{dport}"
    if row["kind"] == "hole":
        return (f"{way}: FPDUs followed again {row['octets']} octets further on, past a hole in the capture "
                "(a TCP sequence jump nothing filled): the FPDUs in those octets are not in the analysis")
    return (f"{way}: {row['octets']} octets passed over before an FPDU start could be proven (the capture "
            "begins inside an FPDU, or the stream was lost): the FPDUs in them are not in the analysis")


def resync_findings(r: Rows, first_id: int = 0) -> list[Finding]:
    """``iwarp_resync`` findings: where the reassembly followed a stream again past octets it could not
    read as FPDUs (:attr:`~rdmalab.capture.iwarp.IwarpTracker.resyncs`)."""
    ids = {c.id: first_id + k for k, c in enumerate(r.iwarp_conns.every())}
    return [Finding("iwarp_resync", ids.get(row["conn"]), [row["frame"]], row["time_ns"] / 1e9, resync_text(row),
                    {"kind": row["kind"], "octets": row["octets"], "direction": list(row["key"])})
            for row in r.iwarp_resyncs]


def iwarp_finding_texts(row: dict[str, Any], detail: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """The findings of one of :attr:`Rows.iwarp <rdmalab.capture.analysis_rows.Rows.iwarp>`: (kind, text,
    detail) of its bad MPA CRC and of its Terminate (``analyze`` and ``top`` say the same); ``detail``:
    what :func:`_pdu_details` found of its frame, if anything."""
    out: list[tuple[str, str, dict[str, Any]]] = []
    if row["bad_crc"]:
        crc = row["crc_check"]  # the CRC field of the FPDU (tshark's iwarp_mpa.crc_check)
        want = detail.get("crc_expected")
        exp = f", should be {want:#010x}" if want is not None else ""
        out.append(("bad_crc32c", f"MPA CRC32c {crc:#010x} does not verify{exp}", {"crc": crc, "expected": want}))
    if row["terminate"]:
        layer = row["term_layer"]
        etype, code = row.get("term_etype"), row.get("term_errcode")
        extra: dict[str, Any] = {}
        if etype is None and "etype" in detail:
            etype, code = detail["etype"], detail["errcode"]
            extra = {"ddp_header": detail["ddp_header"], "rdmap_header": detail["rdmap_header"]}
        lname = TERM_LAYER_NAMES.get(layer, f"layer {layer}")
        if etype is None or code is None:
            out.append(("terminate", f"Terminate: {lname} error; the connection is closed after it (RFC 5040 7.1)",
                        {"layer": layer}))
            return out
        ename = TERM_ETYPE_NAMES.get(layer, {}).get(etype, f"type {etype}")
        err = term_errcode_names(layer, etype).get(code, f"code {code:#04x}")
        out.append(("terminate", f"Terminate: {lname} error, {ename}: {err} (layer {layer}, type {etype}, "
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
