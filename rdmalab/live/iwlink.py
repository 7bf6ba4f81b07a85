"""A soft iWARP device on a named interface for one run: what ``--netdev IF --transport iwarp`` makes.

The device is made by the same code as a ``siw`` link (``rdmalab link add siw0 type siw netdev IF``,
:func:`rdmalab.fabric.links.make_device`): one soft iWARP device on the interface's IPv4 address and
MAC, with the kernel's TCP as its stack (:class:`rdmalab.fabric.links.InterfaceTcp`), made the
device ``get_device_list()`` and rdma_cm use for the rest of the process, as
:func:`rdmalab.fabric.links.use_interface` does for a RoCE device.  Its peer is kernel siw
(docs/live.md: siw0 on veth4, the engine in namespace ``peer`` on veth5).  This module keeps the
names the tools used before the links made both kinds.
"""

from __future__ import annotations

from typing import Any

from rdmalab.fabric import links
from rdmalab.fabric.links import InterfaceTcp

__all__ = ["InterfaceTcp", "use_interface"]


def use_interface(ifname: str, name: str = "rdmalab0", *, mpa_crc: bool = False, **options: Any) -> InterfaceTcp:
    """A soft iWARP device on ``ifname`` for this run, made the devices ``get_device_list()`` offers
    (:func:`rdmalab.fabric.links.use_interface` with type ``siw``).  Raises
    :class:`~rdmalab.fabric.links.LinkError` for an interface that is missing or has no IPv4 address."""
    fab = links.use_interface(ifname, name, "siw", mpa_crc=mpa_crc, **options)
    assert isinstance(fab, InterfaceTcp)
    return fab
