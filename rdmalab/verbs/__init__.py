"""The soft verbs engine behind a pyverbs-shaped API.

Module layout and names mirror pyverbs, so a lab script moves to real hardware by changing
its imports::

    from rdmalab.verbs.device import Context, get_device_list   # pyverbs.device
    from rdmalab.verbs.pd import PD                             # pyverbs.pd
    from rdmalab.verbs.mr import MR                             # pyverbs.mr
    from rdmalab.verbs.cq import CQ, CompChannel                # pyverbs.cq
    from rdmalab.verbs.qp import QP, QPInitAttr, QPCap, QPAttr  # pyverbs.qp
    from rdmalab.verbs.wr import SendWR, RecvWR, SGE            # pyverbs.wr
    from rdmalab.verbs.addr import AH, AHAttr, GlobalRoute      # pyverbs.addr
    from rdmalab.verbs.srq import SRQ, SrqInitAttr, SrqAttr     # pyverbs.srq
    import rdmalab.verbs.enums as e                             # pyverbs.enums
    from rdmalab.verbs.pyverbs_error import PyverbsRDMAError    # pyverbs.pyverbs_error
    from rdmalab.verbs.cmid import CMID, AddrInfo, ConnParam    # pyverbs.cmid (rdma_cm)

or by changing nothing at all: ``rdmalab.verbs.pyverbs_alias.install()`` makes ``import pyverbs...``
load these modules.  No other import is needed: ``get_device_list()`` loads the devices the installed
providers offer on first use (:mod:`rdmalab.verbs.providers`), as libibverbs does.
"""

from rdmalab.verbs.pyverbs_error import PyverbsError, PyverbsRDMAError, PyverbsUserError
from rdmalab.verbs.trace import Trace, TraceEvent

__all__ = ["PyverbsError", "PyverbsRDMAError", "PyverbsUserError", "Trace", "TraceEvent"]
