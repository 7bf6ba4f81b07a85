#!/bin/bash
# Rebuild the real Soft-RoCE (rxe) and Soft-iWARP (siw) packet captures in captures/.
#
# Host requirements (Debian 12, no RDMA needed on the host, KVM not needed):
#   apt-get install qemu-system-x86 linux-image-amd64 rdma-core ibverbs-utils \
#       ibverbs-providers rdmacm-utils perftest tcpdump python3-pyverbs tshark \
#       busybox-static linux-source-6.1 linux-headers-$KVER build-essential flex bison bc
#   pip install virtme-ng            # provides "vng"
#
# Kernel: the Debian 6.1 kernel installed by linux-image-amd64.  We take the newest
# /boot/vmlinuz-6.1.* (override with KVER=..., e.g. KVER=6.1.0-56-amd64; the
# captures in the repo were made with 6.1.0-56-amd64 = Debian 6.1.192-2).  Its
# modules (/lib/modules/$KVER: rdma_rxe, ib_core, iw_cm, rdma_cm, ...) are used by
# the guest straight from the host root filesystem (virtme-ng shares "/").
#
# siw: Debian does not build CONFIG_RDMA_SIW, so we build drivers/infiniband/sw/siw
# from /usr/src/linux-source-6.1.tar.xz as an external module against
# /lib/modules/$KVER/build (linux-headers-$KVER).
#
# Topology: two virtme-ng guests (TCG, --disable-kvm), each with one virtio NIC,
# joined back to back by qemu "-netdev socket" (guest "server" listens on
# 127.0.0.1:$SOCK_PORT, guest "client" connects).  server=10.0.0.1, client=10.0.0.2.
# scripts/captures_guest.sh runs in both guests; the server runs tcpdump on its NIC.
#
# Usage: scripts/make_captures.sh [OUTDIR]      (default: <repo>/captures)
# Takes ~8-10 minutes on a 2-core machine without KVM.  Env: KVER, WORK (scratch dir,
# default /tmp/rdmalab-captures), SOCK_PORT (host port for the qemu socket), SKIP_SIW=1.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
OUT=${1:-$REPO/captures}
WORK=${WORK:-/tmp/rdmalab-captures}
SOCK_PORT=${SOCK_PORT:-47910}
KVER=${KVER:-$(ls /boot/vmlinuz-6.1.* | sort -V | tail -1 | sed 's|/boot/vmlinuz-||')}
VMLINUZ=/boot/vmlinuz-$KVER
echo "kernel: $KVER ($VMLINUZ)"
[ -r "$VMLINUZ" ] || { echo "no $VMLINUZ"; exit 1; }
command -v vng >/dev/null || { echo "vng missing: pip install virtme-ng"; exit 1; }

rm -rf "$WORK/pcap" "$WORK/log"
mkdir -p "$WORK/pcap" "$WORK/log" "$OUT"

# ---- 1. build siw.ko ----------------------------------------------------------------
SIWDIR=$WORK/siw-src-$KVER     # cached between runs
SIW_KO=$SIWDIR/linux-source-6.1/drivers/infiniband/sw/siw/siw.ko
if [ "${SKIP_SIW:-0}" = 1 ]; then
    SIW_KO=""
elif [ ! -f "$SIW_KO" ]; then
    mkdir -p "$SIWDIR"
    tar -C "$SIWDIR" -xJf /usr/src/linux-source-6.1.tar.xz \
        --wildcards 'linux-source-6.1/drivers/infiniband/sw/siw/*'
    make -C "/lib/modules/$KVER/build" M="$(dirname "$SIW_KO")" CONFIG_RDMA_SIW=m modules
fi
[ -z "$SIW_KO" ] || modinfo "$SIW_KO" | grep vermagic

# ---- 2. boot the two guests ----------------------------------------------------------
vm() {  # vm ROLE NETDEV-OPTION MAC
    timeout 1800 vng --run "$VMLINUZ" --disable-kvm --user root --name "rdma-$1" \
        --cpus 2 --memory 1G --rwdir "$WORK" \
        --qemu-opts="-netdev socket,id=rnet,$2 -device virtio-net-pci,netdev=rnet,mac=$3" \
        --exec "bash $HERE/captures_guest.sh $1 $WORK '$SIW_KO'" \
        < /dev/null > "$WORK/log/vm-$1.console" 2>&1
}
vm server "listen=127.0.0.1:$SOCK_PORT" 52:54:00:00:01:01 &
SPID=$!
sleep 3   # the listening side must exist before the connecting qemu starts
vm client "connect=127.0.0.1:$SOCK_PORT" 52:54:00:00:01:02 &
CPID=$!
wait $CPID || echo "client VM exited with $?"
wait $SPID || echo "server VM exited with $?"

# ---- 3. post-process on the host -------------------------------------------------------
cp "$WORK"/pcap/*.pcap "$OUT"/
# "Mid-stream" siw capture: made by CUTTING a full capture (editcap -r), not by
# starting tcpdump late.  We keep everything from the 6th RDMA Write FPDU of the
# long ib_write_bw run onwards, so the TCP handshake, the MPA request/reply and the
# perftest key exchange are missing and the capture starts inside the FPDU stream.
if [ -f "$OUT/siw_write_bw_long.pcap" ]; then
    first=$(tshark -r "$OUT/siw_write_bw_long.pcap" -Y 'iwarp_rdma.opcode == 0' \
                -T fields -e frame.number 2>/dev/null | sed -n 6p)
    editcap -r "$OUT/siw_write_bw_long.pcap" "$OUT/siw_write_bw_midstream.pcap" "$first-999999"
    echo "siw_write_bw_midstream.pcap = siw_write_bw_long.pcap frames $first..end" \
        > "$WORK/log/midstream.txt"
    rm "$OUT/siw_write_bw_long.pcap"
fi

# ---- 4. verify with tshark ---------------------------------------------------------------
"$HERE/verify_captures.sh" "$OUT" | tee "$WORK/log/verify.txt"
