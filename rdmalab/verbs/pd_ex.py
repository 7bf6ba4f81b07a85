"""``pyverbs.pd`` additions: parent domains, which soft devices (like rxe) do not have.

``ParentDomain(ctx, attr)`` fails with ``EOPNOTSUPP``, as ``ibv_alloc_parent_domain`` does on rxe
(its provider has no ``alloc_parent_domain``).
"""

from __future__ import annotations

import errno
from typing import Any

from rdmalab.verbs.pyverbs_error import PyverbsRDMAError


class ParentDomainContext:
    """``ParentDomainContext(pd, alloc_func, free_func, user_data=None)``."""

    def __init__(self, pd: Any, alloc_func: Any, free_func: Any, user_data: Any = None) -> None:
        self.pd = pd
        self.alloc_func = alloc_func
        self.free_func = free_func
        self.user_data = user_data


class ParentDomainInitAttr:
    """``ParentDomainInitAttr(pd, pd_context=None)``."""

    def __init__(self, pd: Any, pd_context: Any = None) -> None:
        self.pd = pd
        self.pd_context = pd_context
        self.comp_mask = 0


class ParentDomain:
    """``ParentDomain(ctx, attr)``: always fails with EOPNOTSUPP."""

    def __init__(self, context: Any, attr: ParentDomainInitAttr) -> None:
        raise PyverbsRDMAError("Failed to allocate Parent Domain", errno.EOPNOTSUPP)
