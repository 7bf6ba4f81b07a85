"""Notebooks 09-11: the feedback leads one step further, and the answers are the student's own (issues 35, 36).

* 09: a wrong NAK code is explained by what that code means (it used to say "'Remote Access Error' means
  Remote Access Error"), and a wrong count of retransmissions says which way it is wrong and why (it used to
  say only "1 is not the number");
* 10: the demo's marked frame, or a classmate's, is not the answer to "be the switch"; the CNP's feedback
  tells the responder's QP from the requester's; the victim exercise asks about the run the notebook draws;
  the timeline's legends sit beside the data, not on it;
* 11: a wrong completion status or NAK is explained, not repeated.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from rdmalab import lab
from rdmalab.lab import FAIL, PASS
from rdmalab.lab.checkers.congestion import _marked, data_frame, my_write_frame
from rdmalab.lab.checkers.reliability import nak_scenario_run, timeout_scenario_run
from rdmalab.lab.variant import as_student
from rdmalab.wire import CNPPad, encode_rocev2
from rdmalab.wire.ib import AETH, BTH

ROOT = Path(__file__).resolve().parents[2]


def nak_answer() -> dict[str, Any]:
    p = nak_scenario_run()
    nak = next(pk for pk in p.packets() if AETH in pk and pk[AETH].is_nak)
    lost = next(int(ev.psn) for ev in p.trace if ev.kind == "dropped")
    return {"lost": lost, "code": nak[AETH].nak_name, "resend_from": int(nak[BTH].psn)}


def timeout_answer() -> dict[str, Any]:
    p = timeout_scenario_run()
    sent = [ev for ev in p.trace if ev.kind == "sent" and ev.node == p.a.name]
    lost = next(ev.psn for ev in p.trace if ev.kind == "dropped" and ev.node == p.b.name)
    again = next(ev.time_ns for ev in p.trace if ev.kind == "retransmitted")
    waited = (again - next(ev.time_ns for ev in sent if ev.psn == lost)) / 1e6
    return {"resent": len(sent) - len({ev.psn for ev in sent}), "waited_ms": waited}


def cnp_for(requester_qpn: int | None = None, ips: tuple[str, str] | None = None) -> bytes:
    s = lab.scenario("congestion.write")
    src, dst = ips or (s.responder_ip, s.requester_ip)
    qpn = s.requester_qpn if requester_qpn is None else requester_qpn
    return encode_rocev2(BTH(opcode=0x81, destqp=qpn, becn=1), [CNPPad()], src_ip=src, dst_ip=dst)


def _says(result: Any, *phrases: str) -> None:
    assert result.status == FAIL, repr(result)
    text = (result.message + " " + " ".join(result.details)).lower()
    for phrase in phrases:
        assert phrase.lower() in text, (phrase, repr(result))


# ------------------------------------------------------------------------------------------ 09

def test_the_right_nak_answer_passes() -> None:
    assert lab.check("reliability.nak", nak_answer()).status == PASS


@pytest.mark.parametrize("code,cause", [(2, "rkey"), ("Remote Access Error", "access flags"),
                                        (1, "malformed"), (3, "could not carry out"), (7, "reserved")])
def test_a_wrong_nak_code_is_explained_by_what_it_means(code: Any, cause: str) -> None:
    r = lab.check("reliability.nak", nak_answer() | {"code": code})
    _says(r, cause, "low 5 bits", "AETH")
    assert r.field == "AETH.value"
    assert not re.search(r"'?Remote Access Error'? means Remote Access Error", r.message)  # the circular wording
    assert "PSN Sequence Error" not in r.message  # it leads to the AETH, it does not name the answer


def test_a_psn_the_run_never_sent_points_to_the_learners_own_run() -> None:
    right = nak_answer()
    r = lab.check("reliability.nak", right | {"lost": 105})  # the book's demo run starts at PSN 100
    _says(r, "never sent PSN 105", "my_nak")
    first = min(int(ev.psn) for ev in nak_scenario_run().trace if ev.kind == "sent" and ev.psn is not None)
    assert str(first) in r.message  # the range of the learner's PSNs, so the next try is in it


def test_the_right_cost_passes_and_names_the_timer_and_where_go_back_n_started() -> None:
    right = timeout_answer()
    code = lab.scenario("reliability.timeout").timeout
    assert abs(right["waited_ms"] - 4.096e-3 * 2 ** code) < 0.01  # the run's wait is the QP's timer
    r = lab.check("reliability.timeout", right)
    assert r.status == PASS and "oldest unacknowledged" in r.message and f"timeout code {code}" in r.message
    assert lab.check("reliability.timeout", right | {"waited_ms": f"{right['waited_ms']:.1f} ms"}).status == PASS


def test_each_wrong_count_says_which_way_and_why() -> None:
    right = timeout_answer()
    want = right["resent"]
    p = timeout_scenario_run()
    requests = sum(1 for ev in p.trace if ev.kind == "sent" and ev.node == p.a.name)
    cases = {
        1: ("number of packets lost", "oldest packet not yet acknowledged"),
        0: ("more packets than 0", "oldest unacknowledged"),
        requests: ("first transmissions included",),
        want + 1: ("off by one",),
        10 * want + 1: ("more than your message has packets", "length over the mtu"),
        -1: ("negative",),
    }
    for got, phrases in cases.items():
        r = lab.check("reliability.timeout", right | {"resent": got})
        _says(r, *phrases)
        assert "is not the number" not in r.message
        assert not re.search(rf"(?<!\d){want}(?!\d)", r.message), (got, r.message)  # never the answer itself


def test_a_wrong_wait_says_why_without_giving_it() -> None:
    right = timeout_answer()
    code = lab.scenario("reliability.timeout").timeout
    other = 14 if code != 14 else 13  # the book's code: what a learner who copied the text above would give
    cases = [(4.096e-3 * 2 ** other, ("timer of timeout code", "your scenario")),
             (right["waited_ms"] * 1000, ("microseconds",)),
             (right["waited_ms"] / 3, ("did not wait", "my_timeout.ladder()")),
             ("soon", ("number of milliseconds",))]
    for given, phrases in cases:
        r = lab.check("reliability.timeout", right | {"waited_ms": given})
        _says(r, *phrases)
        assert r.field == "waited_ms"
        assert f"{right['waited_ms']:.1f}" not in r.message and f"code {code}" not in r.message


def test_the_timeout_and_nak_answers_are_each_students_own() -> None:
    answers = {}
    for who in ("alice", "bob", "carol"):
        with as_student(who):
            answers[who] = (nak_answer(), timeout_answer())
    assert len({a[0]["lost"] for a in answers.values()}) == 3
    assert len({tuple(a[1].values()) for a in answers.values()}) == 3
    with as_student("bob"):
        assert lab.check("reliability.timeout", answers["alice"][1]).status == FAIL
        assert lab.check("reliability.nak", answers["alice"][0]).status == FAIL
        assert lab.check("reliability.nak", answers["bob"][0]).status == PASS
        assert lab.check("reliability.timeout", answers["bob"][1]).status == PASS


# ------------------------------------------------------------------------------------------ 10

def test_the_demo_frame_marked_above_is_not_the_answer() -> None:
    """Issue 36: `marked_frame = marked` (the demo's frame, marked in a cell above) passed exercise 1."""
    assert lab.check("congestion.ce", _marked(my_write_frame())).status == PASS
    for demo in (_marked(data_frame()), data_frame()):
        r = lab.check("congestion.ce", demo)
        _says(r, "demo", "my_write_frame()")


def test_a_classmates_frame_is_named_as_another_write() -> None:
    with as_student("alice"):
        theirs = _marked(my_write_frame())
        assert lab.check("congestion.ce", theirs).status == PASS
    with as_student("bob"):
        r = lab.check("congestion.ce", theirs)
        _says(r, "another WRITE", "my_write_frame()")
        assert "length" not in r.message  # it does not blame a change the learner did not make


def test_the_cnp_feedback_tells_the_two_qps_and_the_two_directions_apart() -> None:
    s = lab.scenario("congestion.write")
    assert lab.check("congestion.cnp", cnp_for()).status == PASS
    _says(lab.check("congestion.cnp", cnp_for(requester_qpn=s.responder_qpn)), "responder's own", "requester's")
    _says(lab.check("congestion.cnp", cnp_for(ips=(s.requester_ip, s.responder_ip))), "other way")
    _says(lab.check("congestion.cnp", cnp_for(ips=("192.168.1.2", "192.168.1.1"))), "demo's addresses")
    with as_student("alice"):
        theirs = cnp_for()
    with as_student("bob"):
        assert lab.check("congestion.cnp", theirs).status == FAIL


def test_the_victim_exercise_asks_about_the_run_the_notebook_draws() -> None:
    """Issue 36: the text called the notebook's 30 ms run "that run (6 ms)"."""
    src = (ROOT / "notebooks" / "10-congestion.py").read_text(encoding="utf-8")
    assert "victim = victim_run()" in src
    assert not re.search(r"victim_run\(\)` is that run \(\d", src)


def test_the_timeline_legends_sit_beside_the_data() -> None:
    """Issue 36: the "PFC alone" figure's legend covered F1's and F2's goodput after the incast."""
    from rdmalab.fabric.congestion_scenarios import run_scenario
    from rdmalab.viz.congestion import timeline

    res = run_scenario("victim", duration_ms=4.5, settings={"dcqcn": "0"})
    for goodput in (True, False):
        fig = timeline(res, max_flows=3, goodput=goodput, window_us=100).figure
        fig.canvas.draw()
        for ax in fig.axes:
            legend = ax.get_legend()
            assert legend is not None
            assert legend.get_window_extent().x0 >= ax.get_window_extent().x1  # outside the axes: covers nothing


# ------------------------------------------------------------------------------------------ 11

def test_a_wrong_status_or_nak_is_explained_not_repeated() -> None:
    r = lab.check("security.guess", ["IBV_WC_LOC_PROT_ERR", "Remote Access Error"])
    _says(r, "not the completion status", "local error", "ibv_wc_status_str")
    r = lab.check("security.guess", ["IBV_WC_REM_ACCESS_ERR", "PSN Sequence Error"])
    _says(r, "not the NAK", "PSN beyond", "low 5 bits")
    assert "Remote Access Error" not in r.message
