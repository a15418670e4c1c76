"""Fork safety: a child forked after the parent pushed and buffered starts with empty push
buffers and fresh connections; the parent still sends its own buffered messages. Every
message of both processes arrives exactly once."""

from __future__ import annotations

import os
import threading
from collections import Counter
from typing import Any, List

import pytest

from queen_sync import Queen

from _helpers import run_forked  # noqa: E402

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork (POSIX)")


def run_child(body: Any) -> int:
    """Fork; run ``body()`` in the child (must return True); return the child's exit code."""
    return run_forked(body)


def test_fork_child_starts_empty_parent_keeps_its_buffer(embedded_broker: Any) -> None:
    broker = embedded_broker
    q = Queen(broker.url)
    queue = "forked"
    q.queue(queue).push({"data": "parent-direct"})
    buffered = q.queue(queue).buffer(1000, 600000)  # sent only on flush / close
    buffered.push([{"data": "parent-buf-%d" % i} for i in range(20)])
    parent_pool = q._transport._pool
    assert q.get_buffer_stats()["totalBufferedMessages"] == 20

    def child() -> bool:
        ok = q.get_buffer_stats()["totalBufferedMessages"] == 0  # nothing inherited
        ok = ok and q._transport._pool is not parent_pool  # fresh connections
        q.queue(queue).push({"data": "child-direct"})
        buffered.push([{"data": "child-buf-%d" % i} for i in range(10)])
        ok = ok and q.flush_all_buffers(10000) == 0
        ok = ok and q.close(timeout_millis=5000) == 0
        return ok

    assert run_child(child) == 0
    # the child sent only its own messages; the parent's 20 are still waiting here
    assert q.get_buffer_stats()["totalBufferedMessages"] == 20
    assert sum(1 for m in broker.messages(queue) if str(m["data"]).startswith("parent-buf")) == 0
    assert q.close() == 0

    seen = Counter(m["data"] for m in broker.messages(queue))
    expected = (
        ["parent-direct", "child-direct"]
        + ["parent-buf-%d" % i for i in range(20)]
        + ["child-buf-%d" % i for i in range(10)]
    )
    assert seen == Counter(expected)


def test_fork_while_threads_push(embedded_broker: Any) -> None:
    """Forking while parent threads hold buffer locks must not deadlock the child."""
    broker = embedded_broker
    queue = "forkbusy"
    q = Queen(broker.url)
    stop = threading.Event()
    counts: List[int] = [0] * 4

    def produce(t: int) -> None:
        qb = q.queue(queue).partition("p%d" % t).buffer(5, 5)
        i = 0
        while not stop.is_set():
            qb.push({"data": "parent-%d-%d" % (t, i)})
            i += 1
            counts[t] = i

    threads = [threading.Thread(target=produce, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    try:
        # fork while the producers are busy (at least some pushes done)
        while min(counts) < 20:
            threading.Event().wait(0.001)

        def child() -> bool:
            if q.get_buffer_stats()["totalBufferedMessages"] != 0:
                return False
            qb = q.queue(queue).partition("child").buffer(5, 5)
            for i in range(12):
                qb.push({"data": "child-%d" % i})
            return q.close(timeout_millis=5000) == 0

        code = run_child(child)
    finally:
        stop.set()
        for th in threads:
            th.join()
    assert code == 0
    assert q.close() == 0
    seen = Counter(m["data"] for m in broker.messages(queue))
    expected = ["child-%d" % i for i in range(12)] + [
        "parent-%d-%d" % (t, i) for t in range(4) for i in range(counts[t])
    ]
    assert seen == Counter(expected)
