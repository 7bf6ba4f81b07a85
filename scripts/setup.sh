#!/usr/bin/env bash
# Set up rdmalab on a fresh Debian/Ubuntu machine: system packages (when we can install them)
# and a virtual environment in .venv with rdmalab and the extras named in $1 (e.g. "lab,test").
# Idempotent: a second run only checks that everything is there.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-lab}"
apt_pkgs="${RDMALAB_APT:-tshark}"

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else return 1; fi; }

missing=()
for p in $apt_pkgs; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
# The interpreter of .venv (scripts/pick_python.sh says which and why): $PYTHON if set, else the
# distribution's /usr/bin/python3 when it is 3.11 or newer, else python3.
py="$(bash scripts/pick_python.sh)"
command -v "$py" >/dev/null || { echo "rdmalab setup: no Python interpreter '$py' (PYTHON=/path/to/python3.11 bash $0)" >&2; exit 1; }
"$py" -m venv --help >/dev/null 2>&1 && "$py" -c 'import ensurepip' 2>/dev/null || missing+=("python3-venv")
if [ ${#missing[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null; then
    echo "rdmalab setup: installing system packages: ${missing[*]}"
    # tshark asks whether non-root users may capture; answer for it.
    echo "wireshark-common wireshark-common/install-setuid boolean false" | as_root debconf-set-selections || true
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq || true
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
      || echo "rdmalab setup: could not install ${missing[*]}; the tests that need them will say so and skip" >&2
  else
    echo "rdmalab setup: no apt-get; please install ${missing[*]} yourself" >&2
  fi
fi

if [ ! -x .venv/bin/python ]; then
  "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || { echo "rdmalab setup: $py is Python $("$py" -c 'import platform; print(platform.python_version())'); rdmalab needs 3.11 or newer (PYTHON=/path/to/python3.11 bash $0)" >&2; exit 1; }
  echo "rdmalab setup: creating .venv with $py ($("$py" -c 'import sys; print(sys.executable, sys.version.split()[0])'))"
  "$py" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
# setuptools' build backend prints a boxed "Editable installation" warning (about folders named like the
# package in the working directory, which is exactly what a checkout is): not the learner's concern.
# The editable install is setuptools' "compat" one: a .pth file that puts the checkout on sys.path,
# instead of the default import hook, whose module every start of the interpreter imports with
# pathlib, re, enum, urllib.parse and ipaddress (issue 21: in the lab VM, TCG on a 9p root, that hook
# was about 0.9 s of the 1.2 s of `site` in `python -X importtime -c pass`; tests/live/test_startup.py).
# setuptools calls the mode transitional (that is the second warning); where it is gone, the default.
RDMALAB_PIP_WARNINGS="ignore:Editable installation:UserWarning,ignore:Compat editable installs"
PYTHONWARNINGS="$RDMALAB_PIP_WARNINGS" .venv/bin/python -m pip install -q -e ".[${extras}]" \
    --config-settings editable_mode=compat \
  || PYTHONWARNINGS="$RDMALAB_PIP_WARNINGS" .venv/bin/python -m pip install -q -e ".[${extras}]"
echo "rdmalab setup: ready (.venv, extras: ${extras})"
