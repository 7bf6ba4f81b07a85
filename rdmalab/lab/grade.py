"""Grade a class: run every submitted notebook again and tabulate which checks passed.

``rdmalab grade DIR`` finds the submitted notebooks under ``DIR`` (``DIR/<student>/NN-name.ipynb``,
or flat files named ``<student>...NN-name.ipynb`` as a learning platform exports them), and
for each one:

* throws away every output and execution count in the file: what a student's notebook *shows*
  is never trusted;
* runs it in a fresh kernel in a scratch folder, with a time limit per cell; a cell that runs
  too long is interrupted and the run goes on (the exercises after a hanging one still count);
  a cell that raises does not stop the run either;
* reads the *answers* every ``lab.check`` reported to the run's own log (``RDMALAB_CHECK_LOG``, a
  new file per run), and judges each one again here, in the grader's own process
  (:func:`rdmalab.lab.core.judge` on :func:`rdmalab.lab.answers.decode`'s values); the status the
  kernel wrote is never read.  Per exercise the last answer counts.

The table has one row per (student, notebook) and one column per exercise of that notebook:
``pass``, ``fail``, ``error``, ``not yet`` or ``missing`` (never checked: the cell was deleted,
never reached, or timed out).  It is written as CSV (for the gradebook) and as an HTML page
(for reading: hover a cell for the check's message).

So a student who patches ``lab.check``, the checkers or the feedback module in the kernel, gives
answers whose ``__eq__`` is always true, or writes statuses into the log gains nothing: only
values travel, and they are checked here.  A log line that is not a report (garbage, two JSON
objects on one line, an unknown exercise) is noted and skipped; it never stops the grading of this
notebook or of the others.  What remains possible is listed in docs/teaching.md.  Cells that
reassign ``lab.check`` or touch ``RDMALAB_CHECK_LOG`` are still flagged in the ``notes`` column.
"""

from __future__ import annotations

import csv
import html
import json
import os
import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rdmalab.lab.answers import BadReport, decode
from rdmalab.lab.core import exercises, get, judge

STATUSES = ("pass", "fail", "error", "not yet", "missing")
_NOTEBOOK = re.compile(r"(\d\d-[a-z0-9-]+?)(?:\.student|\.instructor)?$")
#: the most of a run's check log that is read (a submission that floods it is noted, not trusted further)
LOG_LIMIT = 64 << 20
_SUSPICIOUS = re.compile(r"(lab\.check\s*=|core\.check\s*=|RDMALAB_CHECK_LOG|_log\s*=|_REGISTRY)")


@dataclass
class Submission:
    student: str
    notebook: str  # "07-four-wires"
    path: Path


@dataclass
class Graded:
    submission: Submission
    results: dict[str, dict[str, Any]] = field(default_factory=dict)  # exercise -> last check result
    exercises: list[str] = field(default_factory=list)  # the notebook's exercises, in order
    problems: list[str] = field(default_factory=list)  # cells that raised or timed out
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def status(self, ex: str) -> str:
        r = self.results.get(ex)
        return str(r["status"]) if r else "missing"

    @property
    def score(self) -> int:
        return sum(self.status(e) == "pass" for e in self.exercises)


def find_submissions(root: Path) -> list[Submission]:
    """The notebooks under ``root``: per-student folders, or flat files that name the student."""

    known = {e.notebook for e in exercises().items}
    subs = []
    for p in sorted(root.rglob("*.ipynb")):
        if ".ipynb_checkpoints" in p.parts:
            continue
        rel = p.relative_to(root)
        m = _NOTEBOOK.search(p.stem)
        notebook = m.group(1) if m else p.stem
        if notebook not in known:
            hit = next((k for k in known if k in p.stem), None)  # "alice_07-four-wires (1)"
            if hit is None:
                continue  # not one of the lab's notebooks
            notebook = hit
        if len(rel.parts) > 1:
            student = rel.parts[0]
        else:
            student = p.stem.replace(notebook, "").strip(" _-.") or p.stem
        subs.append(Submission(student, notebook, p))
    return subs


def _clean(nb: Any) -> list[str]:
    """Drop outputs and counts (never trust them); return notes on suspicious cells."""
    notes = []
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
            if _SUSPICIOUS.search(cell.source):
                notes.append(f"cell {cell.get('id', '?')} touches the checker or its log: look at it")
        cell.metadata.pop("execution", None)
    return notes


def grade_one(sub: Submission, *, cell_timeout: int = 60, kernel: str = "python3") -> Graded:
    """Run one submission in a fresh kernel and collect its check results."""
    import nbclient  # optional: nbclient, nbformat (lab extra)
    import nbformat
    from nbclient.exceptions import CellExecutionError, DeadKernelError

    g = Graded(sub, exercises=[e.id for e in exercises(sub.notebook).items])
    t0 = time.monotonic()
    try:
        nb = nbformat.read(sub.path, as_version=4)  # type: ignore[no-untyped-call]
    except Exception as err:  # not a notebook at all: a grade of nothing, with the reason
        g.problems.append(f"cannot read the notebook: {type(err).__name__}: {err}")
        return g
    g.notes += _clean(nb)
    with tempfile.TemporaryDirectory(prefix="rdmalab-grade-") as tmp:
        log = Path(tmp) / "checks.jsonl"
        env_before = {k: os.environ.get(k) for k in ("RDMALAB_CHECK_LOG", "RDMALAB_BACKEND", "MPLBACKEND", "PYTHONPATH")}
        # the kernel imports the same rdmalab as this grader, so that it reports answers the way we read them
        here = str(Path(__file__).resolve().parents[2])
        os.environ.update(RDMALAB_CHECK_LOG=str(log), RDMALAB_BACKEND="soft", MPLBACKEND="Agg",
                          PYTHONPATH=os.pathsep.join([here, *filter(None, [env_before["PYTHONPATH"]])]))
        client = nbclient.NotebookClient(
            nb, timeout=cell_timeout, kernel_name=kernel, allow_errors=True, interrupt_on_timeout=True,
            error_on_timeout={"ename": "CellTimeoutError", "evalue": f"ran longer than {cell_timeout} s",
                              "traceback": []},
            resources={"metadata": {"path": tmp}})
        started: dict[str, float] = {}
        took: dict[str, float] = {}
        client.on_cell_start = lambda cell, cell_index: started.__setitem__(cell.get("id", ""), time.monotonic())
        client.on_cell_executed = lambda cell, cell_index, execute_reply: took.__setitem__(
            cell.get("id", ""), time.monotonic() - started.get(cell.get("id", ""), time.monotonic()))
        try:
            client.execute()
        except DeadKernelError:
            g.problems.append("the kernel died")
        except CellExecutionError as err:  # only when allow_errors is overridden by a cell tag
            g.problems.append(f"stopped: {getattr(err, 'ename', '')}: {getattr(err, 'evalue', '')}")
        finally:
            for k, v in env_before.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        raw = ""
        if log.exists():
            with log.open("r", encoding="utf-8", errors="replace") as fh:
                raw = fh.read(LOG_LIMIT + 1)
            if len(raw) > LOG_LIMIT:
                g.notes.append(f"the check log is larger than {LOG_LIMIT >> 20} MB; only its start was read")
                raw = raw[:LOG_LIMIT]
    rows, bad = read_reports(raw)
    g.notes += bad
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                first = next((x for x in cell.source.splitlines() if x.strip()), "")[:50]
                what = f"{out.get('ename')}: {str(out.get('evalue', ''))[:120]}"
                if out.get("ename") == "KeyboardInterrupt" and took.get(cell.get("id", ""), 0) >= cell_timeout:
                    what = f"ran longer than {cell_timeout} s and was interrupted"
                g.problems.append(f"cell {cell.get('id', '?')} ({first!r}): {what}")
    for r in rows:
        if r["exercise"] in g.exercises:
            g.results[r["exercise"]] = r
        elif f"answered {r['exercise']}" not in " ".join(g.notes):  # another notebook's exercise: not counted here
            g.notes.append(f"answered {r['exercise']}, an exercise of another notebook: not counted")
    g.seconds = time.monotonic() - t0
    return g


def read_reports(text: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Judge every answer a run reported: ``(results, notes)``.

    Each result is ``{"exercise", "status", "message", "field", "given", "expected"}`` as
    :func:`rdmalab.lab.core.judge` decides it here; the statuses and messages in ``text`` are ignored.
    Whatever is not a report (a broken line, a value of an unknown shape, an unknown exercise) becomes
    a note naming the line, and the reading goes on: a line may even hold several JSON objects.
    """
    dec = json.JSONDecoder()
    results: list[dict[str, Any]] = []
    notes: list[str] = []
    for n, line in enumerate(text.splitlines(), 1):
        pos = 0
        while pos < len(line):
            while pos < len(line) and line[pos].isspace():
                pos += 1
            if pos >= len(line):
                break
            try:
                obj, pos = dec.raw_decode(line, pos)
            except json.JSONDecodeError as err:
                notes.append(f"check log line {n}: not JSON from column {pos + 1} ({err.msg}); the rest of the line "
                             "was skipped")
                break
            if not isinstance(obj, dict) or not isinstance(obj.get("exercise"), str) or "answer" not in obj:
                notes.append(f"check log line {n}: not a check report (no exercise and answer); skipped")
                continue
            ex = obj["exercise"]
            try:
                get(ex)
                answer = decode(obj["answer"])
            except KeyError:
                notes.append(f"check log line {n}: unknown exercise {ex[:40]!r}; skipped")
                continue
            except BadReport as err:
                notes.append(f"check log line {n}: the answer to {ex} cannot be read ({err}); skipped")
                continue
            r = judge(ex, answer)
            results.append({"exercise": r.exercise, "status": r.status, "message": r.message, "field": r.field,
                            "given": r.given, "expected": r.expected})
    return results, notes


def grade(root: Path, *, cell_timeout: int = 60, progress: Callable[[str], None] | None = None) -> list[Graded]:
    subs = find_submissions(root)
    out = []
    for i, sub in enumerate(subs, 1):
        if progress:
            progress(f"[{i}/{len(subs)}] {sub.student}: {sub.notebook} ...")
        try:
            g = grade_one(sub, cell_timeout=cell_timeout)
        except Exception as err:  # a bug of ours or a hostile submission: this one ungraded, the others go on
            g = Graded(sub, exercises=[e.id for e in exercises(sub.notebook).items])
            g.problems.append(f"the grader failed on this submission: {type(err).__name__}: {str(err)[:200]}")
        if progress:
            progress(f"    {g.score}/{len(g.exercises)} checks passed in {g.seconds:.1f} s"
                     + (f"; {len(g.problems)} problem(s)" if g.problems else ""))
        out.append(g)
    return out


def _columns(graded: list[Graded]) -> list[str]:
    cols: list[str] = []
    for g in graded:
        cols += [e for e in g.exercises if e not in cols]
    return cols


def write_csv(graded: list[Graded], path: Path) -> None:
    cols = _columns(graded)
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["student", "notebook", "passed", "of", *cols, "problems", "notes"])
        for g in graded:
            w.writerow([g.submission.student, g.submission.notebook, g.score, len(g.exercises),
                        *[g.status(c) if c in g.exercises else "" for c in cols],
                        " | ".join(g.problems), " | ".join(g.notes)])


_COLOURS = {"pass": "#c8e6c9", "fail": "#ffcdd2", "error": "#ffe0b2", "not yet": "#eeeeee", "missing": "#f5f5f5"}


def write_html(graded: list[Graded], path: Path, *, title: str = "rdmalab grades") -> None:
    cols = _columns(graded)
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    rows = []
    for g in graded:
        cells = []
        for c in cols:
            if c not in g.exercises:
                cells.append("<td></td>")
                continue
            st = g.status(c)
            msg = (g.results.get(c) or {}).get("message", "never checked in this run")
            cells.append(f"<td style='background:{_COLOURS[st]}' title='{html.escape(str(msg), quote=True)}'>"
                         f"{html.escape(st)}</td>")
        probs = "<br>".join(html.escape(p) for p in g.problems + g.notes)
        rows.append(f"<tr><td class='n'>{html.escape(g.submission.student)}</td>"
                    f"<td class='n'>{html.escape(g.submission.notebook)}</td>"
                    f"<td><b>{g.score}/{len(g.exercises)}</b></td>{''.join(cells)}<td style='font-size:85%'>{probs}</td></tr>")
    legend = " ".join(f"<span style='background:{c};padding:0 .4em'>{s}</span>" for s, c in _COLOURS.items())
    path.write_text(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title><style>"
        "body{font-family:sans-serif} table{border-collapse:collapse} td,th{border:1px solid #ccc;padding:.2em .5em;"
        "font-size:90%} th{background:#fafafa} td.n{white-space:nowrap}</style></head><body>"
        f"<h1>{html.escape(title)}</h1><p>Every notebook was run again in a fresh kernel; the outputs saved in the "
        f"submissions were discarded. Hover a cell for the check's message.</p><p>{legend}</p>"
        f"<table><tr><th>student</th><th>notebook</th><th>passed</th>{head}<th>problems and notes</th></tr>"
        f"{''.join(rows)}</table></body></html>\n", encoding="utf-8")


def table(graded: list[Graded]) -> str:
    """The grade table as plain text (what ``rdmalab grade`` prints)."""
    cols = _columns(graded)
    head = ["student", "notebook", "passed", *cols]
    body = [[g.submission.student, g.submission.notebook, f"{g.score}/{len(g.exercises)}",
             *[g.status(c) if c in g.exercises else "" for c in cols]] for g in graded]
    widths = [max(len(str(r[i])) for r in [head, *body]) for i in range(len(head))]
    lines = ["  ".join(str(v).ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in [head, *body]]
    return "\n".join(lines)
