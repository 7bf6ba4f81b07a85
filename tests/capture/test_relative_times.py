"""tshark's relative times in ``-T fields``: ``frame.time_relative`` (since the capture's first frame),
``frame.time_delta`` (since the frame read before) and ``frame.time_delta_displayed`` (since the frame
shown before; 0 for the first one shown), on the columnar path (one process, worker processes, the
per-packet columns of other link types), the per-packet path (``--no-columnar``) and in ``-T json``.
They are the first fields an engineer asks tshark for; before, ``-e frame.time_relative`` was "not a
field rdmalab knows".  Checked against tshark's own output where tshark is installed, and against
times computed here from the record headers (nanosecond captures, times that go backwards)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from tshark_cli import decode, shown_frames

from rdmalab.capture import records
from rdmalab.capture.fieldtext import field_text, relative_text
from rdmalab.capture.filter import FilterError, compile_filter
from rdmalab.capture.pcapwriter import CaptureWriter
from rdmalab.cli import main

ROOT = Path(__file__).resolve().parents[2]
CAPS = ROOT / "captures"
requires_tshark = pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark (Wireshark) is not installed")
TIMES = ["frame.time_relative", "frame.time_delta", "frame.time_delta_displayed"]
FIELDS = ["frame.number", *TIMES, "ip.src"]


def _ours(path: Path, flt: str | None, capsys: Any, *extra: str) -> str:
    args = ["decode", "-r", str(path), "-T", "fields", *[a for f in FIELDS for a in ("-e", f)], *extra]
    if flt:
        args += ["-Y", flt]
    assert main(args) == 0
    return capsys.readouterr().out


def _expected(path: Path, keep: Any) -> str:
    """The lines computed here from the record headers, ``keep(i)`` choosing the frames shown."""
    ns = [r.ns for r in records(path)]
    lines, shown = [], None
    for i, t in enumerate(ns):
        if not keep(i):
            continue
        rel, delta = t - ns[0], t - ns[i - 1] if i else 0
        disp = 0 if shown is None else t - shown
        shown = t
        lines.append(f"{i + 1}\t{relative_text(rel)}\t{relative_text(delta)}\t{relative_text(disp)}")
    return "\n".join(lines) + "\n"


def _backwards(tmp_path: Path) -> Path:
    """Frames of a real capture at nanosecond times that also go backwards (a merged capture)."""
    frames = [r.data for r in records(CAPS / "rxe_read_bw.pcap")][:30]
    t, times = 1_795_242_068_901_798_123, []
    for k in range(len(frames)):
        t += (-1_500_000_007 if k % 7 == 3 else 123_456_789 + k)
        times.append(t)
    path = tmp_path / "back.pcapng"
    with CaptureWriter(path, format="pcapng", nano=True) as w:  # type: ignore[arg-type]
        for when, data in zip(times, frames, strict=True):
            w.write(data, when)
    return path


@pytest.mark.parametrize("mode", [[], ["--no-columnar"]])
def test_times_against_the_record_headers(tmp_path: Path, capsys: Any, mode: list[str]) -> None:
    path = _backwards(tmp_path)

    def four(text: str) -> str:
        return "".join("\t".join(line.split("\t")[:4]) + "\n" for line in text.splitlines())

    got = four(_ours(path, None, capsys, *mode))
    assert got == _expected(path, lambda i: True)
    assert any(line.split("\t")[2].startswith("-") for line in got.splitlines()), got  # it did go backwards
    got = four(_ours(path, "udp", capsys, *mode))
    shown = {int(line.split("\t")[0]) - 1 for line in got.splitlines()}
    assert 0 < min(shown) and len(shown) < 30, shown  # frame 1 (TCP) is not shown: the first shown counts from itself
    assert got == _expected(path, lambda i: i in shown)


def test_worker_processes_count_from_the_blocks_before(tmp_path: Path) -> None:
    """Ranges of 4 KiB in two workers: each block's first delta is from the block before it."""
    path = CAPS / "rxe_send_bw_loss.pcap"
    one = b"".join(field_text(path, FIELDS[:3], workers=1))
    many = b"".join(field_text(path, FIELDS[:3], workers=2, block_bytes=4096, parallel_min_bytes=0))
    assert one == many and len(one.splitlines()) > 100
    assert one.decode() == "".join("\t".join(line.split("\t")[:3]) + "\n"
                                   for line in _expected(path, lambda i: True).splitlines())


@requires_tshark
@pytest.mark.parametrize("name", ["rxe_read_bw.pcap", "siw_write_bw.pcap", "rxe_send_bw_loss.pcap",
                                  "hw_ib_connectx_erf.pcap"])
@pytest.mark.parametrize("flt", [None, "tcp", "infiniband.bth.opcode == 12", "frame.len > 100"])
def test_as_tshark_prints_them(name: str, flt: str | None, capsys: Any) -> None:
    path = CAPS / name
    cmd = ["tshark", "-r", str(path), "-T", "fields", *[a for f in FIELDS for a in ("-e", f)]]
    if flt:
        cmd += ["-Y", flt]
    want = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    assert _ours(path, flt, capsys) == want
    assert _ours(path, flt, capsys, "--no-columnar") == want


@requires_tshark
def test_json_delta_displayed_of_the_first_frame_shown_is_zero(capsys: Any) -> None:
    """``-T json -Y``: the first frame shown counts from itself (it counted from frame 1 before)."""
    path = CAPS / "rxe_read_bw.pcap"
    flt = "infiniband.bth.opcode == 12"
    want = json.loads(subprocess.run(["tshark", "-r", str(path), "-T", "json", "-Y", flt], capture_output=True,
                                     text=True, check=True).stdout)
    assert main(["decode", "-r", str(path), "-T", "json", "-Y", flt]) == 0
    got = json.loads(capsys.readouterr().out)
    keys = ["frame.number", *TIMES]
    assert [{k: p["_source"]["layers"]["frame"][k] for k in keys} for p in got] == \
        [{k: p["_source"]["layers"]["frame"][k] for k in keys} for p in want]
    assert got[0]["_source"]["layers"]["frame"]["frame.time_delta_displayed"] == "0.000000000"


def test_a_filter_on_the_time_since_the_frame_shown_before_is_a_clear_error() -> None:
    """frame.time_delta_displayed depends on what the filter itself shows: refused, naming the two it
    can read instead (frame.time_relative and frame.time_delta were refused too before)."""
    with pytest.raises(FilterError, match=r"frame.time_delta_displayed.*filter on frame.time_delta"):
        compile_filter("frame.time_delta_displayed > 1")
    with pytest.raises(FilterError, match=r"frame.time_relative is a time in seconds"):
        compile_filter("frame.time_relative > 10.0.0.1")
    for name in ("frame.time_relative", "frame.time_delta"):
        assert compile_filter(f"{name} > 1.5").fields == {name}


TIME_FILTERS = ["frame.time_relative > 5", "frame.time_relative >= 0.5 && frame.time_relative < 1",
                "frame.time_delta > 0.001", "frame.time_delta == 0", "frame.time_relative in {1..2}",
                "frame.time_delta < 0.00001 and infiniband", "frame.time_delta > 0.0002 || tcp.flags.syn == 1"]


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("name", ["rxe_send_bw_loss.pcap", "siw_read_bw.pcap", "hw_ib_connectx_erf.pcap"])
def test_filters_on_the_times_pick_tshark_frames_on_every_output(name: str, capsys: Any) -> None:
    """``-Y 'frame.time_relative > 5'``: the frames tshark picks, in the summary lines, -V, -T json and
    -T fields (the time of every frame counted, shown or not)."""
    path = str(CAPS / name)
    for flt in TIME_FILTERS:
        want = subprocess.run(["tshark", "-n", "-r", path, "-Y", flt, "-T", "fields", "-e", "frame.number"],
                              capture_output=True, text=True, check=True).stdout.split()
        for mode in ([], ["--no-columnar"], ["-V"], ["-T", "json"], ["-T", "fields", "-e", "frame.number"]):
            assert shown_frames(decode(capsys, "-r", path, "-Y", flt, *mode), mode) == want, (flt, mode)


def test_damaged_times_past_2262_agree_on_both_paths(tmp_path: Path, capsys: Any) -> None:
    """Two frames whose timestamps' high word is damaged (the year 586524, past what an int64 of
    nanoseconds holds): the columnar path counted them as 0 s apart from everything (its clamped
    integers); now both paths count with the time the per-packet path has (its float seconds)."""
    from test_nanosecond_times import _far_future  # tests/capture is on sys.path (pytest's rootdir insertion)

    path = _far_future(tmp_path)
    for flt in (None, "frame.number > 2"):
        columnar = _ours(path, flt, capsys)
        assert columnar == _ours(path, flt, capsys, "--no-columnar")
        rows = [line.split("\t") for line in columnar.splitlines()]
        third = next(r for r in rows if r[0] == "3")
        assert third[1].startswith("18444948764494.9") and third[2].startswith("18444948764494.9"), third
        fourth = next(r for r in rows if r[0] == "4")
        assert fourth[2].startswith("-18444948764494.9"), fourth  # back from the year 586524


# ---------------------------------------------------------------------------- filters on the times, from the columns

#: every output a filter picks frames for
MODES = {"summaries": [], "fields": ["-T", "fields", "-e", "frame.number", "-e", "frame.time_delta"],
         "json": ["-T", "json"], "trees": ["-V"]}


def _between(path: Path) -> tuple[float, float]:
    """A delta and a relative time that split the capture's frames (each filter keeps some, not all)."""
    ns = [r.ns for r in records(path)]
    deltas = sorted(b - a for a, b in zip(ns, ns[1:], strict=False))
    return deltas[len(deltas) // 2] / 1e9, (ns[len(ns) // 2] - ns[0]) / 1e9


@pytest.mark.parametrize("mode", list(MODES))
def test_time_filters_are_answered_from_the_columns_as_frame_by_frame(mode: str, tmp_path: Path, capsys: Any,
                                                                      monkeypatch: Any) -> None:
    """``-Y 'frame.time_delta > D'``: the columns answer it (it went frame by frame for every frame before: 15 s
    against tshark's 1.3 s on 200,000 frames), and keep the frames the per-packet path keeps, on every capture
    of captures/ (ERF's own times, RoCEv1, iWARP, TCP reused ports ...), times that go backwards too."""
    from rdmalab.cli import decode as cli

    answered: list[str] = []
    real_answer, real_filter = cli._columns_answer, cli._columns_filter
    monkeypatch.setattr(cli, "_columns_answer",
                        lambda flt: bool(real_answer(flt)) and (answered.append(flt.expr) or True))
    monkeypatch.setattr(cli, "_columns_filter",
                        lambda flt, args: bool(real_filter(flt, args)) and (answered.append(flt.expr) or True))
    real_fields = cli._fields_columnar
    monkeypatch.setattr(cli, "_fields_columnar", lambda *a: answered.append("fields") or real_fields(*a))
    kept = dropped = 0
    for path in [*sorted(CAPS.glob("*.pcap")), _backwards(tmp_path)]:
        if len(list(records(path))) < 3:
            continue
        delta, relative = _between(path)
        for expr in (f"frame.time_delta > {delta!r}", f"frame.time_relative <= {relative!r}",
                     f"frame.time_delta <= {delta!r} && (udp || tcp)", f"!(frame.time_relative > {relative!r}) || arp"):
            answered.clear()
            got = decode(capsys, "-r", str(path), "-Y", expr, *MODES[mode])
            assert got == decode(capsys, "--no-columnar", "-r", str(path), "-Y", expr, *MODES[mode]), (path.name, expr)
            frames = shown_frames(got, MODES[mode])
            kept, dropped = kept + len(frames), dropped + len(list(records(path))) - len(frames)
            if "hw_ib" not in path.name and not (mode in ("json", "trees") and path.suffix == ".pcapng"):
                assert answered, (path.name, expr, "not answered from the columns")
    assert kept > 1000 and dropped > 1000


def test_time_filters_in_workers_count_from_the_blocks_before(tmp_path: Path) -> None:
    """Blocks of 4 KiB rendered by two worker processes (and the summary lines, whose filter runs beside them on
    the columns of every block in order): each block's first frame.time_delta is since the block before's last
    frame, as in one process and frame by frame."""
    from rdmalab.capture.columnar_summary import summary_bytes

    path = CAPS / "rxe_send_bw_loss.pcap"
    delta, relative = _between(path)
    for expr in (f"frame.time_delta > {delta!r}", f"frame.time_relative > {relative!r} && frame.time_delta < {delta!r}"):
        one = b"".join(field_text(path, FIELDS, filter_expr=expr, workers=1))
        many = b"".join(field_text(path, FIELDS, filter_expr=expr, workers=2, block_bytes=4096, parallel_min_bytes=0))
        assert one == many and 30 < len(one.splitlines()) < len(list(records(path))) - 30, expr
        flt = compile_filter(expr)
        lines = b"".join(summary_bytes(path, flt=flt, filter_expr=expr, workers=2, block_bytes=4096,
                                       parallel_min_bytes=0))
        assert [line.split()[0] for line in lines.splitlines()] == [line.split(b"\t")[0] for line in one.splitlines()]


def test_time_filters_on_damaged_times_past_2262(tmp_path: Path, capsys: Any) -> None:
    """Frames whose timestamps are past what an int64 of nanoseconds holds: the columns count the filter's times
    with Python's integers, as the per-packet path, on every output."""
    from test_nanosecond_times import _far_future  # tests/capture is on sys.path (pytest's rootdir insertion)

    path = str(_far_future(tmp_path))
    for expr in ("frame.time_delta > 1000", "frame.time_relative < 100", "frame.time_delta < 0"):
        for mode in MODES.values():
            got = decode(capsys, "-r", path, "-Y", expr, *mode)
            assert got == decode(capsys, "--no-columnar", "-r", path, "-Y", expr, *mode), (expr, mode)
            assert shown_frames(got, mode), (expr, mode)


def test_columns_without_their_clock_do_not_answer_a_time() -> None:
    """A table whose frames were not counted from the frames before it says so, rather than answer 0."""
    from rdmalab.capture.columnar import iter_columns

    cols = next(iter(iter_columns(CAPS / "rxe_send_bw_loss.pcap")))
    with pytest.raises(KeyError, match="stamp_times"):
        cols["frame.time_delta"]
    last = cols.stamp_times(int(cols.data["frame.time_ns"][0]), int(cols.data["frame.time_ns"][0]) - 5)
    assert last == int(cols.data["frame.time_ns"][-1])
    assert cols["frame.time_delta"][0] == 5e-9 and cols["frame.time_relative"][0] == 0.0
