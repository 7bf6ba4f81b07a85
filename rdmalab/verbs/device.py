"""``pyverbs.device`` for soft devices: ``get_device_list``, ``Context`` and the attribute objects.

Devices come from a carrier (anything with a ``devices`` mapping of name to
:class:`~rdmalab.verbs.engine.node.SoftDevice`).  This layer does not import the carriers: as
libibverbs loads its provider libraries on the first ``ibv_get_device_list()``, the first
``get_device_list()`` or ``Context()`` loads the providers the installed packages declare
(:mod:`rdmalab.verbs.providers`), so a pyverbs program that changed only its imports finds
devices.  By default those are the simulated fabric's ``soft0`` (10.0.0.1) and ``soft1``
(10.0.0.2), each with GID index 0 a link-local address and GID index 1 the IPv4-mapped
``::ffff:10.0.0.x``, as rxe has; a device linked to a real interface with
``rdmalab link add soft0 netdev veth1`` (or ``RDMALAB_LINKS=soft0=veth1``) runs on real UDP (one
of ``type siw`` on the kernel's TCP), and
once any device is linked the simulated ones are not offered.  A program that builds its own
:class:`rdmalab.fabric.Fabric` passes ``Context(name=..., fabric=fab)``, or makes it the
default with :func:`rdmalab.fabric.reset_default_fabric`; :func:`set_default_devices`
overrides the providers altogether.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from rdmalab.verbs import enums as e
from rdmalab.verbs.addr import GID
from rdmalab.verbs.engine.node import SoftDevice
from rdmalab.verbs.libibverbs_enums import IBV_TRANSPORT_IB, IBV_TRANSPORT_IWARP
from rdmalab.verbs.providers import ProviderError, provided_devices
from rdmalab.verbs.pyverbs_error import EINVAL, ENODEV, PyverbsRDMAError

MAX_QP_WR = 16384
MAX_SGE = 32
MAX_QP_RD_ATOM = 128
MAX_INLINE = 256
MAX_MSG_SZ = 0x800000  # rxe: 8 MiB
VENDOR_ID = 0xFFFFFF  # rxe


class DeviceSet(Protocol):
    """What provides devices: a carrier with its soft devices by name (e.g. a ``Fabric``)."""

    @property
    def devices(self) -> Mapping[str, SoftDevice]: ...


_default: Callable[[], DeviceSet] | None = None


def set_default_devices(provider: Callable[[], DeviceSet] | None) -> None:
    """Make ``provider()`` the devices that ``get_device_list()``/``Context()`` use without ``fabric=``."""
    global _default
    _default = provider


def _fabric(fabric: Any = None) -> Any:
    if fabric is not None:
        return fabric
    if _default is not None:
        return _default()
    try:
        provided = provided_devices()
        provided.devices  # noqa: B018 - open them now, so that a provider's failure is reported here
    except ProviderError as exc:
        raise PyverbsRDMAError(f"No IB devices found: {exc}", ENODEV) from None
    return provided


class _Devices:
    def __init__(self, devices: dict[str, SoftDevice]) -> None:
        self.devices = devices


@dataclass
class Device:
    """An entry of ``get_device_list()``: ``name`` is bytes, as in pyverbs."""

    name: bytes
    node_type: int
    transport_type: int
    guid: int


def is_iwarp(device: Any) -> bool:
    """Whether ``device`` runs the iWARP transport: its libibverbs ``transport_type`` is
    ``IBV_TRANSPORT_IWARP`` (siw's, and the soft iWARP device's).  The one test of it: a device
    without the attribute (a soft RoCE device) or with another value runs InfiniBand's transport."""
    return bool(getattr(device, "transport_type", IBV_TRANSPORT_IB) == IBV_TRANSPORT_IWARP)


def get_device_list(fabric: Any = None) -> list[Device]:
    fab = _fabric(fabric)
    return [Device(d.name.encode(), getattr(d, "node_type", 1), getattr(d, "transport_type", 0),
                   (d.mac << 16) | 0xFFFE) for d in fab.devices.values()]


@dataclass
class DeviceAttr:
    fw_ver: str = "rdmalab soft 0.1"
    node_guid: int = 0
    sys_image_guid: int = 0
    max_mr_size: int = 2**64 - 1
    vendor_id: int = VENDOR_ID
    vendor_part_id: int = 0
    hw_ver: int = 0
    max_qp: int = 1 << 20
    max_qp_wr: int = MAX_QP_WR
    max_sge: int = MAX_SGE
    max_cq: int = 1 << 20
    max_cqe: int = 1 << 20
    max_mr: int = 1 << 19
    max_pd: int = 1 << 20
    max_qp_rd_atom: int = MAX_QP_RD_ATOM
    max_qp_init_rd_atom: int = MAX_QP_RD_ATOM
    max_srq: int = 1 << 20
    max_srq_wr: int = MAX_QP_WR
    max_srq_sge: int = MAX_SGE
    atomic_caps: int = 1  # IBV_ATOMIC_HCA
    phys_port_cnt: int = 1


@dataclass
class PortAttr:
    state: int = e.IBV_PORT_ACTIVE
    max_mtu: int = e.IBV_MTU_4096
    active_mtu: int = e.IBV_MTU_4096
    gid_tbl_len: int = 2
    max_msg_sz: int = MAX_MSG_SZ
    lid: int = 0
    sm_lid: int = 0
    pkey_tbl_len: int = 1
    link_layer: int = e.IBV_LINK_LAYER_ETHERNET
    active_speed: int = 0
    active_width: int = 0
    phys_state: int = 5


class Context:
    """An open soft device.  ``Context(name='soft0')``; ``fabric=`` picks a non-default fabric."""

    def __init__(self, name: str | bytes | None = None, *, fabric: Any = None, **kwargs: Any) -> None:
        cmid = kwargs.get("cmid")
        if cmid is not None:  # pyverbs' Context(cmid=...): the device the rdma_cm ID is bound to
            if cmid.device is None:
                raise PyverbsRDMAError("Failed to open the device of a CMID that is not bound to one", ENODEV)
            fabric, name = {cmid.device.name: cmid.device}, cmid.device.name
            fabric = _Devices(fabric)
        fab = _fabric(fabric)
        if name is None:
            if not fab.devices:
                raise PyverbsRDMAError("No IB devices found", ENODEV)
            name = next(iter(fab.devices))
        dev_name: str = name.decode() if isinstance(name, bytes) else str(name)
        dev = fab.devices.get(dev_name)
        if dev is None:
            raise PyverbsRDMAError(f"Failed to open device {dev_name}: not found (have {list(fab.devices)})", ENODEV)
        self.name = dev_name
        self.device: SoftDevice = dev
        self.fabric = fab
        self.closed = False

    def query_device(self) -> DeviceAttr:
        guid = (self.device.mac << 16) | 0xFFFE
        return DeviceAttr(node_guid=guid, sys_image_guid=guid)

    def query_port(self, port_num: int = 1) -> PortAttr:
        self._port(port_num)
        dev = self.device
        mtu = e.bytes_to_mtu(dev.active_mtu)
        return PortAttr(active_mtu=mtu, link_layer=dev.link_layer, lid=dev.lid, sm_lid=dev.sm_lid,
                        gid_tbl_len=len(dev.gids))

    def query_gid(self, port_num: int, index: int) -> GID:
        self._port(port_num)
        if not 0 <= index < len(self.device.gids):
            raise PyverbsRDMAError(f"Failed to query gid {index} of port {port_num}", EINVAL)
        return GID.from_int(self.device.gids[index])

    def query_gid_type(self, port_num: int, index: int) -> int:
        self.query_gid(port_num, index)
        return self.device.gid_type

    def query_pkey(self, port_num: int, index: int) -> int:
        self._port(port_num)
        if index != 0:
            raise PyverbsRDMAError(f"Failed to query pkey {index}", EINVAL)
        return 0xFFFF

    def _port(self, port_num: int) -> None:
        if port_num != 1:
            raise PyverbsRDMAError(f"Failed to query port {port_num}: soft devices have port 1 only", EINVAL)

    def close(self) -> None:
        self.closed = True

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
