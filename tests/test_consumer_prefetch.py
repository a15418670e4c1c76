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


def _record_pops(monkeypatch: Any) -> List[Any]:
    """Record ``(thread name, wait, messages)`` of every pop any consumer makes."""
    from queen_sync.consumer import _calls

    pops: List[Any] = []
    real = _calls.Broker.pop

    def pop(self: Any, spec: Any) -> Any:
        got = real(self, spec)
        pops.append((threading.current_thread().name, spec.wait, len(got)))
        return got

    monkeypatch.setattr(_calls.Broker, "pop", pop)
    return pops


def test_a_worker_with_nothing_queued_pops_itself(client: Queen, qname: str, monkeypatch: Any) -> None:
    # one fetcher, one worker, fast handler: after its unit the worker finds nothing queued
    # (a backlog: the first pop was full), so it pops (no long poll) instead of waking the
    # fetcher and waiting for it; order within each partition and exactly-once still hold
    pops = _record_pops(monkeypatch)
    _push(client, qname, 5, 10)
    seen: List[Any] = []
    res = client.queue(qname).group("g").batch(10).concurrency(1).limit(50).idle_millis(10000).consume(
        lambda msgs: seen.extend((m["data"]["p"], m["data"]["i"]) for m in msgs)
    )
    assert (res.reason, res.handled, res.acked) == ("limit", 50, 50), res
    assert sorted(seen) == [(p, i) for p in range(5) for i in range(10)]
    for p in range(5):
        assert [i for q, i in seen if q == p] == list(range(10))
    by_worker = [x for x in pops if "-worker-" in x[0]]
    assert by_worker and all(wait is False for _, wait, _ in by_worker), pops
    assert sum(n for _, _, n in by_worker) >= 10, pops


def test_no_worker_pops_on_a_trickle(client: Queen, qname: str, monkeypatch: Any) -> None:
    # messages arriving one at a time: every pop brings less than it asked for (no backlog),
    # so the workers never pop themselves (each would come back empty): one long poll per
    # arrival, as before workers could pop
    pops = _record_pops(monkeypatch)
    handled = []
    cond = threading.Condition()

    def handler(msgs: List[Any]) -> None:
        with cond:
            handled.extend(m["data"]["i"] for m in msgs)
            cond.notify_all()

    consumer = client.queue(qname).group("g").batch(4).concurrency(2).idle_millis(10000).consume(
        handler, background=True
    )
    try:
        for i in range(4):
            client.queue(qname).push({"data": {"i": i}})
            with cond:
                assert cond.wait_for(lambda: len(handled) == i + 1, 10)
        deadline = time.monotonic() + 10
        while consumer.result.acked < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        consumer.stop()
        assert consumer.join(30)
    assert handled == [0, 1, 2, 3] and consumer.result.acked == 4
    assert [x for x in pops if "-worker-" in x[0]] == [], pops
