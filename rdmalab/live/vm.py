"""A small virtual machine with Soft-RoCE devices, for machines whose kernel offers none.

``rdmalab.live.vm`` boots the distribution's own kernel on the host's root filesystem with
virtme-ng (``vng``) under qemu: KVM when it works, TCG (software emulation) otherwise, and it
says which.  Inside, ``agent.sh`` (next to this file) loads ``rdma_rxe`` (and ``siw`` on
request), builds the lab topology and then runs jobs that the host drops into the shared
directory::

    init namespace                                     namespace "peer"
    rxe0 - veth0 10.0.0.1/24  ======================  veth1 10.0.0.2/24   (user-space peer)
    rxe1 - veth2 10.0.1.1/24  ====  veth3 10.0.1.2/24 - rxe2              (kernel <-> kernel)
    siw0 - veth4 10.0.2.1/24  ======================  veth5 10.0.2.2/24   (iWARP: user-space peer)
    siw1 - veth6 10.0.3.1/24  ====  veth7 10.0.3.2/24 - siw2              (iWARP: kernel <-> kernel)

The siw devices appear when Soft-iWARP is loaded (``VM(siw=True)`` at boot, or
:meth:`VM.load_siw` in a running VM, which also switches to the MPA-CRC build); the veths are
always there.

Every job is a bash script.  Its stdout, stderr, exit status and (by default) a capture of
veth0 and veth2 come back as a :class:`VMResult`.  One :class:`VM` runs any number of jobs
(boot once, ~25-30 s under TCG); :func:`run_in_vm` boots, runs one job and powers off.

>>> from rdmalab.live.vm import VM
>>> with VM() as vm:                                          # doctest: +SKIP
...     r = vm.run_job("ibv_devices")
...     print(r.rc, r.stdout)

Environment variables a job script sees: ``RDMALAB_JOB`` (its own directory, shared with the
host), ``RDMALAB_PYTHON`` (the host's Python running rdmalab, usable inside the VM),
``PYVERBS_PYTHON`` (``/usr/bin/python3``, the one that imports Debian's pyverbs) and the
topology names below (:data:`TOPOLOGY`).
"""

from __future__ import annotations

import compileall
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rdmalab.capture import read
from rdmalab.fabric.shared import pid_alive
from rdmalab.live.errors import VMError, cache_dir
from rdmalab.live.siw import siw_module

AGENT = Path(__file__).with_name("agent.sh")
__all__ = ["AGENT", "TOPOLOGY", "VM", "Job", "Missing", "VMError", "VMResult", "kvm_usable", "missing", "run_in_vm",
           "siw_load_script"]

#: Names and addresses inside the VM (exported to every job script as shell variables).
TOPOLOGY: dict[str, str] = {
    "RXE0": "rxe0", "RXE0_NETDEV": "veth0", "RXE0_IP": "10.0.0.1",
    "PEER_NS": "peer", "PEER_NETDEV": "veth1", "PEER_IP": "10.0.0.2",
    "KA_DEV": "rxe1", "KA_NETDEV": "veth2", "KA_IP": "10.0.1.1",
    "KB_DEV": "rxe2", "KB_NETDEV": "veth3", "KB_IP": "10.0.1.2",
    # iWARP (the siw devices exist once siw is loaded: VM(siw=True) or VM.load_siw())
    "IW_DEV": "siw0", "IW_NETDEV": "veth4", "IW_IP": "10.0.2.1",
    "IW_PEER_NETDEV": "veth5", "IW_PEER_IP": "10.0.2.2",          # in namespace PEER_NS
    "IWA_DEV": "siw1", "IWA_NETDEV": "veth6", "IWA_IP": "10.0.3.1",
    "IWB_DEV": "siw2", "IWB_NETDEV": "veth7", "IWB_IP": "10.0.3.2",
    "GID_INDEX": "1",   # the IPv4-mapped GID ::ffff:a.b.c.d; index 0 is the fe80:: one
    "PYVERBS_PYTHON": "/usr/bin/python3",
}
DEFAULT_CAPTURE = ("veth0", "veth2")


@dataclass(frozen=True)
class Missing:
    """One thing the host lacks for the VM lab, and the command that installs it."""

    what: str
    install: str

    def __str__(self) -> str:
        return f"{self.what} (install: {self.install})"


@dataclass
class VMResult:
    """What one job in the VM produced."""

    stdout: str
    stderr: str
    rc: int
    pcap_path: Path | None
    kvm: bool
    boot_s: float
    run_s: float = 0.0
    job_dir: Path | None = None
    pcaps: dict[str, Path] = field(default_factory=dict)
    capture_drops: int = 0      # packets tcpdump reported "dropped by kernel" (the capture misses them)

    @property
    def ok(self) -> bool:
        return self.rc == 0

    def check(self) -> VMResult:
        """Raise :class:`VMError` with the job's output when it failed; returns ``self`` otherwise."""
        if self.rc != 0:
            raise VMError(f"job in the VM exited with status {self.rc}{' (timeout)' if self.rc == 124 else ''}\n"
                          f"--- stdout\n{self.stdout[-3000:]}\n--- stderr\n{self.stderr[-3000:]}")
        return self

    def packets(self) -> list[Any]:
        """The captured frames, decoded by :func:`rdmalab.capture.read` (empty without a capture)."""
        if self.pcap_path is None or not self.pcap_path.exists():
            return []

        return list(read(self.pcap_path))


# ----------------------------------------------------------------------------- the host side
def kernels() -> list[str]:
    """Kernel versions with a ``/boot/vmlinuz-*`` image and an ``rdma_rxe`` module, newest first."""
    out = []
    for img in glob.glob("/boot/vmlinuz-*"):
        ver = img[len("/boot/vmlinuz-"):]
        if glob.glob(f"/lib/modules/{ver}/kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko*"):
            out.append(ver)

    def key(v: str) -> list[int]:
        return [int(x) for x in re.findall(r"\d+", v)]

    return sorted(out, key=key, reverse=True)


def default_kernel() -> str | None:
    return os.environ.get("RDMALAB_VM_KERNEL") or next(iter(kernels()), None)


def missing(kernel: str | None = None) -> list[Missing]:
    """What the host lacks to boot the lab VM (empty when it has everything)."""
    out: list[Missing] = []
    if not shutil.which("qemu-system-x86_64"):
        out.append(Missing("qemu (qemu-system-x86_64)", "sudo apt-get install qemu-system-x86"))
    if not shutil.which("vng"):
        out.append(Missing("virtme-ng (the vng command)", "pip install virtme-ng"))
    if not shutil.which("busybox"):
        # virtme-ng builds the guest's initramfs around a static busybox; it only says so on failure
        out.append(Missing("busybox (static, for virtme-ng's initramfs)", "sudo apt-get install busybox-static"))
    if not shutil.which("file"):
        # virtme-ng runs `file -L` on busybox to see that it is static (virtme/commands/run.py
        # is_statically_linked) and dies with FileNotFoundError where the command is missing
        out.append(Missing("file (virtme-ng runs it on busybox)", "sudo apt-get install file"))
    kernel = kernel or default_kernel()
    if kernel is None:
        out.append(Missing("a kernel image /boot/vmlinuz-* with the rdma_rxe module",
                           "sudo apt-get install linux-image-amd64"))
    elif not os.access(f"/boot/vmlinuz-{kernel}", os.R_OK):
        out.append(Missing(f"read permission on /boot/vmlinuz-{kernel} (Debian makes it 0600)",
                           f"sudo chmod 0644 /boot/vmlinuz-{kernel}   # or run as root"))
    for tool, pkg in (("rdma", "iproute2"), ("tcpdump", "tcpdump"), ("ibv_devinfo", "ibverbs-utils"),
                      ("ibv_rc_pingpong", "ibverbs-utils"), ("ib_write_bw", "perftest")):
        if not shutil.which(tool) and not Path(f"/usr/bin/{tool}").exists() and not Path(f"/sbin/{tool}").exists():
            out.append(Missing(f"{tool} (used inside the VM)", f"sudo apt-get install {pkg}"))
    if not glob.glob("/usr/lib/python3/dist-packages/pyverbs/__init__.py"):
        out.append(Missing("pyverbs for /usr/bin/python3 (the lab scenarios use it)",
                           "sudo apt-get install python3-pyverbs"))
    if not glob.glob("/usr/lib/*/libibverbs/librxe-rdmav*.so"):
        out.append(Missing("the rxe user-space provider (librxe)", "sudo apt-get install ibverbs-providers"))
    return out


def require(kernel: str | None = None) -> None:
    """Raise :class:`VMError` listing everything missing, with the commands that install it."""
    gaps = missing(kernel)
    if gaps:
        lines = "\n".join(f"  - {g}" for g in gaps)
        raise VMError(f"cannot boot the rdmalab VM; missing:\n{lines}")


def kvm_usable(kernel: str | None = None, *, probe_timeout: float = 12.0) -> tuple[bool, str]:
    """Whether qemu can run a KVM guest here, and why (``RDMALAB_VM_KVM=0|1`` overrides).

    ``/dev/kvm`` existing is not enough (in some nested setups qemu aborts on an MSR or hangs),
    so the first call boots the kernel under KVM until it panics for want of a root
    filesystem; the answer is cached in ``~/.cache/rdmalab/kvm-probe.json``.
    """
    env = os.environ.get("RDMALAB_VM_KVM")
    if env in ("0", "1"):
        return env == "1", f"RDMALAB_VM_KVM={env}"
    if not os.path.exists("/dev/kvm"):
        return False, "no /dev/kvm"
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False, "no access to /dev/kvm (add yourself to the kvm group)"
    kernel = kernel or default_kernel()
    if kernel is None:
        return False, "no kernel image"
    cache = cache_dir() / "kvm-probe.json"
    key = f"{kernel} {os.uname().release}"
    try:
        known = json.loads(cache.read_text())
    except (OSError, ValueError):
        known = {}
    if key in known:
        return bool(known[key][0]), str(known[key][1])
    with tempfile.TemporaryDirectory() as td:
        log = Path(td) / "serial.log"
        cmd = ["qemu-system-x86_64", "-accel", "kvm", "-cpu", "host", "-m", "256", "-display", "none",
               "-nodefaults", "-no-user-config", "-no-reboot", "-kernel", f"/boot/vmlinuz-{kernel}",
               "-append", "console=ttyS0 panic=-1", "-serial", f"file:{log}"]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=probe_timeout)
            text = log.read_text(errors="replace") if log.exists() else ""
            if "Linux version" in text:
                verdict = (True, "KVM works (probe guest booted)")
            else:
                err = (p.stderr.strip().splitlines() or ["no output"])[-1]
                verdict = (False, f"/dev/kvm present but qemu could not run a KVM guest: {err}")
        except subprocess.TimeoutExpired:
            verdict = (False, f"/dev/kvm present but a KVM guest printed nothing in {probe_timeout:.0f} s")
    known[key] = list(verdict)
    try:
        cache.write_text(json.dumps(known))
    except OSError:
        pass
    return verdict


def compile_for_guest(package: Path | None = None) -> bool:
    """Write the bytecode of rdmalab's modules beside them, on the host, before a boot.  The guest sees
    the host's file system read-only but for its work directory, so Python in it cannot keep what it
    compiles: without this, every rdmalab program the guest starts (an engine, a perftest or rping
    peer) compiles the modules it imports again, in emulated CPU time under TCG (measured natively:
    importing rdmalab.tools.perftest takes 0.7 s of CPU without bytecode, 0.4 s with).  Modules whose
    bytecode is current are skipped (a stat each); a package directory the host cannot write (an
    installed copy: pip wrote its bytecode) leaves this False and the boot goes on.  ``package``: another
    directory of modules (the tests give one)."""
    package = package or Path(__file__).resolve().parent.parent
    if not os.access(package, os.W_OK):
        return False
    try:
        return bool(compileall.compile_dir(package, quiet=1))
    except OSError:
        return False


def _progress_printer() -> Callable[[str], None]:
    def show(msg: str) -> None:
        print(f"rdmalab vm: {msg}", file=sys.stderr, flush=True)
    return show


# ----------------------------------------------------------------------------- the VM
class VM:
    """A running lab VM.  Use as a context manager, or call :meth:`start` and :meth:`close`.

    ``kvm=None`` probes (:func:`kvm_usable`), ``False`` forces TCG.  ``siw=True`` also loads
    Soft-iWARP (built from the kernel sources when the kernel lacks it, see
    :mod:`rdmalab.live.siw`) as ``siw0`` on veth4 (facing namespace ``peer``), ``siw1`` on veth6
    and ``siw2`` on veth7.  ``progress`` is
    ``True`` (lines on stderr), ``False`` or a callable taking one message.
    """

    def __init__(self, *, kernel: str | None = None, kvm: bool | None = None, workdir: str | Path | None = None,
                 memory: str = "1G", cpus: int | None = None, siw: bool = False,
                 progress: bool | Callable[[str], None] = True, boot_timeout: float = 600.0) -> None:
        self.kernel = kernel or default_kernel()
        self.kvm_request = kvm
        self.kvm = False
        self.kvm_reason = ""
        self.memory, self.cpus, self.siw = memory, cpus, siw
        self.boot_timeout = boot_timeout
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="rdmalab-vm-"))
        self.say: Callable[[str], None]
        if progress is True:
            self.say = _progress_printer()
        elif progress is False:
            self.say = lambda _m: None
        else:
            self.say = progress
        self.boot_s = 0.0
        self.devices: dict[str, dict[str, str]] = {}
        self.guest_kernel = ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._console: object = None
        self._jobs = 0
        self._attached_pid: int | None = None   # set by attach(): another process owns the VM

    # -- lifecycle
    def __enter__(self) -> VM:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def running(self) -> bool:
        if self._attached_pid is not None:
            return pid_alive(self._attached_pid) and not (self.workdir / "stop").exists()
        return self._proc is not None and self._proc.poll() is None

    @classmethod
    def attach(cls, workdir: str | Path, *, progress: bool | Callable[[str], None] = True) -> VM:
        """Use a VM that another process booted (its ``workdir``); :meth:`close` leaves it running.

        ``RDMALAB_VM_DIR=WORKDIR`` makes :func:`rdmalab.live.labruns.shared_vm` attach instead of
        booting, so several processes (notebook kernels, a test run) share one boot.  The guest
        runs one job at a time, so their jobs queue.
        """
        w = Path(workdir)
        try:
            pid = int((w / "vm.pid").read_text())
        except (OSError, ValueError):
            raise VMError(f"{w} is not the work directory of a running rdmalab VM (no vm.pid)") from None
        if not (w / "ready").exists() or not pid_alive(pid) or (w / "stop").exists():
            raise VMError(f"the rdmalab VM of {w} is not running (or not ready yet)")
        vm = cls(workdir=w, progress=progress)
        vm._own_workdir = False
        vm._attached_pid = pid
        env = _read(w / "config.env")
        vm.kvm = "export KVM=1" in env
        vm.kvm_reason = "attached to a running VM"
        vm._read_ready()
        vm.say(f"using the running VM in {w} ({'KVM' if vm.kvm else 'TCG'})")
        return vm

    def start(self) -> VM:
        if self.running:
            return self
        require(self.kernel)
        assert self.kernel is not None
        if self.kvm_request is False:
            self.kvm, self.kvm_reason = False, "TCG requested"
        else:
            self.kvm, self.kvm_reason = kvm_usable(self.kernel)
            if self.kvm_request and not self.kvm:
                raise VMError(f"KVM requested but not usable: {self.kvm_reason}")
        siw_ko, siw_modprobe = "", ""
        if self.siw:
            where = siw_module(self.kernel, say=self.say)
            if where == "modprobe":
                siw_modprobe = "1"
            else:
                siw_ko = str(where)
        compile_for_guest()
        w = self.workdir
        w.mkdir(parents=True, exist_ok=True)
        for name in ("ready", "failed", "stop", "progress", "agent.log"):
            (w / name).unlink(missing_ok=True)
        (w / "jobs").mkdir(exist_ok=True)
        agent = w / "agent.sh"
        shutil.copyfile(AGENT, agent)
        env = dict(TOPOLOGY, SIW_KO=siw_ko, SIW_MODPROBE=siw_modprobe, KVM="1" if self.kvm else "0",
                   RDMALAB_PYTHON=sys.executable)
        (w / "config.env").write_text("".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items()))
        cmd = ["vng", "--run", f"/boot/vmlinuz-{self.kernel}", "--user", "root", "--memory", self.memory,
               "--rwdir", str(w), "--exec", f"bash {shlex.quote(str(agent))} {shlex.quote(str(w))}"]
        if not self.kvm:
            cmd.insert(3, "--disable-kvm")
        if self.cpus:
            cmd[3:3] = ["--cpus", str(self.cpus)]
        mode = "KVM" if self.kvm else f"TCG, software emulation ({self.kvm_reason})"
        self.say(f"booting Linux {self.kernel} under {mode}; the guest works in {w}")
        console = open(w / "console.log", "wb")  # noqa: SIM115 - kept open for the VM's lifetime
        self._console = console
        t0 = time.monotonic()
        self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT,
                                      start_new_session=True)
        (w / "vm.pid").write_text(f"{self._proc.pid}\n")
        shown = 0
        last_tick = t0
        while True:
            elapsed = time.monotonic() - t0
            lines = _lines(w / "progress")
            for line in lines[shown:]:
                self.say(f"{elapsed:5.1f} s  {line}")
            shown = len(lines)
            if (w / "ready").exists():
                break
            if (w / "failed").exists():
                msg = (w / "failed").read_text().strip()
                self.close()
                raise VMError(f"VM setup failed: {msg}\n(guest log: {w / 'agent.log'})")
            if self._proc.poll() is not None:
                tail = _tail(w / "console.log")
                raise VMError(f"the VM exited with status {self._proc.returncode} before it was ready "
                              f"(console: {w / 'console.log'}):\n{tail}{_hint(tail)}")
            if elapsed > self.boot_timeout:
                self.close()
                raise VMError(f"the VM was not ready after {self.boot_timeout:.0f} s (console: {w / 'console.log'})")
            if time.monotonic() - last_tick >= 5 and not shown:
                self.say(f"{elapsed:5.1f} s  booting ...")
                last_tick = time.monotonic()
            time.sleep(0.2)
        self.boot_s = time.monotonic() - t0
        self._read_ready()
        self.say(f"{self.boot_s:5.1f} s  VM ready ({'KVM' if self.kvm else 'TCG'}): "
                 + ", ".join(f"{n} {d.get('ip', '')}".strip() for n, d in sorted(self.devices.items())))
        return self

    def _read_ready(self) -> None:
        self.devices = {}
        for line in _lines(self.workdir / "ready"):
            parts = line.split()
            if parts[0] == "DEV" and len(parts) >= 3:
                gids = parts[3:]
                ip = ""
                if len(gids) > 1 and ":ffff:" in gids[1]:
                    h = gids[1].replace(":", "")[-8:]
                    ip = ".".join(str(int(h[i:i + 2], 16)) for i in range(0, 8, 2))
                self.devices[parts[1]] = {"node_type": parts[2], "gid0": gids[0] if gids else "",
                                          "gid1": gids[1] if len(gids) > 1 else "", "ip": ip}
            elif parts[0] == "KERNEL":
                self.guest_kernel = parts[1]

    def close(self, timeout: float = 30.0) -> None:
        """Ask the guest to power off (kill qemu if it does not within ``timeout`` s).  An attached VM stays up."""
        if self._attached_pid is not None:
            return
        if self._proc is not None:
            (self.workdir / "stop").touch()
            try:
                self._proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self._proc.pid, 15)
                try:
                    self._proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(self._proc.pid, 9)
                    self._proc.wait()
            self._proc = None
        if self._console is not None:
            self._console.close()  # type: ignore[attr-defined]
            self._console = None

    # -- jobs
    def run_job(self, script: str, *, files: Mapping[str, str | bytes | Path] | None = None, timeout: float = 120.0,
                capture: bool | str | tuple[str, ...] | list[str] = True, name: str | None = None) -> VMResult:
        """Run ``script`` (bash) as root in the VM as one job; returns its output, status and capture.

        ``files`` are written into the job's directory (the script's working directory) first:
        name -> text, bytes, or a host path to copy.  ``capture`` is ``True`` (veth0 and veth2,
        merged), ``False``, or interface name(s).  ``timeout`` bounds the script (status 124).
        """
        return self.submit(script, files=files, timeout=timeout, capture=capture, name=name).wait()

    def run(self, script: str, **job: Any) -> VMResult:
        """Deprecated name of :meth:`run_job` (docs/live.md named it until issue 37); warns, then runs the job."""
        warnings.warn("VM.run(script) is now VM.run_job(script)", DeprecationWarning, stacklevel=2)
        return self.run_job(script, **job)

    def submit(self, script: str, *, files: Mapping[str, str | bytes | Path] | None = None, timeout: float = 120.0,
               capture: bool | str | tuple[str, ...] | list[str] = True, name: str | None = None) -> Job:
        """Start a job like :meth:`run_job` without waiting for it; :meth:`Job.wait` collects the result.

        The guest agent runs one job at a time, so a later job starts when this one ends.  A
        long-running job (a server the host talks to through files in ``job.dir``) is the use.
        """
        if not self.running:
            raise VMError("the VM is not running (call start() or use `with VM() as vm:`)")
        self._jobs += 1
        prefix = f"{os.getpid()}-" if self._attached_pid is not None else ""   # several processes share jobs/
        jname = f"{prefix}{self._jobs:03d}-{_slug(name or script.split(chr(10))[0])}"
        j = self.workdir / "jobs" / jname
        j.mkdir(parents=True)
        for fname, content in (files or {}).items():
            target = j / fname
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, Path):
                shutil.copyfile(content, target)
            elif isinstance(content, bytes):
                target.write_bytes(content)
            else:
                target.write_text(content)
        header = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in TOPOLOGY.items())
        header += f"export RDMALAB_PYTHON={shlex.quote(sys.executable)}\n"
        (j / "script.sh").write_text(header + script + "\n")
        (j / "timeout").write_text(f"{int(timeout)}\n")
        ifaces: tuple[str, ...] = ()
        if capture is True:
            ifaces = DEFAULT_CAPTURE
        elif isinstance(capture, str):
            ifaces = (capture,)
        elif capture:
            ifaces = tuple(capture)
        if ifaces:
            (j / "capture").write_text(" ".join(ifaces) + "\n")
        job = Job(self, jname, j, ifaces, timeout)
        (j / "go").touch()
        return job

    def load_siw(self, *, crc: bool = False, timeout: float = 120.0) -> str:
        """Load Soft-iWARP in the running VM and attach ``siw0``/``siw1``/``siw2`` (see :data:`TOPOLOGY`).

        Whatever siw was loaded goes first (its devices with it), so this also switches between
        the stock build and ``crc=True``'s ``siw_crc.ko`` (requires MPA CRC32c,
        :func:`rdmalab.live.siw.siw_module`).  Returns siw's load message from the kernel log;
        raises :class:`VMError` with the job's output when a step fails.
        """
        assert self.kernel is not None
        script = siw_load_script(siw_module(self.kernel, crc=crc, say=self.say))
        r = self.run_job(script, capture=False, timeout=timeout, name="siw-crc" if crc else "siw")
        if r.rc != 0:
            raise VMError(f"could not load siw{' (siw_crc.ko)' if crc else ''} in the VM (status {r.rc}):\n"
                          f"{r.stdout[-2000:]}{r.stderr[-2000:]}")
        loaded = next((ln for ln in r.stdout.splitlines() if "SoftiWARP" in ln), "")
        if crc and "mpa_crc_required = true" not in loaded:
            raise VMError(f"siw_crc.ko was loaded but the kernel log does not say so: {loaded!r}")
        return loaded

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"VM({self.kernel}, {'KVM' if self.kvm else 'TCG'}, {state}, {self.workdir})"


class Job:
    """A job submitted to a :class:`VM` (:meth:`VM.submit`): its directory, and its result once done."""

    def __init__(self, vm: VM, name: str, job_dir: Path, ifaces: tuple[str, ...], timeout: float) -> None:
        self.vm, self.name, self.dir, self.ifaces, self.timeout = vm, name, job_dir, ifaces, timeout
        self.t0 = time.monotonic()

    @property
    def started(self) -> bool:
        return (self.dir / "started").exists()

    @property
    def done(self) -> bool:
        return (self.dir / "done").exists()

    def wait(self, timeout: float | None = None) -> VMResult:
        """Wait for the job to end (at most its own timeout + 60 s, or ``timeout``) and collect it."""
        limit = self.timeout + 60 if timeout is None else timeout
        j = self.dir
        while not (j / "done").exists():
            if not self.vm.running:
                raise VMError(f"the VM stopped while running job {self.name}:\n{_tail(self.vm.workdir / 'console.log')}")
            if time.monotonic() - self.t0 > limit:
                raise VMError(f"job {self.name} did not finish within {limit:.0f} s (guest log: "
                              f"{self.vm.workdir / 'agent.log'})")
            time.sleep(0.1)
        rc_text = (j / "rc").read_text().strip() if (j / "rc").exists() else "255"
        pcaps = {i: j / f"{i}.pcap" for i in self.ifaces if (j / f"{i}.pcap").exists()}
        pcap = j / "capture.pcap"
        drops = sum(int(m) for i in self.ifaces
                    for m in re.findall(r"(\d+) packets? dropped by kernel", _read(j / f"{i}.tcpdump.log")))
        return VMResult(stdout=_read(j / "stdout"), stderr=_read(j / "stderr"), rc=int(rc_text or 255),
                        pcap_path=pcap if pcap.exists() else None, kvm=self.vm.kvm, boot_s=self.vm.boot_s,
                        run_s=time.monotonic() - self.t0, job_dir=j, pcaps=pcaps, capture_drops=drops)


def run_in_vm(script: str, *, files: Mapping[str, str | bytes | Path] | None = None, timeout: float = 120.0,
              capture: bool | str | tuple[str, ...] | list[str] = True, **vm_options: object) -> VMResult:
    """Boot a VM, run one job (see :meth:`VM.run_job`), power it off; ``vm_options`` go to :class:`VM`."""
    with VM(**vm_options) as vm:  # type: ignore[arg-type]
        return vm.run_job(script, files=files, timeout=timeout, capture=capture)


def siw_load_script(where: str | Path) -> str:
    """A guest script (initial namespace) that unloads any siw, loads ``where`` (a siw.ko path, or
    ``"modprobe"``) and attaches siw0/siw1/siw2 to their veths (:data:`TOPOLOGY`); it prints siw's
    load line from the kernel log and exits non-zero at the first failure."""
    load = "modprobe siw" if where == "modprobe" else f"insmod {shlex.quote(str(where))}"
    t = TOPOLOGY
    return f"""set -e
for d in /sys/class/infiniband/*; do
  if [ "$(cut -d: -f1 $d/node_type 2>/dev/null)" = 4 ]; then rdma link delete "$(basename $d)"; fi
done
if grep -q '^siw ' /proc/modules; then rmmod siw; fi
modprobe ib_core; modprobe iw_cm; modprobe libcrc32c; modprobe rdma_cm
dmesg -c > /dev/null
{load}
rdma link add {t["IW_DEV"]} type siw netdev {t["IW_NETDEV"]}
rdma link add {t["IWA_DEV"]} type siw netdev {t["IWA_NETDEV"]}
rdma link add {t["IWB_DEV"]} type siw netdev {t["IWB_NETDEV"]}
dmesg | grep SoftiWARP | tail -1
rdma link show | grep siw
"""


# ----------------------------------------------------------------------------- helpers
def _lines(path: Path) -> list[str]:
    try:
        return [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return []


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _tail(path: Path, n: int = 15) -> str:
    return "\n".join(_lines(path)[-n:])


def _hint(console_tail: str) -> str:
    low = console_tail.lower()
    if "no such file or directory: 'file'" in low:
        return "\nhint: virtme-ng needs the file command: sudo apt-get install file"
    if "busybox" in low:
        return "\nhint: virtme-ng needs a static busybox: sudo apt-get install busybox-static"
    if "permission denied" in low and "vmlinuz" in low:
        return "\nhint: the kernel image is not readable: sudo chmod 0644 /boot/vmlinuz-*"
    if "kvm" in low:
        return "\nhint: KVM failed; RDMALAB_VM_KVM=0 forces TCG"
    return ""


def _slug(text: str) -> str:
    s = re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-")[:30]
    return s or "job"
