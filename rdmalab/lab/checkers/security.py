"""Checkers for 11-security: access flags, a guessed rkey, the lkey/rkey mix-up."""

from __future__ import annotations

from typing import Any

import rdmalab.verbs.enums as e
from rdmalab.lab.answers import Program
from rdmalab.lab.checkers.reliability import NAK_CAUSES, nak_code
from rdmalab.lab.checkers.verbs import clean_run
from rdmalab.lab.core import Said, Wrong, exercise
from rdmalab.lab.feedback import names_value, norm_name
from rdmalab.wire.ib import NAK_NAMES, NAK_REMOTE_ACCESS_ERROR

NB = "11-security"


_FIX_DATA = b"keys matter " * 50


@exercise("security.fix", "Fix the lkey/rkey mix-up", notebook=NB, program=Program(51, lambda p: [(_FIX_DATA,)]), hints=(
    "The SGE describes *local* memory: it takes the local MR's lkey.",
    "set_wr_rdma takes the *remote* key: the rkey the peer gave you for its MR.",
))
def _fix(answer: Any) -> str:
    p = clean_run(answer, "write_to_peer", "a function (pair, data) -> A's completion",
                  causes=("local protection error: the SGE's key is wrong (it takes the local MR's lkey)",
                          "remote access error: the key in the RETH is wrong (it takes the peer's rkey)"))
    data = _FIX_DATA
    wc, = p.returned
    if wc is None or wc is Ellipsis:
        raise Wrong("Your function returned nothing: return A's completion.", field="return value", given=wc,
                    expected="A's work completion (pair.a.poll())")
    if wc.status != e.IBV_WC_SUCCESS:
        raise Wrong(f"The write still fails: status {e.ibv_wc_status_str(wc.status)}.", field="wc.status",
                    given=Said(e.ibv_wc_status_str(wc.status)), expected="success",
                    details=["local protection error: the SGE's key is wrong",
                             "remote access error: the key in the RETH is wrong"])
    if p.b.mr.read(len(data), 0) != data:
        raise Wrong("The write completed but B's buffer does not hold the data at offset 0.", field="RETH.va",
                    offset=0, expected="the data at B's MR offset 0")
    return "Fixed: lkey in the SGE (local memory), rkey in the RETH (remote memory)."


@exercise("security.guess", "What a guessed rkey gets you", notebook=NB, hints=(
    "Run the guessed-rkey cell and look at A's completion and at the AETH of B's answer.",
    "The cell prints A's wc.status as a number: e.ibv_wc_status_str(n) says what it means.",
    "Give the ibv_wc_status name (e.g. 'IBV_WC_...') and the NAK name.",
))
def _guess(answer: Any) -> str:
    if not isinstance(answer, (list, tuple)) or len(answer) != 2:
        raise Wrong("Give [A's completion status name, the NAK's name].", field="answer",
                    expected="[an ibv_wc_status (name or number), a NAK code (name or number)]")
    status, nak = answer
    if not names_value(status, e.IBV_WC_REM_ACCESS_ERR, "IBV_WC", "REM_ACCESS_ERR", "REMOTE_ACCESS_ERROR"):
        local = "LOC" in norm_name(status)
        why = (" A local error means A's own NIC refused the work request before sending it; this one went out, "
               "and B answered." if local else "")
        raise Wrong(f"{status!r} is not the completion status A gets.{why} The guessed-key cell printed A's "
                    "wc.status as a number: e.ibv_wc_status_str(n) names it, and rdmalab.verbs.enums has the IBV_WC_ "
                    "names.", field="wc.status", given=status,
                    expected="the ibv_wc_status of A's failed work request (IBV_WC_... name or its number)")
    code = nak_code(nak)
    if code != NAK_REMOTE_ACCESS_ERROR:
        what = (f"{NAK_NAMES[code]} is the NAK a responder sends when {NAK_CAUSES[code]}; a wrong key is not that."
                if code in NAK_CAUSES else f"Code {code} is reserved: no responder sends it.")
        raise Wrong(f"{nak!r} is not the NAK B sends. {what} Read the code in B's NAK: the low 5 bits of its AETH "
                    "syndrome (the hex dump above).", field="AETH.value", given=nak,
                    expected="the NAK code in B's answer (its name or number)")
    return "Right: B NAKs with Remote Access Error, A's WR fails with IBV_WC_REM_ACCESS_ERR, and A's QP goes to ERR."


@exercise("security.flags", "Least access flags", notebook=NB, hints=(
    "A remote peer may only do what the MR's access flags allow: REMOTE_READ, REMOTE_WRITE, REMOTE_ATOMIC.",
    "The verbs require LOCAL_WRITE whenever REMOTE_WRITE or REMOTE_ATOMIC is set (the NIC writes into the MR).",
))
def _flags(answer: Any) -> str:
    want = {"read": {"REMOTEREAD"}, "atomic": {"LOCALWRITE", "REMOTEATOMIC"}}

    if not isinstance(answer, dict) or set(answer) != set(want):
        raise Wrong("Give a dict {'read': {...}, 'atomic': {...}} of flag names.", field="answer",
                    expected="a dict with keys 'read' and 'atomic', each a set of IBV_ACCESS_* names or a flags int")
    bits = {norm_name(k).replace("IBVACCESS", ""): v for k, v in vars(e).items() if k.startswith("IBV_ACCESS_")}
    for k, w in want.items():
        flags = answer[k]
        if isinstance(flags, int) and not isinstance(flags, bool):  # IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_...
            flags = [n for n, v in bits.items() if v and flags & v == v and bin(v).count("1") == 1]
        elif isinstance(flags, str):
            flags = [flags]
        got = {norm_name(f).replace("IBVACCESS", "") for f in flags}
        if got != w:
            extra, missing = got - w, w - got
            msg = f"For the {k} target: "
            msg += (f"{sorted(extra)} grant(s) more than needed" if extra else "") + (
                "; " if extra and missing else "") + (f"{len(missing)} flag(s) missing" if missing else "")
            raise Wrong(msg, field=f"mr.access[{k}]", given=answer[k],
                        expected=f"the least set of access flags the {k} target needs")
    return "Least privilege: REMOTE_READ alone for a READ target; REMOTE_ATOMIC needs LOCAL_WRITE too."
