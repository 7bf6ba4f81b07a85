"""The ICRC and the MPA CRC32c, computed step by step on a real frame.

The walkthrough builds the CRC input from the field declarations: it looks up each *variant*
field (the ones a router or switch may change in flight, IBA Vol 1 7.8.1; RoCE Annex A16.8;
RoCEv2 Annex A17.3.3) in the decoded packet's field spans and sets exactly its bits to one.
Then it runs CRC-32 and checks the result against both the bytes on the wire and
:mod:`rdmalab.wire.crc`, the library's own implementation, so the two ways of computing it keep
each other honest.
"""

from __future__ import annotations

import html
import zlib
from dataclasses import dataclass, field
from typing import Any

from rdmalab.viz.hexdump import HexDump, Mark, spans_of
from rdmalab.wire import crc as wcrc
from rdmalab.wire.crc import ICRC_VARIANT_FIELDS, crc32c
from rdmalab.wire.frame import decode_ethernet
from rdmalab.wire.header import Span

#: Variant fields per encapsulation: (header, field).  They are set to all ones before the CRC.
VARIANT_FIELDS = ICRC_VARIANT_FIELDS

#: Why each variant field is excluded from the end-to-end CRC.
WHY_VARIANT = {
    "dscp": "routers may re-mark the traffic class",
    "ecn": "switches mark Congestion Experienced in flight",
    "ttl": "every router decrements it",
    "checksum": "recomputed whenever TTL/ECN change (UDP: may be filled in or zeroed)",
    "tclass": "routers may re-mark the traffic class",
    "flowlabel": "may be rewritten in flight",
    "hop_limit": "every router decrements it",
    "hoplmt": "every router decrements it",
    "fecn": "switches set it to signal congestion forward",
    "becn": "set on the way back to signal congestion",
    "resv6": "reserved bits of the same byte, masked with it",
    "vl": "each link may move the packet to another virtual lane",
}

#: Why the whole LRH of a native IB packet with a GRH is variant (the "ib_global" rule).
WHY_LRH_GLOBAL = "a router rebuilds the LRH of a packet it forwards to another subnet"

PSEUDO_LRH = b"\xff" * 8
_START_LAYER = {"rocev2": ("IPv4", "IPv6"), "rocev1": ("GRH",), "ib": ("LRH",), "ib_global": ("LRH",)}


def _header_start(sp: Span) -> int:
    return sp.start - sp.bit_offset // 8


@dataclass
class MaskedField:
    layer: str
    field: str
    offset: int  # first byte in the frame
    bits: int
    value: Any
    text: str
    bit0: int = 0  # absolute bit position of the field's first bit in the frame
    rule: str = ""  # the ICRC rule that masked it (a key of ICRC_VARIANT_FIELDS)

    @property
    def why(self) -> str:
        if self.rule == "ib_global" and self.layer == "LRH":
            return WHY_LRH_GLOBAL
        return WHY_VARIANT.get(self.field, "")


@dataclass
class IcrcSteps:
    """The ICRC of one frame, with every intermediate buffer kept for display and checks."""

    frame: bytes
    spans: list[Span]
    encap: str
    start: int  # first covered byte in the frame
    crc_offset: int  # where the ICRC sits in the frame
    prefix: bytes  # 8 x 0xFF for RoCE; empty for native IB (its LRH is covered itself)
    covered: bytes  # frame[start:crc_offset]
    masked_input: bytes  # prefix + covered, variant fields set to ones
    masked: list[MaskedField] = field(default_factory=list)
    rule: str = ""  # the key of ICRC_VARIANT_FIELDS applied: the encapsulation, or "ib_global" for IB with a GRH

    @property
    def crc(self) -> int:
        return zlib.crc32(self.masked_input)

    @property
    def wire_bytes(self) -> bytes:
        """The ICRC as sent: least-significant byte first."""
        return self.crc.to_bytes(4, "little")

    @property
    def on_wire(self) -> bytes:
        return self.frame[self.crc_offset : self.crc_offset + 4]

    @property
    def matches_wire(self) -> bool:
        return self.wire_bytes == self.on_wire

    def library_crc(self) -> int:
        if self.encap == "rocev2":
            return wcrc.icrc_rocev2(self.covered)
        if self.encap == "rocev1":
            return wcrc.icrc_rocev1(self.covered)
        return wcrc.icrc_ib(self.covered)

    def masked_offsets(self) -> list[int]:
        """Offsets in ``masked_input`` whose byte changed or was forced by a variant field."""
        out: set[int] = set()
        for m in self.masked:
            first = m.offset - self.start + len(self.prefix)
            out.update(range(first, first + (m.bits + 7) // 8))
        return sorted(out)

    # ------------------------------------------------------------------ rendering
    def _repr_html_(self) -> str:
        p = len(self.prefix)
        parts = ['<div class="rdmalab-icrc">']
        before = ("a native IB packet has no Ethernet header: it starts with the LRH, which is covered too"
                  if self.encap == "ib" else "the Ethernet header is not covered")
        vcrc = self.encap == "ib" and len(self.frame) >= self.crc_offset + 6
        after = " and the 2 after them the VCRC, recomputed on every link" if vcrc else ""
        parts.append(f"<p><b>Step 1.</b> The ICRC covers bytes {self.start}&ndash;{self.crc_offset - 1} of the "
                     f"{len(self.frame)}-byte frame ({self.encap}); {before}; "
                     f"the 4 bytes at {self.crc_offset} are the ICRC itself{after}.</p>")
        parts.append(HexDump(self.frame, self.spans, marks=[Mark(self.start, self.crc_offset, "covered by the ICRC",
                                                                   "#1565c0")], fields=False).to_html())
        if p:
            parts.append("<p><b>Step 2.</b> RoCE has no LRH, so 8 bytes of <code>ff</code> stand in for it "
                         "(IBA Annex A16.8 / A17.3.3).</p>")
        elif self.rule == "ib_global":
            parts.append("<p><b>Step 2.</b> This native IB packet has a GRH: a router may rebuild its LRH, so all "
                         "8 LRH bytes are variant and become ones (IBA Vol 1 7.8.1; RoCE's 8 bytes of "
                         "<code>ff</code> are this rule without an LRH).</p>")
        else:
            parts.append("<p><b>Step 2.</b> Native IB without a GRH covers its real LRH, VL aside "
                         "(no stand-in bytes).</p>")
        td = "style='padding:.1em .7em'"
        tdr = "style='padding:.1em .7em;text-align:right'"
        rows = "".join(
            f"<tr><td {td}>{html.escape(m.layer)}.{html.escape(m.field)}</td><td {tdr}>{m.offset}</td>"
            f"<td {tdr}>{m.bits}</td><td {td}>{html.escape(m.text)}</td><td {td}>all ones</td>"
            f"<td {td}>{html.escape(m.why)}</td></tr>"
            for m in self.masked
        )
        heads = "".join(f"<th {td}>{h}</th>" for h in ("field", "frame byte", "bits", "value on the wire",
                                                       "in the CRC input", "why it may change in flight"))
        parts.append("<p><b>Step 3.</b> Set the variant fields to all ones:</p>"
                     f"<table style='font-size:12px;border-collapse:collapse'><tr>{heads}</tr>{rows}</table>")
        shifted = [
            Span(s.layer, s.field, s.start - self.start + p, s.end - self.start + p, s.bit_offset, s.bits,
                 s.value, s.text, s.ws)
            for s in self.spans if s.start >= self.start and s.end <= self.crc_offset
        ]
        if p:
            shifted.insert(0, Span("LRH", "pseudo-LRH", 0, p, 0, 64, None, "8 bytes of 0xff", None))
        marks = [Mark(o, o + 1, "masked to ones") for o in self.masked_offsets()]
        parts.append(f"<p>The CRC input ({len(self.masked_input)} bytes); outlined bytes were masked:</p>")
        parts.append(HexDump(self.masked_input, shifted, marks=_merge(marks), fields=False).to_html())
        ok = "matches" if self.matches_wire else "DOES NOT match"
        lib = self.library_crc()
        parts.append(
            f"<p><b>Step 4.</b> CRC-32 (the Ethernet/zlib CRC: reflected polynomial 0xEDB88320, init and final "
            f"XOR 0xFFFFFFFF) of that input = <code>0x{self.crc:08x}</code>.</p>"
            f"<p><b>Step 5.</b> Sent least-significant byte first: <code>{self.wire_bytes.hex(' ')}</code>; "
            f"the frame carries <code>{self.on_wire.hex(' ')}</code>: it <b>{ok}</b>. "
            f"(<code>rdmalab.wire.crc</code> computes <code>0x{lib:08x}</code>.)</p>"
        )
        parts.append("</div>")
        return "".join(parts)

    def __repr__(self) -> str:
        return (f"IcrcSteps({self.encap}, covers {self.start}..{self.crc_offset - 1}, "
                f"{len(self.masked)} variant fields masked, crc=0x{self.crc:08x}, wire={self.wire_bytes.hex()}, "
                f"matches={self.matches_wire})")


def _merge(marks: list[Mark]) -> list[Mark]:
    out: list[Mark] = []
    for m in sorted(marks, key=lambda m: m.start):
        if out and out[-1].end >= m.start:
            out[-1].end = max(out[-1].end, m.end)
        else:
            out.append(Mark(m.start, m.end, m.label))
    return out


def icrc_steps(obj: Any) -> IcrcSteps:
    """Walk through the ICRC of a decoded RoCEv2, RoCEv1 or native IB packet (or its frame)."""
    pkt = getattr(obj, "packet", None) or obj
    if isinstance(pkt, (bytes, bytearray)):
        pkt = decode_ethernet(bytes(pkt), lenient=True)
    frame, spans = spans_of(pkt)
    encap = pkt.encap
    if encap not in VARIANT_FIELDS or pkt.crc_offset is None:
        raise ValueError(f"no ICRC in a {encap} packet (RoCEv2, RoCEv1 and native IB carry one)")
    first = next((s for s in spans if s.layer in _START_LAYER[encap]), None)
    rule = wcrc.icrc_rule_ib(frame[_header_start(first):]) if encap == "ib" and first is not None else encap
    if first is None:
        raise ValueError(f"cannot find where the ICRC coverage starts in this {encap} packet")
    start = _header_start(first)
    buf = bytearray(frame[start : pkt.crc_offset])
    masked = []
    for layer, fname in VARIANT_FIELDS[rule]:
        for sp in spans:
            if sp.layer == layer and sp.field == fname and start <= sp.start < pkt.crc_offset:
                bit0 = (_header_start(sp) - start) * 8 + sp.bit_offset
                for b in range(bit0, bit0 + sp.bits):
                    buf[b // 8] |= 0x80 >> (b % 8)
                masked.append(MaskedField(layer, fname, sp.start, sp.bits, sp.value, sp.text,
                                          _header_start(sp) * 8 + sp.bit_offset, rule))
    prefix = PSEUDO_LRH if encap in ("rocev2", "rocev1") else b""
    return IcrcSteps(frame, spans, encap, start, pkt.crc_offset, prefix, frame[start : pkt.crc_offset],
                     prefix + bytes(buf), masked, rule)


@dataclass
class Crc32cSteps:
    """The MPA CRC32c (RFC 5044 4.4) of one FPDU: it covers the whole FPDU, markers included."""

    fpdu: bytes  # MPA header .. pad (no CRC)
    on_wire: bytes

    @property
    def crc(self) -> int:
        return crc32c(self.fpdu)

    @property
    def wire_bytes(self) -> bytes:
        return self.crc.to_bytes(4, "little")

    @property
    def matches_wire(self) -> bool:
        return self.wire_bytes == self.on_wire

    def _repr_html_(self) -> str:
        ok = "matches" if self.matches_wire else "DOES NOT match"
        return (
            "<div class='rdmalab-crc32c'><p>The MPA CRC covers the FPDU from the MPA length field through the pad "
            f"({len(self.fpdu)} bytes), nothing is masked: TCP already delivered these bytes end to end.</p>"
            + HexDump(self.fpdu, fields=False, legend=False).to_html()
            + f"<p>CRC32c (Castagnoli, reflected polynomial 0x82F63B78) = <code>0x{self.crc:08x}</code>, "
            f"sent as <code>{self.wire_bytes.hex(' ')}</code>; the FPDU carries <code>{self.on_wire.hex(' ')}"
            f"</code>: it <b>{ok}</b>.</p></div>"
        )

    def __repr__(self) -> str:
        return f"Crc32cSteps({len(self.fpdu)} bytes, crc=0x{self.crc:08x}, matches={self.matches_wire})"


def crc32c_steps(obj: Any) -> Crc32cSteps:
    """Walk through the CRC32c of an iWARP packet (a decoded Packet with ``crc_kind == "crc32c"``)."""
    pkt = getattr(obj, "packet", None) or obj
    if getattr(pkt, "crc_kind", None) != "crc32c" or pkt.crc_offset is None:
        raise ValueError("not an iWARP FPDU with an MPA CRC")
    mpa = next((layer for layer in pkt.layers if layer.name.startswith("MPA")), None)
    start = mpa.offset if mpa is not None else 0
    return Crc32cSteps(pkt.data[start : pkt.crc_offset], pkt.data[pkt.crc_offset : pkt.crc_offset + 4])
