from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Timing is not what these tests check: a loaded 2-core CI machine must not fail them.
settings.register_profile("rdmalab", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("rdmalab")

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = ROOT / "captures"


@pytest.fixture
def captures_dir() -> Path:
    return CAPTURES

