"""Package data: the lab finds its notebooks and captures in a clone and in an installed wheel."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from rdmalab.lab import data, env, generate

ROOT = Path(__file__).resolve().parents[2]


def test_a_clone_reads_its_own_folders() -> None:
    assert data.notebooks_dir() == ROOT / "notebooks"
    assert env.capture_path("rxe_rping.pcap") == ROOT / "captures" / "rxe_rping.pcap"


def test_without_a_clone_the_shipped_copies_are_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = tmp_path / "_data"
    (shipped / "notebooks").mkdir(parents=True)
    (shipped / "captures").mkdir()
    (shipped / "notebooks" / "00-x.py").write_text("# %%\nx = 1\n", encoding="utf-8")
    (shipped / "captures" / "only-shipped.pcap").write_bytes(b"")
    monkeypatch.setattr(data, "SHIPPED", shipped)
    monkeypatch.setattr(data, "repo_root", lambda: tmp_path / "no-clone")
    monkeypatch.delenv("RDMALAB_NOTEBOOKS", raising=False)
    monkeypatch.delenv("RDMALAB_CAPTURES", raising=False)
    assert generate.notebooks_dir() == shipped / "notebooks"
    assert [p.name for p in generate.sources()] == ["00-x.py"]
    assert env.capture_path("only-shipped.pcap") == shipped / "captures" / "only-shipped.pcap"


def test_the_environment_variable_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RDMALAB_NOTEBOOKS", str(tmp_path))
    assert data.notebooks_dir() == tmp_path  # honoured even when empty, so the error names it


@pytest.mark.slow
def test_the_built_wheel_carries_and_finds_them(tmp_path: Path) -> None:
    """Build the wheel, unpack it away from the checkout, and resolve from there."""
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(ROOT), "-w", str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    (whl,) = tmp_path.glob("rdmalab-*.whl")
    site = tmp_path / "site"
    zipfile.ZipFile(whl).extractall(site)
    probe = ("from rdmalab.lab import capture_path; from rdmalab.lab.generate import sources;"
             "print(sources()[0].parent); print(len(sources())); print(capture_path('public_hw_byte_vectors.pcap'))")
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("RDMALAB_")}
    child_env["PYTHONPATH"] = str(site)
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=child_env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    nb_dir, count, cap = out.stdout.split()
    assert Path(nb_dir) == site / "rdmalab" / "lab" / "_data" / "notebooks"
    assert int(count) == len(generate.sources(ROOT / "notebooks"))
    assert Path(cap) == site / "rdmalab" / "lab" / "_data" / "captures" / "public_hw_byte_vectors.pcap"
