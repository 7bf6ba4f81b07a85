#!/usr/bin/env bash
# Build the Jupyter Book offline, with warnings as errors, then check it:
#   1. stage book/ into build/book and generate the notebooks ("book" version: instructor
#      notebooks with the solutions folded) into build/book/notebooks;
#   2. jupyter-book build (Sphinx + MyST-NB): executes every notebook, -W -n --keep-going;
#   3. every lab.check run during the build must have passed;
#   4. every internal link and anchor of the HTML must resolve (book/tools/check_links.py);
#   5. headless Chromium opens every page: no console errors, figures present; screenshots of
#      the home page and a notebook page go to artifacts/ (book/tools/check_render.py).
# Options: --no-browser skips step 5; --external-links also runs Sphinx's linkcheck (needs network).
# Serve the result with: python -m http.server -d build/book/_build/html 8000
set -euo pipefail
cd "$(dirname "$0")/.."
browser=1; external=0
for a in "$@"; do
  case "$a" in
    --no-browser) browser=0 ;;
    --external-links) external=1 ;;
    *) echo "usage: $0 [--no-browser] [--external-links]" >&2; exit 2 ;;
  esac
done
if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=$(command -v python3); fi
JB=("$PY" -c "import sys; from jupyter_book.cli.main import main; sys.exit(main())")
stage=build/book
rm -rf "$stage"
mkdir -p "$stage" artifacts
cp -r book/_config.yml book/_toc.yml book/intro.md book/chapters book/_ext book/_static "$stage"/
"$PY" -m rdmalab.lab.generate --version book --out "$stage/notebooks" >/dev/null
export RDMALAB_CHECK_LOG="$PWD/build/book-checks.jsonl"
export RDMALAB_BACKEND=soft MPLBACKEND=Agg PYDEVD_DISABLE_FILE_VALIDATION=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # the kernels import this checkout even when not installed
rm -f "$RDMALAB_CHECK_LOG"
start=$(date +%s)
echo "== jupyter-book build (executes the notebooks; warnings are errors)"
"${JB[@]}" build "$stage" -W -n --keep-going
echo "== built in $(( $(date +%s) - start ))s: $stage/_build/html"
echo "== checks run during the build"
"$PY" - "$RDMALAB_CHECK_LOG" <<'PYEOF'
import collections, json, sys
rows = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")] if __import__("os").path.exists(sys.argv[1]) else []
bad = [r for r in rows if r["status"] != "pass"]
print(f"{len(rows)} checks, {len(rows) - len(bad)} passed")
for r in bad:
    print("NOT PASSING:", r["exercise"], r["status"], r["message"])
sys.exit(1 if bad or not rows else 0)
PYEOF
echo "== internal links"
"$PY" book/tools/check_links.py "$stage/_build/html"
if [ "$external" = 1 ]; then
  echo "== external links (Sphinx linkcheck)"
  "${JB[@]}" build "$stage" --builder linkcheck
fi
if [ "$browser" = 1 ]; then
  echo "== rendering in headless Chromium"
  "$PY" book/tools/check_render.py "$stage/_build/html" --artifacts artifacts
fi
echo "== book OK: serve it with: python -m http.server -d $stage/_build/html 8000"
