"""A sandbox for one command: what ``rdmalab grade`` runs each submitted notebook in.

Each run gets its own user, PID, mount, IPC, network, UTS and cgroup namespaces (bubblewrap,
Debian's ``bubblewrap``, the ``bwrap`` program; util-linux's ``unshare`` where bwrap is missing):

* it sees no process but its own, so it can signal or read nothing outside itself;
* it has no network but its own loopback;
* it sees only the system's programs and libraries (``/usr``, ``/etc``), the Python environment and
  rdmalab, all read-only; ``/tmp`` and the home folder are private and empty; its scratch folder
  (``/sandbox`` inside) is the only place it can write that outlives it;
* limits: address space (``Limits.memory``), CPU seconds per process (``Limits.cpu_seconds``), tasks
  (processes and threads, counted in its own user namespace) and file size; where this process may
  make cgroups (root on a machine with a writable cgroup hierarchy) the whole sandbox also gets a
  memory limit, a task limit and an equal share of the CPU;
* when its first process ends, the kernel ends every other one (they live in a PID namespace whose
  init has gone), so nothing a run starts, detached or not, outlives it.  A run that overstays
  ``Limits.wall_seconds`` is killed.

When the grader runs as root, each sandbox also runs as an unprivileged user of its own
(``UID_BASE + slot``): root is exempt from the task limit, and separate users keep one sandbox's
tasks from counting against another's.

Where no sandbox can be made, :func:`probe` raises :class:`NoSandbox` with a sentence that says
why and what to do.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

#: where the scratch folder appears inside the sandbox
INSIDE = "/sandbox"
#: the first user id given to sandboxes when the grader runs as root (one per concurrent slot)
UID_BASE = 61000
_GIB = 1 << 30


class NoSandbox(RuntimeError):
    """No sandbox can be made on this machine; the message says why and what to do."""


@dataclass(frozen=True)
class Limits:
    """What one sandboxed run may use."""

    memory: int = 2 * _GIB  # bytes of address space per process (and of memory for the whole run, with cgroups)
    cpu_seconds: int = 900  # CPU seconds per process: the kernel that runs the notebook is one process
    tasks: int = 256  # processes and threads in the sandbox
    file_size: int = _GIB  # the largest file it may write
    wall_seconds: float = 3600.0  # the whole run, start to end

    def check(self) -> None:
        for name in ("memory", "cpu_seconds", "tasks", "file_size", "wall_seconds"):
            if getattr(self, name) <= 0:
                raise ValueError(f"sandbox limit {name} must be positive, not {getattr(self, name)!r}")
        if self.memory < 256 << 20:
            raise ValueError(f"a sandbox needs at least 256 MiB of memory to start Python and Jupyter; "
                             f"{self.memory >> 20} MiB was given")


DEFAULT_LIMITS = Limits()


@dataclass
class Outcome:
    """How a sandboxed run ended."""

    returncode: int
    seconds: float
    timed_out: bool = False
    stderr: str = ""  # the last few KiB of what the run wrote to stderr (the sandbox's own errors land here)
    left_running: int = 0  # processes of the run found alive after it ended and then killed (should stay 0)


_PROBED: dict[str, str] = {}
_PROBE_LOCK = threading.Lock()


def probe() -> str:
    """``"bwrap"`` or ``"unshare"``: the way sandboxes are made here; :class:`NoSandbox` when there is none."""
    with _PROBE_LOCK:
        if "method" in _PROBED:
            return _PROBED["method"]
        if not sys.platform.startswith("linux"):
            raise NoSandbox(f"grading sandboxes need Linux namespaces, and this is {sys.platform}: grade on a Linux "
                            "machine, or pass --no-sandbox to run the submissions as yourself, unprotected")
        tried = []
        for method in ("bwrap", "unshare"):
            if shutil.which(method) is None:
                tried.append(f"{method} is not installed")
                continue
            # as root, a user of its own for each sandbox first; if that user cannot read the Python environment
            # (installed under a private home, say), root inside the sandbox, with no capability left
            for drop in ((True, False) if os.geteuid() == 0 else (False,)):
                with tempfile.TemporaryDirectory(prefix="rdmalab-probe-") as tmp:
                    try:  # the way a real run goes: its user, its limits, Python and rdmalab importable
                        r = run_confined([sys.executable, "-c", "import rdmalab.lab.sandbox"], Path(tmp),
                                         method=method, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                                         limits=Limits(wall_seconds=120), drop=drop)
                    except OSError as err:
                        tried.append(f"{method} failed to start ({err})")
                        break
                if r.returncode == 0:
                    _PROBED["method"] = method
                    _PROBED["drop"] = "yes" if drop else ""
                    return method
                last = (r.stderr.strip().splitlines() or [f"exit status {r.returncode}"])[-1]
                tried.append(f"{method} failed{' as uid ' + str(UID_BASE) if drop else ''}: {last}")
        userns = Path("/proc/sys/kernel/unprivileged_userns_clone")
        why = ""
        if userns.exists() and userns.read_text().strip() == "0":
            why = " (user namespaces are turned off: sysctl kernel.unprivileged_userns_clone=1 turns them on)"
        raise NoSandbox("no grading sandbox can be made here: " + "; ".join(tried) + why
                        + ". Install bubblewrap (apt install bubblewrap), or pass --no-sandbox to run the "
                          "submissions as yourself, unprotected (the table then says so)")


def _python_paths() -> list[Path]:
    """Folders the sandboxed Python needs to read: its prefixes and every folder on its import path."""
    out = [Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix), Path(sys.executable).parent]
    cwd = Path.cwd()
    # not the working folder that ``python -m`` puts first on the path: the instructor's, not the environment
    out += [Path(p) for p in sys.path if p and Path(p).is_dir() and Path(p).resolve() != cwd]
    # rdmalab itself (an editable install puts the checkout on the path; a wheel is in site-packages)
    out.append(Path(__file__).resolve().parents[2])
    exe = Path(sys.executable).resolve()
    out.append(exe.parent)
    return out


def _system_paths() -> list[Path]:
    return [Path(p) for p in ("/usr", "/etc", "/opt") if Path(p).is_dir()]


def _reachable(p: Path) -> bool:
    """Whether any user may enter every folder above ``p`` (a sandbox's own user owns none of them)."""
    return all(os.stat(q).st_mode & 0o001 for q in p.parents)


def _binds(readable: Iterable[Path], hide: Iterable[Path], *, other_user: bool = False) -> tuple[list[Path], list[Path]]:
    """The folders to bind read-only (outermost first, none inside another) and those to cover with an empty tmpfs.

    ``other_user``: the sandbox runs as a user of its own, who can bind only folders anyone may reach."""
    paths = sorted({p.resolve() for p in [*_system_paths(), *readable]
                    if p.exists() and (not other_user or _reachable(p.resolve()))}, key=lambda p: len(p.parts))
    keep: list[Path] = []
    for p in paths:
        if p == Path("/"):
            continue
        if not any(p == k or k in p.parents for k in keep):
            keep.append(p)
    covers = sorted({h.resolve() for h in hide if any(k == h.resolve() or k in h.resolve().parents for k in keep)},
                    key=lambda p: len(p.parts))
    return keep, covers


def _wrap(method: str, argv: Sequence[str], scratch: Path, *, readable: Iterable[Path], hide: Iterable[Path],
          home: str = "/home/student", other_user: bool = False) -> list[str]:
    keep, covers = _binds(readable, hide, other_user=other_user)
    if method == "bwrap":
        # --cap-drop ALL: run by root, bwrap would otherwise leave the sandbox every capability of its namespace
        cmd = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
               "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/home",
               "--dir", home, "--tmpfs", "/run"]
        for link in ("bin", "lib", "lib64", "sbin", "lib32"):  # merged /usr: the top-level ones are links
            top = Path("/") / link
            if top.is_symlink():
                cmd += ["--symlink", os.readlink(top), str(top)]
            elif top.is_dir():
                cmd += ["--ro-bind", str(top), str(top)]
        for p in keep:  # after the private tmpfs mounts, so that a folder inside /tmp or /home shows through
            cmd += ["--ro-bind", str(p), str(p)]
        for c in covers:
            cmd += ["--tmpfs", str(c)]
        cmd += ["--bind", str(scratch), INSIDE, "--chdir", INSIDE]
        return [*cmd, "--", *argv]
    # unshare: the same namespaces; the mounts are made by a small shell script inside, then chroot
    script = _unshare_script(keep, covers, scratch, home)
    return ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--kill-child", "--mount", "--ipc", "--net",
            "--uts", "--propagation", "private", "sh", "-euc", script, "rdmalab-sandbox", *argv]


def _unshare_script(keep: list[Path], covers: list[Path], scratch: Path, home: str) -> str:
    def q(p: object) -> str:
        return "'" + str(p).replace("'", "'\\''") + "'"

    root = "/tmp/.rdmalab-root-$$"
    lines = [f"R={root}", "mkdir -p \"$R\"", "mount -t tmpfs none \"$R\"",
             "for d in proc dev tmp home run; do mkdir -p \"$R/$d\"; done",
             "mount -t proc proc \"$R/proc\"", "mount --rbind /dev \"$R/dev\"",
             "mount -t tmpfs none \"$R/tmp\"", "mount -t tmpfs none \"$R/home\"", f"mkdir -p \"$R\"{q(home)}"]
    for link in ("bin", "lib", "lib64", "sbin", "lib32"):
        top = Path("/") / link
        if top.is_symlink():
            lines.append(f"ln -s {q(os.readlink(top))} \"$R/{link}\"")
        elif top.is_dir():
            keep = [*keep, top]
    for p in keep:  # read-only; nosuid and nodev may always be added, noexec only where the original has it
        lines += [f"mkdir -p \"$R\"{q(p)}", f"mount --rbind {q(p)} \"$R\"{q(p)}",
                  f"mount -o remount,bind,ro,nosuid,nodev \"$R\"{q(p)} 2>/dev/null"
                  f" || mount -o remount,bind,ro,nosuid,nodev,noexec \"$R\"{q(p)}"]
    for c in covers:
        lines.append(f"mount -t tmpfs none \"$R\"{q(c)}")
    lines += [f"mkdir -p \"$R{INSIDE}\"", f"mount --bind {q(scratch)} \"$R{INSIDE}\""]
    where = INSIDE
    # the mounts are made; now no capability is left (nor can one be gained by exec) to undo them
    lines.append(f"exec chroot \"$R\" setpriv --no-new-privs --inh-caps=-all --bounding-set=-all "
                 f"/bin/sh -c 'cd {where} && exec \"$@\"' rdmalab-sandbox \"$@\"")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- cgroups (when we may make them)


def _cgroup_roots() -> list[tuple[str, Path]]:
    """Writable cgroup folders: ``[("v2", path)]`` or ``[("memory", path), ("pids", path), ("cpu", path)]`` (v1)."""
    if os.geteuid() != 0:
        return []
    mounts: list[tuple[str, Path]] = []
    try:
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            pre, _, post = line.partition(" - ")
            fs, _src, opts = (post.split() + ["", "", ""])[:3]
            mp = Path(pre.split()[4])
            if fs == "cgroup2":
                ctl = mp / "cgroup.controllers"
                have = set(ctl.read_text().split()) if ctl.exists() else set()
                if {"memory", "pids", "cpu"} <= have and os.access(mp, os.W_OK):
                    return [("v2", mp)]
            elif fs == "cgroup":
                for c in ("memory", "pids", "cpu"):
                    if c in opts.split(",") and os.access(mp, os.W_OK):
                        mounts.append((c, mp))
    except OSError:
        return []
    return mounts if {c for c, _ in mounts} >= {"memory", "pids"} else []


class _Cgroups:
    """The cgroups of one run (none where they cannot be made): limits, then everything in them killed."""

    _seq = 0
    _lock = threading.Lock()

    def __init__(self, limits: Limits) -> None:
        with _Cgroups._lock:
            _Cgroups._seq += 1
            name = f"rdmalab-grade-{os.getpid()}-{_Cgroups._seq}"
        self.dirs: list[Path] = []
        for kind, root in _cgroup_roots():
            d = root / name
            try:
                if kind == "v2":
                    try:
                        (root / "cgroup.subtree_control").write_text("+memory +pids +cpu")
                    except OSError:
                        pass
                    d.mkdir()
                    (d / "memory.max").write_text(str(limits.memory + (512 << 20)))
                    (d / "pids.max").write_text(str(limits.tasks + 16))
                elif kind == "memory":
                    d.mkdir()
                    (d / "memory.limit_in_bytes").write_text(str(limits.memory + (512 << 20)))
                elif kind == "pids":
                    d.mkdir()
                    (d / "pids.max").write_text(str(limits.tasks + 16))
                else:
                    d.mkdir()  # cpu: an equal share (the default weight) for each run
                self.dirs.append(d)
            except OSError:
                continue

    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs]

    def kill_all(self) -> int:
        """Kill whatever is still in the run's cgroups; how many processes that was."""
        killed: set[int] = set()
        for _ in range(50):
            pids = set()
            for d in self.dirs:
                try:
                    pids |= {int(x) for x in (d / "cgroup.procs").read_text().split()}
                except OSError:
                    pass
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.add(pid)
                except OSError:
                    pass
            time.sleep(0.05)
        for d in self.dirs:
            try:
                d.rmdir()
            except OSError:
                pass
        return len(killed)


# ----------------------------------------------------------------------------- running


_LAUNCH = """\
import json, os, sys
spec = json.loads(sys.argv[1])
for f in spec["cgroups"]:
    with open(f, "w") as fh:
        fh.write(str(os.getpid()))
if spec["uid"] is not None:
    os.setgroups([])
    os.setgid(spec["uid"])
    os.setuid(spec["uid"])
os.execvp(spec["argv"][0], spec["argv"])
"""

_LIMITS = """\
import os, resource, sys
m, c, t, f = (int(x) for x in sys.argv[1:5])
resource.setrlimit(resource.RLIMIT_AS, (m, m))
resource.setrlimit(resource.RLIMIT_CPU, (c, c + 5))
resource.setrlimit(resource.RLIMIT_NPROC, (t, t))
resource.setrlimit(resource.RLIMIT_FSIZE, (f, f))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
os.execvp(sys.argv[5], sys.argv[5:])
"""


def run_confined(argv: Sequence[str], scratch: Path, *, env: Mapping[str, str], limits: Limits = DEFAULT_LIMITS,
                 method: str | None = None, slot: int = 0, hide: Iterable[Path] = (),
                 readable: Iterable[Path] = (), drop: bool | None = None) -> Outcome:
    """Run ``argv`` in a new sandbox whose only writable folder is ``scratch`` (``/sandbox`` inside).

    ``env`` is the whole environment the run gets (nothing else of ours leaks in); ``hide`` are folders
    that must stay invisible even where they lie inside a folder the sandbox may read (the class's
    submissions, the grades); ``slot`` numbers concurrent runs (their user ids when we are root);
    ``drop`` (root only) runs the sandbox as user ``UID_BASE + slot`` (default: as :func:`probe` found works).
    """
    limits.check()
    method = method or probe()
    inner = [sys.executable, "-c", _LIMITS, str(limits.memory), str(limits.cpu_seconds), str(limits.tasks),
             str(limits.file_size), *argv]
    if drop is None:
        drop = bool(_PROBED.get("drop"))
    uid = UID_BASE + slot if os.geteuid() == 0 and drop else None
    wrapped = _wrap(method, inner, scratch, readable=[*_python_paths(), *readable], hide=hide,
                    other_user=uid is not None)
    if uid is not None:
        for parent in scratch.resolve().parents:  # the sandbox's user must be able to reach its scratch folder
            if not os.stat(parent).st_mode & 0o001:
                raise NoSandbox(f"the scratch folder {scratch} is inside {parent}, which the sandbox's user (uid {uid}) "
                                "may not enter: make scratch folders in a world-traversable place such as /tmp")
        for p in [scratch, *scratch.rglob("*")]:
            os.chown(p, uid, uid)
    cg = _Cgroups(limits)
    launch = [sys.executable, "-c", _LAUNCH, json.dumps({"cgroups": cg.procs_files(), "uid": uid, "argv": wrapped})]
    t0 = time.monotonic()
    timed_out = False
    with subprocess.Popen(launch, env=dict(env), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, start_new_session=True) as proc:
        err_tail = bytearray()

        def drain() -> None:
            assert proc.stderr is not None
            for chunk in iter(lambda: proc.stderr.read(4096), b""):  # type: ignore[union-attr]
                err_tail.extend(chunk)
                del err_tail[:-8192]

        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
        try:
            rc = proc.wait(timeout=limits.wall_seconds)
        except subprocess.TimeoutExpired:
            timed_out = True
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            rc = proc.wait()
        reader.join(timeout=5)
    left = cg.kill_all()
    return Outcome(rc, time.monotonic() - t0, timed_out, err_tail.decode("utf-8", "replace"), left)
