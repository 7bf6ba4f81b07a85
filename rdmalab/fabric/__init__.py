"""How the engine's packets move: an in-process simulated fabric with a virtual clock."""

from rdmalab.fabric.sim import Fabric, Faults, default_fabric, reset_default_fabric

__all__ = ["Fabric", "Faults", "default_fabric", "reset_default_fabric"]
