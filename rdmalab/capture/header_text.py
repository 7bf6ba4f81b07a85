"""A header's lines in a tree (``decode -V``), and a template of them per header class.

:func:`header_lines` writes them from a header object (its fields' spans and ``describe``);
:func:`header_text_fn` makes, once per class, offset and indentation, one ``str.format`` template of
those same lines (taken from :func:`header_lines` of a header of zeros) whose slots take the field values
from the header read as one big-endian integer: a header's lines then cost one call.  The renderer
(:func:`rdmalab.capture.render.packet_tree`) writes every templatable header so, and
:mod:`rdmalab.capture.tree_templates` the headers of the commonest frames without a header object.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rdmalab.wire.header import Header, _fmt
from rdmalab.wire.ib import AETH, BTH


def header_lines(h: Header, offset: int, indent: str) -> list[str]:
    """The lines a tree (:func:`rdmalab.capture.render.packet_tree`) gives header ``h`` starting at octet
    ``offset``, indented by ``indent``: its name, specification and octets, then a line per field (its
    value as ``describe`` spells it, Wireshark's name, where it lies and what it means)."""
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


#: Per header class, the fields its ``describe`` spells its own way, each with the fields that text
#: depends on; every other field is shown as :func:`rdmalab.wire.header._fmt` shows it.  A class
#: that overrides ``describe`` and is not here gets no template (its frames go the per-packet way).
#: (tests/capture/test_tree_templates.py holds every other field's text to ``describe``.)
SPECIAL: dict[type[Header], dict[str, tuple[str, ...]]] = {
    BTH: {"opcode": ("opcode",)},
    AETH: {"type": ("type",), "value": ("type", "value")},
}


_REMEMBERED = 4096  # texts remembered per template (emptied when full)


def _ipv4_text(x: int) -> str:
    return f"{x >> 24}.{x >> 16 & 255}.{x >> 8 & 255}.{x & 255}"


def _mac_text(x: int) -> str:
    return x.to_bytes(6, "big").hex(":")


def templatable(cls: type[Header]) -> bool:
    """Whether a header class gets a template: its ``describe`` is the generic one or its own
    spellings are listed in :data:`SPECIAL`."""
    return cls.describe is Header.describe or cls in SPECIAL


def _special_fn(cls: type[Header], name: str, deps: tuple[str, ...]) -> Callable[[int], str]:
    """The text of field ``name`` given the header's integer: the class's ``describe`` on a header
    holding only the fields the text depends on, remembered per value of those."""
    lay = cls.LAYOUT
    specs = [lay.field(d) for d in deps]
    memo: dict[tuple[int, ...], str] = {}

    def text(v: int) -> str:
        key = tuple(v >> f.shift & f.mask for f in specs)
        hit = memo.get(key)
        if hit is None:
            only = sum(val << f.shift for val, f in zip(key, specs, strict=True))
            hit = memo[key] = cls.decode(only.to_bytes(lay.size, "big")).describe(name)
        return hit

    return text


def header_text_fn(cls: type[Header], offset: int, indent: str) -> Callable[[int], str]:
    """``text(v)``: the lines (joined by newlines) that :func:`header_lines` writes for a ``cls`` header
    at ``offset`` with ``indent``, given the header's bytes read as one big-endian integer ``v``.  The
    literal text is taken from those lines for a header of zeros, so both keep one layout."""
    if not templatable(cls):
        raise ValueError(f"{cls.__name__}: its describe spells fields its own way and none is listed in SPECIAL")
    lay = cls.LAYOUT
    zero = cls.decode(bytes(lay.size))
    lines = header_lines(zero, offset, indent)
    pieces = [lines[0].replace("{", "{{").replace("}", "}}")]
    args: list[str] = []
    ns: dict[str, Any] = {"_fmt": _fmt, "_ip4": _ipv4_text, "_mac": _mac_text}
    special = SPECIAL.get(cls, {})
    for i, (f, line) in enumerate(zip(lay.fields, lines[1:], strict=True)):
        head = f"{indent}    {f.name}: "
        shown = zero.describe(f.name)
        if not line.startswith(head + shown):
            raise ValueError(f"{cls.__name__}.{f.name}: the renderer's line {line!r} is not laid out as expected")
        tail = line[len(head) + len(shown):]
        x = f"v >> {f.shift} & {f.mask}" if f.shift else f"v & {f.mask}"
        if f.name in special:
            ns[f"_s{i}"] = _special_fn(cls, f.name, special[f.name])
            slot, arg = "{}", f"_s{i}(v)"
        elif f.fmt == "dec":
            slot, arg = "{}", x
        elif f.fmt == "hex":
            slot, arg = f"0x{{:0{(f.bits + 3) // 4}x}}", x
        elif f.fmt == "ipv4":
            slot, arg = "{}", f"_ip4({x})"
        elif f.fmt == "mac":
            slot, arg = "{}", f"_mac({x})"
        else:
            slot, arg = "{}", f"_fmt({f.fmt!r}, {f.bits}, {x})"
        pieces.append(head.replace("{", "{{").replace("}", "}}") + slot + tail.replace("{", "{{").replace("}", "}}"))
        args.append(arg)
    ns["_T"] = "\n".join(pieces)
    # most headers repeat from frame to frame (the Ethernet and IP addresses, a QP's UDP ports):
    # a text is remembered by the header's value (bounded: emptied when full)
    seen: dict[int, str] = {}
    ns["_seen"], ns["_get"] = seen, seen.get
    src = (f"def text(v):\n    t = _get(v)\n    if t is None:\n        if len(_seen) >= {_REMEMBERED}:\n"
           f"            _seen.clear()\n        t = _seen[v] = _T.format({', '.join(args)})\n    return t\n")
    exec(src, ns)  # noqa: S102 - source built above from the layout, no outside input
    fn: Callable[[int], str] = ns["text"]
    return fn


def header_int_fn(cls: type[Header]) -> Callable[[Header], int | None]:
    """``value(h)``: a ``cls`` header's fields as the one big-endian integer its octets read as (what a
    :func:`header_text_fn` template takes), or None when a field holds what it cannot (a value past its
    bits, or not an integer: a header made by hand, whose lines :func:`header_lines` writes)."""
    checks, terms = [], []
    for i, f in enumerate(cls.LAYOUT.fields):
        checks.append(f"type(x{i}) is not int or x{i} & {f.mask} != x{i}")
        terms.append(f"x{i} << {f.shift}" if f.shift else f"x{i}")
    names = ", ".join(f"x{i}" for i in range(len(terms)))
    got = ", ".join(f"h.{f.name}" for f in cls.LAYOUT.fields)
    src = (f"def value(h):\n    {names} = {got}\n"
           f"    if {' or '.join(checks)}:\n        return None\n    return {' | '.join(terms)}\n")
    ns: dict[str, Any] = {}
    exec(src, ns)  # noqa: S102 - source built above from the layout, no outside input
    fn: Callable[[Header], int | None] = ns["value"]
    return fn
