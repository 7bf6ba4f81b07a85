"""``pyverbs.srq`` additions: ``SrqInitAttrEx`` (basic SRQs only) and ``OpsWr`` (tag matching, absent)."""

from __future__ import annotations

import errno
from typing import Any

from rdmalab.verbs import libibverbs_enums as e
from rdmalab.verbs import srq as _srq
from rdmalab.verbs.pyverbs_error import PyverbsRDMAError


class SrqInitAttrEx:
    """``SrqInitAttrEx(max_wr=100, max_sge=1, srq_limit=0)`` and the ``srq_type``/``pd``/``xrcd``/``cq`` fields."""

    def __init__(self, max_wr: int = 100, max_sge: int = 1, srq_limit: int = 0) -> None:
        self.max_wr = max_wr
        self.max_sge = max_sge
        self.srq_limit = srq_limit
        self.srq_type = e.IBV_SRQT_BASIC
        self.pd: Any = None
        self.xrcd: Any = None
        self.cq: Any = None
        self.comp_mask = 0
        self.max_num_tags = 0
        self.max_ops = 0


class SRQ(_srq.SRQ):
    """``SRQ(pd, SrqInitAttr)`` or ``SRQ(ctx, SrqInitAttrEx(pd=...))``; XRC and tag-matching SRQs: EOPNOTSUPP."""

    def __init__(self, creator: Any, attr: Any) -> None:
        if isinstance(attr, SrqInitAttrEx):
            if attr.srq_type != e.IBV_SRQT_BASIC:
                raise PyverbsRDMAError(f"Failed to create SRQ of type {attr.srq_type}", errno.EOPNOTSUPP)
            pd = attr.pd if attr.pd is not None else creator
            attr = _srq.SrqInitAttr(_srq.SrqAttr(attr.max_wr, attr.max_sge, attr.srq_limit))
            creator = pd
        super().__init__(creator, attr)

    def get_srq_num(self) -> int:
        raise PyverbsRDMAError("Failed to get SRQ number: XRC is not supported", errno.EOPNOTSUPP)


class OpsWr:
    """Tag-matching operations: not supported by the soft engine (nor rxe)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise PyverbsRDMAError("Tag matching is not supported", errno.EOPNOTSUPP)
