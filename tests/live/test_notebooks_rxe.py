"""The call-by-call notebooks (03-06, 09, 11) run top to bottom with BACKEND = "rxe".

Each notebook's kernel attaches to the session's lab VM (``RDMALAB_VM_DIR``, so the whole file
costs no extra boot) and drives a verbs server on rxe1/rxe2 through ``Pair(backend="rxe")``.
The instructor version must run without an error output, every check must pass, and the
outputs must show that the kernel did the work: a ``Pair`` on rxe, ladders between rxe1 and
rxe2 drawn from the capture, and each notebook's own evidence (data that landed, an RNR NAK,
an immediate value, a counter, a NAK Remote Access Error).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rdmalab.lab.generate import convert, parse
from rdmalab.live.vm import VM

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.live

#: notebook -> strings its outputs must contain when it ran on rxe (each one the kernel's doing)
EVIDENCE = {
    "03-send-receive": ["backend rxe on VM", "B's buffer: b'Hello from soft0 :-)'", "rxe2 --> rxe1  RNR NAK",
                        "opcode=RECV, byte_len=3000"],
    "04-write-imm": ["rxe1 --> rxe2  WRITE First PSN 100", "B's memory at 100: b\"One-sided",
                     "imm_data = 0xc0ffee"],
    "05-read": ["rxe2 --> rxe1  READ Resp Last PSN 102", "A's buffer now: b\"Data that lives",
                "WRITE: 3 packets", "READ : 3 packets"],
    "06-atomics": ["returned: 41 | B's counter now: 42", "rxe2 --> rxe1  ATOMIC ACK PSN 102",
                   "CmpSwap(compare=42, swap=7): returned 100, swapped: False, counter now 100"],
    "09-reliability": ["transfer runner and live section: rxe", "'netem loss': '10%'", "rxe1 --> rxe2"],
    "11-security": ["lkey == rkey: True", "write with a wrong key: remote access error", "A's QP state now: ERR",
                    "NAK: Remote Access Error", "region in another protection domain    -> remote access error"],
}


def _expected_checks(src: Path) -> int:
    return sum("".join(c["lines"]).count("lab.check(") for c in parse(src.read_text(encoding="utf-8"))
               if c["type"] == "code" and "instructor" not in c["tags"] and "solution" not in c["tags"])


@pytest.mark.parametrize("name", sorted(EVIDENCE))
def test_notebook_runs_on_rxe(name: str, lab_vm: VM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nbclient = pytest.importorskip("nbclient")
    nbformat = pytest.importorskip("nbformat")
    src = ROOT / "notebooks" / f"{name}.py"
    log = tmp_path / "checks.jsonl"
    monkeypatch.setenv("RDMALAB_CHECK_LOG", str(log))
    monkeypatch.setenv("RDMALAB_BACKEND", "rxe")
    monkeypatch.setenv("RDMALAB_VM_DIR", str(lab_vm.workdir))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    nb = nbformat.from_dict(convert(src.read_text(encoding="utf-8"), "instructor"))
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    (tmp_path / f"{name}.rxe.ipynb").write_text(nbformat.writes(nb), encoding="utf-8")
    errors = [(o.get("ename"), o.get("evalue")) for c in nb.cells for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors, errors
    text = "\n".join(o.get("text", "") or "\n".join(str(v) if isinstance(v, str) else "".join(v)
                                                    for k, v in o.get("data", {}).items() if k == "text/plain")
                     for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    missing = [s for s in EVIDENCE[name] if s not in text]
    assert not missing, f"{name}: not in the outputs: {missing}\n{text[:4000]}"
    results = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    assert len(results) == _expected_checks(src), results
    assert all(r["status"] == "pass" for r in results), results
