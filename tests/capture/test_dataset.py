"""Captures to Parquet (rdmalab convert), read back with DuckDB; the same on a local Dask cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from rdmalab.capture.columnar import read_columns
from rdmalab.cli import main

pytest.importorskip("pyarrow", reason="pyarrow is not installed (the 'analysis' extra)")
duckdb = pytest.importorskip("duckdb", reason="duckdb is not installed (the 'analysis' extra)")

CAPTURES = Path(__file__).resolve().parents[2] / "captures"
FILES = [CAPTURES / n for n in ("rxe_send_bw_loss.pcap", "rxe_read_bw.pcap", "rxe_atomic_fadd.pcap")]


def _query(root: Path, sql: str) -> list[tuple]:  # type: ignore[type-arg]
    rel = duckdb.sql(sql.replace("DS", f"read_parquet('{root}/**/*.parquet', hive_partitioning = true)"))
    return rel.fetchall()


def test_convert_and_query_with_duckdb(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "ds"
    assert main(["convert", *map(str, FILES), "-o", str(root)]) == 0
    assert "3 capture(s)" in capsys.readouterr().out
    rows = dict(_query(root, "SELECT capture, count(*) FROM DS GROUP BY capture"))
    assert rows == {p.stem: read_columns(p).n for p in FILES}
    # MANIFEST: 6 NAKs (AETH syndrome 0x60) in the lossy capture, none elsewhere
    naks = dict(_query(root, 'SELECT capture, count(*) FROM DS WHERE "infiniband.aeth.syndrome" = 96 GROUP BY capture'))
    assert naks == {"rxe_send_bw_loss": 6}
    # the columns keep their values: PSNs and addresses as the decoder gave them
    cols = read_columns(FILES[0])
    psns = [r[0] for r in _query(root, 'SELECT "infiniband.bth.psn" FROM DS WHERE capture = \'rxe_send_bw_loss\' '
                                       'AND "infiniband.bth.psn" IS NOT NULL ORDER BY "frame.number"')]
    assert psns == cols["infiniband.bth.psn"][cols.present("infiniband.bth")].tolist()
    src = _query(root, 'SELECT DISTINCT "ip.src" FROM DS WHERE "infiniband.bth.opcode" = 17 ORDER BY 1')
    assert src == [("10.0.0.1",)]


def test_partition_by_host(tmp_path: Path) -> None:
    host_dir = tmp_path / "server1"
    host_dir.mkdir()
    f = host_dir / "loss.pcap"
    f.write_bytes(FILES[0].read_bytes())
    root = tmp_path / "ds"
    assert main(["convert", str(f), "-o", str(root), "--partition", "host"]) == 0
    assert _query(root, "SELECT host, capture, count(*) FROM DS GROUP BY ALL") == [("server1", "loss", 154)]


def test_convert_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["convert", str(tmp_path / "nope.pcap"), "-o", str(tmp_path / "ds")]) == 1
    assert "no such file" in capsys.readouterr().err


@pytest.mark.slow
def test_convert_on_a_local_dask_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("distributed", reason="dask.distributed is not installed (the 'analysis' extra)")
    root = tmp_path / "ds"
    assert main(["convert", *map(str, FILES), "-o", str(root), "--dask", "local", "--dask-workers", "2"]) == 0
    assert "on Dask (local)" in capsys.readouterr().out
    local = tmp_path / "local"
    assert main(["convert", *map(str, FILES), "-o", str(local)]) == 0
    sql = 'SELECT capture, count(*), sum("infiniband.bth.psn"), count("infiniband.reth.va") FROM DS GROUP BY 1 ORDER BY 1'
    assert _query(root, sql) == _query(local, sql)


def _summary(a: object) -> list[tuple]:  # type: ignore[type-arg]
    from rdmalab.capture.analysis import Analysis

    assert isinstance(a, Analysis)
    return sorted((c.capture or "", c.name, c.packets, c.request_bytes, c.retransmitted_bytes) for c in a.connections)


def test_analyze_a_dataset_is_analyze_of_each_capture(tmp_path: Path) -> None:
    """`rdmalab analyze DATASET`: each capture of a convert dataset analysed from its Parquet parts
    gives what analysing the pcap gives; the merged report covers them all."""
    from rdmalab.capture.analysis import analyze
    from rdmalab.capture.dataset import analyze_many

    root = tmp_path / "ds"
    assert main(["convert", *map(str, FILES), "-o", str(root)]) == 0
    merged = analyze_many([root], dask=None)
    each = [analyze(p) for p in FILES]
    assert merged.packets == sum(a.packets for a in each)
    assert len(merged.connections) == sum(len(a.connections) for a in each)
    assert [c.id for c in merged.connections] == list(range(len(merged.connections)))
    by_capture: dict[str, dict[str, int]] = {}
    for f in merged.findings:
        by_capture.setdefault(f.capture or "", {}).setdefault(f.kind, 0)
        by_capture[f.capture or ""][f.kind] += 1
    for p, a in zip(FILES, each, strict=True):
        assert by_capture.get(f"capture={p.stem}", {}) == a.counts(), p.name
        mine = [c for c in merged.connections if c.capture == f"capture={p.stem}"]
        assert [(c.name, c.packets, c.request_bytes, c.retransmitted_bytes) for c in mine] == \
            [(c.name, c.packets, c.request_bytes, c.retransmitted_bytes) for c in a.connections]
    # findings name connections of their own capture
    caps = {c.id: c.capture for c in merged.connections}
    assert all(caps[f.connection] == f.capture for f in merged.findings if f.connection is not None)


@pytest.mark.slow
def test_analyze_many_pcaps_on_dask(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Several pcaps on a local Dask cluster (the default), then on a cluster named by its tcp:// address:
    the same merged analysis as one after the other here."""
    distributed = pytest.importorskip("distributed", reason="dask.distributed is not installed (the 'analysis' extra)")
    from rdmalab.capture.dataset import analyze_many

    here = analyze_many(FILES, dask=None)
    assert main(["analyze", "-q", "-T", "json", *map(str, FILES), "--dask-workers", "2"]) == 0
    import json

    doc = json.loads(capsys.readouterr().out)
    assert len(doc["connections"]) == len(here.connections) and doc["counts"] == here.counts()
    assert {c["capture"] for c in doc["connections"]} == {c.capture for c in here.connections} == {p.name for p in FILES}
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cl:
        remote = analyze_many(FILES, dask=cl.scheduler_address)
    assert cl.scheduler_address.startswith("tcp://")
    assert _summary(remote) == _summary(here) and remote.counts() == here.counts()


def _parts(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.parquet"))


def test_two_captures_never_share_a_partition(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two captures of the same file name (from two hosts' directories, or x.pcap and x.pcapng) would go to one
    partition, and the second replaced the first's parts while convert counted both: refused before anything
    is written, in words that name both files; by host they are apart."""
    for host in ("h1", "h2"):
        (tmp_path / host).mkdir()
        (tmp_path / host / "x.pcap").write_bytes((CAPTURES / f"rxe_{'send' if host == 'h1' else 'write'}_bw.pcap").read_bytes())
    one, two = str(tmp_path / "h1" / "x.pcap"), str(tmp_path / "h2" / "x.pcap")
    ds = tmp_path / "ds"
    assert main(["convert", one, two, "-o", str(ds)]) == 1
    err = capsys.readouterr().err
    assert f"{one} and {two} would both be written to capture=x" in err and "--partition host" in err
    assert not ds.exists() or _parts(ds) == []
    assert main(["convert", one, one, "-o", str(ds)]) == 1
    assert f"{one} is given twice" in capsys.readouterr().err
    assert main(["convert", one, two, "-o", str(ds), "--partition", "host"]) == 0
    assert _parts(ds) == ["host=h1/capture=x/part-00000.parquet", "host=h2/capture=x/part-00000.parquet"]
    total = len(read_columns(one)) + len(read_columns(two))
    assert f"2 capture(s), {total} packets" in capsys.readouterr().out


def test_a_capture_that_fails_leaves_the_dataset_as_it_was(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A capture cut mid-record is an error, and no part of it is written (a partial capture read later as a
    whole one); a conversion of the same name before it stays."""
    src = (CAPTURES / "rxe_send_bw.pcap").read_bytes()
    cap = tmp_path / "c.pcap"
    cap.write_bytes(src)
    ds = tmp_path / "ds"
    assert main(["convert", str(cap), "-o", str(ds)]) == 0
    before = {p: (ds / p).read_bytes() for p in _parts(ds)}
    cap.write_bytes(src[:len(src) // 2])
    assert main(["convert", str(cap), "-o", str(ds)]) == 1
    assert "is truncated mid-record" in capsys.readouterr().err
    assert {p: (ds / p).read_bytes() for p in _parts(ds)} == before
    assert not [p for p in ds.iterdir() if p.name.startswith(".")]
    fresh = tmp_path / "fresh"
    assert main(["convert", str(cap), "-o", str(fresh)]) == 1
    assert _parts(fresh) == []


def test_the_dataset_must_be_a_directory(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["convert", str(CAPTURES / "rxe_send_bw.pcap"), "-o", "/dev/null"]) == 1
    assert "/dev/null: is not a directory" in capsys.readouterr().err


def test_a_capture_of_no_frame_is_in_the_dataset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A capture with no frame is converted to a part with the columns and no row: the dataset holds it (analyze
    refused a dataset of such captures as no dataset at all), and DuckDB reads it beside the others."""
    from rdmalab.capture.pcapwriter import write_capture

    empty = tmp_path / "empty.pcap"
    write_capture(empty, [])
    ds = tmp_path / "ds"
    assert main(["convert", str(empty), "-o", str(ds)]) == 0
    assert _parts(ds) == ["capture=empty/part-00000.parquet"]
    capsys.readouterr()
    assert main(["analyze", "-q", str(ds), "--dask", "none"]) == 0
    assert capsys.readouterr().out.startswith("1 captures: 0 frames")
    assert main(["convert", str(empty), str(FILES[1]), "-o", str(ds)]) == 0
    rows = _query(ds, "SELECT capture, count(*) FROM DS GROUP BY capture ORDER BY capture")
    assert rows == [("rxe_read_bw", len(read_columns(FILES[1])))]
