"""Soft devices bound to real network interfaces: ``rdmalab link add NAME [type rxe|siw] netdev IF``.

The shape is iproute2's ``rdma link add rxe0 type rxe netdev veth0`` (and ``rdma link add siw0 type
siw netdev veth0``): a name for the device, its type, and the interface it sends on.  The types
(:data:`TYPES`):

``rxe`` (the default)  a :class:`~rdmalab.fabric.udp.UdpFabric`'s device: RoCEv2 on UDP 4791 of
                       the interface's IPv4 address, the peer of kernel rxe;
``siw``                an :class:`InterfaceTcp`'s device: iWARP (MPA, DDP, RDMAP) on the kernel's
                       TCP from the interface's IPv4 address, the peer of kernel siw.

A pyverbs program that changed only its imports (``rdmalab.verbs.pyverbs_alias``) finds either
kind with ``get_device_list()`` and ``rdma_cm`` (``pyverbs.cmid``) by its address.  Like rxe's and
siw's, a device has a net interface (``ctx.device.ifname``) and an address (``ipv4``).  The tools'
per-run devices (``--netdev IF``, with ``--transport iwarp`` for siw) are made by the same code,
:func:`use_interface`.

Where links live, first match wins:

``RDMALAB_LINKS``      ``"soft0=veth1,siw0=siw:veth4"``: ``NAME=NETDEV`` or ``NAME=TYPE:NETDEV``
                      (for one program; nothing written anywhere)
``RDMALAB_LINK_FILE``  the path of the file that ``rdmalab link`` reads and writes
otherwise             ``/run/rdmalab/links.json`` as root (forgotten at reboot, as ``rdma link``
                      is), else ``$XDG_RUNTIME_DIR/rdmalab/links.json`` or
                      ``~/.config/rdmalab/links.json``

The file is JSON: ``{"soft0": {"netdev": "veth1"}, "siw0": {"netdev": "veth4", "type": "siw"}}``
(no ``type``: rxe).  Devices are built on first use (the RoCE one opens the raw socket the UDP
carrier needs), once per process, by :func:`provider`, the entry point ``rdmalab.verbs`` loads
(:mod:`rdmalab.verbs.providers`).
"""

from __future__ import annotations

import atexit
import json
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rdmalab.fabric import background
from rdmalab.fabric.shared import SharedDevice
from rdmalab.fabric.tcpkernel import KernelTcp
from rdmalab.fabric.udp import CarrierError, UdpFabric, interface_ipv4
from rdmalab.fabric.udp_setup import ib_mtu_for, interface_mac, interface_mtu
from rdmalab.verbs.device import set_default_devices
from rdmalab.verbs.engine.node import SoftDevice

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,31}$")
#: the device types a link makes (iproute2's ``rdma link add NAME type TYPE netdev IF``), and what each is
TYPES = {"rxe": "RoCEv2 on UDP, as kernel rxe", "siw": "iWARP on the kernel's TCP, as kernel siw"}
DEFAULT_TYPE = "rxe"


class LinkError(Exception):
    """A link cannot be added, deleted or read (the message names the device, interface or file)."""


@dataclass(frozen=True)
class Link:
    """One configured link: the interface a device sends on, and its type (a key of :data:`TYPES`)."""

    netdev: str
    type: str = DEFAULT_TYPE


def check_type(kind: str, where: str = "device type") -> str:
    """``kind`` if it is one of :data:`TYPES`, else a :class:`LinkError` naming the allowed ones."""
    if kind not in TYPES:
        allowed = "; ".join(f"{t} ({what})" for t, what in TYPES.items())
        raise LinkError(f"{where} {kind!r} is unknown: the types are {allowed}")
    return kind


def link_file() -> Path:
    """The file ``rdmalab link`` keeps its links in (see the module docstring)."""
    env = os.environ.get("RDMALAB_LINK_FILE")
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return Path("/run/rdmalab/links.json")
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return Path(runtime) / "rdmalab" / "links.json"
    return Path.home() / ".config" / "rdmalab" / "links.json"


def _parse_env(text: str) -> dict[str, Link]:
    links: dict[str, Link] = {}
    for i, item in enumerate(p.strip() for p in text.split(",")):
        if not item:
            continue
        name, sep, value = item.partition("=")
        # (":" cannot be in an interface's name: the kernel's dev_valid_name refuses it)
        kind, colon, netdev = value.strip().rpartition(":")
        if not sep or not name.strip() or not netdev.strip() or (colon and not kind.strip()):
            raise LinkError(f"RDMALAB_LINKS item {i + 1} ({item!r}) is not NAME=NETDEV or NAME=TYPE:NETDEV "
                            "(e.g. soft0=veth1, siw0=siw:veth4)")
        kind = check_type(kind.strip(), f"RDMALAB_LINKS item {i + 1} ({item!r}): type") if colon else DEFAULT_TYPE
        links[name.strip()] = Link(netdev.strip(), kind)
    return links


def configured() -> dict[str, Link]:
    """Device name -> :class:`Link`, from ``RDMALAB_LINKS`` if set, else from :func:`link_file`."""
    env = os.environ.get("RDMALAB_LINKS")
    if env is not None:
        return _parse_env(env)
    return _file_links()


def read_links() -> dict[str, str]:
    """Device name -> interface name (:func:`configured`, without the types)."""
    return {name: link.netdev for name, link in configured().items()}


def _file_links() -> dict[str, Link]:
    """The links in :func:`link_file` (what ``rdmalab link`` adds to and deletes from, whatever the environment)."""
    path = link_file()
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise LinkError(f"cannot read {path}: {exc.strerror}") from None
    try:
        data = json.loads(text) if text.strip() else {}
        if not isinstance(data, dict):
            raise ValueError("the top level is not an object")
        links = {str(k): Link(str(v["netdev"]), str(v.get("type", DEFAULT_TYPE))) for k, v in data.items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise LinkError(f"{path} is not a links file ({exc}); remove it or fix it "
                        '(expected {"soft0": {"netdev": "veth1"}, "siw0": {"netdev": "veth4", "type": "siw"}})'
                        ) from None
    for name, link in links.items():
        check_type(link.type, f"{path}: device {name}: type")
    return links


def _write_links(links: dict[str, Link]) -> Path:
    path = link_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    # the type is written only when it is not the default, so that a file of RoCE links reads as before
    data = {k: {"netdev": v.netdev} | ({"type": v.type} if v.type != DEFAULT_TYPE else {})
            for k, v in sorted(links.items())}
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)
    return path


def add_link(name: str, netdev: str, type: str = DEFAULT_TYPE) -> str:  # noqa: A002 - iproute2's word
    """Bind soft device ``name`` of type ``type`` (:data:`TYPES`) to interface ``netdev``; returns the
    interface's IPv4 address."""
    check_type(type)
    if not _NAME.match(name):
        raise LinkError(f"{name!r} is not a device name (a letter, then letters, digits or _; at most 32)")
    have = [n for _, n in socket.if_nameindex()]
    if netdev not in have:
        raise LinkError(f"no network interface named {netdev!r} in this network namespace (have: {', '.join(have)})")
    try:
        ip = interface_ipv4(netdev)
    except CarrierError as exc:
        raise LinkError(f"{netdev}: {exc} (the engine sends RoCEv2 from the interface's IPv4 address)") from None
    links = _file_links()
    for other, link in links.items():
        if other == name:
            raise LinkError(f"device {name} already exists (type {link.type} on {link.netdev}); delete it first: "
                            f"rdmalab link delete {name}")
        if link.netdev == netdev:
            # (rdma_cm finds a device by its address: two on one address would leave it to chance)
            raise LinkError(f"{netdev} already carries {other} (type {link.type}); one soft device per interface")
    links[name] = Link(netdev, type)
    _write_links(links)
    return ip


def delete_link(name: str) -> None:
    links = _file_links()
    if name not in links:
        raise LinkError(f"no link named {name} (have: {', '.join(links) or 'none'})")
    del links[name]
    _write_links(links)
    _opened.pop(name, None)


class InterfaceTcp(KernelTcp):
    """A :class:`~rdmalab.fabric.tcpkernel.KernelTcp` with one soft iWARP device, ``device``, on
    interface ``ifname`` (its IPv4 address and MAC): what a ``siw`` link makes.

    ``mtu`` is the IB MTU the interface takes (1024 on a 1500-byte netdev), what siw reports as its
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


LinkCarrier = UdpFabric | InterfaceTcp


def make_device(name: str, netdev: str, type: str = DEFAULT_TYPE, *, mpa_crc: bool = False,  # noqa: A002
                **options: Any) -> LinkCarrier:
    """A soft device ``name`` of type ``type`` on interface ``netdev``, on its own carrier (``.device``):
    a RoCE one shared with other processes on the interface (:func:`share`), an iWARP one on the
    kernel's TCP.  ``options`` go to the carrier (``poll_wait``, ``seed``; ``pcap`` for rxe); ``mpa_crc``
    is siw's.  What :func:`provider` makes for each link and :func:`use_interface` for one run; a
    :class:`LinkError` says what is wrong."""
    check_type(type)
    try:
        if type == "siw":
            return InterfaceTcp(netdev, name, mpa_crc=mpa_crc, **options)
        if mpa_crc:
            raise LinkError(f"{name} on {netdev}: MPA CRC is an option of iWARP (type siw); RoCE has the ICRC always")
        fab = UdpFabric(ifname=netdev, name=name, **options)
    except (CarrierError, OSError) as exc:
        what = "a soft iWARP device" if type == "siw" else "a soft RoCE device"
        raise LinkError(f"{what} on {netdev} ({name}, type {type}): {exc}") from None
    share(fab)
    return fab


class LinkedDevices:
    """The linked devices of this process, built on first use: the ``devices`` mapping the verbs layer reads."""

    def __init__(self) -> None:
        self.fabrics: dict[str, LinkCarrier] = {}

    @property
    def devices(self) -> dict[str, SoftDevice]:
        return {name: fab.device for name, fab in self.fabrics.items()}


_opened: dict[str, tuple[Link, LinkCarrier]] = {}
_linked = LinkedDevices()


def share(fab: UdpFabric) -> SharedDevice:
    """Make ``fab``'s device one that other processes on the same interface and address may share
    (:mod:`rdmalab.fabric.shared`): QP numbers and listeners agreed with them, and fresh sockets
    and random numbers in a child after ``fork()`` (a socket shared with the parent would hand each
    packet to only one of the two); its packets are answered while the program is busy elsewhere
    (:mod:`rdmalab.fabric.background`)."""
    sd = SharedDevice(fab.ifname, fab.ip)
    fab.device.qpn_source = sd.next_qpn
    fab.device.gsi.agent.shared = sd
    _shared.append((fab, sd))
    background.drive(fab)
    return sd


_shared: list[tuple[UdpFabric, SharedDevice]] = []


def use_interface(ifname: str, name: str = "rdmalab0", type: str = DEFAULT_TYPE, **options: Any) -> LinkCarrier:  # noqa: A002
    """A soft device of type ``type`` on ``ifname`` for this run only (:func:`make_device`, as a link
    makes it), made the devices ``get_device_list()`` offers: what the tools' ``--netdev`` / ``-d
    NETDEV`` options do (``--transport iwarp``: type ``siw``)."""
    fab = make_device(name, ifname, type, **options)
    set_default_devices(lambda: fab)
    return fab


def _after_fork_in_child() -> None:
    for fab, sd in _shared:
        sd.forked()
        fab.reopen()
        if fab in background._driven:
            background.arm(fab)
        fab.device.rng.seed(os.urandom(16))
        fab.device.gsi.agent.psn = fab.device.rng.getrandbits(24)


def _at_exit() -> None:
    for _, sd in _shared:
        sd.close()


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_at_exit)


def provider(**options: Any) -> LinkedDevices | None:
    """The ``links`` provider of :mod:`rdmalab.verbs.providers`: every configured link as a device, or None."""
    links = configured()
    if not links:
        return None
    for name, link in links.items():
        opened = _opened.get(name)
        if opened is None or opened[0] != link:
            _opened[name] = (link, make_device(name, link.netdev, link.type, **options))
    _linked.fabrics = {n: _opened[n][1] for n in links}
    return _linked
