"""The InfiniBand Communication Manager (CM): REQ, MRA, REJ, REP, RTU, DREQ, DREP, SIDR.

CM messages are MADs of management class 0x07, class version 2, method Send, sent to QP1
(IBA Vol 1 chapter 12).  The attribute ID names the message; the message fills the 232 bytes
after the MAD common header.  Each message here is a declared header holding the message's
fixed fields, exactly as IBA Vol 1 12.6 draws them; the message's PrivateData follows it and is
left as payload.  For an RDMA IP CM service ID (IBA Vol 1 Annex A11, what rdma_cm and rping use)
the REQ's private data starts with the IP CM header (:class:`IPCMHeader`), decoded as one more
layer.

:class:`CMMessage` is a whole CM MAD (header, message, private data) with convenient properties
(``src_ip``/``dst_ip``/``src_port``/``dst_port`` for rdma_cm REQs) and ``encode()`` to the 256
bytes; ``build_req`` / ``build_rep`` / ``build_rtu`` / ``build_dreq`` / ``build_drep`` /
``build_rej`` / ``build_mra`` make the messages rdma_cm exchanges, and
:func:`rdmalab.wire.frame.gsi_frame` wraps one in a RoCEv2 UD SEND Only to QP1.

Layouts follow IBA Vol 1 release 1.4 12.6.5-12.6.11 and 12.11 (SIDR), cross-checked against
Linux ``include/rdma/ibta_vol1_c12.h``; Wireshark names are those of ``packet-infiniband.c``
(4.0).  Wireshark 4.0 has no MRA or SIDR fields, so those use ``rdmalab.cm.*`` names.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from rdmalab.wire.errors import DecodeError, EncodeError, MalformedError, TruncatedError
from rdmalab.wire.header import F, Header, Layout, layout
from rdmalab.wire.ib import IB_MTU_BYTES, timeout_ns
from rdmalab.wire.mad import (
    CM_ATTR_DREP,
    CM_ATTR_DREQ,
    CM_ATTR_MRA,
    CM_ATTR_REJ,
    CM_ATTR_REP,
    CM_ATTR_REQ,
    CM_ATTR_RTU,
    CM_ATTR_SIDR_REP,
    CM_ATTR_SIDR_REQ,
    MAD_DATA_SIZE,
    MAD_HEADER_SIZE,
    MAD_SIZE,
    METHOD_SEND,
    MGMT_CLASS_CM,
    MGMT_CLASS_PERF,
    MGMT_CLASS_SA,
    MGMT_CLASS_SM_DIRECTED_ROUTE,
    MGMT_CLASS_SM_LID_ROUTED,
    ClassDecoder,
    MADHeader,
    Report,
    decode_mad_layers,
)
from rdmalab.wire.packet import Layer, Packet, _problem
from rdmalab.wire.pma import decode_pma_layers
from rdmalab.wire.sa import decode_sa_layers
from rdmalab.wire.smp import decode_smp_layers

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
AddressLike = str | int | ipaddress.IPv4Address | ipaddress.IPv6Address

CM_CLASS_VERSION = 2  # IBA Vol 1 12.6.1 / 16.7: CM class version 2

# --------------------------------------------------------------------------- names
# Transport Service Type in REQ, IBA Vol 1 12.6.5
TST_RC = 0
TST_UC = 1
TST_RD = 2
TST_NAMES = {0: "RC", 1: "UC", 2: "RD", 3: "Reserved (XRC with extended transport type 1)"}

# Path MTU codes, IBA Vol 1 9.4 / 12.6.5 (same as ibv_mtu)
MTU_256, MTU_512, MTU_1024, MTU_2048, MTU_4096 = 1, 2, 3, 4, 5
MTU_BYTES = IB_MTU_BYTES  # the path MTU codes (IBA Vol 1 12.6.5), wire.ib's table

# REJ "Message REJected" and MRA "Message MRAed", IBA Vol 1 12.6.6 / 12.6.7
MSG_REQ = 0
MSG_REP = 1
MSG_OTHER = 2  # REJ: no message (e.g. a stale connection); MRA: LAP
REJ_MESSAGE_NAMES = {0: "REQ", 1: "REP", 2: "No message", 3: "Reserved"}
MRA_MESSAGE_NAMES = {0: "REQ", 1: "REP", 2: "LAP", 3: "Reserved"}

# REJ reasons, IBA Vol 1 12.6.7.2 (Reject Reason table); names as the specification gives them
# (Linux ib_cm_rej_reason uses the same numbers).
REJ_NO_QP = 1
REJ_NO_EEC = 2
REJ_NO_RESOURCES = 3
REJ_TIMEOUT = 4
REJ_UNSUPPORTED = 5
REJ_INVALID_COMM_ID = 6
REJ_INVALID_COMM_INSTANCE = 7
REJ_INVALID_SERVICE_ID = 8
REJ_INVALID_TRANSPORT_TYPE = 9
REJ_STALE_CONN = 10
REJ_RDC_NOT_EXIST = 11
REJ_INVALID_GID = 12
REJ_INVALID_LID = 13
REJ_INVALID_SL = 14
REJ_INVALID_TRAFFIC_CLASS = 15
REJ_INVALID_HOP_LIMIT = 16
REJ_INVALID_PACKET_RATE = 17
REJ_INVALID_ALT_GID = 18
REJ_INVALID_ALT_LID = 19
REJ_INVALID_ALT_SL = 20
REJ_INVALID_ALT_TRAFFIC_CLASS = 21
REJ_INVALID_ALT_HOP_LIMIT = 22
REJ_INVALID_ALT_PACKET_RATE = 23
REJ_PORT_CM_REDIRECT = 24
REJ_PORT_REDIRECT = 25
REJ_INVALID_MTU = 26
REJ_INSUFFICIENT_RESP_RESOURCES = 27
REJ_CONSUMER_DEFINED = 28
REJ_INVALID_RNR_RETRY = 29
REJ_DUPLICATE_LOCAL_COMM_ID = 30
REJ_INVALID_CLASS_VERSION = 31
REJ_INVALID_FLOW_LABEL = 32
REJ_INVALID_ALT_FLOW_LABEL = 33
REJ_VENDOR_OPTION_NOT_SUPPORTED = 35

REJ_REASON_NAMES: dict[int, str] = {
    1: "No QP available",
    2: "No EEC available",
    3: "No resources available",
    4: "Timeout",
    5: "Unsupported request",
    6: "Invalid Communication ID",
    7: "Invalid Communication Instance",
    8: "Invalid Service ID",
    9: "Invalid Transport Service Type",
    10: "Stale connection",
    11: "RDC does not exist",
    12: "Primary Remote Port GID rejected",
    13: "Primary Remote Port LID rejected",
    14: "Invalid Primary SL",
    15: "Invalid Primary Traffic Class",
    16: "Invalid Primary Hop Limit",
    17: "Invalid Primary Packet Rate",
    18: "Alternate Remote Port GID rejected",
    19: "Alternate Remote Port LID rejected",
    20: "Invalid Alternate SL",
    21: "Invalid Alternate Traffic Class",
    22: "Invalid Alternate Hop Limit",
    23: "Invalid Alternate Packet Rate",
    24: "Port and CM Redirection",
    25: "Port Redirection",
    26: "Invalid Path MTU",
    27: "Insufficient Responder Resources",
    28: "Consumer Reject",
    29: "Invalid RNR NAK Retry Count",
    30: "Duplicate Local Communication ID",
    31: "Invalid Class Version",
    32: "Invalid Primary Flow Label",
    33: "Invalid Alternate Flow Label",
    35: "Vendor option not supported",
}


def rej_reason_name(reason: int) -> str:
    return REJ_REASON_NAMES.get(reason, f"Reserved reason {reason}")


# SIDR_REP status, IBA Vol 1 12.11.2
SIDR_STATUS_NAMES = {
    0: "Valid QPN",
    1: "Service ID not supported",
    2: "Rejected by service provider",
    3: "No QP available",
    4: "Redirect (ClassPortInfo in AdditionalInfo)",
    5: "Unsupported class version",
}


def cm_timeout_seconds(code: int) -> float:
    """A CM/ACK timeout code's duration in seconds: 4.096 µs × 2^code (IBA Vol 1 12.6.5), :func:`timeout_ns`."""
    return timeout_ns(code) / 1e9


def _timeout_text(code: int) -> str:
    secs = cm_timeout_seconds(code)
    if secs >= 1:
        return f"{code} ({secs:.3g} s)"
    if secs >= 1e-3:
        return f"{code} ({secs * 1e3:.3g} ms)"
    return f"{code} ({secs * 1e6:.3g} µs)"


# --------------------------------------------------------------------------- IP CM (Annex A11)

RDMA_IP_CM_SID_PREFIX = 0x0000000001000000  # IBA Vol 1 A11.2.1: 0x0000000001 | protocol | port
RDMA_IP_CM_SID_MASK = 0xFFFFFFFFFF000000
IPPROTO_TCP = 0x06
IPPROTO_UDP = 0x11
IPPROTO_SCTP = 0x84
# Linux rdma_cm port spaces (include/rdma/rdma_cm.h): the service ID is (ps << 16) + port.
RDMA_PS_TCP = 0x0106
RDMA_PS_UDP = 0x0111
RDMA_PS_IB = 0x013F
RPING_PORT = 7174


def ip_cm_service_id(port: int, protocol: int = IPPROTO_TCP) -> int:
    """The RDMA IP CM service ID for an IP protocol and port (IBA Vol 1 A11.2.1)."""
    if not 0 <= port <= 0xFFFF:
        raise EncodeError("ServiceID", "port", port, "0..65535")
    if not 0 <= protocol <= 0xFF:
        raise EncodeError("ServiceID", "protocol", protocol, "0..255")
    return RDMA_IP_CM_SID_PREFIX | (protocol << 16) | port


def is_ip_cm_service_id(service_id: int) -> bool:
    return service_id & RDMA_IP_CM_SID_MASK == RDMA_IP_CM_SID_PREFIX


def parse_ip_cm_service_id(service_id: int) -> tuple[int, int] | None:
    """``(protocol, port)`` of an RDMA IP CM service ID, or ``None`` for any other ID."""
    if not is_ip_cm_service_id(service_id):
        return None
    return (service_id >> 16) & 0xFF, service_id & 0xFFFF


def _addr(value: AddressLike) -> IPAddress:
    if isinstance(value, int):
        return ipaddress.ip_address(value)
    if isinstance(value, str):
        return ipaddress.ip_address(value)
    return value


def gid_of(addr: AddressLike) -> int:
    """The GID RoCEv2 uses for an IP address: IPv4-mapped for IPv4 (::ffff:a.b.c.d)."""
    a = _addr(addr)
    if isinstance(a, ipaddress.IPv4Address):
        return 0xFFFF00000000 | int(a)
    return int(a)


def _v4_mapped(gid: int) -> bool:
    return gid >> 32 == 0xFFFF


@dataclass(frozen=True, slots=True)
class IPCMHeader(Header):
    """RDMA IP CM private-data header, 36 bytes at the start of a REQ's private data.

    IPv4 addresses sit in the last 4 bytes of each 16-byte address field.  Linux's ``cma_hdr``
    writes ``cma_version`` 0 in the MajV/MinV byte and the IP version in the high nibble of the
    next byte.
    """

    majv: int = 0
    minv: int = 0
    ipv: int = 4
    reserved: int = 0
    src_port: int = 0
    src_ip: int = 0
    dst_ip: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "IPCM",
        "IBA Vol 1 Annex A11.6.1 (RDMA IP CM private data format)",
        F("majv", 4, "infiniband.cm.req.ip_cm.majv", fmt="hex", const=0, doc="Major version"),
        F("minv", 4, "infiniband.cm.req.ip_cm.minv", fmt="hex", doc="Minor version"),
        F("ipv", 4, "infiniband.cm.req.ip_cm.ipv", fmt="hex", doc="IP version, 4 or 6"),
        F("reserved", 4, "infiniband.cm.req.ip_cm.reserved", fmt="hex", reserved=True),
        F("src_port", 16, "infiniband.cm.req.ip_cm.sport", doc="Source port of the active side"),
        F("src_ip", 128, "infiniband.cm.req.ip_cm.sip6", fmt="ipv6", doc="Source IP"),
        F("dst_ip", 128, "infiniband.cm.req.ip_cm.dip6", fmt="ipv6", doc="Destination IP"),
        ws="infiniband.cm.req.ip_cm",
    )

    @classmethod
    def for_addresses(cls, src_ip: AddressLike, dst_ip: AddressLike, src_port: int) -> IPCMHeader:
        """The header for a connection from ``src_ip:src_port`` to ``dst_ip``."""
        s, d = _addr(src_ip), _addr(dst_ip)
        if s.version != d.version:
            raise EncodeError("IPCM", "dst_ip", str(d), f"an IPv{s.version} address like the source")
        return cls(ipv=s.version, src_port=src_port, src_ip=int(s), dst_ip=int(d))

    def _address(self, value: int) -> IPAddress:
        if self.ipv == 4:
            return ipaddress.IPv4Address(value & 0xFFFFFFFF)
        return ipaddress.IPv6Address(value)

    @property
    def src_address(self) -> IPAddress:
        return self._address(self.src_ip)

    @property
    def dst_address(self) -> IPAddress:
        return self._address(self.dst_ip)

    def info(self, headers: Sequence[Header]) -> str | None:
        """``10.0.0.2:35360 -> 10.0.0.1:7174``: the port comes from the message's service ID."""
        sid = next((v for v in (getattr(h, "service_id", None) for h in headers) if isinstance(v, int)), None)
        port = parse_ip_cm_service_id(sid) if sid is not None else None
        dst = f"{self.dst_address}:{port[1]}" if port else str(self.dst_address)
        return f"{self.src_address}:{self.src_port} -> {dst}"

    def describe(self, field: str) -> str:
        if field == "src_ip":
            return str(self.src_address)
        if field == "dst_ip":
            return str(self.dst_address)
        return Header.describe(self, field)

    #: Where the header's Wireshark names live; a SIDR_REQ's copy has no Wireshark names.
    WS_PREFIX: ClassVar[str] = "infiniband.cm.req.ip_cm"

    def ws_fields(self) -> dict[str, int]:
        out = Header.ws_fields(self)
        if self.ipv == 4:
            del out["infiniband.cm.req.ip_cm.sip6"], out["infiniband.cm.req.ip_cm.dip6"]
            out["infiniband.cm.req.ip_cm.sip4"] = self.src_ip & 0xFFFFFFFF
            out["infiniband.cm.req.ip_cm.dip4"] = self.dst_ip & 0xFFFFFFFF
        if self.WS_PREFIX != IPCMHeader.WS_PREFIX:
            n = len(IPCMHeader.WS_PREFIX)
            out = {self.WS_PREFIX + k[n:]: v for k, v in out.items()}
        return out

    def validate(self, offset: int = 0) -> list[MalformedError]:
        if self.ipv not in (4, 6):
            return [MalformedError("IPCM", "ipv", offset + 1, self.ipv, "4 or 6 (IBA Vol 1 A11.6.1)")]
        return []


@dataclass(frozen=True, slots=True)
class SidrIPCMHeader(IPCMHeader):
    """The IP CM header inside a SIDR_REQ (IBA Annex A11.7): same layout as in a REQ.

    Wireshark 4.0 does not decode SIDR_REQ at all, so these fields carry ``rdmalab.*`` names
    rather than the REQ's ``infiniband.cm.req.ip_cm.*`` ones.
    """

    WS_PREFIX: ClassVar[str] = "rdmalab.cm.sidr_req.ip_cm"



# --------------------------------------------------------------------------- CM messages


class CMBody(Header):
    """Base class of the CM message headers: the fixed fields of one attribute."""

    __slots__ = ()
    ATTR_ID: ClassVar[int]
    SHORT: ClassVar[str]

    @classmethod
    def private_data_size(cls) -> int:
        """Bytes of PrivateData after the fixed fields (the rest of the 232-byte MAD data)."""
        return MAD_DATA_SIZE - cls.LAYOUT.size

    def describe(self, field: str) -> str:
        if field.endswith("comm_id") or field == "request_id":
            return f"0x{getattr(self, field):08x}"
        if field.endswith("response_timeout") or field.endswith("ack_timeout") or field in ("service_timeout", "target_ack_delay"):
            return _timeout_text(getattr(self, field))
        if field == "path_mtu":
            v = self.path_mtu  # type: ignore[attr-defined]
            return f"{MTU_BYTES.get(v, 'reserved')} ({v})"
        if field == "transport_service_type":
            v = self.transport_service_type  # type: ignore[attr-defined]
            return f"{TST_NAMES[v]} ({v})"
        if field == "service_id":
            sid = self.service_id  # type: ignore[attr-defined]
            ip = parse_ip_cm_service_id(sid)
            if ip is not None:
                proto = {6: "TCP", 17: "UDP", 0x84: "SCTP"}.get(ip[0], f"protocol {ip[0]}")
                return f"0x{sid:016x} (IP CM, {proto} port {ip[1]})"
        return Header.describe(self, field)


def _path_fields(prefix: str, ws: str, gid_fmt: str) -> tuple[F, ...]:
    """The 44-byte path information of a REQ (IBA Vol 1 12.6.5), for one of its two paths."""
    w = f"infiniband.cm.req.{ws}_"
    return (
        F(f"{prefix}_local_lid", 16, w + "locallid", doc="Local port LID (0xFFFF on RoCE)"),
        F(f"{prefix}_remote_lid", 16, w + "remotelid", doc="Remote port LID"),
        F(f"{prefix}_local_gid", 128, w + "localgid", fmt=gid_fmt, doc="Local port GID"),
        F(f"{prefix}_remote_gid", 128, w + "remotegid", fmt=gid_fmt, doc="Remote port GID"),
        F(f"{prefix}_flow_label", 20, w + "flowlabel", fmt="hex"),
        F(f"{prefix}_reserved0", 6, w + "reserved0", reserved=True),
        F(f"{prefix}_packet_rate", 6, w + "pktrate", doc="Static rate code"),
        F(f"{prefix}_traffic_class", 8, w + "tfcclass", fmt="hex"),
        F(f"{prefix}_hop_limit", 8, w + "hoplim"),
        F(f"{prefix}_sl", 4, w + "sl", doc="Service level"),
        F(f"{prefix}_subnet_local", 1, w + "subnetlocal"),
        F(f"{prefix}_reserved1", 3, w + "reserved1", reserved=True),
        F(f"{prefix}_local_ack_timeout", 5, w + "localacktout", doc="4.096 µs × 2^t"),
        # Wireshark 4.0 registers the alternate path's last reserved bits as alt_reserved1 again
        F(f"{prefix}_reserved2", 3, w + "reserved2" if prefix == "primary" else None, reserved=True),
    )


PATH_FIELDS = (
    "local_lid", "remote_lid", "local_gid", "remote_gid", "flow_label", "reserved0", "packet_rate",
    "traffic_class", "hop_limit", "sl", "subnet_local", "reserved1", "local_ack_timeout", "reserved2",
)


@dataclass(frozen=True, slots=True)
class CMPath(Header):
    """One path of a REQ (primary or alternate), 44 bytes: a view for building and reading."""

    local_lid: int = 0xFFFF
    remote_lid: int = 0xFFFF
    local_gid: int = 0
    remote_gid: int = 0
    flow_label: int = 0
    reserved0: int = 0
    packet_rate: int = 0
    traffic_class: int = 0
    hop_limit: int = 64
    sl: int = 0
    subnet_local: int = 0
    reserved1: int = 0
    local_ack_timeout: int = 0
    reserved2: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "CMPath",
        "IBA Vol 1 12.6.5 (REQ path information)",
        *(F(f.name.split("_", 1)[1], f.bits, None, fmt=f.fmt, reserved=f.reserved, doc=f.doc)
          for f in _path_fields("primary", "prim", "ipv6")),
    )

    @classmethod
    def roce(cls, src_ip: AddressLike, dst_ip: AddressLike, *, hop_limit: int = 64, traffic_class: int = 0,
             sl: int = 0, flow_label: int = 0, packet_rate: int = 3, local_ack_timeout: int = 19) -> CMPath:
        """A RoCEv2 path as Linux rdma_cm fills it: permissive LIDs, IPv4-mapped GIDs."""
        return cls(local_gid=gid_of(src_ip), remote_gid=gid_of(dst_ip), hop_limit=hop_limit,
                   traffic_class=traffic_class, sl=sl, flow_label=flow_label, packet_rate=packet_rate,
                   local_ack_timeout=local_ack_timeout)


@dataclass(frozen=True, slots=True)
class CMReq(CMBody):
    """ConnectRequest (REQ), 140 bytes of fixed fields + 92 bytes of PrivateData."""

    local_comm_id: int = 0
    reserved1: int = 0
    vendor_id: int = 0
    service_id: int = 0
    local_ca_guid: int = 0
    reserved2: int = 0
    local_qkey: int = 0
    local_qpn: int = 0
    responder_resources: int = 0
    local_eecn: int = 0
    initiator_depth: int = 0
    remote_eecn: int = 0
    remote_cm_response_timeout: int = 20
    transport_service_type: int = TST_RC
    e2e_flow_control: int = 0
    starting_psn: int = 0
    local_cm_response_timeout: int = 20
    retry_count: int = 7
    p_key: int = 0xFFFF
    path_mtu: int = MTU_1024
    rdc_exists: int = 0
    rnr_retry_count: int = 7
    max_cm_retries: int = 15
    srq: int = 0
    ext_transport_type: int = 0
    primary_local_lid: int = 0xFFFF
    primary_remote_lid: int = 0xFFFF
    primary_local_gid: int = 0
    primary_remote_gid: int = 0
    primary_flow_label: int = 0
    primary_reserved0: int = 0
    primary_packet_rate: int = 0
    primary_traffic_class: int = 0
    primary_hop_limit: int = 64
    primary_sl: int = 0
    primary_subnet_local: int = 0
    primary_reserved1: int = 0
    primary_local_ack_timeout: int = 0
    primary_reserved2: int = 0
    alternate_local_lid: int = 0
    alternate_remote_lid: int = 0
    alternate_local_gid: int = 0
    alternate_remote_gid: int = 0
    alternate_flow_label: int = 0
    alternate_reserved0: int = 0
    alternate_packet_rate: int = 0
    alternate_traffic_class: int = 0
    alternate_hop_limit: int = 0
    alternate_sl: int = 0
    alternate_subnet_local: int = 0
    alternate_reserved1: int = 0
    alternate_local_ack_timeout: int = 0
    alternate_reserved2: int = 0

    ATTR_ID: ClassVar[int] = CM_ATTR_REQ
    SHORT: ClassVar[str] = "REQ"
    LAYOUT: ClassVar[Layout] = layout(
        "CM_REQ",
        "IBA Vol 1 12.6.5 (REQ - Request for Communication)",
        F("local_comm_id", 32, "infiniband.cm.req", fmt="hex", doc="Local Communication ID"),
        F("reserved1", 8, None, reserved=True),
        F("vendor_id", 24, None, fmt="hex", reserved=True, doc="Reserved; Linux ECE vendor ID"),
        F("service_id", 64, "infiniband.cm.req.serviceid", fmt="hex"),
        F("local_ca_guid", 64, "infiniband.cm.req.localcaguid", fmt="hex"),
        F("reserved2", 32, None, reserved=True),
        F("local_qkey", 32, "infiniband.cm.req.localqkey", fmt="hex", doc="Local Q_Key (RD/UD)"),
        F("local_qpn", 24, "infiniband.cm.req.localqpn", fmt="hex"),
        F("responder_resources", 8, "infiniband.cm.req.responderres"),
        F("local_eecn", 24, "infiniband.cm.req.localeecn", fmt="hex"),
        F("initiator_depth", 8, "infiniband.cm.req.initdepth"),
        F("remote_eecn", 24, "infiniband.cm.req.remoteeecn", fmt="hex"),
        F("remote_cm_response_timeout", 5, "infiniband.cm.req.remoteresptout"),
        F("transport_service_type", 2, "infiniband.cm.req.transpsvctype", doc="0 RC, 1 UC, 2 RD"),
        F("e2e_flow_control", 1, "infiniband.cm.req.e2eflowctrl"),
        F("starting_psn", 24, "infiniband.cm.req.startpsn", fmt="hex"),
        F("local_cm_response_timeout", 5, "infiniband.cm.req.localresptout"),
        F("retry_count", 3, "infiniband.cm.req.retrcount"),
        F("p_key", 16, "infiniband.cm.req.pkey", fmt="hex"),
        F("path_mtu", 4, "infiniband.cm.req.pppmtu", doc="1 256 ... 5 4096"),
        F("rdc_exists", 1, "infiniband.cm.req.rdcexist"),
        F("rnr_retry_count", 3, "infiniband.cm.req.rnrretrcount"),
        F("max_cm_retries", 4, "infiniband.cm.req.maxcmretr"),
        F("srq", 1, "infiniband.cm.req.srq"),
        F("ext_transport_type", 3, "infiniband.cm.req.ext_transport", doc="1 XRC (Annex A14)"),
        *_path_fields("primary", "prim", "ipv6"),
        *_path_fields("alternate", "alt", "ipv6"),
        ws="infiniband.cm.req",
    )

    def _path(self, prefix: str) -> CMPath:
        return CMPath(*(getattr(self, f"{prefix}_{name}") for name in PATH_FIELDS))

    @property
    def primary_path(self) -> CMPath:
        return self._path("primary")

    @property
    def alternate_path(self) -> CMPath:
        return self._path("alternate")

    def with_paths(self, primary: CMPath | None = None, alternate: CMPath | None = None) -> CMReq:
        """A copy with the primary and/or alternate path replaced."""
        changes: dict[str, Any] = {}
        for prefix, path in (("primary", primary), ("alternate", alternate)):
            if path is not None:
                changes.update({f"{prefix}_{name}": getattr(path, name) for name in PATH_FIELDS})
        return self.replace(**changes)

    @property
    def ip_cm(self) -> tuple[int, int] | None:
        """``(protocol, port)`` when the service ID is an RDMA IP CM one, else ``None``."""
        return parse_ip_cm_service_id(self.service_id)

    def describe(self, field: str) -> str:
        if field.endswith("_gid"):
            gid = getattr(self, field)
            if _v4_mapped(gid):
                return f"{ipaddress.IPv4Address(gid & 0xFFFFFFFF)} ({ipaddress.IPv6Address(gid)})"
        return CMBody.describe(self, field)

    def ws_fields(self) -> dict[str, int]:
        out = Header.ws_fields(self)
        ip = self.ip_cm
        if ip is not None:
            out["infiniband.cm.req.serviceid.prefix"] = self.service_id >> 24
            out["infiniband.cm.req.serviceid.protocol"] = ip[0]
            out["infiniband.cm.req.serviceid.dport"] = ip[1]
        for name in ("localgid", "remotegid"):
            key = f"infiniband.cm.req.prim_{name}"
            if _v4_mapped(out[key]):
                out[key + "_ipv4"] = out.pop(key) & 0xFFFFFFFF
        return out

    def validate(self, offset: int = 0) -> list[MalformedError]:
        if self.path_mtu not in MTU_BYTES:
            return [MalformedError("CM_REQ", "path_mtu", offset + 50, self.path_mtu, "1..5 (256..4096 bytes)")]
        return []


@dataclass(frozen=True, slots=True)
class CMMra(CMBody):
    """Message Receipt Acknowledgement (MRA), 10 bytes + 222 bytes of PrivateData."""

    local_comm_id: int = 0
    remote_comm_id: int = 0
    message_mraed: int = MSG_REQ
    reserved1: int = 0
    service_timeout: int = 0
    reserved2: int = 0

    ATTR_ID: ClassVar[int] = CM_ATTR_MRA
    SHORT: ClassVar[str] = "MRA"
    LAYOUT: ClassVar[Layout] = layout(
        "CM_MRA",
        "IBA Vol 1 12.6.6 (MRA - Message Receipt Acknowledgement)",
        F("local_comm_id", 32, "rdmalab.cm.mra.localcommid", fmt="hex"),
        F("remote_comm_id", 32, "rdmalab.cm.mra.remotecommid", fmt="hex"),
        F("message_mraed", 2, "rdmalab.cm.mra.msgmraed", doc="0 REQ, 1 REP, 2 LAP"),
        F("reserved1", 6, None, reserved=True),
        F("service_timeout", 5, "rdmalab.cm.mra.servicetimeout", doc="4.096 µs × 2^t"),
        F("reserved2", 3, None, reserved=True),
        ws="rdmalab.cm.mra",
    )

    def describe(self, field: str) -> str:
        if field == "message_mraed":
            return f"{MRA_MESSAGE_NAMES[self.message_mraed]} ({self.message_mraed})"
        return CMBody.describe(self, field)

    def validate(self, offset: int = 0) -> list[MalformedError]:
        if self.message_mraed == 3:
            return [MalformedError("CM_MRA", "message_mraed", offset + 8, 3, "0 REQ, 1 REP or 2 LAP")]
        return []


@dataclass(frozen=True, slots=True)
class CMRej(CMBody):
    """Reject (REJ), 84 bytes (72 of Additional Reject Information) + 148 bytes of PrivateData."""

    local_comm_id: int = 0
    remote_comm_id: int = 0
    message_rejected: int = MSG_REQ
    reserved1: int = 0
    reject_info_length: int = 0
    reserved2: int = 0
    reason: int = 0
    ari: int = 0

    ATTR_ID: ClassVar[int] = CM_ATTR_REJ
    SHORT: ClassVar[str] = "REJ"
    LAYOUT: ClassVar[Layout] = layout(
        "CM_REJ",
        "IBA Vol 1 12.6.7 (REJ - Reject)",
        F("local_comm_id", 32, "infiniband.cm.rej.localcommid", fmt="hex"),
        F("remote_comm_id", 32, "infiniband.cm.rej.remotecommid", fmt="hex"),
        F("message_rejected", 2, "infiniband.cm.rej.msgrej", doc="0 REQ, 1 REP, 2 no message"),
        F("reserved1", 6, "infiniband.cm.rej.reserved0", reserved=True),
        F("reject_info_length", 7, "infiniband.cm.rej.rejinfolen", doc="Bytes of ARI that are valid"),
        F("reserved2", 1, "infiniband.cm.rej.reserved1", reserved=True),
        F("reason", 16, "infiniband.cm.rej.reason"),
        F("ari", 576, "infiniband.cm.rej.ari", fmt="bytes", doc="Additional Reject Information, 72 bytes"),
        ws="infiniband.cm.rej",
    )

    @property
    def reason_name(self) -> str:
        return rej_reason_name(self.reason)

    @property
    def ari_bytes(self) -> bytes:
        """The valid part of the ARI (``reject_info_length`` bytes)."""
        return self.ari.to_bytes(72, "big")[: self.reject_info_length]

    def describe(self, field: str) -> str:
        if field == "reason":
            return f"{self.reason_name} ({self.reason})"
        if field == "message_rejected":
            return f"{REJ_MESSAGE_NAMES[self.message_rejected]} ({self.message_rejected})"
        return CMBody.describe(self, field)

    def validate(self, offset: int = 0) -> list[MalformedError]:
        out = []
        if self.message_rejected == 3:
            out.append(MalformedError("CM_REJ", "message_rejected", offset + 8, 3, "0 REQ, 1 REP or 2 no message"))
        if self.reject_info_length > 72:
            out.append(MalformedError("CM_REJ", "reject_info_length", offset + 9, self.reject_info_length,
                                      "at most 72 (the ARI field's size)"))
        return out


@dataclass(frozen=True, slots=True)
class CMRep(CMBody):
    """Reply to Request for Communication (REP), 36 bytes + 196 bytes of PrivateData."""

    local_comm_id: int = 0
    remote_comm_id: int = 0
    local_qkey: int = 0
    local_qpn: int = 0
    vendor_id_h: int = 0
    local_eecn: int = 0
    vendor_id_m: int = 0
    starting_psn: int = 0
    vendor_id_l: int = 0
    responder_resources: int = 0
    initiator_depth: int = 0
    target_ack_delay: int = 0
    failover_accepted: int = 0
    e2e_flow_control: int = 0
    rnr_retry_count: int = 7
    srq: int = 0
    reserved: int = 0
    local_ca_guid: int = 0

    ATTR_ID: ClassVar[int] = CM_ATTR_REP
    SHORT: ClassVar[str] = "REP"
    LAYOUT: ClassVar[Layout] = layout(
        "CM_REP",
        "IBA Vol 1 12.6.8 (REP - Reply to Request for Communication)",
        F("local_comm_id", 32, "infiniband.cm.rep", fmt="hex"),
        F("remote_comm_id", 32, "infiniband.cm.rep.remotecommid", fmt="hex"),
        F("local_qkey", 32, "infiniband.cm.rep.localqkey", fmt="hex"),
        F("local_qpn", 24, "infiniband.cm.rep.localqpn", fmt="hex"),
        F("vendor_id_h", 8, None, fmt="hex", reserved=True, doc="Reserved; Linux ECE vendor ID [23:16]"),
        F("local_eecn", 24, "infiniband.cm.rep.localeecn", fmt="hex"),
        F("vendor_id_m", 8, None, fmt="hex", reserved=True, doc="Reserved; Linux ECE vendor ID [15:8]"),
        F("starting_psn", 24, "infiniband.cm.rep.startpsn", fmt="hex"),
        F("vendor_id_l", 8, None, fmt="hex", reserved=True, doc="Reserved; Linux ECE vendor ID [7:0]"),
        F("responder_resources", 8, "infiniband.cm.rep.respres"),
        F("initiator_depth", 8, "infiniband.cm.rep.initdepth"),
        F("target_ack_delay", 5, "infiniband.cm.rep.tgtackdelay"),
        F("failover_accepted", 2, "infiniband.cm.rep.failoveracc", doc="0 accepted, 1 not supported, 2 rejected"),
        F("e2e_flow_control", 1, "infiniband.cm.rep.e2eflowctrl"),
        F("rnr_retry_count", 3, "infiniband.cm.rep.rnrretrcount"),
        F("srq", 1, "infiniband.cm.rep.srq"),
        F("reserved", 4, "infiniband.cm.rep.reserved", reserved=True),
        F("local_ca_guid", 64, "infiniband.cm.rep.localcaguid", fmt="hex"),
        ws="infiniband.cm.rep",
    )

    @property
    def vendor_id(self) -> int:
        return (self.vendor_id_h << 16) | (self.vendor_id_m << 8) | self.vendor_id_l


@dataclass(frozen=True, slots=True)
class CMRtu(CMBody):
    """Ready To Use (RTU), 8 bytes + 224 bytes of PrivateData."""

    local_comm_id: int = 0
    remote_comm_id: int = 0

    ATTR_ID: ClassVar[int] = CM_ATTR_RTU
    SHORT: ClassVar[str] = "RTU"
    LAYOUT: ClassVar[Layout] = layout(
        "CM_RTU",
        "IBA Vol 1 12.6.9 (RTU - Ready To Use)",
        F("local_comm_id", 32, "infiniband.cm.rtu.localcommid", fmt="hex"),
        F("remote_comm_id", 32, "infiniband.cm.rtu.remotecommid", fmt="hex"),
        ws="infiniband.cm.rtu",
    )


@dataclass(frozen=True, slots=True)
class CMDreq(CMBody):
    """Request for Communication Release (DREQ), 12 bytes + 220 bytes of PrivateData."""

    local_comm_id: int = 0
    remote_comm_id: int = 0
    remote_qpn_eecn: int = 0
    reserved: int = 0

    ATTR_ID: ClassVar[int] = CM_ATTR_DREQ
    SHORT: ClassVar[str] = "DREQ"
    LAYOUT: ClassVar[Layout] = layout(
        "CM_DREQ",
        "IBA Vol 1 12.6.10 (DREQ - Request for Communication Release)",
        F("local_comm_id", 32, "infiniband.cm.dreq.localcommid", fmt="hex"),
        F("remote_comm_id", 32, "infiniband.cm.dreq.remotecommid", fmt="hex"),
        # Wireshark 4.0 files this field under the REQ's name
        F("remote_qpn_eecn", 24, "infiniband.cm.req.remoteqpneecn", fmt="hex"),
        F("reserved", 8, None, reserved=True),
        ws="infiniband.cm.dreq",
    )


@dataclass(frozen=True, slots=True)
class CMDrep(CMBody):
    """Reply to Request for Communication Release (DREP), 8 bytes + 224 bytes of PrivateData."""

    local_comm_id: int = 0
    remote_comm_id: int = 0

    ATTR_ID: ClassVar[int] = CM_ATTR_DREP
    SHORT: ClassVar[str] = "DREP"
    LAYOUT: ClassVar[Layout] = layout(
        "CM_DREP",
        "IBA Vol 1 12.6.11 (DREP - Reply to Request for Communication Release)",
        F("local_comm_id", 32, "infiniband.cm.drsp.localcommid", fmt="hex"),
        F("remote_comm_id", 32, "infiniband.cm.drsp.remotecommid", fmt="hex"),
        ws="infiniband.cm.drsp",
    )


@dataclass(frozen=True, slots=True)
class CMSidrReq(CMBody):
    """Service ID Resolution Request (SIDR_REQ), 16 bytes + 216 bytes of PrivateData."""

    request_id: int = 0
    p_key: int = 0xFFFF
    reserved: int = 0
    service_id: int = 0

    ATTR_ID: ClassVar[int] = CM_ATTR_SIDR_REQ
    SHORT: ClassVar[str] = "SIDR_REQ"
    LAYOUT: ClassVar[Layout] = layout(
        "CM_SIDR_REQ",
        "IBA Vol 1 12.11.1 (SIDR_REQ - Service ID Resolution Request)",
        F("request_id", 32, "rdmalab.cm.sidr_req.requestid", fmt="hex"),
        F("p_key", 16, "rdmalab.cm.sidr_req.pkey", fmt="hex"),
        F("reserved", 16, None, reserved=True),
        F("service_id", 64, "rdmalab.cm.sidr_req.serviceid", fmt="hex"),
        ws="rdmalab.cm.sidr_req",
    )


@dataclass(frozen=True, slots=True)
class CMSidrRep(CMBody):
    """Service ID Resolution Response (SIDR_REP), 96 bytes + 136 bytes of PrivateData."""

    request_id: int = 0
    status: int = 0
    additional_info_length: int = 0
    reserved1: int = 0
    qpn: int = 0
    reserved2: int = 0
    service_id: int = 0
    qkey: int = 0
    additional_info: int = 0

    ATTR_ID: ClassVar[int] = CM_ATTR_SIDR_REP
    SHORT: ClassVar[str] = "SIDR_REP"
    LAYOUT: ClassVar[Layout] = layout(
        "CM_SIDR_REP",
        "IBA Vol 1 12.11.2 (SIDR_REP - Service ID Resolution Response)",
        F("request_id", 32, "rdmalab.cm.sidr_rep.requestid", fmt="hex"),
        F("status", 8, "rdmalab.cm.sidr_rep.status"),
        F("additional_info_length", 8, "rdmalab.cm.sidr_rep.addinfolen"),
        F("reserved1", 16, None, reserved=True),
        F("qpn", 24, "rdmalab.cm.sidr_rep.qpn", fmt="hex"),
        F("reserved2", 8, None, reserved=True),
        F("service_id", 64, "rdmalab.cm.sidr_rep.serviceid", fmt="hex"),
        F("qkey", 32, "rdmalab.cm.sidr_rep.qkey", fmt="hex"),
        F("additional_info", 576, "rdmalab.cm.sidr_rep.addinfo", fmt="bytes", doc="72 bytes (ClassPortInfo)"),
        ws="rdmalab.cm.sidr_rep",
    )

    def describe(self, field: str) -> str:
        if field == "status":
            return f"{SIDR_STATUS_NAMES.get(self.status, 'Reserved')} ({self.status})"
        return CMBody.describe(self, field)


CM_MESSAGES: dict[int, type[CMBody]] = {
    cls.ATTR_ID: cls for cls in (CMReq, CMMra, CMRej, CMRep, CMRtu, CMDreq, CMDrep, CMSidrReq, CMSidrRep)
}

# Fields tshark 4.0 shows differently from the specification: name -> why (do not cross-check).
WIRESHARK_QUIRKS: dict[str, str] = {}
for _p in ("prim", "alt"):
    WIRESHARK_QUIRKS.update({
        f"infiniband.cm.req.{_p}_flowlabel":
            "Wireshark reads 3 bytes with mask 0xfffff000: it shows the flow label's top 12 bits",
        f"infiniband.cm.req.{_p}_reserved0": "Wireshark reads the flow label's first byte with mask 0xfc0",
        f"infiniband.cm.req.{_p}_pktrate":
            "Wireshark reads the flow label's first byte (mask 0x3f), not the word's last byte",
    })
WIRESHARK_QUIRKS["infiniband.cm.req.prim_localgid_ipv4"] = (
    "Wireshark shows the primary GIDs as IPv4 (their last 4 bytes) whenever the frame is IPv4, "
    "as the full GID otherwise; we use the _ipv4 name for IPv4-mapped GIDs")
WIRESHARK_QUIRKS["infiniband.cm.req.prim_remotegid_ipv4"] = WIRESHARK_QUIRKS["infiniband.cm.req.prim_localgid_ipv4"]


# --------------------------------------------------------------------------- decoding


def decode_cm_layers(
    mad: MADHeader, data: bytes, offset: int, end: int, report: Report
) -> tuple[list[tuple[Header, int]], int]:
    """Decode the CM message after a CM MAD header (``offset`` is the MAD data's start).

    Returns the headers (message, then the IP CM header of an IP CM REQ or SIDR_REQ) with
    their offsets, and where the remaining private data starts.
    """
    out: list[tuple[Header, int]] = []
    if mad.class_version != CM_CLASS_VERSION:
        report(MalformedError("MAD", "class_version", offset - MAD_HEADER_SIZE + 2, mad.class_version,
                              f"{CM_CLASS_VERSION} for the CM class (IBA Vol 1 12.6)"))
    cls = CM_MESSAGES.get(mad.attr_id)
    if cls is None:
        return out, offset
    size = cls.LAYOUT.size
    if end - offset < size:
        report(TruncatedError(cls.LAYOUT.name, None, offset, max(0, end - offset), f"{size} bytes for the {cls.SHORT}",
                              detail=cls.LAYOUT.spec))
        return out, offset
    body = cls.decode(data, offset)
    out.append((body, offset))
    for p in body.check(offset):
        report(p)
    pos = offset + size
    sid = getattr(body, "service_id", None)
    if isinstance(body, (CMReq, CMSidrReq)) and sid is not None and is_ip_cm_service_id(sid):
        if end - pos >= IPCMHeader.LAYOUT.size:
            ipcm = (SidrIPCMHeader if isinstance(body, CMSidrReq) else IPCMHeader).decode(data, pos)
            out.append((ipcm, pos))
            for p in ipcm.check(pos):
                report(p)
            pos += IPCMHeader.LAYOUT.size
        else:
            report(TruncatedError("IPCM", None, pos, max(0, end - pos), "36 bytes of IP CM private data",
                                  detail="IBA Vol 1 A11.6.1"))
    return out, pos


# --------------------------------------------------------------------------- whole messages


@dataclass(frozen=True)
class CMMessage:
    """A whole CM MAD: the MAD header, the message, the optional IP CM header and the rest.

    ``private_data`` holds the bytes after the message (after the IP CM header when there is
    one), trailing zeros included, so ``CMMessage.decode(raw).encode() == raw``.  When
    encoding, shorter private data is zero-padded to fill the 256-byte MAD.
    """

    mad: MADHeader
    body: CMBody
    private_data: bytes = b""
    ip_cm: IPCMHeader | None = None
    problems: tuple[DecodeError, ...] = field(default=(), compare=False, repr=False)

    # ------------------------------------------------------------ bytes
    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview, offset: int = 0, *, lenient: bool = False) -> CMMessage:
        """Decode a CM MAD (256 bytes from ``offset``).  Strict unless ``lenient``."""
        raw = bytes(data)
        end = min(len(raw), offset + MAD_SIZE)
        problems: list[DecodeError] = []

        def report(err: DecodeError) -> None:
            if not lenient:
                raise err
            problems.append(err)

        layers, pos = decode_mad_layers(raw, offset, end, report, MAD_CLASSES)
        mad = next((h for h, _ in layers if isinstance(h, MADHeader)), None)
        body = next((h for h, _ in layers if isinstance(h, CMBody)), None)
        ip_cm = next((h for h, _ in layers if isinstance(h, IPCMHeader)), None)
        if mad is None or body is None:
            if mad is None:
                raise TruncatedError("MAD", None, offset, len(raw) - offset, "a 24-byte MAD header")
            if mad.mgmt_class != MGMT_CLASS_CM:
                raise MalformedError("MAD", "mgmt_class", offset + 1, mad.mgmt_class, "0x07 (Communication Management)")
            if mad.attr_id not in CM_MESSAGES:
                raise MalformedError("MAD", "attr_id", offset + 16, mad.attr_id,
                                     "a CM message attribute (0x0010-0x0018)")
            raise TruncatedError("CM", None, pos, len(raw) - pos, "the CM message's fixed fields")
        return cls(mad, body, raw[pos:end], ip_cm, tuple(problems))

    @classmethod
    def from_packet(cls, pkt: Packet, *, lenient: bool = False) -> CMMessage | None:
        """The CM message a decoded packet carries (``None`` if it carries none)."""
        for layer in pkt.layers:
            if isinstance(layer.header, MADHeader) and layer.header.mgmt_class == MGMT_CLASS_CM:
                if layer.header.attr_id in CM_MESSAGES:
                    return cls.decode(pkt.data, layer.offset, lenient=lenient)
        return None

    def encode(self) -> bytes:
        """The 256-byte MAD."""
        if self.mad.attr_id != self.body.ATTR_ID:
            raise EncodeError("MAD", "attr_id", self.mad.attr_id, f"0x{self.body.ATTR_ID:04x} for a {self.body.SHORT}")
        parts = [self.mad.encode(), self.body.encode()]
        if self.ip_cm is not None:
            parts.append(self.ip_cm.encode())
        parts.append(bytes(self.private_data))
        raw = b"".join(parts)
        if len(raw) > MAD_SIZE:
            room = MAD_SIZE - len(raw) + len(self.private_data)
            raise EncodeError(self.body.LAYOUT.name, "private_data", len(self.private_data), f"at most {room} bytes")
        return raw + bytes(MAD_SIZE - len(raw))

    def __bytes__(self) -> bytes:
        return self.encode()

    def headers(self, offset: int = 0) -> list[tuple[Header, int]]:
        """``[(header, offset)]`` as the packet decoder lays them out."""
        out: list[tuple[Header, int]] = [(self.mad, offset), (self.body, offset + MAD_HEADER_SIZE)]
        if self.ip_cm is not None:
            out.append((self.ip_cm, offset + MAD_HEADER_SIZE + self.body.LAYOUT.size))
        return out

    def ws_fields(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for h, _ in self.headers():
            out.update(h.ws_fields())
        return out

    # ------------------------------------------------------------ convenience
    @property
    def name(self) -> str:
        return self.body.SHORT

    @property
    def tid(self) -> int:
        return self.mad.tid

    @property
    def local_comm_id(self) -> int | None:
        v = getattr(self.body, "local_comm_id", None)
        return v if isinstance(v, int) else None

    @property
    def remote_comm_id(self) -> int | None:
        v = getattr(self.body, "remote_comm_id", None)
        return v if isinstance(v, int) else None

    @property
    def service_id(self) -> int | None:
        v = getattr(self.body, "service_id", None)
        return v if isinstance(v, int) else None

    @property
    def dst_port(self) -> int | None:
        """The IP CM destination port (from the service ID), e.g. 7174 for rping."""
        sid = self.service_id
        ip = None if sid is None else parse_ip_cm_service_id(sid)
        return None if ip is None else ip[1]

    @property
    def protocol(self) -> int | None:
        """The IP protocol of an IP CM service ID (6 for rdma_cm's RDMA_PS_TCP)."""
        sid = self.service_id
        ip = None if sid is None else parse_ip_cm_service_id(sid)
        return None if ip is None else ip[0]

    @property
    def src_port(self) -> int | None:
        return None if self.ip_cm is None else self.ip_cm.src_port

    @property
    def src_ip(self) -> IPAddress | None:
        return None if self.ip_cm is None else self.ip_cm.src_address

    @property
    def dst_ip(self) -> IPAddress | None:
        return None if self.ip_cm is None else self.ip_cm.dst_address

    @property
    def user_private_data(self) -> bytes:
        """The consumer's private data (after the IP CM header, if any), trailing zeros kept."""
        return self.private_data

    def summary(self) -> str:
        parts = [f"CM {self.name} TID=0x{self.tid:x}"]
        if self.local_comm_id is not None:
            parts.append(f"local=0x{self.local_comm_id:08x}")
        if self.remote_comm_id is not None:
            parts.append(f"remote=0x{self.remote_comm_id:08x}")
        if isinstance(self.body, CMRej):
            parts.append(f"reason={self.body.reason_name}")
        if self.ip_cm is not None:
            parts.append(f"{self.src_ip}:{self.src_port} -> {self.dst_ip}:{self.dst_port}")
        return " ".join(parts)


# --------------------------------------------------------------------------- builders


def default_tid(local_comm_id: int, hi: int = 1) -> int:
    """A TID as Linux ib_cm forms it: agent's high 32 bits, the local comm ID below."""
    return ((hi & 0xFFFFFFFF) << 32) | (local_comm_id & 0xFFFFFFFF)


def cm_mad(body: CMBody, tid: int, private_data: bytes = b"", *, ip_cm: IPCMHeader | None = None,
           attr_mod: int = 0) -> CMMessage:
    """Wrap a CM message in its MAD header (class 0x07, version 2, method Send)."""
    mad = MADHeader(mgmt_class=MGMT_CLASS_CM, class_version=CM_CLASS_VERSION, method=METHOD_SEND,
                    tid=tid, attr_id=body.ATTR_ID, attr_mod=attr_mod)
    msg = CMMessage(mad, body, bytes(private_data), ip_cm)
    msg.encode()  # raise EncodeError now for values that do not fit
    return msg


def build_req(
    src_ip: AddressLike,
    dst_ip: AddressLike,
    src_port: int,
    dst_port: int = RPING_PORT,
    *,
    local_comm_id: int,
    local_qpn: int,
    starting_psn: int,
    tid: int | None = None,
    protocol: int = IPPROTO_TCP,
    local_ca_guid: int = 0,
    responder_resources: int = 1,
    initiator_depth: int = 1,
    path_mtu: int = MTU_1024,
    retry_count: int = 7,
    rnr_retry_count: int = 7,
    srq: int = 0,
    path: CMPath | None = None,
    private_data: bytes = b"",
    **fields: int,
) -> CMMessage:
    """An rdma_cm REQ over RoCEv2 from ``src_ip:src_port`` to ``dst_ip:dst_port`` (IP CM).

    Defaults are what Linux rdma_cm sends for rping (response timeouts 20, max CM retries 15,
    P_Key 0xFFFF, RC, permissive LIDs, IPv4-mapped GIDs).  ``fields`` sets any other
    :class:`CMReq` field.  ``private_data`` is the consumer's, at most 56 bytes.
    """
    body = CMReq(
        local_comm_id=local_comm_id, service_id=ip_cm_service_id(dst_port, protocol),
        local_ca_guid=local_ca_guid, local_qpn=local_qpn, responder_resources=responder_resources,
        initiator_depth=initiator_depth, starting_psn=starting_psn, path_mtu=path_mtu,
        retry_count=retry_count, rnr_retry_count=rnr_retry_count, srq=srq,
    ).with_paths(primary=path or CMPath.roce(src_ip, dst_ip)).replace(**fields)
    hdr = IPCMHeader.for_addresses(src_ip, dst_ip, src_port)
    return cm_mad(body, default_tid(local_comm_id) if tid is None else tid, private_data, ip_cm=hdr)


def build_rep(
    req: CMMessage,
    *,
    local_comm_id: int,
    local_qpn: int,
    starting_psn: int,
    responder_resources: int | None = None,
    initiator_depth: int | None = None,
    target_ack_delay: int = 15,
    failover_accepted: int = 0,
    e2e_flow_control: int = 0,
    rnr_retry_count: int = 7,
    srq: int = 0,
    local_ca_guid: int = 0,
    private_data: bytes = b"",
    **fields: int,
) -> CMMessage:
    """The passive side's REP to ``req``: same TID, ``remote_comm_id`` = the REQ's local one.

    Responder resources and initiator depth default to the REQ's (swapped, as the passive side
    sees them: its responder resources answer the active side's initiator depth).
    """
    r = req.body
    if not isinstance(r, CMReq):
        raise EncodeError("CM_REP", "req", req.name, "a REQ to reply to")
    body = CMRep(
        local_comm_id=local_comm_id, remote_comm_id=r.local_comm_id, local_qpn=local_qpn,
        starting_psn=starting_psn,
        responder_resources=r.initiator_depth if responder_resources is None else responder_resources,
        initiator_depth=r.responder_resources if initiator_depth is None else initiator_depth,
        target_ack_delay=target_ack_delay, failover_accepted=failover_accepted,
        e2e_flow_control=e2e_flow_control, rnr_retry_count=rnr_retry_count, srq=srq,
        local_ca_guid=local_ca_guid,
    ).replace(**fields)
    return cm_mad(body, req.tid, private_data)


def _ids(msg: CMMessage) -> tuple[int, int]:
    local, remote = msg.local_comm_id, msg.remote_comm_id
    if local is None or remote is None:
        raise EncodeError("CM", "comm_id", msg.name, "a message with local and remote communication IDs")
    return local, remote


def build_rtu(rep: CMMessage, private_data: bytes = b"") -> CMMessage:
    """The active side's RTU answering ``rep``: its TID, the comm IDs seen from this side."""
    local, remote = _ids(rep)
    return cm_mad(CMRtu(local_comm_id=remote, remote_comm_id=local), rep.tid, private_data)


def build_dreq(local_comm_id: int, remote_comm_id: int, remote_qpn: int, *, tid: int | None = None,
               private_data: bytes = b"") -> CMMessage:
    """A DREQ (rdma_disconnect): ``remote_qpn`` is the peer's QPN."""
    body = CMDreq(local_comm_id=local_comm_id, remote_comm_id=remote_comm_id, remote_qpn_eecn=remote_qpn)
    return cm_mad(body, default_tid(local_comm_id) if tid is None else tid, private_data)


def build_drep(dreq: CMMessage, private_data: bytes = b"") -> CMMessage:
    """The DREP answering ``dreq``: its TID, comm IDs swapped."""
    local, remote = _ids(dreq)
    return cm_mad(CMDrep(local_comm_id=remote, remote_comm_id=local), dreq.tid, private_data)


def build_rej(msg: CMMessage, reason: int, *, local_comm_id: int = 0, ari: bytes = b"",
              private_data: bytes = b"") -> CMMessage:
    """A REJ of ``msg`` (a REQ or REP) with ``reason`` (``REJ_*``) and optional ARI bytes."""
    if len(ari) > 72:
        raise EncodeError("CM_REJ", "ari", len(ari), "at most 72 bytes")
    which = {CM_ATTR_REQ: MSG_REQ, CM_ATTR_REP: MSG_REP}.get(msg.mad.attr_id, MSG_OTHER)
    remote = msg.local_comm_id or 0
    body = CMRej(local_comm_id=local_comm_id, remote_comm_id=remote, message_rejected=which,
                 reject_info_length=len(ari), reason=reason, ari=int.from_bytes(ari.ljust(72, b"\0"), "big"))
    return cm_mad(body, msg.tid, private_data)


def build_mra(msg: CMMessage, *, local_comm_id: int = 0, service_timeout: int = 20,
              private_data: bytes = b"") -> CMMessage:
    """An MRA for ``msg`` (REQ, REP or LAP): "I got it, answer will take 4.096 µs × 2^t"."""
    which = {CM_ATTR_REQ: MSG_REQ, CM_ATTR_REP: MSG_REP}.get(msg.mad.attr_id, MSG_OTHER)
    body = CMMra(local_comm_id=local_comm_id, remote_comm_id=msg.local_comm_id or 0,
                 message_mraed=which, service_timeout=service_timeout)
    return cm_mad(body, msg.tid, private_data)


#: the management classes whose data rdmalab decodes beyond the MAD header (and RMPP header): CM,
#: subnet management (SMPs, :mod:`rdmalab.wire.smp`), subnet administration (:mod:`rdmalab.wire.sa`),
#: performance management (:mod:`rdmalab.wire.pma`)
MAD_CLASSES: dict[int, ClassDecoder] = {
    MGMT_CLASS_CM: decode_cm_layers,
    MGMT_CLASS_SM_LID_ROUTED: decode_smp_layers, MGMT_CLASS_SM_DIRECTED_ROUTE: decode_smp_layers,  # SMPs
    MGMT_CLASS_SA: decode_sa_layers,  # SA header and PathRecords, after the RMPP header
    MGMT_CLASS_PERF: decode_pma_layers,  # ClassPortInfo, PortCounters, PortCountersExtended
}


def decode_mad_payload(data: bytes, pkt: Packet, *, lenient: bool) -> None:
    """Decode ``pkt``'s payload as a MAD: append its headers, leave the rest as payload.

    The caller has checked :func:`rdmalab.wire.mad.carries_mad`.  CM MADs are decoded down to
    their messages (:data:`MAD_CLASSES`).
    """
    start = pkt.payload_offset
    end = start + pkt.payload_length

    def report(err: DecodeError) -> None:
        _problem(pkt, err, lenient)

    found, pos = decode_mad_layers(data, start, end, report, MAD_CLASSES)
    for header, at in found:
        pkt.layers.append(Layer(header, at))
    pkt.payload_offset, pkt.payload_length = pos, max(0, end - pos)
    if pkt.payload_wire is not None:  # a cut MAD: what is left of it on the wire
        pkt.payload_wire = max(0, pkt.payload_wire - (pos - start))

