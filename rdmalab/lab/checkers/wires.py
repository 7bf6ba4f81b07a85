"""Checkers for 07-four-wires: a BTH by hand, an ICRC by hand, a CRC32c, which wire is which."""

from __future__ import annotations

import zlib
from typing import Any

from rdmalab import capture
from rdmalab.lab.core import Wrong, exercise
from rdmalab.lab.env import capture_path
from rdmalab.lab.feedback import as_bytes, as_int, compare_header, norm_name, nth
from rdmalab.lab.samples import mystery_frames
from rdmalab.viz.crcsteps import icrc_steps
from rdmalab.wire.crc import icrc_rocev2
from rdmalab.wire.frame import decode_ethernet
from rdmalab.wire.ib import BTH
from rdmalab.wire.opcodes import Op, Pos, Transport, find_opcode

NB = "07-four-wires"

#: The BTH the exercise asks for (the notebook states these values in words).
BTH_TASK = BTH(opcode=find_opcode(Transport.RC, Op.SEND, Pos.ONLY), se=1, padcnt=3, p_key=0xFFFF, destqp=0x0000D2, ackreq=1, psn=0x1234)


@exercise("wires.bth", "Build a BTH by hand", notebook=NB, hints=(
    "A BTH is 12 bytes: opcode | SE M PadCnt TVer | P_Key (2) | FECN BECN resv6 | DestQP (3) | A resv7 | PSN (3).",
    "Byte 1 packs four fields: SE is bit 7, MigReq bit 6, PadCnt bits 5-4, TVer bits 3-0. SE=1 and PadCnt=3 give 0xb0.",
    "int.to_bytes(n, length, 'big') writes a field big-endian; bytes([...]) + ... joins them.",
))
def _bth(answer: Any) -> str:
    compare_header(BTH_TASK, answer)
    return "Every field of your BTH decodes to the requested value."


#: The exercise's CNP goes to this QP instead of the captured one (0x000118): the notebook works through
#: the captured frame's ICRC step by step, so the exercise's answer must be another frame's.
EXERCISE_DESTQP = 0x0002A7


def _true_frame() -> bytes:
    """The ConnectX-4 CNP of the hardware capture, sent to :data:`EXERCISE_DESTQP`, with its ICRC
    recomputed (rdmalab.wire.crc, which matches the NIC's on the captured frame)."""
    frame = bytearray(next(iter(capture.read(capture_path("public_hw_byte_vectors.pcap")))).packet.data)
    frame[14 + 20 + 8 + 5:14 + 20 + 8 + 8] = EXERCISE_DESTQP.to_bytes(3, "big")  # BTH DestQP (bytes 5-7)
    frame[-4:] = icrc_rocev2(bytes(frame[14:-4])).to_bytes(4, "little")
    return bytes(frame)


def icrc_frame() -> bytes:
    """The exercise frame: a CNP like the ConnectX-4 one, to QP 0x0002a7, with its ICRC blanked."""
    return _true_frame()[:-4] + b"\x00\x00\x00\x00"


@exercise("wires.icrc", "Compute an ICRC by hand", notebook=NB, hints=(
    "Start from the IPv4 header (byte 14), stop before the last 4 bytes, and put 8 bytes of 0xff in front.",
    "Mask to ones: IPv4 TOS (byte 15), TTL (22), header checksum (24-25), UDP checksum (40-41), BTH byte 4 (46).",
    "zlib.crc32(data) gives the value; the wire carries it least-significant byte first: crc.to_bytes(4, 'little').",
))
def _icrc(answer: Any) -> str:
    steps = icrc_steps(decode_ethernet(_true_frame()))
    want = steps.crc
    expected = "the CRC-32 of the masked frame: 4 bytes least-significant first (crc.to_bytes(4, 'little')), or the integer"
    if isinstance(answer, str) and answer.strip().lower().startswith("0x"):
        answer = as_int(answer, "your ICRC", field="ICRC")  # '0x2a00fd82' is the integer written in hex
    if isinstance(answer, int) and not isinstance(answer, bool):
        got_val, as_int_given = int(answer), True
        if not 0 <= got_val < 1 << 32:
            raise Wrong(f"{got_val:#x} does not fit in 32 bits; a CRC-32 is 32 bits.", field="ICRC", offset=70,
                        expected=expected)
    else:
        raw = as_bytes(answer, "your ICRC", field="ICRC")
        if len(raw) != 4:
            raise Wrong(f"The ICRC is 4 bytes; you gave {len(raw)}.", field="ICRC", offset=70, given=raw,
                        expected=expected)
        got_val, as_int_given = int.from_bytes(raw, "little"), False
    if got_val == want:
        form = "as an integer" if as_int_given else f"as the wire bytes {steps.wire_bytes.hex(' ')}"
        return f"Correct, {form}: CRC-32 of the masked input is 0x{want:08x}, and it matches the hardware's ICRC."
    if not as_int_given and int.from_bytes(as_bytes(answer, ""), "big") == want:
        raise Wrong("Right value, wrong byte order: the ICRC goes on the wire least-significant byte first.",
                    field="ICRC", offset=70, details=["use crc.to_bytes(4, 'little')"], expected=expected)
    frame = icrc_frame()
    covered = frame[14:-4]
    masked = steps.masked_input
    diagnoses = {
        zlib.crc32(b"\xff" * 8 + covered): "you did not mask the variant fields (TOS, TTL, IP checksum, "
                                           "UDP checksum, BTH byte 4) to ones",
        zlib.crc32(masked[8:]): "you left out the 8 bytes of 0xff that stand in for the LRH",
        zlib.crc32(frame[:14] + masked[8:]): "the ICRC does not cover the Ethernet header; start at the IP header",
        zlib.crc32(masked + b"\x00" * 4): "you included the ICRC's own 4 bytes; stop before them",
        zlib.crc32(masked) ^ 0xFFFFFFFF: "you left out the final XOR with 0xffffffff (zlib.crc32 does it for you)",
    }
    unmasked = b"\xff" * 8 + covered
    groups: dict[str, list[Any]] = {}
    for m in steps.masked:  # everything right except one field, or one header's fields, left unmasked
        groups.setdefault(f"{m.layer}.{m.field} (frame byte {m.offset})", []).append(m)
        groups.setdefault(f"the variant fields of the {m.layer} header", []).append(m)
    for why, fields in groups.items():
        b = bytearray(masked)
        for m in fields:  # put back exactly this field's bits, as they were on the wire
            for bit in range(m.bit0 - 14 * 8 + 64, m.bit0 - 14 * 8 + 64 + m.bits):
                mask = 0x80 >> (bit % 8)
                b[bit // 8] = (b[bit // 8] & ~mask) | (unmasked[bit // 8] & mask)
        diagnoses.setdefault(zlib.crc32(bytes(b)), f"you did not mask {why}")
    for val, why in diagnoses.items():
        for cand in (val, int.from_bytes(val.to_bytes(4, "little"), "big")):
            if got_val == cand:
                raise Wrong(f"Not the ICRC: {why}.", field="ICRC", offset=70, expected=expected)
    raise Wrong("That is not the ICRC of this frame, and not one of the usual slips either. Recompute step by "
                "step: coverage (bytes 14..69), the 0xff prefix, the masks, CRC-32, byte order.", field="ICRC",
                offset=70, expected=expected)


@exercise("wires.crc32c", "Check an FPDU's CRC32c", notebook=NB, hints=(
    "The MPA CRC covers the FPDU from its 2-byte ULPDU_Length through the pad: everything before the last 4 bytes.",
    "rdmalab.wire.crc.crc32c(data) computes CRC32c; compare it with the last 4 bytes read little-endian.",
))
def _crc32c(answer: Any) -> str:
    pdus = [p for cp in capture.read(capture_path("synthetic_iwarp_mpa_crc.pcap")) for p in cp.pdus
            if p.crc_kind == "crc32c"]
    bad = [i for i, p in enumerate(pdus) if p.crc != p.crc_expected]
    expected = f"the 0-based indexes, among the {len(pdus)} FPDUs, of those whose CRC32c does not match"
    if isinstance(answer, (set, frozenset)):
        answer = sorted(answer)
    if not isinstance(answer, (list, tuple)):
        one = f" (a list even for one: [{answer}])" if isinstance(answer, int) else ""
        raise Wrong(f"Give a list of the FPDU indexes (0-based, in capture order) whose CRC is wrong; got a "
                    f"{type(answer).__name__}{one}.", field="MPA CRC", expected=expected)
    got = sorted(as_int(a, "an FPDU index", field="MPA CRC") for a in answer)
    if got == bad:
        return f"Yes: only FPDU {bad} fails its CRC32c ({len(pdus)} FPDUs checked)."
    extra = sorted(set(got) - set(bad))
    missing = sorted(set(bad) - set(got))
    details = []
    if extra:
        details.append(f"FPDU(s) {extra} have a correct CRC32c")
    if missing:
        details.append(f"{len(missing)} FPDU(s) with a bad CRC are missing from your list")
    if got and [g - 1 for g in got] == bad:
        details.insert(0, "every index is one too high: the indexes count from 0")
    raise Wrong("Your list of bad FPDUs is not right.", field="MPA CRC", details=details, expected=expected)


@exercise("wires.which", "Which wire is which?", notebook=NB, hints=(
    "Look at the EtherType (bytes 12-13): 0x8915 is RoCEv1, 0x0800 is IPv4.",
    "After IPv4: protocol 17 (UDP) to port 4791 is RoCEv2, protocol 6 (TCP) is iWARP. An LRH has no Ethernet at all.",
))
def _which(answer: Any) -> str:
    want = [kind for kind, _ in mystery_frames()]
    names = {"ib": "IB", "rocev1": "ROCEV1", "rocev2": "ROCEV2", "iwarp": "IWARP"}
    expected = "one of 'IB', 'RoCEv1', 'RoCEv2', 'iWARP' per frame, read from the EtherType and the IP protocol"
    if not isinstance(answer, (list, tuple)) or len(answer) != len(want):
        raise Wrong(f"Give a list of {len(want)} names, one per frame, e.g. ['RoCEv2', 'IB', 'iWARP', 'RoCEv1'].",
                    field="frames", expected=f"a list of {len(want)} names")
    for i, (a, w) in enumerate(zip(answer, want, strict=True)):
        if norm_name(a).replace("NATIVE", "") != names[w]:
            where = "LRH" if w == "ib" else "Ethernet.type"
            raise Wrong(f"The {nth(i)} frame (names[{i}], printed as {i} above) is not {a!r}.",
                        field=f"names[{i}]: {where}", offset=12 if w != "ib" else 0,
                        given=a, expected=expected, details=[
                            "check its first bytes: an Ethernet frame has its EtherType at bytes 12-13"])
    return "All four identified: the same WRITE, four encapsulations."


@exercise("wires.iwarp_overhead", "What iWARP adds to each FPDU", notebook=NB, hints=(
    "Take the RDMA Write PDUs of iwarp_run: [p for cp in iwarp_run.packets for p in cp.pdus if p.info.startswith('RDMA Write')].",
    "p.data is the whole FPDU (ULPDU_Length through the CRC); p.payload is the data it places. The difference is iWARP's own bytes.",
    "Count MPA's 2-byte length and 4-byte CRC, DDP's tagged header (the RDMAP control byte is inside it) and any pad; "
    "not Ethernet, IPv4 or TCP.",
))
def _iwarp_overhead(answer: Any) -> str:
    from rdmalab.wire.iwarp import DDP_TAGGED_SIZE
    from rdmalab.wire.mpa import MPA_CRC_SIZE, MPA_HEADER_SIZE

    want = MPA_HEADER_SIZE + DDP_TAGGED_SIZE + MPA_CRC_SIZE  # the Write FPDUs of 1454-byte ULPDUs have no pad
    expected = "one number of bytes: an RDMA Write FPDU's length field, DDP/RDMAP header, pad and CRC"
    got = as_int(answer, "your byte count", field="FPDU")
    if got == want:
        return (f"Yes: {want} bytes per FPDU (2 ULPDU_Length + {DDP_TAGGED_SIZE} DDP tagged header with the RDMAP "
                f"control byte + 0 pad + 4 CRC32c); TCP/IPv4/Ethernet add 54 more per segment.")
    slips = {
        want - MPA_CRC_SIZE: "you left out the 4-byte CRC32c at the end (it is there even when CRC is not "
                             "negotiated: zeros)",
        want - MPA_HEADER_SIZE: "you left out MPA's 2-byte ULPDU_Length in front",
        DDP_TAGGED_SIZE: "that is only the DDP tagged header; MPA adds its length field and its CRC",
        want + 54: "that includes Ethernet, IPv4 and TCP (54 bytes); count only iWARP's own layers",
        3 * want: "that is all three Write FPDUs together; give it per FPDU",
        want + 4: "the untagged DDP header is 18 bytes, but RDMA Write is tagged (14)",
    }
    if got in slips:
        raise Wrong(f"Not quite: {slips[got]}.", field="FPDU", given=got, expected=expected)
    raise Wrong(f"{got} is not what iWARP adds to an RDMA Write FPDU here.", field="FPDU", given=got,
                expected=expected, details=["compare len(p.data) with len(p.payload) for one Write PDU"])
