"""Flat field dictionaries for packets, keyed by Wireshark display-filter names.

:func:`frame_fields` turns a :class:`~rdmalab.capture.reader.CapturedPacket` into one flat
``{name: value}`` dictionary (what display filters test), and :func:`to_json` into one line
of JSON (``rdmalab decode -T json`` prints tshark's nested layout instead:
:mod:`rdmalab.capture.tsjson`).

* Keys are Wireshark's display-filter field names wherever Wireshark has the field
  (``infiniband.bth.psn``, ``iwarp_ddp.stag`` ...), taken from each header's declaration, plus
  ``frame.number``, ``frame.time_epoch``, ``frame.len`` and ``frame.cap_len``.
* Values are JSON integers, with the *meaning Wireshark gives them*: in particular
  ``infiniband.invariant.crc`` (and ``infiniband.variant.crc``, ``iwarp_mpa.crc_check``) is the
  CRC's wire bytes read big-endian, which is the byte-swap of the CRC value (IBA Vol 1 Annex
  A17.3.3 for the ICRC; Wireshark's packet-infiniband.c displays the bytes as read).  Addresses (MAC, IPv4, IPv6/GID) are strings in Wireshark's notation, because
  128-bit integers do not survive most JSON readers.
* ``rdmalab.*`` keys carry what Wireshark lacks: ``rdmalab.icrc.status`` ("good"/"bad"),
  ``rdmalab.icrc.expected``, ``rdmalab.vcrc.status``, ``rdmalab.crc32c.status``, FECN/BECN
  (``rdmalab.bth.fecn``/``becn``), the XRCETH (``rdmalab.xrceth.xrcsrq``), CNP
  (``rdmalab.cnp``), the opcode's name, and decoding problems (``rdmalab.problems``).
* When a frame carries several PDUs of one protocol (iWARP FPDUs packed in one TCP segment),
  a key that occurs more than once has a list of values, in frame order.
"""

from __future__ import annotations

import ipaddress
import json
import socket
from typing import TYPE_CHECKING, Any

from rdmalab.capture.render import HIDDEN_TCP_ACK, HIDDEN_TCP_FLAGS, HIDDEN_UDP_CUT
from rdmalab.wire.frame import tcp_segment_length
from rdmalab.wire.header import Header
from rdmalab.wire.ib import BTH
from rdmalab.wire.mad import MADHeader
from rdmalab.wire.mpa import MPA, MPA_HEADER_SIZE
from rdmalab.wire.net import FCS_UNVERIFIED, TCP, UDP, IPv4, IPv6, UDPNoChecksum, UDPPorts
from rdmalab.wire.opcodes import CNP_OPCODE, opcode_name
from rdmalab.wire.rdmap import DDPTagged, DDPUntagged

if TYPE_CHECKING:
    from rdmalab.capture.reader import CapturedPacket
    from rdmalab.capture.render import TcpWindowScaling
    from rdmalab.wire.packet import Packet

_ADDRESS_FMTS = ("mac", "ipv4", "ipv6")

#: the octets after an Ethernet frame's datagram (``Packet.eth_trailer``), as hex text: ``-T fields``
#: writes them as tshark does (``0000...``), the JSON colon-separated
TRAILER_BYTES = ("eth.padding", "eth.trailer", "vlan.trailer", "sll.trailer")
#: The names :func:`frame_fields` adds besides those the headers declare (display filters accept
#: exactly the declared names plus these: :func:`rdmalab.capture.filter.known_fields`).
EXTRA_FIELDS: tuple[str, ...] = (
    "frame.number", "frame.time_epoch", "frame.len", "frame.cap_len", "tcp.window_size", "tcp.len",
    "infiniband.invariant.crc", "infiniband.variant.crc", "iwarp_mpa.crc", "iwarp_mpa.crc_check",
    "rdmalab.opcode", "rdmalab.cnp", "rdmalab.encap", "rdmalab.pdus", "rdmalab.payload.len", "rdmalab.problems",
    "rdmalab.icrc.status", "rdmalab.icrc.expected", "rdmalab.vcrc.status", "rdmalab.vcrc.expected",
    "rdmalab.crc32c.status", "rdmalab.crc32c.expected", "frame.time_ns", "rdmalab.icrc.ok", "rdmalab.crc32c.ok",
    *(name for name, _bit in TCP.FLAG_FIELDS), *(name for name, _bit in IPv4.FLAG_FIELDS),
    "eth.fcs.status", "rdmalab.fcs.status", *TRAILER_BYTES,
)
#: a CRC's status as the columns hold it (``rdmalab.icrc.ok``, ``rdmalab.crc32c.ok``): 0 unchecked
CRC_OK = {"good": 1, "bad": 2}
_fmt_cache: dict[type[Header], dict[str, str]] = {}


def ws_formats(cls: type[Header]) -> dict[str, str]:
    """Wireshark name -> display format (``"dec"``, ``"hex"``, ``"ipv6"`` ...) for a header class."""
    m = _fmt_cache.get(cls)
    if m is None:
        m = {f.ws: f.fmt for f in cls.LAYOUT.fields if f.ws}
        _fmt_cache[cls] = m
    return m


def _address(fmt: str, value: int) -> str:
    if fmt == "mac":
        return value.to_bytes(6, "big").hex(":")
    if fmt == "ipv4":
        return socket.inet_ntop(socket.AF_INET, value.to_bytes(4, "big"))
    return str(ipaddress.IPv6Address(value))


def _add(out: dict[str, Any], key: str, value: Any) -> None:
    if key in out:
        old = out[key]
        if isinstance(old, _Multi):
            old.append(value)
        else:
            out[key] = _Multi([old, value])
    else:
        out[key] = value


class _Multi(list[Any]):
    """A value list made by repetition (as opposed to a list-valued field)."""


def header_fields(h: Header, *, raw: bool = False) -> dict[str, Any]:
    """One header's Wireshark-named fields; addresses as strings unless ``raw``."""
    vals: dict[str, Any] = h.ws_fields()
    if raw:
        return vals
    fmts = ws_formats(type(h))
    for k, fmt in fmts.items():
        if fmt in _ADDRESS_FMTS and k in vals:
            vals[k] = _address(fmt, vals[k])
    return vals


def _swap32(v: int) -> int:
    return int.from_bytes(v.to_bytes(4, "little"), "big")


def _swap16(v: int) -> int:
    return int.from_bytes(v.to_bytes(2, "little"), "big")


def packet_fields(pkt: Packet, out: dict[str, Any], *, raw: bool = False, skip: frozenset[type] = frozenset(),
                  quoted: bool = False, quotes: bool = True) -> None:
    """Add one packet's fields to ``out`` (repeated keys become lists), then (``quotes``) those of the
    datagram it quotes (an ICMP error's: ``quoted`` for those, whose problems are not the frame's)."""
    for layer in pkt.layers:
        h = layer.header
        if type(h) in skip:
            continue
        for k, v in header_fields(h, raw=raw).items():
            _add(out, k, v)
    for _pos, marker in pkt.markers or ():  # MPA markers, stripped from the FPDU's data
        if isinstance(marker, Header):
            for k, v in header_fields(marker, raw=raw).items():
                _add(out, k, v)
    bth = pkt.get(BTH)
    if bth is not None:
        _add(out, "rdmalab.opcode", opcode_name(bth.opcode))
        if bth.opcode == CNP_OPCODE:
            _add(out, "rdmalab.cnp", 1)
    if pkt.crc is not None:
        if pkt.crc_kind == "icrc":
            _add(out, "infiniband.invariant.crc", _swap32(pkt.crc))
            if pkt.crc_expected is not None:
                _add(out, "rdmalab.icrc.expected", _swap32(pkt.crc_expected))
            _add(out, "rdmalab.icrc.status", pkt.crc_status or "unchecked")
        elif pkt.crc_kind == "crc32c":
            key = "iwarp_mpa.crc_check" if pkt.crc_expected is not None else "iwarp_mpa.crc"
            _add(out, key, _swap32(pkt.crc))
            if pkt.crc_expected is not None:
                _add(out, "rdmalab.crc32c.expected", _swap32(pkt.crc_expected))
            _add(out, "rdmalab.crc32c.status", pkt.crc_status or "unchecked")
    if pkt.vcrc is not None:
        _add(out, "infiniband.variant.crc", _swap16(pkt.vcrc))
        if pkt.vcrc_expected is not None:
            _add(out, "rdmalab.vcrc.expected", _swap16(pkt.vcrc_expected))
        _add(out, "rdmalab.vcrc.status", pkt.vcrc_status or "unchecked")
    if pkt.encap in ("rocev2", "rocev1", "ib") and bth is not None or pkt.payload_length and pkt.encap == "iwarp":
        _add(out, "rdmalab.payload.len", _transport_payload_length(pkt))
    trailer = pkt.eth_trailer
    if trailer is not None and not quoted:  # after the frame's datagram: padding, a trailer, the FCS
        if trailer.padding:
            _add(out, "eth.padding", trailer.padding.hex())
        if trailer.trailer:
            _add(out, trailer.trailer_name, trailer.trailer.hex())
        if trailer.fcs is not None:
            _add(out, "eth.fcs", trailer.fcs)
            _add(out, "eth.fcs.status", FCS_UNVERIFIED)  # (tshark's: it does not check it unless told)
            _add(out, "rdmalab.fcs.status", "unchecked" if trailer.fcs_expected is None else
                 "good" if trailer.fcs == trailer.fcs_expected else "bad")
    if pkt.problems and not quoted:  # (a quote's problems are its own: cut short, as a quote mostly is)
        for p in pkt.problems:
            _add(out, "rdmalab.problems", str(p))
    if pkt.quoted is not None and quotes:  # an ICMP error's quoted datagram: its fields after the frame's (ip.src twice)
        packet_fields(pkt.quoted, out, raw=raw, quoted=True)


def frame_fields(cp: CapturedPacket, *, raw: bool = False, windows: TcpWindowScaling | None = None,
                 quotes: bool = True) -> dict[str, Any]:
    """All fields of one captured frame and its PDUs, as one flat dictionary.

    ``raw=True`` keeps addresses as integers (what the cross-check compares).  ``windows``, one
    :class:`~rdmalab.capture.render.TcpWindowScaling` fed every frame of the capture in order,
    adds ``tcp.window_size`` (the scaled window) to TCP segments.  ``quotes=False`` leaves out the
    fields of the datagram an ICMP error quotes (the frame's own headers alone, as the columns hold it).
    """
    out: dict[str, Any] = {
        "frame.number": cp.frame_number,
        "frame.time_epoch": cp.timestamp,
        "frame.time_ns": cp.epoch_ns,
        "frame.len": cp.wire_length or len(cp.packet.data),
        "frame.cap_len": cp.captured,
    }
    pkt = cp.packet
    packet_fields(pkt, out, raw=raw, quotes=quotes)
    out["rdmalab.encap"] = pkt.encap
    if "ipv6.version" in out:  # Wireshark's IPv6 dissector adds the hidden ip.version too (ip.version == 6),
        out.setdefault("ip.version", out["ipv6.version"])  # once a header (an ICMPv6 error's quote: twice)
    if "tcp.srcport" in out and TCP in pkt:  # the segment's payload bytes (tshark's tcp.len, the summary's Len=;
        # a quoted segment has none, as in tshark)
        seg_len = tcp_segment_length(pkt)
        if seg_len is not None:  # (a header longer than its datagram: no length, as tshark)
            out["tcp.len"] = seg_len
    if pkt.get(UDPPorts) is not None or pkt.get(UDPNoChecksum) is not None:
        out[HIDDEN_UDP_CUT] = 1  # (for Conversations: no udp.stream)
    tcp = pkt.get(TCP)
    if tcp is not None and tcp.data_offset < 5:  # (a bogus header length: not shown, but counted)
        out[HIDDEN_TCP_FLAGS], out[HIDDEN_TCP_ACK] = tcp.all_flags, tcp.ack
    if "tcp.srcport" in out:
        flags = out.get("tcp.flags")
        if isinstance(flags, int):  # each flag bit as its own field (tcp.flags.syn == 1)
            for name, bit in TCP.FLAG_FIELDS:
                out[name] = 1 if flags & bit else 0
    dscp, ecn = out.get("ip.dsfield.dscp"), out.get("ip.dsfield.ecn")
    if dscp is not None and ecn is not None:  # the whole octet too (tshark's ip.dsfield; a quote: a second value)
        out["ip.dsfield"] = ([d << 2 | e for d, e in zip(dscp, ecn, strict=True)] if isinstance(dscp, list)
                             else dscp << 2 | ecn)
    ip_flags = out.get("ip.flags")
    if ip_flags is not None:  # each bit as its own field (an ICMP error's quoted header: a second value)
        for name, bit in IPv4.FLAG_FIELDS:
            out[name] = [1 if f & bit else 0 for f in ip_flags] if isinstance(ip_flags, list) else \
                (1 if ip_flags & bit else 0)
    if cp.pdus:
        skip = frozenset(type(layer.header) for layer in pkt.layers)
        for pdu in cp.pdus:
            packet_fields(pdu, out, raw=raw, skip=skip)
        out["rdmalab.pdus"] = len(cp.pdus)
    internal = pkt.internal_error
    if internal:
        _add(out, "rdmalab.problems", f"internal decoder error: {internal}")
    for status, ok in (("rdmalab.icrc.status", "rdmalab.icrc.ok"), ("rdmalab.crc32c.status", "rdmalab.crc32c.ok")):
        st = out.get(status)
        if st is not None:  # the verdict as the columns hold it (filters and -T fields on both paths)
            out[ok] = [CRC_OK.get(v, 0) for v in st] if isinstance(st, list) else CRC_OK.get(st, 0)
    if windows is not None:
        w = windows.window(pkt)
        if w is not None and "tcp.window_size_value" in out:  # (a bogus header length: a window in the line alone)
            out["tcp.window_size"] = shown_window(out, w)
        q = pkt.quoted.get(TCP) if pkt.quoted is not None and quotes else None
        if q is not None and q.data_offset >= 5:  # a quoted segment's window, unscaled (tshark knows no scale in
            # a quote; a bogus header length: no window shown)
            _add(out, "tcp.window_size", q.window)
    return out


def shown_window(fields: dict[str, Any], scaled: int) -> int:
    """tshark's ``tcp.window_size`` of a segment whose fields are ``fields`` and whose window scales to
    ``scaled``: the raw window for a header that runs past its datagram (no ``tcp.len``: tshark stops
    before the window scaling), else ``scaled``."""
    return scaled if "tcp.len" in fields else int(fields["tcp.window_size_value"])


#: the protocols whose bytes a display filter's ``contains``/``matches`` reads (``tcp contains "MPA"``):
#: from the protocol's first header to the end of what carries it, as Wireshark's protocol items span
#: them (an Ethernet frame's whole, an IP datagram as its length says, a UDP datagram as its, TCP and the
#: messages an IP datagram carries to that datagram's end, InfiniBand to the end of its UDP datagram or frame)
BYTE_PROTOCOLS = ("eth", "vlan", "ip", "ipv6", "udp", "tcp", "infiniband", "arp", "icmp", "icmpv6")
#: iWARP's protocols whose bytes contains/matches read, once for each MPA frame a TCP segment completes
#: (:attr:`rdmalab.capture.reader.CapturedPacket.pdus`): ``iwarp_mpa`` the MPA frame as sent (an FPDU
#: with its length, markers, pad and CRC; a Request or Reply with its private data: the item of
#: packet-iwarp-mpa.c), ``iwarp_ddp_rdmap`` the ULPDU (the DDP and RDMAP headers and the payload, without
#: markers, pad or CRC: what MPA hands packet-iwarp-ddp-rdmap.c).  ``iwarp_ddp`` and ``iwarp_rdma`` are
#: labels in Wireshark, without bytes.
IWARP_BYTE_PROTOCOLS = ("iwarp_mpa", "iwarp_ddp_rdmap")


def protocol_bytes(pkt: Packet, proto: str) -> bytes | None:
    """The bytes of one of :data:`BYTE_PROTOCOLS` in a decoded frame, or None when the frame has not it."""
    end = len(pkt.data)  # the end of the innermost datagram so far
    for layer in pkt.layers:
        h, at = layer.header, layer.offset
        if isinstance(h, IPv4) and h.total_length:
            end = min(end, at + h.total_length)
        elif isinstance(h, IPv6):
            end = min(end, at + 40 + h.payload_length)
        elif isinstance(h, UDP):
            end = min(end, at + max(h.length, 8))
        if (h.LAYOUT.ws_proto or "").split(".", 1)[0] == proto:
            return bytes(pkt.data[at:end])
    return None


def pdu_bytes(cp: CapturedPacket, proto: str) -> list[bytes] | None:
    """The bytes of one of :data:`IWARP_BYTE_PROTOCOLS` in each MPA frame a TCP segment completes, or
    None when it completes none that has it."""
    out = []
    for pdu in cp.pdus:
        mpa = pdu.get(MPA)
        if proto == "iwarp_mpa":
            out.append(bytes(pdu.wire if pdu.wire is not None else pdu.data))
        elif mpa is not None and mpa.ulpdu_length and (DDPTagged in pdu or DDPUntagged in pdu):
            out.append(bytes(pdu.data[MPA_HEADER_SIZE:MPA_HEADER_SIZE + mpa.ulpdu_length]))
    return out or None


def to_json(cp: CapturedPacket) -> str:
    """One packet as one line of flat JSON (the dictionary of :func:`frame_fields`)."""
    return json.dumps(frame_fields(cp), separators=(",", ":"))


def _transport_payload_length(pkt: Packet) -> int:
    """The octets of a packet's payload after its transport headers: for a datagram that carries a MAD,
    the whole MAD (what the columns count, :mod:`rdmalab.capture.columnar_decode`), not what its decoded
    headers and message leave."""
    mad = next((layer.offset for layer in pkt.layers if isinstance(layer.header, MADHeader)), None)
    if mad is None:
        return pkt.payload_length
    return pkt.payload_length + pkt.payload_offset - mad
