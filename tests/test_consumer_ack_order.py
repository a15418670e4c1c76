"""Acks of one partition leave the client in pop order (issue 11, item 4).

The broker keeps one cursor per (partition, consumer group) and a ``completed`` ack sets it
to the acked message, also backwards (``tests/test_broker_cursor.py``): an ack sent out of
order makes the broker hand messages out again. ``Queen.ack(list)`` sorts each partition's
messages into pop order (``createdAt``, ``id``) and the consumer only acks in pop order.
Checked on a fake requester that records every ack body in the order it was sent.
"""

from __future__ import annotations

import threading
from typing import Any, Dict, List, Optional

from queen_sync import acks
from queen_sync.queues import QueueBuilder

from _helpers import FakeConsumerSession


def _msg(pid: str, n: int, created: str) -> Dict[str, Any]:
    return {
        "id": "01a22b1d-4804-7%03d-b779-2ce8473d3735" % n,
        "transactionId": "tx-%s-%d" % (pid, n),
        "partitionId": "pid-" + pid,
        "partition": pid,
        "leaseId": "lease-1",
        "consumerGroup": "g",
        "createdAt": created,
        "data": {"p": pid, "n": n},
    }


class FakeRequester(FakeConsumerSession):
    """Answers pops from a script and accepts every ack, recording the acked transactionIds
    in the order the client sent them."""

    def __init__(self, pops: Optional[List[List[Dict[str, Any]]]] = None) -> None:
        super().__init__(pops)
        self.acked: List[str] = []

    def answer_acks(self, doc: Dict[str, Any], items: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
        with self.lock:
            self.acked.extend(a["transactionId"] for a in items)
        return [
            {"index": i, "transactionId": a["transactionId"], "success": True, "error": None, "leaseReleased": False}
            for i, a in enumerate(items)
        ]


def test_a_list_ack_sends_each_partition_in_pop_order() -> None:
    a1 = _msg("a", 1, "2026-11-30T06:21:09.00264Z")  # a shorter fraction: .002640 s
    a2 = _msg("a", 2, "2026-11-30T06:21:09.002646Z")
    a3 = _msg("a", 3, "2026-11-30T06:21:10Z")
    b1 = _msg("b", 4, "2026-11-30T06:21:08.5Z")
    b2 = _msg("b", 5, "2026-11-30T06:21:08.5Z")  # same createdAt: the id decides
    fake = FakeRequester()
    given = [a3, b2, a1, b1, a2]
    res = acks.ack(fake, given, True, {"group": "g"})
    assert fake.acked == ["tx-a-1", "tx-a-2", "tx-a-3", "tx-b-4", "tx-b-5"]
    # results stay in the caller's order, index = input position
    assert [(r["index"], r["transactionId"]) for r in res] == [(i, m["transactionId"]) for i, m in enumerate(given)]


def test_messages_without_order_fields_keep_the_callers_order() -> None:
    fake = FakeRequester()
    hand_made = [{"transactionId": t, "partitionId": "p"} for t in ("t3", "t1", "t2")]
    acks.ack(fake, hand_made, True)
    assert fake.acked == ["t3", "t1", "t2"]


def test_consumer_acks_each_partition_in_pop_order_with_out_of_order_completion() -> None:
    # one pop over three partitions, interleaved; with 3 workers the handlers of "a" and "b"
    # wait until every message of "c" is handled: completion order differs from pop order
    popped = []
    for n in range(1, 4):
        for k, pid in enumerate("abc"):
            popped.append(_msg(pid, n * 10 + k, "2026-11-30T06:21:%02d.000001Z" % n))
    fake = FakeRequester([popped])
    c_done = threading.Event()
    handled: List[str] = []
    guard = threading.Lock()

    def handler(m: Dict[str, Any]) -> None:
        if m["partition"] != "c":
            assert c_done.wait(10), "partition c never finished"
        with guard:
            handled.append(m["transactionId"])
            if sum(1 for t in handled if t.startswith("tx-c-")) == 3:
                c_done.set()

    builder = QueueBuilder(fake, "q").group("g").batch(9).partitions(3).wait(False).each().concurrency(3).limit(9)  # type: ignore[arg-type]
    res = builder.consume(handler)
    assert (res.handled, res.acked, res.reason) == (9, 9, "limit"), res
    assert handled[:3] == ["tx-c-12", "tx-c-22", "tx-c-32"]  # c first: out of pop order
    for pid in "abc":
        sent = [t for t in fake.acked if t.startswith("tx-%s-" % pid)]
        assert sent == ["tx-%s-%d" % (pid, n * 10 + "abc".index(pid)) for n in range(1, 4)], (pid, fake.acked)
