"""Checkers for 00-welcome."""

from __future__ import annotations

from typing import Any

from rdmalab import capture
from rdmalab.lab.core import Wrong, exercise
from rdmalab.lab.env import capture_path
from rdmalab.lab.feedback import norm_name
from rdmalab.wire.opcodes import OPCODES, opcode_name

HW = "public_hw_byte_vectors.pcap"


def _packets() -> list[Any]:
    return list(capture.read(capture_path(HW)))


@exercise("welcome.opcode", "Name the operation in frame 4 of the hardware capture", notebook="00-welcome", hints=(
    "Draw frame 4 with viz.hexdump(packets[3]) (the list counts from 0) and hover over its yellow BTH bytes, "
    "or print packets[3].packet.summary().",
    "The opcode is BTH byte 0; its name comes from rdmalab.wire.opcode_name(code).",
))
def _opcode(answer: Any) -> str:
    pkts = _packets()
    want = pkts[3].packet.opcode_name
    code = pkts[3].packet.bth.opcode
    expected = "the name of frame 4's BTH opcode, as rdmalab.wire.opcode_name() spells it (or the opcode number)"
    if isinstance(answer, int) and not isinstance(answer, bool):  # the opcode number (an IntEnum member too)
        given_name = opcode_name(int(answer)) if 0 <= answer < 256 else f"not an opcode ({int(answer)})"
    elif isinstance(answer, str):
        given_name = answer
        try:
            given_name = opcode_name(int(answer, 0))  # '0x0c' or '12'
        except ValueError:
            pass
    else:
        raise Wrong(f"Give the operation's name as a string (e.g. 'RC SEND Only') or its opcode number; got a "
                    f"{type(answer).__name__}.", field="BTH.opcode", offset=42, expected=expected)
    if norm_name(given_name) == norm_name(want):
        return f"Yes: frame 4 is an {want}: BTH byte 0 is 0x{code:02x}."
    for cp in pkts:
        if cp.packet.opcode_name and norm_name(given_name) == norm_name(cp.packet.opcode_name):
            raise Wrong(f"{given_name!r} is the operation of frame {cp.frame_number}, not of frame 4.",
                        field="BTH.opcode", offset=42, expected=expected)
    given = norm_name(given_name)
    if given in {norm_name(info.name) for info in OPCODES.values()}:
        raise Wrong(f"{given_name!r} is an opcode, but not frame 4's: read frame 4's own BTH opcode, byte 42 of the "
                    "frame.", field="BTH.opcode", offset=42, expected=expected)
    if len(given) >= 3 and given in norm_name(want):
        raise Wrong(f"{answer!r} is only part of the name: give the whole name, as rdmalab.wire.opcode_name() spells "
                    "it, transport first (like 'RC SEND Only').", field="BTH.opcode", offset=42, expected=expected)
    raise Wrong(f"{answer!r} is not the name rdmalab gives frame 4's opcode. Give the name as "
                "rdmalab.wire.opcode_name() spells it, e.g. 'RC SEND Only'.", field="BTH.opcode", offset=42,
                expected=expected)
