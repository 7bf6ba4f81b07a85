"""The ``rdmalab`` command.  Thin: it parses arguments and calls the layers below.

Subcommands follow tshark's habits where they fit::

    rdmalab decode -r FILE [-V | -T json] [-c N] [-Y FILTER] [--strict]
    rdmalab crosscheck FILE [-v]
    rdmalab stats -r FILE
    rdmalab lab [ARGS...]

Errors are one sentence naming the file and what was wrong, never a traceback; the exit status
is 0 on success, 1 when a file could not be (fully) read or a strict decode failed, 2 for bad
usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from rdmalab import __version__


class _Fail(Exception):
    """A user-facing error: printed as ``rdmalab: <message>``, exit status 1."""


# ----------------------------------------------------------------------------- display filter


def _parse_value(text: str) -> Any:
    t = text.strip().strip('"')
    try:
        return int(t, 0)
    except ValueError:
        return t


def compile_filter(expr: str) -> Callable[[dict[str, Any]], bool]:
    """A tiny subset of Wireshark display filters over the flat field dictionary.

    Terms joined by ``&&`` (or ``and``) / ``||`` (or ``or``; ``&&`` binds tighter): ``name``
    (the field or any field under it exists), ``name == v``, ``!=``, ``<``, ``<=``, ``>``,
    ``>=``; ``!term`` negates.  A list value matches if any element does.
    """
    import re

    term_re = re.compile(r"^\s*(!)?\s*([A-Za-z_][\w.\-]*)\s*(?:(==|!=|<=|>=|<|>|eq|ne)\s*(.+?))?\s*$")
    ops: dict[str, Callable[[Any, Any], bool]] = {
        "==": lambda a, b: a == b, "eq": lambda a, b: a == b, "!=": lambda a, b: a != b, "ne": lambda a, b: a != b,
        "<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
    }

    def term(text: str) -> Callable[[dict[str, Any]], bool]:
        m = term_re.match(text)
        if not m:
            raise _Fail(f"the display filter term {text.strip()!r} is not understood "
                        "(use name, name==value, name!=value, <, <=, >, >=, joined by && or ||)")
        neg, name, op, raw = m.groups()
        want = _parse_value(raw) if raw is not None else None
        prefix = name + "."

        def f(fields: dict[str, Any]) -> bool:
            if op is None:
                hit = name in fields or any(k.startswith(prefix) for k in fields)
            else:
                v = fields.get(name)
                vals = v if isinstance(v, list) else ([] if v is None else [v])
                try:
                    hit = any(ops[op](x, want) for x in vals)
                except TypeError:
                    hit = False
            return not hit if neg else hit
        return f

    alts = []
    for alt in re.split(r"\|\||\bor\b", expr):
        conj = [term(t) for t in re.split(r"&&|\band\b", alt)]
        alts.append(conj)

    def match(fields: dict[str, Any]) -> bool:
        return any(all(t(fields) for t in conj) for conj in alts)
    return match


# ----------------------------------------------------------------------------- subcommands


def _cmd_decode(args: argparse.Namespace, out: TextIO) -> int:
    from rdmalab.capture import frame_fields, read
    from rdmalab.capture.render import frame_tree, summary_line
    from rdmalab.wire.errors import DecodeError

    path = args.file or args.read
    if path is None:
        raise _Fail("decode needs a capture file: rdmalab decode -r FILE")
    flt = compile_filter(args.filter) if args.filter else None
    fmt = args.format
    t0: float | None = None
    shown = 0
    bad_frames = 0
    write = out.write
    dumps = json.dumps
    it = read(path, lenient=not args.strict, iwarp=not args.no_iwarp)
    try:
        for cp in it:
            if t0 is None:
                t0 = cp.timestamp
            fields = frame_fields(cp) if (fmt == "json" or flt is not None) else None
            if flt is not None and fields is not None and not flt(fields):
                continue
            if not cp.ok:
                bad_frames += 1
            if fmt == "json":
                write(dumps(fields, separators=(",", ":")))
                write("\n")
            elif args.verbose:
                write(frame_tree(cp))
                write("\n\n")
            else:
                write(summary_line(cp, t0))
                write("\n")
            shown += 1
            if args.count is not None and shown >= args.count:
                break
    except DecodeError as err:
        out.flush()
        frame = getattr(err, "frame_number", "?")
        raise _Fail(f"{path}: frame {frame}: {err} (run without --strict to report bad frames and go on)") from None
    return 0


def _cmd_crosscheck(args: argparse.Namespace, out: TextIO) -> int:
    from rdmalab.capture.crosscheck import TsharkError, crosscheck

    status = 0
    for path in args.files:
        try:
            report = crosscheck(path)
        except TsharkError as err:
            raise _Fail(str(err)) from None
        out.write(report.text(verbose=args.verbose) + "\n")
        if not report.ok:
            status = 1
    return status


def _cmd_stats(args: argparse.Namespace, out: TextIO) -> int:
    from rdmalab.capture import read
    from rdmalab.wire.ib import AETH, BTH
    from rdmalab.wire.rdmap import RDMAPControl, RDMAPUntagged, rdmap_opcode_name

    path = args.file or args.read
    if path is None:
        raise _Fail("stats needs a capture file: rdmalab stats -r FILE")
    frames = 0
    encaps: Counter[str] = Counter()
    ops: Counter[str] = Counter()
    crc_bad: list[str] = []
    problems: list[str] = []
    findings: Counter[str] = Counter()
    for cp in read(path, lenient=True, iwarp=not args.no_iwarp):
        frames += 1
        encaps[cp.packet.encap] += 1
        for pkt in [cp.packet, *cp.pdus]:
            bth = pkt.get(BTH)
            if bth is not None:
                ops[pkt.opcode_name or "?"] += 1
                if bth.fecn:
                    findings["FECN set (congestion seen on the way)"] += 1
                if bth.becn:
                    findings["BECN set (congestion notification)"] += 1
                aeth = pkt.get(AETH)
                if aeth is not None and aeth.is_nak:
                    findings[f"NAK: {aeth.nak_name}"] += 1
                if aeth is not None and aeth.is_rnr_nak:
                    findings["RNR NAK (receiver not ready)"] += 1
            elif pkt.encap == "iwarp":
                ctrl = pkt.get(RDMAPControl) or pkt.get(RDMAPUntagged)
                if ctrl is not None:
                    ops[f"iWARP {rdmap_opcode_name(ctrl.opcode)}"] += 1
                else:  # MPA Request/Reply
                    ops[" ".join(pkt.summary().split(" ")[:2])] += 1
                if pkt.crc_status is None and ctrl is not None:
                    findings["iWARP FPDU without CRC32c (MPA negotiated none)"] += 1
            if pkt.crc_status == "bad":
                crc_bad.append(f"frame {cp.frame_number} ({'ICRC' if pkt.crc_kind == 'icrc' else 'CRC32c'})")
            for p in pkt.problems:
                problems.append(f"frame {cp.frame_number}: {p}")
    w = out.write
    w(f"{path}: {frames} frames\n")
    w("Encapsulations:\n")
    for k, n in encaps.most_common():
        w(f"  {n:8d}  {k}\n")
    w("Operations (by opcode):\n")
    for k, n in ops.most_common():
        w(f"  {n:8d}  {k}\n")
    w(f"CRC failures: {len(crc_bad)}\n")
    for s in crc_bad[:50]:
        w(f"  {s}\n")
    w(f"Decode problems: {len(problems)}\n")
    for s in problems[:50]:
        w(f"  {s}\n")
    if findings:
        w("Findings:\n")
        for k, n in findings.most_common():
            w(f"  {n:8d}  {k}\n")
    return 0


def _cmd_lab(args: argparse.Namespace, out: TextIO) -> int:
    try:
        from rdmalab.lab import launch
    except ImportError as err:
        raise _Fail(f"the lab launcher (rdmalab.lab.launch) is not available in this installation ({err}); "
                    "install the lab extras with: pip install 'rdmalab[lab]'") from None
    rc = launch.main(list(args.lab_args))
    return int(rc or 0)


# ----------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="rdmalab",
        description="rdmalab: an RDMA protocol lab. Decode InfiniBand, RoCE and iWARP captures, "
                    "cross-check them against Wireshark, and run the Jupyter lab.",
        epilog="Start with: rdmalab decode -r captures/synthetic_rocev2.pcap",
    )
    p.add_argument("--version", action="version", version=f"rdmalab {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    d = sub.add_parser("decode", help="print the packets of a pcap/pcapng file (like tshark)",
                       description="Print one summary line per packet, the full tree (-V), or JSON (-T json).")
    d.add_argument("file", nargs="?", help="capture file (or use -r)")
    d.add_argument("-r", "--read", metavar="FILE", help="capture file to read")
    d.add_argument("-V", dest="verbose", action="store_true", help="print every layer and field with offsets")
    d.add_argument("-T", dest="format", choices=("text", "json"), default="text",
                   help="output format: text (default) or json (one object per line, Wireshark field names)")
    d.add_argument("-c", dest="count", type=int, metavar="N", help="stop after N packets")
    d.add_argument("-Y", dest="filter", metavar="FILTER",
                   help="display filter, e.g. 'infiniband.bth.opcode==0x11 && rdmalab.icrc.status==\"bad\"'")
    mode = d.add_mutually_exclusive_group()
    mode.add_argument("--lenient", dest="strict", action="store_false",
                      help="report bad frames and go on (the default)")
    mode.add_argument("--strict", dest="strict", action="store_true", help="stop at the first bad frame")
    d.add_argument("--no-iwarp", action="store_true", help="do not reassemble TCP streams into iWARP PDUs")
    d.set_defaults(func=_cmd_decode, strict=False)

    c = sub.add_parser("crosscheck", help="compare rdmalab's decoding with Wireshark's, field by field",
                       description="Run tshark and rdmalab on the same capture and report where they agree, "
                                   "where they differ, and which known Wireshark defect explains each difference.")
    c.add_argument("files", nargs="+", metavar="FILE")
    c.add_argument("-v", "--verbose", action="store_true", help="also list the explained differences")
    c.set_defaults(func=_cmd_crosscheck)

    s = sub.add_parser("stats", help="per-opcode counts, CRC failures and findings of a capture")
    s.add_argument("file", nargs="?")
    s.add_argument("-r", "--read", metavar="FILE")
    s.add_argument("--no-iwarp", action="store_true")
    s.set_defaults(func=_cmd_stats)

    lab = sub.add_parser("lab", help="start the Jupyter lab (rdmalab.lab.launch)", add_help=False)
    lab.add_argument("lab_args", nargs=argparse.REMAINDER)
    lab.set_defaults(func=_cmd_lab)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if argv and argv[0] == "lab":  # everything after `lab` belongs to the lab launcher, --help included
        args = argparse.Namespace(command="lab", func=_cmd_lab, lab_args=argv[1:])
    else:
        args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 0
    from rdmalab.capture.reader import CaptureError

    out = sys.stdout
    try:
        rc: int = args.func(args, out)
        out.flush()
        return rc
    except CaptureError as err:
        out.flush()
        print(f"rdmalab: {err}", file=sys.stderr)
        return 1
    except _Fail as err:
        out.flush()
        print(f"rdmalab: {err}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # the reader (e.g. `head`) went away: stop quietly, as tshark does
        try:
            sys.stdout = open("/dev/null", "w")  # noqa: SIM115
        except OSError:
            pass
        return 0
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
