"""`rdmalab grade`: a right, a wrong and a broken submission, run again and tabulated."""

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


def _notebook(version: str) -> dict:
    return convert((ROOT / "notebooks" / f"{NB}.py").read_text(encoding="utf-8"), version)


def _cell(nb: dict, needle: str) -> dict:
    return next(c for c in nb["cells"] if c["cell_type"] == "code" and needle in c["source"])


def make_class(root: Path) -> None:
    """alice: the instructor's answers; bob: wrong answers, with outputs faked to look right;
    carol: one answer raises, one cell hangs, the rest right (in a flat file, as a platform exports)."""
    (root / "alice").mkdir(parents=True)
    (root / "alice" / f"{NB}.ipynb").write_text(json.dumps(_notebook("instructor")), encoding="utf-8")

    bob = _notebook("student")
    c = _cell(bob, 'lab.check("wires.bth"')
    c["source"] = c["source"].replace("my_bth = ...", 'my_bth = bytes.fromhex("04 b0 ff ff 00 00 00 d2 80 00 12 35")')
    c["outputs"] = [{"output_type": "display_data", "metadata": {},
                     "data": {"text/html": "<div class='rdmalab-check rdmalab-check-pass'>\u2714 Correct</div>",
                              "text/plain": "[wires.bth] PASS"}}]  # a faked output: must not count
    c = _cell(bob, 'lab.check("wires.which"')
    c["source"] = c["source"].replace("names = [..., ..., ..., ...]", 'names = ["RoCEv2", "IB", "iWARP", "RoCEv1"]')
    (root / "bob").mkdir()
    (root / "bob" / f"{NB}.ipynb").write_text(json.dumps(bob), encoding="utf-8")

    carol = _notebook("instructor")
    c = _cell(carol, 'lab.check("wires.icrc"')
    c["source"] = c["source"].replace('my_icrc = zlib.crc32', 'my_icrc = 1 / 0 + zlib.crc32')
    c = _cell(carol, 'lab.check("wires.crc32c"')
    c["source"] = "import time\nwhile True:\n    time.sleep(0.1)\n" + c["source"]
    (root / f"carol_{NB}.ipynb").write_text(json.dumps(carol), encoding="utf-8")
    (root / "notes.txt").write_text("not a notebook")


def test_submissions_are_found_per_folder_and_per_file(tmp_path: Path) -> None:
    make_class(tmp_path)
    subs = grade.find_submissions(tmp_path)
    assert [(s.student, s.notebook) for s in subs] == [("alice", NB), ("bob", NB), ("carol", NB)]


def test_right_wrong_and_broken_submissions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_class(tmp_path / "class")
    out = tmp_path / "out"
    assert main(["grade", str(tmp_path / "class"), "-o", str(out), "--cell-timeout", "8"]) == 0
    printed = capsys.readouterr().out
    rows = {r["student"]: r for r in csv.DictReader((out / "grades.csv").open(encoding="utf-8"))}
    assert set(rows) == {"alice", "bob", "carol"}
    assert rows["alice"]["passed"] == "5" and rows["alice"]["of"] == "5"
    assert [rows["alice"][e] for e in ("wires.bth", "wires.icrc", "wires.crc32c", "wires.which",
                                       "wires.iwarp_overhead")] == ["pass"] * 5
    # bob's faked "Correct" output is ignored: his BTH is run again and fails
    assert rows["bob"]["wires.bth"] == "fail" and rows["bob"]["wires.which"] == "fail"
    assert rows["bob"]["wires.icrc"] == "not yet" and rows["bob"]["passed"] == "0"
    # carol: the raising cell is an error, the hanging cell is interrupted and the run goes on
    assert rows["carol"]["wires.bth"] == "pass" and rows["carol"]["wires.which"] == "pass"
    assert rows["carol"]["wires.iwarp_overhead"] == "pass"
    assert rows["carol"]["wires.icrc"] == "missing" and rows["carol"]["wires.crc32c"] == "missing"
    assert "ZeroDivisionError" in rows["carol"]["problems"] and "8 s" in rows["carol"]["problems"]
    html = (out / "grades.html").read_text(encoding="utf-8")
    assert html.count("<tr>") == 4 and "fresh kernel" in html
    assert "alice" in printed and "5/5" in printed


def test_grade_says_what_is_wrong_with_its_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["grade", str(tmp_path / "nope")]) == 1
    assert "not a folder" in capsys.readouterr().err
    assert main(["grade", str(tmp_path)]) == 1
    assert "no lab notebooks" in capsys.readouterr().err
