"""idle_millis with the broker unreachable: the consumer stops with reason "unreachable" and
raises (blocking) / keeps (background) the last connection error, so "no work" and "broker
down" can be told apart. An outage that ended before the idle deadline is plain "idle"."""

from __future__ import annotations

import socket
from typing import Any, Iterator

import pytest

from queen_sync import Queen, QueenConnectionError


@pytest.fixture
def dead_url() -> Iterator[str]:
    """A loopback URL where nothing listens (connection refused)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    yield "http://127.0.0.1:%d" % port


def test_blocking_consume_raises_when_the_broker_is_down_all_along(dead_url: str) -> None:
    with Queen(dead_url, retry_attempts=1) as q:
        seen: list = []
        with pytest.raises(QueenConnectionError):
            q.queue("nowhere").group("g").idle_millis(1000).consume(seen.append)
        assert seen == []


def test_blocking_consume_with_default_retries_raises_too(dead_url: str) -> None:
    # the transport's own retries take longer than the idle time: still "unreachable"
    with Queen(dead_url, retry_delay_millis=600) as q:
        with pytest.raises(QueenConnectionError):
            q.queue("nowhere").idle_millis(300).consume(lambda m: None)


def test_background_consume_sets_error_and_join_reraises(dead_url: str) -> None:
    with Queen(dead_url, retry_attempts=1) as q:
        consumer = q.queue("nowhere").group("g").concurrency(2).idle_millis(800).consume(lambda m: None, background=True)
        with pytest.raises(QueenConnectionError):
            consumer.join(15)
        assert consumer.reason == "unreachable" and consumer.result.reason == "unreachable"
        assert isinstance(consumer.error, QueenConnectionError)
        assert not consumer.is_running


def test_outage_over_before_the_idle_deadline_is_idle(embedded_broker: Any) -> None:
    with Queen(embedded_broker.url, retry_attempts=1) as q:
        q.queue("o").create()
        fault = embedded_broker.faults.add("GET", "/api/v1/pop", "status", status=503, times=2)
        res = q.queue("o").group("g").idle_millis(1500).consume(lambda m: None)
        assert fault.hits == 2
        assert res.reason == "idle"


def test_reachable_empty_queue_is_idle(client: Queen, qname: str) -> None:
    client.queue(qname).create()
    res = client.queue(qname).group("g").idle_millis(300).consume(lambda m: None)
    assert res.reason == "idle" and res.handled == 0


def test_busy_consumer_with_acks_pending_stops_unreachable(embedded_broker: Any) -> None:
    """Issue 11.1: the broker goes away while an ack is pending; the consumer must still stop
    with reason "unreachable" within idle_millis + a bounded grace, the pending ack counted
    as uncertain (not silently lost, not retried forever)."""
    import time

    with Queen(embedded_broker.url) as q:
        q.queue("busy").create()
        q.queue("busy").push([{"data": i} for i in range(5)])
        handled: list = []

        def handler(m: Any) -> None:
            handled.append(m["data"])
            if len(handled) == 1:
                embedded_broker.stop()  # the ack of this message can never be sent

        consumer = q.queue("busy").group("g").batch(5).each().idle_millis(1000).consume(handler, background=True)
        t0 = time.monotonic()
        try:
            with pytest.raises(QueenConnectionError):
                assert consumer.join(1.0 + 8.0), "still running %.1f s after the broker went away" % (
                    time.monotonic() - t0
                )
            took = time.monotonic() - t0
        finally:
            consumer.stop(drain_timeout_millis=0)
        assert took < 1.0 + 8.0, took
        res = consumer.result
        assert res.reason == "unreachable" and handled == [0]
        # the handled message's ack was pending: uncertain, not "acked" and not silently dropped
        assert (res.handled, res.acked, res.uncertain) == (1, 0, 1), res
        # the 4 messages never handled could not be released either (the broker redelivers them)
        assert res.released == 0 and res.ack_failures == 4, res


def test_blocking_busy_consumer_raises_unreachable_in_bounded_time(embedded_broker: Any) -> None:
    """Issue 11.1, blocking form: consume() raises the connection error instead of blocking
    on an ack that retries forever (run in a thread so a hang fails the test, not the run)."""
    import threading
    import time

    with Queen(embedded_broker.url, retry_attempts=1) as q:
        q.queue("busy2").create()
        q.queue("busy2").push([{"data": i} for i in range(3)])
        outcome: list = []

        def handler(m: Any) -> None:
            embedded_broker.stop()

        def run() -> None:
            try:
                outcome.append(q.queue("busy2").group("g").batch(3).each().idle_millis(800).consume(handler))
            except BaseException as exc:  # noqa: BLE001 - recorded for the assertion
                outcome.append(exc)

        t = threading.Thread(target=run, daemon=True)
        t0 = time.monotonic()
        t.start()
        t.join(0.8 + 8.0)
        assert not t.is_alive(), "consume() still blocked %.1f s after the broker went away" % (time.monotonic() - t0)
        assert len(outcome) == 1 and isinstance(outcome[0], QueenConnectionError), outcome
