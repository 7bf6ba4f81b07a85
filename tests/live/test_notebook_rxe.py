"""Notebook 13 run with BACKEND = "rxe": every cell on the kernel's Soft-RoCE (in the session's lab VM)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rdmalab.lab.generate import convert
from rdmalab.lab.runner import wake_for_replies
from rdmalab.live.vm import VM

ROOT = Path(__file__).resolve().parents[2]
NB = ROOT / "notebooks" / "13-live-rdma.py"
pytestmark = pytest.mark.live


def test_live_notebook_on_rxe(lab_vm: VM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nbclient = pytest.importorskip("nbclient")
    nbformat = pytest.importorskip("nbformat")
    log = tmp_path / "checks.jsonl"
    monkeypatch.setenv("RDMALAB_CHECK_LOG", str(log))
    monkeypatch.setenv("RDMALAB_BACKEND", "rxe")
    monkeypatch.setenv("RDMALAB_VM_DIR", str(lab_vm.workdir))   # the kernel attaches: no boot of its own
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    nb = nbformat.from_dict(convert(NB.read_text(encoding="utf-8"), "instructor"))
    wake_for_replies(nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                             resources={"metadata": {"path": str(tmp_path)}})).execute()
    (tmp_path / "13-live-rdma.rxe.ipynb").write_text(nbformat.writes(nb), encoding="utf-8")
    text = "\n".join(o.get("text", "") or json.dumps(o.get("data", {}))
                     for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "on VM (" in text or "on host rxe" in text, text[:2000]   # it ran on rxe, not on the soft engine
    assert "IBV_WC_REM_ACCESS_ERR" in text
    # the soft engine (rdmalab pingpong, namespace peer) and the kernel's ibv_rc_pingpong on rxe0, --chk both
    assert "0 differ from the client's buffer" in text and "exit status 0" in text, text[-3000:]
    results = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(results) == 3 and all(r["status"] == "pass" for r in results), results
