"""``rdmalab vm``: a virtual machine with kernel Soft-RoCE devices, for machines without any.

    rdmalab vm                         boot, show the devices, run an RDMA WRITE and READ on rxe
    rdmalab vm --scenario wrong_rkey   one lab scenario (write_read, wrong_rkey, send_recv, atomics)
    rdmalab vm --exec 'ibv_devinfo'    any command, as root, in the VM; exits with its status
    rdmalab vm --shell                 an interactive shell in the VM, devices set up
    -w FILE                            save the capture (tcpdump on veth0 and veth2) as FILE

Inside: rxe0 on veth0 (10.0.0.1) facing namespace "peer" on veth1 (10.0.0.2); rxe1 on veth2
(10.0.1.1) wired to rxe2 on veth3 (10.0.1.2); with --siw also siw0 on veth4 (10.0.2.1) facing
"peer" on veth5 (10.0.2.2), and siw1 on veth6 (10.0.3.1) wired to siw2 on veth7 (10.0.3.2).
See docs/live.md.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TextIO

from rdmalab.cli import Fail

SCENARIOS = ("write_read", "wrong_rkey", "send_recv", "atomics")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("vm", help="boot a VM with kernel Soft-RoCE (rxe) devices and run RDMA in it",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    what = p.add_mutually_exclusive_group()
    what.add_argument("--shell", action="store_true", help="an interactive shell in the VM")
    what.add_argument("--exec", dest="exec_cmd", metavar="CMD", help="run CMD (bash) in the VM")
    what.add_argument("--scenario", choices=SCENARIOS, help="run one lab scenario on rxe1 -> rxe2")
    what.add_argument("--check", action="store_true",
                      help="list the host's RDMA devices and say whether this machine can boot the VM")
    p.add_argument("-w", dest="write", metavar="FILE", help="write the capture to FILE (pcap)")
    p.add_argument("--size", type=int, default=4096, help="scenario message size in bytes (default 4096)")
    p.add_argument("--loss", type=float, default=0.0, metavar="PCT", help="scenario: netem loss on veth2, in %%")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds allowed for the command (default 300)")
    p.add_argument("--kernel", help="kernel version to boot (default: newest /boot/vmlinuz-* with rdma_rxe)")
    p.add_argument("--tcg", action="store_true", help="never use KVM")
    p.add_argument("--siw", action="store_true",
                   help="also load Soft-iWARP: siw0 on veth4 (facing namespace peer on veth5), siw1 on veth6 <-> siw2 on veth7")
    p.add_argument("--no-capture", action="store_true", help="do not run tcpdump")
    p.set_defaults(func=run_vm)


def run_vm(args: argparse.Namespace, out: TextIO) -> int:
    from rdmalab.live.vm import VM, VMError, kvm_usable, missing  # lazy: keeps `rdmalab --help` fast

    if args.check:
        from rdmalab.live.discover import describe  # lazy: keeps `rdmalab --help` fast

        print(f"host RDMA devices: {describe()}", file=out)
        gaps = missing(args.kernel)
        for g in gaps:
            print(f"missing: {g}", file=out)
        if gaps:
            return 1
        kvm, why = (False, "--tcg") if args.tcg else kvm_usable(args.kernel)
        print(f"rdmalab vm can boot here: {'KVM' if kvm else 'TCG'} ({why})", file=out)
        return 0
    if args.write and (args.shell or args.no_capture):
        raise Fail("-w needs a capture: it does not go with --shell or --no-capture")
    if not 0 <= args.loss < 100:
        raise Fail(f"--loss {args.loss}: give a percentage between 0 and 100")
    if args.shell:
        return _shell(args)
    try:
        with VM(kernel=args.kernel, kvm=False if args.tcg else None, siw=args.siw) as vm:
            if args.exec_cmd is not None:
                res = vm.run_job(args.exec_cmd, timeout=args.timeout, capture=not args.no_capture)
                out.write(res.stdout)
                out.flush()
                sys.stderr.write(res.stderr)
                _save(res.pcap_path, args.write, out)
                return res.rc if res.rc < 256 else 1
            return _scenario(vm, args, out)
    except VMError as err:
        raise Fail(str(err)) from None


def _scenario(vm: object, args: argparse.Namespace, out: TextIO) -> int:
    from rdmalab.live.labruns import run_scenario  # lazy: keeps `rdmalab --help` fast

    name = args.scenario or "write_read"
    if args.scenario is None:
        res = vm.run_job("rdma link show; echo; ibv_devices", capture=False)  # type: ignore[attr-defined]
        out.write(res.stdout)
    print(f"\n== scenario {name}: pyverbs under /usr/bin/python3, rxe1 (10.0.1.1) -> rxe2 (10.0.1.2)", file=out)
    r = run_scenario(name, backend="rxe", vm=vm, size=args.size, loss=args.loss / 100, timeout=args.timeout)  # type: ignore[arg-type]
    print(r.table(), file=out)
    print(f"QP states afterwards: A {r.data['qp_state']['a']}, B {r.data['qp_state']['b']}", file=out)
    pkts = r.packets()
    print(f"\n== {len(pkts)} RoCEv2 packets captured on veth2, decoded by rdmalab.capture:", file=out)
    for p in pkts[:40]:
        print(f"{p.frame_number:4} {p.packet.summary()}", file=out)
    if len(pkts) > 40:
        print(f"     ... {len(pkts) - 40} more", file=out)
    _save(r.pcap_path, args.write, out)
    print(f"\nscenario {name}: {'as expected' if r.ok else 'NOT as expected'}", file=out)
    return 0 if r.ok else 1


def _save(pcap: Path | None, dest: str | None, out: TextIO) -> None:
    if not dest:
        return
    if pcap is None:
        raise Fail("no capture was made")
    shutil.copyfile(pcap, dest)
    print(f"capture written to {dest}", file=out)


def _shell(args: argparse.Namespace) -> int:
    from rdmalab.live.vm import (  # lazy: keeps `rdmalab --help` fast
        AGENT,
        TOPOLOGY,
        default_kernel,
        kvm_usable,
        require,
    )

    kernel = args.kernel or default_kernel()
    try:
        require(kernel)
    except Exception as err:
        raise Fail(str(err)) from None
    kvm, why = (False, "--tcg") if args.tcg else kvm_usable(kernel)
    w = Path(tempfile.mkdtemp(prefix="rdmalab-vm-shell-"))
    shutil.copyfile(AGENT, w / "agent.sh")
    env = dict(TOPOLOGY, SIW_KO="", SIW_MODPROBE="", KVM="1" if kvm else "0", RDMALAB_PYTHON=sys.executable,
               AGENT_MODE="shell")
    (w / "config.env").write_text("".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items()))
    print(f"rdmalab vm: booting Linux {kernel} under {'KVM' if kvm else 'TCG'} ({why}); "
          "the shell starts once rxe0/rxe1/rxe2 are up; `exit` powers off", file=sys.stderr)
    cmd = ["vng", "--run", f"/boot/vmlinuz-{kernel}", "--user", "root", "--rwdir", str(w),
           "--exec", f"bash {w / 'agent.sh'} {w}"]
    if not kvm:
        cmd.insert(3, "--disable-kvm")
    return subprocess.call(cmd, env=dict(os.environ))
