"""Ack cursors move exactly as on a real Queen 0.15 broker, also backwards (issue 11, item 4).

A broker keeps ONE cursor per (partition, consumer group): the last acked message
(``last_consumed_id``). A ``completed`` ack sets it to that message, whether it lies after or
before the current one, so acking 3, 1, 2 of a popped batch leaves the cursor on 2 and the next
pop hands out 3 again. Only the acks of one ``/ack/batch`` call are applied in message order.

Written as recorded exchanges (request, then the reply fields that matter), replayed in order
against the broker under test: the embedded one, or a real one with ``QUEEN_URL``.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

from _broker_http import RawHTTP, unique


@pytest.fixture(scope="module")
def http(broker_url: str) -> Iterator[RawHTTP]:
    yield RawHTTP(broker_url)


@pytest.fixture
def q(http: RawHTTP) -> Iterator[str]:
    name = unique("cursor")
    yield name
    http.delete_queue(name)


def _pop_ns(http: RawHTTP, q: str, group: Optional[str], batch: int) -> Tuple[List[int], dict]:
    params: Dict[str, Any] = {"batch": batch, "wait": True, "timeout": 2000}
    if group is not None:
        params["consumerGroup"] = group
    body = http.pop(q, "p1", **params)
    return [m["data"]["n"] for m in body["messages"]], body


def _exchange(http: RawHTTP, path: str, body: Any) -> Any:
    status, reply = http.request("POST", path, body)
    assert status == 200, (path, status, reply)
    return reply


@pytest.mark.parametrize("group", [None, "g-cursor"])
def test_out_of_order_acks_move_the_cursor_back(http: RawHTTP, q: str, group: Optional[str]) -> None:
    http.push(q, [{"n": i} for i in range(1, 6)], partition="p1")
    ns, popped = _pop_ns(http, q, group, 3)
    assert ns == [1, 2, 3]
    by_n = {m["data"]["n"]: m for m in popped["messages"]}
    lease = popped["leaseId"]
    extra = {"consumerGroup": group} if group else {}
    # exchange: ack 3, then 1, then 2 (each with the pop's lease)
    replies = []
    for n in (3, 1, 2):
        m = by_n[n]
        replies.append(_exchange(http, "/api/v1/ack", dict(
            {"transactionId": m["transactionId"], "partitionId": m["partitionId"], "status": "completed",
             "leaseId": lease}, **extra))[0])
    assert [(r["success"], r["error"], r["leaseReleased"]) for r in replies] == \
        [(True, None, False), (True, None, False), (True, None, True)]
    # the cursor now sits on 2: the next pop hands out 3 again, then 4 and 5
    ns, _ = _pop_ns(http, q, group, 10)
    assert ns == [3, 4, 5]


def test_acks_of_one_batch_call_are_applied_in_message_order(http: RawHTTP, q: str) -> None:
    http.push(q, [{"n": i} for i in range(1, 6)], partition="p1")
    ns, popped = _pop_ns(http, q, "g-batch", 3)
    assert ns == [1, 2, 3]
    by_n = {m["data"]["n"]: m for m in popped["messages"]}
    acks = [{"transactionId": by_n[n]["transactionId"], "partitionId": by_n[n]["partitionId"],
             "status": "completed", "leaseId": popped["leaseId"]} for n in (3, 1, 2)]
    res = _exchange(http, "/api/v1/ack/batch", {"consumerGroup": "g-batch", "acknowledgments": acks})
    # results in input order; the lease is released by the ack applied last (message 3)
    assert [(r["transactionId"], r["success"], r["leaseReleased"]) for r in res] == \
        [(by_n[3]["transactionId"], True, True), (by_n[1]["transactionId"], True, False),
         (by_n[2]["transactionId"], True, False)]
    ns, _ = _pop_ns(http, q, "g-batch", 10)
    assert ns == [4, 5]


def test_an_unfenced_ack_of_an_old_message_rewinds_a_finished_cursor(http: RawHTTP, q: str) -> None:
    http.push(q, [{"n": i} for i in range(1, 4)], partition="p1")
    ns, popped = _pop_ns(http, q, "g-rewind", 3)
    assert ns == [1, 2, 3]
    first = popped["messages"][0]
    res = _exchange(http, "/api/v1/ack/batch", {"consumerGroup": "g-rewind", "acknowledgments": [
        {"transactionId": m["transactionId"], "partitionId": m["partitionId"], "status": "completed",
         "leaseId": popped["leaseId"]} for m in popped["messages"]]})
    assert [r["leaseReleased"] for r in res] == [False, False, True]
    assert _pop_ns(http, q, "g-rewind", 10)[0] == []  # finished: nothing after 3
    # a late (or hand-written) ack of message 1 without a lease is not fenced: it moves the cursor back
    r = _exchange(http, "/api/v1/ack", {"transactionId": first["transactionId"],
                                        "partitionId": first["partitionId"], "consumerGroup": "g-rewind",
                                        "status": "completed"})[0]
    assert r["success"] and r["error"] is None
    ns, _ = _pop_ns(http, q, "g-rewind", 10)
    assert ns == [2, 3]


def test_a_transaction_ack_of_an_earlier_message_moves_the_cursor_back(http: RawHTTP, q: str) -> None:
    http.push(q, [{"n": i} for i in range(1, 4)], partition="p1")
    ns, popped = _pop_ns(http, q, "g-tx", 3)
    assert ns == [1, 2, 3]
    m1, m3 = popped["messages"][0], popped["messages"][2]
    res = _exchange(http, "/api/v1/transaction", {"operations": [
        {"type": "ack", "transactionId": m3["transactionId"], "partitionId": m3["partitionId"],
         "consumerGroup": "g-tx", "status": "completed"},
        {"type": "ack", "transactionId": m1["transactionId"], "partitionId": m1["partitionId"],
         "consumerGroup": "g-tx", "status": "completed"}]})
    assert res["success"] is True, res
    # two acks of a 3-message batch: the lease is still held; once given back, 2 and 3 return
    _exchange(http, "/api/v1/ack", {"transactionId": m3["transactionId"], "partitionId": m3["partitionId"],
                                    "consumerGroup": "g-tx", "status": "retry", "leaseId": popped["leaseId"]})
    ns, _ = _pop_ns(http, q, "g-tx", 10)
    assert ns == [2, 3]
