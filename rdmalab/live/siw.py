"""Soft-iWARP for the lab VM: Debian's kernel does not build ``siw`` (CONFIG_RDMA_SIW is off).

:func:`siw_module` answers ``"modprobe"`` when the kernel has the module, otherwise builds
``drivers/infiniband/sw/siw`` from ``/usr/src/linux-source-6.1.tar.xz`` as an external module
against ``/lib/modules/<version>/build`` (about 10 s) and caches it in
``~/.cache/rdmalab/siw/<version>/siw.ko``.  The guest loads it with ``insmod`` after
``modprobe ib_core iw_cm libcrc32c``.

``siw_module(kernel, crc=True)`` builds a second variant, ``siw_crc.ko``, that negotiates MPA
CRC32c: Linux 6.1 siw has no parameter for it (``drivers/infiniband/sw/siw/siw_main.c``:
``const bool mpa_crc_required;``, a hard-coded false), so the copy of the source is patched to
``= true`` before the same build, and its "SoftiWARP attached" load message is tagged so that
dmesg tells the two apart.  The module name stays ``siw``: load one variant at a time.  This is
how the committed ``captures/siw_crc_*.pcap`` were made (captures/MANIFEST.md).
"""

from __future__ import annotations

import glob
import shutil
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rdmalab.live.errors import VMError, cache_dir

CRC_LINE = "const bool mpa_crc_required;"
CRC_PATCHED = "const bool mpa_crc_required = true;"
ATTACHED = 'pr_info("SoftiWARP attached\\n");'
ATTACHED_TAGGED = 'pr_info("SoftiWARP attached (rdmalab siw_crc: mpa_crc_required = true)\\n");'


def siw_module(kernel: str, *, crc: bool = False, say: Callable[[str], None] = lambda _m: None) -> str | Path:
    """``"modprobe"`` if ``kernel`` ships siw, else the path of a cached (or freshly built) siw.ko.

    ``crc=True``: always a build from the sources, patched to require MPA CRC (``siw_crc.ko``)."""
    if not crc and glob.glob(f"/lib/modules/{kernel}/kernel/drivers/infiniband/sw/siw/siw.ko*"):
        return "modprobe"
    out = cache_dir() / "siw" / kernel / ("siw_crc.ko" if crc else "siw.ko")
    if out.exists():
        return out
    sources = sorted(glob.glob("/usr/src/linux-source-*.tar.xz"))
    if not sources:
        raise VMError("siw: the kernel has no siw module and there are no kernel sources to build one "
                      "(install: sudo apt-get install linux-source-6.1)")
    build = Path(f"/lib/modules/{kernel}/build")
    if not build.exists():
        raise VMError(f"siw: no kernel headers for {kernel} to build siw against "
                      f"(install: sudo apt-get install linux-headers-{kernel})")
    if not shutil.which("make") or not shutil.which("gcc"):
        raise VMError("siw: building the module needs make and gcc (install: sudo apt-get install build-essential)")
    src = out.parent / ("src-crc" if crc else "src")
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    say(f"building {out.name} for {kernel} from {sources[-1]} (once; cached in {out.parent})")
    with tarfile.open(sources[-1]) as tar:
        members = [m for m in tar.getmembers() if "/drivers/infiniband/sw/siw/" in m.name]
        if not members:
            raise VMError(f"siw: {sources[-1]} has no drivers/infiniband/sw/siw")
        # the "data" filter (PEP 706) refuses links and paths that leave src; Debian 12's own
        # python3 (3.11.2) predates it (3.11.4), and there only the chosen members are extracted
        safe: dict[str, Any] = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(src, members=members, **safe)
    mdir = Path(members[0].name).parent
    if crc:
        main = src / mdir / "siw_main.c"
        text = main.read_text()
        lines = text.splitlines()
        if CRC_LINE not in lines or ATTACHED not in text:
            raise VMError(f"siw: {main} has no line '{CRC_LINE}' (or no '{ATTACHED}'); "
                          "the CRC patch is written for Linux 6.1 siw")
        text = "\n".join(CRC_PATCHED if ln == CRC_LINE else ln for ln in lines) + "\n"
        main.write_text(text.replace(ATTACHED, ATTACHED_TAGGED))
    p = subprocess.run(["make", "-C", str(build), f"M={src / mdir}", "CONFIG_RDMA_SIW=m", "modules"],
                       capture_output=True, text=True)
    ko = src / mdir / "siw.ko"
    if p.returncode != 0 or not ko.exists():
        raise VMError(f"siw: building the module failed:\n{p.stderr[-2000:]}")
    shutil.copyfile(ko, out)
    return out
