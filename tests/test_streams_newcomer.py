"""Faults of the Streams SDK found by a newcomer review, each with the fix's outcome: run
options checked before the register, user-callable arity checked when the chain is built,
duration caps, the avg helper names, U+001F in window keys, late events of a window without
a reducer, and the process-wide partition lock."""

from __future__ import annotations

from typing import Any

import pytest

from queen_sync import Queen
from queen_sync.errors import InvalidInputError
from queen_sync.streams import Stream

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
