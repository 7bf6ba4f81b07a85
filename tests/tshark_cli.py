"""rdmalab's ``decode`` run in the test's process and tshark run as the oracle, for the tests that
compare their outputs (``tests/capture``)."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

import pytest

from rdmalab.cli import main

requires_tshark = pytest.mark.skipif(shutil.which("tshark") is None,
                                     reason="tshark (Wireshark) is not installed; CI installs it")


def decode(capsys: Any, *args: str) -> str:
    """What ``rdmalab decode ARGS`` prints (it must succeed)."""
    assert main(["decode", *args]) == 0
    out: str = capsys.readouterr().out
    return out


def tshark(*args: str) -> str:
    """What ``tshark -n ARGS`` prints."""
    return subprocess.run(["tshark", "-n", *args], capture_output=True, text=True, check=True).stdout


def shown_frames(out: str, mode: list[str]) -> list[str]:
    """The numbers of the frames an output of ``rdmalab decode`` shows, in order, for the output
    options ``mode``: summary lines (none), ``-V``, ``-T json``, ``-T fields -e frame.number ...``."""
    if mode[:2] == ["-T", "json"]:
        return [str(p["_source"]["layers"]["frame"]["frame.number"]) for p in json.loads(out)]
    if mode[:1] == ["-V"]:
        return [line.split()[1].rstrip(":") for line in out.splitlines() if line.startswith("Frame ")]
    return [line.split()[0] for line in out.splitlines() if line.strip()]
