"""Checkers for 09-reliability: explain a NAK, count retransmissions.

Both exercises are about the student's own run (:func:`nak_scenario_run`, :func:`timeout_scenario_run`): a
WRITE whose length, MTU, first PSN and loss pattern come from the student's scenario, so a classmate's PSNs
and counts are wrong here.  The notebook's walk-through shows the book's runs (:mod:`rdmalab.lab.replays`),
which are not the exercises' runs.
"""

from __future__ import annotations

import random
from typing import Any

from rdmalab.lab import replays
from rdmalab.lab.core import Said, Wrong, exercise
from rdmalab.lab.feedback import as_int, norm_name, plain
from rdmalab.lab.pair import SoftPair
from rdmalab.lab.variant import draw, scenario
from rdmalab.wire.ib import AETH, BTH, NAK_NAMES, timeout_ns
from rdmalab.wire.opcodes import OPCODES

NB = "09-reliability"
LOSS = 0.05  # the fabric's loss rate in both runs

#: why a responder sends each NAK code (IBA Vol 1 9.7.5.2.4 and 9.9): what the feedback says about a wrong code
NAK_CAUSES = {
    0: "a request arrived with a PSN beyond the one the responder expected next: packets are missing before it",
    1: "the request itself is malformed or not supported (a bad opcode sequence, a length that does not fit)",
    2: "the request failed the responder's memory checks: its rkey, its bounds or the region's access flags "
       "(notebook 11)",
    3: "the responder could not carry out a valid request (its QP or its memory failed)",
    4: "an RD (reliable datagram) request was not valid; RC never uses it",
}


def _requests(pair: SoftPair) -> list[Any]:
    return [ev for ev in pair.trace if ev.kind == "sent" and ev.node == pair.a.name and ev.opcode is not None
            and not OPCODES[ev.opcode].is_response]


def _run(s: Any) -> SoftPair:
    pair = SoftPair(seed=s["seed"], mtu=s["mtu"], loss=s["loss"], psn=(s["first_psn"], 500), timeout=s.get("timeout", 14))
    replays.rdma_write(pair, s["length"])
    pair.run()
    return pair


def _draw(r: random.Random, fits: Any, **more: Any) -> dict[str, Any]:
    """A WRITE of 4 to 12 packets and the first fabric seed from a random start whose run ``fits``."""
    mtu = r.choice((512, 1024, 2048))
    length = r.randrange(3 * mtu + 1, 12 * mtu + 1)
    first_psn = r.randrange(1000, 1 << 23)
    start = r.randrange(1 << 30)
    for seed in range(start, start + 5000):
        s = {"length": length, "mtu": mtu, "first_psn": first_psn, "loss": LOSS, **more, "seed": seed}
        if fits(_run(s)):
            return s
    raise RuntimeError(f"no fabric seed in {start}..{start + 5000} gives the run this exercise needs")  # pragma: no cover


def _completed(pair: SoftPair) -> bool:
    return any(ev.kind == "completed" and ev.detail.get("status") == "success" for ev in pair.trace)


def _one_nak_in_the_middle(pair: SoftPair) -> bool:
    drops = [ev for ev in pair.trace if ev.kind == "dropped"]
    if len(drops) != 1 or drops[0].node != pair.b.name:  # exactly one loss, and a request's
        return False
    psns = [ev.psn for ev in _requests(pair)]  # neither the first (the scenario shows its PSN) nor the last
    return (min(psns) < drops[0].psn < max(psns) and len(replays.naks(pair)) == 1
            and all(psns.count(p) <= 2 for p in psns) and _completed(pair))


def _tail_lost_once(pair: SoftPair) -> bool:
    reqs = _requests(pair)
    # one request lost, the last; a lost duplicate ACK changes nothing (a lost last ACK would time out again)
    drops = [ev for ev in pair.trace if ev.kind == "dropped" and ev.node == pair.b.name]
    psns = [ev.psn for ev in reqs]
    last = max(psns)
    timeouts = [ev for ev in pair.trace if ev.kind == "retransmitted" and "timeout" in str(ev.detail.get("reason"))]
    return ([(ev.node, ev.psn) for ev in drops] == [(pair.b.name, last)] and len(timeouts) == 1 and not replays.naks(pair)
            and all(psns.count(p) <= 2 for p in psns) and _completed(pair))


@scenario("reliability.nak")
def _nak_scenario(r: random.Random) -> dict[str, Any]:
    return _draw(r, _one_nak_in_the_middle)


@scenario("reliability.timeout")
def _timeout_scenario(r: random.Random) -> dict[str, Any]:
    # the QP's timeout code: its timer runs 4.096 us x 2^code (IBA Vol 1 11.2.4.2), 16.8 ms to 537 ms here
    return _draw(r, _tail_lost_once, timeout=r.randrange(12, 18))


def nak_scenario_run() -> SoftPair:
    """The student's NAK run: an RDMA WRITE of ``lab.scenario("reliability.nak")`` that loses one packet in the middle."""
    return _run(draw("reliability.nak"))


def timeout_scenario_run() -> SoftPair:
    """The student's timeout run: a WRITE of ``lab.scenario("reliability.timeout")`` whose last packet is lost."""
    return _run(draw("reliability.timeout"))


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


def _psn_range(pair: SoftPair) -> str:
    psns = sorted({int(ev.psn) for ev in _requests(pair)})
    return f"{psns[0]} to {psns[-1]}"


@exercise("reliability.nak", "Explain a NAK", notebook=NB, varies=True, hints=(
    "Draw your run (my_nak.ladder()) or list its trace: the lost packet is the 'dropped' event.",
    "Find the Acknowledge whose AETH syndrome type is 11 (NAK); its 5-bit value is the NAK code.",
    "A PSN Sequence Error NAK carries, in its BTH PSN, the PSN the responder expected next.",
    "Go-back-N: the requester resends everything from that PSN on.",
))
def _nak(answer: Any) -> str:
    p = nak_scenario_run()
    nak = next(pk for pk in p.packets() if AETH in pk and pk[AETH].is_nak)
    code, name, psn = nak[AETH].value, nak[AETH].nak_name, nak[BTH].psn
    lost = [int(ev.psn) for ev in p.trace if ev.kind == "dropped" and ev.psn is not None]
    sent = {int(ev.psn) for ev in _requests(p)}
    if not isinstance(answer, dict) or set(answer) != {"code", "resend_from", "lost"}:
        have = sorted(answer) if isinstance(answer, dict) else type(answer).__name__
        raise Wrong("Give a dict with keys 'code' (the NAK code: its name or number), 'resend_from' (a PSN) and "
                    "'lost' (the PSN of the lost packet).", field="answer", given=Said(f"keys {have}"),
                    expected="a dict with keys 'code', 'lost', 'resend_from'")
    got_code = nak_code(answer["code"])
    if got_code != code:
        if got_code in NAK_CAUSES:
            why = (f"{NAK_NAMES[got_code]} (code {got_code}) is the NAK a responder sends when "
                   f"{NAK_CAUSES[got_code]}. Nothing like that happened in your run.")
        else:
            why = f"Code {got_code} is reserved: no responder sends it."
        raise Wrong(f"{why} Read the code from your NAK itself: the low 5 bits of its AETH syndrome (the first "
                    "byte after the BTH).", field="AETH.value", offset=54, given=answer["code"],
                    expected="the NAK code in the low 5 bits of the NAK's AETH syndrome (name or number)")
    got_lost = as_int(answer["lost"], "the lost PSN", field="BTH.psn")
    if got_lost not in sent:
        raise Wrong(f"Your requester never sent PSN {got_lost}: its PSNs run from {_psn_range(p)}. Use your own "
                    "run (my_nak), not the one drawn above it.", field="BTH.psn", given=answer["lost"],
                    expected="the PSN of the request packet the fabric dropped (the cross)")
    if got_lost != lost[0]:
        near = " (one off: count the PSNs again)" if abs(got_lost - lost[0]) == 1 else ""
        raise Wrong(f"PSN {got_lost} was delivered{near}; look for the cross in your run's ladder, or the 'dropped' "
                    "event in its trace.", field="BTH.psn",
                    given=answer["lost"], expected="the PSN of the request packet the fabric dropped (the cross)")
    got_from = as_int(answer["resend_from"], "a PSN", field="BTH.psn")
    if got_from != psn:
        raise Wrong(f"The requester does not resume at PSN {got_from}: it resumes at the PSN the NAK names.",
                    field="BTH.psn", offset=51, given=answer["resend_from"],
                    expected="the PSN in the BTH of the NAK (the PSN the responder expects next)")
    return (f"Right: PSN {lost[0]} was lost, the next packet arrived out of sequence, the responder NAKed "
            f"({name}, code {code}) naming PSN {psn}, and the requester went back to it.")


def timer_ms(code: int) -> float:
    """The local ACK timeout of a QP's ``timeout`` code: 4.096 us x 2^code (IBA Vol 1 11.2.4.2), in ms."""
    return timeout_ns(code) / 1e6


def _waited_ms(p: SoftPair) -> float:
    """From the send of the lost packet to the first retransmission."""
    lost = next(ev for ev in p.trace if ev.kind == "dropped" and ev.node == p.b.name)
    sent = next(int(ev.time_ns) for ev in _requests(p) if ev.psn == lost.psn)
    again = next(int(ev.time_ns) for ev in p.trace if ev.kind == "retransmitted")
    return (again - sent) / 1e6


def _as_ms(answer: Any) -> float:
    text = answer.strip().removesuffix("ms").strip() if isinstance(answer, str) else answer
    try:
        if isinstance(text, bool):
            raise TypeError
        return float(text)
    except (TypeError, ValueError):
        raise Wrong(f"the time waited: expected a number of milliseconds, got {answer!r}.", field="waited_ms",
                    given=answer, expected="a number of milliseconds, e.g. 12.5") from None


@exercise("reliability.timeout", "Count the cost of a timeout", notebook=NB, varies=True, hints=(
    "In your timeout run (my_timeout), count the request packets sent a second time (a PSN sent again).",
    "When the timer fires, the requester goes back to the oldest PSN not yet acknowledged. Which PSNs had an ACK "
    "by then?",
    "The wait is the QP's retransmission timer: the cut in your ladder's time axis, or the time of the "
    "'retransmitted' event in my_timeout.trace. The timeout code in your scenario gives it too.",
    "Answer {'resent': a number of packets, 'waited_ms': milliseconds}.",
))
def _timeout(answer: Any) -> str:
    shape = "{'resent': a number of packets, 'waited_ms': milliseconds}"
    if not isinstance(answer, dict) or set(answer) != {"resent", "waited_ms"}:
        have = sorted(answer) if isinstance(answer, dict) else type(answer).__name__
        raise Wrong("Give a dict with keys 'resent' (how many request packets were sent a second time) and "
                    "'waited_ms' (how long the requester waited before it resent, in ms).", field="answer",
                    given=Said(f"keys {have}") if isinstance(answer, dict) else answer, expected=shape)
    p = timeout_scenario_run()
    code = int(draw("reliability.timeout")["timeout"])
    resent = replays.retransmitted(p)
    want = len(resent)
    got = as_int(answer["resent"], "a number of packets", field="retransmitted packets")
    expected = "the number of request packets sent a second time (same PSN again)"
    reqs = _requests(p)
    first = len({ev.psn for ev in reqs})
    lost = (p.fabric.stats["lost"], sum(1 for ev in p.trace if ev.kind == "dropped" and ev.node == p.b.name))

    def wrong(msg: str) -> Wrong:
        return Wrong(msg, field="retransmitted packets", expected=expected, given=plain(got))

    if got != want:
        if got < 0:
            raise wrong(f"{got} is negative: a number of packets is 0 or more.")
        if got in lost:
            raise wrong(f"{got} is the number of packets lost, but the requester does not know which were lost: when "
                        "its timer fires it goes back to the oldest packet not yet acknowledged and resends from "
                        "there.")
        if got == len(reqs):
            raise wrong(f"{got} counts every request sent, first transmissions included; count only the sends of a "
                        "PSN that had been sent before.")
        if got > want and got == len(reqs) + sum(1 for ev in p.trace if ev.kind == "sent" and ev.node == p.b.name):
            raise wrong(f"{got} counts the responder's ACKs too; count only the requester's request packets.")
        if abs(got - want) == 1:
            raise wrong(f"{got} is off by one: count the packets whose PSN was already sent once, no more, no less.")
        if got < want:
            raise wrong(f"More packets than {got} were sent again. When the timer fired, which PSNs had been "
                        "acknowledged? Go-back-N resends every packet from the oldest unacknowledged one on, also "
                        "the ones that did arrive.")
        if got > first:
            raise wrong(f"{got} is more than your message has packets (its length over the MTU, rounded up), and no "
                        "packet of this run was sent three times. Count in your own run (my_timeout), and only the "
                        "requester's packets whose PSN had been sent before.")
        raise wrong(f"Fewer than {got} packets were sent again: count in your own run (my_timeout), only the "
                    "requester's packets whose PSN had been sent before.")
    waited = _waited_ms(p)
    ms = _as_ms(answer["waited_ms"])
    if not abs(ms - waited) <= max(0.01 * waited, 0.05):
        where = dict(field="waited_ms", given=answer["waited_ms"],
                     expected="the time from the lost packet's send to the first resend, in ms")
        other = next((c for c in range(32) if abs(ms - timer_ms(c)) <= 0.01 * timer_ms(c)), None)
        if abs(ms * 1e-3 - waited) <= 0.01 * waited or abs(ms * 1e-6 - waited) <= 0.01 * waited:
            raise Wrong(f"{ms:g} reads like microseconds or nanoseconds; give the wait in milliseconds.", **where)
        if other is not None:
            raise Wrong(f"{ms:g} ms is the timer of timeout code {other} (4.096 us x 2^{other}); your QP's timeout "
                        "code is another: it is in your scenario.", **where)
        raise Wrong(f"Your requester did not wait {ms:g} ms. Read the wait off your own run: the cut in the time axis "
                    "of my_timeout.ladder(), or the times in my_timeout.trace from the lost packet's send to the "
                    "'retransmitted' event.", **where)
    return (f"Yes: after {waited:.1f} ms (timeout code {code}: 4.096 us x 2^{code}) the timer fired and go-back-N "
            f"resent {want} packets, everything from the oldest unacknowledged PSN, "
            f"{min(int(ev.psn) for ev in resent)}.")
