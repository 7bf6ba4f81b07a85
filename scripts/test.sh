#!/usr/bin/env bash
# The README's test command: set everything up, then run the linters and the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
RDMALAB_APT="${RDMALAB_APT:-tshark}" bash scripts/setup.sh "test,lab,wireshark"
export PATH="$PWD/.venv/bin:$PATH"
echo "== ruff"; ruff check rdmalab tests benchmarks
echo "== mypy (strict on rdmalab.wire)"; mypy rdmalab
echo "== pytest"
set +e
python -m pytest "$@"
rc=$?
set -e
# pytest exits 5 when it collected no tests: that is a failure of this suite, say so plainly.
if [ "$rc" = 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi
exit "$rc"
