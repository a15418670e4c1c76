"""Faults of the Streams SDK found by a newcomer review, each with the fix's outcome: run
options checked before the register, user-callable arity checked when the chain is built,
duration caps, the avg helper names, U+001F in window keys, late events of a window without
a reducer, and the process-wide partition lock."""

from __future__ import annotations

import functools
import re
from typing import Any

import pytest
from _streams_fake import FakeBroker, FakeSource
from _streams_util import PID, Q, msg

from queen_sync import Queen
from queen_sync.errors import InvalidInputError
from queen_sync.streams import Stream, sliding_window_gate, token_bucket_gate
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
