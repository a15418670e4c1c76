"""Errors of user functions and of the source in the stream runner (in-memory broker):
sink partition names, bad event times, poison messages, a pop outage's log lines, and
``key_by`` after the window (allowed, as in the official SDK)."""

from __future__ import annotations

import json
import logging
import threading

import pytest
from _helpers import wait_for
from _streams_fake import FakeBroker, FakeSource

from queen_sync.errors import InvalidInputError, QueenConnectionError, QueenHTTPError
from queen_sync.streams import Stream

T0 = 1796115000000


def _cycles(broker):
    return [b for path, b in broker.calls if path == "/streams/v1/cycle"]


@pytest.mark.parametrize("bad", ["bad/static", "a b", ".", "..", "Ä"])
def test_static_sink_partition_is_checked_when_the_chain_is_built(bad):
    with pytest.raises(InvalidInputError, match="partition"):
        Stream.from_(FakeSource(FakeBroker())).to({"queueName": "o"}, partition=bad)


@pytest.mark.parametrize("returned", [None, 5, "bad/name", ""])
def test_sink_partition_fn_result_is_checked_per_value_and_abandons_the_batch(returned):
    broker = FakeBroker()
    broker.push("A", {"x": 1})
    seen = []
    r = Stream.from_(FakeSource(broker)).to({"queueName": "o"}, partition=lambda v: returned).run(
        "qp", max_wait_millis=10, on_error=lambda e, ctx: seen.append((e, ctx["phase"])))
    with r:
        wait_for(lambda: seen, what="on_error")
    exc, phase = seen[0]
    assert isinstance(exc, InvalidInputError) and phase == "cycle" and "partition" in str(exc)
    assert not _cycles(broker) and broker.sink_payloads() == []
    assert r.metrics()["messagesTotal"] == 0


def test_sink_partition_fn_with_a_valid_name_routes_each_value():
    broker = FakeBroker()
    for i in range(4):
        broker.push("A", {"x": i})
    r = Stream.from_(FakeSource(broker)).map(lambda m: m["data"]).to(
        {"queueName": "o"}, partition=lambda v: "even" if v["x"] % 2 == 0 else "odd.1").run("qp2", max_wait_millis=10)
    with r:
        wait_for(lambda: r.metrics()["messagesTotal"] == 4, what="4 messages")
    assert broker.sink_payloads("even") == [{"x": 0}, {"x": 2}]
    assert broker.sink_payloads("odd.1") == [{"x": 1}, {"x": 3}]


@pytest.mark.parametrize("bad", [None, float("nan"), float("inf"), "garbage", [1], 1e300, -1e300, True])
def test_bad_event_time_is_an_error_of_the_user_function(bad):
    """As a raising map: reported, the batch not committed (before: None / NaN / "garbage"
    were skipped and the message acked, 1e300 raised an internal OverflowError)."""
    broker = FakeBroker()
    broker.push("A", {"ts": T0})
    broker.push("A", {"ts": "poison"})
    seen = []
    r = (Stream.from_(FakeSource(broker))
         .window_tumbling(seconds=1, idle_flush_ms=0, event_time=lambda m: bad if m["data"]["ts"] == "poison" else m["data"]["ts"])
         .aggregate({"count": lambda v: 1}).to({"queueName": "o"})
         .run("qe", max_wait_millis=10, on_error=lambda e, ctx: seen.append((e, ctx["phase"]))))
    with r:
        wait_for(lambda: seen, what="on_error")
    exc, phase = seen[0]
    # the official SDK's phase of placing an event in its windows
    assert type(exc) is InvalidInputError and phase == "window-apply" and "event_time returned" in str(exc)
    assert not _cycles(broker)
    assert r.metrics()["messagesTotal"] == 0 and r.metrics()["errorsTotal"] >= 1


def test_event_time_in_range_float_and_iso_still_work():
    broker = FakeBroker()
    broker.push("A", {"ts": T0 + 0.5})
    broker.push("A", {"ts": "2026-12-01T08:50:00.300Z"})
    broker.push("A", {"ts": T0 + 5000})
    r = (Stream.from_(FakeSource(broker))
         .window_tumbling(seconds=1, idle_flush_ms=0, event_time=lambda m: m["data"]["ts"])
         .aggregate({"count": lambda v: 1}).map(lambda a, ctx: {"start": ctx["windowStart"], **a})
         .to({"queueName": "o"}).run("qe2", max_wait_millis=10))
    with r:
        wait_for(lambda: r.metrics()["messagesTotal"] == 3, what="3 messages")
    assert broker.sink_payloads() == [{"start": T0, "count": 2}]
    assert r.metrics()["errorsTotal"] == 0


def test_poison_message_comes_back_whole_on_every_lease_expiry_and_catching_it_gets_past():
    """The documented rule: a raising map abandons the batch; it is redelivered (whole, in
    order) when the lease expires, forever; catching in the function is the way out."""
    broker = FakeBroker(lease_seconds=0.2)
    for x in (1, 2, 3):
        broker.push("A", {"x": x})
    seen = []

    def fragile(m):
        if m["data"]["x"] == 2:
            raise ValueError("poison %d" % m["data"]["x"])
        return m["data"]

    r = Stream.from_(FakeSource(broker)).map(fragile).to({"queueName": "o"}).run(
        "qx", max_wait_millis=10, on_error=lambda e, ctx: seen.append(str(e)))
    with r:
        wait_for(lambda: len(seen) >= 3, what="three deliveries of the poison batch")
    assert set(seen) == {"poison 2"} and not _cycles(broker) and broker.sink_payloads() == []

    def safe(m):
        try:
            return fragile(m)
        except ValueError:
            return None

    r2 = Stream.from_(FakeSource(broker)).map(safe).filter(lambda m: True).to({"queueName": "o"}).run(
        "qy", max_wait_millis=10)
    with r2:
        wait_for(lambda: r2.metrics()["messagesTotal"] == 3, what="the batch past the poison message")
    assert broker.sink_payloads() == [{"x": 1}, {"value": None}, {"x": 3}] and r2.metrics()["errorsTotal"] == 0


def test_a_pop_outage_logs_one_warning_and_one_info(caplog):
    broker = FakeBroker()
    real_pop = broker.pop
    failures = []
    outage = threading.Event()
    outage.set()

    def pop(batch, partitions, group):
        if outage.is_set():
            failures.append(1)
            raise QueenConnectionError("broker unreachable")
        return real_pop(batch, partitions, group)

    broker.pop = pop  # type: ignore[method-assign]
    seen = []
    caplog.set_level(logging.DEBUG, logger="queen_sync.streams")
    r = Stream.from_(FakeSource(broker)).map(lambda m: m["data"]).to({"queueName": "o"}).run(
        "qo", max_wait_millis=10, on_error=lambda e, ctx: seen.append(ctx["phase"]))
    with r:
        wait_for(lambda: len(failures) >= 3, what="3 failed pops")
        outage.clear()
        broker.push("A", {"x": 1})
        wait_for(lambda: r.metrics()["messagesTotal"] == 1, what="the message after the outage")
    n = len(failures)
    pops = [rec for rec in caplog.records if "pop failed" in rec.getMessage()]
    assert [rec.levelno for rec in pops].count(logging.WARNING) == 1 and len(pops) == n
    again = [rec for rec in caplog.records if "pop works again" in rec.getMessage()]
    assert len(again) == 1 and again[0].levelno == logging.INFO and ("after %d failed pops" % n) in again[0].getMessage()
    m = r.metrics()
    assert m["errorsTotal"] == n and seen == ["pop"] * n
    assert m["lastError"] == "broker unreachable"  # documented: the last error seen, not cleared


def test_key_by_after_the_window_keys_the_window_as_in_the_official_sdk():
    broker = FakeBroker()
    for i, who in enumerate(["a", "b", "a", "a"]):
        broker.push("P", {"who": who}, T0 + i * 10)
    broker.push("P", {"who": "z"}, T0 + 5000)
    r = (Stream.from_(FakeSource(broker)).window_tumbling(seconds=1, idle_flush_ms=0)
         .key_by(lambda m: m["data"]["who"]).aggregate({"count": lambda v: 1})
         .map(lambda a, ctx: {"key": ctx["key"], **a}).to({"queueName": "o"}).run("qk", max_wait_millis=10))
    with r:
        wait_for(lambda: r.metrics()["messagesTotal"] == 5, what="5 messages")
    assert sorted((p["key"], p["count"]) for p in broker.sink_payloads()) == [("a", 3), ("b", 1)]
    with pytest.raises(InvalidInputError, match="before reduce"):
        Stream.from_(FakeSource(broker)).window_tumbling(seconds=1).aggregate({"count": lambda v: 1}).key_by(str).compile()


def test_an_idle_flush_outage_logs_one_warning_and_one_info(caplog):
    # as the pop's: the first failed flush at WARNING, the next ones at DEBUG, one INFO when
    # a flush works again; each failure still counted and passed to on_error
    broker = FakeBroker()
    real_request = broker.request
    failures = []
    outage = threading.Event()
    outage.set()

    def request(method, path, *, body=None, **kw):
        # the idle flush's state reads only (they carry ripe_at_or_before): the cycle's work
        if outage.is_set() and path == "/streams/v1/state/get" and "ripe_at_or_before" in json.loads(body):
            failures.append(1)
            raise QueenConnectionError("broker unreachable")
        return real_request(method, path, body=body, **kw)

    broker.request = request  # type: ignore[method-assign]
    seen = []
    caplog.set_level(logging.DEBUG, logger="queen_sync.streams")
    r = (Stream.from_(FakeSource(broker)).window_tumbling(seconds=1, idle_flush_ms=30)
         .aggregate({"count": lambda v: 1}).to({"queueName": "o"})
         .run("qfo", max_wait_millis=10, on_error=lambda e, ctx: seen.append(ctx["phase"])))
    with r:
        broker.push("A", {"x": 1})
        wait_for(lambda: len(failures) >= 3, what="3 failed idle flushes")
        outage.clear()
        wait_for(lambda: r.metrics()["flushCyclesTotal"] == 1, timeout_s=10, what="the window flushed")
    assert r.metrics()["messagesTotal"] == 1
    n = len(failures)
    flushes = [rec for rec in caplog.records if "flush failed" in rec.getMessage()]
    assert [rec.levelno for rec in flushes] == [logging.WARNING] + [logging.DEBUG] * (n - 1)
    again = [rec for rec in caplog.records if "idle flush works again" in rec.getMessage()]
    assert len(again) == 1 and again[0].levelno == logging.INFO
    assert ("after %d failed idle flushes" % n) in again[0].getMessage()
    assert r.metrics()["errorsTotal"] == n and seen == ["flush"] * n
    assert broker.sink_payloads() == [{"count": 1}]


def test_on_error_phases_match_the_official_sdks():
    # a gate that raises: "gate-eval"; an event_time that raises: "window-apply"; another
    # user function: "cycle"; a refused idle-flush commit: "flush" (as the official SDK)
    def gate(v, ctx):
        raise ValueError("gate bug")

    def event_time(m):
        raise ValueError("event_time bug")

    cases = [
        (lambda s: s.gate(gate), "gate-eval", "gate bug"),
        (lambda s: s.window_tumbling(seconds=1, idle_flush_ms=0, event_time=event_time).aggregate({"n": lambda v: 1}),
         "window-apply", "event_time bug"),
        (lambda s: s.window_tumbling(seconds=1, idle_flush_ms=0).reduce(lambda a, v: 1 / 0, 0), "cycle", "division"),
        (lambda s: s.map(lambda m: 1 / 0), "cycle", "division"),
    ]
    for i, (chain, phase, text) in enumerate(cases):
        broker = FakeBroker()
        broker.push("A", {"x": 1})
        seen = []
        r = chain(Stream.from_(FakeSource(broker))).to({"queueName": "o"}).run(
            "qph%d" % i, max_wait_millis=10, on_error=lambda e, ctx: seen.append((ctx["phase"], str(e), ctx.get("partition"))))
        with r:
            wait_for(lambda: seen, what="on_error")
        assert seen[0][0] == phase and text in seen[0][1] and seen[0][2], (i, seen[0])
        assert not _cycles(broker)


def test_a_refused_idle_flush_commit_is_reported_as_phase_flush():
    broker = FakeBroker()
    real_request = broker.request
    refuse = threading.Event()
    refuse.set()

    def request(method, path, *, body=None, **kw):
        if refuse.is_set() and path == "/streams/v1/cycle" and not json.loads(body)["ack"]:
            refuse.clear()
            raise QueenHTTPError("400 bad request", status=400)
        return real_request(method, path, body=body, **kw)

    broker.request = request  # type: ignore[method-assign]
    seen = []
    r = (Stream.from_(FakeSource(broker)).window_tumbling(seconds=1, idle_flush_ms=30)
         .aggregate({"count": lambda v: 1}).to({"queueName": "o"})
         .run("qphf", max_wait_millis=10, on_error=lambda e, ctx: seen.append(ctx["phase"])))
    with r:
        broker.push("A", {"x": 1})  # the first flush's commit (a cycle without ack) is refused
        wait_for(lambda: seen, timeout_s=10, what="the refused flush")
        wait_for(lambda: r.metrics()["flushCyclesTotal"] == 1, timeout_s=10, what="the next flush")
    assert seen == ["flush"] and broker.sink_payloads() == [{"count": 1}]
