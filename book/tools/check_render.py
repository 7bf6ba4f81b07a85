"""Open the built book in headless Chromium: no console errors, figures present, screenshots kept.

Serves the HTML on a local port, loads every page with Selenium driving /usr/bin/chromedriver,
reads the browser console through Chrome's logging (the DevTools protocol underneath), and
requires on each notebook page at least one figure (coloured hex dump, SVG or image).
Screenshots of the home page and of one notebook page go to ``--artifacts``.

Exit status: 0 all good, 1 a page failed, 2 the browser could not be started.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1280,1600"]
FIGURES_JS = """
const q = s => document.querySelectorAll(s).length;
return {hexdumps: q('.cell_output .rdmalab-hexdump'), svgs: q('.cell_output svg'), imgs: q('.cell_output img'),
        checks_pass: q('.rdmalab-check-pass'), checks_other: q('.rdmalab-check-fail, .rdmalab-check-error'),
        tracebacks: (document.body.innerText.match(/Traceback \\(most recent call last\\)/g) || []).length,
        title: document.title};
"""


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


def serve(root: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = functools.partial(_Quiet, directory=str(root))
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}/"


def browser(user_data: str):  # type: ignore[no-untyped-def]
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    for f in FLAGS:
        opts.add_argument(f)
    opts.add_argument(f"--user-data-dir={user_data}")
    binary = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if binary:
        opts.binary_location = binary
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver_path = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    return webdriver.Chrome(service=Service(driver_path), options=opts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("html", type=Path)
    ap.add_argument("--artifacts", type=Path, default=Path("artifacts"))
    ap.add_argument("--notebook-shot", default="notebooks/09-reliability.html",
                    help="the notebook page to screenshot (falls back to the first notebook page)")
    args = ap.parse_args(argv)
    root = args.html.resolve()
    pages = ["index.html"] + sorted(str(p.relative_to(root)) for p in (root / "chapters").glob("*.html")) \
        + sorted(str(p.relative_to(root)) for p in (root / "notebooks").glob("*.html"))
    intro = root / "intro.html"
    if intro.exists():
        pages[0] = "intro.html"
    args.artifacts.mkdir(parents=True, exist_ok=True)
    srv, base = serve(root)
    tmp = tempfile.mkdtemp(prefix="rdmalab-chromium-")
    try:
        driver = browser(tmp)
    except Exception as e:  # noqa: BLE001
        print(f"check_render: cannot start headless Chromium: {e}", file=sys.stderr)
        return 2
    failures: list[str] = []
    report = []
    try:
        driver.set_window_size(1280, 1600)
        shot = args.notebook_shot if (root / args.notebook_shot).exists() else next(
            (p for p in pages if p.startswith("notebooks/")), None)
        for page in pages:
            driver.get(base + page)
            for _ in range(50):
                if driver.execute_script("return document.readyState") == "complete":
                    break
                time.sleep(0.1)
            time.sleep(0.3)
            info = driver.execute_script(FIGURES_JS)
            logs = driver.get_log("browser")
            errors = [e["message"] for e in logs if e.get("level") == "SEVERE"]
            info.update(page=page, console_errors=errors)
            report.append(info)
            figures = info["hexdumps"] + info["svgs"] + info["imgs"]
            problems = []
            if errors:
                problems.append(f"{len(errors)} console error(s): {errors[:3]}")
            if page.startswith("notebooks/") and figures == 0:
                problems.append("no figure rendered")
            if info["tracebacks"]:
                problems.append(f"{info['tracebacks']} traceback(s) in the page")
            if info["checks_other"]:
                problems.append(f"{info['checks_other']} check(s) not passing")
            status = "ok" if not problems else "FAIL " + "; ".join(problems)
            print(f"check_render: {page}: {figures} figure(s), {info['checks_pass']} check(s) passed: {status}")
            if problems:
                failures.append(page)
            if page == pages[0]:
                driver.save_screenshot(str(args.artifacts / "book-home.png"))
            if page == shot:
                driver.save_screenshot(str(args.artifacts / "book-notebook.png"))
    finally:
        driver.quit()
        srv.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    (args.artifacts / "book-render-report.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    print(f"check_render: {len(pages)} pages, {len(failures)} failed; screenshots in {args.artifacts}/")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
