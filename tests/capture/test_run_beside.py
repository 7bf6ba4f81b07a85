"""``blockpool.run_beside``: an iterator made in a forked process beside this one (the TCP analysis of
``decode`` beside its workers), its items in order, its error at its place, its end when not wanted."""

from __future__ import annotations

import os
import signal
import time

import pytest

from rdmalab.capture import blockpool
from rdmalab.capture.blockpool import WorkerLost, run_beside

pytestmark = pytest.mark.skipif(not blockpool._forks(), reason="run_beside forks only where the system can fork")


def _numbers(n: int):
    for i in range(n):
        yield i, os.getpid()


def test_the_items_come_in_order_from_another_process() -> None:
    got = list(run_beside(lambda: _numbers(5000)))
    assert [i for i, _pid in got] == list(range(5000))
    assert {pid for _i, pid in got} != {os.getpid()}  # (made in the child, not here)


def test_the_childs_error_is_raised_here_after_the_items_before_it() -> None:
    def failing():
        yield 1
        yield 2
        raise ValueError("frame 3 is damaged")

    it = run_beside(failing)
    assert next(it) == 1
    assert next(it) == 2
    with pytest.raises(ValueError, match="frame 3 is damaged"):
        next(it)


def test_an_error_that_would_not_unpickle_still_says_its_type_and_message() -> None:
    class Local(Exception):  # (a class the parent cannot find by name: it does not unpickle)
        def __init__(self, a: int, b: int) -> None:
            super().__init__(f"{a} and {b}")

    def failing():
        raise Local(1, 2)
        yield  # pragma: no cover

    with pytest.raises(RuntimeError, match="Local: 1 and 2"):
        list(run_beside(failing))


def test_a_child_that_dies_is_a_worker_lost() -> None:
    def dying():
        yield 1
        os.kill(os.getpid(), signal.SIGKILL)
        yield 2  # pragma: no cover

    it = run_beside(dying)
    assert next(it) == 1
    with pytest.raises(WorkerLost, match="exit code -9"):
        next(it)


def test_the_child_runs_only_a_little_ahead_and_ends_when_not_wanted(tmp_path) -> None:
    mark = tmp_path / "made"

    def many():
        made = tmp_path / "made.new"
        for i in range(10**6):
            made.write_text(str(i))
            os.replace(made, mark)  # (whole: a read never finds the file emptied for the next number)
            yield b"x" * 1000  # (a pipe holds about 64 KiB: the child waits after a few dozen)

    it = run_beside(many)
    assert next(it) == b"x" * 1000
    time.sleep(0.5)
    ahead = int(mark.read_text())
    assert ahead < 1000, f"the child made {ahead} items ahead of the one taken"
    it.close()  # type: ignore[attr-defined]
    time.sleep(0.3)
    stopped = int(mark.read_text())
    time.sleep(0.3)
    assert int(mark.read_text()) == stopped, "the child went on after its items were no longer wanted"
