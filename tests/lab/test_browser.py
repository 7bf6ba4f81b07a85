"""The lab as a learner meets it: `rdmalab lab`, then every student notebook in JupyterLab in Chromium.

One JupyterLab server is started the way the README says (`rdmalab lab --no-browser`), on a
fresh work directory.  Then, per student notebook, a headless Chromium (Debian's chromium and
chromedriver, driven by selenium) opens it and:

* requires that it does not open modified (no dirty mark on its tab once the kernel is idle);
* runs all cells from the Run menu and waits until the kernel is idle and every code cell has run;
* fails on any error or stderr output, any widget that shows "Error displaying widget" or is
  still "Loading widget...", and any output that is a bare text repr (``VBox(children=...``,
  ``<Figure size ...>``) instead of the rendering;
* saves a screenshot (``build/screenshots/NN-name.png``; ``$RDMALAB_SCREENSHOTS`` overrides), which CI
  keeps as an artifact;
* answers one exercise wrongly, then rightly, by typing into its cell, and checks the feedback
  text of each (``*-exercise.png`` is the screenshot of the right answer's feedback).

Locally the browser tests skip when chromium or chromedriver is missing; in CI (``CI=true``)
scripts/test.sh refuses to run without them, so they cannot be skipped there.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("jupyterlab")
pytest.importorskip("ipykernel")

from rdmalab.lab.generate import sources  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sources(ROOT / "notebooks")
SHOTS = Path(os.environ.get("RDMALAB_SCREENSHOTS", ROOT / "build" / "screenshots"))
KERNEL_START_S = 180  # a loaded 2-core machine: a kernel start with rdmalab's imports can take a while
RUN_ALL_S = 420  # the slowest notebook (10, the congestion runs) takes about a minute on an idle machine

# One exercise per notebook: (exercise id, wrong answer, words its feedback must contain, right answer),
# each answer typed as the Python text a learner would type.  04's only exercise is a program: a lambda.
_WRITE_IMM = ("lambda p, d, imm: [p.b.qp.post_recv(RecvWR(wr_id=1, num_sge=0, sg=[])), p.a.mr.write(d, len(d)), "
              "(wr := SendWR(wr_id=2, opcode=e.IBV_WR_RDMA_WRITE_WITH_IMM, num_sge=1, "
              "sg=[SGE(p.a.mr.buf, len(d), p.a.mr.lkey)], imm_data=imm)), wr.set_wr_rdma(p.b.mr.rkey, p.b.mr.buf), "
              "p.a.qp.post_send(wr), p.a.poll(), p.b.poll()][-1]")
EXERCISE: dict[str, tuple[str, str, tuple[str, ...], str]] = {
    "00-welcome": ("welcome.opcode", '"RC RDMA WRITE Only"', ("BTH.opcode", "RC RDMA WRITE Only"),
                   '"RC RDMA READ Request"'),
    "01-dma-to-rdma": ("dma.copies", "1", ("copies",), "2"),
    "02-verbs-objects": ("verbs.path", '["RESET", "INIT", "RTS"]', ("INIT -> RTS", "transition table"),
                         '["RESET", "INIT", "RTR", "RTS"]'),
    # 03's RNR timer differs per student: the answers are typed as expressions of the frame the page shows
    "03-send-receive": ("send.rnr", "rnr_nak.data[54] & 0x1F", ("AETH.value", "timer code"),
                        "RNR_TIMER_US[rnr_nak.data[54] & 0x1F] / 1000"),
    "04-write-imm": ("write.imm", "lambda pair, data, imm: None", ("BTH.opcode", "immediate"), _WRITE_IMM),
    # 05's READ and 06's atomics differ per student: the answers are typed as expressions of the kernel's own
    "05-read": ("read.responses", '[(s := lab.scenario("read.responses")).length // s.mtu, 1]',
                ("BTH.opcode", "remainder"),
                '[-(-(s := lab.scenario("read.responses")).length // s.mtu), s.length % s.mtu]'),
    "06-atomics": ("atomic.final", "[(q := lab.checkers.verbs.atomic_sequence())[1], q[1][3]]",
                   ("counter", "final counter"), "list(lab.checkers.verbs.atomic_sequence()[1:])"),
    "07-four-wires": ("wires.which", '["RoCEv2", "iWARP", "IB", "RoCEv2"]', ("Ethernet.type", "RoCEv2"),
                      '["RoCEv2", "iWARP", "IB", "RoCEv1"]'),
    # 08's capture is the student's own: the answers are typed as expressions of its frame 4 (payload bytes 8-11)
    "08-captures": ("captures.rkey", 'int.from_bytes(mine[3].packet.payload[8:12], "little")',
                    ("RETH.r_key", "byte order"), 'int.from_bytes(mine[3].packet.payload[8:12], "big")'),
    # 09's count and wait differ per student: the right answer is typed as an expression of the kernel's run
    "09-reliability": ("reliability.timeout", '{"resent": 1, "waited_ms": 1}', ("lost",),
                       '{"resent": len(replays.retransmitted(my_timeout)), '
                       '"waited_ms": 4.096e-3 * 2 ** lab.scenario("reliability.timeout").timeout}'),
    "10-congestion": ("congestion.victim", '{"port": "P2->R2", "reason": "B"}', ("port", "F1's path"),
                      '{"port": "P1->P2", "reason": "B"}'),
    "11-security": ("security.guess", '["IBV_WC_LOC_PROT_ERR", "Remote Access Error"]',
                    ("wc.status", "not the completion status"), '["IBV_WC_REM_ACCESS_ERR", "Remote Access Error"]'),
    # 12's port and 13's length differ per student: the right answers are typed as expressions of the kernel's own
    "12-connection-manager": ("cm.port", "35360", ("CM_REQ.service_id", "source port"),
                              "msgs[0][1].body.service_id & 0xFFFF"),
    "13-live-rdma": ("live.segments", '{"writes": 0, "read_responses": 0, "last_payload": 0}',
                     ("BTH.opcode", "WRITE packets"),
                     '{"writes": -(-mine.length // 1024), "read_responses": -(-mine.length // 1024), '
                     '"last_payload": mine.length % 1024}'),
    "14-infiniband": ("ib.why", '"A"', ("drops", "credits"), '"B"'),
    "15-building-on-rdma": ("kv.why", '"A"', ("answer", "bytes"), '"B"'),
}
# bare reprs a learner must never see in place of a rendering: ipywidgets' text/plain, matplotlib's figure repr
_BARE = re.compile(r"^\s*(?:[A-Z]\w*(?:Box|Slider|Dropdown|Button|Text|Tab|Output|Accordion|Checkbox|Widget)|"
                   r"interactive|Output)\((?:children|layout|value|outputs|description)=|<Figure size \d")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def lab_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """`rdmalab lab --no-browser` on a fresh work directory, as the README starts it; yields url, token, port."""
    tmp = tmp_path_factory.mktemp("lab")
    settings = tmp / "settings"
    # JupyterLab's own settings, as a learner could set them: every cell kept in the page (JupyterLab 4
    # otherwise leaves cells far off screen out of the DOM).  No news pop-up: `rdmalab lab` turns it off itself.
    for ext, value in (("notebook-extension/tracker", {"windowingMode": "none"}),):
        f = settings / "@jupyterlab" / f"{ext}.jupyterlab-settings"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps(value), encoding="utf-8")
    env = dict(os.environ, JUPYTERLAB_SETTINGS_DIR=str(settings), JUPYTERLAB_WORKSPACES_DIR=str(tmp / "workspaces"),
               PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    env.pop("JUPYTER_TOKEN", None)
    env.pop("RDMALAB_BACKEND", None)
    env.pop("RDMALAB_STUDENT", None)  # the book's variant: the right answers below are its values
    env["JUPYTER_DATA_DIR"] = str(tmp / "data")  # the notebook signatures `rdmalab lab` writes stay here
    port = _free_port()
    script = Path(sys.executable).with_name("rdmalab")
    cmd = [str(script)] if script.exists() else [sys.executable, "-c", "import sys; from rdmalab.cli import main; "
                                                                       "sys.exit(main())"]
    log = tmp / "lab.log"
    with log.open("w") as out:
        proc = subprocess.Popen([*cmd, "lab", "--no-browser", "--dir", str(tmp / "work"), "--port", str(port)],
                                stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tmp)
    try:
        token = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and token is None:
            if proc.poll() is not None:
                pytest.fail(f"rdmalab lab exited with {proc.returncode}:\n{log.read_text()}")
            m = re.search(rf"http://127\.0\.0\.1:{port}/lab\?token=([0-9a-f]+)", log.read_text())
            token = m.group(1) if m else None
            time.sleep(0.5)
        assert token, f"rdmalab lab printed no URL with a token in 120 s:\n{log.read_text()}"
        yield {"url": f"http://127.0.0.1:{port}", "token": token, "port": port, "log": log, "work": tmp / "work"}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return int(r.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


def _listening(port: int) -> list[str]:
    """The local addresses a TCP socket listens on at ``port`` (from /proc/net/tcp and tcp6)."""
    found = []
    for name in ("tcp", "tcp6"):
        p = Path("/proc/net") / name
        if not p.exists():
            continue
        for line in p.read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, hexport = local.split(":")
            if state == "0A" and int(hexport, 16) == port:  # 0A: LISTEN
                raw = bytes.fromhex(addr)
                if name == "tcp":
                    found.append(".".join(str(b) for b in raw[::-1]))
                else:
                    found.append(":".join(raw[i:i + 4][::-1].hex() for i in range(0, 16, 4)))
    return found


def test_the_lab_listens_on_localhost_only_and_refuses_requests_without_the_token(lab_server: dict) -> None:
    url, token = lab_server["url"], lab_server["token"]
    assert _get(f"{url}/api/contents?token={token}") == 200
    assert _get(f"{url}/api/contents") == 403
    assert _get(f"{url}/api/contents?token={'0' * len(token)}") == 403
    assert _get(f"{url}/api/kernels") == 403
    if sys.platform.startswith("linux"):
        assert _listening(lab_server["port"]) == ["127.0.0.1"], _listening(lab_server["port"])


# ------------------------------------------------------------------------------------------ the browser


def _browser_paths() -> tuple[str, str] | None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (chromium, driver) if chromium and driver else None


@pytest.fixture
def browser() -> Iterator[Any]:
    paths = _browser_paths()
    if paths is None:
        pytest.skip("chromium and chromedriver are not installed (CI installs them: scripts/test.sh)")
    selenium = pytest.importorskip("selenium")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    del selenium
    opts = webdriver.ChromeOptions()
    opts.binary_location = paths[0]
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--disable-background-networking", "--window-size=1400,1000", "--hide-scrollbars"):
        opts.add_argument(a)
    driver = webdriver.Chrome(service=Service(paths[1]), options=opts)
    try:
        yield driver
    finally:
        driver.quit()


_PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"


def _js(driver: Any, script: str, *args: Any) -> Any:
    return driver.execute_script(script, *args)


def _wait(what: str, seconds: float, probe: Any, driver: Any, shot: Path) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got = probe()
        if got:
            return got
        time.sleep(0.5)
    driver.save_screenshot(str(shot))
    pytest.fail(f"{what}: not within {seconds} s (screenshot {shot})")


def _kernel_idle(driver: Any) -> bool:
    return bool(_js(driver, f"const e = document.querySelector('{_PANEL} .jp-Notebook-ExecutionIndicator');"
                            "return !!e && e.dataset.status === 'idle';"))


def _prompts(driver: Any) -> list[str]:
    return list(_js(driver, f"return Array.from(document.querySelectorAll('{_PANEL} .jp-CodeCell .jp-InputPrompt'))"
                            ".map(e => e.textContent.trim());"))


def _click_menu(driver: Any, menu: str, item: str) -> None:
    from selenium.webdriver.common.by import By

    driver.find_element(By.XPATH, f"//div[contains(@class,'lm-MenuBar-itemLabel') and text()='{menu}']").click()
    driver.find_element(By.XPATH, f"//div[contains(@class,'lm-Menu-itemLabel') and text()='{item}']").click()


_OUTPUTS_JS = f"""
return Array.from(document.querySelectorAll('{_PANEL} .jp-CodeCell')).map((cell, i) => ({{
  index: i,
  source: (cell.querySelector('.cm-content') || {{innerText: ''}}).innerText.slice(0, 80),
  outputs: Array.from(cell.querySelectorAll('.jp-OutputArea-output')).map(o => ({{
    mime: o.getAttribute('data-mime-type') || '', text: o.innerText.slice(0, 400),
    widgets: o.querySelectorAll('.jupyter-widgets, .widget-container, .lm-Widget.jupyter-widgets').length}}))
}}));
"""


def _problems(cells: list[dict[str, Any]]) -> list[str]:
    bad = []
    for c in cells:
        where = f"cell {c['index']} ({c['source'].splitlines()[0] if c['source'] else ''!r})"
        for o in c["outputs"]:
            text = o["text"]
            if o["mime"] == "application/vnd.jupyter.stderr":
                bad.append(f"{where}: error or stderr output: {text[:300]!r}")
            if "Error displaying widget" in text or "Loading widget..." in text:
                bad.append(f"{where}: a widget did not render: {text[:120]!r}")
            if o["mime"] == "text/plain" and _BARE.search(text):
                bad.append(f"{where}: a bare text repr instead of its rendering: {text[:120]!r}")
            if o["mime"] == "application/vnd.jupyter.widget-view+json" and not o["widgets"]:
                bad.append(f"{where}: a widget output with no widget in it: {text[:120]!r}")
    return bad


def _type_into_cell(driver: Any, needle: str, text: str) -> Any:
    """Replace the text of the code cell that contains ``needle`` by ``text``, typed, and run it (Shift+Enter)."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    cells = driver.find_elements(By.CSS_SELECTOR, f"{_PANEL} .jp-CodeCell")
    cell = next(c for c in cells if needle in c.find_element(By.CSS_SELECTOR, ".cm-content").text)
    _js(driver, "arguments[0].scrollIntoView({block: 'start'});", cell)
    editor = cell.find_element(By.CSS_SELECTOR, ".cm-content")
    editor.click()
    ActionChains(driver).key_down(Keys.CONTROL).send_keys("a").key_up(Keys.CONTROL).send_keys(Keys.DELETE).perform()
    editor.send_keys(text)
    typed = editor.text
    ActionChains(driver).key_down(Keys.SHIFT).send_keys(Keys.ENTER).key_up(Keys.SHIFT).perform()
    return cell, typed


def _feedback(driver: Any, cell: Any, before: str) -> str:
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = cell.find_elements(By.CSS_SELECTOR, ".rdmalab-check")
        if found and found[0].text != before and _kernel_idle(driver):
            return str(found[0].text)
        time.sleep(0.5)
    return ""


# JupyterLab shows an SVG output as an <img> with a data: URL: the ladders are put back into the page, out of
# sight, to measure each text as the browser lays it out (its box, turned by its transform) and each arrow's line
_LADDERS_JS = f"""
const found = [];
for (const img of document.querySelectorAll('{_PANEL} .jp-RenderedSVG img, {_PANEL} .jp-RenderedHTMLCommon img')) {{
  const src = img.getAttribute('src') || '';
  const comma = src.indexOf(',');
  if (!src.startsWith('data:image/svg+xml') || comma < 0) continue;
  const body = src.slice(comma + 1);
  const text = src.slice(0, comma).includes('base64')
    ? new TextDecoder().decode(Uint8Array.from(atob(body), c => c.charCodeAt(0))) : decodeURIComponent(body);
  if (!text.includes('rdmalab-ladder')) continue;
  const host = document.createElement('div');
  host.style.position = 'absolute'; host.style.left = '-20000px'; host.style.top = '0';
  host.innerHTML = text;
  document.body.appendChild(host);
  const svg = host.querySelector('svg');
  const labels = Array.from(svg.querySelectorAll('text')).filter(t => t.textContent.trim()).map(t => {{
    const b = t.getBBox();
    const c = t.transform.baseVal.consolidate();
    const m = c ? c.matrix : {{a: 1, b: 0, c: 0, d: 1, e: 0, f: 0}};
    return {{text: t.textContent, x: b.x, y: b.y, w: b.width, h: b.height, m: [m.a, m.b, m.c, m.d, m.e, m.f]}};
  }});
  const lines = Array.from(svg.querySelectorAll('g.rdmalab-arrow line')).map(
    l => [l.x1.baseVal.value, l.y1.baseVal.value, l.x2.baseVal.value, l.y2.baseVal.value]);
  found.push({{title: (svg.querySelector('text') || {{textContent: ''}}).textContent, labels, lines, svg: text}});
  host.remove();
}}
return found;
"""


def _ladder_problems(ladders: list[dict[str, Any]]) -> list[str]:
    """Labels that overlap, and arrows that cross a label, in the ladders as the browser draws them (each
    text's box as the browser measures it, less 1 px at top and bottom: the box includes the font's line gap)."""
    from rdmalab.viz.ladder import polygons_overlap

    bad = []
    for lad in ladders:
        boxes = []
        for t in lad["labels"]:
            a, b, c, d, e, f = t["m"]
            x, y, w, h = t["x"], t["y"] + 1, t["w"], max(t["h"] - 2, 0)
            boxes.append((t["text"], [(a * px + c * py + e, b * px + d * py + f)
                                      for px, py in ((x, y), (x + w, y), (x + w, y + h), (x, y + h))]))
        for i, (ta, pa) in enumerate(boxes):
            for tb, pb in boxes[i + 1:]:
                if polygons_overlap(pa, pb):
                    bad.append(f"{lad['title']!r}: labels {ta!r} and {tb!r} overlap")
            for x0, y0, x1, y1 in lad["lines"]:
                if polygons_overlap(pa, [(x0, y0), (x1, y1)]):
                    bad.append(f"{lad['title']!r}: a line {x0:.0f},{y0:.0f} -> {x1:.0f},{y1:.0f} crosses label {ta!r}")
    return bad


def _end_sessions(lab_server: dict) -> None:
    """Shut down every kernel the lab runs (as closing the notebooks would, and to free the memory)."""
    for s in json.loads(urllib.request.urlopen(f"{lab_server['url']}/api/sessions?token={lab_server['token']}",
                                               timeout=30).read()):
        req = urllib.request.Request(f"{lab_server['url']}/api/sessions/{s['id']}?token={lab_server['token']}",
                                     method="DELETE")
        urllib.request.urlopen(req, timeout=30).close()


@pytest.mark.slow
@pytest.mark.parametrize("src", SOURCES, ids=[s.stem for s in SOURCES])
def test_student_notebook_runs_in_jupyterlab(src: Path, lab_server: dict, browser: Any) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    shot = SHOTS / f"{src.stem}.png"
    driver = browser
    # a workspace of its own, so that JupyterLab does not reopen the notebooks of the other tests
    driver.get(f"{lab_server['url']}/lab/workspaces/t{src.stem[:2]}/tree/{src.stem}.ipynb?token={lab_server['token']}")
    _wait(f"{src.stem}: the kernel to start and go idle", KERNEL_START_S, lambda: _kernel_idle(driver), driver, shot)
    time.sleep(1)  # JupyterLab writes the kernel's metadata into the notebook right after the kernel is ready
    dirty = _js(driver, "return Array.from(document.querySelectorAll('#jp-main-dock-panel .lm-TabBar-tab.jp-mod-dirty'))"
                        ".map(e => e.textContent);")
    assert not dirty, f"{src.stem} opened modified (its tab is marked dirty): {dirty}"

    def started() -> bool:
        return any(re.search(r"\[(\d+|\*)\]", p) for p in _prompts(driver))

    def has_error() -> bool:
        return bool(_js(driver, f"return document.querySelector('{_PANEL} .jp-OutputArea-output"
                                f"[data-mime-type=\"application/vnd.jupyter.stderr\"]') !== null;"))

    def settled() -> bool:
        prompts = _prompts(driver)
        if not _kernel_idle(driver) or any("*" in p for p in prompts):
            return False
        # every code cell has run, or one failed (then the kernel drops the rest of the queue: reported below)
        return all(re.search(r"\[\d+\]", p) for p in prompts) or has_error()

    # A click right after the kernel came up is sometimes not taken (the first notebook, a cold JupyterLab):
    # click again if nothing started within 20 s
    for _attempt in range(3):
        _click_menu(driver, "Run", "Run All Cells")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not started():
            time.sleep(0.5)
        if started():
            break
    _wait(f"{src.stem}: Run All Cells to finish with the kernel idle", RUN_ALL_S, settled, driver, shot)
    time.sleep(2)  # widget views render after their comm messages; give them a moment before reading the page
    cells = _js(driver, _OUTPUTS_JS)
    not_run = [c["index"] for c, p in zip(cells, _prompts(driver), strict=True) if not re.search(r"\[\d+\]", p)]
    first_widget = _js(driver, f"return document.querySelector('{_PANEL} .jp-OutputArea-output .jupyter-widgets') || "
                               f"document.querySelector('{_PANEL} .jp-RenderedSVG, {_PANEL} .jp-RenderedImage');")
    if first_widget is not None:
        _js(driver, "arguments[0].scrollIntoView({block: 'center'});", first_widget)
        time.sleep(0.5)
    driver.save_screenshot(str(shot))
    problems = _problems(cells)
    ladders = _js(driver, _LADDERS_JS)
    for i, lad in enumerate(ladders):  # each ladder as the browser draws it, for a reader to look at
        (SHOTS / f"{src.stem}-ladder-{i + 1}.svg").write_text(lad["svg"], encoding="utf-8")
    problems += _ladder_problems(ladders)
    assert not problems, f"{src.stem} (screenshot {shot}):\n" + "\n".join(problems)
    assert not not_run, f"{src.stem}: code cells {not_run} did not run (screenshot {shot})"

    ex, wrong, words, right = EXERCISE[src.stem]
    cell, typed = _type_into_cell(driver, f'lab.check("{ex}"', f'lab.check("{ex}", {wrong})')
    text = _feedback(driver, cell, "")
    assert "Not quite" in text and all(w in text for w in words), (src.stem, typed, text)
    cell, typed = _type_into_cell(driver, f'lab.check("{ex}"', f'lab.check("{ex}", {right})')
    text2 = _feedback(driver, cell, text)
    _js(driver, "arguments[0].scrollIntoView({block: 'center'});", cell)
    time.sleep(0.3)
    driver.save_screenshot(str(SHOTS / f"{src.stem}-exercise.png"))
    assert "Correct" in text2 and f"[{ex}]" in text2, (src.stem, typed, text2)
    if any(c["outputs"] and any(o["widgets"] for o in c["outputs"]) for c in cells):
        _reopen_saved(src, lab_server, driver)
    # the kernel's session ends with the test, as a learner's closed notebook would not: free the memory
    _end_sessions(lab_server)


def _reopen_saved(src: Path, lab_server: dict, driver: Any) -> None:
    """Issue 36, item 5: save the notebook, shut its kernel down, reload the page: where a widget was, its saved
    view shows (JupyterLab restores it from the widget state saved with the notebook), never "Error displaying
    widget: model not found"; and the saved file holds each widget's static HTML for viewers without widgets."""
    shot = SHOTS / f"{src.stem}-reopened.png"
    _click_menu(driver, "File", "Save Notebook")
    path = lab_server["work"] / f"{src.stem}.ipynb"

    def saved() -> bool:
        nb = json.loads(path.read_text(encoding="utf-8"))
        return bool(nb.get("metadata", {}).get("widgets"))

    _wait(f"{src.stem}: the notebook saved with its widget state", 60, saved, driver, shot)
    nb = json.loads(path.read_text(encoding="utf-8"))
    views = [o["data"] for c in nb["cells"] for o in c.get("outputs", [])
             if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert views and all("rdmalab-static-widget" in "".join(d.get("text/html", "")) for d in views), \
        f"{src.stem}: a saved widget output without its static view"
    _end_sessions(lab_server)
    driver.refresh()
    _wait(f"{src.stem}: the reopened notebook's kernel idle", KERNEL_START_S, lambda: _kernel_idle(driver), driver, shot)
    time.sleep(3)  # the widget manager restores the saved state once the kernel is up
    cells = _js(driver, _OUTPUTS_JS)
    widget = _js(driver, f"return document.querySelector('{_PANEL} .jp-OutputArea-output .jupyter-widgets, "
                         f"{_PANEL} .rdmalab-static-widget');")
    if widget is not None:  # the screenshot shows the widget as it came back
        _js(driver, "arguments[0].scrollIntoView({block: 'start'});", widget)
        time.sleep(0.5)
    driver.save_screenshot(str(shot))
    broken = [f"cell {c['index']}: {o['text'][:100]!r}" for c in cells for o in c["outputs"]
              if "Error displaying widget" in o["text"] or "model not found" in o["text"]]
    assert not broken, f"{src.stem} reopened (screenshot {shot}): " + "; ".join(broken)
    shown = [o for c in cells for o in c["outputs"] if o["widgets"] or "Interactive" in o["text"]]
    assert shown, f"{src.stem} reopened: neither a widget nor its static view shows (screenshot {shot})"


def test_the_lab_printed_only_its_own(lab_server: dict) -> None:
    """Issue 36, item 6: after the notebooks were opened, the server's output holds no language-server list, no
    "Notebook ... is not trusted", and the lab's own start line."""
    text = lab_server["log"].read_text(encoding="utf-8", errors="replace")
    assert text.startswith("rdmalab lab: notebooks in "), text[:200]
    noise = [line for line in text.splitlines()
             if "is not trusted" in line or "jupyter_lsp" in line or "language server" in line.lower()]
    assert not noise, "\n".join(noise[:10])
