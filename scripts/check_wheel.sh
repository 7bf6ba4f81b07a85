#!/usr/bin/env bash
# Prove that `pip install rdmalab` (the built wheel) gives a working lab, outside any checkout:
#   1. build the wheel (pip wheel --no-deps, build isolation: what `python -m build` does);
#   2. install it with the lab extra into a fresh venv in a temporary directory;
#   3. from that directory (no repository in sight), run `rdmalab lab --no-browser --dir DIR --port P`
#      and wait until the Jupyter server's contents API lists the lab notebooks;
#   4. decode a capture shipped inside the wheel with `rdmalab decode`, and run one exercise check
#      that reads a shipped capture;
#   5. grade one instructor notebook with `rdmalab grade` (in its sandbox, as its student).
# Prints the wheel's size.  Usage: scripts/check_wheel.sh [PYTHON]  (default: python3)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
PY=${1:-python3}
tmp=$(mktemp -d -t rdmalab-wheel.XXXXXX)
server=""
cleanup() {
  if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

echo "== build the wheel"
"$PY" -m pip wheel -q --no-deps "$repo" -w "$tmp/dist"
whl=$(ls "$tmp"/dist/rdmalab-*.whl)
echo "wheel: $(basename "$whl"), $(du -k "$whl" | cut -f1) KiB"
"$PY" - "$whl" <<'PYEOF'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
nbs = [n for n in names if n.startswith("rdmalab/lab/_data/notebooks/") and n.endswith(".py")]
caps = [n for n in names if n.startswith("rdmalab/lab/_data/captures/") and n.endswith(".pcap")]
print(f"wheel carries {len(nbs)} notebook sources and {len(caps)} captures")
sys.exit(0 if len(nbs) >= 13 and caps else 1)
PYEOF

echo "== install it into a fresh venv in $tmp"
"$PY" -m venv "$tmp/venv"
"$tmp/venv/bin/python" -m pip install -q --upgrade pip
"$tmp/venv/bin/python" -m pip install -q "$whl[lab]"
cd "$tmp"  # nothing of the checkout is reachable from here
export PATH="$tmp/venv/bin:$PATH"
unset RDMALAB_NOTEBOOKS RDMALAB_CAPTURES PYTHONPATH || true

echo "== rdmalab lab --no-browser"
port=$("$tmp/venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
token=$("$tmp/venv/bin/python" -c 'import secrets; print(secrets.token_hex(16))')
rdmalab lab --no-browser --dir "$tmp/work" --port "$port" --IdentityProvider.token="$token" >"$tmp/lab.log" 2>&1 &
server=$!
"$tmp/venv/bin/python" - "$port" "$token" "$tmp/lab.log" <<'PYEOF'
import json, sys, time, urllib.request
port, token, log = sys.argv[1:]
url = f"http://127.0.0.1:{port}/api/contents?token={token}"
deadline = time.monotonic() + 120
while True:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            listing = json.load(r)
        break
    except OSError as e:
        if time.monotonic() > deadline:
            print(f"the lab server did not answer on port {port} within 120 s ({e}); its log:", file=sys.stderr)
            print(open(log, encoding="utf-8", errors="replace").read()[-3000:], file=sys.stderr)
            sys.exit(1)
        time.sleep(1)
nbs = sorted(x["name"] for x in listing["content"] if x["type"] == "notebook")
print(f"the server lists {len(nbs)} notebooks: {nbs[0]} ... {nbs[-1]}")
with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/contents/{nbs[0]}?token={token}", timeout=10) as r:
    nb = json.load(r)
kind = nb["content"]["metadata"]["rdmalab"]["version"]
print(f"{nbs[0]} opens: {len(nb['content']['cells'])} cells, {kind} version")
sys.exit(0 if len(nbs) >= 13 and kind == "student" else 1)
PYEOF
kill "$server"; wait "$server" 2>/dev/null || true; server=""

echo "== rdmalab decode on a capture shipped in the wheel"
cap=$("$tmp/venv/bin/python" -c 'from rdmalab.lab import capture_path; print(capture_path("rxe_rping.pcap"))')
case "$cap" in "$tmp"/venv/*) ;; *) echo "capture resolved outside the installed wheel: $cap" >&2; exit 1 ;; esac
rdmalab decode -c 5 "$cap"
# the help's "Start with" (a clone's relative path), typed where there is no clone: the error names the wheel's copy
hint=$(cd "$tmp" && rdmalab decode -r captures/synthetic_rocev2.pcap 2>&1 >/dev/null) && { echo "decode of a missing file succeeded" >&2; exit 1; }
case "$hint" in *"rdmalab's own synthetic_rocev2.pcap is $tmp/venv/"*) echo "$hint" ;; *) echo "no hint to the wheel's capture: $hint" >&2; exit 1 ;; esac
"$tmp/venv/bin/python" - <<'PYEOF'
from rdmalab import lab
r = lab.check("welcome.opcode", "nonsense")  # reads a shipped capture; a wrong answer must fail, with a reason
assert r.status == "fail", r
print("an exercise check reads its shipped capture:", r.message[:70], "...")
PYEOF

echo "== rdmalab grade from the wheel: one instructor notebook, in its sandbox, as its student"
rdmalab lab --instructor --prepare-only --dir "$tmp/solutions" >/dev/null
mkdir -p "$tmp/class/ada"
cp "$tmp/solutions/06-atomics.ipynb" "$tmp/class/ada/06-atomics.ipynb"
rdmalab grade "$tmp/class" -o "$tmp/grades" -q
"$tmp/venv/bin/python" - "$tmp/grades/grades.csv" <<'PYEOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1], encoding="utf-8")))
print(f"graded: {[(r['student'], r['passed'] + '/' + r['of'], r['graded in']) for r in rows]}")
ok = len(rows) == 1 and rows[0]["passed"] == rows[0]["of"] and rows[0]["graded in"] in ("bwrap", "unshare")
sys.exit(0 if ok else 1)
PYEOF
echo "== wheel install OK"
