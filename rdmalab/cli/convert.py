"""``rdmalab convert``: captures to one Parquet dataset (:mod:`rdmalab.capture.dataset`)."""

from __future__ import annotations

import argparse
import os
from typing import TextIO

from rdmalab.cli import Fail, number


def run_convert(args: argparse.Namespace, out: TextIO) -> int:
    try:
        import pyarrow  # noqa: F401  - optional: say so plainly when it is missing

        from rdmalab.capture.dataset import convert  # lazy: keeps `rdmalab --help` fast
    except ImportError:
        raise Fail("convert needs pyarrow: pip install 'rdmalab[analysis]'") from None
    if args.dask:
        try:
            import distributed  # noqa: F401  - optional: distributed (analysis extra)
        except ImportError:
            raise Fail("--dask needs dask.distributed: pip install 'rdmalab[analysis]'") from None
    for f in args.files:
        if f == "-" or (os.path.exists(f) and not os.path.isfile(f) and not os.path.isdir(f)):
            raise Fail(f"{'standard input' if f == '-' else f}: convert reads capture files (in worker processes, "
                       "by ranges), not a stream: write it to a file first")
        if os.path.isdir(f):
            raise Fail(f"{f}: is a directory, not a capture file")
        if not os.path.isfile(f):
            from rdmalab.capture.pcapio import CaptureError  # noqa: PLC0415 - (loaded with dataset above)

            raise CaptureError(f, "no such file")
    results = convert(args.files, args.output, partition=args.partition, workers=args.workers, dask=args.dask,
                      dask_workers=args.dask_workers)
    total = 0
    for r in results:
        out.write(f"{r.path}: {r.rows} packets -> {r.directory} ({r.parts} part file{'s' if r.parts != 1 else ''})\n")
        total += r.rows
    where = f" on Dask ({args.dask})" if args.dask else ""
    out.write(f"{len(results)} capture(s), {total} packets{where} -> {args.output}\n")
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("convert", help="decode captures into one Parquet dataset (DuckDB, pandas, Spark read it)",
                       description="Decode pcap/pcapng files (also .gz) with the columnar decoder and write one "
                                   "Hive-partitioned Parquet dataset, by capture file (or by host = the file's "
                                   "directory). With --dask the files are decoded on a Dask cluster.")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("-o", "--output", required=True, metavar="DATASET", help="the dataset directory")
    p.add_argument("--partition", choices=("file", "host"), default="file")
    p.add_argument("-j", "--workers", type=number(int, least=1), default=1, help="local worker processes (one file each)")
    p.add_argument("--dask", metavar="SCHEDULER",
                   help="run on a Dask cluster: its scheduler address (tcp://host:8786), or 'local' for a "
                        "LocalCluster of worker processes on this machine")
    p.add_argument("--dask-workers", type=number(int, least=1), default=2, help="worker processes of --dask local (default 2)")
    p.set_defaults(func=run_convert)
