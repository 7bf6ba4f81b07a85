"""The README's ``rdmalab decode``, ``analyze`` and ``top -r`` examples on the repository's captures (its
"Using it" block) run as written and print (or write) something: a promise of the README is a contract."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest

from rdmalab.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _examples() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = text.split("## Using it", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.startswith((".venv/bin/rdmalab decode -r captures/",
                                                                    ".venv/bin/rdmalab analyze captures/",
                                                                    ".venv/bin/rdmalab top -r captures/"))]


EXAMPLES = _examples()


def test_there_are_examples() -> None:
    assert len(EXAMPLES) >= 5


@pytest.mark.parametrize("line", EXAMPLES)
def test_the_readme_example_runs(line: str, tmp_path: Path, capsys: Any, monkeypatch: Any) -> None:
    words = shlex.split(line, comments=True)
    args = [str(ROOT / w) if w.startswith("captures/") else w for w in words[1:]]
    monkeypatch.chdir(tmp_path)  # (where -w writes)
    assert main(args) == 0, line
    out = capsys.readouterr().out
    if "-w" in args:
        written = tmp_path / args[args.index("-w") + 1]
        assert written.stat().st_size > 100 and not out, line
    else:
        assert out.strip(), line
    if "--html" in args:
        assert "<html" in (tmp_path / args[args.index("--html") + 1]).read_text()[:200], line
    if "analyze" in args and "siw" in line:  # "iWARP: each TCP connection's MPA, FPDUs and messages each way"
        assert "(iWARP)" in out and "MPA rev" in out and out.count(" FPDUs (") >= 2, out
