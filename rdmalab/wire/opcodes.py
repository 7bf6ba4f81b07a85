"""The BTH opcode table: the one source of truth for what follows a BTH.

The table is declared in :mod:`rdmalab.wire.ib`, right after the headers it names (so the header
declarations import one way: ``header`` -> ``ib``); this is its public module.

Bits 7-5 of the opcode select the transport, bits 4-0 the operation (IBA Vol 1 9.2.1,
table 38).  For each opcode the table gives the operation, its place in a message
(first/middle/last/only), whether it carries immediate data or an invalidate key, the extended
headers that follow the BTH in order, and whether a payload follows.  The decoder, the encoder,
the engine's segmentation, the docs and the notebooks all read this table.

Sources for the header sequences: IBA Vol 1 table 38; Linux ``rxe_opcode.c``; for XRC (IBA
Annex A14) and the Memory Placement Extensions (FLUSH 0x1C, ATOMIC WRITE 0x1D) Linux
``include/rdma/ib_pack.h``.  XRC requests carry an XRCETH before the RC headers; XRC responses
do not (Annex A14.6.1).  RoCEv2 congestion notification packets use opcode 0x81 (RoCEv2 Annex
A17.9.3) and carry 16 reserved bytes.
"""

from __future__ import annotations

from rdmalab.wire.ib import (
    ACK_OPCODE,
    CNP_OPCODE,
    OPCODES,
    REQUEST_OPCODES,
    RESPONSE_OPCODES,
    Op,
    OpcodeInfo,
    Pos,
    Transport,
    find_opcode,
    opcode_info,
    opcode_name,
)

__all__ = ["ACK_OPCODE", "CNP_OPCODE", "OPCODES", "REQUEST_OPCODES", "RESPONSE_OPCODES", "Op", "OpcodeInfo", "Pos",
           "Transport", "find_opcode", "opcode_info", "opcode_name"]
