#!/bin/bash
# Runs INSIDE one of the two virtme-ng guests started by make_captures.sh.
#
#   captures_guest.sh ROLE WORKDIR SIW_KO [SIW_CRC_KO [PHASES]]
#
# (siw phases only; the rxe captures come from `rdmalab capture`, see make_captures.sh)
#
# ROLE    "server" (10.0.0.1, runs tcpdump and the server side of every tool)
#         or "client" (10.0.0.2, runs the client side).
# WORKDIR host directory shared read-write with both guests (--rwdir);
#         pcaps go to WORKDIR/pcap, logs to WORKDIR/log.
# SIW_KO  path of the out-of-tree siw.ko built by make_captures.sh ("" = skip siw).
# SIW_CRC_KO  path of siw_crc.ko, the same siw with mpa_crc_required patched to true
#         ("" = skip siw_crc).
# PHASES  which phases to run, in this order: "rxe siw siw_crc" (the default).
#         Both guests must get the same list (the test counter N must agree).
#
# The two guests are joined by one virtio NIC each, connected back to back through
# a qemu "-netdev socket" (listen/connect), so every packet tcpdump sees on the
# server's NIC really crossed a (virtual) wire between two kernels.
#
# Lock-step between the guests: for test number N the server, once its tool is
# listening and tcpdump is running, opens a one-shot "go" TCP listener on port
# 9000+N; the client polls that port before starting its side.  Ports 9000-9099
# are excluded from the capture filter, so the sync traffic never lands in a pcap.
set -u
ROLE=$1
WORK=$2
SIW_KO=${3:-}
SIW_CRC_KO=${4:-}
PHASES=" ${5:-rxe siw siw_crc} "
has_phase() { case $PHASES in *" $1 "*) return 0 ;; esac; return 1; }
HERE=$(dirname "$(readlink -f "$0")")
PCAP=$WORK/pcap
LOG=$WORK/log
mkdir -p "$PCAP" "$LOG"
SRV_IP=10.0.0.1
CLI_IP=10.0.0.2
if [ "$ROLE" = server ]; then MY_IP=$SRV_IP; else MY_IP=$CLI_IP; fi
TO=120            # hard timeout (s) for every tool run; TCG is slow
N=0               # test counter (must advance identically on both sides)

exec > >(tee "$LOG/guest-$ROLE.log") 2>&1
echo "== $ROLE: kernel $(uname -r), $(date -u +%FT%TZ), phases:$PHASES"

# ---- network: the NIC with the MAC we gave it in make_captures.sh --------------
ip link set lo up
IF=$(ip -o link | awk -F': ' '/52:54:00:00:01:/ {print $2; exit}')
IF=${IF%@*}
echo "== NIC $IF"
ip link set "$IF" up
ip addr add "$MY_IP/24" dev "$IF"
sleep 2   # let IPv6 link-local / DAD settle (rxe builds GIDs from addresses)

# ---- helpers ---------------------------------------------------------------------
# GID index of the IPv4-mapped RoCEv2 GID (::ffff:MY_IP) of rxe0 port 1.
gid_index() {
    local f
    for f in /sys/class/infiniband/rxe0/ports/1/gids/*; do
        if grep -qi "0000:0000:0000:0000:0000:ffff:" "$f" 2>/dev/null; then
            basename "$f"; return
        fi
    done
    echo 1
}

wait_go() {   # client: wait until the server opened the "go" port for test $N
    local port=$((9000 + N)) i
    for i in $(seq 1 600); do
        if timeout 2 bash -c "exec 3<>/dev/tcp/$SRV_IP/$port" 2>/dev/null; then return 0; fi
        sleep 0.5
    done
    echo "!! timeout waiting for go $port"; return 1
}

open_go() {   # server: accept one connection on the "go" port for test $N, then close
    local port=$((9000 + N))
    timeout 300 python3 -c "
import socket; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('0.0.0.0', $port)); s.listen(1); c,_=s.accept(); c.close()" &
}

wait_listen() {  # server: wait until the server tool is ready ("tcp:PORT", "cm" or seconds)
    local what=$1 i
    case $what in
        tcp:*) for i in $(seq 1 120); do
                   ss -ltn "sport = :${what#tcp:}" | grep -q LISTEN && return 0; sleep 0.5
               done ;;
        cm)    for i in $(seq 1 120); do
                   rdma resource show cm_id 2>/dev/null | grep -q LISTEN && return 0; sleep 0.5
               done ;;
        *)     sleep "$what"; return 0 ;;
    esac
    echo "!! server tool not listening ($what)"
}

# t NAME READY 'SERVER COMMAND' 'CLIENT COMMAND'
# Runs one capture.  READY tells how to detect that the server side is ready.
t() {
    local name=$1 ready=$2 scmd=$3 ccmd=$4
    N=$((N + 1))
    if [ "$ROLE" = server ]; then
        echo "== [$N] $name  server: $scmd"
        echo "$name|server|$scmd" >> "$LOG/commands.txt"
        rm -f "$PCAP/$name.pcap"
        tcpdump -i "$IF" -s 0 -U -Z root -w "$PCAP/$name.pcap" \
            "not (tcp portrange 9000-9099)" 2> "$LOG/$name.tcpdump.log" &
        local tdpid=$!
        for i in $(seq 1 40); do grep -q listening "$LOG/$name.tcpdump.log" && break; sleep 0.25; done
        eval "timeout $TO $scmd" > "$LOG/$name.server.log" 2>&1 &
        local spid=$!
        wait_listen "$ready"
        open_go
        wait $spid; echo "   server rc=$?"
        sleep 2                      # let trailing ACKs / DREP / FIN arrive
        kill -INT $tdpid; wait $tdpid
        cat "$LOG/$name.tcpdump.log" | tail -2
    else
        echo "== [$N] $name  client: $ccmd"
        echo "$name|client|$ccmd" >> "$LOG/commands.txt"
        wait_go || return
        sleep 1
        eval "timeout $TO $ccmd" > "$LOG/$name.client.log" 2>&1; echo "   client rc=$?"
    fi
}

# ================================ rxe (RoCEv2) ====================================
# The rxe captures are made by `rdmalab capture` in one lab VM (rdmalab/live/captures.py holds
# their command lines); scripts/make_captures.sh calls it and runs this script for siw only.
if has_phase rxe; then echo "!! phase rxe: use rdmalab capture (make_captures.sh does)"; fi

# ================================ siw (iWARP) =====================================
siw_up() {    # siw_up KO: load one siw build and attach siw0 to the NIC
    modprobe ib_core; modprobe iw_cm; modprobe libcrc32c; modprobe rdma_cm
    insmod "$1" || echo "!! insmod $1 failed"
    rdma link add siw0 type siw netdev "$IF"
    sleep 1
    dmesg | grep SoftiWARP | tail -1
    rdma link show; ibv_devinfo -d siw0 | grep -E 'transport|state|active_mtu'
}
siw_down() {
    rdma link delete siw0
    rmmod siw || echo "!! rmmod siw failed"
}
if has_phase siw && [ -n "$SIW_KO" ] && [ -f "$SIW_KO" ]; then
    siw_up "$SIW_KO"
    t siw_rping     cm "rping -s -a $SRV_IP -v -C 3 -S 64" "rping -c -a $SRV_IP -v -C 3 -S 64"
    t siw_write_bw  cm "ib_write_bw -d siw0 -R -n 5 -s 4096" "ib_write_bw -d siw0 -R -n 5 -s 4096 $SRV_IP"
    t siw_read_bw   cm "ib_read_bw -d siw0 -R -n 5 -s 4096"  "ib_read_bw -d siw0 -R -n 5 -s 4096 $SRV_IP"
    t siw_send_bw   cm "ib_send_bw -d siw0 -R -n 5 -s 4096"  "ib_send_bw -d siw0 -R -n 5 -s 4096 $SRV_IP"
    # longer run used to cut a "mid-stream" capture on the host (editcap -r)
    t siw_write_bw_long cm "ib_write_bw -d siw0 -R -n 10 -s 16384" "ib_write_bw -d siw0 -R -n 10 -s 16384 $SRV_IP"
    siw_down
fi

# ====================== siw with MPA CRC32c (siw_crc.ko) ==========================
# Same tests as above, but with the siw build whose mpa_crc_required is true: the
# client's MPA Request and the server's MPA Reply set the C flag, and every FPDU
# carries a real CRC32c.  4096 B messages are > MSS 1448, so each is cut into
# several FPDUs / segments.
if has_phase siw_crc && [ -n "$SIW_CRC_KO" ] && [ -f "$SIW_CRC_KO" ]; then
    siw_up "$SIW_CRC_KO"
    t siw_crc_rping    cm "rping -s -a $SRV_IP -v -C 3 -S 64" "rping -c -a $SRV_IP -v -C 3 -S 64"
    t siw_crc_write_bw cm "ib_write_bw -d siw0 -R -n 5 -s 4096" "ib_write_bw -d siw0 -R -n 5 -s 4096 $SRV_IP"
    t siw_crc_read_bw  cm "ib_read_bw -d siw0 -R -n 5 -s 4096"  "ib_read_bw -d siw0 -R -n 5 -s 4096 $SRV_IP"
    t siw_crc_send_bw  cm "ib_send_bw -d siw0 -R -n 5 -s 4096"  "ib_send_bw -d siw0 -R -n 5 -s 4096 $SRV_IP"
    siw_down
fi

dmesg > "$LOG/dmesg-$ROLE.txt"
echo "== $ROLE done"
