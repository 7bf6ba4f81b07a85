"""``rdmalab stats``: per-opcode counts, CRC failures and findings (:mod:`rdmalab.capture.stats`)."""

from __future__ import annotations

import argparse
from typing import TextIO

from rdmalab.cli import Fail, settled


def run_stats(args: argparse.Namespace, out: TextIO) -> int:
    from rdmalab.capture.stats import capture_stats  # lazy: keeps `rdmalab --help` fast

    settled()
    path = args.file or args.read
    if path is None:
        raise Fail("stats needs a capture file: rdmalab stats -r FILE")
    out.write(capture_stats(path, iwarp=not args.no_iwarp).text())
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = sub.add_parser("stats", help="per-opcode counts, CRC failures and findings of a capture")
    s.add_argument("file", nargs="?")
    s.add_argument("-r", "--read", metavar="FILE")
    s.add_argument("--no-iwarp", action="store_true")
    s.set_defaults(func=run_stats)
