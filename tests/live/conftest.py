"""Live tests: real kernel rxe devices in the lab VM (rdmalab.live.vm), one boot per session.

They are marked ``live`` and run when asked for (``pytest -m live`` or ``RDMALAB_LIVE=1``;
scripts/test.sh does both in CI), because one VM boot costs 30-60 s under TCG.  Where the
machine cannot boot the VM (no qemu, no kernel image, ...) they skip and say what is missing.
The ``lab_vm`` fixture is shared with tests/live/test_interop*.py.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from rdmalab.live.vm import VM, missing

_MATRIX = "tests/live/test_interop.py::"


def _requested(config: pytest.Config) -> bool:
    return os.environ.get("RDMALAB_LIVE") == "1" or "live" in (config.getoption("markexpr") or "")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that use the VM (the ``lab_vm`` fixture, or marked ``live``) are live tests."""
    skip = pytest.mark.skip(reason="live test: boots a VM (30-60 s); run with `pytest -m live` or RDMALAB_LIVE=1")
    for item in items:
        if "lab_vm" in getattr(item, "fixturenames", ()) or item.get_closest_marker("live"):
            item.add_marker(pytest.mark.live)
            if not _requested(config):
                item.add_marker(skip)
    if items and all(item.nodeid.startswith("tests/live/") for item in items):
        # tests/live alone (scripts/test.sh runs it beside the other tests): the interop matrix first,
        # in its own VM before the session VM boots, so that one TCG VM runs at a time
        items.sort(key=lambda item: not item.nodeid.startswith(_MATRIX))


def pytest_collection_finish(session: pytest.Session) -> None:
    """When the session will run the interop matrix (tests/live/test_interop.py) and tests outside
    tests/live as well, start the matrix now, in the background, in its own VM: it takes 15 minutes
    under TCG, mostly in the guest, while the other tests run on the other core.  A session of
    tests/live alone (scripts/test.sh runs it beside the others) runs the matrix in its turn: in the
    background it would be a second VM beside the session's, and two TCG VMs take both cores."""
    if session.config.option.collectonly:
        return
    if all(item.nodeid.startswith("tests/live/") for item in session.items):
        return  # it runs first, in its turn (pytest_collection_modifyitems)
    for item in session.items:
        if item.nodeid.startswith(_MATRIX) and _requested(session.config) \
                and not item.get_closest_marker("skip"):
            item.module.start_in_background(session.config)  # type: ignore[attr-defined]
            return


def pytest_sessionfinish(session: pytest.Session) -> None:
    for item in session.items:
        if item.nodeid.startswith(_MATRIX):
            item.module.stop_background()  # type: ignore[attr-defined]
            return


@pytest.fixture(scope="session")
def lab_vm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VM]:
    """The lab VM (rxe0 on veth0 + namespace "peer" on veth1; rxe1 on veth2 <-> rxe2 on veth3)."""
    gaps = missing()
    if gaps:
        pytest.skip("cannot boot the lab VM here: " + "; ".join(str(g) for g in gaps))
    if os.environ.get("RDMALAB_VM_DIR"):  # a VM booted by another process (VM.attach): it stays up
        yield VM.attach(os.environ["RDMALAB_VM_DIR"], progress=print)
        return
    vm = VM(workdir=tmp_path_factory.mktemp("labvm"), progress=print)
    vm.start()
    try:
        yield vm
    finally:
        vm.close()
