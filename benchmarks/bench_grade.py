"""`rdmalab grade` on a class: each submission in its sandbox, beside the same class graded unsandboxed.

A class of N submissions is made from the lab's own notebooks (a mix: each student submits one of the
notebooks named, a third the instructor's version, a third the student's, a third the instructor's with
one answer broken), then graded whole processes, same run:

* `rdmalab grade DIR -j J` (a sandbox per submission), for each J asked;
* `rdmalab grade DIR -j J --no-sandbox` (what the grader cost before sandboxes: the same runs, no
  namespaces, no limits), for the largest J.

    python benchmarks/bench_grade.py [--sizes 5,50] [--jobs 1,2] [--notebooks 03-send-receive,06-atomics,07-four-wires]

It prints seconds per class and per submission, and the sandbox's cost beside the unsandboxed run.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rdmalab.lab.generate import convert

ROOT = Path(__file__).resolve().parents[1]


def make_class(root: Path, n: int, notebooks: list[str]) -> None:
    for i in range(n):
        nb_name = notebooks[i % len(notebooks)]
        version = ("instructor", "student", "instructor")[i % 3]
        nb = convert((ROOT / "notebooks" / f"{nb_name}.py").read_text(encoding="utf-8"), version)
        if i % 3 == 2:  # one answer broken: the first exercise cell raises
            cell = next(c for c in nb["cells"] if c["cell_type"] == "code" and "lab.check(" in c["source"])
            cell["source"] = "1 / 0\n" + cell["source"]
        d = root / f"student{i:03d}"
        d.mkdir(parents=True)
        (d / f"{nb_name}.ipynb").write_text(json.dumps(nb), encoding="utf-8")


def run(root: Path, out: Path, jobs: int, sandbox: bool) -> tuple[float, int]:
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "rdmalab", "grade", str(root), "-o", str(out), "-j", str(jobs), "-q"]
    if not sandbox:
        cmd.append("--no-sandbox")
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    took = time.perf_counter() - t0
    rows = list(csv.DictReader((out / "grades.csv").open(encoding="utf-8")))
    return took, len(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="5,50")
    ap.add_argument("--jobs", default="1,2")
    ap.add_argument("--notebooks", default="03-send-receive,06-atomics,07-four-wires")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    jobs = [int(x) for x in args.jobs.split(",")]
    notebooks = args.notebooks.split(",")
    print(f"{'class':>6} {'how':>16} {'seconds':>9} {'s/submission':>13} {'rows':>5}")
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix="bench-grade-") as tmp:
            root, out = Path(tmp) / "class", Path(tmp) / "out"
            make_class(root, n, notebooks)
            results = {}
            for j in jobs:
                results[f"sandbox -j {j}"] = run(root, out, j, True)
            results[f"no sandbox -j {max(jobs)}"] = run(root, out, max(jobs), False)
            for how, (took, rows) in results.items():
                print(f"{n:>6} {how:>16} {took:>9.1f} {took / n:>13.2f} {rows:>5}")
            s, u = results[f"sandbox -j {max(jobs)}"][0], results[f"no sandbox -j {max(jobs)}"][0]
            print(f"{n:>6} {'sandbox cost':>16} {s / u:>8.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
