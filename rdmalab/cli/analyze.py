"""``rdmalab analyze``: connections, messages and reliability/congestion findings of a capture
(:mod:`rdmalab.capture.analysis`)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from typing import Any, TextIO

from rdmalab.cli import Fail, number, settled


def run_analyze(args: argparse.Namespace, out: TextIO) -> int:
    from rdmalab.capture.analysis import analyze  # lazy: keeps `rdmalab --help` fast

    settled()
    paths = list(args.files or []) + ([args.read] if args.read else [])
    if not paths:
        raise Fail("analyze needs a capture file: rdmalab analyze FILE (or several, or a `rdmalab convert` dataset)")
    if args.cnp_gap < 0:
        raise Fail(f"--cnp-gap {args.cnp_gap}: the minimum time between CNPs cannot be negative")
    seen: dict[str, str] = {}
    for p in paths:  # (each capture once: a file given twice would be two captures of one name, "[.]")
        real = os.path.realpath(p) if p != "-" else p
        if real in seen:
            raise Fail(f"{p} is given twice" + (f" (as {seen[real]})" if seen[real] != p else ""))
        seen[real] = p
    many = len(paths) > 1 or os.path.isdir(paths[0])
    annotated = 0
    if many:
        if args.sent or args.counters or args.annotate:
            raise Fail("--sent, --counters and --annotate take one capture file, not a dataset or several files")
        from rdmalab.capture.dataset import analyze_many  # lazy: keeps `rdmalab --help` fast

        try:
            a = analyze_many(paths, dask=args.dask, dask_workers=args.dask_workers, cnp_min_gap_us=args.cnp_gap)
        except (ValueError, OSError) as err:
            raise Fail(str(err)) from None
    else:
        with _seekable(paths[0]) as path:
            a = analyze(path, sent=args.sent, cnp_min_gap_us=args.cnp_gap, progress=not args.quiet)
            if path != paths[0]:
                a.path = "standard input" if paths[0] == "-" else paths[0]
            if args.annotate:  # while the copy of a stream is there
                annotated = _annotate(path, args, a)
    for f in a.of_kind("capture_damaged"):
        said = f.capture or ("standard input" if paths[0] == "-" else paths[0])
        print(f"rdmalab: warning: {said}: {f.text}", file=sys.stderr)
        if args.sent:
            print(f"rdmalab: warning: --sent {args.sent}: no packet is called lost: the capture stops part way, "
                  "and what was on its way then cannot be told from a loss", file=sys.stderr)
    rxe_rows = None
    if args.counters and len(args.counters) > 2:
        raise Fail(f"--counters takes NAME.counters.json or two dumps BEFORE AFTER, not {len(args.counters)} files")
    if args.counters and len(args.counters) == 1:
        from rdmalab.capture.counters import load_counters_json, rows_json, rxe_side_by_side  # lazy: start-up

        try:
            ctr = load_counters_json(args.counters[0])
        except OSError as err:
            raise Fail(f"--counters {args.counters[0]}: {err.strerror}") from None
        except UnicodeDecodeError as err:
            raise Fail(f"--counters {args.counters[0]}: is not text (byte 0x{err.object[err.start]:02x} at {err.start}), "
                       "not a counters dump") from None
        except ValueError as err:
            raise Fail(str(err)) from None
        try:
            rxe_rows = rxe_side_by_side(a, ctr)
        except ValueError as err:   # e.g. an IP that is not IPv4 in the file
            raise Fail(f"--counters {args.counters[0]}: {err}") from None
        a.checks["rxe_counters"] = rows_json(rxe_rows)
    elif args.counters:
        from rdmalab.capture.analysis import counters_side_by_side, parse_counters  # lazy: keeps `rdmalab --help` fast

        dumps = []
        for name in args.counters:
            try:
                with open(name, encoding="utf-8", errors="replace") as f:
                    dumps.append(parse_counters(f.read(), name))
            except OSError as err:
                raise Fail(f"--counters {name}: {err.strerror}") from None
            except ValueError as err:
                raise Fail(str(err)) from None
        a.checks["counters"] = counters_side_by_side(a, dumps[0], dumps[1])
    if args.format == "json":
        _write_json(a.to_dict(), out)
    else:
        out.write(a.text(limit=args.limit))
        if rxe_rows is not None:
            from rdmalab.capture.counters import rows_text  # lazy: keeps `rdmalab --help` fast

            out.write("\n" + rows_text(rxe_rows))
    if args.annotate and args.format != "json":
        out.write(f"annotated capture: {args.annotate} ({annotated} frames with comments)\n")
    if args.html:
        from rdmalab.viz.report import html_report  # lazy: plotly loads only for the report

        try:
            with open(args.html, "w", encoding="utf-8") as f:
                f.write(html_report(a))
        except OSError as err:
            raise Fail(f"{args.html}: cannot write the HTML report ({err.strerror or err})") from None
        if args.format != "json":
            out.write(f"HTML report: {args.html}\n")
    return 0


@contextlib.contextmanager
def _seekable(path: str) -> Iterator[str]:
    """``path``, or for a stream (``-``, a FIFO) a temporary file it was copied into: the analysis
    reads a capture more than once (its CM exchanges and iWARP streams again, --annotate), which a
    stream cannot be.  Memory stays bounded: the copy is on disk (TMPDIR)."""
    from rdmalab.capture.pcapio import CaptureError, is_stream, spool  # lazy: keeps `rdmalab --help` fast

    if not is_stream(path):
        yield path
        return
    with tempfile.NamedTemporaryFile(prefix="rdmalab-stdin-", suffix=".pcap") as tmp:
        spool(path, tmp)
        try:
            yield tmp.name
        except CaptureError as err:  # (named as the user named it, not after the copy)
            if err.path != tmp.name:
                raise
            raise CaptureError("standard input" if path == "-" else path, err.reason, offset=err.offset,
                               frames_read=err.frames_read) from None


def _annotate(path: str, args: argparse.Namespace, a: Any) -> int:
    from rdmalab.capture.annotate import write_annotated  # lazy: keeps `rdmalab --help` fast

    try:
        return write_annotated(path, args.annotate, a.findings)
    except OSError as err:
        raise Fail(f"{args.annotate}: cannot write the annotated capture ({err.strerror or err})") from None
    except ValueError as err:  # a frame the copy cannot hold (a time before 1970): no half-written copy left
        with contextlib.suppress(OSError):
            os.unlink(args.annotate)
        raise Fail(f"{args.annotate}: cannot write the annotated capture: {err}") from None


def _write_json(doc: dict[str, object], out: TextIO) -> None:
    """One JSON document, each finding, message and connection on its own line (json's C encoder
    writes each: an indented dump of a million-packet analysis takes longer than the analysis)."""
    items = []
    for k, v in doc.items():
        if isinstance(v, list) and v:
            body = ",\n  ".join(json.dumps(x, default=str) for x in v)
            items.append(f" {json.dumps(k)}: [\n  {body}\n ]")
        else:
            items.append(f" {json.dumps(k)}: {json.dumps(v, default=str)}")
    out.write("{\n" + ",\n".join(items) + "\n}\n")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("analyze", help="connections, messages, losses, NAKs, retransmissions, CNPs of a capture",
                       description="RDMA-aware analysis: pairs requesters with responders, rebuilds messages, and "
                                   "reports psn_gap, retransmission (NAK/implied NAK/timeout), duplicate, NAKs, "
                                   "CNP and ECN-CE, bad ICRC, opcode sequence and MSN findings.  iWARP: one "
                                   "connection per TCP connection that carries MPA (its MPA exchange, FPDUs and "
                                   "messages by RDMAP opcode, data bytes and TCP retransmissions per direction), "
                                   "and bad MPA CRC, Terminate and resynchronisation findings.")
    p.add_argument("files", nargs="*", metavar="FILE",
                   help="capture file (pcap/pcapng, also .gz); several files, or a dataset directory written by "
                        "`rdmalab convert`, are analysed one task per capture on Dask and reported together")
    p.add_argument("-r", "--read", metavar="FILE")
    p.add_argument("-T", dest="format", choices=("text", "json"), default="text")
    p.add_argument("--html", metavar="FILE", help="also write an HTML report with plots")
    p.add_argument("--sent", metavar="FILE",
                   help="a capture of the same traffic taken before the lossy link (e.g. at the sender): "
                        "packets it has and FILE lacks are reported as lost")
    p.add_argument("--counters", nargs="+", metavar="FILE",
                   help="BEFORE AFTER: text dumps of `rdma statistic show` and/or `ethtool -S IFACE` taken before "
                        "and after the capture, shown side by side with what the capture shows; or one "
                        "NAME.counters.json written by `rdmalab capture` (both rxe devices, before and after): every "
                        "rxe counter of each device beside the capture, with the reason where they differ")
    p.add_argument("--cnp-gap", type=number(float, least=0), default=4.0, metavar="US",
                   help="the notification point's minimum time between CNPs, for the pacing check "
                        "(default 4 us, mlx5's np_min_time_between_cnps)")
    p.add_argument("--annotate", metavar="OUT.pcapng",
                   help="write the capture again as pcapng with each finding as a comment on its frames "
                        "(Wireshark: frame.comment contains \"go-back-N\")")
    p.add_argument("--dask", metavar="SCHEDULER", default="local",
                   help="for several captures: a Dask scheduler address (tcp://host:8786), 'none' (here, one after the other), or 'local' (default: "
                        "a local cluster of worker processes)")
    p.add_argument("--dask-workers", type=number(int, least=1), default=2, metavar="N", help="workers of the local Dask cluster")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.add_argument("--limit", type=number(int, least=0), default=200, help="findings listed in the text output (default 200)")
    p.set_defaults(func=run_analyze)
