"""Where ``get_device_list()`` finds devices when no program chose a carrier: providers, loaded on first use.

libibverbs is not told where its devices come from: on the first ``ibv_get_device_list()`` it reads
the provider names from its configuration (``/etc/libibverbs.d/*.driver``), loads each provider
library and asks each for the devices it drives (rdma-core ``libibverbs/init.c``,
``ibverbs_get_device_list``; ``dynamic_driver.c``).  A pyverbs program therefore finds ``rxe0``
without importing anything about rxe.

rdmalab does the same with Python's entry points, the configuration that an installed package
carries in its metadata: every entry point of the group :data:`GROUP` names a function that
returns a device set (anything with a ``devices`` mapping of name to
:class:`~rdmalab.verbs.engine.node.SoftDevice`) or ``None`` when it has no device to offer.  The
verbs layer imports no carrier; it loads whatever the installed packages declare.  rdmalab itself
declares two (``pyproject.toml``):

``links``  soft devices bound to a real network interface by ``rdmalab link add soft0 netdev veth1``
           or ``RDMALAB_LINKS=soft0=veth1`` (:mod:`rdmalab.fabric.links`): the engine on real UDP,
           next to kernel rxe, or (``type siw``) on the kernel's TCP, next to kernel siw;
``sim``    the simulated fabric's ``soft0`` (10.0.0.1) and ``soft1`` (10.0.0.2).

The simulated fabric is the *default* provider (:data:`DEFAULT`): its devices are offered only
when no other provider offers any, so a program on a machine with linked devices sees those and
nothing made up (``soft1`` at 10.0.0.2 next to a real ``soft0`` on 10.0.0.2's network would only
mislead).  When two providers offer the same device name, the one first in :data:`ORDER` wins.
A source tree that was never installed has no entry points; :data:`BUILTIN` then names the same
two functions.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from importlib.metadata import entry_points
from typing import Any

from rdmalab.verbs.engine.node import SoftDevice

GROUP = "rdmalab.verbs.providers"
#: providers asked first win a device name they share with a later one
ORDER = ("links", "sim")
#: the provider whose devices are offered only when no other provider has any
DEFAULT = "sim"
#: what pyproject.toml declares, for a source tree run without being installed
BUILTIN = {"links": "rdmalab.fabric.links:provider", "sim": "rdmalab.fabric.sim:default_fabric"}


class ProviderError(Exception):
    """A provider could not be loaded or failed to offer its devices (the message names it)."""


def _load(name: str, target: str) -> Callable[[], Any]:
    module, _, attr = target.partition(":")
    try:
        fn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ProviderError(f"rdmalab.verbs provider {name!r} ({target}) cannot be loaded: {exc}") from exc
    if not callable(fn):
        raise ProviderError(f"rdmalab.verbs provider {name!r} ({target}) is not callable")
    return fn  # type: ignore[no-any-return]


def declared() -> dict[str, str]:
    """Provider name -> ``module:function``, from the installed packages' entry points (else :data:`BUILTIN`)."""
    found = {ep.name: ep.value for ep in entry_points(group=GROUP)}
    return found or dict(BUILTIN)


def _ordered(names: Mapping[str, str]) -> list[str]:
    rank = {n: i for i, n in enumerate(ORDER)}
    return sorted(names, key=lambda n: (rank.get(n, len(ORDER)), n))


class ProvidedDevices:
    """The devices of every provider, merged by name: what ``get_device_list()`` shows by default.

    The providers' functions are called on every look-up (they cache what they build), so that
    a test that resets the simulated fabric, or a link added while the program runs, is seen.
    """

    def __init__(self, providers: Mapping[str, Callable[[], Any]]) -> None:
        self.providers = dict(providers)

    @property
    def devices(self) -> dict[str, SoftDevice]:
        merged: dict[str, SoftDevice] = {}
        for name in _ordered({n: "" for n in self.providers}):
            if name == DEFAULT and merged:
                continue
            try:
                offered = self.providers[name]()
            except ProviderError:
                raise
            except Exception as exc:  # a provider that fails says which one and why
                raise ProviderError(f"rdmalab.verbs provider {name!r} failed: {exc}") from exc
            if offered is None:
                continue
            for dev_name, dev in offered.devices.items():
                merged.setdefault(dev_name, dev)
        return merged

    def __iter__(self) -> Iterator[str]:
        return iter(self.devices)


_loaded: ProvidedDevices | None = None


def provided_devices() -> ProvidedDevices:
    """Load the providers once (on the first call) and return their merged devices."""
    global _loaded
    if _loaded is None:
        decl = declared()
        _loaded = ProvidedDevices({name: _load(name, decl[name]) for name in _ordered(decl)})
    return _loaded
