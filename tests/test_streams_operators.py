"""Operators, aggregates, gates and chain rules, against hand-computed results."""

from __future__ import annotations

import pytest
from _streams_util import PID, Q, msg

from queen_sync.errors import InvalidInputError
from queen_sync.streams import GateContext, Stream, sliding_window_gate, token_bucket_gate
from queen_sync.streams.operators import AggregateOperator, ReduceOperator, two_arg
from queen_sync.streams.processor import process_batch
from queen_sync.streams.state import sink_transaction_id

T0 = 1796115000000


def _run(plan, msgs, loaded=None, now=T0):
    return process_batch(plan, "q", PID, "P1", "L1", msgs, loaded or {}, now)


def test_aggregate_count_sum_min_max_avg_exact_names():
    agg = AggregateOperator({"count": lambda v: 1, "sum": lambda v: v, "min": lambda v: v, "max": lambda v: v,
                             "avg": lambda v: v, "other": lambda v: v})
    acc = agg.initial_value()
    for v in [4, "x", -2, 10]:
        acc = agg.fn(acc, v)
    # a non-number adds 1 to count, 0 to sum/other, and is ignored by min/max/avg
    assert agg.result(acc) == {"count": 4, "sum": 12, "min": -2, "max": 10, "avg": 4.0, "other": 12}
    assert acc["__avg_sum"] == 12 and acc["__avg_count"] == 3  # kept in state, as 0.15 stores it
    empty = agg.result(agg.initial_value())
    assert empty == {"count": 0, "sum": 0, "min": None, "max": None, "avg": 0, "other": 0}
    assert agg.config == {"fields": ["count", "sum", "min", "max", "avg", "other"]}


def test_count_extractor_number_is_added():
    agg = AggregateOperator({"count": lambda v: v["n"]})
    acc = agg.fn(agg.fn(agg.initial_value(), {"n": 5}), {"n": None})
    assert acc == {"count": 6}


def test_reduce_each_window_starts_from_a_copy_of_initial():
    r = ReduceOperator(lambda acc, v: acc.append(v) or acc, [])
    a, b = r.initial_value(), r.initial_value()
    a.append(1)
    assert b == [] and r.initial == []
    assert ReduceOperator(lambda a, v: a, None).initial_value() is None
    assert ReduceOperator(lambda a, v: a, None).session_initial_value() == 0  # 0.15's session start value


def test_two_arg_decides_from_the_signature():
    seen = []
    one = two_arg(lambda m: seen.append(("one", m)), "map()")
    two = two_arg(lambda m, ctx: seen.append(("two", m, ctx)), "map()")
    one("a", "ctx")
    two("b", "ctx")
    assert seen == [("one", "a"), ("two", "b", "ctx")]

    def raises_type_error(m, ctx):
        raise TypeError("bug inside the user function")

    with pytest.raises(TypeError, match="bug inside"):
        two_arg(raises_type_error, "map()")(1, 2)  # never retried as fn(m)
    with pytest.raises(InvalidInputError):
        two_arg(lambda: 1, "map()")
    with pytest.raises(InvalidInputError):
        Stream.from_(Q("s")).map("not callable")


def test_pre_stages_see_the_source_message_and_last_map_wins():
    calls = []
    plan = (Stream.from_(Q("s")).map(lambda m: calls.append(("map1", m["id"])) or m["data"]["v"] * 10)
            .map(lambda m, ctx: calls.append(("map2", m["id"], ctx)) or m["data"]["v"] + 1)
            .filter(lambda m: m["data"]["v"] != 2)
            .to(Q("o")).compile())
    w = _run(plan, [msg(1, T0, {"v": 1}), msg(2, T0 + 1, {"v": 2})])
    assert [it["payload"] for it in w.push_items] == [{"value": 2}]
    assert calls[:2] == [("map1", "m000001"), ("map2", "m000001", None)]
    assert w.ack["count"] == 2 and w.ack["transactionId"] == "t2"


def test_flat_map_and_sink_partition_rules():
    base = Stream.from_(Q("s")).flat_map(lambda m: [{"k": "a"}, {"k": "b"}, 3])
    w = _run(base.to(Q("o")).compile(), [msg(1, T0, {})])
    assert [(it["partition"], it["payload"]) for it in w.push_items] == [("P1", {"k": "a"}), ("P1", {"k": "b"}),
                                                                         ("P1", {"value": 3})]
    w = _run(base.to(Q("o"), partition="fixed").compile(), [msg(1, T0, {})])
    assert {it["partition"] for it in w.push_items} == {"fixed"}
    w = _run(base.to(Q("o"), partition=lambda v: v["k"] if isinstance(v, dict) else "n7").compile(), [msg(1, T0, {})])
    assert [it["partition"] for it in w.push_items] == ["a", "b", "n7"]
    with pytest.raises(InvalidInputError, match="returned 7"):  # no str() of a non-str: an error of fn
        _run(base.to(Q("o"), partition=lambda v: v["k"] if isinstance(v, dict) else 7).compile(), [msg(1, T0, {})])
    with pytest.raises(TypeError):
        _run(Stream.from_(Q("s")).flat_map(lambda m: "x").to(Q("o")).compile(), [msg(1, T0, {})])


def test_sink_transaction_ids_are_deterministic_and_distinct():
    plan = Stream.from_(Q("s")).flat_map(lambda m: [1, 2]).to(Q("o")).compile()
    a = _run(plan, [msg(1, T0, {}), msg(2, T0, {})])
    b = _run(plan, [msg(1, T0, {}), msg(2, T0, {})])
    ids = [it["transactionId"] for it in a.push_items]
    assert ids == [it["transactionId"] for it in b.push_items]
    assert len(set(ids)) == 4
    assert sink_transaction_id("q", "x", 0) != sink_transaction_id("q2", "x", 0)
    import hashlib
    import uuid

    digest = hashlib.sha256("q\x1ex\x1e0".encode()).digest()
    assert sink_transaction_id("q", "x", 0) == str(uuid.UUID(bytes=digest[:16], version=5))
    assert sink_transaction_id("q", "x", 0) != sink_transaction_id("q", "x", 1)


def test_window_post_map_context():
    seen = []
    plan = (Stream.from_(Q("s")).window_tumbling(seconds=1).reduce(lambda a, v: a + v, 0)
            .map(lambda agg, ctx: seen.append(ctx) or {"total": agg}).to(Q("o")).compile())
    w = _run(plan, [msg(1, T0 + 10, 5), msg(2, T0 + 20, 6), msg(3, T0 + 1000, 1)])
    assert [it["payload"] for it in w.push_items] == [{"total": 11}]
    ctx = seen[0]
    assert ctx["partition"] == "P1" and ctx["partitionId"] == PID and ctx["key"] == PID
    assert (ctx["windowStart"], ctx["windowEnd"]) == (T0, T0 + 1000)
    assert isinstance(ctx["windowStart"], int) and ctx["windowKey"] == "2026-12-01T08:50:00.000Z"


def test_post_map_returning_none_is_filtered_out():
    # the official alerting pattern: map to an alert or None, then drop the Nones
    plan = (Stream.from_(Q("s")).window_tumbling(seconds=1).reduce(lambda a, v: a + v, 0)
            .map(lambda total, ctx: {"alert": total} if total > 10 else None).filter(lambda v: v is not None)
            .to(Q("o")).compile())
    w = _run(plan, [msg(1, T0, 5), msg(2, T0 + 1000, 20), msg(3, T0 + 2000, 0)])
    assert [it["payload"] for it in w.push_items] == [{"alert": 20}]


def test_pre_filter_gets_the_message_and_a_none_value_falls_back_to_it_for_the_reducer():
    # docs/streams.md: a pre filter gets the source message, not the value a map before it
    # returned, and a None value is replaced by the whole source message for the reducer
    seen_by_filter, folded = [], []

    def parse(m):
        return m["data"]["n"] if isinstance(m["data"].get("n"), int) else None

    msgs = [msg(1, T0, {"n": 1}), msg(2, T0 + 10, {"n": "bad"}), msg(3, T0 + 2000, {"n": 0})]
    plan = (Stream.from_(Q("s")).map(parse).filter(lambda m: seen_by_filter.append(m) or m is not None)
            .window_tumbling(seconds=1).reduce(lambda a, v: folded.append(v) or a, 0).to(Q("o")).compile())
    _run(plan, msgs)
    assert seen_by_filter == msgs  # the messages, never the parsed value (nor None)
    assert folded[:2] == [1, msgs[1]]  # the poison message's None became the message itself
    # the advice of docs/streams.md: filter with the same test, then map
    folded.clear()
    plan = (Stream.from_(Q("s")).filter(lambda m: parse(m) is not None).map(parse)
            .window_tumbling(seconds=1).reduce(lambda a, v: folded.append(v) or a + v, 0).to(Q("o")).compile())
    w = _run(plan, msgs)
    assert folded == [1, 0] and [it["payload"] for it in w.push_items] == [{"value": 1}]


def test_foreach_effects_get_value_and_ctx():
    plan = Stream.from_(Q("s")).map(lambda m: m["data"]).foreach(lambda v: None).compile()
    w = _run(plan, [msg(1, T0, {"a": 1})])
    assert w.push_items == [] and w.effects[0][0] == {"a": 1} and w.effects[0][1]["partition"] == "P1"


# gates ---------------------------------------------------------------------------------


def test_token_bucket_partial_ack_keeps_the_lease_fifo():
    plan = Stream.from_(Q("s")).gate(token_bucket_gate(capacity=3, refill_per_sec=2)).to(Q("o")).compile()
    msgs = [msg(i, T0, {"seq": i}) for i in range(1, 9)]
    w = _run(plan, msgs)
    assert [it["payload"]["seq"] for it in w.push_items] == [1, 2, 3]
    assert w.ack == {"transactionId": "t3", "leaseId": "L1", "status": "completed", "count": 3}
    assert w.release_lease is False and (w.gate_allows, w.gate_denials) == (3, 5)
    st = w.state_ops[0]
    assert st["key"] == PID and st["value"] == {"tokens": 0.0, "lastRefillAt": T0, "allowedTotal": 3, "consumedTotal": 3}
    # the tail comes back in order; 1.5 s later 3 tokens are back (capped at capacity)
    w2 = _run(plan, msgs[3:], {PID: st["value"]}, now=T0 + 1500)
    assert [it["payload"]["seq"] for it in w2.push_items] == [4, 5, 6]
    assert w2.ack["transactionId"] == "t6"


def test_gate_denying_the_first_message_commits_nothing():
    plan = Stream.from_(Q("s")).gate(lambda v, ctx: False).to(Q("o")).compile()
    w = _run(plan, [msg(1, T0, {}), msg(2, T0, {})])
    assert w.commit is False and w.gate_denials == 2


def test_gate_all_allowed_acks_the_whole_batch_even_with_filtered_tail():
    plan = (Stream.from_(Q("s")).filter(lambda m: m["data"]["keep"]).gate(lambda v, ctx: True).to(Q("o")).compile())
    w = _run(plan, [msg(1, T0, {"keep": True}), msg(2, T0, {"keep": False})])
    assert w.ack["transactionId"] == "t2" and w.ack["count"] == 2 and w.release_lease is True


def test_gate_acks_whole_messages_only():
    # message 1 yields 2 records, message 2 yields 2; capacity 3: the 4th record is denied, so
    # message 2 is not acked and its first record's token is not spent
    plan = (Stream.from_(Q("s")).flat_map(lambda m: [m["data"], m["data"]])
            .gate(token_bucket_gate(capacity=3, refill_per_sec=1)).to(Q("o")).compile())
    w = _run(plan, [msg(1, T0, {"n": 1}), msg(2, T0, {"n": 2})])
    assert w.ack["transactionId"] == "t1" and w.ack["count"] == 1 and w.release_lease is False
    assert len(w.push_items) == 2 and w.state_ops[0]["value"]["tokens"] == 1


def test_gate_per_key_state_and_context():
    seen = []

    def fn(v, ctx: GateContext):
        seen.append((ctx.key, ctx.partition, ctx.partitionId, ctx.streamTimeMs))
        ctx.state["n"] = ctx.state.get("n", 0) + 1
        return {"allow": ctx.state["n"] <= 1}

    plan = Stream.from_(Q("s")).key_by(lambda m: m["data"]["t"]).gate(fn).to(Q("o")).compile()
    w = _run(plan, [msg(1, T0, {"t": "a"}), msg(2, T0, {"t": "b"}), msg(3, T0, {"t": "a"})], {"a": {"n": 0}})
    assert seen[0] == ("a", "P1", PID, T0)
    assert w.ack["transactionId"] == "t2" and [op["key"] for op in w.state_ops] == ["a", "b"]


def test_sliding_window_gate_two_bucket_estimate():
    gate = sliding_window_gate(limit=4, window_sec=1)
    st: dict = {}

    def ask(now):
        return gate(None, GateContext(st, now, PID, "P1", PID))

    assert [ask(T0 + 100) for _ in range(5)] == [True] * 4 + [False]
    # half way through the next second: previous 4 weigh 4 * 0.5 = 2, so two more fit
    assert [ask(T0 + 1500) for _ in range(3)] == [True, True, False]
    assert st["window"] == (T0 + 1500) // 1000 and st["previousCount"] == 4


def test_gate_helpers_validate():
    with pytest.raises(InvalidInputError):
        token_bucket_gate(capacity=0, refill_per_sec=1)
    with pytest.raises(InvalidInputError):
        sliding_window_gate(limit=1, window_sec=-1)
    with pytest.raises(TypeError):
        _run(Stream.from_(Q("s")).gate(lambda v, c: "yes").to(Q("o")).compile(), [msg(1, T0, {})])


# chain rules ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "build, text",
    [
        (lambda s: s.to(Q("o")).map(len), "must be the last"),
        (lambda s: s.window_tumbling(seconds=1).window_tumbling(seconds=2), "only one window"),
        (lambda s: s.reduce(lambda a, v: a), "needs a window"),
        (lambda s: s.aggregate({"count": len}), "needs a window"),
        (lambda s: s.window_tumbling(seconds=1).gate(lambda v, c: True), "cannot be combined"),
        (lambda s: s.gate(lambda v, c: True).window_tumbling(seconds=1), "cannot be combined"),
        (lambda s: s.window_tumbling(seconds=1).reduce(lambda a, v: a).reduce(lambda a, v: a), "only one reduce"),
        (lambda s: s.gate(lambda v, c: True).gate(lambda v, c: True), "only one .gate"),
        (lambda s: s.key_by(str).key_by(str), "only one .key_by"),
        (lambda s: s.window_tumbling(seconds=1).reduce(lambda a, v: a).key_by(str), "must come before"),
        (lambda s: s.window_session(gap=1), "needs a .reduce"),
    ],
)
def test_chain_rules_checked_by_compile(build, text):
    stream = build(Stream.from_(Q("s")))  # building never raises for the chain rules
    with pytest.raises(InvalidInputError, match=text):
        stream.compile()


def test_stages_split_pre_and_post():
    plan = (Stream.from_(Q("s")).map(str).key_by(str).filter(bool).window_tumbling(seconds=1).map(str)
            .reduce(lambda a, v: a).map(str).flat_map(list).to(Q("o")).compile())
    assert [op.kind for op in plan.pre] == ["map", "filter", "map"]
    assert [op.kind for op in plan.post] == ["map", "flatMap"]
    assert plan.sink_queue == "o" and plan.source_queue == "s"


def test_gate_is_called_once_per_record_on_a_partial_allow_of_a_message():
    # message 1 yields 3 records, message 2 yields 3; the gate allows 4: the 5th record (the
    # second of message 2) is denied, so message 2 comes back whole. The gate was called for
    # records 1..5 once each (it used to be called again for message 1's three records).
    calls = []

    def fn(v, ctx):
        calls.append(v)
        ctx.state["n"] = ctx.state.get("n", 0) + 1
        return ctx.state["n"] <= 4

    plan = (Stream.from_(Q("s")).flat_map(lambda m: [{"n": m["data"]["n"], "i": i} for i in range(3)])
            .gate(fn).to(Q("o")).compile())
    w = _run(plan, [msg(1, T0, {"n": 1}), msg(2, T0, {"n": 2})], {PID: {"n": 0}})
    assert [(c["n"], c["i"]) for c in calls] == [(1, 0), (1, 1), (1, 2), (2, 0), (2, 1)]
    assert w.ack["transactionId"] == "t1" and w.ack["count"] == 1 and w.release_lease is False
    assert [it["payload"] for it in w.push_items] == [{"n": 1, "i": i} for i in range(3)]
    # the state persisted is the one after message 1: message 2's allowed record is undone
    assert w.state_ops == [{"type": "upsert", "key": PID, "value": {"n": 3}}]
    assert (w.gate_allows, w.gate_denials) == (3, 3)


def test_gate_partial_message_undo_keeps_earlier_keys_and_drops_new_ones():
    # keys by message: a, b; message 2 (key b) is partly allowed then denied: b is not
    # persisted at all, a keeps what message 1 did; the loaded state is not mutated
    calls = []

    def fn(v, ctx):
        calls.append((ctx.key, v))
        ctx.state.setdefault("seen", []).append(v)
        return v != "b2"

    loaded = {"a": {"seen": ["old"]}}
    plan = (Stream.from_(Q("s")).key_by(lambda m: m["data"]["k"])
            .flat_map(lambda m: [m["data"]["k"] + "1", m["data"]["k"] + "2"]).gate(fn).to(Q("o")).compile())
    w = _run(plan, [msg(1, T0, {"k": "a"}), msg(2, T0, {"k": "b"})], loaded)
    assert calls == [("a", "a1"), ("a", "a2"), ("b", "b1"), ("b", "b2")]
    assert w.state_ops == [{"type": "upsert", "key": "a", "value": {"seen": ["old", "a1", "a2"]}}]
    assert loaded == {"a": {"seen": ["old"]}} and w.ack["count"] == 1
