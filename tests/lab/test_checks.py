"""The checks: right answers pass, placeholders are 'not yet', wrong answers name what is wrong."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import pytest

import rdmalab.verbs.enums as e
from rdmalab import lab
from rdmalab.lab import FAIL, NOT_YET, PASS
from rdmalab.lab.checkers.wires import CAPTURED_DESTQP, bth_task, icrc_frame
from rdmalab.verbs.wr import SGE, SendWR
from rdmalab.wire.crc import icrc_rocev2


def test_placeholders_are_not_yet() -> None:
    for answer in (..., None, [..., ...], {"a": ...}):
        assert lab.check("wires.bth", answer).status == NOT_YET


def test_unknown_exercise_suggests_neighbours() -> None:
    with pytest.raises(KeyError, match="did you mean"):
        lab.check("wires.nope", 1)


def test_bth_feedback_names_field_offset_and_kind() -> None:
    BTH_TASK = bth_task()  # this run's student's (issue 35)
    assert lab.check("wires.bth", BTH_TASK.encode()).status == PASS
    r = lab.check("wires.bth", BTH_TASK.replace(psn=5).encode())
    assert r.status == FAIL and r.field == "BTH.psn" and r.offset == 9
    assert "24-bit value (Packet Sequence Number)" in r.details[0]
    r = lab.check("wires.bth", BTH_TASK.replace(padcnt=0).encode())
    assert r.field == "BTH.padcnt" and r.offset == 1 and "bits 5-4" in r.details[0]
    r = lab.check("wires.bth", BTH_TASK.encode()[:10])
    assert r.status == FAIL and "12 bytes" in r.message
    assert lab.check("wires.bth", "zz").status == FAIL
    assert "hex string" not in repr(lab.check("wires.bth", BTH_TASK.encode().hex()))  # hex strings are accepted


def test_icrc_feedback_recognises_the_usual_slips() -> None:
    frame = icrc_frame()
    covered = frame[14:-4]
    # the exercise's CNP is the captured ConnectX-4 one sent to this student's QP, whose ICRC the notebook does not show
    right = icrc_rocev2(covered)
    assert lab.check("wires.icrc", right).status == PASS
    walked = icrc_rocev2(icrc_frame(CAPTURED_DESTQP)[14:-4])  # the captured frame's, worked through above it
    r = lab.check("wires.icrc", walked)
    assert r.status == FAIL and "walk-through" in r.message
    assert "byte order" in lab.check("wires.icrc", right.to_bytes(4, "big")).message
    assert "did not mask the variant fields" in lab.check("wires.icrc", zlib.crc32(b"\xff" * 8 + covered)).message
    b = bytearray(covered)
    b[1] = 0xFF
    b[8] = 0xFF
    b[10:12] = b"\xff\xff"
    b[26:28] = b"\xff\xff"  # BTH byte 4 forgotten
    r = lab.check("wires.icrc", zlib.crc32(b"\xff" * 8 + bytes(b)))
    assert r.status == FAIL and "the variant fields of the BTH header" in r.message


def test_engine_program_checks_run_the_learners_function() -> None:
    def not_done(pair, remote_offset, length):  # type: ignore[no-untyped-def]
        raise NotImplementedError("your code here")

    assert lab.check("read.program", not_done).status == NOT_YET

    def wrong(pair, remote_offset, length):  # type: ignore[no-untyped-def]
        return pair.b.mr.read(length, remote_offset)  # cheating: no READ on the wire

    r = lab.check("read.program", wrong)
    assert r.status == FAIL and "READ Request" in r.message

    def crashes(pair, data):  # type: ignore[no-untyped-def]
        return 1 / 0

    assert lab.check("security.fix", crashes).status == "error"


def test_program_checks_want_the_function_and_a_clean_wire() -> None:
    """checkers.verbs.clean_run: a result given instead of the function names the function; wire trouble
    comes with the exercise's own causes (security.fix: which key goes where)."""
    for ex, function in (("write.imm", "write_with_imm"), ("read.program", "read_remote"),
                         ("atomic.lock", "try_lock"), ("security.fix", "write_to_peer")):
        r = lab.check(ex, b"a result")
        assert r.status == FAIL and f"({function}), not its result" in r.message, (ex, r.message)
        assert r.field == function

    def rkey_for_lkey(pair, data):  # type: ignore[no-untyped-def]
        pair.a.mr.write(data, len(data), 0)
        wr = SendWR(opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(pair.a.mr.buf, len(data), pair.a.mr.rkey)])
        wr.set_wr_rdma(pair.b.mr.lkey, pair.b.mr.buf)
        pair.a.qp.post_send(wr)
        return pair.a.poll()

    r = lab.check("security.fix", rkey_for_lkey)
    assert r.status == FAIL
    assert any("it takes the local MR's lkey" in d for d in r.details), r.details


def test_feedback_identifies_a_wrong_value_found_elsewhere() -> None:
    from rdmalab.lab.checkers.captures import my_rping

    psn = my_rping("roce").packets[3].packet.bth.psn  # the client's SEND's PSN, not the rkey
    r = lab.check("captures.rkey", psn)
    assert r.status == FAIL and "psn" in r.message.lower()


def test_hints_advance_and_stop_at_the_last() -> None:
    h1 = lab.hint("wires.icrc", 1)
    h2 = lab.hint("wires.icrc")
    h3 = lab.hint("wires.icrc")
    h4 = lab.hint("wires.icrc")
    assert (h1.number, h2.number, h3.number, h4.number) == (1, 2, 3, 3)
    assert "Hint 3/3" in h4._repr_html_()


def test_results_render_and_are_logged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "log.jsonl"
    monkeypatch.setenv("RDMALAB_CHECK_LOG", str(log))
    r = lab.check("verbs.path", ["INIT", "RTS"])
    assert "rdmalab-check-fail" in r._repr_html_() and "lab.hint" in r._repr_html_()
    assert "not in the engine's transition table" in r.message
    lab.check("verbs.path", ["RESET", "INIT", "RTR", "RTS"])
    rows = [json.loads(x) for x in log.read_text().splitlines()]
    assert [x["status"] for x in rows] == [FAIL, PASS]


def test_every_exercise_has_hints_and_a_notebook() -> None:
    items = lab.exercises().items
    assert len(items) >= 25
    for ex in items:
        assert ex.hints, ex.id
        assert ex.notebook, ex.id
        assert (Path(__file__).resolve().parents[2] / "notebooks" / f"{ex.notebook}.py").exists(), ex.id


def test_exercises_are_listed_in_notebook_order_with_their_notebook() -> None:
    """lab.exercises(): notebook by notebook, in the order each notebook asks them, with a notebook column."""
    import re

    from rdmalab.lab.generate import sources

    want: list[tuple[str, str]] = []
    for src in sources(Path(__file__).resolve().parents[2] / "notebooks"):
        for ex in re.findall(r"""lab\.check\(\s*["']([\w.]+)["']""", src.read_text(encoding="utf-8")):
            if (src.stem, ex) not in want:
                want.append((src.stem, ex))
    listed = lab.exercises()
    assert [(e.notebook, e.id) for e in listed.items] == want
    html = listed._repr_html_()
    assert "<th style='text-align:left'>notebook</th>" in html and html.index("00-welcome") < html.index("13-live-rdma")
    assert repr(listed).splitlines()[0].split()[:2] == ["00-welcome", "welcome.opcode"]
