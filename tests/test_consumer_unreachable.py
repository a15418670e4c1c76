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
