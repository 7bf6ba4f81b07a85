"""``rdmalab crosscheck``: rdmalab beside Wireshark, field by field."""

from __future__ import annotations

import argparse
import os
from typing import TextIO

from rdmalab.cli import Fail


def run_crosscheck(args: argparse.Namespace, out: TextIO) -> int:
    from rdmalab.capture.crosscheck import TsharkError, crosscheck  # lazy: keeps `rdmalab --help` fast

    status = 0
    for path in args.files:
        if os.path.isdir(path):
            raise Fail(f"{path}: is a directory, not a capture file")
        if path == "-" or (os.path.exists(path) and not os.path.isfile(path)):
            raise Fail(f"{'standard input' if path == '-' else path}: crosscheck has tshark and rdmalab each read "
                       "the capture, which a stream cannot give twice: write it to a file first")
        try:
            report = crosscheck(path)
        except TsharkError as err:
            raise Fail(str(err)) from None
        out.write(report.text(verbose=args.verbose) + "\n")
        if not report.ok:
            status = 1
    return status


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    c = sub.add_parser("crosscheck", help="compare rdmalab's decoding with Wireshark's, field by field",
                       description="Run tshark and rdmalab on the same capture and report where they agree, "
                                   "where they differ, and which known Wireshark defect explains each difference.")
    c.add_argument("files", nargs="+", metavar="FILE")
    c.add_argument("-v", "--verbose", action="store_true", help="also list the explained differences")
    c.set_defaults(func=run_crosscheck)
