"""The seams of issue 13 item 6: a closed client refuses consume(), headers are checked when
the client is built, negative timeouts are refused, and a pool smaller than the number of
threads using it makes them wait for a connection instead of churning connections."""

from __future__ import annotations

import logging
import threading
from typing import Any, Dict, List

import pytest

from queen_sync import ClientClosedError, InvalidInputError, Queen
from queen_sync.transport import ConstantBackoff, ExponentialBackoff


# ---------------------------------------------------------------- consume() on a closed client


@pytest.mark.parametrize("background", [False, True])
def test_consume_on_a_closed_client_raises(broker_url: str, unique_name: Any, background: bool) -> None:
    q = Queen(broker_url)
    builder = q.queue(unique_name()).group("g").idle_millis(200)  # made while open
    q.close()
    calls: List[Any] = []
    with pytest.raises(ClientClosedError):
        builder.consume(calls.append, background=background)
    assert calls == []


# ---------------------------------------------------------------- headers checked at construction


@pytest.mark.parametrize(
    "headers",
    [
        {"X-Tenant": "a\r\nX-Injected: 1"},
        {"X-Tenant": "a\nb"},
        {"X-Tenant": "a\rb"},
        {"X-Tenant": "a\x00b"},
        {"X-Tenant": 5},
        {"X-Tenant": None},
        {"X-Tenant": b"bytes"},
        {5: "five"},
        {"Bad Name": "x"},
        {"X-Tenant:": "x"},
        {"": "x"},
        {"X-Tenant": "snow\u2603man"},
    ],
)
def test_bad_headers_are_refused_when_the_client_is_built(headers: Dict[Any, Any]) -> None:
    with pytest.raises(InvalidInputError):
        Queen("http://127.0.0.1:1", headers=headers)


def test_a_bearer_token_with_a_newline_is_refused_without_showing_it() -> None:
    with pytest.raises(InvalidInputError) as info:
        Queen("http://127.0.0.1:1", bearer_token="secret\r\nX-Injected: 1")
    assert "secret" not in str(info.value)


def test_good_headers_are_sent(broker_url: str) -> None:
    with Queen(broker_url, headers={"X-Tenant": "acme\tblue", "User-Agent": "mine/1"}) as q:
        assert q.admin.health()  # the request goes out (no ValueError from http.client)


# ---------------------------------------------------------------- negative timeouts refused


def test_negative_flush_timeouts_are_refused(client: Queen, unique_name: Any) -> None:
    buf = client.queue(unique_name()).buffer(10, 10_000)
    buf.push({"data": 1})
    with pytest.raises(InvalidInputError):
        buf.flush(-1)
    with pytest.raises(InvalidInputError):
        client.queue(unique_name()).flush(-0.5)
    with pytest.raises(InvalidInputError):
        client.flush_all_buffers(-1)
    with pytest.raises(InvalidInputError):
        client.flush_all_buffers(float("nan"))
    with pytest.raises(InvalidInputError):
        client.flush_all_buffers("100")  # type: ignore[arg-type]
    assert client.flush_all_buffers(5000) == 0  # the refused calls changed nothing


def test_negative_close_timeout_is_refused(broker_url: str) -> None:
    q = Queen(broker_url)
    try:
        with pytest.raises(InvalidInputError):
            q.close(-1)
        assert not q.closed
    finally:
        q.close()


def test_negative_join_timeout_is_refused(client: Queen, unique_name: Any) -> None:
    consumer = client.queue(unique_name()).group("g").consume(lambda m: None, background=True)
    try:
        with pytest.raises(InvalidInputError):
            consumer.join(-1)
    finally:
        consumer.stop()
    assert consumer.join(10) is True


@pytest.mark.parametrize(
    "make",
    [
        lambda: ConstantBackoff(-1),
        lambda: ExponentialBackoff(-1, 1000),
        lambda: ExponentialBackoff(100, -1),
    ],
)
def test_negative_backoff_delays_are_refused(make: Any) -> None:
    with pytest.raises(InvalidInputError):
        make()


# ---------------------------------------------------------------- a small pool blocks, no churn


def test_32_threads_on_a_pool_of_4_wait_for_a_connection(
    embedded_broker: Any, unique_name: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Each thread holds a connection ~100 ms (a long poll on an empty queue), so all 32 are
    in flight at once: with a non-blocking pool urllib3 opens extra connections and logs
    "Connection pool is full, discarding connection" for each one it cannot keep."""
    caplog.set_level(logging.WARNING, logger="urllib3")
    threads_n, rounds = 32, 2
    errors: List[BaseException] = []
    results: List[int] = []
    lock = threading.Lock()
    start = threading.Barrier(threads_n)
    with Queen(embedded_broker.url, pool_maxsize=4) as q:
        name, empty = unique_name(), unique_name("empty")
        q.queue(name).create()
        q.queue(empty).create()

        def work(i: int) -> None:
            try:
                start.wait(10)
                for r in range(rounds):
                    got = q.queue(empty).group("g%d" % i).wait(True).timeout_millis(100).pop()
                    assert got == []
                    q.queue(name).partition("p%d" % i).push({"data": {"i": i, "r": r}})
                with lock:
                    results.append(i)
            except BaseException as exc:  # collected for the main thread
                with lock:
                    errors.append(exc)

        ts = [threading.Thread(target=work, args=(i,)) for i in range(threads_n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        pool, _ = q._transport._host_pool(embedded_broker.url)
        opened = pool.num_connections
        popped = q.queue(name).group("check").batch(1000).partitions(100).pop()
    assert errors == []
    assert sorted(results) == list(range(threads_n))
    assert len(popped) == threads_n * rounds
    assert "Connection pool is full" not in caplog.text
    assert opened <= 4
