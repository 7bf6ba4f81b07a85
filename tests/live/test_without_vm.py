"""rdmalab.live without booting anything: what is missing, the pyverbs rewrite, soft scenarios, the CLI."""

from __future__ import annotations

import hashlib
import random
import re
from pathlib import Path

import pytest

from rdmalab.cli import main
from rdmalab.live import captures, labruns, vm
from rdmalab.live.discover import gid_to_ipv4


def test_missing_names_each_tool_and_its_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vm.shutil, "which", lambda _name: None)
    monkeypatch.setattr(vm.glob, "glob", lambda _pattern: [])
    monkeypatch.setattr(vm.Path, "exists", lambda _self: False)
    gaps = {g.what.split(" ")[0]: g.install for g in vm.missing()}
    assert gaps["qemu"] == "sudo apt-get install qemu-system-x86"
    assert gaps["virtme-ng"] == "pip install virtme-ng"
    assert gaps["busybox"] == "sudo apt-get install busybox-static"
    assert gaps["file"] == "sudo apt-get install file"
    assert gaps["a"] == "sudo apt-get install linux-image-amd64"            # no kernel image
    assert gaps["pyverbs"] == "sudo apt-get install python3-pyverbs"
    with pytest.raises(vm.VMError, match="busybox-static"):
        vm.require()


def test_pyverbs_rewrite_changes_only_imports() -> None:
    before = [ln for ln in labruns.PROGRAM.read_text().splitlines() if not ln.startswith("import rdmalab.fabric")]
    after = labruns.pyverbs_source().splitlines()
    assert len(before) == len(after)
    changed = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
    assert len(changed) == 8   # enums, addr, cq, device, mr, pd, qp, wr
    assert all(b.startswith(("from pyverbs.", "import pyverbs.")) for _, b in changed)


def test_soft_write_read_moves_the_data_and_captures_it() -> None:
    r = labruns.run_scenario("write_read", backend="soft", size=5000, seed=11)
    data = random.Random(11).randbytes(5000)
    assert [s["memory"]["sha256"] for s in r.steps] == [hashlib.sha256(data).hexdigest()] * 2
    wire = b"".join(p.packet.payload for p in r.packets() if p.packet.opcode_name.startswith("RC RDMA WRITE"))
    assert wire == data
    assert {p.packet.crc_status for p in r.packets()} == {"good"}


def test_soft_wrong_rkey() -> None:
    r = labruns.run_scenario("wrong_rkey", backend="soft")
    assert r.completions[0]["status"] == "IBV_WC_REM_ACCESS_ERR"
    assert r.data["qp_state"]["a"] == "IBV_QPS_ERR"


def test_unknown_scenario_and_backend_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="unknown scenario 'nope'"):
        labruns.run_scenario("nope")
    with pytest.raises(ValueError, match="unknown backend 'ib'"):
        labruns.run_scenario("write_read", backend="ib")


def test_old_names_warn_and_do_the_same() -> None:
    """docs/live.md named ``labruns.run`` and ``VM.run`` before issue 37: both still work, with a warning."""
    with pytest.warns(DeprecationWarning, match="run_scenario"):
        old = labruns.run("wrong_rkey", backend="soft", seed=3)
    new = labruns.run_scenario("wrong_rkey", backend="soft", seed=3)  # (keys differ run to run; PSNs follow the seed)
    assert (old.data["a"]["psn"], old.data["b"]["psn"]) == (new.data["a"]["psn"], new.data["b"]["psn"])
    assert [c["status"] for c in old.completions] == [c["status"] for c in new.completions] == ["IBV_WC_REM_ACCESS_ERR"]
    machine = vm.VM.__new__(vm.VM)  # not booted: run_job is replaced, the alias only has to forward
    calls: list[tuple[str, dict[str, object]]] = []
    machine.run_job = lambda script, **job: calls.append((script, job)) or "result"  # type: ignore[method-assign]
    with pytest.warns(DeprecationWarning, match="run_job"):
        assert machine.run("ibv_devices", timeout=5.0, capture=False) == "result"  # type: ignore[comparison-overlap]
    assert calls == [("ibv_devices", {"timeout": 5.0, "capture": False})]


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


def test_send_wr_dict_carries_every_field_the_kernel_needs() -> None:
    import rdmalab.verbs.enums as e
    from rdmalab.live.remote import send_wr_dict
    from rdmalab.verbs.pyverbs_error import PyverbsRDMAError
    from rdmalab.verbs.wr import SGE, SendWR

    wr = SendWR(wr_id=9, opcode=e.IBV_WR_RDMA_WRITE_WITH_IMM, num_sge=2, imm_data=0xC0FFEE,
                sg=[SGE(0x1000, 64, 0x11), SGE(0x2000, 32, 0x22)], send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_rdma(0xABCD, 0x7F0000001000)
    d = send_wr_dict(wr)
    assert d == {"wr_id": 9, "opcode": int(e.IBV_WR_RDMA_WRITE_WITH_IMM), "send_flags": int(e.IBV_SEND_SIGNALED),
                 "imm_data": 0xC0FFEE, "sg": [{"addr": 0x1000, "length": 64, "lkey": 0x11},
                                              {"addr": 0x2000, "length": 32, "lkey": 0x22}],
                 "rkey": 0xABCD, "remote_addr": 0x7F0000001000, "compare_add": 0, "swap": 0}
    atomic = SendWR(wr_id=1, opcode=e.IBV_WR_ATOMIC_CMP_AND_SWP, num_sge=1, sg=[SGE(0x3000, 8, 0x33)])
    atomic.set_wr_atomic(0x44, 0x5000, 42, 7)
    assert {k: send_wr_dict(atomic)[k] for k in ("rkey", "remote_addr", "compare_add", "swap")} == \
        {"rkey": 0x44, "remote_addr": 0x5000, "compare_add": 42, "swap": 7}
    assert send_wr_dict(SendWR(wr_id=2, opcode=e.IBV_WR_SEND, num_sge=0))["sg"] == []
    wr.next_wr = atomic
    with pytest.raises(PyverbsRDMAError, match="chained work requests"):
        send_wr_dict(wr)


def test_verbs_server_imports_only_the_standard_library_and_pyverbs() -> None:
    import ast
    import sys

    from rdmalab.live.remote import PROGRAM

    tree = ast.parse(PROGRAM.read_text())
    roots = {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    roots |= {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert roots - set(sys.stdlib_module_names) == {"pyverbs"}


def test_attach_to_a_directory_without_a_vm_says_so(tmp_path: Path) -> None:
    with pytest.raises(vm.VMError, match="not the work directory of a running rdmalab VM"):
        vm.VM.attach(tmp_path)
    (tmp_path / "vm.pid").write_text("999999999\n")
    with pytest.raises(vm.VMError, match="is not running"):
        vm.VM.attach(tmp_path)


def test_a_vm_that_dies_before_it_is_ready_gets_a_hint_naming_the_package() -> None:
    # the last lines of virtme-ng's output when `file` or a static busybox is missing
    assert "apt-get install file" in vm._hint("    raise child_exception_type(errno_num, err_msg, err_filename)\n"
                                              "FileNotFoundError: [Errno 2] No such file or directory: 'file'")
    assert "busybox-static" in vm._hint("busybox is not statically linked")
    assert vm._hint("something else went wrong") == ""


def test_bytecode_is_written_for_the_guest_which_cannot_write_it(tmp_path: Path) -> None:
    import importlib.util
    import shutil

    import rdmalab

    # a package of its own: each module gets its bytecode, current ones are left as they are
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    for name in ("__init__.py", "a.py", "sub/__init__.py", "sub/b.py"):
        (pkg / name).write_text(f"X = {name!r}\n")
    assert vm.compile_for_guest(pkg)
    cached = [Path(importlib.util.cache_from_source(str(p))) for p in pkg.rglob("*.py")]
    assert len(cached) == 4 and all(c.exists() for c in cached)
    first = [c.stat().st_mtime_ns for c in cached]
    assert vm.compile_for_guest(pkg) and [c.stat().st_mtime_ns for c in cached] == first
    shutil.rmtree(pkg / "sub" / "__pycache__")
    assert vm.compile_for_guest(pkg) and all(c.exists() for c in cached)
    # and rdmalab's own modules, which a VM's boot compiles (VM.start)
    assert vm.compile_for_guest()
    root = Path(rdmalab.__file__).parent
    missing = [p for p in root.rglob("*.py") if not Path(importlib.util.cache_from_source(str(p))).exists()]
    assert not missing, missing[:5]
