"""Notebooks 04 (WRITE with immediate), 05 (READ) and 06 (atomics): variants and feedback (issues 35 and 36).

* read.responses and atomic.final draw their scenario per student: every variant is a teachable one, and a
  classmate's right answer fails;
* the feedback describes what the learner's program did (from its recorded run), not a guess, and a wrong
  answer's feedback moves the learner one step on without stating the value asked for;
* atomic.final numbers the returned values r1 to r4, as the notebook's template does;
* what notebook 04 says about the byte order of imm_data is what the engine does.
"""

from __future__ import annotations

import re
import socket
import struct
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import rdmalab.verbs.enums as e
from rdmalab import lab
from rdmalab.lab import FAIL, PASS
from rdmalab.lab.checkers.verbs import _atomic_label, _atomic_ops, atomic_sequence, read_responses
from rdmalab.lab.pair import SoftPair
from rdmalab.lab.variant import as_student
from rdmalab.verbs.wr import SGE, RecvWR, SendWR
from rdmalab.wire.ib import ImmDt

STUDENTS = ("alice", "bob", "carol", "")  # "" is the book's variant


@pytest.fixture(params=STUDENTS, ids=[s or "book" for s in STUDENTS])
def student(request: pytest.FixtureRequest) -> Iterator[str]:
    with as_student(request.param):
        yield request.param


def word(n: int) -> re.Pattern[str]:
    """A number as a whole word of a message ("8" is not inside "4096")."""
    return re.compile(rf"(?<![\w.]){n}(?![\w])")


def said(r: Any) -> str:
    """Everything a learner reads in a result but what they gave."""
    return " ".join([r.message, *r.details, r.expected or ""])


# ----------------------------------------------------------------------------- 05: read.responses


def read_answer() -> tuple[int, int]:
    s = lab.scenario("read.responses")
    sizes = [n for _, n in read_responses(s.length, s.mtu)]
    return len(sizes), sizes[-1]


def test_every_read_scenario_is_teachable() -> None:
    """3 to 9 responses, a short last one (a remainder to think about), and never the notebook's own MTU 1024."""
    for i in range(300):
        with as_student(f"student{i}"):
            s = lab.scenario("read.responses")
            assert s.mtu in (256, 512, 2048, 4096), s
            assert 3 <= -(-s.length // s.mtu) <= 9 and s.length % s.mtu, s


def test_read_responses_is_the_students_own(student: str) -> None:
    n, last = read_answer()
    s = lab.scenario("read.responses")
    assert (n, last) == (-(-s.length // s.mtu), s.length - (n - 1) * s.mtu)  # the engine agrees with the arithmetic
    assert lab.check("read.responses", [n, last]).status == PASS
    others = {}
    for other in STUDENTS:
        with as_student(other):
            others[other] = read_answer()
    assert len(set(others.values())) == len(others), others
    for other, answer in others.items():
        if other != student:
            assert lab.check("read.responses", list(answer)).status == FAIL, (student, other)


def test_read_responses_feedback_goes_one_step_at_a_time(student: str) -> None:
    n, last = read_answer()
    s = lab.scenario("read.responses")
    # the count first: each wrong count gets its own reason, none says the count
    at_1024 = -(-s.length // 1024)
    fewer = next(g for g in range(1, n - 1) if g != at_1024)  # a short count that is no other slip
    for got, phrase in ((n + 1, "READ Request is A's"), (n - 1, "remainder needs a packet"), (0, "at least one"),
                        (n + 3, "too many"), (fewer, "fewer than")):
        r = lab.check("read.responses", [got, last])
        assert r.status == FAIL and r.field == "BTH.opcode" and phrase in r.message, (got, repr(r))
        assert not word(n).search(said(r)), repr(r)
    r = lab.check("read.responses", [at_1024, last])
    assert "MTU 1024" in r.message and f"MTU {s.mtu}" in r.message, repr(r)
    # a bare count that is right: told so, and asked for the second number, which it is not given
    r = lab.check("read.responses", n)
    assert r.status == FAIL and r.field == "answer" and "count is right" in r.message, repr(r)
    assert not word(last).search(said(r)), repr(r)
    # then the last response's size: a full MTU, the pad counted, the AETH counted, anything else
    pad = -last % 4
    wrong = [(s.mtu, "full MTU"), (last + 4 + pad, "AETH"), (last - 1, "not what")]
    if pad:
        wrong.append((last + pad, "pad"))
    for got, phrase in wrong:
        r = lab.check("read.responses", [n, got])
        assert r.status == FAIL and r.field == "READ Response Last: data" and phrase in r.message, (got, repr(r))
        text = said(r).replace("the AETH (4 bytes)", "the AETH")  # a header's size, not the answer
        assert "count is right" in r.message and not word(last).search(text), repr(r)


# ----------------------------------------------------------------------------- 06: atomic.final


def test_every_atomic_scenario_is_teachable() -> None:
    """One CmpSwap swaps and the other does not; no value is one the notebook's example prints above."""
    for i in range(300):
        with as_student(f"student{i}"):
            s = lab.scenario("atomic.final")
            found = s.start + s.add1
            swapped = [found == s.compare1, (s.swap1 if found == s.compare1 else found) == s.compare2]
            assert swapped.count(True) == 1, s
            assert not {s.start, s.swap1, s.swap2} & {41, 42, 100, 7}, s


def atomic_answer() -> tuple[list[int], int]:
    _, returned, final = atomic_sequence()
    return returned, final


def test_atomic_final_is_the_students_own(student: str) -> None:
    returned, final = atomic_answer()
    assert lab.check("atomic.final", [returned, final]).status == PASS
    assert lab.check("atomic.final", ([str(v) for v in returned], hex(final))).status == PASS
    for other in STUDENTS:
        if other != student:
            with as_student(other):
                theirs = atomic_answer()
            assert lab.check("atomic.final", [theirs[0], theirs[1]]).status == FAIL, (student, other)


def _without_labels(text: str) -> str:
    """The feedback without the names of the four atomics (they quote the scenario's operands, e.g. compare 15)."""
    ops = _atomic_ops(lab.scenario("atomic.final"))
    for i in range(4):
        text = text.replace(_atomic_label(ops, i), "<atomic>")
    return text


def test_atomic_final_walks_r1_to_r4_then_the_final_value(student: str) -> None:
    """A learner who fixes what each feedback names gets, try after try, the next item named (r1, r2, r3, r4,
    the final value), never the value asked for, and the numbering is the template's r1..r4, never #0."""
    returned, final = atomic_answer()
    guess: list[Any] = [[0, 0, 0, 0], 0]
    named = []
    for _ in range(6):
        r = lab.check("atomic.final", guess)
        if r.status == PASS:
            break
        assert r.status == FAIL and "#" not in r.message, repr(r)
        m = re.match(r"r([1-4]) is wrong", r.message)
        if m:
            i = int(m.group(1)) - 1
            assert r.field == "AtomicAckETH.orig_data" and r.expected.startswith(f"r{i + 1}:"), repr(r)
            assert not word(returned[i]).search(_without_labels(said(r))), repr(r)
            named.append(f"r{i + 1}")
            guess[0][i] = returned[i]
        else:
            assert r.field == "counter" and "final counter value" in r.message, repr(r)
            assert not word(final).search(_without_labels(said(r))), repr(r)
            named.append("final")
            guess[1] = final
    assert named == ["r1", "r2", "r3", "r4", "final"], named
    assert lab.check("atomic.final", guess).status == PASS


def test_atomic_final_names_the_slip(student: str) -> None:
    s = lab.scenario("atomic.final")
    returned, final = atomic_answer()
    after = returned[1:] + [final]
    # the value after the atomic, instead of before
    r = lab.check("atomic.final", [[after[0], *returned[1:]], final])
    assert "r1 is wrong" in r.message and "after" in r.message and "before it acted" in r.message, repr(r)
    # r2 taken as if the FetchAdd had not acted yet
    r = lab.check("atomic.final", [[returned[0], returned[0], *returned[2:]], final])
    assert "r2 is wrong" in r.message and "what r1 found" in r.message, repr(r)
    # the CmpSwap that swapped taken as one that did not, and the other way round
    first_swapped = returned[1] == s.compare1
    slip = [returned[0], returned[1], returned[1] if first_swapped else s.swap1, returned[3]]
    r = lab.check("atomic.final", [slip, final])
    assert "r3 is wrong" in r.message, repr(r)
    assert ("has not swapped" if first_swapped else "has swapped") in r.message, repr(r)
    assert f"compare its compare value, {s.compare1}, with r2" in r.message, repr(r)
    # the final value without the last FetchAdd
    r = lab.check("atomic.final", [returned, returned[3]])
    assert "is r4" in r.message and "after it acted" in r.message, repr(r)
    # the shape
    r = lab.check("atomic.final", [*returned, final])
    assert r.field == "answer" and "five values in one list" in r.message, repr(r)


# ----------------------------------------------------------------------------- 06: atomic.lock


def lock(op: int = e.IBV_WR_ATOMIC_CMP_AND_SWP, compare: int = 0, swap: int = 1, offset: int = 64,
         result: Callable[[int], Any] = lambda old: old == 0) -> Callable[..., Any]:
    def try_lock(pair: Any) -> Any:
        a, b = pair.a, pair.b
        wr = SendWR(wr_id=9, opcode=op, num_sge=1, sg=[SGE(a.mr.buf + 128, 8, a.mr.lkey)])
        wr.set_wr_atomic(b.mr.rkey, b.mr.buf + offset, compare, swap)
        a.qp.post_send(wr)
        a.poll()
        return result(struct.unpack("<Q", a.mr.read(8, 128))[0])
    return try_lock


def read_then_write(pair: Any) -> bool:
    a, b = pair.a, pair.b
    wr = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_READ, num_sge=1, sg=[SGE(a.mr.buf, 8, a.mr.lkey)])
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf + 64)
    a.qp.post_send(wr)
    a.poll()
    if a.mr.read(8, 0) != bytes(8):
        return False
    a.mr.write(struct.pack("<Q", 1), 8, 0)
    wr = SendWR(wr_id=2, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(a.mr.buf, 8, a.mr.lkey)])
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf + 64)
    a.qp.post_send(wr)
    a.poll()
    return True


def test_atomic_lock_says_what_the_function_did() -> None:
    """Issue 36: "a read-then-write is not atomic" was said to a function that sent nothing."""
    r = lab.check("atomic.lock", lambda pair: True)
    assert r.status == FAIL and r.given == "A sent no packet", repr(r)
    assert "no packet" in r.message and "read" not in r.message.lower() and "True, then True" in r.message, repr(r)
    r = lab.check("atomic.lock", read_then_write)
    assert r.given.startswith("A sent RC RDMA READ Request, RC RDMA WRITE Only"), repr(r)
    assert "Reading the word, then writing it" in r.message, repr(r)
    r = lab.check("atomic.lock", lock(op=e.IBV_WR_ATOMIC_FETCH_AND_ADD, compare=1))  # add 1
    assert r.given == "A sent 2 x RC FetchAdd" and "FetchAdd changes the word" in r.message, repr(r)
    assert "holds 2" in r.message and "read-then-write" not in r.message, repr(r)


def test_atomic_lock_reads_the_cmpswap_it_sent() -> None:
    r = lab.check("atomic.lock", lock(compare=1, swap=0))
    assert r.field == "lock word" and "CmpSwap(compare 1, swap 0)" in r.message, repr(r)
    assert r.message.endswith("which must it write?"), repr(r)
    r = lab.check("atomic.lock", lock(offset=72))
    assert "changed B's word at offset 72" in r.message, repr(r)
    calls = []

    def once(pair: Any) -> Any:  # asks the NIC only the first time
        calls.append(1)
        return lock()(pair) if len(calls) == 1 else False
    r = lab.check("atomic.lock", once)
    assert "Only one of the two calls sent a CmpSwap" in r.message, repr(r)
    r = lab.check("atomic.lock", lock(result=lambda old: old == 1))
    assert r.field == "return value" and "0 means it was free" in r.message, repr(r)
    r = lab.check("atomic.lock", lock(result=lambda old: int(old == 0)))
    assert "return a bool" in r.message and r.expected == "True (a bool)", repr(r)
    assert lab.check("atomic.lock", lock()).status == PASS


# ----------------------------------------------------------------------------- 04 and 05: programs


def write_imm(op: int = e.IBV_WR_RDMA_WRITE_WITH_IMM, imm: Callable[[int], int] = lambda x: x,
              send: bool = True) -> Callable[..., Any]:
    def write_with_imm(pair: Any, data: bytes, value: int) -> Any:
        a, b = pair.a, pair.b
        b.qp.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[SGE(b.mr.buf + 8192, 4096, b.mr.lkey)]))
        a.mr.write(data, len(data))
        wr = SendWR(wr_id=2, opcode=op, num_sge=1, sg=[SGE(a.mr.buf, len(data), a.mr.lkey)], imm_data=imm(value))
        wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
        if send:
            a.qp.post_send(wr)
            a.poll()
        return b.poll()
    return write_with_imm


def test_write_imm_says_what_the_function_did() -> None:
    r = lab.check("write.imm", write_imm(send=False))
    assert r.given == "A sent no packet" and "put no packet on the wire" in r.message, repr(r)
    r = lab.check("write.imm", write_imm(op=e.IBV_WR_SEND_WITH_IMM))
    assert r.given == "A sent RC SEND First, RC SEND Last with Immediate" and "SEND with immediate" in r.message
    r = lab.check("write.imm", write_imm(imm=lambda x: 0))
    assert r.field == "ImmDt.imm" and "no immediate value" in r.message, repr(r)


def test_write_imm_accepts_imm_in_either_byte_order_and_says_which_went_on_the_wire() -> None:
    r = lab.check("write.imm", write_imm())
    assert r.status == PASS, repr(r)
    r = lab.check("write.imm", write_imm(imm=socket.htonl))
    assert r.status == PASS and "socket.ntohl(wc.imm_data)" in r.message and "reads 0x1234abcd" in r.message, repr(r)


def test_read_program_says_what_the_function_did() -> None:
    r = lab.check("read.program", lambda pair, offset, length: pair.b.mr.read(length, offset))  # no READ at all
    assert r.status == FAIL and r.given == "A sent no packet" and "put no packet on the wire" in r.message, repr(r)
    assert "did not come over the network" in r.message, repr(r)

    def writes(pair: Any, offset: int, length: int) -> bytes:
        wr = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(pair.a.mr.buf, length, pair.a.mr.lkey)])
        wr.set_wr_rdma(pair.b.mr.rkey, pair.b.mr.buf + offset)
        pair.a.qp.post_send(wr)
        pair.a.poll()
        return bytes(pair.a.mr.read(length, 0))
    r = lab.check("read.program", writes)
    assert r.given.startswith("A sent RC RDMA WRITE First") and "a WRITE or a SEND carries A's bytes to B" in r.message


# ----------------------------------------------------------------------------- 04: the byte order of imm_data


@pytest.mark.skipif(sys.byteorder != "little", reason="notebook 04 explains the byte order of a little-endian host")
def test_imm_data_byte_order_is_what_notebook_04_says() -> None:
    """SendWR(imm_data=0xC0FFEE) puts ee ff c0 00 on the wire (the field table reads 0xeeffc000) and B's wc.imm_data
    is 0xc0ffee; with socket.htonl the wire carries 00 c0 ff ee and B reads it back with socket.ntohl."""
    for posted, wire, polled in ((0xC0FFEE, "ee ff c0 00", 0xC0FFEE),
                                 (socket.htonl(0xC0FFEE), "00 c0 ff ee", socket.htonl(0xC0FFEE))):
        p = SoftPair(seed=4)
        p.b.qp.post_recv(RecvWR(wr_id=1, num_sge=0, sg=[]))
        wr = SendWR(wr_id=2, opcode=e.IBV_WR_RDMA_WRITE_WITH_IMM, num_sge=1, sg=[SGE(p.a.mr.buf, 8, p.a.mr.lkey)],
                    imm_data=posted)
        wr.set_wr_rdma(p.b.mr.rkey, p.b.mr.buf)
        p.a.qp.post_send(wr)
        p.a.poll()
        imm = next(pk[ImmDt] for pk in p.packets() if ImmDt in pk)
        assert imm.encode().hex(" ") == wire
        assert imm.imm == int(wire.replace(" ", ""), 16)
        assert p.b.poll().imm_data == polled
    src = (__import__("pathlib").Path(__file__).parents[2] / "notebooks" / "04-write-imm.py").read_text()
    for claim in ("`ee ff c0 00`", "`0xeeffc000`", "`__be32`", "socket.htonl", "socket.ntohl(wc.imm_data)"):
        assert claim in src, claim
