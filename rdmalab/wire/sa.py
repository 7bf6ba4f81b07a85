"""Subnet Administration (SA) MADs and the PathRecord, IBA Vol 1 chapter 15.

An SA MAD (class 0x03, class version 2) is a 256-byte MAD to the SM's LID on QP1: the 24-byte
common header, the 12-byte RMPP header (13.6.2.1; the SA uses RMPP for responses longer than one
MAD), the 20-byte SA header (:class:`SAHeader`, 15.2.1.1: SM_Key, AttributeOffset, ComponentMask)
and 200 bytes of records.  A query says by its ComponentMask which fields of the record in its data
must match; the SA answers with the matching records (GetResp: the first; GetTableResp: all, each
AttributeOffset x 8 bytes apart).

:class:`PathRecord` (15.2.5.16, 64 bytes) is the path between two ports: their GIDs and LIDs,
the SL, MTU, rate, and how many hops (HopLimit, for a path inside a subnet) it takes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from rdmalab.wire.errors import EncodeError, MalformedError, TruncatedError
from rdmalab.wire.header import F, Header, Layout, layout
from rdmalab.wire.mad import (
    MAD_HEADER_SIZE,
    MAD_SIZE,
    MGMT_CLASS_SA,
    RMPP_FLAG_ACTIVE,
    RMPP_FLAG_FIRST,
    RMPP_FLAG_LAST,
    RMPP_HEADER_SIZE,
    RMPP_TYPE_DATA,
    STATUS_METHOD_ATTR_UNSUPPORTED,
    MADHeader,
    Report,
    RMPPHeader,
)
from rdmalab.wire.smp import NodeInfo

SA_CLASS_VERSION = 2  # IBA Vol 1 15.2.1
SA_HEADER_SIZE = 20
SA_DATA_OFFSET = MAD_HEADER_SIZE + RMPP_HEADER_SIZE + SA_HEADER_SIZE  # 56
SA_DATA_SIZE = MAD_SIZE - SA_DATA_OFFSET  # 200
ATTR_PATH_RECORD = 0x0035
ATTR_NODE_RECORD = 0x0011
PATH_RECORD_SIZE = 64

# PathRecord ComponentMask bits, IBA Vol 1 15.2.5.16 (bit n = the n-th field of the record)
PR_SERVICE_ID = 0b11  # ServiceID's two halves, bits 0 and 1
PR_DGID = 1 << 2
PR_SGID = 1 << 3
PR_DLID = 1 << 4
PR_SLID = 1 << 5
PR_RAW_TRAFFIC = 1 << 6
PR_FLOW_LABEL = 1 << 8
PR_HOP_LIMIT = 1 << 9
PR_TCLASS = 1 << 10
PR_REVERSIBLE = 1 << 11
PR_NUMB_PATH = 1 << 12
PR_PKEY = 1 << 13
PR_SL = 1 << 15

# MAD status, class-specific part for the SA (15.2.1.2), in the status field's bits 8-15
SA_STATUS_NO_RECORDS = 0x0300  # ERR_NO_RECORDS
SA_STATUS_REQ_INVALID = 0x0200  # ERR_REQ_INVALID
STATUS_UNSUPPORTED_ATTR = STATUS_METHOD_ATTR_UNSUPPORTED  # 13.4.7 (the name the SA's code uses)


@dataclass(frozen=True, slots=True)
class SAHeader(Header):
    """The SA header after the RMPP header, IBA Vol 1 15.2.1.1 (20 bytes)."""

    sm_key: int = 0
    attr_offset: int = 0
    reserved: int = 0
    component_mask: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "SA", "IBA Vol 1 15.2.1.1 (SA header)",
        F("sm_key", 64, "infiniband.sa.smkey", fmt="hex"),
        F("attr_offset", 16, "infiniband.sa.attributeoffset", doc="record spacing in 8-byte words"),
        F("reserved", 16, None, reserved=True),
        F("component_mask", 64, "infiniband.sa.componentmask", fmt="hex"),
        ws="infiniband.sa",
    )


@dataclass(frozen=True, slots=True)
class PathRecord(Header):
    """PathRecord, IBA Vol 1 15.2.5.16 (64 bytes).  ``hop_limit`` is the number of links between the
    two ports inside the subnet (the SA's own reading of 15.2.5.16's HopLimit, as OpenSM fills it
    when asked without a GRH: 0; we give the hops, which is what this lab is about)."""

    service_id: int = 0
    dgid: int = 0
    sgid: int = 0
    dlid: int = 0
    slid: int = 0
    raw_traffic: int = 0
    reserved0: int = 0
    flow_label: int = 0
    hop_limit: int = 0
    tclass: int = 0
    reversible: int = 0
    numb_path: int = 0
    p_key: int = 0
    qos_class: int = 0
    sl: int = 0
    mtu_selector: int = 0
    mtu: int = 0
    rate_selector: int = 0
    rate: int = 0
    packet_life_time_selector: int = 0
    packet_life_time: int = 0
    preference: int = 0
    reserved1: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "PathRecord", "IBA Vol 1 15.2.5.16 (PathRecord)",
        F("service_id", 64, None, fmt="hex"),
        F("dgid", 128, "infiniband.pathrecord.dgid", fmt="ipv6"),
        F("sgid", 128, "infiniband.pathrecord.sgid", fmt="ipv6"),
        F("dlid", 16, "infiniband.pathrecord.dlid"),
        F("slid", 16, "infiniband.pathrecord.slid"),
        F("raw_traffic", 1, "infiniband.pathrecord.rawtraffic"),
        F("reserved0", 3, None, reserved=True),
        F("flow_label", 20, "infiniband.pathrecord.flowlabel"),
        F("hop_limit", 8, "infiniband.pathrecord.hoplimit"),
        F("tclass", 8, "infiniband.pathrecord.tclass"),
        F("reversible", 1, "infiniband.pathrecord.reversible"),
        F("numb_path", 7, "infiniband.pathrecord.numbpath"),
        F("p_key", 16, "infiniband.pathrecord.p_key", fmt="hex"),
        F("qos_class", 12, None),
        F("sl", 4, "infiniband.pathrecord.sl"),
        F("mtu_selector", 2, "infiniband.pathrecord.mtuselector"),
        F("mtu", 6, "infiniband.pathrecord.mtu"),
        F("rate_selector", 2, "infiniband.pathrecord.rateselector"),
        F("rate", 6, "infiniband.pathrecord.rate"),
        F("packet_life_time_selector", 2, "infiniband.pathrecord.packetlifetimeselector"),
        F("packet_life_time", 6, "infiniband.pathrecord.packetlifetime"),
        F("preference", 8, "infiniband.pathrecord.preference"),
        F("reserved1", 48, None, reserved=True),
        ws="infiniband.pathrecord",
    )


@dataclass(frozen=True, slots=True)
class SAMad:
    """A whole SA MAD: the common header, RMPP header, SA header and the records' bytes."""

    mad: MADHeader
    rmpp: RMPPHeader
    sa: SAHeader
    data: bytes = b""

    def encode(self) -> bytes:
        if len(self.data) > SA_DATA_SIZE:
            raise EncodeError("SA", "data", len(self.data),
                              f"at most {SA_DATA_SIZE} bytes in one MAD (longer answers need RMPP segments)")
        raw = self.mad.encode() + self.rmpp.encode() + self.sa.encode() + self.data
        return raw.ljust(MAD_SIZE, b"\0")

    @classmethod
    def decode(cls, raw: bytes | bytearray | memoryview) -> SAMad:
        b = bytes(raw)
        if len(b) < MAD_SIZE:
            raise TruncatedError("SA", None, 0, len(b), f"a {MAD_SIZE}-byte MAD (IBA 15.2.1)")
        mad = MADHeader.decode(b)
        if mad.mgmt_class != MGMT_CLASS_SA:
            raise MalformedError("SA", "mgmt_class", 1, mad.mgmt_class, "0x03 (Subnet Administration)")
        return cls(mad, RMPPHeader.decode(b, MAD_HEADER_SIZE), SAHeader.decode(b, MAD_HEADER_SIZE + RMPP_HEADER_SIZE),
                   b[SA_DATA_OFFSET:])

    def records(self, size: int = PATH_RECORD_SIZE) -> list[bytes]:
        """The records of a response: AttributeOffset x 8 bytes apart, as many as the RMPP
        PayloadLength says (or one for a Get response)."""
        step = self.sa.attr_offset * 8 or size
        if self.rmpp.active and self.rmpp.data2:
            count = max(0, (self.rmpp.data2 - SA_HEADER_SIZE) // step)
        else:
            count = 1
        return [self.data[i * step:i * step + size] for i in range(count) if i * step + size <= len(self.data)]


def sa_request(method: int, attr_id: int, record: bytes, component_mask: int, tid: int = 0) -> bytes:
    """A SubnAdmGet / SubnAdmGetTable query for ``attr_id`` with the record to match."""
    return SAMad(MADHeader(mgmt_class=MGMT_CLASS_SA, class_version=SA_CLASS_VERSION, method=method, tid=tid,
                           attr_id=attr_id),
                 RMPPHeader(version=1, type=0, flags=0), SAHeader(component_mask=component_mask), record).encode()


def sa_response(request: SAMad, method: int, records: Sequence[bytes], status: int = 0,
                record_size: int = PATH_RECORD_SIZE) -> bytes:
    """The answer to ``request``: ``method`` (GetResp 0x81 or GetTableResp 0x92) with ``records``.

    A GetTableResp is one RMPP DATA segment, first and last, whose PayloadLength is the SA header
    plus the records (13.6.2.1); the records must fit in one MAD (three PathRecords)."""
    data = b"".join(records)
    if method & 0x7F == 0x12:  # GetTable
        rmpp = RMPPHeader(version=1, type=RMPP_TYPE_DATA, flags=RMPP_FLAG_ACTIVE | RMPP_FLAG_FIRST | RMPP_FLAG_LAST,
                          data1=1, data2=SA_HEADER_SIZE + len(data))
    else:
        rmpp = RMPPHeader(version=1, type=0, flags=0)
    mad = request.mad.replace(method=method, status=status)
    sa = request.sa.replace(attr_offset=record_size // 8)
    return SAMad(mad, rmpp, sa, data).encode()


@dataclass(frozen=True, slots=True)
class NodeRecordKey(Header):
    """The first 4 bytes of a NodeRecord, IBA Vol 1 15.2.5.2 (108 bytes): the LID of the node's port;
    its NodeInfo (40 bytes, :class:`rdmalab.wire.smp.NodeInfo`) and NodeDescription (64 bytes) follow."""

    lid: int = 0
    reserved: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "NodeRecord", "IBA Vol 1 15.2.5.2 (NodeRecord)",
        F("lid", 16, "infiniband.sa.lid"),
        F("reserved", 16, None, reserved=True),
        ws="infiniband.sa",
    )


NODE_RECORD_SIZE = 108  # LID, reserved, NodeInfo (40), NodeDescription (64)


def _node_record(data: bytes, start: int) -> list[tuple[Header, int]]:
    return [(NodeRecordKey.decode(data, start), start), (NodeInfo.decode(data, start + 4), start + 4)]


def _path_record(data: bytes, start: int) -> list[tuple[Header, int]]:
    return [(PathRecord.decode(data, start), start)]


#: the SA attributes whose records are decoded in packets: a record's size and its layers
SA_RECORDS: dict[int, tuple[int, Callable[[bytes, int], list[tuple[Header, int]]]]] = {
    ATTR_PATH_RECORD: (PATH_RECORD_SIZE, _path_record),
    ATTR_NODE_RECORD: (NODE_RECORD_SIZE, _node_record),
}


def decode_sa_layers(mad: MADHeader, data: bytes, pos: int, end: int,
                     report: Report) -> tuple[list[tuple[Header, int]], int]:
    """An SA MAD's layers after its RMPP header at ``pos``: the SA header and its records (PathRecords, and
    NodeRecords as a NodeRecord's LID and its NodeInfo: one in a request or a Get response; in an RMPP DATA segment, as many as its PayloadLength holds,
    AttributeOffset x 8 bytes apart).  A short one is reported, not raised."""
    if end - pos < SA_HEADER_SIZE:
        report(TruncatedError("SA", None, pos, max(0, end - pos), f"{SA_HEADER_SIZE} bytes for the SA header",
                              detail="IBA Vol 1 15.2.1.1"))
        return [], pos
    sa = SAHeader.decode(data, pos)
    out: list[tuple[Header, int]] = [(sa, pos)]
    at = pos + SA_HEADER_SIZE
    record = SA_RECORDS.get(mad.attr_id)
    if record is None:
        return out, at
    size, layers = record
    step = sa.attr_offset * 8 or size
    rmpp = RMPPHeader.decode(data, pos - RMPP_HEADER_SIZE)
    if rmpp.active and rmpp.type == RMPP_TYPE_DATA and rmpp.first:
        count = max(0, rmpp.data2 - SA_HEADER_SIZE) // step if rmpp.data2 else (end - at) // step
    else:
        count = 1
    for i in range(count):
        start = at + i * step
        if start + size > end:
            break
        out.extend(layers(data, start))
    return out, at + count * step if count else at
