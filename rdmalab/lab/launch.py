"""``rdmalab lab``: open JupyterLab on the lab notebooks.

The notebooks are generated (student version by default) into a writable work directory, so
that a learner's edits never touch the sources and a ``git pull`` never clobbers a learner's
work: notebooks that already exist there are left alone unless ``--reset`` is given.  The soft
engine is the default backend (``RDMALAB_BACKEND=soft``), so every notebook runs on any machine.

The Jupyter server listens on 127.0.0.1 only and asks for a token unless told otherwise (``--ip``,
``--no-token``): a notebook server runs arbitrary code as its user, so nobody else on the network,
nor another local program without the token, may reach it.
The token is ``$JUPYTER_TOKEN`` when that is set, else the random one Jupyter Server makes at each
start (it prints the URL that carries it, and opens the browser with it).

``--student NAME`` (or ``$RDMALAB_STUDENT`` already set) names whose variant the notebooks show: the server
passes ``RDMALAB_STUDENT`` on to every kernel it starts (kernels inherit its environment).

JupyterLab is started without what the lab does not need, so that what it prints is the lab's: the
language-server extension (jupyter-lsp, which lists every language server it looked for) is off, the news
and update checks are off (settings overrides: a learner's own settings still win), the notebooks it
generates are signed as trusted (no "Notebook ... is not trusted" for each), and widget state is saved with
a notebook, so that a reopened notebook shows a widget's last view instead of "model not found".
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from rdmalab.lab.generate import generate, notebooks_dir, sources


def default_workdir() -> Path:
    env = os.environ.get("RDMALAB_WORKDIR")
    return Path(env) if env else Path.home() / "rdmalab-lab"


#: JupyterLab settings the lab starts with (overrides of the defaults; a learner's own settings still win)
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": True},
}
#: Jupyter Server extensions the lab turns off
SERVER_EXTENSIONS_OFF = ("jupyter_lsp",)


def prepare(workdir: Path, *, instructor: bool = False, reset: bool = False, student: str = "") -> list[Path]:
    """Generate the notebooks into ``workdir`` and sign the new ones as trusted; returns the notebooks
    written (new ones only).  README.txt says which version and, with ``student``, whose variant."""
    version = "instructor" if instructor else "student"
    workdir.mkdir(parents=True, exist_ok=True)
    written = generate(version, workdir, sources(), overwrite=reset)
    trust(written)
    readme = workdir / "README.txt"
    whose = (f"Student: {student} (the notebooks' values are this student's variant; `rdmalab lab --student NAME`\n"
             "or $RDMALAB_STUDENT sets it).\n") if student else ""
    text = (f"rdmalab lab notebooks ({version} version), generated from {notebooks_dir()}.\n{whose}"
            "Your edits here are yours: `rdmalab lab` never overwrites an existing notebook\n"
            "unless you run `rdmalab lab --reset`.\n")
    if not readme.exists() or readme.read_text(encoding="utf-8") != text:
        readme.write_text(text, encoding="utf-8")
    return written


def trust(notebooks: list[Path]) -> None:
    """Sign notebooks as trusted in the user's Jupyter signature database (as ``jupyter trust`` does): they
    are ours, generated from the sources, and an untrusted notebook makes the server log a warning when it
    is opened."""
    if not notebooks:
        return
    try:
        import nbformat  # optional: nbformat (lab extra)
        from nbformat.sign import NotebookNotary
    except ImportError:
        return
    notary: Any = NotebookNotary()  # type: ignore[no-untyped-call]
    for path in notebooks:
        notary.sign(nbformat.read(path, as_version=4))  # type: ignore[no-untyped-call]


def lab_config(workdir: Path) -> tuple[Path, Path]:
    """Write the server configuration and the settings overrides the lab starts with, under
    ``workdir/.rdmalab/`` (hidden in JupyterLab's file browser); returns (config file, settings directory)."""
    here = workdir / ".rdmalab"
    settings = here / "lab-settings"
    settings.mkdir(parents=True, exist_ok=True)
    (settings / "overrides.json").write_text(json.dumps(LAB_SETTINGS, indent=1) + "\n", encoding="utf-8")
    config = here / "jupyter_server_config.json"
    config.write_text(json.dumps({"ServerApp": {"jpserver_extensions": {n: False for n in SERVER_EXTENSIONS_OFF}}},
                                 indent=1) + "\n", encoding="utf-8")
    return config, settings


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="rdmalab lab", description="Open JupyterLab on the rdmalab notebooks.")
    ap.add_argument("--dir", type=Path, default=None, help="work directory (default: $RDMALAB_WORKDIR or ~/rdmalab-lab)")
    ap.add_argument("--instructor", action="store_true", help="the instructor version, with solutions")
    ap.add_argument("--reset", action="store_true", help="regenerate notebooks that already exist in the work directory")
    ap.add_argument("--backend", default=None, help="engine backend for the notebooks (default: soft)")
    ap.add_argument("--student", default=None,
                    help="whose variant the notebooks show (sets RDMALAB_STUDENT for the kernels; default: "
                         "$RDMALAB_STUDENT, else the book's)")
    ap.add_argument("--no-browser", action="store_true", help="do not open a browser")
    ap.add_argument("--port", type=int, default=None)
    ap.add_argument("--ip", default=None, help="address to listen on (default: 127.0.0.1, this machine only)")
    ap.add_argument("--no-token", action="store_true",
                    help="let anyone who can reach the port in without a token (default: a random token)")
    ap.add_argument("--prepare-only", action="store_true", help="generate the notebooks, print the directory, exit")
    ap.add_argument("--dry-run", action="store_true", help="print the JupyterLab command instead of running it")
    return ap


def jupyter_command(workdir: Path, args: argparse.Namespace, extra: list[str]) -> list[str]:
    config, settings = lab_config(workdir)
    cmd = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={workdir}", f"--config={config}",
           f"--LabApp.app_settings_dir={settings}"]
    if args.no_browser:
        cmd.append("--no-browser")
    if args.port:
        cmd.append(f"--port={args.port}")
    cmd.append(f"--ServerApp.ip={args.ip or '127.0.0.1'}")
    if args.no_token:
        cmd.append("--IdentityProvider.token=")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    return cmd + extra


def main(argv: list[str] | None = None) -> int:
    args, extra = build_parser().parse_known_args(argv)
    workdir = (args.dir or default_workdir()).expanduser().resolve()
    if not sources():
        print(f"rdmalab lab: no notebook sources found in {notebooks_dir()}", file=sys.stderr)
        return 2
    student = os.environ.get("RDMALAB_STUDENT", "") if args.student is None else args.student
    if student != student.strip() or any(not (c.isprintable()) for c in student):
        print(f"rdmalab lab: --student {student!r}: a name without surrounding spaces or control characters",
              file=sys.stderr)
        return 2
    written = prepare(workdir, instructor=args.instructor, reset=args.reset, student=student)
    whose = f", student {student!r}" if student else ""
    print(f"rdmalab lab: notebooks in {workdir} ({len(written)} new or regenerated){whose}")
    if args.prepare_only:
        return 0
    env = dict(os.environ)
    if student:
        env["RDMALAB_STUDENT"] = student
    else:
        env.pop("RDMALAB_STUDENT", None)
    env.setdefault("RDMALAB_BACKEND", args.backend or "soft")
    if args.backend:
        env["RDMALAB_BACKEND"] = args.backend
    if args.no_token:
        env.pop("JUPYTER_TOKEN", None)
        print("rdmalab lab: --no-token: anyone who can reach the port can run code as you", file=sys.stderr)
    cmd = jupyter_command(workdir, args, extra)
    if args.dry_run:
        print(" ".join(cmd))
        print(" ".join(f"{k}={env[k]}" for k in ("RDMALAB_BACKEND", "RDMALAB_STUDENT") if k in env))
        return 0
    if shutil.which("jupyter") is None:
        try:
            import jupyterlab  # noqa: F401  # optional: jupyterlab (lab extra)
        except ImportError:
            print("rdmalab lab: JupyterLab is not installed; pip install 'rdmalab[lab]'", file=sys.stderr)
            return 2
    if os.name == "posix":
        # Become JupyterLab, so that Ctrl-C and signals reach it directly (no orphaned server).
        os.chdir(workdir)
        os.execve(cmd[0], cmd, env)
    try:
        return subprocess.call(cmd, cwd=workdir, env=env)
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
