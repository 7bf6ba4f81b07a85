"""Student and instructor notebooks from one source.

The sources are ``notebooks/NN-name.py`` files in the "percent" format that Jupytext, VS Code
and Spyder also read: ``# %%`` starts a code cell, ``# %% [markdown]`` a Markdown cell, and
``tags=["..."]`` on that line sets the cell tags.  Plain text files keep reviews and diffs small
and never carry stale outputs.

Inside a code cell, the lines between ``### BEGIN SOLUTION`` and ``### END SOLUTION`` are the
solution.  The versions differ in what happens to them:

* ``instructor``: the solution lines stay; the marker lines go.
* ``student``: the solution lines go.  Inside an indented block they become
  ``raise NotImplementedError("your code here")`` so that the cell still runs; at the top level
  they become a comment, and the placeholder line above them (``answer = ...``) is what
  ``lab.check`` sees, so it reports "not yet".  Cells tagged ``solution`` (worked explanations)
  and ``instructor`` are dropped.
* ``book`` (the public web site): the student version, so neither the page, its "show source"
  nor a downloaded notebook carries an answer.  After each exercise's check comes a folded
  "Hints" box with the exercise's hints; glossary terms link to the glossary where a page first
  uses them; a note at the top says how to run the page (``rdmalab lab``).  Cells tagged
  ``widget`` are left out (a live widget needs a kernel; the notebooks show the same renders
  statically next to them).
* ``instructor-book`` (a separate build for instructors): the instructor version, with solution
  cells folded (``hide-input``), widget cells left out.

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

from rdmalab.lab import data
from rdmalab.lab.core import get

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
VERSIONS = ("student", "instructor", "book", "instructor-book")
#: The versions that keep the solutions.
WITH_SOLUTIONS = ("instructor", "instructor-book")
_CELL = re.compile(r"^# %%(?P<rest>.*)$")


def notebooks_dir() -> Path:
    """The notebook sources: ``$RDMALAB_NOTEBOOKS``, ``notebooks/`` of a clone, or the copy in the wheel."""
    return data.notebooks_dir()


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


_CHECK = re.compile(r"""lab\.check\(\s*["']([\w.]+)["']""")


def _hints_cell(ids: list[str]) -> dict[str, Any] | None:
    """A folded Markdown box with the hints of the exercises checked in a cell (book version)."""

    parts = []
    for ex_id in ids:
        try:
            hints = get(ex_id).hints
        except KeyError:
            continue
        items = "\n".join(f"{i}. {h}" for i, h in enumerate(hints, 1))
        parts.append(f":::{{dropdown}} Hints for `{ex_id}`\n{items}\n\nIn the lab, `lab.hint(\"{ex_id}\")` "
                     f"shows them one at a time.\n:::")
    return {"type": "markdown", "tags": [], "lines": "\n\n".join(parts).splitlines()} if parts else None


def _run_note(stem: str) -> dict[str, Any]:
    return {"type": "markdown", "tags": [], "lines": [
        ":::{note}",
        "This page is the notebook **without its solutions**: the exercise checks below say \"not yet\". "
        f"To run it and answer them, install rdmalab and open the lab: `pip install 'rdmalab[lab]'`, "
        f"then `rdmalab lab` and open `{stem}.ipynb`. Words underlined like this, e.g. {{term}}`PSN`, link "
        "to the {doc}`glossary <../chapters/glossary>`.",
        ":::"]}


def link_terms(text: str, terms: list[str], done: set[str]) -> str:
    """Link the first use of each glossary term on a page (``{term}`X```): outside code, headings and
    existing roles; whole words only.  ``done`` holds the terms already linked on this page."""
    out = []
    for line in text.split("\n"):
        if line.lstrip().startswith(("#", ":::", "```", "|")) or not line.strip():
            out.append(line)
            continue
        pieces = re.split(r"(`[^`]*`|\{[a-z]+\}`[^`]*`|\[[^\]]*\]\([^)]*\))", line)
        for i in range(0, len(pieces), 2):  # even pieces are plain text
            for term in terms:
                if term in done:
                    continue
                pat = re.compile(rf"(?<![\w/.-]){re.escape(term)}(?![\w/-]|\.\w)")
                m = pat.search(pieces[i])
                if m:
                    pieces[i] = pieces[i][:m.start()] + f"{{term}}`{term}`" + pieces[i][m.end():]
                    done.add(term)
        out.append("".join(pieces))
    return "\n".join(out)


def convert(text: str, version: str, *, glossary: list[str] | None = None, stem: str = "") -> dict[str, Any]:
    """A notebook (nbformat 4 JSON as a dict) for one version of a source.

    ``glossary`` (book version only): the glossary's terms, linked where the page first uses them.
    """
    if version not in VERSIONS:
        raise ValueError(f"version must be one of {VERSIONS}")
    keep = version in WITH_SOLUTIONS
    book = version in ("book", "instructor-book")
    cells_in = parse(text)
    if version == "book" and cells_in:
        first_md = next((i for i, c in enumerate(cells_in) if c["type"] == "markdown"), -1)
        cells_in.insert(first_md + 1, _run_note(stem or "the notebook"))
    linked: set[str] = set()
    nb_cells: list[dict[str, Any]] = []
    for c in cells_in:
        tags = list(c["tags"])
        if not keep and ("solution" in tags or "instructor" in tags):
            continue
        if book and "widget" in tags:
            continue  # live widgets need a kernel (and an unanswered widget comm can stall execution)
        lines = c["lines"]
        extra = None
        if c["type"] == "code":
            sol = has_solution(c)
            lines = _strip_solutions(lines, keep=keep)
            if version == "instructor-book" and sol and "hide-input" not in tags:
                tags.append("hide-input")
            if version == "book":
                extra = _hints_cell(_CHECK.findall("\n".join(lines)))
        elif version == "book" and glossary:
            lines = link_terms("\n".join(lines), glossary, linked).split("\n")
        for cell_src in ([{"type": c["type"], "tags": tags, "lines": lines}] + ([extra] if extra else [])):
            meta: dict[str, Any] = {}
            t = cell_src["tags"]
            if t:
                meta["tags"] = [x for x in t if x not in ("solution", "instructor")] or t
            cell: dict[str, Any] = {"cell_type": cell_src["type"], "id": f"c{len(nb_cells):03d}", "metadata": meta,
                                    "source": "\n".join(cell_src["lines"])}
            if cell_src["type"] == "code":
                cell["execution_count"] = None
                cell["outputs"] = []
            nb_cells.append(cell)
    return {
        "cells": nb_cells,
        "metadata": {
            **kernel_metadata(),
            "rdmalab": {"version": version},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def kernel_metadata() -> dict[str, Any]:
    """The ``kernelspec`` and ``language_info`` that ipykernel's ``python3`` kernel on this Python reports.

    JupyterLab writes both into a notebook's metadata when the kernel starts; a notebook that
    carried anything else would open already modified (and ask to be saved when closed untouched).
    The values are ipykernel's (``ipykernel/kernelspec.py``, ``IPythonKernel.language_info``), for the
    Python that generates the notebooks, which is the one ``rdmalab lab`` starts JupyterLab with.
    """
    return {
        "kernelspec": {"display_name": f"Python {sys.version_info[0]} (ipykernel)", "language": "python",
                       "name": "python3"},
        "language_info": {"codemirror_mode": {"name": "ipython", "version": sys.version_info[0]},
                          "file_extension": ".py", "mimetype": "text/x-python", "name": "python",
                          "nbconvert_exporter": "python", "pygments_lexer": f"ipython{sys.version_info[0]}",
                          "version": sys.version.split()[0]},
    }


def glossary_terms(path: Path) -> list[str]:
    """The terms of a MyST ``{glossary}`` block (unindented lines inside it), longest first."""
    terms, inside = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith(("```{glossary}", ":::{glossary}")):
            inside = True
            continue
        if inside and line.startswith(("```", ":::")):
            inside = False
        elif inside and line.strip() and not line.startswith((" ", "\t", ":")):
            terms.append(line.strip())
    return sorted(terms, key=len, reverse=True)


def generate(version: str, out: Path, srcs: Iterable[Path] | None = None, *, overwrite: bool = True,
             glossary: list[str] | None = None) -> list[Path]:
    """Write one version of every notebook into ``out``; returns the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for src in srcs if srcs is not None else sources():
        dst = out / (src.stem + ".ipynb")
        if dst.exists() and not overwrite:
            continue
        nb = convert(src.read_text(encoding="utf-8"), version, glossary=glossary, stem=src.stem)
        dst.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        written.append(dst)
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rdmalab.lab.generate", description=__doc__.split("\n")[0])
    ap.add_argument("--version", choices=VERSIONS, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--src", type=Path, default=None, help="notebook source directory (default: notebooks/)")
    ap.add_argument("--glossary", type=Path, default=None,
                    help="a Markdown file with a {glossary} block: link its terms (book version)")
    args = ap.parse_args(argv)
    terms = glossary_terms(args.glossary) if args.glossary else None
    paths = generate(args.version, args.out, sources(args.src) if args.src else None, glossary=terms)
    for p in paths:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
