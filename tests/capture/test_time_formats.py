"""The summary line's time as tshark's ``-t`` shows it (absolute with the date, time of day, UTC, since the
frame before, since the frame shown before, since the epoch), and tshark's ``-n``, accepted (rdmalab never
resolves names).  Against tshark, exactly, on captures of microsecond and nanosecond times (ERF's own: each
time to its capture's precision, cut there, as tshark shows it), in two time zones.  Before:
"unrecognized arguments: -t" (and "-n"); then nanosecond times were rounded to six digits."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from rdmalab.capture.render import TIME_FORMATS, TimeColumn
from rdmalab.cli import main

CAPTURES = Path(__file__).resolve().parents[2] / "captures"
requires_tshark = pytest.mark.skipif(shutil.which("tshark") is None,
                                     reason="tshark (Wireshark) is not installed; CI installs it")
#: a line's number and time: the time with a date ("2026-11-21 06:21:08.901798") or without
_LINE = re.compile(r"^\s*(\d+)\s+((?:\d{4}-\d\d-\d\d )?[\d:.]+)\s")


def _times(text: str) -> list[tuple[str, str]]:
    out = []
    for line in text.splitlines():
        m = _LINE.match(line)
        assert m, line
        out.append((m.group(1), m.group(2)))
    return out


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("tz", ["UTC", "Asia/Kolkata"])
@pytest.mark.parametrize("name", ["rxe_rping.pcap", "siw_read_bw.pcap", "hw_ib_connectx_erf.pcap"])
def test_time_formats_as_tshark(name: str, tz: str, capsys: Any, monkeypatch: Any) -> None:
    monkeypatch.setenv("TZ", tz)
    import time

    time.tzset()
    # the zone must be one the machine knows (tzdata, scripts/test.sh), or both sides would fall back to UTC
    assert time.timezone == {"UTC": 0, "Asia/Kolkata": -19800}[tz], (tz, time.timezone)
    try:
        path = str(CAPTURES / name)
        flt = "frame.number > 2 && !(frame.number in {5..9}) && frame.number < 60"
        for fmt in TIME_FORMATS:
            want = subprocess.run(["tshark", "-n", "-t", fmt, "-r", path, "-Y", flt], capture_output=True, text=True,
                                  check=True, env={"TZ": tz, "PATH": "/usr/bin:/bin"}).stdout
            assert main(["decode", "-n", "-t", fmt, "-r", path, "-Y", flt]) == 0
            got = capsys.readouterr().out
            ours, theirs = _times(got), _times(want)
            assert ours == theirs and ours, fmt  # (to the capture's precision: 9 digits for ERF's own times)
            # the rest of each line is -t r's
            assert main(["decode", "-r", path, "-Y", flt]) == 0
            plain = capsys.readouterr().out.splitlines()
            for line, before in zip(got.splitlines(), plain, strict=True):
                m, mb = _LINE.match(line), _LINE.match(before)
                assert m is not None and mb is not None
                assert line[m.end(2):].lstrip() == before[mb.end(2):].lstrip()
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_the_formats_count_every_frame_in_order() -> None:
    col = TimeColumn("d")
    texts = []
    for ns, shown in ((10**18, True), (10**18 + 1_500_000, False), (10**18 + 2_000_000, True)):
        col.seen(ns)
        if shown:
            texts.append(col.text())
    assert texts == ["0.000000", "0.000500"]  # since the frame before, shown or not
    col = TimeColumn("dd")
    for ns in (10**18, 10**18 + 1_500_000, 10**18 + 2_000_000):
        col.seen(ns)
    assert col.text() == "0.000000"  # the first shown
    col.seen(10**18 + 3_000_000)
    assert col.text() == "0.001000"
    with pytest.raises(ValueError, match="-t x: not a time format"):
        TimeColumn("x")
