"""Queue options: all 15 configure options, update_config() merging, and pop with autoAck."""

from __future__ import annotations

import logging
from typing import Any, List

import pytest

from queen_sync import BrokerError, InvalidInputError, Queen
from queen_sync.options import QUEUE_OPTION_DEFAULTS, UNREADABLE_QUEUE_OPTIONS

ALL_OPTIONS = {
    "lease_time": 10,
    "retry_limit": 2,
    "retry_delay": 500,
    "dead_letter_queue": True,
    "dlq_after_max_retries": True,
    "priority": 5,
    "delayed_processing": 0,
    "window_buffer": 0,
    "max_size": 1000,
    "ttl": 600,
    "retention_seconds": 3600,
    "completed_retention_seconds": 60,
    "retention_enabled": True,
    "encryption_enabled": False,
    "max_wait_time_seconds": 0,
}


def test_every_option_is_sent(client: Queen, qname: str) -> None:
    opts = client.queue(qname).config(ALL_OPTIONS).create()["options"]
    assert opts == {
        "leaseTime": 10,
        "retryLimit": 2,
        "retryDelay": 500,
        "deadLetterQueue": True,
        "dlqAfterMaxRetries": True,
        "priority": 5,
        "delayedProcessing": 0,
        "windowBuffer": 0,
        "maxSize": 1000,
        "ttl": 600,
        "retentionSeconds": 3600,
        "completedRetentionSeconds": 60,
        "retentionEnabled": True,
        "encryptionEnabled": False,
        "maxWaitTimeSeconds": 0,
    }


def test_update_config_keeps_other_options(client: Queen, qname: str) -> None:
    client.queue(qname).namespace("ns-u").task("t-u").config(
        {"lease_time": 60, "retry_limit": 5, "priority": 7, "ttl": 600, "max_size": 50, "retention_seconds": 120}
    ).create()
    res = client.queue(qname).update_config({"retry_delay": 250})
    o = res["options"]
    assert (o["leaseTime"], o["retryLimit"], o["priority"], o["ttl"], o["maxSize"]) == (60, 5, 7, 600, 50)
    assert o["retryDelay"] == 250
    assert o["retentionSeconds"] == 120  # not reported by the broker: known from this client's create()
    assert (res["namespace"], res["task"]) == ("ns-u", "t-u")
    detail = client.admin.get_queue_detail(qname)["queue"]
    assert detail["config"]["retryDelay"] == 250 and detail["config"]["leaseTime"] == 60
    assert detail["namespace"] == "ns-u"
    # a second update keeps the first one's change
    o = client.queue(qname).update_config({"lease_time": 30})["options"]
    assert (o["leaseTime"], o["retryDelay"], o["retryLimit"], o["retentionSeconds"]) == (30, 250, 5, 120)


def test_update_config_from_another_client(
    broker_url: str, client: Queen, qname: str, caplog: pytest.LogCaptureFixture
) -> None:
    client.queue(qname).config({"lease_time": 70, "dead_letter_queue": True, "window_buffer": 3}).create()
    with Queen(broker_url) as other, caplog.at_level(logging.WARNING, logger="queen_sync.admin"):
        o = other.queue(qname).update_config({"retry_limit": 9})["options"]
    assert (o["leaseTime"], o["deadLetterQueue"], o["retryLimit"]) == (70, True, 9)
    # windowBuffer is not reported by a 0.15 broker and this client never configured the queue
    assert o["windowBuffer"] == 0
    assert any("windowBuffer" in r.getMessage() for r in caplog.records)


def test_update_config_explicit_unreadable_option_no_warning(
    broker_url: str, client: Queen, qname: str, caplog: pytest.LogCaptureFixture
) -> None:
    client.queue(qname).create()
    keep = {k: QUEUE_OPTION_DEFAULTS[k] for k in UNREADABLE_QUEUE_OPTIONS}
    keep["windowBuffer"] = 2
    with Queen(broker_url) as other, caplog.at_level(logging.WARNING, logger="queen_sync.admin"):
        o = other.queue(qname).update_config(keep)["options"]
    assert o["windowBuffer"] == 2
    assert not [r for r in caplog.records if r.name == "queen_sync.admin"]


def test_update_config_forgets_deleted_queue(client: Queen, qname: str) -> None:
    client.queue(qname).config({"window_buffer": 4}).create()
    client.queue(qname).delete()
    client.queue(qname).partition("p").push({"data": 1})  # auto-created with the defaults
    assert client.queue(qname).update_config({"ttl": 60})["options"]["windowBuffer"] == 0


def test_update_config_refuses_a_missing_queue_and_creates_nothing(client: Queen, qname: str) -> None:
    """configure is an upsert: update_config() used to create a missing queue with defaults
    (a typo'd name became a new queue). The status read it makes anyway tells."""
    with pytest.raises(BrokerError) as ei:
        client.queue(qname).update_config({"lease_time": 15})
    assert str(ei.value) == (
        "update_config(%r): queue %r does not exist (GET /api/v1/status/queues/%s answered 'Queue not found'); "
        "nothing was configured. Create it with queue(%r).config({...}).create()" % (qname, qname, qname, qname))
    assert ei.value.error == "Queue not found"
    with pytest.raises(BrokerError, match="Queue not found"):
        client.admin.get_queue(qname)
    client.queue(qname).config({"lease_time": 15}).create()
    assert client.queue(qname).update_config({"retry_limit": 5})["options"]["leaseTime"] == 15


def test_update_config_of_a_missing_queue_sends_only_the_read(embedded_broker: Any) -> None:
    with Queen(embedded_broker.url) as q:
        with pytest.raises(BrokerError, match="does not exist"):
            q.queue("nope").update_config({"ttl": 60})
    assert embedded_broker.request_count("POST", "/api/v1/configure") == 0
    assert embedded_broker.request_count("GET", "/api/v1/status/queues/nope") == 1


@pytest.mark.parametrize("opts", [{"lease": 5}, {"leaseTime": "60"}, {"retry_limit": -1}, "x"])
def test_update_config_bad_input_sends_nothing(embedded_broker: Any, opts: Any) -> None:
    with Queen(embedded_broker.url) as q:
        with pytest.raises(InvalidInputError):
            q.queue("ok").update_config(opts)
    assert embedded_broker.request_count() == 0


# --------------------------------------------------------------------------- pop autoAck


def test_pop_auto_ack_commits_on_delivery(client: Queen, qname: str) -> None:
    client.queue(qname).partition("p").push([{"data": i} for i in range(3)])
    b = client.queue(qname).partition("p")

    leased = b.pop()  # normal pop: a lease that locks the partition until acked
    assert [m["data"] for m in leased] == [0] and leased[0]["leaseId"]
    assert b.pop() == []
    client.ack(leased, True)

    first = b.auto_ack(True).pop()
    assert [m["data"] for m in first] == [1] and first[0]["leaseId"] == ""
    # nothing to ack: the partition is free at once and the message is never redelivered
    second = b.auto_ack(True).pop()
    assert [m["data"] for m in second] == [2]
    assert b.pop() == []
    with pytest.raises(InvalidInputError):
        client.renew(first[0])


def test_pop_auto_ack_query(embedded_broker: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    with Queen(embedded_broker.url) as q:
        sent: List[Any] = []
        real = q._session.request

        def spy(method: str, path: str, **kw: Any) -> Any:
            sent.append(kw.get("query"))
            return real(method, path, **kw)

        monkeypatch.setattr(q._session, "request", spy)
        q.queue("aq").auto_ack(True).pop()
        q.queue("aq").auto_ack(False).pop()
        q.queue("aq").pop()
    assert sent[0].get("autoAck") == "true"
    assert "autoAck" not in sent[1] and "autoAck" not in sent[2]
