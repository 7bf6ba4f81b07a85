"""Where the lab finds its captures, which backend it runs on, and what this machine offers."""

from __future__ import annotations

import html
import os
import platform
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

BACKENDS = ("soft",)  # "rxe" (kernel Soft-RoCE through pyverbs) comes with rdmalab.live


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def capture_path(name: str) -> Path:
    """A capture shipped with rdmalab (``captures/NAME``); ``$RDMALAB_CAPTURES`` overrides the folder."""
    candidates = []
    env = os.environ.get("RDMALAB_CAPTURES")
    if env:
        candidates.append(Path(env))
    candidates += [repo_root() / "captures", Path.cwd() / "captures", Path.cwd().parent / "captures"]
    from rdmalab.lab.data import SHIPPED  # the copies an installed wheel carries (package data)

    candidates.append(SHIPPED / "captures")
    for d in candidates:
        p = d / name
        if p.exists():
            return p
    raise FileNotFoundError(f"capture {name!r} not found in {', '.join(str(c) for c in candidates)}")


def backend(name: str | None = None) -> str:
    """The engine backend the notebooks use: ``name``, else ``$RDMALAB_BACKEND``, else ``"soft"``."""
    chosen = name or os.environ.get("RDMALAB_BACKEND") or "soft"
    if chosen not in BACKENDS:
        raise ValueError(f"backend {chosen!r} is not available yet; choose one of {BACKENDS}")
    return chosen


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
    import rdmalab

    ib = Path("/sys/class/infiniband")
    devices = sorted(p.name for p in ib.iterdir()) if ib.is_dir() else []
    rows = [
        ("rdmalab", getattr(rdmalab, "__version__", "?")),
        ("Python", sys.version.split()[0]),
        ("platform", platform.platform(terse=True)),
        ("backend", backend()),
        ("tshark (Wireshark)", shutil.which("tshark") or "not installed: the Wireshark comparisons are skipped"),
        ("kernel RDMA devices", ", ".join(devices) if devices else "none (fine: the soft engine needs none)"),
    ]
    return Environment(rows)
