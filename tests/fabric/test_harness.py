"""The two-endpoint harness of the fabric layer, and the notebooks' Pair built on it."""

from __future__ import annotations

from pathlib import Path

import rdmalab.verbs.enums as e
from rdmalab.capture import read
from rdmalab.fabric.harness import EndpointPair
from rdmalab.lab.pair import Pair as LabPair
from rdmalab.wire.opcodes import OPCODES


def test_recorded_frames_decode_and_round_trip_through_a_pcap(tmp_path: Path) -> None:
    p = EndpointPair(record_frames=True, psn=(10, 20))
    p.b.recv(length=100)
    p.send(p.a, e.IBV_WR_SEND, length=100)
    assert [wc.status for wc in p.wait(p.b.cq)] == [e.IBV_WC_SUCCESS]
    p.run()
    pkts = p.packets()
    assert [OPCODES[pk.bth.opcode].name for pk in pkts if pk.bth] == ["RC SEND Only", "RC Acknowledge"]
    assert all(pk.crc_status == "good" for pk in pkts) and pkts[0].bth and pkts[0].bth.psn == 10
    p.write_pcap(str(tmp_path / "pair.pcap"))
    assert [cp.packet.data for cp in read(tmp_path / "pair.pcap")] == [pk.data for pk in pkts]


def test_the_notebook_pair_is_the_harness_with_fixed_psns_and_every_frame_recorded() -> None:
    lab = LabPair(mtu=2048, max_wr=8)
    assert isinstance(lab, EndpointPair) and (lab.a.psn, lab.b.psn) == (100, 500)
    assert lab.a.qp.engine.mtu == 2048 and lab.a.cq.cqe == 32 and lab.a.qp.engine.sq_sig_all
    lab.a.mr.write(b"x" * 4000, 4000)
    lab.send(lab.a, e.IBV_WR_RDMA_WRITE, length=4000)
    assert lab.a.poll() is not None
    assert len(lab.packets()) == len(lab.frames) >= 2  # recorded because the notebooks show them
