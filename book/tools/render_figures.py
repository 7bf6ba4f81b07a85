"""Render every figure the lab notebooks draw to PNG, so that a person can look at them.

Runs each notebook (instructor version, so every figure is drawn) in a fresh kernel with a
per-cell time limit, then writes every figure output to ``OUT/<notebook>/<cell>-<n>.png``:
matplotlib PNGs as they are, SVG figures (ladders, state diagrams, plots) and HTML figures
(hex dumps, field tables, check results) through headless Chromium.  An index.html shows them all.

    python book/tools/render_figures.py --out artifacts/figures [07-four-wires 09-reliability ...]
"""

from __future__ import annotations

import argparse
import base64
import html
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _driver():  # type: ignore[no-untyped-def]
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000",
                 "--hide-scrollbars"):
        opts.add_argument(flag)
    return webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"), options=opts)


def figures(nb: dict) -> list[tuple[str, str, str]]:
    """(cell id, mime type, data) for every figure output of an executed notebook."""
    out = []
    for cell in nb["cells"]:
        for o in cell.get("outputs", []):
            data = o.get("data", {})
            for mime in ("image/png", "image/svg+xml", "text/html"):
                if mime in data:
                    text = data[mime] if isinstance(data[mime], str) else "".join(data[mime])
                    out.append((cell.get("id", "?"), mime, text))
                    break
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("notebooks", nargs="*", help="notebook names (default: all)")
    ap.add_argument("--out", type=Path, default=ROOT / "artifacts" / "figures")
    ap.add_argument("--cell-timeout", type=int, default=120)
    args = ap.parse_args(argv)

    import nbclient
    import nbformat

    from rdmalab.lab.generate import convert, sources

    os.environ.setdefault("MPLBACKEND", "Agg")
    os.environ.setdefault("RDMALAB_BACKEND", "soft")
    srcs = [s for s in sources(ROOT / "notebooks") if not args.notebooks or s.stem in args.notebooks
            or s.stem[:2] in args.notebooks]
    driver = _driver()
    index = ["<html><body style='font-family:sans-serif'>"]
    try:
        for src in srcs:
            nb = nbformat.from_dict(convert(src.read_text(encoding="utf-8"), "instructor"))
            with tempfile.TemporaryDirectory() as tmp:
                nbclient.NotebookClient(nb, timeout=args.cell_timeout, kernel_name="python3",
                                        resources={"metadata": {"path": tmp}}).execute()
            d = args.out.resolve() / src.stem
            d.mkdir(parents=True, exist_ok=True)
            index.append(f"<h2>{html.escape(src.stem)}</h2>")
            for n, (cid, mime, data) in enumerate(figures(nb)):
                png = d / f"{n:02d}-{cid}.png"
                if mime == "image/png":
                    png.write_bytes(base64.b64decode(data))
                else:
                    page = d / f"{n:02d}-{cid}.html"
                    page.write_text(f"<html><body style='margin:8px;background:white;display:inline-block'>"
                                    f"<div id='fig' style='display:inline-block'>{data}</div></body></html>",
                                    encoding="utf-8")
                    driver.get(page.as_uri())
                    driver.find_element("id", "fig").screenshot(str(png))
                    page.unlink()
                index.append(f"<div><code>{html.escape(png.name)}</code><br><img src='{src.stem}/{png.name}'></div>")
                print(png)
    finally:
        driver.quit()
    index.append("</body></html>")
    (args.out / "index.html").write_text("\n".join(index), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
