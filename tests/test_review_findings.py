"""Defects a newcomer review found in the queue builder, the acks and the consumer; each test
failed before its fix."""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Dict, List, Optional

import pytest

from queen_sync import InvalidInputError, Queen


def _requests(queen_broker: Any, method: str, prefix: str) -> Optional[int]:
    emb = queen_broker.embedded
    return None if emb is None else emb.request_count(method, prefix)


# --- C: namespace() / task() --------------------------------------------------------------


@pytest.mark.parametrize("setter", ["namespace", "task"])
@pytest.mark.parametrize(
    "value, match",
    [("x" * 256, "at most 255"), ("", "non-empty str"), (None, "non-empty str"), (7, "non-empty str")],
    ids=["256-chars", "empty", "none", "int"],
)
def test_a_bad_namespace_or_task_is_refused_before_anything_is_sent(
    queen: Queen, queen_queue: str, queen_broker: Any, setter: str, value: Any, match: str
) -> None:
    # the broker keeps them in VARCHAR(255) columns; a 300-character one was sent as is
    before = _requests(queen_broker, "POST", "/api/v1/configure")
    builder = queen.queue(queen_queue)
    with pytest.raises(InvalidInputError, match="%s .*%s|%s must be a %s" % (setter, match, setter, match)):
        getattr(builder, setter)(value).create()
    assert _requests(queen_broker, "POST", "/api/v1/configure") == before


def test_a_namespace_and_task_of_any_characters_up_to_255_are_sent(queen: Queen, queen_queue: str) -> None:
    # they travel in the JSON body (and as decoded query values), never in a path: the
    # broker takes any characters there, so only the length is bounded
    namespace, task = "billing eu/ü", "t" * 255
    doc = queen.queue(queen_queue).namespace(namespace).task(task).create()
    assert (doc["namespace"], doc["task"]) == (namespace, task)


# --- D: the renewal interval --------------------------------------------------------------


@pytest.mark.parametrize("interval", [1, 100, 499, 0, -5])
def test_a_renewal_interval_under_500_ms_is_refused_naming_the_unit(queen: Queen, queen_queue: str, interval: int) -> None:
    # renew_lease(True, 1) sent 165 renewals in 2 s for one lease
    with pytest.raises(InvalidInputError, match=r"interval_millis is in milliseconds and must be >= 500, got %d ms" % interval):
        queen.queue(queen_queue).renew_lease(True, interval)


def test_a_renewal_interval_of_500_ms_is_accepted(queen: Queen, queen_queue: str) -> None:
    assert queen.queue(queen_queue).renew_lease(True, 500)._consume_settings().renew_interval_millis == 500


# --- E: a handler that changes its message -------------------------------------------------


def _set_lease(m: Dict[str, Any]) -> None:
    m["leaseId"] = "00000000-0000-0000-0000-000000000000"


def _drop_ids(m: Dict[str, Any]) -> None:
    del m["transactionId"], m["partitionId"]


@pytest.mark.parametrize("mutate", [dict.clear, _set_lease, _drop_ids], ids=["clear", "leaseId", "ids"])
@pytest.mark.parametrize("each", [True, False], ids=["each", "batch"])
def test_a_handler_that_changes_its_message_still_gets_it_acked(
    queen: Queen, queen_queue: str, mutate: Callable[[Dict[str, Any]], None], each: bool
) -> None:
    # the ack was made from the handler's dict: ack_failures=1, and the message came back
    # only once its lease expired
    queen.queue(queen_queue).push([{"data": i} for i in range(3)])

    def handler(arg: Any) -> None:
        for m in [arg] if each else arg:
            mutate(m)

    builder = queen.queue(queen_queue).group("g").batch(3)
    builder = builder.each() if each else builder
    res = builder.limit(3).idle_millis(5000).consume(handler)
    assert (res.handled, res.acked, res.ack_failures, res.lost) == (3, 3, 0, 0)


def test_a_handler_that_changes_its_message_and_raises_still_gets_it_nacked(queen: Queen, queen_queue: str) -> None:
    queen.queue(queen_queue).push({"data": 1})

    def handler(m: Dict[str, Any]) -> None:
        m.clear()
        raise ValueError("bad")

    res = queen.queue(queen_queue).group("g").limit(1).idle_millis(5000).consume(handler)
    assert (res.failed, res.nacked, res.ack_failures) == (1, 1, 0)
    (again,) = queen.queue(queen_queue).group("g").pop()  # the nack made it due again at once
    assert again["data"] == 1


# --- F: a handler that acks its message itself under auto-ack ------------------------------


def test_a_handler_acking_itself_under_auto_ack_is_not_acked_twice(
    queen: Queen, queen_queue: str, queen_broker: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # it gave acked=1, ack_failures=2, lost=1 and two WARNINGs saying the broker refused the acks
    caplog.set_level(logging.INFO, logger="queen_sync.consumer")
    queen.queue(queen_queue).push([{"data": i} for i in range(3)])
    before = _requests(queen_broker, "POST", "/api/v1/ack")
    res = queen.queue(queen_queue).group("g").batch(3).each().limit(3).idle_millis(5000).consume(lambda m: m.ack())
    assert (res.handled, res.acked, res.ack_failures, res.lost, res.skipped) == (3, 3, 0, 0, 0)
    if before is not None:
        assert _requests(queen_broker, "POST", "/api/v1/ack") == before + 3  # the handler's three only
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("acks messages itself while auto-ack is on" in r.getMessage() for r in caplog.records)
    assert queen.queue(queen_queue).group("g").pop() == []


def test_a_handler_acking_its_list_through_the_client_is_counted_as_acked(queen: Queen, queen_queue: str) -> None:
    queen.queue(queen_queue).push([{"data": i} for i in range(3)])
    res = queen.queue(queen_queue).group("g").batch(3).limit(3).idle_millis(5000).consume(lambda ms: queen.ack(ms))
    assert (res.handled, res.acked, res.ack_failures, res.lost) == (3, 3, 0, 0)


def test_a_handler_acking_in_a_committed_transaction_is_not_acked_twice(
    queen: Queen, queen_queue: str, unique_name: Any
) -> None:
    out = unique_name("out")
    queen.queue(queen_queue).push({"data": 1})

    def handler(m: Dict[str, Any]) -> None:
        queen.transaction().queue(out).push({"data": m["data"] + 1}).ack(m).commit()

    res = queen.queue(queen_queue).group("g").limit(1).idle_millis(5000).consume(handler)
    assert (res.acked, res.ack_failures, res.lost) == (1, 0, 0)
    assert [m["data"] for m in queen.queue(out).pop()] == [2]


def test_a_handler_nacking_itself_is_counted_as_nacked_and_the_rest_of_its_pop_skipped(
    queen: Queen, queen_queue: str
) -> None:
    # a nack releases the partition's lease: the consumer neither nacks it again nor acks
    # the other messages of the pop (both would be refused); the broker redelivers them
    queen.queue(queen_queue).push([{"data": i} for i in range(3)])
    stop = threading.Event()

    def handler(m: Any) -> None:
        m.nack("no")
        stop.set()

    res = queen.queue(queen_queue).group("g").batch(3).each().idle_millis(5000).consume(handler, stop_event=stop)
    assert (res.handled, res.nacked, res.skipped, res.ack_failures) == (1, 1, 2, 0)
    again: List[Dict[str, Any]] = queen.queue(queen_queue).group("g").batch(3).pop()
    assert [m["data"] for m in again] == [0, 1, 2]


# --- G: acking a message popped with auto_ack(True) ----------------------------------------


@pytest.mark.parametrize(
    "ack",
    [
        lambda q, m: m.ack(),
        lambda q, m: m.nack("x"),
        lambda q, m: q.ack(m, False),
        lambda q, m: q.ack([m], "retry"),
        lambda q, m: q.transaction().ack(m),
    ],
    ids=["msg.ack", "msg.nack", "queen.ack", "queen.ack-list", "transaction"],
)
def test_an_ack_of_an_auto_acked_message_is_refused_before_sending(
    queen: Queen, queen_queue: str, queen_broker: Any, ack: Callable[[Queen, Any], Any]
) -> None:
    # it went out without a lease (nothing to fence it) and could redeliver a message the
    # pop had already committed; renew() refused such a message already
    queen.queue(queen_queue).push({"data": 1})
    (m,) = queen.queue(queen_queue).auto_ack(True).pop()
    before = (_requests(queen_broker, "POST", "/api/v1/ack"), _requests(queen_broker, "POST", "/api/v1/transaction"))
    with pytest.raises(InvalidInputError, match=r"no lease \(popped with auto_ack\(True\)\)"):
        ack(queen, m)
    with pytest.raises(InvalidInputError, match="no leaseId"):
        m.renew()
    after = (_requests(queen_broker, "POST", "/api/v1/ack"), _requests(queen_broker, "POST", "/api/v1/transaction"))
    assert after == before
    assert queen.queue(queen_queue).pop() == []  # still consumed
