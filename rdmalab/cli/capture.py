"""``rdmalab capture``: make the real rxe captures of captures/ again, in the lab VM.

    rdmalab capture --list
    rdmalab capture rxe_rc_pingpong rxe_read_bw      (or: all)
    rdmalab capture all -o /tmp/caps                  (default: the repository's captures/)

Each capture runs the stock program as server on rxe1 and client on rxe2 in one VM, with tcpdump
on the veth between them, and adds or replaces its row in captures/MANIFEST.md.  siw captures
are still made by scripts/make_captures.sh (PHASES="siw siw_crc").
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TextIO

from rdmalab.cli._common import Fail


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("capture", help="regenerate the real rxe captures in the lab VM",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("names", nargs="*", metavar="SCENARIO", help="capture names (see --list), or 'all'")
    p.add_argument("--list", action="store_true", help="list the captures and their commands")
    p.add_argument("-o", "--out", type=Path, default=None, help="output directory (default: captures/)")
    p.add_argument("--no-manifest", action="store_true", help="do not touch MANIFEST.md")
    p.add_argument("--tcg", action="store_true", help="never use KVM")
    p.set_defaults(func=run_capture)


def run_capture(args: argparse.Namespace, out: TextIO) -> int:
    from rdmalab.live.captures import CAPTURES, make  # lazy: keeps `rdmalab --help` fast
    from rdmalab.live.vm import VM, VMError  # lazy: keeps `rdmalab --help` fast

    if args.list or not args.names:
        for spec in CAPTURES.values():
            print(f"{spec.name:18} server: {spec.server}", file=out)
            print(f"{'':18} client: {spec.client}", file=out)
        if not args.list:
            print("give capture names (or 'all') to make them", file=out)
        return 0
    names = list(CAPTURES) if args.names == ["all"] else args.names
    unknown = [n for n in names if n not in CAPTURES]
    if unknown:
        raise Fail(f"unknown capture {', '.join(unknown)} (rdmalab capture --list shows them)")
    repo = Path(__file__).resolve().parents[2]
    out_dir = args.out or repo / "captures"
    if not out_dir.is_dir():
        raise Fail(f"output directory {out_dir} does not exist")
    manifest = None if args.no_manifest else out_dir / "MANIFEST.md"
    try:
        with VM(kvm=False if args.tcg else None) as vm:
            def say(msg: str) -> None:
                print(msg, file=out, flush=True)

            made = make(names, out_dir, vm=vm, repo=repo, say=say, manifest=manifest)
    except VMError as err:
        raise Fail(str(err)) from None
    print(f"{len(made)} capture(s) written to {out_dir}" + (f"; {manifest} updated" if manifest else ""), file=out)
    return 0
