"""``pyverbs.xrcd``: XRC domains, which soft devices (like rxe) do not implement.

``XRCD(ctx, init_attr)`` fails with ``EOPNOTSUPP``, the error ``ibv_open_xrcd`` returns on rxe
(the rxe provider has no ``open_xrcd``), so code that checks for XRC support skips here as there.
"""

from __future__ import annotations

import errno
from typing import Any

from rdmalab.verbs.pyverbs_error import PyverbsRDMAError


class XRCDInitAttr:
    """``XRCDInitAttr(comp_mask=0, oflags=0, fd=-1)``."""

    def __init__(self, comp_mask: int = 0, oflags: int = 0, fd: int = -1) -> None:
        self.comp_mask = comp_mask
        self.oflags = oflags
        self.fd = fd


class XRCD:
    """``XRCD(ctx, init_attr)``: always fails with EOPNOTSUPP."""

    def __init__(self, ctx: Any, init_attr: XRCDInitAttr) -> None:
        raise PyverbsRDMAError("Failed to allocate XRCD", errno.EOPNOTSUPP)

    def close(self) -> None:
        pass
