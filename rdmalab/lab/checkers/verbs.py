"""Checkers for 02-verbs-objects, 03-send-receive, 04-write-imm, 05-read and 06-atomics."""

from __future__ import annotations

import random
import struct
from collections.abc import Callable
from typing import Any

import rdmalab.verbs.enums as e
from rdmalab.lab import variant
from rdmalab.lab.answers import Program, Run
from rdmalab.lab.core import Said, Wrong, exercise
from rdmalab.lab.feedback import as_int, norm_name, nth, plain
from rdmalab.lab.pair import Pair, SoftPair
from rdmalab.verbs.engine.qpstate import ERR, INIT, RC, RTR, RTS, TABLE, UC, mask_names
from rdmalab.verbs.wr import SGE, RecvWR, SendWR
from rdmalab.wire.ib import AETH, RNR_TIMER_US
from rdmalab.wire.opcodes import OPCODES, Op, Pos, Transport, find_opcode


def _state_names() -> dict[int, str]:
    return {v: k[len("IBV_QPS_"):] for k, v in vars(e).items() if k.startswith("IBV_QPS_") and isinstance(v, int)}


def wire_trouble(pair: Any) -> Wrong | None:
    """What went wrong during a learner's program, read from the wire and the completions.

    An RNR NAK (IBA Vol 1 9.7.5.2.8: no receive WQE was posted), a NAK such as Remote Access
    Error (9.7.5.2.4: the rkey or address did not match an MR that allows the access), or an error
    completion: each says more than "your function returned nothing".
    """

    for pk in pair.packets():
        aeth = pk.get(AETH) if pk is not None else None
        if aeth is None:
            continue
        if aeth.is_rnr_nak:
            return Wrong("B answered with an RNR NAK (Receiver Not Ready): the packet needed a receive WQE on B and "
                         "none was posted. Post a receive on pair.b.qp before A posts its send.", field="AETH.syndrome",
                         offset=54, given=Said(f"RNR NAK, timer code {aeth.value}"),
                         expected="an ACK: B must have a receive posted first")
        if aeth.is_nak:
            why = {"Remote Access Error": "the rkey or the address range in the RETH does not name memory of B that "
                                          "allows this access: use B's rkey (pair.b.mr.rkey) and an address inside "
                                          "B's MR (pair.b.mr.buf + offset)",
                   "Invalid Request": "B did not accept the request (opcode or length)"}.get(str(aeth.nak_name), "")
            return Wrong(f"B answered with a NAK: {aeth.nak_name}" + (f"; {why}." if why else "."),
                         field="AETH.syndrome", offset=54, given=Said(f"NAK, {aeth.nak_name} (code {aeth.value})"),
                         expected="an ACK")
    for ev in pair.trace:
        status = ev.detail.get("status") if ev.kind == "completed" else None
        if status and status != e.ibv_wc_status_str(e.IBV_WC_SUCCESS):
            side = "A" if ev.node == pair.a.name else "B"
            hint = {e.ibv_wc_status_str(e.IBV_WC_LOC_PROT_ERR): "the SGE's lkey or address does not match a local MR",
                    e.ibv_wc_status_str(e.IBV_WC_LOC_LEN_ERR): "a length does not fit the buffer it goes to"}.get(status, "")
            return Wrong(f"{side}'s work request {ev.detail.get('wr_id')} completed with an error: {status}"
                         + (f" ({hint})." if hint else "."), field="wc.status", given=Said(status),
                         expected="success")
    return None


# ----------------------------------------------------------------------------- 02 verbs objects


def _qp_states(answer: Any, expected: str) -> list[int]:
    """The learner's list of QP states as ibv_qp_state values (names, IBV_QPS_* names or the numbers)."""
    if not isinstance(answer, (list, tuple)) or not answer:
        raise Wrong("Give a list of state names, e.g. ['INIT', ...].", field="qp_state", expected=expected)
    names = _state_names()
    by_name = {v: k for k, v in names.items()}
    states = []
    for s in answer:
        if isinstance(s, int) and not isinstance(s, bool) and s in names:  # an ibv_qp_state value or enum
            states.append(int(s))
            continue
        key = norm_name(s).replace("IBVQPS", "")
        if key not in by_name:
            raise Wrong(f"{s!r} is not a QP state; the states are {sorted(by_name)}.", field="qp_state", given=s,
                        expected=expected)
        states.append(by_name[key])
    return states


@exercise("verbs.path", "The states from ERR back to RTS", notebook="02-verbs-objects", hints=(
    "A QP in ERR cannot go straight back to work. Which arrows of the state diagram leave ERR?",
    "Once the QP is where a new QP starts, the way on to RTS is the one the cells above walked.",
))
def _path(answer: Any) -> str:
    expected = "the QP states after ERR, in order, ending with RTS (names or ibv_qp_state values)"
    states = _qp_states(answer, expected)
    names = _state_names()
    if states[0] == ERR:
        states = states[1:]  # the learner included the starting state: fine
    if not states:
        raise Wrong("Your list holds only ERR: list the states that come after it, up to RTS.", field="qp_state",
                    given=Said("ERR"), expected=expected)
    cur: int = ERR
    walked = ["ERR"]
    for s in states:
        if (cur, s) not in TABLE or RC not in TABLE[(cur, s)]:
            why = (f" A QP in ERR cannot go straight to {names[s]}: which arrows of the diagram leave ERR?"
                   if cur == ERR else "")
            raise Wrong(f"{names[cur]} -> {names[s]} is not in the engine's transition table for RC QPs "
                        f"(modify_qp would fail with EINVAL).{why}", field="qp_state",
                        given=Said(" -> ".join([*walked, names[s]])), expected=expected)
        walked.append(names[s])
        cur = s
    if cur != RTS:
        raise Wrong(f"Your path ends in {names[cur]}; a QP can send only in RTS.", field="qp_state",
                    given=Said(" -> ".join(walked)), expected=expected)
    if len(states) != 4:
        raise Wrong(f"Your path is legal but takes {len(states)} steps; a shorter one exists.", field="qp_state",
                    given=Said(" -> ".join(walked)), expected="the shortest legal path from ERR to RTS")
    return ("ERR -> RESET -> INIT -> RTR -> RTS: the only way out of ERR is back to RESET, and from there the QP "
            "is set up as if new, each transition asking for its attributes again.")


#: Why an RC QP needs an attribute at INIT -> RTR that a UC QP does not (UC carries no READ, no
#: atomics and no acknowledgements, hence no RNR NAK)
_RC_ONLY = {
    "MAX_DEST_RD_ATOMIC": "it says how many RDMA READs and atomics the QP answers at once, and a UC QP answers "
                          "none: UC carries SENDs and RDMA WRITEs only",
    "MIN_RNR_TIMER": "it is the delay an RNR NAK asks a sender to wait, and a UC QP never acknowledges anything, "
                     "so it sends no RNR NAK",
}
#: What the QP must know for each attribute INIT -> RTR requires, as the feedback names it (not the name itself)
_RTR_NEED = {"AV": "how to reach its peer (the address vector)", "DEST_QPN": "which QP of the peer it talks to",
             "PATH_MTU": "how large a packet the path carries", "RQ_PSN": "which PSN to expect first"}


@exercise("verbs.rtr", "What INIT -> RTR requires of a UC QP", notebook="02-verbs-objects", hints=(
    "Start from the RC arrow of the diagram. Which of its attributes serve something a UC QP never does "
    "(answering READs and atomics, acknowledging)?",
    "rdmalab.verbs.engine.qpstate.TABLE[(INIT, RTR)][UC] is (required, optional); mask_names() names the bits.",
))
def _rtr(answer: Any) -> str:
    required, optional = TABLE[(INIT, RTR)][UC]
    want = set(mask_names(required).split(" | "))
    allowed = set(mask_names(optional).split(" | "))
    rc_want = set(mask_names(TABLE[(INIT, RTR)][RC][0]).split(" | "))
    expected = "the attributes a UC QP must be given for INIT -> RTR (names or IBV_QP_* mask bits)"
    if isinstance(answer, int) and not isinstance(answer, bool):  # an attribute mask: IBV_QP_AV | IBV_QP_PATH_MTU ...
        answer = mask_names(answer).split(" | ")
    if not isinstance(answer, (set, list, tuple, frozenset)):
        raise Wrong("Give a set of attribute names, e.g. {'PATH_MTU', ...}.", field="attr_mask", expected=expected)
    known = {norm_name(n): n for n in set(mask_names(-1).split(" | "))}
    got: dict[str, str] = {}
    for a in answer:
        key = norm_name(a).replace("IBVQP", "")
        if key not in known:
            raise Wrong(f"{a!r} is not a QP attribute: the names are those of the IBV_QP_* mask bits "
                        "(PATH_MTU, DEST_QPN, ...).", field="attr_mask", given=a, expected=expected)
        got[known[key]] = str(a)
    extra = sorted(set(got) - want)
    missing = sorted(want - set(got))
    if set(got) == rc_want:
        raise Wrong("That is what an RC QP must be given (the diagram's arrow). A UC QP needs less: some of these "
                    "serve things a UC QP never does.", field="attr_mask", expected=expected)
    if extra:
        name = extra[0]
        if name in _RC_ONLY:
            why = f"an RC QP needs {name}, a UC QP does not: {_RC_ONLY[name]}."
        elif name in allowed:
            why = f"{name} may be given at INIT -> RTR, but a UC QP does not require it."
        else:
            why = f"{name} is not even allowed at INIT -> RTR for a UC QP (modify_qp would fail with EINVAL)."
        raise Wrong(f"Not required: {why[0].upper()}{why[1:]}", field="attr_mask", given=got[name],
                    expected=expected, details=[f"{len(extra)} of your attributes are not required"]
                    + ([f"{len(missing)} required attribute(s) missing"] if missing else []))
    if missing:
        raise Wrong(f"{len(missing)} required attribute(s) missing: to receive, the QP must also know "
                    f"{_RTR_NEED.get(missing[0], 'more about its peer')}.", field="attr_mask", expected=expected)
    return ("Right: to receive, a UC QP must know its peer (AV, DEST_QPN), the path MTU and the first PSN to expect "
            "(RQ_PSN). RC adds MAX_DEST_RD_ATOMIC (UC answers no READs or atomics) and MIN_RNR_TIMER (UC "
            "acknowledges nothing, so it sends no RNR NAK).")


# ----------------------------------------------------------------------------- 03 send/receive


def send_opcodes(length: int, mtu: int) -> list[str]:
    """Run a SEND of ``length`` bytes at ``mtu`` and return the opcode names of the request packets."""

    p = SoftPair(mtu=mtu)
    p.b.qp.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[SGE(p.b.mr.buf, p.b.mr.length, p.b.mr.lkey)]))
    p.a.qp.post_send(SendWR(wr_id=2, opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(p.a.mr.buf, length, p.a.mr.lkey)]))
    p.a.poll()
    return [ev.opcode_name for ev in p.trace if ev.kind == "sent" and ev.node == p.a.name and ev.opcode_name]


@variant.scenario("send.opcodes")
def _send_opcodes_scenario(r: random.Random) -> dict[str, Any]:
    mtu = r.choice((256, 512, 1024, 2048, 4096))
    packets = r.randint(4, 10)  # never 3: the notebook shows a 3-packet SEND above the exercise
    last = mtu if r.random() < 0.2 else r.randint(1, mtu - 1)  # now and then an exact multiple of the MTU
    return {"length": (packets - 1) * mtu + last, "mtu": mtu}


_OPCODE_BY_NAME = {norm_name(info.name): info for info in OPCODES.values()}


def _opcode_of(item: Any) -> Any:
    """The opcode table's entry for a name or a number a learner gave, or None."""
    if isinstance(item, int) and not isinstance(item, bool):
        return OPCODES.get(int(item))
    return _OPCODE_BY_NAME.get(norm_name(item)) if isinstance(item, str) else None


@exercise("send.opcodes", "The packets of a SEND longer than the MTU", notebook="03-send-receive", varies=True, hints=(
    "A message longer than the MTU is cut into packets of at most MTU payload bytes each.",
    "Count the packets first: how many MTU-sized pieces does your length make (the last piece may be shorter)?",
    "Then name them: what does the opcode table call a message's first packet, its last, and those between?",
))
def _send_opcodes(answer: Any) -> str:
    s = variant.draw("send.opcodes")
    want = send_opcodes(s.length, s.mtu)
    n = len(want)
    shape = "a list of opcode names (or numbers), one per packet A sends"
    if not isinstance(answer, (list, tuple)) or not answer:
        raise Wrong("Give a list of opcode names, e.g. ['RC SEND First', ...], one per packet.", field="BTH.opcode",
                    expected=shape)
    infos = []
    for i, item in enumerate(answer):
        info = _opcode_of(item)
        if info is None:
            raise Wrong(f"opcodes[{i}] = {item!r} is not an opcode: give names as rdmalab.wire.opcode_name() "
                        "spells them (e.g. 'RC SEND First') or opcode numbers.", field="BTH.opcode", given=item,
                        expected=shape)
        infos.append(info)
    k = len(infos)
    per = f"at most {s.mtu} payload bytes fit in one packet at MTU {s.mtu}"
    if k < n:
        raise Wrong(f"You listed {k} packet(s): {per}, so {k} packet(s) carry at most {k * s.mtu} bytes, and your "
                    f"SEND is {s.length} bytes.", field="BTH.opcode", given=Said(f"{k} packet(s)"),
                    expected="one packet per MTU-sized piece of your message")
    if k > n:
        raise Wrong(f"You listed {k} packets: {per}, so {k - 1} packets already carry up to {(k - 1) * s.mtu} "
                    f"bytes, all of your {s.length}-byte SEND; the {nth(k - 1)} would be empty, and a SEND sends no "
                    "empty packet.", field="BTH.opcode", given=Said(f"{k} packets"),
                    expected="one packet per MTU-sized piece of your message")
    for i, (info, w) in enumerate(zip(infos, want, strict=True)):
        if norm_name(info.name) == norm_name(w):
            continue
        if info.transport != Transport.RC:
            why = f"is {info.name}, a {info.transport.name} opcode, and A's QP is an RC QP"
        elif info.op != Op.SEND:
            why = f"is {info.name}, not a SEND: every packet of this message belongs to the SEND"
        elif info.imm or info.inv:
            why = f"is {info.name}, but this SEND carries no immediate data and invalidates nothing"
        elif info.pos == Pos.ONLY:
            why = "is a SEND Only, the opcode of a message that fits in one packet, and yours takes several"
        elif info.pos == Pos.FIRST:
            why = "is a First, but a message has one First, and it is not this packet"
        elif info.pos == Pos.LAST:
            why = "is a Last, but more packets of the message follow it"
        else:
            why = ("is a Middle, but no packet of the message comes before it" if i == 0
                   else "is a Middle, but no packet of the message follows it")
        raise Wrong(f"The {nth(i)} packet (opcodes[{i}]) {why}.", field="BTH.opcode", given=answer[i],
                    expected=f"the opcode of the {nth(i)} of the {n} packets of your SEND")
    return f"Right: {n} packets for {s.length} bytes at MTU {s.mtu}, and only the Last asks for an ACK."


@variant.scenario("send.rnr")
def _rnr_scenario(r: random.Random) -> dict[str, Any]:
    code = r.randint(8, 24)  # 0.16 ms to 40.96 ms (IBA Vol 1 table 45)
    naks = r.randint(2, 4)  # B stays busy through this many RNR NAKs
    wait_ms = RNR_TIMER_US[code] / 1000
    return {"timer_code": code, "busy_ms": round(wait_ms * (naks - 1 + r.uniform(0.3, 0.7)), 3)}


def rnr_run(backend: str | None = None, *, timer_code: int | None = None, busy_s: float | None = None) -> Any:
    """A SEND that arrives before the receiver posted a receive (the RNR scenario of notebook 03).

    ``backend=None`` or ``"soft"``: the soft engine (what the checker replays); ``"rxe"``: the
    kernel's Soft-RoCE (:class:`rdmalab.lab.pair.LivePair`).  B's RNR timer code and how long B's
    application stays busy come from the student's scenario ``send.rnr`` unless given.
    """

    s = variant.draw("send.rnr")
    code = s.timer_code if timer_code is None else timer_code
    busy = s.busy_ms / 1000 if busy_s is None else busy_s
    p = (Pair(backend=backend, min_rnr_timer=code) if backend not in (None, "soft")
         else SoftPair(min_rnr_timer=code))
    p.a.mr.write(b"are you ready?", 14)
    p.a.qp.post_send(SendWR(wr_id=1, opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(p.a.mr.buf, 14, p.a.mr.lkey)]))
    p.idle(busy)  # B's application is busy (fabric time on soft, wall-clock time on rxe)
    p.b.qp.post_recv(RecvWR(wr_id=7, num_sge=1, sg=[SGE(p.b.mr.buf, 64, p.b.mr.lkey)]))
    p.a.poll()
    p.b.poll()
    return p


def _same(x: float, y: float) -> bool:
    return abs(x - y) <= 1e-9 * max(1.0, abs(y))


@exercise("send.rnr", "Read the RNR NAK timer from the frame", notebook="03-send-receive", varies=True, hints=(
    "The RNR NAK is an Acknowledge whose AETH syndrome has type 01; its 5-bit value is the timer code.",
    "rdmalab.wire.ib.RNR_TIMER_US maps the code to microseconds (IBA Vol 1 table 45).",
))
def _rnr(answer: Any) -> str:
    p = rnr_run()
    nak = next(pk for pk in p.packets() if AETH in pk and pk[AETH].is_rnr_nak)
    code, syndrome = nak[AETH].value, nak.data[54]
    want = RNR_TIMER_US[code] / 1000
    expected = "the minimum RNR delay in milliseconds: RNR_TIMER_US[timer code] / 1000"
    try:
        got = float(answer.removesuffix("ms").strip() if isinstance(answer, str) else answer)
    except (TypeError, ValueError, AttributeError):
        raise Wrong("Give the delay in milliseconds as a number.", field="AETH.value", expected=expected) from None

    def wrong(message: str, *details: str) -> Wrong:
        return Wrong(message, field="AETH.value", offset=54, expected=expected, given=plain(answer), details=details)

    if _same(got, want):
        return f"Yes: timer code {code} means wait at least {want:g} ms before retrying."
    if _same(got, code):
        raise wrong(f"{answer} is the timer code itself (AETH bits 4-0), not a delay: the code stands for a delay "
                    "that RNR_TIMER_US gives.")
    if _same(got, syndrome):
        raise wrong(f"{answer} is the whole syndrome byte: the timer code is only its low 5 bits (bits 4-0); the "
                    "bits above them say which kind of acknowledgement this is.")
    if _same(got, want * 1000):
        raise wrong(f"{answer} is in microseconds; give milliseconds.")
    if _same(got, want / 1000):
        raise wrong(f"{answer} is in seconds; give milliseconds.")
    if any(0 <= c < len(RNR_TIMER_US) and _same(got, RNR_TIMER_US[c] / 1000) for c in (code - 1, code + 1)):
        raise wrong(f"{answer} ms is the delay of a neighbouring timer code, not of the code in this frame: "
                    "RNR_TIMER_US is indexed by the code itself, counting from 0.")
    if _same(got, 4.096e-3 * 2 ** code) or _same(got, 4.096 * 2 ** code):
        raise wrong(f"{answer} is 4.096 \u00b5s x 2^code, the formula of the transport (ACK) timeout; an RNR timer "
                    "code stands for a delay of its own table, RNR_TIMER_US.")
    if want < got <= want * 1.2:
        raise wrong(f"{answer} ms is close, but not the delay the NAK asks for. A wait measured on a ladder runs a "
                    "little longer than that minimum; the code in the frame gives it exactly.")
    raise wrong(f"{answer} ms is not the delay this RNR NAK asks for.",
                "start from the syndrome byte (offset 54): its type, then its 5-bit value")


# ----------------------------------------------------------------------------- 04 write / imm


_IMM_DATA = bytes(range(65, 91)) * 40


@exercise("write.imm", "Write a program: RDMA WRITE with immediate", notebook="04-write-imm",
          program=Program(11, lambda p: [(_IMM_DATA, 0x1234ABCD)]), hints=(
    "The responder consumes a receive WQE for the immediate data: post_recv on pair.b first (an SGE may be empty).",
    "opcode=IBV_WR_RDMA_WRITE_WITH_IMM, imm_data=imm, then wr.set_wr_rdma(pair.b.mr.rkey, pair.b.mr.buf).",
    "Return pair.b.poll(): B's completion has opcode IBV_WC_RECV_RDMA_WITH_IMM and carries imm_data.",
))
def _write_imm(answer: Any) -> str:
    if not isinstance(answer, Run):  # lab.check runs a function on SoftPair(seed=11) and passes its Run
        raise Wrong("Give the function itself (write_with_imm), not its result.", field="write_with_imm",
                    expected="a function (pair, data, imm) -> B's completion")
    p, data = answer, _IMM_DATA
    wc, = answer.returned
    trouble = wire_trouble(p)
    if trouble is not None:
        raise trouble
    ops = [ev.opcode_name for ev in p.trace if ev.kind == "sent" and ev.node == p.a.name]
    if not any("with Immediate" in (o or "") for o in ops):
        raise Wrong("No packet carried immediate data.", field="BTH.opcode",
                    given=Said(", ".join(map(str, ops)) or "no packets"),
                    expected="an RDMA WRITE ... with Immediate opcode (IBV_WR_RDMA_WRITE_WITH_IMM)")
    if wc is Ellipsis or wc is None:
        raise Wrong("Your function returned nothing: return the completion B received.", field="return value",
                    given=wc, expected="B's work completion (pair.b.poll())")
    got = p.b.mr.read(len(data), 0)
    if got != data:
        first = next(i for i, (x, y) in enumerate(zip(got, data, strict=False)) if x != y)
        raise Wrong(f"B's memory differs from the data at offset {first}.", field="B's MR", offset=first,
                    given=got[first:first + 8], expected=f"the data: {data[first:first + 8].hex(' ')} ...")
    if getattr(wc, "opcode", None) != e.IBV_WC_RECV_RDMA_WITH_IMM:
        op = getattr(wc, "opcode", None)
        wc_opcodes = ("SEND", "RDMA_WRITE", "RDMA_READ", "COMP_SWAP", "FETCH_ADD", "RECV", "RECV_RDMA_WITH_IMM")
        name = [f"IBV_WC_{k}" for k in wc_opcodes if getattr(e, f"IBV_WC_{k}", None) == op]
        raise Wrong("The completion you returned is not B's RECV_RDMA_WITH_IMM completion"
                    + (" (IBV_WC_RDMA_WRITE is A's own completion)" if op == e.IBV_WC_RDMA_WRITE else "") + ".",
                    field="wc.opcode", given=Said(next(iter(name), repr(op))), expected="IBV_WC_RECV_RDMA_WITH_IMM")
    if wc.imm_data != 0x1234ABCD:
        swapped = int.from_bytes((wc.imm_data & 0xFFFFFFFF).to_bytes(4, "little"), "big") == 0x1234ABCD
        raise Wrong(f"B received immediate data {wc.imm_data:#x}; the test passed 0x1234abcd"
                    + (" (byte-swapped)." if swapped else "."), field="ImmDt.imm", given=wc.imm_data,
                    expected="0x1234abcd, the imm argument")
    return f"Data placed and B woke up with imm 0x1234abcd; A sent {len(ops)} packet(s): {ops[0]} ... {ops[-1]}."


# ----------------------------------------------------------------------------- 05 read


_SECRET = random.Random(7).randbytes(3000)


def _read_setup(p: Any) -> list[tuple[Any, ...]]:
    p.b.mr.write(_SECRET, len(_SECRET), 1000)
    return [(1000, 3000)]


@exercise("read.program", "Write a program that reads remote memory", notebook="05-read",
          program=Program(21, _read_setup), hints=(
    "Post one work request on pair.a.qp: opcode IBV_WR_RDMA_READ, an SGE on A's own MR (the sink), "
    "and set_wr_rdma(B's rkey, B's address + remote_offset).",
    "Wait for A's completion (pair.a.poll()) before reading A's MR: the data is not there before.",
    "Return pair.a.mr.read(length, 0).",
))
def _read_program(answer: Any) -> str:
    if not isinstance(answer, Run):  # lab.check runs a function on SoftPair(seed=21) and passes its Run
        raise Wrong("Give the function itself (read_remote), not its result.", field="read_remote",
                    expected="a function (pair, remote_offset, length) -> bytes")
    p, secret = answer, _SECRET
    got, = answer.returned
    trouble = wire_trouble(p)
    if trouble is not None:
        raise trouble
    if got is None or got is Ellipsis:
        raise Wrong("Your function returned nothing: return the bytes you read.", field="return value", given=got,
                    expected="the 3000 bytes read into A's MR")
    sent = [ev for ev in p.trace if ev.kind == "sent" and ev.node == p.a.name]
    if not any(ev.opcode == find_opcode(Transport.RC, Op.RDMA_READ_REQUEST) for ev in sent):
        raise Wrong("A never sent an RDMA READ Request: the bytes did not come over the wire by a READ.",
                    field="BTH.opcode", given=Said(", ".join(str(ev.opcode_name) for ev in sent) or "no packets"),
                    expected="RC RDMA READ Request (IBV_WR_RDMA_READ)")
    if any(ev.kind == "completed" and ev.node == p.b.name for ev in p.trace):
        raise Wrong("B's CPU got a completion: a READ should not involve B's application at all.",
                    field="B's completions", expected="none: a READ is one-sided")
    try:
        got = bytes(got)
    except TypeError:
        raise Wrong(f"Your function returned a {type(got).__name__}; return the bytes (pair.a.mr.read(length, 0)).",
                    field="return value", given=got, expected="bytes") from None
    if got != secret:
        if len(got) != len(secret):
            raise Wrong(f"You returned {len(got)} bytes; the test asked for {len(secret)}.", field="length",
                        given=Said(f"{len(got)} bytes"), expected=f"{len(secret)} bytes")
        first = next(i for i, (x, y) in enumerate(zip(got, secret, strict=True)) if x != y)
        raise Wrong(f"Your bytes differ from B's memory from offset {first} on: check the remote address "
                    "(B's base + remote_offset) and that you waited for the completion.", field="RETH.va",
                    offset=first, given=got[first:first + 8],
                    expected=f"B's bytes at remote_offset + {first}: {secret[first:first + 8].hex(' ')} ...")
    return "You read 3000 bytes of B's memory; B's CPU took no part (no completion on B)."


@exercise("read.responses", "Count the READ responses", notebook="05-read", hints=(
    "One READ Request; the responder answers with MTU-sized READ Response packets.",
))
def _read_responses(answer: Any) -> str:
    p = SoftPair(mtu=4096)
    wr = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_READ, num_sge=1, sg=[SGE(p.a.mr.buf, 10000, p.a.mr.lkey)])
    wr.set_wr_rdma(p.b.mr.rkey, p.b.mr.buf)
    p.a.qp.post_send(wr)
    p.a.poll()
    want = sum(1 for ev in p.trace if ev.kind == "sent" and ev.node == p.b.name and ev.opcode is not None
               and OPCODES[ev.opcode].op == Op.RDMA_READ_RESPONSE)
    got = as_int(answer, "the number of READ responses", field="BTH.opcode")
    expected = "the number of RDMA READ Response packets B sends for 10000 bytes at MTU 4096"
    if got == want:
        return f"Yes: {want} responses (ceil(10000 / 4096)), First, Middle, Last."
    if got == want + 1:
        raise Wrong("The READ Request itself is not a response; count the packets B sends.", field="BTH.opcode",
                    expected=expected)
    if got == 10000 // 4096:
        raise Wrong(f"{got} responses carry only {got * 4096} of the 10000 bytes: the remainder needs a packet too.",
                    field="BTH.opcode", expected=expected)
    raise Wrong(f"{got} responses would carry up to {got} x 4096 bytes; recount.", field="BTH.opcode",
                expected=expected)


# ----------------------------------------------------------------------------- 06 atomics


def atomic_sequence() -> Any:
    """Counter at B offset 0 starts at 5; A runs FetchAdd(+3), CmpSwap(8 -> 100), CmpSwap(8 -> 7), FetchAdd(+1)."""

    p = SoftPair(seed=31)
    p.b.mr.write(struct.pack("<Q", 5), 8, 0)
    ops = [(e.IBV_WR_ATOMIC_FETCH_AND_ADD, 3, 0), (e.IBV_WR_ATOMIC_CMP_AND_SWP, 8, 100),
           (e.IBV_WR_ATOMIC_CMP_AND_SWP, 8, 7), (e.IBV_WR_ATOMIC_FETCH_AND_ADD, 1, 0)]
    returned = []
    for i, (op, cmp_add, swap) in enumerate(ops):
        wr = SendWR(wr_id=i, opcode=op, num_sge=1, sg=[SGE(p.a.mr.buf + 8 * i, 8, p.a.mr.lkey)])
        wr.set_wr_atomic(p.b.mr.rkey, p.b.mr.buf, cmp_add, swap)
        p.a.qp.post_send(wr)
        p.a.poll()
        returned.append(struct.unpack("<Q", p.a.mr.read(8, 8 * i))[0])
    return p, returned, struct.unpack("<Q", p.b.mr.read(8, 0))[0]


@exercise("atomic.final", "Predict a sequence of atomics", notebook="06-atomics", hints=(
    "Each atomic returns the value *before* it acted.",
    "CmpSwap swaps only if the remote value equals the compare value.",
))
def _atomic_final(answer: Any) -> str:
    _, returned, final = atomic_sequence()
    shape = "[list of the 4 returned values, final counter value]"
    if not isinstance(answer, (list, tuple)) or len(answer) != 2:
        raise Wrong(f"Give {shape}.", field="answer", expected=shape)
    ret, fin = answer
    if not isinstance(ret, (list, tuple)) or len(ret) != 4:
        raise Wrong("The first item must list the 4 values the atomics returned.", field="returned values",
                    given=ret, expected="a list of 4 integers")
    for i, (g, w) in enumerate(zip(ret, returned, strict=True)):
        if as_int(g, "a returned value", field="AtomicAckETH.orig_data") != w:
            raise Wrong(f"The value returned by atomic #{i} is wrong.", field="AtomicAckETH.orig_data",
                        given=g, expected=f"the counter's value just before atomic #{i} acted",
                        details=["an atomic returns the remote value as it was before the operation"])
    if as_int(fin, "the final value", field="counter") != final:
        raise Wrong("The returned values are right but the final counter value is not.", field="counter", given=fin,
                    expected="the counter after all four atomics")
    return f"Right: returned {returned}, final value {final}."


@exercise("atomic.lock", "Write a spin-lock acquire with CmpSwap", notebook="06-atomics",
          program=Program(41, lambda p: [(), ()]), hints=(
    "CmpSwap(compare=0, swap=1) on B's lock word: it succeeds only if the lock was free.",
    "The atomic returns the old value into your local buffer: the lock was yours if the old value was 0.",
    "Read the 8 returned bytes little-endian (struct.unpack('<Q', ...)) after pair.a.poll().",
))
def _lock(answer: Any) -> str:
    if not isinstance(answer, Run):  # lab.check calls a function twice on SoftPair(seed=41) and passes the Run
        raise Wrong("Give the function itself (try_lock).", field="try_lock", expected="a function (pair) -> bool")
    p = answer
    first, second = answer.returned
    trouble = wire_trouble(p)
    if trouble is not None:
        raise trouble
    word = struct.unpack("<Q", p.b.mr.read(8, 64))[0]
    if not any(ev.opcode == find_opcode(Transport.RC, Op.CMP_SWAP) for ev in p.trace if ev.kind == "sent"):
        sent = sorted({str(ev.opcode_name) for ev in p.trace if ev.kind == "sent" and ev.node == p.a.name})
        raise Wrong("No CmpSwap was sent: a read-then-write is not atomic.", field="BTH.opcode",
                    given=Said(", ".join(sent) or "no packets"), expected="RC COMPARE & SWAP (IBV_WR_ATOMIC_CMP_AND_SWP)")
    if first is not True:
        raise Wrong(f"The first call on a free lock returned {first!r}; it should acquire it and return True.",
                    field="return value", given=first, expected="True (a bool)")
    if second is not False:
        raise Wrong(f"The second call returned {second!r}; the lock was taken, so it must return False.",
                    field="return value", given=second, expected="False (a bool)")
    if word != 1:
        raise Wrong(f"B's lock word (offset 64) is {word}; after acquiring it should be 1.", field="lock word",
                    offset=64, given=word, expected="1")
    return "Acquired once, refused the second time, lock word = 1: an atomic test-and-set across the network."


Answer = Callable[..., Any]
