"""Management Datagrams (MADs): the common MAD header, the RMPP header and their names.

A MAD is a 256-byte UD message sent to QP0 (subnet management) or QP1 (the General Services
Interface, GSI) with a 24-byte common header (IBA Vol 1 13.4.2/13.4.3) and 232 bytes of
class-specific data.  Over RoCE only QP1 exists; the Communication Manager (class 0x07,
:mod:`rdmalab.wire.cm`) is what rdma_cm and rping send there.

:func:`decode_mad_layers` turns a MAD into headers (MAD header, RMPP header for classes that use
it, CM message, IP CM private-data header) and is what :func:`rdmalab.wire.packet.decode_transport`
calls for a payload addressed to QP0/QP1.  Wireshark display-filter names are those of
``epan/dissectors/packet-infiniband.c`` (4.0).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from rdmalab.wire.errors import DecodeError, MalformedError, TruncatedError
from rdmalab.wire.header import F, Header, Layout, layout
from rdmalab.wire.ib import Transport

MAD_SIZE = 256  # IBA Vol 1 13.4.2: every MAD is 256 bytes
MAD_HEADER_SIZE = 24
MAD_DATA_SIZE = MAD_SIZE - MAD_HEADER_SIZE  # 232
RMPP_HEADER_SIZE = 12
BASE_VERSION = 1
GSI_QPN = 1  # QP1, IBA Vol 1 13.5.1
SMI_QPN = 0  # QP0

# --------------------------------------------------------------------------- management classes
# IBA Vol 1 13.4.4 (Management Class values)
MGMT_CLASS_SM_LID_ROUTED = 0x01
MGMT_CLASS_SA = 0x03
MGMT_CLASS_PERF = 0x04
MGMT_CLASS_BM = 0x05
MGMT_CLASS_DEV_MGT = 0x06
MGMT_CLASS_CM = 0x07
MGMT_CLASS_SNMP = 0x08
MGMT_CLASS_SM_DIRECTED_ROUTE = 0x81

MGMT_CLASS_NAMES: dict[int, str] = {
    MGMT_CLASS_SM_LID_ROUTED: "Subnet Management (LID routed)",
    MGMT_CLASS_SA: "Subnet Administration",
    MGMT_CLASS_PERF: "Performance Management",
    MGMT_CLASS_BM: "Baseboard Management",
    MGMT_CLASS_DEV_MGT: "Device Management",
    MGMT_CLASS_CM: "Communication Management",
    MGMT_CLASS_SNMP: "SNMP Tunneling",
    MGMT_CLASS_SM_DIRECTED_ROUTE: "Subnet Management (directed route)",
}


def mgmt_class_name(mgmt_class: int) -> str:
    """A management class's name, with the vendor and application ranges of IBA 13.4.4."""
    if mgmt_class in MGMT_CLASS_NAMES:
        return MGMT_CLASS_NAMES[mgmt_class]
    if 0x09 <= mgmt_class <= 0x0F:
        return f"Vendor 0x{mgmt_class:02x}"
    if 0x10 <= mgmt_class <= 0x2F:
        return f"Application 0x{mgmt_class:02x}"
    if 0x30 <= mgmt_class <= 0x4F:
        return f"Vendor with RMPP 0x{mgmt_class:02x}"
    return f"Reserved class 0x{mgmt_class:02x}"


def class_uses_rmpp(mgmt_class: int) -> bool:
    """Whether the class carries an RMPP header after the common header (IBA 13.6.1).

    Subnet Administration (15.2.1) and the vendor range 0x30-0x4F (13.4.4) use RMPP.
    """
    return mgmt_class == MGMT_CLASS_SA or 0x30 <= mgmt_class <= 0x4F


# --------------------------------------------------------------------------- methods
# IBA Vol 1 13.4.5 (common methods); 15.2.2 (SA methods).  The byte includes the
# R (response) bit, 0x80, as Linux ib_mad.h and Wireshark show it.
METHOD_GET = 0x01
METHOD_SET = 0x02
METHOD_SEND = 0x03
METHOD_TRAP = 0x05
METHOD_REPORT = 0x06
METHOD_TRAP_REPRESS = 0x07
METHOD_GET_TABLE = 0x12
METHOD_GET_TRACE_TABLE = 0x13
METHOD_GET_MULTI = 0x14
METHOD_DELETE = 0x15
METHOD_RESP = 0x80
METHOD_GET_RESP = 0x81
METHOD_REPORT_RESP = 0x86
METHOD_GET_TABLE_RESP = 0x92

METHOD_NAMES: dict[int, str] = {
    METHOD_GET: "Get",
    METHOD_SET: "Set",
    METHOD_SEND: "Send",
    METHOD_TRAP: "Trap",
    METHOD_REPORT: "Report",
    METHOD_TRAP_REPRESS: "TrapRepress",
    METHOD_GET_TABLE: "GetTable",
    METHOD_GET_TRACE_TABLE: "GetTraceTable",
    METHOD_GET_MULTI: "GetMulti",
    METHOD_DELETE: "Delete",
    METHOD_GET_RESP: "GetResp",
    METHOD_REPORT_RESP: "ReportResp",
    METHOD_GET_TABLE_RESP: "GetTableResp",
    0x93: "GetTraceTableResp",
    0x94: "GetMultiResp",
    0x95: "DeleteResp",
}


def method_name(method: int) -> str:
    if method in METHOD_NAMES:
        return METHOD_NAMES[method]
    if method & METHOD_RESP and (method & 0x7F) in METHOD_NAMES:
        return METHOD_NAMES[method & 0x7F] + "Resp"
    return f"Method 0x{method:02x}"


# --------------------------------------------------------------------------- attributes
# Common attributes, IBA Vol 1 13.4.8
ATTR_CLASS_PORT_INFO = 0x0001
ATTR_NOTICE = 0x0002
ATTR_INFORM_INFO = 0x0003
COMMON_ATTRIBUTES: dict[int, str] = {
    ATTR_CLASS_PORT_INFO: "ClassPortInfo",
    ATTR_NOTICE: "Notice",
    ATTR_INFORM_INFO: "InformInfo",
}
# Subnet management attributes, IBA Vol 1 14.2.5
SM_ATTRIBUTES: dict[int, str] = {
    0x0010: "NodeDescription", 0x0011: "NodeInfo", 0x0012: "SwitchInfo", 0x0014: "GUIDInfo",
    0x0015: "PortInfo", 0x0016: "P_KeyTable", 0x0017: "SLtoVLMappingTable",
    0x0018: "VLArbitrationTable", 0x0019: "LinearForwardingTable",
    0x001A: "RandomForwardingTable", 0x001B: "MulticastForwardingTable", 0x0020: "SMInfo",
    0x0030: "VendorDiag", 0x0031: "LedInfo",
}
# Subnet administration attributes, IBA Vol 1 15.2.5
SA_ATTRIBUTES: dict[int, str] = {
    0x0011: "NodeRecord", 0x0012: "PortInfoRecord", 0x0013: "SLtoVLMappingTableRecord",
    0x0014: "SwitchInfoRecord", 0x0015: "LinearForwardingTableRecord",
    0x0016: "RandomForwardingTableRecord", 0x0017: "MulticastForwardingTableRecord",
    0x0018: "SMInfoRecord", 0x0020: "LinkRecord", 0x0030: "GuidInfoRecord",
    0x0031: "ServiceRecord", 0x0033: "P_KeyTableRecord", 0x0035: "PathRecord",
    0x0036: "VLArbitrationTableRecord", 0x0038: "MCMemberRecord", 0x0039: "TraceRecord",
    0x003A: "MultiPathRecord", 0x003B: "ServiceAssociationRecord", 0xF101: "InformInfoRecord",
}
# Communication management attributes, IBA Vol 1 12.6 (CM message attribute IDs)
CM_ATTR_REQ = 0x0010
CM_ATTR_MRA = 0x0011
CM_ATTR_REJ = 0x0012
CM_ATTR_REP = 0x0013
CM_ATTR_RTU = 0x0014
CM_ATTR_DREQ = 0x0015
CM_ATTR_DREP = 0x0016
CM_ATTR_SIDR_REQ = 0x0017
CM_ATTR_SIDR_REP = 0x0018
CM_ATTR_LAP = 0x0019
CM_ATTR_APR = 0x001A
CM_ATTRIBUTES: dict[int, str] = {
    CM_ATTR_REQ: "ConnectRequest (REQ)",
    CM_ATTR_MRA: "MsgRcptAck (MRA)",
    CM_ATTR_REJ: "ConnectReject (REJ)",
    CM_ATTR_REP: "ConnectReply (REP)",
    CM_ATTR_RTU: "ReadyToUse (RTU)",
    CM_ATTR_DREQ: "DisconnectRequest (DREQ)",
    CM_ATTR_DREP: "DisconnectReply (DREP)",
    CM_ATTR_SIDR_REQ: "ServiceIDResReq (SIDR_REQ)",
    CM_ATTR_SIDR_REP: "ServiceIDResReqResp (SIDR_REP)",
    CM_ATTR_LAP: "LoadAlternatePath (LAP)",
    CM_ATTR_APR: "AlternatePathResponse (APR)",
}
CLASS_ATTRIBUTES: dict[int, dict[int, str]] = {
    MGMT_CLASS_SM_LID_ROUTED: SM_ATTRIBUTES,
    MGMT_CLASS_SM_DIRECTED_ROUTE: SM_ATTRIBUTES,
    MGMT_CLASS_SA: SA_ATTRIBUTES,
    MGMT_CLASS_CM: CM_ATTRIBUTES,
}


def attribute_name(mgmt_class: int, attr_id: int) -> str:
    """The attribute's name in its class (common attributes first), or its number."""
    if attr_id in COMMON_ATTRIBUTES:
        return COMMON_ATTRIBUTES[attr_id]
    name = CLASS_ATTRIBUTES.get(mgmt_class, {}).get(attr_id)
    return name if name is not None else f"Attribute 0x{attr_id:04x}"


# --------------------------------------------------------------------------- status
# IBA Vol 1 13.4.7 (MAD Status field): bit 0 busy, bit 1 redirect required,
# bits 2-4 invalid-field code, bits 8-15 class specific.
STATUS_BUSY = 0x0001
STATUS_REDIRECT = 0x0002
STATUS_BAD_VERSION = 1 << 2  # the invalid-field codes, in bits 2-4
STATUS_METHOD_UNSUPPORTED = 2 << 2
STATUS_METHOD_ATTR_UNSUPPORTED = 3 << 2
STATUS_INVALID_VALUE = 7 << 2
STATUS_CODES: dict[int, str] = {
    0: "no invalid fields",
    1: "bad version",
    2: "method not supported",
    3: "method/attribute combination not supported",
    7: "invalid attribute or attribute modifier value",
}


def status_text(status: int) -> str:
    if status == 0:
        return "success (0x0000)"
    parts = []
    if status & STATUS_BUSY:
        parts.append("busy")
    if status & STATUS_REDIRECT:
        parts.append("redirect required")
    code = (status >> 2) & 7
    if code:
        parts.append(STATUS_CODES.get(code, f"reserved code {code}"))
    if status >> 8:
        parts.append(f"class-specific 0x{status >> 8:02x}")
    return f"{', '.join(parts)} (0x{status:04x})"


# --------------------------------------------------------------------------- headers


@dataclass(frozen=True, slots=True)
class MADHeader(Header):
    """MAD common header, 24 bytes, first in every MAD.

    ``method`` is the whole byte, the R bit (0x80, response) included, as Wireshark and Linux
    show it: 0x81 is GetResp.
    """

    base_version: int = BASE_VERSION
    mgmt_class: int = MGMT_CLASS_CM
    class_version: int = 2
    method: int = METHOD_SEND
    status: int = 0
    class_specific: int = 0
    tid: int = 0
    attr_id: int = 0
    reserved: int = 0
    attr_mod: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "MAD",
        "IBA Vol 1 13.4.2 (MAD common header format)",
        F("base_version", 8, "infiniband.mad.baseversion", fmt="hex", const=BASE_VERSION),
        F("mgmt_class", 8, "infiniband.mad.mgmtclass", fmt="hex", doc="Management class"),
        F("class_version", 8, "infiniband.mad.classversion", fmt="hex"),
        F("method", 8, "infiniband.mad.method", fmt="hex", doc="R bit (0x80) | method"),
        F("status", 16, "infiniband.mad.status", fmt="hex"),
        F("class_specific", 16, "infiniband.mad.classspecific", fmt="hex"),
        F("tid", 64, "infiniband.mad.transactionid", fmt="hex", doc="Transaction ID"),
        F("attr_id", 16, "infiniband.mad.attributeid", fmt="hex", doc="Attribute ID"),
        F("reserved", 16, None, fmt="hex", reserved=True),
        F("attr_mod", 32, "infiniband.mad.attributemodifier", fmt="hex", doc="Attribute modifier"),
        ws="infiniband.mad",
    )

    @property
    def is_response(self) -> bool:
        return bool(self.method & METHOD_RESP)

    @property
    def method_name(self) -> str:
        return method_name(self.method)

    @property
    def class_name(self) -> str:
        return mgmt_class_name(self.mgmt_class)

    @property
    def attr_name(self) -> str:
        return attribute_name(self.mgmt_class, self.attr_id)

    def info(self, headers: Sequence[Header]) -> str | None:
        return f"MAD {self.class_name} {self.method_name} {self.attr_name}"

    def describe(self, field: str) -> str:
        if field == "mgmt_class":
            return f"{self.class_name} (0x{self.mgmt_class:02x})"
        if field == "method":
            return f"{self.method_name} (0x{self.method:02x})"
        if field == "attr_id":
            return f"{self.attr_name} (0x{self.attr_id:04x})"
        if field == "status":
            return status_text(self.status)
        return Header.describe(self, field)

    def summary(self) -> str:
        return (f"MAD({self.class_name} {self.method_name} {self.attr_name}, "
                f"TID=0x{self.tid:016x}, status=0x{self.status:04x})")


# RMPP, IBA Vol 1 13.6.2.1
RMPP_TYPE_DATA = 1
RMPP_TYPE_ACK = 2
RMPP_TYPE_STOP = 3
RMPP_TYPE_ABORT = 4
RMPP_TYPE_NAMES = {0: "not RMPP", 1: "DATA", 2: "ACK", 3: "STOP", 4: "ABORT"}
RMPP_FLAG_ACTIVE = 0x1
RMPP_FLAG_FIRST = 0x2
RMPP_FLAG_LAST = 0x4
RMPP_STATUS_NAMES = {
    0: "Normal", 1: "Resources exhausted", 118: "Total time too long",
    119: "Inconsistent Last and PayloadLength", 120: "Inconsistent First and Segment number",
    121: "Bad RMPPType", 122: "NewWindowLast too small", 123: "SegmentNumber too big",
    124: "Illegal status", 125: "Unsupported version", 126: "Too many retries",
    127: "Unspecified error",
}


@dataclass(frozen=True, slots=True)
class RMPPHeader(Header):
    """Reliable Multi-Packet Transaction Protocol header, 12 bytes after the MAD header.

    IBA draws RRespTime as 5 bits and RMPPFlags as 3; Wireshark 4.0 splits that byte 4+4
    (``rresptime`` 0xf0, ``rmppflags`` 0x0f), see :data:`WIRESHARK_QUIRKS`.  We follow IBA.
    """

    version: int = 1
    type: int = RMPP_TYPE_DATA
    resp_time: int = 0
    flags: int = 0
    status: int = 0
    data1: int = 0
    data2: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "RMPP",
        "IBA Vol 1 13.6.2.1 (RMPP header)",
        F("version", 8, "infiniband.rmpp.rmppversion", doc="RMPPVersion (1)"),
        F("type", 8, "infiniband.rmpp.rmpptype", doc="1 DATA, 2 ACK, 3 STOP, 4 ABORT"),
        F("resp_time", 5, "infiniband.rmpp.rresptime", doc="RRespTime"),
        F("flags", 3, "infiniband.rmpp.rmppflags", fmt="hex", doc="Last 0x4, First 0x2, Active 0x1"),
        F("status", 8, "infiniband.rmpp.rmppstatus"),
        F("data1", 32, "infiniband.rmpp.data1", doc="DATA/ACK: SegmentNumber"),
        F("data2", 32, "infiniband.rmpp.data2", doc="DATA: PayloadLength; ACK: NewWindowLast"),
        ws="infiniband.rmpp",
    )

    @property
    def active(self) -> bool:
        return bool(self.flags & RMPP_FLAG_ACTIVE)

    @property
    def first(self) -> bool:
        return bool(self.flags & RMPP_FLAG_FIRST)

    @property
    def last(self) -> bool:
        return bool(self.flags & RMPP_FLAG_LAST)

    def describe(self, field: str) -> str:
        if field == "type":
            return f"{RMPP_TYPE_NAMES.get(self.type, 'Reserved')} ({self.type})"
        if field == "flags":
            names = [n for bit, n in ((1, "Active"), (2, "First"), (4, "Last")) if self.flags & bit]
            return f"{'|'.join(names) or 'none'} (0x{self.flags:x})"
        if field == "status":
            return f"{RMPP_STATUS_NAMES.get(self.status, 'Reserved')} ({self.status})"
        return Header.describe(self, field)

    def ws_fields(self) -> dict[str, int]:
        """Wireshark names data1/data2 by type: SegmentNumber and PayloadLength or NewWindowLast."""
        out = Header.ws_fields(self)
        names = {RMPP_TYPE_DATA: ("segmentnumber", "payloadlength"), RMPP_TYPE_ACK: ("segmentnumber", "newwindowlast")}
        if self.type in names:
            del out["infiniband.rmpp.data1"], out["infiniband.rmpp.data2"]
            first, second = names[self.type]
            out[f"infiniband.rmpp.{first}"] = self.data1
            out[f"infiniband.rmpp.{second}"] = self.data2
        return out

    def validate(self, offset: int = 0) -> list[MalformedError]:
        if self.type > RMPP_TYPE_ABORT:
            return [MalformedError("RMPP", "type", offset + 1, self.type, "0..4 (IBA 13.6.2.1)")]
        return []


# Where tshark 4.0 shows a field differently from the specification (so a cross-check must
# not compare it): Wireshark display-filter name -> why.
WIRESHARK_QUIRKS: dict[str, str] = {
    "infiniband.rmpp.rresptime": "Wireshark masks 0xf0 (4 bits); IBA 13.6.2.1 RRespTime is bits 7:3",
    "infiniband.rmpp.rmppflags": "Wireshark masks 0x0f (4 bits); IBA 13.6.2.1 RMPPFlags is bits 2:0",
}

# --------------------------------------------------------------------------- decoding


Report = Callable[[DecodeError], None]
#: decodes a management class's data after the MAD header: ``(mad, data, offset, end, report)``
#: -> ``([(header, offset), ...], where the undecoded rest starts)``
ClassDecoder = Callable[["MADHeader", bytes, int, int, Report], tuple[list[tuple[Header, int]], int]]


def decode_mad_layers(
    data: bytes, offset: int, end: int, report: Report, classes: Mapping[int, ClassDecoder] | None = None,
) -> tuple[list[tuple[Header, int]], int]:
    """Decode the MAD in ``data[offset:end]`` into headers.

    Returns ``[(header, absolute offset), ...]`` and the offset where the undecoded rest (private
    data, class data) begins.  Each problem is passed to ``report``, which raises (strict) or
    records it (lenient); a truncation stops decoding where it happened.  ``classes`` decodes
    the data of the management classes it names (:data:`rdmalab.wire.cm.MAD_CLASSES` adds CM).
    """
    out: list[tuple[Header, int]] = []
    if end - offset < MAD_HEADER_SIZE:
        report(TruncatedError("MAD", None, offset, max(0, end - offset),
                              f"{MAD_HEADER_SIZE} bytes for the MAD common header", detail="IBA Vol 1 13.4.2"))
        return out, offset
    mad = MADHeader.decode(data, offset)
    out.append((mad, offset))
    for p in mad.check(offset):
        report(p)
    if end - offset != MAD_SIZE:
        err_cls = TruncatedError if end - offset < MAD_SIZE else MalformedError
        report(err_cls("MAD", None, offset, end - offset, f"a {MAD_SIZE}-byte MAD", detail="IBA Vol 1 13.4.2"))
    pos = offset + MAD_HEADER_SIZE
    if class_uses_rmpp(mad.mgmt_class):
        if end - pos < RMPP_HEADER_SIZE:
            report(TruncatedError("RMPP", None, pos, max(0, end - pos), f"{RMPP_HEADER_SIZE} bytes for the RMPP header"))
            return out, pos
        rmpp = RMPPHeader.decode(data, pos)
        out.append((rmpp, pos))
        for p in rmpp.check(pos):
            report(p)
        pos += RMPP_HEADER_SIZE
    if classes and mad.mgmt_class in classes:
        more, pos = classes[mad.mgmt_class](mad, data, pos, end, report)
        out.extend(more)
    return out, pos


def carries_mad(opcode: int, destqp: int, src_qp: int, payload_length: int) -> bool:
    """Whether a packet's payload is a MAD: the one rule the decoder and ``rdmalab.scapy`` share.

    QP0 and QP1 are UD QPs (IBA Vol 1 10.2.5), so only UD opcodes qualify.  A datagram *to*
    QP0/QP1 is always a MAD (IBA Vol 1 13.5.1); one only *from* QP0/QP1 (a reply to a redirected
    requester) is taken for a MAD only when it is MAD-sized, so that other datagrams from a QP
    numbered 0 pass untouched.
    """
    if opcode >> 5 != Transport.UD or payload_length == 0:  # opcode bits 7-5: the transport
        return False
    if destqp <= GSI_QPN:
        return True  # a short one is a truncated MAD, and decoding says so
    return src_qp <= GSI_QPN and payload_length == MAD_SIZE
