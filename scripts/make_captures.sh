#!/bin/bash
# Rebuild the real Soft-RoCE (rxe) and Soft-iWARP (siw) packet captures in captures/.
#
# Host requirements (Debian 12, no RDMA needed on the host, KVM not needed):
#   apt-get install qemu-system-x86 linux-image-amd64 rdma-core ibverbs-utils \
#       ibverbs-providers rdmacm-utils perftest tcpdump python3-pyverbs tshark \
#       busybox-static file linux-source-6.1 linux-headers-$KVER build-essential flex bison bc
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
# siw_crc.ko: Linux 6.1 siw never negotiates MPA CRC (siw_main.c has
# "const bool mpa_crc_required;", i.e. a hard-coded false, no module parameter), so
# all FPDUs of siw.ko carry CRC 0.  For captures with real CRC32c we build a second
# copy of the same source with that line patched to "= true" (and the "SoftiWARP
# attached" load message tagged, so dmesg shows which variant is loaded) and install
# the result as siw_crc.ko.  Its module name is still "siw"; the guests load either
# siw.ko (phase siw) or siw_crc.ko (phase siw_crc), never both at once.
#
# rxe: the rxe phase is `rdmalab capture all` (rdmalab/live/captures.py): one lab VM
# (rdmalab.live.vm), server on rxe1 (veth2, 10.0.1.1), client on rxe2 (veth3, 10.0.1.2), tcpdump
# on veth2; it writes OUT/rxe_*.pcap and their rows in OUT/MANIFEST.md.
#
# siw topology: two virtme-ng guests (TCG, --disable-kvm), each with one virtio NIC,
# joined back to back by qemu "-netdev socket" (guest "server" listens on
# 127.0.0.1:$SOCK_PORT, guest "client" connects).  server=10.0.0.1, client=10.0.0.2.
# scripts/captures_guest.sh runs in both guests; the server runs tcpdump on its NIC.
#
# Usage: scripts/make_captures.sh [OUTDIR]      (default: <repo>/captures)
# Takes ~10-12 minutes on a 2-core machine without KVM (all phases).  Env: KVER, WORK (scratch dir,
# default /tmp/rdmalab-captures), SOCK_PORT (host port for the qemu socket),
# PHASES (space-separated subset of "rxe siw siw_crc", default all three, run in that
# order; e.g. PHASES=siw_crc boots the guests for the CRC captures only, ~3-4 min),
# SKIP_SIW=1 (= drop siw and siw_crc from PHASES).
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

PHASES=${PHASES:-rxe siw siw_crc}
if [ "${SKIP_SIW:-0}" = 1 ]; then PHASES=$(echo " $PHASES " | sed 's/ siw_crc / /; s/ siw / /'); fi
PHASES=$(echo $PHASES)          # normalise blanks
has_phase() { case " $PHASES " in *" $1 "*) return 0 ;; esac; return 1; }
for p in $PHASES; do
    case $p in rxe|siw|siw_crc) ;; *) echo "unknown phase '$p' (PHASES=rxe siw siw_crc)"; exit 1 ;; esac
done
echo "phases: $PHASES"
[ -n "$PHASES" ] || { echo "nothing to do"; exit 1; }

rm -rf "$WORK/pcap" "$WORK/log"
mkdir -p "$WORK/pcap" "$WORK/log" "$OUT"

# ---- 0. rxe: one lab VM, through rdmalab.live -------------------------------------------
PY=${PYTHON:-$( [ -x "$REPO/.venv/bin/python" ] && echo "$REPO/.venv/bin/python" || echo python3 )}
RXE_FILES=()
if has_phase rxe; then
    KVM_FLAG=""; [ "${RDMALAB_VM_KVM:-}" = 0 ] && KVM_FLAG=--tcg
    RDMALAB_VM_KERNEL=$KVER "$PY" -m rdmalab capture all -o "$OUT" $KVM_FLAG
    for n in $("$PY" -c 'from rdmalab.live.captures import CAPTURES; print(" ".join(CAPTURES))'); do
        RXE_FILES+=("$OUT/$n.pcap")
    done
fi
# the two-guest part below makes only the siw phases
PHASES=$(echo " $PHASES " | sed 's/ rxe / /'); PHASES=$(echo $PHASES)

# ---- 1. build siw.ko (and siw_crc.ko) ---------------------------------------------------
build_siw() {  # build_siw SRCDIR [patch]: extract + build siw from linux-source-6.1 in SRCDIR
    local dir=$1 patch=${2:-} m=$1/linux-source-6.1/drivers/infiniband/sw/siw
    rm -rf "$dir"; mkdir -p "$dir"
    tar -C "$dir" -xJf /usr/src/linux-source-6.1.tar.xz \
        --wildcards 'linux-source-6.1/drivers/infiniband/sw/siw/*'
    if [ "$patch" = crc ]; then
        # the hard-coded constant, default false -> true; fail loudly if the source changed
        grep -qx 'const bool mpa_crc_required;' "$m/siw_main.c" ||
            { echo "siw_main.c: 'const bool mpa_crc_required;' not found"; exit 1; }
        sed -i 's/^const bool mpa_crc_required;$/const bool mpa_crc_required = true;/;
                s/pr_info("SoftiWARP attached\\n");/pr_info("SoftiWARP attached (rdmalab siw_crc: mpa_crc_required = true)\\n");/' \
            "$m/siw_main.c"
        grep -n 'mpa_crc_required = true\|SoftiWARP attached' "$m/siw_main.c"
    fi
    make -C "/lib/modules/$KVER/build" M="$m" CONFIG_RDMA_SIW=m modules
}
SIW_KO=""; SIW_CRC_KO=""
if has_phase siw; then
    # the plain siw.ko: rdmalab.live.siw builds it once and caches it in ~/.cache/rdmalab/siw/
    SIW_KO=$("$PY" -c "import sys; from rdmalab.live.siw import siw_module; print(siw_module(sys.argv[1]))" "$KVER")
    [ -f "$SIW_KO" ] || { echo "siw: $SIW_KO (this kernel ships siw; these captures expect a built one)"; exit 1; }
    modinfo "$SIW_KO" | grep vermagic
fi
if has_phase siw_crc; then
    SIWCRCDIR=$WORK/siw-crc-src-$KVER  # cached between runs
    SIW_CRC_KO=$SIWCRCDIR/siw_crc.ko
    if [ ! -f "$SIW_CRC_KO" ]; then
        build_siw "$SIWCRCDIR" crc
        cp "$SIWCRCDIR/linux-source-6.1/drivers/infiniband/sw/siw/siw.ko" "$SIW_CRC_KO"
    fi
    modinfo "$SIW_CRC_KO" | grep vermagic
fi

# ---- 2. boot the two guests (siw phases only) --------------------------------------------
if [ -n "$PHASES" ]; then
vm() {  # vm ROLE NETDEV-OPTION MAC
    timeout 1800 vng --run "$VMLINUZ" --disable-kvm --user root --name "rdma-$1" \
        --cpus 2 --memory 1G --rwdir "$WORK" \
        --qemu-opts="-netdev socket,id=rnet,$2 -device virtio-net-pci,netdev=rnet,mac=$3" \
        --exec "bash $HERE/captures_guest.sh $1 $WORK '$SIW_KO' '$SIW_CRC_KO' '$PHASES'" \
        < /dev/null > "$WORK/log/vm-$1.console" 2>&1
}
vm server "listen=127.0.0.1:$SOCK_PORT" 52:54:00:00:01:01 &
SPID=$!
sleep 3   # the listening side must exist before the connecting qemu starts
vm client "connect=127.0.0.1:$SOCK_PORT" 52:54:00:00:01:02 &
CPID=$!
wait $CPID || echo "client VM exited with $?"
wait $SPID || echo "server VM exited with $?"
fi

# ---- 3. post-process on the host -------------------------------------------------------
cp "$WORK"/pcap/*.pcap "$OUT"/ 2>/dev/null || true
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
# all phases: the whole output directory; otherwise just the files made by this run
if [ "$PHASES" = "siw siw_crc" ] && [ ${#RXE_FILES[@]} -gt 0 ]; then
    "$HERE/verify_captures.sh" "$OUT" | tee "$WORK/log/verify.txt"
else
    NEW=("${RXE_FILES[@]}")
    for f in "$WORK"/pcap/*.pcap; do
        [ -e "$f" ] || continue
        b=$(basename "$f"); [ "$b" = siw_write_bw_long.pcap ] && b=siw_write_bw_midstream.pcap
        NEW+=("$OUT/$b")
    done
    "$HERE/verify_captures.sh" "${NEW[@]}" | tee "$WORK/log/verify.txt"
fi
