"""Checkers for 07-four-wires: a BTH by hand, an ICRC by hand, a CRC32c, which wire is which.

The BTH to build, the frame whose ICRC is computed and the iWARP capture whose FPDUs are checked are
each learner's own (:mod:`rdmalab.lab.variant`): the notebook shows ``lab.scenario("wires.bth")`` and
gets its frame and capture from :func:`icrc_frame` and :func:`crc_capture`, and the checkers build the
same ones again from the same seed.  Which wire is which, and what iWARP adds to an FPDU, are the same
for everyone.
"""

from __future__ import annotations

import functools
import random
import tempfile
import zlib
from pathlib import Path
from typing import Any

from rdmalab import capture
from rdmalab.lab.core import Wrong, exercise
from rdmalab.lab.env import capture_path
from rdmalab.lab.feedback import as_bytes, as_int, compare_header, norm_name, nth
from rdmalab.lab.owncaptures import OwnCapture, damaged_iwarp_capture
from rdmalab.lab.samples import mystery_frames
from rdmalab.lab.variant import draw, scenario
from rdmalab.viz.crcsteps import icrc_steps
from rdmalab.wire.crc import icrc_rocev2
from rdmalab.wire.frame import decode_ethernet
from rdmalab.wire.ib import BTH
from rdmalab.wire.iwarp import DDP_TAGGED_SIZE
from rdmalab.wire.mpa import MPA_CRC_SIZE, MPA_HEADER_SIZE
from rdmalab.wire.opcodes import OPCODES, Op, Pos, Transport, find_opcode

NB = "07-four-wires"

#: The operations whose BTH a learner may be asked to build: (transport, operation, with immediate).
_BTH_OPERATIONS = ((Transport.RC, Op.SEND, False), (Transport.RC, Op.SEND, True),
                   (Transport.RC, Op.RDMA_WRITE, False), (Transport.RC, Op.RDMA_WRITE, True),
                   (Transport.UC, Op.SEND, False), (Transport.UC, Op.RDMA_WRITE, False))


@scenario("wires.bth")
def _bth_scenario(r: random.Random) -> dict[str, Any]:
    transport, op, imm = r.choice(_BTH_OPERATIONS)
    code = find_opcode(transport, op, Pos.ONLY, imm=imm)
    completes_a_receive = op == Op.SEND or imm  # only such a packet may ask for a solicited event
    return {"operation": OPCODES[code].name, "opcode": code,
            "se": r.randint(0, 1) if completes_a_receive else 0,
            "padcnt": r.randint(1, 3),
            "p_key": r.choice((0xFFFF, 0x8001, 0x8002, 0x8010)),
            "destqp": r.randrange(0x12, 1 << 24),
            "ackreq": r.randint(0, 1) if transport == Transport.RC else 0,  # UC is never acknowledged
            "psn": r.getrandbits(24)}


def bth_task() -> BTH:
    """The BTH the current learner is asked to build (the values of ``lab.scenario("wires.bth")``)."""
    s = draw("wires.bth")
    return BTH(opcode=s.opcode, se=s.se, padcnt=s.padcnt, p_key=s.p_key, destqp=s.destqp, ackreq=s.ackreq,
               psn=s.psn)


@exercise("wires.bth", "Build a BTH by hand", notebook=NB, varies=True, hints=(
    "A BTH is 12 bytes: opcode | SE M PadCnt TVer | P_Key (2) | FECN BECN resv6 | DestQP (3) | A resv7 | PSN (3).",
    "Byte 1 packs four fields: SE is bit 7, MigReq bit 6, PadCnt bits 5-4, TVer bits 3-0 (MigReq=1 with PadCnt=2 "
    "would be 0b0110_0000 = 0x60). Byte 8 holds AckReq in bit 7, the rest of it reserved.",
    "int.to_bytes(n, length, 'big') writes a field big-endian; bytes([...]) + ... joins them.",
))
def _bth(answer: Any) -> str:
    try:
        compare_header(bth_task(), answer)
    except Wrong as wrong:
        if len(wrong.details) >= 4:  # most fields: values from another scenario than this learner's, or none
            wrong.details.append("most fields differ: the values to encode are those of lab.scenario('wires.bth') "
                                 "(bth_task in the notebook), which are yours alone")
        raise
    return "Every field of your BTH decodes to the value your scenario asks for."


#: The QP the captured CNP went to: the notebook works through that frame's ICRC step by step, so the
#: exercise's frame always goes to another one.
CAPTURED_DESTQP = 0x000118


@scenario("wires.icrc")
def _icrc_scenario(r: random.Random) -> dict[str, Any]:
    destqp = CAPTURED_DESTQP
    while destqp == CAPTURED_DESTQP:
        destqp = r.randrange(0x12, 1 << 24)
    return {"destqp": destqp}


def _true_frame(destqp: int | None = None) -> bytes:
    """The ConnectX-4 CNP of the hardware capture, sent to ``destqp`` (the learner's scenario's), with its
    ICRC recomputed (rdmalab.wire.crc, which matches the NIC's on the captured frame)."""
    if destqp is None:
        destqp = draw("wires.icrc").destqp
    frame = bytearray(next(iter(capture.read(capture_path("public_hw_byte_vectors.pcap")))).packet.data)
    frame[14 + 20 + 8 + 5:14 + 20 + 8 + 8] = destqp.to_bytes(3, "big")  # BTH DestQP (bytes 5-7)
    frame[-4:] = icrc_rocev2(bytes(frame[14:-4])).to_bytes(4, "little")
    return bytes(frame)


def icrc_frame(destqp: int | None = None) -> bytes:
    """The exercise frame: a CNP like the ConnectX-4 one, to the QP of your scenario, with its ICRC blanked."""
    return _true_frame(destqp)[:-4] + b"\x00\x00\x00\x00"


@exercise("wires.icrc", "Compute an ICRC by hand", notebook=NB, varies=True, hints=(
    "Start from the IPv4 header (byte 14), stop before the last 4 bytes, and put 8 bytes of 0xff in front.",
    "Mask to ones: IPv4 TOS (byte 15), TTL (22), header checksum (24-25), UDP checksum (40-41), BTH byte 4 (46).",
    "zlib.crc32(data) gives the value; the wire carries it least-significant byte first: crc.to_bytes(4, 'little').",
))
def _icrc(answer: Any) -> str:
    destqp = draw("wires.icrc").destqp
    steps = icrc_steps(decode_ethernet(_true_frame(destqp)))
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
        return (f"Correct, {form}: the CRC-32 of the masked input is 0x{want:08x}, as rdmalab.wire.crc computes it "
                f"for this frame.")
    if not as_int_given and int.from_bytes(as_bytes(answer, ""), "big") == want:
        raise Wrong("Right value, wrong byte order: the ICRC goes on the wire least-significant byte first.",
                    field="ICRC", offset=70, details=["use crc.to_bytes(4, 'little')"], expected=expected)
    frame = icrc_frame(destqp)
    covered = frame[14:-4]
    masked = steps.masked_input
    diagnoses = {
        zlib.crc32(b"\xff" * 8 + covered): "you did not mask the variant fields (TOS, TTL, IP checksum, "
                                           "UDP checksum, BTH byte 4) to ones",
        zlib.crc32(masked[8:]): "you left out the 8 bytes of 0xff that stand in for the LRH",
        zlib.crc32(frame[:14] + masked[8:]): "the ICRC does not cover the Ethernet header; start at the IP header",
        zlib.crc32(masked + b"\x00" * 4): "you included the ICRC's own 4 bytes; stop before them",
        zlib.crc32(masked) ^ 0xFFFFFFFF: "you left out the final XOR with 0xffffffff (zlib.crc32 does it for you)",
        icrc_rocev2(_true_frame(CAPTURED_DESTQP)[14:-4]): f"that is the ICRC of the captured frame of the walk-through "
                                                          f"(to QP {CAPTURED_DESTQP:#08x}); compute it on icrc_frame(), "
                                                          f"which goes to QP {destqp:#08x}",
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


@scenario("wires.crc32c")
def _crc32c_scenario(r: random.Random) -> dict[str, Any]:
    return {"engine_seed": r.getrandbits(32), "send_bytes": r.randrange(100, 1400),
            "write_bytes": r.randrange(4000, 9000), "read_bytes": r.randrange(2000, 5000)}


def crc_capture(directory: str | Path | None = None) -> OwnCapture:
    """Your iWARP capture for the CRC32c exercise, written to ``directory`` (a temporary folder if None):
    the SEND, RDMA WRITE and RDMA READ of ``lab.scenario("wires.crc32c")`` between two soft iWARP devices
    that negotiated CRC32c, with some FPDUs damaged afterwards (:func:`rdmalab.lab.owncaptures.damaged_iwarp_capture`)."""
    s = draw("wires.crc32c")
    return damaged_iwarp_capture(s.engine_seed, send=s.send_bytes, write=s.write_bytes, read_back=s.read_bytes,
                                 directory=directory)


@functools.lru_cache(maxsize=64)
def _damaged(engine_seed: int, send: int, write: int, read_back: int) -> tuple[int, tuple[int, ...]]:
    """(how many CRC32c FPDUs, the indexes of those whose CRC32c fails), from the capture made again."""
    with tempfile.TemporaryDirectory(prefix="rdmalab-check-") as tmp:
        own = damaged_iwarp_capture(engine_seed, send=send, write=write, read_back=read_back, directory=tmp)
        fpdus = [p for cp in capture.read(own.path) for p in cp.pdus if p.crc_kind == "crc32c"]
    bad = tuple(i for i, p in enumerate(fpdus) if p.crc != p.crc_expected)
    if list(bad) != own.facts["damaged"]:
        raise RuntimeError(f"the capture's failing FPDUs {list(bad)} are not the damaged ones {own.facts['damaged']}")
    return len(fpdus), bad


@exercise("wires.crc32c", "Check an FPDU's CRC32c", notebook=NB, varies=True, hints=(
    "The MPA CRC covers the FPDU from its 2-byte ULPDU_Length through the pad: everything before the last 4 bytes.",
    "rdmalab.wire.crc.crc32c(data) computes CRC32c; compare it with the last 4 bytes read little-endian.",
    "Number the FPDUs as the notebook's list does: only those with a CRC32c (not the MPA Request and Reply), "
    "from 0, in capture order.",
))
def _crc32c(answer: Any) -> str:
    s = draw("wires.crc32c")
    total, bad_t = _damaged(s.engine_seed, s.send_bytes, s.write_bytes, s.read_bytes)
    bad = list(bad_t)
    expected = f"the 0-based indexes, among the {total} FPDUs, of those whose CRC32c does not match"
    if isinstance(answer, (set, frozenset)):
        answer = sorted(answer)
    if not isinstance(answer, (list, tuple)):
        one = f" (a list even for one: [{answer}])" if isinstance(answer, int) else ""
        raise Wrong(f"Give a list of the FPDU indexes (0-based, in capture order) whose CRC is wrong; got a "
                    f"{type(answer).__name__}{one}.", field="MPA CRC", expected=expected)
    got = sorted(as_int(a, "an FPDU index", field="MPA CRC") for a in answer)
    if got == bad:
        return (f"Yes: FPDUs {bad} fail their CRC32c ({total} FPDUs checked). TCP's checksum holds on every one of "
                f"them: two 16-bit words that trade places leave a one's-complement sum as it was.")
    details = []
    outside = [g for g in got if not 0 <= g < total]
    if got and [g - 1 for g in got] == bad:
        details.append("every index is one too high: the indexes count from 0")
    elif outside:
        raise Wrong(f"There are {total} FPDUs with a CRC32c, numbered 0 to {total - 1}; {outside} "
                    f"{'is' if len(outside) == 1 else 'are'} not among them.", field="MPA CRC", expected=expected)
    elif not got:
        details.append("your list is empty, yet some FPDUs' CRC32c does not match their bytes (their TCP checksums "
                       "are all good: only the CRC32c shows the damage)")
    elif got == list(range(total)):
        details.append("every FPDU is in your list, so no CRC you computed matched: check that the CRC input stops "
                       "before the last 4 bytes, and that you read those 4 bytes little-endian")
    else:
        extra = sorted(set(got) - set(bad))
        missing = sorted(set(bad) - set(got))
        if extra:
            details.append(f"FPDU(s) {extra} have a correct CRC32c")
        if missing:
            details.append(f"{len(missing)} FPDU(s) with a bad CRC32c are missing from your list")
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
