"""A saved notebook keeps a static view of every rdmalab widget (issue 36, item 5).

Reopened without its kernel, a notebook showed "Error displaying widget: model not found" where notebook
07's packet builder had been.  Every widget a notebook displays (the cells tagged ``widget``: 07's packet
builder, 09's transfer runner, 10's congestion runner) now displays as a bundle with ``text/html`` beside
the widget view: a line saying to run the cell and what the widget showed.  Here the notebooks' own widget
cells run under nbclient, the notebook is saved and read back, and the saved outputs must hold that HTML.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rdmalab.lab.generate import parse, sources
from rdmalab.lab.runner import wake_for_replies

pytest.importorskip("ipywidgets")
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
ROOT = Path(__file__).resolve().parents[2]


def _widget_cells() -> list[tuple[str, str]]:
    out = []
    for src in sources(ROOT / "notebooks"):
        for cell in parse(src.read_text(encoding="utf-8")):
            if cell["type"] == "code" and "widget" in cell["tags"]:
                out.append((src.stem, "\n".join(cell["lines"])))
    return out


def test_every_widget_cell_is_known() -> None:
    stems = [stem for stem, _ in _widget_cells()]
    assert stems == ["07-four-wires", "09-reliability", "10-congestion"], stems


def test_the_bundle_holds_the_widget_and_its_static_view() -> None:
    from rdmalab.viz.widgets import packet_builder

    box = packet_builder()
    data = box._repr_mimebundle_()
    assert data[WIDGET_MIME]["model_id"] == box.model_id
    assert "run this cell" in data["text/html"] and "rdmalab-hexdump" in data["text/html"]
    assert "RC RDMA WRITE Only" in data["text/html"]  # what it showed: the frame it built
    assert data["text/plain"].startswith("Interactive")


@pytest.mark.slow
def test_a_saved_notebook_keeps_each_widgets_static_view(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nbclient = pytest.importorskip("nbclient")
    nbformat = pytest.importorskip("nbformat")
    monkeypatch.setenv("RDMALAB_BACKEND", "soft")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cells = [nbformat.v4.new_code_cell('BACKEND = "soft"')]
    cells += [nbformat.v4.new_code_cell(code, metadata={"tags": ["widget"], "stem": stem})
              for stem, code in _widget_cells()]
    nb = nbformat.v4.new_notebook(cells=cells)
    # the client waits for each reply in slices (rdmalab.lab.runner.sliced says why): without them a widget
    # cell sometimes held this test for the whole 600 s timeout
    wake_for_replies(nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                             resources={"metadata": {"path": str(tmp_path)}})).execute()
    path = tmp_path / "widgets.ipynb"
    nbformat.write(nb, path)
    saved = nbformat.read(path, as_version=4)
    for cell in saved.cells[1:]:
        stem = cell.metadata["stem"]
        shown = [o for o in cell.outputs if o.get("output_type") in ("display_data", "execute_result")]
        assert shown, f"{stem}: the widget cell has no output"
        data = shown[-1]["data"]
        assert WIDGET_MIME in data, f"{stem}: not a widget output"
        static = data.get("text/html", "")
        assert "rdmalab-static-widget" in static and "run this cell" in static, f"{stem}: no static view"
        assert "<svg" in static or "rdmalab-hexdump" in static or "<img" in static, \
            f"{stem}: the static view holds no picture: {static[:300]}"
