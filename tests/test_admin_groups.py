"""Consumer-group maintenance: seek (timestamp / end / one partition), delete, subscription timestamp."""

from __future__ import annotations

import datetime as dt
from typing import Any, List

import pytest

from queen_sync import BrokerError, InvalidInputError, Queen


def _drain(client: Queen, qname: str, group: str, partition: str = "p") -> List[Any]:
    """Pop and ack everything the group can see in one partition; return the payloads."""
    out: List[Any] = []
    while True:
        msgs = client.queue(qname).partition(partition).group(group).batch(10).pop()
        if not msgs:
            return out
        client.ack(msgs, True)
        out.extend(m["data"] for m in msgs)


def test_seek_back_in_time_rereads(client: Queen, qname: str, unique_name: Any) -> None:
    group = unique_name("g")
    client.queue(qname).partition("p").push([{"data": i} for i in range(3)])
    assert _drain(client, qname, group) == [0, 1, 2]
    assert _drain(client, qname, group) == []

    res = client.admin.seek_consumer_group(group, qname, timestamp=dt.datetime(2000, 1, 1))
    assert res["success"] is True and res["seekToEnd"] is False and res["partitionsUpdated"] >= 1
    assert res["targetTimestamp"] == "2000-01-01T00:00:00.000Z"
    assert _drain(client, qname, group) == [0, 1, 2]


def test_seek_to_end_skips_existing(client: Queen, qname: str, unique_name: Any) -> None:
    group = unique_name("g")
    client.queue(qname).partition("p").push([{"data": i} for i in range(3)])
    # a group that has read nothing yet, seeked to the end with the official dict form
    assert _drain(client, qname, group)[:1] == [0]
    client.admin.seek_consumer_group(group, qname, timestamp="2000-01-01T00:00:00.000Z")
    res = client.admin.seek_consumer_group(group, qname, {"toEnd": True})
    assert res["success"] is True and res["seekToEnd"] is True
    assert _drain(client, qname, group) == []
    client.queue(qname).partition("p").push({"data": "later"})
    assert _drain(client, qname, group) == ["later"]



@pytest.mark.parametrize("options", [{"toEnd": "false"}, {"to_end": 1}, {"toEnd": "no", "timestamp": "2000-01-01"}])
def test_seek_options_to_end_must_be_a_bool(client: Queen, qname: str, unique_name: Any, options: Any) -> None:
    group = unique_name("g")
    client.queue(qname).partition("p").push([{"data": i} for i in range(3)])
    assert _drain(client, qname, group) == [0, 1, 2]
    client.admin.seek_consumer_group(group, qname, timestamp="2000-01-01T00:00:00Z")
    # any truthy value was read as True: {"toEnd": "false"} skipped every message
    with pytest.raises(InvalidInputError, match="must be True or False"):
        client.admin.seek_consumer_group(group, qname, options)
    assert _drain(client, qname, group) == [0, 1, 2]  # nothing was sent: the rewind stands
    res = client.admin.seek_consumer_group(group, qname, {"toEnd": False, "timestamp": "2000-01-01"})
    assert res["seekToEnd"] is False and _drain(client, qname, group) == [0, 1, 2]


def test_seek_releases_lease(client: Queen, qname: str, unique_name: Any) -> None:
    group = unique_name("g")
    client.queue(qname).partition("p").push([{"data": i} for i in range(2)])
    held = client.queue(qname).partition("p").group(group).pop()
    assert [m["data"] for m in held] == [0]
    assert client.queue(qname).partition("p").group(group).pop() == []  # leased
    client.admin.seek_consumer_group(group, qname, timestamp="2000-01-01T00:00:00Z")
    assert _drain(client, qname, group) == [0, 1]


def test_seek_one_partition_to_end(client: Queen, qname: str, unique_name: Any) -> None:
    group = unique_name("g")
    client.queue(qname).partition("a").push([{"data": "a%d" % i} for i in range(3)])
    client.queue(qname).partition("b").push([{"data": "b%d" % i} for i in range(2)])
    # only a group with a cursor on the partition moves (Queen 0.15.1, 2026-12-02)
    fresh = unique_name("fresh")
    res = client.admin.seek_partition_to_end(fresh, qname, "a")
    assert (res["success"], res["updated"], res["partitionName"]) == (True, False, "a")
    assert _drain(client, qname, fresh, "a") == ["a0", "a1", "a2"]
    (m,) = client.queue(qname).partition("a").group(group).pop()
    client.ack(m, True)
    res = client.admin.seek_partition_to_end(group, qname, "a")
    assert (res["success"], res["updated"]) == (True, True) and res["cursorMovedTo"].endswith("Z")
    assert _drain(client, qname, group, "a") == []
    assert _drain(client, qname, group, "b") == ["b0", "b1"]
    with pytest.raises(BrokerError, match="Partition not found"):
        client.admin.seek_partition_to_end(group, qname, "zz")


def test_delete_group_then_recreate_reads_from_start(client: Queen, qname: str, unique_name: Any) -> None:
    group = unique_name("g")
    client.queue(qname).partition("p").push([{"data": i} for i in range(3)])
    assert _drain(client, qname, group) == [0, 1, 2]

    res = client.delete_consumer_group(group)
    assert res["success"] is True and res["consumerGroup"] == group
    assert res["metadataDeleted"] is True and res["deletedPartitions"] >= 1
    assert _drain(client, qname, group) == [0, 1, 2]


def test_delete_group_for_one_queue(client: Queen, qname: str, unique_name: Any) -> None:
    group = unique_name("g")
    other = unique_name("other")
    try:
        for q in (qname, other):
            client.queue(q).partition("p").push([{"data": q}])
            assert _drain(client, q, group) == [q]
        res = client.admin.delete_consumer_group_for_queue(group, qname, delete_metadata=False)
        assert res["success"] is True and res["queueName"] == qname and res["metadataDeleted"] is False
        assert _drain(client, qname, group) == [qname]  # forgotten on this queue
        assert _drain(client, other, group) == []  # kept on the other one
        res = client.delete_consumer_group(group, queue=other)
        assert res["queueName"] == other
        assert _drain(client, other, group) == [other]
    finally:
        client.queue(other).delete()
        client.admin.delete_consumer_group(group)


def test_update_subscription_timestamp(client: Queen, qname: str, unique_name: Any) -> None:
    group = unique_name("g")
    client.queue(qname).partition("p").push({"data": 1})
    assert _drain(client, qname, group) == [1]
    res = client.update_consumer_group_timestamp(group, dt.datetime(2001, 2, 3, 4, 5, 6, 789000))
    assert res["success"] is True and res["consumerGroup"] == group
    assert res["newTimestamp"] == "2001-02-03T04:05:06.789Z" and isinstance(res["rowsUpdated"], int)
    res = client.admin.update_consumer_group_timestamp(group, "2001-02-03T05:05:06+01:00")
    assert res["newTimestamp"] == "2001-02-03T04:05:06.000Z"  # sent normalised to UTC
    # an existing cursor is not moved by the subscription timestamp
    assert _drain(client, qname, group) == []
