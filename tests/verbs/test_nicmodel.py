"""The NIC cost model (rdmalab.verbs.engine.nicmodel): off, it costs nothing; on, the papers' orderings
come out of measurements in virtual time (rdmalab.fabric.nicbench), never from its constants."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

import rdmalab.verbs.enums as e
from rdmalab.cli import main
from rdmalab.fabric import Fabric, default_fabric, reset_default_fabric
from rdmalab.fabric import nicbench as nb
from rdmalab.fabric.harness import EndpointPair
from rdmalab.lab.pair import SoftPair
from rdmalab.verbs.device import Context
from rdmalab.verbs.engine.nicmodel import NicModel, attach, by_name
from rdmalab.verbs.engine.packet import ROCE_OVERHEAD
from rdmalab.verbs.pyverbs_error import PyverbsRDMAError

CX3 = NicModel.connectx3()
N = 1200  # messages per rate measurement


def _wire_ns(nbytes: int, gbps: float) -> int:
    return int(nbytes * 8 / gbps)


def test_off_costs_links_only() -> None:
    """Without a model one signaled 32-byte WRITE takes exactly the links' time: the WRITE packet's and the
    ACK's serialisation plus two link latencies (computed here from the frame sizes, not read from the engine);
    posting, fetching and completing cost nothing, as before the model existed."""
    link = 56.0
    reth, aeth = 8 + 4 + 4, 4  # IBA Vol 1 9.3.3: RETH = VA, R_Key, DMA length; AETH = syndrome + MSN
    write = _wire_ns(ROCE_OVERHEAD + reth + 32, link)
    ack = _wire_ns(ROCE_OVERHEAD + aeth, link)
    assert nb.latency(None, size=32, samples=5) == write + ack + 2 * 1000
    bed = nb.Testbed(None)
    assert bed.nics == [None, None]


def test_on_costs_more_and_counts() -> None:
    """With the model one WRITE takes longer than the links alone, and the NIC's counters show what it did."""
    off = nb.latency(None, size=32, samples=5)
    on = nb.latency(CX3, size=32, samples=5)
    assert on > off + CX3.pcie_rtt_ns  # at least the WQE fetch's round trip
    bed = nb.Testbed(CX3)
    bed.client[0].post_send(bed.wr("write", 32, 7, e.IBV_SEND_SIGNALED))
    n, wcs = bed.ccq.poll(1)
    assert n == 1 and wcs[0].wr_id == 7 and wcs[0].status == e.IBV_WC_SUCCESS
    client, server = bed.nics
    assert client is not None and server is not None
    assert (client.stats["doorbells"], client.stats["wqes"], client.stats["cqes"]) == (1, 1, 1)
    assert client.stats["dma_reads"] >= 2  # the WQE and its payload (plus first-touch cache misses)
    assert server.stats["dma_write_bytes"] >= 32  # the payload placed


def test_detached_model_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """attach(dev, None) takes the model away: the same run on a fabric whose devices had a model and lost
    it measures exactly as on one that never had one."""
    plain = nb.rate(None, messages=300)
    saved = nb.Testbed.__init__

    def detached(self: nb.Testbed, model: NicModel | None, **kw: object) -> None:
        saved(self, CX3, **kw)  # type: ignore[arg-type]
        for dev in self.fabric.devices.values():
            attach(dev, None)

    monkeypatch.setattr(nb.Testbed, "__init__", detached)
    again = nb.rate(None, messages=300)
    assert again.ns == plain.ns


def test_inline_beats_non_inline_for_small_messages() -> None:
    """Kalia et al. ATC'16 §3.2 (and HERD §3, Fig. 2): inlining a small payload saves the NIC its DMA read,
    so both the message rate and the latency improve."""
    plain = nb.rate(CX3, size=32, messages=N)
    inline = nb.rate(CX3, size=32, inline=True, messages=N)
    assert inline.mops > 1.05 * plain.mops
    assert nb.latency(CX3, size=32, inline=True, samples=5) < nb.latency(CX3, size=32, samples=5)


def test_inline_not_for_large_messages() -> None:
    """Beyond max_inline a payload cannot be inlined (post_send refuses it), and a large message already
    runs near the link's rate without it: there is nothing left for inlining to win."""
    bed = nb.Testbed(CX3)
    with pytest.raises(PyverbsRDMAError, match="max_inline_data"):
        bed.client[0].post_send(bed.wr("write", CX3.max_inline + 1, 1, e.IBV_SEND_SIGNALED | e.IBV_SEND_INLINE))
    big = nb.rate(CX3, size=16384, messages=150)
    assert big.gbps > 0.8 * CX3.link_gbps


def test_doorbell_batching_raises_the_message_rate() -> None:
    """Kalia et al. §3.1: one doorbell (and one DMA read of the WQEs) per chain of 16 instead of per WQE."""
    single = nb.rate(CX3, batch=1, messages=N)
    batched = nb.rate(CX3, batch=16, messages=N)
    assert batched.mops > 1.15 * single.mops
    bed_counts = []
    for batch in (1, 16):
        bed = nb.Testbed(CX3)
        chain = [bed.wr("write", 32, i, e.IBV_SEND_SIGNALED if i == batch - 1 else 0) for i in range(batch)]
        for a, b in zip(chain, chain[1:], strict=False):
            a.next_wr = b
        bed.client[0].post_send(chain[0])
        assert bed.ccq.poll(1)[0] == 1
        nic = bed.nics[0]
        assert nic is not None
        bed_counts.append(nic.stats["doorbells"])
    assert bed_counts == [1, 1]  # one doorbell per post_send call, whatever the chain's length


def test_unsignaled_completions_raise_the_message_rate() -> None:
    """Kalia et al. ATC'16 §2.2.1 and §3.2: one signaled WQE in 16 writes one CQE in 16."""
    signaled = nb.rate(CX3, signal_every=1, messages=N)
    selective = nb.rate(CX3, signal_every=16, messages=N)
    assert selective.mops > 1.05 * signaled.mops


def test_throughput_falls_once_qp_contexts_outgrow_the_cache() -> None:
    """Kalia et al. ATC'16 §3.5 (after FaRM) / HERD §3 Fig. 6: with more active QPs than the NIC caches contexts for, every
    WQE misses and waits for its context over PCIe.  The same 64 QPs run slower with a 16-entry cache than
    with a 128-entry one, and with the small cache 64 QPs run slower than 8."""
    small = CX3.replace(qp_cache=16)
    large = CX3.replace(qp_cache=128)
    fits = nb.rate(small, qps=8, depth=8, messages=1024)
    spills = nb.rate(small, qps=64, depth=8, messages=1024)
    roomy = nb.rate(large, qps=64, depth=8, messages=1024)
    assert spills.mops < 0.9 * fits.mops
    assert spills.mops < 0.9 * roomy.mops


def test_staged_wqes_count_against_the_send_queue() -> None:
    """WQEs the NIC is still fetching occupy the send queue: posting past max_send_wr fails as without a model."""
    bed = nb.Testbed(CX3, depth=4)
    for i in range(4):
        bed.client[0].post_send(bed.wr("write", 32, i, e.IBV_SEND_SIGNALED))
    with pytest.raises(PyverbsRDMAError, match="send queue is full"):
        bed.client[0].post_send(bed.wr("write", 32, 9, e.IBV_SEND_SIGNALED))


def test_model_parameters_are_checked() -> None:
    with pytest.raises(ValueError, match="NicModel.processing_units"):
        CX3.replace(processing_units=0)
    with pytest.raises(ValueError, match="NicModel.pcie_rtt_ns"):
        NicModel(pcie_rtt_ns=-1)
    with pytest.raises(TypeError, match="NicModel.qp_cache"):
        CX3.replace(qp_cache="many")
    with pytest.raises(TypeError, match="Fabric\\(nic=...\\)"):
        Fabric(nic="connectx3")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown NIC model 'cx9'.*connectx3"):
        by_name("cx9")
    assert by_name("ConnectX-3") == CX3
    assert Fabric(nic=CX3).add_device().nic is not None


def _mpps(text: str) -> float:
    line = [ln for ln in text.splitlines() if ln.strip().startswith("32 ")][0]
    return float(line.split()[4])


def test_perftest_reports_virtual_time_under_the_model(capsys: pytest.CaptureFixture[str]) -> None:
    """``rdmalab perftest write --nic connectx3``: perftest's report in virtual time; -l 16 (post lists,
    one doorbell per 16) reports a higher message rate than -l 1, both measured; -l without --nic stays refused."""
    assert main(["perftest", "write", "--nic", "connectx3", "-s", "32", "-n", "600"]) == 0
    single = capsys.readouterr().out
    assert "NIC model ConnectX-3" in single and "MsgRate[Mpps]" in single
    assert main(["perftest", "write", "--nic", "connectx3", "-s", "32", "-n", "600", "-l", "16", "-Q", "16"]) == 0
    batched = capsys.readouterr().out
    assert _mpps(batched) > 1.1 * _mpps(single)
    assert main(["perftest", "write", "-l", "4", "10.0.0.1"]) != 0
    assert "-l (post lists) is not supported" in capsys.readouterr().err
    assert main(["perftest", "write", "--nic", "cx9"]) != 0
    assert "unknown NIC model 'cx9'" in capsys.readouterr().err


@pytest.mark.parametrize("trace", [False, True], ids=["untraced", "traced"])
def test_operations_do_the_same_under_the_model(trace: bool) -> None:
    """The model changes timing, not results: a multi-packet WRITE, a SEND, a READ and an atomic give the
    same bytes and completions with it as without it, traced (packet by packet) or not (bursts)."""
    results = []
    for model in (None, CX3):
        p = EndpointPair(fabric=Fabric(seed=3, trace=trace, nic=model))
        p.a.mr.write(bytes(range(256)) * 16, 4096)
        p.b.mr.write(b"\x07" * 4096, 4096, 8192)
        p.b.recv(wr_id=5, offset=16384, length=4096)
        p.send(p.a, e.IBV_WR_RDMA_WRITE, wr_id=1, length=4096, remote=0)
        p.send(p.a, e.IBV_WR_SEND, wr_id=2, offset=100, length=3000)
        p.send(p.a, e.IBV_WR_RDMA_READ, wr_id=3, offset=20000, length=2500, remote=8192)
        p.send(p.a, e.IBV_WR_ATOMIC_FETCH_AND_ADD, wr_id=4, offset=30000, length=8, remote=40000, compare_add=9)
        got = p.wait(p.a.cq, 4)
        recv = p.wait(p.b.cq, 1)
        results.append(([(w.wr_id, w.status, w.opcode, w.byte_len) for w in got],
                        [(w.wr_id, w.status, w.byte_len) for w in recv],
                        p.b.mr.read(4096, 0), p.b.mr.read(3000, 16384), p.a.mr.read(2500, 20000),
                        p.b.mr.read(8, 40000), p.fabric.now_ns))
    (ops0, recv0, *data0, t0), (ops1, recv1, *data1, t1) = results
    assert ops0 == ops1 and [s for _, s, *_ in ops1] == [e.IBV_WC_SUCCESS] * 4
    assert recv0 == recv1 == [(5, e.IBV_WC_SUCCESS, 3000)]
    assert data0 == data1
    assert t1 > t0  # (and it took longer)


def test_the_labs_soft_pair_takes_the_model() -> None:
    """SoftPair(nic=...): the notebooks' pair on the model; one WRITE takes longer than without it."""
    took = []
    for model in (None, CX3):
        pair = SoftPair(seed=2, nic=model)
        assert [d.nic is not None for d in pair.fabric.devices.values()] == [model is not None] * 2
        t0 = pair.fabric.now_ns
        pair.send(pair.a, e.IBV_WR_RDMA_WRITE, length=64)
        assert pair.wait(pair.a.cq, 1)[0].status == e.IBV_WC_SUCCESS
        took.append(pair.fabric.now_ns - t0)
    assert took[1] > took[0] + CX3.pcie_rtt_ns


def test_attach_to_a_fabric_without_a_model() -> None:
    """nicmodel.attach on the devices of a Fabric() made without a model times the wire as Fabric(nic=) does."""
    took = []
    for how in ("fabric", "attach"):
        fabric = Fabric(seed=4, trace=False, nic=CX3 if how == "fabric" else None)
        fabric.add_device(), fabric.add_device()
        if how == "attach":
            assert not fabric.timed
            for dev in fabric.devices.values():
                attach(dev, CX3)
            assert fabric.timed
        p = EndpointPair(fabric=fabric)
        t0 = fabric.now_ns
        p.send(p.a, e.IBV_WR_RDMA_WRITE, length=64)
        assert p.wait(p.a.cq, 1)[0].status == e.IBV_WC_SUCCESS
        took.append(fabric.now_ns - t0)
    assert took[0] == took[1]


def test_pyverbs_programs_on_the_default_fabric_take_the_model() -> None:
    """A pyverbs program that opens devices by name (``Context(name="soft0")``: the default fabric) runs
    under the model once the default fabric is one with a model; the virtual clock shows what its WRITE cost."""
    took = []
    try:
        for model in (None, CX3):
            fab = Fabric(nic=model, trace=False)
            fab.add_device("soft0", "10.0.0.1"), fab.add_device("soft1", "10.0.0.2")
            reset_default_fabric(fab)
            assert (Context(name="soft0").device.nic is not None) == (model is not None)
            p = EndpointPair(fabric=default_fabric())
            t0 = fab.now_ns
            p.send(p.a, e.IBV_WR_RDMA_WRITE, length=64)
            assert p.wait(p.a.cq, 1)[0].status == e.IBV_WC_SUCCESS
            took.append(fab.now_ns - t0)
    finally:
        reset_default_fabric()
    assert took[1] > took[0] + CX3.pcie_rtt_ns


def _bench():  # benchmarks/ is not a package: load bench_nicmodel.py by its path
    spec = importlib.util.spec_from_file_location(
        "bench_nicmodel", Path(__file__).resolve().parents[2] / "benchmarks" / "bench_nicmodel.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # (dataclasses look their module up while it runs)
    spec.loader.exec_module(mod)
    return mod


def test_published_figures_are_cited_and_cover_every_ordering(capsys: pytest.CaptureFixture[str]) -> None:
    """The benchmark prints the papers' figures beside each of its tables: every ordering it measures has at
    least one published entry, every entry names its paper and section/figure, gives a number or says why
    not, and its gain is with / without; an ordering without entries is an error, not an empty table."""
    bench = _bench()
    orderings = {p.ordering for p in bench.PUBLISHED}
    assert orderings == {"inline", "batching", "signaling", "combined", "qps", "latency"}
    for p in bench.PUBLISHED:
        assert p.paper and p.where and p.unit
        assert (p.without is not None or p.with_ is not None) or p.note, p
        if p.without is not None and p.with_ is not None:
            assert p.gain == pytest.approx(p.with_ / p.without)
    fig11a = [p for p in bench.PUBLISHED if p.where == "§5.2.1, Fig. 11a"]
    assert [(p.without, p.with_) for p in fig11a] == [(80.0, 101.6)]
    bench.beside("batching", "ours", 1.5)
    out = capsys.readouterr().out
    assert "Fig. 11a" in out and "1.27" in out and "1.50" in out
    with pytest.raises(ValueError, match="no published figure for 'atomics'"):
        bench.beside("atomics", "ours", None)
