"""Subnet Management Packets (SMPs) and the attributes a subnet manager reads and writes.

An SMP is a 256-byte MAD of class 0x01 (LID routed) or 0x81 (directed route) sent to QP0 on VL15
(IBA Vol 1 14.2.1).  After the 24-byte MAD common header (:class:`rdmalab.wire.mad.MADHeader`):

* directed route (14.2.1.2): M_Key (8), DrSLID (2), DrDLID (2), 28 reserved, 64 bytes of attribute
  data at offset 64, InitialPath (64) at 128, ReturnPath (64) at 192.  The common header's Status
  field is the D bit (1: returning) and a 15-bit status; its ClassSpecific field is the hop pointer
  (high byte) and hop count (low byte).
* LID routed (14.2.1.1): M_Key (8), 32 reserved, 64 bytes of data at offset 64, 128 reserved.

A directed route is a list of output ports: ``InitialPath[1..hop count]`` (``InitialPath[0]`` is
unused), each the port by which the SMP leaves the node it reached; hop count 0 is the local port.
With DrSLID and DrDLID both permissive (0xFFFF) the whole way is directed (14.2.2).

The attributes (14.2.5) are declared as :class:`~rdmalab.wire.header.Header` layouts, with the
Wireshark names of ``epan/dissectors/packet-infiniband.c`` (4.0): :class:`NodeInfo`,
:class:`SwitchInfo`, :class:`PortInfo`, :class:`SMInfo`, and the :class:`Notice` of a Trap
(13.4.8.2); NodeDescription is 64 bytes of text (:func:`node_description`,
:func:`node_description_data`), a LinearForwardingTable block 64 one-byte ports (:func:`lft_block`).
The other tables are blocks of equal entries, whose sizes are here: GUIDInfo 8 GUIDs
(14.2.5.5), P_KeyTable 32 P_Keys (14.2.5.7), SLtoVLMappingTable 16 four-bit VLs (14.2.5.8),
VLArbitrationTable 32 (VL, weight) byte pairs (14.2.5.9), MulticastForwardingTable 32 16-bit port
masks (14.2.5.12).

An agent that keeps an attribute as its 64 bytes reads and writes single fields in place with
:meth:`Header.get_field <rdmalab.wire.header.Header.get_field>` and ``set_field`` (e.g.
``PortInfo.set_field(data, "lid", 5)``), so that a Set changes only what it may change.  The
performance management class (PortCounters ...) is :mod:`rdmalab.wire.pma`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from rdmalab.wire.errors import EncodeError, MalformedError, TruncatedError
from rdmalab.wire.header import F, Header, Layout, layout
from rdmalab.wire.mad import (
    ATTR_NOTICE,
    MAD_HEADER_SIZE,
    MAD_SIZE,
    METHOD_GET,
    METHOD_GET_RESP,
    METHOD_SET,
    MGMT_CLASS_SM_DIRECTED_ROUTE,
    MGMT_CLASS_SM_LID_ROUTED,
    MADHeader,
    Report,
    attribute_name,
    method_name,
)

SMP_CLASS_VERSION = 1  # IBA Vol 1 14.2.1.1
SMP_DATA_OFFSET = 64
SMP_DATA_SIZE = 64
DR_INITIAL_PATH_OFFSET = 128
DR_RETURN_PATH_OFFSET = 192
DR_PATH_SIZE = 64
DR_MAX_HOPS = 63  # the paths are 64 bytes, byte 0 unused (14.2.1.2)
PERMISSIVE_LID = 0xFFFF  # IBA Vol 1 4.1.1 / 14.2.2

# ----------------------------------------------------------------- attribute IDs (14.2.5, table 145)
ATTR_NODE_DESCRIPTION = 0x0010
ATTR_NODE_INFO = 0x0011
ATTR_SWITCH_INFO = 0x0012
ATTR_GUID_INFO = 0x0014
ATTR_PORT_INFO = 0x0015
ATTR_PKEY_TABLE = 0x0016
ATTR_SL_TO_VL_TABLE = 0x0017
ATTR_VL_ARB_TABLE = 0x0018
ATTR_LINEAR_FORWARDING_TABLE = 0x0019
ATTR_RANDOM_FORWARDING_TABLE = 0x001A
ATTR_MULTICAST_FORWARDING_TABLE = 0x001B
ATTR_SM_INFO = 0x0020
ATTR_VENDOR_DIAG = 0x0030
ATTR_LED_INFO = 0x0031
ATTR_MLNX_EXT_PORT_INFO = 0xFF90  # Mellanox ExtendedPortInfo (vendor range), which ibsim answers too

# ----------------------------------------------------------------- values
NODE_TYPE_CA = 1  # NodeInfo.NodeType, 14.2.5.3
NODE_TYPE_SWITCH = 2
NODE_TYPE_ROUTER = 3
NODE_TYPE_NAMES = {NODE_TYPE_CA: "Channel Adapter", NODE_TYPE_SWITCH: "Switch", NODE_TYPE_ROUTER: "Router"}

PORT_STATE_NOP = 0  # PortInfo.PortState, 14.2.5.6: 0 in a Set means "no state change"
PORT_STATE_DOWN = 1
PORT_STATE_INIT = 2
PORT_STATE_ARMED = 3
PORT_STATE_ACTIVE = 4
PORT_STATE_NAMES = {0: "NoStateChange", 1: "Down", 2: "Initialize", 3: "Armed", 4: "Active"}
PHYS_STATE_LINKUP = 5  # PortInfo.PortPhysicalState

SM_STATE_NOT_ACTIVE = 0  # SMInfo.SMState, 14.2.5.13
SM_STATE_DISCOVERING = 1
SM_STATE_STANDBY = 2
SM_STATE_MASTER = 3
SM_STATE_NAMES = {0: "NotActive", 1: "Discovering", 2: "Standby", 3: "Master"}

CAPMASK_IS_SM = 1 << 1  # PortInfo.CapabilityMask, 14.2.5.6 table 146

LFT_BLOCK_SIZE = 64  # ports per LinearForwardingTable block (14.2.5.10)
LFT_NO_PORT = 0xFF  # an LFT entry meaning "no route"
NODE_DESCRIPTION_SIZE = 64  # 14.2.5.2
GUID_INFO_BLOCK_SIZE = 8  # GUIDs per GUIDInfo block (14.2.5.5)
PKEY_BLOCK_SIZE = 32  # P_Keys per P_KeyTable block (14.2.5.7)
SL2VL_TABLE_SIZE = 8  # 16 SLs, a 4-bit VL each (14.2.5.8)
VLARB_BLOCK_SIZE = 32  # (VL, weight) entries per VLArbitrationTable block (14.2.5.9)
MFT_BLOCK_SIZE = 32  # 16-bit port masks per MulticastForwardingTable block (14.2.5.12)
DEFAULT_PKEY = 0xFFFF  # the full-member default partition (10.9.1.2)


# ----------------------------------------------------------------- the SMP
@dataclass(frozen=True, slots=True)
class SMP:
    """One SMP, directed route (``directed``) or LID routed, as a whole 256-byte MAD.

    ``initial_path``/``return_path`` hold ports 1..hop count (``InitialPath[0]`` is not listed);
    ``hop_cnt`` is ``len(initial_path)`` unless given.  ``status`` is the 15-bit MAD status of a DR
    SMP (the D bit is ``direction``) or the whole 16-bit status of a LID-routed one.
    """

    method: int
    attr_id: int
    attr_mod: int = 0
    tid: int = 0
    data: bytes = b""
    directed: bool = True
    initial_path: tuple[int, ...] = ()
    return_path: tuple[int, ...] = ()
    hop_ptr: int = 0
    hop_cnt: int | None = None
    direction: int = 0
    status: int = 0
    m_key: int = 0
    dr_slid: int = PERMISSIVE_LID
    dr_dlid: int = PERMISSIVE_LID

    @property
    def hops(self) -> int:
        return len(self.initial_path) if self.hop_cnt is None else self.hop_cnt

    @property
    def mgmt_class(self) -> int:
        return MGMT_CLASS_SM_DIRECTED_ROUTE if self.directed else MGMT_CLASS_SM_LID_ROUTED

    @property
    def is_response(self) -> bool:
        return bool(self.method & 0x80)

    def header(self) -> MADHeader:
        if self.directed:
            status = (self.direction & 1) << 15 | (self.status & 0x7FFF)
            specific = (self.hop_ptr & 0xFF) << 8 | (self.hops & 0xFF)
        else:
            status, specific = self.status, 0
        return MADHeader(mgmt_class=self.mgmt_class, class_version=SMP_CLASS_VERSION, method=self.method,
                         status=status, class_specific=specific, tid=self.tid, attr_id=self.attr_id,
                         attr_mod=self.attr_mod)

    def encode(self) -> bytes:
        """The 256-byte MAD.  Raises :class:`EncodeError` for data over 64 bytes or a path over 63 hops."""
        if len(self.data) > SMP_DATA_SIZE:
            raise EncodeError("SMP", "data", len(self.data), f"at most {SMP_DATA_SIZE} bytes (IBA 14.2.1)")
        out = bytearray(MAD_SIZE)
        out[:MAD_HEADER_SIZE] = self.header().encode()
        out[24:32] = self.m_key.to_bytes(8, "big")
        if self.directed:
            for name, path in (("initial_path", self.initial_path), ("return_path", self.return_path)):
                if len(path) > DR_MAX_HOPS:
                    raise EncodeError("SMP", name, len(path), f"at most {DR_MAX_HOPS} hops (IBA 14.2.1.2)")
                if any(not 0 <= p <= 0xFF for p in path):
                    raise EncodeError("SMP", name, path, "ports 0..255")
            if not 0 <= self.hops <= DR_MAX_HOPS:
                raise EncodeError("SMP", "hop_cnt", self.hops, f"0..{DR_MAX_HOPS} (IBA 14.2.1.2)")
            out[32:34] = self.dr_slid.to_bytes(2, "big")
            out[34:36] = self.dr_dlid.to_bytes(2, "big")
            out[DR_INITIAL_PATH_OFFSET + 1:DR_INITIAL_PATH_OFFSET + 1 + len(self.initial_path)] = bytes(self.initial_path)
            out[DR_RETURN_PATH_OFFSET + 1:DR_RETURN_PATH_OFFSET + 1 + len(self.return_path)] = bytes(self.return_path)
        out[SMP_DATA_OFFSET:SMP_DATA_OFFSET + len(self.data)] = self.data
        return bytes(out)

    @classmethod
    def decode(cls, mad: bytes | bytearray | memoryview) -> SMP:
        """An SMP from a 256-byte MAD of class 0x01 or 0x81; anything else raises a
        :class:`~rdmalab.wire.errors.DecodeError` naming what was found."""
        raw = bytes(mad)
        if len(raw) < MAD_SIZE:
            raise TruncatedError("SMP", None, 0, len(raw), f"a {MAD_SIZE}-byte MAD (IBA 14.2.1)")
        hdr = MADHeader.decode(raw)
        if hdr.mgmt_class not in (MGMT_CLASS_SM_DIRECTED_ROUTE, MGMT_CLASS_SM_LID_ROUTED):
            raise MalformedError("SMP", "mgmt_class", 1, hdr.mgmt_class, "0x01 or 0x81 (a subnet management class)")
        data = raw[SMP_DATA_OFFSET:SMP_DATA_OFFSET + SMP_DATA_SIZE]
        m_key = int.from_bytes(raw[24:32], "big")
        if hdr.mgmt_class == MGMT_CLASS_SM_LID_ROUTED:
            return cls(hdr.method, hdr.attr_id, hdr.attr_mod, hdr.tid, data, directed=False, status=hdr.status,
                       m_key=m_key, hop_cnt=0)
        hops = hdr.class_specific & 0xFF
        if hops > DR_MAX_HOPS:
            raise MalformedError("SMP", "hop_cnt", 3, hops, f"0..{DR_MAX_HOPS} (IBA 14.2.1.2)")
        ip = raw[DR_INITIAL_PATH_OFFSET + 1:DR_INITIAL_PATH_OFFSET + 1 + hops]
        rp = raw[DR_RETURN_PATH_OFFSET + 1:DR_RETURN_PATH_OFFSET + 1 + hops]
        return cls(hdr.method, hdr.attr_id, hdr.attr_mod, hdr.tid, data, directed=True,
                   initial_path=tuple(ip), return_path=tuple(rp), hop_ptr=hdr.class_specific >> 8, hop_cnt=hops,
                   direction=hdr.status >> 15, status=hdr.status & 0x7FFF, m_key=m_key,
                   dr_slid=int.from_bytes(raw[32:34], "big"), dr_dlid=int.from_bytes(raw[34:36], "big"))

    def summary(self) -> str:
        """One line: ``DR Get NodeInfo path [1, 3] mod 0`` (``-> GetResp`` with a status if not 0)."""
        how = f"DR path {list(self.initial_path)}" if self.directed else "LID-routed"
        text = f"{method_name(self.method)} {attribute_name(self.mgmt_class, self.attr_id)} {how}"
        if self.attr_mod:
            text += f" mod 0x{self.attr_mod:x}"
        if self.status:
            text += f" status 0x{self.status:04x}"
        return text


def dr_get(attr_id: int, path: Sequence[int], attr_mod: int = 0, tid: int = 0) -> SMP:
    """A directed-route Get of ``attr_id`` along ``path`` (the output ports, hop by hop)."""
    return SMP(METHOD_GET, attr_id, attr_mod, tid, directed=True, initial_path=tuple(path))


def dr_set(attr_id: int, path: Sequence[int], data: bytes, attr_mod: int = 0, tid: int = 0) -> SMP:
    """A directed-route Set of ``attr_id`` with ``data`` along ``path``."""
    return SMP(METHOD_SET, attr_id, attr_mod, tid, data=data, directed=True, initial_path=tuple(path))


def lid_get(attr_id: int, attr_mod: int = 0, tid: int = 0) -> SMP:
    """A LID-routed Get of ``attr_id`` (the LRH's DLID says where it goes)."""
    return SMP(METHOD_GET, attr_id, attr_mod, tid, directed=False)


def get_response(request: SMP, data: bytes, status: int = 0) -> SMP:
    """The GetResp an agent sends back to a LID-routed (or directed) request, with ``data``."""
    return SMP(METHOD_GET_RESP, request.attr_id, request.attr_mod, request.tid, data=data,
               directed=request.directed, initial_path=request.initial_path, return_path=request.return_path,
               hop_ptr=request.hop_ptr, hop_cnt=request.hops, direction=1 if request.directed else 0,
               status=status, dr_slid=request.dr_slid, dr_dlid=request.dr_dlid)


# ----------------------------------------------------------------- attributes
def _pad(raw: bytes) -> bytes:
    return raw.ljust(SMP_DATA_SIZE, b"\0")


@dataclass(frozen=True, slots=True)
class NodeInfo(Header):
    """NodeInfo, IBA Vol 1 14.2.5.3 (40 bytes): what a node is and its GUIDs.  ``local_port_num``
    is the port the SMP entered by (a switch's port GUID is its node GUID)."""

    base_version: int = 1
    class_version: int = 1
    node_type: int = NODE_TYPE_CA
    num_ports: int = 1
    system_image_guid: int = 0
    node_guid: int = 0
    port_guid: int = 0
    partition_cap: int = 0
    device_id: int = 0
    revision: int = 0
    local_port_num: int = 0
    vendor_id: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "NodeInfo", "IBA Vol 1 14.2.5.3 (NodeInfo)",
        F("base_version", 8, "infiniband.nodeinfo.baseversion"),
        F("class_version", 8, "infiniband.nodeinfo.classversion"),
        F("node_type", 8, "infiniband.nodeinfo.nodetype", doc="1 CA, 2 switch, 3 router"),
        F("num_ports", 8, "infiniband.nodeinfo.numports"),
        F("system_image_guid", 64, "infiniband.nodeinfo.systemimageguid", fmt="hex"),
        F("node_guid", 64, "infiniband.nodeinfo.nodeguid", fmt="hex"),
        F("port_guid", 64, "infiniband.nodeinfo.portguid", fmt="hex"),
        F("partition_cap", 16, "infiniband.nodeinfo.partitioncap"),
        F("device_id", 16, "infiniband.nodeinfo.deviceid", fmt="hex"),
        F("revision", 32, "infiniband.nodeinfo.revision", fmt="hex"),
        F("local_port_num", 8, "infiniband.nodeinfo.localportnum"),
        F("vendor_id", 24, "infiniband.nodeinfo.vendorid", fmt="hex"),
        ws="infiniband.nodeinfo",
    )

    @property
    def is_switch(self) -> bool:
        return self.node_type == NODE_TYPE_SWITCH


@dataclass(frozen=True, slots=True)
class SwitchInfo(Header):
    """SwitchInfo, IBA Vol 1 14.2.5.4 (the first 17 bytes; the rest is reserved): the switch's
    forwarding-table capacities and LinearFDBTop, the highest LID its LFT holds."""

    linear_fdb_cap: int = 0
    random_fdb_cap: int = 0
    multicast_fdb_cap: int = 0
    linear_fdb_top: int = 0
    default_port: int = 0
    default_mcast_primary_port: int = 0
    default_mcast_not_primary_port: int = 0
    life_time_value: int = 0
    port_state_change: int = 0
    optimized_sl2vl: int = 0
    lids_per_port: int = 0
    partition_enforcement_cap: int = 0
    inbound_enforcement_cap: int = 0
    outbound_enforcement_cap: int = 0
    filter_raw_inbound_cap: int = 0
    filter_raw_outbound_cap: int = 0
    enhanced_port0: int = 0
    reserved: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "SwitchInfo", "IBA Vol 1 14.2.5.4 (SwitchInfo)",
        F("linear_fdb_cap", 16, "infiniband.switchinfo.linearfdbcap"),
        F("random_fdb_cap", 16, "infiniband.switchinfo.randomfdbcap"),
        F("multicast_fdb_cap", 16, "infiniband.switchinfo.multicastfdbcap"),
        F("linear_fdb_top", 16, "infiniband.switchinfo.linearfdbtop"),
        F("default_port", 8, "infiniband.switchinfo.defaultport"),
        F("default_mcast_primary_port", 8, "infiniband.switchinfo.defaultmulticastprimaryport"),
        F("default_mcast_not_primary_port", 8, "infiniband.switchinfo.defaultmulticastnotprimaryport"),
        F("life_time_value", 5, "infiniband.switchinfo.lifetimevalue"),
        F("port_state_change", 1, "infiniband.switchinfo.portstatechange"),
        F("optimized_sl2vl", 2, "infiniband.switchinfo.optimizedsltovlmappingprogramming"),
        F("lids_per_port", 16, "infiniband.switchinfo.lidsperport"),
        F("partition_enforcement_cap", 16, "infiniband.switchinfo.partitionenforcementcap"),
        F("inbound_enforcement_cap", 1, "infiniband.switchinfo.inboundenforcementcap"),
        F("outbound_enforcement_cap", 1, "infiniband.switchinfo.outboundenforcementcap"),
        F("filter_raw_inbound_cap", 1, "infiniband.switchinfo.filterrawinboundcap"),
        F("filter_raw_outbound_cap", 1, "infiniband.switchinfo.filterrawoutboundcap"),
        F("enhanced_port0", 1, "infiniband.switchinfo.enhancedportzero"),
        F("reserved", 3, None, reserved=True),
        ws="infiniband.switchinfo",
    )


@dataclass(frozen=True, slots=True)
class PortInfo(Header):
    """PortInfo, IBA Vol 1 14.2.5.6 (64 bytes): a port's LID, its master SM's LID, its state.

    A subnet manager reads it, changes LID, MasterSMLID and PortState (``PORT_STATE_NOP`` leaves the
    state alone) and writes it back with Set."""

    m_key: int = 0
    gid_prefix: int = 0
    lid: int = 0
    master_sm_lid: int = 0
    capability_mask: int = 0
    diag_code: int = 0
    m_key_lease_period: int = 0
    local_port_num: int = 0
    link_width_enabled: int = 0
    link_width_supported: int = 0
    link_width_active: int = 0
    link_speed_supported: int = 0
    port_state: int = 0
    port_phys_state: int = 0
    link_down_default_state: int = 0
    m_key_protect_bits: int = 0
    reserved1: int = 0
    lmc: int = 0
    link_speed_active: int = 0
    link_speed_enabled: int = 0
    neighbor_mtu: int = 0
    master_sm_sl: int = 0
    vl_cap: int = 0
    init_type: int = 0
    vl_high_limit: int = 0
    vl_arb_high_cap: int = 0
    vl_arb_low_cap: int = 0
    init_type_reply: int = 0
    mtu_cap: int = 0
    vl_stall_count: int = 0
    hoq_life: int = 0
    operational_vls: int = 0
    partition_enforcement_inbound: int = 0
    partition_enforcement_outbound: int = 0
    filter_raw_inbound: int = 0
    filter_raw_outbound: int = 0
    m_key_violations: int = 0
    p_key_violations: int = 0
    q_key_violations: int = 0
    guid_cap: int = 0
    client_reregister: int = 0
    reserved2: int = 0
    subnet_timeout: int = 0
    reserved3: int = 0
    resp_time_value: int = 0
    local_phy_errors: int = 0
    overrun_errors: int = 0
    max_credit_hint: int = 0
    reserved4: int = 0
    link_round_trip_latency: int = 0
    capability_mask2: int = 0
    link_speed_ext_active: int = 0
    link_speed_ext_supported: int = 0
    reserved5: int = 0
    link_speed_ext_enabled: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "PortInfo", "IBA Vol 1 14.2.5.6 (PortInfo)",
        F("m_key", 64, "infiniband.portinfo.m_key", fmt="hex"),
        F("gid_prefix", 64, "infiniband.portinfo.guid", fmt="hex", doc="GidPrefix"),
        F("lid", 16, "infiniband.portinfo.lid"),
        F("master_sm_lid", 16, "infiniband.portinfo.mastersmlid"),
        F("capability_mask", 32, "infiniband.portinfo.capabilitymask", fmt="hex"),
        F("diag_code", 16, "infiniband.portinfo.diagcode", fmt="hex"),
        F("m_key_lease_period", 16, "infiniband.portinfo.m_keyleaseperiod"),
        F("local_port_num", 8, "infiniband.portinfo.localportnum"),
        F("link_width_enabled", 8, "infiniband.portinfo.linkwidthenabled"),
        F("link_width_supported", 8, "infiniband.portinfo.linkwidthsupported"),
        F("link_width_active", 8, "infiniband.portinfo.linkwidthactive"),
        F("link_speed_supported", 4, "infiniband.portinfo.linkspeedsupported"),
        F("port_state", 4, "infiniband.portinfo.portstate", doc="1 Down, 2 Init, 3 Armed, 4 Active"),
        F("port_phys_state", 4, "infiniband.portinfo.portphysicalstate"),
        F("link_down_default_state", 4, "infiniband.portinfo.linkdowndefaultstate"),
        F("m_key_protect_bits", 2, "infiniband.portinfo.m_keyprotectbits"),
        F("reserved1", 3, None, reserved=True),
        F("lmc", 3, "infiniband.portinfo.lmc"),
        F("link_speed_active", 4, "infiniband.portinfo.linkspeedactive"),
        F("link_speed_enabled", 4, "infiniband.portinfo.linkspeedenabled"),
        F("neighbor_mtu", 4, "infiniband.portinfo.neighbormtu"),
        F("master_sm_sl", 4, "infiniband.portinfo.mastersmsl"),
        F("vl_cap", 4, "infiniband.portinfo.vlcap"),
        F("init_type", 4, "infiniband.portinfo.inittype"),
        F("vl_high_limit", 8, "infiniband.portinfo.vlhighlimit"),
        F("vl_arb_high_cap", 8, "infiniband.portinfo.vlarbitrationhighcap"),
        F("vl_arb_low_cap", 8, "infiniband.portinfo.vlarbitrationlowcap"),
        F("init_type_reply", 4, "infiniband.portinfo.inittypereply"),
        F("mtu_cap", 4, "infiniband.portinfo.mtucap"),
        F("vl_stall_count", 3, "infiniband.portinfo.vlstallcount"),
        F("hoq_life", 5, "infiniband.portinfo.hoqlife"),
        F("operational_vls", 4, "infiniband.portinfo.operationalvls"),
        F("partition_enforcement_inbound", 1, "infiniband.portinfo.partitionenforcementinbound"),
        F("partition_enforcement_outbound", 1, "infiniband.portinfo.partitionenforcementoutbound"),
        F("filter_raw_inbound", 1, "infiniband.portinfo.filterrawinbound"),
        F("filter_raw_outbound", 1, "infiniband.portinfo.filterrawoutbound"),
        F("m_key_violations", 16, "infiniband.portinfo.m_keyviolations"),
        F("p_key_violations", 16, "infiniband.portinfo.p_keyviolations"),
        F("q_key_violations", 16, "infiniband.portinfo.q_keyviolations"),
        F("guid_cap", 8, "infiniband.portinfo.guidcap"),
        F("client_reregister", 1, "infiniband.portinfo.clientreregister"),
        F("reserved2", 2, None, reserved=True),
        F("subnet_timeout", 5, "infiniband.portinfo.subnettimeout"),
        F("reserved3", 3, None, reserved=True),
        F("resp_time_value", 5, "infiniband.portinfo.resptimevalue"),
        F("local_phy_errors", 4, "infiniband.portinfo.localphyerrors"),
        F("overrun_errors", 4, "infiniband.portinfo.overrunerrors"),
        F("max_credit_hint", 16, "infiniband.portinfo.maxcredithint"),
        F("reserved4", 8, None, reserved=True),
        F("link_round_trip_latency", 24, "infiniband.portinfo.linkroundtriplatency"),
        F("capability_mask2", 16, None, fmt="hex"),
        F("link_speed_ext_active", 4, None),
        F("link_speed_ext_supported", 4, None),
        F("reserved5", 3, None, reserved=True),
        F("link_speed_ext_enabled", 5, None),
        ws="infiniband.portinfo",
    )

    @property
    def state_name(self) -> str:
        return PORT_STATE_NAMES.get(self.port_state, f"state {self.port_state}")


@dataclass(frozen=True, slots=True)
class SMInfo(Header):
    """SMInfo, IBA Vol 1 14.2.5.13 (21 bytes): who the SM is (port GUID), its priority and state."""

    guid: int = 0
    sm_key: int = 0
    act_count: int = 0
    priority: int = 0
    sm_state: int = SM_STATE_NOT_ACTIVE

    LAYOUT: ClassVar[Layout] = layout(
        "SMInfo", "IBA Vol 1 14.2.5.13 (SMInfo)",
        F("guid", 64, "infiniband.sminfo.guid", fmt="hex"),
        F("sm_key", 64, "infiniband.sminfo.sm_key", fmt="hex"),
        F("act_count", 32, "infiniband.sminfo.actcount"),
        F("priority", 4, "infiniband.sminfo.priority"),
        F("sm_state", 4, "infiniband.sminfo.smstate", doc="0 NotActive, 1 Discovering, 2 Standby, 3 Master"),
        ws="infiniband.sminfo",
    )


@dataclass(frozen=True, slots=True)
class Notice(Header):
    """Notice, IBA Vol 1 13.4.8.2, as an SMP Trap carries it (the first 64 bytes: the IssuerGID
    after them does not fit SMP data).  A generic notice's ``producer_type`` is the node type and
    ``trap_number`` which trap (144: a port's capability mask, width or speed changed); DataDetails
    depend on the trap (14.2.5.1)."""

    is_generic: int = 1
    type: int = 0
    producer_type: int = 0
    trap_number: int = 0
    issuer_lid: int = 0
    notice_toggle: int = 0
    notice_count: int = 0
    data_details: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "Notice", "IBA Vol 1 13.4.8.2 (Notice)",
        F("is_generic", 1, "infiniband.notice.isgeneric"),
        F("type", 7, "infiniband.notice.type"),
        F("producer_type", 24, "infiniband.notice.producertypevendorid", fmt="hex"),
        F("trap_number", 16, "infiniband.notice.trapnumberdeviceid"),
        F("issuer_lid", 16, "infiniband.notice.issuerlid"),
        F("notice_toggle", 1, "infiniband.notice.noticetoggle"),
        F("notice_count", 15, "infiniband.notice.noticecount"),
        F("data_details", 432, "infiniband.notice.datadetails", fmt="bytes", doc="54 bytes, per trap"),
        ws="infiniband.notice",
    )


def attribute_data(attr: Header) -> bytes:
    """An attribute's bytes padded to the 64 bytes of SMP data."""
    return _pad(attr.encode())


def node_description(data: bytes) -> str:
    """NodeDescription (14.2.5.2): 64 bytes of UTF-8 text, NUL-padded."""
    return bytes(data[:SMP_DATA_SIZE]).split(b"\0", 1)[0].decode("utf-8", "replace")


def node_description_data(text: str) -> bytes:
    """NodeDescription's 64 bytes for ``text`` (UTF-8, NUL-padded); :class:`EncodeError` when longer."""
    raw = text.encode()
    if len(raw) > NODE_DESCRIPTION_SIZE:
        raise EncodeError("NodeDescription", "text", text, f"at most {NODE_DESCRIPTION_SIZE} bytes of UTF-8 "
                          "(IBA 14.2.5.2)")
    return raw.ljust(NODE_DESCRIPTION_SIZE, b"\0")


def lft_block(ports: Sequence[int]) -> bytes:
    """A LinearForwardingTable block (14.2.5.10): up to 64 output ports, the rest "no port" (0xFF)."""
    if len(ports) > LFT_BLOCK_SIZE:
        raise EncodeError("LinearForwardingTable", "ports", len(ports), f"at most {LFT_BLOCK_SIZE} entries")
    if any(not 0 <= p <= 0xFF for p in ports):
        raise EncodeError("LinearForwardingTable", "ports", list(ports), "ports 0..255")
    return bytes(ports).ljust(LFT_BLOCK_SIZE, bytes([LFT_NO_PORT]))


# ----------------------------------------------------------------- decoding SMPs in packets
@dataclass(frozen=True, slots=True)
class SMPDirectedFields(Header):
    """What a directed-route SMP carries between the MAD header and the data (IBA 14.2.1.2)."""

    m_key: int = 0
    dr_slid: int = PERMISSIVE_LID
    dr_dlid: int = PERMISSIVE_LID
    reserved: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "SMP (directed route)", "IBA Vol 1 14.2.1.2 (directed route SMP)",
        F("m_key", 64, "infiniband.smplid.mkey", fmt="hex"),  # Wireshark 4.0 names it under smplid for both
        F("dr_slid", 16, "infiniband.smpdirected.drslid", fmt="hex"),
        F("dr_dlid", 16, "infiniband.smpdirected.drdlid", fmt="hex"),
        F("reserved", 224, None, fmt="bytes", reserved=True),
        ws="infiniband.smpdirected",
    )


@dataclass(frozen=True, slots=True)
class SMPLIDFields(Header):
    """What a LID-routed SMP carries between the MAD header and the data (IBA 14.2.1.1)."""

    m_key: int = 0
    reserved: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "SMP (LID routed)", "IBA Vol 1 14.2.1.1 (LID routed SMP)",
        F("m_key", 64, "infiniband.smplid.mkey", fmt="hex"),
        F("reserved", 256, None, fmt="bytes", reserved=True),
        ws="infiniband.smplid",
    )


@dataclass(frozen=True, slots=True)
class SMPPaths(Header):
    """A directed-route SMP's InitialPath and ReturnPath (64 bytes each, byte 0 unused)."""

    initial_path: int = 0
    return_path: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "SMP paths", "IBA Vol 1 14.2.1.2 (InitialPath, ReturnPath)",
        F("initial_path", 512, "infiniband.smpdirected.initialpath", fmt="bytes"),
        F("return_path", 512, "infiniband.smpdirected.returnpath", fmt="bytes"),
        ws="infiniband.smpdirected",  # Wireshark shows them in the directed-route SMP's subtree
    )


#: the attributes decoded inside SMPs (the others stay undecoded data)
SMP_ATTRIBUTES: dict[int, type[Header]] = {
    ATTR_NODE_INFO: NodeInfo, ATTR_SWITCH_INFO: SwitchInfo, ATTR_PORT_INFO: PortInfo, ATTR_SM_INFO: SMInfo,
    ATTR_NOTICE: Notice,
}
_FIELDS_SIZE = SMP_DATA_OFFSET - MAD_HEADER_SIZE  # 40


def decode_smp_layers(mad: MADHeader, data: bytes, pos: int, end: int,
                      report: Report) -> tuple[list[tuple[Header, int]], int]:
    """An SMP's layers after its MAD header at ``pos``: the SMP fields, the attribute (when it is
    one of :data:`SMP_ATTRIBUTES`) and, directed route, the paths.  Returns them with where the
    undecoded rest begins; a short SMP is reported, not raised (the ``ClassDecoder`` contract of
    :func:`rdmalab.wire.mad.decode_mad_layers`)."""
    if end - pos < MAD_SIZE - MAD_HEADER_SIZE:
        report(TruncatedError("SMP", None, pos, max(0, end - pos), f"{MAD_SIZE - MAD_HEADER_SIZE} bytes of SMP "
                              "after the MAD header", detail="IBA Vol 1 14.2.1"))
        return [], pos
    directed = mad.mgmt_class == MGMT_CLASS_SM_DIRECTED_ROUTE
    fields: Header = SMPDirectedFields.decode(data, pos) if directed else SMPLIDFields.decode(data, pos)
    out: list[tuple[Header, int]] = [(fields, pos)]
    at = pos + _FIELDS_SIZE
    rest = at
    attr = SMP_ATTRIBUTES.get(mad.attr_id)
    if attr is not None:
        out.append((attr.decode(data, at), at))
        rest = at + attr.LAYOUT.size
    if directed:
        paths = pos + DR_INITIAL_PATH_OFFSET - MAD_HEADER_SIZE
        out.append((SMPPaths.decode(data, paths), paths))
        rest = pos + MAD_SIZE - MAD_HEADER_SIZE
    return out, rest
