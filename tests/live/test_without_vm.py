"""rdmalab.live without booting anything: what is missing, the pyverbs rewrite, soft scenarios, the CLI."""

from __future__ import annotations

import hashlib
import random
import re
from pathlib import Path

import pytest

from rdmalab.cli import main
from rdmalab.live import captures, scenarios, vm
from rdmalab.live.discover import gid_to_ipv4


def test_missing_names_each_tool_and_its_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vm.shutil, "which", lambda _name: None)
    monkeypatch.setattr(vm.glob, "glob", lambda _pattern: [])
    monkeypatch.setattr(vm.Path, "exists", lambda _self: False)
    gaps = {g.what.split(" ")[0]: g.install for g in vm.missing()}
    assert gaps["qemu"] == "sudo apt-get install qemu-system-x86"
    assert gaps["virtme-ng"] == "pip install virtme-ng"
    assert gaps["busybox"] == "sudo apt-get install busybox-static"
    assert gaps["a"] == "sudo apt-get install linux-image-amd64"            # no kernel image
    assert gaps["pyverbs"] == "sudo apt-get install python3-pyverbs"
    with pytest.raises(vm.VMError, match="busybox-static"):
        vm.require()


def test_pyverbs_rewrite_changes_only_imports() -> None:
    before = [ln for ln in scenarios.PROGRAM.read_text().splitlines() if not ln.startswith("import rdmalab.fabric")]
    after = scenarios.pyverbs_source().splitlines()
    assert len(before) == len(after)
    changed = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
    assert len(changed) == 8   # enums, addr, cq, device, mr, pd, qp, wr
    assert all(b.startswith(("from pyverbs.", "import pyverbs.")) for _, b in changed)


def test_soft_write_read_moves_the_data_and_captures_it() -> None:
    r = scenarios.run("write_read", backend="soft", size=5000, seed=11)
    data = random.Random(11).randbytes(5000)
    assert [s["memory"]["sha256"] for s in r.steps] == [hashlib.sha256(data).hexdigest()] * 2
    wire = b"".join(p.packet.payload for p in r.packets() if p.packet.opcode_name.startswith("RC RDMA WRITE"))
    assert wire == data
    assert {p.packet.crc_status for p in r.packets()} == {"good"}


def test_soft_wrong_rkey() -> None:
    r = scenarios.run("wrong_rkey", backend="soft")
    assert r.completions[0]["status"] == "IBV_WC_REM_ACCESS_ERR"
    assert r.data["qp_state"]["a"] == "IBV_QPS_ERR"


def test_unknown_scenario_and_backend_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="unknown scenario 'nope'"):
        scenarios.run("nope")
    with pytest.raises(ValueError, match="unknown backend 'ib'"):
        scenarios.run("write_read", backend="ib")


def test_gid_to_ipv4() -> None:
    assert gid_to_ipv4("0000:0000:0000:0000:0000:ffff:0a00:0102") == "10.0.1.2"
    assert gid_to_ipv4("fe80:0000:0000:0000:0024:13ff:fec5:518f") is None


def test_manifest_rows_are_added_then_replaced(tmp_path: Path) -> None:
    m = tmp_path / "MANIFEST.md"
    m.write_text("# Captures\n\n| `rxe_a.pcap` | the original provenance row |\n")
    captures.update_manifest(m, ["| `rxe_a.pcap` | d1 | k | 1 | 1 | `x` / `y` |"])
    captures.update_manifest(m, ["| `rxe_b.pcap` | d1 | k | 2 | 2 | `x` / `y` |",
                                 "| `rxe_a.pcap` | d2 | k | 3 | 3 | `x` / `y` |"])
    text = m.read_text()
    assert text.startswith("# Captures\n\n| `rxe_a.pcap` | the original provenance row |\n")  # untouched
    assert len(re.findall(r"^\| `rxe_a\.pcap` \| d2 ", text, re.M)) == 1 and "| d1 | k | 1 |" not in text
    assert "`rxe_b.pcap`" in text


def test_cli_capture_list_and_unknown_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["capture", "--list"]) == 0
    assert "rxe_rc_pingpong" in capsys.readouterr().out
    assert main(["capture", "rxe_nope"]) == 1
    assert "unknown capture rxe_nope" in capsys.readouterr().err


def test_cli_vm_rejects_bad_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["vm", "--loss", "150"]) == 1
    assert "--loss 150" in capsys.readouterr().err
    assert main(["vm", "--shell", "-w", "x.pcap"]) == 1
    assert "-w needs a capture" in capsys.readouterr().err
