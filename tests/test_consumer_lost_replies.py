"""Acks whose reply is lost (the connection drops before or after the broker applied them):
the partition's lease must not stay held until it expires, nothing is handled twice, and
the counters tell confirmed acks from uncertain ones."""

from __future__ import annotations

import logging
import threading
from typing import Any, Dict, List

import pytest

from queen_sync import Queen


def _run(broker: Any, route: str, action: str, which: str) -> Any:
    """Consume 10 of 20 messages of one partition (queue leaseTime: the default 300 s) with
    one lost reply on ``route``: to the first ack of the batch or to its last one. Returns
    (result, handled data)."""
    with Queen(broker.url) as q:
        q.queue("lost").create()
        q.queue("lost").partition("a").push([{"data": i} for i in range(20)])
        handled: List[Any] = []
        faults: List[Any] = []
        if which == "first":
            faults.append(broker.faults.add("POST", route, action, times=1))

        def handler(m: Any) -> None:
            batch = m if isinstance(m, list) else [m]
            handled.extend(x["data"] for x in batch)
            if which == "last" and batch[-1]["data"] == 9:
                faults.append(broker.faults.add("POST", route, action, times=1))  # hits this very ack

        b = q.queue("lost").group("g").batch(10).limit(10).idle_millis(10000)
        if route == "/api/v1/ack":
            b = b.each()  # one ack per message
        res = b.consume(handler)
        assert [f.hits for f in faults] == [1]
        return res, handled


@pytest.mark.parametrize("action", ["drop_before", "drop_after"])
@pytest.mark.parametrize(
    "route, which",
    [("/api/v1/ack", "first"), ("/api/v1/ack", "last"), ("/api/v1/ack/batch", "first")],  # batch: one ack per pop
)
def test_lost_ack_reply_does_not_keep_the_partition_locked(
    embedded_broker: Any, route: str, action: str, which: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="queen_sync.consumer")
    res, handled = _run(embedded_broker, route, action, which)
    assert handled == list(range(10))
    # Every ack confirmed, none counted as a failure, except a lost reply to the last ack of
    # the batch (the only one resent) whose first copy was applied: the resend is refused
    # with "Invalid or expired lease", which cannot tell "applied" from "the lease expired
    # before it arrived", so those stay uncertain (see test_consumer_ack_resend.py).
    resent_applied = action == "drop_after" and (route, which) != ("/api/v1/ack", "first")
    unsure = (1 if route == "/api/v1/ack" else 10) if resent_applied else 0
    assert (res.reason, res.handled, res.acked, res.ack_failures, res.ack_uncertain, res.lost) == (
        "limit", 10, 10 - unsure, 0, unsure, 0), res
    group = Queen(embedded_broker.url)
    try:
        # the lease was released: another client gets the other 10 at once (no lease wait),
        # and none of the 10 handled ones comes back
        rest = group.queue("lost").group("g").batch(20).pop()
        assert [m["data"] for m in rest] == list(range(10, 20))
    finally:
        group.close()
    assert "still holds the lease" not in caplog.text


def test_uncertain_ack_is_counted_apart_until_a_later_ack_confirms_it(embedded_broker: Any) -> None:
    with Queen(embedded_broker.url) as q:
        q.queue("unsure").create()
        q.queue("unsure").partition("a").push([{"data": i} for i in range(3)])
        embedded_broker.faults.add("POST", "/api/v1/ack", "drop_before", times=1)
        snapshots: List[Dict[str, int]] = []
        consumer_box: List[Any] = []
        ready = threading.Event()

        def handler(m: Any) -> None:
            assert ready.wait(10)
            if m["data"] == 1:  # message 0's ack reply was lost: uncertain, not acked yet
                c = consumer_box[0]
                snapshots.append({"acked": c.acked, "ack_uncertain": c.ack_uncertain})

        c = q.queue("unsure").group("g").batch(3).each().limit(3).idle_millis(10000).consume(
            handler, background=True
        )
        consumer_box.append(c)
        ready.set()
        assert c.join(20)
        assert snapshots == [{"acked": 0, "ack_uncertain": 1}]
        res = c.result
        assert (res.acked, res.ack_uncertain, res.ack_failures) == (3, 0, 0)
        assert q.queue("unsure").group("g").pop() == []
