"""``pyverbs.addr`` additions: ``AH`` with pyverbs' error text and ``close``, ``AHAttr`` accessors.

On RoCE an address handle needs a GRH: ``AH(pd, attr=AHAttr(is_global=0))`` fails with
"Failed to create AH" and ``EINVAL`` (ib_core rejects a RoCE AV without GRH:
drivers/infiniband/core/verbs.c, ``rdma_check_ah_attr``).
"""

from __future__ import annotations

from typing import Any

from rdmalab.verbs import addr as _addr
from rdmalab.verbs.pyverbs_error import PyverbsRDMAError


class AHAttr(_addr.AHAttr):
    """``AHAttr(dlid=0, sl=0, src_path_bits=0, static_rate=0, is_global=0, port_num=1, gr=None)``;
    the GlobalRoute's fields are also readable and writable here, as in pyverbs."""

    @property
    def dgid(self) -> _addr.GID:
        return _addr.GID.from_int(_addr.gid_int(self.gr.dgid))

    @dgid.setter
    def dgid(self, val: Any) -> None:
        self.gr.dgid = val
        self.is_global = 1

    @property
    def sgid_index(self) -> int:
        return int(self.gr.sgid_index)

    @sgid_index.setter
    def sgid_index(self, val: int) -> None:
        self.gr.sgid_index = val

    @property
    def hop_limit(self) -> int:
        return int(self.gr.hop_limit)

    @hop_limit.setter
    def hop_limit(self, val: int) -> None:
        self.gr.hop_limit = val

    @property
    def traffic_class(self) -> int:
        return int(self.gr.traffic_class)

    @traffic_class.setter
    def traffic_class(self, val: int) -> None:
        self.gr.traffic_class = val

    @property
    def flow_label(self) -> int:
        return int(self.gr.flow_label)

    @flow_label.setter
    def flow_label(self, val: int) -> None:
        self.gr.flow_label = val


class AH(_addr.AH):
    """``AH(pd, attr=AHAttr)`` or ``AH(pd, wc=WC, port_num=1, grh=...)``."""

    def __init__(self, pd: Any, attr: Any = None, wc: Any = None, port_num: int = 1, grh: Any = None) -> None:
        try:
            super().__init__(pd, attr=attr, wc=wc, port_num=port_num, grh=grh)
        except PyverbsRDMAError as ex:
            raise PyverbsRDMAError(f"Failed to create AH: {ex.msg}", ex.error_code) from ex
        self.closed = False

    def close(self) -> None:
        self.closed = True

    def __enter__(self) -> AH:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
