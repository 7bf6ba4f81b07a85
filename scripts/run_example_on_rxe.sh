#!/usr/bin/env bash
# Run examples/rdma_write_read.py on the Linux kernel's Soft-RoCE (rxe) through pyverbs, with
# only its imports changed, inside a virtme-ng VM (the host kernel needs no RDMA support).
# Needs: qemu-system-x86 linux-image-amd64 rdma-core ibverbs-providers python3-pyverbs (apt),
# virtme-ng (pip).  The VM boots the newest /boot/vmlinuz-6.1.* (KVER= to choose), under TCG.
# One rxe device on a dummy interface: both nodes of the script use it, and rxe loops the
# packets back internally (rxe_net.c), so this is a real rxe run without a second machine.
set -euo pipefail
cd "$(dirname "$0")/.."
KVER="${KVER:-$(ls /boot/vmlinuz-6.1.* | sort -V | tail -n 1 | sed 's#/boot/vmlinuz-##')}"
work=$(mktemp -d /tmp/rdmalab-rxe-example.XXXXXX)
# The only change: rdmalab.verbs -> pyverbs in the imports (and no simulated fabric).
sed -e '/^import rdmalab\.fabric/d' \
    -e 's/^import rdmalab\.verbs\.enums as e/import pyverbs.enums as e/' \
    -e 's/^from rdmalab\.verbs\./from pyverbs./' examples/rdma_write_read.py > "$work/pyverbs_run.py"
diff examples/rdma_write_read.py "$work/pyverbs_run.py" || true
cat > "$work/guest.sh" <<GUEST
#!/bin/bash
set -e
modprobe rdma_rxe
ip link add dummy0 type dummy
ip addr add 10.9.0.1/24 dev dummy0
ip link set dummy0 up
rdma link add rxe0 type rxe netdev dummy0
ibv_devices
# pyverbs (Debian's python3-pyverbs) imports only under Debian's own interpreter
timeout 120 /usr/bin/python3 $work/pyverbs_run.py
GUEST
chmod +x "$work/guest.sh"
echo "booting $KVER (about 30 s under TCG)..."
timeout 600 vng --run "/boot/vmlinuz-$KVER" --disable-kvm --user root --rwdir "$work" --exec "$work/guest.sh"
