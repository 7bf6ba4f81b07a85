"""The switched fabric against published congestion results, and its frames against tshark.

Published figures: the DCQCN author's ns3-rdma sample (bobzhuyb/ns3-rdma, its README and ``mix/topology.txt``)
(2:1 incast at 40 Gb/s: two flows at about 20 Gb/s each, queue between Kmin and Kmax, no PFC
needed) and the DCQCN-validation victim-flow run (F1's rate cut although F1 is not in the
incast; link P2-P1 under-used for 16 ms).
"""

from __future__ import annotations

import json
import subprocess

import pytest
from tshark_util import requires_tshark, tshark_path

from rdmalab.cli import main
from rdmalab.fabric.congestion_scenarios import HEADER_OVERHEAD, build, flow_table, run_scenario
from rdmalab.fabric.switched import CE, HEADER_BYTES, SwitchedFabric
from rdmalab.fabric.switched_carrier import SwitchedCarrier
from rdmalab.verbs.engine.cnp import CnpPacer
from rdmalab.verbs.engine.dcqcn import PAPER, RateLimiter
from rdmalab.verbs.engine.requester import WINDOW
from rdmalab.wire import BTH, decode_ethernet
from rdmalab.wire.net import IPv4
from rdmalab.wire.pfc import decode_pfc_frame, is_pfc_frame


@pytest.fixture(scope="module")
def incast() -> dict:  # type: ignore[type-arg]
    return run_scenario("incast", senders=2, rate=40.0, duration_ms=60.0).to_json()


def test_incast_2to1_converges_to_fair_share(incast: dict) -> None:  # type: ignore[type-arg]
    fair = 40.0 * HEADER_OVERHEAD / 2  # payload goodput of half the link
    rates = [f["goodput_gbps"] for f in incast["flows"]]
    assert all(abs(r - fair) < 0.15 * fair for r in rates), rates
    assert sum(rates) > 0.95 * 2 * fair  # the bottleneck stays busy
    assert incast["pauses"] == 0 and incast["drops"] == 0  # DCQCN keeps PFC idle
    q = incast["queues"][0]
    assert q["max_kb"] < 1000.0  # below Kmax
    assert q["mean_kb"] > 40.0 / 2  # it sits around Kmin, not empty
    assert q["share_empty"] < 0.1


def test_without_dcqcn_the_rc_window_or_pfc_does_the_work() -> None:
    # Without DCQCN each QP sends as fast as its RC window allows (128 PSNs unacknowledged, rxe's
    # RXE_MAX_UNACKED_PSNS): two windows are all the queue can ever hold, far below the dynamic
    # XOFF threshold of a 12 MB buffer, so PFC never fires
    res = run_scenario("incast", senders=2, duration_ms=5.0, settings={"dcqcn": "0"}).to_json()
    window_kb = WINDOW * (1024 + HEADER_BYTES) / 1024
    assert res["pauses"] == 0 and res["drops"] == 0 and res["cnps"] == 0 and res["marks"] == 0
    assert 0.5 * window_kb < res["queues"][0]["max_all_kb"] <= 2 * window_kb
    # with a fixed XOFF below a window, PFC does the work: pauses, no drops, no CNPs
    res = run_scenario("incast", senders=2, duration_ms=5.0, settings={"dcqcn": "0", "pfc_xoff": "50"}).to_json()
    assert res["pauses"] > 0 and res["drops"] == 0 and res["cnps"] == 0
    assert res["queues"][0]["max_all_kb"] < 2 * 50 + 20  # each ingress stops near its XOFF (plus headroom)
    assert res["queues"][0]["paused_ms"] == 0.0  # the receiver never pauses the switch
    fair = 40.0 * HEADER_OVERHEAD / 2
    assert all(abs(f["goodput_gbps"] - fair) < 0.1 * fair for f in res["flows"])


def test_same_seed_same_run() -> None:
    a = run_scenario("incast", senders=3, duration_ms=3.0).to_json()
    b = run_scenario("incast", senders=3, duration_ms=3.0).to_json()
    for k in ("flows", "queues", "marks", "cnps", "events"):
        assert a[k] == b[k]


def test_victim_flow() -> None:
    res = run_scenario("victim", duration_ms=30.0)
    fab = res.fabric
    f1 = fab.flows[0]
    assert "P2" in [p.node.name for p in f1.fwd.values()] and f1.dst.name == "R1"
    v = res.to_json()["victim"]
    # F1 does not go to R2, yet its DCQCN rate falls after the incast starts at 3 ms, below anything
    # it had in the millisecond before.  (How far is up to the seed: over seeds 1..6 the lowest rate
    # is 32 to 64 % of the mean of that millisecond on integer ns, 31 to 67 % on the float ns the
    # fabric had before; below 30 % of the sample before was seed 1 on float ns alone, hence 60 %.)
    i = next(k for k, t in enumerate(fab.samples) if t >= 3_000_000)
    assert v["f1_rate_min_gbps"] < 0.6 * v["f1_rate_before_gbps"]
    ms = 1_000_000 // fab.sample_ns
    assert v["f1_rate_min_gbps"] < min(row[0] for row in fab.rate_series[i - ms:i])
    assert v["f1_cnps"] > 0 and v["p1_p2_paused_ms"] > 0
    # the P1->P2 link is under-used for a time of the order DCQCN-validation reports (16 ms)
    assert v["underused_ms"] is not None and 5.0 < v["underused_ms"] < 40.0


def test_deadlock_needs_the_cycle() -> None:
    dead = run_scenario("deadlock", duration_ms=4.0).to_json()["deadlock"]
    assert dead["deadlocked"] and len(dead["ring_ports_paused_with_data"]) == 3
    live = run_scenario("deadlock", duration_ms=4.0, settings={"routing": "shortest"}).to_json()
    assert not live["deadlock"]["deadlocked"] and live["pauses"] == 0
    assert all(f["goodput_gbps"] > 30 for f in live["flows"])


def test_dcqcn_limiter_steps() -> None:
    timers: list = []  # type: ignore[type-arg]
    lim = RateLimiter(PAPER, 40.0, lambda d, fn, arg: timers.append((d, fn, arg)))
    lim.on_cnp(0)
    assert lim.alpha == 1.0 and lim.rate == pytest.approx(20.0) and lim.target == 40.0  # RC(1 - alpha/2)
    inc = [t for t in timers if t[1] == lim._inc_timer][-1]
    assert inc[0] == 55_000  # the 55 us timer
    inc[1](inc[2])  # fast recovery: RC <- (RT + RC) / 2
    assert lim.rate == pytest.approx(30.0)
    alpha = [t for t in timers if t[1] == lim._alpha_timer][0]
    alpha[1](alpha[2])  # no CNP in the period: alpha <- (1 - g) alpha
    assert lim.alpha == pytest.approx(1 - 1 / 256)


def test_cnp_pacing_scopes() -> None:
    for scope, expected in (("qp", 4), ("ip_pair", 2), ("port", 1)):
        p = CnpPacer(50_000, scope)
        sent = sum(p.on_ce(0, ip, 99, qpn) for ip, qpn in ((1, 0x11), (1, 0x12), (2, 0x11), (2, 0x13)))
        assert sent == expected, scope
        assert p.on_ce(49_999, 1, 99, 0x11) is False and p.on_ce(50_000, 1, 99, 0x11) is True


def test_bad_parameters() -> None:
    with pytest.raises(KeyError, match="nonsense"):
        build("incast", settings={"nonsense": "1"})
    with pytest.raises(ValueError, match="scope"):
        SwitchedFabric(cnp_scope="qp").add_host("a").pacer.__class__(1, "rack")
    with pytest.raises(ValueError, match="scope"):
        SwitchedFabric(cnp_scope="rack").add_host("a")
    with pytest.raises(ValueError, match="path MTU.*1000"):
        build("incast", settings={"payload": "1000"})
    with pytest.raises(ValueError, match="qp_timeout"):
        SwitchedFabric(qp_timeout=40)
    with pytest.raises(ValueError, match="depth"):
        SwitchedFabric(depth=0)
    fab = SwitchedFabric()
    with pytest.raises(ValueError, match="path MTU of 1024"):
        SwitchedCarrier(fab, mtu=2048)
    sw = fab.add_switch("sw")
    a = fab.add_host("a")
    fab.link(a, sw)
    with pytest.raises(ValueError, match="two hosts"):
        fab.add_flow(a, a)
    b = fab.add_host("b")
    with pytest.raises(ValueError, match="linked"):
        fab.add_flow(a, b)
    fab.link(b, sw)
    with pytest.raises(ValueError, match="size"):
        fab.add_flow(a, b, size=0)


def test_acks_go_ahead_of_queued_requests() -> None:
    # Two flows in opposite directions, no DCQCN: each NIC's queue holds up to a window of its own
    # requests, and the ACKs for the other flow go out ahead of them (rxe's responder and requester
    # are separate tasks), so both flows run at line rate instead of waiting a window for each ACK
    fab = SwitchedFabric(dcqcn=None)
    sw = fab.add_switch("sw")
    a, b = fab.add_host("a"), fab.add_host("b")
    fab.link(a, sw)
    fab.link(b, sw)
    fab.add_flow(a, b)
    fab.add_flow(b, a)
    fab.watch = [fab.port("sw", "b")]
    fab.run(2000)
    line = 40.0 * HEADER_OVERHEAD
    assert all(r["goodput_gbps"] > 0.97 * line for r in flow_table(fab)), flow_table(fab)


def _capture(tmp_path) -> tuple:  # type: ignore[no-untyped-def,type-arg]
    import dpkt

    path = tmp_path / "incast.pcap"
    res = run_scenario("incast", senders=2, duration_ms=1.5, capture=str(path), settings={"kmin": "5", "kmax": "50",
                                                                                "pfc_xoff": "30"})
    with open(path, "rb") as fh:
        frames = [bytes(buf) for _, buf in dpkt.pcap.Reader(fh)]
    return res, frames, path


def test_capture_frames_are_real(tmp_path) -> None:  # type: ignore[no-untyped-def]
    res, frames, _ = _capture(tmp_path)
    fab = res.fabric
    assert len(frames) == res.extra["captured_frames"] > 100
    ce = cnps = pauses = 0
    qpns = {f.qpn_src for f in fab.flows}
    for fr in frames:
        if is_pfc_frame(fr):
            pauses += 1
            assert decode_pfc_frame(fr).paused().keys() == {3}
            continue
        pkt = decode_ethernet(fr)
        assert pkt.crc_status == "good"  # marking rewrote TOS: the ICRC still holds
        ip = pkt[IPv4]
        assert ip.with_checksum().checksum == ip.checksum
        bth = pkt[BTH]
        if ip.ecn == CE:
            ce += 1
        if bth.opcode == 0x81:
            cnps += 1
            assert bth.becn == 1 and bth.psn == 0 and bth.destqp in qpns and len(fr) - 42 == 32
    port = fab.watch[0]  # sw->recv: data leaves marked, CNPs come back on it
    assert ce == port.marks > 0
    assert cnps == fab.cnps > 0
    assert pauses == 0 or pauses == sum(p.pause_tx + p.resume_tx for p in (port, port.peer))


@requires_tshark
@pytest.mark.tshark
def test_tshark_reads_the_capture(tmp_path) -> None:  # type: ignore[no-untyped-def]
    res, frames, path = _capture(tmp_path)
    tool = tshark_path()
    assert tool is not None

    def count(flt: str) -> int:
        out = subprocess.run([tool, "-r", str(path), "-Y", flt, "-T", "fields", "-e", "frame.number"],
                             capture_output=True, text=True, check=True).stdout
        return len(out.split())

    assert count("") == len(frames)
    assert count("ip.dsfield.ecn == 3") == res.fabric.watch[0].marks
    assert count("infiniband.bth.opcode == 0x81") == res.fabric.cnps  # Wireshark 4.0 has no BECN field
    out = subprocess.run([tool, "-r", str(path), "-Y", "infiniband.bth.opcode == 0x81", "-T", "fields", "-e",
                          "infiniband.bth.destqp", "-e", "infiniband.bth.psn"], capture_output=True, text=True,
                         check=True).stdout
    qpns = {f.qpn_src for f in res.fabric.flows}
    for line in out.splitlines():
        qp, psn = line.split("\t")
        assert int(qp, 0) in qpns and int(psn) == 0
    assert count("infiniband.bth.opcode == 17") > 0  # ACKs
    assert count("macc.opcode == 0x0101") == sum(1 for f in frames if is_pfc_frame(f))


def test_cli_json_and_errors(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["simulate", "incast", "--duration", "2", "-T", "json", "-q"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["flows"]) == 2 and all("goodput_gbps" in f for f in data["flows"])
    assert main(["simulate", "incast", "--set", "foo=1", "--set", "kmin=3", "--set", "bar=2", "-q"]) == 1
    err = capsys.readouterr().err
    assert "bar, foo" in err and "kmin" not in err
    assert main(["simulate", "fairness", "--senders", "0", "-q"]) == 1
    assert "senders" in capsys.readouterr().err
    assert main(["simulate", "incast", "--set", "kmin", "-q"]) == 1
    assert "NAME=VALUE" in capsys.readouterr().err


def test_rdmalab_analyze_reads_the_capture(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    res, frames, path = _capture(tmp_path)
    assert main(["analyze", "-r", str(path), "-T", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["packets"] == len(frames)
    assert report["counts"]["ecn_ce"] == res.fabric.watch[0].marks
    assert report["counts"]["cnp"] == res.fabric.cnps
    assert len(report["connections"]) == len(res.fabric.flows)
    assert not report["counts"].get("bad_icrc")


def test_pfc_alone_blocks_the_victim_only_while_the_incast_lasts() -> None:
    from rdmalab.fabric.congestion_scenarios import link_throughput

    fab = run_scenario("victim", duration_ms=6.0, settings={"dcqcn": "0"}).fabric
    # pauses propagate: P2 pauses P1, and P1 pauses the hosts feeding it
    assert fab.paused_time_ns(fab.port("P1", "P2")) > 0 and fab.paused_time_ns(fab.port("H1", "P1")) > 0
    assert fab.port("P2", "R1").marks == 0 and fab.flows[0].cnps == 0 and fab.drops == 0
    ts, gb = link_throughput(fab, [0], 250.0)  # F1 alone, 250 us windows
    before = [g for t, g in zip(ts, gb, strict=True) if 1.0 <= t < 3.0]
    during = [g for t, g in zip(ts, gb, strict=True) if 3.25 <= t < 4.25]
    after = [g for t, g in zip(ts, gb, strict=True) if t >= 5.0]
    base = sum(before) / len(before)
    # head-of-line blocked behind R2's incast: under 30 % over the incast's millisecond.  (Not in every
    # 250 us window: which window lets a burst of F1 through depends on the phase of the pauses, and a
    # few ns move it: with 1 us links one window reaches 31 % on integer ns, with 1.005 us 29 % on float
    # ns; the other windows stay at 11 to 19 %.)
    assert sum(during) / len(during) < 0.3 * base and max(during) < 0.4 * base
    assert min(after) > 0.9 * base  # and back at once: no rate control to recover


@pytest.mark.slow
def test_fairness_late_joiners_get_their_share() -> None:
    # 40 ms: the last joiner arrives at 15 ms; the first flow, cut to a few Gb/s when the third and
    # fourth join, climbs back by R_AI = 40 Mb/s per 60 us timer, which takes longer than 10 ms
    res = run_scenario("fairness", senders=4, duration_ms=40.0)
    starts = [f.start for f in res.fabric.flows]
    assert starts == sorted(starts) and starts[-1] == 15e6  # one joins every 5 ms
    rates = [f["goodput_gbps"] for f in res.to_json()["flows"]]
    jain = sum(rates) ** 2 / (len(rates) * sum(r * r for r in rates))
    assert jain > 0.95 and min(rates) > 0.5 * 40.0 * HEADER_OVERHEAD / 4, rates
