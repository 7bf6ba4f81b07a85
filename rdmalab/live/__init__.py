"""Live RDMA: real kernel devices, the soft engine on real networks, and a VM that has rxe devices.

* :mod:`rdmalab.live.discover` lists the host's RDMA devices (``/sys/class/infiniband``,
  ``rdma link``), their netdevs and GIDs.
* :mod:`rdmalab.live.vm` boots a virtme-ng VM with ``rxe0``/``rxe1``/``rxe2`` (and
  ``siw0``/``siw1``/``siw2`` on request, or later with ``VM.load_siw``) and runs jobs in it: :func:`run_in_vm`, :class:`VM`, :class:`VMResult`.
* :mod:`rdmalab.live.labruns` are lab scenarios written once, run on the soft engine or as
  pyverbs programs on rxe (on the host or in the VM), with results as JSON and a capture.

The soft engine's versions of the stock programs (pingpong, perftest, rping, udaddy) are
:mod:`rdmalab.tools`.

See docs/live.md.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # (typing is not imported at run time: start-up of the live tools)

if TYPE_CHECKING:
    from typing import Any

    from rdmalab.live.discover import Device, describe, devices
    from rdmalab.live.vm import VM, Missing, VMError, VMResult, kvm_usable, missing, run_in_vm

__all__ = ["VM", "Device", "describe", "Missing", "VMError", "VMResult", "devices", "kvm_usable", "missing", "run_in_vm"]

# The names above are loaded when first used (PEP 562), not with the package: inside the TCG VM every
# module imported from the 9p root file system costs a program's start about 25 ms.
_WHERE = {"Device": "discover", "describe": "discover", "devices": "discover", "VM": "vm", "Missing": "vm",
          "VMError": "vm", "VMResult": "vm", "kvm_usable": "vm", "missing": "vm", "run_in_vm": "vm"}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'rdmalab.live' has no attribute {name!r}")
    __import__(f"rdmalab.live.{where}")  # (not importlib, nor its warnings, before a server listens)
    value = getattr(sys.modules[f"rdmalab.live.{where}"], name)
    globals()[name] = value
    return value
