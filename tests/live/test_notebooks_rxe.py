"""The call-by-call notebooks (03-06, 09, 11, 12) run top to bottom with BACKEND = "rxe".

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
from rdmalab.lab.runner import wake_for_replies
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
    "12-connection-manager": ["backend: rxe | CM messages on the wire: ['REQ', 'REP', 'RTU', 'DREQ', 'DREP']",
                              "the kernel keeps its QP states to itself"],
    # 11 prints completion statuses and NAK codes as numbers (exercise 2 asks their names): 10 is
    # IBV_WC_REM_ACCESS_ERR, NAK code 2 Remote Access Error
    "11-security": ["lkey == rkey: True", "write with a wrong key: refused, wc.status 10", "A's QP state now: ERR",
                    "NAK code 2 PSN", "region in another protection domain    -> refused, wc.status 10"],
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
    wake_for_replies(nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                             resources={"metadata": {"path": str(tmp_path)}})).execute()
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


HOST_PATH = r'''
import json
import rdmalab.verbs.enums as e
from rdmalab.lab.pair import LivePair
from rdmalab.live.remote import VerbsServer
from rdmalab.verbs.wr import SGE, RecvWR, SendWR

srv = VerbsServer(host_devices=("rxe1", "rxe2"))   # a child /usr/bin/python3, as on a host with rxe
try:
    p = LivePair(server=srv, mtu=1024)
    a, b = p.a, p.b
    out = {"where": p.where}
    b.qp.post_recv(RecvWR(wr_id=5, num_sge=1, sg=[SGE(b.mr.buf, 64, b.mr.lkey)]))
    a.mr.write(b"over the host path", 18)
    a.qp.post_send(SendWR(wr_id=6, opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(a.mr.buf, 18, a.mr.lkey)]))
    wa, wb = a.poll(), b.poll()
    out["send"] = [wa.status, wa.opcode, wb.status, wb.opcode, wb.byte_len, wb.wr_id]
    out["received"] = b.mr.read(18, 0).decode()
    wr = SendWR(wr_id=7, opcode=e.IBV_WR_RDMA_READ, num_sge=1, sg=[SGE(a.mr.buf + 100, 18, a.mr.lkey)])
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
    a.qp.post_send(wr)
    out["read"] = [a.poll().status, a.mr.read(18, 100).decode()]
    try:
        p.packets()
        out["capture"] = "there"
    except RuntimeError as exc:
        out["capture"] = str(exc)
finally:
    srv.close()
print(json.dumps(out))
'''


def test_verbs_server_on_host_devices(lab_vm: VM) -> None:
    """The host path of ``Pair(backend="rxe")`` (two rxe devices where rdmalab runs, no VM): run
    from inside the VM, whose rxe1 and rxe2 play the host's devices."""
    r = lab_vm.run_job("$RDMALAB_PYTHON host_path.py", files={"host_path.py": HOST_PATH}, capture=False, timeout=300)
    assert r.rc == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["where"] == "host rxe1/rxe2"
    assert out["send"] == [0, 0, 0, 128, 18, 5]           # success, IBV_WC_SEND; success, IBV_WC_RECV, 18 bytes
    assert out["received"] == "over the host path"
    assert out["read"] == [0, "over the host path"]
    assert "tcpdump on the host needs root" in out["capture"]
