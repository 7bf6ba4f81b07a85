#!/usr/bin/env bash
# Build the Jupyter Book offline, with warnings as errors, then check it:
#   1. stage book/ into build/book and generate the notebooks into build/book/notebooks: the
#      "book" version (student notebooks: no solutions, the exercises' hints folded, glossary
#      terms linked); with --instructor the "instructor-book" version (solutions folded) goes
#      to build/book-instructor instead, a separate site for instructors;
#   2. execute every notebook (book/tools/execute.py): fresh kernel, a time limit per cell; a
#      cell that hangs or fails stops the build naming the notebook and the cell;
#   3. jupyter-book build (Sphinx + MyST-NB, notebooks already executed): -W -n --keep-going;
#   4. every lab.check run must have said "not yet" (public book: no answers in it) or, for the
#      instructor build, must have passed;
#   5. every internal link and anchor of the HTML must resolve (book/tools/check_links.py);
#   6. headless Chromium opens every page: no console errors, figures present; screenshots of
#      the home page and a notebook page go to artifacts/ (book/tools/check_render.py).
# Options: --instructor (see 1), --no-browser skips step 6; --external-links also runs Sphinx's
# linkcheck (needs network); --cell-timeout N (default 120 s).
# Serve the result with: python -m http.server -d build/book/_build/html 8000
set -euo pipefail
cd "$(dirname "$0")/.."
browser=1; external=0; instructor=0; cell_timeout=120
while [ $# -gt 0 ]; do
  case "$1" in
    --no-browser) browser=0 ;;
    --external-links) external=1 ;;
    --instructor) instructor=1 ;;
    --cell-timeout) shift; cell_timeout="$1" ;;
    *) echo "usage: $0 [--instructor] [--no-browser] [--external-links] [--cell-timeout N]" >&2; exit 2 ;;
  esac
  shift
done
if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=$(command -v python3); fi
JB=("$PY" -c "import sys; from jupyter_book.cli.main import main; sys.exit(main())")
if [ "$instructor" = 1 ]; then stage=build/book-instructor; version=instructor-book; want=pass
else stage=build/book; version=book; want="not yet"; fi
rm -rf "$stage"
mkdir -p "$stage" artifacts
cp -r book/_config.yml book/_toc.yml book/intro.md book/chapters book/_ext book/_static "$stage"/
if [ "$instructor" = 1 ]; then
  sed -i 's/^title: "\(.*\)"$/title: "\1 (instructor edition, with solutions)"/' "$stage/_config.yml"
fi
"$PY" -m rdmalab.lab.generate --version "$version" --glossary book/chapters/glossary.md --out "$stage/notebooks" >/dev/null
export RDMALAB_CHECK_LOG="$PWD/$stage-checks.jsonl"
export RDMALAB_BACKEND=soft MPLBACKEND=Agg PYDEVD_DISABLE_FILE_VALIDATION=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # the kernels import this checkout even when not installed
rm -f "$RDMALAB_CHECK_LOG"
start=$(date +%s)
echo "== execute the $version notebooks (at most ${cell_timeout}s per cell)"
"$PY" book/tools/execute.py "$stage/notebooks" --cell-timeout "$cell_timeout"
echo "== jupyter-book build (warnings are errors)"
"${JB[@]}" build "$stage" -W -n --keep-going
echo "== built in $(( $(date +%s) - start ))s: $stage/_build/html"
echo "== checks run during the build: every one must say \"$want\""
"$PY" - "$RDMALAB_CHECK_LOG" "$want" <<'PYEOF'
import json, os, sys
path, want = sys.argv[1:]
rows = [json.loads(l) for l in open(path, encoding="utf-8")] if os.path.exists(path) else []
bad = [r for r in rows if r["status"] != want]
print(f"{len(rows)} checks, {len(rows) - len(bad)} said {want!r}")
for r in bad:
    print("UNEXPECTED:", r["exercise"], r["status"], r["message"])
sys.exit(1 if bad or not rows else 0)
PYEOF
if [ "$version" = book ]; then
  echo "== no solution in the public site (pages, sources, downloadable notebooks)"
  "$PY" - "$stage" <<'PYEOF'
import pathlib, re, sys
stage = pathlib.Path(sys.argv[1])
# Every solution line of every source must be absent from every file of the built site, unless the
# same line is also part of what students get (a worked example above the exercise, say).
from rdmalab.lab.generate import BEGIN, END, convert, sources
sol, student = set(), set()
for src in sources(pathlib.Path("notebooks")):
    text = src.read_text(encoding="utf-8")
    student |= {l.strip() for c in convert(text, "student")["cells"] for l in c["source"].splitlines()}
    inside = False
    for line in text.splitlines():
        s = line.strip()
        if s in (BEGIN, END):
            inside = s == BEGIN
        elif inside and len(s) > 25:  # long enough to be specific to the solution
            sol.add(s)
sol -= student
leaks = []
for f in (stage / "_build" / "html").rglob("*"):
    if f.suffix in (".html", ".ipynb", ".txt", ".md", ".py", ".js") and f.is_file():
        text = f.read_text(encoding="utf-8", errors="replace")
        import html as h
        text = h.unescape(re.sub(r"<[^>]+>", "", text)) if f.suffix == ".html" else text
        leaks += [(f.name, s) for s in sol if s in text]
print(f"{len(sol)} solution lines looked for in the built site: {len(leaks)} found")
for name, s in leaks[:10]:
    print("LEAK:", name, s)
sys.exit(1 if leaks else 0)
PYEOF
fi
echo "== internal links"
"$PY" book/tools/check_links.py "$stage/_build/html"
if [ "$external" = 1 ]; then
  echo "== external links (Sphinx linkcheck)"
  "${JB[@]}" build "$stage" --builder linkcheck
fi
if [ "$browser" = 1 ]; then
  echo "== rendering in headless Chromium"
  "$PY" book/tools/check_render.py "$stage/_build/html" --artifacts "artifacts/$(basename "$stage")"
fi
echo "== book OK: serve it with: python -m http.server -d $stage/_build/html 8000"
