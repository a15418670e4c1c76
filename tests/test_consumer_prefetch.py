"""Prefetch: while the workers are busy, a fetcher pops ahead of them with the room there is
(at least half a batch), within the ``concurrency × batch`` memory bound."""

from __future__ import annotations

import threading
import time
from typing import Any, List

from queen_sync import Queen


def _push(client: Queen, qname: str, partitions: int, per_partition: int) -> None:
    for p in range(partitions):
        client.queue(qname).partition("p%d" % p).push([{"data": {"p": p, "i": i}} for i in range(per_partition)])


def _wait_outstanding(consumer: Any, n: int) -> int:
    deadline = time.monotonic() + 10
    while consumer._outstanding < n and time.monotonic() < deadline:
        time.sleep(0.01)
    return int(consumer._outstanding)


def test_fetcher_pops_ahead_of_a_busy_worker(client: Queen, qname: str) -> None:
    # batch 4, one fetcher, one worker: the first pop brings one partition's 2 messages and
    # the worker holds them; the 2 free slots are half a batch, so the next pop goes out now
    # instead of after the worker finishes
    _push(client, qname, 2, 2)
    first = threading.Event()
    release = threading.Event()
    seen: List[Any] = []

    def handler(msgs: List[Any]) -> None:
        seen.extend((m["data"]["p"], m["data"]["i"]) for m in msgs)
        if not first.is_set():
            first.set()
            assert release.wait(20)

    # no limit: the limit would shrink the second pop to what it has left, prefetch or not
    consumer = client.queue(qname).group("g").batch(4).concurrency(1).idle_millis(10000).consume(
        handler, background=True
    )
    try:
        assert first.wait(10)
        assert _wait_outstanding(consumer, 4) == 4  # both partitions popped while the handler runs
        assert consumer._free_slots == 0  # never more than concurrency × batch held
    finally:
        release.set()
    deadline = time.monotonic() + 10
    while consumer.result.acked < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    consumer.stop()
    assert consumer.join(30)
    res = consumer.result
    assert (res.handled, res.acked, res.ack_failures) == (4, 4, 0), res
    assert sorted(seen) == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_prefetch_keeps_the_limit(client: Queen, qname: str) -> None:
    # limit 3 with batch 4: the pop made while the worker is busy is for the 1 message the
    # limit has left, never for the free room
    _push(client, qname, 2, 2)
    first = threading.Event()
    release = threading.Event()
    seen: List[Any] = []

    def handler(msgs: List[Any]) -> None:
        seen.extend(msgs)
        if not first.is_set():
            first.set()
            assert release.wait(20)

    consumer = client.queue(qname).group("g").batch(4).concurrency(1).limit(3).idle_millis(10000).consume(
        handler, background=True
    )
    try:
        assert first.wait(10)
        assert _wait_outstanding(consumer, 3) == 3
    finally:
        release.set()
    assert consumer.join(30)
    res = consumer.result
    assert (res.reason, res.handled, res.acked) == ("limit", 3, 3), res
    assert len(seen) == 3
