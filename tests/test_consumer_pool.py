"""A consumer on a small connection pool: its fetchers' long polls never hold every
connection (at most ``pool_maxsize - 1`` fetchers), and ``pool_maxsize=1`` with
``concurrency`` above 1 is refused before anything is sent."""

from __future__ import annotations

import threading
from typing import Any, List

import pytest

from queen_sync import InvalidInputError, Queen


def _fetcher_threads(queue: str) -> List[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("queen-consume-%s-fetch-" % queue)]


def test_pool_of_one_refuses_more_than_one_worker_before_any_pop(broker_url: str, client: Queen, qname: str) -> None:
    client.queue(qname).push([{"data": i} for i in range(3)])
    with Queen(broker_url, pool_maxsize=1) as small:
        with pytest.raises(InvalidInputError, match=r"concurrency\(2\) needs a client with pool_maxsize of at least 2 \(it is 1\).*4 \(2 x concurrency\)"):
            small.queue(qname).group("g").concurrency(2).idle_millis(500).consume(lambda m: None)
        assert _fetcher_threads(qname) == []
        # nothing was popped: the group still gets all three
        got = small.queue(qname).group("g").batch(10).wait(False).pop()
        assert sorted(m["data"] for m in got) == [0, 1, 2]


def test_pool_of_one_serves_one_worker(broker_url: str, client: Queen, qname: str) -> None:
    client.queue(qname).push([{"data": i} for i in range(20)])
    seen: List[Any] = []
    with Queen(broker_url, pool_maxsize=1) as small:
        res = small.queue(qname).group("g").batch(5).concurrency(1).idle_millis(500).consume(
            lambda ms: seen.extend(m["data"] for m in ms)
        )
    assert res.reason == "idle" and res.handled == res.acked == 20
    assert sorted(seen) == list(range(20))


@pytest.mark.parametrize("pool, concurrency", [(2, 4), (3, 8)])
def test_small_pool_consumer_finishes_and_stops_idle(broker_url: str, client: Queen, qname: str, pool: int,
                                                      concurrency: int) -> None:
    """Once, ``concurrency`` fetchers on a pool of fewer connections kept long polls on every
    connection: the acks waited behind them (the partition stayed leased, so the polls found
    nothing and went on), and at 3 connections / 8 workers the consumer never finished."""
    for p in range(4):
        client.queue(qname).partition("p%d" % p).push([{"data": p * 100 + i} for i in range(12)])
    seen: List[Any] = []
    lock = threading.Lock()

    def handler(ms: List[Any]) -> None:
        with lock:
            seen.extend(m["data"] for m in ms)

    with Queen(broker_url, pool_maxsize=pool) as small:
        consumer = small.queue(qname).group("g").batch(3).concurrency(concurrency).idle_millis(500).consume(
            handler, background=True
        )
        try:
            assert len(_fetcher_threads(qname)) == pool - 1
            consumer.join(30)  # a bound on a hang, not a timing: it ends at the first idle 500 ms
            res = consumer.result
            assert res.reason == "idle", res
        finally:
            consumer.stop()
    assert res.handled == res.acked == 48 and res.ack_failures == 0
    assert sorted(seen) == sorted(p * 100 + i for p in range(4) for i in range(12))
