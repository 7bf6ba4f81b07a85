"""IEEE 802.1Qbb Priority-based Flow Control (PFC) frames: a MAC Control frame per link.

A PFC frame (IEEE 802.1Qbb-2011 clause 36, frame format in IEEE 802.3 Annex 31D) is an
Ethernet frame to the reserved multicast address 01-80-C2-00-00-01 with EtherType 0x8808
(MAC Control) and, after the EtherType:

* opcode 0x0101 (the classic 802.3x PAUSE is 0x0001);
* a 2-byte priority-enable vector: the high octet is zero, bit n of the low octet enables the
  time for priority (class) n;
* eight 2-byte pause times, priority 0 first, in *quanta* of 512 bit times (51.2 ns at 10 Gb/s,
  12.8 ns at 40 Gb/s, 5.12 ns at 100 Gb/s); a time of 0 with its enable bit set means XON;
* zero padding to the 60-byte minimum frame (26 bytes), then the FCS.

Frames here are written without the FCS, as Linux captures show them.  Wireshark's
``macc`` dissector (packet-maccontrol.c) decodes the same fields; ``tests/wire/test_pfc.py``
checks our frames against it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rdmalab.wire.errors import MalformedError, TruncatedError
from rdmalab.wire.header import F, Header, Layout, layout
from rdmalab.wire.net import Ethernet

ETHERTYPE_MAC_CONTROL = 0x8808
PFC_OPCODE = 0x0101
PAUSE_OPCODE = 0x0001
PFC_DST_MAC = 0x0180C2000001
QUANTUM_BITS = 512
MIN_FRAME = 60  # bytes without the FCS (IEEE 802.3 4.4.2: 64 with it)
MAX_QUANTA = 0xFFFF


@dataclass(frozen=True, slots=True)
class PFC(Header):
    """The MAC Control PFC body: opcode, class-enable vector, eight pause times (quanta)."""

    opcode: int = PFC_OPCODE
    enable: int = 0
    time0: int = 0
    time1: int = 0
    time2: int = 0
    time3: int = 0
    time4: int = 0
    time5: int = 0
    time6: int = 0
    time7: int = 0

    LAYOUT: ClassVar[Layout] = layout(
        "PFC",
        "IEEE 802.1Qbb-2011 clause 36; IEEE 802.3 Annex 31D (PFC frame)",
        F("opcode", 16, "macc.opcode", fmt="hex", const=PFC_OPCODE),
        F("enable", 16, "macc.cbfc.enbv", fmt="hex",
          doc="priority-enable vector (2 octets, the high one reserved): bit n enables priority n's time"),
        *(F(f"time{i}", 16, f"macc.cbfc.pause_time.c{i}", doc=f"pause time of priority {i}, quanta")
          for i in range(8)),
        ws="macc",
    )

    @property
    def times(self) -> tuple[int, ...]:
        return (self.time0, self.time1, self.time2, self.time3, self.time4, self.time5, self.time6, self.time7)

    def check(self, offset: int = 0) -> list[MalformedError]:
        problems = Header.check(self, offset)  # not super(): slots=True dataclasses break its cell
        if self.enable > 0xFF:
            problems.append(MalformedError("PFC", "enable", offset + 2, self.enable,
                                           "the high octet of the priority-enable vector reserved (zero)"))
        return problems

    def paused(self) -> dict[int, int]:
        """Enabled priority -> pause time in quanta (0 = resume)."""
        return {p: t for p, t in enumerate(self.times) if self.enable >> p & 1}

    def summary(self) -> str:
        parts = [f"p{p}={'XON' if t == 0 else t}" for p, t in self.paused().items()]
        return f"PFC({', '.join(parts) or 'no class enabled'})"


def pause_ns(quanta: int, rate_gbps: float) -> float:
    """How long ``quanta`` pause quanta last on a link of ``rate_gbps`` (512 bit times each)."""
    return quanta * QUANTUM_BITS / rate_gbps


def quanta_for(ns: float, rate_gbps: float) -> int:
    """The pause time (quanta, capped at 0xFFFF) that covers ``ns`` on a link of ``rate_gbps``."""
    return min(MAX_QUANTA, max(1, -(-int(ns * rate_gbps) // QUANTUM_BITS)))


def encode_pfc_frame(times: dict[int, int], *, src_mac: int = 0x020000000001) -> bytes:
    """A complete PFC frame (no FCS) pausing each priority in ``times`` for that many quanta.

    ``times`` maps priority (0..7) to quanta (0..0xFFFF; 0 resumes the priority).
    """
    enable = 0
    t = [0] * 8
    for prio, q in times.items():
        if not 0 <= prio <= 7:
            raise ValueError(f"PFC priority must be 0..7, not {prio}")
        if not 0 <= q <= MAX_QUANTA:
            raise ValueError(f"PFC pause time must be 0..{MAX_QUANTA} quanta, not {q}")
        enable |= 1 << prio
        t[prio] = q
    body = PFC(PFC_OPCODE, enable, *t).encode()
    frame = Ethernet(dst=PFC_DST_MAC, src=src_mac, ethertype=ETHERTYPE_MAC_CONTROL).encode() + body
    return frame + bytes(MIN_FRAME - len(frame))


def decode_pfc_frame(frame: bytes | bytearray | memoryview) -> PFC:
    """The PFC body of an Ethernet frame; raises a DecodeError naming what is wrong."""
    data = bytes(frame)
    eth = Ethernet.decode(data, 0)
    if eth.ethertype != ETHERTYPE_MAC_CONTROL:
        raise MalformedError("Ethernet", "ethertype", 12, eth.ethertype,
                             f"0x{ETHERTYPE_MAC_CONTROL:04x} (MAC Control) for a PFC frame")
    if len(data) < 14 + PFC.LAYOUT.size:
        raise TruncatedError("PFC", None, 14, len(data) - 14, f"{PFC.LAYOUT.size} bytes for the PFC body")
    pfc = PFC.decode(data, 14)
    problems = pfc.check(14)
    if problems:
        raise problems[0]
    return pfc


def is_pfc_frame(frame: bytes | bytearray | memoryview) -> bool:
    return len(frame) >= 16 and frame[12] == 0x88 and frame[13] == 0x08 and frame[14] == 0x01 and frame[15] == 0x01
