"""Issue 37: a function or method named ``run`` means "run the event loop, or the program, until it is
done" (docs/architecture.md, "Names: what `run` means"); anything else that runs something says what.

Every ``run`` in the package is listed here with what it runs; a new one fails until it is added (with
the reason it means the same) or named for what it does.
"""

from __future__ import annotations

import ast
from pathlib import Path

import rdmalab

ROOT = Path(rdmalab.__file__).parent

# (module, class or "" for a module function) -> what its run runs until done
RUNS = {
    ("fabric/loop.py", "Loop"): "the loop (the loops' interface)",
    ("fabric/loop.py", "VirtualLoop"): "the loop",
    ("fabric/loop.py", "WallClockLoop"): "the loop",
    ("verbs/engine/carrier.py", "Scheduler"): "the carrier's loop (the carrier seam's interface)",
    ("fabric/tcpkernel.py", "KernelTcp"): "its wall-clock loop",
    ("fabric/switched_carrier.py", "SwitchedCarrier"): "the switched fabric's loop",
    ("fabric/switched.py", "SwitchedFabric"): "its loop, in microseconds",
    ("fabric/ibfabric.py", "IBFabric"): "its loop (the IB carrier as the engine's scheduler)",
    ("fabric/ibsm.py", "SubnetManager"): "the subnet manager until the subnet is up (sweep to Master), as opensm's main",
    ("fabric/harness.py", "EndpointPair"): "the pair's carrier until nothing is in flight",
    ("fabric/iwpair.py", "IwPair"): "the pair's fabric until nothing is in flight",
    ("lab/pair.py", "LivePair"): "until what is in flight is done (the kernel runs it; this waits)",
    ("tools/pingpong.py", ""): "the program's main",
    ("tools/perftest/main.py", ""): "the program's main",
    ("tools/rping.py", ""): "the program's main",
    ("tools/udaddy.py", ""): "the program's main",
    ("live/vm.py", "VM"): "deprecated name of VM.run_job (docs/live.md named it)",
    ("live/labruns.py", ""): "deprecated name of run_scenario (docs/live.md named it)",
}


def _runs() -> set[tuple[str, str]]:
    found = set()
    for path in ROOT.rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        rel = path.relative_to(ROOT).as_posix()
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "run":
                found.add((rel, ""))
            elif isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == "run":
                        found.add((rel, node.name))
    return found


def test_every_run_means_run_until_done() -> None:
    found = _runs()
    new = sorted(found - RUNS.keys())
    assert not new, f"a `run` that is not listed (name it for what it does, or list it here): {new}"
    gone = sorted(RUNS.keys() - found)
    assert not gone, f"listed but no longer defined (take them out of RUNS): {gone}"
