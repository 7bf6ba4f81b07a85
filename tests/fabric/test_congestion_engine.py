"""The soft verbs engine on the switched fabric: its own RDMA WRITEs are marked, answered with
CNPs by its responder (notification point) and slowed by its requester (reaction point)."""

from __future__ import annotations

from typing import Any

import dpkt
import pytest

from rdmalab.fabric.harness import EndpointPair
from rdmalab.fabric.switched import SwitchConfig, SwitchedFabric
from rdmalab.fabric.switched_carrier import SwitchedCarrier
from rdmalab.verbs import enums as e
from rdmalab.verbs.engine import cnp, dcqcn
from rdmalab.verbs.engine.dcqcn import PAPER
from rdmalab.wire import BTH, decode_ethernet
from rdmalab.wire.net import IPv4

SIZE = 1 << 20


class _View:
    """Two of the carrier's devices, as the harness's ``EndpointPair`` wants them."""

    def __init__(self, carrier: SwitchedCarrier, names: list[str]) -> None:
        self.carrier = carrier
        self.devices = {n: carrier.devices[n] for n in names}

    def step(self) -> bool:
        return self.carrier.step()

    def run(self) -> None:
        self.carrier.run()


def _incast(tmp_path: Any = None, dcqcn_on: bool = True) -> tuple[SwitchedCarrier, list[EndpointPair], Any]:
    fab = SwitchedFabric(switch=SwitchConfig(kmin=5, kmax=50, pmax=0.5), dcqcn=None)
    fab.add_switch("sw")
    car = SwitchedCarrier(fab, mtu=1024)
    for name in ("s1", "s2", "r"):
        car.add_device(name)
    tap = fab.tap("sw", "r", str(tmp_path / "engine.pcap")) if tmp_path is not None else None
    cnp.enable_np(car.devices["r"], min_time_between_cnps_us=10)
    pairs = [EndpointPair(_View(car, [s, "r"]), size=SIZE) for s in ("s1", "s2")]
    for p in pairs:
        if dcqcn_on:
            dcqcn.attach(p.a.qp, PAPER, line_gbps=40.0)
        else:
            dcqcn.ecn_only(p.a.qp)
        p.a.mr.write(bytes([p.a.qp.qp_num]) * SIZE, SIZE)
        p.send(p.a, e.IBV_WR_RDMA_WRITE, length=SIZE)
    done = [p.wait(p.a.cq) for p in pairs]
    assert [[wc.status for wc in d] for d in done] == [[e.IBV_WC_SUCCESS]] * 2
    if tap is not None:
        tap.close()
    return car, pairs, tap


def test_engine_incast_marks_cnps_and_slows_down() -> None:
    car, pairs, _ = _incast()
    fab = car.fabric
    r = car.devices["r"]
    for p in pairs:  # the data arrived intact
        assert p.b.mr.read(SIZE, 0) == bytes([p.a.qp.qp_num]) * SIZE
    assert fab.port("sw", "r").marks > 0 and fab.drops == 0
    assert r.counters["np_ecn_marked_roce_packets"] >= r.counters["np_cnp_sent"] > 0
    for p in pairs:
        lim = p.a.qp.engine.dcqcn
        sender = p.a.ctx.device
        assert sender.counters["rp_cnp_handled"] == lim.cnps > 0 and lim.cuts > 0
    # two 1 MiB WRITEs through a 40 Gb/s port: ~420 us at line rate; DCQCN's cuts make it longer
    assert fab.now > 2 * SIZE * 8 / 40.0


def test_without_the_reaction_point_cnps_do_nothing() -> None:
    car, pairs, _ = _incast(dcqcn_on=False)
    assert car.devices["r"].counters["np_cnp_sent"] > 0
    assert all(p.a.ctx.device.counters["rp_cnp_handled"] > 0 for p in pairs)
    paced, _, _ = _incast(dcqcn_on=True)
    # with nobody reacting, the two WRITEs finish as soon as the bottleneck allows; DCQCN takes longer
    assert car.fabric.now < paced.fabric.now
    assert car.fabric.port("sw", "r").qmax > paced.fabric.port("sw", "r").qmax


def test_engine_frames_on_the_wire(tmp_path) -> None:  # type: ignore[no-untyped-def]
    car, pairs, tap = _incast(tmp_path)
    with open(tmp_path / "engine.pcap", "rb") as fh:
        frames = [bytes(b) for _, b in dpkt.pcap.Reader(fh)]
    assert len(frames) == tap.count > 2 * SIZE // 1024
    senders = {p.a.qp.qp_num for p in pairs}
    ce = cnps = 0
    for fr in frames:
        if fr[12:14] == b"\x88\x08":
            continue  # a PFC frame
        pkt = decode_ethernet(fr)
        assert pkt.crc_status == "good"
        ce += pkt[IPv4].ecn == 3
        bth = pkt[BTH]
        if bth.opcode == 0x81:
            cnps += 1
            assert bth.becn and bth.psn == 0 and bth.destqp in senders and len(pkt[IPv4].encode()) == 20
    assert ce == car.fabric.port("sw", "r").marks > 0
    assert cnps == car.devices["r"].counters["np_cnp_sent"] > 0


@pytest.mark.parametrize("scope, most", [("qp", None), ("port", 1)])
def test_np_pacing_scope_in_the_engine(scope: str, most: int | None) -> None:
    fab = SwitchedFabric(switch=SwitchConfig(kmin=1, kmax=2, pmax=1.0), dcqcn=None)
    fab.add_switch("sw")
    car = SwitchedCarrier(fab, mtu=1024)
    for name in ("s1", "s2", "r"):
        car.add_device(name)
    cnp.enable_np(car.devices["r"], min_time_between_cnps_us=1000, scope=scope)
    pairs = [EndpointPair(_View(car, [s, "r"]), size=SIZE) for s in ("s1", "s2")]
    for p in pairs:
        dcqcn.ecn_only(p.a.qp)
        p.send(p.a, e.IBV_WR_RDMA_WRITE, length=65536)
    for p in pairs:
        p.wait(p.a.cq)
    sent = car.devices["r"].counters["np_cnp_sent"]
    # 1 ms between CNPs in the scope, and the run is far shorter: one per QP, or one for the port
    assert sent == (most if most is not None else 2)


@pytest.mark.parametrize(("scenario", "ms"), [("incast", 2.0), ("lossy", 3.0)])
def test_responder_fast_path_changes_nothing(scenario: str, ms: float, monkeypatch: pytest.MonkeyPatch) -> None:
    # The switched fabric hands a data packet to the responder's fast path (SoftDevice.receive_segment)
    # and to the full path (receive) only when the fast path declines: the results must be the same as
    # with the full path for every packet (the lossy scenario drops packets: go-back-N resends them).
    from rdmalab.fabric.congestion_scenarios import run_scenario
    from rdmalab.verbs.engine.node import SoftDevice

    def results() -> tuple[Any, ...]:
        res = run_scenario(scenario, duration_ms=ms)
        out = res.to_json()
        out.pop("wall_s", None)
        flows = [(f.rcvd, f.sent, f.pkts_rcvd, f.retx_bytes, f.marked, f.cnps) for f in res.fabric.flows]
        return out, flows, res.fabric.events

    taken = 0
    segment = SoftDevice.receive_segment

    def counting(self: SoftDevice, *args: Any) -> bool:
        nonlocal taken
        ok: bool = segment(self, *args)
        taken += ok
        return ok

    monkeypatch.setattr(SoftDevice, "receive_segment", counting)
    fast = results()
    assert taken > 1000
    monkeypatch.setattr(SoftDevice, "receive_segment", lambda self, *args: False)
    full = results()
    assert fast == full
    assert sum(f[2] for f in full[1]) > 1000
    if scenario == "lossy":
        assert sum(f[3] for f in full[1]) > 0  # retransmitted bytes
