"""Shared test helpers for the Wireshark oracle (a plain module: test files import it by name)."""

from __future__ import annotations

import shutil

import pytest


def tshark_path() -> str | None:
    return shutil.which("tshark")


requires_tshark = pytest.mark.skipif(tshark_path() is None, reason="tshark (Wireshark) is not installed")
