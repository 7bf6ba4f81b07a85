"""Wire-level codecs: InfiniBand, RoCEv1, RoCEv2 and iWARP headers <-> bytes.

Pure functions and frozen values: no I/O, no clocks, no state.
"""

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
)
from rdmalab.wire.opcodes import OPCODES, Op, OpcodeInfo, Pos, Transport, find_opcode, opcode_info, opcode_name
from rdmalab.wire.packet import Layer, Packet, encode_ib, encode_transport

__all__ = [
    "AETH", "BTH", "DETH", "FETH", "GRH", "IETH", "LRH", "RDETH", "RETH", "XRCETH",
    "AtomicAckETH", "AtomicETH", "CNPPad", "ImmDt",
    "DecodeError", "EncodeError", "MalformedError", "RdmalabError", "TruncatedError",
    "F", "Header", "Layout", "Span", "layout",
    "OPCODES", "Op", "OpcodeInfo", "Pos", "Transport", "find_opcode", "opcode_info", "opcode_name",
    "Layer", "Packet", "decode_ib", "encode_ib", "encode_transport",
    "decode_after_ethertype", "decode_ethernet", "decode_ip", "encode_rocev1", "encode_rocev2",
]
