"""The ``rdmalab`` program as a process of its own (``rdmalab.cli.command``): its entry points, and what it
does only there (``settled``: the cyclic garbage collector leaves the imported modules out), never in a
process that calls ``main`` (a test, a notebook)."""

from __future__ import annotations

import ast
import gc
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import rdmalab.cli as cli
from rdmalab.capture import fieldtext
from rdmalab.capture.columnar import iter_columns as real_columns  # (what fieldtext calls)

ROOT = Path(__file__).resolve().parent.parent
CAPTURE = ROOT / "captures" / "rxe_rc_pingpong.pcap"

# runs the program as `python -m rdmalab` does, and says how many objects the collector leaves out at its end
_PROBE = """
import gc, runpy, sys
left_out = []
real = gc.freeze
def freeze():
    real()
    left_out.append(gc.get_freeze_count())
gc.freeze = freeze
sys.argv = ["rdmalab", *sys.argv[1:]]
try:
    runpy.run_module("rdmalab", run_name="__main__")
except SystemExit as end:
    print("exit", end.code, "frozen", left_out, file=sys.stderr)
"""


def test_console_script_and_module_run_the_program() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["rdmalab"] == "rdmalab.cli:command"
    assert "command()" in (ROOT / "rdmalab" / "__main__.py").read_text()


@pytest.mark.parametrize(("argv", "lines"), [(["decode", "-r", str(CAPTURE), "-c", "3"], 3),
                                             (["analyze", str(CAPTURE), "--quiet"], None),
                                             (["stats", "-r", str(CAPTURE)], None)])
def test_the_program_leaves_its_modules_out_of_the_collector_before_its_work(argv: list[str], lines: int | None) -> None:
    got = subprocess.run([sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, check=True, cwd=ROOT)
    if lines is not None:
        assert len(got.stdout.splitlines()) == lines  # (the command's own output, as without it)
    else:
        assert got.stdout.strip()
    exit_line = got.stderr.strip().splitlines()[-1]
    code, frozen = exit_line.split(" frozen ")
    assert code == "exit 0"
    counts = ast.literal_eval(frozen)
    assert len(counts) == 1 and counts[0] > 10_000  # once, with the modules' objects (tens of thousands)


def test_settled_does_nothing_in_a_process_that_calls_main(capsys: pytest.CaptureFixture[str]) -> None:
    before = gc.get_freeze_count()
    assert cli.main(["decode", "-r", str(CAPTURE), "-c", "2"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
    assert gc.get_freeze_count() == before


def test_settled_in_the_program_freezes(monkeypatch: pytest.MonkeyPatch) -> None:
    called: list[bool] = []
    monkeypatch.setattr(gc, "freeze", lambda: called.append(True))  # (the module rdmalab.cli calls)
    cli.settled()
    assert called == []
    monkeypatch.setattr(cli, "_program", True)
    cli.settled()
    assert called == [True]


def test_field_text_blocks_are_larger_in_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default block of ``-T fields``: :data:`fieldtext.BLOCK_BYTES` in one process, the larger
    :data:`fieldtext.WORKER_BLOCK_BYTES` in workers; one given is used either way."""
    seen: list[tuple[str, int]] = []
    real_in_workers = fieldtext._in_workers

    def in_workers(p, render, extra, workers, block_bytes, progress):  # type: ignore[no-untyped-def]
        seen.append(("workers", block_bytes))
        return real_in_workers(p, render, extra, workers, block_bytes, progress)

    def columns(*a, block_bytes, **kw):  # type: ignore[no-untyped-def]
        seen.append(("one", block_bytes))
        return real_columns(*a, block_bytes=block_bytes, **kw)

    monkeypatch.setattr(fieldtext, "_in_workers", in_workers)
    monkeypatch.setattr("rdmalab.capture.fieldtext.iter_columns", columns)
    names = ["frame.number", "infiniband.bth.psn"]
    one = b"".join(fieldtext.field_text(CAPTURE, names, workers=1))
    two = b"".join(fieldtext.field_text(CAPTURE, names, workers=2, parallel_min_bytes=0))
    given = b"".join(fieldtext.field_text(CAPTURE, names, workers=2, parallel_min_bytes=0, block_bytes=4096))
    assert seen == [("one", fieldtext.BLOCK_BYTES), ("workers", fieldtext.WORKER_BLOCK_BYTES), ("workers", 4096)]
    assert fieldtext.WORKER_BLOCK_BYTES > fieldtext.BLOCK_BYTES
    assert one == two == given and one.count(b"\n") > 10
