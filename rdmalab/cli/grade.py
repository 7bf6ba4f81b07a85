"""``rdmalab grade DIR``: run a class's submitted notebooks again and tabulate their checks."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

from rdmalab.cli import Fail


def run_grade(args: argparse.Namespace, out: TextIO) -> int:
    root = Path(args.dir)
    if not root.is_dir():
        raise Fail(f"grade: {root} is not a folder of submitted notebooks")
    try:  # nbclient and ipykernel come with the lab extra; imported here to keep them optional
        import ipykernel  # noqa: F401  - optional: ipykernel (lab extra)
        import nbclient  # noqa: F401  - optional: nbclient (lab extra)
    except ImportError as err:
        raise Fail(f"grade needs the lab extras ({err.name} is missing): pip install 'rdmalab[lab]'") from None
    from rdmalab.lab import grade  # lazy: keeps `rdmalab --help` fast

    if not grade.find_submissions(root):
        raise Fail(f"grade: no lab notebooks (NN-name.ipynb) under {root}")
    outdir = Path(args.output) if args.output else root / "grades"
    outdir.mkdir(parents=True, exist_ok=True)
    graded = grade.grade(root, cell_timeout=args.cell_timeout, progress=lambda s: print(s, file=sys.stderr))
    grade.write_csv(graded, outdir / "grades.csv")
    grade.write_html(graded, outdir / "grades.html", title=f"rdmalab grades: {root.name}")
    print(grade.table(graded), file=out)
    print(f"\nwrote {outdir / 'grades.csv'} and {outdir / 'grades.html'}", file=out)
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("grade", help="run submitted notebooks again and tabulate which checks passed",
                       description="Run every submitted lab notebook under DIR in a fresh kernel (its saved "
                                   "outputs are ignored) and write a CSV and an HTML table of the checks.")
    p.add_argument("dir", metavar="DIR", help="folder of submissions: DIR/<student>/NN-name.ipynb, or flat files")
    p.add_argument("-o", "--output", metavar="OUT", help="where to write grades.csv and grades.html (default DIR/grades)")
    p.add_argument("--cell-timeout", type=int, default=60, metavar="S",
                   help="seconds a cell may run before it is interrupted (default 60)")
    p.set_defaults(func=run_grade)
