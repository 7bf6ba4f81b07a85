"""Student / instructor / book generation from one percent-format source."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rdmalab.lab import generate as g

SRC = '''# %% [markdown]
# # Title
# Some text
# %%
x = 1
# %% tags=["exercise"]
answer = ...
### BEGIN SOLUTION
answer = x + 1
### END SOLUTION
check(answer)
# %% tags=["exercise"]
def f(a):
    """doc"""
    ### BEGIN SOLUTION
    return a * 2
    ### END SOLUTION
# %% [markdown] tags=["solution"]
# The worked explanation.
'''


def _sources(nb: dict) -> list[str]:
    return [c["source"] for c in nb["cells"]]


def test_parse_cells_and_tags() -> None:
    cells = g.parse(SRC)
    assert [c["type"] for c in cells] == ["markdown", "code", "code", "code", "markdown"]
    assert cells[0]["lines"] == ["# Title", "Some text"]
    assert cells[2]["tags"] == ["exercise"]


def test_student_version_removes_solutions_but_keeps_the_placeholder() -> None:
    nb = g.convert(SRC, "student")
    src = _sources(nb)
    assert len(src) == 4  # the solution markdown cell is gone
    assert "answer = ..." in src[2] and "x + 1" not in src[2] and "SOLUTION" not in src[2]
    assert 'raise NotImplementedError("your code here")' in src[3] and "a * 2" not in src[3]
    compile(src[3], "cell", "exec")  # the stub still parses
    assert nb["metadata"]["kernelspec"]["name"] == "python3"


def test_instructor_version_keeps_solutions_without_markers() -> None:
    src = _sources(g.convert(SRC, "instructor"))
    assert "answer = x + 1" in src[2] and "SOLUTION" not in "".join(src)
    assert "return a * 2" in src[3]
    assert src[-1] == "The worked explanation."


def test_instructor_book_folds_solution_cells() -> None:
    nb = g.convert(SRC, "instructor-book")
    tags = [c["metadata"].get("tags", []) for c in nb["cells"]]
    assert "hide-input" in tags[2] and "hide-input" in tags[3] and "hide-input" not in tags[1]
    assert "answer = x + 1" in _sources(nb)[2]


def test_the_public_book_has_no_solutions_but_hints_and_a_way_to_run() -> None:
    src = SRC.replace("check(answer)", 'lab.check("wires.bth", answer)')
    nb = g.convert(src, "book", stem="99-test")
    text = "\n".join(_sources(nb))
    assert "x + 1" not in text and "a * 2" not in text and "worked explanation" not in text
    assert "rdmalab lab" in text and "99-test.ipynb" in text  # how to run the page
    hints = next(c["source"] for c in nb["cells"] if "Hints for" in c["source"])
    assert hints.startswith(":::{dropdown} Hints for `wires.bth`") and "A BTH is 12 bytes" in hints
    widget = SRC + '# %% tags=["widget"]\nwidget()\n'
    assert "widget()" not in "".join(_sources(g.convert(widget, "book")))


def test_glossary_terms_link_once_per_page_outside_code(tmp_path: Path) -> None:
    gl = tmp_path / "glossary.md"
    gl.write_text("# Glossary\n\n```{glossary}\nPSN\n  Packet Sequence Number.\n\nBTH\n  Base.\n```\n")
    terms = g.glossary_terms(gl)
    assert sorted(terms) == ["BTH", "PSN"]
    done: set[str] = set()
    text = g.link_terms("# The PSN\nThe `PSN` field: a PSN, then PSN again. BTH.psn and BTHs.", terms, done)
    assert text == "# The PSN\nThe `PSN` field: a {term}`PSN`, then PSN again. BTH.psn and BTHs."
    assert g.link_terms("A PSN.", terms, done) == "A PSN."  # already linked on this page


def test_unbalanced_markers_are_errors() -> None:
    with pytest.raises(ValueError):
        g.convert("# %%\n### BEGIN SOLUTION\nx = 1\n", "student")
    with pytest.raises(ValueError):
        g.convert("# %%\nx = 1\n### END SOLUTION\n", "instructor")


def test_generate_writes_valid_notebooks(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "01-demo.py").write_text(SRC, encoding="utf-8")
    out = g.generate("student", tmp_path / "out", g.sources(src))
    assert [p.name for p in out] == ["01-demo.ipynb"]
    nb = json.loads(out[0].read_text(encoding="utf-8"))
    nbformat = pytest.importorskip("nbformat")
    nbformat.validate(nbformat.from_dict(nb))
    # no overwrite of a learner's copy
    out[0].write_text("mine", encoding="utf-8")
    assert g.generate("student", tmp_path / "out", g.sources(src), overwrite=False) == []
    assert out[0].read_text(encoding="utf-8") == "mine"


def test_every_source_has_balanced_markers_and_checks() -> None:
    for src in g.sources(Path(__file__).resolve().parents[2] / "notebooks"):
        text = src.read_text(encoding="utf-8")
        for version in g.VERSIONS:
            g.convert(text, version)
        assert text.count("### BEGIN SOLUTION") == text.count("### END SOLUTION"), src


def test_notebooks_carry_the_metadata_the_kernel_reports_so_they_open_unmodified() -> None:
    """JupyterLab rewrites kernelspec and language_info from the kernel it starts; if they differ, the notebook
    opens modified (issue 20, item 3).  The oracle is ipykernel itself."""
    pytest.importorskip("ipykernel")
    from ipykernel.ipkernel import IPythonKernel
    from ipykernel.kernelspec import get_kernel_dict

    from rdmalab.lab.generate import convert

    meta = convert("# %%\nx = 1\n", "student")["metadata"]
    spec = get_kernel_dict()
    assert meta["kernelspec"] == {"display_name": spec["display_name"], "language": spec["language"],
                                  "name": "python3"}
    assert meta["language_info"] == IPythonKernel.language_info
