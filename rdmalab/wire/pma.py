"""Performance management (class 0x04): the MADs perfquery sends and the counters a port keeps.

A performance-management MAD (IBA Vol 1 16.1.1) is the 24-byte common MAD header, 40 reserved bytes and
192 bytes of attribute data from byte 64.  The attributes here: ClassPortInfo (13.4.8.1, the part a PMA
fills), PortCounters (16.1.3.5) and PortCountersExtended (16.1.4.11, the first 64 bytes), with their
CounterSelect bits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rdmalab.wire.errors import EncodeError
from rdmalab.wire.header import F, Header, Layout, layout
from rdmalab.wire.mad import MAD_SIZE, METHOD_GET, MGMT_CLASS_PERF, MADHeader

PMA_CLASS_VERSION = 1
PMA_DATA_OFFSET = 64  # IBA 16.1.1: 24-byte header + 40 reserved
PMA_DATA_SIZE = 192

# Attribute IDs, IBA Vol 1 16.1.2 (table 226)
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

ALL_PORTS = 0xFF  # PortSelect of every port of a switch (ClassPortInfo.CapabilityMask AllPortSelect)
# ClassPortInfo.CapabilityMask bits of the PMA, IBA 16.1.2 (table 227)
CAP_ALL_PORT_SELECT = 1 << 8
CAP_EXT_WIDTH_SUPPORTED = 1 << 9
CAP_PORT_XMIT_WAIT = 1 << 12


@dataclass(frozen=True, slots=True)
class ClassPortInfo(Header):
    """The first 8 bytes of ClassPortInfo (IBA Vol 1 13.4.8.1): versions, capabilities, response time."""

    base_version: int = 1
    class_version: int = PMA_CLASS_VERSION
    capability_mask: int = 0
    capability_mask2: int = 0
    resp_time_value: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "ClassPortInfo", "IBA Vol 1 13.4.8.1 (ClassPortInfo)",
        F("base_version", 8, None), F("class_version", 8, None), F("capability_mask", 16, None, fmt="hex"),
        F("capability_mask2", 27, None, fmt="hex"), F("resp_time_value", 5, None),
    )


@dataclass(frozen=True, slots=True)
class PortCounters(Header):
    """PortCounters, IBA Vol 1 16.1.3.5 (44 bytes).  PortXmitData/PortRcvData count 4-byte words."""

    reserved: int = 0
    port_select: int = 0
    counter_select: int = 0
    symbol_error_counter: int = 0
    link_error_recovery_counter: int = 0
    link_downed_counter: int = 0
    port_rcv_errors: int = 0
    port_rcv_remote_physical_errors: int = 0
    port_rcv_switch_relay_errors: int = 0
    port_xmit_discards: int = 0
    port_xmit_constraint_errors: int = 0
    port_rcv_constraint_errors: int = 0
    counter_select2: int = 0
    local_link_integrity_errors: int = 0
    excessive_buffer_overrun_errors: int = 0
    qp1_dropped: int = 0
    vl15_dropped: int = 0
    port_xmit_data: int = 0
    port_rcv_data: int = 0
    port_xmit_pkts: int = 0
    port_rcv_pkts: int = 0
    port_xmit_wait: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "PortCounters", "IBA Vol 1 16.1.3.5 (PortCounters)",
        F("reserved", 8, None, reserved=True), F("port_select", 8, None), F("counter_select", 16, None, fmt="hex"),
        F("symbol_error_counter", 16, None), F("link_error_recovery_counter", 8, None),
        F("link_downed_counter", 8, None), F("port_rcv_errors", 16, None),
        F("port_rcv_remote_physical_errors", 16, None), F("port_rcv_switch_relay_errors", 16, None),
        F("port_xmit_discards", 16, None), F("port_xmit_constraint_errors", 8, None),
        F("port_rcv_constraint_errors", 8, None), F("counter_select2", 8, None),
        F("local_link_integrity_errors", 4, None), F("excessive_buffer_overrun_errors", 4, None),
        F("qp1_dropped", 16, None), F("vl15_dropped", 16, None), F("port_xmit_data", 32, None),
        F("port_rcv_data", 32, None), F("port_xmit_pkts", 32, None), F("port_rcv_pkts", 32, None),
        F("port_xmit_wait", 32, None),
    )


# PortCounters.CounterSelect, IBA 16.1.3.5 (table 248): bit i clears counter i of this list on a Set
COUNTER_SELECT_BITS = (
    "symbol_error_counter", "link_error_recovery_counter", "link_downed_counter", "port_rcv_errors",
    "port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors", "port_xmit_discards",
    "port_xmit_constraint_errors", "port_rcv_constraint_errors", "local_link_integrity_errors",
    "excessive_buffer_overrun_errors", "vl15_dropped", "port_xmit_data", "port_rcv_data", "port_xmit_pkts",
    "port_rcv_pkts", "port_xmit_wait",
)
# PortCountersExtended (16.1.4.11): its 64-bit counters from byte 8, in order, and their CounterSelect bits
EXTENDED_COUNTERS = ("port_xmit_data", "port_rcv_data", "port_xmit_pkts", "port_rcv_pkts",
                     "port_unicast_xmit_pkts", "port_unicast_rcv_pkts", "port_multicast_xmit_pkts",
                     "port_multicast_rcv_pkts")
EXTENDED_COUNTERS_OFFSET = 8


def pma_mad(attr_id: int, data: bytes = b"", *, tid: int = 0, method: int = METHOD_GET, attr_mod: int = 0) -> bytes:
    """A performance-management MAD (class 0x04, version 1) with ``data`` at byte 64."""
    if len(data) > PMA_DATA_SIZE:
        raise EncodeError("PMA", "data", len(data), f"at most {PMA_DATA_SIZE} bytes (IBA 16.1.1)")
    hdr = MADHeader(mgmt_class=MGMT_CLASS_PERF, class_version=PMA_CLASS_VERSION, method=method, tid=tid,
                    attr_id=attr_id, attr_mod=attr_mod)
    return (hdr.encode() + bytes(PMA_DATA_OFFSET - 24) + data).ljust(MAD_SIZE, b"\0")
