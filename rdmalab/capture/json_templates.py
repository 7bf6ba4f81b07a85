"""``rdmalab decode -T json`` in bulk: the JSON of the commonest frames from per-header templates.

Most frames of a RoCE capture are Ethernet / IPv4 (or IPv6) / UDP / BTH and the extended headers its opcode
implies, or Ethernet / IPv4 / TCP (iWARP, and the programs' own exchanges), with one 802.1Q tag or none.
Their JSON (:func:`rdmalab.capture.tsjson.packet_json`, written by ``_frame_text``) is
fixed text with the fields' values in slots, so it is written here without a packet object, one
header at a time from the header's bytes:

* a header's entries (:class:`HeaderJson`) are made by :func:`~rdmalab.capture.tsjson.header_layer_of`,
  the per-packet writer's own function, once per value of the header's fields but for those in
  :data:`VOLATILE` (the ones that change from one packet to the next: the IPv4 identification and
  checksum, the PSN, a RETH's address ...), with marks in their place; a header whose other fields
  were seen before costs a dictionary look-up and the text of its volatile fields.  Each template is
  checked, when it is made, against what the per-packet writer makes of the header it was made from.
* the frame's other layers (``frame``, ``data``, ``rdmalab``) are written from the values the per-packet
  writer's own functions give (``frame_values``, ``packet_fields`` of a packet holding the BTH and what
  follows it, ``value_text``).

A frame takes this way (:func:`roce_json`) only when the per-packet decoder would record no problem
in it (:func:`rdmalab.capture.tree_templates.roce_frame`: the checks the ``-V`` templates make, a good
ICRC) and nothing follows its datagram (no padding, trailer or FCS).  The first frame of each kind
(opcode, with or without a payload and a pad, and a tag) in a process is also written the per-packet
way and the two texts compared: a kind whose texts differ goes the per-packet way from then on, and is
counted in :data:`REFUSED` (which the tests hold empty).  A TCP segment (:func:`tcp_json`) is written as
a worker sends it, without what its stream decides; :mod:`rdmalab.capture.json_blocks` checks its kinds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rdmalab.capture.fields import header_fields, packet_fields
from rdmalab.capture.iwarp import _address_text
from rdmalab.capture.linktypes import LINKTYPE_ETHERNET
from rdmalab.capture.reader import RawRecord, decode_record
from rdmalab.capture.tree_templates import RoceFrame, _front, _ipv4_front, _ipv6_udp_front, roce_frame
from rdmalab.capture.tsjson import (
    _FIELD_NL,
    _FRAME_END,
    _LAYER,
    _LAYERS_NL,
    _frame_text,
    _hexbytes,
    _make_header_layer,
    _packet_json,
    _quote,
    frame_start,
    header_layer_of,
    int_text,
    value_text,
)
from rdmalab.wire.header import Header, compile_decoder
from rdmalab.wire.ib import AETH, BTH, IETH, RETH, AtomicAckETH, AtomicETH, ImmDt
from rdmalab.wire.net import ETHERTYPE_VLAN, IPPROTO_TCP, TCP, UDP, VLAN, Ethernet, IPv4, IPv6
from rdmalab.wire.packet import Layer, Packet

__all__ = ["REFUSED", "TCP_SHAPES", "VOLATILE", "HeaderJson", "frame_json", "roce_json", "tcp_json"]

#: Per header class, the fields that change from one packet to the next (they are slots of its
#: templates; every other field's value picks a template).  Each must be a plain number in the
#: header's Wireshark fields (``header_fields`` gives it as the field holds it) and must not change
#: which fields the header has: :class:`HeaderJson` checks the first, the tests the second.
VOLATILE: dict[type[Header], tuple[str, ...]] = {
    IPv4: ("total_length", "identification", "checksum"),
    IPv6: ("payload_length",),
    BTH: ("psn",),
    RETH: ("va", "r_key", "dma_length"),
    AETH: ("msn",),
    AtomicETH: ("va", "r_key", "swap_add", "compare"),
    AtomicAckETH: ("orig_data",),
    ImmDt: ("imm",),
    IETH: ("r_key",),
    TCP: ("seq", "ack", "window", "checksum"),
}

_MARK = "\ue000"  # (a private-use character: no field's text holds one, and the JSON writer leaves it as it is)
_RAW = f"{_MARK}raw{_MARK}"
_REMEMBERED = 4096  # templates kept per header class (emptied when full)

#: the kinds of frame (opcode, payload, pad, 802.1Q tag) whose template text differed from the per-packet writer's
#: in this process (:func:`roce_json` then leaves them to it)
REFUSED: set[tuple[int, bool, bool, int, int]] = set()


class _Template:
    """One header's JSON but for its volatile fields' values and its bytes: its layer, its entries
    (``str.format`` text, a slot per volatile field then one for the bytes), its top-level keys and
    the rdmalab fields it adds."""

    __slots__ = ("keys", "ours", "proto", "raw", "text")

    def __init__(self, proto: str, text: str, keys: frozenset[str], ours: dict[str, str], raw: bool) -> None:
        self.proto, self.text, self.keys, self.ours, self.raw = proto, text, keys, ours, raw


class HeaderJson:
    """The JSON of a header class's headers from templates (:func:`parts`): a template per value of the
    fields that are not volatile, made the first time that value is seen and checked then (a header whose
    template fails its check goes the per-packet way, and so do all those with its fields' values)."""

    def __init__(self, cls: type[Header]) -> None:
        lay = cls.LAYOUT
        self.cls = cls
        self.size = lay.size
        self.decode = compile_decoder(cls)
        self.volatile: list[tuple[int, int, str]] = []  # (shift, mask, Wireshark name)
        self.texts: list[tuple[int, int, Callable[[int], str]]] = []  # (shift, mask, value_text of the name)
        keep = (1 << 8 * lay.size) - 1
        for name in VOLATILE.get(cls, ()):
            f = lay.field(name)
            if not f.ws or f.fmt in ("mac", "ipv4", "ipv6"):
                raise ValueError(f"{cls.__name__}.{f.name}: a volatile field must be a number with a Wireshark name")
            self.volatile.append((f.shift, f.mask, f.ws))
            self.texts.append((f.shift, f.mask, int_text(f.ws)))
            keep &= ~(f.mask << f.shift)
        self.keep = keep
        self.seen: dict[int, _Template | None] = {}  # the fields but the volatile ones -> template (None: none)

    def parts(self, data: bytes | bytearray, at: int) -> tuple[_Template, str] | None:
        """The template of the header at ``data[at:]`` and its entries' text (each starting with a
        comma, at a layer's fields' indentation), or None when this class has no template."""
        b = bytes(data[at:at + self.size])
        v = int.from_bytes(b, "big")
        key = v & self.keep
        if key in self.seen:
            t = self.seen[key]
        else:
            if len(self.seen) >= _REMEMBERED:
                self.seen.clear()
            t = self.seen[key] = self._make(b, v)
        if t is None:  # (a header whose template failed its check: the per-packet way)
            return None
        args = [text(v >> shift & mask) for shift, mask, text in self.texts]
        if t.raw:
            args.append(_hexbytes(b))
        return t, t.text.format(*args)

    def _make(self, b: bytes, v: int) -> _Template | None:
        h = self.decode(b, 0)
        vals: dict[str, Any] = h.ws_fields()
        texts = {name: value_text(name, x) for name, x in header_fields(h).items()}
        for i, (shift, mask, ws) in enumerate(self.volatile):
            if vals.get(ws) != v >> shift & mask:  # (not the field as it is held: no template)
                return None
            texts[ws] = f"{_MARK}{i}{_MARK}"
        proto, fields, ours, text = header_layer_of(self.cls, texts, _RAW)
        if any(_MARK in x for x in ours.values()):
            return None
        pieces = text.replace("{", "{{").replace("}", "}}").split(_MARK)
        for i in range(1, len(pieces), 2):  # (the bytes' slot numbered after the volatile fields')
            pieces[i] = "{" + (str(len(self.volatile)) if pieces[i] == "raw" else pieces[i]) + "}"
        t = _Template(proto, "".join(pieces), frozenset(fields), ours, _RAW in text)
        args = [value_text(ws, v >> shift & mask) for shift, mask, ws in self.volatile]
        if t.raw:
            args.append(_hexbytes(b))
        want = _make_header_layer(h, b, 0)
        if (proto, t.text.format(*args), ours) != (want[0], want[3], want[2]):
            return None
        return t


_HEADERS: dict[type[Header], HeaderJson] = {}


def _header_json(cls: type[Header]) -> HeaderJson:
    got = _HEADERS.get(cls)
    if got is None:
        got = _HEADERS[cls] = HeaderJson(cls)
    return got


_ETH, _IP, _UDP, _BTH = (_header_json(c) for c in (Ethernet, IPv4, UDP, BTH))
#: what the iWARP reassembly is fed of a TCP segment but its payload (rdmalab.capture.iwarp.Segment)
TcpSegment = tuple[str, int, str, int, int, int, None]
_CHECKED: set[tuple[int, bool, bool, int, int]] = set()
#: the headers in front of the IPv4 header's end (Ethernet, IPv4; with an 802.1Q tag between them), each
#: with its offset, by the tag's length
_FRONT = {0: [(_ETH, 0), (_IP, 14)], 4: [(_ETH, 0), (_header_json(VLAN), 14), (_IP, 18)]}
_ROCE_CHAIN = {0: "eth:ethertype:ip:udp:infiniband", 4: "eth:ethertype:vlan:ethertype:ip:udp:infiniband"}
#: the same over IPv6 (RoCEv2 to an IPv6 GID: the default GID of a RoCE port is its IPv6 link-local one)
_IP6 = _header_json(IPv6)
_FRONT6 = {0: [(_ETH, 0), (_IP6, 14)], 4: [(_ETH, 0), (_header_json(VLAN), 14), (_IP6, 18)]}
_ROCE_CHAIN6 = {0: "eth:ethertype:ipv6:udp:infiniband", 4: "eth:ethertype:vlan:ethertype:ipv6:udp:infiniband"}


def _tag_of(buf: bytes | bytearray, o: int, cap: int, wire: int, linktype: int, fcs_len: int) -> int | None:
    """The octets of the 802.1Q tag between an Ethernet frame's addresses and its EtherType (0 or 4), for a
    frame the templates may write (a whole Ethernet record, no FCS kept); None for another."""
    if linktype != LINKTYPE_ETHERNET or wire != cap or fcs_len > 0 or cap < 18:
        return None
    return 4 if buf[o + 12:o + 14] == _TPID else 0


_TPID = ETHERTYPE_VLAN.to_bytes(2, "big")


def roce_json(buf: bytes | bytearray, o: int, cap: int, wire: int, linktype: int, fcs_len: int, frame: int,
              seconds: float, ns: int, interface: int, first_ns: int, prev_ns: int, start: str | None = None) -> str | None:
    """The JSON text of frame ``frame`` (``buf[o:o + cap]``, ``wire`` octets on the wire, a record of
    ``linktype`` at ``seconds``, ``ns``, of ``interface``, from a capture that says it keeps an FCS of
    ``fcs_len`` octets), the capture's first frame at ``first_ns`` and the frame before it at
    ``prev_ns``, as ``_frame_text(packet_json(...))`` writes it, without the pcapng fields and
    the TCP analysis; None when it is not a frame written here.  With or without one 802.1Q tag.  ``start``:
    the frame's :func:`~rdmalab.capture.tsjson.frame_starts` (None: made here)."""
    tag = _tag_of(buf, o, cap, wire, linktype, fcs_len)
    if tag is None:
        return None
    # (after a tag, the frame read as if its addresses ended 4 octets later: the same offsets from there)
    six = _ipv6_udp_front(buf, o + tag, cap - tag, wire - tag, fcs_len)
    if six is not None:
        if six[0] != cap - tag:  # (to the frame's end: no padding, no trailer)
            return None
        version, roce = 6, roce_frame(buf, o + tag, cap - tag, 40)
    else:
        front = _ipv4_front(buf, o + tag, cap - tag, wire - tag, fcs_len)
        if front is None or front[1] != cap - tag or buf[o + tag + 23] != 17:  # (to the frame's end: no trailer)
            return None
        version, roce = 4, roce_frame(buf, o + tag, cap - tag)
    if roce is None:
        return None
    kind = (roce.bth.opcode, roce.plen > 0, roce.pad > 0, tag, version)
    if kind in REFUSED:
        return None
    text = _written(buf, o, cap, tag, roce, frame, ns, first_ns, prev_ns, version, start)
    if kind not in _CHECKED:
        _CHECKED.add(kind)
        cp = decode_record(RawRecord(frame, seconds, linktype, bytes(buf[o:o + cap]), wire, interface, ns,
                                     fcs_len=fcs_len), lenient=True)
        if text != _frame_text(_packet_json(cp, first_ns, prev_ns, prev_ns, None, None)):
            REFUSED.add(kind)
            return None
    return text


def _written(buf: bytes | bytearray, o: int, cap: int, tag: int, roce: RoceFrame, frame: int, ns: int, first_ns: int,
             prev_ns: int, version: int = 4, start: str | None = None) -> str | None:
    front, chain, udp = (_FRONT[tag], _ROCE_CHAIN[tag], 34) if version == 4 else (_FRONT6[tag], _ROCE_CHAIN6[tag], 54)
    headers = [*front, (_UDP, tag + udp), (_BTH, tag + udp + 8),
               *((_header_json(type(la.header)), tag + la.offset) for la in roce.extended)]
    # what the packet adds besides its headers (the ICRC, rdmalab's own fields), as packet_json adds them
    light = Packet(b"", [Layer(roce.bth, udp + 8), *roce.extended], "rocev2", roce.pos, roce.plen, roce.pad, roce.crc,
                   roce.crc, roce.crc_at, "icrc")
    data = buf[o + tag + roce.pos:o + tag + roce.pos + roce.plen + roce.pad] if roce.plen else None
    got = frame_json(buf, o, cap, headers, light, chain + ":data" if roce.plen else chain, data, "rocev2",
                     frame, ns, first_ns, prev_ns, start)
    return None if got is None else got[0]


def frame_json(buf: bytes | bytearray, o: int, cap: int, headers: list[tuple[HeaderJson, int]], light: Packet | None,
               chain: str, data: bytes | bytearray | None, encap: str, frame: int, ns: int, first_ns: int,
               prev_ns: int, start: str | None = None) -> tuple[str, dict[str, str]] | None:
    """The JSON text of frame ``frame`` (the Ethernet frame ``buf[o:o + cap]``, whole on the wire) of
    ``headers`` (each header's templates and offset in the frame), whose ``frame.protocols`` is ``chain``,
    whose payload tshark shows as ``data`` (None: none), as ``_frame_text(packet_json(...))`` writes it;
    ``light``: a packet holding its headers after the IP header's, for the fields the packet adds besides
    its headers' (``packet_fields``: CRCs, rdmalab's own), None for none.  With the rdmalab fields before
    ``rdmalab.encap`` (what a worker sends of a TCP segment); None when a header has no template.  ``start``:
    the frame's text up to its ``frame.protocols``'s value, :func:`~rdmalab.capture.tsjson.frame_starts` (None:
    made here, :func:`~rdmalab.capture.tsjson.frame_start`).

    Where each header's entries and each of the packet's fields go (which layer, in which order, or
    rdmalab's layer) depends only on the headers' templates and the fields' names: that is worked out once
    for each such kind of frame (:class:`_Plan`), and each frame's text is its plan's pieces with its own
    values between them."""
    ts: list[_Template] = []
    texts: list[str] = []
    for hj, at in headers:
        got = hj.parts(buf, o + at)
        if got is None:
            return None
        ts.append(got[0])
        texts.append(got[1])
    names: tuple[str, ...] = ()
    shown: list[str] = []
    if light is not None:
        flat: dict[str, Any] = {}
        packet_fields(light, flat, skip=frozenset(type(la.header) for la in light.layers), quotes=False)
        for name, x in flat.items():
            if type(x) is not int and type(x) is not str:
                return None
            shown.append(value_text(name, x))
        names = tuple(flat)
    key = (tuple(ts), names, data is not None, encap, chain)
    if key in _PLANS:
        plan = _PLANS[key]
    else:
        if len(_PLANS) >= _REMEMBERED:
            _PLANS.clear()
        plan = _PLANS[key] = _Plan.make(ts, names, data is not None, encap, chain)
    if plan is None:
        return None  # (keys in common: the per-packet writer merges them)
    parts = [frame_start(ns, prev_ns, first_ns, frame, cap) if start is None else start]
    for kind, x in plan.ops:
        if kind == _CONST:
            parts.append(x)
        elif kind == _TEXT:
            parts.append(texts[x])
        elif kind == _FIRST:
            parts.append(texts[x][1:])  # (a layer's first entry: without its comma)
        elif kind == _SHOWN:
            parts.append(_quote(shown[x]))
        else:  # _DATA
            assert data is not None
            parts += (data.hex(":"), x, str(len(data)))
    return "".join(parts), {name: x if kind == _CONST else shown[x] for name, kind, x in plan.extras}


#: the kinds of a :class:`_Plan`'s pieces: a constant text, a header's entries, a layer's first header's entries
#: (without their first comma), a field's value (quoted), the payload as ``data`` (its octets, then the
#: constant text given, then its length)
_CONST, _TEXT, _FIRST, _SHOWN, _DATA = range(5)
#: a :class:`_Plan`'s piece: its kind and a constant text (_CONST, _DATA) or a place (the others)
_Op = tuple[int, Any]


class _Plan:
    """Where the pieces of a kind of frame go (:func:`frame_json`): its text after its frame layer's
    ``frame.protocols`` key as ``ops`` (constant texts between the headers' entries and the fields' values), and
    rdmalab's fields but ``rdmalab.encap`` as :attr:`extras` (each one's name and, as ``ops`` has them, a
    constant text or the place of its value among the fields'; in the order the per-packet writer puts them)."""

    __slots__ = ("extras", "ops")

    def __init__(self, ops: list[_Op], extras: list[tuple[str, int, Any]]) -> None:
        self.ops, self.extras = ops, extras

    @staticmethod
    def make(ts: list[_Template], names: tuple[str, ...], data: bool, encap: str, chain: str) -> _Plan | None:
        """The plan of frames whose headers have the templates ``ts`` (in order) and whose packet adds the
        fields ``names``; None where two entries of a layer would have a key in common (the per-packet writer
        merges them)."""
        layers: dict[str, list[tuple[int, int]]] = {}  # layer -> its entries: (_TEXT, header) or (_SHOWN, field)
        keys: dict[str, frozenset[str]] = {}
        extras: dict[str, _Op] = {}  # rdmalab field -> (_CONST, its text) or (_SHOWN, field)
        for i, t in enumerate(ts):
            for k, x in t.ours.items():
                extras[k] = (_CONST, x)
            if not t.proto:
                continue
            seen = keys.get(t.proto)
            if seen is None:
                layers[t.proto], keys[t.proto] = [(_TEXT, i)], t.keys
            elif seen.isdisjoint(t.keys):
                layers[t.proto].append((_TEXT, i))
                keys[t.proto] = seen | t.keys
            else:
                return None
        for j, name in enumerate(names):
            proto = name.split(".", 1)[0]
            proto = _LAYER.get(proto, proto)
            if proto in layers and proto != "rdmalab":
                if name in keys[proto]:
                    return None
                layers[proto].append((_SHOWN, j))
            else:
                extras[name] = (_SHOWN, j)
        ops: list[_Op] = [(_CONST, _quote(chain) + _FIELD_NL + "}")]

        def const(text: str) -> None:
            if ops and ops[-1][0] == _CONST:
                ops[-1] = (_CONST, ops[-1][1] + text)
            else:
                ops.append((_CONST, text))

        for proto, entries in layers.items():
            const("," + _LAYERS_NL + _quote(proto) + ": {")
            first = True  # (the layer's entries joined, less their first character: the first entry's comma)
            for kind, i in entries:
                if kind == _TEXT:
                    if not ts[i].text:  # (a header of no entries: the next one's comma goes)
                        continue
                    ops.append((_FIRST if first else _TEXT, i))
                else:
                    const(("" if first else ",") + _FIELD_NL + "  " + _quote(names[i]) + ": ")
                    ops.append((_SHOWN, i))
                first = False
            const(_FIELD_NL + "}")
        inner = _LAYERS_NL + "  "
        if data:
            const("," + _LAYERS_NL + '"data": {' + inner + '"data.data": "')
            ops.append((_DATA, '",' + inner + '"data.len": "'))
            const('"' + _LAYERS_NL + "}")
        const("," + _LAYERS_NL + '"rdmalab": {')
        every = {**extras, "rdmalab.encap": (_CONST, encap)}
        for n, (k, (kind, x)) in enumerate(every.items()):
            const(("," if n else "") + inner + _quote(k) + ": ")
            if kind == _CONST:
                const(_quote(str(x)))
            else:
                ops.append((_SHOWN, x))
        const(_LAYERS_NL + "}" + _FRAME_END)
        return _Plan(ops, [(k, kind, x) for k, (kind, x) in extras.items()])


#: the plans of the kinds of frame seen (:func:`frame_json`): by the headers' templates, the fields' names, whether
#: there is ``data``, the encapsulation and ``frame.protocols`` (emptied when full)
_PLANS: dict[tuple[Any, ...], _Plan | None] = {}


_TCP = _header_json(TCP)
#: by the 802.1Q tag's length and the IP version: a TCP segment's frame.protocols (without what its stream
#: decides), its layers and its header classes
TCP_SHAPES = {(0, 4): ("eth:ethertype:ip:tcp", ("frame", "eth", "ip", "tcp"), frozenset({Ethernet, IPv4, TCP})),
              (4, 4): ("eth:ethertype:vlan:ethertype:ip:tcp", ("frame", "eth", "vlan", "ip", "tcp"),
                       frozenset({Ethernet, VLAN, IPv4, TCP})),
              (0, 6): ("eth:ethertype:ipv6:tcp", ("frame", "eth", "ipv6", "tcp"), frozenset({Ethernet, IPv6, TCP})),
              (4, 6): ("eth:ethertype:vlan:ethertype:ipv6:tcp", ("frame", "eth", "vlan", "ipv6", "tcp"),
                       frozenset({Ethernet, VLAN, IPv6, TCP}))}
_TCP_OFF, _TCP_SPORT, _TCP_DPORT, _TCP_SEQ, _TCP_FLAGS = (TCP.LAYOUT.field(n) for n in ("data_offset", "sport", "dport", "seq",
                                                                                    "flags"))
_IP_SRC, _IP_DST = IPv4.LAYOUT.field("src"), IPv4.LAYOUT.field("dst")
_IP6_SRC, _IP6_DST = IPv6.LAYOUT.field("src"), IPv6.LAYOUT.field("dst")


def tcp_json(buf: bytes | bytearray, o: int, cap: int, wire: int, linktype: int, fcs_len: int, frame: int, ns: int,
             first_ns: int, prev_ns: int,
             start: str | None = None) -> tuple[str, dict[str, str], int, int, TcpSegment, tuple[int, int]] | None:
    """For a worker (:func:`rdmalab.capture.json_blocks._json_block`): the JSON text of a TCP segment
    (IPv4 without options, not a fragment, or IPv6 without extension headers, to the frame's end; one 802.1Q
    tag or none) as the per-packet writer writes it with no iWARP reassembly and its payload not shown as data
    (as :func:`roce_json`'s arguments), the rdmalab fields of its headers, where its payload starts and its
    length, what the iWARP reassembly is fed of it (source, port, destination, port, sequence number, flags,
    None) and its shape (the tag's length and the IP version: :data:`TCP_SHAPES`); None for another frame."""
    tag = _tag_of(buf, o, cap, wire, linktype, fcs_len)
    if tag is None:
        return None
    front = _front(buf, o, cap, wire, fcs_len)  # (the -V templates' reading of the headers in front, the tag's too)
    if front is None or front[1] != IPPROTO_TCP or front[3] != cap:  # (to the frame's end: no trailer)
        return None
    _tag, _proto, ipv, _end, _tail, ip_len = front
    if ip_len == 20:
        version, src, dst = 4, ipv >> _IP_SRC.shift & _IP_SRC.mask, ipv >> _IP_DST.shift & _IP_DST.mask
    else:
        version, src, dst = 6, ipv >> _IP6_SRC.shift & _IP6_SRC.mask, ipv >> _IP6_DST.shift & _IP6_DST.mask
    th = tag + 14 + ip_len  # (where the TCP header starts)
    tv = int.from_bytes(buf[o + th:o + th + 20], "big")
    hl = (tv >> _TCP_OFF.shift & _TCP_OFF.mask) * 4
    if hl < 20 or th + hl > cap:
        return None
    shape = (tag, version)
    got = frame_json(buf, o, cap, [*(_FRONT if version == 4 else _FRONT6)[tag], (_TCP, th)], None, TCP_SHAPES[shape][0],
                     None, "tcp", frame, ns, first_ns, prev_ns, start)
    if got is None:
        return None
    seg = (_address_text(version, src), tv >> _TCP_SPORT.shift & _TCP_SPORT.mask,
           _address_text(version, dst), tv >> _TCP_DPORT.shift & _TCP_DPORT.mask,
           tv >> _TCP_SEQ.shift & _TCP_SEQ.mask, tv >> _TCP_FLAGS.shift & _TCP_FLAGS.mask, None)
    return got[0], got[1], th + hl, cap - th - hl, seg, shape
