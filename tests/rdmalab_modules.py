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
