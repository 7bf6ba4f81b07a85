"""Notebook 15 (Building on RDMA): the checkers' verdicts and feedback.

* kv.get judges what the learner's GET did (its recorded run): a GET that skips the CRC check returns the
  torn value and is told so; one that stops at the home bucket, or reads past the empty bucket, is told what
  the probe sequence is; a GET reading several buckets per READ is right too;
* kv.crossover and kv.torn are the student's own (a classmate's right answer fails), and a near miss is
  explained from the measured times;
* kv.why: the mechanism.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Any

import pytest

from rdmalab import lab
from rdmalab.lab import FAIL, PASS
from rdmalab.lab.checkers.kv import NIC, measure, torn_run
from rdmalab.lab.variant import as_student

STUDENTS = ("alice", "bob", "")  # "" is the book's variant


@pytest.fixture(params=STUDENTS, ids=[s or "book" for s in STUDENTS])
def student(request: pytest.FixtureRequest) -> Iterator[str]:
    with as_student(request.param):
        yield request.param


def _get(verify: bool = True, probe: bool = True, stop_at_empty: bool = True, window: int = 1) -> Any:
    def get_by_reads(pair: Any, table: Any, key: bytes) -> bytes | None:
        lay = table.layout
        order = lay.probe(key) if probe else [lay.home(key)]
        pos = 0
        while pos < len(order):
            first = order[pos]
            count = min(window, lay.buckets - first, len(order) - pos)
            raws = table.read(first, count)
            for i, raw in enumerate(raws):
                if verify and zlib.crc32(raw[:-4]) != int.from_bytes(raw[-4:], "little"):
                    break  # read again from this bucket
                b = lay.decode(raw, first + i)
                pos += 1
                if b.version == 0 and stop_at_empty:
                    return None
                if b.version and b.key == key:
                    return bytes(b.value.rstrip(b"\0"))
        return None

    return get_by_reads


@pytest.mark.parametrize("window", [1, 4])
def test_a_right_get_passes(window: int) -> None:
    r = lab.check("kv.get", _get(window=window))
    assert r.status == PASS, repr(r)
    assert ("11 READs" in r.message) == (window == 1), r.message


def test_a_get_without_the_crc_check_returns_the_torn_value_and_is_told() -> None:
    r = lab.check("kv.get", _get(verify=False))
    assert r.status == FAIL and r.field == "CRC32" and "torn value" in r.message, repr(r)
    assert "read the bucket again" in r.message


def test_a_get_that_stops_at_the_home_bucket_is_sent_along_the_probe_sequence() -> None:
    r = lab.check("kv.get", _get(probe=False))
    assert r.status == FAIL and r.field == "probe sequence" and "next buckets" in r.message, repr(r)


def test_a_get_that_reads_past_the_empty_bucket_is_told_to_stop_there() -> None:
    r = lab.check("kv.get", _get(stop_at_empty=False))
    assert r.status == FAIL and r.field == "READs" and "first empty bucket" in r.message, repr(r)
    assert "at most 11" in r.message


def test_a_get_that_reads_nothing_is_told_it_sent_no_read() -> None:
    r = lab.check("kv.get", lambda pair, table, key: b"x")
    assert r.status == FAIL and "no RDMA READ" in r.message, repr(r)


def _crossover() -> dict[str, int]:
    reads, rpc = measure(lab.scenario("kv.crossover").service_ns, nic=NIC)
    return {"rpc_ns": rpc, "reads": next(i + 1 for i, t in enumerate(reads) if t > rpc)}


def test_crossover_is_the_students_own_and_a_near_miss_is_explained(student: str) -> None:
    right = _crossover()
    assert lab.check("kv.crossover", right).status == PASS
    off = lab.check("kv.crossover", {**right, "reads": right["reads"] + 1})
    assert off.status == FAIL and off.field == "reads" and "already at" in off.message, repr(off)
    low = lab.check("kv.crossover", {**right, "reads": right["reads"] - 1})
    assert low.status == FAIL and "still no longer than the RPC" in low.message, repr(low)
    one_read = measure(lab.scenario("kv.crossover").service_ns, nic=NIC)[0][0]
    r = lab.check("kv.crossover", {**right, "rpc_ns": one_read})
    assert r.status == FAIL and r.field == "rpc_ns" and "a GET by one READ" in r.message, repr(r)
    others = {s for s in ("alice", "bob", "carol", "dave", "erin") if s != student}
    copied = []
    for other in others:
        with as_student(other):
            copied.append(lab.check("kv.crossover", right).status)
    assert FAIL in copied  # a service time of another's: its RPC time is not this one's


def test_torn_is_the_students_own_and_a_whole_value_is_not_torn(student: str) -> None:
    s = lab.scenario("kv.torn")
    unchecked, checked = torn_run(s, False), torn_run(s, True)
    assert unchecked.torn == 1 and checked.retries >= 1  # every scenario tears its first READ
    right = {"torn": unchecked.value, "reads": checked.round_trips}
    assert lab.check("kv.torn", right).status == PASS
    whole = lab.check("kv.torn", {**right, "torn": s.new.encode()})
    assert whole.status == FAIL and "one whole value" in whole.message, repr(whole)
    fewer = lab.check("kv.torn", {**right, "reads": checked.round_trips - 1})
    assert fewer.status == FAIL and fewer.field == "reads" and "more READs" in fewer.message, repr(fewer)
    with as_student(student + "x"):
        assert lab.check("kv.torn", right).status == FAIL


def test_why() -> None:
    assert lab.check("kv.why", "B").status == PASS
    for wrong, words in (("A", "bytes"), ("C", "round trip"), ("D", "one letter")):
        r = lab.check("kv.why", wrong)
        assert r.status == FAIL and words in r.message, (wrong, repr(r))
