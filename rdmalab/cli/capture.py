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

With ``-i IFACE`` it captures from a network interface of this host instead, as dumpcap does
(:mod:`rdmalab.capture.sniff`; root or CAP_NET_RAW):

    rdmalab capture -i eth0 -w roce.pcapng -f 'udp port 4791' -c 1000
    rdmalab capture -i eth0 -w ring.pcapng -b filesize:10000 -b files:5 -a duration:600
    rdmalab capture -i lo -w - | rdmalab decode -r - -l

-w FILE (or - for standard output; pcapng unless FILE ends in .pcap or -F pcap), -f FILTER
(tcpdump's capture filter language, compiled by libpcap), -c N packets, -a duration:S |
packets:N | filesize:KB | files:N (stop conditions), -b filesize:KB | duration:S | packets:N
(switch to the next file of a ring named FILE_NNNNN_YYYYmmddHHMMSS.EXT) and -b files:N (keep the
newest N), -s SNAPLEN, -p (not promiscuous).  Sizes are in kB of 1000 bytes, as dumpcap's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

from rdmalab.cli import Fail

#: dumpcap's ``-a`` keys: ``-a KEY:VALUE`` is a stop condition of a live capture, a bare ``-a`` is --all
_STOP_KEYS = ("duration:", "packets:", "filesize:", "files:")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("capture", help="regenerate the real rxe/siw captures in the lab VM",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("names", nargs="*", metavar="SCENARIO", help="capture names (see --list), or 'all'")
    p.add_argument("--list", action="store_true", help="list the captures and their commands")
    p.add_argument("--all", action="store_true", help="make every capture (same as the name 'all')")
    p.add_argument("-a", dest="autostop", action="append", nargs="?", const="", metavar="COND",
                   help="with -i: stop when COND is met (dumpcap's -a): duration:SECONDS, packets:N, filesize:KB, "
                        "files:N; without a COND: same as --all")
    live = p.add_argument_group("live capture from an interface of this host (as dumpcap; root or CAP_NET_RAW)")
    live.add_argument("-i", dest="interface", metavar="IFACE", help="the interface to capture on (e.g. eth0, lo; any: all of them)")
    live.add_argument("-w", dest="write", metavar="FILE",
                      help="the capture file to write (- for standard output); pcapng unless it ends in .pcap")
    live.add_argument("-F", dest="file_format", choices=("pcap", "pcapng"), help="the file format")
    live.add_argument("-f", dest="capture_filter", metavar="FILTER",
                      help="capture filter in tcpdump's language (pcap-filter(7)), e.g. 'udp port 4791'")
    live.add_argument("-c", dest="count", type=int, metavar="N", help="stop after N packets")
    live.add_argument("-b", dest="ring", action="append", metavar="COND",
                      help="a ring of files (dumpcap's -b): switch to the next after filesize:KB, duration:SECONDS "
                           "or packets:N; files:N keeps only the newest N")
    live.add_argument("-s", dest="snaplen", type=int, metavar="SNAPLEN", default=None,
                      help="keep at most SNAPLEN bytes of each packet (default 262144)")
    live.add_argument("-p", dest="no_promisc", action="store_true", help="do not put the interface in promiscuous mode")
    live.add_argument("-q", dest="quiet", action="store_true", help="with -i: no packet count on standard error")
    p.add_argument("-o", "--out", type=Path, default=None, help="output directory (default: captures/)")
    p.add_argument("--no-manifest", action="store_true", help="do not touch MANIFEST.md")
    p.add_argument("--tcg", action="store_true", help="never use KVM")
    p.add_argument("--check", action="store_true",
                   help="then compare every file made with tshark, field by field, and verify every ICRC/CRC32c "
                        "(as tests/capture/test_parity.py does for captures/); exit status 1 on a difference")
    p.set_defaults(func=run_capture)


def run_capture(args: argparse.Namespace, out: TextIO) -> int:
    stops = [a for a in args.autostop or [] if a.startswith(_STOP_KEYS)]
    for a in args.autostop or []:  # a bare -a (or one followed by a capture name) is --all
        if a not in stops:
            args.all = True
            if a:
                args.names.append(a)
    if args.interface is not None:
        if args.names or args.all or args.list:
            raise Fail("-i captures from an interface: it takes no capture names, --all or --list")
        return run_live(args, stops)
    live_only = [o for o, v in (("-w", args.write), ("-f", args.capture_filter), ("-c", args.count),
                                ("-b", args.ring), ("-F", args.file_format), ("-s", args.snaplen),
                                ("-a COND", stops or None)) if v is not None]
    if args.no_promisc:
        live_only.append("-p")
    if live_only:
        raise Fail(f"{', '.join(live_only)}: for a live capture from an interface; give it with -i IFACE")
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


def run_live(args: argparse.Namespace, stops: list[str]) -> int:
    """``rdmalab capture -i IFACE -w FILE``: packets from an interface into a file (or a ring)."""
    from rdmalab.capture.sniff import (  # lazy: keeps `rdmalab --help` fast
        DEFAULT_SNAPLEN,
        RING_KEYS,
        STOP_KEYS,
        Format,
        LiveCapture,
        RingFiles,
        Stop,
        parse_conditions,
    )

    if args.write is None:
        raise Fail("capture -i needs a file to write: -w FILE (or -w - for standard output)")
    if args.count is not None and args.count <= 0:
        raise Fail(f"-c {args.count}: the packet count must be a positive number")
    stop = parse_conditions(stops, "-a", STOP_KEYS)
    ring = parse_conditions(args.ring or [], "-b", RING_KEYS)
    RingFiles.check(args.write, ring)
    fmt: Format = args.file_format or ("pcap" if args.write.endswith(".pcap") else "pcapng")
    snaplen = DEFAULT_SNAPLEN if args.snaplen is None else args.snaplen
    count = args.count
    if "packets" in stop:
        count = int(stop["packets"]) if count is None else min(count, int(stop["packets"]))
    err = sys.stderr
    with LiveCapture(args.interface, bpf=args.capture_filter, snaplen=snaplen, promisc=not args.no_promisc) as cap:
        files = RingFiles(args.write, cap.linktype, format=fmt, snaplen=snaplen, ring=ring,
                          stop={k: v for k, v in stop.items() if k in ("filesize", "files")},
                          if_name=args.interface, application="rdmalab capture")
        if not args.quiet:
            print(f"Capturing on '{args.interface}'", file=err, flush=True)
        try:
            for ts, data, wire in cap.packets(Stop(count, stop.get("duration"), lambda: files.done),
                                              idle=files.tick):
                files.write(ts, data, wire)
        except KeyboardInterrupt:
            pass
        finally:
            files.close()
        _got, dropped = cap.stats()
    if not args.quiet:
        where = ", ".join(files.paths) if len(files.paths) <= 3 else f"{files.paths[0]} ... {files.paths[-1]}"
        print(f"Packets captured: {files.count}; dropped by the kernel (buffer full): {dropped}"
              + ("" if args.write == "-" else f"; written to {where}"), file=err)
    return 0
