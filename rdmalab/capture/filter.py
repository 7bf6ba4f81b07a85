"""Display filters in Wireshark's language, compiled once and applied to packets or to columns.

The grammar is the part of Wireshark's display-filter language (``wireshark-filter(4)``) that
capture work needs::

    expr    := or
    or      := and  (("||" | "or")  and)*
    and     := not  (("&&" | "and") not)*
    not     := ("!" | "not") not | "(" expr ")" | test
    test    := FIELD                                  field (or protocol) is present
             | FIELD relop VALUE                      == != < <= > >=  (eq ne lt le gt ge)
                                                      === !== ~=  (all_eq any_ne)
             | FIELD "in" "{" VALUE ["," ] ... "}"    any of the values; "a..b" is a range
             | FIELD "contains" VALUE                 substring of a text field; bytes of the frame
             | FIELD "matches" "REGEX"                a text field or the frame's bytes (any case)
    VALUE   := 123 | 0x1f | 1.5 | "text" | 10.0.0.1 | 10.0.0.0/24 | fe80::1 | ::ffff:10.0.0.0/120
             | 52:54:00:00:01:01 | bare-word

``&&`` binds tighter than ``||``, as in Wireshark.  A field that holds several values in one
frame (iWARP FPDUs packed in one TCP segment) matches as in Wireshark 4.0 (``wireshark-filter(4)``,
"Comparison operators"): ``==`` (``any_eq``), ``<``, ``in`` and ``contains`` when any of its values
does, ``!=`` (``ne``, ``all_ne``) when all of them differ, ``===`` (``all_eq``) when all are equal,
``!==`` (``~=``, ``any_ne``) when any differs; a field the frame does not have matches no comparison.

Wireshark's fields that stand for either of two (:data:`EITHER_FIELDS`: ``ip.addr``, ``ipv6.addr``,
``eth.addr``, ``tcp.port``, ``udp.port``) hold both: ``ip.addr == 10.0.0.1`` is a frame from or to
that address, ``ip.addr != 10.0.0.1`` one neither from nor to it.

A field name must be one the decoder can produce (:func:`known_fields`: every Wireshark name
declared by a header in :mod:`rdmalab.wire` and :mod:`rdmalab.capture`, the protocol prefixes of
those names, and the extra names of :mod:`rdmalab.capture.fields`).  Anything else is a
:class:`FilterError` naming it, never a filter that silently matches nothing.  So is a value
that cannot be one of the field's (:func:`field_kind`: ``ip.src > 4791``, ``infiniband.bth.psn ==
1.5``, ``eth.src == 10.0.0.1``), as tshark refuses it.

:func:`compile_filter` returns a :class:`DisplayFilter`, which is callable on one flat field
dictionary (:func:`rdmalab.capture.fields.frame_fields`) and also evaluates over columns
(:meth:`DisplayFilter.mask`, numpy arrays as :mod:`rdmalab.capture.columnar` makes them).
"""

from __future__ import annotations

import calendar
import difflib
import ipaddress
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from decimal import Decimal
from functools import cache, lru_cache
from typing import Any

import numpy as np

import rdmalab.capture.linktypes  # noqa: F401  - declares SLL/ERF headers
import rdmalab.wire.ib  # noqa: F401  - the wire modules declare the headers declared_fields() walks
import rdmalab.wire.iwarp  # noqa: F401
import rdmalab.wire.mad  # noqa: F401
import rdmalab.wire.mpa  # noqa: F401
import rdmalab.wire.net  # noqa: F401
import rdmalab.wire.rdmap  # noqa: F401
from rdmalab.capture.columnar import COLUMN_BY_NAME, COLUMN_NAMES
from rdmalab.capture.columnar import FILTER_TIMES as FILTER_TIMES  # (re-exported: the filter's own names)
from rdmalab.capture.fields import BYTE_PROTOCOLS, EXTRA_FIELDS, IWARP_BYTE_PROTOCOLS, TRAILER_BYTES, _address
from rdmalab.capture.pcapio import FRAME_META_FIELDS
from rdmalab.capture.tcp_analysis import ANALYSIS_FIELDS, LABEL_FIELDS, TIME_FIELDS
from rdmalab.wire.errors import RdmalabError
from rdmalab.wire.header import Header

#: tshark's times of a frame relative to others (``frame.time_relative``: since the capture's first frame;
#: ``frame.time_delta``: since the frame read before it; ``frame.time_delta_displayed``: since the frame
#: shown before it, which a display filter decides): printed (-T fields, -T json), counted in file order
#: (:class:`rdmalab.capture.fieldtext.Clock`); a filter reads the first two
#: (:data:`~rdmalab.capture.columnar_schema.FILTER_TIMES`: :class:`FrameClock` frame by frame,
#: :meth:`~rdmalab.capture.columnar_schema.Columns.stamp_times` on columns), not the third (it would depend on
#: the filter's own answers)
RELATIVE_TIMES = (*FILTER_TIMES, "frame.time_delta_displayed")
#: tshark's date and time of a frame, local time (``Nov 21, 2026 06:21:08.901798000 UTC``): printed from
#: frame.time_ns (:func:`rdmalab.capture.fieldtext.absolute_text`); a filter compares it with a quoted date and
#: time (:func:`absolute_time_ns`), as a test of frame.time_ns
ABSOLUTE_TIME = "frame.time"
#: fields the per-packet decoder gives when asked, not in every field dictionary: ``frame.protocols``
#: (:func:`rdmalab.capture.tsjson.frame_protocols`), the conversations' numbers
#: (:class:`rdmalab.capture.render.Conversations`)
ASKED_FIELDS = ("frame.protocols", "tcp.stream", "udp.stream", "tcp.seq", "tcp.ack", "tcp.nxtseq", "data", "data.data",
                "data.len", "tcp.payload", *ANALYSIS_FIELDS)
#: the :data:`ASKED_FIELDS` whose values are bytes (as hex text): not for contains/matches (frame's are)
_BYTES_FIELDS = ("data.data", "tcp.payload", *TRAILER_BYTES)


class FrameClock:
    """The :data:`FILTER_TIMES` of frames given in capture order, every frame (shown or not), as a
    display filter reads them: seconds (a float: ``frame.time_relative > 2.5``), from each frame's
    exact nanoseconds since the epoch.  A capture's first frame is 0 and 0."""

    def __init__(self) -> None:
        self._first: int | None = None
        self._before = 0

    def stamp(self, fields: dict[str, Any], ns: int) -> dict[str, Any]:
        """``fields`` with the frame's two times added (the frame at ``ns`` is the next in order)."""
        if self._first is None:
            self._first = self._before = ns
        fields["frame.time_relative"] = (ns - self._first) / 1e9
        fields["frame.time_delta"] = (ns - self._before) / 1e9
        self._before = ns
        return fields
#: Wireshark's protocol names for which rdmalab has a protocol of another name: ``iwarp_ddp_rdmap`` is the
#: dissector of DDP and RDMAP (packet-iwarp-ddp-rdmap.c), present exactly where ``iwarp_ddp`` is
PROTOCOL_ALIASES = {"iwarp_ddp_rdmap": "iwarp_ddp"}
#: Wireshark's fields that hold two of a frame's fields at once (each dissector adds the address or
#: port a second time under this name: packet-ip.c, packet-ipv6.c, packet-eth.c, packet-tcp.c,
#: packet-udp.c), each with the two, in the order tshark prints them (``-T fields``: an Ethernet
#: header's destination comes first)
EITHER_FIELDS: dict[str, tuple[str, str]] = {
    "ip.addr": ("ip.src", "ip.dst"), "ipv6.addr": ("ipv6.src", "ipv6.dst"), "eth.addr": ("eth.dst", "eth.src"),
    "tcp.port": ("tcp.srcport", "tcp.dstport"), "udp.port": ("udp.srcport", "udp.dstport"),
}


def either_values(fields: Mapping[str, Any], name: str) -> list[Any] | None:
    """The values of an :data:`EITHER_FIELDS` name in a per-packet field dictionary, in tshark's
    order (None when the frame has not the protocol)."""
    a, b = EITHER_FIELDS[name]
    va, vb = fields.get(a), fields.get(b)
    if va is None or vb is None:
        return None
    la, lb = (va if isinstance(va, list) else [va]), (vb if isinstance(vb, list) else [vb])
    if len(la) != len(lb):
        return [*la, *lb]
    # each header adds its two in turn (an ICMP error's: the frame's, then the quote's)
    return [v for pair in zip(la, lb, strict=True) for v in pair]


class FilterError(RdmalabError, ValueError):
    """A display filter that cannot be compiled: bad syntax or an unknown field (named)."""

    def __init__(self, expr: str, message: str, position: int | None = None) -> None:
        self.expr = expr
        self.position = position
        where = "" if position is None else f" (at character {position + 1})"
        super().__init__(f"display filter {expr!r}: {message}{where}")


# ============================================================================ known fields


@lru_cache(maxsize=1)
def declared_fields() -> dict[str, tuple[str, int]]:
    """Wireshark name -> (display format, bits) of every field a header declares."""
    out: dict[str, tuple[str, int]] = {}
    for _proto, f in _declarations():
        out.setdefault(f.ws or "", (f.fmt, f.bits))
    for proto, _f in _declarations():
        if proto:
            out.setdefault(proto, ("proto", 0))
    out.pop("", None)
    return out


@lru_cache(maxsize=1)
def _declarations() -> list[tuple[str | None, Any]]:
    """(protocol name of the header, field spec) for every Wireshark-named field of every header."""
    # the MADs' headers (CM, SA, SMP, PMA), which the decoders load at the first MAD (rdmalab.wire.frame)
    import rdmalab.wire.cm  # noqa: F401, PLC0415
    out: list[tuple[str | None, Any]] = []
    todo: list[type] = [Header]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        lay = getattr(cls, "LAYOUT", None)
        if lay is None:
            continue
        out.extend((lay.ws_proto, f) for f in lay.fields if f.ws)
    return out


@cache
def _borrowed(proto: str) -> frozenset[str]:
    """Field names under ``proto`` that a header of another protocol also declares.

    Wireshark puts the AtomicETH's address and key under ``infiniband.reth.va``/``r_key``: those
    names do not mean that a RETH is present, so ``infiniband.reth`` must not match an atomic."""
    prefix = proto + "."
    mine = {f.ws for p, f in _declarations() if p and (p == proto or p.startswith(prefix))}
    return frozenset(f.ws for p, f in _declarations()
                     if f.ws.startswith(prefix) and not (p and (p == proto or p.startswith(prefix))) and f.ws in mine)


@lru_cache(maxsize=1)
def known_fields() -> frozenset[str]:
    """Every field name a filter may use: decoder fields and their protocol prefixes."""
    names: set[str] = set(EXTRA_FIELDS) | set(declared_fields())
    names.update(COLUMN_NAMES)  # the columnar decoder's columns
    names.update(EITHER_FIELDS)
    names.update(ASKED_FIELDS)
    names.add(ABSOLUTE_TIME)
    names.update(FRAME_META_FIELDS)
    prefixes = set()
    for n in names:
        parts = n.split(".")
        for i in range(1, len(parts)):
            prefixes.add(".".join(parts[:i]))
    return frozenset(names | prefixes)


# ============================================================================ values


@dataclass(frozen=True, slots=True)
class Net:
    """An address, or a network in CIDR notation (``prefix`` bits), as integers."""

    version: int  # 4, 6, or 48 for a MAC address
    value: int
    prefix: int

    def contains(self, addr: int) -> bool:
        bits = 32 if self.version == 4 else 128 if self.version == 6 else 48
        shift = bits - self.prefix
        return (addr >> shift) == (self.value >> shift)


@dataclass(frozen=True, slots=True)
class Range:
    lo: Any
    hi: Any


_MAC_RE = re.compile(r"^[0-9A-Fa-f]{2}([:\-])(?:[0-9A-Fa-f]{2}\1){4}[0-9A-Fa-f]{2}$")


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def parse_value(text: str, quoted: bool = False) -> Any:
    """A literal as Wireshark reads it: integer, float, address/network, MAC, or string."""
    if quoted:
        return text
    t = text
    if ".." in t and not t.startswith("..") and not t.endswith(".."):
        lo, hi = t.split("..", 1)
        return Range(parse_value(lo), parse_value(hi))
    try:
        return int(t, 0)
    except ValueError:
        pass
    if _MAC_RE.match(t):
        return Net(48, int(t.replace("-", "").replace(":", ""), 16), 48)
    address, slash, prefix = t.partition("/")
    if slash and _is_address(address):
        # an address with a prefix is a network, or a mistake: never a string that matches nothing
        try:
            net = ipaddress.ip_network(t, strict=False)
        except ValueError:
            raise ValueError(f"{t!r} is not a network: the prefix after '/' must be 0 to "
                             f"{ipaddress.ip_address(address).max_prefixlen}") from None
        return Net(net.version, int(net.network_address), net.prefixlen)
    try:
        ip = ipaddress.ip_address(t)
        return Net(ip.version, int(ip), ip.max_prefixlen)
    except ValueError:
        pass
    try:
        return float(t)
    except ValueError:
        pass
    if t.lower() in ("true", "false"):
        return 1 if t.lower() == "true" else 0
    return t


def _as_address(v: Any, version: int) -> int | None:
    """A field value (integer or Wireshark-notation string) as an integer address."""
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        try:
            if version == 48:
                return int(v.replace(":", "").replace("-", ""), 16)
            return int(ipaddress.ip_address(v))
        except ValueError:
            return None
    return None


class Octets(str):
    """A filter's octets for a field of bytes, as the hex text the field's values are held in: equal as text;
    ordered as Wireshark orders bytes (``epan/ftypes/ftype-bytes.c``, ``cmp_order``): the shorter first, then
    octet by octet (``eth.trailer > 11:22`` holds for 01:02:03).  Being a ``str`` subclass, its reflected
    comparisons are the ones Python calls for ``value < Octets(...)``."""

    __slots__ = ()

    def _key(self, other: object) -> tuple[int, str] | None:
        return (len(other), other) if isinstance(other, str) else None

    def __lt__(self, other: object) -> bool:
        k = self._key(other)
        return NotImplemented if k is None else (len(self), str(self)) < k

    def __le__(self, other: object) -> bool:
        k = self._key(other)
        return NotImplemented if k is None else (len(self), str(self)) <= k

    def __gt__(self, other: object) -> bool:
        k = self._key(other)
        return NotImplemented if k is None else (len(self), str(self)) > k

    def __ge__(self, other: object) -> bool:
        k = self._key(other)
        return NotImplemented if k is None else (len(self), str(self)) >= k

    __hash__ = str.__hash__


def _cmp(op: str, a: Any, b: Any) -> bool:
    if isinstance(b, Net):
        addr = _as_address(a, b.version)
        if addr is None:
            return False
        if op == "==":
            return b.contains(addr)
        if op == "!=":
            return not b.contains(addr)
        a, b = addr, b.value
    elif isinstance(a, str) and isinstance(b, (int, float)):
        return False
    elif isinstance(a, (int, float)) and isinstance(b, str):
        return False
    try:
        if op == "==":
            return bool(a == b)
        if op == "!=":
            return bool(a != b)
        if op == "<":
            return bool(a < b)
        if op == "<=":
            return bool(a <= b)
        if op == ">":
            return bool(a > b)
        return bool(a >= b)
    except TypeError:
        return False


# ============================================================================ syntax tree


@dataclass(frozen=True, slots=True)
class Exists:
    field: str


@dataclass(frozen=True, slots=True)
class Compare:
    field: str
    op: str  # == != < <= > >=
    value: Any


@dataclass(frozen=True, slots=True)
class In:
    field: str
    values: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Contains:
    field: str
    value: Any


@dataclass(frozen=True, slots=True)
class Matches:
    field: str
    pattern: Any  # a compiled regular expression (bytes for the frame)


@dataclass(frozen=True, slots=True)
class Not:
    arg: Any


@dataclass(frozen=True, slots=True)
class And:
    args: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Or:
    args: tuple[Any, ...]


#: the comparison operators' words and other spellings, as the operator the tree holds
#: (``===``: all values equal; ``~=``: any value differs; ``!=``: all differ)
_WORD_OPS = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "any_eq": "==", "all_ne": "!=",
             "all_eq": "===", "any_ne": "~=", "!==": "~="}
_COMPARISONS = ("==", "!=", "<", "<=", ">", ">=", "===", "~=")
_TOKEN_RE = re.compile(
    r"""\s*(?:
        (?P<str>"(?:[^"\\]|\\.)*")
      | (?P<op>===|!==|==|!=|~=|<=|>=|&&|\|\||[<>!(){},])
      | (?P<word>[^\s"<>=!(){},&|]+)
    )""",
    re.VERBOSE,
)


def _tokens(expr: str) -> list[tuple[str, str, int]]:
    out = []
    pos = 0
    expr_len = len(expr)
    while pos < expr_len:
        if expr[pos:].strip() == "":
            break
        m = _TOKEN_RE.match(expr, pos)
        if m is None or m.end() == pos:
            raise FilterError(expr, f"unexpected character {expr[pos:].lstrip()[:1]!r}", pos)
        kind = m.lastgroup or "word"
        text = m.group(kind)
        out.append((kind, text, m.start(kind)))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, expr: str, known: frozenset[str]) -> None:
        self.expr = expr
        self.toks = _tokens(expr)
        self.i = 0
        self.known = known
        self.fields: set[str] = set()
        self.typed = ""  # the last field name as written (before PROTOCOL_ALIASES)
        self.value_at = 0  # where the last value read starts

    def peek(self) -> tuple[str, str, int] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self) -> tuple[str, str, int]:
        t = self.peek()
        if t is None:
            raise FilterError(self.expr, "ends too early (a field or value is missing)")
        self.i += 1
        return t

    def is_(self, *texts: str) -> bool:
        t = self.peek()
        return t is not None and t[0] != "str" and t[1] in texts

    def parse(self) -> Any:
        if not self.toks:
            raise FilterError(self.expr, "is empty")
        node = self.or_()
        t = self.peek()
        if t is not None:
            raise FilterError(self.expr, f"unexpected {t[1]!r}", t[2])
        return node

    def or_(self) -> Any:
        args = [self.and_()]
        while self.is_("||", "or"):
            self.take()
            args.append(self.and_())
        return args[0] if len(args) == 1 else Or(tuple(args))

    def and_(self) -> Any:
        args = [self.not_()]
        while self.is_("&&", "and"):
            self.take()
            args.append(self.not_())
        return args[0] if len(args) == 1 else And(tuple(args))

    def not_(self) -> Any:
        if self.is_("!", "not"):
            self.take()
            return Not(self.not_())
        if self.is_("("):
            self.take()
            node = self.or_()
            if not self.is_(")"):
                t = self.peek()
                raise FilterError(self.expr, "a '(' is not closed", None if t is None else t[2])
            self.take()
            return node
        return self.test()

    def field(self) -> str:
        kind, text, pos = self.take()
        if kind != "word" or not re.match(r"^[A-Za-z_][\w.\-]*$", text):
            raise FilterError(self.expr, f"expected a field name, found {text!r}", pos)
        self.typed = text
        text = PROTOCOL_ALIASES.get(text, text)
        if text not in self.known and text not in FILTER_TIMES:
            if text in RELATIVE_TIMES:
                raise FilterError(self.expr, f"{text!r} (the time since the frame shown before, which the filter "
                                  "itself decides) is not taken by rdmalab's display filters; filter on "
                                  "frame.time_delta (since the frame read before) or frame.time_relative", pos)
            hint = _suggest(text, self.known)
            raise FilterError(self.expr, f"{text!r} is not a field rdmalab knows{hint}", pos)
        self.fields.add(text)
        return text

    def value(self) -> Any:
        kind, text, pos = self.take()
        self.value_at = pos
        if kind == "str":  # its escapes as Wireshark reads them, the rest as UTF-8 ("rxe0 ü" is not mangled)
            try:
                raw = _unescaped(text[1:-1])
            except ValueError as err:
                raise FilterError(self.expr, str(err), pos) from None
            return parse_value(raw.decode("utf-8", "surrogateescape"), quoted=True)
        if kind == "op":
            raise FilterError(self.expr, f"expected a value, found {text!r}", pos)
        try:
            return parse_value(text)
        except ValueError as err:
            raise FilterError(self.expr, str(err), pos) from None

    def bytes_value(self) -> Octets:
        """The next token as the octets of a field of bytes (``data.data``, ``eth.trailer``: hex pairs, or a
        quoted string's octets, as Wireshark reads them), in the hex text its values are held as."""
        kind, text, pos = self.take()
        self.value_at = pos
        if kind == "op":
            raise FilterError(self.expr, f"expected a value, found {text!r}", pos)
        try:
            return Octets(_frame_bytes_literal(kind, text).hex())
        except ValueError as err:
            raise FilterError(self.expr, str(err), pos) from None

    def members(self, at: int, value: Callable[[], Any]) -> tuple[Any, ...]:
        """After ``in`` (at character ``at``, the next token): the set's members, each read by ``value``."""
        self.take()
        if not self.is_("{"):
            raise FilterError(self.expr, "'in' must be followed by a set, e.g. {1, 2, 3}", at)
        self.take()
        if self.is_("}"):
            raise FilterError(self.expr, "the set after 'in' is empty", at)
        vals = []
        while True:
            if self.is_(",", "}"):
                _kind, text, pos = self.take()
                raise FilterError(self.expr, f"expected a member of the set, found {text!r}", pos)
            vals.append(value())
            t = self.peek()
            if t is None:
                raise FilterError(self.expr, "the set is not closed: '}' is missing", len(self.expr))
            if self.is_("}"):
                self.take()
                return tuple(vals)
            if not self.is_(","):  # as Wireshark 4.0, which no longer takes members separated by spaces alone
                raise FilterError(self.expr, "the members of a set are separated by commas, e.g. {1, 2, 3}", t[2])
            self.take()

    def absolute_time(self) -> int:
        """The next token, a quoted date and time for frame.time, in nanoseconds since the epoch."""
        t = self.peek()
        if t is None:
            raise FilterError(self.expr, "expected a value, found the end of the filter", len(self.expr))
        kind, text, pos = self.take()
        self.value_at = pos
        if kind == "op":
            raise FilterError(self.expr, f"expected a value, found {text!r}", pos)
        try:
            return absolute_time_ns(text[1:-1] if kind == "str" else text)
        except ValueError as err:
            raise FilterError(self.expr, str(err), pos) from None

    def checked(self, name: str, v: Any) -> Any:
        """``v``, when it can be a value of the field ``name``; else a FilterError saying why."""
        kind = field_kind(name)
        why = None if kind is None else _kind_error(name, kind, v)
        if why is not None:
            raise FilterError(self.expr, why, self.value_at)
        if name in TIME_FIELDS:  # (seconds written, nanoseconds held: tcp.analysis.ack_rtt > 0.0015)
            return _seconds_ns(v)
        return v

    def test(self) -> Any:
        node = self.one_test()
        pair = EITHER_FIELDS.get(getattr(node, "field", ""))
        if pair is None:
            return node
        # a test of both fields: any of the two for most, both for != and === (all values)
        self.fields.discard(node.field)
        self.fields.update(pair)
        a, b = (replace(node, field=f) for f in pair)
        return And((a, b)) if getattr(node, "op", "") in ("!=", "===") else Or((a, b))

    def one_test(self) -> Any:
        name = self.field()
        t = self.peek()
        if name == ABSOLUTE_TIME:  # a test of frame.time_ns, its literals dates and times
            self.fields.discard(name)
            self.fields.add("frame.time_ns")
            name = "frame.time_ns"
            if t is not None and t[0] != "str" and _WORD_OPS.get(t[1], t[1]) in _COMPARISONS:
                self.take()
                return Compare(name, _WORD_OPS.get(t[1], t[1]), self.absolute_time())
            if t is not None and t[1] == "in":
                return In(name, self.members(t[2], self.absolute_time))
            if t is not None and t[1] in ("contains", "matches", "~"):
                raise FilterError(self.expr, f"'{t[1]}' on {ABSOLUTE_TIME}, a date and time: compare it with == < > "
                                  "and a quoted date and time instead", t[2])
        if t is None or t[0] == "str":
            return Exists(name)
        op = _WORD_OPS.get(t[1], t[1])
        if name in LABEL_FIELDS and (op in _COMPARISONS or t[1] in ("in", "contains", "matches", "~")):
            raise FilterError(self.expr, f"{name} is a label, present or not (as in tshark): test it alone "
                              f"({name}, !{name}), not with {t[1]!r}", t[2])
        if op in _COMPARISONS and name in _BYTES_FIELDS:  # octets, held as hex text
            self.take()
            return Compare(name, op, self.bytes_value())
        if t[1] == "in" and name in _BYTES_FIELDS:
            return In(name, self.members(t[2], self.bytes_value))
        if op in _COMPARISONS:
            self.take()
            v = self.value()
            if isinstance(v, Range):  # (as tshark: ".." was unexpected in this context)
                raise FilterError(self.expr, f"a range (a..b) is a member of a set: {name} in {{a..b}}, "
                                             f"not a value to compare with {t[1]}", self.value_at)
            return Compare(name, op, self.checked(name, v))
        if t[1] == "in":
            return In(name, self.members(t[2], lambda: self.checked(name, self.value())))
        if t[1] in ("contains", "matches", "~"):
            self.take()
            op = "contains" if t[1] == "contains" else "matches"
            if self.typed in IWARP_BYTE_PROTOCOLS:  # (iwarp_ddp_rdmap's bytes, not the iwarp_ddp label's)
                name = self.typed
            kind, text, pos = self.take()
            self.value_at = pos
            why = _text_test_error(name, op)
            if why is not None:
                raise FilterError(self.expr, why, t[2])
            if op == "matches":
                if kind != "str":
                    raise FilterError(self.expr, f"'matches' takes a quoted regular expression, found {text!r}", pos)
                source = text[1:-1]
                try:  # the string's escapes first (\\d is the expression's \d), then the expression
                    raw = _unescaped(source)
                except ValueError as err:
                    raise FilterError(self.expr, str(err), pos) from None
                try:  # Wireshark's matches is PCRE2 without case (wireshark-filter(4)): the same in Python's re
                    octets = (name == "frame" or name in _OCTETS or field_kind(name) == "mac"
                              or name in _BYTES_FIELDS)  # (octets)
                    pattern = re.compile(raw if octets else raw.decode("utf-8", "surrogateescape"),
                                         re.IGNORECASE | re.DOTALL)
                except re.error as err:
                    raise FilterError(self.expr, f"{source!r} is not a regular expression: {err}", pos) from None
                return Matches(name, pattern)
            if name != "frame" and name not in _OCTETS and field_kind(name) != "mac" and name not in _BYTES_FIELDS:
                self.i -= 1  # (a text field)
                return Contains(name, self.value())
            try:  # the frame's, a MAC address's or a field of bytes' octets (tshark compares bytes)
                return Contains(name, _frame_bytes_literal(kind, text))
            except ValueError as err:
                raise FilterError(self.expr, str(err), pos) from None
        if t[0] == "word" and t[1] not in ("and", "or", "not"):
            raise FilterError(self.expr, f"expected an operator (== != < <= > >= === !== in contains) after {name!r}, "
                                         f"found {t[1]!r}", t[2])
        return Exists(name)


#: the protocols whose bytes contains/matches read: the frame's layers', and iWARP's, once an MPA frame
_OCTETS = BYTE_PROTOCOLS + IWARP_BYTE_PROTOCOLS
#: where a filter that reads the frame's bytes (``frame contains``, ``frame matches``:
#: :attr:`DisplayFilter.needs_frame`) finds them in a field dictionary (no field has this name)
FRAME_BYTES = "\0frame"
#: where a filter on protocols' bytes (``tcp contains "MPA"``: :attr:`DisplayFilter.byte_protocols`) finds
#: them: each protocol's bytes (:func:`rdmalab.capture.fields.protocol_bytes`), None for one the frame has not
PROTOCOL_BYTES = "\0protocols"
_BYTES_RE = re.compile(r"^(?:[0-9A-Fa-f]{2})+$|^[0-9A-Fa-f]{2}([:.\-])[0-9A-Fa-f]{2}(?:\1[0-9A-Fa-f]{2})*$")


_ESCAPES = {"\\": 0x5C, '"': 0x22, "a": 0x07, "b": 0x08, "f": 0x0C, "n": 0x0A, "r": 0x0D, "t": 0x09, "v": 0x0B}
_ESCAPE_RE = re.compile(r"\\(x[0-9A-Fa-f]{2}|[0-7]{1,3}|.?)", re.DOTALL)


def _unescaped(text: str) -> bytes:
    r"""The octets of a quoted string's text as Wireshark reads its escapes (wireshark-filter(4),
    "Display Filter Strings": ``\\`` ``\"`` ``\a``-``\v``, ``\xhh``, ``\ooo``; another is an error,
    as tshark says "\s is not a valid character escape sequence"); the rest as UTF-8."""
    out = bytearray()
    at = 0
    for m in _ESCAPE_RE.finditer(text):
        out += text[at:m.start()].encode("utf-8")
        esc = m.group(1)
        if esc[:1] == "x" and len(esc) == 3:
            out.append(int(esc[1:], 16))
        elif esc[:1].isdigit() and esc[:1] in "01234567":
            out.append(int(esc, 8) & 0xFF)
        elif esc in _ESCAPES:
            out.append(_ESCAPES[esc])
        else:
            raise ValueError(f"\\{esc} is not a character escape Wireshark reads (\\\\ \\\" \\t \\n \\xhh \\ooo ...)")
        at = m.end()
    out += text[at:].encode("utf-8")
    return bytes(out)


def _frame_bytes_literal(kind: str, text: str) -> bytes:
    """What ``frame contains`` looks for: a quoted string's octets (UTF-8), or bytes written as hex
    pairs (``4d:50:41``, ``4d-50-41``, ``4d.50.41``, ``4d5041``), as Wireshark reads them."""
    if kind == "str":  # its characters as UTF-8, an escape \xhh as that octet (as Wireshark's strings)
        return _unescaped(text[1:-1])
    if _BYTES_RE.match(text):
        return bytes.fromhex(re.sub(r"[:.\-]", "", text))
    raise ValueError(f"{text!r} is not bytes: write them as hex pairs (4d:50:41) or a quoted string (\"MPA\")")


def _text_test_error(name: str, op: str) -> str | None:
    """Why ``name contains ...``/``name matches ...`` cannot be answered as Wireshark answers it, or None:
    they read text fields, MAC addresses (as text) and the frame's bytes; not numbers or IP addresses
    (Wireshark compares their octets), nor other protocols' bytes (where each protocol's bytes start and
    end is each Wireshark dissector's own choice)."""
    if name == "frame" or name in _OCTETS:
        return None
    if name in ("iwarp_ddp", "iwarp_rdma"):  # (Wireshark's labels in the iwarp_ddp_rdmap tree)
        return (f"'{op}' on {name}, a label without bytes in Wireshark: the DDP and RDMAP headers and payload "
                f"are iwarp_ddp_rdmap's (iwarp_ddp_rdmap {op} ...), the MPA frame iwarp_mpa's")
    if name in known_fields() and declared_fields().get(name, ("", 0))[0] == "proto" or name not in declared_fields() \
            and name not in COLUMN_BY_NAME and name not in EXTRA_FIELDS and name not in EITHER_FIELDS \
            and name not in ASKED_FIELDS and name not in FRAME_META_FIELDS:
        return (f"'{op}' on the bytes of {name}: rdmalab reads the frame's and those of "
                f"{', '.join(_OCTETS)} (frame {op} ...)")
    kind = field_kind(name)
    if kind in ("number", "ipv4", "ipv6", "seconds"):
        what = {"number": "a number", "ipv4": "an IPv4 address", "ipv6": "an IPv6 address",
                "seconds": "a time"}[kind]
        return (f"'{op}' on {name}, {what}: rdmalab tests text fields, MAC addresses and the frame's bytes; "
                f"compare {name} with == < > or a network instead")
    return None


#: what a field's values are, from its column's or its header's display format: "number",
#: "ipv4", "ipv6" or "mac" (a value of another kind never equals one of them: an error, as in
#: Wireshark); None for what is not checked (protocols, byte strings, rdmalab's text fields)
_KINDS = {"dec": "number", "bool": "number", "epoch": "number", "hex": "number", "ipv4": "ipv4", "ipv6": "ipv6",
          "mac": "mac", "reltime": "seconds"}


@cache
def field_kind(name: str) -> str | None:
    """The kind of ``name``'s values (:data:`_KINDS`), or None when not known."""
    if name in EITHER_FIELDS:
        return field_kind(EITHER_FIELDS[name][0])
    if name in FILTER_TIMES:
        return "seconds"
    col = COLUMN_BY_NAME.get(name)
    fmt = col.fmt if col is not None else declared_fields().get(name, ("", 0))[0]
    return _KINDS.get("hex" if fmt.startswith("hex") else fmt)


def _seconds_ns(v: Any) -> Any:
    """A literal number of seconds (or a range of them) in nanoseconds, exactly as written (0.0015 is 1500000)."""
    if isinstance(v, Range):
        return Range(_seconds_ns(v.lo), _seconds_ns(v.hi))
    return int(Decimal(str(v)) * 1_000_000_000) if isinstance(v, float) else v * 1_000_000_000


def _kind_error(name: str, kind: str, v: Any) -> str | None:
    """Why the literal ``v`` cannot be a value of the field ``name`` of ``kind``, or None."""
    if isinstance(v, Range):
        return _kind_error(name, kind, v.lo) or _kind_error(name, kind, v.hi)
    if isinstance(v, Net):
        shown = {4: "the IPv4 address", 6: "the IPv6 address", 48: "the MAC address"}[v.version] + f" {_net_text(v)}"
    else:
        shown = repr(v) if isinstance(v, str) else str(v)
    if kind == "seconds":  # a time: seconds, whole or not
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return None
        return f"{name} is a time in seconds: {shown} is not a number of seconds"
    if kind == "number":
        if isinstance(v, int) or (isinstance(v, float) and COLUMN_BY_NAME.get(name) is not None
                                  and COLUMN_BY_NAME[name].fmt == "epoch"):
            return None
        return f"{name} is a number: {shown} is not {'a whole number' if isinstance(v, float) else 'a number'}"
    version, what = {"ipv4": (4, "an IPv4 address"), "ipv6": (6, "an IPv6 address"), "mac": (48, "a MAC address")}[kind]
    if isinstance(v, Net) and v.version == version:
        return None
    return f"{name} is {what}: {shown} is not {what}{' or network' if version != 48 else ''}"


def _net_text(v: Net) -> str:
    addr = _address({4: "ipv4", 6: "ipv6", 48: "mac"}[v.version], v.value)
    return addr if v.prefix == {4: 32, 6: 128, 48: 48}[v.version] else f"{addr}/{v.prefix}"


_MONTHS = {m: i for i, m in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov",
                                        "dec"), 1)}
#: tshark's two ways of writing frame.time in a filter (Wireshark 4.0, ftype-time.c): "Nov 12, 1999
#: 08:55:44.123" (the month's three letters in any case, UTC after it or local time) and ISO 8601,
#: "2011-07-04 12:34:56" (or T; the time, its seconds and the zone, Z or an offset, may be left out)
_WRITTEN = re.compile(r"\s*([A-Za-z]{3})\s+(\d{1,2}),\s*(\d{1,4})\s+(\d{1,2}):(\d{1,2}):(\d{1,2})")
_ISO = re.compile(r"(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2}))?)?")
_ABS_EXAMPLE = 'Example: "Nov 12, 1999 08:55:44.123" or "2011-07-04 12:34:56"'


def absolute_time_ns(text: str) -> int:
    """A date and time written as tshark takes it after ``frame.time`` (:data:`_WRITTEN`, :data:`_ISO`), in
    nanoseconds since the epoch: local time unless it says UTC (``UTC``, ``Z``, an offset); fields past
    their range carry over as C's mktime carries them (Feb 30 is Mar 2).  ValueError says what is wrong."""
    m = _WRITTEN.match(text)
    iso = None if m is not None else _ISO.match(text)
    if m is None and iso is None or m is not None and m.group(1).lower() not in _MONTHS:
        raise ValueError(f"{text!r} is not a valid absolute time. {_ABS_EXAMPLE}")
    if m is not None:
        year, month, day = int(m.group(3)), _MONTHS[m.group(1).lower()], int(m.group(2))
        hour, minute, sec = int(m.group(4)), int(m.group(5)), int(m.group(6))
        rest = text[m.end():]
        if not (1 <= day <= 31 and hour <= 23 and minute <= 59 and sec <= 61):  # (strptime's ranges)
            raise ValueError(f"{text!r} is not a valid absolute time. {_ABS_EXAMPLE}")
    else:
        assert iso is not None
        year, month, day = int(iso.group(1)), int(iso.group(2)), int(iso.group(3))
        if not (1 <= month <= 12 and 1 <= day <= 31):
            raise ValueError(f"{text!r} is not a valid absolute time. {_ABS_EXAMPLE}")
        hour, minute, sec = (int(iso.group(k) or 0) for k in (4, 5, 6))
        rest = text[iso.end():]
        if not (hour <= 23 and minute <= 59 and sec <= 61):  # (the date read, the rest not a time)
            raise ValueError(f"{text!r}: unexpected {text[iso.end(3):].strip()!r} after the date (not a time of day)")
    frac = 0
    if rest[:1] == "." or (iso is not None and iso.group(6) is not None and rest[:1] == ","):
        digits = re.match(r"\d*", rest[1:])
        assert digits is not None
        if not digits.group():
            raise ValueError(f"{text!r}: the subseconds after the point are not a number")
        if len(digits.group()) > 9:
            raise ValueError(f"{text!r}: the subseconds are invalid (at most nine digits, nanoseconds)")
        frac = int(digits.group().ljust(9, "0"))
        rest = rest[1 + digits.end():]
    offset: int | None = None  # seconds east of UTC, when the text says which zone
    zone = re.fullmatch(r"\s*UTC", rest) if m is not None else re.fullmatch(r"Z|\s*UTC|([+-])(\d{2}):?(\d{2})", rest)
    if zone is not None:
        offset = 0
        if zone.lastindex:
            offset = (1 if zone.group(1) == "+" else -1) * (int(zone.group(2)) * 3600 + int(zone.group(3)) * 60)
    elif rest.strip():
        raise ValueError(f"{text!r}: unexpected {rest.strip()!r} after the time (a zone is UTC"
                         f"{'' if m is not None else ', Z or +hh:mm'}; without one the time is local)")
    fields = (year, month, day, hour, minute, sec, 0, 0, -1)
    try:
        secs = calendar.timegm(fields) - offset if offset is not None else int(time.mktime(fields))
    except (OverflowError, ValueError) as err:
        raise ValueError(f"{text!r} is not a valid absolute time ({err}). {_ABS_EXAMPLE}") from None
    return secs * 1_000_000_000 + frac


def _suggest(name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.75)
    return f" (did you mean {', '.join(close)}?)" if close else ""


# ============================================================================ evaluation


def _values(fields: Mapping[str, Any], name: str) -> list[Any]:
    v = fields.get(name)
    if v is None:
        return []
    return list(v) if isinstance(v, list) else [v]


def _eval(node: Any, fields: Mapping[str, Any]) -> bool:
    t = type(node)
    if t is Compare:
        values = _values(fields, node.field)
        if node.op == "!=":  # every value differs (Wireshark 4.0's all_ne)
            return bool(values) and not any(_match_value("==", x, node.value) for x in values)
        if node.op == "===":
            return bool(values) and all(_match_value("==", x, node.value) for x in values)
        if node.op == "~=":
            return any(_match_value("!=", x, node.value) for x in values)
        return any(_match_value(node.op, x, node.value) for x in values)
    if t is And:
        return all(_eval(a, fields) for a in node.args)
    if t is Or:
        return any(_eval(a, fields) for a in node.args)
    if t is Not:
        return not _eval(node.arg, fields)
    if t is Exists:
        if node.field in fields:
            return True
        prefix = node.field + "."
        borrowed = _borrowed(node.field)
        if node.field == "ip" and any(k.startswith("ipv6.") for k in fields):
            # (the hidden ip.version Wireshark's IPv6 dissector adds, ip.version == 6, is no IPv4 header:
            # tshark's ``ip`` does not match an IPv6 packet, whose ip.version a filter still reads; an IPv4
            # EtherType before a header of version 6 is ``ip``, a bogus one)
            borrowed = borrowed | {"ip.version"}
        return any(k.startswith(prefix) and k not in borrowed for k in fields)
    if t is In:
        return any(_match_value("==", x, v) for x in _values(fields, node.field) for v in node.values)
    if t is Contains:
        if node.field == "frame":
            return node.value in _frame(fields)
        if node.field in _OCTETS:
            return any(node.value in g for g in _protocol(fields, node.field))
        if isinstance(node.value, bytes):  # a MAC address's octets, a field of bytes' (hex text)
            return any(node.value in _mac_bytes(x) for x in _values(fields, node.field))
        return any(isinstance(x, str) and str(node.value) in x for x in _values(fields, node.field))
    if t is Matches:
        if node.field == "frame":
            return node.pattern.search(_frame(fields)) is not None
        if node.field in _OCTETS:
            return any(node.pattern.search(g) is not None for g in _protocol(fields, node.field))
        if isinstance(node.pattern.pattern, bytes):  # a MAC address's octets
            return any(node.pattern.search(_mac_bytes(x)) is not None for x in _values(fields, node.field))
        return any(isinstance(x, str) and node.pattern.search(x) is not None for x in _values(fields, node.field))
    raise AssertionError(node)  # pragma: no cover


def _mac_bytes(x: Any) -> bytes:
    """A MAC address (its text ``52:54:00:00:01:01`` or its integer) as its six octets; a field of bytes'
    hex text (``data.data``) as its octets."""
    if isinstance(x, str):
        return bytes.fromhex(x.replace(":", "").replace("-", ""))
    return int(x).to_bytes(6, "big")


def _protocol(fields: Mapping[str, Any], proto: str) -> list[bytes]:
    """The bytes of each occurrence of ``proto`` in a frame (its header's, or iWARP's once an MPA frame): none
    when the frame has not it."""
    spans = fields.get(PROTOCOL_BYTES)
    if spans is None:  # a caller's mistake, not the user's
        raise KeyError("a filter on a protocol's bytes needs them in the fields (filter.PROTOCOL_BYTES)")
    got: bytes | list[bytes] | None = spans.get(proto)
    return [] if got is None else [got] if isinstance(got, bytes) else got


def _frame(fields: Mapping[str, Any]) -> bytes:
    data = fields.get(FRAME_BYTES)
    if data is None:  # a caller's mistake, not the user's
        raise KeyError("a filter on the frame's bytes needs them in the fields (filter.FRAME_BYTES)")
    return bytes(data)


def _match_value(op: str, x: Any, want: Any) -> bool:
    if isinstance(want, Range):
        return _cmp(">=", x, want.lo) and _cmp("<=", x, want.hi)
    return _cmp(op, x, want)


class DisplayFilter:
    """A compiled display filter: call it on a field dictionary, or :meth:`mask` on columns."""

    def __init__(self, expr: str, tree: Any, fields: frozenset[str]) -> None:
        self.expr = expr
        self.tree = tree
        #: the field names the filter reads
        self.fields = fields
        #: whether it reads the frame's bytes (``frame contains``/``matches``): a field dictionary
        #: must then hold them under :data:`FRAME_BYTES`
        reads = _bytes_read(tree)
        self.needs_frame = "frame" in reads
        #: the protocols whose bytes it reads (``tcp contains ...``): a field dictionary must then hold them
        #: under :data:`PROTOCOL_BYTES`
        self.byte_protocols = frozenset(reads - {"frame"})

    def __call__(self, fields: Mapping[str, Any]) -> bool:
        return _eval(self.tree, fields)

    def __repr__(self) -> str:
        return f"DisplayFilter({self.expr!r})"

    def mask(self, columns: Mapping[str, Any], present: Callable[[str], Any], n: int) -> Any:
        """A boolean numpy array over ``n`` rows.

        ``columns[name]`` is a numpy array of the field's values (addresses as integers, strings
        as object arrays); ``present(name)`` the boolean array of rows where the field (or
        protocol) exists.  Raises ``KeyError`` for a field the columns do not hold.
        """
        def ev(node: Any) -> Any:
            t = type(node)
            if t is Exists:
                return present(node.field)
            if t is Not:
                return ~ev(node.arg)
            if t is And:
                m = ev(node.args[0])
                for a in node.args[1:]:
                    m = m & ev(a)
                return m
            if t is Or:
                m = ev(node.args[0])
                for a in node.args[1:]:
                    m = m | ev(a)
                return m
            col = columns[node.field]
            ok = present(node.field)
            if t is Compare:
                return ok & _col_cmp(np, node.op, col, node.value)
            if t is In:
                m = np.zeros(n, dtype=bool)
                for v in node.values:
                    m |= _col_cmp(np, "==", col, v)
                return ok & m
            if t is Contains:
                if isinstance(node.value, bytes):  # a MAC address's octets
                    return ok & np.array([node.value in _mac_bytes(x) for x in col.tolist()], dtype=bool)
                if col.dtype != object:
                    return np.zeros(n, dtype=bool)
                return ok & np.array([isinstance(x, str) and str(node.value) in x for x in col], dtype=bool)
            if t is Matches:
                if isinstance(node.pattern.pattern, bytes):  # a MAC address's octets
                    return ok & np.array([node.pattern.search(_mac_bytes(x)) is not None for x in col.tolist()],
                                         dtype=bool)
                if col.dtype != object:
                    return np.zeros(n, dtype=bool)
                return ok & np.array([isinstance(x, str) and node.pattern.search(x) is not None for x in col],
                                     dtype=bool)
            raise AssertionError(node)  # pragma: no cover

        return np.asarray(ev(self.tree), dtype=bool)


def _bytes_read(node: Any) -> set[str]:
    """The frame (``"frame"``) and the :data:`BYTE_PROTOCOLS` whose bytes a filter's contains/matches read."""
    if isinstance(node, (And, Or)):
        return set().union(*(_bytes_read(a) for a in node.args))
    if isinstance(node, Not):
        return _bytes_read(node.arg)
    if isinstance(node, (Contains, Matches)) and (node.field == "frame" or node.field in _OCTETS):
        return {node.field}
    return set()


def _col_cmp(np: Any, op: str, col: Any, want: Any) -> Any:
    op = {"===": "==", "~=": "!="}.get(op, op)  # (a column holds one value a row: all and any are one)
    if isinstance(want, Range):
        return _col_cmp(np, ">=", col, want.lo) & _col_cmp(np, "<=", col, want.hi)
    if col.dtype.kind == "S":  # 16-byte addresses (GIDs) as bytes: numpy drops their trailing zero bytes
        width = col.dtype.itemsize
        col = np.array([int.from_bytes(bytes(x).ljust(width, b"\0"), "big") for x in col], dtype=object)
    if col.dtype == object:
        return np.array([_cmp(op, x, want) for x in col], dtype=bool)
    if isinstance(want, Net):
        bits = 32 if want.version == 4 else 128 if want.version == 6 else 48
        if want.version == 6 or bits - want.prefix >= 64:
            return np.array([_cmp(op, int(x), want) for x in col], dtype=bool)
        shift = bits - want.prefix
        hit = (col.astype(np.uint64) >> np.uint64(shift)) == np.uint64(want.value >> shift)
        if op == "==":
            return hit
        if op == "!=":
            return ~hit
        want = want.value
    if isinstance(want, str):
        return np.zeros(len(col), dtype=bool)
    if isinstance(want, int) and want < 0 and col.dtype.kind == "u":
        want = float(want)
    if isinstance(want, int) and want > np.iinfo(np.int64).max and col.dtype.kind == "i":
        want = float(want)
    ops = {"==": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal,
           ">": np.greater, ">=": np.greater_equal}
    return ops[op](col, want)


def compile_filter(expr: str, known: frozenset[str] | None = None) -> DisplayFilter:
    """Compile a display filter; raise :class:`FilterError` for bad syntax or an unknown field."""
    p = _Parser(expr, known_fields() if known is None else known)
    tree = p.parse()
    return DisplayFilter(expr, tree, frozenset(p.fields))
