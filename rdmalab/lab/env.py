"""Where the lab finds its captures, which backend it runs on, and what this machine offers."""

from __future__ import annotations

import html
import os
import platform
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import rdmalab
from rdmalab.lab import data
from rdmalab.live.labruns import host_rxe_pair
from rdmalab.live.vm import default_kernel, missing

#: "soft": rdmalab's engine on a simulated fabric.  "rxe": the kernel's Soft-RoCE through pyverbs,
#: on the host's rxe devices if it has two, else in the lab VM (rdmalab.live.vm; docs/live.md).
BACKENDS = ("soft", "rxe")


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def capture_path(name: str) -> Path:
    """A capture shipped with rdmalab (``captures/NAME``); ``$RDMALAB_CAPTURES`` overrides the folder."""
    candidates = []
    env = os.environ.get("RDMALAB_CAPTURES")
    if env:
        candidates.append(Path(env))
    candidates += [repo_root() / "captures", Path.cwd() / "captures", Path.cwd().parent / "captures"]

    candidates.append(data.SHIPPED / "captures")  # the copies an installed wheel carries (package data)
    for d in candidates:
        p = d / name
        if p.exists():
            return p
    raise FileNotFoundError(f"capture {name!r} not found in {', '.join(str(c) for c in candidates)}")


def backend(name: str | None = None) -> str:
    """The backend the notebooks use, after checking that this machine can run it.

    ``name`` if it is given and is not the notebooks' default ``"soft"``; otherwise
    ``$RDMALAB_BACKEND`` (``rdmalab lab --backend rxe`` sets it for every notebook), else
    ``"soft"``.  ``"rxe"`` needs two rxe devices on the host or what the lab VM needs
    (:func:`rdmalab.live.vm.missing`); if neither is there it raises ``RuntimeError`` saying what to
    install.
    """
    env = os.environ.get("RDMALAB_BACKEND") or None
    chosen = name if name and name != "soft" else (env or name or "soft")
    if chosen not in BACKENDS:
        raise ValueError(f"backend {chosen!r} is not known; choose one of {', '.join(BACKENDS)}")
    if chosen == "rxe":
        where = rxe_where()
        if where is None:
            gaps = "; ".join(str(g) for g in missing())
            raise RuntimeError(f"backend 'rxe' needs kernel rxe devices or the lab VM; this machine lacks: {gaps}")
    return chosen


def rxe_where() -> str | None:
    """Where the rxe backend runs here: ``"host rxeA/rxeB"``, ``"VM"``, or ``None`` (nowhere)."""
    # lazy: live.labruns loads rdmalab.fabric and the VM code

    pair = host_rxe_pair()
    if pair:
        return f"host {pair[0]}/{pair[1]}"
    return None if missing() else "VM"


def _backend_row() -> str:
    chosen = backend()
    if chosen == "rxe":
        return f"rxe (kernel Soft-RoCE through pyverbs, on {rxe_where()})"
    return "soft (rdmalab's engine on a simulated fabric)"


def _vm_row() -> str:
    gaps = missing()
    if gaps:
        return "cannot boot here; missing: " + "; ".join(str(g) for g in gaps)
    return f"can boot Linux {default_kernel()} with rxe devices (backend 'rxe' uses it)"


@dataclass
class Environment:
    rows: list[tuple[str, str]]

    def _repr_html_(self) -> str:
        body = "".join(f"<tr><td>{html.escape(k)}</td><td><code>{html.escape(v)}</code></td></tr>" for k, v in self.rows)
        return f"<table class='rdmalab-env'>{body}</table>"

    def __repr__(self) -> str:
        return "\n".join(f"{k:28} {v}" for k, v in self.rows)


def environment() -> Environment:
    """What the lab runs on: versions, backend, optional tools, kernel RDMA devices."""
    ib = Path("/sys/class/infiniband")
    devices = sorted(p.name for p in ib.iterdir()) if ib.is_dir() else []
    rows = [
        ("rdmalab", getattr(rdmalab, "__version__", "?")),
        ("Python", sys.version.split()[0]),
        ("platform", platform.platform(terse=True)),
        ("backend", _backend_row()),
        ("tshark (Wireshark)", shutil.which("tshark") or "not installed: the Wireshark comparisons are skipped"),
        ("kernel RDMA devices", ", ".join(devices) if devices else "none (fine: the soft engine needs none)"),
        ("lab VM (rdmalab vm)", _vm_row()),
    ]
    return Environment(rows)
