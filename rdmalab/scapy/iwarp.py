"""Scapy layers for iWARP: MPA (Request/Reply frames and FPDU framing, RFC 5044/6581), DDP
(RFC 5041, tagged and untagged) and RDMAP (RFC 5040/7306), generated from
:mod:`rdmalab.wire.mpa` and :mod:`rdmalab.wire.rdmap`.

**Scope.**  iWARP rides a TCP *byte stream*: an FPDU may span TCP segments, a segment may hold
several FPDUs, and markers may sit inside them.  Scapy dissects packets, not streams, so these
layers are not bound to TCP.  Give them the stream's bytes instead::

    pkts = dissect_tcp_payload(bytes(tcp_segment.payload))     # MPA Req/Rep and/or FPDUs
    fpdu = FPDU(one_fpdu_bytes)                                  # FPDU / DDPUntagged / Raw

TCP reassembly, MPA negotiation and mid-stream resynchronisation are
:mod:`rdmalab.capture.iwarp`'s job.  With markers, :func:`dissect_fpdu` strips them (using
rdmalab's marker arithmetic) and dissects the marker-free FPDU, as rdmalab's decoder does.

**Layers.**

* ``MPAReqRep`` (20 bytes) / ``MPAv2IRDORD`` (Rev 2, enhanced) / ``Raw`` (private data);
  ``pd_length`` left ``None`` is computed on build.
* ``FPDU``: ``ulpdu_length``, then the ULPDU as payload, then ``pad`` and ``crc`` (CRC32c, sent
  least-significant byte first, as :attr:`rdmalab.wire.packet.Packet.crc` reads it).  Left
  ``None``, the length, pad and CRC are computed on build.
* ``DDPTagged`` (14 bytes) / ``DDPUntagged`` (18 bytes): the DDP header with its RsvdULP bits
  shown as RDMAP's fields (``rv``, ``rsv``, ``opcode`` and, untagged, ``inval_stag``), since a
  scapy layer cannot overlap another.  Such a layer converts to *two* rdmalab headers (DDP and
  the overlapping RDMAP header).
* after the DDP header, the RDMAP message's headers as rdmalab's ``RDMAP_OPCODES`` lists them
  (``ReadRequest``, ``Terminate`` [+ ``TerminateSegLen``, ``TerminatedDDPTagged`` /
  ``TerminatedDDPUntagged``, ``TerminatedRDMAP`` as its D/R bits say], ``AtomicRequest``,
  ``AtomicResponse``, ``ImmediateData``), then the payload as ``Raw``.
"""

from __future__ import annotations

from typing import Any

from scapy.config import conf
from scapy.fields import Field, IntField, StrField
from scapy.packet import Packet

from rdmalab.wire import crc as _crc
from rdmalab.wire import mpa, rdmap
from rdmalab.wire.header import Header
from rdmalab.wire.iwarp import decode_fpdu, decode_mpa_frame
from rdmalab.wire.packet import Packet as RdPacket

from . import convert
from ._gen import binding_for_layer, make_layer, register, register_derived, scapy_class, scapy_field, scapy_name
from .convert import register_decoder

_MOD = __name__

# ============================================================================ MPA Request / Reply


class _MPAReqRepBase(Packet):
    def extract_padding(self, s: bytes) -> tuple[bytes, bytes]:
        n = self.pd_length or 0
        return s[:n], s[n:]

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        if self.rev == 2 and self.res & mpa.MPA_FLAG_ENHANCED and len(payload) >= 4:
            return MPAv2IRDORD
        raw: type[Packet] = conf.raw_layer
        return raw

    def post_build(self, p: bytes, pay: bytes) -> bytes:
        if self.pd_length is None:
            p = p[:18] + len(pay).to_bytes(2, "big") + p[20:]
        return p + pay


MPAReqRep = make_layer(mpa.MPAReqRep, name="MPAReqRep", base=_MPAReqRepBase, module=_MOD,
                       defaults={"pd_length": None})
MPAv2IRDORD = make_layer(mpa.MPAv2IRDORD, name="MPAv2IRDORD", module=_MOD)
MPAMarker = make_layer(mpa.MPAMarker, name="MPAMarker", module=_MOD)


# ============================================================================ FPDU


class _Deferred(Field[Any, Any]):
    """A field whose bytes come after the payload (MPA pad and CRC): it takes no room where it
    is declared; ``FPDU`` reads it in ``extract_padding`` and writes it in ``post_build``."""

    def getfield(self, pkt: Packet, s: bytes) -> tuple[bytes, Any]:
        return s, pkt.getfieldval(self.name) if self.name in pkt.fields else None

    def addfield(self, pkt: Packet, s: bytes, val: Any) -> bytes:
        return s


class _DeferredBytes(_Deferred, StrField):
    pass


class _DeferredInt(_Deferred, IntField):
    def i2repr(self, pkt: Packet | None, x: Any) -> str:
        return "None" if x is None else f"0x{x:08x}"


class _FPDUBase(Packet):
    def extract_padding(self, s: bytes) -> tuple[bytes, bytes]:
        n = self.ulpdu_length or 0
        pad = mpa.pad_length(n)
        self.fields["pad"] = s[n : n + pad]
        crc = s[n + pad : n + pad + mpa.MPA_CRC_SIZE]
        self.fields["crc"] = int.from_bytes(crc, "little") if len(crc) == mpa.MPA_CRC_SIZE else None
        self.raw_packet_cache = None  # the trailer is rebuilt by post_build
        return s[:n], s[n + pad + mpa.MPA_CRC_SIZE :]

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        raw: type[Packet] = conf.raw_layer
        if not payload:
            return raw
        cls = DDPTagged if payload[0] & 0x80 else DDPUntagged
        return cls if len(payload) >= _size(cls) else raw

    def post_build(self, p: bytes, pay: bytes) -> bytes:
        if self.ulpdu_length is None:
            p = len(pay).to_bytes(2, "big") + p[2:]
        n = int.from_bytes(p[:2], "big")
        pad = self.pad if self.pad is not None else bytes(mpa.pad_length(n))
        body = p + pay + pad
        crc = self.crc if self.crc is not None else _crc.crc32c(body)
        return body + int(crc).to_bytes(4, "little")


FPDU = make_layer(
    mpa.MPA, name="FPDU", base=_FPDUBase, module=_MOD, defaults={"ulpdu_length": None},
    extra_fields=[_DeferredBytes("pad", None), _DeferredInt("crc", None)],
)


# ============================================================================ DDP + RDMAP


class IWARPLayer(Packet):
    """Base of the DDP/RDMAP layers: the next layer as rdmalab's RDMAP opcode table says."""

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        return next_iwarp_class(self, payload)


def _ddp_layer(ddp: type[Header], ctrl: type[Header], name: str) -> type[Packet]:
    """A DDP layer whose RsvdULP field is replaced by the RDMAP fields it carries."""
    ctrl_names = {f.name for f in ctrl.LAYOUT.fields}
    fields = []
    names: dict[str, str] = {}
    defaults = ddp()
    ctrl_default = ctrl.decode(_rsvdulp_bytes(defaults))
    for f in ddp.LAYOUT.fields:
        if f.name == "rsvdulp":
            for g in ctrl.LAYOUT.fields:
                fields.append(scapy_field(g, getattr(ctrl_default, g.name), scapy_name(g.name)))
        else:
            if f.name in ctrl_names:
                raise TypeError(f"{name}: field {f.name} in both DDP and RDMAP")
            names[f.name] = scapy_name(f.name)
            fields.append(scapy_field(f, getattr(defaults, f.name), names[f.name]))
    ctrl_map = {g.name: scapy_name(g.name) for g in ctrl.LAYOUT.fields}

    def to_headers(layer: Packet) -> Header | list[Header]:
        c = ctrl(**{k: int(layer.getfieldval(v)) for k, v in ctrl_map.items()})
        vals: dict[str, int] = {k: int(layer.getfieldval(v)) for k, v in names.items()}
        vals["rsvdulp"] = int.from_bytes(c.encode(), "big")
        d = ddp(**vals)
        return [d, c]

    def from_header(h: Header) -> dict[str, Any]:
        c = ctrl.decode(_rsvdulp_bytes(h))
        out = {v: getattr(h, k) for k, v in names.items()}
        out.update({v: getattr(c, k) for k, v in ctrl_map.items()})
        return out

    lay = ddp.LAYOUT
    cls: type[Packet] = type(name, (IWARPLayer,), {
        "name": f"DDP/RDMAP ({'tagged' if ddp is rdmap.DDPTagged else 'untagged'})",
        "fields_desc": fields,
        "__doc__": f"{lay.spec}, with RsvdULP as {ctrl.LAYOUT.spec}.\n\nGenerated from rdmalab's "
                   f"``{ddp.__qualname__}`` and ``{ctrl.__qualname__}``.",
        "__module__": _MOD,
        "__qualname__": name,
        "rdmalab_header": ddp,
    })
    register(ddp, cls, to_header=to_headers, from_header=from_header)
    register_derived(ctrl)
    return cls


def _rsvdulp_bytes(h: Any) -> bytes:
    spec = type(h).LAYOUT.field("rsvdulp")
    return int(h.rsvdulp).to_bytes(spec.bits // 8, "big")


DDPTagged = _ddp_layer(rdmap.DDPTagged, rdmap.RDMAPControl, "DDPTagged")
DDPUntagged = _ddp_layer(rdmap.DDPUntagged, rdmap.RDMAPUntagged, "DDPUntagged")

ReadRequest = make_layer(rdmap.ReadRequest, name="ReadRequest", base=IWARPLayer, module=_MOD)
Terminate = make_layer(rdmap.Terminate, name="Terminate", base=IWARPLayer, module=_MOD)
TerminateSegLen = make_layer(rdmap.TerminateSegLen, name="TerminateSegLen", base=IWARPLayer, module=_MOD)
TerminatedDDPTagged = make_layer(rdmap.TerminatedDDPTagged, name="TerminatedDDPTagged", base=IWARPLayer, module=_MOD)
TerminatedDDPUntagged = make_layer(rdmap.TerminatedDDPUntagged, name="TerminatedDDPUntagged", base=IWARPLayer,
                                   module=_MOD)
TerminatedRDMAP = make_layer(rdmap.TerminatedRDMAP, name="TerminatedRDMAP", base=IWARPLayer, module=_MOD)
AtomicRequest = make_layer(rdmap.AtomicRequest, name="AtomicRequest", base=IWARPLayer, module=_MOD)
AtomicResponse = make_layer(rdmap.AtomicResponse, name="AtomicResponse", base=IWARPLayer, module=_MOD)
ImmediateData = make_layer(rdmap.ImmediateData, name="ImmediateData", base=IWARPLayer, module=_MOD)


def _size(cls: type[Packet]) -> int:
    b = binding_for_layer(cls)
    return b.header.LAYOUT.size if b is not None else 0


def next_iwarp_class(layer: Packet, payload: bytes) -> type[Packet]:
    """What follows ``layer`` inside a ULPDU, by the RDMAP opcode of the DDP layer below."""
    raw: type[Packet] = conf.raw_layer
    chain: list[Packet] = []
    cur: Packet | None = layer
    while cur is not None and not isinstance(cur, (DDPTagged, DDPUntagged)):
        chain.append(cur)
        cur = cur.underlayer
    if cur is None:
        return raw
    ddp = cur
    chain.reverse()  # the layers after the DDP header, in wire order
    info = rdmap.RDMAP_OPCODES.get(ddp.opcode)
    if info is None or info.tagged != isinstance(ddp, DDPTagged):
        return raw
    seq: list[type[Header] | None] = list(info.headers)
    if seq and seq[0] is rdmap.Terminate and chain and isinstance(chain[0], Terminate):
        term = chain[0]
        if term.hdrct_d:
            seq += [rdmap.TerminateSegLen, None]  # None: tagged or untagged, by its T bit
        if term.hdrct_r:
            seq.append(rdmap.TerminatedRDMAP)
    depth = len(chain)
    if depth >= len(seq):
        return raw
    hdr = seq[depth]
    if hdr is None:
        hdr = rdmap.TerminatedDDPTagged if payload and payload[0] & 0x80 else rdmap.TerminatedDDPUntagged
    if len(payload) < hdr.LAYOUT.size:
        return raw
    return scapy_class(hdr)


# ============================================================================ byte streams


def dissect_fpdu(data: bytes, offset: int = 0, *, markers: int | None = None) -> tuple[Packet, int]:
    """Dissect the FPDU at ``data[offset:]``: the scapy packet and the wire octets it used.

    ``markers`` is the FPDU's stream position when markers were negotiated (see
    :mod:`rdmalab.wire.mpa`); they are stripped before scapy sees the FPDU.  Raises rdmalab's
    :class:`~rdmalab.wire.errors.TruncatedError` if ``data`` ends inside the FPDU.
    """
    n = mpa.fpdu_length(mpa.ulpdu_length_at(data, offset, markers))
    if markers is None:
        octets, wire = mpa.gather(data, offset, n, None)[:2]
    else:
        octets, wire, _ = mpa.gather(data, offset, n - mpa.MPA_CRC_SIZE, markers)
        crc, crc_wire, _ = mpa.gather(data, offset + wire, mpa.MPA_CRC_SIZE, markers + wire)
        octets, wire = octets + crc, wire + crc_wire
    return FPDU(octets), wire


def dissect_tcp_payload(data: bytes, *, markers: int | None = None) -> list[Packet]:
    """Dissect consecutive MPA Request/Reply frames and whole FPDUs from TCP payload bytes.

    The bytes must start at a frame boundary; a trailing partial FPDU is returned as ``Raw``
    (TCP reassembly is out of scope here).  ``markers``: stream position of the first FPDU.
    """
    out: list[Packet] = []
    pos = 0
    while pos < len(data):
        if data[pos : pos + 16] in (mpa.MPA_KEY_REQ, mpa.MPA_KEY_REP) and len(data) - pos >= 20:
            n = 20 + int.from_bytes(data[pos + 18 : pos + 20], "big")
            out.append(MPAReqRep(data[pos : pos + n]))
            pos += n
            continue
        try:
            pkt, wire = dissect_fpdu(data, pos, markers=None if markers is None else markers + pos)
        except Exception:  # noqa: BLE001 - partial FPDU: hand back the rest as raw bytes
            out.append(conf.raw_layer(data[pos:]))
            break
        out.append(pkt)
        pos += wire
    return out


def _decode_fpdu(data: bytes, *, lenient: bool = False) -> RdPacket:
    return decode_fpdu(data, lenient=lenient)[0]


def _decode_mpa_frame(data: bytes, *, lenient: bool = False) -> RdPacket:
    return decode_mpa_frame(data, lenient=lenient)[0]


def iwarp_first_layer(data: bytes) -> Packet:
    """Scapy's dissection of an rdmalab ``encap="iwarp"`` packet's bytes."""
    if data[:16] in (mpa.MPA_KEY_REQ, mpa.MPA_KEY_REP):
        return MPAReqRep(data)
    return FPDU(data)


def _install() -> None:
    register_decoder(MPAReqRep, _decode_mpa_frame)
    register_decoder(FPDU, _decode_fpdu, encap=None)
    convert._FIRST_LAYER["iwarp"] = iwarp_first_layer


_install()

__all__ = [
    "AtomicRequest", "AtomicResponse", "DDPTagged", "DDPUntagged", "FPDU", "IWARPLayer", "ImmediateData",
    "MPAMarker", "MPAReqRep", "MPAv2IRDORD", "ReadRequest", "Terminate", "TerminateSegLen", "TerminatedDDPTagged",
    "TerminatedDDPUntagged", "TerminatedRDMAP", "dissect_fpdu", "dissect_tcp_payload", "iwarp_first_layer",
    "next_iwarp_class",
]
