"""rdmalab.lab.runner: a kernel whose messages cannot be read any more (a torn message).

A kernel that has used its whole address space (the sandbox's ``RLIMIT_AS``) can fail half-way through
sending a message; the next one then arrives joined to it and jupyter_client refuses it ("Invalid
Signature"). The kernels below send such a message themselves. The report names the cell, says the run
stopped there and keeps the problems of the cells before it; when the kernel had reached its memory limit
it says so (CI once graded the class's memory hog as "the notebook could not be run")."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
import nbformat  # noqa: E402

from rdmalab.lab.grade import Submission, judge_run  # noqa: E402

TEAR = ("get_ipython().kernel.iopub_socket.send_multipart([b'<IDS|MSG>', b'0' * 64, b'{}', b'{}', b'{}', b'{}'])\n"
        "import time; time.sleep(0.5)")
FILL = ("blocks = []\ntry:\n    while True:\n        blocks.append(bytearray(1 << 20))\n"
        "except MemoryError:\n    del blocks[-16:]\n")


def _run(tmp_path: Path, cells: list[str], memory: int | None = None) -> dict:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c, id=f"c{i}") for i, c in enumerate(cells)]
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    out = tmp_path / "out"
    out.mkdir()
    cmd = [sys.executable, "-m", "rdmalab.lab.runner", str(path), str(out), "--cell-timeout", "30"]

    def limit() -> None:  # in the child before it runs: the sandbox's address-space limit, as the grader sets it
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                       preexec_fn=limit if memory is not None else None)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads((out / "run.json").read_text(encoding="utf-8"))


def test_a_torn_message_names_its_cell_and_keeps_the_cells_before(tmp_path: Path) -> None:
    report = _run(tmp_path, ["1 / 0", TEAR, "print('never')"])
    assert report["kernel"] == "broke", report
    problems = report["problems"]
    assert any(p.startswith("cell c0 ") and "ZeroDivisionError" in p for p in problems), problems
    torn = [p for p in problems if "could not be read" in p]
    assert len(torn) == 1 and "cell c1 " in torn[0] and "Invalid Signature" in torn[0], problems
    assert "memory" not in torn[0], torn  # no limit was near: no guess about memory
    assert not any("could not be run" in p for p in problems), problems


def test_a_kernel_at_its_memory_limit_is_named_as_the_cause(tmp_path: Path) -> None:
    report = _run(tmp_path, ["x = 1", FILL + TEAR, "print(x)"], memory=1 << 30)
    torn = [p for p in report["problems"] if "could not be read" in p]
    assert len(torn) == 1 and "cell c1 " in torn[0], report
    assert "whole memory limit" in torn[0] and "of 1024 MiB" in torn[0], torn
    assert len(torn[0]) <= 300, torn  # what the grader keeps of a problem


def test_the_grader_says_the_cells_after_it_did_not_run(tmp_path: Path) -> None:
    report = _run(tmp_path, [TEAR, "print('never')"])
    sub = Submission("ann", "07-four-wires", tmp_path / "nb.ipynb")
    row = judge_run(sub, {"how": "bwrap", "outcome": {"returncode": 0, "seconds": 3.0},
                          "report": json.dumps(report), "log": ""})
    assert row.problems[0] == report["problems"][0], row.problems
    assert row.problems[-1] == "the run stopped there: the cells after it did not run", row.problems
    assert not any("without its report" in p or "could not be run" in p for p in row.problems), row.problems
