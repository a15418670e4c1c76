"""The unbuffered push's results: one per item, in order; items the broker answers
``failed`` raise :class:`BrokerError` (``.body`` all the results, ``.error`` the first
failure, ``.items`` the safe re-push); ``queued`` / ``duplicate`` / ``buffered`` do not."""

from __future__ import annotations

from typing import Any, Dict, List

import pytest

from queen_sync import BrokerError, Queen
from queen_sync.wire import messages as wire_messages


def _results(statuses: List[str]) -> List[Dict[str, Any]]:
    out: List[Dict[str, Any]] = []
    for i, st in enumerate(statuses):
        r: Dict[str, Any] = {"index": i, "status": st, "transaction_id": "t%d" % i, "queueName": "pr"}
        if st == "failed":
            r["error"] = "disk full %d" % i
        out.append(r)
    return out


def test_failed_items_raise_with_results_and_items(embedded_broker: Any) -> None:
    reply = _results(["queued", "failed", "duplicate", "failed"])
    embedded_broker.faults.add("POST", "/api/v1/push", "status", status=200, body=reply, times=1)
    items = [{"data": i, "transactionId": "tx-%d" % i} for i in range(4)]
    with Queen(embedded_broker.url) as q:
        with pytest.raises(BrokerError) as info:
            q.queue("pr").push(items)
    err = info.value
    assert "2 of 4 pushed items failed: disk full 1, disk full 3" in str(err)
    assert err.error == "disk full 1"
    assert err.body == reply
    assert err.status == 200
    assert err.items == [{"payload": i, "transactionId": "tx-%d" % i} for i in range(4)]
    assert embedded_broker.request_count("POST", "/api/v1/push") == 1  # a failed item is not a lost reply


@pytest.mark.parametrize("statuses", [["queued"], ["queued", "duplicate", "buffered"]])
def test_no_failed_item_returns_the_results(embedded_broker: Any, statuses: List[str]) -> None:
    reply = _results(statuses)
    embedded_broker.faults.add("POST", "/api/v1/push", "status", status=201, body=reply, times=1)
    with Queen(embedded_broker.url) as q:
        got = q.queue("pr").push([{"data": i} for i in range(len(statuses))])
    assert got == reply


def test_wire_push_counts_failed_items(embedded_broker: Any) -> None:
    """wire.messages.push returns ``(results, status, failed)`` with the reply's failed
    count, with and without the push retry budget."""
    reply = _results(["failed", "queued", "failed"])
    with Queen(embedded_broker.url) as q:
        for budget in (True, False):
            embedded_broker.faults.add("POST", "/api/v1/push", "status", status=200, body=reply, times=1)
            body = b'{"items":[{"queue":"pr","payload":1,"transactionId":"a"},{"queue":"pr","payload":2,' \
                   b'"transactionId":"b"},{"queue":"pr","payload":3,"transactionId":"c"}]}'
            results, status, failed = wire_messages.push(
                q._session, body, queue="pr", partition=None, count=3, budget=budget
            )
            assert (results, status, failed) == (reply, 200, 2)
        results, status, failed = wire_messages.push(q._session, body, queue="pr", partition="p", count=3)
        assert failed == 0 and status in (200, 201) and [r["status"] for r in results] == ["queued"] * 3
