"""Lease renewal during slow handlers (queue leaseTime 1 s, handler ~2.5 s), refused renewals,
and ack verdicts that are read."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Dict, List

import pytest

from queen_sync import Queen

SLOW_S = 2.5  # a real handler duration, longer than the queue's 1 s lease


def _slow_queue(client: Queen, qname: str) -> None:
    client.queue(qname).config({"leaseTime": 1, "retryLimit": 5}).create()
    client.queue(qname).partition("p").push({"data": "slow"})


def _watch_group(client: Queen, qname: str, stop: threading.Event, got: List[Dict[str, Any]]) -> threading.Thread:
    """Another consumer of the same group, popping while the slow handler runs."""

    def run() -> None:
        while not stop.is_set():
            msgs = client.queue(qname).group("g").wait(True).timeout_millis(500).pop()
            got.extend(msgs)
            if msgs:
                return

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


class _SlowHandler:
    """A consume handler taking ``SLOW_S`` per message; each call records the message's
    transactionId in ``seen`` and starts :func:`_watch_group`, which collects in ``stolen``
    what another consumer of group ``g`` gets meanwhile."""

    def __init__(self, client: Queen, qname: str) -> None:
        self.client, self.qname = client, qname
        self.seen: List[str] = []
        self.stolen: List[Dict[str, Any]] = []
        self.stop_watch = threading.Event()
        self.watcher: List[threading.Thread] = []

    def __call__(self, m: Dict[str, Any]) -> None:
        self.seen.append(m["transactionId"])
        self.watcher.append(_watch_group(self.client, self.qname, self.stop_watch, self.stolen))
        threading.Event().wait(SLOW_S)

    def stop_watching(self) -> None:
        """Stop the watcher started by the first call and join it (10 s bound)."""
        self.stop_watch.set()
        self.watcher[0].join(10)


def test_renewal_keeps_the_lease_of_a_slow_handler(client: Queen, qname: str) -> None:
    _slow_queue(client, qname)
    handler = _SlowHandler(client, qname)
    stolen = handler.stolen

    res = (
        client.queue(qname).group("g").renew_lease(True, 500).limit(1).idle_millis(10000).consume(handler)
    )
    handler.stop_watching()
    assert stolen == []  # nobody else got the message while the handler ran
    assert (res.handled, res.acked, res.ack_failures, res.lost, res.renew_failures) == (1, 1, 0, 0, 0)
    assert res.renewals >= 1
    assert client.queue(qname).group("g").pop() == []


def test_default_interval_renews_a_lease_shorter_than_the_interval(
    client: Queen, qname: str, caplog: pytest.LogCaptureFixture
) -> None:
    # queue leaseTime 1 s, renewal interval 10 s (default): the first renewal must come early
    caplog.set_level(logging.WARNING, logger="queen_sync.consumer")
    _slow_queue(client, qname)
    handler = _SlowHandler(client, qname)

    res = client.queue(qname).group("g").renew_lease(True).limit(1).idle_millis(10000).consume(handler)
    handler.stop_watching()
    assert handler.stolen == [] and len(handler.seen) == 1  # handled once, never redelivered
    assert (res.handled, res.acked, res.ack_failures, res.lost, res.renew_failures) == (1, 1, 0, 0, 0)
    assert res.renewals >= 1
    assert not any("first renewal" in r.getMessage() for r in caplog.records)
    assert client.queue(qname).group("g").pop() == []


def test_without_renewal_the_lease_expires_and_the_message_is_redelivered(
    client: Queen, qname: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="queen_sync.consumer")
    _slow_queue(client, qname)
    handler = _SlowHandler(client, qname)
    seen, stolen = handler.seen, handler.stolen

    res = client.queue(qname).group("g").limit(1).idle_millis(10000).consume(handler)
    handler.stop_watching()
    # the lease expired: the broker redelivered the message to the other consumer ...
    assert [m["transactionId"] for m in stolen] == seen
    # ... and the slow consumer's ack was refused, counted and logged with the message id
    assert (res.handled, res.acked, res.ack_failures) == (1, 0, 1)
    assert any("refused" in r.getMessage() and seen[0] in r.getMessage() for r in caplog.records)
    # the other consumer's lease has expired by now as well: it comes back once more
    last = client.queue(qname).group("g").wait(True).timeout_millis(5000).pop()
    assert [m["transactionId"] for m in last] == seen
    client.ack(last, True, {"group": "g"})
    assert client.queue(qname).group("g").pop() == []


def test_refused_renewal_loses_the_message_without_acking(embedded_broker: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="queen_sync.consumer")
    with Queen(embedded_broker.url) as client:
        qname = "renew-refused"
        client.queue(qname).config({"leaseTime": 1, "retryLimit": 5}).create()
        client.queue(qname).partition("p").push([{"data": 1}, {"data": 2}])
        # the first renewal (sent ~0.5 s after the pop) reaches the broker only after the 1 s
        # lease expired: refused with "Lease already expired"
        embedded_broker.faults.add("POST", "/api/v1/lease/", "delay", delay_ms=1500, times=1)
        box: List[Any] = []
        ready = threading.Event()
        seen: List[Any] = []

        def handler(m: Dict[str, Any]) -> None:
            assert ready.wait(10)
            seen.append(m["data"])
            deadline = time.monotonic() + 15
            # wait for the refused first renewal
            while box[0].renew_failures == 0 and time.monotonic() < deadline:
                time.sleep(0.02)

        # batch 2, each(): message 2 waits in the lane while message 1 is handled
        consumer = client.queue(qname).group("g").batch(2).each().renew_lease(True, 1500).limit(3).idle_millis(10000).consume(
            handler, background=True
        )
        box.append(consumer)
        ready.set()
        assert consumer.join(30)
        res = consumer.result
        # message 1's lease was lost mid-handler: not acked, message 2 not handled; the broker
        # redelivered both (to this consumer, in order), and those were acked
        assert seen == [1, 1, 2]
        assert (res.reason, res.handled, res.renew_failures, res.lost, res.acked, res.ack_failures) == (
            "limit", 3, 1, 2, 2, 0), res
        acks = embedded_broker.request_count("POST", "/api/v1/ack") + embedded_broker.request_count(
            "POST", "/api/v1/ack/batch"
        )
        assert acks == 2  # no ack with the lost lease
        assert any("renewal of lease" in r.getMessage() and "refused" in r.getMessage() for r in caplog.records)
        # and one hint that the queue's leaseTime is shorter than the first renewal's delay
        hints = [r for r in caplog.records if "already expired at its first renewal" in r.getMessage()]
        assert len(hints) == 1 and hints[0].levelname == "WARNING" and "leaseTime" in hints[0].getMessage()
        assert client.queue(qname).group("g").pop() == []


def test_renew_lease_validation(client: Queen) -> None:
    from queen_sync import InvalidInputError

    b = client.queue("x")
    with pytest.raises(InvalidInputError):
        b.renew_lease(True, 0)
    with pytest.raises(InvalidInputError):
        b.renew_lease("yes")  # type: ignore[arg-type]
    assert b.renew_lease(True)._renew_interval == 10000
    assert b.renew_lease(False)._renew is False


def test_an_ack_refused_for_an_expired_lease_tells_what_to_do(
    client: Queen, qname: str, caplog: pytest.LogCaptureFixture
) -> None:
    # the handler returns only once another consumer of the group got the message (its lease
    # expired: leaseTime 1 s), so the auto-ack is refused with "Invalid or expired lease"
    caplog.set_level(logging.WARNING, logger="queen_sync.consumer")
    _slow_queue(client, qname)
    stolen: List[Dict[str, Any]] = []
    redelivered = threading.Event()
    stop = threading.Event()

    def watch() -> None:
        t = _watch_group(client, qname, stop, stolen)
        t.join(15)
        redelivered.set()

    def handler(m: Dict[str, Any]) -> None:
        threading.Thread(target=watch, daemon=True).start()
        assert redelivered.wait(15)

    res = client.queue(qname).group("g").limit(1).idle_millis(10000).consume(handler)
    stop.set()
    assert len(stolen) == 1 and (res.handled, res.acked, res.ack_failures) == (1, 0, 1)
    refused = [r.getMessage() for r in caplog.records if "refused by the broker" in r.getMessage()]
    assert len(refused) == 1, refused
    text = refused[0]
    assert "queue %r (consumer group 'g')" % qname in text
    assert "handler outlived the lease" in text
    assert "queen.queue(%r).group('g').renew_lease(True)" % qname in text and "lease_time" in text
    client.ack(stolen, True, {"group": "g"})
