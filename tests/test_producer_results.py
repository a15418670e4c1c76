"""How the buffered producer reads a batch's reply: queued / duplicate / buffered (and any
other status text) are delivered; ``failed`` items, and results without a status, make the
batch go again (same ids); counts land in the stats. And its size trigger: a batch is sent
as soon as ``message_count`` messages wait, also when they arrived while an earlier batch
was in flight (the sender is woken once per trigger, not once per push)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import pytest

from queen_sync import Queen

from _helpers import wait_for


@pytest.fixture
def q(quick_retry_client: Queen) -> Queen:
    return quick_retry_client


def _reply(statuses: List[Optional[str]]) -> List[Dict[str, Any]]:
    out: List[Dict[str, Any]] = []
    for i, st in enumerate(statuses):
        r: Dict[str, Any] = {"index": i, "transaction_id": "t%d" % i}
        if st is not None:
            r["status"] = st
        if st == "failed":
            r["error"] = "injected"
        out.append(r)
    return out


def test_failed_item_resends_the_batch(embedded_broker: Any, q: Queen) -> None:
    embedded_broker.faults.add("POST", "/api/v1/push", "status", status=200, body=_reply(["queued", "failed", "queued"]), times=1)
    qb = q.queue("rf").buffer(10, 600000)
    receipts = qb.push([{"data": i} for i in range(3)])
    assert qb.flush(10000) == 0
    st = q.get_buffer_stats()
    assert st["delivered"] == 3 and st["failed"] == 0 and st["duplicates"] == 0 and st["flushesPerformed"] == 1
    assert embedded_broker.request_count("POST", "/api/v1/push") == 2
    assert [m["transactionId"] for m in embedded_broker.messages("rf")] == [r["transaction_id"] for r in receipts]


def test_result_without_status_counts_as_failed(embedded_broker: Any, q: Queen) -> None:
    embedded_broker.faults.add("POST", "/api/v1/push", "status", status=200, body=_reply(["queued", None]), times=1)
    qb = q.queue("rn").buffer(10, 600000)
    qb.push([{"data": 0}, {"data": 1}])
    assert qb.flush(10000) == 0
    assert q.get_buffer_stats()["delivered"] == 2
    assert embedded_broker.request_count("POST", "/api/v1/push") == 2  # resent for the item without a status


def test_other_status_text_counts_as_delivered(embedded_broker: Any, q: Queen) -> None:
    embedded_broker.faults.add("POST", "/api/v1/push", "status", status=200, body=_reply(["queued", "stored-later"]), times=1)
    qb = q.queue("ro").buffer(10, 600000)
    qb.push([{"data": 0}, {"data": 1}])
    assert qb.flush(10000) == 0
    st = q.get_buffer_stats()
    assert st["delivered"] == 2 and st["failed"] == 0 and st["duplicates"] == 0
    assert embedded_broker.request_count("POST", "/api/v1/push") == 1


def test_duplicates_are_counted(embedded_broker: Any, q: Queen) -> None:
    items = [{"data": i, "transactionId": "dup-%d" % i} for i in range(4)]
    q.queue("rd").push(items[:3])  # stored before: the buffered batch gets 3 duplicates
    qb = q.queue("rd").buffer(10, 600000)
    qb.push(items)
    assert qb.flush(10000) == 0
    st = q.get_buffer_stats()
    assert st["delivered"] == 4 and st["duplicates"] == 3 and st["failed"] == 0
    assert [m["data"] for m in embedded_broker.messages("rd")] == [0, 1, 2, 3]


def test_batches_that_filled_during_a_send_go_without_a_flush(embedded_broker: Any, q: Queen) -> None:
    fault = embedded_broker.faults.add("POST", "/api/v1/push", "delay", delay_ms=300, times=1)
    qb = q.queue("rt").buffer(10, 600000)  # the time trigger is 10 minutes away
    for i in range(10):
        qb.push({"data": i})
    wait_for(lambda: fault.hits == 1, what="the first batch in flight")
    for i in range(10, 35):  # two more full batches (and 5) arrive while it is in flight
        qb.push({"data": i})
    wait_for(lambda: q.get_buffer_stats()["delivered"] == 30, what="three full batches delivered")
    assert q.get_buffer_stats()["totalBufferedMessages"] == 5
    assert qb.flush(5000) == 0
    assert [m["data"] for m in embedded_broker.messages("rt")] == list(range(35))
    assert embedded_broker.request_count("POST", "/api/v1/push") == 4
