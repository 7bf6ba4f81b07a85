#!/usr/bin/env python3
"""Run rdma-core's own pyverbs test suite on rdmalab's soft verbs (issue 11), in one command::

    .venv/bin/python scripts/run_pyverbs_suite.py                # all modules, compared with rxe
    .venv/bin/python scripts/run_pyverbs_suite.py --only test_qp,test_cq -v

The suite comes from Debian's python3-pyverbs (/usr/share/doc/rdma-core/tests, some files
gzipped); it is copied to a temporary directory and unpacked.  ``import pyverbs...`` is routed to
rdmalab.verbs by :mod:`rdmalab.verbs.pyverbs_alias`, and the suite's own options point it at the
soft device (``--dev soft0 --gid 1``: GID index 1 is the IPv4-mapped RoCEv2 GID, the index the
rxe baseline used).  Each test's outcome is recorded by tests/pyverbs/collect.py (the same code
that recorded the rxe baseline inside the VM), and the per-module counts are printed next to the
stored rxe results (tests/pyverbs/rxe-6.1-results.json).

Exit status: 0 when the run completed (whatever the outcomes), 1 for a usage error;
``--check`` also exits 1 if a test that passes on rxe does not pass here and is not in the
documented exception list (tests/pyverbs/exceptions.json).
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_SUITE = "/usr/share/doc/rdma-core/tests"
RXE_RESULTS = os.path.join(REPO, "tests", "pyverbs", "rxe-6.1-results.json")
EXCEPTIONS = os.path.join(REPO, "tests", "pyverbs", "exceptions.json")


def _load_collect() -> Any:
    # By path: the suite's package is named `tests`, so rdmalab's own tests/ must not be imported
    # as a package here.
    spec = importlib.util.spec_from_file_location("rdmalab_pyverbs_collect",
                                                  os.path.join(REPO, "tests", "pyverbs", "collect.py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def unpack_suite(src: str, dest_parent: str) -> str:
    """Copy the suite to ``dest_parent/tests``, gunzipping ``*.py.gz``; returns that directory."""
    if not os.path.isdir(src):
        raise SystemExit(f"run_pyverbs_suite: {src} does not exist: install python3-pyverbs "
                         "(apt-get install python3-pyverbs) or pass --suite DIR")
    dest = os.path.join(dest_parent, "tests")
    os.makedirs(dest)
    for fn in sorted(os.listdir(src)):
        path = os.path.join(src, fn)
        if fn.endswith(".py.gz"):
            with gzip.open(path, "rb") as fi, open(os.path.join(dest, fn[:-3]), "wb") as fo:
                shutil.copyfileobj(fi, fo)
        elif fn.endswith(".py"):
            shutil.copy(path, os.path.join(dest, fn))
    return dest


def table(rdmalab: dict[str, dict[str, int]], rxe: dict[str, dict[str, int]]) -> str:
    kinds = ("pass", "skip", "fail", "error", "import-error")

    def cell(row: dict[str, int]) -> str:
        return " ".join(f"{row.get(k, 0):3d}" for k in kinds)

    head = " ".join(f"{k[:4]:>3}" for k in kinds)
    lines = [f"{'module':24} | {'rxe 6.1: ' + head:34} | rdmalab: {head}"]
    lines.append("-" * len(lines[0]))
    tot_a: dict[str, int] = {}
    tot_b: dict[str, int] = {}
    for mod in sorted(set(rdmalab) | set(rxe)):
        a, b = rxe.get(mod, {}), rdmalab.get(mod, {})
        for k in kinds:
            tot_a[k] = tot_a.get(k, 0) + a.get(k, 0)
            tot_b[k] = tot_b.get(k, 0) + b.get(k, 0)
        lines.append(f"{mod:24} | {'         ' + cell(a):34} | {'         ' + cell(b)}")
    lines.append("-" * len(lines[0]))
    lines.append(f"{'total':24} | {'         ' + cell(tot_a):34} | {'         ' + cell(tot_b)}")
    return "\n".join(lines)


def compare(results: dict[str, Any], rxe: dict[str, Any], exceptions: dict[str, str]) -> list[str]:
    """Tests that pass on rxe but not here and are not listed exceptions (with what happened)."""
    bad = []
    for tid, rec in sorted(rxe["tests"].items()):
        if rec["outcome"] != "pass" or tid in exceptions:
            continue
        mine = results["tests"].get(tid)
        if mine is None:
            mod = "tests." + tid.split(".")[1]
            mine = results["tests"].get(mod, {"outcome": "missing", "reason": "not run"})
        if mine["outcome"] != "pass":
            bad.append(f"{tid}: {mine['outcome']} {mine.get('reason', '')[:160]}")
    return bad


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Run rdma-core's pyverbs tests on rdmalab.verbs")
    ap.add_argument("--suite", default=DEFAULT_SUITE, help=f"the suite's directory (default {DEFAULT_SUITE})")
    ap.add_argument("--dev", default="soft0", help="soft device to test (default soft0)")
    ap.add_argument("--gid", type=int, default=1, help="GID index (default 1, IPv4-mapped RoCEv2)")
    ap.add_argument("--only", default="", help="comma-separated test modules, e.g. test_qp,test_cq")
    ap.add_argument("--timeout", type=float, default=60.0, help="per-test time limit in seconds")
    ap.add_argument("--out", default="", help="write the per-test results here (JSON)")
    ap.add_argument("--rxe", default=RXE_RESULTS, help="rxe results to compare with")
    ap.add_argument("--exceptions", default=EXCEPTIONS,
                    help="the documented differences (JSON test id -> reason; default tests/pyverbs/exceptions.json)")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 if a test passing on rxe fails here and is not a listed exception")
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per test on stderr")
    a = ap.parse_args(argv)

    collect = _load_collect()
    import rdmalab.fabric  # noqa: F401 - not needed to find soft0/soft1 (rdmalab.verbs.providers loads them); kept explicit
    import rdmalab.verbs.pyverbs_alias as alias

    only = [x.strip() for x in a.only.split(",") if x.strip()] or None
    if only and os.path.isdir(a.suite):
        known = {fn.split(".")[0] for fn in os.listdir(a.suite) if fn.startswith("test_")}
        unknown = sorted(set(only) - known)
        if unknown:
            print(f"run_pyverbs_suite: no such test module in {a.suite}: {', '.join(unknown)} "
                  f"(have {', '.join(sorted(known))})", file=sys.stderr)
            return 1
    with tempfile.TemporaryDirectory(prefix="rdmalab-pyverbs-suite-") as tmp:
        suite = unpack_suite(a.suite, tmp)
        alias.install()
        old_cwd = os.getcwd()
        os.chdir(tmp)  # some tests write temporary files next to the working directory
        stderr = sys.stderr
        if not a.verbose:
            sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - the per-test lines
        try:
            results = collect.run(suite, ["--dev", a.dev, "--gid", str(a.gid)], a.timeout, only,
                                  {"engine": "rdmalab.verbs (soft engine)", "device": a.dev})
        finally:
            if sys.stderr is not stderr:
                sys.stderr.close()
                sys.stderr = stderr
            os.chdir(old_cwd)
            alias.uninstall()
    if a.out:
        with open(a.out, "w") as f:
            json.dump(results, f, indent=1, sort_keys=True)
            f.write("\n")
    rxe = json.load(open(a.rxe)) if os.path.exists(a.rxe) else {"tests": {}}
    if only:
        rxe = {"tests": {k: v for k, v in rxe["tests"].items() if k.split(".")[1] in only}}
    print(table(collect.summarize(results), collect.summarize(rxe)))
    passed = sum(1 for r in results["tests"].values() if r["outcome"] == "pass")
    rxe_pass = sum(1 for r in rxe["tests"].values() if r["outcome"] == "pass")
    print(f"\nrdmalab passes {passed} tests of rdma-core's pyverbs suite (rxe 6.1 passes {rxe_pass}); "
          f"{results['meta']['wall_seconds']} s")
    exceptions = json.load(open(a.exceptions)) if os.path.exists(a.exceptions) else {}
    bad = compare(results, rxe, exceptions)
    listed = [t for t in exceptions if rxe["tests"].get(t, {}).get("outcome") == "pass"]
    print(f"passing on rxe but not here: {len(bad)} unexpected, {len(listed)} documented exceptions")
    for line in bad:
        print("  " + line)
    return 1 if (a.check and bad) else 0


if __name__ == "__main__":
    sys.exit(main())
