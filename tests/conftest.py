from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


@pytest.fixture(autouse=True)
def _close_the_widgets_a_test_made() -> Iterator[None]:
    """Close the ipywidgets a test made, at its end.  Left open until the interpreter exits, each one's
    ``__del__`` closes its comm through whichever comm manager is current by then (ipykernel's, once
    a test has imported ``ipykernel.ipkernel``), which never registered it, and Python prints a
    KeyError traceback for every widget.  Closed here, a widget leaves the manager it registered
    with."""
    def made() -> dict[str, Any]:
        mod = sys.modules.get("ipywidgets.widgets.widget")
        return getattr(mod, "_instances", {}) if mod is not None else {}

    before = set(made())
    yield
    for key, widget in list(made().items()):
        if key not in before:
            widget.close()
