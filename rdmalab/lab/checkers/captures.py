"""Checkers for 08-captures: find a key in your own rping capture, compare rdmalab with Wireshark.

The rkey and the STag are read off captures the engine makes for each learner (:func:`my_rping`: rping
between two soft RoCEv2 devices, and between two soft iWARP devices, from the seeds of
``lab.scenario("captures.rkey")`` and ``lab.scenario("captures.stag")``); the checkers make the same
captures again in their own process.  How far rdmalab and Wireshark agree is asked of a third capture of
the learner's own (:func:`my_long_rping`: longer buffers, more cycles), which the checker makes again and
cross-checks with tshark.
"""

from __future__ import annotations

import functools
import random
import tempfile
from pathlib import Path
from typing import Any

from rdmalab.capture.crosscheck import crosscheck, tshark_path
from rdmalab.lab.core import CannotCheck, Wrong, exercise
from rdmalab.lab.env import capture_path
from rdmalab.lab.feedback import as_int
from rdmalab.lab.owncaptures import OwnCapture, rping_capture
from rdmalab.lab.variant import draw, scenario
from rdmalab.wire.ib import RETH

NB = "08-captures"

#: The keys in the kernel's captures (captures/MANIFEST.md), which are not a learner's answer.
KERNEL_RKEY = ("rxe_rping.pcap", 0x142A)  # advertised in frame 4, used by the READ in frame 6
KERNEL_STAG = ("siw_rping.pcap", 0x6F092200)  # the first RDMA Write's, frame 13
_TRANSPORT = {"captures.rkey": "roce", "captures.stag": "iwarp"}


def _rping_scenario(r: random.Random) -> dict[str, Any]:
    return {"engine_seed": r.getrandbits(32), "rping_size": r.randrange(64, 257, 8), "rping_cycles": r.randint(1, 3),
            "mrs_registered_before": r.randrange(0, 2000)}


scenario("captures.rkey")(_rping_scenario)
scenario("captures.stag")(_rping_scenario)


def _run(key: str, directory: str | Path | None) -> OwnCapture:
    s = draw(key)
    return rping_capture(s.engine_seed, transport=_TRANSPORT[key], size=s.rping_size, count=s.rping_cycles,
                         registered_before=s.mrs_registered_before, directory=directory)


def my_rping(transport: str, directory: str | Path | None = None) -> OwnCapture:
    """Your rping capture: ``"roce"`` (two soft RoCEv2 devices, the rkey exercise's) or ``"iwarp"`` (two
    soft iWARP devices, the STag exercise's), written to ``directory`` (a temporary folder if None)."""
    keys = {t: k for k, t in _TRANSPORT.items()}
    if transport not in keys:
        raise ValueError(f"transport {transport!r}: 'roce' or 'iwarp'")
    return _run(keys[transport], directory)


@functools.lru_cache(maxsize=64)
def _facts(key: str, engine_seed: int, size: int, cycles: int, before: int) -> tuple[dict[str, Any], list[Any]]:
    """What the checker needs of a capture made again: the run's facts and the decoded frames."""
    with tempfile.TemporaryDirectory(prefix="rdmalab-check-") as tmp:
        own = rping_capture(engine_seed, transport=_TRANSPORT[key], size=size, count=cycles,
                            registered_before=before, directory=tmp)
    return own.facts, own.packets


def _again(key: str) -> tuple[dict[str, Any], list[Any]]:
    s = draw(key)
    return _facts(key, s.engine_seed, s.rping_size, s.rping_cycles, s.mrs_registered_before)


def _where(cps: list[Any], value: int) -> str | None:
    """Name a header field of the capture that holds ``value`` (to say what a wrong answer is)."""
    for cp in cps:
        for p in (cp.packet, *cp.pdus):
            for s in p.spans():
                if isinstance(s.value, int) and s.value == value and s.layer not in ("Ethernet",):
                    return f"{s.layer}.{s.field} of frame {cp.frame_number}"
    return None


@exercise("captures.rkey", "Find the rkey in your rping capture", notebook=NB, varies=True, hints=(
    "rping's client tells the server where its buffer is in its first SEND: the 16-byte payload of frame 4 is "
    "address (8 bytes), rkey (4), length (4), big-endian.",
    "The server then uses that rkey in the RETH of an RDMA READ Request: check your answer there.",
))
def _rkey(answer: Any) -> str:
    facts, cps = _again("captures.rkey")
    adv = int.from_bytes(cps[3].packet.payload[8:12], "big")
    start_key, sink_key = facts["start"][1], facts["sink"][1]
    if adv != start_key:
        raise RuntimeError(f"frame 4 advertises {adv:#x}, the client's start buffer has {start_key:#x}")
    read = next(cp for cp in cps if cp.packet.get(RETH) is not None and cp.packet.opcode_name == "RC RDMA READ Request")
    got = as_int(answer, "an rkey", field="RETH.r_key")
    expected = "the 32-bit rkey advertised in bytes 8-11 of frame 4's payload in your capture (big-endian)"
    if got == adv:
        return (f"Yes: rkey {adv:#x}, advertised in frame 4's payload and used by the READ in frame "
                f"{read.frame_number}. Its upper 24 bits, {adv >> 8}, number the MR on the device; the low 8 are "
                f"random.")
    if 0 <= got < 1 << 32 and int.from_bytes(got.to_bytes(4, "little"), "big") == adv:
        raise Wrong("Right bytes, wrong byte order: rping sends its fields big-endian.", field="RETH.r_key",
                    offset=62, expected=expected)
    if got == sink_key:
        raise Wrong(f"{got:#x} is the rkey of the client's other buffer, which it advertises in its second SEND "
                    "(the one the server writes into); the question is about the first SEND, frame 4.",
                    field="RETH.r_key", expected=expected)
    if got == KERNEL_RKEY[1]:
        raise Wrong(f"{got:#x} is the rkey in captures/{KERNEL_RKEY[0]}, the kernel's rping; read yours, in the "
                    "capture the engine made for you (frame 4 of my_rping('roce')).", field="RETH.r_key",
                    expected=expected)
    where = _where(cps, got)
    raise Wrong(f"{got:#x} is not the rkey" + (f": it is {where}." if where else "."), field="RETH.r_key",
                expected=expected)


@exercise("captures.stag", "Find the STag in your siw rping capture", notebook=NB, varies=True, hints=(
    "On iWARP the rkey is called an STag; a tagged DDP segment (RDMA Write, Read Response) carries it.",
    "Look at the DDP header of the first RDMA Write FPDU: its stag field.",
))
def _stag(answer: Any) -> str:
    facts, cps = _again("captures.stag")
    writes = [p for cp in cps for p in cp.pdus if p.summary().startswith("RDMA Write")]
    want = next(s.value for s in writes[0].spans() if s.field == "stag")
    if want != facts["sink"][1]:
        raise RuntimeError(f"the first RDMA Write carries {want:#x}, the client's sink buffer has {facts['sink']}")
    got = as_int(answer, "an STag", field="DDP.stag")
    expected = "the 32-bit STag in the DDP header of the first RDMA Write FPDU of your capture"
    if got == want:
        return (f"Yes: STag {want:#x}, the iWARP name for an rkey: the client advertised it for its sink buffer in "
                "its second SEND, and the server's RDMA Write steers its data there with it.")
    if 0 <= got < 1 << 32 and int.from_bytes(got.to_bytes(4, "little"), "big") == want:
        raise Wrong("Right bytes, wrong byte order: DDP fields are big-endian.", field="DDP.stag", expected=expected)
    if got == KERNEL_STAG[1]:
        raise Wrong(f"{got:#x} is the STag in captures/{KERNEL_STAG[0]}, the kernel's siw; read yours, in the "
                    "capture the engine made for you (my_rping('iwarp')).", field="DDP.stag", expected=expected)
    where = _where(cps, got)
    raise Wrong(f"{got:#x} is not the STag of the first RDMA Write" + (f": it is {where}." if where else "."),
                field="DDP.stag", expected=expected)


@scenario("captures.agree")
def _long_rping_scenario(r: random.Random) -> dict[str, Any]:
    # buffers of 2 to 16 packets at MTU 1024 and 2 to 8 cycles: the READs and WRITEs span several packets, so the
    # count of fields the two decoders compare depends on both (a classmate's count is one of about a hundred)
    return {"engine_seed": r.getrandbits(32), "rping_size": r.randrange(1100, 16001), "rping_cycles": r.randint(2, 8)}


def my_long_rping(directory: str | Path | None = None) -> OwnCapture:
    """Your third capture (exercise 3's): rping with the longer buffers and the cycles of
    ``lab.scenario("captures.agree")``, between two soft RoCEv2 devices, written to ``directory``."""
    s = draw("captures.agree")
    return rping_capture(s.engine_seed, transport="roce", size=s.rping_size, count=s.rping_cycles,
                         directory=directory, name="rping-roce-long.pcap")


@functools.lru_cache(maxsize=16)
def _agreement(engine_seed: int, size: int, cycles: int) -> tuple[int, int]:
    """(fields compared, fields that differ) of the cross-check of exercise 3's capture, made again here."""
    with tempfile.TemporaryDirectory(prefix="rdmalab-check-") as tmp:
        own = rping_capture(engine_seed, transport="roce", size=size, count=cycles, directory=tmp,
                            name="rping-roce-long.pcap")
        r = crosscheck(own.path)
    return r.fields_compared, r.fields_compared - r.agreements


@exercise("captures.agree", "How far do rdmalab and Wireshark agree?", notebook=NB, varies=True, hints=(
    "rdmalab.capture.crosscheck.crosscheck(path) compares every field of every frame with tshark.",
    "The report's fields_compared and agreements attributes count them; the ones that differ are the rest.",
))
def _agree(answer: Any) -> str:
    if tshark_path() is None:
        raise CannotCheck("this check runs tshark, which is not installed where it ran (Debian/Ubuntu: apt-get "
                          "install tshark); your answer was neither accepted nor refused.")
    if not isinstance(answer, (list, tuple)) or len(answer) != 2:
        raise Wrong("Give [fields compared, fields that differ].", field="answer",
                    expected="[report.fields_compared, fields that differ]")
    compared, differ = (as_int(x, "a count", field="crosscheck") for x in answer)
    s = draw("captures.agree")
    want_compared, want_differ = _agreement(s.engine_seed, s.rping_size, s.rping_cycles)
    expected = "the cross-check of your long capture (my_long_rping()): [fields_compared, fields that differ]"
    if compared != want_compared:
        first = draw("captures.rkey")
        short = _agreement(first.engine_seed, first.rping_size, first.rping_cycles)
        if compared == short[0]:
            raise Wrong(f"{compared} is the count for your first capture (my_rping('roce'), printed above); this "
                        "exercise asks about the long one, my_long_rping().", field="report.fields_compared",
                        given=compared, expected=expected)
        if compared == crosscheck(capture_path("rxe_rping.pcap")).fields_compared:
            raise Wrong(f"{compared} is the count for the kernel's rxe_rping.pcap; this exercise asks about your long "
                        "capture, my_long_rping().", field="report.fields_compared", given=compared,
                        expected=expected)
        raise Wrong(f"{compared} is not the number of fields the cross-check of your long capture compared.",
                    field="report.fields_compared", given=compared, expected=expected)
    if differ != want_differ:
        hint = " (that is the number that agree)" if differ == want_compared - want_differ else ""
        raise Wrong(f"The fields compared are right; {differ} is not the number that differ{hint}: fields compared "
                    "minus agreements.", field="fields that differ", given=differ, expected="fields_compared - agreements")
    return (f"Right: {want_compared} fields compared in {s.rping_cycles} cycles of {s.rping_size}-byte buffers, "
            f"{want_differ} differ, each one a known Wireshark defect in the CM REQ, however long the session.")
