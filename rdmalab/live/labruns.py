"""Lab scenarios written once, run on the soft engine or on the kernel's Soft-RoCE (rxe).

A scenario is a verbs program (:mod:`rdmalab.live.programs.lab_ops`) that uses only the
pyverbs-shaped API.  On the ``"soft"`` backend it runs in this process on a fresh simulated
fabric whose frames are written to a pcap.  On ``"rxe"`` its imports are rewritten to
``pyverbs`` (:func:`pyverbs_source`; nothing else changes) and it runs under Debian's
``/usr/bin/python3`` (the interpreter python3-pyverbs is built for): on the host when the host
has two rxe devices, otherwise in the lab VM (:mod:`rdmalab.live.vm`) between ``rxe1`` and
``rxe2``, with tcpdump on the veth between them.  Either way the result is the program's JSON
(completions, keys, buffer snapshots) plus a pcap, which the notebooks decode and draw with
:mod:`rdmalab.viz` exactly as they draw the soft engine's.

>>> from rdmalab.live.labruns import run_scenario
>>> r = run_scenario("write_read", backend="soft")
>>> r.ok, [s["wc"]["status"] for s in r.steps]
(True, ['IBV_WC_SUCCESS', 'IBV_WC_SUCCESS'])
"""

from __future__ import annotations

import atexit
import contextlib
import html
import io
import json
import os
import re
import shlex
import subprocess
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rdmalab.capture import read
from rdmalab.fabric.sim import Fabric, reset_default_fabric
from rdmalab.live.discover import devices as host_devices
from rdmalab.live.programs import lab_ops
from rdmalab.live.vm import VM, VMError

PROGRAM = Path(__file__).parent / "programs" / "lab_ops.py"
SCENARIOS = ("write_read", "wrong_rkey", "send_recv", "atomics")
PYVERBS_PYTHON = "/usr/bin/python3"


def pyverbs_source(path: Path = PROGRAM) -> str:
    """The program's text with ``rdmalab.verbs`` imports changed to ``pyverbs`` and the soft-only
    ``import rdmalab.fabric`` line removed (nothing else changes)."""
    text = path.read_text()
    # the one soft-only line: it names the simulated fabric; pyverbs has the kernel's devices
    text = re.sub(r"^import rdmalab\.fabric\b.*\n", "", text, flags=re.M)
    new = re.sub(r"^import rdmalab\.verbs\.enums as e$", "import pyverbs.enums as e", text, flags=re.M)
    new = re.sub(r"^from rdmalab\.verbs\.", "from pyverbs.", new, flags=re.M)
    if "rdmalab" in "\n".join(ln for ln in new.splitlines() if ln.startswith(("import ", "from "))):
        raise VMError(f"{path}: an import still names rdmalab after the rewrite")
    return new


@dataclass
class ScenarioResult:
    """A scenario's outcome: the program's JSON, where it ran, and the packets it put on the wire."""

    name: str
    backend: str
    where: str                     # "soft engine", "host rxe1/rxe2", "VM (TCG) rxe1/rxe2"
    data: dict[str, Any]
    pcap_path: Path | None
    stdout: str = ""
    stderr: str = ""
    boot_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return bool(self.data.get("ok"))

    @property
    def steps(self) -> list[dict[str, Any]]:
        return list(self.data.get("steps", []))

    @property
    def completions(self) -> list[dict[str, Any]]:
        return [s["wc"] for s in self.steps]

    def packets(self, *, roce_only: bool = True) -> list[Any]:
        """The captured frames decoded by :func:`rdmalab.capture.read` (only RoCE ones by default)."""
        if self.pcap_path is None:
            return []

        pkts = list(read(self.pcap_path))
        if roce_only:
            pkts = [p for p in pkts if getattr(p.packet, "bth", None) is not None]
        return pkts

    def table(self) -> Any:
        """The completions as a small table (HTML in Jupyter)."""
        return CompletionTable(self)

    def __repr__(self) -> str:
        n = len(self.packets()) if self.pcap_path else 0
        return (f"ScenarioResult({self.name} on {self.where}: ok={self.ok}, "
                f"{len(self.steps)} steps, {n} RoCE packets captured)")


class CompletionTable:
    def __init__(self, result: ScenarioResult) -> None:
        self.r = result

    def rows(self) -> list[tuple[str, ...]]:
        out: list[tuple[str, ...]] = []
        for s in self.r.steps:
            wc = s["wc"]
            mem = s.get("memory", {})
            out.append((s["op"], str(s.get("length", "")), f"{s.get('rkey', 0):#x}" if "rkey" in s else "",
                        wc.get("status", ""), wc.get("opcode", ""), str(wc.get("byte_len", "")),
                        mem.get("head_hex", "")[:32]))
        return out

    HEAD = ("operation", "bytes", "rkey", "completion status", "completion opcode", "byte_len", "memory (first 16 B)")

    def __repr__(self) -> str:
        rows = [self.HEAD, *self.rows()]
        widths = [max(len(r[i]) for r in rows) for i in range(len(self.HEAD))]
        return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in self.HEAD)
        body = "".join("<tr>" + "".join(f"<td><code>{html.escape(c)}</code></td>" for c in r) + "</tr>"
                       for r in self.rows())
        return f"<table><tr>{head}</tr>{body}</table><p>ran on {html.escape(self.r.where)}</p>"


# ----------------------------------------------------------------------------- backends
def run_scenario(name: str, *, backend: str = "soft", size: int = 4096, seed: int = 1, loss: float = 0.0,
                 iters: int = 1, vm: VM | None = None, timeout: float = 120.0) -> ScenarioResult:
    """Run scenario ``name`` on ``backend`` ("soft" or "rxe").

    ``size`` bytes of ``random.Random(seed).randbytes`` data; ``iters`` WRITE+READ rounds
    (write_read); ``loss`` (0..1) drops that share of A's packets (the fabric's faults on soft,
    netem on veth2 in the VM; a host run has no loss knob, so a lossy rxe run goes to the VM).
    """
    if name not in SCENARIOS:
        raise ValueError(f"unknown scenario {name!r}; choose one of {', '.join(SCENARIOS)}")
    if backend == "soft":
        return _run_soft(name, size, seed, loss, iters)
    if backend == "rxe":
        host = host_rxe_pair()
        if host is not None and vm is None and not loss:
            return _run_host(name, host, size, seed, iters, timeout)
        return _run_vm(name, vm or shared_vm(), size, seed, loss, iters, timeout)
    raise ValueError(f"unknown backend {backend!r}; choose 'soft' or 'rxe'")


def run(name: str, **options: Any) -> ScenarioResult:
    """Deprecated name of :func:`run_scenario` (docs/live.md and notebook 13 named it until issue 37);
    warns, then runs the scenario."""
    warnings.warn("rdmalab.live.labruns.run is now run_scenario", DeprecationWarning, stacklevel=2)
    return run_scenario(name, **options)


def _run_soft(name: str, size: int, seed: int, loss: float, iters: int) -> ScenarioResult:
    # lazy: the simulated fabric is only the soft backend's

    fab = Fabric(seed=seed, mtu=1024)
    fab.add_device("soft0", "10.0.0.1")
    fab.add_device("soft1", "10.0.0.2")
    if loss:
        fab.set_faults(loss=loss)
    out_dir = Path(tempfile.mkdtemp(prefix="rdmalab-soft-"))
    pcap = out_dir / f"{name}.pcap"
    reset_default_fabric(fab)
    buf = io.StringIO()
    try:
        with fab.write_pcap(str(pcap)), contextlib.redirect_stdout(buf):
            data = lab_ops.run_scenario(name, "soft0", "soft1", size, seed, iters)
            fab.run()
    finally:
        reset_default_fabric(None)
    return ScenarioResult(name, "soft", "soft engine soft0/soft1", data, pcap, stdout=buf.getvalue())


def host_rxe_pair() -> tuple[str, str] | None:
    """Two rxe devices of this host that have an IPv4 GID at index 1, or ``None``."""
    rxe = [d for d in host_devices() if d.driver == "rxe" and d.ipv4_gid_index == 1]
    if len(rxe) >= 2:
        return rxe[0].name, rxe[1].name
    return None


def _run_host(name: str, pair: tuple[str, str], size: int, seed: int, iters: int, timeout: float) -> ScenarioResult:
    work = Path(tempfile.mkdtemp(prefix="rdmalab-host-"))
    prog = work / "lab_ops_pyverbs.py"
    prog.write_text(pyverbs_source())
    cmd = [PYVERBS_PYTHON, str(prog), name, "--dev-a", pair[0], "--dev-b", pair[1], "--size", str(size),
           "--seed", str(seed), "--iters", str(iters), "--out", str(work / "result.json")]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise VMError(f"scenario {name} on host {pair[0]}/{pair[1]} failed (status {p.returncode}):\n{p.stderr[-2000:]}")
    data = json.loads((work / "result.json").read_text())
    # capturing on the host needs root; without it the scenario still runs, without packets
    return ScenarioResult(name, "rxe", f"host {pair[0]}/{pair[1]}", data, None, p.stdout, p.stderr)


def vm_script(name: str, size: int, seed: int, loss: float, iters: int = 1) -> str:
    """The job script that runs scenario ``name`` on rxe1 -> rxe2 inside the lab VM."""
    lines = []
    if loss:
        lines.append(f"tc qdisc add dev $KA_NETDEV root netem loss {loss * 100:g}%")
    lines.append(f"$PYVERBS_PYTHON lab_ops_pyverbs.py {shlex.quote(name)} --dev-a $KA_DEV --dev-b $KB_DEV "
                 f"--size {int(size)} --seed {int(seed)} --iters {int(iters)} --out result.json")
    return "\n".join(lines)


def _run_vm(name: str, vm: VM, size: int, seed: int, loss: float, iters: int, timeout: float) -> ScenarioResult:
    res = vm.run_job(vm_script(name, size, seed, loss, iters), files={"lab_ops_pyverbs.py": pyverbs_source()},
                 timeout=timeout, capture=("veth2",), name=name)
    assert res.job_dir is not None
    result_file = res.job_dir / "result.json"
    if res.rc != 0 or not result_file.exists():
        raise VMError(f"scenario {name} failed in the VM (status {res.rc}):\n{res.stderr[-3000:]}")
    data = json.loads(result_file.read_text())
    where = f"VM ({'KVM' if res.kvm else 'TCG'}) rxe1/rxe2"
    return ScenarioResult(name, "rxe", where, data, res.pcap_path, res.stdout, res.stderr, res.boot_s,
                          extra={"job_dir": str(res.job_dir), "loss": loss, "capture_drops": res.capture_drops})


_SHARED: VM | None = None


def shared_vm(**options: Any) -> VM:
    """One lab VM per Python process (booted on first use, powered off at exit).

    With ``RDMALAB_VM_DIR`` set to the work directory of a VM another process runs, it attaches
    to that one instead (:meth:`VM.attach`), and leaves it running at exit.
    """
    global _SHARED
    if _SHARED is None or not _SHARED.running:
        if os.environ.get("RDMALAB_VM_DIR"):
            _SHARED = VM.attach(os.environ["RDMALAB_VM_DIR"], progress=options.get("progress", True))
        else:
            _SHARED = VM(**options).start()
        atexit.register(_SHARED.close)
    return _SHARED
