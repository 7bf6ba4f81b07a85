"""``pyverbs.utils``: the small string helpers pyverbs programs print with."""

from __future__ import annotations

from rdmalab.verbs import libibverbs_enums as e
from rdmalab.verbs.pyverbs_error import PyverbsUserError
from rdmalab.wire.ib import IB_MTU_BYTES

_QP_TYPES = {2: "RC", 3: "UC", 4: "UD", 8: "Raw Packet", 9: "XRCD_SEND", 10: "XRCD_RECV", 0xFF: "Driver QP"}
_QP_STATES = {0: "Reset", 1: "Init", 2: "RTR", 3: "RTS", 4: "SQD", 5: "SQE", 6: "Error", 7: "Unknown"}
_ACCESS = {1: "Local write", 2: "Remote write", 4: "Remote read", 8: "Remote atomic", 16: "MW bind",
           32: "Zero based", 64: "On demand"}
_MIG = {0: "Migrated", 1: "Re-arm", 2: "Armed"}


def gid_str_to_array(val: str) -> list[str]:
    """'xxxx:...:xxxx' (8 groups of 4 hex digits) -> 16 two-digit strings."""
    parts = val.split(":")
    if len(parts) != 8 or any(len(p) != 4 for p in parts):
        raise PyverbsUserError(f"Invalid GID value ({parts})")
    int("".join(parts), 16)
    return [p[i:i + 2] for p in parts for i in (0, 2)]


def qp_type_to_str(qp_type: int) -> str:
    return _QP_TYPES.get(qp_type, f"Unknown ({qp_type})")


def qp_state_to_str(qp_state: int) -> str:
    return _QP_STATES.get(qp_state, f"Unknown ({qp_state})")


def mtu_to_str(mtu: int) -> int:
    return IB_MTU_BYTES.get(mtu, 0)


def access_flags_to_str(flags: int) -> str:
    return "".join(f"{name} " for bit, name in _ACCESS.items() if flags & bit)


def mig_state_to_str(mig: int) -> str:
    return _MIG.get(mig, f"Unknown ({mig})")


def rereg_error_to_str(error: int) -> str:
    names: dict[int, str] = {e.IBV_REREG_MR_ERR_INPUT: "IBV_REREG_MR_ERR_INPUT",
             e.IBV_REREG_MR_ERR_DONT_FORK_NEW: "IBV_REREG_MR_ERR_DONT_FORK_NEW",
             e.IBV_REREG_MR_ERR_DO_FORK_OLD: "IBV_REREG_MR_ERR_DO_FORK_OLD",
             e.IBV_REREG_MR_ERR_CMD: "IBV_REREG_MR_ERR_CMD",
             e.IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW: "IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW"}
    return names.get(error, f"Unknown error ({error})")
