"""Student and instructor notebooks from one source.

The sources are ``notebooks/NN-name.py`` files in the "percent" format that Jupytext, VS Code
and Spyder also read: ``# %%`` starts a code cell, ``# %% [markdown]`` a Markdown cell, and
``tags=["..."]`` on that line sets the cell tags.  Plain text files keep reviews and diffs small
and never carry stale outputs.

Inside a code cell, the lines between ``### BEGIN SOLUTION`` and ``### END SOLUTION`` are the
solution.  The three versions differ only in what happens to them:

* ``instructor``: the solution lines stay; the marker lines go.
* ``student``: the solution lines go.  Inside an indented block they become
  ``raise NotImplementedError("your code here")`` so that the cell still runs; at the top level
  they become a comment, and the placeholder line above them (``answer = ...``) is what
  ``lab.check`` sees, so it reports "not yet".  Cells tagged ``solution`` (worked explanations)
  and ``instructor`` are dropped.
* ``book``: the instructor version, with solution cells folded (``hide-input``) so that a reader
  sees the check pass but has to click to see how, and cells tagged ``widget`` removed (a live
  widget needs a kernel; the notebooks show the same renders statically next to them).

Run ``python -m rdmalab.lab.generate --version student --out DIR`` (or ``instructor``/``book``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
VERSIONS = ("student", "instructor", "book")
_CELL = re.compile(r"^# %%(?P<rest>.*)$")


def notebooks_dir() -> Path:
    """The notebook sources: ``$RDMALAB_NOTEBOOKS``, ``notebooks/`` of a clone, or the copy in the wheel."""
    from rdmalab.lab.data import notebooks_dir as find

    return find()


def sources(directory: Path | None = None) -> list[Path]:
    d = directory or notebooks_dir()
    return sorted(p for p in d.glob("[0-9][0-9]-*.py"))


def parse(text: str) -> list[dict[str, Any]]:
    """Split a percent-format source into cells: dicts with type, tags and source lines."""
    cells: list[dict[str, Any]] = []
    cur: dict[str, Any] | None = None
    for line in text.splitlines():
        m = _CELL.match(line)
        if m:
            rest = m.group("rest")
            kind = "markdown" if "[markdown]" in rest else "code"
            tags: list[str] = []
            t = re.search(r"tags=(\[.*?\])", rest)
            if t:
                tags = json.loads(t.group(1))
            cur = {"type": kind, "tags": tags, "lines": []}
            cells.append(cur)
            continue
        if cur is None:
            continue  # file header before the first cell (e.g. a docstring or the Jupytext header)
        if cur["type"] == "markdown":
            if line.startswith("# "):
                line = line[2:]
            elif line.startswith("#"):
                line = line[1:]
        cur["lines"].append(line)
    for c in cells:
        while c["lines"] and not c["lines"][-1].strip():
            c["lines"].pop()
        while c["lines"] and not c["lines"][0].strip():
            c["lines"].pop(0)
    return [c for c in cells if c["lines"] or c["type"] == "code"]


def _strip_solutions(lines: list[str], keep: bool) -> list[str]:
    out: list[str] = []
    inside = False
    for line in lines:
        s = line.strip()
        if s == BEGIN:
            if inside:
                raise ValueError("nested ### BEGIN SOLUTION")
            inside = True
            indent = line[: len(line) - len(line.lstrip())]
            if not keep:
                out.append(f'{indent}raise NotImplementedError("your code here")' if indent else
                           f"{indent}# your code here")
            continue
        if s == END:
            if not inside:
                raise ValueError("### END SOLUTION without BEGIN")
            inside = False
            continue
        if inside and not keep:
            continue
        out.append(line)
    if inside:
        raise ValueError("### BEGIN SOLUTION without END")
    return out


def has_solution(cell: dict[str, Any]) -> bool:
    return any(line.strip() == BEGIN for line in cell["lines"])


def convert(text: str, version: str) -> dict[str, Any]:
    """A notebook (nbformat 4 JSON as a dict) for one version of a source."""
    if version not in VERSIONS:
        raise ValueError(f"version must be one of {VERSIONS}")
    nb_cells = []
    for i, c in enumerate(parse(text)):
        tags = list(c["tags"])
        if version == "student" and ("solution" in tags or "instructor" in tags):
            continue
        lines = c["lines"]
        if c["type"] == "code":
            sol = has_solution(c)
            lines = _strip_solutions(lines, keep=version != "student")
            if version == "book" and sol and "hide-input" not in tags:
                tags.append("hide-input")
            if version == "book" and "widget" in tags and "remove-cell" not in tags:
                tags.append("remove-cell")  # live widgets need a kernel; the book shows the static renders
        meta: dict[str, Any] = {}
        if tags:
            meta["tags"] = [t for t in tags if t not in ("solution", "instructor")] or tags
        cell: dict[str, Any] = {"cell_type": c["type"], "id": f"c{i:03d}", "metadata": meta,
                                "source": "\n".join(lines)}
        if c["type"] == "code":
            cell["execution_count"] = None
            cell["outputs"] = []
        nb_cells.append(cell)
    return {
        "cells": nb_cells,
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
            "rdmalab": {"version": version},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def generate(version: str, out: Path, srcs: Iterable[Path] | None = None, *, overwrite: bool = True) -> list[Path]:
    """Write one version of every notebook into ``out``; returns the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for src in srcs if srcs is not None else sources():
        dst = out / (src.stem + ".ipynb")
        if dst.exists() and not overwrite:
            continue
        nb = convert(src.read_text(encoding="utf-8"), version)
        dst.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        written.append(dst)
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rdmalab.lab.generate", description=__doc__.split("\n")[0])
    ap.add_argument("--version", choices=VERSIONS, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--src", type=Path, default=None, help="notebook source directory (default: notebooks/)")
    args = ap.parse_args(argv)
    paths = generate(args.version, args.out, sources(args.src) if args.src else None)
    for p in paths:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
