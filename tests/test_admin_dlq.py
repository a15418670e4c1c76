"""queue(q).dlq(group).limit(n).offset(n).get(): dead-letter round trips and client-side paging."""

from __future__ import annotations

from typing import Any, Dict, List

import pytest

from queen_sync import DLQBuilder, InvalidInputError, Queen


def test_consumer_nack_past_retry_limit_lands_in_dlq(client: Queen, qname: str, unique_name: Any) -> None:
    group = unique_name("g")
    client.queue(qname).config({"retry_limit": 1}).create()
    client.queue(qname).partition("p").push([{"data": "poison"}, {"data": "fine"}])
    calls: List[Any] = []

    def handler(m: Dict[str, Any]) -> None:
        calls.append(m["data"])
        if m["data"] == "poison":
            raise ValueError("cannot parse order 42")

    res = client.queue(qname).partition("p").group(group).each().limit(3).idle_millis(5000).consume(handler)
    assert calls == ["poison", "poison", "fine"]  # retry_limit 1: two deliveries, then the DLQ
    assert res.handled == 3

    rows = client.queue(qname).dlq(group).get()
    assert len(rows) == 1
    row = rows[0]
    assert row["data"] == "poison" and row["consumerGroup"] == group and row["queue"] == qname
    assert "cannot parse order 42" in row["errorMessage"]
    assert row["retryCount"] == 1
    assert row["partition"] == "p" and row["transactionId"]
    assert client.queue(qname).dlq("someone-else").get() == []


def test_manual_nack_and_status_dlq(client: Queen, qname: str, unique_name: Any) -> None:
    group = unique_name("g")
    client.queue(qname).config({"retry_limit": 0}).create()
    client.queue(qname).partition("p").push([{"data": "a"}, {"data": "b"}])
    b = client.queue(qname).partition("p").group(group)
    (m,) = b.pop()
    r = client.ack(m, False, {"group": group, "error": "bad a"})
    assert r["dlq"] is True
    (m,) = b.pop()
    client.ack(m, "dlq", {"group": group, "error": "bad b"})
    rows = client.queue(qname).dlq(group).get()
    assert {(x["data"], x["errorMessage"], x["retryCount"]) for x in rows} == {("a", "bad a", 0), ("b", "bad b", 0)}
    assert b.pop() == []


def _dlq_three(client: Queen, qname: str, group: str) -> None:
    client.queue(qname).partition("p").push([{"data": i} for i in range(2)])
    client.queue(qname).partition("q").push([{"data": 2}])
    for part in ("p", "p", "q"):
        (m,) = client.queue(qname).partition(part).group(group).pop()
        client.ack(m, "dlq", {"group": group, "error": "e%s" % m["data"]})


def test_limit_and_offset_are_applied_client_side(client: Queen, qname: str, unique_name: Any) -> None:
    group = unique_name("g")
    _dlq_three(client, qname, group)
    d = client.queue(qname).dlq(group)
    full = d.get()
    assert sorted(r["data"] for r in full) == [0, 1, 2]
    assert d.limit(1).get() == full[:1]  # a 0.15 broker ignores limit
    assert d.offset(1).get() == full[1:]  # ... and answers offset>=1 with {"value": null}
    assert d.offset(1).limit(1).get() == full[1:2]
    assert d.offset(3).get() == [] and d.offset(100).limit(5).get() == []
    assert d.get() == full  # setters returned new builders


def test_partition_filter_and_all_groups(client: Queen, qname: str, unique_name: Any) -> None:
    group = unique_name("g")
    _dlq_three(client, qname, group)
    assert sorted(r["data"] for r in client.queue(qname).dlq(group).partition("p").get()) == [0, 1]
    assert [r["data"] for r in client.queue(qname).partition("q").dlq(group).get()] == [2]
    # "Default" names the partition of that name here (no wildcard as for pop): none of ours
    assert client.queue(qname).partition("Default").dlq().get() == []
    assert len(client.queue(qname).dlq().get()) == 3  # no partition set: every partition
    # queue mode is a group of its own
    client.queue(qname).partition("p").push({"data": "qm"})
    (m,) = client.queue(qname).partition("p").pop()
    while m["data"] != "qm":  # queue mode sees the whole history; skip to ours
        client.ack(m, True)
        (m,) = client.queue(qname).partition("p").pop()
    client.ack(m, "dlq", {"error": "queue mode"})
    rows = client.queue(qname).dlq().get()
    assert len(rows) == 4
    assert [r["data"] for r in client.queue(qname).dlq("__QUEUE_MODE__").get()] == ["qm"]


def test_empty_dlq(client: Queen, qname: str) -> None:
    client.queue(qname).create()
    assert client.queue(qname).dlq().get() == []
    assert client.queue(qname).dlq().offset(2).get() == []


def spy_requests(q: Queen, monkeypatch: pytest.MonkeyPatch) -> List[Any]:
    """The ``(method, path, query)`` of every request ``q`` sends from now on (a list that grows)."""
    sent: List[Any] = []
    real = q._session.request

    def spy(method: str, path: str, **kw: Any) -> Any:
        sent.append((method, path, kw.get("query")))
        return real(method, path, **kw)

    monkeypatch.setattr(q._session, "request", spy)
    return sent


def test_dlq_wire_query(embedded_broker: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    with Queen(embedded_broker.url) as q:
        sent = spy_requests(q, monkeypatch)
        builder = q.queue("orders").dlq("billing").limit(5).offset(1)
        assert isinstance(builder, DLQBuilder)
        assert builder.get() == []
        # limit / offset never reach the broker (it mishandles them)
        assert sent == [("GET", "/api/v1/dlq", {"queue": "orders", "consumerGroup": "billing"})]
        assert embedded_broker.request_count("GET", "/api/v1/dlq") == 1


@pytest.mark.parametrize(
    "make",
    [
        lambda q: q.queue("ok").dlq("a b"),
        lambda q: q.queue("ok").dlq().limit(0),
        lambda q: q.queue("ok").dlq().offset(-1),
        lambda q: q.queue("ok").dlq().partition("x/y"),
        lambda q: q.queue("ok").dlq().limit(True),
    ],
)
def test_dlq_bad_input(embedded_broker: Any, make: Any) -> None:
    with Queen(embedded_broker.url) as q:
        with pytest.raises(InvalidInputError):
            make(q)
    assert embedded_broker.request_count() == 0


def test_builder_group_and_default_partition_reach_the_dlq_read(client: Queen, qname: str, unique_name: Any) -> None:
    g, h = unique_name("g"), unique_name("h")
    client.queue(qname).push([{"data": "d0"}, {"data": "d1"}])  # the Default partition
    client.queue(qname).partition("p").push({"data": "p0"})
    for group in (g, h):
        done = 0
        while done < 3:  # wildcard pops ("Default" is a wildcard for pop) until all three are out
            popped = client.queue(qname).group(group).batch(2).pop()
            assert popped, "the broker stopped handing out messages"
            for m in popped:
                client.ack(m, "dlq", {"group": group})
            done += len(popped)
    by_g = client.queue(qname).group(g)
    assert sorted(r["data"] for r in by_g.dlq().get()) == ["d0", "d1", "p0"]  # g's rows only
    assert {r["consumerGroup"] for r in by_g.dlq().get()} == {g}
    assert sorted(r["data"] for r in by_g.dlq(g).get()) == ["d0", "d1", "p0"]  # the same group: fine
    assert sorted(r["data"] for r in by_g.partition("Default").dlq().get()) == ["d0", "d1"]
    assert [r["data"] for r in by_g.partition("p").dlq().get()] == ["p0"]
    assert sorted(r["data"] for r in client.queue(qname).partition("Default").dlq(h).get()) == ["d0", "d1"]
    assert len(client.queue(qname).dlq().get()) == 6


def test_builder_group_is_sent_and_a_conflicting_dlq_group_refused(embedded_broker: Any,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    with Queen(embedded_broker.url) as q:
        sent = spy_requests(q, monkeypatch)
        assert q.queue("orders").group("billing").partition("Default").dlq().get() == []
        assert sent == [("GET", "/api/v1/dlq", {"queue": "orders", "consumerGroup": "billing"})]
        with pytest.raises(InvalidInputError, match=r"dlq\('audit'\) on a builder of consumer group 'billing'"):
            q.queue("orders").group("billing").dlq("audit")
        with pytest.raises(InvalidInputError, match="consumer group"):
            q.queue("orders").group("billing").dlq("a b")
        assert len(sent) == 1
