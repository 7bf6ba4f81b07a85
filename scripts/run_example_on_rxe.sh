#!/usr/bin/env bash
# Run examples/rdma_write_read.py on the Linux kernel's Soft-RoCE (rxe) through pyverbs, with
# only its imports changed, inside the lab VM (rdmalab.live.vm; the host kernel needs no RDMA).
# Needs what `rdmalab vm --check` asks for (qemu-system-x86 linux-image-amd64 busybox-static file
# rdma-core ibverbs-providers python3-pyverbs tcpdump; pip virtme-ng).
# The example takes the first and the last device of get_device_list(); the job removes rxe0,
# so those are rxe1 and rxe2, wired to each other by a veth pair: the packets cross the veth and
# the capture (-w, default /tmp/rdmalab-rxe-example.pcap) holds them.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
PCAP=${1:-/tmp/rdmalab-rxe-example.pcap}
work=$(mktemp -d /tmp/rdmalab-rxe-example.XXXXXX)
# The only change: rdmalab.verbs -> pyverbs in the imports (and the soft-only "import rdmalab.fabric" goes).
sed -e 's/^import rdmalab\.verbs\.enums as e/import pyverbs.enums as e/' \
    -e 's/^from rdmalab\.verbs\./from pyverbs./' -e '/^import rdmalab\.fabric\b/d' examples/rdma_write_read.py > "$work/pyverbs_run.py"
diff examples/rdma_write_read.py "$work/pyverbs_run.py" || true
# pyverbs (Debian's python3-pyverbs) imports only under Debian's own interpreter: $PYVERBS_PYTHON
exec "$PY" -m rdmalab vm -w "$PCAP" --exec "rdma link delete rxe0 && ibv_devices && \$PYVERBS_PYTHON $work/pyverbs_run.py"
