"""Thread-pool consumer: per-partition order, no concurrent handling of one partition,
parallel partitions, bounded memory, per-partition dispatch of multi-partition pops."""

from __future__ import annotations

import collections
import threading
import time
from typing import Any, Dict, List

import pytest

from queen_sync import Queen


def _push_partitions(client: Queen, qname: str, partitions: int, per_partition: int) -> Dict[str, List[int]]:
    pushed: Dict[str, List[int]] = {}
    for p in range(partitions):
        name = "p%02d" % p
        pushed[name] = list(range(per_partition))
        client.queue(qname).partition(name).push([{"data": {"p": name, "i": i}} for i in range(per_partition)])
    return pushed


class _Tracker:
    """Records handling order per partition and asserts no partition is handled twice at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.in_flight: Dict[str, int] = collections.Counter()
        self.order: Dict[str, List[int]] = collections.defaultdict(list)
        self.overlaps: List[str] = []
        self.max_parallel = 0
        self.running = 0

    def enter(self, m: Dict[str, Any]) -> None:
        p = m["partition"]
        with self.lock:
            self.in_flight[p] += 1
            if self.in_flight[p] > 1:
                self.overlaps.append(p)
            self.running += 1
            self.max_parallel = max(self.max_parallel, self.running)
            self.order[p].append(m["data"]["i"])

    def leave(self, m: Dict[str, Any]) -> None:
        with self.lock:
            self.in_flight[m["partition"]] -= 1
            self.running -= 1


def test_order_per_partition_concurrency_8_over_16_partitions(client: Queen, qname: str) -> None:
    pushed = _push_partitions(client, qname, 16, 12)
    total = 16 * 12
    tracker = _Tracker()
    barrier = threading.Barrier(4, timeout=20)
    calls = [0]

    def handler(m: Dict[str, Any]) -> None:
        tracker.enter(m)
        try:
            with tracker.lock:
                calls[0] += 1
                first = calls[0] <= 4
            if first:
                # the first four calls must run at the same time: only different partitions can
                barrier.wait()
            else:
                time.sleep(0.001)  # give other threads a chance to interleave
        finally:
            tracker.leave(m)

    res = (
        client.queue(qname).group("g").batch(3).each().concurrency(8).limit(total).idle_millis(10000).consume(handler)
    )
    assert res.reason == "limit"
    assert (res.handled, res.acked, res.failed, res.ack_failures) == (total, total, 0, 0)
    assert tracker.overlaps == []
    assert {p: tracker.order[p] for p in pushed} == pushed
    assert tracker.max_parallel >= 4
    assert client.queue(qname).group("g").pop() == []


def test_batch_handler_gets_one_partition_per_call(client: Queen, qname: str) -> None:
    pushed = _push_partitions(client, qname, 4, 3)
    calls: List[List[Dict[str, Any]]] = []
    lock = threading.Lock()

    def handler(msgs: List[Dict[str, Any]]) -> None:
        with lock:
            calls.append(list(msgs))

    res = client.queue(qname).group("g").batch(12).partitions(4).concurrency(2).limit(12).idle_millis(10000).consume(handler)
    assert res.handled == 12 and res.acked == 12
    assert all(isinstance(c, list) and len({m["partitionId"] for m in c}) == 1 for c in calls)
    got: Dict[str, List[int]] = collections.defaultdict(list)
    for c in calls:
        for m in c:
            got[m["partition"]].append(m["data"]["i"])
    assert dict(got) == pushed


def test_memory_bound_concurrency_times_batch(client: Queen, qname: str) -> None:
    _push_partitions(client, qname, 10, 5)
    release = threading.Event()
    entered = threading.Semaphore(0)
    max_held = [0]
    box: List[Any] = []
    seen: List[Any] = []

    ready = threading.Event()

    def handler(m: Dict[str, Any]) -> None:
        assert ready.wait(10)
        c = box[0]
        with c._lock:
            max_held[0] = max(max_held[0], c._outstanding)
            seen.append((m["partition"], m["data"]["i"]))
        entered.release()
        assert release.wait(20)

    consumer = client.queue(qname).group("g").batch(3).each().concurrency(2).limit(50).idle_millis(10000).consume(
        handler, background=True
    )
    box.append(consumer)
    ready.set()
    try:
        # both handlers block on their first message; the two fetchers hold one pop of 3 each
        assert entered.acquire(timeout=10) and entered.acquire(timeout=10)
        deadline = time.monotonic() + 10
        while consumer._outstanding < 6 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert consumer._outstanding == 6 and consumer._free_slots == 0
        # the room is full: no more is popped, so the other 8 partitions are all still there
        rest = client.queue(qname).group("g").batch(50).partitions(10).pop()
        assert len(rest) == 40 and len({m["partition"] for m in rest}) == 8
        client.ack(rest, "retry", {"group": "g"})  # hand them back (not counted as a retry)
    finally:
        release.set()
    assert consumer.join(30)
    res = consumer.result
    assert (res.reason, res.handled, res.acked, res.ack_failures) == ("limit", 50, 50, 0), res
    assert len(set(seen)) == 50
    assert max_held[0] <= 6


@pytest.mark.parametrize("concurrency", [1, 3])
def test_handler_sees_single_dict_with_batch_one(client: Queen, qname: str, concurrency: int) -> None:
    _push_partitions(client, qname, 3, 2)
    got: List[Any] = []
    lock = threading.Lock()

    def handler(m: Any) -> None:
        with lock:
            got.append(m)

    res = client.queue(qname).group("g").concurrency(concurrency).limit(6).idle_millis(10000).consume(handler)
    assert res.handled == 6 and all(isinstance(m, dict) for m in got)
