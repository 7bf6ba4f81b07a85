"""``pyverbs.pd``: protection domains.  Every memory access checks the PD of the MR it touches."""

from __future__ import annotations

import itertools
from typing import Any

_handles = itertools.count(1)


class PD:
    """``PD(ctx)``."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.device = ctx.device
        self.handle = next(_handles)
        self.closed = False

    def close(self) -> None:
        self.closed = True

    def __enter__(self) -> PD:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
