"""Scapy layers generated from rdmalab's header declarations.

Each rdmalab header declares its fields once (``Header.LAYOUT``: name, bit width, display
format).  :func:`make_layer` turns that declaration into a scapy ``Packet`` subclass, so the
field list is never written twice and the two libraries cannot disagree about a layout.
Values are plain integers on both sides: a scapy field holds exactly the integer the rdmalab
field holds, whatever its width (the 128-bit GIDs included).

The registry kept here maps each rdmalab header class to its scapy layer class, with the field
names on each side, so a scapy layer converts to the rdmalab header and back
(:func:`header_from_layer`, :func:`layer_from_header`).  Layers that scapy already has
(``scapy.contrib.roce``'s BTH, GRH, AETH and CNPPadding) are registered with hand-written
conversions, since their field names differ from rdmalab's.
"""

from __future__ import annotations

import dataclasses
import keyword
from collections.abc import Callable, Mapping
from typing import Any

from scapy.fields import (
    BitField,
    ByteField,
    Field,
    IntField,
    LongField,
    ShortField,
    XBitField,
    XByteField,
    XIntField,
    XLongField,
    XShortField,
)
from scapy.packet import Packet

from rdmalab.wire.header import FieldSpec, Header

_HEX_FORMATS = frozenset({"hex", "bytes", "mac", "ipv4", "ipv6"})
_ALIGNED: dict[int, tuple[Callable[[str, Any], Field[Any, Any]], Callable[[str, Any], Field[Any, Any]]]] = {
    8: (ByteField, XByteField),
    16: (ShortField, XShortField),
    32: (IntField, XIntField),
    64: (LongField, XLongField),
}
_RESERVED_NAMES = frozenset(dir(Packet)) | {"load"}


def scapy_field(spec: FieldSpec, default: Any = 0, name: str | None = None) -> Field[Any, Any]:
    """The scapy field for one declared field: byte-aligned 8/16/32/64-bit fields get the
    usual Byte/Short/Int/Long fields, anything else a BitField; hex display where rdmalab
    shows hex."""
    name = name or spec.name
    hexy = spec.fmt in _HEX_FORMATS
    if spec.bit_offset % 8 == 0 and spec.bits in _ALIGNED:
        return _ALIGNED[spec.bits][hexy](name, default)
    return (XBitField if hexy else BitField)(name, default, spec.bits)


def scapy_name(rd_name: str) -> str:
    """The scapy field name for an rdmalab field name (renamed only if it would shadow a
    ``Packet`` attribute, e.g. ``name`` or ``payload``)."""
    if rd_name in _RESERVED_NAMES or keyword.iskeyword(rd_name):
        return rd_name + "_"
    return rd_name


def _defaults(header: type[Header]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if dataclasses.is_dataclass(header):
        for f in dataclasses.fields(header):
            if f.default is not dataclasses.MISSING:
                out[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                out[f.name] = f.default_factory()
    return out


@dataclasses.dataclass(frozen=True)
class Binding:
    """How one rdmalab header class and one scapy layer class correspond."""

    header: type[Header]
    layer: type[Packet]
    to_header: Callable[[Packet], Header | list[Header]]  # a list where one scapy layer is several rdmalab headers
    from_header: Callable[[Header], dict[str, Any]]

    def headers(self, layer: Packet) -> list[Header]:
        out = self.to_header(layer)
        return out if isinstance(out, list) else [out]


_BY_HEADER: dict[type[Header], Binding] = {}
_BY_LAYER: dict[type[Packet], Binding] = {}


def register(
    header: type[Header],
    layer: type[Packet],
    names: Mapping[str, str] | None = None,
    *,
    to_header: Callable[[Packet], Header | list[Header]] | None = None,
    from_header: Callable[[Header], dict[str, Any]] | None = None,
    primary: bool = True,
) -> Binding:
    """Record that ``layer`` is the scapy form of ``header``.

    ``names`` maps rdmalab field names to scapy field names (identity by default); custom
    converters replace the name mapping for layers whose fields do not map one to one.
    ``primary=False`` registers the scapy->rdmalab direction only.
    """
    mapping = dict(names) if names is not None else {f.name: f.name for f in header.LAYOUT.fields}

    def _to(layer_pkt: Packet) -> Header:
        return header(**{rd: int(layer_pkt.getfieldval(sc)) for rd, sc in mapping.items()})

    def _from(h: Header) -> dict[str, Any]:
        return {sc: getattr(h, rd) for rd, sc in mapping.items()}

    b = Binding(header, layer, to_header or _to, from_header or _from)
    if primary or header not in _BY_HEADER:
        _BY_HEADER[header] = b
    _BY_LAYER[layer] = b
    return b


def make_layer(
    header: type[Header],
    *,
    name: str | None = None,
    base: type[Packet] = Packet,
    module: str | None = None,
    defaults: Mapping[str, Any] | None = None,
    extra_fields: list[Field[Any, Any]] | None = None,
    namespace: Mapping[str, Any] | None = None,
) -> type[Packet]:
    """Generate (and register) a scapy layer class from an rdmalab header declaration.

    ``defaults`` overrides field defaults (by rdmalab name; ``None`` means "computed on
    build" where the layer's ``post_build`` does so); ``extra_fields`` are appended after the
    declared ones (e.g. a trailer ``FCSField``); ``namespace`` adds class attributes/methods.
    """
    lay = header.LAYOUT
    dflt = _defaults(header)
    if defaults:
        dflt.update(defaults)
    names = {f.name: scapy_name(f.name) for f in lay.fields}
    fields = [scapy_field(f, dflt.get(f.name, 0), names[f.name]) for f in lay.fields]
    fields.extend(extra_fields or [])
    cls_name = name or lay.name
    attrs: dict[str, Any] = {
        "name": lay.name,
        "fields_desc": fields,
        "__doc__": f"{lay.name}: {lay.spec}.\n\nGenerated from rdmalab's ``{header.__module__}.{header.__qualname__}``.",
        "__module__": module or __name__,
        "__qualname__": cls_name,
        "rdmalab_header": header,
    }
    if namespace:
        attrs.update(namespace)
    cls: type[Packet] = type(cls_name, (base,), attrs)
    register(header, cls, names)
    return cls


def binding_for_header(header: type[Header]) -> Binding:
    try:
        return _BY_HEADER[header]
    except KeyError:
        raise KeyError(f"no scapy layer registered for rdmalab header {header.__name__}") from None


def binding_for_layer(layer: type[Packet]) -> Binding | None:
    for klass in layer.__mro__:
        b = _BY_LAYER.get(klass)
        if b is not None:
            return b
    return None


def scapy_class(header: type[Header]) -> type[Packet]:
    """The scapy layer class of an rdmalab header class."""
    return binding_for_header(header).layer


def layer_from_header(h: Header) -> Packet:
    """A scapy layer (without payload) holding the field values of an rdmalab header."""
    b = binding_for_header(type(h))
    return b.layer(**b.from_header(h))


def headers_from_layer(layer: Packet) -> list[Header]:
    """The rdmalab headers holding the field values of one scapy layer (payload ignored).

    Usually one; the iWARP DDP layers give two (the DDP header and the RDMAP header that
    rdmalab, like Wireshark, shows overlapping it)."""
    b = binding_for_layer(type(layer))
    if b is None:
        raise KeyError(f"scapy layer {type(layer).__name__} has no rdmalab header")
    return b.headers(layer)


def header_from_layer(layer: Packet) -> Header:
    """The rdmalab header holding the field values of one scapy layer (payload ignored)."""
    return headers_from_layer(layer)[0]


_DERIVED: set[type[Header]] = set()


def register_derived(header: type[Header]) -> None:
    """Note an rdmalab header that scapy shows inside another layer's fields (no layer of its
    own), e.g. RDMAP's control byte inside the DDP layer."""
    _DERIVED.add(header)


def registered_headers() -> tuple[type[Header], ...]:
    """Every rdmalab header class that scapy dissects (as a layer or inside one)."""
    return (*_BY_HEADER, *sorted(_DERIVED - set(_BY_HEADER), key=lambda h: h.__name__))
