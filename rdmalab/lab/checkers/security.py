"""Checkers for 11-security: access flags, a guessed rkey, the lkey/rkey mix-up."""

from __future__ import annotations

from typing import Any

from rdmalab.lab.core import Wrong, exercise
from rdmalab.lab.feedback import norm_name

NB = "11-security"


@exercise("security.fix", "Fix the lkey/rkey mix-up", notebook=NB, hints=(
    "The SGE describes *local* memory: it takes the local MR's lkey.",
    "set_wr_rdma takes the *remote* key: the rkey the peer gave you for its MR.",
))
def _fix(answer: Any) -> str:
    import rdmalab.verbs.enums as e
    from rdmalab.lab.pair import Pair

    if not callable(answer):
        raise Wrong("Give the fixed function itself (write_to_peer).")
    p = Pair(seed=51)
    data = b"keys matter " * 50
    wc = answer(p, data)
    if wc is None or wc is Ellipsis:
        raise Wrong("Your function returned nothing: return A's completion.")
    if wc.status != e.IBV_WC_SUCCESS:
        raise Wrong(f"The write still fails: status {e.ibv_wc_status_str(wc.status)}.", field="wc.status",
                    details=["local access error: the SGE's key is wrong",
                             "remote access error: the key in the RETH is wrong"])
    if p.b.mr.read(len(data), 0) != data:
        raise Wrong("The write completed but B's buffer does not hold the data at offset 0.", offset=0)
    return "Fixed: lkey in the SGE (local memory), rkey in the RETH (remote memory)."


@exercise("security.guess", "What a guessed rkey gets you", notebook=NB, hints=(
    "Run the guessed-rkey cell and look at A's completion and at the AETH of B's answer.",
    "Give the ibv_wc_status name (e.g. 'IBV_WC_...') and the NAK name.",
))
def _guess(answer: Any) -> str:
    if not isinstance(answer, (list, tuple)) or len(answer) != 2:
        raise Wrong("Give [A's completion status name, the NAK's name].")
    status, nak = answer
    if norm_name(status).replace("IBVWC", "") not in ("REMACCESSERR", "REMOTEACCESSERROR", "10"):
        raise Wrong(f"{status!r} is not the completion status A gets.", field="wc.status")
    if norm_name(nak) != norm_name("Remote Access Error"):
        raise Wrong(f"{nak!r} is not the NAK B sends.", field="AETH.value")
    return "Right: B NAKs with Remote Access Error, A's WR fails with IBV_WC_REM_ACCESS_ERR, and A's QP goes to ERR."


@exercise("security.flags", "Least access flags", notebook=NB, hints=(
    "A remote peer may only do what the MR's access flags allow: REMOTE_READ, REMOTE_WRITE, REMOTE_ATOMIC.",
    "The verbs require LOCAL_WRITE whenever REMOTE_WRITE or REMOTE_ATOMIC is set (the NIC writes into the MR).",
))
def _flags(answer: Any) -> str:
    want = {"read": {"REMOTEREAD"}, "atomic": {"LOCALWRITE", "REMOTEATOMIC"}}
    if not isinstance(answer, dict) or set(answer) != set(want):
        raise Wrong("Give a dict {'read': {...}, 'atomic': {...}} of flag names.")
    for k, w in want.items():
        got = {norm_name(f).replace("IBVACCESS", "") for f in answer[k]}
        if got != w:
            extra, missing = got - w, w - got
            msg = f"For the {k} target: "
            msg += (f"{sorted(extra)} grant(s) more than needed" if extra else "") + (
                "; " if extra and missing else "") + (f"{len(missing)} flag(s) missing" if missing else "")
            raise Wrong(msg, field=f"mr.access[{k}]")
    return "Least privilege: REMOTE_READ alone for a READ target; REMOTE_ATOMIC needs LOCAL_WRITE too."
