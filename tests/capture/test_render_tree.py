"""``rdmalab decode -V``: the lines of a header are remembered from frame to frame, and written by its
class's template where it has one; a tree so written is the tree made afresh from the headers' spans, on
every capture in captures/."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import pytest

from rdmalab.capture import read, render

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("path", sorted(glob.glob(str(ROOT / "captures" / "*.pcap"))), ids=os.path.basename)
def test_remembered_lines_are_the_lines_made_afresh(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    render._LINES.clear()
    packets = list(read(path))
    remembered = [render.frame_tree(cp) for cp in packets] + [render.frame_tree(cp) for cp in packets]
    fresh = []
    monkeypatch.setattr(render, "_template", lambda *_a: None)  # (every header from its spans)
    for cp in packets:
        render._LINES.clear()
        fresh.append(render.frame_tree(cp))
    assert remembered == fresh + fresh
