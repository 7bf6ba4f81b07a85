"""Checkers for 02-verbs-objects, 03-send-receive, 04-write-imm, 05-read and 06-atomics."""

from __future__ import annotations

import random
import socket
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
from rdmalab.wire.ib import AETH, IB_MTUS, RNR_TIMER_US, AtomicETH, ImmDt
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


def clean_run(answer: Any, function: str, expected: str, *, causes: tuple[str, ...] = ()) -> Run:
    """The :class:`Run` that ``lab.check`` made of a program exercise's ``function``, once nothing went
    wrong on its wire: a value given instead of the function is one :class:`Wrong` (naming ``function``,
    which ``expected`` describes), what :func:`wire_trouble` finds another, with ``causes`` added to its
    details (what may have led to it in this exercise)."""
    if not isinstance(answer, Run):
        raise Wrong(f"Give the function itself ({function}), not its result.", field=function, expected=expected)
    trouble = wire_trouble(answer)
    if trouble is not None:
        trouble.details += list(causes)
        raise trouble
    return answer


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
    expected = "the QP states from ERR, in order, ending with RTS (names or ibv_qp_state values)"
    states = _qp_states(answer, expected)
    names = _state_names()
    if states[0] == ERR:
        states = states[1:]  # the learner included the starting state: fine
    if not states:
        raise Wrong("Your list holds only ERR: go on with the states that come after it, up to RTS.", field="qp_state",
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
    mtu = r.choice(IB_MTUS)
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
_IMM = 0x1234ABCD


def _sent_by_a(p: Any) -> list[str]:
    """The opcode names of the packets A put on the wire, in order (retransmissions included)."""
    return [str(ev.opcode_name) for ev in p.trace if ev.kind == "sent" and ev.node == p.a.name and ev.opcode is not None]


def _said_sent(ops: list[str]) -> Said:
    """What A sent, as the feedback's "You gave": "nothing" or the opcodes, a repeated one counted."""
    if not ops:
        return Said("A sent no packet")
    runs: list[list[Any]] = []
    for op in ops:
        if runs and runs[-1][0] == op:
            runs[-1][1] += 1
        else:
            runs.append([op, 1])
    return Said("A sent " + ", ".join(op if n == 1 else f"{n} x {op}" for op, n in runs))


@exercise("write.imm", "Write a program: RDMA WRITE with immediate", notebook="04-write-imm",
          program=Program(11, lambda p: [(_IMM_DATA, _IMM)]), hints=(
    "The responder consumes a receive WQE for the immediate data: post_recv on pair.b first (an SGE may be empty).",
    "opcode=IBV_WR_RDMA_WRITE_WITH_IMM, imm_data=imm, then wr.set_wr_rdma(pair.b.mr.rkey, pair.b.mr.buf).",
    "Return pair.b.poll(): B's completion has opcode IBV_WC_RECV_RDMA_WITH_IMM and carries imm_data.",
))
def _write_imm(answer: Any) -> str:
    p, data = clean_run(answer, "write_with_imm", "a function (pair, data, imm) -> B's completion"), _IMM_DATA
    wc, = p.returned
    ops = _sent_by_a(p)
    want_op = "RC RDMA WRITE ... with Immediate (IBV_WR_RDMA_WRITE_WITH_IMM)"
    if not ops:
        raise Wrong("Your function put no packet on the wire: A never posted the RDMA WRITE with immediate "
                    "(pair.a.qp.post_send), or posted it on another QP than pair.a.qp.", field="BTH.opcode",
                    given=_said_sent(ops), expected=want_op)
    if not any("RDMA WRITE" in o and "with Immediate" in o for o in ops):
        if any("SEND" in o and "with Immediate" in o for o in ops):
            why = ("A SEND with immediate carries immediate data too, but its payload goes into B's receive buffer; "
                   "an RDMA WRITE with immediate places the data at the address the RETH names.")
        elif any("RDMA WRITE" in o for o in ops):
            why = ("The RDMA WRITE placed the data, but a plain WRITE carries no immediate data and wakes no one on B: "
                   "use the opcode IBV_WR_RDMA_WRITE_WITH_IMM.")
        else:
            why = "None of these carries immediate data into B's memory: the exercise asks for an RDMA WRITE with immediate."
        raise Wrong(why, field="BTH.opcode", given=_said_sent(ops), expected=want_op)
    if wc is Ellipsis or wc is None:
        raise Wrong("Your function returned nothing: return the completion B received.", field="return value",
                    given=wc, expected="B's work completion (pair.b.poll())")
    got = p.b.mr.read(len(data), 0)
    if got != data:
        first = next(i for i, (x, y) in enumerate(zip(got, data, strict=False)) if x != y)
        raise Wrong(f"B's memory differs from the data at offset {first}: the WRITE must start at offset 0 of "
                    "B's buffer (pair.b.mr.buf) and carry all of data.", field="B's MR", offset=first,
                    given=got[first:first + 8], expected=f"the data: {data[first:first + 8].hex(' ')} ...")
    if getattr(wc, "opcode", None) != e.IBV_WC_RECV_RDMA_WITH_IMM:
        op = getattr(wc, "opcode", None)
        wc_opcodes = ("SEND", "RDMA_WRITE", "RDMA_READ", "COMP_SWAP", "FETCH_ADD", "RECV", "RECV_RDMA_WITH_IMM")
        name = [f"IBV_WC_{k}" for k in wc_opcodes if getattr(e, f"IBV_WC_{k}", None) == op]
        raise Wrong("The completion you returned is not B's RECV_RDMA_WITH_IMM completion"
                    + (" (IBV_WC_RDMA_WRITE is A's own completion)" if op == e.IBV_WC_RDMA_WRITE else "") + ".",
                    field="wc.opcode", given=Said(next(iter(name), repr(op))), expected="IBV_WC_RECV_RDMA_WITH_IMM")
    imm = wc.imm_data & 0xFFFFFFFF
    network = socket.htonl(_IMM)  # what B's completion holds when the program posted imm in network order
    if imm not in (_IMM, network):
        on_wire = [pk[ImmDt].imm for pk in p.packets() if pk is not None and ImmDt in pk]
        wire = f" (on the wire, ImmDt = {on_wire[-1]:#010x})" if on_wire else ""
        why = ("the work request carried no immediate value: pass imm_data=imm to SendWR" if imm == 0 else
               f"that is not the imm argument the test passed, {_IMM:#x}, in either byte order")
        raise Wrong(f"B's completion carries imm_data {imm:#x}{wire}: {why}.", field="ImmDt.imm", given=wc.imm_data,
                    expected=f"{_IMM:#x}, the imm argument, as given (or in network order, socket.htonl(imm))")
    sent = f"A sent {len(ops)} packet(s): {ops[0]} ... {ops[-1]}"
    if imm == _IMM and _IMM != network:
        return (f"Data placed and B woke up with imm_data {_IMM:#x}, as you passed it; {sent}. On the wire the "
                f"ImmDt reads {socket.ntohl(_IMM):#010x}: the field is network order and you gave a host-order "
                "value, which comes back unchanged to another little-endian host.")
    if imm == _IMM:  # a big-endian host: host order is network order
        return f"Data placed and B woke up with imm_data {_IMM:#x}; {sent}."
    return (f"Data placed and B woke up; {sent}. You posted socket.htonl(imm), so the ImmDt on the wire reads "
            f"{_IMM:#010x} and B's completion holds {imm:#x}: B's program gets the value back with "
            "socket.ntohl(wc.imm_data).")


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
    p, secret = clean_run(answer, "read_remote", "a function (pair, remote_offset, length) -> bytes"), _SECRET
    got, = p.returned
    ops = _sent_by_a(p)
    want_op = "RC RDMA READ Request (IBV_WR_RDMA_READ)"
    if not ops:
        raise Wrong("Your function put no packet on the wire: A never sent an RDMA READ Request "
                    "(pair.a.qp.post_send), so " + ("nothing came from B's memory." if got is None or got is Ellipsis
                                                    else "the bytes it returned did not come over the network."),
                    field="BTH.opcode", given=_said_sent(ops), expected=want_op)
    if "RC RDMA READ Request" not in ops:
        pushes = any(w in o for o in ops for w in ("WRITE", "SEND"))
        raise Wrong("A never sent an RDMA READ Request" + (": a WRITE or a SEND carries A's bytes to B, and a READ "
                    "brings B's bytes to A." if pushes else ", the one request that brings B's bytes to A."),
                    field="BTH.opcode", given=_said_sent(ops), expected=want_op)
    if got is None or got is Ellipsis:
        raise Wrong("Your function returned nothing: return the bytes you read.", field="return value", given=got,
                    expected="the 3000 bytes read into A's MR")
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


#: the MTUs a read.responses scenario draws from: not 1024, the MTU of the READ the notebook draws above it
_READ_MTUS = (256, 512, 2048, 4096)


@variant.scenario("read.responses")
def _read_responses_scenario(r: random.Random) -> dict[str, Any]:
    """A READ of 3 to 9 response packets whose last one is short (the length is no multiple of the MTU)."""
    mtu = r.choice(_READ_MTUS)
    packets = r.randrange(3, 10)
    return {"length": (packets - 1) * mtu + r.randrange(1, mtu), "mtu": mtu}


def read_responses(length: int, mtu: int) -> list[tuple[str, int]]:
    """Run a READ of ``length`` bytes at ``mtu`` on the soft engine: (opcode name, data bytes) of each response B sent."""
    p = SoftPair(mtu=mtu)
    wr = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_READ, num_sge=1, sg=[SGE(p.a.mr.buf, length, p.a.mr.lkey)])
    wr.set_wr_rdma(p.b.mr.rkey, p.b.mr.buf)
    p.a.qp.post_send(wr)
    p.a.poll()
    return [(str(ev.opcode_name), int(ev.detail["len"])) for ev in p.trace if ev.kind == "sent" and ev.node == p.b.name
            and ev.opcode is not None and OPCODES[ev.opcode].op == Op.RDMA_READ_RESPONSE]


def _count_responses(got: int, given: Any, want: int, length: int, mtu: int) -> None:
    """Raise what is wrong with a count of READ responses (nothing when it is right)."""
    expected = "the number of RDMA READ Response packets B sends for the READ of your scenario (length, MTU)"
    if got == want:
        return
    if got == want + 1:
        why = "You counted one packet too many: the READ Request is A's, not a response; count only the packets B sends."
    elif got == length // mtu:
        why = f"{got} full responses carry {got * mtu} of the {length} bytes: the remainder needs a packet too."
    elif mtu != 1024 and got == -(-length // 1024):
        why = (f"{got} is a count at MTU 1024, the MTU of the READ drawn above; your scenario's READ runs at "
               f"MTU {mtu}.")
    elif got < 1:
        why = "B answers every READ with at least one response (a READ Response Only)."
    elif got < want:
        carry = "1 response carries" if got == 1 else f"{got} responses of at most {mtu} bytes each carry"
        why = f"{carry} at most {got * mtu} bytes, fewer than the {length} the READ asks for."
    else:
        why = (f"{got} responses is too many: all but the last are full, and {got - 1} full responses would "
               f"already carry {(got - 1) * mtu} bytes, more than the {length} the READ asks for.")
    raise Wrong(why, field="BTH.opcode", given=plain(given), expected=expected)


@exercise("read.responses", "Count the READ responses, size the last", notebook="05-read", varies=True, hints=(
    "One READ Request; the responder answers with READ Response packets of at most one MTU of data each.",
    "Every response but the last is full: the count is the length divided by the MTU, rounded up.",
    "The last response carries what the full ones before it left of the length.",
))
def _read_responses(answer: Any) -> str:
    s = variant.draw("read.responses")
    length, mtu = s.length, s.mtu
    responses = read_responses(length, mtu)
    want, last = len(responses), responses[-1][1]
    shape = "[the number of READ Response packets, the bytes of data the last one carries]"
    if not isinstance(answer, (list, tuple)):
        if isinstance(answer, (int, str)) and not isinstance(answer, bool):
            _count_responses(as_int(answer, "the number of READ responses", field="BTH.opcode"), answer, want,
                             length, mtu)
            raise Wrong(f"Your count is right: {want} responses. The exercise asks for the data bytes of the last "
                        f"one too: give {shape}.", field="answer", given=answer, expected=shape)
        raise Wrong(f"Give {shape}.", field="answer", given=answer, expected=shape)
    if len(answer) != 2:
        raise Wrong(f"Give two numbers, {shape}.", field="answer", given=answer, expected=shape)
    count, tail = answer
    _count_responses(as_int(count, "the number of READ responses", field="BTH.opcode"), count, want, length, mtu)
    got = as_int(tail, "the data bytes of the last response", field="READ Response Last: data")
    if got == last:
        return (f"Yes: {want} responses (ceil({length} / {mtu})), a First, {want - 2} Middle and a Last that carries "
                f"the {last} bytes the {want - 1} full ones left ({length} - {want - 1} x {mtu}).")
    pad = -last % 4
    if got == mtu:
        why = f"{got} bytes is a full MTU; only the responses before the last are full, and the last carries what is left"
    elif pad and got == last + pad:
        why = (f"{got} counts the pad: a packet's payload is padded to a multiple of 4 bytes, and BTH.padcnt says "
               "how many of them are not data")
    elif got in (last + 4, last + 4 + pad):
        why = f"{got} counts the AETH (4 bytes) the READ Response Last carries besides its data"
    elif got == length - want * mtu:
        why = f"{got} takes {want} full MTUs off the length; the last response is not a full one"
    else:
        why = f"{got} bytes is not what the {want - 1} full responses before the last leave of the {length}"
    raise Wrong(f"The count is right, but not the size of the last response: {why}.",
                field="READ Response Last: data", given=plain(tail),
                expected="the bytes of data (headers and pad not counted) in the READ Response Last")


# ----------------------------------------------------------------------------- 06 atomics


@variant.scenario("atomic.final")
def _atomic_final_scenario(r: random.Random) -> dict[str, Any]:
    """FetchAdd, CmpSwap, CmpSwap, FetchAdd on a counter: one CmpSwap finds its compare value, the other does not.

    Either the first CmpSwap compares with the counter as the FetchAdd left it (it swaps, and the second, which
    compares with the same value, finds the swapped value and fails), or it compares with the start value,
    stale once the FetchAdd acted (it fails, and the second swaps).  The values avoid those the notebook's
    own example prints (41, 42, 100, 7)."""
    start = r.choice([v for v in range(10, 100) if v not in (41, 42)])
    add1, add2 = r.randrange(2, 10), r.randrange(2, 10)
    swap1, swap2 = r.sample(range(120, 1000), 2)
    first_swaps = r.random() < 0.5
    return {"start": start, "add1": add1, "compare1": start + add1 if first_swaps else start, "swap1": swap1,
            "compare2": start + add1, "swap2": swap2, "add2": add2}


def _atomic_ops(s: Any) -> list[tuple[str, int, int]]:
    """The scenario's four atomics: (kind, compare or add, swap)."""
    return [("FetchAdd", s.add1, 0), ("CmpSwap", s.compare1, s.swap1), ("CmpSwap", s.compare2, s.swap2),
            ("FetchAdd", s.add2, 0)]


def _atomic_label(ops: list[tuple[str, int, int]], i: int) -> str:
    """"the second CmpSwap(compare 57, swap 431)": the atomic that returns r(i+1), as the notebook lists it."""
    kind, x, swap = ops[i]
    nth_of_kind = ("first", "second")[[k for k, _, _ in ops[:i]].count(kind)]
    return f"the {nth_of_kind} {kind}" + (f"(+{x})" if kind == "FetchAdd" else f"(compare {x}, swap {swap})")


def _replay_on_paper(start: int, ops: list[tuple[str, int, int]], flip: int | None = None) -> tuple[list[int], int]:
    """The values the atomics return and the final counter, worked out by hand; ``flip``: the index of a CmpSwap
    whose outcome is taken the wrong way round (a learner's likely slip)."""
    counter, returned = start, []
    for i, (kind, x, swap) in enumerate(ops):
        returned.append(counter)
        if kind == "FetchAdd":
            counter = (counter + x) % 2**64
        elif (counter == x) != (i == flip):
            counter = swap
    return returned, counter


def atomic_sequence(s: Any = None) -> Any:
    """Run the atomics of ``s`` (default: your scenario, ``lab.scenario("atomic.final")``) on the soft engine.

    B's counter at offset 0 starts at ``s.start``; A runs FetchAdd(add1), CmpSwap(compare1, swap1),
    CmpSwap(compare2, swap2), FetchAdd(add2).  Returns (pair, the four values returned, the final counter).
    """

    s = variant.draw("atomic.final") if s is None else s
    p = SoftPair(seed=31)
    p.b.mr.write(struct.pack("<Q", s.start), 8, 0)
    wr_ops = {"FetchAdd": e.IBV_WR_ATOMIC_FETCH_AND_ADD, "CmpSwap": e.IBV_WR_ATOMIC_CMP_AND_SWP}
    returned = []
    for i, (kind, x, swap) in enumerate(_atomic_ops(s)):
        wr = SendWR(wr_id=i, opcode=wr_ops[kind], num_sge=1, sg=[SGE(p.a.mr.buf + 8 * i, 8, p.a.mr.lkey)])
        wr.set_wr_atomic(p.b.mr.rkey, p.b.mr.buf, x, swap)
        p.a.qp.post_send(wr)
        p.a.poll()
        returned.append(struct.unpack("<Q", p.a.mr.read(8, 8 * i))[0])
    return p, returned, struct.unpack("<Q", p.b.mr.read(8, 0))[0]


@exercise("atomic.final", "Predict a sequence of atomics", notebook="06-atomics", varies=True, hints=(
    "Each atomic returns the value *before* it acted.",
    "CmpSwap swaps only if the remote value equals the compare value.",
))
def _atomic_final(answer: Any) -> str:
    s = variant.draw("atomic.final")
    ops = _atomic_ops(s)
    _, returned, final = atomic_sequence(s)
    shape = "[[r1, r2, r3, r4], final]: the 4 returned values in a list, then the final counter value"
    if isinstance(answer, (list, tuple)) and len(answer) == 5 and not any(isinstance(a, (list, tuple)) for a in answer):
        raise Wrong("You gave five values in one list: put the 4 returned values in a list of their own, "
                    "then the final value.", field="answer", given=answer, expected=shape)
    if not isinstance(answer, (list, tuple)) or len(answer) != 2:
        raise Wrong(f"Give {shape}.", field="answer", given=answer, expected=shape)
    ret, fin = answer
    if not isinstance(ret, (list, tuple)) or len(ret) != 4:
        raise Wrong("The first item must list the 4 values the atomics returned, r1 to r4.", field="returned values",
                    given=ret, expected="a list of 4 integers")
    after = returned[1:] + [final]
    for i, (g, w) in enumerate(zip(ret, returned, strict=True)):
        got = as_int(g, f"r{i + 1}", field="AtomicAckETH.orig_data")
        if got == w:
            continue
        label = _atomic_label(ops, i)
        why = f"{got} is not the value {label} found on the counter"
        if got == after[i]:
            why = f"{got} is the counter after {label} acted; an atomic returns the value it found, before it acted"
        else:
            for j, (kind, x, _) in enumerate(ops[:i]):
                if kind == "CmpSwap" and _replay_on_paper(s.start, ops, flip=j)[0][i] == got:
                    assumed = "not swapped" if returned[j] == x else "swapped"
                    why = (f"{label} finds {got} only if {_atomic_label(ops, j)} (r{j + 1}) has {assumed}: "
                           f"compare its compare value, {x}, with r{j + 1}, the counter it found")
                    break
            else:
                if i > 0 and got == returned[i - 1] and returned[i - 1] != w:
                    why = (f"{got} is what r{i} found; by the time {label} arrives, the atomic before it has acted "
                           "on the counter")
        raise Wrong(f"r{i + 1} is wrong: {why}.", field="AtomicAckETH.orig_data", given=plain(g),
                    expected=f"r{i + 1}: the counter's value just before {label} acted",
                    details=["an atomic returns the remote value as it was before the operation"])
    got = as_int(fin, "the final value", field="counter")
    if got != final:
        last = _atomic_label(ops, 3)
        if got == returned[3]:
            why = f"{got} is r4, the counter {last} found; the final value is the counter after it acted"
        else:
            why = f"{got} is not the counter after {last} acted"
        raise Wrong(f"r1 to r4 are right, but the final counter value is not: {why}.", field="counter",
                    given=plain(fin), expected="the counter after all four atomics")
    return f"Right: the atomics returned {returned}, and the counter ends at {final}."


def _b_words_changed(p: Any) -> list[tuple[int, int]]:
    """(offset, value) of the 8-byte words of B's memory (as the run kept it) that are no longer 0."""
    mem = p.b.mr.data  # a Run keeps the start of B's memory (rdmalab.lab.answers.MEMORY_KEPT bytes)
    return [(off, struct.unpack_from("<Q", mem, off)[0]) for off in range(0, len(mem) - 7, 8)
            if mem[off:off + 8] != bytes(8)]


@exercise("atomic.lock", "Write a spin-lock acquire with CmpSwap", notebook="06-atomics",
          program=Program(41, lambda p: [(), ()]), hints=(
    "CmpSwap(compare=0, swap=1) on B's lock word: it succeeds only if the lock was free.",
    "The atomic returns the old value into your local buffer: the lock was yours if the old value was 0.",
    "Read the 8 returned bytes little-endian (struct.unpack('<Q', ...)) after pair.a.poll().",
))
def _lock(answer: Any) -> str:
    p = clean_run(answer, "try_lock", "a function (pair) -> bool")  # lab.check called it twice
    first, second = p.returned
    ops = _sent_by_a(p)
    cmp_swap = "RC CmpSwap (IBV_WR_ATOMIC_CMP_AND_SWP) on B's lock word, one per call"
    swaps = [pk[AtomicETH] for pk in p.packets() if pk is not None and AtomicETH in pk
             and pk.bth.opcode == find_opcode(Transport.RC, Op.CMP_SWAP)]
    if not ops:
        raise Wrong("Your function put no packet on the wire, in either call: it never asked B's NIC for the lock "
                    f"(it returned {first!r}, then {second!r}).", field="BTH.opcode", given=_said_sent(ops),
                    expected=cmp_swap)
    word = struct.unpack("<Q", p.b.mr.read(8, 64))[0]
    if not swaps:
        if any("FetchAdd" in o for o in ops):
            held = f" (after your two calls the lock word holds {word})" if word else ""
            why = (f"A FetchAdd changes the word whether the lock is free or not{held}. Take the lock only if it "
                   "is free: that is a CmpSwap.")
        elif any("READ" in o for o in ops) and any("WRITE" in o for o in ops):
            why = ("Reading the word, then writing it, is two operations: another requester can take the lock "
                   "between them. One atomic must test and set the word.")
        else:
            why = "None of these tests and sets B's lock word in one step: that takes an atomic CmpSwap."
        raise Wrong(why, field="BTH.opcode", given=_said_sent(ops), expected=cmp_swap)
    if word != 1:
        elsewhere = [(off, v) for off, v in _b_words_changed(p) if off != 64]
        pairs = ", ".join(f"CmpSwap(compare {a.compare}, swap {a.swap_add})" for a in swaps)
        if elsewhere:
            why = (f"your CmpSwap changed B's word at offset {elsewhere[0][0]} (to {elsewhere[0][1]}); the lock is "
                   "the word at offset 64 of B's buffer (pair.b.mr.buf + 64)")
        elif word == 0 and all(a.compare == 0 and a.swap_add == 1 for a in swaps):
            why = "your CmpSwap acted on a word of B's memory other than offset 64 (pair.b.mr.buf + 64)"
        else:
            why = (f"A sent {pairs}. The lock is free when the word holds 0 and taken when it holds 1: which value "
                   "must the CmpSwap find, and which must it write?")
        raise Wrong(f"After both calls B's lock word (offset 64) is {word}, not 1: {why}"
                    + ("" if why.endswith("?") else "."), field="lock word",
                    offset=64, given=plain(word), expected="1: taken by the first call")
    if len(swaps) < 2:
        raise Wrong(f"Only one of the two calls sent a CmpSwap ({_said_sent(ops)}): each try must ask B's NIC, "
                    "because another requester may have taken or released the lock since.", field="BTH.opcode",
                    given=_said_sent(ops), expected=cmp_swap)
    for call, got, want in (("first", first, True), ("second", second, False)):
        if got is want:
            continue
        state = "free, so this call took it" if want else "taken by the first call"
        if got is (not want):
            hint = ("the CmpSwap returns the word as it was before: 0 means it was free and the swap happened"
                    if want else "the word the CmpSwap returned was 1: someone (your first call) held the lock")
        elif isinstance(got, int) and not isinstance(got, bool):
            hint = f"{got!r} is a number; return a bool, True if you got the lock, False if not"
        else:
            hint = "return a bool: True if you got the lock, False if not"
        raise Wrong(f"The {call} call returned {got!r}; the lock was {state}: {hint}.", field="return value",
                    given=got, expected=f"{want} (a bool)")
    return "Acquired once, refused the second time, lock word = 1: an atomic test-and-set across the network."

Answer = Callable[..., Any]
