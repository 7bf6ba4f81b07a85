"""Text views of captured packets: tshark-style summary lines and the full field tree (``-V``)."""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING

from rdmalab.capture.linktypes import LINKTYPE_NAMES
from rdmalab.wire.header import Header
from rdmalab.wire.ib import GRH, LRH
from rdmalab.wire.net import TCP, Ethernet, IPv4, IPv6
from rdmalab.wire.packet import Packet

if TYPE_CHECKING:
    from rdmalab.capture.reader import CapturedPacket

_PROTOCOL = {"rocev2": "RRoCE", "rocev1": "RoCE", "ib": "InfiniBand", "iwarp": "iWARP", "tcp": "TCP", "pfc": "MAC CTRL"}


def endpoints(pkt: Packet) -> tuple[str, str]:
    """Source and destination as tshark's columns show them (IP, else GID, else LID, else MAC)."""
    for cls in (IPv4, IPv6):
        ip = pkt.get(cls)
        if ip is not None:
            if cls is IPv4:
                return str(ipaddress.IPv4Address(ip.src)), str(ipaddress.IPv4Address(ip.dst))  # type: ignore[attr-defined]
            return str(ipaddress.IPv6Address(ip.src)), str(ipaddress.IPv6Address(ip.dst))  # type: ignore[attr-defined]
    grh = pkt.get(GRH)
    if grh is not None:
        return str(ipaddress.IPv6Address(grh.sgid)), str(ipaddress.IPv6Address(grh.dgid))
    lrh = pkt.get(LRH)
    if lrh is not None:
        return f"LID {lrh.slid}", f"LID {lrh.dlid}"
    eth = pkt.get(Ethernet)
    if eth is not None:
        return eth.src.to_bytes(6, "big").hex(":"), eth.dst.to_bytes(6, "big").hex(":")
    return "-", "-"


def protocol(cp: CapturedPacket) -> str:
    if cp.pdus:
        return "iWARP"
    pkt = cp.packet
    name = _PROTOCOL.get(pkt.encap)
    if name:
        return name
    return pkt.layers[-1].name if pkt.layers else "Unknown"


# in tshark's order (lowest bit first)
_TCP_FLAGS = ((0x01, "FIN"), (0x02, "SYN"), (0x04, "RST"), (0x08, "PSH"), (0x10, "ACK"), (0x20, "URG"),
              (0x40, "ECE"), (0x80, "CWR"), (0x100, "NS"))


def tcp_info(pkt: Packet) -> str | None:
    """tshark's Info for a TCP segment: ports, flags, raw sequence numbers, window, length.

    As ``tshark -o tcp.relative_sequence_numbers:false``, except that the window is the raw
    field (tshark scales it by the window-scale option it saw in the handshake)."""
    tcp = pkt.get(TCP)
    if tcp is None:
        return None
    flags = ", ".join(name for bit, name in _TCP_FLAGS if tcp.flags & bit)
    text = f"{tcp.sport} → {tcp.dport} [{flags}] Seq={tcp.seq}"
    if tcp.flags & 0x10:
        text += f" Ack={tcp.ack}"
    return text + f" Win={tcp.window} Len={pkt.payload_length}"


def info(cp: CapturedPacket) -> str:
    if cp.pdus:
        text = "; ".join(p.summary() for p in cp.pdus)
    else:
        text = (tcp_info(cp.packet) if cp.packet.encap == "tcp" else None) or cp.packet.summary()
    for pkt in (cp.packet, *cp.pdus):
        if pkt.problems and str(pkt.problems[0]) not in text:
            text += f" [{len(pkt.problems)} problem(s): {pkt.problems[0]}]"
    internal = cp.packet.internal_error
    if internal and internal not in text:
        text += f" [rdmalab could not fully decode this frame: {internal}]"
    return text


def summary_line(cp: CapturedPacket, t0: float) -> str:
    """One line, as tshark prints: number, relative time, source, destination, protocol, length, info."""
    src, dst = endpoints(cp.packet)
    return (f"{cp.frame_number:5d} {cp.timestamp - t0:11.6f} {src:>15} → {dst:<15} {protocol(cp):<10} "
            f"{cp.wire_length or len(cp.packet.data):5d} {info(cp)}")


def _header_lines(h: Header, offset: int, indent: str) -> list[str]:
    lay = h.LAYOUT
    out = [f"{indent}{lay.name}  [{lay.spec}]  bytes {offset}-{offset + lay.size - 1}"]
    docs = {f.name: f.doc for f in lay.fields}
    for sp in h.spans(offset):
        where = f"byte {sp.start}" if sp.end - sp.start == 1 else f"bytes {sp.start}-{sp.end - 1}"
        if sp.bits % 8 or sp.bit_offset % 8:
            first = sp.bit_offset % 8
            where += f" (bits {first}-{first + sp.bits - 1} from the MSB)" if sp.bits > 1 else f" (bit {first})"
        ws = f"  {{{sp.ws}}}" if sp.ws else ""
        doc = f"  -- {docs[sp.field]}" if docs.get(sp.field) else ""
        out.append(f"{indent}    {sp.field}: {sp.text}{ws}  @ {where}{doc}")
    return out


def packet_tree(pkt: Packet, indent: str = "    ") -> list[str]:
    """Every layer and field of a packet, with values, descriptions and byte offsets."""
    out: list[str] = []
    for layer in pkt.layers:
        out.extend(_header_lines(layer.header, layer.offset, indent))
    if pkt.payload_length:
        end = pkt.payload_offset + pkt.payload_length
        preview = pkt.payload[:32].hex(" ")
        more = " ..." if pkt.payload_length > 32 else ""
        out.append(f"{indent}Payload: {pkt.payload_length} bytes @ bytes {pkt.payload_offset}-{end - 1}: {preview}{more}")
    if pkt.pad:
        start = pkt.payload_offset + pkt.payload_length
        out.append(f"{indent}Pad: {pkt.pad} byte(s) @ bytes {start}-{start + pkt.pad - 1}")
    if pkt.crc is not None and pkt.crc_offset is not None:
        name = "ICRC" if pkt.crc_kind == "icrc" else "MPA CRC32c"
        wire = pkt.crc.to_bytes(4, "little").hex(" ")
        status = pkt.crc_status or "unchecked"
        exp = ""
        if pkt.crc_status == "bad" and pkt.crc_expected is not None:
            exp = f", should be {pkt.crc_expected.to_bytes(4, 'little').hex(' ')}"
        out.append(f"{indent}{name}: {wire} ({status}{exp}) @ bytes {pkt.crc_offset}-{pkt.crc_offset + 3}")
        if pkt.vcrc is not None:
            vs = pkt.vcrc_status or "unchecked"
            out.append(f"{indent}VCRC: {pkt.vcrc.to_bytes(2, 'little').hex(' ')} ({vs}) "
                       f"@ bytes {pkt.crc_offset + 4}-{pkt.crc_offset + 5}")
    for p in pkt.problems:
        out.append(f"{indent}Problem: {p}")
    return out


def frame_tree(cp: CapturedPacket) -> str:
    """The full tree of one frame (``rdmalab decode -V``)."""
    pkt = cp.packet
    lt = LINKTYPE_NAMES.get(cp.linktype, f"link type {cp.linktype}")
    lines = [f"Frame {cp.frame_number}: {cp.wire_length or len(pkt.data)} bytes on wire, {len(pkt.data)} bytes "
             f"captured, {lt}, time {cp.timestamp:.6f}",
             f"    Summary: {info(cp)}"]
    lines.extend(packet_tree(pkt))
    internal = pkt.internal_error
    if internal:
        lines.append(f"    Problem: rdmalab could not fully decode this frame: {internal}")
    for i, pdu in enumerate(cp.pdus, 1):
        lines.append(f"    PDU {i} of {len(cp.pdus)} ({pdu.encap}; offsets within the PDU): {pdu.summary()}")
        lines.extend(packet_tree(pdu, "        "))
    return "\n".join(lines)
