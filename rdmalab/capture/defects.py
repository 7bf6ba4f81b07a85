"""Known Wireshark 4.0 defects: the one table both the cross-check reports and the tests use.

tshark 4.0 is the oracle for every field rdmalab decodes, but it is wrong or silent in a few
well-understood places.  Each :class:`WiresharkDefect` says *when* it
applies (a predicate over the frame, described in words), *which* fields it affects (glob
patterns over display-filter names), *why*, and where the specification says what the bytes
mean.  :func:`explain` finds the defect that accounts for a difference, if any; a difference
no defect explains is either a new Wireshark defect (add a row here) or an rdmalab bug.

An attribution must rest on the defect's whole signature, the Wireshark side included: a defect
that lives in a dissector (``WiresharkDefect.dissected``) explains nothing in a frame that
dissector never saw, so rdmalab's own miss is not filed under it.

Not every difference is a defect: tshark may hand a frame's payload to another dissector than
rdmalab's, by a well-known port (UDP source port 69 is TFTP in its port table, tried before 4791
because Wireshark tries the lower port first) or by a heuristic dissector.
:func:`dissector_choice` names that cause (the port and the table, or the heuristic), from
tshark's ``frame.protocols`` and its own tables (:class:`DissectorTables`, from ``tshark -G``).
"""

from __future__ import annotations

import fnmatch
import ipaddress
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rdmalab.wire.ib import BTH
from rdmalab.wire.mad import MGMT_CLASS_PERF, MGMT_CLASS_SA, MADHeader
from rdmalab.wire.opcodes import CNP_OPCODE, OPCODES, Op, Transport

if TYPE_CHECKING:
    from rdmalab.capture.reader import CapturedPacket

WiresharkView = Mapping[str, Sequence[Any]]


@dataclass(frozen=True)
class WiresharkDefect:
    """A place where Wireshark 4.0 and the specification (and so rdmalab) part ways."""

    id: str
    condition: str  # when it applies, in words
    fields: tuple[str, ...]  # display-filter names (fnmatch patterns) it affects
    reason: str
    spec: str  # what the bytes mean, per the standard
    reference: str  # the Wireshark source the defect lives in
    applies: Callable[[CapturedPacket, WiresharkView], bool]
    kinds: tuple[str, ...] = ("value", "only_rdmalab", "only_wireshark", "repeated")
    #: the Wireshark protocol whose dissector holds the defect: it explains a difference only in a
    #: frame Wireshark dissected with it (:func:`wireshark_dissected`); None: no such condition
    dissected: str | None = "infiniband"

    def matches(self, key: str) -> bool:
        return any(fnmatch.fnmatchcase(key, pat) for pat in self.fields)


def parse_ws_value(show: str, fmt: str = "dec") -> Any:
    """A tshark ``show`` string as an integer where it is one (as rdmalab holds the value): what the
    cross-check compares (:mod:`rdmalab.capture.crosscheck`) and what a defect's condition reads."""
    s = show.strip()
    if fmt in ("ipv6", "ipv4"):
        try:
            return int(ipaddress.IPv6Address(s) if fmt == "ipv6" else ipaddress.IPv4Address(s))
        except ValueError:
            pass  # Wireshark shows some GIDs as plain bytes
    try:
        if s.startswith(("0x", "0X")):
            return int(s, 16)
        if s.lstrip("-").isdigit():
            return int(s)
        if s in ("True", "False"):
            return int(s == "True")
        parts = s.split(":")
        if len(parts) > 1 and all(len(p) == 2 for p in parts):
            return int("".join(parts), 16)
        if s.count(".") == 3:
            return int(ipaddress.IPv4Address(s))
        if ":" in s:
            return int(ipaddress.IPv6Address(s))
    except ValueError:
        pass
    return s


def _opcodes(cp: CapturedPacket) -> list[int]:
    return [bth.opcode for p in (cp.packet, *cp.pdus) if (bth := p.get(BTH)) is not None]


def _op_of(opcode: int) -> Op | None:
    info = OPCODES.get(opcode)
    return None if info is None else info.op


def _has_opcode(pred: Callable[[int], bool]) -> Callable[[CapturedPacket, WiresharkView], bool]:
    def f(cp: CapturedPacket, ws: WiresharkView) -> bool:
        return any(pred(op) for op in _opcodes(cp))
    return f


def _has_bth(cp: CapturedPacket, ws: WiresharkView) -> bool:
    return any(p.get(BTH) is not None for p in [cp.packet, *cp.pdus])


def _always(cp: CapturedPacket, ws: WiresharkView) -> bool:
    return True


def _iwarp_values(cp: CapturedPacket, key: str) -> list[int]:
    out: list[int] = []
    for pdu in cp.pdus:
        for layer in pdu.layers:
            v = layer.header.ws_fields().get(key)
            if isinstance(v, int):
                out.append(v)
    return out


def _mpa_v2(cp: CapturedPacket, ws: WiresharkView) -> bool:
    return 2 in _iwarp_values(cp, "iwarp_mpa.rev")


def _iwarp_not_seen(cp: CapturedPacket, ws: WiresharkView) -> bool:
    """rdmalab found the frame's PDUs in a stream whose MPA Request/Reply are not in the capture
    (it resynchronised mid-stream) and Wireshark shows no iWARP.  In a stream whose handshake is in
    the capture, a PDU tshark does not show (after a hole, say) is no mid-stream limitation: another
    cause (e.g. :func:`dissector_choice`) or rdmalab's own."""
    return (bool(cp.pdus) and not any(k.startswith("iwarp_mpa") for k in ws)
            and all(p.stream is not None and not p.stream.handshake for p in cp.pdus))


def _rfc7306(cp: CapturedPacket, ws: WiresharkView) -> bool:
    return any(op in (0xB, 0xC, 0xD) for op in _iwarp_values(cp, "iwarp_rdma.opcode"))


_AFTER_BTH = (
    "infiniband.rdeth*", "infiniband.deth*", "infiniband.reth*", "infiniband.atomiceth*", "infiniband.aeth*",
    "infiniband.atomicacketh*", "infiniband.immdt", "infiniband.ieth", "infiniband.feth*",
    "infiniband.invariant.crc", "infiniband.vendor", "infiniband.payload", "infiniband.mad*", "infiniband.cm*",
    "rdmalab.xrceth*", "rdmalab.feth*", "rdmalab.cnp*",
)

WIRESHARK_DEFECTS: list[WiresharkDefect] = [
    WiresharkDefect(
        "cnp-0x81",
        "BTH opcode 0x81 (RoCEv2 CNP, what hardware sends)",
        ("infiniband.invariant.crc", "infiniband.vendor", "rdmalab.cnp*"),
        "Wireshark 4.0 names only 0x80 'CNP'; 0x81 is 'Unknown OpCode' and everything after the BTH, "
        "the ICRC included, is shown as infiniband.vendor",
        "RoCEv2 Annex A17.9.3: a CNP is opcode 0x81 (transport 100b), BECN=1, 16 reserved bytes, ICRC",
        "Wireshark 4.0 epan/dissectors/packet-infiniband.c",
        _has_opcode(lambda op: op == CNP_OPCODE),
    ),
    WiresharkDefect(
        "xrc-not-parsed",
        "BTH opcode 0xA0-0xBF (XRC)",
        _AFTER_BTH,
        "Wireshark 4.0 names XRC opcodes but parses no XRCETH and nothing after the BTH "
        "(infiniband.vendor), so no RETH/AETH/... and no ICRC field",
        "IBA Vol 1 Annex A14.6.1: XRC requests carry an XRCETH (XRC SRQ number) before the RC headers",
        "Wireshark 4.0 epan/dissectors/packet-infiniband.c",
        _has_opcode(lambda op: op >> 5 == Transport.XRC),
    ),
    WiresharkDefect(
        "rd-as-dc",
        "BTH opcode 0x40-0x5F (Reliable Datagram)",
        _AFTER_BTH,
        "Wireshark 4.0 takes every RD opcode for Mellanox Dynamically Connected: a 20-byte BTH, DC names, "
        "and (for 0x51) no RDETH, so every field after the BTH is misplaced",
        "IBA Vol 1 9.3.1 and table 38: RD packets carry RDETH (+ DETH on requests) after a 12-byte BTH",
        "Wireshark 4.0 epan/dissectors/packet-infiniband.c",
        _has_opcode(lambda op: op >> 5 == Transport.RD),
    ),
    WiresharkDefect(
        "fecn-becn",
        "any packet with a BTH",
        ("rdmalab.bth.fecn", "rdmalab.bth.becn", "infiniband.reserved"),
        "Wireshark 4.0/4.4 do not decode FECN/BECN; BTH byte 4 is shown as infiniband.reserved",
        "IBA Vol 1 9.2 and Annex A10: BTH byte 4 bit 7 FECN, bit 6 BECN",
        "Wireshark 4.0 epan/dissectors/packet-infiniband.c",
        _has_bth,
    ),
    WiresharkDefect(
        "immdt-ieth-twice",
        "packets with ImmDt or IETH",
        ("infiniband.immdt", "infiniband.ieth"),
        "Wireshark adds infiniband.immdt / infiniband.ieth twice (the header item and the inner item share "
        "the field), so each value appears twice",
        "IBA Vol 1 9.3.7 / 9.3.8: one 4-byte ImmDt or IETH",
        "Wireshark 4.0 epan/dissectors/packet-infiniband.c",
        _always,
        kinds=("repeated",),
    ),
    WiresharkDefect(
        "atomiceth-reth-names",
        "CmpSwap and FetchAdd (opcode low bits 0x13/0x14)",
        ("infiniband.reth.va", "infiniband.reth.r_key"),
        "Wireshark reports the AtomicETH VA and R_Key under the RETH names; rdmalab emits the same names "
        "so filters match, which a reader must not take for a RETH",
        "IBA Vol 1 9.3.4: AtomicETH = VA(64) R_Key(32) Swap/Add(64) Compare(64)",
        "Wireshark 4.0 epan/dissectors/packet-infiniband.c",
        _has_opcode(lambda op: _op_of(op) in (Op.CMP_SWAP, Op.FETCH_ADD)),
        kinds=("naming",),
    ),
    WiresharkDefect(
        "icrc-not-validated",
        "every packet with an ICRC or VCRC",
        ("rdmalab.icrc*", "rdmalab.vcrc*"),
        "Wireshark displays the ICRC and VCRC (read big-endian, i.e. byte-swapped from the CRC value) and "
        "never validates them; rdmalab's status keys have no Wireshark counterpart",
        "IBA Vol 1 7.8.1 / RoCEv2 Annex A17.3.3: ICRC = CRC-32 over the masked packet, sent LSB first",
        "Wireshark 4.0 epan/dissectors/packet-infiniband.c",
        lambda cp, ws: "infiniband.invariant.crc" in ws or "infiniband.variant.crc" in ws,
        kinds=("only_rdmalab", "not_validated"),
    ),
    WiresharkDefect(
        "rpcordma-false-positive",
        "Send payloads (RoCE and iWARP)",
        ("rpcordma*", "_ws.malformed*"),
        "Wireshark's RPC-over-RDMA heuristic claims plain Send payloads and flags them Malformed; the "
        "cross-check runs tshark with --disable-protocol rpcordma",
        "RFC 8166: RPC-over-RDMA is a ULP, recognisable only by negotiation, not by payload bytes",
        "Wireshark 4.0 epan/dissectors/packet-rpcrdma.c (its heuristic)",
        _always,
        dissected=None,
    ),
    WiresharkDefect(
        "mpa-v2",
        "MPA Request/Reply with Rev 2 (RFC 6581 enhanced connection setup)",
        ("iwarp_mpa.rev", "iwarp_mpa.res", "iwarp_mpa.privatedata", "iwarp_mpa.pdlength", "rdmalab.mpa*"),
        "Wireshark 4.0 does not understand MPA v2: it warns 'Rev field is NOT set to one' / 'Res field is "
        "NOT set to zero' and shows IRD/ORD as raw private data",
        "RFC 6581 §5: Rev 2, the enhanced flag, and IRD/ORD words at the start of the private data",
        "Wireshark 4.0 epan/dissectors/packet-iwarp-mpa.c",
        _mpa_v2,
        dissected="iwarp_mpa",
    ),
    WiresharkDefect(
        "iwarp-mid-stream",
        "iWARP PDUs in a TCP stream whose MPA Request/Reply tshark has not seen",
        ("iwarp_*", "rdmalab.crc32c*", "rdmalab.mpa*", "rdmalab.ddp*", "rdmalab.rdmap*"),
        "Wireshark recognises FPDUs only after both MPA frames; a capture that starts mid-stream is not "
        "decoded as iWARP",
        "RFC 5044 §7: FPDUs follow the MPA Request/Reply exchange",
        "Wireshark 4.0 epan/dissectors/packet-iwarp-mpa.c",
        _iwarp_not_seen,
        dissected=None,
    ),
    WiresharkDefect(
        "rfc7306-opcodes",
        "RDMAP opcodes 0xB (Atomic Response), 0xC/0xD (Immediate Data)",
        ("iwarp_rdma.atomic.*", "iwarp_rdma.imm*", "iwarp_rdma.reserved", "rdmalab.rdmap*", "data.*"),
        "Wireshark 4.0 shows 0xC/0xD as 'Unknown 12/13' with no decoding, does not name atomic Swap, and "
        "mis-parses the Atomic Response (advances 4 bytes instead of 8)",
        "RFC 7306 §5, §6: Immediate Data (8 bytes), Atomic Response = Original Request Id(32) + data(64)",
        "Wireshark 4.0 epan/dissectors/packet-iwarp-ddp-rdmap.c",
        _rfc7306,
        dissected="iwarp_ddp_rdmap",
    ),
    WiresharkDefect(
        "flush-atomic-write",
        "BTH opcode FLUSH (0x1C/0x5C/0xBC) or ATOMIC WRITE (0x1D/0xBD)",
        _AFTER_BTH,
        "Wireshark 4.0 does not know FLUSH or ATOMIC WRITE (4.4 does): 'Unknown OpCode', rest as vendor",
        "IBA Memory Placement Extensions (Annex A19): FLUSH = FETH + RETH; ATOMIC WRITE = RETH + 8 bytes",
        "Wireshark 4.0 epan/dissectors/packet-infiniband.c",
        _has_opcode(lambda op: _op_of(op) in (Op.FLUSH, Op.ATOMIC_WRITE)),
    ),
    WiresharkDefect(
        "cm-path-pktrate",
        "CM REQ (MAD class 0x07, attribute 0x0010)",
        ("infiniband.cm.req.prim_pktrate", "infiniband.cm.req.alt_pktrate",
         "infiniband.cm.req.prim_flowlabel", "infiniband.cm.req.alt_flowlabel",
         "infiniband.cm.req.prim_reserved0", "infiniband.cm.req.alt_reserved0"),
        "Wireshark 4.0 mis-reads the path's FlowLabel/PacketRate word: the flow label from 3 bytes under a "
        "32-bit mask (losing its low 8 bits) and the PacketRate from the word's first byte instead of its last",
        "IBA Vol 1 12.6.5 (CM REQ): the 32-bit word is FlowLabel(20) | Reserved(6) | PacketRate(6)",
        "Wireshark 4.0 epan/dissectors/packet-infiniband.c (CM REQ body, offset 52 + 36); found by this cross-check",
        lambda cp, ws: "infiniband.cm.req.prim_pktrate" in ws,
    ),
]

WIRESHARK_DEFECTS.append(WiresharkDefect(
    "cm-alt-reserved1-twice",
    "CM REQ alternate path",
    ("infiniband.cm.req.alt_reserved1",),
    "Wireshark 4.0 adds infiniband.cm.req.alt_reserved1 twice (at the alternate path's last two bytes), "
    "where the primary path has one prim_reserved1",
    "IBA Vol 1 12.6.5 (CM REQ): the alternate path has the same layout as the primary path",
    "Wireshark 4.0 epan/dissectors/packet-infiniband.c; found by this cross-check",
    lambda cp, ws: "infiniband.cm.req.alt_reserved1" in ws,
    kinds=("repeated", "value"),
))

WIRESHARK_DEFECTS.append(WiresharkDefect(
    "artemis-port-5445",
    "iWARP on TCP port 5445 (SMB Direct over iWARP, MS-SMBD)",
    ("artemis*", "iwarp_*"),
    "Wireshark 4.0's ActiveMQ Artemis dissector registers TCP port 5445, and a port dissector is tried before "
    "the iwarp_mpa heuristic, so SMB Direct's MPA frames and FPDUs are not decoded at all (tshark 4.0.17: none "
    "of a siw capture's moved to port 5445, all with --disable-protocol artemis); the cross-check runs tshark "
    "with --disable-protocol artemis",
    "MS-SMBD 2.1: SMB Direct over iWARP listens on TCP port 5445; RFC 5044 7.1: MPA frames start the stream",
    "Wireshark 4.0 epan/dissectors/packet-artemis.c (its TCP port range)",
    _always,
    kinds=("disabled",),
))



def cut_by_capture(cp: CapturedPacket) -> bool:
    """Whether the capture cut the frame (a snap length: its length on the wire longer than what was captured)."""
    return bool(cp.wire_length) and cp.wire_length > len(cp.packet.data)


def _short_mad_parse(cp: CapturedPacket, ws: WiresharkView) -> bool:
    mad = cp.packet.get(MADHeader)
    return (mad is not None and "infiniband.invariant.crc" not in ws
            and (mad.mgmt_class == MGMT_CLASS_PERF or (mad.mgmt_class == MGMT_CLASS_SA and mad.attr_id == 0x0011)))


WIRESHARK_DEFECTS.append(WiresharkDefect(
    "mad-parse-short-no-crc",
    "Performance Management MADs (class 0x04: ClassPortInfo, PortCounters, ...) and SA NodeRecords",
    ("infiniband.invariant.crc", "infiniband.variant.crc"),
    "Wireshark shows the ICRC and VCRC only when exactly their 6 bytes are left after its parse of the packet; "
    "its PerfMgt attribute parsers and its SA NodeRecord parser stop inside the MAD (tshark 4.0: PortCounters' "
    "last field ends 152 bytes before the MAD does, ClassPortInfo's 120, a NodeRecord's 92), so no CRC field "
    "is shown for these packets",
    "IBA Vol 1 13.4.2: a MAD is 256 bytes; 7.8: the ICRC and VCRC follow the payload",
    "Wireshark 4.0 epan/dissectors/packet-infiniband.c (parse_PERF, parse_SUBA_Attribute and their attribute "
    "parsers; the CRCs are added by dissect_infiniband_common when 6 bytes remain); found by this cross-check "
    "on captures of `rdmalab ibsim -w`",
    _short_mad_parse,
    kinds=("only_rdmalab",),
))

#: the fields of a MAD and what it carries (its class's header, its attributes): every Wireshark name an
#: rdmalab MAD header declares matches one (tests/capture/test_crosscheck_causes.py holds it so)
MAD_FIELDS = tuple(f"infiniband.{p}*" for p in (
    "mad.", "rmpp.", "cm.", "sa.", "smpdirected.", "smplid.", "classportinfo.", "nodeinfo.", "notice.",
    "pathrecord.", "portcounters.", "portcounters_ext.", "portinfo.", "sminfo.", "switchinfo."))


def _cut_mad(cp: CapturedPacket, ws: WiresharkView) -> bool:
    """A MAD in a RoCE datagram the capture cut short (a snap length: the frame was longer on the wire)."""
    return cp.packet.get(MADHeader) is not None and cut_by_capture(cp) and "infiniband.mad.mgmtclass" not in ws


WIRESHARK_DEFECTS.append(WiresharkDefect(
    "cut-mad-not-parsed",
    "a MAD (QP0/QP1's datagrams) in a packet the capture cut short (a snap length)",
    MAD_FIELDS,
    "Wireshark checks the packet's length before it parses a MAD ('Invalid Packet Length from LRH!', the "
    "packet malformed) and shows no MAD field; rdmalab shows the MAD's fields the capture holds and names "
    "the packet truncated",
    "IBA Vol 1 13.4.2: a MAD is 256 octets, its common header (13.4.3) first; a capture's snap length keeps "
    "the first octets of a frame (pcap's caplen below its wire length)",
    "Wireshark 4.0 epan/dissectors/packet-infiniband.c (the packet length check before the MAD's parse), as "
    "tshark 4.0.17 shows it on a CM REQ cut at 212 octets (tests/capture/test_crosscheck_causes.py)",
    _cut_mad,
    kinds=("only_rdmalab",),
))


#: the layers of a RoCE packet after its UDP header: the BTH, every header the opcode table names after it, a MAD
_IB_TRANSPORT = frozenset({BTH.LAYOUT.name, MADHeader.LAYOUT.name,
                           *(h.LAYOUT.name for info in OPCODES.values() for h in info.headers)})


def _headers_into_icrc(cp: CapturedPacket, ws: WiresharkView) -> bool:
    """A RoCE datagram, whole in the capture, too short for its transport headers and the 4-octet ICRC
    after them: rdmalab names a header truncated (:func:`rdmalab.wire.packet.decode_transport`: the BTH
    needs 16 octets, the others end before the ICRC), Wireshark read a BTH there."""
    whole = not cp.wire_length or cp.wire_length <= len(cp.packet.data)
    return (whole and "infiniband.bth.opcode" in ws
            and any(p.kind == "truncated" and p.layer in _IB_TRANSPORT for p in cp.packet.problems))


WIRESHARK_DEFECTS.append(WiresharkDefect(
    "headers-into-icrc",
    "a RoCE datagram, whole in the capture, too short for its transport headers (or its MAD) and its ICRC "
    "(a damaged IP or UDP length, or a damaged packet)",
    ("infiniband.bth*", "infiniband.invariant.crc", "infiniband.variant.crc", *_AFTER_BTH),
    "Wireshark parses the headers the opcode names from the octets there are, the ICRC's among them (a BTH "
    "from any 12 octets), then shows as ICRC, or as VCRC, the octets left; rdmalab reads the ICRC at the "
    "datagram's end, parses the headers before it, and names the header that does not fit truncated",
    "IBA Vol 1 9.2: the BTH is 12 octets and the opcode names the headers after it; 13.4.2: a MAD is 256 "
    "octets; 7.8.1 and RoCEv2 Annex A17.3.3: every packet ends in its 4-octet ICRC (RoCE has no VCRC)",
    "Wireshark 4.0 epan/dissectors/packet-infiniband.c, as tshark 4.0.17 shows it on damaged copies of real "
    "captures (tests/capture/test_crosscheck_causes.py)",
    _headers_into_icrc,
    kinds=("only_wireshark", "only_rdmalab"),
))



def _unnamed_opcode(cp: CapturedPacket, ws: WiresharkView) -> bool:
    """A BTH opcode the IBA's table does not name (reserved, or manufacturer-specific: transport 111b),
    which tshark shows as vendor data; the frame's own, or that of the datagram an ICMP error quotes."""
    quoted = cp.packet.quoted
    ops = [*_opcodes(cp), *([bth.opcode] if quoted is not None and (bth := quoted.get(BTH)) is not None else [])]
    return "infiniband.vendor" in ws and any(op not in OPCODES and op != CNP_OPCODE for op in ops)


WIRESHARK_DEFECTS.append(WiresharkDefect(
    "unnamed-opcode-vendor",
    "a BTH opcode the IBA names no operation for (a reserved one, or a manufacturer-specific one: 0xC0-0xFF)",
    ("infiniband.invariant.crc", "infiniband.vendor", "infiniband.payload"),
    "Wireshark names the opcode 'Unknown' and shows every octet after the BTH, the ICRC's included, as "
    "infiniband.vendor; rdmalab reads the ICRC at the packet's end, as for any opcode, and the octets between "
    "as the payload",
    "IBA Vol 1 9.2 and table 38: opcodes a transport does not list are reserved, transport 111b is "
    "manufacturer-specific; 7.8.1 and RoCEv2 Annex A17.3.3: every packet ends in its ICRC",
    "Wireshark 4.0 epan/dissectors/packet-infiniband.c (an opcode outside its table: the rest as vendor data), "
    "as tshark 4.0.17 shows it on damaged copies of real captures (tests/capture/test_crosscheck_causes.py)",
    _unnamed_opcode,
    kinds=("only_rdmalab", "only_wireshark"),
))


def _octets_after_headers(cp: CapturedPacket, ws: WiresharkView) -> bool:
    """An opcode without payload whose packet holds octets between its headers and its ICRC
    (:func:`rdmalab.wire.packet.decode_transport` names them a malformed payload), tshark showing no ICRC."""
    return "infiniband.invariant.crc" not in ws and any(
        p.kind == "malformed" and p.layer == "Payload" for q in (cp.packet, *cp.pdus) for p in q.problems)


WIRESHARK_DEFECTS.append(WiresharkDefect(
    "octets-after-headers-no-crc",
    "an opcode without payload (an ACK, an Atomic ACK, a READ request ...) whose packet holds octets after its "
    "headers, before the ICRC (a damaged opcode or length)",
    ("infiniband.invariant.crc",),
    "Wireshark shows the ICRC only when exactly its 4 octets are left after the headers it parsed; with octets "
    "between it shows neither them nor the ICRC; rdmalab reads the ICRC at the packet's end and names the "
    "octets before it a malformed payload",
    "IBA Vol 1 9.2 and table 38: the opcode names the headers; 7.8.1 and RoCEv2 Annex A17.3.3: every packet "
    "ends in its 4-octet ICRC",
    "Wireshark 4.0 epan/dissectors/packet-infiniband.c (the CRCs are added by dissect_infiniband_common when "
    "exactly their octets remain), as tshark 4.0.17 shows it on damaged copies of real captures",
    _octets_after_headers,
    kinds=("only_rdmalab",),
))

def _mpa_lengths(ws: WiresharkView) -> list[Any]:
    """tshark's MPA lengths of the frame, in order."""
    return [parse_ws_value(str(v)) for v in ws.get("iwarp_mpa.ulpdulength", [])]


def _no_iwarp(ws: WiresharkView) -> bool:
    """Whether tshark shows no MPA, DDP or RDMAP field in the frame."""
    return not any(k.startswith(("iwarp_mpa", "iwarp_ddp", "iwarp_rdma")) for k in ws)


#: tshark's TCP sequence analysis flags after which its TCP dissector hands the payload to no dissector
_TCP_AGAIN = ("tcp.analysis.retransmission", "tcp.analysis.out_of_order", "tcp.analysis.fast_retransmission",
              "tcp.analysis.spurious_retransmission")


def _tcp_analysis_again(cp: CapturedPacket, ws: WiresharkView) -> bool:
    """FPDUs rdmalab took from a segment that tshark's sequence analysis calls a retransmission or out of
    order, in a frame tshark shows no iWARP in."""
    return bool(cp.pdus) and any(k in ws for k in _TCP_AGAIN) and _no_iwarp(ws)


WIRESHARK_DEFECTS.append(WiresharkDefect(
    "tcp-analysis-not-new",
    "an iWARP segment whose octets tshark's TCP sequence analysis takes for ones it has seen (a retransmission, "
    "out of order), its direction's highest sequence number moved past them by another segment (a stray or "
    "damaged one, even without payload)",
    ("iwarp_*", "rdmalab.crc32c*", "rdmalab.mpa*", "rdmalab.ddp*", "rdmalab.rdmap*"),
    "Wireshark hands the payload of a segment its sequence analysis calls a retransmission or out of order to "
    "no dissector (no MPA, DDP or RDMAP); rdmalab follows each direction by the octets it has taken (a "
    "segment without payload moves nothing), so the octets are new to it and it decodes their FPDUs",
    "RFC 9293 3.4 and 3.10.7.4: a segment's octets are placed by its sequence number; RFC 5044 7: FPDUs are "
    "found by their MPA lengths in the stream",
    "Wireshark 4.0 epan/dissectors/packet-tcp.c (its sequence analysis and reassembly), as tshark 4.0.17 shows it "
    "on damaged copies of real siw captures (tests/capture/test_crosscheck_causes.py)",
    _tcp_analysis_again,
    kinds=("only_rdmalab",),
    dissected=None,
))


#: a key the cross-check adds to tshark's fields of a frame in a TCP conversation tshark started again at a
#: SYN without ACK it took for a reuse of the conversation's ports ("TCP Port numbers reused": another
#: sequence number than the conversation's first); no field of tshark's has the name
NEW_CONVERSATION = "crosscheck:tcp.stream started again by a SYN"


def _new_conversation(cp: CapturedPacket, ws: WiresharkView) -> bool:
    """FPDUs rdmalab took from a segment of a connection tshark started again at a SYN without ACK, in a
    frame tshark shows no iWARP in."""
    return NEW_CONVERSATION in ws and bool(cp.pdus) and _no_iwarp(ws)


WIRESHARK_DEFECTS.append(WiresharkDefect(
    "tcp-syn-new-conversation",
    "an iWARP connection on which a segment with SYN set and ACK not set appears, at another sequence number "
    "than the connection's first SYN (a damaged flag: its payload at the octet the stream is at)",
    ("iwarp_*", "rdmalab.crc32c*", "rdmalab.mpa*", "rdmalab.ddp*", "rdmalab.rdmap*"),
    "Wireshark takes such a SYN for a new connection on the same ports ('TCP Port numbers reused') and starts a "
    "new conversation for both directions, in which it has seen no MPA Request and Reply: it decodes no iWARP "
    "in either direction after it (a SYN with ACK set it does not start again: it decodes on); rdmalab takes a "
    "SYN whose payload starts at the octet its direction is at for a damaged flag and follows both directions' "
    "FPDUs on",
    "RFC 9293 3.4.1: a SYN gives a direction a new initial sequence number (one that lands on the stream's next "
    "octet is a 1 in 2**32 chance); RFC 5044 7.1: the MPA Request and Reply start a connection's iWARP streams",
    "Wireshark 4.0 epan/dissectors/packet-tcp.c (tcp.analysis.reused_ports, a new conversation), as tshark "
    "4.0.17 shows it on copies of siw's rping with a Send's flags changed (tests/capture/test_crosscheck_causes.py)",
    _new_conversation,
    kinds=("only_rdmalab",),
    dissected=None,
))


def _is_cut(pdu: Any) -> bool:
    """An FPDU the capture cut (:func:`rdmalab.wire.iwarp.decode_cut_fpdu`: a truncated problem on its MPA length)."""
    return any(p.kind == "truncated" and p.layer == "MPA" for p in pdu.problems)


def _cut_fpdu(cp: CapturedPacket, ws: WiresharkView) -> bool:
    """An FPDU the capture cut whose MPA length tshark shows (each of the frame's MPA lengths rdmalab's), and of
    DDP and RDMAP only what the FPDUs captured whole before it in the segment hold, value for value."""
    if not any(_is_cut(p) for p in cp.pdus) or _mpa_lengths(ws) != _iwarp_values(cp, "iwarp_mpa.ulpdulength"):
        return False  # (tshark's MPA lengths rdmalab's, the cut FPDU's included: the same FPDU boundaries)
    whole = [p for p in cp.pdus if not _is_cut(p)]
    for key, shown in ws.items():
        if key.startswith(("iwarp_ddp.", "iwarp_rdma.")) and any(str(v) for v in shown):  # (not a tree node)
            mine = [v for p in whole for la in p.layers for k, v in la.header.ws_fields().items() if k == key]
            if [parse_ws_value(str(v)) for v in shown] != mine:
                return False
    return True


WIRESHARK_DEFECTS.append(WiresharkDefect(
    "cut-fpdu-mpa-only",
    "an FPDU the capture cut (a snap length shorter than the segment: a headers-only capture)",
    ("iwarp_ddp*", "iwarp_rdma*", "rdmalab.ddp*", "rdmalab.rdmap*", "rdmalab.crc32c*"),
    "Wireshark's MPA dissector shows the ULPDU length of an FPDU the capture cut ('MPA FPDU [Packet size limited "
    "during capture]') and hands none of it to DDP/RDMAP; rdmalab also decodes the DDP and RDMAP headers (and "
    "the headers the opcode names) that were captured whole",
    "RFC 5044 4.1: the FPDU starts with its ULPDU length; RFC 5041 4 and RFC 5040 4: the DDP and RDMAP headers "
    "follow it",
    "Wireshark 4.0 epan/dissectors/packet-iwarp-mpa.c (an FPDU not wholly in the frame), as tshark 4.0.17 shows "
    "it on siw captures cut to snap lengths (tests/capture/test_iwarp_cut_segments.py)",
    _cut_fpdu,
    kinds=("only_rdmalab", "value"),
    dissected="iwarp_mpa",
))


def _retransmitted_cut(cp: CapturedPacket, ws: WiresharkView) -> bool:
    """A segment the capture cut, in which rdmalab found no FPDU (octets it already had), that tshark's
    sequence analysis calls a retransmission or out of order and whose FPDU length its MPA dissector shows."""
    return cut_by_capture(cp) and not cp.pdus and "iwarp_mpa.ulpdulength" in ws and any(k in ws for k in _TCP_AGAIN)


WIRESHARK_DEFECTS.append(WiresharkDefect(
    "retransmitted-cut-fpdu",
    "a retransmission of a segment the capture cut (a snap length), holding the head of an FPDU",
    ("iwarp_*", "rdmalab.crc32c*", "rdmalab.mpa*", "rdmalab.ddp*", "rdmalab.rdmap*"),
    "Wireshark keeps no segment the capture cut for reassembly, so it does not take the retransmission for octets "
    "it has shown and its MPA dissector shows the FPDU's length again; rdmalab decodes no octets of a segment it "
    "already has, as tshark does for a segment captured whole",
    "RFC 9293 3.10.7.4: a retransmission carries octets already sent; RFC 5044 7: each FPDU once in the stream",
    "Wireshark 4.0 epan/dissectors/packet-tcp.c (no reassembly of a frame the capture cut) and packet-iwarp-mpa.c, "
    "as tshark 4.0.17 shows it on siw captures cut to snap lengths (tests/capture/test_iwarp_cut_segments.py)",
    _retransmitted_cut,
    kinds=("only_wireshark",),
    dissected="iwarp_mpa",
))

#: a key the cross-check adds to tshark's fields of a frame of a TCP direction in which the capture cut a segment
#: with payload at or before this frame (a snap length): its value is that segment's frame number; no field of
#: tshark's has the name
CUT_BEFORE = "crosscheck:a segment of this direction cut by the capture"


def _after_cut_segment(cp: CapturedPacket, ws: WiresharkView) -> bool:
    """FPDUs rdmalab verified (each one's CRC32c good, or without a CRC no problem; the FPDU the capture cut no
    problem but that) in a direction where the capture cut a segment at or before this frame, whose MPA lengths
    tshark does not show; or a segment the capture cut in that direction in which rdmalab finds no FPDU begin
    (it goes on with one begun before) and tshark reads one MPA length at its first octet, whose FPDU would run
    past the segment's end."""
    if CUT_BEFORE not in ws:
        return False
    if not cp.pdus:  # a cut segment in which no FPDU begins: tshark's MPA length read at its first octet
        lengths, size = _mpa_lengths(ws), ws.get("tcp.len", [])
        return (cut_by_capture(cp) and len(lengths) == 1 and isinstance(lengths[0], int) and len(size) == 1
                and 2 + lengths[0] + 4 > parse_ws_value(str(size[0])))  # (its FPDU would run past the segment)
    for p in cp.pdus:
        if _is_cut(p) and len(p.problems) == 1:  # (the FPDU the capture cut: found in step, its header read)
            continue
        if p.crc_status == "bad" or (p.crc_status != "good" and p.problems):
            return False
    return _mpa_lengths(ws) != _iwarp_values(cp, "iwarp_mpa.ulpdulength")


WIRESHARK_DEFECTS.append(WiresharkDefect(
    "cut-segment-loses-alignment",
    "the FPDUs of a TCP direction after a segment the capture cut (a snap length shorter than the segment: "
    "a GSO segment longer than tcpdump's -s), where FPDUs span segments",
    ("iwarp_*", "rdmalab.crc32c*", "rdmalab.mpa*", "rdmalab.ddp*", "rdmalab.rdmap*"),
    "Wireshark keeps no segment the capture cut for reassembly, so the rest of an FPDU begun in the segment "
    "before is not joined to it: its MPA dissector reads an MPA length at the cut segment's first octet, inside "
    "that FPDU, and from then on takes lengths where no FPDU begins (often no iWARP at all for the rest of the "
    "direction); rdmalab keeps the stream in step past the octets not captured and finds the FPDUs after them, "
    "their CRC32c good",
    "RFC 5044 4.1 and 7: FPDUs follow one another in the stream, each found by the ULPDU length of the one "
    "before; a capture's snap length keeps the first octets of a frame (pcap's caplen below its wire length)",
    "Wireshark 4.0 epan/dissectors/packet-tcp.c (no reassembly of a frame the capture cut) and "
    "packet-iwarp-mpa.c (tcp_dissect_pdus from the segment's first octet), as tshark 4.0.17 shows it on a live "
    "siw capture whose 10,644-octet segment tcpdump -s 9216 cut, and on siw's captures with one segment cut "
    "(tests/capture/test_iwarp_cut_segments.py)",
    _after_cut_segment,
    kinds=("only_rdmalab", "value", "only_wireshark"),
    dissected=None,
))

DEFECTS_BY_ID = {d.id: d for d in WIRESHARK_DEFECTS}


#: Wireshark protocol -> the prefixes of its display-filter field names
_FIELD_PREFIXES = {"infiniband": ("infiniband.",), "iwarp_mpa": ("iwarp_mpa.",),
                   "iwarp_ddp_rdmap": ("iwarp_ddp.", "iwarp_rdma.")}


def wireshark_dissected(ws: WiresharkView, protocol: str) -> bool:
    """Whether Wireshark dissected this frame with ``protocol``: named in its ``frame.protocols``
    when the view has it (tshark's PDML does), else shown by at least one of its fields."""
    chain = ws.get("frame.protocols")
    if chain:
        return protocol in str(chain[0]).split(":")
    prefixes = _FIELD_PREFIXES.get(protocol, (protocol + ".",))
    return any(k.startswith(prefixes) for k in ws)


def explain(cp: CapturedPacket, ws: WiresharkView, key: str, kind: str) -> WiresharkDefect | None:
    """The known defect that accounts for a ``kind`` difference on ``key`` in this frame, if any:
    one whose fields, kinds and condition match, in a frame its dissector saw."""
    for d in WIRESHARK_DEFECTS:
        if kind not in d.kinds or not d.matches(key):
            continue
        if d.dissected is not None and not wireshark_dissected(ws, d.dissected):
            continue
        if d.applies(cp, ws):
            return d
    return None


# ----------------------------------------------------------------------------- tshark's dissector choice


@dataclass(frozen=True)
class DissectorTables:
    """How tshark picks a dissector for a UDP/TCP payload: its port tables (``tshark -G decodes``:
    ``("udp.port", 69) -> "tftp"``), its enabled heuristic dissectors per table (``tshark -G
    heuristic-decodes``: ``"udp" -> {...}``), and each protocol's short name (``tshark -G
    protocols``: ``"tftp" -> "TFTP"``)."""

    ports: Mapping[tuple[str, int], str]
    heuristics: Mapping[str, frozenset[str]]
    names: Mapping[str, str]

    @classmethod
    def parse(cls, decodes: str, heuristics: str, protocols: str) -> DissectorTables:
        """From the text of the three ``tshark -G`` reports (tab-separated lines)."""
        ports: dict[tuple[str, int], str] = {}
        for line in decodes.splitlines():
            parts = line.split("\t")
            if len(parts) == 3 and parts[0].endswith(".port") and parts[1].isdigit():
                ports[(parts[0], int(parts[1]))] = parts[2]
        heur: dict[str, set[str]] = {}
        for line in heuristics.splitlines():
            parts = line.split("\t")
            if len(parts) == 3 and parts[2] == "T":
                heur.setdefault(parts[0], set()).add(parts[1])
        names = {}
        for line in protocols.splitlines():
            parts = line.split("\t")
            if len(parts) == 3:
                names[parts[2]] = parts[1]
        return cls(ports, {k: frozenset(v) for k, v in heur.items()}, names)


#: the protocol rdmalab decodes on top of each carrier, and the field prefixes it owns there
_OURS = {"infiniband": ("infiniband.", "rdmalab."), "iwarp_mpa": ("iwarp_", "rdmalab.")}


@dataclass(frozen=True)
class DissectorChoice:
    """tshark dissected a frame's UDP/TCP payload as ``theirs`` where rdmalab decoded ``ours``,
    because ``port`` is ``theirs`` in its port table, or (``port`` None) a heuristic claimed it."""

    carrier: str  # "udp" or "tcp"
    ours: str  # the Wireshark name of the protocol rdmalab decoded: "infiniband" or "iwarp_mpa" ("": none)
    theirs: str  # the protocol tshark chose, as frame.protocols names it
    name: str  # its short name ("TFTP")
    port: int | None
    held: bool = False  # the chosen dissector kept the bytes as a TCP segment to reassemble
    #: where the payload rdmalab leaves as bytes starts, as tshark counts a field's position (``ours`` ""):
    #: tshark's fields from there are of what it dissected inside (an encapsulated frame's eth.*, ip.* ...)
    inside: int | None = None

    @property
    def text(self) -> str:
        if self.port is not None:
            held = ", which kept the bytes as a segment to reassemble" if self.held else ""
            return f"tshark dissected {self.carrier.upper()} port {self.port} as {self.name} (its port table){held}"
        return f"tshark's {self.name} heuristic dissector claimed the {self.carrier.upper()} payload (its heuristic list)"

    def covers(self, key: str) -> bool:
        """Whether a difference on ``key`` follows from the choice: a field of the protocol rdmalab
        decoded, which tshark never looked at.  (A payload rdmalab left as bytes: no key as such, but the
        fields tshark found in it, :attr:`inside`.)"""
        return bool(self.ours) and key.startswith(_OURS[self.ours])


def dissector_choice(cp: CapturedPacket, ws: WiresharkView,
                     tables: Callable[[], DissectorTables]) -> DissectorChoice | None:
    """Why tshark's ``frame.protocols`` lacks the protocol rdmalab decoded in this frame, when its
    port table (for one of the frame's ports; the lower one is tried first) or an enabled
    heuristic names the protocol it chose instead.  A TCP payload tshark shows only as
    ``tcp.segment_data`` (nothing after ``tcp``) was kept for reassembly by the dissector its port
    table names for one of the ports (HTTP for port 80 waits for the end of a header).  None when
    the protocols agree, the view has no ``frame.protocols``, or neither table backs tshark's
    choice (then it is unexplained).  ``tables`` is called only when tshark's protocols go on past
    the last one rdmalab decoded (:func:`_inside_choice`: a payload rdmalab leaves as bytes)."""
    chain_v = ws.get("frame.protocols")
    if not chain_v:
        return None
    chain = str(chain_v[0]).split(":")
    carrier_hdr: Any = None
    if cp.packet.encap == "rocev2":
        carrier, ours = "udp", "infiniband"
    elif cp.pdus:
        carrier, ours = "tcp", "iwarp_mpa"
    else:
        return _inside_choice(cp, chain, tables)
    if ours in chain or carrier not in chain:
        return None
    at = len(chain) - 1 - chain[::-1].index(carrier)
    theirs = chain[at + 1] if at + 1 < len(chain) else ""
    held = theirs == "" and carrier == "tcp" and "tcp.segment_data" in ws
    if theirs == "data" or (theirs == "" and not held):
        return None  # tshark chose nothing: no port or heuristic to name
    for layer in cp.packet.layers:
        if layer.name == carrier.upper():
            carrier_hdr = layer.header
    if carrier_hdr is None:
        return None
    t = tables()
    for port in sorted({carrier_hdr.sport, carrier_hdr.dport}):
        owner = t.ports.get((f"{carrier}.port", port))
        if owner is not None and (owner == theirs or held):
            return DissectorChoice(carrier, ours, owner, t.names.get(owner, owner), port, held)
    if held:
        return None
    name = t.names.get(theirs, theirs)
    if theirs in t.heuristics.get(carrier, frozenset()):
        return DissectorChoice(carrier, ours, theirs, name, None)
    return None


def _rdma(proto: str) -> bool:
    """Whether tshark's protocol ``proto`` is one rdmalab decodes (InfiniBand over UDP, iWARP over TCP)."""
    return proto in _OURS or proto.startswith(("infiniband", "iwarp"))


def _inside_choice(cp: CapturedPacket, chain: list[str],
                   tables: Callable[[], DissectorTables]) -> DissectorChoice | None:
    """:func:`dissector_choice` for a UDP datagram or TCP segment whose payload rdmalab leaves as bytes
    (DNS, a tunnel: VXLAN to port 4789, VXLAN-GPE to 4790, Geneve to 6081 ...), which tshark dissected
    further: its fields from there on (an encapsulated frame's ``eth.*``, ``ip.*`` ...) are repeated names
    rdmalab has once.  The port table or heuristic that made tshark's choice, with where the payload starts
    (:attr:`DissectorChoice.inside`); None when tshark shows the payload as data or nothing backs its choice."""
    pkt = cp.packet
    last = pkt.layers[-1] if pkt.layers else None
    if last is None or last.name not in ("UDP", "TCP") or not pkt.payload_length:
        return None
    carrier = last.name.lower()
    if carrier not in chain:
        return None
    at = len(chain) - 1 - chain[::-1].index(carrier)
    theirs = chain[at + 1] if at + 1 < len(chain) else ""
    if not theirs or _rdma(theirs):
        return None  # (RDMA that rdmalab did not read there: its own miss, or a defect's signature, not a choice)
    # (by its port: frame.protocols may end in "data" after a tunnel's dissector, which names no layer of
    # its own there (VXLAN-GPE: "udp:data", "udp:ip") and still shows the fields of what it carries)
    t = tables()
    inside = pkt.payload_offset - cp.frame_start
    hdr: Any = last.header
    for port in sorted({hdr.sport, hdr.dport}):
        owner = t.ports.get((f"{carrier}.port", port))
        if owner is not None:
            if _rdma(owner):
                return None
            return DissectorChoice(carrier, "", owner, t.names.get(owner, owner), port, inside=inside)
    if theirs in t.heuristics.get(carrier, frozenset()):
        return DissectorChoice(carrier, "", theirs, t.names.get(theirs, theirs), None, inside=inside)
    return None
