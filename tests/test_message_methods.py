"""Keyword forms (issue 13 item 4): ``q.ack(msg, status=, group=, error=)``, ``q.renew(msg,
seconds=)``, and ``msg.ack()`` / ``msg.nack(error)`` / ``msg.renew()`` on popped and consumed
messages; the positional forms keep working (tests/test_client_ack.py)."""

from __future__ import annotations

import copy
import pickle
import threading
from typing import Any, Dict, List

import pytest

from queen_sync import InvalidInputError, Message, Queen


def test_popped_messages_are_bound_dicts(client: Queen, qname: str, unique_name: Any) -> None:
    client.queue(qname).partition("p").push({"data": {"n": 1}})
    (m,) = client.queue(qname).partition("p").group(unique_name("g")).pop()
    assert isinstance(m, Message) and isinstance(m, dict)
    assert m == dict(m) and m["data"] == {"n": 1}
    assert type(pickle.loads(pickle.dumps(m))) is dict and type(copy.copy(m)) is dict


def test_msg_ack_settles_a_popped_message(client: Queen, qname: str, unique_name: Any) -> None:
    group = unique_name("g")
    client.queue(qname).partition("p").push([{"data": 1}, {"data": 2}])
    b = client.queue(qname).partition("p").group(group)
    (m,) = b.pop()
    r = m.ack()
    assert r["success"] is True and r["transactionId"] == m["transactionId"]
    (m2,) = b.pop()
    assert m2["data"] == 2  # the first one is done for this group
    m2.ack("completed", group=group)
    assert b.pop() == []


def test_msg_nack_and_keyword_ack_carry_the_error(client: Queen, qname: str, unique_name: Any) -> None:
    group = unique_name("g")
    client.queue(qname).config({"retry_limit": 0}).create()
    client.queue(qname).partition("p").push([{"data": "a"}, {"data": "b"}])
    b = client.queue(qname).partition("p").group(group)
    (m,) = b.pop()
    assert m.nack("bad a")["dlq"] is True
    (m,) = b.pop()
    client.ack(m, status="dlq", group=group, error="bad b")
    rows = client.queue(qname).dlq(group).get()
    assert {(x["data"], x["errorMessage"]) for x in rows} == {("a", "bad a"), ("b", "bad b")}


def test_msg_nack_redelivers(client: Queen, qname: str, unique_name: Any) -> None:
    group = unique_name("g")
    client.queue(qname).config({"retry_limit": 3}).create()
    client.queue(qname).partition("p").push({"data": "x"})
    b = client.queue(qname).partition("p").group(group)
    (m,) = b.pop()
    m.nack()
    (again,) = b.pop()
    assert again["transactionId"] == m["transactionId"]
    again.ack()


def test_keyword_ack_of_a_list(client: Queen, qname: str, unique_name: Any) -> None:
    group = unique_name("g")
    client.queue(qname).partition("p").push([{"data": i} for i in range(3)])
    msgs = client.queue(qname).partition("p").group(group).batch(3).pop()
    out = client.ack(msgs, status="completed", group=group)
    assert [r["index"] for r in out] == [0, 1, 2] and all(r["success"] for r in out)
    assert client.queue(qname).partition("p").group(group).pop() == []


def test_keyword_and_context_must_agree(client: Queen, qname: str, unique_name: Any) -> None:
    client.queue(qname).partition("p").push({"data": 1})
    (m,) = client.queue(qname).partition("p").group("g1").pop()
    with pytest.raises(InvalidInputError):
        client.ack(m, True, {"group": "g1"}, group="g2")
    with pytest.raises(InvalidInputError):
        client.ack(m, False, {"error": "a"}, error="b")
    with pytest.raises(InvalidInputError):
        client.ack(m, False, error=5)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        client.ack(m, True, group="bad group")
    assert client.ack(m, True, {"group": "g1"}, group="g1")["success"] is True  # same value: fine


def test_renew_keyword_and_msg_renew(client: Queen, qname: str, unique_name: Any) -> None:
    client.queue(qname).partition("p").push({"data": 1})
    (m,) = client.queue(qname).partition("p").group(unique_name("g")).pop()
    r = client.renew(m, seconds=120)
    assert r["success"] is True and r["leaseId"] == m["leaseId"] and r["expiresAt"]
    r2 = m.renew(30)
    assert r2["success"] is True and r2["expiresAt"]
    assert m.renew()["success"] is True
    m.ack()


def test_auto_acked_pop_has_no_lease_to_renew(client: Queen, qname: str) -> None:
    client.queue(qname).partition("p").push({"data": 1})
    (m,) = client.queue(qname).partition("p").auto_ack(True).pop()
    with pytest.raises(InvalidInputError):
        m.renew()


def test_an_unbound_message_says_so() -> None:
    m = Message({"transactionId": "t", "partitionId": "p"})
    for call in (m.ack, m.nack, m.renew):
        with pytest.raises(InvalidInputError, match="not bound"):
            call()


def test_consumed_messages_ack_themselves(client: Queen, qname: str, unique_name: Any) -> None:
    group = unique_name("g")
    client.queue(qname).partition("p").push([{"data": i} for i in range(4)])
    results: List[Dict[str, Any]] = []
    lock = threading.Lock()

    def handler(m: Message) -> None:
        r = m.ack()
        with lock:
            results.append(r)

    res = (client.queue(qname).group(group).each().auto_ack(False).limit(4).idle_millis(2000)
           .consume(handler))
    assert res.handled == 4 and res.acked == 0  # acked by the handler, not by the consumer
    assert len(results) == 4 and all(r["success"] for r in results)
    assert client.queue(qname).group(group).batch(10).pop() == []


def test_bound_type_copies_and_binds_in_c() -> None:
    # the consume loop maps bound_type(client) over each pop: each copy is a bound Message,
    # a dict of its own (what a handler does to it cannot reach the consumer's dict), whose
    # calls go through that client, and which pickles / copies as a plain dict
    from queen_sync.message import bound_type

    calls: List[Any] = []

    class Client:
        def ack(self, message: Any, status: Any = True, context: Any = None, **kw: Any) -> Dict[str, Any]:
            calls.append(("ack", message, status, kw))
            return {"success": True}

    client = Client()
    cls = bound_type(client)  # type: ignore[arg-type]
    popped = [{"transactionId": "t%d" % i, "partitionId": "p", "data": {"i": i}} for i in range(3)]
    given = list(map(cls, popped))
    assert given == popped and all(g is not p for g, p in zip(given, popped))
    assert all(isinstance(g, Message) and type(g) is cls for g in given)
    assert type(given[0]).__name__ == "Message" and given[0]._queen is client
    given[0]["transactionId"] = "changed"
    given[1].clear()
    assert popped[0]["transactionId"] == "t0" and popped[1]["data"] == {"i": 1}
    assert given[2].nack("boom") == {"success": True}
    assert calls == [("ack", given[2], "failed", {"group": None, "error": "boom"})]
    assert type(pickle.loads(pickle.dumps(given[2]))) is dict and type(copy.copy(given[2])) is dict
    with pytest.raises(AttributeError):
        given[2]._queen = None  # the client of a bound type is fixed
    assert bound_type(client) is not cls  # one per consumer: no cache keeps a client alive


def test_closed_client_refuses_msg_ack(broker_url: str, qname: str) -> None:
    from queen_sync import ClientClosedError

    q = Queen(broker_url)
    q.queue(qname).partition("p").push({"data": 1})
    (m,) = q.queue(qname).partition("p").group("g").pop()
    q.close()
    with pytest.raises(ClientClosedError):
        m.ack()


def test_ack_after_this_client_nacked_the_message_says_so(client: Queen, qname: str, unique_name: Any) -> None:
    from queen_sync import AckError

    group = unique_name("g")
    client.queue(qname).config({"retry_limit": 3}).create()
    client.queue(qname).partition("p").push([{"data": 1}, {"data": 2}])
    b = client.queue(qname).partition("p").group(group)
    first, second = b.batch(2).pop()
    assert first.nack("bad")["leaseReleased"] is True
    with pytest.raises(AckError) as single:
        first.ack()
    text = str(single.value)
    assert "Invalid or expired lease" in text
    assert text.endswith(
        "(this client already nacked it: that released the lease of its pop, so this ack comes too late; "
        "the broker redelivers it: ack the redelivered copy)"
    )
    with pytest.raises(AckError) as listed:
        client.ack([first, second], True)
    assert "(this client already nacked %s: that released the lease of their pop" % first["transactionId"] in str(
        listed.value
    )
    # a message this client never nacked gets the broker's words only
    with pytest.raises(AckError) as other:
        second.ack()
    assert "already nacked" not in str(other.value)
    # the redelivered copy is the one to ack
    again = b.batch(2).pop()
    assert [m["transactionId"] for m in again] == [first["transactionId"], second["transactionId"]]
    assert [r["success"] for r in client.ack(again, True)] == [True, True]
