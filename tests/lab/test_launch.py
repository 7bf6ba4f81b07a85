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


def test_student_is_passed_to_the_kernels_and_named(tmp_path: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Issue 35: `rdmalab lab --student NAME` sets RDMALAB_STUDENT in the server's environment (which every
    kernel inherits), names the student at start and in README.txt; an RDMALAB_STUDENT already set is used."""
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("RDMALAB_STUDENT", raising=False)
    assert launch.main(["--dir", str(tmp_path / "w"), "--dry-run", "--student", "alice"]) == 0
    out = capsys.readouterr().out
    assert "student 'alice'" in out and "RDMALAB_STUDENT=alice" in out.splitlines()[-1]
    assert "Student: alice" in (tmp_path / "w" / "README.txt").read_text(encoding="utf-8")
    monkeypatch.setenv("RDMALAB_STUDENT", "bob")
    assert launch.main(["--dir", str(tmp_path / "w"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "student 'bob'" in out and "RDMALAB_STUDENT=bob" in out.splitlines()[-1]
    assert "Student: bob" in (tmp_path / "w" / "README.txt").read_text(encoding="utf-8")
    assert launch.main(["--dir", str(tmp_path / "w"), "--dry-run", "--student", ""]) == 0  # the book's variant
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == "RDMALAB_BACKEND=soft" and out.splitlines()[0].endswith("regenerated)")
    assert "Student:" not in (tmp_path / "w" / "README.txt").read_text(encoding="utf-8")
    assert launch.main(["--dir", str(tmp_path / "w"), "--prepare-only", "--student", "al\nice"]) == 2
    assert "--student" in capsys.readouterr().err


def test_the_kernel_environment_is_the_servers(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """What main hands to JupyterLab (os.execve's environment) carries the student and the backend."""
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))
    seen: dict = {}

    def fake_execve(path: str, argv: list[str], env: dict) -> None:
        seen.update(path=path, argv=argv, env=env)
        raise SystemExit(0)

    monkeypatch.setattr(launch.os, "execve", fake_execve)
    monkeypatch.setattr(launch.os, "chdir", lambda _d: None)
    monkeypatch.setattr(launch.subprocess, "call", lambda cmd, cwd, env: fake_execve(cmd[0], cmd, env))
    try:
        launch.main(["--dir", str(tmp_path / "w"), "--student", "carol", "--no-browser"])
    except SystemExit:
        pass
    assert seen["env"]["RDMALAB_STUDENT"] == "carol" and seen["env"]["RDMALAB_BACKEND"] == "soft"
    assert "-m" in seen["argv"] and "jupyterlab" in seen["argv"]


def test_jupyters_noise_is_turned_off(tmp_path: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Issue 36, item 6: no language-server extension, no news or update check, widget state saved with the
    notebook, and the generated notebooks signed as trusted (a changed copy is not)."""
    import json

    nbformat = __import__("pytest").importorskip("nbformat")
    from nbformat.sign import NotebookNotary

    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))
    work = tmp_path / "w"
    assert launch.main(["--dir", str(work), "--dry-run"]) == 0
    cmd = capsys.readouterr().out.splitlines()[-2]
    config = work / ".rdmalab" / "jupyter_server_config.json"
    settings = work / ".rdmalab" / "lab-settings"
    assert f"--config={config}" in cmd and f"--LabApp.app_settings_dir={settings}" in cmd
    assert json.loads(config.read_text())["ServerApp"]["jpserver_extensions"] == {"jupyter_lsp": False}
    overrides = json.loads((settings / "overrides.json").read_text())
    assert overrides["@jupyterlab/apputils-extension:notification"] == {"fetchNews": "false", "checkForUpdates": False}
    assert overrides["@jupyter-widgets/jupyterlab-manager:plugin"] == {"saveState": True}
    notary = NotebookNotary()
    nbs = sorted(work.glob("*.ipynb"))
    assert nbs and all(notary.check_signature(nbformat.read(p, as_version=4)) for p in nbs)
    changed = nbformat.read(nbs[0], as_version=4)
    changed.cells[0].source += "\nchanged"
    assert not notary.check_signature(changed)
