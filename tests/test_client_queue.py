"""Queue builder against a broker: create / config / delete, push, pop, input validation."""

from __future__ import annotations

import datetime as dt
import threading
import uuid
from typing import Any, Dict, List

import pytest

from queen_sync import InvalidInputError, Queen, codec

BAD_NAMES = ["", "a b", "a/b", ".", "..", "caf\u00e9", "a?b", "a%2Fb", None, 12]


# --------------------------------------------------------------------------- configure / delete


def test_create_and_delete(client: Queen, qname: str) -> None:
    res = client.queue(qname).create()
    assert res["configured"] is True and res["queue"] == qname
    assert res["options"]["leaseTime"] == 300 and res["options"]["retryLimit"] == 3
    res = client.queue(qname).delete()
    assert res["deleted"] is True and res["existed"] is True
    assert client.queue(qname).delete()["existed"] is False


def test_config_snake_and_camel(client: Queen, qname: str) -> None:
    res = client.queue(qname).config(
        {"lease_time": 60, "retryLimit": 5, "priority": 7, "max_size": 5000, "encryption_enabled": True, "dead_letter_queue": True}
    ).create()
    opts = res["options"]
    assert (opts["leaseTime"], opts["retryLimit"], opts["priority"], opts["maxSize"]) == (60, 5, 7, 5000)
    assert opts["encryptionEnabled"] is True and opts["deadLetterQueue"] is True
    # configure is an upsert that resets what is not given
    assert client.queue(qname).create()["options"]["leaseTime"] == 300


def test_namespace_task(client: Queen, qname: str) -> None:
    res = client.queue(qname).namespace("billing").task("invoices").create()
    assert res["namespace"] == "billing" and res["task"] == "invoices"


def test_create_resets_the_namespace_and_task_not_given(client: Queen, qname: str) -> None:
    # the broker's configure is a resetting upsert for these too: omitted means ""
    client.queue(qname).namespace("billing").task("invoices").create()
    res = client.queue(qname).namespace("billing").create()
    assert (res["namespace"], res["task"]) == ("billing", "")
    res = client.queue(qname).config({"lease_time": 30}).create()
    assert (res["namespace"], res["task"]) == ("", "")
    stored = client.admin.get_queue(qname)
    assert (stored["namespace"], stored["task"]) == ("", "")


def test_create_resets_the_namespace_a_push_gave(client: Queen, qname: str) -> None:
    client.queue(qname).push({"data": 1})  # auto-created: namespace = the queue's name
    assert client.admin.get_queue(qname)["namespace"] == qname
    assert client.queue(qname).create()["namespace"] == ""


@pytest.mark.parametrize(
    "opts",
    [{"lease": 5}, {"leaseTime": "60"}, {"retry_limit": -1}, {"dead_letter_queue": 1}, {"ttl": True}, {1: 2}],
)
def test_config_invalid(client: Queen, opts: Dict[Any, Any]) -> None:
    with pytest.raises(InvalidInputError):
        client.queue("orders").config(opts)


# --------------------------------------------------------------------------- validation: nothing sent


@pytest.mark.parametrize("bad", BAD_NAMES)
def test_bad_names_rejected(embedded_broker: Any, bad: Any) -> None:
    with Queen(embedded_broker.url) as q:
        with pytest.raises(InvalidInputError):
            q.queue(bad)
        with pytest.raises(InvalidInputError):
            q.queue("ok").partition(bad)
        with pytest.raises(InvalidInputError):
            q.queue("ok").group(bad)
        with pytest.raises(InvalidInputError):
            q.transaction().queue(bad)
    assert embedded_broker.request_count() == 0


@pytest.mark.parametrize("dots", [".", ".."])
def test_dot_names_get_their_own_message(dots: str) -> None:
    with Queen("http://127.0.0.1:9") as q:
        with pytest.raises(InvalidInputError, match="'.' and '..' are not valid names") as ei:
            q.queue("ok").partition(dots)
    assert "use only" not in str(ei.value)


class _NotJson:
    pass


@pytest.mark.parametrize(
    "call",
    [
        lambda q: q.queue("ok").push({"data": _NotJson()}),
        lambda q: q.queue("ok").push([{"data": 1}, {"data": {1, 2}}]),
        lambda q: q.queue("ok").push({"data": 1, "traceId": "not-a-uuid"}),
        lambda q: q.queue("ok").push({"data": 1, "transactionId": ""}),
        lambda q: q.queue("ok").push({"data": 1, "transactionId": 5}),
        lambda q: q.queue("ok").push(["not a dict"]),
        lambda q: q.queue("ok").push("text"),
        lambda q: q.queue("ok").push(5),
        lambda q: q.queue("ok").batch(0),
        lambda q: q.queue("ok").batch("2"),
        lambda q: q.queue("ok").partitions(0),
        lambda q: q.queue("ok").timeout_millis(-1),
        lambda q: q.queue("ok").wait("yes"),
        lambda q: q.queue("ok").auto_ack(1),
        lambda q: q.queue("ok").subscription_mode("new-only"),
        lambda q: q.queue("ok").subscription_from("yesterday"),
        lambda q: q.queue("ok").limit(0),
        lambda q: q.queue("ok").idle_millis(0),
        lambda q: q.queue("ok").concurrency(0),
        lambda q: q.queue("ok").concurrency(1025),  # MAX_CONCURRENCY: not 1025 threads before the first pop
        lambda q: q.queue("ok").consume("not callable"),
        lambda q: q.ack({"transactionId": "t", "partitionId": "p"}, "maybe"),
        lambda q: q.ack({"partitionId": "p"}),
        lambda q: q.ack({"transactionId": "t"}),
        lambda q: q.ack([{"transactionId": "t", "partitionId": "p"}, "x"]),
        lambda q: q.ack("text"),
        lambda q: q.ack({"transactionId": "t", "partitionId": "p"}, True, {"grp": "g"}),
        lambda q: q.ack({"transactionId": "t", "partitionId": "p"}, True, {"group": "g", "consumer_group": "h"}),
        lambda q: q.ack({"transactionId": "t", "partitionId": "p"}, True, {"group": "bad group"}),
        lambda q: q.renew({"leaseId": ""}),
        lambda q: q.renew("bad/lease"),
        lambda q: q.renew("lease", seconds=0),
        lambda q: q.renew(5),
        lambda q: q.transaction().commit(),
        lambda q: q.transaction().queue("ok").push([]),
        lambda q: q.transaction().ack({"transactionId": "t", "partitionId": "p"}, "retry"),
        lambda q: q.transaction().ack({"transactionId": "t"}),
        lambda q: q.transaction().ack([]),
        lambda q: q.transaction().queue("ok").push({"data": _NotJson()}).commit(),
    ],
)
def test_invalid_input_sends_nothing(embedded_broker: Any, call: Any) -> None:
    with Queen(embedded_broker.url) as q:
        with pytest.raises(InvalidInputError):
            call(q)
    assert embedded_broker.request_count() == 0


def test_empty_calls_send_nothing(embedded_broker: Any) -> None:
    with Queen(embedded_broker.url) as q:
        assert q.queue("ok").push([]) == []
        assert q.ack([]) == []
        assert q.renew([]) == []
    assert embedded_broker.request_count() == 0


def test_empty_transaction_message(client: Queen) -> None:
    with pytest.raises(InvalidInputError, match="Transaction has no operations to commit"):
        client.transaction().commit()


# --------------------------------------------------------------------------- push


def test_push_single_and_list(client: Queen, qname: str) -> None:
    res = client.queue(qname).push({"data": {"n": 1}})
    assert len(res) == 1 and res[0]["status"] == "queued"
    assert codec.is_uuid(res[0]["transaction_id"])
    res = client.queue(qname).partition("p1").push([{"data": i} for i in range(3)])
    assert [r["status"] for r in res] == ["queued"] * 3
    assert [r["index"] for r in res] == [0, 1, 2]


def test_push_payload_rules_and_trace(client: Queen, qname: str) -> None:
    trace = str(uuid.uuid4())
    tx = str(uuid.uuid4())
    client.queue(qname).partition("p").push(
        [{"data": "text"}, {"payload": [1, 2]}, {"data": {"k": "v"}}, {"data": None, "transactionId": tx, "traceId": trace}]
    )
    got = client.queue(qname).partition("p").batch(10).wait(True).timeout_millis(5000).pop()
    assert [m["data"] for m in got] == ["text", [1, 2], {"k": "v"}, None]
    assert got[3]["transactionId"] == tx and got[3]["traceId"] == trace


def test_push_duplicate(client: Queen, qname: str) -> None:
    tx = str(uuid.uuid4())
    assert client.queue(qname).partition("a").push({"data": 1, "transactionId": tx})[0]["status"] == "queued"
    assert client.queue(qname).partition("a").push({"data": 1, "transactionId": tx})[0]["status"] == "duplicate"
    assert client.queue(qname).partition("b").push({"data": 1, "transactionId": tx})[0]["status"] == "queued"


def test_push_retried_after_lost_reply_is_not_duplicated(embedded_broker: Any) -> None:
    embedded_broker.faults.add("POST", "/api/v1/push", "drop_after", times=1)
    with Queen(embedded_broker.url, retry_delay_millis=1) as q:
        res = q.queue("dedup").push({"data": "once"})
        assert res[0]["status"] == "duplicate"  # the first attempt was stored, its reply lost
        assert embedded_broker.request_count("POST", "/api/v1/push") == 2
        assert len(embedded_broker.messages("dedup")) == 1


def test_ack_not_retried_after_lost_reply(embedded_broker: Any) -> None:
    from queen_sync import QueenConnectionError

    with Queen(embedded_broker.url, retry_delay_millis=1) as q:
        q.queue("once").push({"data": 1})
        m = q.queue("once").wait(True).timeout_millis(5000).pop()[0]
        embedded_broker.faults.add("POST", "/api/v1/ack", "drop_after", times=1)
        with pytest.raises(QueenConnectionError):
            q.ack(m)
        assert embedded_broker.request_count("POST", "/api/v1/ack") == 1


# --------------------------------------------------------------------------- pop


def test_pop_empty_and_unknown(client: Queen, qname: str) -> None:
    assert client.queue(qname).pop() == []
    assert client.queue(qname).partition("nope").pop() == []
    assert client.queue(qname).group("g").wait(True).timeout_millis(200).pop() == []


def test_pop_message_shape_and_batch(client: Queen, qname: str) -> None:
    client.queue(qname).partition("p").push([{"data": i} for i in range(5)])
    got = client.queue(qname).partition("p").batch(3).wait(True).timeout_millis(5000).pop()
    assert [m["data"] for m in got] == [0, 1, 2]
    for key in ("id", "transactionId", "partitionId", "partition", "data", "createdAt", "leaseId", "consumerGroup"):
        assert key in got[0]
    assert got[0]["consumerGroup"] == "__QUEUE_MODE__" and got[0]["partition"] == "p"
    assert len({m["leaseId"] for m in got}) == 1
    client.ack(got)
    rest = client.queue(qname).partition("p").batch(10).pop()
    assert [m["data"] for m in rest] == [3, 4]


def test_pop_default_partition_means_wildcard(client: Queen, qname: str) -> None:
    client.queue(qname).partition("x").push({"data": "x"})
    got = client.queue(qname).partition("Default").wait(True).timeout_millis(5000).pop()
    assert [m["data"] for m in got] == ["x"]


def test_pop_partitions_budget(client: Queen, qname: str) -> None:
    for p in ("a", "b", "c"):
        client.queue(qname).partition(p).push({"data": p})
    got: List[Dict[str, Any]] = []
    for _ in range(3):
        got += client.queue(qname).batch(10).partitions(10).wait(True).timeout_millis(3000).pop()
        if len(got) == 3:
            break
    assert sorted(m["data"] for m in got) == ["a", "b", "c"]


def test_pop_groups_independent(client: Queen, qname: str, unique_name: Any) -> None:
    client.queue(qname).push({"data": 1})
    g1, g2 = unique_name("g1"), unique_name("g2")
    a = client.queue(qname).group(g1).wait(True).timeout_millis(5000).pop()
    b = client.queue(qname).group(g2).wait(True).timeout_millis(5000).pop()
    assert a[0]["id"] == b[0]["id"]
    assert a[0]["consumerGroup"] == g1 and b[0]["consumerGroup"] == g2


def test_pop_auto_ack(client: Queen, qname: str) -> None:
    client.queue(qname).push([{"data": 1}, {"data": 2}])
    got = client.queue(qname).auto_ack(True).wait(True).timeout_millis(5000).pop()
    assert got[0]["data"] == 1 and got[0]["leaseId"] == ""
    got = client.queue(qname).auto_ack(True).wait(True).timeout_millis(5000).pop()
    assert got[0]["data"] == 2
    assert client.queue(qname).pop() == []


def test_subscription_modes(client: Queen, qname: str, unique_name: Any) -> None:
    client.queue(qname).push({"data": "old"})
    assert client.queue(qname).wait(True).timeout_millis(5000).pop()  # visible
    g_all, g_new, g_now, g_ts = (unique_name(s) for s in ("all", "new", "now", "ts"))
    assert client.queue(qname).group(g_all).subscription_mode("all").pop()[0]["data"] == "old"
    assert client.queue(qname).group(g_new).subscription_mode("new").pop() == []
    assert client.queue(qname).group(g_now).subscription_from("now").pop() == []
    future = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=1)
    assert client.queue(qname).group(g_ts).subscription_from(future).pop() == []


def test_long_poll_answered_by_push(client: Queen, qname: str) -> None:
    client.queue(qname).create()
    started = threading.Event()
    got: List[Any] = []

    def popper() -> None:
        started.set()
        got.extend(client.queue(qname).group("lp").wait(True).timeout_millis(10000).pop())

    t = threading.Thread(target=popper)
    t.start()
    started.wait(5)
    client.queue(qname).push({"data": "wake"})
    t.join(20)
    assert [m["data"] for m in got] == ["wake"]


def test_builders_are_immutable(client: Queen) -> None:
    base = client.queue("orders")
    pinned = base.partition("acme").group("g").batch(5)
    assert base.pop_spec().partition is None and base.pop_spec().group is None and base.pop_spec().batch == 1
    assert pinned.pop_spec().partition == "acme" and pinned.pop_spec().batch == 5
    assert base.pop_spec().wait is False and base.pop_spec(for_consume=True).wait is True


def test_an_int_beyond_64_bits_is_refused_naming_its_place_nothing_sent(embedded_broker: Any) -> None:
    with Queen(embedded_broker.url) as q:
        with pytest.raises(InvalidInputError, match=r"Integer exceeds 64-bit range at \$\.items\[1\]\.payload\.total: "):
            q.queue("big").push([{"data": {"total": 1}}, {"data": {"total": 2**64}}])
        with pytest.raises(InvalidInputError, match=r"Integer exceeds 64-bit range at \$\.operations\[0\]\.items\[0\]\.payload\[0\]"):
            q.transaction().queue("big").push({"data": [-(2**63) - 1]}).commit()
    assert embedded_broker.request_count() == 0
