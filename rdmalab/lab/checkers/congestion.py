"""Checkers for 10-congestion: mark a packet CE, build the CNP a responder sends back, the victim flow, DCQCN.

The first two exercises are about the student's own WRITE (:func:`my_write_frame`, from the scenario
``congestion.write``: addresses, QP numbers, PSN, key), not the notebook's demo frame (:func:`data_frame`),
so that the demo's marked frame, or a classmate's, is not the answer.
"""

from __future__ import annotations

import random
from typing import Any

from rdmalab.fabric.congestion_scenarios import incast_costs, parameter_names, run_scenario
from rdmalab.lab.core import Said, Wrong, exercise
from rdmalab.lab.feedback import as_bytes
from rdmalab.lab.samples import one_write
from rdmalab.lab.variant import draw, scenario
from rdmalab.wire.frame import decode_ethernet, encode_rocev2
from rdmalab.wire.ib import BTH, RETH
from rdmalab.wire.net import ROCEV2_PORT, UDP, IPv4
from rdmalab.wire.opcodes import CNP_OPCODE, Op, Pos, Transport, find_opcode

NB = "10-congestion"


def data_frame() -> bytes:
    """The RoCEv2 WRITE of the notebook (requester QP 0x22 at 192.168.1.1 writes to QP 0x11)."""

    return next(w.frame for w in one_write() if w.kind == "rocev2")


@scenario("congestion.write")
def _write_scenario(r: random.Random) -> dict[str, Any]:
    net = r.randrange(1, 255)
    requester, responder = r.sample(range(2, 250), 2)
    rq, rs = r.sample(range(0x12, 0x3FF), 2)
    return {"requester_ip": f"10.{net}.0.{requester}", "responder_ip": f"10.{net}.0.{responder}",
            "requester_qpn": rq, "responder_qpn": rs, "psn": r.randrange(1 << 24), "udp_sport": r.randrange(49152, 65536),
            "rkey": r.randrange(0x100, 1 << 20) << 8 | r.randrange(256), "va": r.randrange(1 << 20) << 12,
            "length": r.randrange(16, 257)}


def my_write_frame() -> bytes:
    """The student's WRITE (scenario ``congestion.write``): requester to responder, ECN-capable (ECT(0)), unmarked."""
    s = draw("congestion.write")
    payload = bytes((i * 7 + s["psn"]) & 0xFF for i in range(s["length"]))
    bth = BTH(opcode=find_opcode(Transport.RC, Op.RDMA_WRITE, Pos.ONLY), destqp=s["responder_qpn"], psn=s["psn"],
              ackreq=1)
    return encode_rocev2(bth, [RETH(va=s["va"], r_key=s["rkey"], dma_length=len(payload))], payload,
                         src_ip=s["requester_ip"], dst_ip=s["responder_ip"], src_port=s["udp_sport"], dscp=26, ecn=2)


def _marked(frame: bytes) -> bytes:
    ip = decode_ethernet(frame)[IPv4].replace(ecn=3).with_checksum()
    return frame[:14] + ip.encode() + frame[34:]


def _another_write(mine: Any, got: bytes) -> list[tuple[str, str, str]]:
    """The identifying fields (addresses, QP, PSN) in which ``got`` differs from ``mine``, when two or more do:
    then it is another WRITE, not a mistake in marking this one."""
    try:
        pkt = decode_ethernet(got, lenient=True)
    except Exception:  # a frame that does not decode is judged by the checks that follow
        return []
    if pkt.get(IPv4) is None or pkt.get(BTH) is None:
        return []
    pairs = [("IPv4.src", mine[IPv4].describe("src"), pkt[IPv4].describe("src")),
             ("IPv4.dst", mine[IPv4].describe("dst"), pkt[IPv4].describe("dst")),
             ("BTH.destqp", f"{mine[BTH].destqp:#08x}", f"{pkt[BTH].destqp:#08x}"),
             ("BTH.psn", str(mine[BTH].psn), str(pkt[BTH].psn))]
    diff = [p for p in pairs if p[1] != p[2]]
    return diff if len(diff) >= 2 else []


def _field_diffs(a: Any, b: Any, ignore: set[str]) -> list[tuple[str, int, str, str]]:
    """Fields that differ between two decoded packets: (layer.field, offset, value a, value b)."""
    sa = {(s.layer, s.field): s for s in a.spans()}
    out = []
    for s in b.spans():
        key = (s.layer, s.field)
        name = f"{s.layer}.{s.field}"
        if name in ignore or key not in sa:
            continue
        if sa[key].text != s.text:
            out.append((name, s.start, sa[key].text, s.text))
    return out


@exercise("congestion.ce", "Mark a packet Congestion Experienced, as a switch would", notebook=NB, varies=True, hints=(
    "Start from your own WRITE, my_write_frame(), not the demo's frame.",
    "ECN is the low 2 bits of the IPv4 TOS byte (frame byte 15); CE is 0b11 (RFC 3168 section 5).",
    "Changing the TOS changes the IPv4 header checksum: IPv4.replace(ecn=3).with_checksum() recomputes it.",
    "Keep everything else, the ICRC included: a switch does not recompute the ICRC, and it does not need to.",
))
def _ce(answer: Any) -> str:
    got = as_bytes(answer, "your marked frame", field="frame")
    demo = data_frame()
    if got in (demo, _marked(demo)):
        raise Wrong("That is the notebook's demo WRITE (the one marked above the exercise), not yours: start from "
                    "your own frame, my_write_frame().", field="frame", given=Said("the demo's frame"),
                    expected="your WRITE, my_write_frame(), marked CE")
    orig = decode_ethernet(my_write_frame())
    other = _another_write(orig, got)
    if other:
        raise Wrong(f"This is another WRITE than yours: its {' and '.join(n for n, _, _ in other)} differ from your "
                    "frame's. Start from your own, my_write_frame().", field="frame", given=Said("another WRITE"),
                    expected="your WRITE, my_write_frame(), marked CE",
                    details=[f"{n}: yours {w}, this frame {x}" for n, w, x in other])
    if len(got) != len(orig.data):
        raise Wrong(f"The marked frame must keep its length ({len(orig.data)} bytes); yours has {len(got)}.",
                    field="frame length", given=Said(f"{len(got)} bytes"), expected=f"{len(orig.data)} bytes")
    pkt = decode_ethernet(got, lenient=True)
    ip = pkt.get(IPv4)
    if ip is None:
        raise Wrong("Your frame no longer decodes as IPv4.", field="Ethernet.type", offset=12,
                    given=got[12:14], expected="08 00 (IPv4), unchanged")
    if ip.ecn != 3:
        raise Wrong(f"IPv4.ecn is {ip.ecn}; Congestion Experienced is the 2-bit codepoint 0b11.", field="IPv4.ecn",
                    offset=15, given=ip.ecn, expected="3 (0b11, CE)")
    if ip.with_checksum().checksum != ip.checksum:
        raise Wrong("The IPv4 header checksum no longer matches the header: a router recomputes it after "
                    "changing the TOS byte.", field="IPv4.checksum", offset=24, given=ip.checksum,
                    expected=f"{ip.with_checksum().checksum:#06x}, the checksum of your header")
    diffs = _field_diffs(orig, pkt, {"IPv4.ecn", "IPv4.checksum"})
    if diffs:
        name, off, was, now = diffs[0]
        raise Wrong(f"{len(diffs)} other field(s) changed; the first is {name} at byte {off} ({was} -> {now}). "
                    "A switch marks ECN and leaves the rest alone.", field=name, offset=off, given=Said(now),
                    expected=f"{was}, as in the original frame",
                    details=[f"{n} at byte {o}: {w} -> {x}" for n, o, w, x in diffs])
    if pkt.crc_status != "good":
        raise Wrong("The ICRC no longer matches.", field="ICRC", offset=pkt.crc_offset,
                    expected="the original ICRC: ECN is a variant field, masked out of it")
    return "Marked CE, IPv4 checksum fixed, and the ICRC still matches, because ECN is a variant field."


@exercise("congestion.cnp", "Build the CNP the responder sends back", notebook=NB, varies=True, hints=(
    "A CNP is a RoCEv2 packet with BTH opcode 0x81, the BECN bit set, and 16 reserved bytes of zeros (Annex A17.9.3).",
    "It goes back to the sender of the marked packet: swap the IP addresses, and put the *requester's* QP number "
    "(requester_qpn in your scenario) in BTH.destqp: the marked packet only carries the responder's own QP.",
    "rdmalab.wire.encode_rocev2(BTH(...), [CNPPad()], src_ip=..., dst_ip=...) fills in the lengths and the ICRC.",
))
def _cnp(answer: Any) -> str:
    s = draw("congestion.write")
    got = as_bytes(answer, "your CNP", field="frame")
    pkt = decode_ethernet(got, lenient=True)
    bth = pkt.get(BTH)
    if pkt.encap != "rocev2" or bth is None:
        raise Wrong("Your frame does not decode as RoCEv2 (IPv4, UDP to port 4791, BTH).", field="encapsulation",
                    offset=34, given=Said(str(pkt.encap)), expected="rocev2: Ethernet / IPv4 / UDP 4791 / BTH")
    if bth.opcode != CNP_OPCODE:
        raise Wrong(f"BTH.opcode is 0x{bth.opcode:02x}; a CNP has the opcode RoCEv2 reserves for it.",
                    field="BTH.opcode", offset=42, given=bth.opcode, expected="the CNP opcode (RoCEv2 Annex A17.9.3)")
    ip = pkt[IPv4]
    udp = pkt[UDP]
    src, dst = ip.describe("src"), ip.describe("dst")
    if (src, dst) != (s["responder_ip"], s["requester_ip"]):
        if (src, dst) == (s["requester_ip"], s["responder_ip"]):
            why = "those are your WRITE's addresses, requester to responder; the CNP goes the other way"
        elif {src, dst} == {"192.168.1.1", "192.168.1.2"}:
            why = "those are the demo's addresses, not your WRITE's (its IPv4 header has them)"
        else:
            why = "they are not your WRITE's two addresses (its IPv4 header has them)"
        raise Wrong(f"Your CNP goes {src} -> {dst}: {why}.", field="IPv4.src", offset=26,
                    given=Said(f"{src} -> {dst}"), expected="responder -> requester: your WRITE's addresses swapped")
    if udp.dport != ROCEV2_PORT:
        raise Wrong(f"UDP.dport is {udp.dport}; every RoCEv2 packet goes to the RoCEv2 port.", field="UDP.dport",
                    offset=36, given=udp.dport, expected=str(ROCEV2_PORT))
    if bth.destqp != s["requester_qpn"]:
        if bth.destqp == s["responder_qpn"]:
            why = ("that is the QP your WRITE was addressed to, the responder's own; the CNP is addressed to the QP "
                   "whose packets were marked, the requester's (the WRITE does not carry it: your scenario names it)")
        else:
            why = ("the CNP is addressed to the QP whose packets were marked, the requester's QP "
                   "(requester_qpn in your scenario)")
        raise Wrong(f"BTH.destqp is 0x{bth.destqp:06x}: {why}.", field="BTH.destqp", offset=47, given=bth.destqp,
                    expected="the requester's QP number")
    if not bth.becn:
        raise Wrong("BTH.becn is 0; a CNP sets the BECN bit (bit 6 of BTH byte 4).", field="BTH.becn", offset=46,
                    given=0, expected="1")
    if pkt.payload_length or any(pkt.data[54:70]):
        raise Wrong("After the BTH a CNP carries exactly 16 reserved bytes of zeros, then the ICRC.",
                    field="CNPPad", offset=54, given=pkt.data[54:70], expected="16 bytes of zeros")
    if pkt.crc_status != "good":
        raise Wrong("The ICRC does not match your bytes.", field="ICRC", offset=pkt.crc_offset,
                    expected="the ICRC of your frame (encode_rocev2 computes it)")
    return (f"A valid CNP: opcode 0x81, BECN, from {s['responder_ip']} back to QP {s['requester_qpn']:#08x} at "
            f"{s['requester_ip']}, 16 reserved bytes, good ICRC.")


# ---------------------------------------------------------------------------- the switched fabric

_VICTIM_REASONS = {
    "A": "F1's packets go through R2's congested egress queue.",
    "B": "PFC pauses priority 3 on the P1->P2 link; F1's packets wait at P1, where the queue grows "
         "past Kmin and they are marked, so H1 gets CNPs.",
    "C": "The CNPs meant for F2 are delivered to F1's QP.",
}
_cache: dict[str, Any] = {}


VICTIM_MS = 30.0  # long enough to show how long DCQCN keeps F1 slow after the 1 ms incast


def victim_run() -> Any:
    """The victim-flow run the notebook draws and exercise 3 asks about (the incast runs from 3 to 4 ms)."""
    if "victim" not in _cache:
        _cache["victim"] = run_scenario("victim", duration_ms=VICTIM_MS)
    return _cache["victim"]


@exercise("congestion.victim", "Why does a flow that never crossed the hot spot slow down?", notebook=NB, hints=(
    "F1 goes H1 -> P1 -> P2 -> R1. Which of the ports on that path did the incast's PFC pauses stop? "
    "fabric.paused_time_ns(port) tells you how long each port was paused.",
    "Look at where F1's packets were marked: marks happen on an egress queue that is longer than Kmin.",
    "Answer with a dict: {'port': 'P1->P2' or another port name, 'reason': 'A', 'B' or 'C'}.",
))
def _victim(answer: Any) -> str:
    if not isinstance(answer, dict) or "port" not in answer or "reason" not in answer:
        raise Wrong("Answer with a dict {'port': ..., 'reason': ...}: the paused port on F1's path and the "
                    "letter of the explanation.", field="answer", expected="{'port': 'X->Y', 'reason': 'A'|'B'|'C'}")
    fab = victim_run().fabric
    f1 = fab.flows[0]
    path = [p.name for p in f1.fwd.values()]
    paused = [p.name for p in f1.fwd.values() if fab.paused_time_ns(p) > 0]
    port = str(answer["port"]).replace(" ", "").replace("\u2192", "->")
    if port not in path:
        raise Wrong(f"{answer['port']!r} is not on F1's path ({', '.join(path)}); the incast's own queue "
                    "(P2->R2) is exactly what F1 avoids.", field="port", given=answer["port"],
                    expected=f"a port on F1's path ({', '.join(path)}) that PFC paused")
    if port not in paused:
        raise Wrong(f"{port} is on F1's path but was never paused; the paused one is where F1 waited.", field="port",
                    given=answer["port"], expected="the port on F1's path that PFC paused")
    reason = str(answer["reason"]).strip().upper()[:1]
    if reason == "A":
        raise Wrong("F1 never enters P2->R2: P2 sends it straight to R1, whose queue stays empty "
                    f"(P2->R1 marked {fab.port('P2', 'R1').marks} packets).", field="reason", given=answer["reason"],
                    expected="the letter of the explanation that fits the pauses and marks")
    if reason == "C":
        raise Wrong("A CNP goes back to the sender of the marked packet (its IP) and names that sender's QP in "
                    "BTH.destqp: F2's CNPs go to H2, never to H1. H1's CNPs answer marks on F1's own packets: "
                    "compare f1.marked and f1.cnps.", field="reason", given=answer["reason"],
                    expected="the letter of the explanation that fits the pauses and marks")
    if reason != "B":
        raise Wrong(f"reason must be one of {', '.join(_VICTIM_REASONS)}.", field="reason", given=answer["reason"],
                    expected=f"one of {', '.join(_VICTIM_REASONS)}")
    p = fab.port("P1", "P2")
    return (f"Right: P1->P2 was paused for {fab.paused_time_ns(p) / 1e3:.0f} us; F1's packets queued at P1 "
            f"({p.qmax / 1024:.0f} KB at most), {f1.marked} of them were marked CE there and H1 got {f1.cnps} CNPs. "
            "PFC spread the congestion to a flow that never went near R2.")


def incast8(settings: dict[str, str] | None = None) -> Any:
    """8:1 incast at 40 Gb/s for 10 ms with the ns3-rdma constants (and ``settings``)."""

    key = repr(sorted((settings or {}).items()))
    if key not in _cache:
        _cache[key] = run_scenario("incast", senders=8, duration_ms=10.0, settings=settings or {})
    return _cache[key]


_COSTS = {
    "queue": ("a longer queue after recovery (more latency for everyone behind it)", "queue_mean_kb", +1),
    "cnps": ("more CNPs and rate cuts", "cnps", +1),
    "pauses": ("PFC pauses", "pauses", +1),
    "goodput": ("less goodput", "goodput_gbps", -1),
}


@exercise("congestion.converge", "Make 8:1 incast converge faster, and name the cost", notebook=NB, hints=(
    "With the default constants the eight senders cut their rates so hard while the first burst drains that the "
    "link idles for milliseconds: recovery_time() is when their summed rate is back at 90 % of the link.",
    "Rate increase is additive: the target rate grows by rpg_ai_rate per step, one step per rpg_time_reset. "
    "Try changing one of them.",
    "Answer {'settings': {'name': 'value', ...}, 'cost': 'queue' | 'cnps' | 'pauses' | 'goodput'}; the checker "
    "runs the incast with your settings and compares what got worse.",
))
def _converge(answer: Any) -> str:
    shape = "{'settings': {'name': 'value', ...}, 'cost': 'queue' | 'cnps' | 'pauses' | 'goodput'}"
    if not isinstance(answer, dict) or "settings" not in answer or "cost" not in answer:
        raise Wrong("Answer with a dict {'settings': {...}, 'cost': ...}.", field="answer", expected=shape)
    settings = {str(k): str(v) for k, v in dict(answer["settings"]).items()}
    unknown = sorted(set(settings) - set(parameter_names()))
    if unknown:
        raise Wrong(f"unknown parameter(s): {', '.join(unknown)}.", field="settings", given=answer["settings"],
                    expected="names from rdmalab.fabric.congestion_scenarios.parameter_names()")
    if not settings:
        raise Wrong("Change at least one parameter.", field="settings", given=answer["settings"],
                    expected="at least one parameter and its new value")
    try:
        mine = incast_costs(incast8(settings).fabric)
    except ValueError as err:
        raise Wrong(f"Those settings do not run: {err}", field="settings", given=answer["settings"],
                    expected="values the model accepts") from None
    base = incast_costs(incast8().fabric)
    if not mine["recovery_ms"] <= 0.7 * base["recovery_ms"]:
        got = "never" if mine["recovery_ms"] == float("inf") else f"after {mine['recovery_ms']:.2f} ms"
        raise Wrong(f"With {settings} the senders are back at 90 % of the link {got}; with the defaults after "
                    f"{base['recovery_ms']:.2f} ms. Aim for at least 30 % sooner.", field="settings",
                    given=answer["settings"], expected="settings that recover at least 30 % sooner than the defaults")
    worse = []
    for name, (_, key, sign) in _COSTS.items():
        b, m = base[key], mine[key]
        if (m - b) * sign > 0.1 * max(abs(b), 1.0):
            worse.append(name)
    cost = str(answer["cost"]).strip().lower()
    if cost not in _COSTS:
        raise Wrong(f"cost must be one of {', '.join(_COSTS)}.", field="cost", given=answer["cost"],
                    expected=f"one of {', '.join(_COSTS)}")
    detail = ", ".join(f"{k} {base[_COSTS[k][1]]:.1f} -> {mine[_COSTS[k][1]]:.1f}" for k in _COSTS)
    if cost not in worse:
        raise Wrong(f"Your run recovers after {mine['recovery_ms']:.2f} ms instead of {base['recovery_ms']:.2f}, "
                    f"but {cost} did not get worse ({detail}). What did: {', '.join(worse) or 'nothing measurable'}.",
                    field="cost", given=answer["cost"], expected="the measure that got worse with your settings")
    return (f"Recovered after {mine['recovery_ms']:.2f} ms instead of {base['recovery_ms']:.2f}; the price is "
            f"{_COSTS[cost][0]} ({detail}).")
