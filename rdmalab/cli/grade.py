"""``rdmalab grade DIR``: run a class's submitted notebooks again, each in a sandbox, and tabulate their checks."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import TextIO

from rdmalab.cli import Fail, number

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)


def _size(text: str) -> int:
    m = _SIZE.match(text)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size: give bytes, or a number with K, M, G or T "
                                         "(e.g. 2G, 512M)")
    unit = m.group(2).lower()
    return int(float(m.group(1)) * (1024 ** ("_kmgt".index(unit)) if unit else 1))


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
    from rdmalab.lab import sandbox as sbx

    if not grade.find_submissions(root):
        raise Fail(f"grade: no lab notebooks (NN-name.ipynb) under {root}")
    outdir = Path(args.output) if args.output else root / "grades"
    if args.resume and not (outdir / "grades.jsonl").exists():
        print(f"grade: --resume: no {outdir / 'grades.jsonl'} yet; grading every submission", file=sys.stderr)
    limits = sbx.Limits(memory=args.memory, cpu_seconds=args.cpu_limit, wall_seconds=args.time_limit)
    if args.no_sandbox:
        print("grade: --no-sandbox: the submissions run as you, with your rights and your network; "
              "the table says 'no sandbox'", file=sys.stderr)
    try:
        graded = grade.grade(root, out=outdir, cell_timeout=args.cell_timeout, jobs=args.jobs,
                             sandbox=not args.no_sandbox, limits=limits, scheduler=args.scheduler, resume=args.resume,
                             progress=lambda s: print(s, file=sys.stderr), bar=not args.quiet)
    except sbx.NoSandbox as err:
        raise Fail(f"grade: {err}") from None
    except ValueError as err:  # a limit that cannot work
        raise Fail(f"grade: {err}") from None
    except RuntimeError as err:  # --scheduler without dask, or a cluster that cannot be reached
        raise Fail(f"grade: {err}") from None
    except OSError as err:
        if args.scheduler:
            raise Fail(f"grade: cannot reach the Dask scheduler at {args.scheduler}: {err}") from None
        raise Fail(f"grade: cannot write the grades to {outdir}: {err}") from None
    title = f"rdmalab grades: {root.resolve().name}"
    grade.write_html(graded, outdir / "grades.html", title=title)
    print(grade.table(graded), file=out)
    print(f"\nwrote {outdir / 'grades.csv'}, {outdir / 'grades.jsonl'} and {outdir / 'grades.html'}", file=out)
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("grade", help="run submitted notebooks again, each in a sandbox, and tabulate the checks",
                       description="Run every submitted lab notebook under DIR in a fresh kernel inside a sandbox of "
                                   "its own (no network, no other process, nothing writable but its scratch folder; "
                                   "bubblewrap) as the student it belongs to, judge every answer again outside it, "
                                   "and write a CSV (row by row), a JSONL and an HTML table of the checks.")
    p.add_argument("dir", metavar="DIR", help="folder of submissions: DIR/<student>/NN-name.ipynb, or flat files "
                                              "named <student>_NN-name.ipynb")
    p.add_argument("-o", "--output", metavar="OUT", help="where to write grades.csv, .jsonl and .html "
                                                         "(default DIR/grades)")
    p.add_argument("-j", "--jobs", type=number(int, above=0), default=None, metavar="N",
                   help="submissions graded at once (default: this machine's cores)")
    p.add_argument("--cell-timeout", type=number(int, above=0), default=60, metavar="S",
                   help="seconds a cell may run before it is interrupted (default 60)")
    p.add_argument("--memory", type=_size, default=2 << 30, metavar="SIZE",
                   help="memory each submission may use, e.g. 2G or 512M (default 2G)")
    p.add_argument("--cpu-limit", type=number(int, above=0), default=900, metavar="S",
                   help="CPU seconds a notebook's kernel may use in all (default 900)")
    p.add_argument("--time-limit", type=number(float, above=0), default=3600.0, metavar="S",
                   help="seconds a whole notebook may take, start to end (default 3600)")
    p.add_argument("--resume", action="store_true",
                   help="keep the rows already in OUT/grades.jsonl and grade only the submissions not in it")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="run the submissions on a Dask cluster (tcp://host:8786); each worker sandboxes its runs")
    p.add_argument("--no-sandbox", action="store_true",
                   help="run the submissions as yourself, unprotected (where no sandbox can be made; the table "
                        "says so)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar, only a line per submission")
    p.set_defaults(func=run_grade)
