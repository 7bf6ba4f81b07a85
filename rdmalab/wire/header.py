"""Declarative headers: a header is declared once, as fields with bit widths.

Decoding, encoding, the byte span of each field (the hex dump colours by it), the Wireshark
display-filter names and the spec citation all come from that one declaration.

A header class is a frozen dataclass whose attributes are its fields, plus a ``LAYOUT`` built
with :func:`layout`.  Fields are listed most-significant first, exactly as the specification
draws them, and their widths add up to a whole number of bytes.  The decoder reads the header as
one big-endian integer and takes each field with a shift and a mask, which is both simple and
the fastest pure-Python approach for headers of a few words.

Example::

    @dataclass(frozen=True, slots=True)
    class DETH(Header):
        q_key: int = 0
        reserved: int = 0
        src_qp: int = 0
        LAYOUT: ClassVar[Layout] = layout(
            "DETH", "IBA Vol 1 9.3.3 (Datagram ETH)",
            F("q_key", 32, "infiniband.deth.q_key"),
            F("reserved", 8, None, reserved=True),
            F("src_qp", 24, "infiniband.deth.srcqp"),
        )
"""

from __future__ import annotations

import dataclasses
import ipaddress
import types
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from rdmalab.wire.errors import EncodeError, MalformedError, TruncatedError


@dataclass(frozen=True, slots=True)
class F:
    """One field of a header: its attribute name, width in bits and Wireshark name.

    ``fmt`` says how to show the value: ``"dec"``, ``"hex"``, ``"ipv6"``, ``"ipv4"``,
    ``"mac"`` or ``"bytes"``.  ``reserved`` fields are shown but not required on construction.
    ``const`` is a value the specification requires; decoding records a problem otherwise.
    """

    name: str
    bits: int
    ws: str | None = None
    fmt: str = "dec"
    reserved: bool = False
    const: int | None = None
    doc: str = ""


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """A field placed in its header: bit offset from the header's first bit, and mask."""

    name: str
    bits: int
    ws: str | None
    fmt: str
    reserved: bool
    const: int | None
    doc: str
    shift: int  # right shift of the whole-header integer
    mask: int
    bit_offset: int  # from the header's most significant bit

    @property
    def byte_start(self) -> int:
        return self.bit_offset // 8

    @property
    def byte_end(self) -> int:
        """One past the last byte this field touches."""
        return (self.bit_offset + self.bits + 7) // 8


@dataclass(frozen=True, slots=True)
class Layout:
    """The compiled declaration of a header."""

    name: str
    spec: str
    size: int
    fields: tuple[FieldSpec, ...]
    ws_proto: str | None
    consts: tuple[FieldSpec, ...] = ()  # the fields whose value the specification fixes

    def field(self, name: str) -> FieldSpec:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)


def layout(name: str, spec: str, *fields: F, ws: str | None = None) -> Layout:
    """Compile a list of fields (most significant first) into a :class:`Layout`."""
    total = sum(f.bits for f in fields)
    if total % 8:
        raise TypeError(f"{name}: fields add up to {total} bits, not whole bytes")
    specs = []
    pos = 0
    for f in fields:
        shift = total - pos - f.bits
        specs.append(
            FieldSpec(
                f.name, f.bits, f.ws, f.fmt, f.reserved, f.const, f.doc,
                shift, (1 << f.bits) - 1, pos,
            )
        )
        pos += f.bits
    return Layout(name, spec, total // 8, tuple(specs), ws, tuple(f for f in specs if f.const is not None))



@dataclass(frozen=True, slots=True)
class Span:
    """Where one field sits in a buffer: used by the hex dump and the field tree."""

    layer: str
    field: str
    start: int  # first byte, absolute in the buffer
    end: int  # one past the last byte
    bit_offset: int  # within the first byte's containing header
    bits: int
    value: Any
    text: str
    ws: str | None


def _fmt(fmt: str, bits: int, value: Any) -> str:
    if fmt == "hex":
        return f"0x{value:0{(bits + 3) // 4}x}"
    if fmt == "ipv6":
        return str(ipaddress.IPv6Address(int(value)))
    if fmt == "ipv4":
        return str(ipaddress.IPv4Address(int(value)))
    if fmt == "mac":
        raw = int(value).to_bytes(6, "big")
        return ":".join(f"{b:02x}" for b in raw)
    if fmt == "bytes":
        return int(value).to_bytes((bits + 7) // 8, "big").hex()
    return str(value)


class Header:
    """Base class of every declared header (a frozen dataclass in each subclass)."""

    __slots__ = ()
    LAYOUT: ClassVar[Layout]
    #: a capture's pseudo-header (an ERF record's headers), not part of the frame, or a part of a header shown
    #: apart (an IPv4 source route's destination): a packet's summary does not name it among the frame's headers
    PSEUDO: ClassVar[bool] = False

    # ------------------------------------------------------------------ decode
    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview, offset: int = 0) -> Self:
        """Decode the header starting at ``offset``; raise :class:`TruncatedError` if short."""
        dec = _DECODERS.get(cls)
        if dec is None:
            dec = _DECODERS[cls] = compile_decoder(cls)
        out: Self = dec(data, offset)
        return out

    @classmethod
    def decode_reference(cls, data: bytes | bytearray | memoryview, offset: int = 0) -> Self:
        """The readable decoder: the header read as one big-endian integer, each field taken with
        its shift and mask.  :meth:`decode` runs the one generated from the declaration
        (:func:`compile_decoder`), which gives the same header."""
        lay = cls.LAYOUT
        end = offset + lay.size
        if offset < 0 or end > len(data):
            raise TruncatedError(
                lay.name, None, offset, len(data) - offset,
                f"{lay.size} bytes for the header", detail=f"{lay.spec}",
            )
        v = int.from_bytes(data[offset:end], "big")
        return cls(*[(v >> f.shift) & f.mask for f in lay.fields])

    @classmethod
    def get_field(cls, data: bytes | bytearray | memoryview, name: str, offset: int = 0) -> int:
        """One field read in place from the header at ``offset`` of ``data``, the rest not decoded
        (an agent that keeps an attribute as its bytes reads what it needs).  KeyError for a field
        the header does not have; :class:`TruncatedError` when the header does not fit."""
        f = _field_index(cls)[name]
        _fits(cls.LAYOUT, data, offset)
        end = offset + f.byte_end
        word = int.from_bytes(data[offset + f.byte_start:end], "big")
        return (word >> (f.byte_end * 8 - f.bit_offset - f.bits)) & f.mask

    @classmethod
    def set_field(cls, data: bytearray, name: str, value: int, offset: int = 0) -> None:
        """One field written in place into the header at ``offset`` of ``data``, every other bit
        kept.  Raises :class:`EncodeError` for a value that does not fit the field."""
        f = _field_index(cls)[name]
        _fits(cls.LAYOUT, data, offset)
        if not isinstance(value, int) or not 0 <= value <= f.mask:
            raise EncodeError(cls.LAYOUT.name, name, value, f"0..{f.mask} ({f.bits} bits)")
        start, end = offset + f.byte_start, offset + f.byte_end
        shift = f.byte_end * 8 - f.bit_offset - f.bits
        word = int.from_bytes(data[start:end], "big") & ~(f.mask << shift) | value << shift
        data[start:end] = word.to_bytes(end - start, "big")

    def check(self, offset: int = 0) -> list[MalformedError]:
        """Problems with values the specification fixes (``const`` fields) and ``validate``."""
        consts = self.LAYOUT.consts
        if not consts and type(self).validate is Header.validate:
            return []
        problems = []
        for f in consts:
            val = getattr(self, f.name)
            if val != f.const:
                problems.append(
                    MalformedError(
                        self.LAYOUT.name, f.name, offset + f.byte_start, val,
                        f"{f.const} ({self.LAYOUT.spec})",
                    )
                )
        if type(self).validate is not Header.validate:
            problems.extend(self.validate(offset))
        return problems

    def validate(self, offset: int = 0) -> list[MalformedError]:
        """Header-specific consistency checks; subclasses override."""
        return []

    # ------------------------------------------------------------------ encode
    def encode(self) -> bytes:
        """The header's bytes.  Raises :class:`EncodeError` for a value that does not fit.

        Runs the encoder generated from the declaration (:func:`compile_encoder`), which gives the
        bytes of :meth:`encode_reference` or, for a value that does not fit, hands over to it."""
        cls = type(self)
        enc = _ENCODERS.get(cls)
        if enc is None:
            enc = _ENCODERS[cls] = compile_encoder(cls)
        out: bytes = enc(self)
        return out

    def encode_reference(self) -> bytes:
        """The readable encoder: each field checked, shifted into place and or-ed in, in order."""
        lay = self.LAYOUT
        v = 0
        for f in lay.fields:
            val = getattr(self, f.name)
            if isinstance(val, bool):
                val = int(val)
            if not isinstance(val, int):
                try:
                    val = int(val)
                except (TypeError, ValueError):
                    raise EncodeError(lay.name, f.name, val, f"an integer of {f.bits} bits") from None
            if val < 0 or val > f.mask:
                raise EncodeError(lay.name, f.name, val, f"0..{f.mask} ({f.bits} bits)")
            v |= val << f.shift
        return v.to_bytes(lay.size, "big")

    def __bytes__(self) -> bytes:
        return self.encode()

    # ------------------------------------------------------------------ introspection
    @property
    def size(self) -> int:
        return self.LAYOUT.size

    def replace(self, **changes: Any) -> Self:
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]

    def values(self) -> dict[str, Any]:
        """Field name -> value, in wire order."""
        return {f.name: getattr(self, f.name) for f in self.LAYOUT.fields}

    def spans(self, offset: int = 0) -> list[Span]:
        """Each field's byte span, absolute when ``offset`` is where the header starts."""
        out = []
        name = self.LAYOUT.name
        for f in self.LAYOUT.fields:
            val = getattr(self, f.name)
            out.append(
                Span(
                    name, f.name, offset + f.byte_start, offset + f.byte_end,
                    f.bit_offset, f.bits, val, self.describe(f.name), f.ws,
                )
            )
        return out

    def describe(self, field: str) -> str:
        """The field's value as a person reads it (subclasses add names for codes)."""
        f = self.LAYOUT.field(field)
        return _fmt(f.fmt, f.bits, getattr(self, field))

    def ws_fields(self) -> dict[str, int]:
        """Wireshark display-filter name -> integer value, for the fields Wireshark has."""
        return {f.ws: getattr(self, f.name) for f in self.LAYOUT.fields if f.ws}

    def info(self, headers: Sequence[Header]) -> str | None:
        """What this header adds to the one-line summary of the packet whose ``headers`` it is
        among (``Packet.summary``), or None.  MAD and CM headers override it."""
        return None

    def summary(self) -> str:
        """One short line, e.g. for a packet list."""
        parts = [
            f"{f.name}={self.describe(f.name)}" for f in self.LAYOUT.fields if not f.reserved
        ]
        return f"{self.LAYOUT.name}({', '.join(parts)})"

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in cls.LAYOUT.fields)


_FIELD_INDEX: dict[type, dict[str, FieldSpec]] = {}


def _field_index(cls: type[Header]) -> dict[str, FieldSpec]:
    index = _FIELD_INDEX.get(cls)
    if index is None:
        index = _FIELD_INDEX[cls] = {f.name: f for f in cls.LAYOUT.fields}
    return index


def _fits(lay: Layout, data: bytes | bytearray | memoryview, offset: int) -> None:
    if offset < 0 or offset + lay.size > len(data):
        raise TruncatedError(lay.name, None, offset, len(data) - offset, f"{lay.size} bytes for the header",
                             detail=lay.spec)


# ---------------------------------------------------------------------- code generated from the declarations
# A header is declared once (its LAYOUT); these build, from that declaration, the straight-line
# Python that the generic loops above spell out field by field: no field is written twice, and
# tests/wire/test_header_fast.py holds each generated function to its readable reference.

_ENCODERS: dict[type, Any] = {}


def compile_encoder(cls: type[Header]) -> Any:
    """``encode(h) -> bytes`` for header class ``cls``: the fields' shifts and widths written out
    as one expression.  A value that is not an ``int`` in range goes to :meth:`Header.encode_reference`,
    which raises the :class:`EncodeError` that names it."""
    lay = cls.LAYOUT
    names = [f"_v{i}" for i in range(len(lay.fields))]
    lines = ["def encode(h):"]
    lines.append("    " + ", ".join(names) + ", = " + ", ".join(f"h.{f.name}" for f in lay.fields) + ",")
    check = " or ".join(f"{n}.__class__ is not int or {n} >> {f.bits} or {n} < 0"
                        for n, f in zip(names, lay.fields, strict=True))
    lines.append(f"    if {check}:")
    lines.append("        return h.encode_reference()")  # bools, big or negative values: checked there
    value = " | ".join(f"({n} << {f.shift})" if f.shift else n for n, f in zip(names, lay.fields, strict=True))
    lines.append(f"    return ({value}).to_bytes({lay.size}, 'big')")
    ns: dict[str, Any] = {}
    exec("\n".join(lines), ns)  # noqa: S102 - source built above from the layout, no outside input
    encode: Any = ns["encode"]
    encode.__qualname__ = f"{cls.__name__}.encode (generated)"
    return encode


_DECODERS: dict[type, Any] = {}


def compile_decoder(cls: type[Header]) -> Any:
    """``decode(data, offset) -> cls``: :meth:`Header.decode_reference` with the fields' shifts and
    masks written out, and (for a slotted dataclass whose fields are exactly the layout's) the slots
    set directly, as :func:`compile_constructor` does.  Short data goes to the reference decoder,
    which raises the :class:`TruncatedError` that names it."""
    lay = cls.LAYOUT
    names = [f.name for f in lay.fields]
    values = [f"v >> {f.shift} & {f.mask}" if f.shift else f"v & {f.mask}" for f in lay.fields]
    ns: dict[str, Any] = {"_new": object.__new__, "_cls": cls, "_ref": cls.decode_reference, "_int": int.from_bytes}
    direct = (dataclasses.is_dataclass(cls) and not hasattr(cls, "__post_init__")
              and [f.name for f in dataclasses.fields(cls)] == names
              and all(isinstance(getattr(cls, n, None), types.MemberDescriptorType) for n in names))
    lines = ["def decode(data, offset=0):",
             f"    end = offset + {lay.size}",
             "    if offset < 0 or end > len(data):",
             "        return _ref(data, offset)",
             "    v = _int(data[offset:end], 'big')"]
    if direct:
        for i, n in enumerate(names):
            ns[f"_set{i}"] = getattr(cls, n).__set__  # the slot's own descriptor: no __setattr__
        lines.append("    h = _new(_cls)")
        lines += [f"    _set{i}(h, {val})" for i, val in enumerate(values)]
        lines.append("    return h")
    else:
        lines.append(f"    return _cls({', '.join(values)})")
    exec("\n".join(lines) + "\n", ns)  # noqa: S102 - source built above from the layout, no outside input
    decode: Any = ns["decode"]
    decode.__qualname__ = f"{cls.__name__}.decode (generated)"
    return decode


def compile_constructor(cls: type[Header]) -> Any:
    """``make(field, ...) -> cls``: a header from its field values in wire order, unchecked, as the
    frozen dataclass's ``__init__`` would build it but without its per-field ``object.__setattr__``
    lookups (for the engine, which builds an AETH for every ACK)."""
    names = [f.name for f in cls.LAYOUT.fields]
    if dataclasses.is_dataclass(cls) and [f.name for f in dataclasses.fields(cls)] != names:
        return cls  # fields its layout leaves out (a quote's part of a header, wire.net.TCPQuotedHead): their defaults
    ns: dict[str, Any] = {"_new": object.__new__, "_cls": cls}
    for i, n in enumerate(names):
        ns[f"_set{i}"] = getattr(cls, n).__set__  # the slot's own descriptor: no __setattr__
    body = "".join(f"    _set{i}(h, {n})\n" for i, n in enumerate(names))
    exec(f"def make({', '.join(names)}):\n    h = _new(_cls)\n{body}    return h\n", ns)  # noqa: S102
    make: Any = ns["make"]
    make.__qualname__ = f"{cls.__name__}.make (generated)"
    return make
