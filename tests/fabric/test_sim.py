"""The simulated fabric: virtual clock, determinism, taps, pcap, and tshark's opinion of the frames."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
from pathlib import Path

import dpkt
import pytest

import rdmalab.verbs.enums as e
from rdmalab.fabric import Fabric
from rdmalab.fabric.harness import EndpointPair
from rdmalab.verbs.device import Context, get_device_list
from rdmalab.wire import decode_ethernet


def mixed_run(fab: Fabric) -> EndpointPair:
    """Every RC operation plus UD, with some loss so retransmissions and NAKs show up too."""
    p = EndpointPair(fab, timeout=9)
    p.a.mr.write(bytes(range(256)) * 40, 10240)
    p.b.recv(wr_id=1, offset=30000)
    p.send(p.a, e.IBV_WR_SEND_WITH_IMM, length=3000, imm=1)
    p.send(p.a, e.IBV_WR_RDMA_WRITE, length=5000, remote=100)
    p.b.recv(wr_id=2, offset=40000, length=0)
    p.send(p.a, e.IBV_WR_RDMA_WRITE_WITH_IMM, length=1500, remote=8000, imm=2)
    p.send(p.a, e.IBV_WR_RDMA_READ, length=4000, offset=20000, remote=100)
    p.send(p.a, e.IBV_WR_ATOMIC_FETCH_AND_ADD, length=8, offset=24000, remote=16000, compare_add=3)
    p.send(p.a, e.IBV_WR_ATOMIC_CMP_AND_SWP, length=8, offset=24008, remote=16000, compare_add=3, swap=9)
    p.b.recv(wr_id=3, offset=50000)
    p.send(p.a, e.IBV_WR_SEND_WITH_INV, length=10, invalidate=0)  # invalid rkey: NAK, flush
    p.wait(p.a.cq, 7)
    u = EndpointPair(fab, qp_type=e.IBV_QPT_UD)
    u.b.recv(length=200)
    u.send(u.a, e.IBV_WR_SEND_WITH_IMM, length=100, imm=5)
    u.wait(u.b.cq)
    fab.run()
    return p


def test_default_devices_work_out_of_the_box() -> None:
    names = [d.name.decode() for d in get_device_list()]
    assert names[:2] == ["soft0", "soft1"]
    ctx = Context(name="soft1")
    assert ctx.query_gid(1, 1).gid == "0000:0000:0000:0000:0000:ffff:0a00:0002"
    assert ctx.query_port(1).active_mtu == e.IBV_MTU_4096


def test_virtual_clock_latency_and_bandwidth() -> None:
    fab = Fabric(seed=0, latency_ns=5000, bandwidth_gbps=10.0)
    p = EndpointPair(fab)
    p.send(p.a, e.IBV_WR_RDMA_WRITE, length=1000)
    p.wait(p.a.cq)
    # Ethernet+IPv4+UDP+BTH+ICRC = 58 bytes; WRITE Only adds a RETH (16), the ACK an AETH (4);
    # each frame is serialised at 10 Gb/s, then travels 5 us
    assert fab.now_ns == int((58 + 16 + 1000) * 8 / 10) + 5000 + int((58 + 4) * 8 / 10) + 5000


def test_runs_are_deterministic() -> None:
    def run() -> list[tuple[int, str, int | None, int | None]]:
        fab = Fabric(seed=42)
        fab.set_faults(loss=0.1, duplicate=0.1, reorder=0.2)
        mixed_run(fab)
        return [(ev.time_ns, ev.kind, ev.psn, ev.opcode) for ev in fab.trace]

    assert run() == run()


def test_tap_sees_real_frames_that_agree_with_the_trace() -> None:
    fab = Fabric(seed=4)
    frames: list[bytes] = []
    fab.tap(lambda t, s, d, f: frames.append(f))
    mixed_run(fab)
    sent = fab.trace.packets()
    assert len(frames) == len(sent) > 20
    for frame, ev in zip(frames, sent, strict=True):
        pkt = decode_ethernet(frame)
        assert pkt.encap == "rocev2" and pkt.crc_status == "good" and not pkt.problems
        assert pkt.bth is not None and (pkt.bth.opcode, pkt.bth.psn) == (ev.opcode, ev.psn)
        assert ev.frame == frame


def test_frames_mode_sends_bytes_end_to_end() -> None:
    fab = Fabric(seed=4, frames=True)
    p = mixed_run(fab)
    assert p.b.mr.read(5000, 100)[:4] == bytes(range(4))


def test_pcap_tap_writes_every_frame(tmp_path: Path) -> None:
    fab = Fabric(seed=4)
    buf = io.BytesIO()
    tap = fab.write_pcap(buf)
    mixed_run(fab)
    n = tap.count
    tap.close()
    buf.seek(0)
    records = list(dpkt.pcap.Reader(buf))
    assert len(records) == n == len(fab.trace.packets())


@pytest.mark.tshark
def test_tshark_decodes_a_mixed_run_without_malformed_packets(tmp_path: Path) -> None:
    tshark = shutil.which("tshark")
    if tshark is None:
        pytest.skip("tshark is not installed")
    fab = Fabric(seed=8)
    fab.set_faults(loss=0.05, reorder=0.1)
    path = tmp_path / "mixed.pcap"
    with fab.write_pcap(str(path)):
        mixed_run(fab)
    # RPC-over-RDMA's heuristic would try (and fail) to parse our arbitrary SEND payloads as RPC.
    out = subprocess.run([tshark, "-r", str(path), "-T", "json", "--disable-protocol", "rpcordma"],
                         capture_output=True, text=True, check=True)
    packets = json.loads(out.stdout)
    frames = fab.trace.frames()
    assert len(packets) == len(frames) > 20
    for pkt, frame in zip(packets, frames, strict=True):
        layers = pkt["_source"]["layers"]
        assert "_ws.malformed" not in layers, layers
        bth = layers["infiniband"]["infiniband.bth_tree"]
        ours = decode_ethernet(frame)
        assert ours.bth is not None and ours.crc_status == "good"
        assert int(bth["infiniband.bth.opcode"]) == ours.bth.opcode
        assert int(bth["infiniband.bth.psn"]) == ours.bth.psn
        assert int(bth["infiniband.bth.destqp"], 16) == ours.bth.destqp
        assert int(bth["infiniband.bth.a"]) == ours.bth.ackreq
        assert ours.crc is not None  # Wireshark 4.0 shows the ICRC bytes as a big-endian number
        assert int(layers["infiniband"]["infiniband.invariant.crc"], 16) == int.from_bytes(
            ours.crc.to_bytes(4, "little"), "big")


def test_received_events_keep_the_sent_packet_id() -> None:
    """Packets that cross the fabric as bytes (faults on) keep their id, so a ladder diagram can
    pair each arrival with its departure."""
    from rdmalab.fabric.harness import EndpointPair

    fab = Fabric(seed=3, mtu=1024)
    fab.set_faults(loss=0.1, duplicate=0.1)
    p = EndpointPair(fab, size=16384, path_mtu=e.IBV_MTU_1024)
    p.send(p.a, e.IBV_WR_RDMA_WRITE, length=8192)
    p.wait(p.a.cq)
    sent = {ev.detail["packet_id"]: ev for ev in fab.trace.of_kind("sent")}
    received = fab.trace.of_kind("received")
    assert received and len(fab.trace.of_kind("dropped")) > 0
    for ev in received:
        src = sent[ev.detail["packet_id"]]
        assert (src.psn, src.opcode) == (ev.psn, ev.opcode)


def test_held_acks_are_flushed_device_by_device_from_the_shared_set() -> None:
    # Fabric.held_acks is one set for all its devices (carrier.py, rule 3): SoftDevice.flush sends only
    # its own device's ACKs, in QP number order, and the fabric's step flushes device by device
    fab = Fabric()
    d0, d1 = fab.add_device(), fab.add_device()
    assert d0.held_acks is fab.held_acks and d1.held_acks is fab.held_acks
    flushed: list[tuple[str, int]] = []

    class Held:
        def __init__(self, dev: object, qp_num: int) -> None:
            self.dev, self.qp_num = dev, qp_num

        def flush_ack(self) -> None:
            flushed.append((self.dev.name, self.qp_num))  # type: ignore[attr-defined]

    for dev, qpn in ((d1, 0x12), (d0, 0x13), (d1, 0x11), (d0, 0x11)):
        dev.mark_dirty(Held(dev, qpn))
    d1.flush()
    assert flushed == [("soft1", 0x11), ("soft1", 0x12)] and len(fab.held_acks) == 2
    d1.flush()  # none of its own left: the other device's stay
    assert len(flushed) == 2 and len(fab.held_acks) == 2
    for dev, qpn in ((d1, 0x12), (d1, 0x11)):
        dev.mark_dirty(Held(dev, qpn))
    flushed.clear()
    fab.schedule(0, lambda _: None)
    assert fab.step()
    assert flushed == [("soft0", 0x11), ("soft0", 0x13), ("soft1", 0x11), ("soft1", 0x12)] and not fab.held_acks
    d1.mark_dirty(Held(d1, 0x11))  # one alone
    flushed.clear()
    d0.flush()
    assert flushed == [] and len(fab.held_acks) == 1
    fab.schedule(0, lambda _: None)
    fab.step()
    assert flushed == [("soft1", 0x11)] and not fab.held_acks


def test_a_new_trace_given_to_the_fabric_gets_the_events() -> None:
    # Fabric.trace's docstring: a program may give the fabric a new Trace; what follows is recorded there
    from rdmalab.verbs.trace import Trace

    fab = Fabric(mtu=1024)
    p = EndpointPair(fab, path_mtu=e.IBV_MTU_1024)
    p.send(p.a, e.IBV_WR_RDMA_WRITE, length=5000)
    p.wait(p.a.cq)
    old = fab.trace
    seen = len(old)
    fab.trace = Trace()
    p.send(p.a, e.IBV_WR_RDMA_WRITE, length=5000, wr_id=2)  # a burst: its packets traced one by one
    p.wait(p.a.cq)
    assert seen > 10 and len(old) == seen  # nothing more went to the old trace
    kinds = [ev.kind for ev in fab.trace]
    assert kinds[0] == "posted" and kinds.count("sent") == 5 + 1 and kinds.count("received") == 5 + 1
    assert kinds[-1] == "completed" and fab.trace[-1].detail["wr_id"] == 2
