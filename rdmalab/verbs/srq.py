"""``pyverbs.srq``: shared receive queues (IBA 10.2.9.4)."""

from __future__ import annotations

from collections import deque
from typing import Any

from rdmalab.verbs.engine.wqe import RecvWQE
from rdmalab.verbs.pyverbs_error import EINVAL, ENOMEM, PyverbsRDMAError

IBV_SRQ_MAX_WR = 1
IBV_SRQ_LIMIT = 2


class SrqAttr:
    """``SrqAttr(max_wr=100, max_sge=1, srq_limit=0)``."""

    def __init__(self, max_wr: int = 100, max_sge: int = 1, srq_limit: int = 0) -> None:
        self.max_wr = max_wr
        self.max_sge = max_sge
        self.srq_limit = srq_limit


class SrqInitAttr:
    """``SrqInitAttr(attr=SrqAttr())``."""

    def __init__(self, attr: SrqAttr | None = None, srq_context: Any = None) -> None:
        self.attr = attr if attr is not None else SrqAttr()
        self.srq_context = srq_context


class SRQ:
    """``SRQ(pd, init_attr)``: receive WQEs any attached QP consumes, in order."""

    def __init__(self, pd: Any, init_attr: SrqInitAttr) -> None:
        a = init_attr.attr
        if a.max_wr < 1 or a.max_wr > 16384 or a.max_sge < 1 or a.max_sge > 32:
            raise PyverbsRDMAError("Failed to create SRQ", EINVAL)
        self.pd = pd
        self.max_wr = a.max_wr
        self.max_sge = a.max_sge
        self.srq_limit = a.srq_limit
        self.rq: deque[RecvWQE] = deque()
        self.limit_reached = False  # the IBV_EVENT_SRQ_LIMIT_REACHED async event, as a flag

    def post_recv(self, wr: Any, bad_wr: Any = None) -> None:
        while wr is not None:
            if len(wr.sg) > self.max_sge:
                raise PyverbsRDMAError("Failed to post receive to SRQ: too many SGEs", EINVAL)
            if len(self.rq) >= self.max_wr:
                raise PyverbsRDMAError("Failed to post receive to SRQ: the SRQ is full", ENOMEM)
            self.rq.append(RecvWQE(wr.wr_id, list(wr.sg), sum(s.length for s in wr.sg)))
            wr = wr.next_wr

    def take(self) -> RecvWQE | None:
        if not self.rq:
            return None
        wqe = self.rq.popleft()
        if self.srq_limit and len(self.rq) < self.srq_limit:
            self.limit_reached = True
            self.srq_limit = 0  # the limit disarms itself when it fires
        return wqe

    def modify(self, attr: SrqAttr, comp_mask: int) -> None:
        if comp_mask & IBV_SRQ_MAX_WR:
            raise PyverbsRDMAError("Failed to modify SRQ: resizing is not supported", EINVAL)
        if comp_mask & IBV_SRQ_LIMIT:
            if attr.srq_limit > self.max_wr:
                raise PyverbsRDMAError("Failed to modify SRQ: srq_limit > max_wr", EINVAL)
            self.srq_limit = attr.srq_limit
            self.limit_reached = False

    def query(self) -> SrqAttr:
        return SrqAttr(self.max_wr, self.max_sge, self.srq_limit)

    def close(self) -> None:
        self.rq.clear()
