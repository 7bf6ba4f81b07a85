#!/usr/bin/env bash
# The README's test command: set everything up, then run the linters and the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
# tshark is the decoding oracle; chromium + chromedriver render the book in a real browser;
# python3-pyverbs ships rdma-core's pyverbs test suite, the API oracle (docs/pyverbs.md).
RDMALAB_APT="${RDMALAB_APT:-tshark chromium chromium-driver fonts-dejavu-core python3-pyverbs}" bash scripts/setup.sh "test,lab,wireshark,book,analysis"
export PATH="$PWD/.venv/bin:$PATH"
# Locally a missing oracle makes its tests skip with a reason; in CI it must be there, so that
# no Wireshark cross-check or browser check is skipped and counted as passing.
if [ "${CI:-}" = true ]; then
  for tool in tshark chromium chromedriver; do
    command -v "$tool" >/dev/null || { echo "CI: $tool is not installed; the checks that need it would be skipped" >&2; exit 1; }
  done
fi
echo "== ruff"; ruff check rdmalab tests benchmarks examples
echo "== mypy (strict on rdmalab.wire)"; mypy rdmalab
echo "== pytest"
set +e
python -m pytest "$@"
rc=$?
set -e
# pytest exits 5 when it collected no tests: that is a failure of this suite, say so plainly.
if [ "$rc" = 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi
if [ "$rc" != 0 ]; then exit "$rc"; fi
# python3-pyverbs provides only the test files here (no kernel device): the suite runs on rdmalab.verbs.
echo "== rdma-core's pyverbs tests on rdmalab.verbs, side by side with kernel rxe"
python scripts/run_pyverbs_suite.py --check
echo "== the wheel: pip install rdmalab in a fresh venv, then rdmalab lab and rdmalab decode from it"
bash scripts/check_wheel.sh "$PWD/.venv/bin/python"
echo "== the book: built offline from the notebooks, links checked, rendered in headless Chromium"
bash scripts/build_book.sh
echo "== the instructor edition of the book (solutions folded; every check must pass)"
bash scripts/build_book.sh --instructor --no-browser
