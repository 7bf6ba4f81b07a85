"""scripts/setup.sh installs rdmalab without showing a learner setuptools' boxed warning (issue 20, item 6)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _install(target: Path, warnings: str | None) -> str:
    """pip (this interpreter's, aimed at ``target`` with --python) installs the checkout editable, no deps."""
    env = dict(os.environ)
    env.pop("PYTHONWARNINGS", None)
    if warnings is not None:
        env["PYTHONWARNINGS"] = warnings
    out = subprocess.run([sys.executable, "-m", "pip", "--python", str(target / "bin" / "python"), "install", "-q",
                          "--no-deps", "-e", str(ROOT)], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout + out.stderr


@pytest.mark.slow
def test_setup_installs_without_the_editable_install_box(tmp_path: Path) -> None:
    pip_version = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True, text=True).stdout
    m = re.match(r"pip (\d+)\.(\d+)", pip_version)
    if not m or (int(m.group(1)), int(m.group(2))) < (22, 3):
        pytest.skip(f"pip --python needs pip 22.3 or later: {pip_version.strip()}")
    script = (ROOT / "scripts" / "setup.sh").read_text(encoding="utf-8")
    filt = re.search(r'^RDMALAB_PIP_WARNINGS="([^"]+)"', script, re.M)
    assert filt and 'PYTHONWARNINGS="$RDMALAB_PIP_WARNINGS" .venv/bin/python -m pip install' in script
    quiet, loud = tmp_path / "quiet", tmp_path / "loud"
    venv.create(quiet, with_pip=False)
    venv.create(loud, with_pip=False)
    shown = _install(quiet, filt.group(1))
    assert "Editable installation" not in shown and "!!" not in shown, shown
    # the same install without the filter shows the box: what the filter hides is really there
    assert "Editable installation" in _install(loud, None)
