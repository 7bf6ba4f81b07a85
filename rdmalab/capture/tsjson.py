"""Packets as ``tshark -T json`` prints them (``rdmalab decode -T json``).

tshark 4.0's layout: a JSON array with one object per frame, ``{"_index": "packets-DATE",
"_type": "doc", "_score": null, "_source": {"layers": {...}}}``.  ``layers`` maps each protocol
(``frame``, ``eth``, ``ip``, ``udp``, ``infiniband``, ``iwarp_ddp`` ...) to its fields, keyed by
Wireshark's display-filter names, every value a *string* formatted as tshark shows it
(decimal, ``0x``-padded hex, dotted addresses).  A header that Wireshark shows as a subtree
(``infiniband.bth``) appears as its bytes (``"00:00:ff:ff:..."``) followed by ``NAME_tree``
holding its fields, as tshark does.

Differences from tshark, on purpose or by scope:

* When a frame carries the same protocol more than once (iWARP FPDUs packed into one TCP
  segment) tshark repeats the JSON key; we give a list instead, as ``tshark -T json
  --no-duplicate-keys`` does, so that every JSON reader sees every value.
* Only the fields rdmalab decodes are present (tshark adds resolved names, expert info,
  stream indexes, TCP analysis ...).  Fields of rdmalab's own (ICRC status, FECN/BECN, the
  opcode's name, decoding problems) are in a last layer named ``rdmalab``.
* ``frame.time`` is in UTC (tshark uses the local time zone).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Iterable, Iterator
from json import encoder as _json_encoder
from typing import TYPE_CHECKING, Any

import numpy as np

from rdmalab.capture.columnar import COLUMN_BY_NAME
from rdmalab.capture.fields import TRAILER_BYTES, header_fields, packet_fields
from rdmalab.capture.fieldtext import (
    _absolute_matrix,
    _dec,
    _epoch_text,
    _strings,
    absolute_parts,
    absolute_text,
    epoch_text,
    relative_matrix,
    relative_text,
)
from rdmalab.capture.fieldtext import value_text as _value_text
from rdmalab.capture.filter import declared_fields
from rdmalab.capture.linktypes import ERF, LINKTYPE_DLT_RAW12, LINKTYPE_DLT_RAW14, LINKTYPE_ETHERNET, LINKTYPE_RAW
from rdmalab.capture.pcapio import FrameMeta
from rdmalab.capture.reader import CapturedPacket
from rdmalab.capture.render import echo_message
from rdmalab.wire.mad import MADHeader
from rdmalab.wire.net import UDP, EthernetBadType, EthernetLength, VLANLength
from rdmalab.wire.rdmap import DDPTagged, DDPUntagged

if TYPE_CHECKING:
    from rdmalab.wire.header import Header
    from rdmalab.wire.packet import Packet

# tshark's frame.protocols names for our header classes' protocols ("ethertype" follows eth)
_PROTO_CHAIN = {"eth": "eth:ethertype", "vlan": "vlan:ethertype", "ieee8021ad": "ieee8021ad:ethertype",
                "sll": "sll:ethertype"}
#: the link types of raw IP that tshark shows as a ``raw`` protocol before the IP header ("Raw packet data":
#: packet-raw.c; LINKTYPE_IPV4 and LINKTYPE_IPV6 go to the IP dissector straight, without it)
_RAW_LAYER = frozenset({LINKTYPE_RAW, LINKTYPE_DLT_RAW12, LINKTYPE_DLT_RAW14})
# headers whose type/length field is no type: tshark hands what follows to no EtherType ("eth:llc", "eth:data")
_NO_TYPE = frozenset({EthernetLength, EthernetBadType, VLANLength})
# Wireshark's dissector (layer) names where one dissector decodes several of our protocols
_LAYER = {"iwarp_ddp": "iwarp_ddp_rdmap", "iwarp_rdma": "iwarp_ddp_rdmap"}
# subtrees of a protocol that frame.protocols names after it (the IPv6 extension headers: packet-ipv6.c
# dissects each as a protocol of its own, shown inside the IPv6 tree)
_CHAIN_SUBTREES = {"ipv6.hopopts": "ipv6.hopopts", "ipv6.routing": "ipv6.routing", "ipv6.fraghdr": "ipv6.fraghdr",
                   "ipv6.dstopts": "ipv6.dstopts",
                   # IPoIB's EtherType (packet-infiniband.c hands what follows to the ethertype table)
                   "infiniband.payload": "ethertype"}


_quote = _json_encoder.encode_basestring  # the C string encoder json.dumps(ensure_ascii=False) uses

# CRCs (as Wireshark reads their wire bytes) and their digits
_CRC_NAMES = {"iwarp_mpa.crc": 8, "iwarp_mpa.crc_check": 8, "rdmalab.crc32c.expected": 8,
              "rdmalab.icrc.expected": 8, "infiniband.variant.crc": 4, "rdmalab.vcrc.expected": 4}


def value_text(name: str, value: Any) -> str:
    """A value as tshark's JSON shows it: as ``-T fields`` does, but byte strings colon-separated."""
    if type(value) is int:
        return int_text(name)(value)
    return _value_text_any(name, value)


def int_text(name: str) -> Callable[[int], str]:
    """:func:`value_text` of field ``name`` for an integer value, as a function of the value."""
    f = _INT_TEXT.get(name)
    if f is None:
        f = _INT_TEXT[name] = _int_text(name)
    return f


def _value_text_any(name: str, value: Any) -> str:
    if isinstance(value, int) and name in _CRC_NAMES:
        return f"0x{value:0{_CRC_NAMES[name]}x}"
    text = _value_text(name, value)
    col = COLUMN_BY_NAME.get(name)
    if col is not None:
        is_bytes = col.fmt.startswith("bytes")
    else:
        is_bytes = declared_fields().get(name, ("dec", 0))[0] == "bytes"
    if is_bytes and isinstance(value, int):
        return ":".join(text[i:i + 2] for i in range(0, len(text), 2))
    return text


#: field name -> how an integer value of it is written (what _value_text_any decides for each
#: value, decided once a name: the JSON writes some 40 values a packet)
_INT_TEXT: dict[str, Callable[[int], str]] = {}


def _hex_digits(d: int) -> Callable[[int], str]:
    return lambda v: f"0x{v:0{d}x}"


def _colon_bytes(n: int) -> Callable[[int], str]:
    return lambda v: v.to_bytes(n, "big").hex(":")


def _int_text(name: str) -> Callable[[int], str]:
    if name in _CRC_NAMES:
        return _hex_digits(_CRC_NAMES[name])
    col = COLUMN_BY_NAME.get(name)
    if col is not None:
        if col.fmt in ("dec", "bool"):
            return str
        if col.fmt.startswith("hex"):
            return _hex_digits(int(col.fmt[3:]))
        if col.fmt.startswith("bytes"):
            return _colon_bytes(int(col.fmt[5:]))
    if name == "frame.time_epoch":
        return lambda v: _value_text_any(name, v)
    fmt, bits = declared_fields().get(name, ("dec", 0))
    if fmt == "hex":
        return _hex_digits(next(w for w in (2, 4, 6, 8, 16, 32, 64) if w * 4 >= bits))
    if fmt == "bytes":
        n = (bits + 7) // 8
        if col is None:
            return _colon_bytes(n)
        return lambda v: v.to_bytes(n, "big").hex()
    return str


def _hexbytes(data: bytes) -> str:
    return data.hex(":")


def _put(d: dict[str, Any], key: str, value: Any) -> None:
    """Add a key; a repeated key becomes a list of its values (tshark --no-duplicate-keys)."""
    if key in d:
        old = d[key]
        if isinstance(old, _Repeated):
            old.append(value)
        else:
            d[key] = _Repeated([old, value])
    else:
        d[key] = value


class _Repeated(list[Any]):
    """Values of a key that occurs more than once in one object."""


_LayerParts = tuple[str, dict[str, Any], dict[str, Any], str]
#: (header, its bytes) -> what _header_layer made of it: headers repeat (the same addresses, ports,
#: QPs, keys from packet to packet), and their text depends on nothing else.  Bounded.
_LAYER_CACHE: dict[tuple[Header, bytes], _LayerParts] = {}

#: where the fields of a protocol's layer are written: iter_json writes each frame from ``"\n  "``,
#: its ``_source`` at 4 spaces, ``layers`` at 6, each protocol at 8, and so its fields at 10
_FIELD_NL = "\n" + " " * 8


class _Rendered(dict[str, Any]):
    """A protocol's fields and, in ``text``, the JSON _dump writes for them at the indentation
    ``nl`` (written once for the header's fields, then joined): _dump writes ``text`` where the
    layer sits at ``nl``, and the fields themselves anywhere else (a protocol repeated in one frame
    becomes a list, one level deeper)."""

    __slots__ = ("nl", "text")

    def __init__(self, fields: dict[str, Any], text: str, nl: str) -> None:
        super().__init__(fields)
        self.text = text
        self.nl = nl


class _Shared(dict[str, Any]):
    """A header's subtree (``infiniband.bth_tree``), shared by every frame with that header (the
    layer cache): it refuses changes, so that no caller of packet_json changes another frame's."""

    __slots__ = ()

    def _refuse(self, *_args: Any, **_kw: Any) -> None:
        raise TypeError("this subtree is shared with other frames' JSON (a cache): copy it (dict(x)) to change it")

    __setitem__ = __delitem__ = update = pop = popitem = clear = setdefault = _refuse  # type: ignore[assignment]


def _entries(fields: dict[str, Any], nl: str) -> str:
    """The entries of a dict as _dump writes them inside it at ``nl``, each starting with a comma."""
    inner = nl + "  "
    out: list[str] = []
    for k, v in fields.items():
        out.append("," + inner)
        out.append(_quote(k))
        out.append(": ")
        _dump(v, inner, out)
    return "".join(out)


def _header_layer(h: Header, data: bytes, offset: int) -> _LayerParts:
    """(protocol, its fields in tshark's nesting, rdmalab-only fields, the fields' JSON entries at
    the indentation of a protocol's fields) of one decoded header.  The dicts are shared (cached):
    callers must not change them."""
    key = (h, data[offset:offset + h.LAYOUT.size])
    try:
        hit = _LAYER_CACHE.get(key)
    except TypeError:  # a header with an unhashable field: not cached
        return _make_header_layer(h, data, offset)
    if hit is None:
        hit = _make_header_layer(h, data, offset)
        if len(_LAYER_CACHE) >= 8192:
            _LAYER_CACHE.clear()
        _LAYER_CACHE[key] = hit
    return hit


#: protocols whose dotted field names Wireshark shows side by side, not in subtrees (packet-arp.c:
#: arp.hw.type, arp.src.hw_mac ... are all items of the arp tree; packet-icmpv6.c: icmpv6.echo.identifier)
_FLAT = frozenset({"arp", "icmpv6"})
#: protocols frame.protocols names once for each of their headers in a frame (not once a frame)
_EACH_TIME = frozenset({"vlan", "ieee8021ad"})
#: subtrees that are a label without a value of their own: tshark's JSON names them without ``_tree``
#: (packet-erf.c: erf.eth, an FT_NONE item over the Ethernet record's offset and pad)
_LABELS = frozenset({"erf.eth"})
#: fields a dissector shows in its tree under another protocol's name (packet-ieee8021ah.c: the
#: 802.1ad tag's type is ieee8021ah.etype)
_FOREIGN = frozenset({"ieee8021ah.etype"})


def _make_header_layer(h: Header, data: bytes, offset: int) -> _LayerParts:
    vals = header_fields(h)
    return header_layer_of(type(h), {name: value_text(name, v) for name, v in vals.items()},
                           _hexbytes(data[offset:offset + h.LAYOUT.size]))


def header_layer_of(cls: type[Header], texts: dict[str, str], raw: str) -> _LayerParts:
    """What :func:`_header_layer` makes of a header of class ``cls`` whose Wireshark fields
    (:func:`~rdmalab.capture.fields.header_fields`, in that order) are written ``texts`` and whose
    bytes are written ``raw`` (colon-separated hex), whatever those texts are: the JSON templates
    (:mod:`rdmalab.capture.json_templates`) call it with marks in the place of some values."""
    proto_name = cls.LAYOUT.ws_proto or "rdmalab"
    proto = proto_name.split(".", 1)[0]
    layer_name = _protocol_of(cls)
    ours: dict[str, Any] = {}
    fields: dict[str, Any] = {}
    for name, text in texts.items():
        if proto == "rdmalab" or not (name.startswith(proto + ".") or name in _FOREIGN):
            ours[name] = text
            continue
        # a bit field of a byte Wireshark shows as a value (ip.dsfield.ecn under ip.dsfield_tree)
        parent, _, _leaf = name.rpartition(".")
        if "." in parent and parent != proto_name and parent not in texts and proto_name == proto and proto not in _FLAT:
            fields.setdefault(parent if parent in _LABELS else parent + "_tree", {})[name] = text
        else:
            fields[name] = text
    if proto == "rdmalab":
        return "", {}, ours, ""
    for k, v in fields.items():
        if type(v) is dict:
            fields[k] = _Shared(v)
    if proto_name != proto:
        # a header Wireshark shows as a subtree: its bytes, then its fields
        fields = {proto_name: raw, proto_name + "_tree": _Shared(fields)}
    return layer_name, fields, ours, _entries(fields, _FIELD_NL)


def ping_time(data: bytes, frame_secs: int) -> tuple[int, int] | None:
    """The time an echo's ``data`` begins with, as ping writes it (a timeval: 32-bit seconds and
    microseconds, big- or little-endian), when it looks like one: within a day of the frame's time
    ``frame_secs``, under a million microseconds (tshark's test, packet-icmp.c); (seconds, microseconds)."""
    if len(data) < 8:
        return None
    for order in ("big", "little"):
        secs, usecs = int.from_bytes(data[0:4], order), int.from_bytes(data[4:8], order)
        diff = (secs - frame_secs) & 0xFFFFFFFF
        if min(diff, (1 << 32) - diff) < 86_400 and usecs < 1_000_000:
            return secs, usecs
    return None


def _protocol_chain(pkt: Packet, skip: frozenset[type] = frozenset(), frame_ns: int | None = None) -> list[str]:
    """The steps of tshark's ``frame.protocols`` that a packet's headers make (not those of the headers of
    ``skip`` classes): each protocol once, in the order of its first header (a protocol of
    :data:`_EACH_TIME` once a header), the subtrees named after it, and ``data`` where tshark shows the
    payload as data (:func:`_echo_data`, :func:`_payload_is_data`)."""
    count: dict[str, int] = {}
    sub: dict[str, list[str]] = {}
    bare: set[str] = set()
    for layer in pkt.layers:
        h = layer.header
        if type(h) in skip:
            continue
        proto = _protocol_of(type(h))
        if not proto:
            continue
        if type(h) in _NO_TYPE:
            bare.add(proto)
        count[proto] = count.get(proto, 0) + 1
        step = _CHAIN_SUBTREES.get(h.LAYOUT.ws_proto or "")
        if step is not None:
            sub.setdefault(proto, []).append(step)
    echo = _echo_data(pkt, frame_ns)
    if echo is not None:
        if echo[1]:
            sub.setdefault(echo[0], []).append("data")
    elif _payload_is_data(pkt, count):
        count["data"] = 1
    chain: list[str] = []
    for proto, n in count.items():
        chain.extend([proto if proto in bare else _PROTO_CHAIN.get(proto, proto)] * (n if proto in _EACH_TIME else 1))
        chain.extend(sub.get(proto, ()))
    return chain


_PROTOCOL_OF: dict[type, str] = {}


def _protocol_of(cls: type[Header]) -> str:
    """The JSON layer (tshark's protocol) a header class's fields go in ("" for a header only rdmalab
    names): the protocol of its Wireshark names, or the dissector that decodes it (:data:`_LAYER`)."""
    got = _PROTOCOL_OF.get(cls)
    if got is None:
        proto = (cls.LAYOUT.ws_proto or "rdmalab").split(".", 1)[0]
        got = _PROTOCOL_OF[cls] = "" if proto == "rdmalab" else _LAYER.get(proto, proto)
    return got


def _echo_data(pkt: Packet, frame_ns: int | None) -> tuple[str, bytes, tuple[int, int] | None] | None:
    """An echo request or reply with a payload: its ICMP protocol, the bytes tshark shows as its data
    (after ping's timeval, :func:`ping_time`, where it finds one) and that timeval; else None."""
    echo = echo_message(pkt)
    if echo is None or not pkt.payload_length:
        return None
    payload = bytes(pkt.payload)
    stamp = ping_time(payload, frame_ns // 1_000_000_000) if echo[0] == 4 and frame_ns is not None else None
    return ("icmp" if echo[0] == 4 else "icmpv6"), (payload[8:] if stamp is not None else payload), stamp


def _payload_is_data(pkt: Packet, protocols: Collection[str]) -> bool:
    """Whether tshark shows the payload after a packet's headers as ``data``: an RDMA packet's (RoCE,
    InfiniBand, an iWARP FPDU's: :func:`_whole_message`), not a MAD's (its bytes are its fields in
    tshark's tree) nor an ICMP message's other than an echo's (tshark reads its body); a UDP datagram's
    that rdmalab reads no protocol in (packet-udp.c hands what no port or heuristic dissector takes to
    the data dissector; one it has a dissector for is not data in tshark: DNS, a tunnel ..., where rdmalab
    reads none: :mod:`rdmalab.capture.crosscheck` names that choice).  A TCP segment's is
    :attr:`CapturedPacket.tcp_data`."""
    if not pkt.payload_length:
        return False
    if pkt.layers and type(pkt.layers[-1].header) is UDP and pkt.encap not in ("rocev2", "rocev1", "ib", "iwarp"):
        return True
    return (pkt.encap in ("rocev2", "rocev1", "ib", "iwarp")
            and not any(isinstance(layer.header, MADHeader) for layer in pkt.layers)
            and "icmp" not in protocols and "icmpv6" not in protocols and _whole_message(pkt))


def _data_bytes(pkt: Packet) -> bytes:
    """The bytes of a packet's ``data`` layer: its payload, and an InfiniBand packet's pad after it
    (packet-infiniband.c hands the payload and pad on together, IBA Vol 1 9.2 BTH PadCnt); the FPDU
    that ends a Send message of several FPDUs: the whole message (``Packet.send_message``)."""
    if pkt.send_message is not None:
        return pkt.send_message.data
    pad = pkt.pad if pkt.encap in ("rocev2", "rocev1", "ib") else 0  # (an FPDU's MPA pad is MPA's, not data)
    return bytes(pkt.data[pkt.payload_offset:pkt.payload_offset + pkt.payload_length + pad])


def frame_data(cp: CapturedPacket) -> list[bytes]:
    """The payloads tshark shows as ``data`` layers of a frame (``data.data``, ``data.len``), in order:
    what :func:`frame_protocols` names ``data``."""
    pkt = cp.packet
    out: list[bytes] = []
    for i, p in enumerate((pkt, *cp.pdus)):
        echo = _echo_data(p, cp.epoch_ns if i == 0 else None)
        if echo is not None:
            if echo[1]:
                out.append(echo[1])
        elif _payload_is_data(p, {_protocol_of(type(layer.header)) for layer in p.layers}):
            out.append(_data_bytes(p))
        if i == 0 and cp.tcp_data:
            out.append(bytes(pkt.payload))
        q = p.quoted if i == 0 else None
        while q is not None:  # an ICMP error's quote: the payload of the datagram it quotes
            got = _quote_data(q)
            if got is not None:
                out.append(got)
            q = q.quoted
    return out


def _quoted_segment_data(q: Packet) -> bytes | None:
    """A quoted TCP segment's payload, which tshark shows as ``data`` (it dissects no protocol above
    TCP in a quote), or None."""
    return bytes(q.payload) if q.encap == "tcp" and q.payload_length else None


def _quote_data(q: Packet) -> bytes | None:
    """The bytes tshark shows as ``data`` after a quoted datagram's headers: a quoted RDMA packet's
    payload, a quoted TCP segment's (:func:`_quoted_segment_data`)."""
    segment = _quoted_segment_data(q)
    if segment is not None:
        return segment
    if _payload_is_data(q, {_protocol_of(type(layer.header)) for layer in q.layers}):
        return _data_bytes(q)
    return None


def frame_protocols(cp: CapturedPacket) -> str:
    """tshark's ``frame.protocols`` of a frame (``eth:ethertype:ip:udp:infiniband:data`` ...): its
    headers' protocols, ``data`` after TCP bytes of no protocol above TCP (:attr:`CapturedPacket.tcp_data`),
    then the iWARP PDUs completed in it (the MPA dissector named once a segment, DDP/RDMAP each FPDU:
    packet-iwarp-mpa.c dissects the segment's FPDUs in one call)."""
    pkt = cp.packet
    chain = _protocol_chain(pkt, frozenset(), cp.epoch_ns)
    if cp.linktype in _RAW_LAYER:
        chain.insert(0, "raw")
    q = pkt.quoted
    while q is not None:  # an ICMP error's quoted datagram (packet-icmp.c: ip:udp:... after icmp), and its quote
        chain.extend(_protocol_chain(q))
        if _quoted_segment_data(q) is not None:
            chain.append("data")
        q = q.quoted
    if cp.tcp_data:
        chain.append("data")
    if cp.pdus:
        chain.extend(_pdus_chain(cp.pdus, frozenset(type(layer.header) for layer in pkt.layers)))
    return ":".join(chain)


def _pdus_chain(pdus: list[Packet], skip: frozenset[type]) -> list[str]:
    """The steps of ``frame.protocols`` the iWARP PDUs completed in a segment add (not those of the
    segment's header classes ``skip``): the MPA dissector once, DDP/RDMAP each FPDU."""
    chain: list[str] = []
    for i, pdu in enumerate(pdus):
        more = _protocol_chain(pdu, skip)
        chain.extend(more if i == 0 else [p for p in more if p != "iwarp_mpa"])
    return chain


def _packet_layers(pkt: Packet, layers: dict[str, Any], extras: dict[str, Any],
                   skip: frozenset[type] = frozenset(), frame_ns: int | None = None) -> None:
    current: dict[str, dict[str, Any]] = {}
    texts: dict[str, list[str] | None] = {}  # a protocol's entries as text; None: written from the dict
    order: list[str] = []
    for layer in pkt.layers:
        h = layer.header
        if type(h) in skip:
            continue
        proto, fields, ours, text = _header_layer(h, pkt.data, layer.offset)
        if ours:
            extras.update(ours)
        if not proto:  # a header only rdmalab names (the CNP's reserved bytes)
            continue
        dest = current.get(proto)
        if dest is None:
            current[proto] = dict(fields)
            texts[proto] = [text]
            order.append(proto)
            continue
        if dest.keys().isdisjoint(fields):
            dest.update(fields)
            parts = texts[proto]
            if parts is not None:
                parts.append(text)
            continue
        texts[proto] = None  # keys in common: written from the dict
        for k, v in fields.items():
            old = dest.get(k)
            if isinstance(v, dict) and isinstance(old, dict):
                dest[k] = {**old, **v}  # two headers in one subtree (Terminate control and its headers)
            else:
                dest[k] = v
    # what the packet adds besides its headers (CRCs, rdmalab's own fields)
    flat: dict[str, Any] = {}
    packet_fields(pkt, flat, skip=frozenset(type(layer.header) for layer in pkt.layers), quotes=False)
    # after an 802.1Q tag or a Linux cooked header, that header's dissector's tree holds the padding and the
    # trailer (packet-vlan.c, packet-sll.c); an FCS the capture says it keeps stays in eth's
    trailer_layer = "eth" if pkt.eth_trailer is None else pkt.eth_trailer.trailer_name.split(".", 1)[0]
    for name, v in flat.items():
        proto = name.split(".", 1)[0]
        proto = _LAYER.get(proto, proto)
        values = v if isinstance(v, list) else [v]
        if name in TRAILER_BYTES:  # (hex text: colon-separated, as the JSON writes bytes)
            values = [_hexbytes(bytes.fromhex(x)) for x in values]
        if proto == "eth" and name in TRAILER_BYTES:
            proto = trailer_layer
        shown: Any = [value_text(name, x) for x in values] if len(values) > 1 else value_text(name, values[0])
        if proto in current and proto != "rdmalab":
            dest = current[proto]
            parts = texts[proto]
            if parts is not None:
                if name in dest:
                    texts[proto] = None
                else:
                    entry: list[str] = ["," + _FIELD_NL + "  ", _quote(name), ": "]
                    _dump(shown, _FIELD_NL + "  ", entry)
                    parts.append("".join(entry))
            dest[name] = shown
        else:
            extras[name] = shown
    echo = _echo_data(pkt, frame_ns)
    if echo is not None:  # an echo's data: in its ICMP tree, as tshark shows it
        proto, payload, stamp = echo
        tree = current[proto]
        texts[proto] = None
        if stamp is not None and frame_ns is not None:
            secs, usecs = stamp
            tree["icmp.data_time"] = absolute_text(secs * 1_000_000_000 + usecs * 1000)  # (local time, as frame.time)
            tree["icmp.data_time_relative"] = relative_text(frame_ns - (secs * 1_000_000_000 + usecs * 1000))
        if payload:
            tree["data"] = {"data.data": _hexbytes(payload), "data.len": str(len(payload))}
    elif _payload_is_data(pkt, current):
        payload = _data_bytes(pkt)
        current["data"] = {"data.data": _hexbytes(payload), "data.len": str(len(payload))}
        texts["data"] = None
        order.append("data")
    for proto in order:
        dest = current[proto]
        parts = texts[proto]
        if parts is not None and dest:
            dest = _Rendered(dest, "{" + "".join(parts)[1:] + _FIELD_NL + "}", _FIELD_NL)
        _put(layers, proto, dest)


def _quote_layers(quoted: Packet, layers: dict[str, Any]) -> None:
    """The layers of the datagram an ICMP error quotes, where tshark puts them: its IP and UDP or TCP
    headers in the ICMP message's tree (packet-icmp.c and packet-icmpv6.c dissect the quote as the
    message's part), what UDP hands on (InfiniBand, data) in the frame's layers after it."""
    got: dict[str, Any] = {}
    _packet_layers(quoted, got, {})
    icmp = "icmpv6" if "icmpv6" in layers else "icmp"
    tree = dict(layers[icmp])  # (its text is written anew, with the quote in it)
    for proto, value in got.items():
        if proto in ("ip", "ipv6", "udp", "tcp", "icmp", "icmpv6"):
            tree[proto] = dict(value)
        else:
            _put(layers, proto, value)
    payload = _quoted_segment_data(quoted)
    if payload is not None:  # a quoted segment's payload: data, in the ICMP tree
        tree["data"] = {"data.data": _hexbytes(payload), "data.len": str(len(payload))}
    if quoted.quoted is not None:  # a quote that is an ICMP error itself: its quote in its tree
        _quote_layers(quoted.quoted, tree)
    layers[icmp] = tree


def _whole_message(pkt: Packet) -> bool:
    """Whether tshark shows a packet's payload as data: not an untagged FPDU before the last of its
    message (packet-iwarp-ddp-rdmap.c holds those bytes to put the message together: its data comes
    with the last FPDU), not the private data of an MPA Request or Reply (the MPA tree holds them)."""
    if pkt.encap != "iwarp":
        return True
    ddp = pkt.get(DDPTagged) or pkt.get(DDPUntagged)
    return ddp is not None and (isinstance(ddp, DDPTagged) or bool(ddp.last))


_FRAME_KEYS = ("frame.encap_type", "frame.time", "frame.offset_shift", "frame.time_epoch", "frame.time_delta",
               "frame.time_delta_displayed", "frame.time_relative", "frame.number", "frame.len", "frame.cap_len",
               "frame.marked", "frame.ignored", "frame.protocols")
#: the frame layer's keys as _dump writes them at a protocol's indentation, with what comes before each value
_FRAME_HEADS = ["{" + _FIELD_NL + "  " + _quote(_FRAME_KEYS[0]) + ": "] + [
    "," + _FIELD_NL + "  " + _quote(k) + ": " for k in _FRAME_KEYS[1:]]


#: a packet comment's expert item, as tshark writes it under frame.comment_tree: severity "Comment" and group
#: "Comments" (epan/proto.h: PI_COMMENT 0x00100000, PI_COMMENTS_GROUP 0x0b000000)
_COMMENT_EXPERT = (("_ws.expert.severity", str(0x00100000)), ("_ws.expert.group", str(0x0b000000)))


def _comment_layer(comments: str | list[str]) -> dict[str, Any]:
    """tshark's ``pkt_comment`` layer of a frame's pcapng comments (before its frame layer): each comment
    and its expert item (a repeated key a list, as everywhere here)."""
    layer: dict[str, Any] = {}
    for c in [comments] if isinstance(comments, str) else comments:
        _put(layer, "frame.comment", c)
        _put(layer, "frame.comment_tree", {"_ws.expert": dict((("frame.comment.expert", ""), ("_ws.expert.message", c),
                                                               *_COMMENT_EXPERT))})
    return layer


@functools.lru_cache(maxsize=256)
def _interface_head(section: int | None, iface: int, name: str | None,
                    description: str | None) -> tuple[dict[str, Any], str]:
    """The frame layer's first keys for a frame of a pcapng interface (or an ERF record's port) as tshark
    writes them (the section's number, in a pcapng file; the interface's, its name and description),
    and their text, each with the comma after it."""
    tree = {k: v for k, v in (("frame.interface_name", name), ("frame.interface_description", description))
            if v is not None}
    head: dict[str, Any] = {} if section is None else {"frame.section_number": str(section)}
    head |= {"frame.interface_id": str(iface), "frame.interface_id_tree": tree}
    out: list[str] = []
    for k, v in head.items():
        out.append(_FIELD_NL + "  " + _quote(k) + ": ")
        _dump(v, _FIELD_NL + "  ", out)
        out.append(",")
    return head, "".join(out)


def _head_of(meta: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """:func:`_interface_head` of a frame's pcapng fields (:meth:`~rdmalab.capture.pcapio.FrameMeta.of`, which
    has ``frame.interface_id``): ({} and "" when it has none)."""
    if "frame.interface_id" not in meta:
        return {}, ""
    return _interface_head(meta.get("frame.section_number"), meta["frame.interface_id"],
                           meta.get("frame.interface_name"), meta.get("frame.interface_description"))


def packet_json(cp: CapturedPacket, *, first_ns: int, prev_ns: int, prev_displayed_ns: int,
                meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """One frame as tshark's JSON object (``_index``, ``_type``, ``_score``, ``_source.layers``); ``meta``:
    the frame's pcapng fields (:meth:`rdmalab.capture.pcapio.FrameMeta.of`): its comments (the
    ``pkt_comment`` layer), section and interface (the frame layer's first keys)."""
    return _packet_json(cp, first_ns, prev_ns, prev_displayed_ns, meta, None)


def _packet_json(cp: CapturedPacket, first_ns: int, prev_ns: int, prev_displayed_ns: int,
                 meta: dict[str, Any] | None, seg: list[dict[str, Any]] | None) -> dict[str, Any]:
    """:func:`packet_json`; ``seg``, when given, gets a copy of the rdmalab fields of the frame's own
    headers (before those of its PDUs and :func:`_tail_layers`': :func:`_tcp_splice`)."""
    ns = cp.epoch_ns
    pkt = cp.packet
    values = frame_values(cp.linktype, ns, prev_ns, prev_displayed_ns, first_ns, cp.frame_number,
                          cp.wire_length or len(pkt.data), cp.captured)
    frame: dict[str, Any] = dict(zip(_FRAME_KEYS, values, strict=True))
    layers: dict[str, Any] = {}
    head = ""
    if meta:
        if "frame.comment" in meta:
            layers["pkt_comment"] = _comment_layer(meta["frame.comment"])
        keys, head = _head_of(meta)
        frame = keys | frame
    layers["frame"] = frame
    if cp.linktype in _RAW_LAYER:
        layers["raw"] = "Raw packet data"
    extras: dict[str, Any] = {}
    _packet_layers(pkt, layers, extras, frame_ns=ns)
    if pkt.quoted is not None:
        _quote_layers(pkt.quoted, layers)
    if seg is not None:
        seg.append(dict(extras))
    _tail_layers(layers, extras, pkt.payload if cp.tcp_data else None, cp.pdus,
                 frozenset(type(layer.header) for layer in pkt.layers) if cp.pdus else frozenset(), pkt.internal_error,
                 pkt.encap)
    frame["frame.protocols"] = values[-1] = frame_protocols(cp)
    text = frame_layer_text(values)
    if head:
        text = "{" + head + text[1:]
    layers["frame"] = _Rendered(frame, text, _FIELD_NL)
    return {"_index": index_of(ns), "_type": "doc", "_score": None, "_source": {"layers": layers}}


def frame_values(linktype: int, ns: int, prev_ns: int, prev_displayed_ns: int, first_ns: int, number: int,
                 length: int, captured: int) -> list[str]:
    """The values of the frame layer's fields (:data:`_FRAME_KEYS`, ``frame.protocols`` left empty) of
    frame ``number`` of a ``linktype`` record, at ``ns``, ``length`` octets on the wire, ``captured``
    captured; the frames before it at ``prev_ns`` and (the one shown) ``prev_displayed_ns``, the first
    at ``first_ns``."""
    return [str(_encap_type(linktype)), absolute_text(ns), "0.000000000", epoch_text(ns), relative_text(ns - prev_ns),
            relative_text(ns - prev_displayed_ns), relative_text(ns - first_ns), str(number), str(length), str(captured),
            "0", "0", ""]


def frame_starts(ns: np.ndarray, prev_ns: np.ndarray, first_ns: int, numbers: np.ndarray,
                 lengths: np.ndarray) -> list[str]:
    """The text of each of a block's Ethernet frames, whole on the wire (``lengths`` octets each), as
    ``_frame_text`` writes it up to its ``frame.protocols``'s value: its ``_index`` and its frame layer's
    other fields (:func:`frame_values` of ``ns``, the frames before them at ``prev_ns``, the first at
    ``first_ns``), made a column at a time: the text of the same fields of each frame in turn costs a
    worker a sixth of its time (``-T json``).  :func:`frame_start` is one frame's."""
    n = len(ns)
    if n == 0:
        return []
    ns = ns.astype(np.int64, copy=False)

    def const(text: str) -> np.ndarray:
        return np.broadcast_to(np.frombuffer(text.encode(), dtype=np.uint8), (n, len(text.encode())))

    secs = ns // 1_000_000_000
    uniq, inv = np.unique(secs, return_inverse=True)
    index = _strings([_quote("packets-" + absolute_parts(int(x))[2]) for x in uniq.tolist()])[inv.reshape(-1)]
    parts = [const(_FRAME_START), index, const(_FRAME_LAYERS + _LAYERS_NL + '"frame": ' + _FRAME_HEADS[0]
                                               + _quote(str(_encap_type(LINKTYPE_ETHERNET))) + _FRAME_HEADS[1] + '"'),
             _absolute_matrix(ns), const('"' + _FRAME_HEADS[2] + '"0.000000000"' + _FRAME_HEADS[3] + '"'),
             _epoch_text(ns)]
    delta = relative_matrix(ns - prev_ns)  # (frame.time_delta, and the same since the frame shown before)
    for k, d in enumerate((delta, delta, relative_matrix(ns - first_ns)), 4):
        parts += (const('"' + _FRAME_HEADS[k] + '"'), d)
    for k, v in ((7, numbers), (8, lengths), (9, lengths)):
        parts += (const('"' + _FRAME_HEADS[k] + '"'), _dec(v.astype(np.int64, copy=False)))
    parts += (const('"' + _FRAME_HEADS[10] + '"0"' + _FRAME_HEADS[11] + '"0"' + _FRAME_HEADS[12]),)
    m = np.hstack(parts)
    keep = m != 0  # (the matrices' blanks: no character)
    ends = np.cumsum(keep.sum(axis=1)).tolist()
    text = m[keep].tobytes().decode()
    return [text[a:b] for a, b in zip([0, *ends[:-1]], ends, strict=True)]


def frame_start(ns: int, prev_ns: int, first_ns: int, number: int, length: int) -> str:
    """:func:`frame_starts` of one frame: from :func:`frame_values`, a field at a time."""
    values = frame_values(LINKTYPE_ETHERNET, ns, prev_ns, prev_ns, first_ns, number, length, length)[:-1]
    return "".join([_FRAME_START, _quote(index_of(ns)), _FRAME_LAYERS, _LAYERS_NL, '"frame": ',
                    *[h + _quote(v) for h, v in zip(_FRAME_HEADS[:-1], values, strict=True)], _FRAME_HEADS[-1]])


def frame_layer_text(values: list[str]) -> str:
    """The frame layer's JSON (at a layer's indentation) of its :func:`frame_values`."""
    return "".join([h + _quote(v) for h, v in zip(_FRAME_HEADS, values, strict=True)]) + _FIELD_NL + "}"


def index_of(ns: int) -> str:
    """A frame's ``_index`` (``packets-2026-11-21``): its local date, as tshark's ``frame.time``."""
    return "packets-" + absolute_parts(ns // 1_000_000_000)[2]


def _tail_layers(layers: dict[str, Any], extras: dict[str, Any], tcp_data: bytes | None, pdus: list[Packet],
                 skip: frozenset[type], internal_error: str | None, encap: str) -> None:
    """The layers of a frame after its own headers' (and an ICMP error's quote): the ``data`` of a TCP
    segment's payload of no protocol (``tcp_data``, else None), the iWARP PDUs completed in it (their
    headers but for those of the segment's classes ``skip``), and rdmalab's own layer, whose fields so
    far are ``extras``."""
    if tcp_data is not None:  # bytes of no protocol above TCP (an application's own exchange, perftest's ...)
        layers["data"] = {"data.data": _hexbytes(tcp_data), "data.len": str(len(tcp_data))}
    for pdu in pdus:
        _packet_layers(pdu, layers, extras, skip)
    if internal_error:
        extras["rdmalab.problems"] = f"internal decoder error: {internal_error}"
    extras["rdmalab.encap"] = encap
    layers["rdmalab"] = extras


def _encap_type(linktype: int) -> int:
    """Wireshark's WTAP_ENCAP number for the pcap link types rdmalab reads (wtap.h: raw IP is
    WTAP_ENCAP_RAW_IP 7, LINKTYPE_IPV4 and LINKTYPE_IPV6 WTAP_ENCAP_RAW_IP4 129 and _IP6 130)."""
    return {1: 1, 113: 25, 276: 210, 197: 98, 247: 98, 101: 7, 12: 7, 14: 7, 228: 129, 229: 130}.get(linktype, linktype)




def _dump(obj: Any, nl: str, out: list[str]) -> None:
    """Append the text of ``json.dumps(obj, indent=2, ensure_ascii=False)`` to ``out``, each line
    after the first starting ``nl`` (a newline and the indentation outside ``obj``).

    json.dumps runs a pure-Python encoder whenever it indents; this one knows the only value types
    packet_json makes (dicts, lists, strings, None), which a test holds it to."""
    if isinstance(obj, str):
        out.append(_quote(obj))
        return
    if obj is None:
        out.append("null")
        return
    inner = nl + "  "
    if isinstance(obj, dict):
        if type(obj) is _Rendered and obj.nl == nl:
            out.append(obj.text)
            return
        if not obj:
            out.append("{}")
            return
        out.append("{")
        first = True
        for k, v in obj.items():
            out.append(inner if first else "," + inner)
            first = False
            out.append(_quote(k))
            out.append(": ")
            if type(v) is str:
                out.append(_quote(v))
            else:
                _dump(v, inner, out)
        out.append(nl + "}")
        return
    if isinstance(obj, list):
        if not obj:
            out.append("[]")
            return
        out.append("[")
        first = True
        for v in obj:
            out.append(inner if first else "," + inner)
            first = False
            _dump(v, inner, out)
        out.append(nl + "]")
        return
    raise TypeError(f"packet_json made a {type(obj).__name__}, which _dump does not write")


_LAYERS_NL = "\n" + " " * 8  # where iter_json writes each protocol's key (its fields: _FIELD_NL + 2)


def _frame_text(obj: dict[str, Any]) -> str:
    """``_dump(obj, "\n  ")`` of a packet_json object, with its fixed outer keys written as one
    template and the layers' own text where they have it."""
    if len(obj) != 4 or obj.get("_type") != "doc" or obj.get("_score", 0) is not None or \
            type(obj.get("_index")) is not str or list(obj.get("_source", ())) != ["layers"] or \
            not obj["_source"]["layers"]:
        out: list[str] = []
        _dump(obj, "\n  ", out)
        return "".join(out)
    nl = _LAYERS_NL
    parts = [_FRAME_START, _quote(obj["_index"]), _FRAME_LAYERS]
    sep = nl
    for name, layer in obj["_source"]["layers"].items():
        parts.append(sep)
        sep = "," + nl
        parts.append(_quote(name))
        parts.append(": ")
        _layer_text(layer, parts)
    parts.append(_FRAME_END)
    return "".join(parts)


#: what begins a frame's text (_frame_text), before its _index's value, and what follows that value up
#: to the first layer's key
_FRAME_START = '{\n    "_index": '
_FRAME_LAYERS = ',\n    "_type": "doc",\n    "_score": null,\n    "_source": {\n      "layers": {'


#: what ends a frame's text after its last layer (_frame_text)
_FRAME_END = "\n      }\n    }\n  }"


def _layer_text(layer: Any, parts: list[str]) -> None:
    """A protocol's layer as _frame_text writes it (after its key), appended to ``parts``."""
    nl = _LAYERS_NL
    if type(layer) is _Rendered and layer.nl == nl:
        parts.append(layer.text)
    elif type(layer) is dict and layer and all(type(v) is str for v in layer.values()):  # data, rdmalab
        inner = nl + "  "
        parts.append("{" + ",".join([inner + _quote(k) + ": " + _quote(v) for k, v in layer.items()]) + nl + "}")
    else:
        _dump(layer, nl, parts)


def _meta_of(meta: FrameMeta | None, cp: CapturedPacket) -> dict[str, Any] | None:
    """A frame's pcapng fields from ``meta`` (None: the capture is a stream, read once)."""
    if meta is None:
        return None
    erf = cp.packet.get(ERF)
    return meta.of(cp.frame_number, erf.flags if erf is not None else None)


def iter_json(packets: Iterable[CapturedPacket], keep: Any = None, meta: FrameMeta | None = None) -> Iterator[str]:
    """The text of ``tshark -T json`` for these frames, in pieces (``keep(cp)`` filters, None keeps all);
    ``meta``: the capture file's pcapng fields (comments, sections and interfaces), read beside the frames."""
    first_ns: int | None = None
    prev_ns = 0
    prev_disp: int | None = None  # the first frame shown is 0 after the one shown before it, as in tshark
    yield "[\n"
    sep = ""
    for cp in packets:
        ns = cp.epoch_ns
        if first_ns is None:
            first_ns = prev_ns = ns
        if keep is not None and not keep(cp):
            prev_ns = ns
            continue
        obj = packet_json(cp, first_ns=first_ns, prev_ns=prev_ns, prev_displayed_ns=ns if prev_disp is None else prev_disp,
                          meta=_meta_of(meta, cp))
        prev_ns = prev_disp = ns
        yield sep + "  " + _frame_text(obj)
        sep = ",\n"
    yield "\n]\n" if sep else "]\n"
