"""Build hook: copy the lab's notebook sources and captures into the wheel as package data.

Everything else about the build is in pyproject.toml.  The repository keeps one copy of
``notebooks/*.py`` and ``captures/*``; a wheel (``python -m build --wheel`` or ``pip wheel .``)
gets them under ``rdmalab/lab/_data/``, where :mod:`rdmalab.lab.data` finds them after a
plain ``pip install``.  Editable installs skip the copy: they read the checkout directly.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
SHIPPED = {
    "notebooks": ["[0-9][0-9]-*.py"],
    "captures": ["*.pcap", "MANIFEST.md"],
}


class BuildPyWithLabData(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        for folder, patterns in SHIPPED.items():
            src = ROOT / folder
            if not src.is_dir():  # building from an sdist made without them: say so rather than ship a broken lab
                raise SystemExit(f"rdmalab build: {src} is missing; the wheel must carry the lab's {folder}")
            dst = Path(self.build_lib) / "rdmalab" / "lab" / "_data" / folder
            dst.mkdir(parents=True, exist_ok=True)
            for pattern in patterns:
                for f in sorted(src.glob(pattern)):
                    shutil.copyfile(f, dst / f.name)


setup(cmdclass={"build_py": BuildPyWithLabData})
