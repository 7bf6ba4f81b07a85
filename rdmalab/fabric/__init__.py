"""How the engine's packets move: carriers for the soft verbs engine.

``sim``  an in-process simulated fabric with a virtual clock (:class:`Fabric`)

Importing this package makes the simulated fabric's ``soft0``/``soft1`` the devices that
``rdmalab.verbs.device.get_device_list()`` and ``Context()`` find by default (the verbs layer
does not import carriers; they register themselves, as libibverbs providers do).
"""

from rdmalab.fabric.sim import Fabric, Faults, default_fabric, reset_default_fabric
from rdmalab.verbs.device import set_default_devices

set_default_devices(default_fabric)

__all__ = ["Fabric", "Faults", "default_fabric", "reset_default_fabric"]
