"""Streams end to end on a broker (the embedded one by default, ``QUEEN_URL`` when set):
windows, gates and sinks with hand-computed outputs, stop and restart in a fresh process,
lost cycle replies, 503s and broker restarts, each result exactly once in the sink.

Skipped while the broker under test has no streams routes (``/streams/v1/queries`` 404).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import Any, Dict, List

import pytest
import urllib3
from _helpers import wait_for

from queen_sync import Queen
from queen_sync.errors import InvalidInputError, StreamsConfigHashError
from queen_sync.streams import Stream, stop_runners_for, token_bucket_gate

T0 = 1796115000000  # event times: 2026-12-01T08:50:00.000Z


@pytest.fixture(scope="module", autouse=True)
def _needs_streams_routes(broker_url: str) -> None:
    r = urllib3.request("POST", broker_url + "/streams/v1/queries", body=b"{}", timeout=5.0, retries=False)
    if r.status == 404:
        pytest.skip("the broker under test has no /streams/v1 routes")


def _drain(q: Queen, queue: str) -> List[Dict[str, Any]]:
    """Every message of ``queue`` (queue mode, acked), oldest first per partition."""
    out: List[Dict[str, Any]] = []
    while True:
        msgs = q.queue(queue).batch(500).partitions(50).pop()
        if not msgs:
            return out
        out.extend(msgs)
        q.ack(msgs)


def _push_events(q: Queen, src: str, per_partition: Dict[str, List[Dict[str, Any]]]) -> None:
    for part, events in per_partition.items():
        q.queue(src).partition(part).push([{"data": e} for e in events])


def _windows_input(parts=("acme", "globex"), windows=3, per_window=4):
    """x = 1..per_window in each 2-second window (event time), then a late closer."""
    data = {}
    for pi, part in enumerate(parts):
        ev = [{"ts": T0 + w * 2000 + i * 100, "x": (i + 1) * (pi + 1)} for w in range(windows) for i in range(per_window)]
        ev.append({"ts": T0 + 60000, "x": 0})
        data[part] = ev
    return data


def _sum_stream(q: Queen, src: str, out: str) -> Stream:
    return (Stream.from_(q.queue(src))
            .window_tumbling(seconds=2, event_time=lambda m: m["data"]["ts"], idle_flush_ms=0)
            .aggregate({"count": lambda v: 1, "sum": lambda v: v["x"], "max": lambda v: v["x"]})
            .map(lambda agg, ctx: {"partition": ctx["partition"], "start": ctx["windowStart"], **agg})
            .to(q.queue(out)))


def _expected_windows(parts=("acme", "globex"), windows=3, per_window=4):
    want = []
    for pi, part in enumerate(parts):
        for w in range(windows):
            xs = [(i + 1) * (pi + 1) for i in range(per_window)]
            want.append((part, T0 + w * 2000, per_window, sum(xs), max(xs)))
    return sorted(want)


def _got_windows(msgs):
    return sorted((m["data"]["partition"], m["data"]["start"], m["data"]["count"], m["data"]["sum"], m["data"]["max"])
                  for m in msgs)


def test_tumbling_event_time_aggregate_exact(client: Queen, unique_name):
    src, out = unique_name("src"), unique_name("out")
    _push_events(client, src, _windows_input())
    runner = _sum_stream(client, src, out).run(unique_name("q"), max_wait_millis=200)
    with runner:
        wait_for(lambda: runner.metrics()["pushItemsTotal"] == 6, timeout_s=20, what="6 windows")
    msgs = _drain(client, out)
    assert _got_windows(msgs) == _expected_windows()
    assert {m["partition"] for m in msgs} == {"acme", "globex"}  # default sink partition: the source's
    assert runner.metrics()["messagesTotal"] == 26


def test_stateless_enrichment_and_idle_flush(client: Queen, unique_name):
    src, out, out2 = unique_name("src"), unique_name("out"), unique_name("out2")
    client.queue(src).partition("p").push([{"data": {"n": i, "kind": "hb" if i % 3 == 0 else "ev"}} for i in range(9)])
    r = (Stream.from_(client.queue(src)).filter(lambda m: m["data"]["kind"] != "hb")
         .map(lambda m: {"n": m["data"]["n"], "at": m["createdAt"]}).to(client.queue(out)).run(unique_name("q"),
                                                                                             max_wait_millis=200))
    with r:
        wait_for(lambda: r.metrics()["messagesTotal"] == 9, what="9 messages")
    assert sorted(m["data"]["n"] for m in _drain(client, out)) == [1, 2, 4, 5, 7, 8]
    # processing time + idle flush: the open window(s) are emitted by the flush, each once
    r2 = (Stream.from_(client.queue(src)).window_tumbling(seconds=1, idle_flush_ms=200)
          .aggregate({"count": lambda v: 1, "sum": lambda v: v["n"]}).to(client.queue(out2)).run(
              unique_name("q2"), max_wait_millis=200))
    got: List[Dict[str, Any]] = []
    with r2:
        wait_for(lambda: got.extend(m["data"] for m in _drain(client, out2)) or sum(d["count"] for d in got) >= 9,
                 timeout_s=20, what="the flush")
    assert sum(d["count"] for d in got) == 9 and sum(d["sum"] for d in got) == sum(range(9))
    assert r2.metrics()["flushCyclesTotal"] >= 1


def test_poison_message_skipped_by_a_filter_before_the_map(client: Queen, unique_name):
    # the advice of docs/streams.md for poison messages, on a broker: a filter with the same
    # test as the map drops the unreadable message, the window folds the others, nothing loops
    src, out = unique_name("src"), unique_name("out")

    def safe_parse(m):
        try:
            return {"n": int(m["data"]["raw"])}
        except (KeyError, TypeError, ValueError):
            return None

    raws = [(0, "1"), (100, "oops"), (200, "2"), (60000, "0")]  # the last one closes the window
    client.queue(src).partition("p").push([{"data": {"ts": T0 + dt, "raw": raw}} for dt, raw in raws])
    errors: List[Any] = []
    r = (Stream.from_(client.queue(src))
         .filter(lambda m: safe_parse(m) is not None).map(safe_parse)
         .window_tumbling(seconds=2, event_time=lambda m: m["data"]["ts"], idle_flush_ms=0)
         .aggregate({"count": lambda v: 1, "sum": lambda v: v["n"]})
         .map(lambda agg, ctx: {"start": ctx["windowStart"], **agg})
         .to(client.queue(out)).run(unique_name("q"), max_wait_millis=200, on_error=lambda e, ctx: errors.append(e)))
    with r:
        wait_for(lambda: r.metrics()["messagesTotal"] == 4 and r.metrics()["pushItemsTotal"] == 1, timeout_s=20,
                 what="the batch acked and one window")
    assert [m["data"] for m in _drain(client, out)] == [{"start": T0, "count": 2, "sum": 3}]
    assert errors == [] and r.metrics()["errorsTotal"] == 0


def test_token_bucket_gate_fifo(client: Queen, unique_name):
    src, out = unique_name("src"), unique_name("out")
    client.queue(src).config({"leaseTime": 1, "retryLimit": 100}).create()
    client.queue(src).partition("tenant").push([{"data": {"seq": i}} for i in range(7)])
    r = (Stream.from_(client.queue(src)).gate(token_bucket_gate(capacity=3, refill_per_sec=3))
         .to(client.queue(out)).run(unique_name("q"), max_wait_millis=500))
    got: List[int] = []
    with r:
        wait_for(lambda: got.extend(m["data"]["seq"] for m in _drain(client, out)) or len(got) >= 7, timeout_s=30,
                 what="7 gated messages")
    assert got == list(range(7))  # FIFO, each once
    m = r.metrics()
    assert m["gateAllowsTotal"] == 7 and m["gateDenialsTotal"] >= 4


def test_session_window_merges_and_closes(client: Queen, unique_name):
    src, out = unique_name("src"), unique_name("out")
    ev = [{"ts": T0, "a": 1}, {"ts": T0 + 900, "a": 2}, {"ts": T0 + 5000, "a": 4}, {"ts": T0 + 5500, "a": 8},
          {"ts": T0 + 30000, "a": 0}]
    client.queue(src).partition("u1").push([{"data": e} for e in ev])
    r = (Stream.from_(client.queue(src)).window_session(gap=1, event_time=lambda m: m["data"]["ts"], idle_flush_ms=0)
         .reduce(lambda acc, v: acc + v["a"], 0)
         .map(lambda total, ctx: {"total": total, "start": ctx["windowStart"], "end": ctx["windowEnd"]})
         .to(client.queue(out)).run(unique_name("q"), max_wait_millis=200))
    with r:
        wait_for(lambda: r.metrics()["pushItemsTotal"] == 2, timeout_s=20, what="2 sessions")
    got = sorted((m["data"]["start"], m["data"]["end"], m["data"]["total"]) for m in _drain(client, out))
    assert got == [(T0, T0 + 1900, 3), (T0 + 5000, T0 + 6500, 12)]


def test_changed_pipeline_raises_and_reset_wipes_state(client: Queen, unique_name):
    src, out, name = unique_name("src"), unique_name("out"), unique_name("q")
    Stream.from_(client.queue(src)).map(lambda m: m["data"]).to(client.queue(out)).run(name, max_wait_millis=100).stop()
    changed = Stream.from_(client.queue(src)).filter(lambda m: True).to(client.queue(out))
    with pytest.raises(StreamsConfigHashError) as ei:
        changed.run(name, max_wait_millis=100)
    assert name in str(ei.value) and "reset=True" in str(ei.value)
    changed.run(name, reset=True, max_wait_millis=100).stop()


def test_close_hook_stops_runners(broker_url: str, unique_name):
    q = Queen(broker_url)
    r = Stream.from_(q.queue(unique_name("src"))).map(str).to(q.queue(unique_name("out"))).run(
        unique_name("q"), max_wait_millis=100)
    assert stop_runners_for(q, 5000) == 1 and not r.is_running
    q.close()


_CHILD = textwrap.dedent('''
    import sys, time
    from queen_sync import Queen
    from queen_sync.streams import Stream
    url, src, out, name, limit = sys.argv[1:6]
    with Queen(url) as q:
        r = (Stream.from_(q.queue(src))
             .window_tumbling(seconds=2, event_time=lambda m: m["data"]["ts"], idle_flush_ms=0)
             .aggregate({"count": lambda v: 1, "sum": lambda v: v["x"], "max": lambda v: v["x"]})
             .map(lambda agg, ctx: {"partition": ctx["partition"], "start": ctx["windowStart"], **agg})
             .to(q.queue(out))
             .run(name, batch_size=3, max_partitions=1, max_wait_millis=200))
        deadline = time.monotonic() + 30
        while r.metrics()["messagesTotal"] < int(limit) and time.monotonic() < deadline:
            time.sleep(0.01)
        r.stop(10000)
        print(r.metrics()["messagesTotal"])
''')


def test_stop_mid_input_and_resume_in_a_fresh_process(client: Queen, broker_url: str, unique_name):
    # the child sees only the first 5 events of each partition (the fifth opens a second
    # window), handles exactly those and stops; the rest is pushed once it has stopped, so
    # where the stop falls never depends on how fast the child runs
    src, out, name = unique_name("src"), unique_name("out"), unique_name("q")
    events = _windows_input()
    _push_events(client, src, {part: ev[:5] for part, ev in events.items()})
    env = dict(os.environ)
    proc = subprocess.run([sys.executable, "-c", _CHILD, broker_url, src, out, name, "10"], capture_output=True,
                          text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    done_in_child = int(proc.stdout.strip().splitlines()[-1])
    assert done_in_child == 10
    _push_events(client, src, {part: ev[5:] for part, ev in events.items()})
    runner = _sum_stream(client, src, out).run(name, batch_size=3, max_partitions=1, max_wait_millis=200)
    with runner:
        wait_for(lambda: runner.metrics()["messagesTotal"] == 26 - done_in_child, timeout_s=30, what="the rest")
    assert _got_windows(_drain(client, out)) == _expected_windows()


def test_lost_cycle_replies_503s_and_a_restart_each_result_once(embedded_broker, unique_name):
    src, out, name = unique_name("src"), unique_name("out"), unique_name("q")
    with Queen(embedded_broker.url, retry_attempts=10) as q:
        _push_events(q, src, _windows_input(windows=5))
        embedded_broker.faults.add("POST", "/streams/v1/cycle", "drop_after", times=3)
        embedded_broker.faults.add("POST", "/streams/v1/cycle", "status", status=503, times=2)
        runner = _sum_stream(q, src, out).run(name, batch_size=2, max_partitions=2, max_wait_millis=200)
        with runner:
            wait_for(lambda: runner.metrics()["messagesTotal"] >= 10, timeout_s=30, what="progress")
            embedded_broker.restart()
            wait_for(lambda: runner.metrics()["messagesTotal"] >= 42, timeout_s=60, what="all 42 messages")
        m = runner.metrics()
        assert m["resendsTotal"] >= 3
        assert _got_windows(_drain(q, out)) == _expected_windows(windows=5)  # each window exactly once


@pytest.mark.parametrize("nan_as_null", [True, False])
def test_sink_push_follows_the_clients_nan_as_null(broker_url: str, unique_name, nan_as_null: bool):
    src, out = unique_name("src"), unique_name("out")
    seen: List[Any] = []
    with Queen(broker_url, nan_as_null=nan_as_null) as q:
        q.queue(src).partition("p").push([{"data": {"n": 1}}])
        r = (Stream.from_(q.queue(src)).map(lambda m: {"n": m["data"]["n"], "v": float("nan")})
             .to(q.queue(out)).run(unique_name("q"), max_wait_millis=200, on_error=lambda e, ctx: seen.append(e)))
        with r:
            if nan_as_null:
                wait_for(lambda: r.metrics()["messagesTotal"] == 1, what="the cycle")
            else:
                wait_for(lambda: seen, what="on_error")
        if nan_as_null:
            assert [m["data"] for m in _drain(q, out)] == [{"n": 1, "v": None}] and not seen
        else:
            assert isinstance(seen[0], InvalidInputError) and "NaN" in str(seen[0])
            assert r.metrics()["messagesTotal"] == 0 and _drain(q, out) == []
