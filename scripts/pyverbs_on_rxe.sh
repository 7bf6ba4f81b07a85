#!/usr/bin/env bash
# The baseline for the pyverbs parity check (issue 11): run rdma-core's own pyverbs test suite,
# with the real pyverbs, on the Linux kernel's Soft-RoCE (rxe) inside a virtme-ng VM, and store
# every test's outcome in tests/pyverbs/rxe-<kernel>-results.json (OUT= to choose).
# Needs: qemu-system-x86 linux-image-amd64 busybox-static file rdma-core ibverbs-providers
# python3-pyverbs (apt), virtme-ng (pip).  Boots the newest /boot/vmlinuz-6.1.* (KVER= to
# choose) under TCG (no KVM needed): about 30 s to boot, then the suite.
# The device: rxe0 on one end of a veth pair with 10.9.0.1/24 (GID index 1 is the IPv4-mapped
# RoCEv2 GID ::ffff:10.9.0.1, the index the rdmalab run uses as well).
# NETIF=1 (issue 18): also give rxe0 the net interface rdma-core's suite looks for.  The suite
# (tests/base.py, RDMATestCase._get_ip_mac) takes a device's interface from the directory
# /sys/class/infiniband/<dev>/device/net/ and its address from `ip -j addr show <if>`; a PCI
# NIC's device has that directory, but rxe 6.1 registers its ib_device without a parent
# (rxe_register_device sets no dev.parent), so every RDMACMBaseTest skips with "Device rxe0
# doesn't have net interface".  With NETIF=1 the guest mounts, over /sys/class/infiniband, a
# tmpfs copy of that class directory made of symlinks to the real sysfs entries, plus
# rxe0/device/net/veth0 -> /sys/class/net/veth0 (the interface rxe0 is bound to; the kernel's own
# /sys/class/infiniband/rxe0/parent says "veth0").  The suite runs unchanged.
# TRACE=1 (with NETIF=1): afterwards run tests/pyverbs/rdmacm_trace.py, which repeats each
# test_rdmacm test with every pyverbs.cmid call logged from both processes, into TRACE_OUT
# (default tests/pyverbs/rxe-6.1-rdmacm-trace.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
KVER="${KVER:-$(ls /boot/vmlinuz-6.1.* | sort -V | tail -n 1 | sed 's#/boot/vmlinuz-##')}"
NETIF="${NETIF:-0}"
if [ "$NETIF" = 1 ]; then
    OUT="${OUT:-$repo/tests/pyverbs/rxe-6.1-netif-results.json}"
    device_meta="rxe0 on veth0 10.9.0.1/24, net interface veth0 under /sys/class/infiniband/rxe0/device/net (NETIF=1)"
else
    OUT="${OUT:-$repo/tests/pyverbs/rxe-6.1-results.json}"
    device_meta="rxe0 on veth0 10.9.0.1/24"
fi
ONLY="${ONLY:-}"
TRACE="${TRACE:-0}"
TRACE_OUT="${TRACE_OUT:-$repo/tests/pyverbs/rxe-6.1-rdmacm-trace.txt}"
PER_TEST_TIMEOUT="${PER_TEST_TIMEOUT:-300}"
src=/usr/share/doc/rdma-core/tests
[ -d "$src" ] || { echo "pyverbs_on_rxe.sh: $src is missing: apt-get install python3-pyverbs" >&2; exit 1; }
work=$(mktemp -d /tmp/rdmalab-pyverbs-rxe.XXXXXX)
cp -r "$src" "$work/tests"
gunzip -f "$work"/tests/*.gz
cp tests/pyverbs/collect.py tests/pyverbs/rdmacm_trace.py "$work/"
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
if [ "$NETIF" = 1 ]; then
    fake=\$(mktemp -d /tmp/ibclass.XXXXXX)
    mount -t tmpfs ibclass "\$fake"
    for e in /sys/class/infiniband/*; do
        n=\$(basename "\$e"); real=\$(readlink -f "\$e")
        if [ "\$n" = rxe0 ]; then
            mkdir "\$fake/\$n"
            for f in "\$real"/*; do ln -s "\$f" "\$fake/\$n/"; done
            mkdir -p "\$fake/\$n/device/net"
            ln -s /sys/class/net/veth0 "\$fake/\$n/device/net/veth0"
        else
            ln -s "\$real" "\$fake/\$n"
        fi
    done
    mount --bind "\$fake" /sys/class/infiniband
    { echo "# /sys/class/infiniband as the suite sees it (NETIF=1)"; ls -l /sys/class/infiniband/ /sys/class/infiniband/rxe0/ /sys/class/infiniband/rxe0/device/net/; cat /sys/class/infiniband/rxe0/parent; ip -j addr show veth0; } > $work/netif.txt 2>&1
fi
ibv_devices
ibv_devinfo -v -d rxe0 | head -40 > $work/devinfo.txt || true
cd $work
# pyverbs (Debian's python3-pyverbs) imports only under Debian's own interpreter
/usr/bin/python3 $work/collect.py --suite $work/tests --out $work/results.json \
    --timeout $PER_TEST_TIMEOUT --only "$ONLY" \
    --meta '{"engine": "kernel rxe (rdma_rxe)", "rdma_core": "$rdma_core_ver", "device": "$device_meta"}' \
    -- --dev rxe0 --gid 1 > $work/summary.txt 2> $work/progress.txt
if [ "$TRACE" = 1 ]; then
    /usr/bin/python3 $work/rdmacm_trace.py --suite $work/tests --out $work/rdmacm-trace.txt \
        -- --dev rxe0 --gid 1 > $work/trace-summary.txt 2>&1 || true
fi
echo "guest-done"
GUEST
chmod +x "$work/guest.sh"
echo "booting $KVER under TCG; work dir $work (progress: tail -f $work/progress.txt)"
timeout "${VM_TIMEOUT:-5400}" vng --run "/boot/vmlinuz-$KVER" --disable-kvm --user root --memory 2G \
    --rwdir "$work" --exec "$work/guest.sh"
cat "$work/summary.txt"
[ "$NETIF" = 1 ] && cat "$work/netif.txt"
cp "$work/results.json" "$OUT"
if [ "$TRACE" = 1 ]; then
    cat "$work/trace-summary.txt"
    cp "$work/rdmacm-trace.txt" "$TRACE_OUT"
    echo "wrote $TRACE_OUT"
fi
echo "wrote $OUT"
