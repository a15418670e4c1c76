"""Findings of the wire-protocol audit: push replies checked item for item, payload numbers
beyond a double, normalised timestamps, seek-to-end retries, transactional ack errors.

(Codec-level cases, on both backends, are in ``test_codec.py`` / ``test_codec_parity.py``.)
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any, Dict, List

import pytest
import urllib3

from queen_sync import InvalidInputError, Queen
from queen_sync._validate import parse_iso_timestamp, timestamp_arg
from queen_sync.admin import iso_timestamp
from queen_sync.errors import ProtocolError, QueenConnectionError
from queen_sync.transport import ExponentialBackoff, NoBackoff

# --------------------------------------------------------------------------- push replies


def test_push_reply_without_one_result_per_item_raises(embedded_broker: Any) -> None:
    # one attempt, no push retry budget: the bad reply itself reaches the caller (by default
    # it is retried as a lost reply: tests/test_push_retry_budget.py)
    with Queen(embedded_broker.url, retry_attempts=1, push_retry_timeout_millis=0, backoff=NoBackoff()) as q:
        # a real 201 "[]" (what a broker answers an empty push) for a 1-item push
        embedded_broker.faults.add("POST", "/api/v1/push", "status", status=201, body=[], times=1)
        with pytest.raises(ProtocolError, match="0 results for 1 items"):
            q.queue("pr").push({"data": 1})
        three = [{"index": i, "status": "queued", "transaction_id": "t%d" % i, "queueName": "pr"} for i in range(3)]
        embedded_broker.faults.add("POST", "/api/v1/push", "status", status=200, body=three, times=1)
        with pytest.raises(ProtocolError, match="3 results for 1 items"):
            q.queue("pr").push({"data": 2})
        assert embedded_broker.messages("pr") == []  # neither reply stored anything
        assert [r["status"] for r in q.queue("pr").push([{"data": 3}, {"data": 4}])] == ["queued", "queued"]
        assert embedded_broker.request_count("POST", "/api/v1/push") == 3


def test_broker_buffered_push_is_accepted(embedded_broker: Any) -> None:
    """Push maintenance mode: a broker answers 201 ``buffered`` per item (stored later)."""
    with Queen(embedded_broker.url) as q:
        q.admin.set_maintenance_mode(True)
        try:
            res = q.queue("bm").partition("p").push([{"data": 1}, {"data": 2}])
            assert [r["status"] for r in res] == ["buffered", "buffered"]
            assert q.queue("bm").partition("p").pop() == []
        finally:
            q.admin.set_maintenance_mode(False)
        got = q.queue("bm").partition("p").batch(5).wait(True).timeout_millis(2000).pop()
        assert [m["data"] for m in got] == [1, 2]


@pytest.fixture
def fast(embedded_broker: Any) -> Any:
    c = Queen(embedded_broker.url, retry_attempts=3, backoff=ExponentialBackoff(2, 20), close_timeout_millis=5000)
    try:
        yield c
    finally:
        c.close(timeout_millis=500)


def test_producer_resends_batch_after_wrong_length_reply(embedded_broker: Any, fast: Queen) -> None:
    # too long and all "queued", but nothing processed: must not count as delivered
    five = [{"index": i, "status": "queued", "transaction_id": "x%d" % i} for i in range(5)]
    embedded_broker.faults.add("POST", "/api/v1/push", "status", status=200, body=five, times=1)
    embedded_broker.faults.add("POST", "/api/v1/push", "status", status=201, body=[], times=1)
    qb = fast.queue("wl").partition("p").buffer(10, 600000)
    receipts = qb.push([{"data": i} for i in range(4)])
    assert [r["status"] for r in receipts] == ["pending"] * 4
    assert qb.flush(10000) == 0
    assert [m["data"] for m in embedded_broker.messages("wl")] == [0, 1, 2, 3]
    assert [m["transactionId"] for m in embedded_broker.messages("wl")] == [r["transaction_id"] for r in receipts]
    st = fast.get_buffer_stats()
    assert st["delivered"] == 4 and st["failed"] == 0 and st["retries"] == 2
    assert embedded_broker.request_count("POST", "/api/v1/push") == 3


def test_producer_counts_broker_buffered_as_delivered(embedded_broker: Any, fast: Queen) -> None:
    fast.admin.set_maintenance_mode(True)
    qb = fast.queue("pm").partition("p").buffer(10, 600000)
    assert [r["status"] for r in qb.push([{"data": i} for i in range(3)])] == ["pending"] * 3
    assert qb.flush(5000) == 0
    st = fast.get_buffer_stats()
    assert st["delivered"] == 3 and st["failed"] == 0 and st["retries"] == 0
    assert embedded_broker.request_count("POST", "/api/v1/push") == 1  # not resent
    fast.admin.set_maintenance_mode(False)
    got = fast.queue("pm").partition("p").batch(5).wait(True).timeout_millis(2000).pop()
    assert [m["data"] for m in got] == [0, 1, 2]


# --------------------------------------------------------------------------- payload numbers


def test_payload_number_beyond_double_is_refused_by_the_broker(client: Queen, broker_url: str, qname: str) -> None:
    """A real broker parses push bodies with nlohmann::json: a number beyond a double (a
    401-digit integer) fails the parse (400), nothing is stored, and consume goes on."""
    big = "1" + "0" * 400
    raw = ('{"items":[{"queue":"%s","partition":"p","payload":{"n":%s},"transactionId":"%s"}]}'
           % (qname, big, uuid.uuid4())).encode()
    resp = urllib3.request("POST", broker_url + "/api/v1/push", body=raw, headers={"Content-Type": "application/json"})
    assert resp.status == 400, resp.data
    assert resp.json() == {"error": "Invalid JSON: [json.exception.out_of_range.406] number overflow parsing '%s'" % big}
    client.queue(qname).partition("p").push({"data": "after"})
    seen: List[Any] = []
    res = client.queue(qname).partition("p").each().limit(1).idle_millis(5000).consume(lambda m: seen.append(m["data"]))
    assert seen == ["after"] and res.handled == 1


def test_pop_reply_with_a_number_beyond_double_does_not_stop_consume(embedded_broker: Any) -> None:
    """A pop reply orjson cannot parse (a 401-digit integer; a broker storing JSONB numerics
    could send one) used to fail every pop that carried it, so consume() could never get past it."""
    big = 10 ** 400
    with Queen(embedded_broker.url) as q:
        q.queue("audit").partition("p").push({"data": "after"})
        msg = {"id": str(uuid.uuid4()), "transactionId": str(uuid.uuid4()), "partitionId": str(uuid.uuid4()),
               "partition": "p", "data": {"n": big}, "createdAt": "2026-12-01T00:00:00.000000Z",
               "leaseId": str(uuid.uuid4()), "consumerGroup": "__QUEUE_MODE__", "traceId": None, "producerSub": None}
        embedded_broker.faults.add("GET", "/api/v1/pop/queue/audit", "status", status=200, times=1, body={
            "success": True, "queue": "audit", "partition": "p", "partitionId": msg["partitionId"],
            "leaseId": msg["leaseId"], "consumerGroup": "__QUEUE_MODE__", "partitionsClaimed": 1, "messages": [msg]})
        seen: List[Any] = []
        res = q.queue("audit").partition("p").each().limit(2).idle_millis(5000).consume(lambda m: seen.append(m["data"]))
    assert seen == [{"n": big}, "after"] and res.handled == 2


# --------------------------------------------------------------------------- timestamps


@pytest.mark.parametrize(
    "text, wire",
    [
        ("2026-01-01T00:00:00Z", "2026-01-01T00:00:00.000Z"),
        ("2026-01-01T00:00:00.749z", "2026-01-01T00:00:00.749Z"),
        ("2026-01-01t01:30:00.1239999+01:30", "2026-01-01T00:00:00.123Z"),  # truncated, not rounded
        ("2026-01-01 00:00:00,5-02:00", "2026-01-01T02:00:00.500Z"),
        ("2026-01-01T05:00:00+0500", "2026-01-01T00:00:00.000Z"),
        ("2026-01-01T05:00:00+05", "2026-01-01T00:00:00.000Z"),
        ("2026-01-01T00:00", "2026-01-01T00:00:00.000Z"),  # no offset: UTC
        ("2026-01-01", "2026-01-01T00:00:00.000Z"),
        ("2026-01-01T00:30:00+01:00", "2025-12-31T23:30:00.000Z"),
        ("0999-01-01T00:00:00Z", "0999-01-01T00:00:00.000Z"),
    ],
)
def test_timestamps_are_normalised_to_utc_millis(text: str, wire: str) -> None:
    assert timestamp_arg("ts", text) == wire
    assert iso_timestamp("ts", text) == wire
    assert timestamp_arg("ts", wire) == wire  # the normal form is a fixed point


@pytest.mark.parametrize(
    "value",
    [
        "2026-W01-1", "2026-001", "20260101T000000Z", "20260101", "2026-01-01Z", "2026-1-1",
        "2026-01-01T25:00:00Z", "2026-02-30", "2026-01-01T00:00:00+24:00", "2026-01-01T00:00:00+01:60",
        "0000-01-01", "0001-01-01T00:00:00+01:00", "9999-12-31T23:00:00-02:00",
        "\u0662\u0660\u0662\u0666-01-01", " 2026-01-01", "2026-01-01T00:00:00Z\n", "2026-01-01T00:00:00 Z",
        "now", "yesterday", "", None, 5, True, dt.date(2026, 1, 1),
        dt.datetime(1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1))),
    ],
)
def test_timestamps_of_other_forms_are_refused(value: Any) -> None:
    with pytest.raises(InvalidInputError):
        timestamp_arg("ts", value)
    with pytest.raises(InvalidInputError):
        iso_timestamp("ts", value)
    if value != "now":
        with pytest.raises(InvalidInputError):
            Queen("http://127.0.0.1:9").queue("q").subscription_from(value)


def test_datetimes_are_normalised() -> None:
    cet = dt.timezone(dt.timedelta(hours=1))
    assert timestamp_arg("ts", dt.datetime(2026, 1, 1, 1, 0, 0, 123999, tzinfo=cet)) == "2026-01-01T00:00:00.123Z"
    assert timestamp_arg("ts", dt.datetime(2026, 1, 1)) == "2026-01-01T00:00:00.000Z"  # naive: UTC
    assert timestamp_arg("ts", dt.datetime(999, 1, 1)) == "0999-01-01T00:00:00.000Z"
    assert timestamp_arg("ts", "now", allow_now=True) == "now"
    assert parse_iso_timestamp("2026-01-01T01:00:00+01:00") == dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def test_subscription_from_sends_the_normal_form(embedded_broker: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    with Queen(embedded_broker.url) as q:
        sent: List[Dict[str, Any]] = []
        real = q._session.request

        def spy(method: str, path: str, **kw: Any) -> Any:
            sent.append(dict(kw.get("query") or {}))
            return real(method, path, **kw)

        monkeypatch.setattr(q._session, "request", spy)
        q.queue("sf").push({"data": "old"})
        got = q.queue("sf").group("g").subscription_from("2000-01-01T05:00:00+05:00").pop()
        assert [m["data"] for m in got] == ["old"]
        assert sent[-1]["subscriptionFrom"] == "2000-01-01T00:00:00.000Z"
        assert q.queue("sf").group("g2").subscription_from("now").pop() == []
        assert sent[-1]["subscriptionFrom"] == "now"


# --------------------------------------------------------------------------- seek retries


def test_seek_to_end_is_not_resent_after_a_lost_reply(embedded_broker: Any) -> None:
    path = "/api/v1/consumer-groups/g/queues/sk/seek"
    part = "/api/v1/consumer-groups/g/queues/sk/partitions/Default/seek"
    with Queen(embedded_broker.url, retry_attempts=5, backoff=NoBackoff()) as q:
        q.queue("sk").push({"data": 1})
        embedded_broker.faults.add("POST", path, "drop_after", times=1)
        with pytest.raises(QueenConnectionError):
            q.admin.seek_consumer_group("g", "sk", to_end=True)
        assert embedded_broker.request_count("POST", path) == 1
        embedded_broker.faults.add("POST", part, "drop_after", times=1)
        with pytest.raises(QueenConnectionError):
            q.admin.seek_partition_to_end("g", "sk", "Default")
        assert embedded_broker.request_count("POST", part) == 1
        # a timestamp seek is idempotent: resent after a lost reply
        embedded_broker.faults.add("POST", path, "drop_after", times=1)
        res = q.admin.seek_consumer_group("g", "sk", timestamp="2000-01-01T00:00:00Z")
        assert res["success"] is True and res["targetTimestamp"] == "2000-01-01T00:00:00.000Z"
        assert embedded_broker.request_count("POST", path) == 3
        # refused before processing (503): seek to end is retried
        embedded_broker.faults.add("POST", path, "status", status=503, times=1)
        assert q.admin.seek_consumer_group("g", "sk", to_end=True)["seekToEnd"] is True
        assert embedded_broker.request_count("POST", path) == 5


# --------------------------------------------------------------------------- transactional acks


def test_transaction_ack_error_text_reaches_the_dlq(client: Queen, qname: str, unique_name: Any) -> None:
    group = unique_name("g")
    client.queue(qname).partition("p").push([{"data": "a"}, {"data": "b"}])
    b = client.queue(qname).partition("p").group(group)
    (m,) = b.pop()
    tx = client.transaction().ack(m, "dlq", {"consumer_group": group, "error": "bad invoice"})
    assert tx.operations[0]["error"] == "bad invoice"
    assert tx.commit()["success"] is True
    (m,) = b.pop()
    client.transaction().ack(m, False, {"group": group, "error": 42}).commit()
    rows = client.queue(qname).dlq(group).get()
    assert {(r["data"], r["errorMessage"]) for r in rows} == {("a", "bad invoice"), ("b", "42")}
    with pytest.raises(InvalidInputError):
        client.transaction().ack(m, "dlq", {"group": group, "reason": "x"})
