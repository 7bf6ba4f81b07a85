"""DCQCN without PFC under incast: drops, and the engine's go-back-N recovering them.

Published results this is compared with (docs/congestion.md, "DCQCN without PFC"):

* RoCE's loss recovery is go-back-N: on a NAK the sender resends every packet sent after the
  last acknowledged one (IBA vol 1 9.7.5.2.x; Mittal et al., "Revisiting Network Support for
  RDMA", SIGCOMM 2018, section 2), and the paper's finding is that RoCE needs PFC's
  lossless fabric to perform well.
* Wang et al., "Error Recovery of RDMA Packets in Data Center Networks" (ICCCN 2019): with
  go-back-N the receiver NAKs a gap once, so a lost resend waits for the retransmission timeout,
  and the relative throughput collapses as losses grow.

Tolerances, stated: with PFC off the incast drops, every byte still arrives intact, more packets
are resent than were dropped (go-back-N), and the incast takes longer than on the same switch
with PFC on (goodput at most 95 % of the lossless run); on a buffer too shallow for the first
burst, timeouts appear and the goodput falls below half of the lossless run's.
"""

from __future__ import annotations

import dpkt
import pytest

from rdmalab.fabric.congestion_scenarios import run_scenario
from rdmalab.wire import BTH, decode_ethernet
from rdmalab.wire.ib import AETH


@pytest.fixture(scope="module")
def lossless() -> dict:  # type: ignore[type-arg]
    return run_scenario("lossy", duration_ms=20.0, settings={"pfc": "1"}).to_json()


def test_dcqcn_without_pfc_drops_and_go_back_n_recovers(lossless: dict) -> None:  # type: ignore[type-arg]
    res = run_scenario("lossy", duration_ms=20.0)
    d = res.to_json()
    loss = d["loss"]
    assert d["pauses"] == 0 and loss["drops"] > 0 and loss["data_drops"] > 0
    assert loss["flows_done"] == loss["flows"] == 16 and loss["intact"]  # every byte arrived, in place
    assert loss["naks"] > 0 and loss["out_of_sequence"] > 0  # gaps seen, NAKed, later packets discarded
    # go-back-N: more is resent than was lost (the packets after each gap, which the receiver discarded)
    assert loss["retransmitted_packets"] > loss["data_drops"]
    assert loss["retransmitted_kb"] * 1024 == d["retransmitted_bytes"] == sum(f.retx_bytes for f in res.fabric.flows)
    counted = sum(h.device.counters["completer_retry_err"] for h in res.fabric.hosts)
    assert counted == loss["naks"] + loss["timeouts"] > 0
    # the same incast on the same switch with PFC on: no drop, no resend, and it is done sooner
    ref = lossless["loss"]
    assert lossless["drops"] == 0 and lossless["pauses"] > 0 and ref["retransmitted_kb"] == 0 and ref["intact"]
    assert ref["flows_done"] == 16
    assert loss["last_done_ms"] > ref["last_done_ms"]
    assert loss["goodput_gbps"] <= 0.95 * ref["goodput_gbps"], (loss, ref)


def test_a_shallow_buffer_makes_go_back_n_collapse(lossless: dict) -> None:  # type: ignore[type-arg]
    loss = run_scenario("lossy", duration_ms=20.0, settings={"buffer": "0.15"}).to_json()["loss"]
    assert loss["timeouts"] > 0  # lost resends wait for the 4.2 ms timer (one NAK per gap)
    assert loss["retransmitted_share"] > 0.1
    assert loss["goodput_gbps"] < 0.5 * lossless["loss"]["goodput_gbps"], loss


def test_the_capture_shows_the_drop_and_the_resend(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "lossy.pcap"
    res = run_scenario("lossy", senders=6, duration_ms=3.0, settings={"buffer": "0.15", "flow_kb": "512"},
              capture=str(path))
    fab = res.fabric
    assert res.extra["loss"]["data_drops"] > 0
    with open(path, "rb") as fh:
        frames = [bytes(b) for _, b in dpkt.pcap.Reader(fh)]
    seen: dict[tuple[int, int], int] = {}
    naks = resent = 0
    for fr in frames:
        if fr[12:14] == b"\x88\x08":
            continue
        pkt = decode_ethernet(fr)
        assert pkt.crc_status == "good"
        bth = pkt[BTH]
        if bth.opcode == 0x11 and pkt[AETH].is_nak:
            naks += 1
        elif bth.opcode < 0x11:
            key = (bth.destqp, bth.psn)
            resent += key in seen
            seen[key] = seen.get(key, 0) + 1
    # the tapped link is the receiver's: it carries every request that got through, resends included,
    # and the NAKs going back
    assert naks >= sum(h.device.counters["rcvd_seq_err"] for h in fab.hosts) > 0  # a NAK can be dropped too
    assert resent > 0


def test_random_loss_makes_go_back_n_collapse_above_one_percent() -> None:
    # Wang et al. (ICCCN 2019): with go-back-N the relative throughput is nearly zero once the loss
    # rate exceeds 1 %.  One flow, no DCQCN, the switch dropping requests at random (--set loss=P).
    def goodput(loss: str) -> float:
        fab = run_scenario("incast", senders=1, duration_ms=20.0, settings={"loss": loss, "dcqcn": "0"}).fabric
        assert loss == "0" or fab.drops > 0
        return fab.flows[0].rcvd * 8 / 20e6

    clean = goodput("0")
    assert clean > 0.99 * 40 * 1024 / 1082
    assert goodput("0.001") > 0.8 * clean  # a loss in a thousand costs a tenth
    assert goodput("0.02") < 0.1 * clean  # two in a hundred: nearly nothing gets through
