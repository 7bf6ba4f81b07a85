"""``rdmalab lab``: start the Jupyter lab."""

from __future__ import annotations

import argparse
from typing import TextIO

from rdmalab.cli import Args, Fail


def run_lab(args: argparse.Namespace | Args, out: TextIO) -> int:
    try:
        from rdmalab.lab import launch  # lazy: keeps `rdmalab --help` fast
    except ImportError as err:
        raise Fail(f"the lab launcher (rdmalab.lab.launch) is not available in this installation ({err}); "
                    "install the lab extras with: pip install 'rdmalab[lab]'") from None
    rc = launch.main(list(args.lab_args))
    return int(rc or 0)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    lab = sub.add_parser("lab", help="start the Jupyter lab (rdmalab.lab.launch)", add_help=False)
    lab.add_argument("lab_args", nargs=argparse.REMAINDER)
    lab.set_defaults(func=run_lab, raw_args=True)
