#!/usr/bin/env bash
# The baseline for the pyverbs parity check (issue 11): run rdma-core's own pyverbs test suite,
# with the real pyverbs, on the Linux kernel's Soft-RoCE (rxe) inside a virtme-ng VM, and store
# every test's outcome in tests/pyverbs/rxe-<kernel>-results.json (OUT= to choose).
# Needs: qemu-system-x86 linux-image-amd64 busybox-static file rdma-core ibverbs-providers
# python3-pyverbs (apt), virtme-ng (pip).  Boots the newest /boot/vmlinuz-6.1.* (KVER= to
# choose) under TCG (no KVM needed): about 30 s to boot, then the suite.
# The device: rxe0 on one end of a veth pair with 10.9.0.1/24 (GID index 1 is the IPv4-mapped
# RoCEv2 GID ::ffff:10.9.0.1, the index the rdmalab run uses as well).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
KVER="${KVER:-$(ls /boot/vmlinuz-6.1.* | sort -V | tail -n 1 | sed 's#/boot/vmlinuz-##')}"
OUT="${OUT:-$repo/tests/pyverbs/rxe-6.1-results.json}"
ONLY="${ONLY:-}"
PER_TEST_TIMEOUT="${PER_TEST_TIMEOUT:-300}"
src=/usr/share/doc/rdma-core/tests
[ -d "$src" ] || { echo "pyverbs_on_rxe.sh: $src is missing: apt-get install python3-pyverbs" >&2; exit 1; }
work=$(mktemp -d /tmp/rdmalab-pyverbs-rxe.XXXXXX)
cp -r "$src" "$work/tests"
gunzip -f "$work"/tests/*.gz
cp tests/pyverbs/collect.py "$work/collect.py"
rdma_core_ver=$(dpkg-query -W -f '${Version}' python3-pyverbs)
cat > "$work/guest.sh" <<GUEST
#!/bin/bash
set -e
modprobe rdma_rxe
ip link add veth0 type veth peer name veth1
ip addr add 10.9.0.1/24 dev veth0
ip addr add 10.9.0.2/24 dev veth1
ip link set veth0 up
ip link set veth1 up
rdma link add rxe0 type rxe netdev veth0
ibv_devices
ibv_devinfo -v -d rxe0 | head -40 > $work/devinfo.txt || true
cd $work
# pyverbs (Debian's python3-pyverbs) imports only under Debian's own interpreter
/usr/bin/python3 $work/collect.py --suite $work/tests --out $work/results.json \
    --timeout $PER_TEST_TIMEOUT --only "$ONLY" \
    --meta '{"engine": "kernel rxe (rdma_rxe)", "rdma_core": "$rdma_core_ver", "device": "rxe0 on veth0 10.9.0.1/24"}' \
    -- --dev rxe0 --gid 1 > $work/summary.txt 2> $work/progress.txt
echo "guest-done"
GUEST
chmod +x "$work/guest.sh"
echo "booting $KVER under TCG; work dir $work (progress: tail -f $work/progress.txt)"
timeout "${VM_TIMEOUT:-5400}" vng --run "/boot/vmlinuz-$KVER" --disable-kvm --user root --memory 2G \
    --rwdir "$work" --exec "$work/guest.sh"
cat "$work/summary.txt"
cp "$work/results.json" "$OUT"
echo "wrote $OUT"
