"""Make ``import pyverbs...`` load rdmalab's soft verbs: run a pyverbs program unchanged.

::

    import rdmalab.verbs.pyverbs_alias as alias
    alias.install()          # from now on `import pyverbs.qp` gives rdmalab's QP, QPEx, ...
    import pyverbs.device as d
    ctx = d.Context(name="soft0")

``install()`` puts a finder at the front of ``sys.meta_path`` that answers every ``pyverbs`` and
``pyverbs.*`` import from :data:`MODULES`.  A pyverbs module is one or more rdmalab modules
merged (``pyverbs.qp`` is :mod:`rdmalab.verbs.qp` plus :mod:`rdmalab.verbs.qpex`, whose ``QP``
also takes ``QPInitAttrEx``).  The pyverbs modules for features the soft devices do not have
(flow steering, WQs, DMA-buf, vendor providers...) are the stand-ins of
:mod:`rdmalab.verbs._absent`: they import, and creating their objects fails as it does on a
device without the feature (``EOPNOTSUPP``; for mlx5/EFA "This is not an MLX5 device").

This is how ``scripts/run_pyverbs_suite.py`` runs rdma-core's own pyverbs tests on rdmalab.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any

from rdmalab.verbs import _absent

# pyverbs module -> the rdmalab modules whose public names it gets, merged in order (later wins),
# or ("absent", kind) for a stand-in made by rdmalab.verbs._absent.
MODULES: dict[str, tuple[str, ...]] = {
    "pyverbs.pyverbs_error": ("rdmalab.verbs.pyverbs_error",),
    "pyverbs.base": ("rdmalab.verbs.base",),
    "pyverbs.enums": ("rdmalab.verbs.libibverbs_enums",),
    "pyverbs.libibverbs_enums": ("rdmalab.verbs.libibverbs_enums",),
    "pyverbs.cm_enums": ("rdmalab.verbs.cm_enums",),
    "pyverbs.cmid": ("rdmalab.verbs.cmid",),
    "pyverbs.device": ("rdmalab.verbs.device", "rdmalab.verbs.device_ex"),
    "pyverbs.pd": ("rdmalab.verbs.pd", "rdmalab.verbs.pd_ex"),
    "pyverbs.mr": ("rdmalab.verbs.mr", "rdmalab.verbs.mr_ex"),
    "pyverbs.cq": ("rdmalab.verbs.cq", "rdmalab.verbs.cqex"),
    "pyverbs.qp": ("rdmalab.verbs.qp", "rdmalab.verbs.qpex"),
    "pyverbs.wr": ("rdmalab.verbs.wr", "rdmalab.verbs.wr_ex"),
    "pyverbs.addr": ("rdmalab.verbs.addr", "rdmalab.verbs.addr_ex"),
    "pyverbs.srq": ("rdmalab.verbs.srq", "rdmalab.verbs.srq_ex"),
    "pyverbs.xrcd": ("rdmalab.verbs.xrcd",),
    "pyverbs.fork": ("rdmalab.verbs.fork",),
    "pyverbs.utils": ("rdmalab.verbs.utils",),
    "pyverbs.mem_alloc": ("rdmalab.verbs.mem_alloc",),
}
ABSENT = ("pyverbs.flow", "pyverbs.spec", "pyverbs.wq", "pyverbs.dmabuf",
          "pyverbs.dma_util")
PROVIDER_ENUMS = {
    "pyverbs.providers.mlx5.mlx5_enums": "rdmalab.verbs._providers.mlx5_enums",
    "pyverbs.providers.efa.efa_enums": "rdmalab.verbs._providers.efa_enums",
}
PACKAGES = ("pyverbs", "pyverbs.providers", "pyverbs.providers.mlx5", "pyverbs.providers.efa")


def build(name: str) -> types.ModuleType:
    """The module object that ``import name`` (a pyverbs name) gets."""
    if name in PACKAGES:
        mod = types.ModuleType(name, f"rdmalab stand-in for the {name} package")
        mod.__path__ = []
        return mod
    if name in PROVIDER_ENUMS:
        src = importlib.import_module(PROVIDER_ENUMS[name])
        return _merged(name, [src])
    if name in MODULES:
        return _merged(name, [importlib.import_module(m) for m in MODULES[name]])
    if name in ABSENT:
        return _absent.feature_module(name)
    if name.startswith("pyverbs.providers.mlx5."):
        return _absent.provider_module(name, "MLX5")
    if name.startswith("pyverbs.providers.efa."):
        return _absent.provider_module(name, "EFA")
    raise ModuleNotFoundError(f"rdmalab has no stand-in for {name}", name=name)


def _merged(name: str, sources: list[types.ModuleType]) -> types.ModuleType:
    mod = types.ModuleType(name, sources[0].__doc__)
    for src in sources:
        for k, v in vars(src).items():
            if not k.startswith("__"):
                setattr(mod, k, v)
    mod.__rdmalab_sources__ = [s.__name__ for s in sources]  # type: ignore[attr-defined]
    return mod


class _Loader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return build(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        pass


class PyverbsFinder(importlib.abc.MetaPathFinder):
    """Answers ``pyverbs`` imports with rdmalab modules (see :data:`MODULES`)."""

    loader = _Loader()

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != "pyverbs" and not fullname.startswith("pyverbs."):
            return None
        known = (fullname in PACKAGES or fullname in MODULES or fullname in ABSENT or fullname in PROVIDER_ENUMS
                 or fullname.startswith(("pyverbs.providers.mlx5.", "pyverbs.providers.efa.")))
        if not known:
            return None
        return importlib.machinery.ModuleSpec(fullname, self.loader, is_package=fullname in PACKAGES)


_FINDER = PyverbsFinder()


def install() -> None:
    """Route ``import pyverbs...`` to rdmalab (drops any pyverbs modules already imported)."""
    for k in [k for k in sys.modules if k == "pyverbs" or k.startswith("pyverbs.")]:
        del sys.modules[k]
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def uninstall() -> None:
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
    for k in [k for k in sys.modules if k == "pyverbs" or k.startswith("pyverbs.")]:
        del sys.modules[k]
