"""``rdmalab decode``: print the packets of a capture, like tshark."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from typing import Any, TextIO

from rdmalab.cli._common import Fail


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
    term_re = re.compile(r"^\s*(!)?\s*([A-Za-z_][\w.\-]*)\s*(?:(==|!=|<=|>=|<|>|eq|ne)\s*(.+?))?\s*$")
    ops: dict[str, Callable[[Any, Any], bool]] = {
        "==": lambda a, b: a == b, "eq": lambda a, b: a == b, "!=": lambda a, b: a != b, "ne": lambda a, b: a != b,
        "<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
    }

    def term(text: str) -> Callable[[dict[str, Any]], bool]:
        m = term_re.match(text)
        if not m:
            raise Fail(f"the display filter term {text.strip()!r} is not understood "
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


def run_decode(args: argparse.Namespace, out: TextIO) -> int:
    from rdmalab.capture import frame_fields, read
    from rdmalab.capture.render import frame_tree, summary_line
    from rdmalab.wire.errors import DecodeError

    path = args.file or args.read
    if path is None:
        raise Fail("decode needs a capture file: rdmalab decode -r FILE")
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
        raise Fail(f"{path}: frame {frame}: {err} (run without --strict to report bad frames and go on)") from None
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    d.set_defaults(func=run_decode, strict=False)
