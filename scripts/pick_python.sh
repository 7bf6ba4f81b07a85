#!/usr/bin/env bash
# Prints the interpreter scripts/setup.sh makes .venv with: $PYTHON if set; else the distribution's
# /usr/bin/python3 when it is Python 3.11 or newer; else python3 from PATH.
#
# The distribution's is preferred where there is one.  Debian's is built with PGO and LTO and is not a
# PIE; in the lab VM (TCG, the host's root file system over 9p) it starts several times faster than a
# shared-library build such as pyenv's: `python -I -S` listening on a TCP port with `_socket`, 0.23-0.25 s
# against 1.4-2.5 s (tests/live/test_startup.py prints both beside the stock tools).  It is also the
# interpreter that the distribution's Python packages are built for (python3-pyverbs: docs/pyverbs.md).
set -euo pipefail
if [ -n "${PYTHON:-}" ]; then
  echo "$PYTHON"
elif [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo /usr/bin/python3
else
  echo python3
fi
