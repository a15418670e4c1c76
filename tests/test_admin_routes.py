"""Queen.admin: resources, messages, status, consumer groups, system, maintenance, missing routes."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any, Dict, List

import pytest

from queen_sync import Admin, BrokerError, InvalidInputError, Queen, QueenHTTPError, RouteNotFoundError


def _seed(client: Queen, qname: str, ns: str, task: str, n: int = 3) -> List[Dict[str, Any]]:
    client.queue(qname).namespace(ns).task(task).config({"lease_time": 45}).create()
    return client.queue(qname).partition("p").push([{"data": {"i": i}} for i in range(n)])


def test_admin_is_lazy_singleton(client: Queen) -> None:
    assert isinstance(client.admin, Admin)
    assert client.admin is client.admin


def test_resource_getters(client: Queen, qname: str, unique_name: Any) -> None:
    ns, task = unique_name("ns"), unique_name("task")
    _seed(client, qname, ns, task)
    a = client.admin
    a.refresh_consumer_stats()  # a real broker computes these counts in a background job

    overview = a.get_overview()
    assert overview["queues"] >= 1 and "messages" in overview and "throughput" in overview

    mine = [e for e in a.get_namespaces()["namespaces"] if e["namespace"] == ns]
    assert len(mine) == 1 and mine[0]["queues"] == 1

    tasks = [e for e in a.get_tasks()["tasks"] if e["task"] == task]
    assert len(tasks) == 1 and tasks[0]["queues"] == 1

    listed = [e for e in a.list_queues()["queues"] if e["name"] == qname]
    assert len(listed) == 1 and listed[0]["namespace"] == ns and listed[0]["task"] == task

    one = a.get_queue(qname)
    assert one["name"] == qname and one["namespace"] == ns
    assert "p" in {p["name"] for p in one["partitions"]}


def test_missing_queue_is_broker_error(client: Queen, unique_name: Any) -> None:
    with pytest.raises(BrokerError) as ei:
        client.admin.get_queue(unique_name("never"))
    assert ei.value.error == "Queue not found" and not isinstance(ei.value, QueenHTTPError)
    with pytest.raises(BrokerError, match="Queue not found"):
        client.admin.get_queue_detail(unique_name("never"))
    assert client.admin.get_queue_messages(unique_name("never")) == []


def test_status_getters(client: Queen, qname: str, unique_name: Any) -> None:
    ns = unique_name("ns")
    _seed(client, qname, ns, "t")
    a = client.admin
    a.refresh_consumer_stats()

    st = a.get_status()
    assert {"messages", "leases", "deadLetterQueue", "queues"} <= set(st)
    now = dt.datetime.now(dt.timezone.utc)
    assert "messages" in a.get_status(from_=now - dt.timedelta(hours=1), to=now)

    stats = a.get_queue_stats(namespace=ns)
    assert [q["name"] for q in stats["queues"]] == [qname]
    assert stats["pagination"] == {"limit": 100, "offset": 0}
    assert a.get_queue_stats(namespace=ns, limit=5, offset=1)["queues"] == []

    detail = a.get_queue_detail(qname)
    assert detail["queue"]["name"] == qname
    assert detail["queue"]["config"]["leaseTime"] == 45 and detail["queue"]["config"]["retryLimit"] == 3

    msgs = a.get_queue_messages(qname)
    assert len(msgs) == 3 and {m["partition"] for m in msgs} == {"p"}
    assert all(m["status"] == "pending" for m in msgs)
    # the broker applies neither `limit` nor `partition` and answers offset >= 1 with no list:
    # the client cuts the page itself
    assert a.get_queue_messages(qname, partition="p", limit=2) == msgs[:2]
    assert a.get_queue_messages(qname, limit=1, offset=1) == msgs[1:2]
    assert a.get_queue_messages(qname, offset=3) == []
    assert a.get_queue_messages(qname, partition="other") == []

    an = a.get_analytics(from_=now - dt.timedelta(hours=3), to=now + dt.timedelta(minutes=1), interval="hour")
    assert isinstance(an["dataPoints"], list)
    assert isinstance(a.get_analytics(queue=qname)["dataPoints"], list)


def test_messages_list_get_delete(client: Queen, qname: str) -> None:
    pushed = _seed(client, qname, "ns-x", "t")
    a = client.admin
    listed = a.list_messages(queue=qname)["messages"]
    assert {m["transactionId"] for m in listed} == {r["transaction_id"] for r in pushed}
    assert len(a.list_messages(queue=qname, limit=1)["messages"]) == 1
    assert len(a.list_messages(queue=qname, offset=1)["messages"]) == 2
    assert len(a.list_messages(queue=qname, partition="p", status="pending")["messages"]) == 3
    # query values are URL-encoded: an odd task filter is sent intact and matches nothing
    assert a.list_messages(queue=qname, task="a b&c=d")["messages"] == []
    assert a.list_messages(queue=qname, status="completed")["messages"] == []
    assert a.list_messages(queue=qname, status="dead_letter")["messages"] == []

    target = listed[0]
    detail = a.get_message(target["partitionId"], target["transactionId"])
    assert detail["transactionId"] == target["transactionId"] and detail["queue"] == qname
    assert detail["payload"] in ({"i": 0}, {"i": 1}, {"i": 2})

    res = a.delete_message(target["partitionId"], target["transactionId"])
    assert res == {"success": True, "partitionId": target["partitionId"], "transactionId": target["transactionId"],
                   "message": "Message deleted successfully"}  # the reply of a 0.15.1 broker
    left = a.list_messages(queue=qname)["messages"]
    assert target["transactionId"] not in {m["transactionId"] for m in left} and len(left) == 2
    with pytest.raises(BrokerError, match="Message not found"):
        a.get_message(target["partitionId"], target["transactionId"])
    with pytest.raises(BrokerError, match="Message not found") as gone:
        a.delete_message(target["partitionId"], target["transactionId"])
    assert gone.value.error == "Message not found" and gone.value.body["success"] is False


def test_consumer_group_getters(client: Queen, qname: str, unique_name: Any) -> None:
    group = unique_name("g")
    _seed(client, qname, "ns-g", "t")
    msgs = client.queue(qname).partition("p").group(group).pop()
    assert len(msgs) == 1  # the lease stays active: nothing acked
    a = client.admin
    assert isinstance(a.refresh_consumer_stats(), dict)

    groups = [g for g in a.list_consumer_groups() if g["name"] == group]
    assert len(groups) == 1 and groups[0]["queueName"] == qname

    detail = a.get_consumer_group(group)
    parts = detail[qname]["partitions"]
    assert [p["partition"] for p in parts] == ["p"] and parts[0]["leaseActive"] is True

    # The broker lists lag (whole seconds, rounded) strictly above minLagSeconds: a message pushed
    # 0.6 s ago lags 1 s, which is listed with min_lag_seconds=0 on both brokers.
    time.sleep(0.6)
    lagging = [e for e in a.get_lagging_consumers(min_lag_seconds=0) if e["consumer_group"] == group]
    assert len(lagging) == 1 and lagging[0]["queue_name"] == qname and lagging[0]["offset_lag"] >= 2
    assert [e for e in a.get_lagging_consumers(min_lag_seconds=3600) if e["consumer_group"] == group] == []

    client.ack(msgs, True)


def test_system_getters(client: Queen) -> None:
    a = client.admin
    h = a.health()
    assert h["status"] == "healthy" and "database" in h
    assert "uptime" in a.metrics()
    assert "replicas" in a.get_system_metrics()
    now = dt.datetime.now(dt.timezone.utc)
    assert "workers" in a.get_worker_metrics(from_=now - dt.timedelta(minutes=5), to=now)
    assert "cacheSummary" in a.get_postgres_stats()
    m = a.get_maintenance_mode()
    assert m["maintenanceMode"] is False and m["popMaintenanceMode"] is False
    assert a.get_pop_maintenance_mode()["popMaintenanceMode"] is False


def test_pop_maintenance_toggle(embedded_broker: Any) -> None:
    with Queen(embedded_broker.url) as q:
        q.queue("mq").partition("p").push({"data": 1})
        assert q.admin.set_pop_maintenance_mode(True)["popMaintenanceMode"] is True
        try:
            assert q.admin.get_pop_maintenance_mode()["popMaintenanceMode"] is True
            assert q.admin.get_maintenance_mode()["popMaintenanceMode"] is True
            assert q.queue("mq").partition("p").pop() == []  # 204 paused
        finally:
            assert q.admin.set_pop_maintenance_mode(False)["popMaintenanceMode"] is False
        assert [m["data"] for m in q.queue("mq").partition("p").pop()] == [1]


def test_push_maintenance_toggle(embedded_broker: Any) -> None:
    with Queen(embedded_broker.url) as q:
        assert q.admin.set_maintenance_mode(True)["maintenanceMode"] is True
        try:
            res = q.queue("mm").partition("p").push({"data": "held"})
            assert res[0]["status"] == "buffered"
            assert q.admin.get_maintenance_mode()["bufferedMessages"] == 1
            assert q.queue("mm").partition("p").pop() == []
        finally:
            off = q.admin.set_maintenance_mode(False)
        assert off["maintenanceMode"] is False
        assert [m["data"] for m in q.queue("mm").partition("p").wait(True).timeout_millis(2000).pop()] == ["held"]


@pytest.mark.parametrize(
    "call, method, path",
    [
        (lambda a: a.get_partitions(), "GET", "/api/v1/resources/partitions"),
        (lambda a: a.clear_queue("some-queue"), "DELETE", "/api/v1/queues/some-queue/clear"),
        (lambda a: a.retry_message("pid-1", "tx-1"), "POST", "/api/v1/messages/pid-1/tx-1/retry"),
        (lambda a: a.move_message_to_dlq("pid-1", "tx-1"), "POST", "/api/v1/messages/pid-1/tx-1/dlq"),
    ],
)
def test_missing_routes_raise_clear_error(client: Queen, call: Any, method: str, path: str) -> None:
    with pytest.raises(RouteNotFoundError) as ei:
        call(client.admin)
    text = str(ei.value)
    assert "%s %s" % (method, path) in text and "0.15" in text and "<html>" not in text
    assert ei.value.status == 404


def test_health_error_status_raises(embedded_broker: Any) -> None:
    embedded_broker.faults.add(method="GET", path_prefix="/health", action="status", status=500, times=1)
    with Queen(embedded_broker.url, retry_attempts=1) as q:
        with pytest.raises(QueenHTTPError) as ei:
            q.admin.health()
        assert ei.value.status == 500
        assert q.admin.health()["status"] == "healthy"


@pytest.mark.parametrize(
    "call",
    [
        lambda a: a.get_queue("a/b"),
        lambda a: a.get_queue(""),
        lambda a: a.get_queue_detail("a b"),
        lambda a: a.get_queue_messages("ok", partition="x/y"),
        lambda a: a.get_queue_messages("ok", limit=0),
        lambda a: a.get_message("pid/1", "tx"),
        lambda a: a.delete_message("pid", "tx?x=1"),
        lambda a: a.get_traces_for_message("pid", "../x"),
        lambda a: a.get_consumer_group("lagging"),
        lambda a: a.get_consumer_group("g%2F"),
        lambda a: a.get_lagging_consumers(-1),
        lambda a: a.list_messages(queue="a b"),
        lambda a: a.list_messages(limit=0),
        lambda a: a.list_messages(offset=-1),
        # a broker gives no stored message these statuses: the filter could only match nothing
        lambda a: a.list_messages(status="failed"),
        lambda a: a.list_messages(status="Pending"),
        lambda a: a.list_messages(status=""),
        lambda a: a.list_messages(from_="yesterday"),
        lambda a: a.get_status(to=12),
        lambda a: a.get_queue_stats(limit=True),
        lambda a: a.get_analytics(queue="x y"),
        lambda a: a.set_maintenance_mode("yes"),
        lambda a: a.set_pop_maintenance_mode(1),
        lambda a: a.get_traces_by_name(""),
        lambda a: a.get_trace_names(limit=0),
        lambda a: a.seek_consumer_group("g", "q"),
        lambda a: a.seek_consumer_group("g", "q", to_end=True, timestamp="2020-01-01T00:00:00Z"),
        lambda a: a.seek_consumer_group("g", "q", {"toEnd": True, "bogus": 1}),
        lambda a: a.seek_partition_to_end("g", "q", "p q"),
        lambda a: a.delete_consumer_group("g", delete_metadata="no"),
        lambda a: a.update_consumer_group_timestamp("g", "not a time"),
    ],
)
def test_bad_input_sends_nothing(embedded_broker: Any, call: Any) -> None:
    with Queen(embedded_broker.url) as q:
        with pytest.raises(InvalidInputError):
            call(q.admin)
    assert embedded_broker.request_count() == 0
