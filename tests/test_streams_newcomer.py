"""Faults of the Streams SDK found by a newcomer review, each with the fix's outcome: run
options checked before the register, user-callable arity checked when the chain is built,
duration caps, the avg helper names, U+001F in window keys, late events of a window without
a reducer, and the process-wide partition lock."""

from __future__ import annotations

import functools
import gc
import re
import sys
import threading
import time
import weakref
from typing import Any

import pytest
from _helpers import libc_fork_child, run_forked, wait_for
from _streams_fake import FakeBroker, FakeSource
from _streams_util import PID, Q, msg

from queen_sync import Queen
from queen_sync.errors import InvalidInputError
from queen_sync.streams import Stream, sliding_window_gate, token_bucket_gate
from queen_sync.streams._partition_locks import partition_lock
from queen_sync.streams.processor import process_batch

T0 = 1796115000000
REGISTER = "/streams/v1/queries"


# 1. run() checks its pop options before the register -----------------------------------


@pytest.mark.parametrize(
    "query, kw, text",
    [
        ("nq", {"subscription_mode": "bogus"}, "subscription_mode"),
        ("nq", {"subscription_from": "2026-W01-1"}, "subscription_from"),
        ("nq", {"subscription_from": 5}, "subscription_from"),
        ("nq", {"consumer_group": "a b"}, "consumer group"),
        ("nq", {"consumer_group": ""}, "consumer group"),
        ("x y", {}, r"run\('x y'\): the query's consumer group 'streams.x y'"),
        ("q" * 250, {}, "consumer group"),
        ("nq", {"batch_size": 0}, "batch_size"),
        ("nq", {"max_partitions": True}, "max_partitions"),
        ("nq", {"batch_size": 10_001}, r"batch_size must be an int >= 1 and <= 10000"),
        ("nq", {"batch_size": 2**31}, r"batch_size must be an int >= 1 and <= 10000"),
        ("nq", {"max_partitions": 1_001}, r"max_partitions must be an int >= 1 and <= 1000"),
        ("nq", {"max_wait_millis": 10**15}, "max_wait_millis"),
    ],
)
def test_run_refuses_bad_pop_options_before_registering(embedded_broker: Any, query: str, kw: Any, text: str) -> None:
    with Queen(embedded_broker.url) as q:
        stream = Stream.from_(q.queue("src")).map(lambda m: m["data"]).to(q.queue("out"))
        with pytest.raises(InvalidInputError, match=text):
            stream.run(query, **kw)
        assert embedded_broker.request_count("POST", REGISTER) == 0
        # the same chain with good options registers and runs
        with stream.run("nq-ok", subscription_mode="new", subscription_from="now", max_wait_millis=10) as r:
            assert r.is_running
        assert embedded_broker.request_count("POST", REGISTER) == 1


# 2. user callables are checked for arity when the chain is built -----------------------


def _three(a, b, c):  # type: ignore[no-untyped-def]
    return a


def _kw_only(a, *, must):  # type: ignore[no-untyped-def]
    return a


def _none():  # type: ignore[no-untyped-def]
    return 1


@pytest.mark.parametrize(
    "build, what",
    [
        (lambda s, f: s.map(f), "map()"),
        (lambda s, f: s.filter(f), "filter()"),
        (lambda s, f: s.flat_map(f), "flat_map()"),
        (lambda s, f: s.key_by(f), "key_by()"),
        (lambda s, f: s.window_tumbling(seconds=1, event_time=f), "event_time"),
        (lambda s, f: s.window_tumbling(seconds=1).reduce(f), "reduce()"),
        (lambda s, f: s.window_tumbling(seconds=1).aggregate({"sum": f}), "aggregate extractor 'sum'"),
        (lambda s, f: s.gate(f), "gate()"),
        (lambda s, f: s.to(Q("o"), partition=f), ".to(partition=fn)"),
        (lambda s, f: s.foreach(f), "foreach()"),
        (lambda s, f: s.gate(token_bucket_gate(capacity=1, refill_per_sec=1, cost_fn=f)), "token_bucket_gate cost_fn"),
        (lambda s, f: s.gate(sliding_window_gate(limit=1, window_sec=1, cost_fn=f)), "sliding_window_gate cost_fn"),
    ],
)
@pytest.mark.parametrize("fn", [_three, _kw_only, _none], ids=["three", "kw_only", "none"])
def test_a_callable_of_the_wrong_arity_is_refused_when_the_chain_is_built(build, what, fn):
    with pytest.raises(InvalidInputError, match=re.escape(what) + " needs a callable taking .*" + fn.__name__):
        build(Stream.from_(Q("s")), fn)


def test_on_error_of_the_wrong_arity_is_refused_before_anything_is_sent():
    broker = FakeBroker()
    with pytest.raises(InvalidInputError, match=r"run\(on_error=\) needs a callable taking 2"):
        Stream.from_(FakeSource(broker)).map(lambda m: m).to(Q("o")).run("qa", on_error=lambda err: None)
    assert broker.calls == []


def test_arity_is_read_from_the_signature_and_uninspectable_callables_are_accepted():
    s = Stream.from_(Q("s"))
    # builtins and C types without a readable signature (str, bool, max), partials, bound
    # methods, defaults and *args all pass
    s.map(str).filter(bool).key_by(str).window_tumbling(seconds=1).reduce(max).to(Q("o")).compile()
    s.window_tumbling(seconds=1, event_time=functools.partial(lambda unit, m: m, 1)).aggregate(
        {"count": len, "sum": lambda v, scale=1: v * scale}).compile()
    s.gate(lambda *a: True).compile()
    s.map(functools.partial(_three, 1)).foreach(print).compile()
    assert s.window_tumbling(seconds=1).reduce(_Acc().add).compile().reducer is not None
    # a partial that pins the argument the operator passes is refused
    with pytest.raises(InvalidInputError, match="key_by"):
        s.key_by(functools.partial(lambda m: m, m=1))
    # the map that takes one argument is called with one, as before
    plan = s.map(lambda m: m["data"]["v"] * 2).to(Q("o")).compile()
    assert [it["payload"] for it in process_batch(plan, "q", PID, "P1", "L1", [msg(1, T0, {"v": 2})], {}, T0).push_items] == [
        {"value": 4}]


class _Acc:
    def add(self, acc, v):  # type: ignore[no-untyped-def]
        return (acc or 0) + v


# 3. duration caps ----------------------------------------------------------------------

YEAR_MS = 365 * 24 * 3600 * 1000
MAX_WINDOW_SECONDS = 315537897600  # the span of years 1..9999, documented as the cap


@pytest.mark.parametrize(
    "build, text",
    [
        (lambda s: s.window_tumbling(seconds=MAX_WINDOW_SECONDS + 1), "seconds must be at most 315537897600"),
        (lambda s: s.window_tumbling(seconds=1e300), "seconds must be at most"),
        (lambda s: s.window_tumbling(seconds=10**400), "seconds must be at most"),  # OverflowError before
        (lambda s: s.window_tumbling(seconds=0.0009), "at least 0.001"),
        (lambda s: s.window_sliding(size=10**400, slide=1), "size must be at most"),
        (lambda s: s.window_sliding(size=0.0004, slide=0.0002), "at least 0.001"),
        (lambda s: s.window_session(gap=0.0005), "gap must be at least 0.001"),
        (lambda s: s.window_session(gap=10**13), "gap must be at most"),
        (lambda s: s.window_tumbling(seconds=1, grace_period=10**13), "grace_period must be at most"),
        (lambda s: s.window_tumbling(seconds=1, grace_period=0.0005), "grace_period must be 0 or at least 0.001"),
        (lambda s: s.window_cron(every="hour", allowed_lateness=10**400), "allowed_lateness must be at most"),
        (lambda s: s.window_tumbling(seconds=1, idle_flush_ms=YEAR_MS + 1), "idle_flush_ms must be .* 0..31536000000"),
        (lambda s: s.window_tumbling(seconds=1, idle_flush_ms=10**400), "idle_flush_ms must be"),
    ],
)
def test_window_durations_are_capped(build, text):
    with pytest.raises(InvalidInputError, match=text):
        build(Stream.from_(Q("s")))


def test_window_durations_at_the_caps_are_accepted_and_run():
    s = Stream.from_(Q("s"))
    w = s.window_tumbling(seconds=MAX_WINDOW_SECONDS, grace_period=MAX_WINDOW_SECONDS, idle_flush_ms=YEAR_MS,
                          allowed_lateness=MAX_WINDOW_SECONDS).operators[0]
    assert (w.window_ms, w.grace_ms, w.idle_flush_ms) == (MAX_WINDOW_SECONDS * 1000,) * 2 + (YEAR_MS,)
    assert s.window_session(gap=0.001).operators[0].gap_ms == 1
    # a window of about 9999 years holds today's events; one from before 1970 would start
    # before year 1: an error of event_time (before: a ValueError out of the ISO formatting)
    plan = (s.window_tumbling(seconds=MAX_WINDOW_SECONDS, idle_flush_ms=0, event_time=lambda m: m["data"]["ts"])
            .aggregate({"count": lambda v: 1}).to(Q("o")).compile())
    work = process_batch(plan, "q", PID, "P1", "L1", [msg(1, T0, {"ts": T0})], {}, T0)
    assert [op["value"]["windowStart"] for op in work.state_ops if op["key"] != "__wm__"] == [0]
    with pytest.raises(InvalidInputError, match="event_time returned -1: it falls in a tumbling window starting before year 1"):
        process_batch(plan, "q", PID, "P1", "L1", [msg(1, T0, {"ts": -1})], {}, T0)


# 4. avg helper names -------------------------------------------------------------------


@pytest.mark.parametrize("names", [["__avg_sum"], ["__avg_count"], ["__avg_sum", "__avg_count"]])
def test_avg_helper_names_are_refused_with_avg(names):
    extractors = {"avg": lambda v: v, **{n: (lambda v: 1) for n in names}}
    with pytest.raises(InvalidInputError, match="with 'avg', __avg_sum and __avg_count .* rename the extractors? "
                                                + re.escape(", ".join(map(repr, names)))):
        Stream.from_(Q("s")).window_tumbling(seconds=1).aggregate(extractors)


def test_avg_helper_names_without_avg_are_ordinary_fields():
    plan = (Stream.from_(Q("s")).window_tumbling(seconds=1, idle_flush_ms=0).aggregate({"__avg_sum": lambda v: v["x"]})
            .to(Q("o")).compile())
    work = process_batch(plan, "q", PID, "P1", "L1", [msg(1, T0, {"x": 2}), msg(2, T0 + 1, {"x": 3}),
                                                      msg(3, T0 + 1000, {"x": 0})], {}, T0)
    assert [it["payload"] for it in work.push_items] == [{"__avg_sum": 5}]
    avg = (Stream.from_(Q("s")).window_tumbling(seconds=1, idle_flush_ms=0).aggregate({"avg": lambda v: v["x"]})
           .to(Q("o")).compile())
    work = process_batch(avg, "q", PID, "P1", "L1", [msg(1, T0, {"x": 2}), msg(2, T0 + 1, {"x": 3}),
                                                     msg(3, T0 + 1000, {"x": 0})], {}, T0)
    assert [it["payload"] for it in work.push_items] == [{"avg": 2.5}]


# 5. U+001F in a window key -------------------------------------------------------------


@pytest.mark.parametrize("window", ["tumbling", "session"])
def test_a_window_key_with_the_unit_separator_is_an_error_of_key_by(window):
    s = Stream.from_(Q("s")).key_by(lambda m: m["data"]["who"])
    s = s.window_tumbling(seconds=1, idle_flush_ms=0) if window == "tumbling" else s.window_session(gap=1, idle_flush_ms=0)
    plan = s.aggregate({"count": lambda v: 1}).to(Q("o")).compile()
    with pytest.raises(InvalidInputError, match=r"key_by\(\) returned 'a\\x1fb' for message m000002: a window key "
                                                "cannot contain U\\+001F"):
        process_batch(plan, "q", PID, "P1", "L1", [msg(1, T0, {"who": "ok"}), msg(2, T0, {"who": "a\x1fb"})], {}, T0)
    # a gate keys its state rows by the key alone: no separator there to collide with
    gated = Stream.from_(Q("s")).key_by(lambda m: m["data"]["who"]).gate(lambda v, ctx: True).to(Q("o")).compile()
    work = process_batch(gated, "q", PID, "P1", "L1", [msg(1, T0, {"who": "a\x1fb"})], {}, T0)
    assert work.acked == 1 and [op["key"] for op in work.state_ops] == ["a\x1fb"]


def test_the_runner_reports_the_key_error_and_commits_nothing():
    broker = FakeBroker()
    broker.push("A", {"who": "a\x1fb"}, T0)
    seen = []
    r = (Stream.from_(FakeSource(broker)).key_by(lambda m: m["data"]["who"]).window_tumbling(seconds=1, idle_flush_ms=0)
         .aggregate({"count": lambda v: 1}).to(Q("o"))
         .run("qsep", max_wait_millis=10, on_error=lambda e, ctx: seen.append((e, ctx["phase"]))))
    with r:
        wait_for(lambda: seen, what="on_error")
    exc, phase = seen[0]
    assert type(exc) is InvalidInputError and "key_by()" in str(exc) and phase == "cycle"
    assert [path for path, _ in broker.calls if path == "/streams/v1/cycle"] == [] and broker.state == {}
    assert r.metrics()["messagesTotal"] == 0


# 6. a window without a reducer drops no late event -------------------------------------


@pytest.mark.parametrize("on_late", ["drop", "include"])
def test_a_window_without_a_reducer_passes_late_events_through_as_the_official_sdk(on_late):
    """The official runtime keeps no watermark on that path, so no event is late; before, the
    runner kept one per partition and dropped (and counted) every event older than it."""
    broker = FakeBroker()
    times = [T0 + 5000, T0 + 6000, T0 + 1000, T0 + 7000, T0]  # 1000 and 0 are behind the max seen
    for i, ts in enumerate(times):
        broker.push("A", {"ts": ts, "i": i})
    r = (Stream.from_(FakeSource(broker)).window_tumbling(seconds=1, event_time=lambda m: m["data"]["ts"],
                                                          on_late=on_late)
         .map(lambda m: m["data"]).to(Q("o")).run("qlate", batch_size=1, max_wait_millis=10))
    with r:
        wait_for(lambda: r.metrics()["messagesTotal"] == 5, what="5 messages")
    assert [p["i"] for p in broker.sink_payloads()] == [0, 1, 2, 3, 4]
    assert r.metrics()["lateEventsTotal"] == 0
    assert [path for path, _ in broker.calls if path == "/streams/v1/state/get"] == []
    assert all(c["state_ops"] == [] for path, c in broker.calls if path == "/streams/v1/cycle")


def test_a_window_with_a_reducer_still_drops_late_events():
    plan = (Stream.from_(Q("s")).window_tumbling(seconds=1, idle_flush_ms=0, event_time=lambda m: m["data"]["ts"])
            .aggregate({"count": lambda v: 1}).to(Q("o")).compile())
    work = process_batch(plan, "q", PID, "P1", "L1", [msg(1, T0, {"ts": T0})], {}, T0, watermark=T0 + 5000)
    assert work.late == 1 and work.state_ops == [{"type": "upsert", "key": "__wm__", "value": {"eventTimeMs": T0 + 5000}}]
    passthrough = (Stream.from_(Q("s")).window_tumbling(seconds=1, event_time=lambda m: m["data"]["ts"])
                   .to(Q("o")).compile())
    work = process_batch(passthrough, "q", PID, "P1", "L1", [msg(1, T0, {"ts": T0})], {}, T0, watermark=T0 + 5000)
    assert work.late == 0 and len(work.push_items) == 1 and work.watermark is None


# 7. the partition lock is per (query, partition), process-wide -------------------------


class _PausableSource(FakeSource):
    """A FakeSource whose pops answer [] while ``paused`` is set; ``seen_paused`` counts the
    pops that saw the pause (after the first one, no unpaused pop can still be in flight:
    the runner pops from one thread)."""

    def __init__(self, broker: FakeBroker, paused: threading.Event, seen_paused: list) -> None:
        super().__init__(broker)
        self.paused = paused
        self.seen_paused = seen_paused

    def _set(self, **kw: Any) -> "_PausableSource":
        new = _PausableSource(self.broker, self.paused, self.seen_paused)
        new._session = self._session
        new.opts = dict(self.opts, **kw)
        return new

    def pop(self) -> Any:
        if self.paused.is_set():
            self.seen_paused.append(1)
            self.paused.wait(0.01)
            return []
        return super().pop()


def test_a_runner_does_not_flush_a_partition_another_runner_of_the_query_is_cycling():
    """Two runners of one query in one process: while runner 1 is in a cycle of partition A,
    runner 2's idle flush skips A (before: each runner had its own lock, so runner 2 emitted
    the window with one event and deleted its row, and runner 1 then wrote it back with two)."""
    broker = FakeBroker()
    entered, release = threading.Event(), threading.Event()

    def count(v):  # type: ignore[no-untyped-def]
        if v["block"]:
            entered.set()
            release.wait(10)
        return 1

    old = int(time.time() * 1000) - 60000  # a window long closed by the wall clock
    paused, seen_paused = threading.Event(), []

    def stream(src):  # type: ignore[no-untyped-def]
        return (Stream.from_(src).window_tumbling(seconds=1, idle_flush_ms=60000)
                .aggregate({"count": count}).to(Q("o")))

    broker.push("A", {"block": False}, old)
    r2 = stream(_PausableSource(broker, paused, seen_paused)).run("qlock", max_wait_millis=10)
    r1 = None
    try:
        wait_for(lambda: r2.metrics()["messagesTotal"] == 1, what="runner 2's first cycle")
        paused.set()
        wait_for(lambda: seen_paused, what="runner 2 paused")
        r1 = stream(FakeSource(broker)).run("qlock", max_wait_millis=10)
        broker.push("A", {"block": True}, old + 1)
        assert entered.wait(10), "runner 1 never reached its cycle"
        calls = len(broker.calls)
        r2._flush_tick(0)  # every partition of runner 2 counts as idle
        assert len(broker.calls) == calls, "runner 2 flushed partition A during runner 1's cycle"
        release.set()
        wait_for(lambda: r1.metrics()["messagesTotal"] == 1, what="runner 1's cycle")
        r2._flush_tick(0)
        assert broker.sink_payloads() == [{"count": 2}]
        assert r2.metrics()["flushCyclesTotal"] == 1
    finally:
        release.set()
        paused.clear()
        r2.stop()
        if r1 is not None:
            r1.stop()


def test_partition_locks_are_shared_per_query_and_partition_and_freed_when_unused():
    a = partition_lock("q-newcomer", "P")
    assert partition_lock("q-newcomer", "P") is a
    assert partition_lock("q-newcomer", "P2") is not a and partition_lock("other", "P") is not a
    gone = weakref.ref(a)
    del a
    gc.collect()
    assert gone() is None  # the weak map kept nothing alive
    # a runner takes the process-wide lock of its query's partition
    broker = FakeBroker()
    broker.push("A", {"x": 1})
    with Stream.from_(FakeSource(broker)).map(lambda m: m["data"]).to(Q("o")).run("q-shared", max_wait_millis=10) as r:
        wait_for(lambda: r.metrics()["messagesTotal"] == 1, what="the message")
        pid = broker.parts["A"].id
        assert r._partitions[pid].lock is partition_lock("q-shared", pid)
        assert partition_lock("q-other", pid) is not r._partitions[pid].lock


@pytest.mark.parametrize("fork", ["os", "libc"])
def test_partition_locks_are_renewed_in_a_forked_child(fork):
    if fork == "libc" and not sys.platform.startswith("linux"):
        pytest.skip("libc fork: Linux only")
    held = partition_lock("q-fork", "P")
    assert held.acquire(blocking=False)
    try:
        def child():  # type: ignore[no-untyped-def]
            fresh = partition_lock("q-fork", "P")
            return fresh is not held and fresh.acquire(blocking=False)

        assert (run_forked(child, timeout=30) if fork == "os" else libc_fork_child(child, timeout=30)) == 0
        assert partition_lock("q-fork", "P") is held and held.locked()
    finally:
        held.release()
