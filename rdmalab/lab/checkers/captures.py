"""Checkers for 08-captures: find a key in a capture, compare with Wireshark."""

from __future__ import annotations

from typing import Any

from rdmalab import capture
from rdmalab.capture.crosscheck import crosscheck, tshark_path
from rdmalab.lab.core import Wrong, exercise
from rdmalab.lab.env import capture_path
from rdmalab.lab.feedback import as_int
from rdmalab.wire.ib import RETH

NB = "08-captures"


def _where(cps: list[Any], value: int) -> str | None:
    """Name a header field of the capture that holds ``value`` (to say what a wrong answer is)."""
    for cp in cps:
        for p in (cp.packet, *cp.pdus):
            for s in p.spans():
                if isinstance(s.value, int) and s.value == value and s.layer not in ("Ethernet",):
                    return f"{s.layer}.{s.field} of frame {cp.frame_number}"
    return None


@exercise("captures.rkey", "Find the rkey in the rping capture", notebook=NB, hints=(
    "rping's client tells the server where its buffer is in its first SEND: the 16-byte payload of frame 4 is "
    "address (8 bytes), rkey (4), length (4), big-endian.",
    "The server then uses that rkey in the RETH of an RDMA READ Request: check your answer there.",
))
def _rkey(answer: Any) -> str:
    cps = list(capture.read(capture_path("rxe_rping.pcap")))
    adv = int.from_bytes(cps[3].packet.payload[8:12], "big")
    read = next(cp for cp in cps if cp.packet.get(RETH) is not None and cp.packet.opcode_name == "RC RDMA READ Request")
    got = as_int(answer, "an rkey", field="RETH.r_key")
    expected = "the 32-bit rkey advertised in bytes 8-11 of frame 4's payload (big-endian)"
    if got == adv:
        ok = read.packet[RETH].r_key == adv
        return (f"Yes: rkey {adv:#x}, advertised in frame 4's payload and used by the READ in frame "
                f"{read.frame_number}" + ("." if ok else " (which uses another key!)."))
    if got == int.from_bytes(cps[3].packet.payload[8:12], "little"):
        raise Wrong("Right bytes, wrong byte order: rping sends its fields big-endian.", field="RETH.r_key",
                    offset=62, expected=expected)
    where = _where(cps, got)
    raise Wrong(f"{got:#x} is not the rkey" + (f": it is {where}." if where else "."), field="RETH.r_key",
                expected=expected)


@exercise("captures.stag", "Find the STag in the siw rping capture", notebook=NB, hints=(
    "On iWARP the rkey is called an STag; a tagged DDP segment (RDMA Write, Read Response) carries it.",
    "Look at the DDP header of the first RDMA Write FPDU: its stag field.",
))
def _stag(answer: Any) -> str:
    cps = list(capture.read(capture_path("siw_rping.pcap")))
    writes = [p for cp in cps for p in cp.pdus if p.summary().startswith("RDMA Write")]
    want = next(s.value for s in writes[0].spans() if s.field == "stag")
    got = as_int(answer, "an STag", field="DDP.stag")
    expected = "the 32-bit STag in the DDP header of the first RDMA Write FPDU"
    if got == want:
        return f"Yes: STag {want:#x}, the iWARP name for an rkey."
    if 0 <= got < 1 << 32 and int.from_bytes(got.to_bytes(4, "little"), "big") == want:
        raise Wrong("Right bytes, wrong byte order: DDP fields are big-endian.", field="DDP.stag", expected=expected)
    where = _where(cps, got)
    raise Wrong(f"{got:#x} is not the STag of the first RDMA Write" + (f": it is {where}." if where else "."),
                field="DDP.stag", expected=expected)


@exercise("captures.agree", "How far do rdmalab and Wireshark agree?", notebook=NB, hints=(
    "rdmalab.capture.crosscheck.crosscheck(path) compares every field of every frame with tshark.",
    "The report's fields_compared and agreements attributes count them.",
))
def _agree(answer: Any) -> str:
    if tshark_path() is None:
        return "tshark is not installed here, so this check cannot compare; your answer is accepted as is."
    r = crosscheck(capture_path("rxe_rping.pcap"))
    if not isinstance(answer, (list, tuple)) or len(answer) != 2:
        raise Wrong("Give [fields compared, fields that differ].", field="answer",
                    expected="[report.fields_compared, fields that differ]")
    compared, differ = (as_int(x, "a count", field="crosscheck") for x in answer)
    if compared != r.fields_compared:
        raise Wrong(f"{compared} is not the number of fields compared in rxe_rping.pcap.",
                    field="report.fields_compared", given=compared, expected="the report's fields_compared")
    if differ != r.fields_compared - r.agreements:
        raise Wrong(f"{differ} is not the number of differing fields (fields compared minus agreements).",
                    field="fields that differ", given=differ, expected="fields_compared - agreements")
    return (f"Right: {r.fields_compared} fields compared, {differ} differ, every difference explained by a "
            f"known Wireshark defect: {len(r.unexplained) == 0}.")
