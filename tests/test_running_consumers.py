"""``Queen.running_consumers()``: read-only descriptions of what a client runs in the
background (consumers and stream runners), on the broker under test."""

from __future__ import annotations

import dataclasses
import time

import pytest
from _helpers import wait_for

from queen_sync import Queen, RunningConsumer
from queen_sync.streams import Stream


def test_background_consumers_are_listed_until_their_last_thread_ended(client: Queen, qname: str) -> None:
    assert client.running_consumers() == []
    grouped = client.queue(qname).group("billing").concurrency(2).consume(lambda m: None, background=True)
    queue_mode = client.queue(qname).consume(lambda m: None, background=True)
    try:
        running = client.running_consumers()
        assert sorted(((r.kind, r.queue, r.group, r.query) for r in running), key=str) == sorted([
            ("consumer", qname, "billing", None), ("consumer", qname, None, None)], key=str)
        by_group = {r.group: r for r in running}
        # 2 handler workers + 2 fetchers (+ a lease renewer), at least; 1 + 1 for concurrency 1
        assert by_group["billing"].threads >= 4 and by_group[None].threads >= 2
        with pytest.raises(dataclasses.FrozenInstanceError):
            running[0].queue = "other"  # type: ignore[misc]
    finally:
        grouped.stop(drain_timeout_millis=5000)
        assert grouped.join(10)  # listed until its last thread ended
        assert [r.group for r in client.running_consumers()] == [None]
        queue_mode.stop(drain_timeout_millis=5000)
        assert queue_mode.join(10)
    assert client.running_consumers() == []


def test_only_this_clients_consumers_and_a_blocking_consume_while_it_runs(
        client: Queen, qname: str, broker_url: str) -> None:
    with Queen(broker_url) as other:
        c = other.queue(qname).group("g").consume(lambda m: None, background=True)
        assert client.running_consumers() == []
        assert [r.group for r in other.running_consumers()] == ["g"]
        c.stop(drain_timeout_millis=5000)
        assert c.join(10)
    client.queue(qname).push({"data": 1})
    seen = []

    def handler(m: object) -> None:
        seen.append(client.running_consumers())

    assert client.queue(qname).group("b").limit(1).consume(handler).handled == 1
    assert [(r.kind, r.group) for r in seen[0]] == [("consumer", "b")]  # listed while consume() runs
    # consume() returns once the run is over; its last threads end a moment later
    wait_for(lambda: client.running_consumers() == [], what="the consumer's last threads")


def test_stream_runners_are_listed_until_stopped_and_close_empties_the_list(
        broker_url: str, unique_name) -> None:
    q = Queen(broker_url)
    try:
        src, out = unique_name("src"), unique_name("out")
        runner = Stream.from_(q.queue(src)).map(lambda m: m["data"]).to(q.queue(out)).run(
            unique_name("query"), max_wait_millis=200)
        consumer = q.queue(src).group("audit").consume(lambda m: None, background=True)
        running = q.running_consumers()
        assert [r.kind for r in running] == ["consumer", "stream"]  # consumers first
        stream = running[1]
        assert stream == RunningConsumer("stream", src, "streams." + runner.query_id, runner.query_id, stream.threads,
                                         stream.started_at_millis)
        assert stream.started_at_millis == runner.describe()["started_at_millis"]
        wait_for(lambda: q.running_consumers()[1].threads >= 1, what="the pop thread")
        runner.stop()
        assert [r.kind for r in q.running_consumers()] == ["consumer"]
        assert consumer.is_running
    finally:
        q.close()
    assert q.running_consumers() == []  # close() stopped the consumer; works on a closed client


def test_describe_says_what_running_consumers_lists_with_the_start_time(
        client: Queen, qname: str, unique_name) -> None:
    builder = client.queue(qname).group("billing")
    before = int(time.time() * 1000)
    c = builder.consume(lambda m: None, background=True)
    after = int(time.time() * 1000)
    try:
        described = c.describe()
        assert set(described) == {"queue", "group", "query", "threads", "started_at_millis"}
        assert (described["queue"], described["group"], described["query"]) == (qname, "billing", None)
        assert before <= described["started_at_millis"] <= after
        (listed,) = client.running_consumers()
        assert (listed.kind, listed.queue, listed.group, listed.query, listed.started_at_millis) == (
            "consumer", qname, "billing", None, described["started_at_millis"])
        assert listed.threads >= 2 and described["threads"] >= 2
    finally:
        c.stop(drain_timeout_millis=5000)
        assert c.join(10)
    assert c.describe()["threads"] == 0 and client.running_consumers() == []

    src = unique_name("src")
    before = int(time.time() * 1000)
    runner = Stream.from_(client.queue(src)).map(lambda m: m["data"]).to(client.queue(unique_name("out"))).run(
        unique_name("query"), max_wait_millis=200)
    after = int(time.time() * 1000)
    try:
        d = runner.describe()
        assert (d["queue"], d["group"], d["query"]) == (src, "streams." + runner.query_id, runner.query_id)
        assert before <= d["started_at_millis"] <= after
        (listed,) = client.running_consumers()
        assert (listed.kind, listed.started_at_millis) == ("stream", d["started_at_millis"])
    finally:
        runner.stop()
