"""Queen.close() with consumers running: it stops them gracefully first (in-flight handlers
finish and are acked), then flushes push buffers, then closes the transport. Idempotent,
callable from any thread, including from inside a handler (no self-deadlock)."""

from __future__ import annotations

import logging
import threading
import time
import warnings
from typing import Any, Dict, List

import pytest

from queen_sync import Queen

from _helpers import wait_until


def _leftover(broker_url: str, qname: str) -> List[Any]:
    """What the group still gets (leases are short: an unacked message comes back)."""
    with Queen(broker_url) as q:
        res = q.queue(qname).group("g").batch(10).wait(True).timeout_millis(2500).pop()
        return [m["data"] for m in res]


def test_close_drains_and_acks_an_in_flight_handler(
    broker_url: str, qname: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="queen_sync")
    q = Queen(broker_url)
    q.queue(qname).config({"leaseTime": 1}).create()
    q.queue(qname).push({"data": "one"})
    started = threading.Event()
    gate = threading.Event()
    handled: List[Any] = []

    def handler(m: Dict[str, Any]) -> None:
        handled.append(m["data"])
        started.set()
        assert gate.wait(20)

    consumer = q.queue(qname).group("g").consume(handler, background=True)
    assert started.wait(10)
    closer = threading.Thread(target=q.close)
    closer.start()
    # close() asked the consumer to stop and waits for the handler, it did not just close
    assert wait_until(lambda: consumer.reason == "closed", timeout=10)
    assert closer.is_alive() and not q.closed
    gate.set()
    closer.join(15)
    assert not closer.is_alive() and q.closed
    assert not consumer.is_running
    res = consumer.result
    assert (res.handled, res.acked, res.ack_failures, res.reason) == (1, 1, 0, "closed")
    assert "client closed before" not in caplog.text
    assert handled == ["one"] and _leftover(broker_url, qname) == []  # not redelivered


def test_close_from_inside_a_handler_does_not_deadlock_and_acks(broker_url: str, qname: str) -> None:
    q = Queen(broker_url)
    q.queue(qname).config({"leaseTime": 1}).create()
    q.queue(qname).push([{"data": i} for i in range(3)])
    returned: List[int] = []
    buffered = q.queue(qname).partition("side").buffer(100, 600000)

    def handler(m: Dict[str, Any]) -> None:
        buffered.push({"data": "from-handler"})  # sent by the close's buffer flush
        returned.append(q.close())  # must not wait for this very handler

    consumer = q.queue(qname).group("g").batch(3).each().consume(handler, background=True)
    assert consumer.join(15)
    # the messages popped before the stop were drained: each handler's close() returned at once
    assert returned == [0, 0, 0]
    assert q.close() == 0  # from outside: waits for the close the handler started
    assert q.closed and q.unsent_on_close == 0
    res = consumer.result
    assert (res.reason, res.handled, res.acked, res.ack_failures, res.released) == ("closed", 3, 3, 0, 0)
    # nothing redelivered; the pushes buffered by the handlers were flushed by the close
    assert _leftover(broker_url, qname) == ["from-handler"] * 3


def test_close_is_idempotent_from_several_threads_with_a_consumer(client: Queen, qname: str) -> None:
    client.queue(qname).push([{"data": i} for i in range(5)])
    seen: List[Any] = []
    consumer = client.queue(qname).group("g").concurrency(2).consume(lambda m: seen.append(m["data"]), background=True)
    assert wait_until(lambda: consumer.acked == 5)
    results: List[int] = []
    threads = [threading.Thread(target=lambda: results.append(client.close())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(15)
    assert results == [0, 0, 0, 0] and client.closed
    assert client.close() == 0
    assert not consumer.is_running and consumer.reason == "closed"
    assert sorted(seen) == [0, 1, 2, 3, 4]


def test_blocking_consume_in_another_thread_stops_cleanly_on_close(client: Queen, qname: str) -> None:
    client.queue(qname).push([{"data": i} for i in range(2)])
    seen: List[Any] = []
    out: List[Any] = []
    t = threading.Thread(target=lambda: out.append(client.queue(qname).group("g").consume(lambda m: seen.append(m["data"]))))
    t.start()
    assert wait_until(lambda: len(seen) == 2)
    client.close()
    t.join(15)
    assert not t.is_alive()
    assert out[0].reason == "closed" and out[0].acked == 2 and out[0].ack_failures == 0


def test_close_with_a_stuck_handler_returns_by_its_deadline(
    embedded_broker: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """One deadline for the whole close(): consumer drain, final releases and buffer flush;
    a handler still running then is abandoned (its messages come back after the lease)."""
    caplog.set_level(logging.WARNING, logger="queen_sync")
    q = Queen(embedded_broker.url, close_timeout_millis=1000)
    q.queue("ct").config({"leaseTime": 2}).create()
    q.queue("ct").push([{"data": i} for i in range(5)])
    started = threading.Event()
    gate = threading.Event()

    def handler(m: Dict[str, Any]) -> None:
        started.set()
        assert gate.wait(30)

    consumer = q.queue("ct").group("g").batch(5).each().consume(handler, background=True)
    try:
        assert started.wait(10)
        # a buffered push the broker keeps refusing: the flush cannot succeed
        embedded_broker.faults.add("POST", "/api/v1/push", "status", status=503, times=None)
        q.queue("ct2").buffer(10, 600000).push({"data": "side"})
        t0 = time.monotonic()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            unsent = q.close()
        took = time.monotonic() - t0
        assert took < 1.0 + 3.0, took  # close_timeout_millis + a margin for a loaded machine
        assert unsent == 1 and q.closed
        assert "abandoned" in caplog.text
    finally:
        gate.set()
        embedded_broker.faults.clear()
    assert consumer.join(10)
    res = consumer.result
    # the handler's ack and the release of the 4 messages queued behind it (same partition)
    # could not be sent any more: failures, not "acked" / "released"
    assert (res.reason, res.handled, res.acked, res.released, res.ack_failures) == ("closed", 1, 0, 0, 5), res
    # nothing lost: the broker redelivers all 5 once the lease expires
    with Queen(embedded_broker.url) as other:
        got = other.queue("ct").group("g").batch(10).wait(True).timeout_millis(5000).pop()
        assert sorted(m["data"] for m in got) == [0, 1, 2, 3, 4]


def test_close_releases_unstarted_messages_before_its_deadline(embedded_broker: Any) -> None:
    """Messages of other partitions that no handler got are released (and confirmed) while
    the transport is still open, even when a handler of another partition is stuck."""
    q = Queen(embedded_broker.url, close_timeout_millis=2000)
    q.queue("cr").create()
    for p in "abc":
        q.queue("cr").partition(p).push({"data": p})
    started = threading.Event()
    gate = threading.Event()
    handled: List[Any] = []

    def handler(m: Dict[str, Any]) -> None:
        handled.append(m["data"])
        started.set()
        assert gate.wait(30)

    # one worker, one pop over the 3 partitions: the first handler blocks, the other two
    # partitions' messages wait for a worker
    consumer = q.queue("cr").group("g").batch(3).partitions(3).each().consume(handler, background=True)
    try:
        assert started.wait(10)
        t0 = time.monotonic()
        q.close()
        assert time.monotonic() - t0 < 2.0 + 3.0
    finally:
        gate.set()
    assert consumer.join(10)
    res = consumer.result
    assert (res.handled, res.released, res.acked, res.ack_failures) == (1, 2, 0, 1), res
    with Queen(embedded_broker.url) as other:  # released: they come back at once
        got = other.queue("cr").group("g").batch(10).partitions(3).pop()
        assert sorted(m["data"] for m in got) == sorted(set("abc") - set(handled))
