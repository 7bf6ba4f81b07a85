"""The rest of ``pyverbs.device``: full DeviceAttr/PortAttr, ``query_device_ex``, GID tables.

:class:`Context` here is :class:`rdmalab.verbs.device.Context` with the queries pyverbs has and
the base class lacks; ``import pyverbs.device`` (through :mod:`rdmalab.verbs.pyverbs_alias`)
gets this one.  Capability values are those rxe reports where the soft engine behaves the same
(``ibv_devinfo -v`` on rxe, kernel 6.1, kept in tests/pyverbs/rxe-6.1-results.json's run), and
zero for what the soft engine lacks (ODP, TSO, RSS, device memory, tag matching, packet pacing),
so code that checks a capability before using it skips here as it does on rxe.

Error conventions follow pyverbs over libibverbs: ``query_gid_table`` reports a *negative*
errno (``ibv_query_gid_table`` returns ``-errno``), ``query_gid_ex`` a positive one (``ENODATA``
for an empty entry), ``query_port`` of a missing port ``EINVAL``.
"""

from __future__ import annotations

import errno
import os
from typing import Any

from rdmalab.verbs import device as _dev
from rdmalab.verbs import libibverbs_enums as e
from rdmalab.verbs.addr import GID
from rdmalab.verbs.pyverbs_error import PyverbsRDMAError, PyverbsUserError

# What the soft engine enforces (rdmalab.verbs.device) and reports here.
MAX_CQE = 1 << 20
NUM_COMP_VECTORS = 1  # rxe: one completion vector
GID_TBL_LEN = 1024  # rxe: RXE_PORT_GID_TBL_LEN (drivers/infiniband/sw/rxe/rxe_param.h); unused entries are zero
PAGE_SIZE_CAP = 0xFFFFF000  # rxe: any page size from 4 KiB
# rxe's device_cap_flags (ibv_devinfo on 6.1) minus what the soft engine does not do.
DEVICE_CAP_FLAGS = (e.IBV_DEVICE_BAD_PKEY_CNTR | e.IBV_DEVICE_BAD_QKEY_CNTR | e.IBV_DEVICE_CHANGE_PHY_PORT
                    | e.IBV_DEVICE_UD_AV_PORT_ENFORCE | e.IBV_DEVICE_PORT_ACTIVE_EVENT
                    | e.IBV_DEVICE_SYS_IMAGE_GUID | e.IBV_DEVICE_RC_RNR_NAK_GEN | e.IBV_DEVICE_MEM_WINDOW
                    | e.IBV_DEVICE_MEM_WINDOW_TYPE_2B)


class Device:
    """An entry of ``get_device_list()`` (pyverbs: name bytes, guid, node_type, transport_type, index)."""

    def __init__(self, name: bytes, guid: int, node_type: int, transport_type: int, index: int) -> None:
        self.name = name
        self.guid = guid
        self.node_type = node_type
        self.transport_type = transport_type
        self.index = index

    def __repr__(self) -> str:
        return f"Device({self.name!r}, guid={self.guid:#x})"


def get_device_list(fabric: Any = None) -> list[Device]:
    """``ibv_get_device_list``: the soft devices of the (default) fabric, as CA nodes."""
    return [Device(d.name, d.guid, e.IBV_NODE_CA, e.IBV_TRANSPORT_IB, i)
            for i, d in enumerate(_dev.get_device_list(fabric))]


class DeviceAttr:
    """``ibv_device_attr`` with pyverbs' attribute names."""

    def __init__(self, base: Any) -> None:
        self.fw_version = "0.0.0"
        self.node_guid = base.node_guid
        self.sys_image_guid = base.sys_image_guid
        self.max_mr_size = base.max_mr_size
        self.page_size_cap = PAGE_SIZE_CAP
        self.vendor_id = base.vendor_id
        self.vendor_part_id = base.vendor_part_id
        self.hw_ver = base.hw_ver
        self.max_qp = base.max_qp
        self.max_qp_wr = base.max_qp_wr
        self.device_cap_flags = DEVICE_CAP_FLAGS
        self.max_sge = base.max_sge
        self.max_sge_rd = base.max_sge
        self.max_cq = base.max_cq
        self.max_cqe = MAX_CQE
        self.max_mr = base.max_mr
        self.max_pd = base.max_pd
        self.max_qp_rd_atom = base.max_qp_rd_atom
        self.max_ee_rd_atom = 0
        self.max_res_rd_atom = base.max_qp_rd_atom * 2016  # rxe: 258048 = 128 * 2016
        self.max_qp_init_rd_atom = base.max_qp_init_rd_atom
        self.max_ee_init_rd_atom = 0
        self.atomic_caps = e.IBV_ATOMIC_HCA
        self.max_ee = 0
        self.max_rdd = 0
        self.max_mw = base.max_mr  # windows share the MR key table (rdmalab.verbs.mr_ex.MW)
        self.max_raw_ipv6_qps = 0
        self.max_raw_ethy_qp = 0
        self.max_mcast_grp = 8192  # rxe_param.h RXE_MAX_MCAST_GRP
        self.max_mcast_qp_attach = 56  # RXE_MAX_MCAST_QP_ATTACH
        self.max_total_mcast_qp_attach = 0x70000  # RXE_MAX_TOT_MCAST_QP_ATTACH
        self.max_ah = 1 << 15
        self.max_fmr = 0
        self.max_map_per_fmr = 0
        self.max_srq = base.max_srq
        self.max_srq_wr = base.max_srq_wr
        self.max_srq_sge = base.max_srq_sge
        self.max_pkeys = 1
        self.local_ca_ack_delay = 15
        self.phys_port_cnt = base.phys_port_cnt

    # rdmalab's own DeviceAttr spelled it fw_ver
    @property
    def fw_ver(self) -> str:
        return self.fw_version


class _Caps:
    def __init__(self, **kw: int) -> None:
        self.__dict__.update(kw)


class ODPCaps(_Caps):
    pass


class TSOCaps(_Caps):
    pass


class RSSCaps(_Caps):
    pass


class PacketPacingCaps(_Caps):
    pass


class TMCaps(_Caps):
    pass


class CQModerationCaps(_Caps):
    pass


class PCIAtomicCaps(_Caps):
    pass


class DeviceAttrEx:
    """``ibv_device_attr_ex``: ``orig_attr`` plus the extended capabilities (zero where absent)."""

    def __init__(self, attr: DeviceAttr) -> None:
        self.orig_attr = attr
        self.comp_mask = 0
        self.odp_caps = ODPCaps(general_caps=0, rc_odp_caps=0, uc_odp_caps=0, ud_odp_caps=0, xrc_odp_caps=0)
        self.completion_timestamp_mask = 0
        self.hca_core_clock = 0
        self.device_cap_flags_ex = attr.device_cap_flags
        self.tso_caps = TSOCaps(max_tso=0, supported_qpts=0)
        self.rss_caps = RSSCaps(supported_qpts=0, max_rwq_indirection_tables=0, max_rwq_indirection_table_size=0,
                                rx_hash_fields_mask=0, rx_hash_function=0)
        self.max_wq_type_rq = 0
        self.packet_pacing_caps = PacketPacingCaps(qp_rate_limit_min=0, qp_rate_limit_max=0, supported_qpts=0)
        self.raw_packet_caps = 0
        self.tm_caps = TMCaps(max_rndv_hdr_size=0, max_num_tags=0, flags=0, max_ops=0, max_sge=0)
        self.cq_mod_caps = CQModerationCaps(max_cq_count=0, max_cq_period=0)
        self.max_dm_size = 0
        self.pci_atomic_caps = PCIAtomicCaps(fetch_add=0, swap=0, compare_swap=0)
        self.xrc_odp_caps = 0
        self.phys_port_cnt_ex = attr.phys_port_cnt


class PortAttr:
    """``ibv_port_attr`` with pyverbs' names; a RoCE port as rxe reports one."""

    def __init__(self, active_mtu: int, gid_tbl_len: int) -> None:
        self.state = e.IBV_PORT_ACTIVE
        self.max_mtu = e.IBV_MTU_4096
        self.active_mtu = active_mtu
        self.gid_tbl_len = gid_tbl_len
        self.port_cap_flags = 0x00890000  # rxe: CM_SUP | VENDOR_CLASS_SUP | IP_BASED_GIDS
        self.max_msg_sz = _dev.MAX_MSG_SZ
        self.bad_pkey_cntr = 0
        self.qkey_viol_cntr = 0
        self.pkey_tbl_len = 1
        self.lid = 0
        self.sm_lid = 0
        self.lmc = 0
        self.max_vl_num = 1
        self.sm_sl = 0
        self.subnet_timeout = 0
        self.init_type_reply = 0
        self.active_width = 2  # 4X
        self.active_speed = 32  # 25 Gbps per lane: a 100 Gb/s port
        self.phys_state = 5  # LinkUp
        self.link_layer = e.IBV_LINK_LAYER_ETHERNET
        self.flags = 0
        self.port_cap_flags2 = 0


class GIDEntry:
    """``ibv_gid_entry``: ``gid_str``, ``gid_index``, ``port_num``, ``gid_type``, ``ndev_ifindex``."""

    def __init__(self, gid: int = 0, gid_index: int = 0, port_num: int = 0, gid_type: int = 0,
                 ndev_ifindex: int = 0) -> None:
        self._gid = gid
        self.gid_index = gid_index
        self.port_num = port_num
        self.gid_type = gid_type
        self.ndev_ifindex = ndev_ifindex

    @property
    def gid_subnet_prefix(self) -> int:
        return self._gid >> 64

    @property
    def gid_interface_id(self) -> int:
        return self._gid & ((1 << 64) - 1)

    def gid_str(self) -> str:
        return GID.from_int(self._gid).gid


class AllocDmAttr:
    """``AllocDmAttr(length, log_align_req, comp_mask)``."""

    def __init__(self, length: int = 0, log_align_req: int = 0, comp_mask: int = 0) -> None:
        self.length = length
        self.log_align_req = log_align_req
        self.comp_mask = comp_mask


class DM:
    """Device memory: soft devices have none (``max_dm_size`` is 0), so allocation fails."""

    def __init__(self, ctx: Any, dm_init_attr: AllocDmAttr) -> None:
        raise PyverbsRDMAError(f"Failed to allocate device memory of size {dm_init_attr.length}. "
                               "Max available size 0.", errno.EOPNOTSUPP)


class Context(_dev.Context):
    """An open soft device, with all of pyverbs' ``Context`` queries."""

    def __init__(self, name: str | bytes | None = None, *, fabric: Any = None, **kwargs: Any) -> None:
        if kwargs.get("cmid") is not None:
            raise PyverbsUserError("rdmalab: Context(cmid=...) needs rdma-cm, which soft devices do not have")
        if kwargs.get("cmd_fd") is not None:
            # ibv_import_device: sharing a context between processes needs a kernel uverbs file.
            raise PyverbsRDMAError("Failed to import device: soft devices cannot be imported", errno.EOPNOTSUPP)
        super().__init__(name, fabric=fabric)
        self._cmd_fd = -1

    @property
    def cmd_fd(self) -> int:
        """A file descriptor standing for the uverbs command file soft devices do not have (on /dev/null).

        It can be dup'ed and closed like the real one; ``Context(cmd_fd=...)`` refuses it (EOPNOTSUPP).
        """
        if self._cmd_fd < 0:
            self._cmd_fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        return self._cmd_fd

    def close(self) -> None:
        if getattr(self, "_cmd_fd", -1) >= 0:
            os.close(self._cmd_fd)
            self._cmd_fd = -1
        super().close()

    @property
    def num_comp_vectors(self) -> int:
        return NUM_COMP_VECTORS

    def query_device(self) -> DeviceAttr:  # type: ignore[override]
        return DeviceAttr(super().query_device())

    def query_device_ex(self, ex_input: Any = None) -> DeviceAttrEx:
        return DeviceAttrEx(self.query_device())

    def query_port(self, port_num: int = 1) -> PortAttr:  # type: ignore[override]
        if port_num != 1:
            raise PyverbsRDMAError(f"Failed to query port {port_num}", errno.EINVAL)
        return PortAttr(super().query_port(port_num).active_mtu, GID_TBL_LEN)

    def query_gid(self, port_num: int, index: int) -> GID:
        """The GID at ``index``; an unused entry of the table reads as the zero GID (as rxe's sysfs does)."""
        if port_num != 1 or not 0 <= index < GID_TBL_LEN:
            raise PyverbsRDMAError(f"Failed to query gid {index} of port {port_num}", errno.EINVAL)
        gids = self.device.gids
        return GID.from_int(gids[index] if index < len(gids) else 0)

    def query_gid_type(self, port_num: int, index: int) -> int:
        if int(self.query_gid(port_num, index)) == 0:
            raise PyverbsRDMAError(f"Failed to query gid type of index {index}", errno.EINVAL)
        return int(e.IBV_GID_TYPE_SYSFS_ROCE_V2)

    def query_gid_ex(self, port_num: int, gid_index: int, flags: int = 0) -> GIDEntry:
        if port_num != 1 or gid_index < 0:
            raise PyverbsRDMAError(f"Failed to query gid table of port {port_num} in index {gid_index}",
                                   errno.EINVAL)
        if gid_index >= len(self.device.gids) or self.device.gids[gid_index] == 0:
            raise PyverbsRDMAError(f"Failed to query gid table of port {port_num} in index {gid_index}",
                                   errno.ENODATA)
        return self._entry(gid_index)

    def query_gid_table(self, max_entries: int, flags: int = 0) -> list[GIDEntry]:
        entries = [self._entry(i) for i, g in enumerate(self.device.gids) if g]
        if max_entries < len(entries):
            raise PyverbsRDMAError("Failed to query gid tables of the device", -errno.EINVAL)
        return entries

    def _entry(self, index: int) -> GIDEntry:
        return GIDEntry(self.device.gids[index], index, 1, int(e.IBV_GID_TYPE_ROCE_V2), 0)

    def query_rt_values_ex(self, comp_mask: int = 0) -> tuple[int, int]:
        raise PyverbsRDMAError("Failed to query real time values", errno.EOPNOTSUPP)


def phys_state_to_str(phys: int) -> str:
    names = {1: "Sleep", 2: "Polling", 3: "Disabled", 4: "Port configuration training", 5: "Link up",
             6: "Link error recovery", 7: "Phy test"}
    return f"{names[phys]} ({phys})" if phys in names else "Invalid physical state"


def width_to_str(width: int) -> str:
    names = {1: "1X", 2: "4X", 4: "8X", 16: "2X"}
    return f"{names[width]} ({width})" if width in names else "Invalid width"


def speed_to_str(speed: int) -> str:
    names = {0: "0.0 Gbps", 1: "2.5 Gbps", 2: "5.0 Gbps", 4: "5.0 Gbps", 8: "10.0 Gbps", 16: "14.0 Gbps",
             32: "25.0 Gbps", 64: "50.0 Gbps", 128: "100.0 Gbps"}
    return f"{names[speed]} ({speed})" if speed in names else "Invalid speed"


def translate_mtu(mtu: int) -> str:
    names = {1: "256", 2: "512", 3: "1024", 4: "2048", 5: "4096"}
    return f"{names[mtu]} ({mtu})" if mtu in names else "Invalid MTU"


def translate_link_layer(ll: int) -> str:
    names = {0: "Unspecified", 1: "InfiniBand", 2: "Ethernet"}
    return f"{names[ll]} ({ll})" if ll in names else "Invalid link layer"


def port_state_to_str(state: int) -> str:
    names = {0: "NOP", 1: "Down", 2: "Init", 3: "Armed", 4: "Active", 5: "Active defer"}
    return f"{names[state]} ({state})" if state in names else "Invalid port state"


def guid_to_hex(guid: int) -> str:
    h = f"{guid:016x}"
    return ":".join(h[i:i + 4] for i in range(0, 16, 4))


