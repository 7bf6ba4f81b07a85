"""rdma_cm's addressing on soft devices: service IDs, address parsing, the device that has or reaches
an address, and what rdma_cm derives from addresses for RoCE (the peer's address handle, the REQ's
flow label, a NULL conn_param's depth).

Used by :mod:`rdmalab.verbs.cmid` (the ``CMID``), :mod:`rdmalab.verbs.cmtypes` (``AddrInfo``) and
:mod:`rdmalab.verbs.cmid_ib` (the IB CM transport); it imports none of them.

* **Port spaces and service IDs** (IBA Vol 1 Annex A11; ``rdma_get_service_id``):
  ``(port_space << 16) + port``, so rping's port 7174 in RDMA_PS_TCP is 0x0000000001061C06.
* **Address and route resolution without an SA** (RoCE has none): the local device is the one with
  the source address, or the device that reaches the destination (another device of the same
  fabric; a linked device for a real network); the path is built locally as
  ``cma_resolve_iboe_route`` does (``drivers/infiniband/core/cma.c``): IPv4-mapped GIDs, P_Key
  0xFFFF, packet life time 18, the device's MTU.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from typing import Any

from rdmalab.verbs.addr import GID, AHAttr, GlobalRoute
from rdmalab.verbs.device import MAX_QP_RD_ATOM, _fabric
from rdmalab.verbs.engine.node import SoftDevice
from rdmalab.verbs.pyverbs_error import PyverbsRDMAError


def service_id(port_space: int, port: int) -> int:
    """``rdma_get_service_id``: ``(port_space << 16) + port`` (rping's 7174 in RDMA_PS_TCP: 0x1061C06)."""
    return ((port_space & 0xFFFF) << 16) + (port & 0xFFFF)


def _ipv4(text: Any, what: str) -> str:
    if isinstance(text, bytes):
        text = text.decode()
    try:
        return str(ipaddress.IPv4Address(str(text)))
    except ValueError:
        pass
    try:
        return socket.gethostbyname(str(text))
    except OSError:
        raise PyverbsRDMAError(f"Failed to get Address Info: {what} {text!r} is not an IPv4 address or a host name "
                               "(the soft devices speak RoCEv2 over IPv4)", errno.EADDRNOTAVAIL) from None


def _port(service: Any, what: str) -> int:
    if service is None:
        return 0
    if isinstance(service, bytes):
        service = service.decode()
    try:
        port = int(service)
    except (TypeError, ValueError):
        try:
            port = socket.getservbyname(str(service))
        except OSError:
            raise PyverbsRDMAError(f"Failed to get Address Info: {what} {service!r} is not a port number",
                                   errno.EINVAL) from None
    if not 0 <= port <= 0xFFFF:
        raise PyverbsRDMAError(f"Failed to get Address Info: {what} {port} is not a port (0..65535)", errno.EINVAL)
    return port


def _devices() -> dict[str, SoftDevice]:
    return dict(_fabric(None).devices)


def _device_with(ip: str) -> SoftDevice | None:
    v = int(ipaddress.IPv4Address(ip))
    return next((d for d in _devices().values() if d.ipv4 == v), None)


def _route(dst: str) -> SoftDevice:
    """The local device that reaches ``dst``: another device of the fabric that has it, else a linked device."""
    devs = list(_devices().values())
    v = int(ipaddress.IPv4Address(dst))
    owner = next((d for d in devs if d.ipv4 == v), None)
    if owner is not None:
        peers = [d for d in devs if d.carrier is owner.carrier and d is not owner]
        return peers[0] if peers else owner
    linked = [d for d in devs if d.ifname is not None]
    if linked:
        return linked[0]
    raise PyverbsRDMAError(f"Failed to Resolve Address: no soft device reaches {dst} (the simulated fabric has "
                           f"{', '.join(_ip(d.ipv4) for d in devs)}; bind a device to a network interface with "
                           "`rdmalab link add soft0 netdev IFNAME` to reach other hosts)", errno.EHOSTUNREACH)


def _ip(v: int) -> str:
    return str(ipaddress.IPv4Address(v & 0xFFFFFFFF))


def e_max_rd() -> int:
    """What librdmacm puts in a NULL conn_param: the device's max_qp_rd_atom (rxe: 128)."""
    return MAX_QP_RD_ATOM


def _ah_to(ipv4: str) -> AHAttr:
    """The address handle rdma_cm gives for an IPv4 peer or group on RoCE: GRH to its IPv4-mapped GID,
    source GID index 1, hop limit 64."""
    gid = GID.from_int(0xFFFF00000000 | int(ipaddress.IPv4Address(ipv4)))
    return AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=gid, sgid_index=1, hop_limit=64))


def _flow_label(sport: int, dport: int) -> int:
    """``cma_get_roce_udp_flow_label`` (cma.c l.3228): ``(sport * 31 + dport) & 0xFFFFF``."""
    return (sport * 31 + dport) & 0xFFFFF
