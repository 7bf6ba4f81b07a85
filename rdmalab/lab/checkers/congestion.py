"""Checkers for 10-congestion: mark a packet CE, build the CNP a responder sends back."""

from __future__ import annotations

from typing import Any

from rdmalab.lab.core import Said, Wrong, exercise
from rdmalab.lab.feedback import as_bytes

NB = "10-congestion"


def data_frame() -> bytes:
    """The RoCEv2 WRITE of the notebook (requester QP 0x22 at 192.168.1.1 writes to QP 0x11)."""
    from rdmalab.lab.samples import one_write

    return next(w.frame for w in one_write() if w.kind == "rocev2")


def _field_diffs(a: Any, b: Any, ignore: set[str]) -> list[tuple[str, int, str, str]]:
    """Fields that differ between two decoded packets: (layer.field, offset, value a, value b)."""
    sa = {(s.layer, s.field): s for s in a.spans()}
    out = []
    for s in b.spans():
        key = (s.layer, s.field)
        name = f"{s.layer}.{s.field}"
        if name in ignore or key not in sa:
            continue
        if sa[key].text != s.text:
            out.append((name, s.start, sa[key].text, s.text))
    return out


@exercise("congestion.ce", "Mark a packet Congestion Experienced, as a switch would", notebook=NB, hints=(
    "ECN is the low 2 bits of the IPv4 TOS byte (frame byte 15); CE is 0b11 (RFC 3168 section 5).",
    "Changing the TOS changes the IPv4 header checksum: IPv4.replace(ecn=3).with_checksum() recomputes it.",
    "Keep everything else, the ICRC included: a switch does not recompute the ICRC, and it does not need to.",
))
def _ce(answer: Any) -> str:
    from rdmalab.wire.frame import decode_ethernet
    from rdmalab.wire.net import IPv4

    got = as_bytes(answer, "your marked frame", field="frame")
    orig = decode_ethernet(data_frame())
    if len(got) != len(orig.data):
        raise Wrong(f"The marked frame must keep its length ({len(orig.data)} bytes); yours has {len(got)}.",
                    field="frame length", given=Said(f"{len(got)} bytes"), expected=f"{len(orig.data)} bytes")
    pkt = decode_ethernet(got, lenient=True)
    ip = pkt.get(IPv4)
    if ip is None:
        raise Wrong("Your frame no longer decodes as IPv4.", field="Ethernet.type", offset=12,
                    given=got[12:14], expected="08 00 (IPv4), unchanged")
    if ip.ecn != 3:
        raise Wrong(f"IPv4.ecn is {ip.ecn}; Congestion Experienced is the 2-bit codepoint 0b11.", field="IPv4.ecn",
                    offset=15, given=ip.ecn, expected="3 (0b11, CE)")
    if ip.with_checksum().checksum != ip.checksum:
        raise Wrong("The IPv4 header checksum no longer matches the header: a router recomputes it after "
                    "changing the TOS byte.", field="IPv4.checksum", offset=24, given=ip.checksum,
                    expected=f"{ip.with_checksum().checksum:#06x}, the checksum of your header")
    diffs = _field_diffs(orig, pkt, {"IPv4.ecn", "IPv4.checksum"})
    if diffs:
        name, off, was, now = diffs[0]
        raise Wrong(f"{len(diffs)} other field(s) changed; the first is {name} at byte {off} ({was} -> {now}). "
                    "A switch marks ECN and leaves the rest alone.", field=name, offset=off, given=Said(now),
                    expected=f"{was}, as in the original frame",
                    details=[f"{n} at byte {o}: {w} -> {x}" for n, o, w, x in diffs])
    if pkt.crc_status != "good":
        raise Wrong("The ICRC no longer matches.", field="ICRC", offset=pkt.crc_offset,
                    expected="the original ICRC: ECN is a variant field, masked out of it")
    return "Marked CE, IPv4 checksum fixed, and the ICRC still matches, because ECN is a variant field."


@exercise("congestion.cnp", "Build the CNP the responder sends back", notebook=NB, hints=(
    "A CNP is a RoCEv2 packet with BTH opcode 0x81, the BECN bit set, and 16 reserved bytes of zeros (Annex A17.9.3).",
    "It goes back to the sender of the marked packet: swap the IP addresses, and put the *requester's* QP number "
    "(0x000022) in BTH.destqp: the marked packet only carries the responder's own QP (0x11).",
    "rdmalab.wire.encode_rocev2(BTH(...), [CNPPad()], src_ip=..., dst_ip=...) fills in the lengths and the ICRC.",
))
def _cnp(answer: Any) -> str:
    from rdmalab.wire.frame import decode_ethernet
    from rdmalab.wire.ib import BTH
    from rdmalab.wire.net import UDP, IPv4

    got = as_bytes(answer, "your CNP", field="frame")
    pkt = decode_ethernet(got, lenient=True)
    bth = pkt.get(BTH)
    if pkt.encap != "rocev2" or bth is None:
        raise Wrong("Your frame does not decode as RoCEv2 (IPv4, UDP to port 4791, BTH).", field="encapsulation",
                    offset=34, given=Said(str(pkt.encap)), expected="rocev2: Ethernet / IPv4 / UDP 4791 / BTH")
    if bth.opcode != 0x81:
        raise Wrong(f"BTH.opcode is 0x{bth.opcode:02x}; a CNP has the opcode RoCEv2 reserves for it.",
                    field="BTH.opcode", offset=42, given=bth.opcode, expected="the CNP opcode (RoCEv2 Annex A17.9.3)")
    ip = pkt[IPv4]
    udp = pkt[UDP]
    if ip.describe("src") != "192.168.1.2" or ip.describe("dst") != "192.168.1.1":
        raise Wrong(f"The CNP goes from the responder back to the requester; your IPv4 is {ip.describe('src')} -> "
                    f"{ip.describe('dst')}.", field="IPv4.src", offset=26,
                    given=Said(f"{ip.describe('src')} -> {ip.describe('dst')}"),
                    expected="responder -> requester: the marked packet's addresses swapped")
    if udp.dport != 4791:
        raise Wrong(f"UDP.dport is {udp.dport}; every RoCEv2 packet goes to the RoCEv2 port.", field="UDP.dport",
                    offset=36, given=udp.dport, expected="4791")
    if bth.destqp != 0x22:
        raise Wrong(f"BTH.destqp is 0x{bth.destqp:06x}; the CNP is addressed to the QP whose packets were marked, "
                    "i.e. the requester's QP.", field="BTH.destqp", offset=47, given=bth.destqp,
                    expected="the requester's QP number")
    if not bth.becn:
        raise Wrong("BTH.becn is 0; a CNP sets the BECN bit (bit 6 of BTH byte 4).", field="BTH.becn", offset=46,
                    given=0, expected="1")
    if pkt.payload_length or any(pkt.data[54:70]):
        raise Wrong("After the BTH a CNP carries exactly 16 reserved bytes of zeros, then the ICRC.",
                    field="CNPPad", offset=54, given=pkt.data[54:70], expected="16 bytes of zeros")
    if pkt.crc_status != "good":
        raise Wrong("The ICRC does not match your bytes.", field="ICRC", offset=pkt.crc_offset,
                    expected="the ICRC of your frame (encode_rocev2 computes it)")
    return "A valid CNP: opcode 0x81, BECN, back to QP 0x22, 16 reserved bytes, good ICRC."
