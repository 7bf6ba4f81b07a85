"""`rdmalab grade` against submissions that attack the class, the grader and the machine (issue 35).

One class, graded in one command with two submissions at a time: two honest students (the instructor's
solutions) and one attacker each of

* the killer: kills every process it can see whose command line says ``rdmalab`` (the grader first);
* the saboteur: leaves a detached (setsid) process that, for half a minute, appends wrong answers to every
  check log it can find (``RDMALAB_CHECK_LOG`` in ``/proc/*/environ``, a glob of the temp folders);
* the tamperer: appends to the installed checkers and drops a ``sitecustomize.py`` into every folder on
  ``sys.path`` and into site-packages;
* the memory hog: allocates ten times its memory limit;
* the fork bomb: forks without end.

Each attacker's row is there, the honest students pass everything, no process of any submission is alive
after the grading, and no installed file changed.  Each attack is also shown to work *without* the
sandbox where that is safe to show (the saboteur and the tamperer, in a throwaway copy), so that the test
would fail if the sandbox were gone.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

from rdmalab.cli import main  # noqa: E402
from rdmalab.lab import grade  # noqa: E402
from rdmalab.lab import sandbox as sbx  # noqa: E402
from rdmalab.lab.generate import convert  # noqa: E402
from rdmalab.lab.runner import wake_for_replies  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
NB = "07-four-wires"
MARK = "rdmalab-attack-7f3c"  # in every attacker's process title, so that survivors can be found

try:
    sbx.probe()
    HAVE_SANDBOX = True
except sbx.NoSandbox:
    HAVE_SANDBOX = False
needs_sandbox = pytest.mark.skipif(not HAVE_SANDBOX and os.environ.get("CI") != "true",
                                   reason="no sandbox can be made here (bubblewrap missing, no user namespaces)")

ATTACKS = {
    "killer": """
import os, signal
me = os.getpid()
for pid in os.listdir('/proc'):
    if pid.isdigit() and int(pid) != me:
        try:
            cmd = open(f'/proc/{pid}/cmdline', 'rb').read()
        except OSError:
            continue
        if b'rdmalab' in cmd or b'pytest' in cmd or b'jupyter' in cmd:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass
""",
    "saboteur": f"""
import subprocess, sys
code = '''
import glob, json, os, time
wrong = json.dumps({{"exercise": "wires.bth", "answer": {{"$bytes": "00"}}}}) + chr(10)
end = time.time() + 30
while time.time() < end:
    logs = set(glob.glob('/tmp/**/checks.jsonl', recursive=True)) | set(glob.glob('/sandbox/checks.jsonl'))
    for pid in os.listdir('/proc'):
        try:
            env = open('/proc/' + pid + '/environ', 'rb').read().split(bytes(1))
        except OSError:
            continue
        logs |= {{e.split(b'=', 1)[1].decode() for e in env if e.startswith(b'RDMALAB_CHECK_LOG=')}}
    for log in logs:
        try:
            with open(log, 'a') as fh:
                fh.write(wrong)
        except OSError:
            pass
    time.sleep(0.2)
'''
subprocess.Popen([sys.executable, '-c', code, '{MARK}'], start_new_session=True,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
""",
    "tamperer": """
import glob, os, site, sys
import rdmalab.lab.checkers as c
hit = []
for f in glob.glob(os.path.join(os.path.dirname(c.__file__), '*.py')):
    try:
        with open(f, 'a') as fh:
            fh.write('\\nraise SystemExit("tampered")\\n')
        hit.append(f)
    except OSError:
        pass
for d in set(sys.path + site.getsitepackages()):
    if d and os.path.isdir(d):
        try:
            with open(os.path.join(d, 'sitecustomize.py'), 'w') as fh:
                fh.write('import os; os.environ["TAMPERED"] = "1"\\n')
            hit.append(d)
        except OSError:
            pass
print('tampered with', hit)
""",
    "hog": """
blocks = []
for _ in range(20 * 1024):
    blocks.append(bytearray(1 << 20))  # 20 GiB, ten times the limit
""",
}
# the fork bomb: each child forks again; the parent of them all is the kernel, whose cell then waits
ATTACKS["forkbomb"] = """
import os, time
for _ in range(100000):
    try:
        if os.fork() == 0:
            try:
                while True:
                    try:
                        os.fork()
                    except OSError:
                        time.sleep(0.01)
            finally:
                os._exit(0)
    except OSError:
        time.sleep(0.01)
"""


def _notebook(version: str) -> dict:
    return convert((ROOT / "notebooks" / f"{NB}.py").read_text(encoding="utf-8"), version)


def _attacked(name: str) -> dict:
    """The instructor's notebook with the attack as its first code cell: the attacker's other answers are right."""
    nb = _notebook("instructor")
    first = next(i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code")
    nb["cells"].insert(first + 1, {"cell_type": "code", "id": "attack", "metadata": {}, "execution_count": None,
                                   "outputs": [], "source": ATTACKS[name].strip()})
    return nb


def _installed_files() -> dict[str, str]:
    """A digest of every file of the installed rdmalab and of the Python environment's site folders."""
    import site

    out = {}
    roots = [ROOT / "rdmalab", *map(Path, site.getsitepackages())]
    for r in roots:
        if not r.is_dir():
            continue
        for p in r.rglob("*.py"):
            if "__pycache__" in p.parts:
                continue
            try:
                out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
            except OSError:
                pass
    for d in {*sys.path, *site.getsitepackages()}:
        if d and Path(d, "sitecustomize.py").exists():
            out[str(Path(d, "sitecustomize.py"))] = "present"
    return out


def _survivors(students: tuple[str, ...] = ()) -> list[str]:
    """Processes still alive of the attacks: the marker in their command line, or (every process of a sandboxed
    run inherits it) one of ``students`` as their RDMALAB_STUDENT."""
    wanted = {f"RDMALAB_STUDENT={s}".encode() for s in students}
    alive = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            env = set(Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")) if wanted else set()
        except OSError:
            continue
        if MARK.encode() in cmd or env & wanted:
            alive.append(f"{pid}: {cmd[:100]!r}")
    return alive


@needs_sandbox
@pytest.mark.slow
def test_no_submission_harms_the_class_the_grader_or_the_machine(tmp_path: Path) -> None:
    root = tmp_path / "class"
    for who in ("honest1", "honest2"):
        (root / who).mkdir(parents=True)
        (root / who / f"{NB}.ipynb").write_text(json.dumps(_notebook("instructor")), encoding="utf-8")
    for name in ATTACKS:
        (root / name).mkdir()
        (root / name / f"{NB}.ipynb").write_text(json.dumps(_attacked(name)), encoding="utf-8")
    before = _installed_files()
    out = tmp_path / "out"
    # in a process of its own, as an instructor runs it: the killer must not be able to kill it
    # --cell-timeout 40: the hog reaches its limit in about 2 s of CPU time (natively), but CI here once saw it
    # interrupted at 20 s before that, with the machine's two cores shared by five busy processes
    r = subprocess.run([sys.executable, "-m", "rdmalab", "grade", str(root), "-o", str(out), "-j", "2", "-q",
                        "--cell-timeout", "40", "--memory", "2G"],
                       capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = {row["student"]: row for row in csv.DictReader((out / "grades.csv").open(encoding="utf-8"))}
    assert set(rows) == {"honest1", "honest2", *ATTACKS}, rows.keys()
    for who in ("honest1", "honest2"):
        assert rows[who]["passed"] == rows[who]["of"] == "5", rows[who]
        assert rows[who]["graded in"] in ("bwrap", "unshare"), rows[who]
    # the killer saw no grader: all it could kill was its own run, which its row says
    assert "without its report" in rows["killer"]["problems"] or rows["killer"]["passed"] == "5", rows["killer"]
    # the saboteur's wrong answers reached nobody else's log (its own run's log is its own business)
    assert rows["saboteur"]["graded in"] in ("bwrap", "unshare")
    # the tamperer changed nothing: its checkers ran unchanged, and so did everyone's
    assert rows["tamperer"]["passed"] == "5", rows["tamperer"]
    after = _installed_files()
    tampered = [p for p in after if after[p] != before.get(p)
                and (after[p] == "present" or 'SystemExit("tampered")' in Path(p).read_text(encoding="utf-8"))]
    assert not tampered, tampered
    # the hog ran out of memory in its own cell, and its row says so: the cell's MemoryError, its kernel's
    # death, or (a kernel left without memory can tear a message it sends: CI saw "Invalid Signature")
    # the runner's finding that the kernel had used its whole limit when its messages broke
    hog = rows["hog"]["problems"]
    assert "MemoryError" in hog or "kernel died" in hog or "whole memory limit" in hog, rows["hog"]
    assert "could not be run" not in hog, rows["hog"]
    # the fork bomb's cell was interrupted, its processes killed after it; the rest of its notebook was graded
    assert rows["forkbomb"]["passed"] == "5", rows["forkbomb"]
    assert "interrupted" in rows["forkbomb"]["problems"] and "killed after their cell" in rows["forkbomb"]["notes"]
    time.sleep(1)
    assert not _survivors(tuple(rows)), _survivors(tuple(rows))
    # the HTML table was written at the end, and says how each row was graded
    assert "graded in" in (out / "grades.html").read_text(encoding="utf-8")


def test_the_saboteur_and_the_tamperer_do_harm_without_a_sandbox(tmp_path: Path) -> None:
    """The attacks above are real: run as plain processes, the saboteur writes into a classmate's check log
    and the tamperer writes a sitecustomize.py into a (throwaway) environment's site folder."""
    victim = tmp_path / "victim" / "checks.jsonl"
    victim.parent.mkdir()
    victim.write_text("")
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    # confined to this test's folder: unconfined, it would write into the logs of whatever else runs here
    code = ATTACKS["saboteur"].replace("/tmp/**/checks.jsonl", f"{tmp_path}/**/checks.jsonl").replace(
        "for pid in os.listdir('/proc'):", "for pid in []:")
    assert "for pid in []:" in code
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and "wires.bth" not in victim.read_text():
        time.sleep(0.2)
    assert "wires.bth" in victim.read_text()
    for line in _survivors():  # stop it now
        os.kill(int(line.split(":")[0]), signal.SIGKILL)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site_dir = next(venv.rglob("site-packages"))
    # confined to the throwaway environment: its path holds only its own site folder (unconfined, as root, this
    # attack overwrites the system's own sitecustomize.py: it did, once, while this test was being written)
    confine = (f"import glob, os, site, sys; sys.path[:] = [{str(site_dir)!r}]; site.getsitepackages = lambda: []\n")
    attack = ATTACKS["tamperer"].replace("import rdmalab.lab.checkers as c", "").replace(
        "glob.glob(os.path.join(os.path.dirname(c.__file__), '*.py'))", "[]")
    r = subprocess.run([str(venv / "bin" / "python"), "-I", "-c", confine + attack], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert list(venv.rglob("site-packages/sitecustomize.py")), r.stdout


WAYS = [(m, d) for m in ("bwrap", "unshare") if shutil.which(m) for d in ((True, False) if os.geteuid() == 0 else (None,))]


@needs_sandbox
@pytest.mark.parametrize(("method", "drop"), WAYS, ids=[f"{m}-{'own-uid' if d else 'same-uid'}" for m, d in WAYS])
def test_a_sandboxed_run_sees_no_other_process_no_network_and_writes_only_its_scratch(
        tmp_path: Path, method: str, drop: bool | None) -> None:
    """Every way a sandbox is made here (bwrap, unshare; as a user of its own or as the grader's user)."""
    if drop and not all(sbx._reachable(p.resolve()) for p in (Path(sys.prefix), ROOT / "rdmalab")):
        pytest.skip("this checkout or its Python lies under a folder other users may not enter, so the grader "
                    "would run its sandboxes as root without capabilities: the same-uid case tests that")
    secret = tmp_path / "class" / "alice" / "07-four-wires.ipynb"
    secret.parent.mkdir(parents=True)
    secret.write_text("{}")
    scratch = Path(tempfile.mkdtemp(prefix="rdmalab-test-"))  # where the grader makes them: any user may enter
    mine = Path("/tmp") / f"rdmalab-sandbox-test-{os.getpid()}"  # the sandbox's /tmp is its own
    probe = f"""
import json, os, socket, sys
out = {{"pids": sorted(int(p) for p in os.listdir('/proc') if p.isdigit())}}
try:
    socket.create_connection(('127.0.0.1', 9), timeout=1)
    out['net'] = 'connected'
except OSError as e:
    out['net'] = type(e).__name__
for path in ({str(ROOT / 'rdmalab' / '__init__.py')!r}, sys.prefix + '/x', {str(mine)!r}, os.path.expanduser('~/x')):
    try:
        open(path, 'a').close()
        out[path] = 'written'
    except OSError as e:
        out[path] = type(e).__name__
out['secret'] = os.path.exists({str(secret)!r})
out['home'] = os.path.expanduser('~')
out['caps'] = open('/proc/self/status').read().split('CapEff:')[1].split()[0]
open('/sandbox/probe.json', 'w').write(json.dumps(out))
"""
    o = sbx.run_confined([sys.executable, "-c", probe], scratch,
                         env={"PATH": os.environ["PATH"], "HOME": "/home/student"},
                         hide=[tmp_path / "class"], method=method, drop=drop)
    assert o.returncode == 0, o
    seen = json.loads((scratch / "probe.json").read_text())
    shutil.rmtree(scratch)
    assert len(seen["pids"]) <= 3, seen["pids"]  # bwrap's init, the limits wrapper exec'd into python
    assert seen["net"] != "connected"
    assert seen[str(ROOT / "rdmalab" / "__init__.py")] != "written"
    assert seen[sys.prefix + "/x"] != "written"
    assert seen[str(mine)] == "written" and not mine.exists()
    assert seen[os.path.expanduser("~/x").replace(os.path.expanduser("~"), "/home/student")] == "written"
    assert seen["secret"] is False
    assert int(seen["caps"], 16) == 0, seen["caps"]  # no capability that could undo a read-only mount


def test_no_sandbox_is_refused_with_a_reason_and_graded_with_no_sandbox_when_asked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "class"
    (root / "alice").mkdir(parents=True)
    nb = _notebook("student")
    (root / "alice" / f"{NB}.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setattr(sbx, "_PROBED", {})
    monkeypatch.setenv("PATH", str(empty))
    assert main(["grade", str(root), "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "no grading sandbox can be made here" in err and "bubblewrap" in err and "--no-sandbox" in err, err
    assert not (tmp_path / "out" / "grades.csv").exists()
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + "/usr/bin:/bin")
    monkeypatch.setattr(sbx, "_PROBED", {})
    assert main(["grade", str(root), "-o", str(tmp_path / "out"), "--no-sandbox", "-q"]) == 0
    rows = list(csv.DictReader((tmp_path / "out" / "grades.csv").open(encoding="utf-8")))
    assert [r["graded in"] for r in rows] == [grade.NO_SANDBOX]
    assert "--no-sandbox" in capsys.readouterr().err


@needs_sandbox
@pytest.mark.slow
def test_rows_are_kept_as_graded_and_resume_finishes_the_class(tmp_path: Path) -> None:
    root = tmp_path / "class"
    names = ["ann", "ben"]
    for who in names:
        (root / who).mkdir(parents=True)
        (root / who / f"{NB}.ipynb").write_text(json.dumps(_notebook("instructor")), encoding="utf-8")
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "rdmalab", "grade", str(root), "-o", str(out), "-j", "1", "-q"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tmp_path)
    csv_path = out / "grades.csv"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # stop the grader as soon as it has one row, as a crash would
        if csv_path.exists() and len(csv_path.read_text(encoding="utf-8").splitlines()) >= 2:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    kept = list(csv.DictReader(csv_path.open(encoding="utf-8")))
    assert len(kept) == 1 and kept[0]["passed"] == "5", kept
    r = subprocess.run([sys.executable, "-m", "rdmalab", "grade", str(root), "-o", str(out), "--resume", "-q"],
                       capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "1 submission(s) already in" in r.stderr and "1 to grade" in r.stderr, r.stderr[-2000:]
    rows = list(csv.DictReader(csv_path.open(encoding="utf-8")))
    assert sorted(x["student"] for x in rows) == names and all(x["passed"] == "5" for x in rows), rows
    assert not _survivors()


@needs_sandbox
@pytest.mark.slow
def test_grade_on_a_local_dask_cluster(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    root = tmp_path / "class"
    (root / "alice").mkdir(parents=True)
    (root / "alice" / f"{NB}.ipynb").write_text(json.dumps(_notebook("instructor")), encoding="utf-8")
    (root / "bob").mkdir()
    (root / "bob" / f"{NB}.ipynb").write_text(json.dumps(_notebook("student")), encoding="utf-8")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=True, dashboard_address=None) as cl:
        graded = grade.grade(root, out=tmp_path / "out", scheduler=cl.scheduler_address)
    rows = {g.submission.student: g for g in graded}
    assert rows["alice"].score == 5 and rows["bob"].score == 0
    assert rows["alice"].how in ("bwrap", "unshare")
    assert (tmp_path / "out" / "grades.jsonl").read_text().count("\n") == 2


def test_sizes_and_limits_are_checked(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / f"{NB}.ipynb").write_text(json.dumps(_notebook("student")), encoding="utf-8")
    with pytest.raises(SystemExit):
        main(["grade", str(tmp_path), "--memory", "lots"])
    assert "'lots' is not a size" in capsys.readouterr().err
    assert main(["grade", str(tmp_path), "--memory", "100M", "--no-sandbox", "-q"]) == 1
    assert "at least 256 MiB" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["grade", str(tmp_path), "-j", "0"])
    assert "must be more than 0" in capsys.readouterr().err


@needs_sandbox
@pytest.mark.slow
def test_a_copy_of_a_classmates_values_fails_where_the_exercise_varies(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The copier: mallory hands in the student notebook of 03 with alice's right answers written in as values
    (taken from alice's own run). Graded as submitted, alice passes both exercises and mallory fails both: each
    is judged against its own student's scenario."""
    nbclient = pytest.importorskip("nbclient")
    nbformat = pytest.importorskip("nbformat")
    from rdmalab.lab.answers import decode

    nb03 = "03-send-receive"
    src = (ROOT / "notebooks" / f"{nb03}.py").read_text(encoding="utf-8")
    log = tmp_path / "alice.jsonl"
    monkeypatch.setenv("RDMALAB_CHECK_LOG", str(log))
    monkeypatch.setenv("RDMALAB_STUDENT", "alice")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    wake_for_replies(nbclient.NotebookClient(nbformat.from_dict(convert(src, "instructor")), timeout=300,
                                             kernel_name="python3",
                                             resources={"metadata": {"path": str(tmp_path)}})).execute()
    alices = {r["exercise"]: decode(r["answer"]) for r in map(json.loads, log.read_text().splitlines())}
    assert set(alices) == {"send.opcodes", "send.rnr"}, alices
    copied = convert(src, "student")
    for cell in copied["cells"]:
        for ex, var in (("send.opcodes", "opcodes"), ("send.rnr", "wait_ms")):
            if cell["cell_type"] == "code" and f'lab.check("{ex}"' in cell["source"]:
                cell["source"] = f"{var} = {alices[ex]!r}\nlab.check({ex!r}, {var})"
    root = tmp_path / "class"
    for who, nb in (("alice", convert(src, "instructor")), ("mallory", copied)):
        (root / who).mkdir(parents=True)
        (root / who / f"{nb03}.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    monkeypatch.delenv("RDMALAB_CHECK_LOG")
    monkeypatch.delenv("RDMALAB_STUDENT")
    graded = {g.submission.student: g for g in grade.grade(root, out=tmp_path / "out")}
    assert graded["alice"].score == 2, graded["alice"].results
    assert [graded["mallory"].status(e) for e in ("send.opcodes", "send.rnr")] == ["fail", "fail"], \
        graded["mallory"].results
