"""``rdmalab analyze --counters BEFORE AFTER``: NIC counter dumps side by side with the capture."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from rdmalab.capture.analysis import parse_counters
from rdmalab.cli import build_parser
from rdmalab.cli._common import Fail

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "counters"  # synthetic dumps in the stock tools' text formats


def run(argv: list[str]) -> str:
    args = build_parser().parse_args(argv)
    buf = io.StringIO()
    assert args.func(args, buf) == 0
    return buf.getvalue()


def test_both_dump_formats_parse() -> None:
    rxe = parse_counters((DATA / "rxe_after.txt").read_text())
    assert rxe["out_of_seq_request"] == 6 and rxe["duplicate_request"] == 2 and "rxe0" not in rxe
    mlx = parse_counters((DATA / "mlx5_after.txt").read_text())
    assert mlx["np_cnp_sent"] == 14 and mlx["np_ecn_marked_roce_packets"] == 66
    with pytest.raises(ValueError, match="no counters found"):
        parse_counters("hello world", "x.txt")


def test_rxe_counters_against_a_lossy_capture() -> None:
    out = run(["analyze", str(ROOT / "captures" / "rxe_send_bw_loss.pcap"), "-T", "json",
               "--counters", str(DATA / "rxe_before.txt"), str(DATA / "rxe_after.txt")])
    rows = {r["what"]: r for r in json.loads(out)["checks"]["counters"]}
    naks = rows["sequence-error NAKs"]
    assert naks["capture"] == 6 and naks["counters"]["out_of_seq_request"] == 6 and naks["agree"] is True
    dup = rows["duplicate requests"]
    assert dup["capture"] == 0 and dup["counters"] == {"duplicate_request": 2} and dup["agree"] is False
    assert rows["CNPs sent"]["counters"] == {} and rows["CNPs sent"]["agree"] is None


def test_mlx5_counters_against_a_simulated_incast(tmp_path: Path) -> None:
    pcap = tmp_path / "incast.pcap"
    sim = json.loads(run(["simulate", "incast", "--duration", "1", "-w", str(pcap), "-T", "json", "-q"]))
    out = run(["analyze", str(pcap), "--counters", str(DATA / "mlx5_before.txt"), str(DATA / "mlx5_after.txt")])
    assert "Counters (after - before) against the capture:" in out
    line = next(s for s in out.splitlines() if s.strip().startswith("ECN-marked packets"))
    assert f"capture {sim['marks']:>6}" in line and "np_ecn_marked_roce_packets 26" in line
    assert ("agree" in line) == (sim["marks"] == 26)


def test_bad_counter_files_are_errors(tmp_path: Path) -> None:
    junk = tmp_path / "junk.txt"
    junk.write_text("nothing to see\n")
    pcap = str(ROOT / "captures" / "rxe_send_bw_loss.pcap")
    with pytest.raises(Fail, match="junk.txt: no counters found"):
        run(["analyze", pcap, "--counters", str(junk), str(DATA / "rxe_after.txt")])
    with pytest.raises(Fail, match="missing.txt"):
        run(["analyze", pcap, "--counters", str(tmp_path / "missing.txt"), str(DATA / "rxe_after.txt")])
