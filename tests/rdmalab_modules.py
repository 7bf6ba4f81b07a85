"""Every module of the rdmalab package, imported: for the tests that look at what it defines."""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

import rdmalab


def rdmalab_modules() -> list[ModuleType]:
    """Each module of ``rdmalab`` but ``__main__`` (importing it runs the command line).  A module that
    needs what is not installed here is left out (the verbs server program needs pyverbs, which
    imports only under Debian's python3)."""
    out = []
    for info in pkgutil.walk_packages(rdmalab.__path__, "rdmalab."):
        if info.name.endswith("__main__"):
            continue
        try:
            out.append(importlib.import_module(info.name))
        except ImportError:
            continue
    return out


def wire_header_classes() -> list[type]:
    """Every header class the wire package declares (a subclass of ``Header`` with a ``LAYOUT``), once each."""
    from rdmalab import wire
    from rdmalab.wire.header import Header

    out: dict[str, type] = {}
    for info in pkgutil.iter_modules(wire.__path__):
        mod = importlib.import_module(f"rdmalab.wire.{info.name}")
        for v in vars(mod).values():
            if isinstance(v, type) and issubclass(v, Header) and v is not Header and hasattr(v, "LAYOUT"):
                out[f"{v.__module__}.{v.__name__}"] = v
    return list(out.values())
