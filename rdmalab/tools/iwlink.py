"""A soft iWARP device on a named interface for one run: what ``--netdev IF --transport iwarp`` makes.

The tools (``rdmalab rping --netdev IF --transport iwarp``, ``rdmalab perftest -R -d IF --transport
iwarp``) make one soft iWARP device on the interface's IPv4 address and MAC, with the kernel's TCP
as its stack (:class:`rdmalab.fabric.tcpkernel.KernelTcp`), and make it the device
``get_device_list()`` and rdma_cm use for the rest of the process, as :func:`rdmalab.fabric.links.use_interface`
does for a RoCE device.  Its peer is kernel siw (docs/live.md: siw0 on veth4, the engine in
namespace ``peer`` on veth5).
"""

from __future__ import annotations

from typing import Any

from rdmalab.fabric.tcpkernel import KernelTcp
from rdmalab.fabric.udp_setup import ib_mtu_for, interface_ipv4, interface_mac, interface_mtu
from rdmalab.verbs.device import set_default_devices

__all__ = ["InterfaceTcp", "use_interface"]


class InterfaceTcp(KernelTcp):
    """A :class:`KernelTcp` with one device, ``device``, on interface ``ifname`` (its address and MAC).

    ``mtu`` is the IB MTU the interface's takes (1024 on a 1500-byte netdev), what siw reports as its
    active MTU and perftest prints; ``mpa_crc`` makes the device ask for MPA CRC32c."""

    def __init__(self, ifname: str, name: str = "rdmalab0", *, mpa_crc: bool = False, poll_wait: float = 0.02,
                 seed: int | None = None) -> None:
        self.ip = interface_ipv4(ifname)     # CarrierError names what is wrong with the interface
        mac = interface_mac(ifname)
        super().__init__(poll_wait=poll_wait)
        self.ifname = ifname
        self.mtu = ib_mtu_for(interface_mtu(ifname))
        self.device = self.add_device(name, self.ip, mac, mpa_crc=mpa_crc, seed=seed)
        self.device.ifname = ifname


def use_interface(ifname: str, name: str = "rdmalab0", *, mpa_crc: bool = False, **options: Any) -> InterfaceTcp:
    """A soft iWARP device on ``ifname`` for this run, made the devices ``get_device_list()`` offers.
    Raises :class:`~rdmalab.fabric.udp_setup.CarrierError` for an interface without an IPv4 address."""
    fab = InterfaceTcp(ifname, name, mpa_crc=mpa_crc, **options)
    set_default_devices(lambda: fab)
    return fab

