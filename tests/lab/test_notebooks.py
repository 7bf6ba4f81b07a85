"""Run every lab notebook, both versions, top to bottom, and require what CI promises:

* instructor version: no errors, and every ``lab.check`` passes;
* student version: no errors, and every ``lab.check`` reports "not yet".

The number of checks logged must equal the number of ``lab.check(`` calls in the source, so a
check that silently stopped running is caught too.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

nbclient = pytest.importorskip("nbclient")
nbformat = pytest.importorskip("nbformat")
pytest.importorskip("ipykernel")

# tests/lab is on sys.path (pytest's rootdir insertion)
from test_answers_above import answers as right_answers  # noqa: E402
from test_answers_above import leaks  # noqa: E402

from rdmalab.lab.answers import decode  # noqa: E402
from rdmalab.lab.core import get, judge  # noqa: E402
from rdmalab.lab.generate import convert, parse, sources  # noqa: E402
from rdmalab.lab.runner import wake_for_replies  # noqa: E402
from rdmalab.lab.variant import as_student  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sources(ROOT / "notebooks")


def _expected_checks(src: Path) -> int:
    return sum("".join(c["lines"]).count("lab.check(") for c in parse(src.read_text(encoding="utf-8"))
               if c["type"] == "code" and "instructor" not in c["tags"] and "solution" not in c["tags"])


def _run(src: Path, version: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    log = tmp_path / "checks.jsonl"
    monkeypatch.setenv("RDMALAB_CHECK_LOG", str(log))
    monkeypatch.setenv("RDMALAB_BACKEND", "soft")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    nb = nbformat.from_dict(convert(src.read_text(encoding="utf-8"), version))
    client = wake_for_replies(nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                                      resources={"metadata": {"path": str(tmp_path)}}))
    client.execute()
    (tmp_path / f"{src.stem}.{version}.ipynb").write_text(nbformat.writes(nb), encoding="utf-8")
    # A figure whose _repr_svg_/_repr_html_ raises does not fail its cell (IPython's display formatter
    # catches it and prints the traceback as an output), so look for error outputs explicitly.
    errors = [(c.get("id"), o.get("ename"), o.get("evalue")) for c in nb.cells for o in c.get("outputs", [])
              if o.get("output_type") == "error" and "raises-exception" not in c.get("metadata", {}).get("tags", [])]
    assert not errors, f"{src.stem} ({version}): error outputs in cells {errors}"
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()] if log.exists() else []


#: the student both versions run as, so that the student version shows the variant the answers are of
STUDENT = "ada"
#: each notebook's right answers, from its instructor run (for the student run's test that none shows above
#: its exercise: tests/lab/test_answers_above.py has the rules)
RIGHT_ANSWERS: dict[str, dict] = {}


def test_there_are_notebooks() -> None:
    assert len(SOURCES) >= 13, SOURCES


@pytest.mark.slow
@pytest.mark.parametrize("src", SOURCES, ids=[s.stem for s in SOURCES])
def test_instructor_version_passes_every_check(src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The instructor's notebook, run as one student, passes every check; judged as the grader judges (in this
    process, as that student) it still passes; and its answers, copied by another student, fail every exercise
    that draws a scenario per student (``varies``) and pass the others (issue 35: a variant per student)."""
    monkeypatch.setenv("RDMALAB_STUDENT", STUDENT)
    results = _run(src, "instructor", tmp_path, monkeypatch)
    assert len(results) == _expected_checks(src), results
    failing = [r for r in results if r["status"] != "pass"]
    assert not failing, failing
    RIGHT_ANSWERS[src.stem] = right_answers(results)
    copied = []
    for r in results:
        answer = decode(r["answer"])
        with as_student(STUDENT):
            assert judge(r["exercise"], answer).status == "pass", ("the grader disagrees with the kernel", r)
        with as_student("grace"):
            verdict = judge(r["exercise"], answer)
        if get(r["exercise"]).varies and verdict.status == "pass":
            copied.append(f"{r['exercise']}: ada's answer passes for grace")
        if not get(r["exercise"]).varies and verdict.status != "pass":
            copied.append(f"{r['exercise']} is not marked varies=True, yet ada's answer {verdict.status}s for grace")
    assert not copied, copied


#: What a student notebook must not show above an exercise, because it is the exercise's answer
#: (issue 20, item 1: notebook 03's RNR ladder labelled every NAK "RNR NAK 1.28 ms" above "read the RNR timer").
GIVEAWAYS: dict[str, list[tuple[str, tuple[str, ...]]]] = {
    # (the per-student answers of the exercises marked varies=True are looked for above every exercise by
    # tests/lab/test_answers_above.py, with each run's own values; these are answers the same for everyone)
    # 10 printed which port PFC paused, and said why F1 slowed, right above "which port, and why?"
    "10-congestion": [("congestion.victim", ("P1->P2 paused", "P2 pauses P1", "the pause built at P1"))],
    # 12 printed each host's first request PSN above the question about them
    "12-connection-manager": [("cm.psn", ("first RC request from",))],
}


@pytest.mark.slow
@pytest.mark.parametrize("src", SOURCES, ids=[s.stem for s in SOURCES])
def test_student_version_runs_and_reports_not_yet(src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The student version runs, reports "not yet" for every check, and shows no exercise's answer above it
    (issue 36: with the right answers of the instructor run, as the same student)."""
    monkeypatch.setenv("RDMALAB_STUDENT", STUDENT)
    if src.stem not in RIGHT_ANSWERS:  # the instructor test did not run first (a -k selection): run it here
        (tmp_path / "instructor").mkdir()
        RIGHT_ANSWERS[src.stem] = right_answers(_run(src, "instructor", tmp_path / "instructor", monkeypatch))
    results = _run(src, "student", tmp_path, monkeypatch)
    assert len(results) == _expected_checks(src), results
    answered = [r for r in results if r["status"] != "not yet"]
    assert not answered, answered
    found, skipped = leaks(nbformat.read(tmp_path / f"{src.stem}.student.ipynb", as_version=4),
                           RIGHT_ANSWERS[src.stem])
    print(f"{src.stem}: {len(RIGHT_ANSWERS[src.stem])} answers; not looked for: {skipped}")
    assert not found, f"{src.stem}: an answer shows above its exercise:\n" + "\n".join(found)
    for ex, givenaway in GIVEAWAYS.get(src.stem, []):
        nb = nbformat.read(tmp_path / f"{src.stem}.student.ipynb", as_version=4)
        shown = ""
        for cell in nb.cells:
            if f'lab.check("{ex}"' in cell.get("source", ""):
                break
            for out in cell.get("outputs", []):
                shown += json.dumps(out.get("data", {})) + out.get("text", "")
        shows = [a for a in givenaway if a in shown]
        assert not shows, f"{src.stem}: the output above exercise {ex} shows its answer: {shows}"
