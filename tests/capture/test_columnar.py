"""The columnar decoder against tshark, field by field, on every capture in captures/."""

from __future__ import annotations

import gzip
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rdmalab.capture import read
from rdmalab.capture.columnar import COLUMNS, IWARP_COLUMNS, Columns, format_column, read_columns, record_blocks
from rdmalab.capture.columnar_decode import QUOTED, decode_block
from rdmalab.capture.defects import explain
from rdmalab.capture.fieldtext import value_text
from rdmalab.capture.pcapwriter import CaptureWriter, seconds_to_ns

CAPTURES = Path(__file__).resolve().parents[2] / "captures"
FILES = sorted(p for p in CAPTURES.glob("*") if p.suffix in (".pcap", ".pcapng")) if CAPTURES.is_dir() else []
requires_tshark = pytest.mark.skipif(shutil.which("tshark") is None,
                                     reason="tshark (Wireshark) is not installed; CI installs it")

# Our columns that tshark 4.0 also has (rdmalab.* and frame.time_ns are ours alone).
TSHARK_FIELDS = [c.name for c in COLUMNS if not c.name.startswith("rdmalab.") and c.name != "frame.time_ns"]


def tshark_fields(path: Path, fields: list[str]) -> list[list[str]]:
    cmd = ["tshark", "-n", "--disable-protocol", "rpcordma", "-r", str(path), "-T", "fields", "-E", "occurrence=f"]
    for f in fields:
        cmd += ["-e", f]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return [line.split("\t") for line in out.splitlines()]


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_columns_agree_with_tshark(path: Path) -> None:
    cols = read_columns(path)
    frames = list(read(path))
    ours = {f: format_column(cols, f) for f in TSHARK_FIELDS}
    # an ICMP error that quotes a datagram: the columns are its own headers (tshark's first occurrence where
    # it has one); Columns.multi holds the quote's UDP and BTH, tshark's first where the frame has none
    for number, got in cols.multi.items():
        if QUOTED in got:
            for f in TSHARK_FIELDS:
                v = got.get(f)
                if v is not None and ours[f][number - 1] == "":
                    ours[f][number - 1] = value_text(f, v[0] if isinstance(v, list) else v)
    theirs = tshark_fields(path, TSHARK_FIELDS)
    assert len(theirs) == cols.n, f"tshark read {len(theirs)} packets, rdmalab {cols.n}"
    diffs = []
    compared = 0
    for i, row in enumerate(theirs):
        # what tshark shows in this frame (a defect may depend on it, e.g. iWARP it did not see)
        ws = {f: [v] for f, v in zip(TSHARK_FIELDS, row, strict=False) if v != ""}
        for j, f in enumerate(TSHARK_FIELDS):
            want = row[j] if j < len(row) else ""
            got = ours[f][i]
            if got == "" and want == "":
                continue
            compared += 1
            if got != want:
                kind = "only_rdmalab" if want == "" else "only_wireshark" if got == "" else "value"
                if explain(frames[i], ws, f, kind) is not None:
                    continue
                diffs.append(f"frame {i + 1} {f}: rdmalab {got!r}, tshark {want!r}")
    assert compared > 0
    assert not diffs, f"{len(diffs)} differences:\n" + "\n".join(diffs[:40])
    if path.name.startswith(("siw_", "synthetic_iwarp")) and "midstream" not in path.name:
        # the iWARP columns were compared, not just absent on both sides
        iw = [j for j, f in enumerate(TSHARK_FIELDS) if f.startswith("iwarp_")]
        agreed = sum(1 for i, row in enumerate(theirs) for j in iw
                     if j < len(row) and row[j] != "" and ours[TSHARK_FIELDS[j]][i] == row[j])
        assert agreed >= 60, agreed


IWARP_CLI_FIELDS = ["frame.number", "ip.src", "tcp.srcport", "iwarp_mpa.ulpdulength", "iwarp_mpa.crc",
                    "iwarp_mpa.crc_check", "iwarp_ddp.tagged_flag", "iwarp_ddp.stag", "iwarp_ddp.tagged_offset",
                    "iwarp_ddp.qn", "iwarp_ddp.msn", "iwarp_ddp.mo", "iwarp_rdma.opcode", "iwarp_rdma.inval_stag",
                    "iwarp_rdma.sinkstag", "iwarp_rdma.rdmardsz", "iwarp_mpa.rev", "iwarp_mpa.crc_flag"]


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("name,filt,opts", [
    ("siw_read_bw.pcap", "iwarp_ddp", []),  # frame 41 completes two FPDUs: "3,4"
    ("siw_read_bw.pcap", "iwarp_ddp.msn == 4", ["-E", "occurrence=l", "-E", "separator=,", "-E", "quote=d"]),
    ("siw_crc_read_bw.pcap", "iwarp_rdma.opcode == 1 && ip.src == 10.0.0.2", ["-E", "header=y"]),
    ("siw_crc_write_bw.pcap", "iwarp_ddp.tagged_flag == 1", ["-E", "occurrence=f"]),
    ("synthetic_iwarp_all_opcodes.pcap", "iwarp_mpa || tcp.len > 0", ["-E", "aggregator=;"]),
    ("synthetic_iwarp_mpa_markers.pcap", "iwarp_mpa.ulpdulength > 0", []),
    ("synthetic_iwarp_mpa_crc.pcap", "iwarp_mpa.crc_check && !(iwarp_ddp.qn in {0, 1})", ["-E", "quote=s"]),
])
def test_decode_iwarp_fields_prints_like_tshark(name: str, filt: str, opts: list[str], capsys: Any) -> None:
    """``rdmalab decode -T fields -e iwarp_... -Y ...`` (the columnar path) prints tshark's bytes."""
    from rdmalab.cli import main

    path = CAPTURES / name
    args = [a for f in IWARP_CLI_FIELDS for a in ("-e", f)] + opts + ["-Y", filt]
    want = subprocess.run(["tshark", "-n", "--disable-protocol", "rpcordma", "-r", str(path), "-T", "fields", *args],
                          capture_output=True, text=True, check=True).stdout
    assert main(["decode", "-r", str(path), "-T", "fields", *args]) == 0
    got = capsys.readouterr().out
    assert want.count("\n") >= 3
    assert got == want


def test_iwarp_columns_keep_every_occurrence_and_survive_blocks_and_workers() -> None:
    from rdmalab.capture.columnar import iter_columns

    path = CAPTURES / "siw_read_bw.pcap"
    whole = read_columns(path)
    # frame 41 carries two Read Request FPDUs (MSN 3 and 4): the column has the first, .multi both
    assert whole.multi[41]["iwarp_ddp.msn"] == [3, 4]
    row = int(np.nonzero(whole["frame.number"] == 41)[0][0])
    assert whole["iwarp_ddp.msn"][row] == 3 and whole["rdmalab.pdus"][row] == 2
    small = Columns.concat(list(iter_columns(path, block_bytes=2000)))  # FPDUs split across blocks
    par = read_columns(path, workers=2, block_bytes=3000)
    only = Columns.concat(list(iter_columns(path, fields=["iwarp_ddp.msn"])))
    for other in (small, par):
        assert other.multi == whole.multi
        for c in IWARP_COLUMNS:
            assert np.array_equal(other[c.name], whole[c.name]), c.name
            assert np.array_equal(other.present(c.name), whole.present(c.name)), c.name
    assert np.array_equal(only["iwarp_ddp.msn"], whole["iwarp_ddp.msn"])
    # the per-packet decoder agrees with the columns frame by frame
    for cp in read(path):
        want = [layer.header.ws_fields()["iwarp_ddp.msn"] for p in cp.pdus for layer in p.layers
                if "iwarp_ddp.msn" in layer.header.ws_fields()]
        i = cp.frame_number - 1
        assert (whole.present("iwarp_ddp.msn")[i], int(whole["iwarp_ddp.msn"][i])) == (
            bool(want), want[0] if want else 0), cp.frame_number


def test_parallel_and_sequential_text_agree(tmp_path: Path) -> None:
    from rdmalab.capture.fieldtext import field_text

    path = CAPTURES / "rxe_send_bw_loss.pcap"
    names = ["frame.number", "frame.time_epoch", "ip.src", "infiniband.bth.psn", "infiniband.aeth.syndrome"]
    seq = b"".join(field_text(path, names, workers=1))
    par = b"".join(field_text(path, names, workers=2, block_bytes=4096, parallel_min_bytes=0,
                              filter_expr="frame.len > 0"))
    assert seq == par
    assert seq.count(b"\n") == 154


def test_gzip_and_pcapng_give_the_same_columns(tmp_path: Path) -> None:
    src = CAPTURES / "rxe_read_bw.pcap"
    plain = read_columns(src)
    gz = tmp_path / "a.pcap.gz"
    gz.write_bytes(gzip.compress(src.read_bytes()))
    ng = tmp_path / "a.pcapng"
    with CaptureWriter(ng, format="pcapng", nano=False) as w:
        for rec in read(src):
            w.write(rec.packet.data, seconds_to_ns(rec.timestamp))
    for other in (read_columns(gz), read_columns(ng), read_columns(src, block_bytes=1000)):
        assert other.n == plain.n
        for name in ("infiniband.bth.psn", "ip.src", "frame.len", "infiniband.reth.va"):
            assert np.array_equal(other[name], plain[name]), name
        assert np.allclose(other["frame.time_epoch"], plain["frame.time_epoch"], atol=1e-6)


def test_icrc_status_matches_the_packet_decoder() -> None:
    for name in ("rxe_send_bw_loss.pcap", "synthetic_rocev2.pcap", "synthetic_all_opcodes_rocev1.pcap",
                 "public_hw_byte_vectors.pcap"):
        cols = read_columns(CAPTURES / name)
        want = {cp.frame_number: cp.packet.crc_status for cp in read(CAPTURES / name)
                if cp.packet.crc_kind == "icrc"}
        got = dict(zip(cols["frame.number"].tolist(), cols["rdmalab.icrc.status"].tolist(), strict=True))
        assert want, name
        for frame, status in want.items():
            assert got[frame] == status, (name, frame)


def test_damaged_files_name_the_problem(tmp_path: Path) -> None:
    from rdmalab.capture.reader import CaptureError

    data = (CAPTURES / "rxe_read_bw.pcap").read_bytes()
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(data[:-10])
    with pytest.raises(CaptureError, match="truncated"):
        list(record_blocks(cut))
    junk = tmp_path / "junk.pcap"
    junk.write_bytes(b"hello world, not a capture")
    with pytest.raises(CaptureError, match="not a pcap"):
        read_columns(junk)
    with pytest.raises(CaptureError, match="no such file"):
        read_columns(tmp_path / "missing.pcap")


#: The Terminate, MPA marker and RDMAP atomic columns (issue 19).
NEW_IWARP_FIELDS = [c.name for c in IWARP_COLUMNS if c.name.startswith(
    ("iwarp_rdma.term_e", "iwarp_rdma.term_rsvd", "iwarp_mpa.marker_res", "iwarp_mpa.marker_fpduptr",
     "iwarp_rdma.atomic."))]


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("path", [p for p in FILES if p.name.startswith(("siw_", "synthetic_iwarp"))],
                         ids=lambda p: p.name)
def test_terminate_marker_atomic_columns_print_like_tshark(path: Path, capsys: Any) -> None:
    """Each new column, on the columnar and the per-packet path, with a filter on it, prints tshark's
    bytes (every real siw capture: none carries a Terminate, a marker or an atomic, and both tools
    agree on that; the synthetic ones carry all three)."""
    from rdmalab.cli import main

    assert len(NEW_IWARP_FIELDS) == 25
    args = ["-e", "frame.number", *[a for f in NEW_IWARP_FIELDS for a in ("-e", f)]]
    expr = " || ".join(NEW_IWARP_FIELDS[:12] + ["iwarp_rdma.atomic.opcode >= 0"])
    for flt in ([], ["-Y", expr]):
        want = subprocess.run(["tshark", "-n", "--disable-protocol", "rpcordma", "-r", str(path), "-T", "fields",
                               *args, *flt], capture_output=True, text=True, check=True).stdout
        for extra in ([], ["--no-columnar"]):
            assert main(["decode", *extra, "-r", str(path), "-T", "fields", *args, *flt]) == 0
            assert capsys.readouterr().out == want, (extra, flt)
        if path.name.startswith("synthetic"):
            assert any(len(line.strip("\t")) > len(line.split("\t")[0]) for line in want.splitlines())


@pytest.mark.parametrize("name", ["rxe_atomic_cswap.pcap", "rxe_atomic_fadd.pcap", "rxe_imm.pcap", "rxe_ud_pingpong.pcap",
                                  "rxe_read_bw.pcap", "rxe_write_bw_loss.pcap"])
def test_decode_block_fields_asked_are_all_decoded(name: str) -> None:
    """decode_block(fields=...) limits the work to the columns asked for: each column and layer of
    the RoCE headers asked for alone is what decoding every column gives (RETH, AtomicETH, AETH,
    DETH, ImmDt among them in these captures)."""
    path = CAPTURES / name
    names = [c.name for c in COLUMNS if c.name.startswith(("infiniband.", "rdmalab.", "ip.", "udp."))]
    shown = 0
    for blk in record_blocks(str(path), 4 << 20):
        every = decode_block(blk, verify_icrc=True)
        for col in names:
            one = decode_block(blk, verify_icrc=True, fields=(col,))
            layer = next(c.layer for c in COLUMNS if c.name == col)
            assert one.layers[layer].tolist() == every.layers[layer].tolist(), col
            has = every.layers[layer]
            assert one.data[col][has].tolist() == every.data[col][has].tolist(), col
            shown += int(has.any() and every.data[col][has].any())
    assert shown > 10


def test_frames_of_other_link_types_in_bounded_blocks(tmp_path: Path, capsys: Any) -> None:
    """A file with frames the columns do not read (native InfiniBand ERF records) is decoded frame by frame
    from there on, in blocks of a bounded number of rows (iter_columns_from_packets), the same columns as in
    one piece; and when it ends mid-record, -T fields prints the frames before the damaged record, then the
    error, as --no-columnar does (it printed nothing: the rows were all held until the file's end)."""
    from rdmalab.capture.columnar_decode import columns_from_packets, iter_columns_from_packets
    from rdmalab.cli import main

    erf = CAPTURES / "hw_ib_connectx_erf.pcap"
    whole = columns_from_packets(erf)
    parts = list(iter_columns_from_packets(erf, rows=5))
    assert len(parts) == -(-whole.n // 5) and sum(c.n for c in parts) == whole.n
    for name in ("frame.number", "infiniband.bth.opcode", "infiniband.lrh.dlid"):
        if name in whole.data:
            got = np.concatenate([c.data[name][c.present(name)] for c in parts])
            assert got.tolist() == whole.data[name][whole.present(name)].tolist(), name
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(erf.read_bytes()[:-1])
    args = ["decode", "-T", "fields", "-e", "frame.number", "-e", "infiniband.bth.opcode", "-r", str(cut)]
    assert main(args) == 1
    fast = capsys.readouterr()
    assert main([*args[:1], "--no-columnar", *args[1:]]) == 1
    ref = capsys.readouterr()
    assert fast.out == ref.out and fast.out.count("\n") == whole.n - 1
    assert "truncated mid-record" in fast.err
