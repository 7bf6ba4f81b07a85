"""Soft devices bound to real network interfaces: ``rdmalab link add soft0 netdev veth1``.

The shape is iproute2's ``rdma link add rxe0 type rxe netdev veth0``: a name for the device and
the interface it sends on.  A linked device is a :class:`~rdmalab.fabric.udp.UdpFabric`'s device:
RoCEv2 on UDP 4791 of the interface's IPv4 address, so a pyverbs program that changed only its
imports (``rdmalab.verbs.pyverbs_alias``) finds it with ``get_device_list()`` and talks to kernel
rxe over the real network.  Like rxe's, the device has a net interface (``ctx.device.ifname``) and
an address (``ipv4``).

Where links live, first match wins:

``RDMALAB_LINKS``      ``"soft0=veth1,soft2=eth1"`` (for one program; nothing written anywhere)
``RDMALAB_LINK_FILE``  the path of the file that ``rdmalab link`` reads and writes
otherwise             ``/run/rdmalab/links.json`` as root (forgotten at reboot, as ``rdma link``
                      is), else ``$XDG_RUNTIME_DIR/rdmalab/links.json`` or
                      ``~/.config/rdmalab/links.json``

The file is JSON: ``{"soft0": {"netdev": "veth1"}}``.  Devices are built on first use (opening
the raw socket the UDP carrier needs), once per process, by :func:`provider`, the entry point
``rdmalab.verbs`` loads (:mod:`rdmalab.verbs.providers`).
"""

from __future__ import annotations

import atexit
import json
import os
import re
import socket
from pathlib import Path
from typing import Any

from rdmalab.fabric import background
from rdmalab.fabric.shared import SharedDevice
from rdmalab.fabric.udp import CarrierError, UdpFabric, interface_ipv4
from rdmalab.verbs.device import set_default_devices
from rdmalab.verbs.engine.node import SoftDevice

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,31}$")


class LinkError(Exception):
    """A link cannot be added, deleted or read (the message names the device, interface or file)."""


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


def _parse_env(text: str) -> dict[str, str]:
    links: dict[str, str] = {}
    for i, item in enumerate(p.strip() for p in text.split(",")):
        if not item:
            continue
        name, sep, netdev = item.partition("=")
        if not sep or not name.strip() or not netdev.strip():
            raise LinkError(f"RDMALAB_LINKS item {i + 1} ({item!r}) is not NAME=NETDEV (e.g. soft0=veth1)")
        links[name.strip()] = netdev.strip()
    return links


def read_links() -> dict[str, str]:
    """Device name -> interface name, from ``RDMALAB_LINKS`` if set, else from :func:`link_file`."""
    env = os.environ.get("RDMALAB_LINKS")
    if env is not None:
        return _parse_env(env)
    return _file_links()


def _file_links() -> dict[str, str]:
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
        return {str(k): str(v["netdev"]) for k, v in data.items()}
    except (ValueError, KeyError, TypeError) as exc:
        raise LinkError(f"{path} is not a links file ({exc}); remove it or fix it "
                        '(expected {"soft0": {"netdev": "veth1"}})') from None


def _write_links(links: dict[str, str]) -> Path:
    path = link_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({k: {"netdev": v} for k, v in sorted(links.items())}, indent=1) + "\n")
    tmp.replace(path)
    return path


def add_link(name: str, netdev: str) -> str:
    """Bind soft device ``name`` to interface ``netdev``; returns the interface's IPv4 address."""
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
    for other, dev in links.items():
        if other == name:
            raise LinkError(f"device {name} already exists (on {dev}); delete it first: rdmalab link delete {name}")
        if dev == netdev:
            raise LinkError(f"{netdev} already carries {other}; one soft device per interface, as rxe")
    links[name] = netdev
    _write_links(links)
    return ip


def delete_link(name: str) -> None:
    links = _file_links()
    if name not in links:
        raise LinkError(f"no link named {name} (have: {', '.join(links) or 'none'})")
    del links[name]
    _write_links(links)
    _opened.pop(name, None)


class LinkedDevices:
    """The linked devices of this process, built on first use: the ``devices`` mapping the verbs layer reads."""

    def __init__(self) -> None:
        self.fabrics: dict[str, UdpFabric] = {}

    @property
    def devices(self) -> dict[str, SoftDevice]:
        return {name: fab.device for name, fab in self.fabrics.items()}


_opened: dict[str, UdpFabric] = {}
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


def use_interface(ifname: str, name: str = "rdmalab0", **udp_options: Any) -> UdpFabric:
    """A soft device on ``ifname`` for this run only, shared as a linked one (:func:`share`), made the
    devices ``get_device_list()`` offers: what the tools' ``--netdev`` / ``-d NETDEV`` options do."""
    try:
        fab = UdpFabric(ifname=ifname, name=name, **udp_options)
    except CarrierError as exc:
        raise LinkError(str(exc)) from None
    share(fab)
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


def provider(**udp_options: Any) -> LinkedDevices | None:
    """The ``links`` provider of :mod:`rdmalab.verbs.providers`: every configured link as a device, or None."""
    links = read_links()
    if not links:
        return None
    for name, netdev in links.items():
        fab = _opened.get(name)
        if fab is None or fab.ifname != netdev:
            try:
                fab = UdpFabric(ifname=netdev, name=name, **udp_options)
            except CarrierError as exc:
                raise LinkError(f"soft device {name} on {netdev}: {exc}") from None
            share(fab)
            _opened[name] = fab
    _linked.fabrics = {n: _opened[n] for n in links}
    return _linked
