"""Stand-ins for the pyverbs modules of features soft devices do not have.

rdma-core's pyverbs has modules for flow steering (``flow``,
``spec``), work queues and RSS (``wq``), DMA-buf (``dmabuf``), raw memory helpers
(``mem_alloc``, ``dma_util``) and the vendor providers (``providers.mlx5``, ``providers.efa``).
A program that imports them must still import on rdmalab, and must then find the feature missing
the way it would on a device without it:

* any class of a feature module fails to be created with ``PyverbsRDMAError(..., EOPNOTSUPP)``,
  as libibverbs reports a verb the device does not implement;
* any class of a provider module fails with ``PyverbsUserError("This is not an MLX5 device")``
  (or EFA), the error pyverbs raises when a provider's context is opened on another vendor's
  device (rxe included); only attribute holders (``...Attr...``) can be created, as in pyverbs;
* upper-case constants (``NAME_WITH_UNDERSCORES``) of these modules are not stood in for: using one is an AttributeError
  naming the module, never a made-up value.

The mlx5/EFA *enum* modules are not stand-ins: their values are generated from pyverbs
(:mod:`rdmalab.verbs._providers`).
"""

from __future__ import annotations

import errno
import types
from typing import Any, NoReturn

from rdmalab.verbs.pyverbs_error import PyverbsRDMAError, PyverbsUserError


def _unsupported(module: str, name: str) -> NoReturn:
    raise PyverbsRDMAError(f"{module}.{name}: the rdmalab soft device does not support this feature",
                           errno.EOPNOTSUPP)


def _feature_class(module: str, name: str) -> type:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        _unsupported(module, name)

    return type(name, (), {"__init__": __init__, "__module__": module,
                           "__doc__": f"Stand-in: creating it fails with EOPNOTSUPP (soft devices lack {module})."})


def _feature_function(module: str, name: str) -> Any:
    def fn(*args: Any, **kwargs: Any) -> NoReturn:
        _unsupported(module, name)

    fn.__name__ = name
    fn.__qualname__ = name
    return fn


def _provider_class(module: str, name: str, vendor: str) -> type:
    if "Attr" in name:
        # Attribute holders (Mlx5DVContextAttr, ...) are plain structs in pyverbs: creating one needs no
        # device, so it succeeds; the object that uses it (Mlx5Context, ...) is what fails.
        def init_attr(self: Any, *args: Any, **kwargs: Any) -> None:
            self.args = args
            self.__dict__.update(kwargs)

        return type(name, (), {"__init__": init_attr, "__module__": module})

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        raise PyverbsUserError(f"This is not an {vendor} device")

    def _static(*args: Any, **kwargs: Any) -> NoReturn:
        raise PyverbsUserError(f"This is not an {vendor} device")

    ns: dict[str, Any] = {"__init__": __init__, "__module__": module,
                          "__doc__": f"Stand-in: soft devices are not {vendor} devices."}
    # Class-level helpers the suite calls before creating an object (e.g. Mlx5Context.query_mlx5_device).
    for attr in ("query_mlx5_device", "is_mlx5dv_supported", "query_efa_device", "reserved_qpn_alloc",
                 "devx_general_cmd", "crypto_login_query_state", "get_data_direct_sysfs_path"):
        ns[attr] = staticmethod(_static)
    return type(name, (), ns)


def _module(name: str, make: Any) -> types.ModuleType:
    mod = types.ModuleType(name, f"rdmalab stand-in for {name}: see rdmalab.verbs._absent")
    cache: dict[str, Any] = {}

    def __getattr__(attr: str) -> Any:
        if attr.startswith("__") or attr[:1] == "_" or (attr.isupper() and "_" in attr):
            raise AttributeError(f"module {name!r} (an rdmalab stand-in) has no attribute {attr!r}")
        if attr not in cache:
            cache[attr] = make(attr)
        return cache[attr]

    mod.__getattr__ = __getattr__  # type: ignore[method-assign]
    return mod


def feature_module(name: str) -> types.ModuleType:
    """A pyverbs module of a feature soft devices lack: its objects fail with EOPNOTSUPP."""
    return _module(name, lambda attr: _feature_class(name, attr) if attr[:1].isupper()
                   else _feature_function(name, attr))


def provider_module(name: str, vendor: str) -> types.ModuleType:
    """A vendor provider module: its objects fail with 'This is not an <vendor> device'."""
    return _module(name, lambda attr: _provider_class(name, attr, vendor))
