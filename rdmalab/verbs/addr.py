"""``pyverbs.addr``: GID, GlobalRoute, AHAttr and AH.

On RoCE every address vector needs a GRH (``is_global=1``): the destination GID *is* the
destination IP address (an IPv4-mapped GID means IPv4 packets, IBA Annex A17.4).
"""

from __future__ import annotations

import ipaddress
from typing import Any

from rdmalab.verbs.libibverbs_enums import IBV_LINK_LAYER_ETHERNET, IBV_LINK_LAYER_INFINIBAND
from rdmalab.verbs.pyverbs_error import EINVAL, PyverbsRDMAError, PyverbsUserError


class GID:
    """``GID(val=None)``; ``.gid`` is the 8 x 4-hex-digit form pyverbs prints."""

    def __init__(self, val: str | None = None) -> None:
        self._int = 0 if val is None else GID._parse(val)

    @staticmethod
    def _parse(val: str) -> int:
        try:
            return int(ipaddress.IPv6Address(val))
        except ValueError:
            raise PyverbsUserError(f"{val!r} is not a GID") from None

    @classmethod
    def from_int(cls, value: int) -> GID:
        g = cls()
        g._int = value
        return g

    @property
    def gid(self) -> str:
        h = f"{self._int:032x}"
        return ":".join(h[i:i + 4] for i in range(0, 32, 4))

    @gid.setter
    def gid(self, val: str) -> None:
        self._int = GID._parse(val)

    def __int__(self) -> int:
        return self._int

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GID) and other._int == self._int

    def __hash__(self) -> int:
        return hash(self._int)

    def __str__(self) -> str:
        return self.gid

    def __repr__(self) -> str:
        return f"GID({self.gid!r})"


def gid_int(gid: Any) -> int:
    if isinstance(gid, GID):
        return int(gid)
    if isinstance(gid, int):
        return gid
    if isinstance(gid, str):
        return GID._parse(gid)
    raise PyverbsUserError(f"expected a GID, got {type(gid).__name__}")


class GlobalRoute:
    """``GlobalRoute(dgid=None, flow_label=0, sgid_index=0, hop_limit=1, traffic_class=0)``."""

    def __init__(self, dgid: Any = None, flow_label: int = 0, sgid_index: int = 0, hop_limit: int = 1,
                 traffic_class: int = 0) -> None:
        self.dgid = dgid if dgid is not None else GID()
        self.flow_label = flow_label
        self.sgid_index = sgid_index
        self.hop_limit = hop_limit
        self.traffic_class = traffic_class


class AHAttr:
    """``AHAttr(dlid=0, sl=0, src_path_bits=0, static_rate=0, is_global=0, port_num=1, gr=None)``."""

    def __init__(self, dlid: int = 0, sl: int = 0, src_path_bits: int = 0, static_rate: int = 0,
                 is_global: int = 0, port_num: int = 1, gr: GlobalRoute | None = None) -> None:
        self.dlid = dlid
        self.sl = sl
        self.src_path_bits = src_path_bits
        self.static_rate = static_rate
        self.is_global = is_global
        self.port_num = port_num
        self.gr = gr if gr is not None else GlobalRoute()

    @property
    def dgid(self) -> GID:
        return GID.from_int(gid_int(self.gr.dgid))


#: the unicast LIDs (IBA Vol 1 4.1.3: 0x0001..0xBFFF; 0 is reserved, 0xC000.. multicast, 0xFFFF permissive)
UNICAST_LIDS = range(0x0001, 0xC000)


def resolve_path(device: Any, ah_attr: AHAttr | None) -> tuple[int, int]:
    """(sgid, dgid) of an address vector, checked as ib_core checks a RoCE AV.

    On a port whose link layer is InfiniBand (``device.link_layer``) an AV without a GRH is
    addressed by ``ah_attr.dlid`` alone, as on an HCA: it must be a unicast LID, and the
    device's carrier names the port GID behind it (``device.carrier.gid_of_lid``: the engine
    checks addresses by GID; on a subnet without routers a LID is one port).  With a GRH
    (``is_global=1``) the DGID names the peer, as on RoCE, and a connected QP's packets carry the
    GRH (an address handle's, for UD, are refused there: see :class:`AH`)."""
    if ah_attr is None:
        raise PyverbsRDMAError("Failed to modify QP: no address vector", EINVAL)
    if not ah_attr.is_global and getattr(device, "link_layer", IBV_LINK_LAYER_ETHERNET) == IBV_LINK_LAYER_INFINIBAND:
        return _resolve_lid(device, ah_attr)
    if not ah_attr.is_global:
        raise PyverbsRDMAError("Invalid address vector: RoCE needs a GRH (AHAttr(is_global=1, gr=GlobalRoute(...)))",
                               EINVAL)
    if ah_attr.port_num != 1:
        raise PyverbsRDMAError(f"Invalid address vector: port {ah_attr.port_num} (soft devices have port 1)", EINVAL)
    idx = ah_attr.gr.sgid_index
    if not 0 <= idx < len(device.gids):
        raise PyverbsRDMAError(f"Invalid address vector: sgid_index {idx} (GID table has {len(device.gids)})", EINVAL)
    sgid, dgid = device.gids[idx], gid_int(ah_attr.gr.dgid)
    if ((sgid >> 32) == 0xFFFF) != ((dgid >> 32) == 0xFFFF):
        raise PyverbsRDMAError("Invalid address vector: source and destination GIDs mix IPv4 and IPv6", EINVAL)
    return sgid, dgid


def _resolve_lid(device: Any, ah_attr: AHAttr) -> tuple[int, int]:
    dlid = ah_attr.dlid
    if ah_attr.port_num != 1:
        raise PyverbsRDMAError(f"Invalid address vector: port {ah_attr.port_num} (soft devices have port 1)", EINVAL)
    if isinstance(dlid, bool) or not isinstance(dlid, int) or dlid not in UNICAST_LIDS:
        raise PyverbsRDMAError(f"Invalid address vector: dlid {dlid!r} is not a unicast LID (0x0001..0xbfff)",
                               EINVAL)
    if not 0 <= ah_attr.sl <= 15:
        raise PyverbsRDMAError(f"Invalid address vector: sl {ah_attr.sl!r} is not a service level (0..15)", EINVAL)
    dgid = device.carrier.gid_of_lid(dlid)
    if dgid is None:
        raise PyverbsRDMAError(f"Invalid address vector: no port of the subnet has LID {dlid:#x}", EINVAL)
    return device.gids[0], dgid


class AH:
    """``AH(pd, attr=AHAttr)`` or ``AH(pd, wc=WC, port_num=1, grh=...)`` (a reply to a UD sender)."""

    def __init__(self, pd: Any, attr: AHAttr | None = None, wc: Any = None, port_num: int = 1,
                 grh: Any = None) -> None:
        self.pd = pd
        if attr is None and wc is not None:
            src = getattr(wc, "_sgid", None)
            dst = getattr(wc, "_dgid", None)
            on_ib = getattr(pd.device, "link_layer", IBV_LINK_LAYER_ETHERNET) == IBV_LINK_LAYER_INFINIBAND
            if src is None and on_ib and getattr(wc, "slid", 0):
                # a UD receive on an InfiniBand port without a GRH: the reply goes to the sender's LID
                attr = AHAttr(dlid=wc.slid, sl=wc.sl, port_num=port_num)
            elif src is None or dst is None:
                raise PyverbsUserError("this WC carries no GRH (only UD receive completions do)")
            else:
                sgid_index = pd.device.gids.index(dst)
                attr = AHAttr(is_global=1, port_num=port_num,
                              gr=GlobalRoute(dgid=GID.from_int(src), sgid_index=sgid_index))
        if attr is None:
            raise PyverbsUserError("AH needs attr= or wc=")
        if attr.is_global and getattr(pd.device, "link_layer", IBV_LINK_LAYER_ETHERNET) == IBV_LINK_LAYER_INFINIBAND:
            # (a UD packet's GRH would come from its AH, which the InfiniBand carrier does not see yet)
            raise PyverbsRDMAError("Invalid address vector: the soft engine sends UD packets on an InfiniBand port "
                                   "without a GRH; address the peer by LID (AHAttr(dlid=..., is_global=0))", EINVAL)
        self.attr = attr
        self.sgid, self.dgid = resolve_path(pd.device, attr)
