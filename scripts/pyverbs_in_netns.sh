#!/usr/bin/env bash
# Run rdma-core's pyverbs suite on rdmalab with a soft device that has a net interface and an
# address where the suite looks for them (issue 18): the rdma-cm tests run only for a device whose
# /sys/class/infiniband/<dev>/device/net/ lists an interface (tests/base.py, _get_ip_mac), whose
# address `ip -j addr show` gives.  Run as root or not (a user namespace then): new mount and network namespaces hold
#   - veth0 10.9.0.1/24 <-> veth1 10.9.0.2/24 (and lo), soft0 linked to veth0 (RDMALAB_LINKS);
#   - a tmpfs over /sys/class made of symlinks to the real class directories, plus
#     infiniband/soft0/device/net/veth0 (on a machine without ib_core, /sys/class/infiniband does
#     not exist and cannot be created, so the whole of /sys/class is shadowed).
# The suite itself runs unchanged, through scripts/run_pyverbs_suite.py; arguments go to it:
#   bash scripts/pyverbs_in_netns.sh --only test_rdmacm -v --rxe tests/pyverbs/rxe-6.1-netif-results.json
# Needs: unshare (util-linux), ip (iproute2), and root or user namespaces enabled.  See docs/rdmacm-tests.md.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${RDMALAB_IN_NETNS:-}" != 1 ]; then
    # as root, mount and network namespaces are enough (and user namespaces may be disabled);
    # otherwise a user namespace maps this user to root inside
    userns=(--user --map-root-user)
    [ "$(id -u)" = 0 ] && userns=()
    exec env RDMALAB_IN_NETNS=1 unshare "${userns[@]}" --mount --net bash "$0" "$@"
fi
ip link set lo up
ip link add veth0 type veth peer name veth1
ip addr add 10.9.0.1/24 dev veth0
ip addr add 10.9.0.2/24 dev veth1
ip link set veth0 up
ip link set veth1 up
real=$(mktemp -d /tmp/rdmalab-sysclass.XXXXXX)
mount --bind /sys/class "$real"
fake=$(mktemp -d /tmp/rdmalab-fakeclass.XXXXXX)
mount -t tmpfs rdmalab-class "$fake"
for e in "$real"/*; do ln -s "$e" "$fake/$(basename "$e")"; done
rm -f "$fake/infiniband"
mkdir -p "$fake/infiniband/soft0/device/net"
ln -s "$real/net/veth0" "$fake/infiniband/soft0/device/net/veth0"
mount --bind "$fake" /sys/class
export RDMALAB_LINKS=soft0=veth0
python="${PYTHON:-$(pwd)/.venv/bin/python}"
[ -x "$python" ] || python=/work/main/.venv/bin/python
exec "$python" scripts/run_pyverbs_suite.py --dev soft0 --gid 1 "$@"
