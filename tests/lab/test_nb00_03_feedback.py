"""Notebooks 00-03: per-student variants (issue 35) and feedback that leads one step at a time (issue 36).

* send.opcodes and send.rnr read their values off the student's scenario: each student's right answer
  passes for them and fails for a classmate, and every variant is a teachable run;
* the other exercises of 00-03 are conceptual: the same answer for everyone;
* a wrong answer's feedback says what is wrong with *that* answer, one step, never the whole answer
  (03's first wrong send.opcodes gave the count, the second all but the list);
* feedback and hints are plain text: no Markdown emphasis (03 showed ``*code*`` with its asterisks);
* the student notebooks show no answer above an exercise and run no hint by themselves.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from rdmalab import lab
from rdmalab.lab import FAIL, PASS, variant
from rdmalab.lab.checkers.verbs import rnr_run, send_opcodes
from rdmalab.lab.core import get
from rdmalab.lab.generate import convert
from rdmalab.wire.ib import AETH, RNR_TIMER_US

ROOT = Path(__file__).resolve().parents[2]
MINE = ("welcome.opcode", "dma.copies", "dma.syscalls", "verbs.path", "verbs.rtr", "send.opcodes", "send.rnr")
VARIES = {"send.opcodes", "send.rnr"}
STUDENTS = ("", "alice", "bob", "carol")


def _text(r: Any) -> str:
    """What the learner reads of a result, apart from their own value."""
    return " ".join([r.message, *r.details, r.expected or ""])


def _opcodes_answer() -> list[str]:
    s = lab.scenario("send.opcodes")
    n = math.ceil(s.length / s.mtu)
    return ["RC SEND First"] + ["RC SEND Middle"] * (n - 2) + ["RC SEND Last"]


def _rnr_answer() -> float:
    return RNR_TIMER_US[lab.scenario("send.rnr").timer_code] / 1000


def test_only_the_exercises_read_off_a_scenario_vary() -> None:
    assert {ex for ex in MINE if get(ex).varies} == VARIES
    for ex in MINE:
        assert not re.search(r"\d{3,}", get(ex).title), f"{ex}: a title is the same for everyone"


def test_each_students_answer_passes_for_them_and_fails_for_a_classmate() -> None:
    answers = {}
    for who in STUDENTS:
        with variant.as_student(who):
            answers[who] = {"send.opcodes": _opcodes_answer(), "send.rnr": _rnr_answer()}
            for ex, a in answers[who].items():
                assert lab.check(ex, a).status == PASS, (who, ex, a)
    for who in STUDENTS:
        for other in STUDENTS:
            if other == who:
                continue
            with variant.as_student(who):
                for ex in VARIES:
                    r = lab.check(ex, answers[other][ex])
                    assert r.status == FAIL, (who, other, ex, answers[other][ex])


@pytest.mark.parametrize("who", [f"student{i}" for i in range(24)])
def test_every_variant_is_a_teachable_run(who: str) -> None:
    """4 to 10 packets (never the 3 the notebook shows above the exercise), and 2 to 4 RNR NAKs before the
    receive is posted, each asking for the scenario's timer."""
    with variant.as_student(who):
        s = lab.scenario("send.opcodes")
        ops = send_opcodes(s.length, s.mtu)
        assert 4 <= len(ops) <= 10 and len(ops) == math.ceil(s.length / s.mtu), (s, ops)
        assert ops[0] == "RC SEND First" and ops[-1] == "RC SEND Last"
        r = lab.scenario("send.rnr")
        naks = [p[AETH] for p in rnr_run().packets() if AETH in p and p[AETH].is_rnr_nak]
        assert 2 <= len(naks) <= 4, (r, len(naks))
        assert {a.value for a in naks} == {r.timer_code}


@pytest.mark.parametrize("who", STUDENTS)
def test_send_opcodes_feedback_goes_one_step_per_try(who: str) -> None:
    with variant.as_student(who):
        right = _opcodes_answer()
        n = len(right)
        count = re.compile(rf"\b{n} packets\b")
        tries = [
            ["RC SEND First", "RC SEND Last"],  # too few
            ["RC SEND Middle"] * n,  # the right count, every name wrong
            ["RC SEND First"] * n,
            ["RC SEND Only"] + right[1:],
            right[:-1] + ["RC SEND Only"],
            right[:-1] + ["RC SEND Middle"],
            [right[0], "RC SEND Last"] + right[2:],
            [right[0], "RC RDMA WRITE Middle"] + right[2:],
            [right[0], "UC SEND Middle"] + right[2:],
            right[:-1] + ["RC SEND Last with Immediate"],
        ]
        for t in tries:
            r = lab.check("send.opcodes", t)
            assert r.status == FAIL, t
            text = _text(r)
            if len(t) != n:
                assert not count.search(text), f"the count in one step from {t}: {r!r}"
            assert len(re.findall(r"opcodes\[\d+\]", text)) <= 1, f"more than one packet judged at once: {r!r}"
            named = {w for w in ("First", "Middle", "Last") if re.search(rf"\b(a|the|one) {w}\b", text)}
            assert len(named) <= 1, f"the whole list in one step from {t}: {r!r}"
            assert "the rest" not in text, r


def test_send_opcodes_feedback_is_about_the_answer_given() -> None:
    right = _opcodes_answer()
    n = len(right)
    r = lab.check("send.opcodes", ["RC SEND Only"] + right[1:])
    assert "first packet (opcodes[0]) is a SEND Only" in r.message, r
    r = lab.check("send.opcodes", right[:-1] + ["RC SEND Middle"])
    assert f"(opcodes[{n - 1}]) is a Middle, but no packet of the message follows it" in r.message, r
    r = lab.check("send.opcodes", [right[0], "RC RDMA WRITE Middle"] + right[2:])
    assert "not a SEND" in r.message and r.given == "'RC RDMA WRITE Middle'", r
    r = lab.check("send.opcodes", [right[0], "UC SEND Middle"] + right[2:])
    assert "RC QP" in r.message, r
    r = lab.check("send.opcodes", right[:2] + ["SEND Middel"] + right[3:])
    assert "opcodes[2]" in r.message and "not an opcode" in r.message, r
    r = lab.check("send.opcodes", right + ["RC SEND Last"])
    assert "empty" in r.message and r.given == f"{n + 1} packets", r


def test_rnr_feedback_names_the_slip_without_the_delay() -> None:
    want = _rnr_answer()
    code = lab.scenario("send.rnr").timer_code
    slips = {
        code: "timer code itself",
        0x20 | code: "whole syndrome byte",
        RNR_TIMER_US[code - 1] / 1000: "neighbouring timer code",
        RNR_TIMER_US[code + 1] / 1000: "neighbouring timer code",
        4.096e-3 * 2 ** code: "transport (ACK) timeout",
        round(want * 1.05, 6): "measured on a ladder",
        want * 1000: "microseconds",
        want + 1000: "not the delay",
    }
    for answer, phrase in slips.items():
        r = lab.check("send.rnr", answer)
        assert r.status == FAIL and phrase in r.message, (answer, r)
        if phrase not in ("microseconds",):
            assert not re.search(rf"(?<![\d.]){re.escape(f'{want:g}')}(?!\d)", _text(r)), f"the delay given away: {r!r}"


def test_welcome_feedback_says_what_the_name_given_is() -> None:
    r = lab.check("welcome.opcode", "READ")
    assert "only part of the name" in r.message and "Request" not in _text(r), r
    r = lab.check("welcome.opcode", "RC SEND Only")
    assert "an opcode, but not frame 4's" in r.message and r.offset == 42, r
    r = lab.check("welcome.opcode", "RC RDMA WRITE Only")
    assert "frame 2, not of frame 4" in r.message, r
    r = lab.check("welcome.opcode", "no such thing")
    assert "not the name rdmalab gives" in r.message, r


def test_verbs_feedback_points_the_way_without_naming_it() -> None:
    r = lab.check("verbs.path", ["INIT", "RTR", "RTS"])
    assert "ERR -> INIT" in r.message and "RESET" not in _text(r), r
    r = lab.check("verbs.rtr", {"AV", "PATH_MTU", "RQ_PSN", "DEST_QPN", "MIN_RNR_TIMER", "MAX_DEST_RD_ATOMIC"})
    assert "RC QP" in r.message and "MIN_RNR_TIMER" not in _text(r) and "MAX_DEST" not in _text(r), r
    r = lab.check("verbs.rtr", {"AV", "PATH_MTU", "DEST_QPN"})
    assert "1 required attribute(s) missing" in r.message and "RQ_PSN" not in _text(r), r
    assert "which PSN to expect first" in r.message, r
    r = lab.check("dma.copies", 1)
    assert "2" not in _text(r) and "two" not in _text(r).lower(), r


_WRONG = {"welcome.opcode": ["RC RDMA WRITE Only", "READ", 12.0], "dma.copies": [1, 0, 3], "dma.syscalls": [2],
          "verbs.path": [["INIT", "RTR", "RTS"], ["RESET", "INIT", "RTR"]],
          "verbs.rtr": [{"AV"}, {"AV", "PATH_MTU", "RQ_PSN", "DEST_QPN", "SQ_PSN"}],
          "send.opcodes": [["x"], ["RC SEND Only"] * 3], "send.rnr": [0, 1.0, "soon"]}


@pytest.mark.parametrize("ex", MINE)
def test_feedback_and_hints_are_plain_text(ex: str) -> None:
    """The check box and the hint box escape their text: Markdown emphasis or code marks show as themselves."""
    texts = list(get(ex).hints)
    for a in _WRONG[ex]:
        r = lab.check(ex, a)
        assert r.status == FAIL, (ex, a, r)
        texts.append(_text(r))
    for t in texts:
        assert not re.search(r"(?<![\w*])\*\w[^*]*\*(?!\w)", t), f"{ex}: Markdown emphasis in {t!r}"
        assert "`" not in t, f"{ex}: Markdown code marks in {t!r}"


def _student_source(stem: str) -> list[dict]:
    src = next((ROOT / "notebooks").glob(f"{stem}-*.py"))
    return convert(src.read_text(encoding="utf-8"), "student")["cells"]


@pytest.mark.parametrize("stem", ["00", "01", "02", "03"])
def test_no_hint_runs_by_itself(stem: str) -> None:
    for cell in _student_source(stem):
        if cell["cell_type"] == "code":
            code = "".join(cell["source"])
            assert not re.search(r"^\s*lab\.hint\(", code, re.M), f"{stem}: a cell shows a hint under Run All"


#: What must not show above an exercise, given the student's scenario: (exercise, texts)
def _giveaways(stem: str) -> list[tuple[str, list[str]]]:
    if stem == "00":
        return [("welcome.opcode", ["RC RDMA READ Request", "rdmalab-hint", "Hint 1/"])]
    if stem == "01":
        return [("dma.copies", ["crossed the user/kernel boundary twice", "twice"]),
                ("dma.syscalls", ["'syscr': 0", "No system call"])]
    if stem == "02":
        return [("verbs.path", ["from=ERR to=RESET", "ERR -> RESET -> INIT"]),
                ("verbs.rtr", ["AV | PATH_MTU | RQ_PSN | DEST_QPN", "UC QP must know"])]
    want = _rnr_answer()
    return [("send.opcodes", [json.dumps(_opcodes_answer())[1:-1]]),
            ("send.rnr", [f"{want:g} ms", f"{want:.3f} ms", f"{round(want * 1000)} \u00b5s"])]


@pytest.mark.slow
@pytest.mark.parametrize("stem", ["00", "01", "02", "03"])
def test_nothing_above_an_exercise_gives_its_answer(stem: str, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import nbformat
    from test_notebooks import _run  # noqa: I001  # tests/lab is on sys.path (pytest's rootdir insertion)

    who = "giveaway-check"
    monkeypatch.setenv("RDMALAB_STUDENT", who)
    src = next((ROOT / "notebooks").glob(f"{stem}-*.py"))
    _run(src, "student", tmp_path, monkeypatch)
    nb = nbformat.read(tmp_path / f"{src.stem}.student.ipynb", as_version=4)
    with variant.as_student(who):
        giveaways = _giveaways(stem)
    for ex, texts in giveaways:
        shown = ""
        for cell in nb.cells:
            if f'lab.check("{ex}"' in cell.get("source", ""):
                break
            shown += cell.get("source", "") if cell.cell_type == "markdown" else ""
            for out in cell.get("outputs", []):
                shown += json.dumps(out.get("data", {})) + out.get("text", "")
        else:
            raise AssertionError(f"{src.stem}: no cell checks {ex}")
        leaks = [t for t in texts if t in shown]
        assert not leaks, f"{src.stem}: above exercise {ex}, the page shows its answer: {leaks}"
