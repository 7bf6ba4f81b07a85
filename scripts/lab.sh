#!/usr/bin/env bash
# The README's main command: set up, then open the lab (JupyterLab on notebooks/).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh "lab"
exec .venv/bin/rdmalab lab "$@"
