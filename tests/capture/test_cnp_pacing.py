"""CNP pacing hypotheses and ECN/CNP findings on captures of the switched fabric's simulator."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from rdmalab.capture.analysis import analyze
from rdmalab.cli import build_parser


def simulate(tmp_path: Path, scope: str, gap_us: int) -> tuple[Path, dict[str, int]]:
    pcap = tmp_path / f"incast_{scope}.pcap"
    args = build_parser().parse_args(["simulate", "incast", "--duration", "1", "-w", str(pcap), "-T", "json", "-q",
                                      "--set", f"cnp_scope={scope}", "--set", f"min_time_between_cnps={gap_us}"])
    buf = io.StringIO()
    assert args.func(args, buf) == 0
    summary = json.loads(buf.getvalue())
    return pcap, {"marks": summary["marks"], "cnps": summary["cnps"]}


@pytest.mark.parametrize("scope,hypothesis", [("qp", "qp"), ("port", "port")])
def test_pacing_names_the_scope_the_simulator_used(tmp_path: Path, scope: str, hypothesis: str) -> None:
    pcap, sim = simulate(tmp_path, scope, 20)
    a = analyze(pcap, cnp_min_gap_us=20)
    # the findings agree with the simulator's own counts of CE marks and CNPs
    assert len(a.of_kind("ecn_ce")) == sim["marks"] > 0
    assert len(a.of_kind("cnp")) == sim["cnps"] > 0
    pacing = a.checks["cnp_pacing"]
    assert pacing["triggers"] == sim["marks"] and pacing["cnps"] == sim["cnps"]
    assert hypothesis in pacing["consistent"]
    h = pacing["hypotheses"][hypothesis]
    assert h["expected"] == h["seen"] == sim["cnps"] and not h["mismatched_scopes"]
    assert h["min_observed_gap_us"] is None or h["min_observed_gap_us"] >= 20
    # two senders into one receiver: per-port pacing and per-QP pacing cannot both explain it
    other = "port" if hypothesis == "qp" else "qp"
    assert other not in pacing["consistent"], pacing


def test_a_wrong_gap_is_inconsistent(tmp_path: Path) -> None:
    pcap, sim = simulate(tmp_path, "qp", 20)
    # with no pacing at all every CE mark would get a CNP: the capture contradicts that
    pacing = analyze(pcap, cnp_min_gap_us=0).checks["cnp_pacing"]
    assert pacing["hypotheses"]["qp"]["expected"] == sim["marks"] != sim["cnps"]
    assert pacing["consistent"] == []
