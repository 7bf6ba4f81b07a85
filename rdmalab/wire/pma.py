"""Performance management MADs (class 0x04, IBA Vol 1 16.1): the counters ``perfquery`` reads.

A performance management MAD is a 256-byte MAD to QP1: the 24-byte common header
(:class:`rdmalab.wire.mad.MADHeader`), 40 reserved bytes, and 192 bytes of attribute data from byte
64 (16.1.1).  The attributes, declared as :class:`~rdmalab.wire.header.Header` layouts with
Wireshark's names (``packet-infiniband.c``, 4.0): :class:`ClassPortInfo` (13.4.8.1, common to
every class), :class:`PortCounters` (16.1.3.5) and :class:`PortCountersExtended` (16.1.4.11).

A Get names the port in PortSelect (0xFF: all of a switch's ports, when ClassPortInfo says
AllPortSelect); a Set clears the counters whose bits CounterSelect sets (:data:`COUNTER_SELECT_BITS`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rdmalab.wire.errors import EncodeError, TruncatedError
from rdmalab.wire.header import F, Header, Layout, layout
from rdmalab.wire.mad import (
    MAD_HEADER_SIZE,
    MAD_SIZE,
    METHOD_GET,
    MGMT_CLASS_PERF,
    MADHeader,
    Report,
)

PMA_CLASS_VERSION = 1  # IBA Vol 1 16.1.1
PMA_DATA_OFFSET = 64  # the 24-byte common header and 40 reserved bytes
PMA_DATA_SIZE = MAD_SIZE - PMA_DATA_OFFSET  # 192

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

ALL_PORTS = 0xFF  # PortSelect: every port of a switch (16.1.3.5)

# ClassPortInfo.CapabilityMask bits of the PMA (16.1.2, table 227)
CAP_ALL_PORT_SELECT = 1 << 8
CAP_EXTENDED_WIDTH_NOIETF = 1 << 9
CAP_PORT_XMIT_WAIT = 1 << 12


@dataclass(frozen=True, slots=True)
class ClassPortInfo(Header):
    """ClassPortInfo, IBA Vol 1 13.4.8.1 (72 bytes): what a class's agent supports and where its
    traps and redirects go."""

    base_version: int = 1
    class_version: int = 1
    capability_mask: int = 0
    capability_mask2: int = 0
    resp_time_value: int = 0
    redirect_gid: int = 0
    redirect_tc: int = 0
    redirect_sl: int = 0
    redirect_fl: int = 0
    redirect_lid: int = 0
    redirect_pkey: int = 0
    reserved: int = 0
    redirect_qp: int = 0
    redirect_qkey: int = 0
    trap_gid: int = 0
    trap_tc: int = 0
    trap_sl: int = 0
    trap_fl: int = 0
    trap_lid: int = 0
    trap_pkey: int = 0
    trap_hl: int = 0
    trap_qp: int = 0
    trap_qkey: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "ClassPortInfo", "IBA Vol 1 13.4.8.1 (ClassPortInfo)",
        F("base_version", 8, "infiniband.classportinfo.baseversion"),
        F("class_version", 8, "infiniband.classportinfo.classversion"),
        F("capability_mask", 16, "infiniband.classportinfo.capabilitymask", fmt="hex"),
        F("capability_mask2", 27, "infiniband.classportinfo.capabilitymask2", fmt="hex"),
        F("resp_time_value", 5, "infiniband.classportinfo.resptimevalue"),
        F("redirect_gid", 128, "infiniband.classportinfo.redirectgid", fmt="ipv6"),
        F("redirect_tc", 8, "infiniband.classportinfo.redirecttc"),
        F("redirect_sl", 4, "infiniband.classportinfo.redirectsl"),
        F("redirect_fl", 20, "infiniband.classportinfo.redirectfl"),
        F("redirect_lid", 16, "infiniband.classportinfo.redirectlid"),
        F("redirect_pkey", 16, "infiniband.classportinfo.redirectpkey", fmt="hex"),
        F("reserved", 8, None, reserved=True),
        F("redirect_qp", 24, "infiniband.classportinfo.redirectqp", fmt="hex"),
        F("redirect_qkey", 32, "infiniband.classportinfo.redirectqkey", fmt="hex"),
        F("trap_gid", 128, "infiniband.classportinfo.trapgid", fmt="ipv6"),
        F("trap_tc", 8, "infiniband.classportinfo.traptc"),
        F("trap_sl", 4, "infiniband.classportinfo.trapsl"),
        F("trap_fl", 20, "infiniband.classportinfo.trapfl"),
        F("trap_lid", 16, "infiniband.classportinfo.traplid"),
        F("trap_pkey", 16, "infiniband.classportinfo.trappkey", fmt="hex"),
        F("trap_hl", 8, None),
        F("trap_qp", 24, "infiniband.classportinfo.trapqp", fmt="hex"),
        F("trap_qkey", 32, "infiniband.classportinfo.trapqkey", fmt="hex"),
        ws="infiniband.classportinfo",
    )


@dataclass(frozen=True, slots=True)
class PortCounters(Header):
    """PortCounters, IBA Vol 1 16.1.3.5 (44 bytes): a port's error and traffic counters (data in
    dwords), each stopping at its maximum rather than wrapping."""

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
        F("reserved", 8, None, reserved=True),
        F("port_select", 8, "infiniband.portcounters.portselect"),
        F("counter_select", 16, "infiniband.portcounters.counterselect", fmt="hex"),
        F("symbol_error_counter", 16, "infiniband.portcounters.symbolerrorcounter"),
        F("link_error_recovery_counter", 8, "infiniband.portcounters.linkerrorrecoverycounter"),
        F("link_downed_counter", 8, "infiniband.portcounters.linkdownedcounter"),
        F("port_rcv_errors", 16, "infiniband.portcounters.portrcverrors"),
        F("port_rcv_remote_physical_errors", 16, "infiniband.portcounters.portrcvremotephysicalerrors"),
        F("port_rcv_switch_relay_errors", 16, "infiniband.portcounters.portrcvswitchrelayerrors"),
        F("port_xmit_discards", 16, "infiniband.portcounters.portxmitdiscards"),
        F("port_xmit_constraint_errors", 8, "infiniband.portcounters.portxmitconstrainterrors"),
        F("port_rcv_constraint_errors", 8, "infiniband.portcounters.portrcvconstrainterrors"),
        F("counter_select2", 8, None, fmt="hex"),
        F("local_link_integrity_errors", 4, "infiniband.portcounters.locallinkintegrityerrors"),
        F("excessive_buffer_overrun_errors", 4, "infiniband.portcounters.excessivebufferoverrunerrors"),
        F("qp1_dropped", 16, None),
        F("vl15_dropped", 16, "infiniband.portcounters.vl15dropped"),
        F("port_xmit_data", 32, "infiniband.portcounters.portxmitdata"),
        F("port_rcv_data", 32, "infiniband.portcounters.portrcvdata"),
        F("port_xmit_pkts", 32, "infiniband.portcounters.portxmitpkts"),
        F("port_rcv_pkts", 32, "infiniband.portcounters.portrcvpkts"),
        F("port_xmit_wait", 32, None),
        ws="infiniband.portcounters",
    )


#: PortCounters.CounterSelect, bit 0 first (16.1.3.5, table 248): the counters a Set clears
COUNTER_SELECT_BITS = (
    "symbol_error_counter", "link_error_recovery_counter", "link_downed_counter", "port_rcv_errors",
    "port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors", "port_xmit_discards",
    "port_xmit_constraint_errors", "port_rcv_constraint_errors", "local_link_integrity_errors",
    "excessive_buffer_overrun_errors", "vl15_dropped", "port_xmit_data", "port_rcv_data", "port_xmit_pkts",
    "port_rcv_pkts", "port_xmit_wait",
)


@dataclass(frozen=True, slots=True)
class PortCountersExtended(Header):
    """PortCountersExtended, IBA Vol 1 16.1.4.11 (72 bytes): the 64-bit traffic counters.
    CounterSelect bit 0 clears PortXmitData, bit 1 PortRcvData, 2 PortXmitPkts, 3 PortRcvPkts ..."""

    reserved: int = 0
    port_select: int = 0
    counter_select: int = 0
    reserved2: int = 0
    port_xmit_data: int = 0
    port_rcv_data: int = 0
    port_xmit_pkts: int = 0
    port_rcv_pkts: int = 0
    port_unicast_xmit_pkts: int = 0
    port_unicast_rcv_pkts: int = 0
    port_multicast_xmit_pkts: int = 0
    port_multicast_rcv_pkts: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "PortCountersExtended", "IBA Vol 1 16.1.4.11 (PortCountersExtended)",
        F("reserved", 8, None, reserved=True),
        F("port_select", 8, "infiniband.portcounters_ext.portselect"),
        F("counter_select", 16, "infiniband.portcounters_ext.counterselect", fmt="hex"),
        F("reserved2", 32, None, reserved=True),
        F("port_xmit_data", 64, "infiniband.portcounters_ext.portxmitdata"),
        F("port_rcv_data", 64, "infiniband.portcounters_ext.portrcvdata"),
        F("port_xmit_pkts", 64, "infiniband.portcounters_ext.portxmitpkts"),
        F("port_rcv_pkts", 64, "infiniband.portcounters_ext.portrcvpkts"),
        F("port_unicast_xmit_pkts", 64, "infiniband.portcounters_ext.portunicastxmitpkts"),
        F("port_unicast_rcv_pkts", 64, "infiniband.portcounters_ext.portunicastrcvpkts"),
        F("port_multicast_xmit_pkts", 64, "infiniband.portcounters_ext.portmulticastxmitpkts"),
        F("port_multicast_rcv_pkts", 64, "infiniband.portcounters_ext.portmulticastrcvpkts"),
        ws="infiniband.portcounters_ext",
    )


#: the attributes decoded inside performance MADs (the others stay undecoded data)
PMA_ATTRIBUTES: dict[int, type[Header]] = {
    ATTR_CLASS_PORT_INFO: ClassPortInfo, ATTR_PORT_COUNTERS: PortCounters,
    ATTR_PORT_COUNTERS_EXTENDED: PortCountersExtended,
}


def pma_mad(attr_id: int, data: bytes = b"", *, tid: int = 0, method: int = METHOD_GET, attr_mod: int = 0) -> bytes:
    """A performance management MAD (class 0x04, version 1) with ``data`` (an attribute's bytes) at
    byte 64.  :class:`EncodeError` for data over 192 bytes."""
    if len(data) > PMA_DATA_SIZE:
        raise EncodeError("PMA", "data", len(data), f"at most {PMA_DATA_SIZE} bytes (IBA 16.1.1)")
    hdr = MADHeader(mgmt_class=MGMT_CLASS_PERF, class_version=PMA_CLASS_VERSION, method=method, tid=tid,
                    attr_id=attr_id, attr_mod=attr_mod)
    return (hdr.encode() + bytes(PMA_DATA_OFFSET - MAD_HEADER_SIZE) + data).ljust(MAD_SIZE, b"\0")


def decode_pma_layers(mad: MADHeader, data: bytes, pos: int, end: int,
                      report: Report) -> tuple[list[tuple[Header, int]], int]:
    """A performance MAD's attribute after its MAD header at ``pos`` (past the 40 reserved bytes),
    when it is one of :data:`PMA_ATTRIBUTES`; with where the undecoded rest begins.  A short MAD is
    reported, not raised (the ``ClassDecoder`` contract of :func:`rdmalab.wire.mad.decode_mad_layers`)."""
    if end - pos < MAD_SIZE - MAD_HEADER_SIZE:
        report(TruncatedError("PMA", None, pos, max(0, end - pos), f"{MAD_SIZE - MAD_HEADER_SIZE} bytes of "
                              "performance MAD after the MAD header", detail="IBA Vol 1 16.1.1"))
        return [], pos
    attr = PMA_ATTRIBUTES.get(mad.attr_id)
    if attr is None:
        return [], pos
    at = pos + PMA_DATA_OFFSET - MAD_HEADER_SIZE
    return [(attr.decode(data, at), at)], at + attr.LAYOUT.size
