"""Window assignment and folding, against hand-computed windows, counts and sums."""

from __future__ import annotations

import pytest
from _streams_util import PID, Q, msg

from queen_sync.errors import InvalidInputError
from queen_sync.streams import Stream
from queen_sync.streams.processor import flush_request, process_batch, process_flush
from queen_sync.streams.state import SEP, WATERMARK_KEY, parse_iso_ms, to_iso_ms
from queen_sync.streams.windows import CronWindow, SessionWindow, SlidingWindow, TumblingWindow

T0 = 1796115000000  # 2026-12-01T08:50:00.000Z, a whole hour + 50 min


def _sum_stream(window_call):
    s = window_call(Stream.from_(Q("src")))
    return s.aggregate({"count": lambda v: 1, "sum": lambda v: v["x"]}).to(Q("out")).compile()


def test_iso_ms_round_trip_and_exact_parse():
    assert to_iso_ms(T0) == "2026-12-01T08:50:00.000Z"
    assert to_iso_ms(T0 + 1) == "2026-12-01T08:50:00.001Z"
    assert parse_iso_ms("2026-12-01T08:50:00.551000Z") == T0 + 551
    assert parse_iso_ms("2026-12-01T08:50:00.5Z") == T0 + 500
    assert parse_iso_ms("2026-12-01T09:50:00+01:00") == T0
    assert parse_iso_ms("2026-12-01T08:50:00") == T0
    assert parse_iso_ms("nope") is None and parse_iso_ms(None) is None


def test_tumbling_assignment_boundaries():
    w = TumblingWindow(seconds=2)
    assert w.assign(T0) == [(T0, T0 + 2000)]
    assert w.assign(T0 + 1999) == [(T0, T0 + 2000)]
    assert w.assign(T0 + 2000) == [(T0 + 2000, T0 + 4000)]
    assert w.tag == "tumb:2" and TumblingWindow(seconds=0.5).tag == "tumb:0.5"


def test_sliding_assignment():
    w = SlidingWindow(size=10, slide=5)
    assert w.assign(T0 + 7000) == [(T0 + 5000, T0 + 15000), (T0, T0 + 10000)]
    assert w.assign(T0 + 5000) == [(T0 + 5000, T0 + 15000), (T0, T0 + 10000)]
    assert w.tag == "slide:10:5"
    with pytest.raises(InvalidInputError):
        SlidingWindow(size=10, slide=3)


def test_cron_alignment():
    h = CronWindow(every="hour")
    assert h.assign(T0 + 123) == [(T0 - 50 * 60000, T0 + 10 * 60000)]
    d = CronWindow(every="day")
    day0 = T0 - (8 * 3600000 + 50 * 60000)
    assert d.assign(T0) == [(day0, day0 + 86400000)]
    wk = CronWindow(every="week")
    (start, end), = wk.assign(T0)
    assert to_iso_ms(start) == "2026-11-30T00:00:00.000Z"  # the Monday before (Dec 1 2026 is a Tuesday)
    assert end - start == 7 * 86400000
    assert CronWindow(every="minute").assign(T0 + 59999) == [(T0, T0 + 60000)]
    with pytest.raises(InvalidInputError):
        CronWindow(every="fortnight")


def test_tumbling_batch_closes_earlier_window_and_keeps_the_open_one():
    plan = _sum_stream(lambda s: s.window_tumbling(seconds=2))
    msgs = [msg(1, T0 + 100, {"x": 1}), msg(2, T0 + 1500, {"x": 2}), msg(3, T0 + 2100, {"x": 40})]
    w = process_batch(plan, "q", PID, "P1", "L1", msgs, {}, T0 + 5000)
    # window [T0, T0+2000) closed by stream time T0+2100 (latest createdAt); it never had a row
    assert [it["payload"] for it in w.push_items] == [{"count": 2, "sum": 3}]
    assert w.push_items[0]["partition"] == "P1" and w.push_items[0]["queue"] == "out"
    key = "tumb:2" + SEP + to_iso_ms(T0 + 2000) + SEP + PID
    assert w.state_ops == [{"type": "upsert", "key": key, "value": {
        "acc": {"count": 1, "sum": 40}, "windowStart": T0 + 2000, "windowEnd": T0 + 4000, "openedBy": "m000003"}}]
    assert w.ack == {"transactionId": "t3", "leaseId": "L1", "status": "completed", "count": 3}
    # next batch continues the open window from its row, then closes it
    loaded = {key: w.state_ops[0]["value"]}
    w2 = process_batch(plan, "q", PID, "P1", "L1", [msg(4, T0 + 3000, {"x": 5}), msg(5, T0 + 4000, {"x": 7})], loaded, 0)
    assert [it["payload"] for it in w2.push_items] == [{"count": 2, "sum": 45}]
    assert w2.state_ops[0] == {"type": "delete", "key": key}
    assert w2.state_ops[1]["value"]["acc"] == {"count": 1, "sum": 7}


def test_grace_period_delays_the_close():
    plan = _sum_stream(lambda s: s.window_tumbling(seconds=2, grace_period=1))
    w = process_batch(plan, "q", PID, "P1", "L1", [msg(1, T0, {"x": 1}), msg(2, T0 + 2900, {"x": 1})], {}, 0)
    assert w.push_items == []  # end 2000 + grace 1000 > 2900
    w = process_batch(plan, "q", PID, "P1", "L1", [msg(1, T0, {"x": 1}), msg(2, T0 + 3000, {"x": 1})], {}, 0)
    assert [it["payload"] for it in w.push_items] == [{"count": 1, "sum": 1}]


def test_sliding_counts_each_event_in_every_window():
    plan = _sum_stream(lambda s: s.window_sliding(size=4, slide=2))
    msgs = [msg(1, T0 + 500, {"x": 1}), msg(2, T0 + 2500, {"x": 10}), msg(3, T0 + 8000, {"x": 100})]
    w = process_batch(plan, "q", PID, "P1", "L1", msgs, {}, 0)
    payloads = [it["payload"] for it in w.push_items]
    # closed by stream time T0+8000, in the order the windows were first touched (as 0.15 emits them):
    # [T0,T0+4000) {1,10}, [T0-2000,T0+2000) {1}, [T0+2000,T0+6000) {10}; [T0+4000,T0+8000) saw nothing;
    # still open: [T0+6000,T0+10000) and [T0+8000,T0+12000) with {100}
    assert payloads == [{"count": 2, "sum": 11}, {"count": 1, "sum": 1}, {"count": 1, "sum": 10}]
    assert sorted(op["value"]["windowStart"] for op in w.state_ops) == [T0 + 6000, T0 + 8000]
    assert all(op["value"]["acc"] == {"count": 1, "sum": 100} for op in w.state_ops)


def test_event_time_watermark_and_late_events_dropped():
    plan = _sum_stream(lambda s: s.window_tumbling(seconds=10, event_time=lambda m: m["data"]["ts"],
                                                   allowed_lateness=2))
    msgs = [msg(1, 0, {"x": 1, "ts": T0 + 1000}), msg(2, 0, {"x": 2, "ts": T0 + 13000})]
    w = process_batch(plan, "q", PID, "P1", "L1", msgs, {}, 0)
    assert w.watermark == T0 + 11000  # max event time 13000 - lateness 2000
    assert [it["payload"] for it in w.push_items] == [{"count": 1, "sum": 1}]  # [T0, T0+10000) closed
    assert w.state_ops[-1] == {"type": "upsert", "key": WATERMARK_KEY, "value": {"eventTimeMs": T0 + 11000}}
    loaded = {op["key"]: op["value"] for op in w.state_ops if op["type"] == "upsert"}
    late = [msg(3, 0, {"x": 50, "ts": T0 + 9000}), msg(4, 0, {"x": 3, "ts": T0 + 12000})]
    w2 = process_batch(plan, "q", PID, "P1", "L1", late, loaded, 0)
    assert w2.late == 1  # 9000 < watermark 11000
    upserts = {op["key"]: op["value"] for op in w2.state_ops if op["type"] == "upsert"}
    assert upserts["tumb:10" + SEP + to_iso_ms(T0 + 10000) + SEP + PID]["acc"] == {"count": 2, "sum": 5}
    assert w2.push_items == []


def test_on_late_include_reopens_the_window():
    plan = _sum_stream(lambda s: s.window_tumbling(seconds=10, event_time=lambda m: m["data"]["ts"], on_late="include"))
    w = process_batch(plan, "q", PID, "P1", "L1", [msg(1, 0, {"x": 7, "ts": T0 + 9000})], {}, 0, watermark=T0 + 20000)
    assert w.late == 0
    assert [it["payload"] for it in w.push_items] == [{"count": 1, "sum": 7}]


def test_session_merges_within_gap_and_splits_after():
    plan = (Stream.from_(Q("s")).window_session(gap=1.5).reduce(lambda a, v: a + v["x"], 0)
            .map(lambda t, ctx: {"total": t, "start": ctx["windowStart"], "end": ctx["windowEnd"]}).to(Q("o")).compile())
    msgs = [msg(1, T0, {"x": 1}), msg(2, T0 + 1500, {"x": 2}), msg(3, T0 + 3001, {"x": 4}), msg(4, T0 + 3500, {"x": 8})]
    w = process_batch(plan, "q", PID, "P1", "L1", msgs, {}, T0 + 4000)
    # 1500 - 0 <= gap (inclusive) merges; 3001 - 1500 > gap splits
    assert [it["payload"] for it in w.push_items] == [{"total": 3, "start": T0, "end": T0 + 3000}]
    key = "sess:1.5" + SEP + "open" + SEP + PID
    assert w.state_ops == [{"type": "upsert", "key": key, "value": {
        "acc": 12, "sessionStart": T0 + 3001, "lastEventTime": T0 + 3500, "openedBy": "m000003"}}]
    # the idle flush closes it once lastEventTime + gap <= clock
    assert flush_request(plan, T0 + 4999) == {}
    rows = {key: w.state_ops[0]["value"]}
    assert process_flush(plan, "q", PID, "P1", rows, T0 + 4999).commit is False
    f = process_flush(plan, "q", PID, "P1", rows, T0 + 5000)
    assert [it["payload"] for it in f.push_items] == [{"total": 12, "start": T0 + 3001, "end": T0 + 5000}]
    assert f.state_ops == [{"type": "delete", "key": key}] and f.ack is None


def test_session_row_deleted_when_a_reopened_session_also_closes():
    # a loaded session closes by gap, a new one opens and closes in the same cycle: the old row
    # must go (0.15 keeps it and emits the old session again later)
    plan = Stream.from_(Q("s")).window_session(gap=1).reduce(lambda a, v: a + 1, 0).to(Q("o")).compile()
    key = "sess:1" + SEP + "open" + SEP + PID
    loaded = {key: {"acc": 5, "sessionStart": T0, "lastEventTime": T0 + 100}}
    w = process_batch(plan, "q", PID, "P1", "L1", [msg(1, T0 + 5000, {})], loaded, T0 + 10000)
    assert [it["payload"] for it in w.push_items] == [{"value": 5}, {"value": 1}]
    assert w.state_ops == [{"type": "delete", "key": key}]


def test_session_keys_by_key_by():
    plan = (Stream.from_(Q("s")).key_by(lambda m: m["data"]["u"]).window_session(gap=10)
            .aggregate({"count": lambda v: 1}).to(Q("o")).compile())
    msgs = [msg(1, T0, {"u": "a"}), msg(2, T0 + 1, {"u": "b"}), msg(3, T0 + 2, {"u": "a"})]
    w = process_batch(plan, "q", PID, "P1", "L1", msgs, {}, T0 + 3)
    assert {op["key"].split(SEP)[2]: op["value"]["acc"] for op in w.state_ops} == {"a": {"count": 2}, "b": {"count": 1}}


def test_idle_flush_request_and_ripe_rows():
    plan = _sum_stream(lambda s: s.window_tumbling(seconds=2, grace_period=1))
    assert flush_request(plan, T0) == {"key_prefix": "tumb:2" + SEP, "ripe_at_or_before": T0 - 1000}
    assert flush_request(plan, 500) is None
    key = "tumb:2" + SEP + to_iso_ms(T0) + SEP + PID
    other = "tumb:3" + SEP + to_iso_ms(T0) + SEP + PID
    rows = {key: {"acc": {"count": 3, "sum": 9}, "windowStart": T0, "windowEnd": T0 + 2000}, other: {"acc": 1}}
    f = process_flush(plan, "q", PID, "P1", rows, T0 + 3000)
    assert [it["payload"] for it in f.push_items] == [{"count": 3, "sum": 9}]
    assert f.state_ops == [{"type": "delete", "key": key}]


def test_window_option_validation():
    with pytest.raises(InvalidInputError):
        Stream.from_(Q("s")).window_tumbling(seconds=0)
    with pytest.raises(InvalidInputError):
        Stream.from_(Q("s")).window_tumbling(seconds=1, on_late="keep")
    with pytest.raises(InvalidInputError):
        Stream.from_(Q("s")).window_tumbling(seconds=1, idle_flush_ms=-1)
    with pytest.raises(InvalidInputError):
        Stream.from_(Q("s")).window_tumbling(seconds=1, size=3)
    with pytest.raises(InvalidInputError):
        Stream.from_(Q("s")).window_session()
    w = Stream.from_(Q("s")).window_tumbling(seconds=1, idleFlushMs=0, gracePeriod=2).operators[0]
    assert (w.idle_flush_ms, w.grace_ms) == (0, 2000)
    assert isinstance(Stream.from_(Q("s")).window_session(gap=1).operators[0], SessionWindow)
    assert [TumblingWindow(seconds=1).idle_flush_ms, SlidingWindow(size=2, slide=1).idle_flush_ms,
            SessionWindow(gap=1).idle_flush_ms, CronWindow(every="hour").idle_flush_ms] == [5000, 5000, 1000, 30000]


def test_sliding_window_refuses_more_than_the_bound_of_windows_per_event():
    from queen_sync.streams.windows import MAX_SLIDING_WINDOWS_PER_EVENT

    assert MAX_SLIDING_WINDOWS_PER_EVENT == 10_000
    # 10**11 windows per event: refused by the builder method, before any chain is run
    for size, slide in [(10**11, 1), (MAX_SLIDING_WINDOWS_PER_EVENT + 1, 1), (2 * MAX_SLIDING_WINDOWS_PER_EVENT + 2, 2)]:
        with pytest.raises(InvalidInputError, match="more than 10000 windows"):
            Stream.from_(Q("s")).window_sliding(size=size, slide=slide)
    # at the bound: accepted, and an event is in exactly that many windows
    w = Stream.from_(Q("s")).window_sliding(size=2 * MAX_SLIDING_WINDOWS_PER_EVENT, slide=2).operators[0]
    assert w.per_event == MAX_SLIDING_WINDOWS_PER_EVENT
    wins = w.assign(T0)
    assert len(wins) == MAX_SLIDING_WINDOWS_PER_EVENT and len(set(wins)) == MAX_SLIDING_WINDOWS_PER_EVENT
    assert all(start <= T0 < end and end - start == 20_000_000 for start, end in wins)


@pytest.mark.parametrize("bad", [0.5, 1000.0, 1.5, True, False, "1000", None, float("nan")])
@pytest.mark.parametrize("call", ["window_tumbling", "window_sliding", "window_session", "window_cron"])
def test_idle_flush_ms_must_be_an_int_not_a_float_or_bool(call, bad):
    shape = {"window_tumbling": {"seconds": 1}, "window_sliding": {"size": 2, "slide": 1},
             "window_session": {"gap": 1}, "window_cron": {"every": "hour"}}[call]
    s = Stream.from_(Q("s"))
    # a float was truncated (0.5 became 0: no idle flush at all); a non-int is refused now, as max_wait_millis
    with pytest.raises(InvalidInputError, match=r"idle_flush_ms must be an int of milliseconds of 0\.\.31536000000"):
        getattr(s, call)(idle_flush_ms=bad, **shape)
    with pytest.raises(InvalidInputError, match="idle_flush_ms must be an int"):
        getattr(s, call)(idleFlushMs=bad, **shape)
    w = getattr(s, call)(idle_flush_ms=1, **shape).operators[0]
    assert w.idle_flush_ms == 1 and w.config["idleFlushMs"] == 1


def test_float_durations_as_docs_streams_md_says():
    # int(seconds * 1000), truncated as the official SDK does: 2.01 s is a 2009 ms window
    tumbling = Stream.from_(Q("s")).window_tumbling(seconds=2.01).reduce(lambda a, v: a, 0).to(Q("o")).compile()
    assert tumbling.window.window_ms == 2009
    # the sliding check is size % slide on the floats as given
    with pytest.raises(InvalidInputError, match="whole multiple"):
        Stream.from_(Q("s")).window_sliding(size=0.3, slide=0.1)
    sliding = Stream.from_(Q("s")).window_sliding(size=0.375, slide=0.125).reduce(lambda a, v: a, 0).to(Q("o")).compile()
    assert (sliding.window.size_ms, sliding.window.slide_ms) == (375, 125)
