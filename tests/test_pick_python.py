"""scripts/pick_python.sh: the interpreter that scripts/setup.sh makes .venv with (issue 21, start-up)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PICK = ROOT / "scripts" / "pick_python.sh"


def _pick(**env: str) -> str:
    base = {k: v for k, v in os.environ.items() if k != "PYTHON"}
    out = subprocess.run(["bash", str(PICK)], env={**base, **env}, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_python_in_the_environment_wins() -> None:
    assert _pick(PYTHON="/opt/python3.12/bin/python3") == "/opt/python3.12/bin/python3"


def test_the_distributions_python_when_it_is_new_enough_else_python3_from_path() -> None:
    system = Path("/usr/bin/python3")
    new_enough = system.exists() and subprocess.run(
        [str(system), "-c", "import sys; sys.exit(sys.version_info < (3, 11))"], timeout=60).returncode == 0
    assert _pick() == ("/usr/bin/python3" if new_enough else "python3")


def test_setup_makes_the_venv_with_the_picked_interpreter() -> None:
    script = (ROOT / "scripts" / "setup.sh").read_text(encoding="utf-8")
    assert 'py="$(bash scripts/pick_python.sh)"' in script
    assert '"$py" -m venv .venv' in script and "python3 -m venv .venv" not in script
