"""Subnet management packets (SMPs) and the attributes a subnet management agent answers, and PortCounters.

An SMP is a 256-byte MAD of class 0x01 (LID-routed) or 0x81 (directed route) sent to QP0 (IBA Vol 1
14.2.1).  After the 24-byte common MAD header (:mod:`rdmalab.wire.mad`) both carry an 8-byte M_Key; a
LID-routed SMP then has 32 reserved bytes, a directed-route one the DR SLID and DR DLID and 28 reserved
bytes; the 64-byte attribute data starts at byte 64 in both; a directed-route SMP ends with the initial
path and the return path, 64 bytes each (IBA 14.2.1.1, 14.2.1.2).  In a directed-route SMP the common
header's Status word is the D bit (direction: 1 on the way back) and a 15-bit status, and the
ClassSpecific word is the hop pointer and hop count (IBA 14.2.1.2).

The attributes are laid out as the IBA draws them, as fields of a bit offset and width in big-endian order
(:class:`AttrLayout`): NodeInfo (14.2.5.3), NodeDescription (14.2.5.2), SwitchInfo (14.2.5.4), GUIDInfo
(14.2.5.5), PortInfo (14.2.5.6), P_KeyTable (14.2.5.7), SLtoVLMappingTable (14.2.5.8),
VLArbitrationTable (14.2.5.9), LinearForwardingTable (14.2.5.10), MulticastForwardingTable
(14.2.5.12), SMInfo (14.2.5.13); and the performance class's PortCounters (IBA 16.1.3.5), whose MAD has
40 reserved bytes after the common header, so that its data starts at byte 64 too (16.1.1).

A layout reads and writes fields of a ``bytearray`` in place (``get``/``set``), so that an agent keeps an
attribute as its 64 bytes and a Set changes only what it may change, and it decodes and encodes a whole
attribute as a ``dict`` (``decode``/``encode``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rdmalab.wire.errors import EncodeError, MalformedError, TruncatedError
from rdmalab.wire.mad import MAD_SIZE, MGMT_CLASS_PERF, MGMT_CLASS_SM_DIRECTED_ROUTE, MGMT_CLASS_SM_LID_ROUTED

SMP_DATA_OFFSET = 64  # IBA 14.2.1.1/14.2.1.2: SMP data (64 bytes) at byte 64
SMP_DATA_SIZE = 64
PMA_DATA_OFFSET = 64  # IBA 16.1.1: 24-byte header + 40 reserved
PMA_DATA_SIZE = 192
DR_INITIAL_PATH_OFFSET = 128
DR_RETURN_PATH_OFFSET = 192
DR_PATH_SIZE = 64
DR_MAX_HOPS = 63  # IBA 14.2.1.2: the paths hold hops 1..63
PERMISSIVE_LID = 0xFFFF

# SMP attribute IDs, IBA Vol 1 14.2.5 (table 145)
ATTR_NOTICE = 0x0002
ATTR_NODE_DESCRIPTION = 0x0010
ATTR_NODE_INFO = 0x0011
ATTR_SWITCH_INFO = 0x0012
ATTR_GUID_INFO = 0x0014
ATTR_PORT_INFO = 0x0015
ATTR_P_KEY_TABLE = 0x0016
ATTR_SL_TO_VL_TABLE = 0x0017
ATTR_VL_ARBITRATION = 0x0018
ATTR_LINEAR_FORWARDING_TABLE = 0x0019
ATTR_RANDOM_FORWARDING_TABLE = 0x001A
ATTR_MULTICAST_FORWARDING_TABLE = 0x001B
ATTR_SM_INFO = 0x0020
ATTR_VENDOR_DIAG = 0x0030
ATTR_LED_INFO = 0x0031
ATTR_MLNX_EXT_PORT_INFO = 0xFF90  # Mellanox ExtendedPortInfo (vendor range), which ibsim also answers

# Performance management attribute IDs, IBA Vol 1 16.1.2 (table 226)
ATTR_CLASS_PORT_INFO = 0x0001
ATTR_PORT_SAMPLES_CONTROL = 0x0010
ATTR_PORT_SAMPLES_RESULT = 0x0011
ATTR_PORT_COUNTERS = 0x0012
ATTR_PORT_RCV_ERROR_DETAILS = 0x0015
ATTR_PORT_XMIT_DISCARD_DETAILS = 0x0016
ATTR_PORT_OP_RCV_COUNTERS = 0x0017
ATTR_PORT_FLOW_CTL_COUNTERS = 0x0018
ATTR_PORT_VL_OP_PACKETS = 0x0019
ATTR_PORT_VL_OP_DATA = 0x001A
ATTR_PORT_VL_XMIT_FLOW_CTL_UPDATE_ERRORS = 0x001B
ATTR_PORT_VL_XMIT_WAIT_COUNTERS = 0x001C
ATTR_PORT_COUNTERS_EXTENDED = 0x001D

# MAD status codes, IBA Vol 1 13.4.7 (table 119): the invalid-field code sits in bits 2-4
STATUS_BAD_VERSION = 1 << 2
STATUS_METHOD_UNSUPPORTED = 2 << 2
STATUS_METHOD_ATTR_UNSUPPORTED = 3 << 2
STATUS_INVALID_VALUE = 7 << 2

# Port states (PortInfo.PortState, IBA 14.2.5.6 table 148) and physical states
PORT_STATE_NAMES = {0: "NoChange", 1: "Down", 2: "Init", 3: "Armed", 4: "Active"}
PHYS_STATE_NAMES = {0: "NoChange", 1: "Sleep", 2: "Polling", 3: "Disabled", 4: "PortConfigurationTraining",
                    5: "LinkUp", 6: "LinkErrorRecovery", 7: "PhyTest"}

# NodeInfo.NodeType, IBA 14.2.5.3
NODE_TYPE_CA = 1
NODE_TYPE_SWITCH = 2
NODE_TYPE_ROUTER = 3


@dataclass(frozen=True, slots=True)
class Field:
    """One field of an attribute: its bit offset from the attribute's first bit (as the IBA numbers them,
    most significant first) and its width in bits."""

    name: str
    offset: int
    bits: int


class AttrLayout:
    """An attribute's fields, read and written in place in a big-endian byte buffer."""

    def __init__(self, name: str, spec: str, size: int, fields: list[Field]) -> None:
        self.name = name
        self.spec = spec
        self.size = size
        self.fields: dict[str, Field] = {}
        for f in fields:
            if f.offset + f.bits > size * 8:
                raise ValueError(f"{name}.{f.name} ends past {size} bytes")
            self.fields[f.name] = f

    def _span(self, f: Field) -> tuple[int, int, int]:
        first = f.offset // 8
        last = (f.offset + f.bits - 1) // 8
        shift = (last + 1) * 8 - (f.offset + f.bits)
        return first, last + 1, shift

    def get(self, buf: bytes | bytearray | memoryview, name: str, base: int = 0) -> int:
        f = self.fields[name]
        first, end, shift = self._span(f)
        if base + end > len(buf):
            raise TruncatedError(self.name, name, base + first, len(buf) - base, f"{self.size} bytes ({self.spec})")
        word = int.from_bytes(buf[base + first:base + end], "big")
        return (word >> shift) & ((1 << f.bits) - 1)

    def set(self, buf: bytearray, name: str, value: int, base: int = 0) -> None:
        f = self.fields[name]
        if not 0 <= value < 1 << f.bits:
            raise EncodeError(self.name, name, value, f"an unsigned {f.bits}-bit integer ({self.spec})")
        first, end, shift = self._span(f)
        mask = ((1 << f.bits) - 1) << shift
        word = int.from_bytes(buf[base + first:base + end], "big")
        word = (word & ~mask) | (value << shift)
        buf[base + first:base + end] = word.to_bytes(end - first, "big")

    def decode(self, buf: bytes | bytearray | memoryview, base: int = 0) -> dict[str, int]:
        if len(buf) - base < self.size:
            raise TruncatedError(self.name, None, base, len(buf) - base, f"{self.size} bytes ({self.spec})")
        return {name: self.get(buf, name, base) for name in self.fields}

    def encode(self, values: Mapping[str, int] | None = None, size: int | None = None, **kw: int) -> bytes:
        """The attribute with ``values`` (and keywords) set and every other bit 0, padded to ``size``
        (default: the attribute's size)."""
        buf = bytearray(max(self.size, size or 0))
        for name, v in {**(values or {}), **kw}.items():
            if name not in self.fields:
                raise EncodeError(self.name, name, v, f"a field of {self.name}")
            self.set(buf, name, v)
        return bytes(buf)


def _layout(name: str, spec: str, size: int, *widths: tuple[str, int]) -> AttrLayout:
    """Fields given in order with their widths (``None``-named gaps are reserved bits)."""
    fields = []
    off = 0
    for fname, bits in widths:
        if not fname.startswith("_"):
            fields.append(Field(fname, off, bits))
        off += bits
    return AttrLayout(name, spec, size, fields)


# ---------------------------------------------------------------------- the MAD and SMP headers
SMP_HEADER = _layout(
    "SMP", "IBA Vol 1 14.2.1.1/14.2.1.2 (SMP format)", 64,
    ("base_version", 8), ("mgmt_class", 8), ("class_version", 8), ("method", 8),
    ("status", 16), ("class_specific", 16), ("tid", 64), ("attr_id", 16), ("_r0", 16), ("attr_mod", 32),
    ("m_key", 64),
)
DR_SMP_HEADER = _layout(
    "DR SMP", "IBA Vol 1 14.2.1.2 (directed route SMP format)", 64,
    ("base_version", 8), ("mgmt_class", 8), ("class_version", 8), ("method", 8),
    ("direction", 1), ("status", 15), ("hop_pointer", 8), ("hop_count", 8), ("tid", 64), ("attr_id", 16),
    ("_r0", 16), ("attr_mod", 32), ("m_key", 64), ("dr_slid", 16), ("dr_dlid", 16),
)

# ---------------------------------------------------------------------- SMA attributes
NODE_DESCRIPTION_SIZE = 64  # IBA 14.2.5.2: 64 bytes of UTF-8, NUL-padded

NODE_INFO = _layout(
    "NodeInfo", "IBA Vol 1 14.2.5.3", 40,
    ("base_version", 8), ("class_version", 8), ("node_type", 8), ("num_ports", 8),
    ("system_image_guid", 64), ("node_guid", 64), ("port_guid", 64), ("partition_cap", 16),
    ("device_id", 16), ("revision", 32), ("local_port_num", 8), ("vendor_id", 24),
)

SWITCH_INFO = _layout(
    "SwitchInfo", "IBA Vol 1 14.2.5.4", 24,
    ("linear_fdb_cap", 16), ("random_fdb_cap", 16), ("multicast_fdb_cap", 16), ("linear_fdb_top", 16),
    ("default_port", 8), ("default_mcast_primary_port", 8), ("default_mcast_not_primary_port", 8),
    ("life_time_value", 5), ("port_state_change", 1), ("optimized_sl2vl_programming", 2),
    ("lids_per_port", 16), ("partition_enforcement_cap", 16), ("inbound_enforcement_cap", 1),
    ("outbound_enforcement_cap", 1), ("filter_raw_inbound_cap", 1), ("filter_raw_outbound_cap", 1),
    ("enhanced_port0", 1), ("_r0", 3), ("multicast_fdb_top", 16),
)

GUID_INFO_BLOCK = 8  # GUIDs per GUIDInfo block, IBA 14.2.5.5

PORT_INFO = _layout(
    "PortInfo", "IBA Vol 1 14.2.5.6 (table 146)", 64,
    ("m_key", 64), ("gid_prefix", 64), ("lid", 16), ("master_sm_lid", 16), ("capability_mask", 32),
    ("diag_code", 16), ("m_key_lease_period", 16), ("local_port_num", 8), ("link_width_enabled", 8),
    ("link_width_supported", 8), ("link_width_active", 8), ("link_speed_supported", 4), ("port_state", 4),
    ("port_phys_state", 4), ("link_down_default_state", 4), ("m_key_protect_bits", 2), ("_r0", 3), ("lmc", 3),
    ("link_speed_active", 4), ("link_speed_enabled", 4), ("neighbor_mtu", 4), ("master_sm_sl", 4),
    ("vl_cap", 4), ("init_type", 4), ("vl_high_limit", 8), ("vl_arbitration_high_cap", 8),
    ("vl_arbitration_low_cap", 8), ("init_type_reply", 4), ("mtu_cap", 4), ("vl_stall_count", 3),
    ("hoq_life", 5), ("operational_vls", 4), ("partition_enforcement_inbound", 1),
    ("partition_enforcement_outbound", 1), ("filter_raw_inbound", 1), ("filter_raw_outbound", 1),
    ("m_key_violations", 16), ("p_key_violations", 16), ("q_key_violations", 16), ("guid_cap", 8),
    ("client_reregister", 1), ("mcast_pkey_trap_suppression", 2), ("subnet_timeout", 5), ("_r1", 3),
    ("resp_time_value", 5), ("local_phy_errors", 4), ("overrun_errors", 4), ("max_credit_hint", 16),
    ("_r2", 8), ("link_round_trip_latency", 24), ("capability_mask2", 16), ("link_speed_ext_active", 4),
    ("link_speed_ext_supported", 4), ("_r3", 3), ("link_speed_ext_enabled", 5),
)

P_KEY_BLOCK = 32  # P_Keys per P_KeyTable block, IBA 14.2.5.7
LFT_BLOCK = 64  # ports per LinearForwardingTable block, IBA 14.2.5.10
MFT_BLOCK = 32  # 16-bit port masks per MulticastForwardingTable block, IBA 14.2.5.12
VLARB_BLOCK = 32  # (VL, weight) entries per VLArbitrationTable block, IBA 14.2.5.9

SM_INFO = _layout(
    "SMInfo", "IBA Vol 1 14.2.5.13", 24,
    ("guid", 64), ("sm_key", 64), ("act_count", 32), ("priority", 4), ("sm_state", 4),
)
SM_STATE_NAMES = {0: "NotActive", 1: "Discovering", 2: "Standby", 3: "Master"}

NOTICE = _layout(
    "Notice", "IBA Vol 1 13.4.8.2 (Notice)", 64,
    ("is_generic", 1), ("type", 7), ("producer_type", 24), ("trap_number", 16), ("issuer_lid", 16),
    ("notice_toggle", 1), ("notice_count", 15),
)

# ---------------------------------------------------------------------- performance management
CLASS_PORT_INFO = _layout(
    "ClassPortInfo", "IBA Vol 1 13.4.8.1", 72,
    ("base_version", 8), ("class_version", 8), ("capability_mask", 16), ("capability_mask2", 27),
    ("resp_time_value", 5),
)

PORT_COUNTERS = _layout(
    "PortCounters", "IBA Vol 1 16.1.3.5 (table 247)", 44,
    ("_r0", 8), ("port_select", 8), ("counter_select", 16), ("symbol_error_counter", 16),
    ("link_error_recovery_counter", 8), ("link_downed_counter", 8), ("port_rcv_errors", 16),
    ("port_rcv_remote_physical_errors", 16), ("port_rcv_switch_relay_errors", 16), ("port_xmit_discards", 16),
    ("port_xmit_constraint_errors", 8), ("port_rcv_constraint_errors", 8), ("counter_select2", 8),
    ("local_link_integrity_errors", 4), ("excessive_buffer_overrun_errors", 4), ("qp1_dropped", 16),
    ("vl15_dropped", 16), ("port_xmit_data", 32), ("port_rcv_data", 32), ("port_xmit_pkts", 32),
    ("port_rcv_pkts", 32), ("port_xmit_wait", 32),
)

# PortCounters.CounterSelect bits, IBA 16.1.3.5 (table 248), in field order
COUNTER_SELECT_BITS = (
    "symbol_error_counter", "link_error_recovery_counter", "link_downed_counter", "port_rcv_errors",
    "port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors", "port_xmit_discards",
    "port_xmit_constraint_errors", "port_rcv_constraint_errors", "local_link_integrity_errors",
    "excessive_buffer_overrun_errors", "vl15_dropped", "port_xmit_data", "port_rcv_data", "port_xmit_pkts",
    "port_rcv_pkts", "port_xmit_wait",
)

ATTRIBUTE_LAYOUTS: dict[int, AttrLayout] = {
    ATTR_NODE_INFO: NODE_INFO, ATTR_SWITCH_INFO: SWITCH_INFO, ATTR_PORT_INFO: PORT_INFO, ATTR_SM_INFO: SM_INFO,
}


# ---------------------------------------------------------------------- an SMP as a whole
def is_directed_route(mad: bytes | bytearray) -> bool:
    return len(mad) > 1 and mad[1] == MGMT_CLASS_SM_DIRECTED_ROUTE


@dataclass(frozen=True, slots=True)
class SMP:
    """A subnet management packet, LID-routed or directed route, decoded.

    ``initial_path``/``return_path`` are the 64-byte path fields as port numbers (entry 0 is unused, hops
    1..hop_count follow, IBA 14.2.2); ``data`` is the 64-byte attribute data."""

    mgmt_class: int
    method: int
    tid: int
    attr_id: int
    attr_mod: int = 0
    status: int = 0
    class_version: int = 1
    m_key: int = 0
    data: bytes = bytes(SMP_DATA_SIZE)
    direction: int = 0
    hop_pointer: int = 0
    hop_count: int = 0
    dr_slid: int = PERMISSIVE_LID
    dr_dlid: int = PERMISSIVE_LID
    initial_path: tuple[int, ...] = ()
    return_path: tuple[int, ...] = ()

    @property
    def directed(self) -> bool:
        return self.mgmt_class == MGMT_CLASS_SM_DIRECTED_ROUTE

    @classmethod
    def get(cls, attr_id: int, attr_mod: int = 0, *, tid: int = 0, path: tuple[int, ...] | None = None,
            data: bytes = b"", method: int = 0x01) -> SMP:
        """A Get (or, with ``method=2``, a Set): LID-routed, or directed route along ``path`` (the out ports
        of hops 1..n; ``()`` is the local port itself)."""
        if path is None:
            return cls(MGMT_CLASS_SM_LID_ROUTED, method, tid, attr_id, attr_mod, data=data.ljust(SMP_DATA_SIZE, b"\0"))
        if len(path) > DR_MAX_HOPS:
            raise EncodeError("DR SMP", "hop_count", len(path), f"at most {DR_MAX_HOPS} hops (IBA 14.2.1.2)")
        return cls(MGMT_CLASS_SM_DIRECTED_ROUTE, method, tid, attr_id, attr_mod,
                   data=data.ljust(SMP_DATA_SIZE, b"\0"), hop_count=len(path), initial_path=(0, *path),
                   return_path=(0,) * (len(path) + 1))

    def encode(self) -> bytes:
        buf = bytearray(MAD_SIZE)
        hdr = DR_SMP_HEADER if self.directed else SMP_HEADER
        hdr.set(buf, "base_version", 1)
        for name in ("mgmt_class", "class_version", "method", "tid", "attr_id", "attr_mod", "m_key", "status"):
            hdr.set(buf, name, getattr(self, name))
        if self.directed:
            for name in ("direction", "hop_pointer", "hop_count", "dr_slid", "dr_dlid"):
                hdr.set(buf, name, getattr(self, name))
            for off, path in ((DR_INITIAL_PATH_OFFSET, self.initial_path), (DR_RETURN_PATH_OFFSET, self.return_path)):
                if len(path) > DR_PATH_SIZE or any(not 0 <= p < 256 for p in path):
                    raise EncodeError("DR SMP", "path", path, "at most 64 port numbers 0..255")
                buf[off:off + len(path)] = bytes(path)
        if len(self.data) > SMP_DATA_SIZE:
            raise EncodeError("SMP", "data", len(self.data), f"at most {SMP_DATA_SIZE} bytes")
        buf[SMP_DATA_OFFSET:SMP_DATA_OFFSET + len(self.data)] = self.data
        return bytes(buf)

    @classmethod
    def decode(cls, mad: bytes | bytearray | memoryview) -> SMP:
        raw = bytes(mad)
        if len(raw) < MAD_SIZE:
            raise TruncatedError("SMP", None, 0, len(raw), f"a {MAD_SIZE}-byte MAD (IBA 13.4.2)")
        if raw[1] not in (MGMT_CLASS_SM_LID_ROUTED, MGMT_CLASS_SM_DIRECTED_ROUTE):
            raise MalformedError("SMP", "mgmt_class", 1, raw[1], "0x01 or 0x81 (IBA 14.2.1)")
        data = raw[SMP_DATA_OFFSET:SMP_DATA_OFFSET + SMP_DATA_SIZE]
        if raw[1] == MGMT_CLASS_SM_LID_ROUTED:
            h = SMP_HEADER.decode(raw)
            return cls(raw[1], h["method"], h["tid"], h["attr_id"], h["attr_mod"], h["status"], h["class_version"],
                       h["m_key"], data)
        h = DR_SMP_HEADER.decode(raw)
        n = h["hop_count"]
        if n > DR_MAX_HOPS:
            raise MalformedError("DR SMP", "hop_count", 7, n, f"at most {DR_MAX_HOPS} (IBA 14.2.1.2)")
        return cls(raw[1], h["method"], h["tid"], h["attr_id"], h["attr_mod"], h["status"], h["class_version"],
                   h["m_key"], data, h["direction"], h["hop_pointer"], n, h["dr_slid"], h["dr_dlid"],
                   tuple(raw[DR_INITIAL_PATH_OFFSET:DR_INITIAL_PATH_OFFSET + n + 1]),
                   tuple(raw[DR_RETURN_PATH_OFFSET:DR_RETURN_PATH_OFFSET + n + 1]))


def node_description(text: str) -> bytes:
    """NodeDescription's 64 bytes: the text in UTF-8, NUL-padded (IBA 14.2.5.2)."""
    raw = text.encode()
    if len(raw) > NODE_DESCRIPTION_SIZE:
        raise EncodeError("NodeDescription", "text", text, f"at most {NODE_DESCRIPTION_SIZE} bytes (IBA 14.2.5.2)")
    return raw.ljust(NODE_DESCRIPTION_SIZE, b"\0")


def decode_node_description(data: bytes | bytearray) -> str:
    return bytes(data[:NODE_DESCRIPTION_SIZE]).split(b"\0", 1)[0].decode("utf-8", "replace")


def pma_get(attr_id: int, data: bytes = b"", *, tid: int = 0, method: int = 0x01, attr_mod: int = 0) -> bytes:
    """A performance-management MAD (class 0x04, version 1; IBA 16.1.1) with ``data`` at byte 64."""
    buf = bytearray(MAD_SIZE)
    SMP_HEADER.set(buf, "base_version", 1)
    SMP_HEADER.set(buf, "mgmt_class", MGMT_CLASS_PERF)
    SMP_HEADER.set(buf, "class_version", 1)
    SMP_HEADER.set(buf, "method", method)
    SMP_HEADER.set(buf, "tid", tid)
    SMP_HEADER.set(buf, "attr_id", attr_id)
    SMP_HEADER.set(buf, "attr_mod", attr_mod)
    if len(data) > PMA_DATA_SIZE:
        raise EncodeError("PMA", "data", len(data), f"at most {PMA_DATA_SIZE} bytes")
    buf[PMA_DATA_OFFSET:PMA_DATA_OFFSET + len(data)] = data
    return bytes(buf)
