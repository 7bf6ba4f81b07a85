"""The parts of ``rdmalab capture`` that need no VM: the mid-stream cut, the counters dump parser,
the manifest table, the siw_crc patch and the scenario list."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from rdmalab.capture import read
from rdmalab.live import captures, siw
from rdmalab.live.captures import CAPTURES, DRIVERS, counters_json, cut_from_nth_write, update_manifest

ROOT = Path(__file__).resolve().parents[2]


def test_every_committed_real_capture_has_a_scenario() -> None:
    real = {p.stem for p in (ROOT / "captures").glob("*.pcap") if p.name.startswith(("rxe_", "siw_"))}
    assert real <= set(CAPTURES), sorted(real - set(CAPTURES))
    assert {CAPTURES[n].driver for n in CAPTURES} == set(DRIVERS)


def test_cut_starts_at_the_nth_write(tmp_path: Path) -> None:
    src = ROOT / "captures" / "siw_write_bw.pcap"
    writes = [cp.frame_number for cp in read(src) for p in cp.pdus if "RDMA Write" in p.summary()]
    first = cut_from_nth_write(src, tmp_path / "cut.pcap", 3)
    assert first == writes[2]
    full = list(read(src))
    cut = list(read(tmp_path / "cut.pcap"))
    assert len(cut) == len(full) - first + 1
    assert [c.packet.data for c in cut] == [c.packet.data for c in full[first - 1:]]
    with pytest.raises(captures.VMError, match="only 0 RDMA Write"):
        cut_from_nth_write(ROOT / "captures" / "rxe_write_bw.pcap", tmp_path / "x.pcap", 1)


DUMP = """## rdma rxe1
link rxe1/1 sent_pkts 28 rcvd_pkts 343 duplicate_request 0 out_of_seq_request 8
hw rxe1 sent_pkts 28
hw rxe1 rcvd_pkts 343
## rdma rxe2
link rxe2/1 sent_pkts 377 rcvd_pkts 28
hw rxe2 sent_pkts 377
net veth2 tx_packets 57
net veth2 rx_packets 377
## tc veth2
qdisc noqueue 0: root refcnt 2
 Sent 0 bytes 0 pkt (dropped 0, overlimits 0 requeues 0)
net veth3 tx_packets 377
## tc veth3
qdisc netem 8001: root refcnt 2 limit 1000 loss 10%
 Sent 412345 bytes 370 pkt (dropped 35, overlimits 0 requeues 0)
 backlog 0b 0p requeues 0
"""


def test_counters_dump_is_parsed(tmp_path: Path) -> None:
    (tmp_path / "counters.after.txt").write_text(DUMP)
    (tmp_path / "counters.before.txt").write_text("hw rxe1 sent_pkts 1\n")
    c = counters_json(tmp_path, CAPTURES["rxe_write_bw_loss"], "6.1.0-56-amd64")
    after = c["after"]
    assert isinstance(after, dict)
    assert after["hw_counters"] == {"rxe1": {"sent_pkts": 28, "rcvd_pkts": 343}, "rxe2": {"sent_pkts": 377}}
    assert after["netem"] == {"veth3": {"sent_pkts": 370, "dropped": 35}}   # the noqueue qdisc is not netem
    assert after["netdev"]["veth2"] == {"tx_packets": 57, "rx_packets": 377}
    assert after["rdma_statistic"].splitlines()[0].startswith("link rxe1/1 sent_pkts 28")
    assert c["before"] == {"hw_counters": {"rxe1": {"sent_pkts": 1}}, "netdev": {}, "netem": {}, "rdma_statistic": ""}
    assert c["netem_loss_on_client_egress"] == "10%"


def test_manifest_rows_keep_the_order_they_were_made_in(tmp_path: Path) -> None:
    m = tmp_path / "MANIFEST.md"
    for n in ("a", "b", "c"):
        update_manifest(m, [f"| `rxe_{n}.pcap` | d | k | rxe | 1 | 1 | `x` / `y` |"])
    update_manifest(m, ["| `rxe_b.pcap` | d2 | k | rxe | 2 | 2 | `x` / `y` |"])
    rows = [ln for ln in m.read_text().splitlines() if ln.startswith("| `")]
    assert [r.split("`")[1] for r in rows] == ["rxe_a.pcap", "rxe_b.pcap", "rxe_c.pcap"]
    assert "| d2 |" in rows[1]


def test_crc_patch_refuses_a_source_it_does_not_know(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a linux-source tarball whose siw_main.c lacks the hard-coded `mpa_crc_required` line
    d = tmp_path / "linux-source-9.9" / "drivers" / "infiniband" / "sw" / "siw"
    d.mkdir(parents=True)
    (d / "siw_main.c").write_text("static bool mpa_crc_required = true;\n")
    tar = tmp_path / "linux-source-9.9.tar.xz"
    with tarfile.open(tar, "w:xz") as t:
        t.add(tmp_path / "linux-source-9.9", arcname="linux-source-9.9")
    monkeypatch.setattr(siw.glob, "glob", lambda pat: [str(tar)] if "linux-source" in pat else [])
    monkeypatch.setattr(siw, "cache_dir", lambda: tmp_path / "cache")
    monkeypatch.setattr(siw.Path, "exists", lambda self: True if str(self).endswith("/build") else Path.is_file(self))
    monkeypatch.setattr(siw.shutil, "which", lambda _n: "/usr/bin/x")
    with pytest.raises(siw.VMError, match="no line 'const bool mpa_crc_required;'"):
        siw.siw_module("9.9.9", crc=True)
