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


def test_capture_drops_across_connections_are_not_wire_losses(tmp_path: Path) -> None:
    from rdmalab.capture import read, write_pcap
    from rdmalab.wire.ib import BTH

    pcap, _ = simulate(tmp_path, "qp", 20)
    frames = list(read(pcap))
    # drop from the capture (not from the wire) the first data packet of each sender after the
    # middle of the run: both connections then show a gap at once that nobody retransmits
    mid = frames[len(frames) // 2].timestamp
    dropped: dict[str, int] = {}
    for cp in frames:
        bth = cp.packet.get(BTH)
        src = cp.packet.layers[1].header.src  # type: ignore[attr-defined]
        if cp.timestamp >= mid and bth is not None and bth.opcode != 0x81 and src not in dropped and \
                len(cp.packet.data) > 200:
            dropped[src] = cp.frame_number
        if len(dropped) == 2:
            break
    assert len(dropped) == 2
    cut = tmp_path / "mirror_drops.pcap"
    write_pcap(cut, [cp for cp in frames if cp.frame_number not in dropped.values()], nano=True)
    clean = analyze(pcap)
    assert not clean.of_kind("capture_gap") and not clean.of_kind("psn_gap")
    a = analyze(cut)
    gaps = a.of_kind("capture_gap")
    assert len(gaps) == 2 and {g.connection for g in gaps} == {0, 1}
    assert all(g.detail.get("burst_connections") == 2 for g in gaps)
    assert not a.of_kind("retransmission")


def test_real_losses_are_not_capture_gaps() -> None:
    a = analyze(Path(__file__).resolve().parents[2] / "captures" / "rxe_send_bw_loss.pcap")
    assert a.of_kind("psn_gap") and a.of_kind("retransmission")
    assert not a.of_kind("capture_gap")  # netem dropped them on the wire: go-back-N resent every one


def test_iwarp_bad_crc32c_and_terminate_explained() -> None:
    a = analyze(Path(__file__).resolve().parents[2] / "captures" / "synthetic_iwarp_mpa_crc.pcap")
    bad = a.of_kind("bad_crc32c")
    term = a.of_kind("terminate")
    assert [f.frames for f in bad] == [[16]] and "should be" in bad[0].text
    assert len(term) == 1 and term[0].detail["layer"] == 1 and term[0].detail["etype"] == 2
    assert "Invalid MSN" in term[0].text


def _rewrite_ack_psn(src: Path, dst: Path, which: int, delta: int) -> int:
    """Copy a capture, changing the PSN of its ``which``-th ACK by ``delta``; returns its frame number."""
    from rdmalab.capture import CaptureWriter, read
    from rdmalab.capture.pcapwriter import seconds_to_ns
    from rdmalab.wire.ib import BTH

    k = 0
    changed = 0
    with CaptureWriter(dst, nano=True) as w:
        for cp in read(src):
            data = bytearray(cp.packet.data)
            bth = cp.packet.get(BTH)
            if bth is not None and bth.opcode == 0x11:
                k += 1
                if k == which:
                    at = next(layer.offset for layer in cp.packet.layers if isinstance(layer.header, BTH)) + 9
                    data[at:at + 3] = ((bth.psn + delta) % (1 << 24)).to_bytes(3, "big")
                    changed = cp.frame_number
            w.write(data, seconds_to_ns(cp.timestamp))
    assert changed
    return changed


def test_ack_coalescing_anomalies(tmp_path: Path) -> None:
    pcap, _ = simulate(tmp_path, "qp", 20)
    clean = analyze(pcap)
    assert not clean.of_kind("ack_coalescing")  # one ACK per several requests is normal coalescing
    back = tmp_path / "back.pcap"
    frame = _rewrite_ack_psn(pcap, back, 40, -150)  # ACKs come every ~64 requests
    found = analyze(back).of_kind("ack_coalescing")
    assert [(f.detail["anomaly"], f.frames[-1]) for f in found] == [("ack_backwards", frame)]
    ahead = tmp_path / "ahead.pcap"
    frame = _rewrite_ack_psn(pcap, ahead, 40, 5000)
    found = analyze(ahead).of_kind("ack_coalescing")
    assert [(f.detail["anomaly"], f.frames[-1]) for f in found] == [("ack_unsent", frame)]
