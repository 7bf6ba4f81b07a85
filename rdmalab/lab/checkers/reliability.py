"""Checkers for 09-reliability: explain a NAK, count retransmissions."""

from __future__ import annotations

from typing import Any

from rdmalab.lab import replays
from rdmalab.lab.core import Said, Wrong, exercise
from rdmalab.lab.feedback import as_int, norm_name, plain
from rdmalab.wire.ib import AETH, BTH, NAK_NAMES

NB = "09-reliability"


def _nak_key(text: str) -> str:
    return norm_name(text).removeprefix("IB").removeprefix("NAK").removesuffix("NAK")


def nak_code(answer: Any, field: str = "AETH.value") -> int:
    """A NAK code given as its number (0, '0x0', an IntEnum), its name ('PSN Sequence Error', an enum's
    name such as NAK_PSN_SEQUENCE_ERROR) or the whole AETH syndrome byte (0x60)."""

    by_name = {_nak_key(n): c for c, n in NAK_NAMES.items()}
    name = answer if isinstance(answer, str) else getattr(answer, "name", None)
    if isinstance(name, str) and _nak_key(name) in by_name:
        return by_name[_nak_key(name)]
    if isinstance(answer, str):
        try:
            int(answer, 0)
        except ValueError:
            raise Wrong(f"{answer!r} is not a NAK code name; the NAK codes are {sorted(NAK_NAMES.values())}.",
                        field=field, given=answer,
                        expected="a NAK code: its name as rdmalab.wire.ib.NAK_NAMES spells it, or its number") from None
    code = as_int(answer, "the NAK code", field=field)
    if code >> 5 == 0b11:  # the whole AETH syndrome byte (type 11 = NAK) was given: its low 5 bits are the code
        return code & 0x1F
    return code


@exercise("reliability.nak", "Explain a NAK", notebook=NB, hints=(
    "Find the Acknowledge whose AETH syndrome type is 11 (NAK); its 5-bit value is the NAK code.",
    "A PSN Sequence Error NAK carries, in its BTH PSN, the PSN the responder expected next.",
    "Go-back-N: the requester resends everything from that PSN on.",
))
def _nak(answer: Any) -> str:
    p = replays.nak_run()
    nak = next(pk for pk in p.packets() if AETH in pk and pk[AETH].is_nak)
    code, name, psn = nak[AETH].value, nak[AETH].nak_name, nak[BTH].psn
    lost = [int(ev.psn) for ev in p.trace if ev.kind == "dropped" and ev.psn is not None]
    if not isinstance(answer, dict) or set(answer) != {"code", "resend_from", "lost"}:
        have = sorted(answer) if isinstance(answer, dict) else type(answer).__name__
        raise Wrong("Give a dict with keys 'code' (the NAK code: its name or number), 'resend_from' (a PSN) and "
                    "'lost' (the PSN of the lost packet).", field="answer", given=Said(f"keys {have}"),
                    expected="a dict with keys 'code', 'lost', 'resend_from'")
    got_code = nak_code(answer["code"])
    if got_code != code:
        what = NAK_NAMES.get(got_code, f"a reserved code {got_code}")
        raise Wrong(f"{answer['code']!r} means {what}; that is not the NAK this responder sent.", field="AETH.value",
                    offset=54, given=answer["code"],
                    expected="the NAK code in the low 5 bits of the NAK's AETH syndrome (name or number)")
    got_lost = as_int(answer["lost"], "the lost PSN", field="BTH.psn")
    if got_lost != lost[0]:
        near = " (one off: count the PSNs again)" if abs(got_lost - lost[0]) == 1 else ""
        raise Wrong(f"PSN {got_lost} was delivered{near}; look for the cross in the ladder.", field="BTH.psn",
                    given=answer["lost"], expected="the PSN of the request packet the fabric dropped (the cross)")
    got_from = as_int(answer["resend_from"], "a PSN", field="BTH.psn")
    if got_from != psn:
        raise Wrong(f"The requester does not resume at PSN {got_from}: it resumes at the PSN the NAK names.",
                    field="BTH.psn", offset=51, given=answer["resend_from"],
                    expected="the PSN in the BTH of the NAK (the PSN the responder expects next)")
    return (f"Right: PSN {lost[0]} was lost, the next packet arrived out of sequence, the responder NAKed "
            f"({name}, code {code}) naming PSN {psn}, and the requester went back to it.")


@exercise("reliability.timeout", "Count the cost of a timeout", notebook=NB, hints=(
    "In the timeout run, count the request packets sent more than once (same PSN again).",
    "lab.replays.retransmitted(pair) lists them, if you want to check your count from the ladder.",
))
def _timeout(answer: Any) -> str:
    p = replays.timeout_run()
    want = len(replays.retransmitted(p))
    got = as_int(answer, "a number of packets", field="retransmitted packets")
    expected = "the number of request packets sent a second time (same PSN again)"
    if got == want:
        return f"Yes: {want} packets were sent again, because go-back-N resends from the oldest unACKed PSN."
    lost = p.fabric.stats["lost"]
    if got == lost:
        raise Wrong(f"{lost} is the number of packets lost; go-back-N resends more than the lost ones.",
                    field="retransmitted packets", expected=expected, given=plain(got))
    if abs(got - want) == 1:
        raise Wrong(f"{got} is off by one: count the packets whose PSN was already sent once, no more, no less.",
                    field="retransmitted packets", expected=expected, given=plain(got))
    raise Wrong(f"{got} is not the number of retransmitted request packets in this run.",
                field="retransmitted packets", expected=expected, given=plain(got))
