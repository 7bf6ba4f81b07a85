"""rdmalab.lab.twowires and what notebook 07's "same WRITE and READ on two wires" part says about it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rdmalab.fabric import reset_default_fabric
from rdmalab.lab.twowires import Run, side_by_side, write_and_read


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Run, Run]]:
    yield write_and_read(3000, directory=tmp_path_factory.mktemp("two-wires"))
    reset_default_fabric()


def test_both_runs_are_captured_files_that_read_back(runs: tuple[Run, Run]) -> None:
    roce, iw = runs
    assert roce.pcap.exists() and iw.pcap.exists()
    assert roce.frames == len(roce.packets) == 8 and iw.frames == len(iw.packets)


def test_iwarp_spends_five_frames_before_the_first_rdma_message(runs: tuple[Run, Run]) -> None:
    _, iw = runs
    whats = [r.what for r in iw.rows[:6]]
    assert whats[:3] == ["TCP SYN", "TCP SYN+ACK", "TCP ACK"]
    assert whats[3].startswith("MPA Request Rev 2 IRD=") and whats[4].startswith("MPA Reply Rev 2 IRD=")
    assert whats[5] == "RDMA Write"


def test_each_write_fpdu_is_one_segment_with_74_bytes_of_headers(runs: tuple[Run, Run]) -> None:
    _, iw = runs
    writes = [r for r in iw.rows if r.what == "RDMA Write"]
    assert [r.size for r in writes] == [1514, 1514, 194]  # 1440 + 1440 + 120 bytes of data
    assert sum(r.size for r in writes) - 3 * 74 == 3000  # 54 Ethernet/IPv4/TCP + 2 MPA + 14 DDP + 4 CRC


def test_roce_first_packet_has_58_bytes_of_headers_plus_a_reth(runs: tuple[Run, Run]) -> None:
    roce, _ = runs
    assert [r.size for r in roce.rows[:3]] == [1024 + 58 + 16, 1024 + 58, 952 + 58]


def test_roce_acknowledges_packets_iwarp_leaves_it_to_tcp_bytes(runs: tuple[Run, Run]) -> None:
    roce, iw = runs
    assert roce.ack_only == 1 and roce.rows[4].what.startswith("RC Acknowledge PSN")
    assert iw.ack_only > roce.ack_only and iw.frames > roce.frames
    assert all(r.acks.startswith("bytes up to ") for r in iw.rows[1:])
    # the requester's last ACK covers every byte of the three Read Responses
    responses = [r for r in iw.rows if r.what == "RDMA Read Response"]
    stream = 24 + sum(r.size - 54 for r in responses)  # the MPA Reply (24 bytes) and the FPDUs
    assert iw.rows[-1].direction == "->" and iw.rows[-1].acks == f"bytes up to {stream}"


def test_side_by_side_renders_both_columns(runs: tuple[Run, Run], tmp_path: Path) -> None:
    sbs = side_by_side(*runs)
    text = str(sbs)
    assert text.splitlines()[0].startswith("RoCEv2") and "iWARP" in text.splitlines()[0]
    html = sbs._repr_html_()
    assert html.count("<tr>") == max(r.frames for r in runs) + 3
    assert sbs.totals()["iWARP"]["frames"] == runs[1].frames


def test_the_lost_segment_is_repaired_by_tcp_after_the_200_ms_timer(tmp_path: Path) -> None:
    from rdmalab.lab.twowires import iwarp_with_a_loss

    run = iwarp_with_a_loss(4000, directory=tmp_path)
    reset_default_fabric()
    rows = {r.frame: r for r in run.rows}
    assert [rows[n].what for n in (6, 7, 8)] == ["RDMA Write"] * 3  # frame 7 was sent, then lost
    assert rows[9].direction == "<-" and rows[9].acks == "bytes up to 1484"  # 24 + the first FPDU (1460)
    retx = [r for r in run.rows if r.what == "TCP retransmission"]
    assert [r.frame for r in retx] == [10, 11]
    t0 = run.packets[0].timestamp
    times = {cp.frame_number: cp.timestamp - t0 for cp in run.packets}
    assert 0.2 <= times[10] - times[7] < 0.201  # the retransmission timer: 200 ms
    assert run.rows[-1].acks == "bytes up to 4084"  # one ACK covers everything after the gap
    assert "TCP retransmission" in str(run)


def test_a_ladder_of_an_iwarp_capture_names_tcp_frames_and_marks_retransmissions(tmp_path: Path) -> None:
    from rdmalab import viz
    from rdmalab.lab.twowires import iwarp_with_a_loss

    run = iwarp_with_a_loss(4000, directory=tmp_path)
    reset_default_fabric()
    arrows = viz.ladder(run.packets, limit=None).arrows
    labels = [(a.label, a.kind) for a in arrows]
    assert labels[:3] == [("TCP SYN", "other"), ("TCP SYN+ACK", "other"), ("TCP ACK", "ack")]
    assert [lbl for lbl, kind in labels if kind == "retx"] == ["TCP retransmission (1460 B)",
                                                                "TCP retransmission (1140 B)"]


@pytest.mark.parametrize("answer,status,says", [
    (20, "PASS", "20 bytes per FPDU"), ("20", "PASS", "20 bytes"),
    (16, "FAIL", "CRC32c"), (18, "FAIL", "ULPDU_Length"), (14, "FAIL", "only the DDP tagged header"),
    (74, "FAIL", "Ethernet, IPv4 and TCP"), (60, "FAIL", "per FPDU"), (24, "FAIL", "tagged (14)"),
    (99, "FAIL", "len(p.data)"),
])
def test_the_iwarp_overhead_exercise_names_each_slip(answer: object, status: str, says: str) -> None:
    from rdmalab import lab

    r = lab.check("wires.iwarp_overhead", answer)
    assert r.status == {"PASS": lab.PASS, "FAIL": lab.FAIL}[status]
    assert says in r.message + " ".join(r.details), r.message


def test_the_exercise_answer_is_what_the_run_shows(runs: tuple[Run, Run]) -> None:
    from rdmalab import lab

    _, iw = runs
    writes = [p for cp in iw.packets for p in cp.pdus if (p.info or "").startswith("RDMA Write")]
    assert len(writes) == 3
    sizes = {len(p.data) - len(p.payload) for p in writes}
    assert sizes == {20}
    assert lab.check("wires.iwarp_overhead", sizes.pop()).status == lab.PASS


def test_the_text_table_cuts_no_cell(runs: tuple[Run, Run]) -> None:
    # every row's description and what it acknowledges appear whole (a PSN read from a cut cell is wrong)
    text = str(side_by_side(*runs))
    for run in runs:
        for row in run.rows:
            assert row.what in text, row.what
            assert row.acks in text, row.acks
