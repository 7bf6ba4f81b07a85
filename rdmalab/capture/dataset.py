"""Captures to one Parquet dataset, on this machine or on a Dask cluster.

:func:`convert` decodes each capture file with the columnar decoder, block by block, and writes
each block as one Parquet file of a Hive-partitioned dataset::

    DATASET/capture=rxe_send_bw_loss/part-00000.parquet     (partition="file")
    DATASET/host=server1/capture=.../part-00000.parquet     (partition="host": the file's directory name)

so memory stays bounded by the block size and many files (from many hosts) land in one
dataset that DuckDB, pandas or Spark read directly, e.g. with DuckDB::

    SELECT capture, count(*) FROM read_parquet('DATASET/**/*.parquet', hive_partitioning = true)
    WHERE "infiniband.aeth.syndrome" >= 96 GROUP BY capture

With ``dask`` (a scheduler address, or ``"local"`` for a :class:`distributed.LocalCluster` of
worker processes) each file is decoded by one Dask task on a worker, which writes its part
files itself: the workers must see the same filesystem as the dataset path (a shared or network
filesystem, as on any cluster).  pyarrow and dask are optional (the ``analysis`` extra) and
imported inside the functions that need them.
"""

from __future__ import annotations

import importlib
import ipaddress
import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rdmalab.capture.analysis import Analysis, analyze
from rdmalab.capture.analysis_rows import FIELDS
from rdmalab.capture.blockpool import worker_pool
from rdmalab.capture.columnar import COLUMN_BY_NAME, Columns, empty_columns, iter_columns
from rdmalab.wire.errors import RdmalabError


@dataclass
class Converted:
    """What one capture file became."""

    path: str
    rows: int
    parts: int
    directory: str


def _safe(name: str) -> str:
    return re.sub(r"[^\w.\-]+", "_", name) or "_"


def partition_dir(path: str, root: str, partition: str) -> str:
    stem = os.path.basename(path)
    for ext in (".gz", ".pcapng", ".pcap"):
        if stem.endswith(ext):
            stem = stem[: -len(ext)]
    parts = [f"capture={_safe(stem)}"]
    if partition == "host":
        host = os.path.basename(os.path.dirname(os.path.abspath(path))) or "_"
        parts.insert(0, f"host={_safe(host)}")
    elif partition != "file":
        raise ValueError(f"partition must be 'file' or 'host', not {partition!r}")
    return os.path.join(root, *parts)


class DatasetError(RdmalabError):
    """Captures that cannot go into one dataset as asked (two of them to the same partition)."""


def convert_file(path: str, root: str, partition: str = "file", block_bytes: int = 32 << 20) -> Converted:
    """Decode one capture and write its blocks as Parquet files under the dataset ``root``.  The parts are
    written aside first (a directory the dataset's readers skip: its name starts with a dot) and take the
    place of the file's earlier parts only when the whole capture was read: a capture that fails part way
    (damaged, cut short) leaves the dataset as it was, not a partial capture that reads as a whole one."""
    import pyarrow.parquet as pq  # optional dependency (the "analysis" extra)

    out_dir = partition_dir(path, root, partition)
    aside = os.path.join(root, f".converting-{os.getpid()}-{os.path.basename(out_dir)}")
    shutil.rmtree(aside, ignore_errors=True)
    os.makedirs(aside)
    try:
        rows = parts = 0
        for cols in iter_columns(path, block_bytes=block_bytes):
            if cols.n == 0:
                continue
            table = cols.to_arrow()
            pq.write_table(table, os.path.join(aside, f"part-{parts:05d}.parquet"), compression="zstd")
            rows += cols.n
            parts += 1
        if not parts:  # (a capture of no frame is one all the same: its part holds the columns and no row)
            pq.write_table(empty_columns().to_arrow(), os.path.join(aside, "part-00000.parquet"), compression="zstd")
            parts = 1
        os.makedirs(out_dir, exist_ok=True)
        for old in os.listdir(out_dir):  # converting again replaces the file's earlier parts
            if old.startswith("part-") and old.endswith(".parquet"):
                os.remove(os.path.join(out_dir, old))
        for name in sorted(os.listdir(aside)):
            os.replace(os.path.join(aside, name), os.path.join(out_dir, name))
    finally:
        shutil.rmtree(aside, ignore_errors=True)
    return Converted(path, rows, parts, out_dir)


def _convert_task(path: str, root: str, partition: str) -> Converted:
    return convert_file(path, root, partition)


def convert(paths: Sequence[str | os.PathLike[str]], root: str | os.PathLike[str], *, partition: str = "file",
            workers: int = 1, dask: str | None = None, dask_workers: int = 2) -> list[Converted]:
    """Convert captures into one Parquet dataset under ``root``.

    ``workers > 1`` converts files in that many local processes; ``dask`` runs one task per file on
    a Dask cluster (``"local"``: a LocalCluster of ``dask_workers`` worker processes).
    """
    files = [os.path.abspath(os.fspath(p)) for p in paths]
    out = os.path.abspath(os.fspath(root))
    given: dict[str, str] = {}
    for p, f in zip(paths, files, strict=True):  # (each capture its own partition, or one would replace another)
        where = partition_dir(f, out, partition)
        if where in given:
            first = given[where]
            said = (f"{p} is given twice" if os.path.realpath(first) == os.path.realpath(f) else
                    f"{first} and {p} would both be written to {os.path.relpath(where, out)} (a partition is named "
                    f"after the capture's file name{' and directory' if partition == 'host' else ''})"
                    + ("; rename one, or --partition host to name it after its directory too"
                       if partition == "file" else "; rename one"))
            raise DatasetError(said)
        given[where] = os.fspath(p)
    if os.path.exists(out) and not os.path.isdir(out):
        raise DatasetError(f"{root}: is not a directory (the dataset is a directory of Parquet files)")
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as err:
        raise DatasetError(f"{root}: the dataset directory cannot be made ({err.strerror or err})") from None
    if dask:
        return _convert_dask(files, out, partition, dask, dask_workers)
    if workers > 1 and len(files) > 1:
        with worker_pool(workers) as pool:
            return list(pool.map(_convert_task, files, [out] * len(files), [partition] * len(files)))
    return [convert_file(f, out, partition) for f in files]


def _convert_dask(files: list[str], root: str, partition: str, scheduler: str, n_workers: int) -> list[Converted]:
    results: list[Converted] = _dask_map(_convert_task, files, scheduler, n_workers, root=root, partition=partition)
    return results


def _dask_map(task: Any, items: list[str], scheduler: str, n_workers: int, **kwargs: Any) -> list[Any]:
    """``task(item, **kwargs)`` for each item as Dask tasks, the results in order: on the scheduler at
    that address, or (``"local"``) on a LocalCluster of ``n_workers`` processes made for this and closed."""
    dd: Any = importlib.import_module("distributed")  # optional dependency (the "analysis" extra)
    cluster: Any = None
    client: Any
    if scheduler == "local":
        cluster = dd.LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=None)
        client = dd.Client(cluster)
    else:
        client = dd.Client(scheduler)
    try:
        return list(client.gather(client.map(task, items, pure=False, **kwargs)))
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


# ============================================================================ analysing many captures


def capture_sources(paths: Sequence[str | os.PathLike[str]]) -> list[str]:
    """The captures named by ``paths``: capture files as they are, and in each directory (a dataset
    written by :func:`convert`) every directory holding ``part-*.parquet`` files (one capture each)."""
    out: list[str] = []
    for p in paths:
        p = os.fspath(p)
        if os.path.isdir(p):
            found = sorted(d for d, _dirs, files in os.walk(p)
                           if any(f.startswith("part-") and f.endswith(".parquet") for f in files))
            if not found:
                raise ValueError(f"{p}: a directory without part-*.parquet files (not a `rdmalab convert` dataset)")
            out.extend(found)
        elif os.path.exists(p):
            out.append(p)
        else:
            raise ValueError(f"{p}: no such file or directory")
    return out


def columns_from_parquet(directory: str) -> Any:
    """The analysis' columns of one capture of a dataset (its part files, in order)."""
    import numpy as np
    import pyarrow.parquet as pq  # optional dependency (the "analysis" extra)


    parts = sorted(f for f in os.listdir(directory) if f.startswith("part-") and f.endswith(".parquet"))
    tables = []
    for f in parts:
        t = pq.read_table(os.path.join(directory, f))
        tables.append(t.select([c for c in FIELDS if c in t.column_names]))
    import pyarrow as pa

    table = pa.concat_tables(tables) if tables else None
    base = empty_columns()
    n = table.num_rows if table is not None else 0
    data = {k: np.zeros(n, dtype=v.dtype) for k, v in base.data.items()}
    layers = {k: np.zeros(n, dtype=bool) for k in base.layers}
    layers["frame"][:] = True
    if table is not None:
        for name in table.column_names:
            col = table.column(name)
            valid = ~np.asarray(col.is_null().to_numpy(zero_copy_only=False), dtype=bool)
            spec = COLUMN_BY_NAME[name]
            if spec.fmt == "ipv4":
                vals = [int(ipaddress.IPv4Address(v)) if v else 0 for v in col.to_pylist()]
                data[name] = np.array(vals, dtype=data[name].dtype)
            elif spec.fmt == "ipv6":
                vals6 = [ipaddress.IPv6Address(v).packed if v else b"" for v in col.to_pylist()]
                data[name] = np.array(vals6, dtype=data[name].dtype)
            else:
                data[name] = np.asarray(col.fill_null(0).to_numpy(zero_copy_only=False)).astype(data[name].dtype)
            layers[spec.layer] |= valid
        layers["ip"] = layers.get("ip", np.zeros(n, bool)) | (data["ip.src"] != 0)
    data["frame.time_epoch"] = data["frame.time_ns"] / 1e9
    return Columns(n, data, layers, directory)


def _analyze_task(source: str, cnp_min_gap_us: float) -> Any:

    if os.path.isdir(source):
        return analyze(columns_from_parquet(source), cnp_min_gap_us=cnp_min_gap_us)
    return analyze(source, cnp_min_gap_us=cnp_min_gap_us)


def merge_analyses(parts: Sequence[Any], names: Sequence[str]) -> Any:
    """One :class:`~rdmalab.capture.analysis.Analysis` of several captures: connections numbered
    one after the other, every connection and finding naming its capture."""

    conns, iwarp, msgs, finds = [], [], [], []
    throughput, psn_time, seq_time, checks = {}, {}, {}, {}
    off = 0
    for a, name in zip(parts, names, strict=True):
        for c in a.connections:
            c.id += off
            c.capture = name
            conns.append(c)
        for c in a.iwarp_connections:
            c.id += off
            c.capture = name
            iwarp.append(c)
        for m in a.messages:
            m.connection += off
            msgs.append(m)
        for f in a.findings:
            if f.connection is not None:
                f.connection += off
            f.capture = name
            finds.append(f)
        throughput.update({k + off: v for k, v in a.throughput.items()})
        psn_time.update({k + off: v for k, v in a.psn_time.items()})
        seq_time.update({k + off: v for k, v in a.iwarp_seq_time.items()})
        checks[name] = a.checks
        off += len(a.connections) + len(a.iwarp_connections)
    return Analysis(f"{len(parts)} captures", sum(a.packets for a in parts), sum(a.rdma_packets for a in parts),
                    conns, msgs, finds, max((a.mtu for a in parts), default=1024), throughput, psn_time,
                    {"captures": checks}, sum(a.iwarp_frames for a in parts), iwarp, seq_time)


def analyze_many(paths: Sequence[str | os.PathLike[str]], *, dask: str | None = "local", dask_workers: int = 2,
                 cnp_min_gap_us: float = 4.0) -> Any:
    """Analyse many captures (files, or the captures of a :func:`convert` dataset), one Dask task
    per capture (``dask``: a scheduler address, ``"local"`` for a LocalCluster, None: here, one
    after the other), and merge the results (:func:`merge_analyses`)."""
    sources = capture_sources(paths)
    names = [os.path.relpath(s, os.path.commonpath([os.path.abspath(x) for x in sources]) if len(sources) > 1
                             else os.path.dirname(os.path.abspath(s))) for s in sources]
    if not dask or dask == "none" or len(sources) == 1:
        return merge_analyses([_analyze_task(s, cnp_min_gap_us) for s in sources], names)
    return merge_analyses(_dask_map(_analyze_task, [os.path.abspath(s) for s in sources], dask, dask_workers,
                                    cnp_min_gap_us=cnp_min_gap_us), names)
