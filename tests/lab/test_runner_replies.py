"""rdmalab.lab.runner.sliced / wake_for_replies: a kernel client's wait for a cell's reply, in slices.

The fake channel below misses its wake-up the way the real stack sometimes does (the reply is there,
the wait does not see it until it ends): sliced asks again at each slice's end and gets it."""

from __future__ import annotations

import asyncio
from queue import Empty
from typing import Any

import pytest

from rdmalab.lab.runner import sliced, wake_for_replies


class MissedWakeUp:
    """get_msg(timeout): the first ``misses`` calls end empty, even with a message waiting; then the message."""

    def __init__(self, misses: int, message: Any = None) -> None:
        self.misses, self.message, self.asked = misses, message, []

    async def get_msg(self, timeout: float | None = None) -> Any:
        self.asked.append(timeout)
        if len(self.asked) <= self.misses or self.message is None:
            await asyncio.sleep(0)
            raise Empty
        return self.message


def test_a_missed_wake_up_costs_one_slice_not_the_timeout() -> None:
    chan = MissedWakeUp(misses=1, message={"msg": "execute_reply"})
    got = asyncio.run(sliced(chan.get_msg, step=0.5)(timeout=600))
    assert got == {"msg": "execute_reply"}
    assert len(chan.asked) == 2 and all(t is not None and t <= 0.5 for t in chan.asked), chan.asked


def test_without_a_timeout_it_asks_until_the_reply_comes() -> None:
    chan = MissedWakeUp(misses=3, message="reply")
    assert asyncio.run(sliced(chan.get_msg, step=0.01)()) == "reply"
    assert len(chan.asked) == 4 and chan.asked[0] == 0.01


def test_nothing_by_the_timeout_is_still_empty() -> None:
    """The caller's own timeout still holds: nothing came, Empty (nbclient then reports the cell timed out)."""
    chan = MissedWakeUp(misses=0, message=None)
    with pytest.raises(Empty):
        asyncio.run(sliced(chan.get_msg, step=0.02)(timeout=0.05))
    assert 2 <= len(chan.asked) and all(t is not None and t <= 0.02 for t in chan.asked), chan.asked


def test_wake_for_replies_wraps_the_shell_channel_once_the_client_has_one() -> None:
    class Client:
        on_notebook_start = None

        class kc:  # noqa: N801 - the attribute nbclient's client has
            shell_channel = MissedWakeUp(misses=1, message="reply")

    seen: list[Any] = []
    client = Client()
    client.on_notebook_start = lambda **kw: seen.append(kw)  # type: ignore[assignment]
    assert wake_for_replies(client, step=0.01) is client
    chan = Client.kc.shell_channel
    original = chan.get_msg
    client.on_notebook_start(notebook="nb")  # type: ignore[misc]
    assert seen == [{"notebook": "nb"}]  # the hook it had still runs
    assert chan.get_msg is not original
    assert asyncio.run(chan.get_msg(timeout=5)) == "reply"
