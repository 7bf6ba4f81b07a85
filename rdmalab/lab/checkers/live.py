"""Checkers for 13-live-rdma: packets of a WRITE, error completions, a wrong rkey on rxe."""

from __future__ import annotations

import math
from typing import Any

import rdmalab.verbs.enums as e
from rdmalab.lab.core import Wrong, exercise
from rdmalab.lab.feedback import as_int, norm_name

NB = "13-live-rdma"
SIZE, MTU = 5000, 1024


@exercise("live.segments", "How many packets carry a 5000-byte WRITE, and a READ of it", notebook=NB, hints=(
    "Both sides negotiated path MTU 1024: every packet carries at most 1024 bytes of payload.",
    "Count the 'RC RDMA WRITE ...' packets and the 'RC RDMA READ Response ...' packets in the capture.",
))
def _segments(answer: Any) -> str:
    want = math.ceil(SIZE / MTU)
    expected = f"[WRITE packets, READ response packets] for {SIZE} bytes at path MTU {MTU}"
    if not isinstance(answer, (list, tuple)) or len(answer) != 2:
        raise Wrong("Give [number of WRITE packets, number of READ response packets].", field="answer",
                    expected=expected)
    w, r = (as_int(x, "a number of packets", field="BTH.opcode") for x in answer)
    if w != want:
        raise Wrong(f"{w} WRITE packets is not it: {SIZE} bytes at path MTU {MTU}.", field="BTH.opcode",
                    given=answer[0], expected=expected,
                    details=["First and Middle packets carry exactly the MTU; Last carries the rest"])
    if r != want:
        raise Wrong(f"{r} READ responses is not it: the responder splits the read data by the same MTU; "
                    "the READ request itself is one packet with no payload.", field="BTH.opcode", given=answer[1],
                    expected=expected)
    return (f"Right: ceil({SIZE}/{MTU}) = {want} each way (First, {want - 2} Middle, Last); "
            "the READ adds one request packet from A.")


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
    status = "REMACCESSERR" if isinstance(st, int) and not isinstance(st, bool) and st == e.IBV_WC_REM_ACCESS_ERR \
        else norm_name(str(st)).replace("IBVWC", "")
    state = "ERR" if isinstance(qs, int) and not isinstance(qs, bool) and qs == e.IBV_QPS_ERR \
        else norm_name(str(qs)).replace("IBVQPS", "")
    if status != "REMACCESSERR":
        raise Wrong(f"{st!r} is not A's completion status.", field="wc.status", given=st,
                    expected="the status in A's completion of the wrong-rkey WRITE")
    if state not in ("ERR", "ERROR"):
        raise Wrong(f"{qs!r} is not the state A's QP is left in.", field="qp_state", given=qs,
                    expected="the state of A's QP after that error completion")
    return "Right: IBV_WC_REM_ACCESS_ERR, and the QP is in IBV_QPS_ERR: it must be reset and reconnected."
