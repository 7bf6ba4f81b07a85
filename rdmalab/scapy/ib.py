"""Scapy layers for the InfiniBand transport headers that ``scapy.contrib.roce`` lacks.

``scapy.contrib.roce`` has BTH (with the ICRC as a trailing ``FCSField``), GRH, AETH and the
CNP padding, and binds after the BTH only AETH (RC/RD Acknowledge) and the CNP padding.  This
module adds RETH, DETH, RDETH, ImmDt, IETH, AtomicETH, AtomicAckETH, XRCETH, FETH and the
native-IB LRH, generated from :mod:`rdmalab.wire.ib`, and makes scapy follow rdmalab's opcode
table (:data:`rdmalab.wire.opcodes.OPCODES`) for every header after the BTH:

* the BTH, contrib's AETH and every layer generated here pick their next layer from the
  BTH opcode (the headers the table lists, in order, then the payload as ``Raw``);
* the payload of a UD SEND to QP0/QP1 is handed to payload hooks (MAD, when
  :mod:`rdmalab.scapy.mad` is importable).

It extends contrib.roce's bindings without removing any.  Two global changes, both only for
UDP destination port 4791 / contrib's own layers, are made on import (see
:func:`install_bindings`): the RoCEv2 binding is moved ahead of DNS so that ``UDP()``'s default
source port 53 no longer makes the packet DNS, and ``BTH()/AETH()`` without an opcode builds an
RC Acknowledge (contrib's last binding made it the RD one, 0x51).

The pad bytes (``BTH.padcount``) stay in the ``Raw`` payload; scapy does not compute
``padcount``.  The ICRC is computed by contrib's BTH for RoCEv2 (IPv4/IPv6).  For RoCEv1 and
native IB use :func:`rdmalab.scapy.fix_crcs` (the LRH layer here also computes ICRC, VCRC and
PktLen itself when they are left ``None``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from scapy.config import conf
from scapy.contrib import roce
from scapy.fields import FCSField
from scapy.layers.inet import UDP
from scapy.packet import Packet, Raw, bind_bottom_up, bind_layers, bind_top_down

from rdmalab.wire import crc as _crc
from rdmalab.wire import ib
from rdmalab.wire.header import Header
from rdmalab.wire.net import ROCEV2_PORT
from rdmalab.wire.opcodes import OPCODES, Op, OpcodeInfo, Transport, find_opcode

from ._gen import make_layer, register, scapy_class

# --------------------------------------------------------------------------- next-layer logic

PayloadHook = Callable[[Packet, Packet, OpcodeInfo, bytes], "type[Packet] | None"]
_PAYLOAD_HOOKS: list[PayloadHook] = []


def add_payload_hook(hook: PayloadHook) -> None:
    """Register ``hook(layer, bth, info, payload) -> layer class | None`` for payloads after
    the last extended header ``layer`` (used by the MAD layers for QP0/QP1 traffic).  While
    scapy dissects, a layer's payload is not yet attached: walk ``underlayer``, not ``payload``."""
    if hook not in _PAYLOAD_HOOKS:
        _PAYLOAD_HOOKS.append(hook)


def find_under(layer: Packet | None, cls: type[Packet]) -> Packet | None:
    """The nearest layer of class ``cls`` at or below ``layer`` (following ``underlayer``)."""
    cur = layer
    while cur is not None and not isinstance(cur, cls):
        cur = cur.underlayer
    return cur


def _find_bth(layer: Packet | None) -> tuple[Packet | None, int]:
    """The BTH under ``layer`` (or ``layer`` itself) and how many layers lie between them."""
    depth = 0
    cur = layer
    while cur is not None and not isinstance(cur, roce.BTH):
        depth += 1
        cur = cur.underlayer
    return cur, depth


def next_layer_class(layer: Packet | None, payload: bytes) -> type[Packet]:
    """The scapy class of what follows ``layer`` in an IB transport packet, by BTH opcode."""
    bth, depth = _find_bth(layer)
    raw: type[Packet] = conf.raw_layer
    if bth is None:
        return raw
    info = OPCODES.get(bth.opcode)
    if info is None:
        return raw
    if depth < len(info.headers):
        hdr = info.headers[depth]
        if len(payload) < hdr.LAYOUT.size:
            return raw
        return scapy_class(hdr)
    if depth == len(info.headers) and payload and layer is not None:
        for hook in _PAYLOAD_HOOKS:
            cls = hook(layer, bth, info, payload)
            if cls is not None:
                return cls
    return raw


class IBNext(Packet):
    """Never instantiated: a dispatcher that scapy's bindings point at (``BTH -> IBNext``,
    ``AETH -> IBNext``) and that becomes the layer the opcode table says comes next."""

    name = "IB next header"
    fields_desc = []

    @classmethod
    def dispatch_hook(cls, _pkt: bytes | None = None, *args: Any, **kargs: Any) -> type[Packet]:
        return next_layer_class(kargs.get("_underlayer"), _pkt or b"")


class IBExtHeader(Packet):
    """Base of the generated extended transport headers: the next layer is chosen by the
    BTH opcode below, through rdmalab's opcode table."""

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        return next_layer_class(self, payload)


# --------------------------------------------------------------------------- generated layers

_MOD = __name__
RDETH = make_layer(ib.RDETH, base=IBExtHeader, module=_MOD)
DETH = make_layer(ib.DETH, base=IBExtHeader, module=_MOD)
RETH = make_layer(ib.RETH, base=IBExtHeader, module=_MOD)
AtomicETH = make_layer(ib.AtomicETH, base=IBExtHeader, module=_MOD)
AtomicAckETH = make_layer(ib.AtomicAckETH, base=IBExtHeader, module=_MOD)
ImmDt = make_layer(ib.ImmDt, base=IBExtHeader, module=_MOD)
IETH = make_layer(ib.IETH, base=IBExtHeader, module=_MOD)
XRCETH = make_layer(ib.XRCETH, base=IBExtHeader, module=_MOD)
FETH = make_layer(ib.FETH, base=IBExtHeader, module=_MOD)

# contrib.roce's own layers are reused (same class, so code written for contrib keeps
# working); rdmalab's names differ, so register explicit name maps.
BTH = roce.BTH
GRH = roce.GRH
AETH = roce.AETH
CNPPadding = roce.CNPPadding

BTH_NAMES = {
    "opcode": "opcode", "se": "solicited", "migreq": "migreq", "padcnt": "padcount", "tver": "version",
    "p_key": "pkey", "fecn": "fecn", "becn": "becn", "resv6": "resv6", "destqp": "dqpn",
    "ackreq": "ackreq", "resv7": "resv7", "psn": "psn",
}
GRH_NAMES = {
    "ipver": "ipver", "tclass": "tclass", "flowlabel": "flowlabel", "paylen": "paylen",
    "nxthdr": "nexthdr", "hoplmt": "hoplmt", "sgid": "sgid", "dgid": "dgid",
}
register(ib.BTH, roce.BTH, BTH_NAMES)
register(ib.GRH, roce.GRH, GRH_NAMES)


def _aeth_to(layer: Packet) -> Header:
    syn = int(layer.syndrome)
    return ib.AETH(reserved=syn >> 7, type=(syn >> 5) & 3, value=syn & 0x1F, msn=int(layer.msn))


def _aeth_from(h: Header) -> dict[str, Any]:
    assert isinstance(h, ib.AETH)
    return {"syndrome": h.syndrome, "msn": h.msn}


register(ib.AETH, roce.AETH, to_header=_aeth_to, from_header=_aeth_from)


def _cnp_to(layer: Packet) -> Header:
    return ib.CNPPad(reserved=(int(layer.reserved1) << 64) | int(layer.reserved2))


def _cnp_from(h: Header) -> dict[str, Any]:
    assert isinstance(h, ib.CNPPad)
    return {"reserved1": h.reserved >> 64, "reserved2": h.reserved & (2**64 - 1)}


register(ib.CNPPad, roce.CNPPadding, to_header=_cnp_to, from_header=_cnp_from)


# --------------------------------------------------------------------------- native IB: LRH


class _LRHBase(Packet):
    def post_build(self, p: bytes, pay: bytes) -> bytes:
        # ``pay`` ends with the BTH's ICRC (4) and our VCRC placeholder (2).
        data = bytearray(p + pay)
        if self.pktlen is None:
            words = (len(data) - 2) // 4
            data[4] = (data[4] & 0xF8) | ((words >> 8) & 0x07)
            data[5] = words & 0xFF
        bth = self.getlayer(roce.BTH)
        if bth is not None and bth.icrc is None and len(data) >= 6:
            data[-6:-2] = _crc.icrc_ib(bytes(data[:-6])).to_bytes(4, "little")
        if self.vcrc is None and len(data) >= 2:
            data[-2:] = _crc.vcrc(bytes(data[:-2])).to_bytes(2, "little")
        return bytes(data)


LRH = make_layer(
    ib.LRH,
    base=_LRHBase,
    module=_MOD,
    defaults={"pktlen": None},
    extra_fields=[FCSField("vcrc", None, fmt="<H")],  # type: ignore[list-item]
)
LRH.__doc__ = (LRH.__doc__ or "") + (
    "\n\nNative InfiniBand (LINKTYPE / ERF type 21 records start here).  The VCRC (2 bytes,"
    " little-endian) is this layer's trailer, the ICRC the BTH's.  PktLen, ICRC and VCRC left"
    " as None are computed on build."
)


# --------------------------------------------------------------------------- bindings

_installed = False


def _add_opcode_names() -> None:
    """Name the opcodes contrib.roce's enum lacks (XRC, FLUSH, ATOMIC WRITE, RESYNC, SEND
    with Invalidate) in its own style, e.g. ``XRC_SEND_FIRST``."""
    fld: Any = roce.BTH.fields_desc[0]  # ByteEnumField("opcode", ...)
    for code, info in OPCODES.items():
        if code not in fld.i2s:
            label = info.name.upper().replace(" WITH ", "_WITH_").replace(" ", "_")
            fld.i2s[code] = label
            fld.s2i[label] = code


def install_bindings() -> None:
    """Bind the layers into scapy (idempotent; done on import of :mod:`rdmalab.scapy`)."""
    global _installed
    if _installed:
        return
    _installed = True
    # Dissection follows the opcode table, ahead of contrib's own bindings: they agree for
    # 0x11 (AETH) and 0x81 (CNPPadding), but contrib puts AETH right after the BTH of an RD
    # Acknowledge (0x51), where IBA Vol 1 9.3 has RDETH then AETH.
    roce.BTH.payload_guess = [({}, IBNext)] + [g for g in roce.BTH.payload_guess if g[1] is not IBNext]
    bind_bottom_up(roce.AETH, IBNext)  # AETH -> AtomicAckETH (0x12) or payload
    # Building BTH()/AETH() without an opcode: RC Acknowledge, not contrib's last-bound RD one.
    bind_top_down(roce.BTH, roce.AETH, opcode=find_opcode(Transport.RC, Op.ACKNOWLEDGE))
    # RoCEv2 wins over DNS (UDP's default sport is 53): move the dport=4791 binding first.
    _add_opcode_names()
    entry = ({"dport": ROCEV2_PORT}, roce.BTH)
    UDP.payload_guess = [entry] + [g for g in UDP.payload_guess if g != entry]
    # Native IB: LRH -> GRH (LNH 3) or BTH (LNH 2).
    bind_layers(LRH, roce.GRH, lnh=ib.LNH_IBA_GLOBAL)
    bind_layers(LRH, roce.BTH, lnh=ib.LNH_IBA_LOCAL)


__all__ = [
    "AETH", "BTH", "CNPPadding", "DETH", "FETH", "GRH", "IETH", "LRH", "RDETH", "RETH", "XRCETH",
    "AtomicAckETH", "AtomicETH", "ImmDt", "IBExtHeader", "IBNext",
    "add_payload_hook", "install_bindings", "next_layer_class", "Raw",
]
