from __future__ import annotations

import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = ROOT / "captures"


@pytest.fixture
def captures_dir() -> Path:
    return CAPTURES


def tshark_path() -> str | None:
    return shutil.which("tshark")


requires_tshark = pytest.mark.skipif(tshark_path() is None, reason="tshark (Wireshark) is not installed")
