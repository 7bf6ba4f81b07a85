"""The lab VM's devices and topology, and stock rdma-core programs as a smoke test of it."""

from __future__ import annotations

import re

from rdmalab.live.discover import gid_to_ipv4
from rdmalab.live.vm import VM


def test_topology_has_three_rxe_devices_with_ipv4_gids(lab_vm: VM) -> None:
    assert isinstance(lab_vm.kvm, bool)
    assert lab_vm.boot_s > 0
    for dev, ip in (("rxe0", "10.0.0.1"), ("rxe1", "10.0.1.1"), ("rxe2", "10.0.1.2")):
        assert gid_to_ipv4(lab_vm.devices[dev]["gid1"]) == ip, lab_vm.devices
        assert lab_vm.devices[dev]["gid0"].startswith("fe80")


def test_peer_namespace_reaches_rxe0(lab_vm: VM) -> None:
    # a TCP connection from the namespace to rxe0's address: the listener prints who connected
    script = """
$PYVERBS_PYTHON -c "
import socket; s = socket.socket(); s.bind(('$RXE0_IP', 7000)); s.listen(1); s.settimeout(30)
c, a = s.accept(); print('peer', a[0])" &
for i in $(seq 1 100); do ss -ltn 'sport = :7000' | grep -q LISTEN && break; sleep 0.1; done
ip netns exec $PEER_NS bash -c 'exec 3<>/dev/tcp/$RXE0_IP/7000'
wait %1
rdma link show
"""
    r = lab_vm.run_job(script, capture=False)
    assert r.rc == 0, r.stderr
    assert "peer 10.0.0.2" in r.stdout
    assert re.search(r"link rxe0/1 state ACTIVE .*netdev veth0", r.stdout), r.stdout


def test_ibv_rc_pingpong_between_rxe1_and_rxe2(lab_vm: VM) -> None:
    script = """
ibv_rc_pingpong -d $KA_DEV -g $GID_INDEX -n 5 -s 4096 --chk > server.log 2>&1 &
for i in $(seq 1 100); do ss -ltn 'sport = :18515' | grep -q LISTEN && break; sleep 0.1; done
ibv_rc_pingpong -d $KB_DEV -g $GID_INDEX -n 5 -s 4096 --chk $KA_IP
rc=$?
wait %1; src=$?
cat server.log
exit $((rc + src))
"""
    r = lab_vm.run_job(script, capture="veth2", timeout=120)
    assert r.rc == 0, r.stdout + r.stderr
    assert r.stdout.count("5 iters in") == 2
    roce = [p for p in r.packets() if p.packet.bth is not None]
    names = {p.packet.opcode_name for p in roce}
    # 4096-byte SENDs at RoCE MTU 1024 (veth MTU 1500): FIRST, MIDDLE, LAST, and their ACKs
    assert {"RC SEND First", "RC SEND Middle", "RC SEND Last", "RC Acknowledge"} <= names, names
    # ibv_rc_pingpong -n 5: each side sends 5 messages (rc_pingpong.c loops until both its send and
    # receive counts reach iters); 4096 bytes at MTU 1024 are 4 packets each
    sends = [p for p in roce if p.packet.opcode_name.startswith("RC SEND")]
    logs = [t.read_text() for t in r.job_dir.glob("*.tcpdump.log")] if r.job_dir else []
    assert len(sends) == 2 * 5 * 4, (len(sends), logs)
