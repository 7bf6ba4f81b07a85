"""`rdmalab grade` against submissions that try to fool it: each is graded failing, and none stops the others.

The grade comes from the answer values the kernel reports, judged again in the grader's process
(rdmalab.lab.answers, rdmalab.lab.core.judge); these submissions attack every other path.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

from rdmalab.cli import main  # noqa: E402
from rdmalab.lab import grade  # noqa: E402
from rdmalab.lab.generate import convert  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
NB = "07-four-wires"
EXERCISES = ("wires.bth", "wires.icrc", "wires.crc32c", "wires.which", "wires.iwarp_overhead")
WRONG_BTH = 'my_bth = bytes.fromhex("04 b0 ff ff 00 00 00 d2 80 00 12 35")'

# Each is one code cell put right after the notebook's first code cell (which imports lab).
ATTACKS = {
    # lab.check replaced by one that says "pass" and writes "pass" into the log
    "patch_check": """
import rdmalab.lab.core as core
from rdmalab import lab
def _always(id, answer):
    r = core.Result(id, "pass", "Correct")
    core._log(r, answer)
    return r
lab.check = core.check = _always
""",
    # every checker replaced by one that accepts anything
    "patch_checkers": """
import rdmalab.lab.core as core
core._ensure_loaded()
for _ex in core._REGISTRY.values():
    _ex.checker = lambda answer: "Correct"
""",
    # the feedback helpers (and the names the checkers imported from them) made to accept anything
    "patch_feedback": """
import rdmalab.lab.feedback as fb, rdmalab.lab.checkers.wires as w
fb.compare_header = w.compare_header = lambda *a, **k: None
fb.as_bytes = w.as_bytes = lambda *a, **k: b"\\x00" * 4
fb.norm_name = w.norm_name = lambda s: "ROCEV2"
import rdmalab.lab.core as core
core.Wrong = type("Wrong", (Exception,), {})
""",
    # answers whose __eq__ is always true (and __ne__ never), of the types the exercises take
    "always_equal": """
class Always(int):
    __eq__ = lambda self, other: True
    __ne__ = lambda self, other: False
    __hash__ = int.__hash__
class AlwaysBytes(bytes):
    __eq__ = lambda self, other: True
    __ne__ = lambda self, other: False
    __hash__ = bytes.__hash__
class AlwaysList(list):
    __eq__ = lambda self, other: True
    __ne__ = lambda self, other: False
""",
    # the log: statuses written by hand, two results on one line, garbage, a malformed answer,
    # an unknown exercise, another notebook's exercise, and the log removed before the checks
    "patch_log": """
import json, os
_log = os.environ["RDMALAB_CHECK_LOG"]
_pass = lambda ex, answer: json.dumps({"exercise": ex, "status": "pass", "message": "Correct", "answer": answer})
with open(_log, "a") as fh:
    fh.write(json.dumps({"exercise": "wires.bth", "status": "pass", "message": "Correct"}) + "\\n")
    fh.write(_pass("wires.icrc", 1234) + _pass("wires.which", ["IB", "IB", "IB", "IB"]) + "\\n")
    fh.write("{not json at all\\n")
    fh.write(_pass("wires.crc32c", {"$bytes": "zz"}) + "\\n")
    fh.write(_pass("no.such", 1) + "\\n")
    fh.write(_pass("dma.copies", 4) + "\\n")
    fh.write('{"exercise": "wires.bth", "status": "pass", "answer": {"$run": {"returned": []}}}\\n')
""",
}
# what the attack cell's notebook then answers (student placeholders unless replaced)
ANSWERS = {
    "patch_check": {"my_bth = ...": WRONG_BTH, "my_icrc = ...": "my_icrc = b'1234'"},
    "patch_checkers": {"my_bth = ...": WRONG_BTH, "names = [..., ..., ..., ...]": 'names = ["x"] * 4'},
    "patch_feedback": {"my_bth = ...": WRONG_BTH, "my_icrc = ...": "my_icrc = b'1234'",
                       "names = [..., ..., ..., ...]": 'names = ["x"] * 4'},
    "always_equal": {"my_bth = ...": "my_bth = AlwaysBytes(12)", "my_icrc = ...": "my_icrc = Always(5)",
                     "bad = ...": "bad = AlwaysList([Always(7)])",
                     "names = [..., ..., ..., ...]": "names = AlwaysList(['x', 'x', 'x', 'x'])"},
    "patch_log": {},
}


def _notebook(version: str) -> dict:
    return convert((ROOT / "notebooks" / f"{NB}.py").read_text(encoding="utf-8"), version)


def _attack(name: str) -> dict:
    nb = _notebook("student")
    for cell in nb["cells"]:
        for old, new in ANSWERS[name].items():
            if cell["cell_type"] == "code" and old in cell["source"]:
                cell["source"] = cell["source"].replace(old, new)
    first = next(i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code")
    at = len(nb["cells"]) if name == "patch_log" else first + 1  # the log is forged after the checks wrote it
    nb["cells"].insert(at, {"cell_type": "code", "id": "attack", "metadata": {}, "execution_count": None,
                                   "outputs": [], "source": ATTACKS[name].strip()})
    return nb


def _lines(text: str) -> list[dict]:
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return [r for r in out if isinstance(r, dict)]


def test_a_log_line_with_two_results_and_garbage_is_read_not_fatal() -> None:
    good = {"exercise": "wires.which", "status": "fail", "answer": ["RoCEv2", "iWARP", "IB", "RoCEv1"]}
    fake = {"exercise": "wires.icrc", "status": "pass", "answer": 5}
    rows, notes = grade.read_reports(json.dumps(fake) + json.dumps(good) + " {oops\n\nnull\n")
    assert [(r["exercise"], r["status"]) for r in rows] == [("wires.icrc", "fail"), ("wires.which", "pass")]
    assert any("line 1" in n and "not JSON" in n for n in notes) and any("line 3" in n for n in notes)


@pytest.mark.slow
def test_hostile_submissions_are_graded_failing_and_the_class_still_graded(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    said: list[str] = []  # the statuses the kernels wrote: proof that the attacks fooled lab.check there
    read = grade.read_reports
    monkeypatch.setattr(grade, "read_reports", lambda text: (said.append(text), read(text))[1])
    root = tmp_path / "class"
    (root / "honest").mkdir(parents=True)
    (root / "honest" / f"{NB}.ipynb").write_text(json.dumps(_notebook("instructor")), encoding="utf-8")
    for name in ATTACKS:
        (root / name).mkdir()
        (root / name / f"{NB}.ipynb").write_text(json.dumps(_attack(name)), encoding="utf-8")
    out = tmp_path / "out"
    assert main(["grade", str(root), "-o", str(out), "--cell-timeout", "60"]) == 0
    rows = {r["student"]: r for r in csv.DictReader((out / "grades.csv").open(encoding="utf-8"))}
    assert rows["honest"]["passed"] == "5", rows["honest"]
    for name in ATTACKS:
        row = rows[name]
        assert row["passed"] == "0" and row["of"] == "5", (name, row)
        assert not any(row[e] == "pass" for e in EXERCISES), (name, row)
    # the answered-but-wrong ones are fails, not just "missing"
    assert rows["patch_check"]["wires.bth"] == "fail" and rows["patch_checkers"]["wires.which"] == "fail"
    assert rows["always_equal"]["wires.icrc"] == "fail" and rows["patch_feedback"]["wires.bth"] == "fail"
    wrong_bth = {"$bytes": "04b0ffff000000d280001235"}
    fooled = [t for t in said if any(r.get("exercise") == "wires.bth" and r.get("status") == "pass"
                                     and r.get("answer") == wrong_bth for r in _lines(t))]
    assert len(fooled) == 3, "the attacks did not even fool the kernel's lab.check: the test proves nothing"
    notes = rows["patch_log"]["notes"]
    for said in ("not JSON", "unknown exercise 'no.such'", "cannot be read", "dma.copies", "no exercise and answer"):
        assert said in notes, (said, notes)
    assert rows["patch_log"]["wires.icrc"] == "fail" and rows["patch_log"]["wires.which"] == "fail"
