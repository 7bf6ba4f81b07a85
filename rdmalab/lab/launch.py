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
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from rdmalab.lab.generate import generate, notebooks_dir, sources


def default_workdir() -> Path:
    env = os.environ.get("RDMALAB_WORKDIR")
    return Path(env) if env else Path.home() / "rdmalab-lab"


def prepare(workdir: Path, *, instructor: bool = False, reset: bool = False) -> list[Path]:
    """Generate the notebooks into ``workdir``; returns the notebooks written (new ones only)."""
    version = "instructor" if instructor else "student"
    workdir.mkdir(parents=True, exist_ok=True)
    written = generate(version, workdir, sources(), overwrite=reset)
    readme = workdir / "README.txt"
    if not readme.exists() or reset:
        readme.write_text(
            f"rdmalab lab notebooks ({version} version), generated from {notebooks_dir()}.\n"
            "Your edits here are yours: `rdmalab lab` never overwrites an existing notebook\n"
            "unless you run `rdmalab lab --reset`.\n",
            encoding="utf-8",
        )
    return written


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="rdmalab lab", description="Open JupyterLab on the rdmalab notebooks.")
    ap.add_argument("--dir", type=Path, default=None, help="work directory (default: $RDMALAB_WORKDIR or ~/rdmalab-lab)")
    ap.add_argument("--instructor", action="store_true", help="the instructor version, with solutions")
    ap.add_argument("--reset", action="store_true", help="regenerate notebooks that already exist in the work directory")
    ap.add_argument("--backend", default=None, help="engine backend for the notebooks (default: soft)")
    ap.add_argument("--no-browser", action="store_true", help="do not open a browser")
    ap.add_argument("--port", type=int, default=None)
    ap.add_argument("--ip", default=None, help="address to listen on (default: 127.0.0.1, this machine only)")
    ap.add_argument("--no-token", action="store_true",
                    help="let anyone who can reach the port in without a token (default: a random token)")
    ap.add_argument("--prepare-only", action="store_true", help="generate the notebooks, print the directory, exit")
    ap.add_argument("--dry-run", action="store_true", help="print the JupyterLab command instead of running it")
    return ap


def jupyter_command(workdir: Path, args: argparse.Namespace, extra: list[str]) -> list[str]:
    cmd = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={workdir}"]
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
    written = prepare(workdir, instructor=args.instructor, reset=args.reset)
    print(f"rdmalab lab: notebooks in {workdir} ({len(written)} new or regenerated)")
    if args.prepare_only:
        return 0
    env = dict(os.environ)
    env.setdefault("RDMALAB_BACKEND", args.backend or "soft")
    if args.backend:
        env["RDMALAB_BACKEND"] = args.backend
    if args.no_token:
        env.pop("JUPYTER_TOKEN", None)
        print("rdmalab lab: --no-token: anyone who can reach the port can run code as you", file=sys.stderr)
    cmd = jupyter_command(workdir, args, extra)
    if args.dry_run:
        print(" ".join(cmd))
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
