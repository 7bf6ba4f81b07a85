"""rdma_cm's addressing on an InfiniBand port of a soft HCA, as on a real HCA with IPoIB addresses.

Used by :mod:`rdmalab.verbs.cmid` and :mod:`rdmalab.verbs.cmid_ib`; a RoCE device's answers are
those of :mod:`rdmalab.verbs.cmroute`, which this module leaves as they are.

* **Addresses.**  A soft HCA has one IPv4 address on its port, as IPoIB's ``ib0`` gives one (an
  :class:`~rdmalab.fabric.ibfabric.IBFabric` gives each HCA 10.0.0.n, or the ``ipv4`` asked of
  ``add_hca``), in a /24 of the subnet (:data:`IPOIB_PREFIX`).  ``rdma_resolve_addr`` turns the
  peer's address into its port GID (subnet prefix + port GUID), as IPoIB's ARP does (the
  hardware address of an IPoIB neighbour holds its QPN and GID, RFC 4391 9.1.1): the HCA of the
  same subnet with that address.  An address nobody has is RDMA_CM_EVENT_ADDR_ERROR with status
  -ETIMEDOUT once ``timeout_ms`` has passed (the kernel's ``addr.c``: the neighbour never
  resolves), not an error of the call.
* **Routes.**  ``rdma_resolve_route`` on IB asks the subnet administrator for a PathRecord from
  the port's LID to the peer's (``cma_query_ib_route``): the carrier's ``sa(slid, dlid)`` when the
  subnet has a subnet manager (:func:`rdmalab.fabric.ibfabric_subnet.use_sa`), else the
  fabric's own routes (the peer's LID, SL 0, the fabric's MTU); an SA that has no path is
  RDMA_CM_EVENT_ROUTE_ERROR, status -EINVAL.  The QP's address vector gets the
  path's DLID and SL, ``is_global=0`` (:func:`ah_of`); the REQ's primary path carries both ports'
  LIDs, the GIDs, the SL and SubnetLocal (IBA Vol 1 12.6.5; ``cm_format_req``: a hop limit of 0
  or 1 is subnet local).
"""

from __future__ import annotations

import errno
import ipaddress
from dataclasses import dataclass
from typing import Any

from rdmalab.verbs import enums as e
from rdmalab.verbs.addr import AHAttr
from rdmalab.verbs.cmroute import _ah_to, _device_with, _devices, _route
from rdmalab.verbs.engine.gsi_link import cm_gid, on_ib
from rdmalab.verbs.pyverbs_error import PyverbsRDMAError
from rdmalab.wire import cm as w

#: the prefix length of a soft HCA's IPoIB address: the HCAs of one subnet share a /24
IPOIB_PREFIX = 24


@dataclass(frozen=True)
class IBPath:
    """What ``rdma_resolve_route`` found on IB: the PathRecord's fields the connection uses."""

    slid: int
    dlid: int
    sgid: int
    dgid: int
    sl: int = 0
    mtu: int = e.IBV_MTU_2048  # an IBV_MTU_* code (as PathRecord.MTU, IBA 15.2.5.16)
    rate: int = 0
    packet_life_time: int = 0
    hop_limit: int = 0
    traffic_class: int = 0
    from_sa: bool = False


def ipoib_device(dst: str) -> Any:
    """The InfiniBand device whose IPoIB subnet (a /24) holds ``dst``, or None: what routes ``dst``
    when no device of the fabric has it (its neighbour lookup then fails)."""
    net = ipaddress.IPv4Network(f"{dst}/{IPOIB_PREFIX}", strict=False)
    return next((d for d in _devices().values()
                 if on_ib(d) and ipaddress.IPv4Address(d.ipv4 & 0xFFFFFFFF) in net), None)


def route(dst: str) -> Any:
    """The local device that reaches ``dst`` (:func:`rdmalab.verbs.cmroute._route`), or, when no device
    has ``dst``, the InfiniBand device whose IPoIB subnet holds it (:func:`ipoib_device`)."""
    if _device_with(dst) is None:
        dev = ipoib_device(dst)
        if dev is not None:
            return dev
    return _route(dst)


def peer_gid(dev: Any, dst: str) -> int | None:
    """The GID rdma_cm addresses ``dst`` by from ``dev``: on RoCE its IPv4-mapped GID; on IB the port
    GID of the HCA of ``dev``'s subnet with that address (None: no port has it)."""
    v = int(ipaddress.IPv4Address(dst))
    if not on_ib(dev):
        return 0xFFFF00000000 | v
    owner = next((d for d in _devices().values() if d.carrier is dev.carrier and d.ipv4 == v and on_ib(d)), None)
    return None if owner is None else cm_gid(owner)


def ib_path(dev: Any, dgid: int) -> IBPath:
    """The path from ``dev``'s port to the port GID ``dgid``: the SA's PathRecord when the carrier has
    an SA (``carrier.sa(slid, dlid)``), else the fabric's own routes.  PyverbsRDMAError EHOSTUNREACH
    when no port of the subnet has ``dgid``, EINVAL when the SA answers with an error status (as
    ``ib_sa`` reports a MAD status); ``CMID.resolve_route`` makes either RDMA_CM_EVENT_ROUTE_ERROR."""
    carrier = dev.carrier
    dlid = carrier.resolve_mac(dgid)
    if not dlid:
        raise PyverbsRDMAError(f"Failed to Resolve Route: no port of {dev.name}'s subnet has GID {dgid:#x}",
                               errno.EHOSTUNREACH)
    sa = getattr(carrier, "sa", None)
    if sa is None:
        return IBPath(dev.lid, dlid, cm_gid(dev), dgid, mtu=e.bytes_to_mtu(dev.active_mtu))
    try:
        pr = sa(dev.lid, dlid)
    except ValueError as exc:  # the SA's status (SubnetFabricError is a ValueError): ib_sa's -EINVAL
        raise PyverbsRDMAError(f"Failed to Resolve Route: {exc}", errno.EINVAL) from None
    return IBPath(pr.slid, pr.dlid, cm_gid(dev), dgid, sl=pr.sl, mtu=pr.mtu, rate=pr.rate,
                  packet_life_time=pr.packet_life_time, hop_limit=pr.hop_limit, traffic_class=pr.tclass,
                  from_sa=True)


def req_path(path: IBPath, local_ack_timeout: int) -> w.CMPath:
    """The REQ's primary path for ``path`` (IBA Vol 1 12.6.5, ``cm_format_req``): both LIDs, both
    GIDs, the SL, SubnetLocal when the hop limit is 0 or 1."""
    return w.CMPath(local_lid=path.slid, remote_lid=path.dlid, local_gid=path.sgid, remote_gid=path.dgid,
                    hop_limit=path.hop_limit, traffic_class=path.traffic_class, sl=path.sl,
                    subnet_local=1 if path.hop_limit <= 1 else 0, packet_rate=path.rate,
                    local_ack_timeout=local_ack_timeout)


def ah_of(cmid: Any) -> AHAttr:
    """The address vector ``init_qp_attr`` gives ``cmid``'s QP for RTR: on RoCE a GRH to the peer's
    IPv4-mapped GID; on IB the peer's LID and the path's SL, no GRH.  The active side has the path
    it resolved; the passive side reads it from the REQ, whose local LID is the peer's."""
    dev = cmid.device
    if not on_ib(dev):
        return _ah_to(cmid.dst_addr)
    path = getattr(cmid, "ib_path", None)
    if path is not None:
        return AHAttr(dlid=path.dlid, sl=path.sl, is_global=0, port_num=1)
    req = cmid.req.body if cmid.req is not None else None
    if not isinstance(req, (w.CMReq,)):
        raise PyverbsRDMAError("Failed to get QP attributes: no path to the peer (resolve_route, or a REQ)",
                               errno.EINVAL)
    return AHAttr(dlid=req.primary_local_lid, sl=req.primary_sl, is_global=0, port_num=1)
