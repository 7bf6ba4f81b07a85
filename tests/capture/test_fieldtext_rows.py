"""-T fields text pieces (rdmalab.capture.fieldtext) against Python's own formatting of the values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rdmalab.capture import fieldtext
from rdmalab.capture.columnar_schema import COLUMN_BY_NAME, Columns
from rdmalab.capture.fieldtext import _epoch_text, field_matrix, render_fields


def _rows(m: np.ndarray) -> list[str]:
    return [bytes(r).replace(b"\0", b"").decode() for r in m]


@pytest.mark.parametrize("span", [3, 10**6], ids=["seconds-table", "digits"])
def test_epoch_text_is_seconds_dot_nanoseconds(span: int) -> None:
    """A block spanning a few seconds (the table of their text) or many (digits row by row)."""
    rng = np.random.default_rng(span)
    ns = np.sort(rng.integers(0, span * 1_000_000_000, 2000)) + 999_999_998 * 1_000_000_000
    ns[:2] = [999_999_999_999_999_999, 1_000_000_000_000_000_000]  # 9 digits of seconds, then 10
    if span > 4096:
        ns[2] = 0
    assert _rows(_epoch_text(ns.astype(np.int64))) == [f"{v // 10**9}.{v % 10**9:09d}" for v in ns.tolist()]


def test_a_field_is_written_where_present_only() -> None:
    """A numeric field formatted for its present rows only: the other rows are empty cells, whatever the
    column holds there (a decoder leaves other protocols' bytes in it)."""
    n = 6
    present = np.array([True, False, True, False, False, True])
    psn = np.array([7, 123456, 0, 99, 5, 16777215], dtype=np.uint32)
    va = np.array([0xDEAD, 1, 0, 2, 3, 0xFFFFFFFFFFFFFFFF], dtype=np.uint64)
    data = {"infiniband.bth.psn": psn, "infiniband.reth.va": va, "frame.number": np.arange(n, dtype=np.uint64)}
    layers = {COLUMN_BY_NAME["infiniband.bth.psn"].layer: present, COLUMN_BY_NAME["infiniband.reth.va"].layer: present}
    cols = Columns(n, data, layers)
    want_psn = [str(v) if p else "" for v, p in zip(psn.tolist(), present.tolist(), strict=True)]
    assert _rows(field_matrix(cols, "infiniband.bth.psn")) == want_psn
    want_va = [f"0x{v:016x}" if p else "" for v, p in zip(va.tolist(), present.tolist(), strict=True)]
    lines = render_fields(cols, ["infiniband.bth.psn", "infiniband.reth.va"], separator=b",", quote=b'"')
    assert lines.decode().splitlines() == [f'"{a}","{b}"' if a else "," for a, b in zip(want_psn, want_va, strict=True)]


@pytest.mark.parametrize("idle", [1, 2])
def test_field_text_workers_by_default_as_many_as_default_workers(idle: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ``workers``, field_text starts :func:`default_workers` workers (one a core not busy now); one
    means no worker at all, and the text is the same either way."""
    path = str(Path(__file__).resolve().parents[2] / "captures" / "rxe_write_bw.pcap")
    names = ["frame.number", "infiniband.bth.psn", "infiniband.reth.dmalen"]
    one = b"".join(fieldtext.field_text(path, names, workers=1))
    used: list[int] = []
    real = fieldtext.blocks_in_workers

    def spy(*a: object, **k: object) -> object:
        used.append(int(k["workers"]))  # type: ignore[call-overload]
        return real(*a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(fieldtext, "blocks_in_workers", spy)
    monkeypatch.setattr(fieldtext, "default_workers", lambda: idle)
    got = b"".join(fieldtext.field_text(path, names, parallel_min_bytes=0, block_bytes=1 << 16))
    assert used == ([idle] if idle > 1 else [])
    assert got == one
