"""``rdmalab analyze --counters BEFORE AFTER``: NIC counter dumps side by side with the capture."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from rdmalab.capture.analysis import parse_counters
from rdmalab.cli import Fail, build_parser

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


# ---- a real lossy capture with the kernel's own counters (made by `rdmalab capture rxe_write_bw_loss`)
LOSSY = ROOT / "captures" / "rxe_write_bw_loss.pcap"
LOSSY_CTR = ROOT / "captures" / "rxe_write_bw_loss.counters.json"


def _rows(ctr: dict | None = None) -> dict[tuple[str, str], dict]:  # type: ignore[type-arg]
    from rdmalab.capture.analysis import analyze
    from rdmalab.capture.counters import load_counters_json, rows_json, rxe_side_by_side

    rows = rxe_side_by_side(analyze(LOSSY), ctr if ctr is not None else load_counters_json(LOSSY_CTR))
    return {(r["device"], r["counter"]): r for r in rows_json(rows)}


def test_real_lossy_capture_agrees_with_both_devices_counters() -> None:
    from rdmalab.capture.analysis import analyze

    a = analyze(LOSSY)
    rows = _rows()
    # every counter of both devices is either equal to what the capture shows, explained, or local
    assert {r["status"] for r in rows.values()} <= {"agree", "explained", "not on the wire"}, \
        [r for r in rows.values() if r["status"] not in ("agree", "explained", "not on the wire")]
    naks, retrans = a.of_kind("nak_seq_err"), a.of_kind("retransmission")
    assert naks and retrans and a.of_kind("psn_gap")   # the run did lose packets
    # the responder (rxe1, server) sent one NAK per out-of-sequence run: rxe_resp.c check_psn()
    assert rows[("rxe1", "out_of_seq_request")]["value"] == len(naks) == rows[("rxe1", "out_of_seq_request")]["capture"]
    # the requester (rxe2) counted one retry per go-back-N restart, NAK- or timer-triggered
    assert rows[("rxe2", "completer_retry_err")]["value"] == len(retrans)
    assert {f.detail["trigger"] for f in retrans} <= {"nak", "timeout"}
    # the NAKs rxe2 counted are those past its completer's PSN; the others are named
    seq = rows[("rxe2", "rcvd_seq_err")]
    assert seq["value"] == seq["capture"] <= len(naks)
    # the packets: all the server received is in the capture; the client's missing ones went to netem
    assert rows[("rxe1", "rcvd_pkts")]["status"] == "agree" and rows[("rxe1", "sent_pkts")]["status"] == "agree"
    sent = rows[("rxe2", "sent_pkts")]
    assert sent["status"] == "explained" and sent["value"] > sent["capture"] and "netem on veth3 dropped" in sent["note"]
    assert rows[("rxe1", "duplicate_request")]["value"] == a.events("duplicate")


def test_a_counter_that_disagrees_is_shown_not_hidden() -> None:
    import copy

    from rdmalab.capture.counters import load_counters_json

    ctr = load_counters_json(LOSSY_CTR)
    bad = copy.deepcopy(ctr)
    bad["after"]["hw_counters"]["rxe1"]["out_of_seq_request"] += 1
    bad["after"]["netem"]["veth3"]["dropped"] = 0          # no netem drops: the missing packets are unexplained
    rows = _rows(bad)
    assert rows[("rxe1", "out_of_seq_request")]["status"] == "DIFFER"
    assert rows[("rxe2", "sent_pkts")]["status"] == "DIFFER" and "unexplained" in rows[("rxe2", "sent_pkts")]["note"]


def test_cli_counters_json(tmp_path: Path) -> None:
    out = run(["analyze", str(LOSSY), "--counters", str(LOSSY_CTR)])
    assert "Kernel counters (after - before) against the capture, device by device:" in out
    line = next(s for s in out.splitlines() if "rxe1" in s and "out_of_seq_request" in s)
    assert line.split()[4].startswith("agree")
    js = json.loads(run(["analyze", str(LOSSY), "-T", "json", "--counters", str(LOSSY_CTR)]))
    assert {r["counter"] for r in js["checks"]["rxe_counters"]} >= {"sent_pkts", "rcvd_seq_err", "completer_retry_err"}
    assert all(r["source"].startswith("rxe_") for r in js["checks"]["rxe_counters"] if r["counter"] != "*")
    with pytest.raises(Fail, match="takes NAME.counters.json or two dumps"):
        run(["analyze", str(LOSSY), "--counters", "a", "b", "c"])
    notjson = tmp_path / "x.counters.json"
    notjson.write_text('{"server": {}}')
    with pytest.raises(Fail, match="x.counters.json: no 'client' entry"):
        run(["analyze", str(LOSSY), "--counters", str(notjson)])
