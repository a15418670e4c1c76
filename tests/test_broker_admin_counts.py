"""Counts in the admin listings and status routes follow what the broker stores.

Per-queue counts (listings, queue detail, namespaces, tasks, consumer groups) are the broker's
statistics, refreshed first as a real broker needs; the broker-wide request counters (status,
overview, worker metrics) are checked on a fresh embedded broker, where nothing else runs.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Dict, List

import pytest

from _broker_http import RawHTTP
from _helpers import wait_until
from queen_sync import AckError, Queen


def _listed(entries: List[Dict[str, Any]], key: str, value: str) -> Dict[str, Any]:
    mine = [e for e in entries if e[key] == value]
    assert len(mine) == 1, entries
    return mine[0]


def _partitions(detail: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    return {p["name"]: p for p in detail["partitions"]}


def test_listings_count_pending_processing_completed(client: Queen, qname: str, unique_name: Any) -> None:
    ns, task = unique_name("ns"), unique_name("task")
    client.queue(qname).namespace(ns).task(task).create()  # also creates the Default partition
    client.queue(qname).partition("a").push([{"data": {"i": i}} for i in range(5)])
    client.queue(qname).partition("b").push([{"data": {"i": i}} for i in range(2)])
    a = client.admin

    a.refresh_consumer_stats()
    q = _listed(a.list_queues()["queues"], "name", qname)
    assert q["partitions"] == 3 and q["messages"] == {"total": 7, "pending": 7, "processing": 0}

    leased = client.queue(qname).partition("a").batch(2).pop()
    assert len(leased) == 2
    a.refresh_consumer_stats()
    # resources: pending without the leased batch; status/queues: pending as stored
    assert _listed(a.list_queues()["queues"], "name", qname)["messages"] == \
        {"total": 7, "pending": 5, "processing": 2}
    assert _listed(a.get_queue_stats(namespace=ns)["queues"], "name", qname)["messages"] == \
        {"total": 7, "pending": 7, "processing": 2}

    client.ack(leased[0], True)
    a.refresh_consumer_stats()
    parts = _partitions(a.get_queue(qname))
    assert parts["a"]["stats"] == {"total": 5, "pending": 4, "processing": 1, "completed": 1, "failed": 0,
                                   "deadLetter": 0}
    assert parts["b"]["stats"] == {"total": 2, "pending": 2, "processing": 0, "completed": 0, "failed": 0,
                                   "deadLetter": 0}
    assert parts["Default"]["stats"]["total"] == 0
    assert a.get_queue(qname)["totals"] == {"total": 7, "pending": 6, "processing": 1, "completed": 1,
                                            "failed": 0, "deadLetter": 0}
    detail = a.get_queue_detail(qname)
    assert detail["totals"]["messages"] == {"total": 7, "pending": 6, "processing": 1, "completed": 1,
                                            "failed": 0, "deadLetter": 0}
    assert _partitions(detail)["a"]["messages"] == parts["a"]["stats"]
    assert _partitions(detail)["a"]["cursor"]["totalConsumed"] == 1
    assert _listed(a.get_namespaces()["namespaces"], "namespace", ns) == \
        {"namespace": ns, "queues": 1, "partitions": 3, "messages": {"total": 7, "pending": 5}}
    assert _listed(a.get_tasks()["tasks"], "task", task) == \
        {"task": task, "queues": 1, "partitions": 3, "messages": {"total": 7, "pending": 5}}

    client.ack(leased[1], True)
    a.refresh_consumer_stats()
    assert _listed(a.list_queues()["queues"], "name", qname)["messages"] == \
        {"total": 7, "pending": 5, "processing": 0}


def test_counts_take_the_slowest_group_and_dead_letters(client: Queen, qname: str, unique_name: Any) -> None:
    slow, fast = unique_name("slow"), unique_name("fast")
    client.queue(qname).config({"retry_limit": 0}).create()
    client.queue(qname).partition("p").push([{"data": i} for i in range(3)])
    [first] = client.queue(qname).partition("p").group(slow).pop()
    assert client.ack(first, False, error="bad")["dlq"] is True  # retry limit 0: straight to the DLQ
    done = client.queue(qname).partition("p").group(fast).batch(3).pop()
    assert len(done) == 3
    client.ack(done, True)
    a = client.admin
    # the partition reports the largest count over its groups: slow's pending and DLQ, fast's completed
    want = {"total": 3, "pending": 2, "processing": 0, "completed": 3, "failed": 0, "deadLetter": 1}

    def counted() -> bool:  # a real broker's stats lag the acks when it is busy (they pass alone, not under -n 4)
        a.refresh_consumer_stats()
        return bool(_partitions(a.get_queue(qname))["p"]["stats"] == want)

    assert wait_until(counted), _partitions(a.get_queue(qname))["p"]["stats"]
    assert _listed(a.list_queues()["queues"], "name", qname)["messages"] == \
        {"total": 3, "pending": 2, "processing": 0}

    groups = {g["name"]: g for g in a.list_consumer_groups() if g["queueName"] == qname}
    assert groups[slow]["members"] == 1 and groups[slow]["partitionsWithLag"] == 1
    assert groups[fast]["partitionsWithLag"] == 0 and groups[fast]["maxTimeLag"] == 0
    assert groups[fast]["state"] == "Stable"
    part = a.get_consumer_group(slow)[qname]["partitions"][0]
    assert part["offsetLag"] == 2 and part["leaseActive"] is False


def test_queue_mode_message_status(client: Queen, qname: str) -> None:
    client.queue(qname).partition("p").push([{"data": i} for i in range(3)])
    [msg] = client.queue(qname).partition("p").pop()
    # a live queue-mode lease on the partition: every message not yet consumed is "processing"
    assert [m["status"] for m in client.admin.get_queue_messages(qname)] == ["processing"] * 3
    client.ack(msg, True)
    assert sorted(m["status"] for m in client.admin.get_queue_messages(qname)) == \
        ["completed", "pending", "pending"]
    listed = client.admin.list_messages(queue=qname)
    assert listed["mode"] == {"busGroupsCount": 0, "hasQueueMode": True, "type": "queue"}
    assert sorted(m["status"] for m in listed["messages"]) == ["completed", "pending", "pending"]


def test_queue_messages_route_pages_like_the_real_broker(embedded_broker: Any) -> None:
    http = RawHTTP(embedded_broker.url)
    with Queen(embedded_broker.url) as client:
        client.queue("paged").partition("p").push([{"data": i} for i in range(3)])
        client.queue("paged").partition("r").push([{"data": 9}])
    path = "/api/v1/status/queues/paged/messages"
    # LIMIT/OFFSET apply to the procedure's single aggregated row, not to the messages
    assert len(http.request("GET", path + "?limit=1&partition=p")[1]) == 4
    assert http.request("GET", path + "?offset=1") == (200, {"success": True, "value": None})
    assert http.request("GET", "/api/v1/status/queues/nope/messages") == (200, None)  # no body (0.15.1, 2026-12-02)


def test_analytics_counts_messages_per_hour(client: Queen, qname: str) -> None:
    client.queue(qname).push([{"data": i} for i in range(4)])
    now = dt.datetime.now(dt.timezone.utc)
    an = client.admin.get_analytics(queue=qname, from_=now - dt.timedelta(hours=3),
                                    to=now + dt.timedelta(minutes=1), interval="hour")
    # one point per hour from the hour holding `from` to the hour holding `to`, empty ones included
    assert len(an["dataPoints"]) in (4, 5)
    assert sum(p["messages"] for p in an["dataPoints"]) == 4


def test_status_and_overview_count_requests(embedded_broker: Any) -> None:
    with Queen(embedded_broker.url) as client:
        q = client.queue("counted")
        q.config({"retry_limit": 0}).create()
        pushed = q.partition("p").push([{"transactionId": "t%d" % i, "data": i} for i in range(3)])
        q.partition("p").push([{"transactionId": "t0", "data": "again"}])  # a duplicate still counts
        msgs = q.partition("p").batch(3).pop()
        assert len(msgs) == 3 and q.partition("p").pop() == []
        a = client.admin

        st = a.get_status()
        assert st["leases"] == {"active": 1, "partitionsWithLeases": 1, "totalBatchSize": 3, "totalAcked": 0}
        assert a.get_overview()["messages"]["processing"] == 3

        client.ack(msgs[:2], True)
        assert a.get_status()["leases"]["totalAcked"] == 2
        assert client.ack(msgs[2], False)["dlq"] is True  # an accepted nack is a successful ack
        with pytest.raises(AckError):
            client.ack({"transactionId": "nope", "partitionId": pushed[0]["partition_id"]}, True)

        st = a.get_status()
        assert {k: st["messages"][k] for k in ("total", "pending", "processing", "completed", "failed",
                                               "deadLetter")} == \
            {"total": 4, "pending": 1, "processing": 0, "completed": 3, "failed": 1, "deadLetter": 1}
        assert st["messages"]["requests"] == {"push": 2, "pop": 2, "ack": 3}
        assert st["messages"]["batchEfficiency"] == {"push": 2.0, "pop": 1.5, "ack": 1.33}
        assert st["errors"] == {"ackFailed": 1, "dbErrors": 0, "dlqMessages": 1}
        assert st["leases"]["active"] == 0
        assert [e["name"] for e in st["queues"]] == ["counted"] and st["queues"][0]["totalConsumed"] == 2
        assert sum(p["ingested"] for p in st["throughput"]) == 4
        assert sum(p["popMessages"] for p in st["throughput"]) == 3

        ov = a.get_overview()
        assert ov["messages"] == {"total": 4, "pending": 0, "processing": 0, "completed": 3, "failed": 1,
                                  "deadLetter": 1}
        assert (ov["queues"], ov["partitions"], ov["namespaces"], ov["tasks"]) == (1, 2, 0, 0)

        wm = a.get_worker_metrics()["summary"]
        assert (wm["totalPushMessages"], wm["totalPopMessages"], wm["totalAckMessages"]) == (4, 3, 4)
        assert (wm["totalAckFailed"], wm["totalDlq"], wm["pendingMessages"]) == (1, 1, 1)


def test_auto_ack_transaction_and_streams_cycle_counts(embedded_broker: Any) -> None:
    http = RawHTTP(embedded_broker.url)
    with Queen(embedded_broker.url) as client:
        client.queue("src").partition("p").push([{"data": i} for i in range(4)])
        assert len(client.queue("src").partition("p").batch(2).auto_ack().pop()) == 2  # an ack of 2
        [msg] = client.queue("src").partition("p").pop()
        # a transaction's ack is not counted as an ack, but its DLQ move is
        res = client.transaction().ack(msg, "failed").commit()
        assert res["success"] is True and res["results"][0]["dlq"] is True

        _, reg = http.request("POST", "/streams/v1/queries",
                              {"name": "counted.q", "source_queue": "src", "config_hash": "h"})
        _, popped = http.request("GET", "/api/v1/pop/queue/src?consumerGroup=streams.counted.q&batch=4")
        last = popped["messages"][-1]
        _, cycle = http.request("POST", "/streams/v1/cycle", {
            "query_id": reg["query_id"], "partition_id": last["partitionId"],
            "consumer_group": "streams.counted.q", "push_items": [{"queue": "sink", "payload": {"n": 4}}],
            "ack": {"transactionId": last["transactionId"], "leaseId": last["leaseId"],
                    "status": "completed", "count": len(popped["messages"])}})
        assert cycle["success"] is True

        t = client.admin.get_worker_metrics()["summary"]
        # pushes: the 4 items and the cycle's sink item; acks: the auto-ack and the cycle's
        assert (t["totalPushRequests"], t["totalPushMessages"]) == (2, 5)
        assert (t["totalPopRequests"], t["totalPopMessages"]) == (3, 7)
        assert (t["totalAckRequests"], t["totalAckMessages"], t["totalAckFailed"], t["totalDlq"]) == (2, 6, 0, 1)
        assert client.admin.get_overview()["messages"]["completed"] == 6


def test_message_status_with_queue_mode_and_groups(client: Queen, qname: str, unique_name: Any) -> None:
    group = unique_name("g")
    client.queue(qname).config({"retry_limit": 1}).create()
    pushed = client.queue(qname).partition("p").push([{"data": i} for i in range(3)])
    client.ack(client.queue(qname).partition("p").group(group).batch(3).pop(), True)
    [first] = client.queue(qname).partition("p").pop()
    client.ack(first, True)
    a = client.admin

    # read in queue mode as well: the queue-mode cursor decides, though the group read everything
    listed = a.list_messages(queue=qname)
    assert listed["mode"] == {"busGroupsCount": 1, "hasQueueMode": True, "type": "hybrid"}
    by_tx = {m["transactionId"]: m for m in listed["messages"]}
    assert [by_tx[r["transaction_id"]]["status"] for r in pushed] == ["completed", "pending", "pending"]
    assert [by_tx[r["transaction_id"]]["busStatus"] for r in pushed] == [{"consumedBy": 1, "totalGroups": 1}] * 3

    for _ in range(2):  # retry limit 1: the second nack moves it to the DLQ
        [second] = client.queue(qname).partition("p").pop()
        client.ack(second, False, error="broken")
    detail = a.get_message(second["partitionId"], second["transactionId"])
    assert (detail["status"], detail["retryCount"], detail["errorMessage"]) == ("dead_letter", 1, "broken")
    assert sorted(g["name"] for g in detail["consumerGroups"]) == sorted([group, "__QUEUE_MODE__"])
    assert detail["mode"]["type"] == "hybrid" and detail["mode"]["consumedByGroups"] == 1
