"""`rdmalab lab`: the work directory is prepared, never clobbered, and JupyterLab is invoked right."""

from __future__ import annotations

from pathlib import Path

from rdmalab.lab import launch


def test_prepare_only_writes_student_notebooks(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert launch.main(["--dir", str(tmp_path), "--prepare-only"]) == 0
    nbs = sorted(p.name for p in tmp_path.glob("*.ipynb"))
    assert nbs and nbs[0].startswith("00-")
    text = (tmp_path / nbs[0]).read_text(encoding="utf-8")
    assert "BEGIN SOLUTION" not in text and '"student"' in text


def test_existing_notebooks_are_kept_unless_reset(tmp_path: Path) -> None:
    launch.main(["--dir", str(tmp_path), "--prepare-only"])
    first = sorted(tmp_path.glob("*.ipynb"))[0]
    first.write_text("my work", encoding="utf-8")
    launch.main(["--dir", str(tmp_path), "--prepare-only"])
    assert first.read_text(encoding="utf-8") == "my work"
    launch.main(["--dir", str(tmp_path), "--prepare-only", "--reset", "--instructor"])
    assert '"instructor"' in first.read_text(encoding="utf-8")


def test_dry_run_prints_the_jupyterlab_command(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert launch.main(["--dir", str(tmp_path), "--dry-run", "--no-browser", "--port", "8899"]) == 0
    out = capsys.readouterr().out
    assert "-m jupyterlab" in out and f"--ServerApp.root_dir={tmp_path.resolve()}" in out
    assert "--no-browser" in out and "--port=8899" in out


def test_the_server_is_local_with_a_token_unless_told_otherwise(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """The defaults (tests/lab/test_browser.py proves them on a running server); --ip and --no-token change them."""
    assert launch.main(["--dir", str(tmp_path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "--ServerApp.ip=127.0.0.1" in out and "IdentityProvider.token" not in out
    assert launch.main(["--dir", str(tmp_path), "--dry-run", "--ip", "0.0.0.0", "--no-token"]) == 0
    cap = capsys.readouterr()
    assert "--ServerApp.ip=0.0.0.0" in cap.out and "--IdentityProvider.token= " in cap.out + " "
    assert "anyone who can reach the port" in cap.err
