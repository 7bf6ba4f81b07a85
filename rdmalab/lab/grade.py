"""Grade a class: run every submitted notebook again, each in a sandbox, and tabulate which checks passed.

``rdmalab grade DIR`` finds the submitted notebooks under ``DIR`` (``DIR/<student>/NN-name.ipynb``,
or flat files named ``<student>...NN-name.ipynb`` as a learning platform exports them), and
for each one:

* throws away every output and execution count in the file: what a student's notebook *shows*
  is never trusted;
* runs it in a fresh kernel inside a sandbox of its own (:mod:`rdmalab.lab.sandbox`: its own PID,
  mount, IPC, network and user namespaces, the Python environment read-only, a private ``/tmp`` and
  home, a scratch folder the only place it writes, limits on memory, CPU time and tasks), with a time
  limit per cell; a cell that runs too long is interrupted and the run goes on, a cell that raises
  does not stop it either (:mod:`rdmalab.lab.runner` is what runs inside);
* sets ``RDMALAB_STUDENT`` in that kernel to the student the submission belongs to (its folder, or
  the flat file's name), so the notebook shows that student's variant (:mod:`rdmalab.lab.variant`);
* after the sandbox has ended (and with it every process the run started), reads the *answers* every
  ``lab.check`` reported to the run's check log, which lived inside the sandbox, and judges each one
  again here, in the grader's own process, as that student (:func:`rdmalab.lab.core.judge` on
  :func:`rdmalab.lab.answers.decode`'s values under :func:`rdmalab.lab.variant.as_student`); the
  status the kernel wrote is never read.  Per exercise the last answer counts.

The table has one row per (student, notebook) and one column per exercise of that notebook:
``pass``, ``fail``, ``error``, ``not yet`` or ``missing`` (never checked: the cell was deleted,
never reached, or timed out).  Each row is written to ``grades.csv`` (and ``grades.jsonl``, the
whole record) as soon as it is graded, so a grader stopped by anything keeps what it had and
``--resume`` goes on from there; ``grades.html`` (hover a cell for the check's message) is written
at the end.  The ``graded in`` column says how: ``bwrap`` or ``unshare`` (a sandbox), or
``no sandbox`` (``--no-sandbox``).

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
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rdmalab.lab import sandbox as sbx
from rdmalab.lab.answers import BadReport, decode
from rdmalab.lab.core import exercises, get, judge
from rdmalab.lab.runner import REPORT_LIMIT
from rdmalab.lab.variant import ENV as STUDENT_ENV
from rdmalab.lab.variant import as_student

STATUSES = ("pass", "fail", "error", "not yet", "missing")
_NOTEBOOK = re.compile(r"(\d\d-[a-z0-9-]+?)(?:\.student|\.instructor)?$")
#: the most of a run's check log that is read (a submission that floods it is noted, not trusted further)
LOG_LIMIT = 64 << 20
_SUSPICIOUS = re.compile(r"(lab\.check\s*=|core\.check\s*=|RDMALAB_CHECK_LOG|_log\s*=|_REGISTRY)")
NO_SANDBOX = "no sandbox"


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
    how: str = ""  # "bwrap", "unshare" or "no sandbox"

    def status(self, ex: str) -> str:
        r = self.results.get(ex)
        return str(r["status"]) if r else "missing"

    @property
    def score(self) -> int:
        return sum(self.status(e) == "pass" for e in self.exercises)

    def to_json(self) -> dict[str, Any]:
        return {"student": self.submission.student, "notebook": self.submission.notebook,
                "path": str(self.submission.path), "results": self.results, "exercises": self.exercises,
                "problems": self.problems, "notes": self.notes, "seconds": self.seconds, "how": self.how}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Graded:
        return cls(Submission(d["student"], d["notebook"], Path(d["path"])), dict(d["results"]), list(d["exercises"]),
                   list(d["problems"]), list(d["notes"]), float(d["seconds"]), str(d.get("how", "")))


def _student_name(p: Path, rel: Path, notebook: str) -> str:
    if len(rel.parts) > 1:
        return rel.parts[0]
    return p.stem.replace(notebook, "").strip(" _-.") or p.stem


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
        subs.append(Submission(_student_name(p, rel, notebook), notebook, p))
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


# ----------------------------------------------------------------------------- one run (here or on a worker)


@dataclass(frozen=True)
class RunSpec:
    """What a run needs, as plain data (a Dask worker gets it by value): the cleaned notebook and how to run it."""

    student: str
    notebook_text: str
    cell_timeout: int = 60
    sandbox: bool = True
    limits: sbx.Limits = sbx.DEFAULT_LIMITS
    hide: tuple[str, ...] = ()  # folders the sandbox must not see (the class, the grades)
    slot: int = 0


def run_submission(spec: RunSpec) -> dict[str, Any]:
    """Run one cleaned notebook and return what it left: ``{"log", "report", "how", "outcome"}``.

    Nothing is judged here: this is the part that may run on another machine (``--scheduler``).
    The check log and the runner's report are read only after the run has ended.
    """
    scratch = Path(tempfile.mkdtemp(prefix="rdmalab-grade-"))
    try:
        nb_path = scratch / "submission.ipynb"
        nb_path.write_text(spec.notebook_text, encoding="utf-8")
        inside = Path(sbx.INSIDE) if spec.sandbox else scratch
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "HOME": "/home/student",
               STUDENT_ENV: spec.student, "RDMALAB_CHECK_LOG": str(inside / "checks.jsonl"),
               "RDMALAB_BACKEND": "soft", "MPLBACKEND": "Agg", "OPENBLAS_NUM_THREADS": "1",
               "MALLOC_ARENA_MAX": "2", "PYTHONDONTWRITEBYTECODE": "1", "PYDEVD_DISABLE_FILE_VALIDATION": "1",
               "JUPYTER_PLATFORM_DIRS": "1"}
        # the kernel imports the same rdmalab as this grader, so that it reports answers the way we read them
        here = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = here
        argv = [sys.executable, "-m", "rdmalab.lab.runner", str(inside / "submission.ipynb"), str(inside),
                "--cell-timeout", str(spec.cell_timeout)]
        if spec.sandbox:
            how = sbx.probe()
            out = sbx.run_confined([*argv, "--reap"], scratch, env=env, limits=spec.limits, method=how,
                                   slot=spec.slot, hide=[Path(h) for h in spec.hide])
            outcome = {"returncode": out.returncode, "seconds": out.seconds, "timed_out": out.timed_out,
                       "stderr": out.stderr[-2000:], "left_running": out.left_running}
        else:
            how = NO_SANDBOX
            home = scratch / "home"
            home.mkdir()
            env.update(HOME=str(home))
            t0 = time.monotonic()
            try:
                r = subprocess.run(argv, env=env, cwd=scratch, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, timeout=spec.limits.wall_seconds, start_new_session=True)
                outcome = {"returncode": r.returncode, "seconds": time.monotonic() - t0, "timed_out": False,
                           "stderr": r.stderr.decode("utf-8", "replace")[-2000:], "left_running": 0}
            except subprocess.TimeoutExpired:
                outcome = {"returncode": -9, "seconds": time.monotonic() - t0, "timed_out": True, "stderr": "",
                           "left_running": 0}
        return {"log": _read_bounded(scratch / "checks.jsonl", LOG_LIMIT),
                "report": _read_bounded(scratch / "run.json", REPORT_LIMIT), "how": how, "outcome": outcome}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _read_bounded(path: Path, limit: int) -> str | None:
    """The file's text, at most ``limit`` characters and a marker when there was more; None when there is none."""
    try:
        if path.is_symlink() or not path.is_file():  # written in the sandbox: a link may point anywhere
            return None
        with path.open("r", encoding="utf-8", errors="replace") as fh:
            text = fh.read(limit + 1)
    except OSError:
        return None
    return text if len(text) <= limit else text[:limit] + "\0TRUNCATED"


def judge_run(sub: Submission, ran: dict[str, Any], *, notes: Iterable[str] = ()) -> Graded:
    """The row of one submission from what its run left: every answer judged here, as its student."""
    g = Graded(sub, exercises=[e.id for e in exercises(sub.notebook).items], notes=list(notes), how=str(ran["how"]))
    outcome = ran.get("outcome") or {}
    g.seconds = float(outcome.get("seconds", 0.0))
    report = _parse_report(ran.get("report"))
    g.problems += report["problems"]
    if report.get("kernel") == "died":
        g.problems.append("the kernel died (a limit on memory or CPU time, or the notebook's own doing); the cells "
                          "after it did not run")
    elif report.get("kernel") == "broke":  # the runner's problem says in which cell, and why where it knows
        g.problems.append("the run stopped there: the cells after it did not run")
    if report.get("reaped"):
        g.notes.append(f"{report['reaped']} process(es) the notebook left behind were killed after their cell")
    if outcome.get("timed_out"):
        g.problems.append(f"the whole run took longer than its limit ({outcome.get('seconds', 0):.0f} s) and was "
                          "killed")
    elif ran.get("report") is None:
        err = str(outcome.get("stderr", "")).strip().splitlines()
        g.problems.append(f"the run ended (exit status {outcome.get('returncode')}) without its report"
                          + (f": {err[-1][:200]}" if err else ""))
    if outcome.get("left_running"):
        g.notes.append(f"{outcome['left_running']} process(es) of the run were still alive after it and were killed")
    raw = ran.get("log") or ""
    if raw.endswith("\0TRUNCATED"):
        g.notes.append(f"the check log is larger than {LOG_LIMIT >> 20} MB; only its start was read")
        raw = raw[: -len("\0TRUNCATED")]
    with as_student(sub.student):
        rows, bad = read_reports(raw)
    g.notes += bad
    for r in rows:
        if r["exercise"] in g.exercises:
            g.results[r["exercise"]] = r
        elif f"answered {r['exercise']}" not in " ".join(g.notes):  # another notebook's exercise: not counted here
            g.notes.append(f"answered {r['exercise']}, an exercise of another notebook: not counted")
    return g


def _parse_report(text: str | None) -> dict[str, Any]:
    """The runner's report, checked for shape (it was written where the submission's code ran)."""
    if not text:
        return {"problems": []}
    try:
        d = json.loads(text)
    except ValueError:
        return {"problems": ["the run's report was not readable (the notebook may have overwritten it)"]}
    if not isinstance(d, dict):
        return {"problems": ["the run's report was not readable (the notebook may have overwritten it)"]}
    problems = d.get("problems")
    problems = [str(p)[:300] for p in problems[:50]] if isinstance(problems, list) else []
    reaped = d.get("reaped") if isinstance(d.get("reaped"), int) else 0
    return {"problems": problems, "kernel": str(d.get("kernel", ""))[:20], "reaped": reaped}


def _prepare(sub: Submission) -> tuple[str | None, list[str], str | None]:
    """``(cleaned notebook text, notes, problem)`` of a submission file."""
    import nbformat  # optional: nbformat (lab extra)

    try:
        nb = nbformat.read(sub.path, as_version=4)  # type: ignore[no-untyped-call]
    except Exception as err:  # not a notebook at all: a grade of nothing, with the reason
        return None, [], f"cannot read the notebook: {type(err).__name__}: {str(err)[:200]}"
    notes = _clean(nb)
    return nbformat.writes(nb), notes, None  # type: ignore[no-untyped-call]


def grade_one(sub: Submission, *, cell_timeout: int = 60, sandbox: bool = True,
              limits: sbx.Limits = sbx.DEFAULT_LIMITS, hide: Iterable[Path] = (), slot: int = 0) -> Graded:
    """Run one submission in a fresh kernel (in a sandbox unless told otherwise) and judge its checks."""
    text, notes, problem = _prepare(sub)
    if text is None:
        return _ungraded(sub, str(problem), _how(sandbox))
    spec = RunSpec(sub.student, text, cell_timeout, sandbox, limits, tuple(str(h) for h in hide), slot)
    return judge_run(sub, run_submission(spec), notes=notes)


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


class GradeBook:
    """``grades.csv`` and ``grades.jsonl`` in ``outdir``, one row appended (and flushed to disk) per graded
    submission, so that a grader stopped by anything keeps every row it had; ``grades.html`` at the end.

    With ``resume``, the rows already in ``grades.jsonl`` are kept and :meth:`has` says which submissions
    need no grading again; otherwise both files start empty.
    """

    def __init__(self, outdir: Path, columns: list[str], *, resume: bool = False) -> None:
        outdir.mkdir(parents=True, exist_ok=True)
        self.csv_path, self.jsonl_path, self.html_path = (outdir / "grades.csv", outdir / "grades.jsonl",
                                                          outdir / "grades.html")
        self.rows: list[Graded] = []
        self.skipped_lines = 0
        if resume and self.jsonl_path.exists():
            for line in self.jsonl_path.read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    self.rows.append(Graded.from_json(json.loads(line)))
                except (ValueError, KeyError, TypeError):
                    self.skipped_lines += 1  # a row cut short when the grader was stopped: graded again
        self.columns = list(columns)
        self.columns += [e for g in self.rows for e in g.exercises if e not in self.columns]
        self._lock = threading.Lock()
        with self.csv_path.open("w", newline="", encoding="utf-8") as fh:  # the header and the rows kept
            w = csv.writer(fh)
            w.writerow(_csv_head(self.columns))
            w.writerows(_csv_row(g, self.columns) for g in self.rows)
        with self.jsonl_path.open("w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(g.to_json()) + "\n" for g in self.rows)

    @staticmethod
    def key(g: Graded | Submission) -> tuple[str, str, str]:
        sub = g.submission if isinstance(g, Graded) else g
        return sub.student, sub.notebook, sub.path.name

    def has(self, sub: Submission) -> bool:
        return any(self.key(g) == self.key(sub) for g in self.rows)

    def add(self, g: Graded) -> None:
        with self._lock:
            self.rows.append(g)
            for path, text in ((self.jsonl_path, json.dumps(g.to_json()) + "\n"), (self.csv_path, None)):
                with path.open("a", newline="", encoding="utf-8") as fh:
                    if text is None:
                        csv.writer(fh).writerow(_csv_row(g, self.columns))
                    else:
                        fh.write(text)
                    fh.flush()
                    os.fsync(fh.fileno())

    def finish(self, title: str) -> None:
        write_html(self.rows, self.html_path, title=title)


def _spreadsheet_safe(text: str) -> str:
    """A cell a spreadsheet will not run as a formula (the names and messages come from submissions)."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def _csv_head(cols: list[str]) -> list[str]:
    return ["student", "notebook", "passed", "of", *cols, "problems", "notes", "graded in"]


def _csv_row(g: Graded, cols: list[str]) -> list[str]:
    return [_spreadsheet_safe(g.submission.student), g.submission.notebook, str(g.score), str(len(g.exercises)),
            *[g.status(c) if c in g.exercises else "" for c in cols],
            _spreadsheet_safe(" | ".join(g.problems)), _spreadsheet_safe(" | ".join(g.notes)), g.how]


def columns_of(subs: Iterable[Submission]) -> list[str]:
    cols: list[str] = []
    for nb in sorted({s.notebook for s in subs}):
        cols += [e.id for e in exercises(nb).items if e.id not in cols]
    return cols


def _default_jobs() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))


def grade(root: Path, *, out: Path | None = None, cell_timeout: int = 60, jobs: int | None = None,
          sandbox: bool = True, limits: sbx.Limits = sbx.DEFAULT_LIMITS, scheduler: str | None = None,
          resume: bool = False, progress: Callable[[str], None] | None = None, bar: bool = False) -> list[Graded]:
    """Grade every submission under ``root``; with ``out``, write the rows there as they are graded.

    ``jobs`` submissions run at once (default: this machine's cores); ``scheduler`` sends the runs to a
    Dask cluster instead (each worker sandboxes them; the answers are judged here).  ``sandbox=False``
    runs them unprotected, as this user (the table says so).  Raises :class:`rdmalab.lab.sandbox.NoSandbox`
    before anything runs when a sandbox was asked for and none can be made.
    """
    subs = find_submissions(root)
    if sandbox:
        sbx.probe()
    limits.check()
    book = GradeBook(out, columns_of(subs), resume=resume) if out is not None else None
    kept = list(book.rows) if book else []
    todo = [s for s in subs if not (book and book.has(s))]
    if progress and book and len(todo) < len(subs):
        progress(f"--resume: {len(subs) - len(todo)} submission(s) already in {book.jsonl_path}, {len(todo)} to grade")
    hide = tuple(str(p.resolve()) for p in (root, out) if p is not None)
    results: list[Graded] = []
    t0 = time.monotonic()
    meter = _Meter(len(todo), bar=bar, progress=progress)

    def finished(g: Graded) -> None:
        results.append(g)
        if book:
            book.add(g)
        meter.step(f"{g.submission.student} {g.submission.notebook}: {g.score}/{len(g.exercises)} in "
                   f"{g.seconds:.1f} s" + (f"; {len(g.problems)} problem(s)" if g.problems else ""))

    try:
        if scheduler:
            _grade_on_dask(todo, scheduler, cell_timeout=cell_timeout, sandbox=sandbox, limits=limits, hide=hide,
                           done=finished)
        else:
            _grade_here(todo, jobs or _default_jobs(), cell_timeout=cell_timeout, sandbox=sandbox, limits=limits,
                        hide=hide, done=finished)
    finally:
        meter.close()
    if progress:
        progress(f"graded {len(results)} submission(s) in {time.monotonic() - t0:.0f} s")
    order = {GradeBook.key(s): i for i, s in enumerate(subs)}
    return sorted(kept + results, key=lambda g: order.get(GradeBook.key(g), len(order)))


class _Meter:
    """Progress: a tqdm bar with the time left (``bar``), or one line per submission to ``progress``."""

    def __init__(self, total: int, *, bar: bool, progress: Callable[[str], None] | None) -> None:
        self.progress = progress
        self.tqdm: Any = None
        if bar and total:
            from tqdm import tqdm  # optional: tqdm (lab extra)

            self.tqdm = tqdm(total=total, unit="notebook", desc="grading", file=sys.stderr, dynamic_ncols=True)

    def step(self, line: str) -> None:
        if self.tqdm is not None:
            self.tqdm.write(line, file=sys.stderr)
            self.tqdm.update(1)
        elif self.progress:
            self.progress(line)

    def close(self) -> None:
        if self.tqdm is not None:
            self.tqdm.close()


def _how(sandbox: bool) -> str:
    return sbx.probe() if sandbox else NO_SANDBOX


def _ungraded(sub: Submission, problem: str, how: str) -> Graded:
    """The row of a submission that was not run: every exercise missing, and why."""
    g = Graded(sub, exercises=[e.id for e in exercises(sub.notebook).items], how=how)
    g.problems.append(problem)
    return g


def _failed(sub: Submission, err: BaseException, how: str) -> Graded:
    return _ungraded(sub, f"the grader failed on this submission: {type(err).__name__}: {str(err)[:200]}", how)


def _grade_here(subs: list[Submission], jobs: int, *, cell_timeout: int, sandbox: bool, limits: sbx.Limits,
                hide: tuple[str, ...], done: Callable[[Graded], None]) -> None:
    slots = list(range(jobs))
    slot_lock = threading.Lock()

    def one(sub: Submission) -> Graded:
        with slot_lock:
            slot = slots.pop()
        try:
            return grade_one(sub, cell_timeout=cell_timeout, sandbox=sandbox, limits=limits,
                             hide=[Path(h) for h in hide], slot=slot)
        except Exception as err:  # a bug of ours or a hostile submission: this one ungraded, the others go on
            return _failed(sub, err, _how(sandbox))
        finally:
            with slot_lock:
                slots.append(slot)

    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="rdmalab-grade") as pool:
        futures: list[Future[Graded]] = [pool.submit(one, s) for s in subs]
        try:
            for f in as_completed(futures):
                done(f.result())
        except BaseException:
            for f in futures:
                f.cancel()
            raise


def _grade_on_dask(subs: list[Submission], scheduler: str, *, cell_timeout: int, sandbox: bool, limits: sbx.Limits,
                   hide: tuple[str, ...], done: Callable[[Graded], None]) -> None:
    try:
        from distributed import Client  # optional: dask.distributed (analysis extra)
        from distributed import as_completed as dask_completed
    except ImportError:
        raise RuntimeError("--scheduler needs dask.distributed: pip install 'rdmalab[analysis]'") from None
    with Client(scheduler) as client:  # type: ignore[no-untyped-call]
        futures = {}
        for i, sub in enumerate(subs):
            text, notes, problem = _prepare(sub)
            if text is None:
                done(_ungraded(sub, str(problem), _how(sandbox)))
                continue
            spec = RunSpec(sub.student, text, cell_timeout, sandbox, limits, hide, slot=i % 1000)
            futures[client.submit(run_submission, spec, pure=False, key=f"rdmalab-grade-{i}-{sub.student}")] = \
                (sub, notes)
        for fut in dask_completed(list(futures)):  # type: ignore[no-untyped-call]
            sub, notes = futures[fut]
            try:
                ran = fut.result()
                g = judge_run(sub, ran, notes=notes)
            except Exception as err:
                g = _failed(sub, err, "dask worker")
            done(g)


def _columns(graded: list[Graded]) -> list[str]:
    cols: list[str] = []
    for g in graded:
        cols += [e for e in g.exercises if e not in cols]
    return cols


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
                    f"<td><b>{g.score}/{len(g.exercises)}</b></td>{''.join(cells)}<td style='font-size:85%'>{probs}</td>"
                    f"<td class='n'>{html.escape(g.how)}</td></tr>")
    legend = " ".join(f"<span style='background:{c};padding:0 .4em'>{s}</span>" for s, c in _COLOURS.items())
    path.write_text(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title><style>"
        "body{font-family:sans-serif} table{border-collapse:collapse} td,th{border:1px solid #ccc;padding:.2em .5em;"
        "font-size:90%} th{background:#fafafa} td.n{white-space:nowrap}</style></head><body>"
        f"<h1>{html.escape(title)}</h1><p>Every notebook was run again in a fresh kernel, each in a sandbox of its "
        f"own unless the last column says <i>{NO_SANDBOX}</i>; the outputs saved in the submissions were discarded, "
        f"and every answer was judged again outside the sandbox. Hover a cell for the check's message.</p>"
        f"<p>{legend}</p><table><tr><th>student</th><th>notebook</th><th>passed</th>{head}"
        f"<th>problems and notes</th><th>graded in</th></tr>"
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
