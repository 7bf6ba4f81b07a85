"""How the engine's packets move: carriers for the soft verbs engine.

``sim``    an in-process simulated fabric with a virtual clock (:class:`Fabric`)
``udp``    the engine on real UDP next to kernel rxe (:class:`rdmalab.fabric.udp.UdpFabric`)
``links``  soft devices bound to network interfaces (``rdmalab link add soft0 [type rxe|siw] netdev veth1``)
``ibfabric`` a native InfiniBand subnet (LIDs, LFT switches, credits per VL; :class:`rdmalab.fabric.ibfabric.IBFabric`),
           its incast and credit loop in ``ibflows``; ``rocev1`` the simulated fabric with RoCEv1 frames

``rdmalab.verbs`` finds the simulated fabric's ``soft0``/``soft1`` and the linked devices without
importing this package: ``pyproject.toml`` declares them as providers (entry points of the group
``rdmalab.verbs.providers``), which ``rdmalab.verbs.providers`` loads on the first
``get_device_list()``, as libibverbs loads its provider libraries.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # (typing is not imported at run time: start-up of the live tools)

if TYPE_CHECKING:
    from typing import Any

    from rdmalab.fabric.sim import Fabric, Faults, default_fabric, reset_default_fabric

# Loaded on first use (PEP 562): the UDP carrier of the live tools does not need the simulated fabric.

__all__ = ["Fabric", "Faults", "default_fabric", "reset_default_fabric"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module("rdmalab.fabric.sim"), name)
    globals()[name] = value
    return value
