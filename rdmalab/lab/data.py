"""Where the lab's notebook sources and captures are: in a clone, or inside an installed wheel.

A clone has them at the top of the repository (``notebooks/``, ``captures/``).  A wheel carries
copies as package data under ``rdmalab/lab/_data/`` (``setup.py`` copies them in at build
time, so the repository keeps one copy of each file).  The environment variables
``$RDMALAB_NOTEBOOKS`` and ``$RDMALAB_CAPTURES`` override both.

The clone is preferred when both exist, so that an editable install in a checkout always sees
the notebooks being edited, never a stale copy from an earlier build.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Package data folder of an installed wheel (absent in a clone).
SHIPPED = Path(__file__).resolve().parent / "_data"


def repo_root() -> Path:
    """The checkout this module was imported from (meaningful only in a clone)."""
    return Path(__file__).resolve().parents[2]


def _resolve(kind: str, env: str) -> list[Path]:
    """The candidate folders for ``kind`` in search order."""
    out = []
    if os.environ.get(env):
        out.append(Path(os.environ[env]))
    out += [repo_root() / kind, SHIPPED / kind]
    return out


def notebooks_dirs() -> list[Path]:
    return _resolve("notebooks", "RDMALAB_NOTEBOOKS")


def notebooks_dir() -> Path:
    """The first folder that holds notebook sources (``NN-name.py``), else the first candidate."""
    cands = notebooks_dirs()
    if os.environ.get("RDMALAB_NOTEBOOKS"):
        return cands[0]  # an explicit choice is honoured even when empty, so the error names it
    for d in cands:
        if any(d.glob("[0-9][0-9]-*.py")):
            return d
    return cands[0]


def captures_dirs() -> list[Path]:
    return _resolve("captures", "RDMALAB_CAPTURES")
