"""ack / nack verdicts, lease renewal and transactions against a broker.

Lease expiry is awaited with a long-poll pop by the same consumer group: it returns only once
the old lease has expired and the message is redelivered (no sleeps).
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any, Dict, List

import pytest

from queen_sync import AckError, InvalidInputError, LeaseError, Queen, TransactionError, codec


def _pop(client: Queen, queue: str, group: str = None, n: int = 1, timeout: int = 5000) -> List[Dict[str, Any]]:
    b = client.queue(queue).batch(n).wait(True).timeout_millis(timeout)
    if group is not None:
        b = b.group(group)
    return b.pop()


def _wait_for_redelivery(client: Queen, queue: str, group: str, old: Dict[str, Any]) -> Dict[str, Any]:
    """Long-poll until the message comes back under a new lease (the old one has expired)."""
    got = _pop(client, queue, group, timeout=15000)
    assert got and got[0]["transactionId"] == old["transactionId"]
    assert got[0]["leaseId"] != old["leaseId"]
    return got[0]


def _expiry(result: Dict[str, Any]) -> dt.datetime:
    return dt.datetime.fromisoformat(result["expiresAt"].replace("Z", "+00:00"))


# --------------------------------------------------------------------------- ack


def test_ack_single(client: Queen, qname: str) -> None:
    client.queue(qname).push({"data": 1})
    m = _pop(client, qname, "g")[0]
    res = client.ack(m)  # group defaults to the message's own consumerGroup
    assert res["success"] is True and res["transactionId"] == m["transactionId"]
    assert res["leaseReleased"] is True
    assert client.queue(qname).group("g").pop() == []


def test_ack_list_and_queue_mode(client: Queen, qname: str) -> None:
    client.queue(qname).push([{"data": i} for i in range(3)])
    msgs = _pop(client, qname, n=3)
    res = client.ack(msgs, "completed")
    assert [r["success"] for r in res] == [True] * 3
    assert [r["index"] for r in res] == [0, 1, 2]
    assert client.queue(qname).pop() == []


def test_ack_list_mixed_groups(client: Queen, qname: str, unique_name: Any) -> None:
    client.queue(qname).push([{"data": 1}, {"data": 2}])
    g1, g2 = unique_name("g1"), unique_name("g2")
    a = _pop(client, qname, g1, n=2)
    b = _pop(client, qname, g2, n=2)
    mixed = [a[0], b[0], a[1], b[1]]
    res = client.ack(mixed, True)
    assert all(r["success"] for r in res)
    assert [r["transactionId"] for r in res] == [m["transactionId"] for m in mixed]
    assert client.queue(qname).group(g1).pop() == [] and client.queue(qname).group(g2).pop() == []


def test_ack_batch_split_per_group_requests(embedded_broker: Any) -> None:
    with Queen(embedded_broker.url) as q:
        q.queue("split").push([{"data": 1}])
        a = _pop(q, "split", "g1")
        b = _pop(q, "split", "g2")
        before = embedded_broker.request_count("POST", "/api/v1/ack/batch")
        q.ack(a + b)
        assert embedded_broker.request_count("POST", "/api/v1/ack/batch") - before == 2


@pytest.mark.parametrize("bad, missing", [({"transactionId": "t"}, "partitionId"), ({"partitionId": "p"}, "transactionId")])
def test_ack_list_names_the_bad_items_place_in_the_list(embedded_broker: Any, bad: Dict[str, Any], missing: str) -> None:
    # the bad item has no consumerGroup, so it plans into a batch of its own: its error must
    # still name its place in the caller's list (it named its place in that batch, 0)
    with Queen(embedded_broker.url) as q:
        q.queue("places").push([{"data": i} for i in range(3)])
        ms = _pop(q, "places", "g", n=3)
        before = embedded_broker.request_count("POST", "/api/v1/ack/batch")
        with pytest.raises(InvalidInputError, match=r"^ack item 2: message has no %s$" % missing):
            q.ack([ms[0], ms[1], bad, ms[2]], True)
        assert embedded_broker.request_count("POST", "/api/v1/ack/batch") == before  # nothing sent
        assert q.ack(ms, True) and q.queue("places").group("g").pop() == []


def test_ack_list_naming_a_message_twice_is_refused_before_sending(embedded_broker: Any) -> None:
    with Queen(embedded_broker.url) as q:
        q.queue("dups").push([{"data": i} for i in range(3)])
        ms = _pop(q, "dups", "g", n=3)
        acks = lambda: embedded_broker.request_count("POST", "/api/v1/ack/batch")  # noqa: E731
        # the same dict twice, an equal copy, and another group's list around them
        for again in (ms[0], dict(ms[0]), dict(ms[0], _status="failed")):
            with pytest.raises(InvalidInputError, match=r"^ack items 0 and 3 are the same message \(transactionId %s, "
                               r"partitionId %s\) for consumer group 'g': .*nothing was sent" % (ms[0]["transactionId"], ms[0]["partitionId"])):
                q.ack([ms[0], ms[1], ms[2], again], True)
        # a copy redelivered under another lease is the same message too, and the error says so
        with pytest.raises(InvalidInputError, match=r"ack items 1 and 2 .*under two leases: leaseId %s and other-lease"
                           % ms[1]["leaseId"]):
            q.ack([ms[0], ms[1], dict(ms[1], leaseId="other-lease")], True)
        # an explicit group: both copies are for it
        with pytest.raises(InvalidInputError, match="for consumer group 'h'"):
            q.ack([ms[2], dict(ms[2], consumerGroup="g2")], True, group="h")
        assert acks() == 0  # nothing sent
        # the same message for two groups is two acks, not a duplicate
        (other,) = _pop(q, "dups", "g2", n=1)
        res = q.ack(ms + [other], True)
        assert [r["success"] for r in res] == [True] * 4 and acks() == 2
        assert q.queue("dups").group("g").pop() == []


def test_ack_list_duplicate_in_queue_mode_names_queue_mode(embedded_broker: Any) -> None:
    with Queen(embedded_broker.url) as q:
        q.queue("dupq").push({"data": 0})
        (m,) = _pop(q, "dupq", n=1)
        with pytest.raises(InvalidInputError, match=r"ack items 0 and 1 are the same message .* for queue mode"):
            q.ack([m, m], "failed")
        assert embedded_broker.request_count("POST", "/api/v1/ack/batch") == 0
        assert q.ack([m], True)[0]["success"] is True


def test_transaction_acking_a_message_twice_is_refused_at_commit_before_sending(embedded_broker: Any) -> None:
    with Queen(embedded_broker.url) as q:
        q.queue("txdups").push([{"data": i} for i in range(3)])
        ms = _pop(q, "txdups", "g", n=3)
        sent = lambda: embedded_broker.request_count("POST", "/api/v1/transaction")  # noqa: E731
        ids = r"\(transactionId %s, partitionId %s\)" % (ms[0]["transactionId"], ms[0]["partitionId"])
        # in two ack() calls (a push between them counts as an operation), in one list, an equal copy
        tx = q.transaction().ack(ms[0]).queue("txdups-out").push({"data": "x"}).ack([ms[1], dict(ms[0])])
        with pytest.raises(InvalidInputError, match=r"^transaction operations 0 and 3 are the same message %s for "
                           r"consumer group 'g': one transaction settles a message once; build it again without "
                           r"the duplicate \(nothing was sent\)$" % ids):
            tx.commit()
        with pytest.raises(InvalidInputError, match="transaction operations 0 and 3"):
            tx.commit()  # refused again: nothing was built or sent
        with pytest.raises(InvalidInputError, match=r"operations 0 and 1 .* for queue mode: "):
            q.transaction().ack([ms[2], ms[2]], True, group="__QUEUE_MODE__").commit()
        with pytest.raises(InvalidInputError, match=r"operations 0 and 1 .*under two leases: leaseId %s and other"
                           % ms[1]["leaseId"]):
            q.transaction().ack([ms[1], dict(ms[1], leaseId="other")], "failed").commit()
        assert sent() == 0
        # the same message for two consumer groups is two acks, not a duplicate
        (other,) = _pop(q, "txdups", "g2", n=1)
        res = q.transaction().ack(ms).ack(other).commit()
        assert [r["success"] for r in res["results"]] == [True] * 4 and sent() == 1
        assert q.queue("txdups").group("g").pop() == [] and q.queue("txdups").group("g2").batch(3).pop() != []


def test_ack_unknown_raises(client: Queen, qname: str) -> None:
    client.queue(qname).push({"data": 1})
    m = _pop(client, qname)[0]
    fake = dict(m, transactionId=str(uuid.uuid4()))
    with pytest.raises(AckError) as ei:
        client.ack(fake)
    assert ei.value.failed[0]["error"] == "Message not found"
    with pytest.raises(AckError) as ei:
        client.ack([m, fake])
    assert len(ei.value.results) == 2 and len(ei.value.failed) == 1
    assert ei.value.results[0]["success"] is True


def test_ack_twice_raises(client: Queen, qname: str) -> None:
    client.queue(qname).push({"data": 1})
    m = _pop(client, qname, "g")[0]
    client.ack(m)
    with pytest.raises(AckError) as ei:
        client.ack(m)
    assert ei.value.failed[0]["error"] == "Invalid or expired lease"


def test_ack_wrong_group_raises(client: Queen, qname: str) -> None:
    client.queue(qname).push({"data": 1})
    m = _pop(client, qname, "g")[0]
    with pytest.raises(AckError):
        client.ack(m, True, {"group": "someone-else"})
    client.ack(m, True, {"consumer_group": "g"})


def test_nack_redelivers_with_error(client: Queen, qname: str) -> None:
    client.queue(qname).push({"data": 1})
    m = _pop(client, qname, "g")[0]
    res = client.ack(m, False, {"error": "handler failed"})
    assert res["success"] is True and res["dlq"] is False
    again = _pop(client, qname, "g")[0]
    assert again["transactionId"] == m["transactionId"]
    client.ack(again, "success")


def test_ack_expired_lease_raises(client: Queen, qname: str) -> None:
    client.queue(qname).config({"lease_time": 1}).create()
    client.queue(qname).push({"data": 1})
    m = _pop(client, qname, "g")[0]
    fresh = _wait_for_redelivery(client, qname, "g", m)
    with pytest.raises(AckError) as ei:
        client.ack(m)
    assert ei.value.failed[0]["error"] == "Invalid or expired lease"
    assert client.ack(fresh)["success"] is True


# --------------------------------------------------------------------------- renew


def test_renew_extends(client: Queen, qname: str) -> None:
    client.queue(qname).config({"lease_time": 5}).create()
    client.queue(qname).push([{"data": 1}, {"data": 2}])
    msgs = _pop(client, qname, "g", n=2)
    now = dt.datetime.now(dt.timezone.utc)
    res = client.renew(msgs[0], seconds=120)
    assert res["success"] is True and res["leaseId"] == msgs[0]["leaseId"]
    assert _expiry(res) > now + dt.timedelta(seconds=100)
    res = client.renew(msgs[0]["leaseId"])
    assert res["success"] is True
    many = client.renew(msgs)  # one lease shared by the batch: one call
    assert isinstance(many, list) and len(many) == 1 and many[0]["success"] is True
    client.ack(msgs)
    with pytest.raises(LeaseError) as ei:
        client.renew(msgs[0])
    assert ei.value.error == "Lease not found"


def test_renewed_lease_outlives_lease_time(client: Queen, qname: str) -> None:
    client.queue(qname).config({"lease_time": 1}).create()
    client.queue(qname).push({"data": 1})
    m = _pop(client, qname, "g")[0]
    client.renew(m, seconds=60)
    # a 2 s long poll by the same group finds the partition still leased...
    assert _pop(client, qname, "g", timeout=2000) == []
    # ...and the original lease still acks
    assert client.ack(m)["success"] is True


def test_renew_unknown_and_expired(client: Queen, qname: str) -> None:
    with pytest.raises(LeaseError) as ei:
        client.renew(str(uuid.uuid4()))
    assert ei.value.error == "Lease not found"
    client.queue(qname).config({"lease_time": 1}).create()
    client.queue(qname).push({"data": 1})
    m = _pop(client, qname, "g")[0]
    _wait_for_redelivery(client, qname, "g", m)
    with pytest.raises(LeaseError):
        client.renew(m)


def test_renew_auto_ack_message_has_no_lease(client: Queen, qname: str) -> None:
    client.queue(qname).push({"data": 1})
    m = client.queue(qname).auto_ack(True).wait(True).timeout_millis(5000).pop()[0]
    with pytest.raises(InvalidInputError):
        client.renew(m)


# --------------------------------------------------------------------------- transactions


def test_transaction_push_and_ack(client: Queen, qname: str, unique_name: Any) -> None:
    out = unique_name("out")
    try:
        client.queue(qname).partition("acme").push({"data": {"order": "A-1"}})
        m = _pop(client, qname, "inv")[0]
        tx = client.transaction().queue(out).partition("acme").push([{"data": {"invoice": "INV-A-1"}}])
        tx = tx.ack(m, "completed", {"consumer_group": "inv"})
        ops = tx.operations
        assert ops[1]["leaseId"] == m["leaseId"] and ops[1]["consumerGroup"] == "inv"
        res = tx.commit()
        assert res["success"] is True and len(res["results"]) == 2
        with pytest.raises(InvalidInputError):
            tx.commit()
        got = _pop(client, out)
        assert [x["data"] for x in got] == [{"invoice": "INV-A-1"}]
        assert client.queue(qname).group("inv").pop() == []
    finally:
        client.queue(out).delete()


def test_transaction_ack_takes_group_and_error_as_keywords(client: Queen, qname: str) -> None:
    # as Queen.ack does: group= / error= beside the context dict (it raised TypeError)
    client.queue(qname).push([{"data": 1}])
    m = _pop(client, qname, "kw")[0]
    with pytest.raises(InvalidInputError, match="differ"):
        client.transaction().ack(m, "failed", {"group": "kw"}, group="other")
    res = client.transaction().ack(m, "failed", group="kw", error="bad row").commit()
    assert res.get("success") is True, res
    assert client.queue(qname).group("kw").pop() == []  # dead-lettered, not redelivered
    rows = client.queue(qname).dlq("kw").get()
    assert [r.get("errorMessage") for r in rows] == ["bad row"], rows


def test_transaction_default_group_is_message_group(client: Queen, qname: str) -> None:
    client.queue(qname).push({"data": 1})
    m = _pop(client, qname, "grp")[0]
    tx = client.transaction().ack(m)
    assert tx.operations[0]["consumerGroup"] == "grp"
    assert tx.commit()["success"] is True
    assert client.queue(qname).group("grp").pop() == []
    q_mode = _pop(client, qname)[0]
    tx = client.transaction().ack(q_mode, True)
    assert "consumerGroup" not in tx.operations[0]
    assert tx.commit()["success"] is True


def test_transaction_unknown_message_rejected(client: Queen, qname: str, unique_name: Any) -> None:
    out = unique_name("out")
    client.queue(qname).push({"data": 1})
    m = _pop(client, qname)[0]
    fake = dict(m, transactionId=str(uuid.uuid4()), leaseId=None)
    with pytest.raises(TransactionError) as ei:
        client.transaction().queue(out).push({"data": "x"}).ack(fake).commit()
    assert ei.value.result["success"] is False
    assert "Message not found" in ei.value.result["error"]
    assert client.queue(out).wait(True).timeout_millis(300).pop() == []


def test_transaction_expired_lease_rejected_nothing_pushed(client: Queen, qname: str, unique_name: Any) -> None:
    out = unique_name("out")
    try:
        client.queue(qname).config({"lease_time": 1}).create()
        client.queue(qname).push({"data": 1})
        m = _pop(client, qname, "g")[0]
        fresh = _wait_for_redelivery(client, qname, "g", m)
        with pytest.raises(TransactionError) as ei:
            client.transaction().queue(out).push({"data": "invoice"}).ack(m, "completed", {"group": "g"}).commit()
        assert "Invalid or expired lease" in ei.value.result["error"]
        assert client.queue(out).wait(True).timeout_millis(300).pop() == []
        # the live lease can still commit
        res = client.transaction().queue(out).push({"data": "invoice"}).ack(fresh, "completed", {"group": "g"}).commit()
        assert res["success"] is True
        assert [x["data"] for x in _pop(client, out)] == ["invoice"]
    finally:
        client.queue(out).delete()


def _dlq_rows(client: Queen, qname: str) -> list:
    resp = client._request("GET", "/api/v1/dlq", query={"queue": qname}, idempotent=True)
    return sorted((r["data"]["i"], r["retryCount"]) for r in codec.decode_json(resp.data)["messages"])


def test_a_list_nack_that_reaches_the_retry_limit_dead_letters_every_message(client: Queen, qname: str) -> None:
    # one batch call would dead-letter 1 and 2 and move the cursor past 0 (test_broker_semantics)
    client.queue(qname).config({"retryLimit": 1, "leaseTime": 30}).create()
    client.queue(qname).partition("p").push([{"data": {"i": i}} for i in range(3)])
    for expect_dlq in (False, True):
        msgs = client.queue(qname).partition("p").group("g").batch(3).wait(True).timeout_millis(3000).pop()
        assert [m["data"]["i"] for m in msgs] == [0, 1, 2]
        res = client.ack(msgs, False, group="g", error="bad")
        assert [(r["index"], r["success"], r["dlq"]) for r in res] == [(i, True, expect_dlq) for i in range(3)]
        assert all(r["transactionId"] == m["transactionId"] for r, m in zip(res, msgs))
    assert _dlq_rows(client, qname) == [(0, 1), (1, 1), (2, 1)]
    assert client.queue(qname).group("g").pop() == []


def test_a_list_ack_after_a_released_nack_is_not_sent_and_says_so(client: Queen, qname: str) -> None:
    client.queue(qname).config({"retryLimit": 3, "leaseTime": 30}).create()
    client.queue(qname).partition("p").push([{"data": {"i": i}} for i in range(3)])
    msgs = client.queue(qname).partition("p").group("g").batch(3).wait(True).timeout_millis(3000).pop()
    marked = [dict(msgs[0], _status="completed"), dict(msgs[1], _status="failed"), dict(msgs[2], _status="completed")]
    with pytest.raises(AckError) as ei:
        client.ack(marked, group="g")
    got = [(r["index"], r["success"], r.get("leaseReleased")) for r in ei.value.results]
    assert got == [(0, True, False), (1, True, True), (2, False, False)]
    assert "not sent" in ei.value.failed[0]["error"] and msgs[1]["transactionId"] in ei.value.failed[0]["error"]
    # 1 is redelivered (and 2 behind it); in one call the broker would have skipped 1
    again = client.queue(qname).partition("p").group("g").batch(3).wait(True).timeout_millis(3000).pop()
    assert [m["data"]["i"] for m in again] == [1, 2]
    client.ack(again, group="g")
