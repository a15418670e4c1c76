"""Traces: Queen.trace, queen_sync.Message.trace (consumed messages), and the trace read routes."""

from __future__ import annotations

import copy
import json
import pickle
import threading
from typing import Any, Dict, List

import pytest

from queen_sync import BrokerError, InvalidInputError, Message, Queen
from queen_sync.tracing import bind_messages


def test_trace_round_trip(client: Queen, qname: str, unique_name: Any) -> None:
    group = unique_name("g")
    name = unique_name("checkout flow/äö")  # any text: the by-name path segment is URL-encoded
    client.queue(qname).partition("p").push({"data": {"order": 7}})
    (m,) = client.queue(qname).partition("p").group(group).pop()

    res = client.trace(m, [name, unique_name("audit")], {"step": "charged", "amount": 12})
    assert res["success"] is True and res["traceId"]
    client.trace(m, name, {"step": "shipped"}, event_type="processing")
    client.ack(m, True)

    traces = client.admin.get_traces_for_message(m["partitionId"], m["transactionId"])["traces"]
    assert len(traces) == 2
    by_step = {t["data"]["step"]: t for t in traces}
    assert by_step["charged"]["event_type"] == "info" and by_step["shipped"]["event_type"] == "processing"
    assert by_step["charged"]["consumer_group"] == group
    assert set(by_step["charged"]["trace_names"]) == {name, unique_name("audit")}
    assert by_step["charged"]["id"] == res["traceId"]

    named = client.admin.get_traces_by_name(name)["traces"]
    assert {t["data"]["step"] for t in named} == {"charged", "shipped"}
    assert len(client.admin.get_traces_by_name(name, limit=1)["traces"]) == 1
    names = {e["trace_name"]: e for e in client.admin.get_trace_names(limit=1000)["trace_names"]}
    assert names[name]["trace_count"] == 2


def test_trace_queue_mode_and_no_names(client: Queen, qname: str) -> None:
    client.queue(qname).partition("p").push({"data": 1})
    (m,) = client.queue(qname).partition("p").pop()
    client.trace(m, None, {"k": "v"})
    (t,) = client.admin.get_traces_for_message(m["partitionId"], m["transactionId"])["traces"]
    assert t["consumer_group"] == "__QUEUE_MODE__" and not t["trace_names"] and t["data"] == {"k": "v"}
    client.ack(m, True)


def test_trace_unknown_message_is_broker_error(client: Queen, qname: str) -> None:
    client.queue(qname).partition("p").push({"data": 1})
    (m,) = client.queue(qname).partition("p").pop()
    client.ack(m, True)
    ghost = dict(m, transactionId="no-such-transaction")
    with pytest.raises(BrokerError, match="Message not found"):
        client.trace(ghost, "x", {"a": 1})


@pytest.mark.parametrize(
    "args",
    [
        ({"transactionId": "t", "partitionId": "p"}, "n", None),  # data required
        ({"transactionId": "t", "partitionId": "p"}, "n", "not a dict"),
        ({"transactionId": "t"}, "n", {"a": 1}),  # no partitionId
        ("not a message", "n", {"a": 1}),
        ({"transactionId": "t", "partitionId": "p"}, "", {"a": 1}),
        ({"transactionId": "t", "partitionId": "p"}, ["ok", 3], {"a": 1}),
    ],
)
def test_trace_bad_input_sends_nothing(embedded_broker: Any, args: Any) -> None:
    with Queen(embedded_broker.url) as q:
        with pytest.raises(InvalidInputError):
            q.trace(*args)
        with pytest.raises(InvalidInputError):
            q.trace({"transactionId": "t", "partitionId": "p"}, "n", {"a": 1}, event_type="")
    assert embedded_broker.request_count() == 0


def test_message_is_a_plain_dict_that_traces(client: Queen, qname: str) -> None:
    client.queue(qname).partition("p").push([{"data": {"i": 0}}, {"data": {"i": 1}}])
    popped = client.queue(qname).partition("p").batch(2).pop()
    bound = bind_messages(client, popped)
    assert all(isinstance(m, Message) and isinstance(m, dict) for m in bound)
    assert bound == popped and list(bound[0].keys()) == list(popped[0].keys())
    assert json.loads(json.dumps(bound[0])) == json.loads(json.dumps(popped[0]))
    assert pickle.loads(pickle.dumps(bound[0])) == popped[0]
    assert type(copy.copy(bound[0])) is dict
    assert bind_messages(client, bound)[0] is bound[0]  # already bound: kept

    assert bound[1].trace("step", {"ok": True})["success"] is True
    (t,) = client.admin.get_traces_for_message(popped[1]["partitionId"], popped[1]["transactionId"])["traces"]
    assert t["data"] == {"ok": True}
    assert client.ack(bound, True)[1]["success"] is True  # acks take Message objects

    with pytest.raises(InvalidInputError):
        Message(popped[0]).trace("x", {"a": 1})  # not bound to a client


def test_consumed_messages_can_trace(client: Queen, qname: str, unique_name: Any) -> None:
    """The consume loop hands handlers queen_sync.Message objects (tracing.bind_messages)."""
    group = unique_name("g")
    client.queue(qname).partition("p").push([{"data": i} for i in range(2)])
    seen: List[Dict[str, Any]] = []
    errors: List[BaseException] = []
    lock = threading.Lock()

    def handler(m: Any) -> None:
        try:
            assert isinstance(m, Message)
            m.trace(["consumed"], {"i": m["data"]}, event_type="processing")
        except BaseException as exc:  # surfaced below, not nacked silently
            errors.append(exc)
        with lock:
            seen.append(dict(m))

    client.queue(qname).partition("p").group(group).each().limit(2).idle_millis(5000).consume(handler)
    assert not errors, errors
    assert len(seen) == 2
    for m in seen:
        (t,) = client.admin.get_traces_for_message(m["partitionId"], m["transactionId"])["traces"]
        assert t["data"] == {"i": m["data"]} and t["event_type"] == "processing" and t["consumer_group"] == group



def test_trace_data_nan_follows_the_clients_nan_as_null(queen_broker: Any, client: Queen, qname: str) -> None:
    client.queue(qname).partition("p").push({"data": 1})
    client.queue(qname).partition("c").push({"data": 2})
    (m,) = client.queue(qname).partition("p").pop()
    with pytest.raises(InvalidInputError, match=r"NaN / Infinity float at \$\.data\.x"):
        client.trace(m, "x", {"x": float("nan")})  # the default: refused, nothing sent
    # a client with nan_as_null=True was told to "opt in to nan_as_null" and refused all the same
    lenient = queen_broker.client(nan_as_null=True)
    consumed: List[Any] = []
    try:
        assert lenient.trace(m, "x", {"x": float("nan"), "y": [float("inf")]})["success"] is True
        (bound,) = bind_messages(lenient, [dict(m)])
        assert bound.trace("y", {"z": float("-inf")})["success"] is True

        def handler(msg: Any) -> None:  # a consumed message traces through the consumer's session
            msg.trace("c", {"w": float("nan")})
            consumed.append(msg)

        result = lenient.queue(qname).partition("c").group("tr").limit(1).consume(handler)
        assert result.failed == 0 and len(consumed) == 1
    finally:
        lenient.close()
    traces = client.admin.get_traces_for_message(m["partitionId"], m["transactionId"])["traces"]
    assert sorted(json.dumps(t["data"], sort_keys=True) for t in traces) == ['{"x": null, "y": [null]}', '{"z": null}']
    (c,) = consumed
    (t,) = client.admin.get_traces_for_message(c["partitionId"], c["transactionId"])["traces"]
    assert t["data"] == {"w": None}
    client.ack(m, True)


def test_trace_group_argument_is_recorded_as_the_traces_consumer_group(client: Queen, qname: str, unique_name: Any) -> None:
    group, other = unique_name("g"), unique_name("audit")
    client.queue(qname).partition("p").push({"data": 1})
    (m,) = client.queue(qname).partition("p").group(group).pop()
    assert client.trace(m, "x", {"by": "own"})["success"] is True
    assert client.trace(m, "x", {"by": "other"}, group=other)["success"] is True
    assert client.trace(m, "x", {"by": "queue"}, group="__QUEUE_MODE__")["success"] is True
    client.ack(m, True)
    traces = client.admin.get_traces_for_message(m["partitionId"], m["transactionId"])["traces"]
    assert {t["data"]["by"]: t["consumer_group"] for t in traces} == {
        "own": group, "other": other, "queue": "__QUEUE_MODE__"}


@pytest.mark.parametrize("group", ["", "a b", "x/y", "..", 7, "g" * 256])
def test_trace_bad_group_sends_nothing(embedded_broker: Any, group: Any) -> None:
    with Queen(embedded_broker.url) as q:
        with pytest.raises(InvalidInputError, match="consumer group"):
            q.trace({"transactionId": "t", "partitionId": "p"}, "n", {"a": 1}, group=group)
    assert embedded_broker.request_count() == 0


def test_message_trace_records_the_consumers_group_by_default_and_takes_group(
    client: Queen, qname: str, unique_name: Any
) -> None:
    group, other = unique_name("g"), unique_name("audit")
    client.queue(qname).partition("p").push({"data": 1})
    handled: List[Any] = []

    def handler(msg: Any) -> None:  # a consumed message: its trace() goes through the consumer's session
        assert msg.trace("x", {"by": "own"})["success"] is True
        assert msg.trace("x", {"by": "other"}, group=other)["success"] is True
        assert msg.trace("x", {"by": "queue"}, group="__QUEUE_MODE__")["success"] is True
        handled.append(msg)

    result = client.queue(qname).partition("p").group(group).limit(1).consume(handler)
    assert result.failed == 0 and len(handled) == 1
    (m,) = handled
    traces = client.admin.get_traces_for_message(m["partitionId"], m["transactionId"])["traces"]
    assert {t["data"]["by"]: t["consumer_group"] for t in traces} == {
        "own": group, "other": other, "queue": "__QUEUE_MODE__"}
    # a popped message takes group= too
    (p,) = client.queue(qname).partition("p").group(unique_name("g2")).pop()
    assert p.trace("y", {"by": "popped"}, group=other)["success"] is True
    client.ack(p, True)
    traces = client.admin.get_traces_for_message(p["partitionId"], p["transactionId"])["traces"]
    assert [t["consumer_group"] for t in traces if t["data"]["by"] == "popped"] == [other]


@pytest.mark.parametrize("group", ["", "a b", "x/y", 7, "g" * 256])
def test_message_trace_bad_group_sends_nothing(embedded_broker: Any, group: Any) -> None:
    with Queen(embedded_broker.url) as q:
        q.queue("mtg").push([{"data": 1}, {"data": 2}])
        (popped,) = q.queue("mtg").group("g").pop()
        with pytest.raises(InvalidInputError, match="consumer group"):
            popped.trace("n", {"a": 1}, group=group)
        errors: List[BaseException] = []

        def handler(msg: Any) -> None:
            try:
                msg.trace("n", {"a": 1}, group=group)
            except InvalidInputError as exc:
                errors.append(exc)

        q.queue("mtg").group("h").limit(1).consume(handler)
        assert len(errors) == 1 and "consumer group" in str(errors[0])
        q.ack(popped, True)
    assert embedded_broker.request_count("POST", "/api/v1/traces") == 0
