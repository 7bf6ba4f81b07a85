"""Run rdma-core's pyverbs test suite and record every test's outcome as JSON.

Standard library only: the same file runs inside the rxe VM under Debian's ``/usr/bin/python3``
(with the real pyverbs) and on the host under rdmalab's venv (with ``pyverbs`` aliased to
``rdmalab.verbs`` by ``scripts/run_pyverbs_suite.py``), so both result files come from one
piece of code and compare like for like.

The suite is a package named ``tests`` whose ``__init__`` imports every ``test_*.py`` at once;
one module that fails to import would hide all the others.  So the package object is made here
without running its ``__init__``, and each test module is imported on its own: a module that
fails to import is recorded as one ``import-error`` entry with the reason.

Usage (as a module function or a script)::

    collect.py --suite DIR --out FILE.json [--timeout S] [--only test_qp,test_cq] -- --dev rxe0 --gid 1

The arguments after ``--`` go to the suite's own ``args_parser`` (``--dev``, ``--port``, ``--gid``).
"""

from __future__ import annotations

import argparse
import importlib
import io
import json
import os
import platform
import signal
import sys
import time
import traceback
import types
import unittest
from typing import Any


class TestTimeout(Exception):
    """A test ran longer than the per-test limit (raised from SIGALRM)."""


def _reason(err: Any) -> str:
    """The last line of a formatted exception: 'Type: message', cut to 300 characters."""
    etype, value, tb = err
    lines = traceback.format_exception_only(etype, value)
    text = " ".join(x.strip() for x in lines if x.strip())
    return text[:300]


def _where(err: Any) -> str:
    """The innermost frame of the traceback inside the suite: file:line (function)."""
    _etype, _value, tb = err
    frames = traceback.extract_tb(tb)
    for fr in reversed(frames):
        if "/tests/" in fr.filename or fr.filename.endswith(("base.py", "utils.py")):
            return f"{os.path.basename(fr.filename)}:{fr.lineno} ({fr.name})"
    if frames:
        fr = frames[-1]
        return f"{os.path.basename(fr.filename)}:{fr.lineno} ({fr.name})"
    return ""


class RecordingResult(unittest.TestResult):
    """Keeps one record per test id; prints one progress line per test to stderr."""

    def __init__(self, timeout: float, stream: Any = None) -> None:
        super().__init__()
        self.records: dict[str, dict[str, Any]] = {}
        self.timeout = timeout
        self.stream = stream if stream is not None else sys.stderr
        self._t0 = 0.0

    def _set(self, test: unittest.TestCase, outcome: str, reason: str = "", where: str = "") -> None:
        tid = test.id()
        rec = self.records.get(tid)
        # A failing subtest or a failing tearDown must not be overwritten by a later success.
        if rec is not None and rec["outcome"] in ("fail", "error") and outcome == "pass":
            return
        self.records[tid] = {"outcome": outcome, "reason": reason, "where": where}

    def startTest(self, test: unittest.TestCase) -> None:
        super().startTest(test)
        self._t0 = time.monotonic()
        if self.timeout > 0:
            signal.setitimer(signal.ITIMER_REAL, self.timeout)

    def stopTest(self, test: unittest.TestCase) -> None:
        if self.timeout > 0:
            signal.setitimer(signal.ITIMER_REAL, 0)
        super().stopTest(test)
        rec = self.records.get(test.id())
        if rec is not None:
            rec["seconds"] = round(time.monotonic() - self._t0, 3)
            short = rec["outcome"].upper()
            extra = f"  {rec['reason'][:120]}" if rec["reason"] else ""
            print(f"{short:6} {test.id()}{extra}", file=self.stream, flush=True)

    def addSuccess(self, test: unittest.TestCase) -> None:
        super().addSuccess(test)
        self._set(test, "pass")

    def addSkip(self, test: unittest.TestCase, reason: str) -> None:
        super().addSkip(test, reason)
        self._set(test, "skip", str(reason)[:300])

    def addFailure(self, test: unittest.TestCase, err: Any) -> None:
        super().addFailure(test, err)
        self._set(test, "fail", _reason(err), _where(err))

    def addError(self, test: Any, err: Any) -> None:
        super().addError(test, err)
        if isinstance(test, unittest.TestCase):
            self._set(test, "error", _reason(err), _where(err))
        else:  # a setUpClass / setUpModule failure (_ErrorHolder)
            self.records[str(test.id())] = {"outcome": "error", "reason": _reason(err), "where": _where(err)}

    def addExpectedFailure(self, test: unittest.TestCase, err: Any) -> None:
        super().addExpectedFailure(test, err)
        self._set(test, "xfail", _reason(err))

    def addUnexpectedSuccess(self, test: unittest.TestCase) -> None:
        super().addUnexpectedSuccess(test)
        self._set(test, "xpass")

    def addSubTest(self, test: unittest.TestCase, subtest: Any, err: Any) -> None:
        super().addSubTest(test, subtest, err)
        if err is not None:
            failed = issubclass(err[0], test.failureException)
            self._set(test, "fail" if failed else "error", f"{subtest.id()}: {_reason(err)}", _where(err))


def _on_alarm(signum: int, frame: Any) -> None:
    raise TestTimeout("the test ran past the per-test time limit")


def load_suite_package(suite_dir: str) -> None:
    """Make ``tests`` (the suite) and ``args_parser`` importable without running tests/__init__."""
    suite_dir = os.path.abspath(suite_dir)
    if os.path.basename(suite_dir) != "tests":
        raise SystemExit(f"collect.py: the suite directory must be named 'tests' (got {suite_dir})")
    sys.path.insert(0, suite_dir)  # `from args_parser import parser`
    pkg = types.ModuleType("tests")
    pkg.__path__ = [suite_dir]
    pkg.__file__ = os.path.join(suite_dir, "__init__.py")
    pkg.__package__ = "tests"
    sys.modules["tests"] = pkg


def run(suite_dir: str, suite_args: list[str], timeout: float, only: list[str] | None = None,
        meta: dict[str, Any] | None = None) -> dict[str, Any]:
    load_suite_package(suite_dir)
    saved = sys.argv[:]
    sys.argv = [saved[0]] + list(suite_args)
    from args_parser import parser  # the suite's own option parser (dev, port, gid)

    parser.parse_args()
    sys.argv = saved
    names = sorted(fn[:-3] for fn in os.listdir(suite_dir) if fn.startswith("test_") and fn.endswith(".py"))
    if only:
        names = [n for n in names if n in only]
    signal.signal(signal.SIGALRM, _on_alarm)
    loader = unittest.TestLoader()
    records: dict[str, dict[str, Any]] = {}
    modules: dict[str, dict[str, Any]] = {}
    start = time.monotonic()
    for name in names:
        try:
            mod = importlib.import_module(f"tests.{name}")
        except BaseException as exc:  # noqa: BLE001 - any import failure is a result to record
            if isinstance(exc, KeyboardInterrupt):
                raise
            err = sys.exc_info()
            modules[name] = {"import_error": _reason(err)}
            records[f"tests.{name}"] = {"outcome": "import-error", "reason": _reason(err), "where": _where(err)}
            print(f"IMPORT-ERROR tests.{name}  {_reason(err)[:150]}", file=sys.stderr, flush=True)
            continue
        result = RecordingResult(timeout)
        # Output the suite prints (it prints little) goes to stderr so stdout stays clean.
        out = io.StringIO()
        old_stdout = sys.stdout
        sys.stdout = out
        try:
            loader.loadTestsFromModule(mod).run(result)
        finally:
            sys.stdout = old_stdout
            if timeout > 0:
                signal.setitimer(signal.ITIMER_REAL, 0)
        records.update(result.records)
        modules[name] = {"tests": len(result.records)}
    info: dict[str, Any] = {
        "python": sys.version.split()[0],
        "kernel": platform.release(),
        "suite_args": list(suite_args),
        "per_test_timeout_s": timeout,
        "wall_seconds": round(time.monotonic() - start, 1),
    }
    info.update(meta or {})
    return {"meta": info, "modules": modules, "tests": records}


def summarize(results: dict[str, Any]) -> dict[str, dict[str, int]]:
    """{module: {outcome: count}} from a result file's ``tests``."""
    out: dict[str, dict[str, int]] = {}
    for tid, rec in results["tests"].items():
        mod = tid.split(".")[1] if tid.count(".") >= 1 else tid
        row = out.setdefault(mod, {})
        row[rec["outcome"]] = row.get(rec["outcome"], 0) + 1
    return out


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    suite_args: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, suite_args = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description="Run rdma-core's pyverbs tests and write per-test outcomes as JSON")
    ap.add_argument("--suite", required=True, help="the suite's directory (named 'tests')")
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--timeout", type=float, default=120.0, help="per-test time limit in seconds (0: none)")
    ap.add_argument("--only", default="", help="comma-separated test module names (default: all)")
    ap.add_argument("--meta", default="", help="extra JSON object merged into the result's meta")
    a = ap.parse_args(argv)
    meta = json.loads(a.meta) if a.meta else {}
    only = [x.strip() for x in a.only.split(",") if x.strip()] or None
    res = run(a.suite, suite_args, a.timeout, only, meta)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1, sort_keys=True)
        f.write("\n")
    for mod, row in sorted(summarize(res).items()):
        print(mod, " ".join(f"{k}={v}" for k, v in sorted(row.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
