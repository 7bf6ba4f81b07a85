"""rdmalab.capture.analysis on real captures (against their MANIFEST and tshark) and on captures
of the simulated fabric (against the faults it injected)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from rdmalab.capture.analysis import analyze
from rdmalab.capture.pcapwriter import CaptureWriter, seconds_to_ns, write_capture
from rdmalab.cli import main
from rdmalab.viz.report import html_report
from rdmalab.wire import AETH, BTH, RETH, encode_rocev2
from rdmalab.wire.ib import CNPPad

CAPTURES = Path(__file__).resolve().parents[2] / "captures"
LOSS = CAPTURES / "rxe_send_bw_loss.pcap"
CLEAN = ["rxe_rc_pingpong.pcap", "rxe_rping.pcap", "rxe_write_bw_cm.pcap", "rxe_write_bw.pcap", "rxe_read_bw.pcap", "rxe_send_bw.pcap",
         "rxe_atomic_fadd.pcap", "rxe_atomic_cswap.pcap", "rxe_write_lat.pcap", "rxe_read_lat.pcap",
         "rxe_send_lat.pcap", "rxe_imm.pcap", "rxe_srq_pingpong.pcap", "rxe_uc_write_bw.pcap"]


def test_lossy_real_capture_matches_its_manifest() -> None:
    a = analyze(LOSS)
    # MANIFEST: RC SEND 12 x 2048 B (First/Last at MTU 1024), 6 NAKs with syndrome 0x60
    assert len(a.connections) == 1
    c = a.connections[0]
    assert (c.requester, c.responder, c.transport) == ("10.0.0.2", "10.0.0.1", "RC")
    assert [m.op for m in a.messages] == ["SEND"] * 12
    assert all(m.size == 2048 and m.result == "ok" for m in a.messages)
    naks = a.of_kind("nak_seq_err")
    assert len(naks) == 6
    # every NAK names the first PSN the responder is missing (IBA 9.7.5.2.1)
    assert all(f.detail["names_first_missing"] for f in naks)
    nak_frames = {f.frames[0]: f.detail["psn"] for f in naks}
    by_nak = [r for r in a.of_kind("retransmission") if r.detail["trigger"] == "nak"]
    assert sorted(r.frames[1] for r in by_nak) == sorted(nak_frames)  # each NAK answered once
    gaps_at = {g.frames[0]: g.detail["missing"] for g in a.of_kind("psn_gap")}
    for r in by_nak:
        want = nak_frames[r.frames[1]]
        # go-back-N restarts at the NAKed PSN, unless that retransmission is itself missing (a gap says so)
        assert r.detail["from_psn"] == want or want in gaps_at.get(r.frames[0], [])
    # latency breakdown of each loss (Lumina B6): the capture is at the responder, so the NAK follows the
    # packet that revealed the gap, and the NAK-triggered restart follows the NAK
    assert all(f.detail["generation_us"] is not None and f.detail["generation_us"] >= 0 for f in naks)
    assert all(r.detail["nak_response_us"] > 0 for r in by_nak)
    # the capture was taken at the receiver: no request is there twice in order
    assert not a.of_kind("duplicate") and not a.of_kind("bad_icrc") and not a.of_kind("opcode_sequence")
    assert c.retransmitted_bytes > 0 and c.request_bytes == 12 * 2048


RXE = sorted(CAPTURES.glob("rxe_*.pcap"))


@pytest.mark.tshark
@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark (Wireshark) is not installed; CI installs it")
@pytest.mark.parametrize("path", RXE, ids=[p.name for p in RXE])
def test_naks_and_go_back_n_restarts_agree_with_tshark(path: Path) -> None:
    """The NAKs and the go-back-N restarts, recomputed from tshark's fields by a rule simple enough
    to read: a request of a connection whose PSN is not above the previous request's."""
    out = subprocess.run(["tshark", "-n", "-r", str(path), "-Y", "infiniband", "-T", "fields", "-e", "frame.number",
                          "-e", "ip.src", "-e", "infiniband.bth.destqp", "-e", "infiniband.bth.opcode",
                          "-e", "infiniband.bth.psn", "-e", "infiniband.aeth.syndrome"],
                         capture_output=True, text=True, check=True).stdout
    rows = [line.split("\t") for line in out.splitlines()]
    naks = {int(r[0]) for r in rows if r[5] and int(r[5]) >> 5 in (1, 3)}
    requests = {0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B, 0x0C, 0x13, 0x14}
    last: dict[tuple[str, str], int] = {}
    restarts = set()
    for r in rows:
        if int(r[3]) not in requests:
            continue
        key, psn = (r[1], r[2]), int(r[4])
        if key in last and psn <= last[key]:
            restarts.add(int(r[0]))
        last[key] = psn
    a = analyze(path)
    ours = {f.frames[0] for kind in ("nak_seq_err", "nak_rnr", "nak_other") for f in a.of_kind(kind)}
    assert naks == ours
    assert restarts == {f.frames[0] for f in a.of_kind("retransmission")}


@pytest.mark.parametrize("name", CLEAN)
def test_captures_without_loss(name: str) -> None:
    """No loss was injected: no gap, NAK or damage. Under the guests' slow emulated CPUs the
    requester's timer sometimes fires before the ACK is processed (rxe_rc_pingpong, *_lat):
    those retransmissions must be timeout-triggered, and what they resend is duplicate."""
    a = analyze(CAPTURES / name)
    assert a.connections, name
    kinds = set(a.counts())
    assert not kinds & {"psn_gap", "nak_seq_err", "nak_rnr", "nak_other", "implied_nak", "bad_icrc",
                        "opcode_sequence", "msn_jump", "lost", "time_backwards"}, a.counts()
    for r in a.of_kind("retransmission"):
        assert r.detail["trigger"] == "timeout"
        assert any(d.frames[0] == r.frames[0] for d in a.of_kind("duplicate"))
    assert a.messages and all(m.result in ("ok", "sent (UC: no acknowledgement)") for m in a.messages), \
        [(m.op, m.result) for m in a.messages if m.result != "ok"]


def _fabric_run(tmp_path: Path, seed: int, loss: float, op: str) -> tuple[Path, Path, list]:  # type: ignore[type-arg]
    from rdmalab.fabric import Fabric
    from rdmalab.fabric.harness import EndpointPair
    from rdmalab.verbs import enums as e

    fab = Fabric(seed=seed, mtu=1024)
    p = EndpointPair(fab, size=1 << 20, path_mtu=e.IBV_MTU_1024)
    a_name, b_name = list(fab.devices)[:2]
    fab.set_faults(loss=loss, src=a_name, dst=b_name)  # requests only: the requester's link drops
    sent_path = tmp_path / "sender.pcap"
    tap = fab.write_pcap(str(sent_path))  # what the requester put on the wire (before the loss)
    n = 24
    wr = e.IBV_WR_RDMA_WRITE if op == "write" else e.IBV_WR_SEND
    if op == "send":
        for k in range(n):
            p.b.recv(wr_id=k, offset=k * 4096, length=4096)
    for k in range(n):
        p.send(p.a, wr, wr_id=k, offset=0, length=4096, remote=k * 4096)
    assert len(p.wait(p.a.cq, n)) == n
    tap.close()
    recv_path = _write_arrivals(fab, tmp_path / "receiver.pcap")
    return sent_path, recv_path, fab.trace.of_kind("dropped")


def _write_arrivals(fab: Any, path: Path) -> Path:
    """What the receivers got: the frames the fabric's trace says arrived, at their arrival times."""
    sent = {ev.detail["packet_id"]: ev for ev in fab.trace.of_kind("sent")}
    write_capture(path, [(ev.time_ns, sent[ev.detail["packet_id"]].frame) for ev in fab.trace.of_kind("received")])
    return path


@pytest.mark.parametrize("seed,loss,op", [(5, 0.05, "write"), (11, 0.1, "write"), (3, 0.08, "send"),
                                          (7, 0.0, "write")])
def test_fabric_findings_are_exactly_the_injected_losses(tmp_path: Path, seed: int, loss: float, op: str) -> None:
    sender, receiver, dropped = _fabric_run(tmp_path, seed, loss, op)
    a = analyze(receiver, sent=sender)
    injected = Counter(d.psn for d in dropped)
    assert (sum(injected.values()) > 0) == (loss > 0)
    # with the sender's capture beside the receiver's: every loss, no more, no fewer
    assert Counter(f.detail["psn"] for f in a.of_kind("lost")) == injected
    # from the receiver's capture alone: every PSN gap is a real loss (never more than were injected)
    gaps = Counter(x for f in a.of_kind("psn_gap") for x in f.detail["missing"])
    assert all(gaps[k] <= injected[k] for k in gaps)
    # the receiver NAKs each gap once and the sender goes back to the NAKed PSN
    naks = a.of_kind("nak_seq_err")
    assert all(f.detail["names_first_missing"] for f in naks)
    assert len([r for r in a.of_kind("retransmission") if r.detail["trigger"] == "nak"]) == len(naks)
    assert len(a.of_kind("retransmission")) == len(naks) + len(a.of_kind("timeout"))
    assert not a.of_kind("bad_icrc") and not a.of_kind("duplicate") and not a.of_kind("opcode_sequence")
    assert len(a.messages) == 24 and all(m.result == "ok" for m in a.messages)
    if loss == 0:
        assert not a.findings


def test_cnp_reaction_time_and_bad_icrc(tmp_path: Path) -> None:
    frames = []
    t = 100.0
    for k in range(4):
        frames.append((t + k * 1e-6, encode_rocev2(BTH(opcode=0x06 if k == 0 else 0x07 if k < 3 else 0x08,
                                                       destqp=0x22, psn=k, ackreq=int(k == 3)),
                                                   [RETH(0x1000, 7, 4096)] if k == 0 else [], b"x" * 1024,
                                                   ecn=3 if k == 1 else 2)))
    frames.append((t + 5e-6, encode_rocev2(BTH(opcode=0x81, destqp=0x11, becn=1), [CNPPad()], b"",
                                           src_ip="10.0.0.2", dst_ip="10.0.0.1")))
    ack = bytearray(encode_rocev2(BTH(opcode=0x11, destqp=0x11, psn=3), [AETH.ack(1)], b"",
                                  src_ip="10.0.0.2", dst_ip="10.0.0.1"))
    ack[-1] ^= 0xFF  # damage the ICRC
    frames.append((t + 6e-6, bytes(ack)))
    path = tmp_path / "ce.pcap"
    write_capture(path, [(seconds_to_ns(ts), fr) for ts, fr in frames])
    a = analyze(path)
    ce = a.of_kind("ecn_ce")
    assert len(ce) == 1 and ce[0].frames == [2, 5]
    assert ce[0].detail["cnp_after_us"] == pytest.approx(4.0, abs=0.01)
    assert len(a.of_kind("cnp")) == 1 and a.of_kind("cnp")[0].connection == 0
    assert [f.frames for f in a.of_kind("bad_icrc")] == [[6]]


def test_analyze_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    html = tmp_path / "r.html"
    assert main(["analyze", str(LOSS), "--html", str(html)]) == 0
    out = capsys.readouterr().out
    assert "6 nak_seq_err" in out and "Connection 0: 10.0.0.2" in out
    page = html.read_text()
    # plotly figures (PSN over time, throughput, latency, bytes), plotly.js inline once (offline)
    assert page.startswith("<!doctype html>") and page.count('class="plotly-graph-div"') >= 4 and "nak_seq_err" in page
    assert page.count("* plotly.js v") == 1 and "<script src=" not in page
    assert main(["analyze", "-T", "json", str(LOSS)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["counts"]["nak_seq_err"] == 6
    assert all({"kind", "connection", "frames"} <= set(f) for f in doc["findings"])
    assert main(["analyze", str(tmp_path / "missing.pcap")]) == 1
    assert "no such file" in capsys.readouterr().err


def test_html_report_without_connections(tmp_path: Path) -> None:
    """No RoCE connection: no RoCE plot; an iWARP capture has the TCP sequence plot of its connection alone."""
    a = analyze(CAPTURES / "siw_rping.pcap")
    page = html_report(a)
    assert not a.connections and len(a.iwarp_connections) == 1
    assert page.count('class="plotly-graph-div"') == 1 and "TCP sequence over time, iWARP connection 0" in page
    from rdmalab.capture.pcapwriter import write_capture
    from rdmalab.capture.reader import records

    path = tmp_path / "handshake.pcap"  # (a router solicitation and a TCP handshake: no RDMA)
    write_capture(path, [(round(r.timestamp * 1e9), r.data) for r in list(records(CAPTURES / "siw_write_bw.pcap"))[:4]])
    none = analyze(path)
    assert not none.connections and not none.iwarp_connections
    assert "plotly-graph-div" not in html_report(none) and "No RoCE or InfiniBand connection" in html_report(none)


@pytest.mark.parametrize("name,handshakes", [("rxe_write_bw_cm.pcap", 2), ("rxe_rping.pcap", 1)])
def test_connections_from_the_cm_exchange(name: str, handshakes: int) -> None:
    """MANIFEST: rxe_write_bw_cm has two CM REQ/REP/RTU handshakes (perftest's control QP, then the
    data QP), rxe_rping one. Each RC connection found in the traffic names the exchange whose
    QPNs it uses, and its first request carries the starting PSN its peer announced."""
    from rdmalab.capture.columnar import read_columns

    a = analyze(CAPTURES / name)
    assert all(c.cm is not None for c in a.connections)
    assert len({(c.cm["req_frame"], c.cm["rep_frame"]) for c in a.connections if c.cm}) == handshakes
    cols = read_columns(CAPTURES / name)
    for c in a.connections:
        assert c.cm is not None
        active = (c.requester, c.requester_qpn) == (c.cm["req_ip"], c.cm["req_qpn"])
        first = next(int(p) for p, s, q, op in zip(cols["infiniband.bth.psn"], cols["ip.src"], cols["infiniband.bth.destqp"],
                                                    cols["infiniband.bth.opcode"], strict=True)
                     if int(q) == c.responder_qpn and op < 0x10 and
                     f"{int(s) >> 24}.{(int(s) >> 16) & 255}.{(int(s) >> 8) & 255}.{int(s) & 255}" == c.requester)
        # each side's Starting PSN is the one its peer will send with (the REP's is the active side's
        # first request PSN; IBA Vol 1 12.6.5 / 12.6.8 message fields), as these captures show
        start = c.cm["rep_starting_psn"] if active else c.cm["req_starting_psn"]
        assert first == start


# ---------------------------------------------------------------- ack_coalescing: ackreq_unanswered


def _fabric_capture(tmp_path: Path, op: str, *, seed: int = 1, n: int = 12, bad: int | None = None,
                    fwd: dict[str, float] | None = None, rev: dict[str, float] | None = None) -> tuple[Path, list]:  # type: ignore[type-arg]
    """A simulated RC run of ``n`` messages (``bad``: the message that breaks a rule: a WRITE/READ
    with an unknown R_Key, a SEND longer than the receive buffer), faults on the request (``fwd``)
    and response (``rev``) links; the capture of every frame put on the wire, and the completions."""
    from rdmalab.fabric import Fabric
    from rdmalab.fabric.harness import EndpointPair
    from rdmalab.verbs import enums as e

    fab = Fabric(seed=seed, mtu=1024)
    p = EndpointPair(fab, size=1 << 20, path_mtu=e.IBV_MTU_1024)
    a_name, b_name = list(fab.devices)[:2]
    if fwd:
        fab.set_faults(**fwd, src=a_name, dst=b_name)
    if rev:
        fab.set_faults(**rev, src=b_name, dst=a_name)
    path = tmp_path / f"{op}.pcap"
    tap = fab.write_pcap(str(path))
    wr = {"write": e.IBV_WR_RDMA_WRITE, "read": e.IBV_WR_RDMA_READ, "send": e.IBV_WR_SEND}[op]
    if op == "send":
        for k in range(n):
            p.b.recv(wr_id=k, offset=k * 4096, length=4096)
    for k in range(n):
        length = 8192 if op == "send" and k == bad else 4096
        rkey = 0xDEAD00 if op != "send" and k == bad else None
        p.send(p.a, wr, wr_id=k, offset=0, length=length, remote=k * 4096, rkey=rkey)
    wcs = p.wait(p.a.cq, n)
    tap.close()
    return path, wcs


@pytest.mark.parametrize("op,fwd,rev", [
    ("write", None, {"loss": 0.15}),  # lost ACKs: a later (coalesced) ACK covers the request
    ("send", {"loss": 0.1}, {"loss": 0.1}),
    ("read", {"loss": 0.1}, {"loss": 0.1}),  # lost READ responses: the READ is re-issued
    ("write", {"corrupt": 0.1}, {"corrupt": 0.1}),
    ("send", {"duplicate": 0.1, "reorder": 0.1}, {"duplicate": 0.1, "reorder": 0.1}),
])
def test_no_ackreq_unanswered_when_every_request_was_acknowledged(
        tmp_path: Path, op: str, fwd: dict[str, float] | None, rev: dict[str, float] | None) -> None:
    """Faults that delay acknowledgements but never leave a request unanswered (every work request
    completed successfully, so the requester saw each one acknowledged) yield no ackreq_unanswered."""
    path, wcs = _fabric_capture(tmp_path, op, fwd=fwd, rev=rev)
    assert [w.status for w in wcs] == [0] * 12
    found = [f for f in analyze(path).of_kind("ack_coalescing") if f.detail["anomaly"] == "ackreq_unanswered"]
    assert not found, [f.text for f in found]


@pytest.mark.parametrize("op,status,nak", [("write", 10, "remote access error"), ("read", 10, "remote access error"),
                                           ("send", 9, "invalid request")])
def test_a_fatal_nak_answers_the_requests_after_it(tmp_path: Path, op: str, status: int, nak: str) -> None:
    """A NAK that ends the connection (IBA Vol 1 9.7.5.2.5) answers the request it names and every
    request sent after it (the responder drops them, the requester flushes them): the injected
    error is reported once, as nak_other, and nothing is reported as unanswered."""
    from rdmalab.capture import read
    from rdmalab.wire.ib import AETH

    path, wcs = _fabric_capture(tmp_path, op, n=6, bad=3)
    assert [w.status for w in wcs] == [0, 0, 0, status, 5, 5]  # 5: flushed
    a = analyze(path)
    naks = [cp.frame_number for cp in read(path) if (h := cp.packet.get(AETH)) is not None and h.syndrome >> 5 == 3]
    assert [(f.kind, f.frames) for f in a.findings] == [("nak_other", naks)]
    assert nak in a.findings[0].text


def test_ackreq_unanswered_names_the_requests_the_responder_skipped(tmp_path: Path) -> None:
    """The responder answers below a request that asked for an ACK and never covers it: taken from
    a clean simulated run by dropping the ACKs of the last messages and replaying an earlier ACK
    after them.  Exactly the AckReq requests above the replayed PSN are named."""
    from rdmalab.capture import read
    from rdmalab.wire.ib import BTH

    path, wcs = _fabric_capture(tmp_path, "write", n=6)
    assert [w.status for w in wcs] == [0] * 6
    frames = list(read(path))
    acks = [cp for cp in frames if (b := cp.packet.get(BTH)) is not None and b.opcode == 0x11]
    assert len(acks) >= 4
    keep_psn = acks[-3].packet[BTH].psn  # the responder's answers stop at this PSN
    skipped = {cp.frame_number for cp in acks[-2:]}
    out = tmp_path / "skipped.pcap"
    with CaptureWriter(out) as w:
        kept = 0
        want = []
        for cp in frames:
            if cp.frame_number in skipped:
                continue
            kept += 1
            b = cp.packet.get(BTH)
            if b is not None and b.opcode != 0x11 and b.ackreq and b.psn > keep_psn:
                want.append(kept)
            w.write(cp.packet.data, seconds_to_ns(cp.timestamp))
        w.write(acks[-3].packet.data, seconds_to_ns(frames[-1].timestamp) + 1000)  # the old ACK again, last
    assert want
    found = analyze(out).of_kind("ack_coalescing")
    assert [(f.detail["anomaly"], f.frames) for f in found] == [("ackreq_unanswered", [k]) for k in want]


@pytest.mark.parametrize("seed,direction", [(5, "responses"), (11, "both")])
def test_read_losses_found_exactly_on_either_link(tmp_path: Path, seed: int, direction: str) -> None:
    """READs with READ responses (and, for "both", requests too) dropped: with the sender-side
    capture beside the arrivals, every dropped packet is one ``lost`` finding, no more, no fewer
    (the fabric is run until idle, so nothing is still in flight when the captures are cut)."""
    from rdmalab.fabric import Fabric
    from rdmalab.fabric.harness import EndpointPair
    from rdmalab.verbs import enums as e

    fab = Fabric(seed=seed, mtu=1024)
    p = EndpointPair(fab, size=1 << 20, path_mtu=e.IBV_MTU_1024)
    a_name, b_name = list(fab.devices)[:2]
    fab.set_faults(loss=0.1, src=b_name, dst=a_name)
    if direction == "both":
        fab.set_faults(loss=0.1, src=a_name, dst=b_name)
    sent_path = tmp_path / "sent.pcap"
    tap = fab.write_pcap(str(sent_path))
    for k in range(8):
        p.send(p.a, e.IBV_WR_RDMA_READ, wr_id=k, offset=k * 4096, length=4096, remote=k * 4096)
    assert [w.status for w in p.wait(p.a.cq, 8)] == [0] * 8
    p.run()
    tap.close()
    recv_path = _write_arrivals(fab, tmp_path / "arrived.pcap")
    dropped = fab.trace.of_kind("dropped")
    assert dropped
    a = analyze(recv_path, sent=sent_path)
    assert Counter((f.detail["psn"], f.detail["opcode"]) for f in a.of_kind("lost")) == \
        Counter((d.psn, d.opcode) for d in dropped)
    assert len(a.messages) == 8 and all(m.result == "ok" for m in a.messages)


def test_sent_beside_a_receivers_capture_cut_short(tmp_path: Path) -> None:
    """``--sent`` beside a receiver's capture cut mid-record: the frames before the damage analysed (the
    command failed on the damage), and no packet called lost (what was on its way when the capture stopped
    cannot be told from a loss: compared, a third of the run's packets came out lost), in words on stderr."""
    sender, receiver, _dropped = _fabric_run(tmp_path, 5, 0.05, "write")
    assert analyze(receiver, sent=sender).of_kind("lost")
    raw = receiver.read_bytes()
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(raw[:len(raw) * 2 // 3])
    a = analyze(cut, sent=sender)
    (damage,) = a.of_kind("capture_damaged")
    assert damage.detail["frames_read"] > 0 and not a.of_kind("lost")
    run = subprocess.run([sys.executable, "-m", "rdmalab", "analyze", "-q", str(cut), "--sent", str(sender)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "capture_damaged" in run.stdout, run.stderr
    assert f"--sent {sender}: no packet is called lost: the capture stops part way" in run.stderr
