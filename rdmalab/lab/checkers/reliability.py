"""Checkers for 09-reliability: explain a NAK, count retransmissions."""

from __future__ import annotations

from typing import Any

from rdmalab.lab.core import Wrong, exercise
from rdmalab.lab.feedback import as_int, norm_name

NB = "09-reliability"


@exercise("reliability.nak", "Explain a NAK", notebook=NB, hints=(
    "Find the Acknowledge whose AETH syndrome type is 11 (NAK); its 5-bit value is the NAK code.",
    "A PSN Sequence Error NAK carries, in its BTH PSN, the PSN the responder expected next.",
    "Go-back-N: the requester resends everything from that PSN on.",
))
def _nak(answer: Any) -> str:
    from rdmalab.lab import scenarios
    from rdmalab.wire.ib import AETH, BTH

    p = scenarios.nak_run()
    nak = next(pk for pk in p.packets() if AETH in pk and pk[AETH].is_nak)
    code, psn = nak[AETH].nak_name, nak[BTH].psn
    lost = [ev.psn for ev in p.trace if ev.kind == "dropped"]
    if not isinstance(answer, dict) or set(answer) != {"code", "resend_from", "lost"}:
        raise Wrong("Give a dict with keys 'code' (the NAK's name), 'resend_from' (a PSN) and 'lost' (the PSN "
                    "of the lost packet).")
    if norm_name(answer["code"]) != norm_name(code):
        raise Wrong(f"{answer['code']!r} is not the NAK code this responder sent.", field="AETH.value", offset=54)
    if as_int(answer["lost"], "the lost PSN") != lost[0]:
        raise Wrong("That PSN was delivered; look for the cross in the ladder.", field="BTH.psn")
    if as_int(answer["resend_from"], "a PSN") != psn:
        raise Wrong("The requester does not resume there: it resumes at the PSN the NAK names.", field="BTH.psn",
                    offset=51)
    return (f"Right: PSN {lost[0]} was lost, the next packet arrived out of sequence, the responder NAKed "
            f"({code}) naming PSN {psn}, and the requester went back to it.")


@exercise("reliability.timeout", "Count the cost of a timeout", notebook=NB, hints=(
    "In the timeout run, count the request packets sent more than once (same PSN again).",
    "lab.scenarios.retransmitted(pair) lists them, if you want to check your count from the ladder.",
))
def _timeout(answer: Any) -> str:
    from rdmalab.lab import scenarios

    p = scenarios.timeout_run()
    want = len(scenarios.retransmitted(p))
    got = as_int(answer, "a number of packets")
    if got == want:
        return f"Yes: {want} packets were sent again, because go-back-N resends from the oldest unACKed PSN."
    lost = p.fabric.stats["lost"]
    if got == lost:
        raise Wrong(f"{lost} is the number of packets lost; go-back-N resends more than the lost ones.")
    raise Wrong("Not the number of retransmitted request packets in this run.")
