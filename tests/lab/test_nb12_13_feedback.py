"""Notebooks 12 (connection manager) and 13 (live RDMA): per-student variants and the feedback of issue 36.

* 12's capture of rping names each student's port in its REQ (and nowhere else), with a good ICRC;
  its connection's PSNs, its service ID and 13's WRITE length differ per student, and a classmate's
  right answer fails (the grader judges as the student whose submission it is);
* ``cm.first_rts`` does not list the two sides as what it expected (that is the answer, given a wrong one);
* ``cm.service_id`` says which half of the answer was already right;
* ``run_connect().write_pcap()`` writes into a temporary directory, not into the learner's folder.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from rdmalab import capture, lab
from rdmalab.lab import FAIL, PASS, variant
from rdmalab.lab.checkers.cm import cm_messages, connection, rping_capture
from rdmalab.lab.connect import run_connect
from rdmalab.lab.core import get, judge
from rdmalab.lab.env import capture_path
from rdmalab.wire.cm import ip_cm_service_id

STUDENTS = ("alice", "bob", "carol")


def _psns() -> dict[str, int]:
    qps = connection().qps
    return {f"{side}.{attr}": qps[side][attr] for side in ("client", "server") for attr in ("sq_psn", "rq_psn")}


def _sid() -> tuple[int, int]:
    sid = lab.scenario("cm.service_id").service_id
    return (sid >> 16) & 0xFFFF, sid & 0xFFFF


def _segments() -> dict[str, int]:
    length = lab.scenario("live.segments").length
    n = -(-length // 1024)
    return {"writes": n, "read_responses": n, "last_payload": length - (n - 1) * 1024}


def _answers() -> dict[str, Any]:
    ps, port = _sid()
    return {"cm.port": cm_messages()[0][1].dst_port, "cm.req_psn": _psns(),
            "cm.service_id": {"port_space": ps, "port": port}, "live.segments": _segments()}


@pytest.fixture(scope="module")
def answers() -> dict[str, dict[str, Any]]:
    out = {}
    for who in STUDENTS:
        with variant.as_student(who):
            out[who] = _answers()
    return out


def test_the_rping_capture_differs_from_the_stored_one_only_in_the_reqs_service_id() -> None:
    stored = list(capture.read(capture_path("rxe_rping.pcap")))
    for who in STUDENTS:
        with variant.as_student(who):
            port = lab.scenario("cm.connect").port
            mine = rping_capture()
        assert len(mine) == len(stored)
        changed = [cp.frame_number for cp, old in zip(mine, stored, strict=True) if cp.packet.data != old.packet.data]
        assert changed == [1], (who, changed)  # frame 1 is the REQ
        req = mine[0].packet
        assert req.crc_status == "good", (who, req.crc_status)
        old = stored[0].packet.data
        diff = [i for i, (a, b) in enumerate(zip(req.data, old, strict=True)) if a != b]
        # only the ServiceID (8 bytes) and the ICRC (the last 4) may change
        assert all(94 <= i < 102 or i >= len(old) - 4 for i in diff), diff
        assert int.from_bytes(req.data[94:102], "big") == ip_cm_service_id(port)


def test_every_student_has_other_values(answers: dict[str, dict[str, Any]]) -> None:
    for ex in ("cm.port", "cm.req_psn", "cm.service_id"):
        values = [repr(answers[w][ex]) for w in STUDENTS]
        assert len(set(values)) == len(STUDENTS), (ex, values)
    with variant.as_student("alice"):
        lengths = {lab.scenario("live.segments").length}
    for who in STUDENTS[1:]:
        with variant.as_student(who):
            lengths.add(lab.scenario("live.segments").length)
    assert len(lengths) == len(STUDENTS), lengths


@pytest.mark.parametrize("ex", ["cm.port", "cm.req_psn", "cm.service_id", "live.segments"])
def test_a_students_answer_passes_for_them_and_fails_for_a_classmate(ex: str, answers: dict[str, Any]) -> None:
    assert get(ex).varies
    for who in STUDENTS:
        with variant.as_student(who):
            assert judge(ex, answers[who][ex]).status == PASS, (who, ex)
    others = [(a, b) for a in STUDENTS for b in STUDENTS if a != b and answers[a][ex] != answers[b][ex]]
    assert others, f"{ex}: every student has the same answer"
    for mine, theirs in others:
        with variant.as_student(mine):
            r = judge(ex, answers[theirs][ex])
        assert r.status == FAIL, (ex, mine, theirs, r)


def test_a_classmates_psns_are_named_as_not_from_this_connection(answers: dict[str, Any]) -> None:
    with variant.as_student("alice"):
        r = judge("cm.req_psn", answers["bob"]["cm.req_psn"])
    assert r.status == FAIL and "neither your REQ's nor your REP's" in r.message, r


def test_req_psn_feedback_leads_without_giving_the_values() -> None:
    psns = _psns()
    swapped = {"client.sq_psn": psns["server.sq_psn"], "client.rq_psn": psns["server.rq_psn"],
               "server.sq_psn": psns["client.sq_psn"], "server.rq_psn": psns["client.rq_psn"]}
    r = lab.check("cm.req_psn", swapped)
    assert r.status == FAIL and "exercise 2" in r.message
    shown = " ".join(filter(None, [r.message, r.expected, *r.details]))
    assert str(psns["client.sq_psn"]) not in shown and str(psns["server.sq_psn"]) not in shown, shown
    assert lab.check("cm.req_psn", {k: ... for k in psns}).status == "not yet"
    r = lab.check("cm.req_psn", psns | {"server.rq_psn": ...})
    assert r.status == FAIL and r.field == "server.rq_psn" and "give all four" in r.message


def test_first_rts_does_not_offer_the_two_sides_as_the_expectation() -> None:
    right = lab.check("cm.first_rts", "server")
    assert right.status == PASS  # the passive side is in RTS after accept(), before the REP leaves
    wrong = lab.check("cm.first_rts", "client")
    assert wrong.status == FAIL
    text = " ".join(filter(None, [wrong.message, wrong.expected, *wrong.details])).lower()
    assert "server" not in text and "'client' or 'server'" not in text, wrong
    assert "step table" in (wrong.expected or ""), wrong
    nonsense = lab.check("cm.first_rts", "rts")
    assert nonsense.status == FAIL and nonsense.field == "answer" and "Name a side" in nonsense.message


def test_service_id_says_which_half_was_right() -> None:
    ps, port = _sid()
    r = lab.check("cm.service_id", {"port_space": ps + 1, "port": port})
    assert r.status == FAIL and r.message.startswith("The port is right. The port space is not"), r
    r = lab.check("cm.service_id", {"port_space": ps, "port": port ^ 0x0101})
    assert r.status == FAIL and r.message.startswith("The port space is right. The port is not"), r
    swapped = int.from_bytes(port.to_bytes(2, "little"), "big")
    r = lab.check("cm.service_id", {"port_space": ps, "port": swapped})
    assert r.status == FAIL and "The port space is right" in r.message and "byte" in r.message, r
    r = lab.check("cm.service_id", {"port_space": ps & 0xFF, "port": port})
    assert r.status == FAIL and "The port is right" in r.message and "0x01" in r.message, r
    r = lab.check("cm.service_id", {"port_space": ps + 1, "port": port + 1})
    assert r.status == FAIL and "right" not in r.message.replace("Neither is right", ""), r


def test_segments_feedback_names_the_students_own_length() -> None:
    right = _segments()
    n, last = right["writes"], right["last_payload"]
    length = lab.scenario("live.segments").length
    assert 3 <= n <= 9 and 0 < last < 1024
    r = lab.check("live.segments", right | {"writes": n - 1})
    assert r.status == FAIL and f"your WRITE is {length} bytes" in r.message and r.given == str(n - 1), r
    r = lab.check("live.segments", right | {"read_responses": n + 1})
    assert r.status == FAIL and "READ request itself" in r.message, r
    r = lab.check("live.segments", right | {"last_payload": 1024})
    assert r.status == FAIL and r.field == "payload" and "full packet" in r.message, r
    r = lab.check("live.segments", right | {"last_payload": last + 1 if last % 4 == 0 else last + 4 - last % 4})
    assert r.status == FAIL and ("pad" in r.message) == (last % 4 != 0), r
    assert str(last) not in r.message
    assert lab.check("live.segments", {k: ... for k in right}).status == "not yet"


def test_connect_writes_its_pcap_outside_the_working_directory(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = run_connect().write_pcap()
    assert path.exists() and tmp_path not in path.parents and Path(os.getcwd()) not in path.parents
    assert list(tmp_path.iterdir()) == []
    assert sum(1 for _ in capture.read(path)) > 5


def test_run_connect_listens_on_the_port_given_and_rejects_another() -> None:
    ok = run_connect(listen_port=20001, seed=7)
    assert ok.error is None and ok.messages()[0].body.service_id == ip_cm_service_id(20001)
    assert ok.qps["client"]["sq_psn"] == ok.qps["server"]["rq_psn"]
    rej = run_connect(listen_port=20001, port=20002, seed=7)
    assert rej.names()[:2] == ["REQ", "REJ"] and "Invalid Service ID" in (rej.error or "")
    with pytest.raises(ValueError, match="listen_port must be a port number"):
        run_connect(listen_port=70000)
    with pytest.raises(ValueError, match="unknown backend"):
        run_connect(backend="roce")
