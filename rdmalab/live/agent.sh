#!/bin/bash
# rdmalab VM guest agent.  Runs INSIDE the virtme-ng guest that rdmalab.live.vm boots, as root,
# on the host's root filesystem.  WORK is the host directory shared read-write with the guest.
#
#   agent.sh WORK
#
# 1. Sets up the lab topology (drawn in docs/live.md):
#      init namespace                                   namespace "peer"
#      rxe0 - veth0 10.0.0.1/24  ====================  veth1 10.0.0.2/24   (user-space peer)
#      rxe1 - veth2 10.0.1.1/24  ====  veth3 10.0.1.2/24 - rxe2            (kernel <-> kernel)
#      siw0 - veth4 10.0.2.1/24  ====================  veth5 10.0.2.2/24   (iWARP: user-space peer)
#      siw1 - veth6 10.0.3.1/24  ====  veth7 10.0.3.2/24 - siw2            (iWARP: kernel <-> kernel)
#    (the siw devices only when siw is loaded: VM(siw=True), or a job, rdmalab.live.siw)
#    rxe in Linux 6.1 works only in the initial namespace (its UDP 4791 sockets live there,
#    drivers/infiniband/sw/rxe/rxe_net.c), so a user-space peer sits in its own namespace on
#    veth1.  rxe1 and rxe2 are both in the initial namespace: policy routing sends locally
#    generated packets for the other side's address out of the veth (table 101 for "iif lo",
#    looked up before the local table), and accept_local lets the other side take them in, so
#    their traffic crosses a real (virtual) wire that tcpdump sees.  Two rxe devices on one
#    netdev, or one rxe talking to itself, would loop packets inside rxe (RXE_LOOPBACK_MASK in
#    rxe_net.c) and tcpdump would see nothing.
# 2. Writes WORK/ready (shell variables describing the devices), then
# 3. runs jobs: for every WORK/jobs/NAME/ with a "go" file it runs NAME/script.sh (in NAME/,
#    under `timeout`), optionally with tcpdump on the interfaces listed in NAME/capture,
#    and writes NAME/stdout, NAME/stderr, NAME/rc, NAME/capture.pcap, then NAME/done.
# 4. Exits (and the VM powers off) when WORK/stop appears.
# Progress lines go to WORK/progress; errors to WORK/failed (read by the host).
W=$1
. "$W/config.env"                     # SIW_KO, SIW_MODPROBE, KVM
exec 3>&1 4>&2 >> "$W/agent.log" 2>&1
t0=$(date +%s.%N)
step() { echo "$*" >> "$W/progress"; echo "== $*"; }
fail() { echo "$*" > "$W/failed"; echo "!! $*"; exit 1; }
step "guest up: Linux $(uname -r)"

ip link set lo up
sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0 \
    net.ipv4.conf.all.accept_local=1 net.ipv4.conf.default.accept_local=1
sysctl -qw net.ipv6.conf.all.disable_ipv6=0 2>/dev/null
modprobe rdma_rxe || fail "modprobe rdma_rxe failed (is the kernel's modules package installed? apt-get install linux-image-amd64)"

# -- rxe0 on veth0, its peer veth1 in namespace "peer" --------------------------------------
ip netns add peer || fail "ip netns add peer failed"
ip link add veth0 type veth peer name veth1 || fail "ip link add veth0 failed"
ip link set veth1 netns peer
ip addr add 10.0.0.1/24 dev veth0
ip link set veth0 up
ip -n peer link set lo up
ip -n peer addr add 10.0.0.2/24 dev veth1
ip -n peer link set veth1 up
rdma link add rxe0 type rxe netdev veth0 || fail "rdma link add rxe0 failed"

# -- rxe1 on veth2 <-> rxe2 on veth3, both in the initial namespace ---------------------------
ip link add veth2 type veth peer name veth3 || fail "ip link add veth2 failed"
for d in veth2 veth3; do sysctl -qw net.ipv4.conf.$d.rp_filter=0 net.ipv4.conf.$d.accept_local=1; done
ip addr add 10.0.1.1/24 dev veth2
ip addr add 10.0.1.2/24 dev veth3
ip link set veth2 up
ip link set veth3 up
ip route add 10.0.1.2/32 dev veth2 src 10.0.1.1 table 101
ip route add 10.0.1.1/32 dev veth3 src 10.0.1.2 table 101
ip rule add pref 10 iif lo lookup 101
ip rule add pref 20 lookup local
ip rule del pref 0 lookup local
rdma link add rxe1 type rxe netdev veth2 || fail "rdma link add rxe1 failed"
rdma link add rxe2 type rxe netdev veth3 || fail "rdma link add rxe2 failed"
step "rxe0 on veth0, rxe1 on veth2, rxe2 on veth3"

# -- the iWARP wires (netdevs only; the siw devices come with siw, below) ------------------------
# veth4 10.0.2.1 (init namespace, siw0's) <-> veth5 10.0.2.2 in namespace "peer" (the engine's):
# siw follows only netdevs of the initial namespace (siw_netdev_event, siw_main.c), and rxe0 keeps
# veth0 to itself (two RDMA devices on one netdev would leave rdma_cm to pick either).
# veth6 10.0.3.1 <-> veth7 10.0.3.2, both in the initial namespace, routed like veth2/veth3: a
# kernel siw1 <-> kernel siw2 pair, the stock tools' own baseline.
ip link add veth4 type veth peer name veth5 || fail "ip link add veth4 failed"
ip link set veth5 netns peer
ip addr add 10.0.2.1/24 dev veth4
ip link set veth4 up
ip -n peer addr add 10.0.2.2/24 dev veth5
ip -n peer link set veth5 up
ip link add veth6 type veth peer name veth7 || fail "ip link add veth6 failed"
for d in veth4 veth6 veth7; do sysctl -qw net.ipv4.conf.$d.rp_filter=0 net.ipv4.conf.$d.accept_local=1; done
ip addr add 10.0.3.1/24 dev veth6
ip addr add 10.0.3.2/24 dev veth7
ip link set veth6 up
ip link set veth7 up
ip route add 10.0.3.2/32 dev veth6 src 10.0.3.1 table 101
ip route add 10.0.3.1/32 dev veth7 src 10.0.3.2 table 101

# -- siw (optional): siw0 on veth4 (facing the engine), siw1 on veth6 <-> siw2 on veth7 ----------
if [ -n "${SIW_KO:-}${SIW_MODPROBE:-}" ]; then
    modprobe ib_core; modprobe iw_cm; modprobe libcrc32c; modprobe rdma_cm
    if [ -n "${SIW_MODPROBE:-}" ]; then modprobe siw || fail "modprobe siw failed"
    else insmod "$SIW_KO" || fail "insmod $SIW_KO failed"; fi
    rdma link add siw0 type siw netdev veth4 || fail "rdma link add siw0 failed"
    rdma link add siw1 type siw netdev veth6 || fail "rdma link add siw1 failed"
    rdma link add siw2 type siw netdev veth7 || fail "rdma link add siw2 failed"
    step "siw0 on veth4, siw1 on veth6, siw2 on veth7"
fi

# -- wait for the IPv4-mapped GIDs (index 1) ----------------------------------------------------
for i in $(seq 1 100); do
    ok=1
    for d in rxe0 rxe1 rxe2; do
        grep -qi ':ffff:' /sys/class/infiniband/$d/ports/1/gids/1 2>/dev/null || ok=0
    done
    [ $ok = 1 ] && break
    sleep 0.1
done
[ $ok = 1 ] || fail "the IPv4 GIDs of rxe0/rxe1/rxe2 did not appear"
{
    for d in /sys/class/infiniband/*; do
        n=$(basename "$d")
        echo "DEV $n $(cat "$d/node_type" 2>/dev/null | tr ' ' _) $(cat "$d/ports/1/gids/0" 2>/dev/null) $(cat "$d/ports/1/gids/1" 2>/dev/null)"
    done
    echo "KERNEL $(uname -r)"
    echo "SETUP_S $(echo "$(date +%s.%N) - $t0" | bc)"
} > "$W/ready.tmp"
mv "$W/ready.tmp" "$W/ready"
step "ready"

if [ "${AGENT_MODE:-}" = shell ]; then       # rdmalab vm --shell: the devices are up, hand over
    exec 1>&3 2>&4 3>&- 4>&-
    echo "rdmalab vm: rxe0 on veth0 (10.0.0.1), namespace peer: veth1 (10.0.0.2); rxe1 on veth2 (10.0.1.1) <-> rxe2 on veth3 (10.0.1.2)"
    echo "rdmalab vm: iWARP: veth4 (10.0.2.1) <-> namespace peer: veth5 (10.0.2.2); veth6 (10.0.3.1) <-> veth7 (10.0.3.2); siw0/siw1/siw2 on them with --siw"
    echo "rdmalab vm: GID index 1 is the IPv4 one; try: ibv_devinfo -d rxe1; rdma link; exit to power off"
    cd /root 2>/dev/null || cd /
    exec bash -i
fi

# -- jobs ---------------------------------------------------------------------------------------
run_job() {
    local j=$1 to ifs tds=() i
    to=$(cat "$j/timeout" 2>/dev/null || echo 120)
    ifs=$(cat "$j/capture" 2>/dev/null)
    for i in $ifs; do
        # --immediate-mode: nothing may wait in a ring block when tcpdump is stopped; it makes
        # libpcap use fixed-size ring frames of snaplen bytes, so a 9216-byte snaplen (any MTU
        # here) and a 32 MiB buffer, or a burst fills the ring and the kernel drops packets
        tcpdump -i "$i" -s 9216 -B 32768 -U --immediate-mode -Z root -w "$j/$i.pcap" 2> "$j/$i.tcpdump.log" &
        tds+=($!)
    done
    for i in $ifs; do
        for k in $(seq 1 50); do grep -q listening "$j/$i.tcpdump.log" 2>/dev/null && break; sleep 0.1; done
    done
    ( cd "$j" && export RDMALAB_JOB=$j && exec setsid timeout -k 5 "$to" bash "$j/script.sh" ) \
        > "$j/stdout" 2> "$j/stderr" < /dev/null
    echo $? > "$j/rc"
    if [ ${#tds[@]} -gt 0 ]; then
        sleep 1.5                          # trailing ACKs, and tcpdump catching up (TCG is slow)
        kill -INT "${tds[@]}"; wait "${tds[@]}"
        set -- $ifs
        if [ $# = 1 ]; then mv "$j/$1.pcap" "$j/capture.pcap"
        else mergecap -F pcap -w "$j/capture.pcap" $(for i in $ifs; do echo "$j/$i.pcap"; done) \
                 2>> "$j/stderr" || cp "$j/$1.pcap" "$j/capture.pcap"
        fi
    fi
    # leave the VM as the next job expects it: no qdisc left behind
    for d in veth0 veth2 veth3 veth4 veth6 veth7; do tc qdisc del dev $d root 2>/dev/null; done
    for d in veth1 veth5; do ip netns exec peer tc qdisc del dev $d root 2>/dev/null; done
    touch "$j/done"
}
while [ ! -e "$W/stop" ]; do
    for g in "$W"/jobs/*/go; do
        [ -e "$g" ] || continue
        j=$(dirname "$g")
        [ -e "$j/started" ] && continue
        touch "$j/started"
        echo "== job $(basename "$j")"
        run_job "$j"
    done
    sleep 0.2
done
step "stopping"
