"""``rdmalab capture``: make the real rxe and siw captures of captures/ again, in the lab VM.

    rdmalab capture --list
    rdmalab capture rxe_rc_pingpong rxe_read_bw siw_rping
    rdmalab capture --all -o /tmp/caps               (default: the repository's captures/)

Each capture runs the stock program as server on rxe1 (siw0) and client on rxe2 (siw1) in one
VM, with tcpdump on the veth between them; it writes NAME.pcap and NAME.counters.json (both
devices' counters before and after the run) and adds or replaces its row in MANIFEST.md.
siw is built from the kernel sources (linux-source-6.1), once; siw_crc_* use a second build
patched to require MPA CRC32c (rdmalab.live.siw).  One VM boot makes all of them, the rxe
ones first (~15-30 s each under TCG).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TextIO

from rdmalab.cli import Fail


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("capture", help="regenerate the real rxe/siw captures in the lab VM",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("names", nargs="*", metavar="SCENARIO", help="capture names (see --list), or 'all'")
    p.add_argument("--list", action="store_true", help="list the captures and their commands")
    p.add_argument("-a", "--all", action="store_true", help="make every capture (same as the name 'all')")
    p.add_argument("-o", "--out", type=Path, default=None, help="output directory (default: captures/)")
    p.add_argument("--no-manifest", action="store_true", help="do not touch MANIFEST.md")
    p.add_argument("--tcg", action="store_true", help="never use KVM")
    p.add_argument("--check", action="store_true",
                   help="then compare every file made with tshark, field by field, and verify every ICRC/CRC32c "
                        "(as tests/capture/test_parity.py does for captures/); exit status 1 on a difference")
    p.set_defaults(func=run_capture)


def run_capture(args: argparse.Namespace, out: TextIO) -> int:
    from rdmalab.live.captures import CAPTURES, make  # lazy: keeps `rdmalab --help` fast
    from rdmalab.live.vm import VM, VMError  # lazy: keeps `rdmalab --help` fast

    if args.list or not (args.names or args.all):
        for spec in CAPTURES.values():
            print(f"{spec.name:24} {spec.driver:8} server: {spec.server}", file=out)
            print(f"{'':24} {'':8} client: {spec.client}", file=out)
        if not args.list:
            print("give capture names (or --all) to make them", file=out)
        return 0
    names = list(CAPTURES) if args.all or args.names == ["all"] else args.names
    unknown = [n for n in names if n not in CAPTURES]
    if unknown:
        raise Fail(f"unknown capture {', '.join(unknown)} (rdmalab capture --list shows them)")
    repo = Path(__file__).resolve().parents[2]
    out_dir = args.out or repo / "captures"
    if args.out is not None and not out_dir.exists():
        out_dir.mkdir(parents=True)
    if not out_dir.is_dir():
        raise Fail(f"output directory {out_dir} is not a directory")
    manifest = None if args.no_manifest else out_dir / "MANIFEST.md"
    try:
        with VM(kvm=False if args.tcg else None) as vm:
            def say(msg: str) -> None:
                print(msg, file=out, flush=True)

            made = make(names, out_dir, vm=vm, repo=repo, say=say, manifest=manifest)
    except VMError as err:
        raise Fail(str(err)) from None
    print(f"{len(made)} capture(s) written to {out_dir}" + (f"; {manifest} updated" if manifest else ""), file=out)
    if not args.check:
        return 0
    from rdmalab.capture.crosscheck import TsharkError  # lazy: keeps `rdmalab --help` fast
    from rdmalab.live.captures import check_capture  # lazy: keeps `rdmalab --help` fast

    bad = 0
    for path in made:
        try:
            c = check_capture(path)
        except TsharkError as err:
            raise Fail(f"--check: {err}") from None
        print(c.line(), file=out, flush=True)
        if not c.ok:
            bad += 1
            print(c.report, file=out)
    print(f"checked {len(made)} capture(s) against tshark: {bad} with unexplained differences or bad CRCs", file=out)
    return 1 if bad else 0
