"""Failure handling: nack → retries → dead-letter queue, on_success / on_error callbacks,
broker restarts and outages (retried, logged once), authentication errors."""

from __future__ import annotations

import functools
import logging
import threading
import time
from typing import Any, Dict, List, Set

import pytest

from queen_sync import AuthenticationError, Queen, codec

from _helpers import wait_until


_wait_until = functools.partial(wait_until, timeout=20.0)  # this module's default: 20 s


def _dlq(client: Queen, qname: str) -> List[Dict[str, Any]]:
    resp = client._request("GET", "/api/v1/dlq", query={"queue": qname}, idempotent=True)
    return codec.decode_json(resp.data)["messages"]


def test_always_failing_handler_ends_in_dlq_after_retry_limit_plus_one(client: Queen, qname: str) -> None:
    client.queue(qname).config({"retryLimit": 2}).create()
    client.queue(qname).partition("p").push([{"data": "poison"}, {"data": "fine"}])
    attempts: List[Any] = []

    def handler(m: Dict[str, Any]) -> None:
        attempts.append(m["data"])
        if m["data"] == "poison":
            raise ValueError("cannot digest %s" % m["data"])

    res = client.queue(qname).partition("p").group("g").batch(2).each().limit(4).idle_millis(5000).consume(handler)
    # 3 deliveries of the poison message (retryLimit + 1), then the next message, in order
    assert attempts == ["poison", "poison", "poison", "fine"]
    assert (res.handled, res.failed, res.nacked, res.acked, res.ack_failures) == (4, 3, 3, 1, 0)
    assert res.skipped == 2  # "fine" waited behind the nacked message twice
    rows = [r for r in _dlq(client, qname) if r.get("consumerGroup") == "g"]
    assert len(rows) == 1 and rows[0]["data"] == "poison"
    assert "ValueError: cannot digest poison" in rows[0]["errorMessage"]
    assert client.queue(qname).group("g").pop() == []


def test_on_success_and_on_error_callbacks_own_the_acks(client: Queen, qname: str) -> None:
    client.queue(qname).push([{"data": 1}, {"data": 2}, {"data": 3}])
    ok: List[Any] = []
    bad: List[Any] = []

    def handler(m: Dict[str, Any]) -> int:
        if m["data"] == 2:
            raise RuntimeError("two")
        return m["data"] * 10

    def on_success(m: Dict[str, Any], result: Any) -> None:
        ok.append((m["data"], result))
        client.ack(m, True, {"group": "g"})

    def on_error(m: Dict[str, Any], exc: BaseException) -> None:
        bad.append((m["data"], str(exc)))
        client.ack(m, "dlq", {"group": "g", "error": str(exc)})

    res = (
        client.queue(qname).group("g").on_success(on_success).on_error(on_error).limit(3).idle_millis(5000).consume(handler)
    )
    assert ok == [(1, 10), (3, 30)] and bad == [(2, "two")]
    # auto-ack is off: the consumer itself acked nothing and the callbacks' acks all landed
    assert (res.handled, res.failed, res.acked, res.nacked, res.ack_failures) == (3, 1, 0, 0, 0)
    assert client.queue(qname).group("g").pop() == []


def test_explicit_auto_ack_with_callbacks_both_work(client: Queen, qname: str) -> None:
    """Issue 11.2: ``.auto_ack(True)`` with callbacks: the callbacks run AND the consumer acks
    (a return) / nacks (a raise) as auto-ack says; nothing is silently switched off."""
    client.queue(qname).push([{"data": 0}, {"data": 1}, {"data": 2}])
    ok: List[Any] = []
    bad: List[Any] = []
    raised: List[Any] = []

    def handler(m: Dict[str, Any]) -> int:
        if m["data"] == 1 and not raised:
            raised.append(1)
            raise RuntimeError("once")
        return m["data"]

    res = (
        client.queue(qname)
        .group("g")
        .auto_ack(True)
        .on_success(lambda m, r: ok.append(r))
        .on_error(lambda m, exc: bad.append((m["data"], str(exc))))
        .limit(4)
        .idle_millis(5000)
        .consume(handler)
    )
    assert ok == [0, 1, 2] and bad == [(1, "once")]
    # 1 was nacked (redelivered and handled again), every success acked by the consumer
    assert (res.handled, res.failed, res.acked, res.nacked, res.ack_failures) == (4, 1, 3, 1, 0), res
    assert client.queue(qname).group("g").pop() == []


def test_auth_error_stops_a_background_consumer(embedded_broker: Any) -> None:
    embedded_broker.faults.add("GET", "/api/v1/pop", "status", status=401, times=None)
    with Queen(embedded_broker.url) as q:
        consumer = q.queue("x").concurrency(3).consume(lambda m: None, background=True)
        with pytest.raises(AuthenticationError):
            consumer.join(10)
        assert consumer.reason == "error" and isinstance(consumer.error, AuthenticationError)
        assert not consumer.is_running


def test_auth_error_on_ack_stops_the_consumer(embedded_broker: Any) -> None:
    """A gateway refusing the ack route (403) while pop passes: the consumer went on, handling
    every redelivery again and acking nothing, with only WARNING lines; now it stops with the
    error, as for a pop."""
    embedded_broker.faults.add("POST", "/api/v1/ack", "status", status=403, times=None)
    with Queen(embedded_broker.url) as q:
        q.queue("a403").push([{"data": i} for i in range(5)])
        seen: List[Any] = []
        consumer = q.queue("a403").group("g").each().consume(lambda m: seen.append(m["data"]), background=True)
        with pytest.raises(AuthenticationError):
            consumer.join(10)
        assert consumer.reason == "error" and isinstance(consumer.error, AuthenticationError)
        assert len(seen) == len(set(seen)) >= 1  # nothing handled twice


def test_503_outage_is_retried_and_logged_once(embedded_broker: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="queen_sync.consumer")
    with Queen(embedded_broker.url, retry_attempts=1) as q:
        q.queue("o").push([{"data": i} for i in range(3)])
        embedded_broker.faults.add("GET", "/api/v1/pop", "status", status=503, times=4)
        seen: List[Any] = []
        res = q.queue("o").group("g").limit(3).idle_millis(20000).consume(lambda m: seen.append(m["data"]))
        assert seen == [0, 1, 2] and res.acked == 3
    mine = [r for r in caplog.records if r.name == "queen_sync.consumer"]
    assert [r.levelname for r in mine if "cannot reach" in r.getMessage()] == ["WARNING"]
    assert [r.levelname for r in mine if "answers again" in r.getMessage()] == ["INFO"]


def test_broker_restart_mid_consume_loses_nothing(embedded_broker: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="queen_sync.consumer")
    with Queen(embedded_broker.url, retry_attempts=1) as client:
        qname = "restart"
        client.queue(qname).config({"leaseTime": 3}).create()
        pushed: Set[str] = set()
        for p in range(8):
            res = client.queue(qname).partition("p%d" % p).push([{"data": i} for i in range(25)])
            pushed.update(r["transaction_id"] for r in res)
        handled: List[str] = []
        lock = threading.Lock()
        order: Dict[str, List[int]] = {}

        def handler(m: Dict[str, Any]) -> None:
            with lock:
                handled.append(m["transactionId"])
                order.setdefault(m["partition"], []).append(m["data"])
            time.sleep(0.002)

        consumer = client.queue(qname).group("g").batch(4).each().concurrency(4).consume(handler, background=True)
        try:
            assert _wait_until(lambda: consumer.handled >= 40)
            embedded_broker.stop()
            assert _wait_until(lambda: consumer._outage.active)  # the consumer noticed
            embedded_broker.start()
            assert _wait_until(lambda: len(set(handled)) == len(pushed), timeout=30)
        finally:
            res = consumer.stop(drain_timeout_millis=10_000)
        assert consumer.join(10)
        # acks sent while the broker went down were resent only when that could not count twice
        assert len(handled) == len(set(handled))
        assert set(handled) == pushed  # nothing lost
        assert {p: seq for p, seq in order.items()} == {"p%d" % p: list(range(25)) for p in range(8)}  # in order
        # an ack resent after the restart and refused (lease released or expired) is uncertain
        assert res.acked + res.ack_failures + res.ack_uncertain >= len(pushed)
        assert client.queue(qname).group("g").batch(50).partitions(8).pop() == []
        msgs = [r for r in caplog.records if r.name == "queen_sync.consumer"]
        # each outage is logged once when it starts and once when it ends. Usually that is one
        # outage; a broker that answers a last request while it stops makes the first end early
        # and a second begin, so the pairs are checked, not their number.
        events = ["down" if "cannot reach" in r.getMessage() else "up"
                  for r in msgs if "cannot reach" in r.getMessage() or "answers again" in r.getMessage()]
        assert events and events == ["down", "up"] * (len(events) // 2), events


def test_a_failing_batch_reaches_the_dlq_whole(client: Queen, qname: str) -> None:
    """A batch handler that always fails: every message of the batch ends in the DLQ after
    retryLimit + 1 deliveries. One batch nack of the three would lose the first message on
    the last retry (the broker dead-letters the later ones and moves the cursor past it, see
    test_broker_semantics), so the consumer nacks the first alone and the rest only once
    that one was dead-lettered."""
    client.queue(qname).config({"retryLimit": 1, "leaseTime": 30}).create()
    client.queue(qname).partition("p").push([{"data": {"i": i}} for i in range(3)])
    deliveries: List[List[int]] = []

    def handler(batch: List[Dict[str, Any]]) -> None:
        deliveries.append([m["data"]["i"] for m in batch])
        raise ValueError("cannot digest")

    res = client.queue(qname).partition("p").group("g").batch(3).limit(6).idle_millis(5000).consume(handler)
    assert deliveries == [[0, 1, 2], [0, 1, 2]]  # retryLimit + 1
    assert (res.handled, res.failed, res.nacked, res.acked, res.ack_failures) == (6, 6, 6, 0, 0)
    rows = sorted((r["data"]["i"], r["retryCount"]) for r in _dlq(client, qname) if r.get("consumerGroup") == "g")
    assert rows == [(0, 1), (1, 1), (2, 1)]
    assert client.queue(qname).group("g").pop() == []


def test_a_handlers_own_nack_that_dead_letters_leaves_the_rest_to_the_auto_ack(client: Queen, qname: str) -> None:
    """A nack the broker dead-letters keeps the lease: the consumer still acks the rest of
    the batch (only a nack that released the lease makes the rest wait for redelivery)."""
    client.queue(qname).config({"retryLimit": 0, "leaseTime": 30}).create()
    client.queue(qname).partition("p").push([{"data": {"i": i}} for i in range(3)])
    calls: List[List[int]] = []

    def handler(batch: List[Any]) -> None:
        calls.append([m["data"]["i"] for m in batch])
        if batch[0]["data"]["i"] == 0:
            assert batch[0].nack("poison")["dlq"] is True

    res = client.queue(qname).partition("p").group("g").batch(3).limit(3).idle_millis(3000).consume(handler)
    assert calls == [[0, 1, 2]]
    assert (res.handled, res.acked, res.nacked, res.lost) == (3, 2, 1, 0)
    assert [r["data"]["i"] for r in _dlq(client, qname)] == [0]
    assert client.queue(qname).group("g").pop() == []
