"""The columnar decoder and the per-packet decoder agree on which frames hold each column, on every
capture of the repository: a filter that names only a field (``-Y rdmalab.payload.len``) picks
the same frames on both paths.  A differential run of every column as a filter and as a
``-T fields`` field found four that did not: ``frame.time_ns``, ``rdmalab.icrc.ok`` and
``rdmalab.crc32c.ok`` were columns only (the per-packet path had no such field: the filter picked
no frame there), and ``rdmalab.payload.len`` was absent from iWARP FPDUs on the columnar path;
``-T fields -e rdmalab.encap`` said "other" where the per-packet path says "eth" or "ib"."""

from __future__ import annotations

import glob
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rdmalab.capture import frame_fields, read
from rdmalab.capture.columnar import COLUMN_NAMES, read_columns
from rdmalab.capture.fieldtext import filter_mask
from rdmalab.capture.filter import compile_filter
from rdmalab.capture.render import Conversations, TcpWindowScaling
from rdmalab.cli import main

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = sorted(glob.glob(str(ROOT / "captures" / "*.pcap")))


@pytest.mark.parametrize("path", CAPTURES, ids=os.path.basename)
def test_every_column_is_present_on_the_same_frames(path: str) -> None:
    cols = read_columns(path)
    windows = TcpWindowScaling()
    conversations = Conversations(analysis=True)  # (and tshark's TCP analysis, which the columns hold too)
    fields = []
    for cp in read(path):  # (as decode feeds them: every frame, in order)
        fields.append(frame_fields(cp, windows=windows))
        conversations.add(fields[-1], cp.packet, windows)
    assert cols.n == len(fields)
    for name in sorted(COLUMN_NAMES):
        flt = compile_filter(name)
        per_packet = np.array([flt(f) for f in fields], dtype=bool)
        columnar = filter_mask(flt, cols)  # (the columns, and Columns.multi for an ICMP error's quote)
        assert (columnar == per_packet).all(), (name, np.flatnonzero(columnar != per_packet)[:5] + 1)


def _fields(args: list[str], capsys: Any) -> str:
    assert main(["decode", "-T", "fields", "-e", "frame.number", *args]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize(("name", "field"), [
    ("siw_crc_send_bw.pcap", "rdmalab.payload.len"), ("siw_crc_send_bw.pcap", "rdmalab.crc32c.ok"),
    ("rxe_atomic_cswap.pcap", "rdmalab.encap"), ("hw_ib_connectx_erf.pcap", "rdmalab.encap"),
    ("rxe_write_bw_loss.pcap", "rdmalab.icrc.ok"), ("hw_ib_connectx_erf.pcap", "frame.time_ns"),
    ("siw_write_bw_midstream.pcap", "rdmalab.payload.len"),
])
def test_the_values_agree(name: str, field: str, capsys: Any) -> None:
    path = str(ROOT / "captures" / name)
    columnar = _fields(["-e", field, "-r", path], capsys)
    assert columnar == _fields(["-e", field, "--no-columnar", "-r", path], capsys)
    assert any(line.split("\t")[1] for line in columnar.splitlines())  # the field is there on some frames
