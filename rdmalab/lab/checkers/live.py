"""Checkers for 13-live-rdma: packets of a WRITE, error completions, a wrong rkey on rxe.

Per student (:mod:`rdmalab.lab.variant`): ``live.segments``, the length of the WRITE (and of the READ
of it) and the seed of the run (data, and on the soft engine PSNs).  The length decides the answer on
both backends: the program sets path MTU 1024 on both QPs (``rdmalab/live/programs/lab_ops.py``), and
rxe splits a message by it as the soft engine does.  What an error completion holds, and the state a
wrong rkey leaves the QP in, are the same for everyone.
"""

from __future__ import annotations

from random import Random
from typing import Any

import rdmalab.verbs.enums as e
from rdmalab.lab import variant
from rdmalab.lab.core import Wrong, exercise
from rdmalab.lab.feedback import as_int, names_value, norm_name, plain
from rdmalab.lab.variant import scenario

NB = "13-live-rdma"
MTU = 1024  # lab_ops.py's path_mtu (IBV_MTU_1024) on both backends


@scenario("live.segments")
def _segments_scenario(r: Random) -> dict[str, Any]:
    # 3 to 9 packets each way at path MTU 1024 (First, 1 to 7 Middle, Last), the Last one never full
    while True:
        length = r.randrange(2 * MTU + 1, 9 * MTU)
        if length % MTU:
            return {"length": length, "seed": r.randrange(1, 2**31)}


_KEYS = ("writes", "read_responses", "last_payload")


@exercise("live.segments", "How many packets carry your WRITE, and a READ of it", notebook=NB, varies=True, hints=(
    "Both sides set path MTU 1024: every packet carries at most 1024 bytes of payload.",
    "Count the 'RC RDMA WRITE ...' packets and the 'RC RDMA READ Response ...' packets in the capture; "
    "the First and Middle packets carry 1024 bytes each, the Last one the rest.",
))
def _segments(answer: Any) -> str:
    length = variant.draw("live.segments").length
    want = -(-length // MTU)
    last = length - (want - 1) * MTU
    expected = ("{'writes': ..., 'read_responses': ..., 'last_payload': ...} for the length in your scenario "
                "at path MTU 1024")
    if not isinstance(answer, dict) or set(map(str, answer)) != set(_KEYS):
        raise Wrong("Give a dict with the keys " + ", ".join(repr(k) for k in _KEYS) + ".", field="answer",
                    expected=expected)
    for key in _KEYS:
        if answer[key] is Ellipsis:
            raise Wrong(f"{key} is still ...: give all three.", field=key, given=plain("..."), expected=expected)
    w, r, b = (as_int(answer[k], k, field="BTH.opcode" if k != "last_payload" else "payload") for k in _KEYS)
    if w != want:
        details = ["First and Middle packets carry exactly the MTU; Last carries the rest"]
        if w == want + 1:
            details = ["Count only the WRITE packets A sends: B's acknowledgement carries no data"]
        raise Wrong(f"{w} WRITE packets is not it: your WRITE is {length} bytes, at path MTU {MTU}.",
                    field="BTH.opcode", given=plain(w), expected=expected, details=details)
    if r != want:
        raise Wrong(f"{r} READ responses is not it: the responder splits the read data by the same MTU; "
                    "the READ request itself is one packet with no payload.", field="BTH.opcode", given=plain(r),
                    expected=expected)
    if b != last:
        if b == last + (-last % 4):
            why = "that counts the pad bytes too (BTH.padcnt): the payload ends before them"
        elif b == MTU:
            why = "that is a full packet; the Last one carries what the First and Middle packets left"
        else:
            why = "what do the First and Middle packets leave for it?"
        raise Wrong(f"{b} bytes is not the payload of the WRITE's Last packet: {why}", field="payload",
                    given=plain(b), expected=expected)
    return (f"Right: ceil({length}/{MTU}) = {want} packets each way (First, {want - 2} Middle, Last with "
            f"{last} bytes); the READ adds one request packet from A.")


@exercise("live.error_fields", "What an error completion tells you", notebook=NB, hints=(
    "Compare the soft engine's and rxe's completion for the wrong rkey: which fields differ?",
    "man ibv_poll_cq: 'If the completion status is other than IBV_WC_SUCCESS, only ... are valid'.",
))
def _error_fields(answer: Any) -> str:
    expected = "the work completion fields defined when the status is an error"
    if not isinstance(answer, (set, list, tuple, frozenset)):
        raise Wrong("Give a set of field names, e.g. {'wr_id', ...}.", field="wc", expected=expected)
    got = {norm_name(str(x)) for x in answer}
    must = {norm_name(x) for x in ("wr_id", "status", "qp_num")}
    allowed = must | {norm_name("vendor_err")}
    if not must <= got:
        missing = sorted(must - got)
        raise Wrong(f"Some fields you can rely on are missing ({len(missing)} of them).", field="wc",
                    expected=expected)
    extra = got - allowed
    if extra:
        raise Wrong(f"{len(extra)} of your fields are not defined on an error completion: rxe leaves opcode and "
                    "byte_len zero, the soft engine fills them in; neither is wrong.", field="wc", expected=expected)
    return "Right: wr_id, status, qp_num (and vendor_err). opcode and byte_len mean nothing on an error."


@exercise("live.wrong_rkey", "A wrong rkey on the kernel's rxe", notebook=NB, hints=(
    "Look at the completion table of the wrong-rkey run: its status column.",
    "Then at run.data['qp_state']['a'].",
))
def _wrong_rkey(answer: Any) -> str:
    if not isinstance(answer, (list, tuple)) or len(answer) != 2:
        raise Wrong("Give [A's completion status name, A's QP state name afterwards].", field="answer",
                    expected="[an ibv_wc_status, an ibv_qp_state] (names or numbers)")
    # Numbers (or IntEnum members) are accepted too: ibv_wc_status 10, ibv_qp_state 6.
    st, qs = answer
    if not names_value(st, e.IBV_WC_REM_ACCESS_ERR, "IBV_WC", "REM_ACCESS_ERR"):
        raise Wrong(f"{st!r} is not A's completion status.", field="wc.status", given=st,
                    expected="the status in A's completion of the wrong-rkey WRITE")
    if not names_value(qs, e.IBV_QPS_ERR, "IBV_QPS", "ERR", "ERROR"):
        raise Wrong(f"{qs!r} is not the state A's QP is left in.", field="qp_state", given=qs,
                    expected="the state of A's QP after that error completion")
    return "Right: IBV_WC_REM_ACCESS_ERR, and the QP is in IBV_QPS_ERR: it must be reset and reconnected."
