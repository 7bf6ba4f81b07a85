"""iWARP in the analysis of a capture (:mod:`rdmalab.capture.analysis`): ``bad_crc32c`` (an MPA
FPDU whose CRC32c does not verify) and ``terminate`` findings, a Terminate explained by its
layer, error type and error code (RFC 5040 4.8 and 7, RFC 5044 8, RFC 6581); what the columns do
not hold of those PDUs is decoded again from the few frames that carry them."""

from __future__ import annotations

from typing import Any

from rdmalab.capture.analysis_model import Finding
from rdmalab.capture.analysis_rows import Rows
from rdmalab.capture.reader import read
from rdmalab.wire.rdmap import TERM_ETYPE_NAMES, TERM_LAYER_NAMES, Terminate, term_errcode_names


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
