"""The engine's CM traffic on the wire: tshark decodes every field as rdmalab does, and the analyzer pairs the connection."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from rdmalab.capture.crosscheck import crosscheck, tshark_path
from rdmalab.lab.connect import run_connect

ROOT = Path(__file__).resolve().parents[2]


def _frames_of_every_kind(tmp_path: Path) -> Path:
    """A capture with REQ, REP (one resent), RTU, SEND, ACK, DREQ, DREP, and a REQ with its REJ."""
    ok = run_connect(lose=("REP",))
    rej = run_connect(port=7175)
    path = tmp_path / "cm.pcap"
    from rdmalab.capture.reader import write_pcap

    write_pcap(path, ok.frames + rej.frames)
    assert ok.names() == ["REQ", "REP", "REP", "RTU", "DREQ", "DREP"]
    assert rej.names() == ["REQ", "REJ"]
    return path


@pytest.mark.tshark
def test_tshark_reads_every_field_of_the_engines_cm_messages_as_rdmalab_does(tmp_path: Path) -> None:
    if tshark_path() is None:
        pytest.skip("tshark is not installed")
    report = crosscheck(_frames_of_every_kind(tmp_path))
    assert report.packets == report.wireshark_packets == 10  # 8 CM messages, a SEND and its ACK
    assert report.fields_compared > 300
    assert not report.unexplained, report.text()


def test_the_analyzer_pairs_the_connection_from_the_engines_req_and_rep(tmp_path: Path) -> None:
    path = tmp_path / "conn.pcap"
    run_connect().write_pcap(path)
    r = subprocess.run([sys.executable, "-m", "rdmalab", "analyze", str(path)], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert re.search(r"10\.0\.0\.1 QP 0x[0-9a-f]+ -> 10\.0\.0\.2 QP 0x[0-9a-f]+ \(RC\)", r.stdout), r.stdout
    assert "set up by CM REQ frame 1 / REP frame 2 (service ID 0x1061c06)" in r.stdout, r.stdout
