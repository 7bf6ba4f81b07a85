"""Checkers for 00-welcome."""

from __future__ import annotations

from typing import Any

from rdmalab.lab.core import Wrong, exercise
from rdmalab.lab.env import capture_path
from rdmalab.lab.feedback import norm_name

HW = "public_hw_byte_vectors.pcap"


def _packets() -> list[Any]:
    from rdmalab import capture

    return list(capture.read(capture_path(HW)))


@exercise("welcome.opcode", "Name the operation in frame 4 of the hardware capture", notebook="00-welcome", hints=(
    "Hover over the yellow BTH bytes in the hex dump of frame 4, or print packets[3].packet.summary().",
    "The opcode is BTH byte 0; its name comes from rdmalab.wire.opcode_name(code).",
))
def _opcode(answer: Any) -> str:
    pkts = _packets()
    want = pkts[3].packet.opcode_name
    if norm_name(answer) == norm_name(want):
        return f"Yes: frame 4 is an {want}: BTH byte 0 is 0x{pkts[3].packet.bth.opcode:02x}."
    for cp in pkts:
        if cp.packet.opcode_name and norm_name(answer) == norm_name(cp.packet.opcode_name):
            raise Wrong(f"{answer!r} is the operation of frame {cp.frame_number}, not of frame 4.",
                        field="BTH.opcode", offset=42)
    raise Wrong(f"{answer!r} is not the name rdmalab gives frame 4's opcode. Give the name as "
                "rdmalab.wire.opcode_name() spells it, e.g. 'RC SEND Only'.", field="BTH.opcode")
