"""Wire-level codecs: InfiniBand, RoCEv1, RoCEv2 and iWARP headers <-> bytes.

Pure functions and frozen values: no I/O, no clocks, no state.

The names below are loaded on first use (PEP 562 ``__getattr__``): ``import rdmalab.wire.crc`` (what
the engine and the live tools need) does not load the frame decoders, the CM and MAD codecs or
iWARP, which the live tools' start-up in the lab VM would otherwise pay for before they listen.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # (typing is not imported at run time: start-up of the live tools)

if TYPE_CHECKING:  # the same names, for type checkers and readers
    from typing import Any

    from rdmalab.wire.errors import DecodeError, EncodeError, MalformedError, RdmalabError, TruncatedError
    from rdmalab.wire.frame import (
        decode_after_ethertype,
        decode_ethernet,
        decode_ib,
        decode_ip,
        encode_rocev1,
        encode_rocev2,
    )
    from rdmalab.wire.header import F, Header, Layout, Span, layout
    from rdmalab.wire.ib import (
        AETH,
        BTH,
        DETH,
        FETH,
        GRH,
        IETH,
        LRH,
        RDETH,
        RETH,
        XRCETH,
        AtomicAckETH,
        AtomicETH,
        CNPPad,
        ImmDt,
        check_mtu,
        mtu_bytes,
        mtu_code,
        psn_add,
        psn_diff,
        psn_unwrap,
        timeout_ns,
    )
    from rdmalab.wire.net import is_retransmission, seq_add, seq_diff, seq_max, tcp_flag_names
    from rdmalab.wire.opcodes import OPCODES, Op, OpcodeInfo, Pos, Transport, find_opcode, opcode_info, opcode_name
    from rdmalab.wire.packet import Layer, Packet, encode_ib, encode_transport

_FROM: dict[str, str] = {}
for _module, _names in (
    ("errors", "DecodeError EncodeError MalformedError RdmalabError TruncatedError"),
    ("frame", "decode_after_ethertype decode_ethernet decode_ib decode_ip encode_rocev1 encode_rocev2"),
    ("header", "F Header Layout Span layout"),
    ("ib", "AETH BTH DETH FETH GRH IETH LRH RDETH RETH XRCETH AtomicAckETH AtomicETH CNPPad ImmDt"
           " check_mtu mtu_bytes mtu_code psn_add psn_diff psn_unwrap timeout_ns"),
    ("net", "is_retransmission seq_add seq_diff seq_max tcp_flag_names"),
    ("opcodes", "OPCODES Op OpcodeInfo Pos Transport find_opcode opcode_info opcode_name"),
    ("packet", "Layer Packet encode_ib encode_transport"),
):
    for _name in _names.split():
        _FROM[_name] = _module

__all__ = [
    "AETH", "BTH", "DETH", "FETH", "GRH", "IETH", "LRH", "RDETH", "RETH", "XRCETH",
    "AtomicAckETH", "AtomicETH", "CNPPad", "ImmDt",
    "check_mtu", "mtu_bytes", "mtu_code", "psn_add", "psn_diff", "psn_unwrap", "timeout_ns",
    "is_retransmission", "seq_add", "seq_diff", "seq_max", "tcp_flag_names",
    "DecodeError", "EncodeError", "MalformedError", "RdmalabError", "TruncatedError",
    "F", "Header", "Layout", "Span", "layout",
    "OPCODES", "Op", "OpcodeInfo", "Pos", "Transport", "find_opcode", "opcode_info", "opcode_name",
    "Layer", "Packet", "decode_ib", "encode_ib", "encode_transport",
    "decode_after_ethertype", "decode_ethernet", "decode_ip", "encode_rocev1", "encode_rocev2",
]  # (tests/wire/test_lazy_package.py: the same names as _FROM, each resolving)


def __getattr__(name: str) -> Any:
    module = _FROM.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # the next look-up is a plain global
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_FROM))
