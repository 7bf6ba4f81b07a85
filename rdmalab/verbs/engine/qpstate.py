"""The QP state machine as one table (IBA Vol 1 10.3.1 / 11.2.4.2; Linux ``core/verbs.c`` ``qp_state_table``).

``TABLE[(current, next)][qp_type] = (required, optional)`` attribute masks.  A transition that
is not in the table, a missing required attribute, or an attribute that is neither required nor
optional fails with ``EINVAL``, as ``ib_modify_qp_is_ok`` makes the kernel fail.  The state
diagram is drawn from this table (:func:`edges`), so the picture and the checks cannot drift.
"""

from __future__ import annotations

from rdmalab.verbs import enums as e

RESET, INIT, RTR, RTS, SQD, SQE, ERR = (e.IBV_QPS_RESET, e.IBV_QPS_INIT, e.IBV_QPS_RTR, e.IBV_QPS_RTS,
                                        e.IBV_QPS_SQD, e.IBV_QPS_SQE, e.IBV_QPS_ERR)
RC, UC, UD = e.IBV_QPT_RC, e.IBV_QPT_UC, e.IBV_QPT_UD

PKEY, PORT, QKEY, ACC = e.IBV_QP_PKEY_INDEX, e.IBV_QP_PORT, e.IBV_QP_QKEY, e.IBV_QP_ACCESS_FLAGS
AV, MTU, DQPN, RQPSN, SQPSN = e.IBV_QP_AV, e.IBV_QP_PATH_MTU, e.IBV_QP_DEST_QPN, e.IBV_QP_RQ_PSN, e.IBV_QP_SQ_PSN
MDRA, MRA, RNRT = e.IBV_QP_MAX_DEST_RD_ATOMIC, e.IBV_QP_MAX_QP_RD_ATOMIC, e.IBV_QP_MIN_RNR_TIMER
TMO, RETRY, RNRR = e.IBV_QP_TIMEOUT, e.IBV_QP_RETRY_CNT, e.IBV_QP_RNR_RETRY
CUR, ALT, MIG, SQDN = e.IBV_QP_CUR_STATE, e.IBV_QP_ALT_PATH, e.IBV_QP_PATH_MIG_STATE, e.IBV_QP_EN_SQD_ASYNC_NOTIFY

Masks = dict[int, tuple[int, int]]


def _all(req: int = 0, opt: int = 0) -> Masks:
    return {RC: (req, opt), UC: (req, opt), UD: (req, opt)}


TABLE: dict[tuple[int, int], Masks] = {
    (RESET, RESET): _all(),
    (RESET, INIT): {RC: (PKEY | PORT | ACC, 0), UC: (PKEY | PORT | ACC, 0), UD: (PKEY | PORT | QKEY, 0)},
    (INIT, INIT): {RC: (0, PKEY | PORT | ACC), UC: (0, PKEY | PORT | ACC), UD: (0, PKEY | PORT | QKEY)},
    (INIT, RTR): {RC: (AV | MTU | DQPN | RQPSN | MDRA | RNRT, ALT | ACC | PKEY),
                  UC: (AV | MTU | DQPN | RQPSN, ALT | ACC | PKEY),
                  UD: (0, PKEY | QKEY)},
    (RTR, RTS): {RC: (SQPSN | TMO | RETRY | RNRR | MRA, CUR | ALT | ACC | RNRT | MIG),
                 UC: (SQPSN, CUR | ALT | ACC | MIG),
                 UD: (SQPSN, CUR | QKEY)},
    (RTS, RTS): {RC: (0, CUR | ACC | ALT | MIG | RNRT), UC: (0, CUR | ACC | ALT | MIG), UD: (0, CUR | QKEY)},
    (RTS, SQD): _all(0, SQDN),
    (SQD, RTS): {RC: (0, CUR | ALT | ACC | RNRT | MIG), UC: (0, CUR | ALT | ACC | MIG), UD: (0, CUR | QKEY)},
    (SQD, SQD): {RC: (0, PORT | AV | TMO | RETRY | RNRR | MRA | MDRA | ALT | ACC | PKEY | RNRT | MIG),
                 UC: (0, AV | ALT | ACC | PKEY | MIG), UD: (0, PKEY | QKEY)},
    (SQE, RTS): {UC: (0, CUR | ACC), UD: (0, CUR | QKEY)},
}
for _s in (INIT, RTR, RTS, SQD, SQE, ERR):
    TABLE[(_s, RESET)] = _all()
for _s in (RESET, INIT, RTR, RTS, SQD, SQE, ERR):
    TABLE[(_s, ERR)] = _all()

MASK_NAMES = {v: k[len("IBV_QP_"):] for k, v in vars(e).items() if k.startswith("IBV_QP_") and isinstance(v, int)
              and k not in ("IBV_QP_STATE",) and v & (v - 1) == 0 and not k.startswith("IBV_QPT")
              and not k.startswith("IBV_QPS")}


def mask_names(mask: int) -> str:
    return " | ".join(name for bit, name in sorted(MASK_NAMES.items()) if mask & bit) or "none"


def check(qp_type: int, cur: int, new: int, mask: int) -> str | None:
    """``None`` if ``modify(cur -> new, mask)`` is allowed, else why not (ib_modify_qp_is_ok)."""
    names = e.QP_STATE_NAMES
    if mask & CUR and cur not in (RTS, SQD, SQE):
        return f"IBV_QP_CUR_STATE may only be given in RTS, SQD or SQE, not {names[cur]}"
    masks = TABLE.get((cur, new), {}).get(qp_type)
    if masks is None:
        return f"{names[cur]} -> {names[new]} is not a legal transition for a {e.QP_TYPE_NAMES[qp_type]} QP"
    req, opt = masks
    if (mask & req) != req:
        return f"{names[cur]} -> {names[new]} requires {mask_names(req & ~mask)}"
    extra = mask & ~(req | opt | e.IBV_QP_STATE)
    if extra:
        return f"{names[cur]} -> {names[new]} does not accept {mask_names(extra)}"
    return None


def edges(qp_type: int = RC) -> list[tuple[str, str, int, int]]:
    """``(from, to, required, optional)`` for every legal transition: the state diagram's edges."""
    names = e.QP_STATE_NAMES
    return [(names[a], names[b], m[qp_type][0], m[qp_type][1]) for (a, b), m in TABLE.items() if qp_type in m]
