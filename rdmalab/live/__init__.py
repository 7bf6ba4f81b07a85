"""Live RDMA: real kernel devices, the soft engine on real networks, and a VM that has rxe devices.

* :mod:`rdmalab.live.discover` lists the host's RDMA devices (``/sys/class/infiniband``,
  ``rdma link``), their netdevs and GIDs.
* :mod:`rdmalab.live.vm` boots a virtme-ng VM with ``rxe0``/``rxe1``/``rxe2`` (and ``siw``
  on request) and runs jobs in it: :func:`run_in_vm`, :class:`VM`, :class:`VMResult`.
* :mod:`rdmalab.live.scenarios` are lab scenarios written once, run on the soft engine or as
  pyverbs programs on rxe (on the host or in the VM), with results as JSON and a capture.

* :mod:`rdmalab.live.oob` / :mod:`rdmalab.live.pingpong`: the soft engine speaking the stock
  tools' out-of-band exchanges (``rdmalab pingpong``).

See docs/live.md.
"""

from rdmalab.live.discover import Device, describe, devices
from rdmalab.live.vm import VM, Missing, VMError, VMResult, kvm_usable, missing, run_in_vm

__all__ = ["VM", "Device", "describe", "Missing", "VMError", "VMResult", "devices", "kvm_usable", "missing", "run_in_vm"]
