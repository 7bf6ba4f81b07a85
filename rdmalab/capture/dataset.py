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
import os
import re
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from rdmalab.capture.columnar import iter_columns


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


def convert_file(path: str, root: str, partition: str = "file", block_bytes: int = 32 << 20) -> Converted:
    """Decode one capture and write its blocks as Parquet files under the dataset ``root``."""
    import pyarrow.parquet as pq  # optional dependency (the "analysis" extra)

    out_dir = partition_dir(path, root, partition)
    os.makedirs(out_dir, exist_ok=True)
    for old in os.listdir(out_dir):  # converting again replaces the file's earlier parts
        if old.startswith("part-") and old.endswith(".parquet"):
            os.remove(os.path.join(out_dir, old))
    rows = parts = 0
    for cols in iter_columns(path, block_bytes=block_bytes):
        if cols.n == 0:
            continue
        table = cols.to_arrow()
        pq.write_table(table, os.path.join(out_dir, f"part-{parts:05d}.parquet"), compression="zstd")
        rows += cols.n
        parts += 1
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
    os.makedirs(out, exist_ok=True)
    partition_dir(files[0] if files else "x.pcap", out, partition)  # check the partition name early
    if dask:
        return _convert_dask(files, out, partition, dask, dask_workers)
    if workers > 1 and len(files) > 1:
        with ProcessPoolExecutor(workers) as pool:
            return list(pool.map(_convert_task, files, [out] * len(files), [partition] * len(files)))
    return [convert_file(f, out, partition) for f in files]


def _convert_dask(files: list[str], root: str, partition: str, scheduler: str, n_workers: int) -> list[Converted]:
    dd: Any = importlib.import_module("distributed")  # optional dependency (the "analysis" extra)
    cluster: Any = None
    client: Any
    if scheduler == "local":
        cluster = dd.LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=None)
        client = dd.Client(cluster)
    else:
        client = dd.Client(scheduler)
    try:
        futures = client.map(_convert_task, files, root=root, partition=partition, pure=False)
        results: list[Converted] = client.gather(futures)
        return results
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
