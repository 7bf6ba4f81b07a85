"""The columnar decoder against tshark, field by field, on every capture in captures/."""

from __future__ import annotations

import gzip
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from rdmalab.capture import read
from rdmalab.capture.defects import explain
from rdmalab.capture.columnar import COLUMNS, format_column, read_columns, record_blocks

CAPTURES = Path(__file__).resolve().parents[2] / "captures"
FILES = sorted(p for p in CAPTURES.glob("*") if p.suffix in (".pcap", ".pcapng")) if CAPTURES.is_dir() else []
requires_tshark = pytest.mark.skipif(shutil.which("tshark") is None,
                                     reason="tshark (Wireshark) is not installed; CI installs it")

# Our columns that tshark 4.0 also has (rdmalab.* and frame.time_ns are ours alone).
TSHARK_FIELDS = [c.name for c in COLUMNS if not c.name.startswith("rdmalab.") and c.name != "frame.time_ns"]


def tshark_fields(path: Path, fields: list[str]) -> list[list[str]]:
    cmd = ["tshark", "-n", "--disable-protocol", "rpcordma", "-r", str(path), "-T", "fields", "-E", "occurrence=f"]
    for f in fields:
        cmd += ["-e", f]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return [line.split("\t") for line in out.splitlines()]


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_columns_agree_with_tshark(path: Path) -> None:
    cols = read_columns(path)
    frames = list(read(path))
    ours = {f: format_column(cols, f) for f in TSHARK_FIELDS}
    theirs = tshark_fields(path, TSHARK_FIELDS)
    assert len(theirs) == cols.n, f"tshark read {len(theirs)} packets, rdmalab {cols.n}"
    diffs = []
    compared = 0
    for i, row in enumerate(theirs):
        for j, f in enumerate(TSHARK_FIELDS):
            want = row[j] if j < len(row) else ""
            got = ours[f][i]
            if got == "" and want == "":
                continue
            compared += 1
            if got != want:
                kind = "only_rdmalab" if want == "" else "only_wireshark" if got == "" else "value"
                if explain(frames[i], {}, f, kind) is not None:
                    continue
                diffs.append(f"frame {i + 1} {f}: rdmalab {got!r}, tshark {want!r}")
    assert compared > 0
    assert not diffs, f"{len(diffs)} differences:\n" + "\n".join(diffs[:40])
