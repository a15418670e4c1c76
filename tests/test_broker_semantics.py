"""Broker semantics, checked through raw HTTP (urllib3), not through the queen_sync client.

Runs against the embedded broker by default and against a real Queen 0.15 broker when
``QUEEN_URL`` is set (pops after a push use ``wait=true`` so that the real broker's partition
index lag does not matter). Tests needing broker-wide switches use ``embedded_broker``.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Iterator

import pytest

from _broker_http import RawHTTP, unique

QM = "__QUEUE_MODE__"
UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
US_TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
MS_TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
OPTION_KEYS = {"leaseTime", "retryLimit", "retryDelay", "deadLetterQueue", "dlqAfterMaxRetries", "priority",
               "delayedProcessing", "windowBuffer", "maxSize", "ttl", "retentionSeconds",
               "completedRetentionSeconds", "retentionEnabled", "encryptionEnabled", "maxWaitTimeSeconds"}
MSG_KEYS = {"id", "transactionId", "partitionId", "partition", "data", "createdAt", "leaseId", "consumerGroup",
            "traceId", "producerSub"}


@pytest.fixture(scope="module")
def http(broker_url: str) -> Iterator[RawHTTP]:
    yield RawHTTP(broker_url)


@pytest.fixture
def q(http: RawHTTP) -> Iterator[str]:
    name = unique("sem")
    yield name
    http.delete_queue(name)


def _datas(body: dict) -> list:
    return [m["data"] for m in body["messages"]]


# ----------------------------------------------------------------------------- push

def test_push_result_shapes_and_defaults(http: RawHTTP, q: str) -> None:
    res = http.push(q, [{"n": 1}], traceId="d24b99fd-dc22-4c1b-9c96-39279c2cdbd2")
    assert set(res[0]) == {"index", "status", "message_id", "partition_id", "transaction_id", "trace_id", "queueName"}
    assert res[0]["status"] == "queued" and res[0]["queueName"] == q
    assert res[0]["trace_id"] == "d24b99fd-dc22-4c1b-9c96-39279c2cdbd2"
    assert UUID_RE.match(res[0]["message_id"]) and res[0]["message_id"][14] == "7"  # UUIDv7
    assert UUID_RE.match(res[0]["transaction_id"])  # server-minted
    # missing payload key and explicit null are stored as null; strings are fine
    st, body = http.request("POST", "/api/v1/push", {"items": [{"queue": q}, {"queue": q, "payload": None},
                                                                {"queue": q, "payload": "s"}]})
    assert st == 200 and [r["status"] for r in body] == ["queued"] * 3
    ids = [r["message_id"] for r in body]
    assert ids == sorted(ids)  # consecutive v7 ids keep the push order
    got = http.pop(q, batch=10, wait=True, timeout=3000)
    assert _datas(got) == [{"n": 1}, None, None, "s"]
    m = got["messages"][0]
    assert set(m) == MSG_KEYS and m["partition"] == "Default" and m["consumerGroup"] == QM
    assert US_TS.match(m["createdAt"]) and m["producerSub"] is None


def test_push_validation_and_empty(http: RawHTTP, q: str) -> None:
    assert http.request("POST", "/api/v1/push", {"items": []}) == (201, [])
    assert http.request("POST", "/api/v1/push", raw=b"") == (400, {"error": "Empty request body"})
    assert http.request("POST", "/api/v1/push", {"queue": q}) == (400, {"error": "items array is required"})
    assert http.request("POST", "/api/v1/push", {"items": [{"payload": 1}]}) == (400, {"error": "Queue must be a string"})
    assert http.request("POST", "/api/v1/push", {"items": [{"queue": q, "partition": 5}]}) == \
        (400, {"error": "Partition must be a string"})
    assert http.request("POST", "/api/v1/push", {"items": [{"queue": q, "transactionId": 5}]}) == \
        (400, {"error": "TransactionId must be a string"})
    st, body = http.request("POST", "/api/v1/push", raw=b"not json")
    assert st == 400 and body["error"].startswith("Invalid JSON: [json.exception.parse_error.101]")


def _strict_json(raw: bytes) -> object:
    def refuse(token: str) -> object:
        raise AssertionError("not JSON: %s in %r" % (token, raw[:200]))
    return json.loads(raw, parse_constant=refuse)


def test_numbers_beyond_a_double_are_refused_and_others_pop_as_doubles(http: RawHTTP, q: str) -> None:
    # The real broker parses bodies with nlohmann::json: a number a double cannot hold fails the
    # parse (400, nothing stored); a number outside the 64-bit integer range becomes a double.
    big = "1" + "0" * 400
    for token in ("1e400", "-1E+400", big):
        raw = ('{"items":[{"queue":"%s","payload":{"ok":1,"n":%s}}]}' % (q, token)).encode()
        assert http.request("POST", "/api/v1/push", raw=raw) == (400, {
            "error": "Invalid JSON: [json.exception.out_of_range.406] number overflow parsing '%s'" % token})
    st, body = http.request("POST", "/api/v1/push", raw=('{"items":[{"queue":"%s","payload":NaN}]}' % q).encode())
    assert st == 400 and body["error"].startswith("Invalid JSON: [json.exception.parse_error.101]")
    assert http.pop(q, batch=5, wait=False)["error"] == "no_available_partition"  # nothing was stored
    # in range: exact 64-bit integers, everything else a double (and always valid JSON on the way back)
    raw = ('{"items":[{"queue":"%s","payload":[18446744073709551615,-9223372036854775808,'
           '18446744073709551616,%s,1e300,1e-400,12.0]}]}' % (q, "1" + "0" * 24)).encode()
    st, body = http.request("POST", "/api/v1/push", raw=raw)
    assert st == 200 and body[0]["status"] == "queued", body
    r = http.response("GET", "/api/v1/pop/queue/%s?wait=true&timeout=3000" % q)
    data = _strict_json(r.data)["messages"][0]["data"]  # type: ignore[index]
    assert data == [2 ** 64 - 1, -(2 ** 63), float(2 ** 64), 1e24, 1e300, 0.0, 12.0]
    assert [type(v) for v in data] == [int, int, float, float, float, float, float]


def test_embedded_broker_number_rules_hold_without_orjson(monkeypatch: pytest.MonkeyPatch) -> None:
    from queen_sync.testing import _util
    raw = b'[18446744073709551615,-9223372036854775808,18446744073709551616,1e300,1e-400,12.0,-0]'
    expected = _util.loads(raw)
    monkeypatch.setattr(_util, "_orjson", None)
    got = _util.loads(raw)
    assert got == expected and [type(v) for v in got] == [type(v) for v in expected]
    for token in ("1e400", "9" * 5000):
        with pytest.raises(_util.NumberOverflow) as info:
            _util.loads(b'{"a":[1,%s]}' % token.encode())
        assert info.value.token == token
    for bad in (b"NaN", b"[-Infinity]", b"[Infinity]"):
        with pytest.raises(ValueError):
            _util.loads(bad)


def test_push_dedup_per_partition_forever(http: RawHTTP, q: str) -> None:
    first = http.push(q, [{"v": 1}], partition="p1", transactionId="dup-1")[0]
    again = http.push(q, [{"v": 2}], partition="p1", transactionId="dup-1")[0]
    assert again == {"index": 0, "status": "duplicate", "message_id": first["message_id"],
                     "transaction_id": "dup-1", "queueName": q}
    assert http.push(q, [{"v": 3}], partition="p2", transactionId="dup-1")[0]["status"] == "queued"
    assert http.push(q, [{"v": 4}], transactionId="dup-1")[0]["status"] == "queued"  # Default partition
    st, batch = http.request("POST", "/api/v1/push", {"items": [
        {"queue": q, "partition": "p1", "payload": 5, "transactionId": "dup-2"},
        {"queue": q, "partition": "p1", "payload": 6, "transactionId": "dup-2"}]})
    assert [r["status"] for r in batch] == ["queued", "duplicate"]
    assert batch[1]["message_id"] == batch[0]["message_id"]
    got = http.pop(q, "p1", batch=10, wait=True, timeout=3000)
    assert _datas(got) == [{"v": 1}, 5]
    for m in got["messages"]:
        assert http.ack(m)["success"] is True
    assert http.push(q, [{"v": 7}], partition="p1", transactionId="dup-1")[0]["status"] == "duplicate"


def test_non_uuid_trace_id_is_buffered_and_never_stored(http: RawHTTP, q: str, broker_url: str) -> None:
    if "QUEEN_URL" in __import__("os").environ:
        pytest.skip("poisons a real broker's file buffer")
    st, body = http.request("POST", "/api/v1/push", {"items": [{"queue": q, "payload": 1, "traceId": "nope"}]})
    assert (st, body) == (200, [{"queue": q, "status": "buffered"}])
    assert http.pop(q, batch=5, wait=False)["error"] == "no_available_partition"


# ----------------------------------------------------------------------------- pop / leases

def test_pop_fifo_and_partition_lock_until_whole_batch_acked(http: RawHTTP, q: str) -> None:
    http.push(q, [{"i": i} for i in range(6)], partition="p")
    b1 = http.pop(q, batch=4, wait=True, timeout=3000)
    assert _datas(b1) == [{"i": i} for i in range(4)] and b1["partitionsClaimed"] == 1
    assert {m["leaseId"] for m in b1["messages"]} == {b1["leaseId"]}
    assert http.pop(q, batch=4, wait=False) == {"success": False, "error": "no_available_partition", "messages": []}
    assert http.pop(q, "p", batch=4, wait=False) == {"success": False, "error": "lease_held", "messages": []}
    released = [http.ack(m)["leaseReleased"] for m in b1["messages"]]
    assert released == [False, False, False, True]
    b2 = http.pop(q, "p", batch=10, wait=False)
    assert _datas(b2) == [{"i": 4}, {"i": 5}] and b2["leaseId"] != b1["leaseId"]


def test_pop_empty_variants(http: RawHTTP, q: str) -> None:
    assert http.pop(q + "-never", wait=False)["error"] == "no_available_partition"
    assert http.pop(q + "-never", "p", wait=False) == {"success": False, "error": "partition_not_found", "messages": []}
    http.push(q, [1])
    m = http.pop(q, wait=True, timeout=3000)["messages"][0]
    http.ack(m)
    drained = http.pop(q, "Default", wait=False)
    assert drained["success"] is True and drained["messages"] == [] and drained["partitionsClaimed"] == 1
    assert UUID_RE.match(drained["leaseId"])
    t0 = time.monotonic()
    expired = http.pop(q, wait=True, timeout=300)
    assert time.monotonic() - t0 >= 0.29
    assert expired == {"success": True, "queue": q, "partition": "", "partitionId": None, "leaseId": None,
                       "consumerGroup": QM, "messages": []}


def test_wildcard_partitions_share_one_lease_and_batch_budget(http: RawHTTP, q: str) -> None:
    for p in "abc":
        http.push(q, [{"p": p, "i": 0}, {"p": p, "i": 1}], partition=p)
    got = http.pop(q, batch=3, partitions=3, wait=True, timeout=3000)
    assert len(got["messages"]) == 3 and got["partitionsClaimed"] == 2
    assert {m["leaseId"] for m in got["messages"]} == {got["leaseId"]}
    by_part: dict = {}
    for m in got["messages"]:
        by_part.setdefault(m["partition"], []).append(m["data"]["i"])
    assert sorted(len(v) for v in by_part.values()) == [1, 2]
    assert all(v == list(range(len(v))) for v in by_part.values())  # FIFO within each partition
    one = http.pop(q, batch=10, wait=False)  # default partitions=1: only the free partition
    assert {m["partition"] for m in one["messages"]} == set("abc") - set(by_part)


def test_queue_mode_and_groups_have_independent_cursors(http: RawHTTP, q: str) -> None:
    http.push(q, [0, 1, 2], partition="p")
    g1 = http.pop(q, batch=2, consumerGroup="g1", wait=True, timeout=3000)
    assert _datas(g1) == [0, 1] and g1["consumerGroup"] == "g1"
    assert all(m["consumerGroup"] == "g1" for m in g1["messages"])
    assert http.ack(g1["messages"][1], group="g1")["leaseReleased"] is False  # N consumes earlier ones...
    assert http.ack(g1["messages"][0], group="g1")["leaseReleased"] is True   # ...lease frees at batch size
    # the cursor is the last acked message, so the out-of-order ack of 0 moved it back: 1 comes again
    assert _datas(http.pop(q, batch=5, consumerGroup="g1", wait=False)) == [1, 2]
    assert _datas(http.pop(q, batch=5, consumerGroup="g2", wait=False)) == [0, 1, 2]
    assert _datas(http.pop(q, batch=5, wait=False)) == [0, 1, 2]


def test_auto_ack_consumes_at_delivery(http: RawHTTP, q: str) -> None:
    http.push(q, [1, 2])
    got = http.pop(q, batch=5, autoAck=True, wait=True, timeout=3000)
    assert _datas(got) == [1, 2] and got["leaseId"] == "" and {m["leaseId"] for m in got["messages"]} == {""}
    assert http.pop(q, batch=5, wait=False)["error"] == "no_available_partition"


def test_lease_expiry_redelivers_with_new_lease_and_old_one_is_rejected(http: RawHTTP, q: str) -> None:
    http.configure(q, leaseTime=1)
    http.push(q, ["a"], partition="p1")
    http.push(q, ["b"], partition="p2")
    m1 = http.pop(q, "p1", consumerGroup="g", wait=True, timeout=3000)["messages"][0]
    m2 = http.pop(q, "p2", consumerGroup="g", wait=True, timeout=3000)["messages"][0]
    m2_leased_at = time.monotonic()
    # a long poll on the leased partition is answered when the lease expires (woken, not spinning)
    again = http.pop(q, "p1", consumerGroup="g", wait=True, timeout=5000)
    assert _datas(again) == ["a"] and again["leaseId"] != m1["leaseId"]
    assert again["messages"][0]["transactionId"] == m1["transactionId"]
    old = http.ack(m1, group="g")
    assert (old["success"], old["error"], old["leaseReleased"]) == (False, "Invalid or expired lease", False)
    assert http.ack(again["messages"][0], group="g")["success"] is True
    # p2's lease expires too; an ack WITHOUT leaseId is not fenced and still moves the cursor
    extend = "/api/v1/lease/%s/extend" % m2["leaseId"]

    # no polling of the extend route: an extend that lands before the expiry renews the lease
    # (and polling would keep it alive); past leaseTime (1 s) the lease is surely expired
    time.sleep(max(0.0, m2_leased_at + 1.5 - time.monotonic()))
    expired = http.request("POST", extend, {})[1][0]
    assert expired["error"] == "Lease already expired", expired
    assert expired["success"] is False and expired["expiresAt"] is None
    unfenced = http.ack(m2, group="g", lease=False)
    assert unfenced["success"] is True and unfenced["leaseReleased"] is True
    empty = http.pop(q, "p2", consumerGroup="g", wait=False)
    assert empty["success"] is True and empty["messages"] == []


def test_lease_extend(http: RawHTTP, q: str) -> None:
    http.configure(q, leaseTime=30)
    http.push(q, [1], partition="p")
    m = http.pop(q, consumerGroup="g", wait=True, timeout=3000)["messages"][0]
    path = "/api/v1/lease/%s/extend" % m["leaseId"]
    st, res = http.request("POST", path, {})
    assert st == 200 and set(res[0]) == {"index", "leaseId", "success", "error", "expiresAt"}
    assert res[0]["success"] is True and MS_TS.match(res[0]["expiresAt"])
    st, res2 = http.request("POST", path, {"seconds": 5})  # max(current, now + 5): unchanged
    assert res2[0]["expiresAt"] == res[0]["expiresAt"]
    assert http.request("POST", path, raw=b"") == (400, {"error": "Empty request body"})
    assert http.request("POST", "/api/v1/lease/2c9af060-ea17-4b9e-b3a3-c3eb350179e7/extend", {})[1][0]["error"] == \
        "Lease not found"
    http.ack(m, group="g")
    assert http.request("POST", path, {})[1][0]["error"] == "Lease not found"


# ----------------------------------------------------------------------------- ack / retry / dlq

def test_ack_refusals(http: RawHTTP, q: str) -> None:
    http.push(q, [1], partition="p")
    m = http.pop(q, consumerGroup="g", wait=True, timeout=3000)["messages"][0]
    res = http.ack(dict(m, transactionId="no-such-tx"), group="g")
    assert (res["success"], res["error"], res["partitionName"], res["queueName"]) == (False, "Message not found", "p", q)
    res = http.ack(dict(m, partitionId="4c5a525b-21c1-49e6-8ab4-acf1f31f530d"), group="g")
    assert (res["error"], res["partitionName"], res["queueName"]) == ("Message not found", None, None)
    res = http.ack(m, status="bogus", group="g")
    assert (res["success"], res["error"]) == (False, None)
    assert http.ack(m, group="other")["error"] == "Invalid or expired lease"
    assert http.request("POST", "/api/v1/ack", {"partitionId": m["partitionId"]}) == \
        (400, {"error": "transactionId is required"})
    assert http.request("POST", "/api/v1/ack", {"transactionId": "x"}) == \
        (400, {"error": "partitionId is required to ensure message uniqueness"})
    ok = http.ack(m, status="success", group="g")
    assert set(ok) == {"index", "transactionId", "success", "error", "queueName", "partitionName",
                       "leaseReleased", "dlq"}
    assert (ok["success"], ok["leaseReleased"], ok["dlq"]) == (True, True, False)
    assert http.ack(m, group="g")["error"] == "Invalid or expired lease"  # its lease is released


def test_nack_retries_then_dead_letter(http: RawHTTP, q: str) -> None:
    http.configure(q, leaseTime=30, retryLimit=2)
    http.push(q, [{"i": 0}, {"i": 1}, {"i": 2}], partition="p")
    deliveries = 0
    while True:
        got = http.pop(q, consumerGroup="g", wait=True, timeout=2000)
        assert _datas(got) == [{"i": 0}]
        deliveries += 1
        res = http.ack(got["messages"][0], status="failed", group="g", error="boom %d" % deliveries)
        if res["dlq"]:
            assert res["leaseReleased"] is False and res["success"] is True
            break
        assert res["leaseReleased"] is True
        assert deliveries <= 3
    assert deliveries == 3  # retryLimit + 1
    m = http.pop(q, consumerGroup="g", wait=True, timeout=2000)["messages"][0]
    assert m["data"] == {"i": 1}
    assert http.ack(m, status="retry", group="g")["leaseReleased"] is True  # not counted
    m = http.pop(q, consumerGroup="g", wait=True, timeout=2000)["messages"][0]
    assert m["data"] == {"i": 1}
    http.ack(m, group="g")
    m = http.pop(q, consumerGroup="g", wait=True, timeout=2000)["messages"][0]
    assert http.ack(m, status="dlq", group="g", error="on purpose")["dlq"] is True
    st, dlq = http.request("GET", "/api/v1/dlq?queue=" + q)
    assert st == 200 and dlq["pagination"] == {"limit": 100, "offset": 0}
    rows = [(r["data"], r["errorMessage"], r["retryCount"], r["consumerGroup"]) for r in dlq["messages"]]
    assert rows == [({"i": 2}, "on purpose", 0, "g"), ({"i": 0}, "boom 3", 2, "g")]  # newest first
    assert MS_TS.match(dlq["messages"][0]["failedAt"]) and MS_TS.match(dlq["messages"][0]["createdAt"])
    assert http.request("GET", "/api/v1/dlq?queue=%s&consumerGroup=nobody" % q)[1]["messages"] == []
    assert http.request("GET", "/api/v1/dlq?queue=%s&offset=1" % q)[1] == {"success": True, "value": None}


def _nack_items(msgs: list, status: str = "failed") -> list:
    return [{"transactionId": m["transactionId"], "partitionId": m["partitionId"], "leaseId": m["leaseId"],
             "status": status, "error": "boom"} for m in msgs]


def _dlq_datas(http: RawHTTP, q: str) -> list:
    return sorted((r["data"]["i"], r["retryCount"]) for r in http.request("GET", "/api/v1/dlq?queue=" + q)[1]["messages"])


def test_a_nack_releases_the_lease_for_later_calls_not_for_the_rest_of_its_own(http: RawHTTP, q: str) -> None:
    # Seen on Queen 0.15.1 (2026-12-02): every item's lease is checked before any is applied,
    # so the later nacks of one call pass and change nothing; a later call with the released
    # lease is refused, whatever its status.
    http.configure(q, leaseTime=30, retryLimit=2)
    http.push(q, [{"i": i} for i in range(4)], partition="p")
    ms = http.pop(q, batch=4, consumerGroup="g", wait=True, timeout=3000)["messages"]
    st, res = http.request("POST", "/api/v1/ack/batch", {"consumerGroup": "g", "acknowledgments": _nack_items(ms[:2])})
    assert st == 200 and [(r["success"], r["leaseReleased"], r["dlq"]) for r in res] == [(True, True, False)] * 2
    for status in ("failed", "retry", "completed"):
        refused = http.ack(ms[2], status=status, group="g")
        assert (refused["success"], refused["error"]) == (False, "Invalid or expired lease")
    again = http.pop(q, batch=4, consumerGroup="g", wait=True, timeout=3000)["messages"]
    assert [m["data"]["i"] for m in again] == [0, 1, 2, 3]  # one retry counted for the call, not two
    http.request("POST", "/api/v1/ack/batch", {"consumerGroup": "g", "acknowledgments": _nack_items(again[:1])})
    again = http.pop(q, batch=4, consumerGroup="g", wait=True, timeout=3000)["messages"]
    st, res = http.request("POST", "/api/v1/ack/batch", {"consumerGroup": "g", "acknowledgments": _nack_items(again[:1])})
    assert res[0]["dlq"] is True  # the third nack: retryLimit 2 reached with two counted


def test_a_batch_nack_that_reaches_the_retry_limit_skips_its_first_message(http: RawHTTP, q: str) -> None:
    # Seen on Queen 0.15.1 (2026-12-02): the first nack of the call releases the lease and
    # counts the retry that reaches the limit; the later items then go to the DLQ, each moving
    # the cursor, so the first message is neither redelivered nor dead-lettered. (queen_sync
    # never sends such a call: see test_consumer_failures and Queen.ack.)
    http.configure(q, leaseTime=30, retryLimit=1)
    http.push(q, [{"i": i} for i in range(3)], partition="p")
    ms = http.pop(q, batch=3, consumerGroup="g", wait=True, timeout=3000)["messages"]
    st, res = http.request("POST", "/api/v1/ack/batch", {"consumerGroup": "g", "acknowledgments": _nack_items(ms)})
    assert [(r["leaseReleased"], r["dlq"]) for r in res] == [(True, False), (False, True), (False, True)]
    assert http.pop(q, batch=3, consumerGroup="g", wait=False)["messages"] == []
    assert _dlq_datas(http, q) == [(1, 1), (2, 1)]


def test_the_retry_count_is_not_reset_by_a_dead_letter(http: RawHTTP, q: str) -> None:
    # Seen on Queen 0.15.1 (2026-12-02): the count is per (partition, group) and only a
    # completed ack that ends a batch resets it, so after one message went to the DLQ the next
    # failing ones go there on their first nack; a status=retry release does not count.
    http.configure(q, leaseTime=30, retryLimit=1)
    http.push(q, [{"i": i} for i in range(4)], partition="p")
    seen = []
    for status in ("failed", "failed", "retry", "failed", "completed", "failed", "failed"):
        m = http.pop(q, consumerGroup="g", wait=True, timeout=3000)["messages"][0]
        res = http.ack(m, status=status, group="g")
        seen.append((m["data"]["i"], status[0], "dlq" if res["dlq"] else "released" if res["leaseReleased"] else "-"))
    assert seen == [(0, "f", "released"), (0, "f", "dlq"), (1, "r", "released"), (1, "f", "dlq"),
                    (2, "c", "released"), (3, "f", "released"), (3, "f", "dlq")]
    assert _dlq_datas(http, q) == [(0, 1), (1, 1), (3, 1)]


def test_dead_letter_defaults_and_an_unfenced_nack(http: RawHTTP, q: str) -> None:
    # Seen on Queen 0.15.1 (2026-12-02). Without an error text the single route stores "" and
    # the batch route "Retries exhausted" (for a dlq status too); a dead letter keeps the
    # retry count as it stands, for a dlq status too. A nack without leaseId by a group that
    # never read the partition dead-letters the message (the SQL finds no retry count), yet
    # that group's cursor does not move: it still gets the message.
    http.configure(q, leaseTime=30, retryLimit=3)
    http.push(q, [{"i": i} for i in range(4)], partition="p")
    m = http.pop(q, consumerGroup="g", wait=True, timeout=3000)["messages"][0]
    assert http.ack(m, status="failed", group="g")["leaseReleased"] is True
    m = http.pop(q, consumerGroup="g", wait=True, timeout=3000)["messages"][0]
    assert http.ack(m, status="dlq", group="g")["dlq"] is True  # single route, no error text
    m = http.pop(q, consumerGroup="g", wait=True, timeout=3000)["messages"][0]
    st, res = http.request("POST", "/api/v1/ack/batch", {"consumerGroup": "g", "acknowledgments": [
        {"transactionId": m["transactionId"], "partitionId": m["partitionId"], "leaseId": m["leaseId"], "status": "dlq"}]})
    assert st == 200 and res[0]["dlq"] is True
    unfenced = [http.request("POST", "/api/v1/ack", {"transactionId": m["transactionId"], "partitionId": m["partitionId"],
                                                      "status": status, "consumerGroup": "never"})[1][0]
                for status in ("failed", "retry", "completed")]
    assert [(r["success"], r["leaseReleased"], r["dlq"]) for r in unfenced] == [
        (True, False, True), (True, True, False), (True, None, False)]
    rows = sorted((r["data"]["i"], r["consumerGroup"], r["retryCount"], r["errorMessage"])
                  for r in http.request("GET", "/api/v1/dlq?queue=" + q)[1]["messages"])
    assert rows == [(0, "g", 1, ""), (1, "g", 1, "Retries exhausted"), (1, "never", 0, "")]
    assert [x["data"]["i"] for x in http.pop(q, batch=4, consumerGroup="never", wait=True, timeout=3000)["messages"]] == [
        0, 1, 2, 3]


def test_ack_batch_uses_body_level_group_only(http: RawHTTP, q: str) -> None:
    http.push(q, [1, 2], partition="p")
    got = http.pop(q, "p", batch=2, consumerGroup="g2", wait=True, timeout=3000)
    items = [{"transactionId": m["transactionId"], "partitionId": m["partitionId"], "status": "completed",
              "leaseId": m["leaseId"], "consumerGroup": "ignored"} for m in got["messages"]]
    # an item-level group is ignored: without a body-level group this is queue mode -> lease check fails
    st, res = http.request("POST", "/api/v1/ack/batch", {"acknowledgments": items[:1]})
    assert st == 200 and res[0]["error"] == "Invalid or expired lease"
    st, res = http.request("POST", "/api/v1/ack/batch", {"consumerGroup": "g2", "acknowledgments": items})
    assert [(r["index"], r["success"], r["leaseReleased"]) for r in res] == [(0, True, False), (1, True, True)]
    assert http.request("POST", "/api/v1/ack/batch", {"consumerGroup": "g"}) == \
        (400, {"error": "acknowledgments array is required"})
    assert http.request("POST", "/api/v1/ack/batch", {"acknowledgments": [{"partitionId": "x"}]}) == \
        (400, {"error": "Each acknowledgment must have a valid transactionId string"})


# ----------------------------------------------------------------------------- transactions

def test_transaction_commit_and_rollback(http: RawHTTP, q: str) -> None:
    out = q + "-out"
    try:
        http.push(q, [0, 1], partition="p")
        m = http.pop(q, consumerGroup="g", wait=True, timeout=3000)["messages"][0]
        ok = http.request("POST", "/api/v1/transaction", {"operations": [
            {"type": "push", "items": [{"queue": out, "partition": "p", "payload": {"from": 0}}]},
            {"type": "ack", "transactionId": m["transactionId"], "partitionId": m["partitionId"],
             "status": "completed", "consumerGroup": "g", "leaseId": m["leaseId"]}]})[1]
        assert ok["success"] is True and UUID_RE.match(ok["transactionId"])
        assert [r["type"] for r in ok["results"]] == ["push", "ack"]
        assert set(ok["results"][0]) == {"index", "type", "success", "transactionId", "messageId", "partitionId",
                                         "queueName"}
        assert set(ok["results"][1]) == {"index", "type", "success", "transactionId", "error", "dlq"}
        m2 = http.pop(q, consumerGroup="g", wait=True, timeout=3000)["messages"][0]
        assert m2["data"] == 1
        # a failing ack (unknown message) rolls the push back
        bad = http.request("POST", "/api/v1/transaction", {"operations": [
            {"type": "push", "items": [{"queue": out, "partition": "p", "payload": {"rolled": "back"}}]},
            {"type": "ack", "transactionId": "nope", "partitionId": m2["partitionId"], "status": "completed",
             "consumerGroup": "g"}]})
        assert bad[0] == 200 and bad[1]["success"] is False
        assert bad[1]["error"] == "ACK operation failed: Message not found"
        assert bad[1]["results"][0]["success"] is True  # shown, but rolled back
        # an expired/foreign lease on the op fails the commit; without leaseId it is unfenced
        fenced = http.request("POST", "/api/v1/transaction", {"operations": [
            {"type": "ack", "transactionId": m2["transactionId"], "partitionId": m2["partitionId"],
             "status": "completed", "consumerGroup": "g", "leaseId": m["leaseId"]}]})[1]
        assert fenced["error"] == "ACK operation failed: Invalid or expired lease"
        dup = http.request("POST", "/api/v1/transaction", {"operations": [
            {"type": "push", "items": [{"queue": out, "partition": "p", "payload": 1, "transactionId": "t-1"}]},
            {"type": "push", "items": [{"queue": out, "partition": "p", "payload": 2, "transactionId": "t-1"}]}]})[1]
        # the results of what was stored before the duplicate stay (Queen 0.15.1, 2026-12-02)
        assert dup["success"] is False and [(r["type"], r["transactionId"]) for r in dup["results"]] == [("push", "t-1")]
        assert "messages_partition_transaction_unique" in dup["error"]
        again = http.request("POST", "/api/v1/transaction", {"operations": [
            {"type": "push", "items": [{"queue": out, "partition": "p", "payload": 3, "transactionId": "t-2"},
                                       {"queue": out, "partition": "p", "payload": 4, "transactionId": "t-2"}]}]})[1]
        assert again["success"] is False and [r["transactionId"] for r in again["results"]] == ["t-2"]
        unknown = http.request("POST", "/api/v1/transaction", {"operations": [{"type": "frobnicate"}]})[1]
        assert unknown["error"] == "Unknown operation type: frobnicate"
        assert http.request("POST", "/api/v1/transaction", {"operations": []}) == \
            (400, {"error": "operations array cannot be empty"})
        assert http.request("POST", "/api/v1/transaction", {}) == (400, {"error": "operations array required"})
        got = http.pop(out, batch=10, wait=True, timeout=3000)
        assert _datas(got) == [{"from": 0}]
    finally:
        http.delete_queue(out)


def test_transaction_ack_failed_goes_straight_to_dlq(http: RawHTTP, q: str) -> None:
    http.push(q, [1], partition="p")
    m = http.pop(q, consumerGroup="g", wait=True, timeout=3000)["messages"][0]
    res = http.request("POST", "/api/v1/transaction", {"operations": [
        {"type": "ack", "transactionId": m["transactionId"], "partitionId": m["partitionId"], "status": "failed",
         "consumerGroup": "g", "leaseId": m["leaseId"]}]})[1]
    assert res["success"] is True and res["results"][0]["dlq"] is True
    rows = http.request("GET", "/api/v1/dlq?queue=" + q)[1]["messages"]
    assert [(r["errorMessage"], r["retryCount"]) for r in rows] == [("Unknown error", 0)]
    assert http.pop(q, consumerGroup="g", wait=False)["error"] == "no_available_partition"


# ----------------------------------------------------------------------------- subscription

def test_subscription_modes_for_new_groups(http: RawHTTP, q: str) -> None:
    http.push(q, [{"phase": "old"}], partition="p")
    time.sleep(0.01)  # distinct created_at before the cut-off timestamp (not a synchronisation)
    cut = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    time.sleep(0.01)
    http.push(q, [{"phase": "mid"}], partition="p")
    expect = {("g-default", ()): [{"phase": "old"}, {"phase": "mid"}],
              ("g-all", (("subscriptionMode", "all"),)): [{"phase": "old"}, {"phase": "mid"}],
              ("g-new-only", (("subscriptionMode", "new-only"),)): [{"phase": "old"}, {"phase": "mid"}],
              ("g-new", (("subscriptionMode", "new"),)): [],
              ("g-now", (("subscriptionFrom", "now"),)): [],
              ("g-ts", (("subscriptionFrom", cut),)): [{"phase": "mid"}]}
    for (g, extra), want in expect.items():
        got = http.pop(q, batch=10, consumerGroup=g, wait=False, **dict(extra))
        assert _datas(got) == want, g
        for m in got["messages"]:
            http.ack(m, group=g)
    http.push(q, [{"phase": "new"}], partition="p")
    for (g, extra), _ in expect.items():
        got = http.pop(q, batch=10, consumerGroup=g, wait=True, timeout=3000, **dict(extra))
        assert _datas(got) == [{"phase": "new"}], g
        http.ack(got["messages"][0], group=g)


def test_delete_group_and_seek_reset_the_cursor(http: RawHTTP, q: str) -> None:
    http.push(q, [0, 1, 2], partition="p")
    got = http.pop(q, batch=10, consumerGroup="g", wait=True, timeout=3000)
    for m in got["messages"]:
        http.ack(m, group="g")
    seek = "/api/v1/consumer-groups/g/queues/%s/seek" % q
    st, res = http.request("POST", seek, {"timestamp": "2000-01-01T00:00:00.000Z"})
    assert st == 200 and (res["success"], res["seekToEnd"], res["partitionsUpdated"]) == (True, False, 1)
    assert _datas(http.pop(q, batch=10, consumerGroup="g", wait=False)) == [0, 1, 2]
    assert http.request("POST", seek, {"toEnd": True})[1]["seekToEnd"] is True
    assert http.pop(q, batch=10, consumerGroup="g", wait=False)["error"] == "no_available_partition"
    assert http.request("POST", seek, {}) == (400, {"error": "Must specify either 'toEnd': true or 'timestamp'"})
    st, res = http.request("DELETE", "/api/v1/consumer-groups/g/queues/%s?deleteMetadata=true" % q)
    assert res == {"success": True, "consumerGroup": "g", "queueName": q, "deletedPartitions": 1,
                   "metadataDeleted": True}
    assert _datas(http.pop(q, batch=10, consumerGroup="g", wait=False)) == [0, 1, 2]


# ----------------------------------------------------------------------------- configure / delete / misc

def test_configure_is_a_resetting_upsert(http: RawHTTP, q: str) -> None:
    res = http.configure(q, leaseTime=10, retryLimit=2, lease_time=99)
    assert res["configured"] is True and set(res["options"]) == OPTION_KEYS
    assert (res["options"]["leaseTime"], res["options"]["retryLimit"], res["options"]["ttl"]) == (10, 2, 3600)
    assert res["namespace"] == "" and res["task"] == "" and UUID_RE.match(res["partitionId"])
    res = http.configure(q, priority=5)
    assert (res["options"]["leaseTime"], res["options"]["retryLimit"], res["options"]["priority"]) == (300, 3, 5)
    res = http.configure(q, lease_time=7)  # snake_case only: ignored -> the odd error, queue kept
    assert res == {"error": "[json.exception.type_error.306] cannot use value() with null"}
    res = http.configure(q, leaseTime="ten")
    assert res["success"] is False and res["error"].startswith("ERROR:  invalid input syntax for type integer")
    assert http.request("POST", "/api/v1/configure", {"options": {}}) == (400, {"error": "queue is required"})
    other = q + "-bare"
    assert http.request("POST", "/api/v1/configure", {"queue": other})[1]["error"].startswith("[json.exception")
    st, detail = http.request("GET", "/api/v1/resources/queues/" + other)
    assert st == 200 and detail["name"] == other and [p["name"] for p in detail["partitions"]] == ["Default"]
    assert http.request("DELETE", "/api/v1/resources/queues/" + other)[1] == \
        {"deleted": True, "existed": True, "queue": other}
    assert http.request("DELETE", "/api/v1/resources/queues/" + other)[1]["existed"] is False
    assert http.request("GET", "/api/v1/resources/queues/" + other)[1] == {"error": "Queue not found"}


def test_long_poll_is_woken_by_a_push(http: RawHTTP, q: str) -> None:
    http.configure(q, leaseTime=30)
    result: dict = {}

    def poll() -> None:
        result["body"] = RawHTTP(http.base).pop(q, consumerGroup="g", wait=True, timeout=10000)
        result["t"] = time.monotonic()

    t = threading.Thread(target=poll)
    t.start()
    time.sleep(0.2)  # let the poll park first (either order is correct; this exercises the wake-up)
    pushed = time.monotonic()
    http.push(q, [{"late": True}], partition="px")
    t.join(12)
    assert _datas(result["body"]) == [{"late": True}]
    assert result["t"] - pushed < 5  # woken, not timed out


def test_unknown_routes_and_options(http: RawHTTP) -> None:
    for method, path in (("GET", "/api/v1/nonexistent"), ("POST", "/api/v1/nonexistent"),
                         ("GET", "/api/v1/resources/partitions"), ("DELETE", "/api/v1/queues/x/clear"),
                         ("GET", "/api/v1/pop?namespace=x&task=y")):
        r = http.response(method, path, body={} if method == "POST" else None)
        assert r.status == 404 and "Content-Type" not in r.headers
        assert r.data.startswith(b"<html>")
    r = http.response("OPTIONS", "/api/v1/push")
    assert r.status == 200 and r.data == b""
    st, body = http.request("GET", "/health")
    assert st == 200 and body["status"] == "healthy" and body["version"] == "1.0.0"


# ----------------------------------------------------------------------------- embedded-only switches

def test_pop_maintenance_answers_204_with_body(embedded_broker) -> None:
    http = RawHTTP(embedded_broker.url)
    http.push("m-q", [1])
    st, res = http.request("POST", "/api/v1/system/maintenance/pop", {"enabled": True})
    assert (st, res["popMaintenanceMode"]) == (200, True)
    # http.client drops a 204's body, so read the raw bytes (the broker closes after a 204)
    host, port = embedded_broker.url[len("http://"):].split(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(b"GET /api/v1/pop/queue/m-q?wait=false HTTP/1.1\r\nHost: x\r\n\r\n")
        raw = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 204") and b"Content-Type: application/json" in head
    assert b"Content-Length: 29" in head and body == b'{"messages":[],"paused":true}'
    http.request("POST", "/api/v1/system/maintenance/pop", {"enabled": False})
    assert _datas(RawHTTP(embedded_broker.url).pop("m-q", wait=True, timeout=2000)) == [1]


def test_empty_batch_ack_never_answers(embedded_broker) -> None:
    import urllib3

    http = RawHTTP(embedded_broker.url)
    with pytest.raises(urllib3.exceptions.ReadTimeoutError):
        http.request("POST", "/api/v1/ack/batch", {"acknowledgments": []}, timeout=0.5)
    assert http.request("GET", "/health")[0] == 200


def test_restart_keeps_state_on_the_same_port(embedded_broker) -> None:
    http = RawHTTP(embedded_broker.url)
    http.push("r-q", ["kept"])
    url = embedded_broker.url
    embedded_broker.restart()
    assert embedded_broker.url == url
    assert _datas(RawHTTP(url).pop("r-q", wait=True, timeout=2000)) == ["kept"]


def test_timestamps_and_id_formats(http: RawHTTP, q: str) -> None:
    http.push(q, [1], partition="p")
    m = http.pop(q, consumerGroup="g", wait=True, timeout=3000)["messages"][0]
    assert US_TS.match(m["createdAt"])
    assert UUID_RE.match(m["leaseId"]) and m["leaseId"][14] == "7"
    created = datetime.strptime(m["createdAt"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
    assert abs(datetime.now(timezone.utc) - created) < timedelta(minutes=5)
    st, detail = http.request("GET", "/api/v1/messages/%s/%s" % (m["partitionId"], m["transactionId"]))
    assert st == 200 and MS_TS.match(detail["createdAt"]) and detail["payload"] == 1
    assert detail["consumerGroups"][0]["name"] == "g" and MS_TS.match(detail["consumerGroups"][0]["leaseExpiresAt"])


def test_delayed_processing_and_window_buffer(http: RawHTTP, q: str) -> None:
    http.configure(q, delayedProcessing=1)
    http.push(q, ["late"], partition="p")
    # a partition held back only by delayedProcessing is claimed: an empty success with a
    # lease, given back at once (a second pop claims it again); Queen 0.15.1, 2026-12-02
    for _ in range(2):
        empty = http.pop(q, wait=False)
        assert (empty["success"], empty["messages"], empty["partition"], empty["partitionsClaimed"]) == (True, [], "p", 1)
        assert UUID_RE.match(empty["leaseId"])
    t0 = time.monotonic()
    got = http.pop(q, wait=True, timeout=5000)  # parked until the message becomes visible
    assert _datas(got) == ["late"] and time.monotonic() - t0 < 4.5
    w = q + "-w"
    try:
        http.configure(w, windowBuffer=1)
        http.push(w, [1, 2], partition="p")
        assert http.pop(w, batch=5, wait=False)["error"] == "no_available_partition"
        assert _datas(http.pop(w, batch=5, wait=True, timeout=5000)) == [1, 2]
    finally:
        http.delete_queue(w)


def test_traces_messages_and_delete(http: RawHTTP, q: str) -> None:
    http.push(q, [{"i": 0}, {"i": 1}], partition="p")
    got = http.pop(q, batch=1, consumerGroup="g", wait=True, timeout=3000)
    m = got["messages"][0]
    http.ack(m, group="g")
    name = unique("trace")
    st, res = http.request("POST", "/api/v1/traces", {"transactionId": m["transactionId"],
                                                      "partitionId": m["partitionId"], "consumerGroup": "g",
                                                      "traceNames": [name], "eventType": "info",
                                                      "data": {"note": "x"}})
    assert st == 200 and res["success"] is True and UUID_RE.match(res["traceId"])
    assert http.request("POST", "/api/v1/traces", {"transactionId": "nope", "partitionId": m["partitionId"],
                                                   "data": {}})[1] == {"success": False, "error": "Message not found"}
    assert http.request("POST", "/api/v1/traces", {"data": {}})[0] == 400
    st, tr = http.request("GET", "/api/v1/traces/%s/%s" % (m["partitionId"], m["transactionId"]))
    assert [(t["consumer_group"], t["data"], t["trace_names"]) for t in tr["traces"]] == [("g", {"note": "x"}, [name])]
    st, names = http.request("GET", "/api/v1/traces/names")
    assert name in [n["trace_name"] for n in names["trace_names"]]
    st, lst = http.request("GET", "/api/v1/messages?queue=" + q)
    assert [(x["transactionId"] == m["transactionId"], x["status"]) for x in lst["messages"]] == \
        [(False, "pending"), (True, "completed")]  # newest first
    assert lst["mode"] == {"busGroupsCount": 1, "hasQueueMode": False, "type": "bus"}
    st, detail = http.request("GET", "/api/v1/consumer-groups/g")
    assert detail[q]["partitions"][0]["totalConsumed"] == 1 and detail[q]["partitions"][0]["offsetLag"] == 1
