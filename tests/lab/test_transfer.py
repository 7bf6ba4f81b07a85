"""Notebook 09's transfer runner: a plain function the widget calls, run here without a frontend."""

from __future__ import annotations

import pytest

from rdmalab.lab.transfer import run_transfer


@pytest.mark.parametrize("op", ["WRITE", "READ", "SEND"])
def test_transfer_runner_function(op: str) -> None:
    res = run_transfer(op=op, size=3000, mtu=1024, loss=0.0, seed=2)
    first = res.completions[0]
    assert first is not None and first.status == 0
    assert len(res.ladder.arrows) >= 3
    assert "<svg" in res.psn_plot.to_svg()


def test_transfer_runner_builds_without_a_frontend() -> None:
    pytest.importorskip("ipywidgets")
    from rdmalab.lab.transfer import transfer_runner

    assert transfer_runner().children


@pytest.mark.parametrize("op", ["READ", "WRITE", "SEND"])
def test_requests_resent_counts_every_reissued_request(op: str) -> None:
    """A READ reissued after a timeout starts at a PSN no earlier request carried (the first missing
    response's): it is resent all the same (issue 20, item 2).  Every request packet beyond the ones a
    lossless run sends is a resend."""
    size, mtu = 8192, 1024
    original = 1 if op == "READ" else -(-size // mtu)
    reissued_reads = 0
    for seed in range(1, 9):
        res = run_transfer(op=op, size=size, mtu=mtu, loss=0.1, seed=seed)
        requests = [p for p in res.pair.packets() if p.bth is not None and "Acknowledge" not in str(p.opcode_name)
                    and "Response" not in str(p.opcode_name)]
        assert res.stats()["requests resent"] == len(requests) - original, (seed, res.stats())
        if op == "READ":
            reissued_reads += len({p.bth.psn for p in requests}) > 1  # reissued at a PSN of its own
    if op == "READ":
        assert reissued_reads >= 3  # the case of the issue is among the seeds


def test_the_widget_summary_is_short_lines_naming_each_completion() -> None:
    """The runner's summary once was one long line that the output area broke mid-word ("wc_flag s=0x0)")."""
    res = run_transfer(op="SEND", size=8192, mtu=1024, loss=0.0, seed=1)
    lines = res.summary()
    assert lines[0] == "A's completion: wr_id=1, status=success, opcode=SEND, byte_len=8192"
    assert lines[1].startswith("B's completion: wr_id=9, status=success, opcode=RECV")
    assert lines[-1] == "wire: sent 9, requests resent 0"
    assert all(len(line) <= 80 for line in lines), lines
