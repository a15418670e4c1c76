"""A lane worker's own pop (``Fetchers.pop_for_worker``) under stress: stops while a worker's
pop is on its way, the room bound with many workers popping, the limit, order, broker faults
on a worker's pop, and missed wake-ups.

Missed wake-ups are found without timing: the waits of the fetchers and workers time out
every ``TICK_S`` (0.1 s), which hides a missed wake as slowness; ``slow_ticks`` raises those
ticks to a minute, so a missed wake leaves the consumer stuck past the test's generous
deadline instead.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Dict, Iterator, List, Tuple

import pytest

from queen_sync import Queen
from queen_sync.consumer import _calls, _fetching, _lanes, _state

from _helpers import capture_consumers as _capture_consumers, wait_until

DEADLINE_S = 20.0  # generous: every wait below normally ends in well under a second


def _push(client: Queen, qname: str, partitions: int, per_partition: int) -> None:
    for p in range(partitions):
        client.queue(qname).partition("p%d" % p).push([{"data": {"p": p, "i": i}} for i in range(per_partition)])


def _record_pops(monkeypatch: Any) -> List[Tuple[str, bool, int, int]]:
    """Record ``(thread name, wait, asked, got)`` of every pop a consumer makes."""
    pops: List[Tuple[str, bool, int, int]] = []
    real = _calls.Broker.pop

    def pop(self: Any, spec: Any) -> Any:
        got = real(self, spec)
        pops.append((threading.current_thread().name, spec.wait, spec.batch, len(got)))
        return got

    monkeypatch.setattr(_calls.Broker, "pop", pop)
    return pops


def _worker_pops(pops: List[Tuple[str, bool, int, int]]) -> List[Tuple[str, bool, int, int]]:
    return [x for x in pops if "-worker-" in x[0]]


@pytest.fixture
def slow_ticks(monkeypatch: Any) -> None:
    """The fetchers' and workers' waits time out after a minute instead of TICK_S: a wake-up
    that is missed now shows as a consumer stuck past the deadline (see the module docstring)."""
    monkeypatch.setattr(_fetching, "TICK_S", 60.0)
    monkeypatch.setattr(_lanes, "TICK_S", 60.0)


def _held_then_acked(consumer: Any, blocked: threading.Event, release: threading.Event, *, outstanding: int,
                     acked: int) -> None:
    """Once a handler has ``blocked`` (waiting for ``release``), the background ``consumer``
    comes to hold ``outstanding`` messages (what its pops ahead brought); then, released,
    it acks ``acked``. Stopped and joined in any case."""
    try:
        assert blocked.wait(DEADLINE_S)
        assert wait_until(lambda: consumer._outstanding == outstanding, DEADLINE_S), consumer._outstanding
        release.set()
        assert wait_until(lambda: consumer.result.acked == acked, DEADLINE_S), consumer.result
    finally:
        release.set()
        consumer.stop()
    assert consumer.join(30)


def _left(client: Queen, qname: str, group: str) -> List[Tuple[int, int]]:
    """What ``group`` can still pop from the queue (a wildcard pop brings one partition)."""
    out: List[Tuple[int, int]] = []
    while True:
        got = client.queue(qname).group(group).batch(1000).wait(False).pop()
        if not got:
            return out
        out.extend((m["data"]["p"], m["data"]["i"]) for m in got)


def _by_partition(seen: List[Tuple[int, int]]) -> Dict[int, List[int]]:
    out: Dict[int, List[int]] = {}
    for p, i in seen:
        out.setdefault(p, []).append(i)
    return out


# ---------------------------------------------------------------------- stopping


def test_stop_waits_for_the_messages_of_a_worker_pop_on_its_way(client: Queen, qname: str, monkeypatch: Any) -> None:
    # the stop comes while a worker's pop has come back but its messages are not queued yet
    # (held in bind): the stop phase must not end before they are released (else consume()
    # returns before the release, with counters that miss it)
    _push(client, qname, 1, 30)
    made = _capture_consumers(monkeypatch)
    pops = _record_pops(monkeypatch)
    stop = threading.Event()
    seen: Dict[str, Any] = {}
    real_bind = _calls.Broker.bind

    def bind(self: Any, popped: Any) -> Any:
        if "-worker-" in threading.current_thread().name and "finished_early" not in seen:
            st = made[0]._st
            sup_waits = [0]
            real_wait = st.lock.wait

            def counting_wait(timeout: Any = None) -> Any:
                if st.stopping:
                    sup_waits[0] += 1  # while stopping, only the stop phase waits on ``lock`` here
                return real_wait(timeout)

            st.lock.wait = counting_wait
            stop.set()
            # the stop phase ends (bug) or is seen waiting, for us, several ticks running (fixed)
            assert wait_until(lambda: made[0]._finished.is_set() or sup_waits[0] >= 5, DEADLINE_S)
            seen["finished_early"] = made[0]._finished.is_set()
            del st.lock.wait
        return real_bind(self, popped)

    monkeypatch.setattr(_calls.Broker, "bind", bind)
    handled: List[int] = []
    res = client.queue(qname).group("g").batch(10).concurrency(1).idle_millis(30000).consume(
        lambda msgs: handled.extend(m["data"]["i"] for m in msgs), stop_event=stop
    )
    assert wait_until(lambda: "finished_early" in seen, DEADLINE_S)  # (at once unless consume() returned early)
    assert seen["finished_early"] is False, (res, pops)
    assert len(_worker_pops(pops)) == 1, pops
    assert (res.reason, res.handled, res.acked, res.released, res.ack_failures) == ("stopped", 10, 10, 10, 0), res
    assert handled == list(range(10))
    # the 10 released and the 10 never popped are there for the next consumer, in order
    assert _left(client, qname, "g") == [(0, i) for i in range(10, 30)]


ATTEMPTS = 6  # with concurrency > 1, whether a worker pops depends on scheduling: a scenario
# runs again (on a fresh consumer group) until one run had worker pops; every run is checked


def test_stop_from_a_handler_with_worker_pops_in_flight(client: Queen, qname: str, monkeypatch: Any) -> None:
    # concurrency 2 over a backlog: a stop requested by a handler while the other worker pops
    # itself: everything popped is handled once or released, nothing is lost
    _push(client, qname, 8, 25)
    pops = _record_pops(monkeypatch)
    for attempt in range(ATTEMPTS):
        del pops[:]
        group = "g%d" % attempt
        stop = threading.Event()
        lock = threading.Lock()
        seen: List[Tuple[int, int]] = []

        def handler(msgs: List[Any]) -> None:
            with lock:
                seen.extend((m["data"]["p"], m["data"]["i"]) for m in msgs)
                if len(seen) >= 60:
                    stop.set()

        res = client.queue(qname).group(group).batch(5).concurrency(2).idle_millis(30000).consume(
            handler, stop_event=stop
        )
        popped = sum(got for _, _, _, got in pops)
        assert res.reason == "stopped" and res.ack_failures == 0, res
        assert len(seen) == len(set(seen)) == res.handled == res.acked
        assert res.handled + res.released == popped, (res, pops)
        assert sorted(_left(client, qname, group) + seen) == [(p, i) for p in range(8) for i in range(25)]
        if _worker_pops(pops):
            break
    assert _worker_pops(pops), pops


# ---------------------------------------------------------------------- room, limit, order


def test_room_bound_and_order_with_many_workers_popping(client: Queen, qname: str, monkeypatch: Any,
                                                         slow_ticks: None) -> None:
    # concurrency 6, batch 4, 24 partitions: never more than 6 × 4 popped and unfinished, each
    # partition handled in push order, exactly once; no wake-up missed (slow_ticks)
    _push(client, qname, 24, 12)
    total = 24 * 12
    held = [0, 0]  # now, most
    lock = threading.Lock()
    real_pop = _calls.Broker.pop
    real_resolve = _state.ConsumerState.resolve_locked
    pops: List[Tuple[str, int]] = []

    def pop(self: Any, spec: Any) -> Any:
        got = real_pop(self, spec)
        with lock:
            pops.append((threading.current_thread().name, len(got)))
            held[0] += len(got)
            held[1] = max(held[1], held[0])
        return got

    def resolve_locked(self: Any, msgs: Any, unit: Any, **kw: Any) -> None:
        with lock:
            held[0] -= len(msgs)
        real_resolve(self, msgs, unit, **kw)

    monkeypatch.setattr(_calls.Broker, "pop", pop)
    monkeypatch.setattr(_state.ConsumerState, "resolve_locked", resolve_locked)
    for attempt in range(ATTEMPTS):
        del pops[:]
        held[:] = [0, 0]
        seen: List[Tuple[int, int]] = []
        seen_lock = threading.Lock()

        def handler(msgs: List[Any]) -> None:
            with seen_lock:
                seen.extend((m["data"]["p"], m["data"]["i"]) for m in msgs)

        consumer = client.queue(qname).group("g%d" % attempt).batch(4).concurrency(6).limit(total).idle_millis(
            60000).consume(handler, background=True)
        try:
            assert consumer.join(DEADLINE_S), (consumer.result, len(seen))
        finally:
            consumer.stop()
        res = consumer.result
        assert (res.reason, res.handled, res.acked, res.ack_failures) == ("limit", total, total, 0), res
        assert 0 < held[1] <= 24, held
        assert sorted(seen) == sorted((p, i) for p in range(24) for i in range(12))
        assert all(v == list(range(12)) for v in _by_partition(seen).values())
        if any("-worker-" in name and n for name, n in pops):
            break
    assert any("-worker-" in name and n for name, n in pops), pops


def test_limit_is_exact_with_workers_popping(client: Queen, qname: str, monkeypatch: Any, slow_ticks: None) -> None:
    # limit 37 over a backlog of 200 with concurrency 2, batch 5: exactly 37 popped (the
    # limit never overshoots, worker pops included) and handled
    _push(client, qname, 10, 20)
    pops = _record_pops(monkeypatch)
    for attempt in range(ATTEMPTS):
        del pops[:]
        consumer = client.queue(qname).group("g%d" % attempt).batch(5).concurrency(2).limit(37).idle_millis(
            60000).consume(lambda msgs: None, background=True)
        try:
            assert consumer.join(DEADLINE_S), consumer.result
        finally:
            consumer.stop()
        res = consumer.result
        assert (res.reason, res.handled, res.acked, res.released) == ("limit", 37, 37, 0), res
        assert sum(got for _, _, _, got in pops) == 37, pops
        if _worker_pops(pops):
            break
    assert _worker_pops(pops), pops


def test_each_and_batch_one_with_workers_popping(client: Queen, qname: str, monkeypatch: Any, slow_ticks: None) -> None:
    # each() with a batch of 5, and batch(1), concurrency 1: one message per call, order
    # kept, no wake missed
    _push(client, qname, 4, 10)
    pops = _record_pops(monkeypatch)
    for group, batch, each in (("e", 5, True), ("one", 1, False)):
        del pops[:]
        seen: List[Tuple[int, int]] = []
        lock = threading.Lock()

        def handler(m: Any) -> None:
            with lock:
                seen.append((m["data"]["p"], m["data"]["i"]))

        builder = client.queue(qname).group(group).batch(batch)
        if each:
            builder = builder.each()
        consumer = builder.concurrency(1).limit(40).idle_millis(60000).consume(handler, background=True)
        try:
            assert consumer.join(DEADLINE_S), consumer.result
        finally:
            consumer.stop()
        res = consumer.result
        assert (res.reason, res.handled, res.acked) == ("limit", 40, 40), res
        assert _worker_pops(pops), pops
        assert all(v == list(range(10)) for v in _by_partition(seen).values()) and len(seen) == 40


# ---------------------------------------------------------------------- prefetch wake-ups


def test_prefetch_needs_no_tick_when_a_handler_starts(client: Queen, qname: str, slow_ticks: None) -> None:
    # batch 4, one fetcher, one worker: the first pop brings one partition's 2 messages; the
    # 2 free slots are half a batch, so once the handler runs the fetcher pops ahead. The
    # handler's start is what allows that pop: it must wake the fetcher (not its next tick)
    _push(client, qname, 2, 2)
    first = threading.Event()
    release = threading.Event()

    def handler(msgs: List[Any]) -> None:
        if not first.is_set():
            first.set()
            assert release.wait(DEADLINE_S + 10)

    consumer = client.queue(qname).group("g").batch(4).concurrency(1).idle_millis(60000).consume(
        handler, background=True
    )
    _held_then_acked(consumer, first, release, outstanding=4, acked=4)


def test_prefetch_needs_no_tick_in_each_mode(client: Queen, qname: str, slow_ticks: None) -> None:
    # each(), concurrency 2, batch 4: partition X's handler blocks on its first message,
    # partition Y's on its third. The two messages of Y acked meanwhile free half a batch
    # while handlers run: that room must wake a fetcher for a pop ahead (of partition Z),
    # even though Y's worker is still in its unit
    _push(client, qname, 3, 4)
    lock = threading.Lock()
    owner: List[int] = []
    x_started = threading.Event()
    y_blocked = threading.Event()
    release = threading.Event()

    def handler(m: Any) -> None:
        p, i = m["data"]["p"], m["data"]["i"]
        with lock:
            if not owner:
                owner.append(p)
            others = len(owner) == 1 and p != owner[0]
            if others:
                owner.append(p)
        if p == owner[0]:
            if i == 0:
                x_started.set()
                assert release.wait(DEADLINE_S + 10)
        elif len(owner) > 1 and p == owner[1]:
            assert x_started.wait(DEADLINE_S)
            if i == 2:
                y_blocked.set()
                assert release.wait(DEADLINE_S + 10)

    consumer = client.queue(qname).group("g").batch(4).each().concurrency(2).idle_millis(60000).consume(
        handler, background=True
    )
    # X's 4 and Y's 2 unfinished, and the pop ahead brought 2 of Z
    _held_then_acked(consumer, y_blocked, release, outstanding=8, acked=12)
    assert consumer.result.handled == 12


# ---------------------------------------------------------------------- faults


def test_a_failed_worker_pop_gives_its_room_back(embedded_broker: Any, quick_retry_client: Queen,
                                                  monkeypatch: Any, caplog: Any) -> None:
    # one fetcher, one worker: the first pop the worker makes hits a 503 (the transport's retries used up): its room comes
    # back, the fetchers carry on, every message is handled once
    client = quick_retry_client
    qname = "wpop-fault"
    _push(client, qname, 4, 10)
    pops = _record_pops(monkeypatch)
    recorded = _calls.Broker.pop
    failed: List[str] = []

    def pop(self: Any, spec: Any) -> Any:
        if "-worker-" in threading.current_thread().name and not failed:
            failed.append(threading.current_thread().name)
            embedded_broker.faults.add("GET", "/api/v1/pop", "status", status=503, times=10)
            try:
                return recorded(self, spec)
            finally:
                embedded_broker.faults.clear()
        return recorded(self, spec)

    monkeypatch.setattr(_calls.Broker, "pop", pop)
    seen: List[Tuple[int, int]] = []
    lock = threading.Lock()

    def handler(msgs: List[Any]) -> None:
        with lock:
            seen.extend((m["data"]["p"], m["data"]["i"]) for m in msgs)

    consumer = client.queue(qname).group("g").batch(5).concurrency(1).limit(40).idle_millis(60000).consume(
        handler, background=True
    )
    try:
        assert consumer.join(DEADLINE_S), consumer.result
    finally:
        consumer.stop()
    res = consumer.result
    assert failed, pops
    assert (res.reason, res.handled, res.acked) == ("limit", 40, 40), res
    assert sorted(seen) == sorted((p, i) for p in range(4) for i in range(10))
    assert consumer._free_slots == 5


def test_unreachable_after_a_backlog_with_worker_pops(embedded_broker: Any, quick_retry_client: Queen,
                                                      monkeypatch: Any, caplog: Any) -> None:
    # every pop fails from the 12th message on (503s, acks still answered): the worker's pop
    # fails, the fetchers meet the outage (logged once), and idle_millis stops the consumer
    # "unreachable" with the 503 as its error; what was handled is acked
    import logging

    from queen_sync import QueenHTTPError

    client = quick_retry_client
    qname = "wpop-down"
    _push(client, qname, 4, 10)
    pops = _record_pops(monkeypatch)
    seen: List[Tuple[int, int]] = []

    def handler(msgs: List[Any]) -> None:
        seen.extend((m["data"]["p"], m["data"]["i"]) for m in msgs)
        if len(seen) >= 12 and not len(embedded_broker.faults):
            embedded_broker.faults.add("GET", "/api/v1/pop", "status", status=503, times=None)

    caplog.set_level(logging.INFO, logger="queen_sync.consumer")
    consumer = client.queue(qname).group("g").batch(4).concurrency(1).idle_millis(1500).consume(
        handler, background=True
    )
    try:
        with pytest.raises(QueenHTTPError):
            consumer.join(DEADLINE_S)
    finally:
        consumer.stop()
        embedded_broker.faults.clear()
    res = consumer.result
    assert res.reason == "unreachable", res
    assert _worker_pops(pops), pops
    assert res.handled == res.acked == len(seen) >= 12, res
    outage_lines = [r for r in caplog.records if "pop" in r.getMessage() and r.levelno >= logging.WARNING
                    and "unreachable" not in r.getMessage()]
    assert len(outage_lines) == 1, [r.getMessage() for r in outage_lines]
    assert consumer._free_slots == 4
    assert sorted(_left(client, qname, "g") + seen) == [(p, i) for p in range(4) for i in range(10)]


def test_a_nacking_handler_with_worker_pops(client: Queen, qname: str, monkeypatch: Any, slow_ticks: None) -> None:
    # the first call that holds message 5 of a partition raises: that batch is nacked (the
    # partition released) and redelivered, while the worker pops itself; at the end every
    # message is acked once, each partition in push order, no wake-up missed
    _push(client, qname, 3, 10)
    pops = _record_pops(monkeypatch)
    failed_once: List[int] = []
    ok: List[Tuple[int, int]] = []

    def handler(msgs: List[Any]) -> None:
        got = [(m["data"]["p"], m["data"]["i"]) for m in msgs]
        for p, i in got:
            if i == 5 and p not in failed_once:
                failed_once.append(p)
                raise RuntimeError("once")
        ok.extend(got)

    consumer = client.queue(qname).group("g").batch(4).concurrency(1).idle_millis(60000).consume(
        handler, background=True
    )
    try:
        assert wait_until(lambda: consumer.result.acked == 30, DEADLINE_S), consumer.result
    finally:
        consumer.stop()
    assert consumer.join(30)
    res = consumer.result
    assert (res.acked, res.ack_failures) == (30, 0) and res.nacked == res.failed > 0, res
    assert sorted(failed_once) == [0, 1, 2]
    assert sorted(ok) == [(p, i) for p in range(3) for i in range(10)]
    assert all(v == list(range(10)) for v in _by_partition(ok).values())
    assert _worker_pops(pops), pops


def test_a_handler_that_acks_itself_with_worker_pops(client: Queen, qname: str, monkeypatch: Any,
                                                     slow_ticks: None) -> None:
    # auto_ack(False): the handler acks each message itself; the consumer acks nothing, its
    # room still comes back after each call and the worker pops itself
    _push(client, qname, 3, 8)
    pops = _record_pops(monkeypatch)
    seen: List[Tuple[int, int]] = []

    def handler(msgs: List[Any]) -> None:
        for m in msgs:
            m.ack()
            seen.append((m["data"]["p"], m["data"]["i"]))

    consumer = client.queue(qname).group("g").batch(4).concurrency(1).auto_ack(False).limit(24).idle_millis(
        60000).consume(handler, background=True)
    try:
        assert consumer.join(DEADLINE_S), consumer.result
    finally:
        consumer.stop()
    res = consumer.result
    assert (res.reason, res.handled, res.acked, res.ack_failures) == ("limit", 24, 0, 0), res
    assert _worker_pops(pops), pops
    assert sorted(seen) == [(p, i) for p in range(3) for i in range(8)]
    assert _left(client, qname, "g") == []


def test_a_trickle_after_a_backlog(client: Queen, qname: str, monkeypatch: Any, slow_ticks: None) -> None:
    # a backlog (worker pops), then messages one at a time: the backlog flag turns off and the
    # fetchers' long polls take each arrival, no wake-up missed
    _push(client, qname, 1, 12)
    pops = _record_pops(monkeypatch)
    cond = threading.Condition()
    seen: List[int] = []

    def handler(msgs: List[Any]) -> None:
        with cond:
            seen.extend(m["data"]["i"] for m in msgs)
            cond.notify_all()

    consumer = client.queue(qname).group("g").batch(4).concurrency(1).idle_millis(60000).consume(
        handler, background=True
    )
    try:
        with cond:
            assert cond.wait_for(lambda: len(seen) == 12, DEADLINE_S), seen
        assert _worker_pops(pops), pops
        for i in range(12, 16):
            client.queue(qname).partition("p0").push({"data": {"p": 0, "i": i}})
            with cond:
                assert cond.wait_for(lambda: len(seen) == i + 1, DEADLINE_S), seen
        assert wait_until(lambda: consumer.result.acked == 16, DEADLINE_S), consumer.result
    finally:
        consumer.stop()
    assert consumer.join(30)
    assert seen == list(range(16))


def test_close_while_workers_pop(client: Queen, qname: str, broker_url: str, monkeypatch: Any) -> None:
    # Queen.close() (from the main thread) while a consumer of that client pops through a
    # backlog with worker pops: every message popped is handled once or released, none lost
    _push(client, qname, 6, 20)
    pops = _record_pops(monkeypatch)
    for attempt in range(ATTEMPTS):
        del pops[:]
        q = Queen(broker_url)
        lock = threading.Lock()
        seen: List[Tuple[int, int]] = []
        half = threading.Event()

        def handler(msgs: List[Any]) -> None:
            with lock:
                seen.extend((m["data"]["p"], m["data"]["i"]) for m in msgs)
                if len(seen) >= 40:
                    half.set()

        consumer = q.queue(qname).group("c%d" % attempt).batch(5).concurrency(2).idle_millis(60000).consume(
            handler, background=True
        )
        assert half.wait(DEADLINE_S)
        q.close()
        assert consumer.join(DEADLINE_S)
        res = consumer.result
        assert res.reason == "closed" and res.ack_failures == 0, res
        assert len(seen) == len(set(seen)) == res.handled == res.acked, res
        assert res.handled + res.released == sum(got for _, _, _, got in pops), (res, pops)
        assert sorted(_left(client, qname, "c%d" % attempt) + seen) == [(p, i) for p in range(6) for i in range(20)]
        if _worker_pops(pops):
            break
    assert _worker_pops(pops), pops


def test_renewal_covers_a_worker_pop(client: Queen, qname: str, monkeypatch: Any) -> None:
    # queue leaseTime 1 s, renew_lease(True, 500): the batch a worker popped itself gets a slow
    # handler (longer than the lease); its lease is renewed, so it is acked, not lost
    client.queue(qname).config({"leaseTime": 1, "retryLimit": 5}).create()
    _push(client, qname, 1, 6)
    pops = _record_pops(monkeypatch)
    calls: List[Tuple[str, List[int]]] = []

    def handler(msgs: List[Any]) -> None:
        calls.append((threading.current_thread().name, [m["data"]["i"] for m in msgs]))
        if len(calls) == 2:
            threading.Event().wait(2.5)  # a real handler duration, longer than the 1 s lease

    res = client.queue(qname).group("g").batch(2).concurrency(1).renew_lease(True, 500).limit(6).idle_millis(
        10000).consume(handler)
    assert [x[1:] for x in pops[:2]] == [(True, 2, 2), (False, 2, 2)] and "-worker-" in pops[1][0], pops
    assert [i for _, ii in calls for i in ii] == list(range(6))
    assert (res.handled, res.acked, res.ack_failures, res.lost, res.renew_failures) == (6, 6, 0, 0, 0), res
    assert res.renewals >= 1
    assert _left(client, qname, "g") == []


def test_pops_of_several_partitions_with_worker_pops(client: Queen, qname: str, monkeypatch: Any,
                                                     slow_ticks: None) -> None:
    # partitions(3): one pop brings up to 3 partitions; a worker's pop queues several lanes
    # (it runs one, the others wait their turn): order per partition, exactly once, no wake missed
    _push(client, qname, 12, 8)
    pops = _record_pops(monkeypatch)
    lock = threading.Lock()
    seen: List[Tuple[int, int]] = []
    spans: List[int] = []

    def handler(msgs: List[Any]) -> None:
        with lock:
            seen.extend((m["data"]["p"], m["data"]["i"]) for m in msgs)
            spans.append(len({m["data"]["p"] for m in msgs}))

    for attempt in range(ATTEMPTS):
        del pops[:]
        del seen[:]
        consumer = client.queue(qname).group("g%d" % attempt).batch(12).partitions(3).concurrency(1).limit(96).idle_millis(
            60000).consume(handler, background=True)
        try:
            assert consumer.join(DEADLINE_S), consumer.result
        finally:
            consumer.stop()
        res = consumer.result
        assert (res.reason, res.handled, res.acked) == ("limit", 96, 96), res
        assert sorted(seen) == [(p, i) for p in range(12) for i in range(8)]
        assert all(v == list(range(8)) for v in _by_partition(seen).values())
        assert set(spans) == {1}  # a handler call holds one partition's messages
        if any(got > 8 for _, _, _, got in _worker_pops(pops)):  # a worker's pop of 2+ partitions
            break
    assert any(got > 8 for _, _, _, got in _worker_pops(pops)), pops


def _first_worker_pop_outlives_idle(embedded_broker: Any, monkeypatch: Any, action: str, **fault: Any) -> Tuple[Queen, List[str]]:
    """A client whose consumer's first worker pop stays on its way until ``idle_millis`` has
    passed since the last handler returned (a slow or half-open connection), then meets the
    broker fault ``action`` (every pop after it too). Returns the client (close it) and the
    names of the worker threads so delayed."""
    client = Queen(embedded_broker.url, retry_attempts=1)
    made = _capture_consumers(monkeypatch)
    real = _calls.Broker.pop
    slowed: List[str] = []

    def pop(self: Any, spec: Any) -> Any:
        if "-worker-" in threading.current_thread().name and not slowed:
            slowed.append(threading.current_thread().name)
            st = made[0]._st
            assert wait_until(lambda: st.handlers_running == 0 and _fetching.time.monotonic() - st.last_activity
                              > st.idle_s + 0.2, DEADLINE_S)
            embedded_broker.faults.add("GET", "/api/v1/pop", action, times=None, **fault)
        return real(self, spec)

    monkeypatch.setattr(_calls.Broker, "pop", pop)
    return client, slowed


@pytest.mark.parametrize(
    "action, fault, error, reason",
    [
        # the broker is down, not the queue empty: "unreachable" (with that error), never "idle"
        ("drop_before", {}, "QueenConnectionError", "unreachable"),
        # refused for good (401: a revoked token): stops with that error, as a fetcher's
        # refusal does, never "idle" with the error dropped
        ("status", {"status": 401}, "AuthenticationError", "error"),
    ],
)
def test_a_worker_pop_failing_after_the_idle_time(
    embedded_broker: Any, monkeypatch: Any, action: str, fault: Dict[str, Any], error: str, reason: str
) -> None:
    import queen_sync

    expected = getattr(queen_sync, error)
    client, slowed = _first_worker_pop_outlives_idle(embedded_broker, monkeypatch, action, **fault)
    with client:
        qname = "wpop-after-idle-%s" % action
        _push(client, qname, 2, 10)
        consumer = client.queue(qname).group("g").batch(5).concurrency(1).idle_millis(800).consume(
            lambda msgs: None, background=True
        )
        try:
            with pytest.raises(expected):
                consumer.join(DEADLINE_S)
        finally:
            consumer.stop()
            embedded_broker.faults.clear()
        assert slowed
        res = consumer.result
        assert (res.reason, res.handled, res.acked) == (reason, 5, 5), res
        assert isinstance(consumer.error, expected)
        assert consumer._free_slots == 5


def test_callbacks_own_the_acks_with_worker_pops(client: Queen, qname: str, monkeypatch: Any, slow_ticks: None) -> None:
    # on_success / on_error (auto-ack off: the callbacks ack) over a backlog the worker pops
    # itself: each message settled once by its callback, the consumer acks nothing
    _push(client, qname, 2, 12)
    pops = _record_pops(monkeypatch)
    ok: List[Tuple[int, int]] = []
    bad: List[Tuple[int, int]] = []

    def handler(msgs: List[Any]) -> None:
        if any(m["data"]["i"] == 6 for m in msgs):
            raise ValueError("six")

    def on_success(msgs: List[Any], result: Any) -> None:
        client.ack(msgs, True, {"group": "g"})
        ok.extend((m["data"]["p"], m["data"]["i"]) for m in msgs)

    def on_error(msgs: List[Any], exc: BaseException) -> None:
        client.ack(msgs, "dlq", {"group": "g", "error": str(exc)})
        bad.extend((m["data"]["p"], m["data"]["i"]) for m in msgs)

    consumer = client.queue(qname).group("g").batch(4).concurrency(1).on_success(on_success).on_error(
        on_error).limit(24).idle_millis(60000).consume(handler, background=True)
    try:
        assert consumer.join(DEADLINE_S), consumer.result
    finally:
        consumer.stop()
    res = consumer.result
    assert (res.reason, res.handled, res.acked, res.nacked, res.ack_failures) == ("limit", 24, 0, 0, 0), res
    assert _worker_pops(pops), pops
    assert sorted(ok + bad) == [(p, i) for p in range(2) for i in range(12)]
    assert sorted(bad) == [(p, i) for p in range(2) for i in range(4, 8)]
    assert _left(client, qname, "g") == []


def test_a_half_open_worker_pop_gives_up_after_the_ack_timeout(embedded_broker: Any, monkeypatch: Any) -> None:
    # a worker's own pop that is never answered (a half-open connection) waits
    # ack_timeout_millis, as an ack does, not the client's timeout_millis (60 s here, longer
    # than the deadline below): its room comes back and the consumer goes on to the limit
    from queen_sync import QueenTimeoutError

    with Queen(embedded_broker.url, timeout_millis=60000, ack_timeout_millis=300) as client:
        qname = "wpop-half-open"
        _push(client, qname, 3, 5)
        real = _calls.Broker.pop
        hung: List[Any] = []

        def pop(self: Any, spec: Any) -> Any:
            if "-worker-" in threading.current_thread().name and not hung:
                hung.append(spec.read_timeout_millis)
                embedded_broker.faults.add("GET", "/api/v1/pop", "blackhole", times=1)
                try:
                    return real(self, spec)
                except QueenTimeoutError as exc:
                    hung.append(exc)
                    raise
            return real(self, spec)

        monkeypatch.setattr(_calls.Broker, "pop", pop)
        consumer = client.queue(qname).group("g").batch(5).concurrency(1).limit(15).idle_millis(60000).consume(
            lambda msgs: None, background=True
        )
        try:
            assert consumer.join(DEADLINE_S), consumer.result
        finally:
            consumer.stop()
            embedded_broker.faults.clear()
        assert hung[0] == 300 and isinstance(hung[1], QueenTimeoutError), hung
        res = consumer.result
        assert (res.reason, res.handled, res.acked) == ("limit", 15, 15), res


def test_pop_read_timeout_follows_the_spec() -> None:
    # wire.messages.pop: read_timeout_millis when set, else the long poll's + 5 s, else the
    # requester's own (None)
    from queen_sync.wire import messages as wire_messages

    seen: List[Any] = []

    class Resp:
        status = 200
        data = b'{"messages": []}'

    class Requester:
        def request(self, method: str, path: str, **kw: Any) -> Any:
            seen.append(kw.get("timeout_millis"))
            return Resp()

    for spec in (
        wire_messages.PopSpec("q", read_timeout_millis=1234),
        wire_messages.PopSpec("q", wait=True, timeout_millis=1000),
        wire_messages.PopSpec("q", wait=True, timeout_millis=1000, read_timeout_millis=700),
        wire_messages.PopSpec("q"),
    ):
        assert wire_messages.pop(Requester(), spec) == []  # type: ignore[arg-type]
    assert seen == [1234, 6000, 700, None]



class _ScriptedBroker:
    """A consumer's broker calls without a broker: a pop without a long poll brings the next
    count of ``script`` (messages of one partition); a long poll (a fetcher's) says so on
    ``polling`` and waits for ``release``, then brings nothing."""

    def __init__(self) -> None:
        self.script: List[int] = []
        self.asked: List[Tuple[int, bool]] = []
        self.polling = threading.Event()
        self.release = threading.Event()

    def pop(self, spec: Any) -> List[Dict[str, Any]]:
        self.asked.append((spec.batch, spec.wait))
        if spec.wait:
            self.polling.set()
            assert self.release.wait(DEADLINE_S)
            return []
        return [{"transactionId": "t%d" % i, "partitionId": "p"} for i in range(self.script.pop(0))]

    def bind(self, popped: List[Any]) -> List[Any]:
        return list(popped)

    def call_timeout_millis(self) -> int:
        return 5000


class _RecordingLanes:
    def __init__(self) -> None:
        self.queued: List[int] = []

    def put_locked(self, units: List[Any], runner: bool = False) -> None:
        self.queued.extend(len(u.msgs) for u in units)

    def queued_locked(self) -> int:
        return 0  # every unit is taken by a worker at once


def _fetchers(room: int) -> Tuple[Any, Any, _ScriptedBroker, _RecordingLanes]:
    """``(state, fetchers, broker, lanes)`` of a consumer of batch 10 and ``room``."""
    from queen_sync.consumer._calls import PopSpec

    st = _state.ConsumerState("q", room=room, limit=None, idle_s=None, drain_timeout=1.0)
    broker, lanes = _ScriptedBroker(), _RecordingLanes()
    spec = PopSpec("q", batch=10, wait=True, timeout_millis=1000)
    return st, _fetching.Fetchers(st, broker, spec, lanes, None, None), broker, lanes  # type: ignore[arg-type]


def _backlog(st: Any, fetchers: Any, room: int, **state: int) -> None:
    """A fetcher's full pop made a backlog, and all was handled since (``room`` free);
    then ``state``'s attributes of ``st`` are set."""
    with st.lock:
        st.free_slots, st.reserved = 0, 10
        fetchers._pop_done_locked(10, [{}] * 10)
        st.free_slots, st.reserved = room, 0
        for name, value in state.items():
            setattr(st, name, value)


@contextlib.contextmanager
def _fetcher_running(st: Any, fetchers: Any, broker: _ScriptedBroker) -> Iterator[None]:
    """Fetcher 0 runs in a thread for the ``with`` body; then it is stopped and joined."""
    fetcher = threading.Thread(target=fetchers.run, args=(0,), daemon=True)
    fetcher.start()
    try:
        yield
    finally:
        with st.lock:
            st.request_stop_locked("stopped")
        broker.release.set()
        fetcher.join(DEADLINE_S)
    assert not fetcher.is_alive()


def test_the_backlog_lasts_from_a_full_pop_to_an_empty_one() -> None:
    # a draining queue (partitions running dry one by one) answers short pops before it is
    # empty: the workers keep popping through them, and only an empty pop hands the queue
    # back to the fetchers' long polls; a trickle (short pops only) never starts a backlog
    st, fetchers, broker, lanes = _fetchers(room=10)

    def handled() -> None:  # what a pop brought is handled: all the room is free again
        with st.lock:
            st.free_slots, st.reserved, st.outstanding = 10, 0, 0

    def worker_pop() -> bool:
        got = fetchers.pop_for_worker()
        handled()
        return bool(got)

    def fetcher_pop(got: int) -> None:  # the record of a fetcher's pop for 10 that brought got
        with st.lock:
            st.free_slots, st.reserved = 0, 10
            fetchers._pop_done_locked(10, [{}] * got)
        handled()

    assert worker_pop() is False and broker.asked == []  # no pop yet: no backlog
    fetcher_pop(3)  # short: still no backlog (a trickle)
    assert worker_pop() is False and broker.asked == []
    fetcher_pop(10)  # full: a backlog
    broker.script.extend([10, 4, 7, 0])
    assert [worker_pop() for _ in range(5)] == [True, True, True, False, False]
    assert broker.asked == [(10, False)] * 4  # the short ones (4, 7) kept it; the empty one ended it
    assert lanes.queued == [10, 4, 7]


def test_a_fetchers_long_poll_on_its_way_holds_a_worker_back() -> None:
    # a fetcher's pop in flight that no idle worker waits for (here a long poll waiting at
    # the broker) takes the next batch the moment there is one: a worker's own pop racing it
    # would come back empty (and end the backlog), so the worker leaves the next pop to it,
    # with room left or not
    st, fetchers, broker, lanes = _fetchers(room=20)
    # a worker waits for work: through a backlog, only then a fetcher pops
    _backlog(st, fetchers, 20, fetchers_alive=1, idle_workers=1)
    with _fetcher_running(st, fetchers, broker):
        assert broker.polling.wait(DEADLINE_S)  # the fetcher's long poll holds 10 of the room
        with st.lock:
            st.idle_workers = 0  # a worker finished a unit meanwhile, and would pop
        broker.script.append(10)
        assert fetchers.pop_for_worker() is False
        assert broker.asked == [(10, True)] and lanes.queued == []


def test_through_a_backlog_a_fetcher_pops_only_for_an_idle_worker_or_ahead_of_busy_ones() -> None:
    # the workers pop for themselves through a backlog; a fetcher's pop is wanted for a
    # worker waiting for work (one pop each: more would hand every batch from a fetcher to a
    # worker from then on, two thread hand-offs each), or ahead of workers all in a handler
    st, fetchers, broker, lanes = _fetchers(room=40)
    st.workers = 2
    with st.lock:
        assert not fetchers._wanted_locked()  # both workers at work: they pop for themselves
        st.idle_workers = 1
        assert fetchers._wanted_locked()  # one waits for work, no pop on its way to it
        fetchers._fetching = 1
        assert not fetchers._wanted_locked()  # a pop is on its way to it: enough
        st.idle_workers = 2
        assert fetchers._wanted_locked()  # the other one waits too
        st.idle_workers, st.handlers_running = 0, 2
        assert fetchers._wanted_locked()  # both in a handler: a pop ahead of them (prefetch)
        st.handlers_running, st.handler_time_s, st.pop_time_s = 1, 0.0001, 0.002
        assert not fetchers._wanted_locked()  # one in a quick handler: the other pops itself
        st.handler_time_s = 0.05
        assert fetchers._wanted_locked()  # handlers slower than a pop: one ahead spares a wait
        fetchers._fetching = 0


def test_a_worker_pops_itself_beside_a_fetchers_pop_for_an_idle_worker() -> None:
    # a fetcher's pop on its way to a worker waiting for work does not hold back another
    # worker that finishes its unit: that one pops for itself (else each fetcher's pop would
    # idle one more worker, and the fetchers would end up doing every pop)
    st, fetchers, broker, lanes = _fetchers(room=30)
    _backlog(st, fetchers, 30, workers=3, idle_workers=1)
    fetchers._fetching = 1  # the fetcher's pop for the idle worker, on its way
    broker.script.append(10)
    assert fetchers.pop_for_worker() is True
    assert broker.asked == [(10, False)] and lanes.queued == [10]
    with st.lock:
        st.idle_workers = 0  # the idle worker's pop is the only one on its way: it holds back
        broker.script.append(10)
    assert fetchers.pop_for_worker() is False
    assert broker.asked == [(10, False)]


def test_fetchers_stand_by_through_a_backlog_until_a_worker_waits(slow_ticks: None) -> None:
    # no tick needed: a worker that starts waiting for work wakes one fetcher standing by,
    # and an empty pop ending the backlog wakes them all (a missed wake would hang here:
    # slow_ticks makes every wait a minute long)
    st, fetchers, broker, lanes = _fetchers(room=20)
    _backlog(st, fetchers, 20, fetchers_alive=1)
    with _fetcher_running(st, fetchers, broker):
        assert wait_until(lambda: st.standby._waiters, DEADLINE_S)  # standing by, no pop
        assert broker.asked == []
        with st.lock:  # what Lanes.run does when a worker finds nothing queued
            st.idle_workers += 1
            st.standby.notify()
        assert broker.polling.wait(DEADLINE_S)
        assert broker.asked == [(10, True)]


def test_after_a_worker_pop_lost_a_race_workers_leave_the_pops_to_the_fetchers() -> None:
    # more workers than partitions with messages: the fetchers' long polls hold every such
    # partition, and a worker's own pop beside them comes back empty (and ends the backlog,
    # which the next fetcher's pop starts again): after one such empty pop, a worker pops
    # only with no fetcher's pop in flight, until such a pop of its own brings messages
    st, fetchers, broker, lanes = _fetchers(room=40)
    _backlog(st, fetchers, 40, workers=4, idle_workers=2)
    fetchers._fetching = 1  # on its way to one of the two idle workers
    broker.script.append(0)
    assert fetchers.pop_for_worker() is False  # popped (the rule allowed it), came back empty
    assert broker.asked == [(10, False)] and fetchers._race_lost
    _backlog(st, fetchers, 40, idle_workers=2)  # a fetcher's full pop: a backlog again
    assert fetchers.pop_for_worker() is False and broker.asked == [(10, False)]  # held back now
    fetchers._fetching = 0
    broker.script.append(10)
    assert fetchers.pop_for_worker() is True  # none in flight: it pops, and it brought messages
    assert not fetchers._race_lost
    fetchers._fetching = 1
    broker.script.append(10)
    assert fetchers.pop_for_worker() is True  # beside a pop for an idle worker again
    assert broker.asked == [(10, False)] * 3 and lanes.queued == [10, 10]


def test_a_worker_woken_for_a_queued_lane_needs_no_fetchers_pop() -> None:
    st, fetchers, broker, lanes = _fetchers(room=40)
    lanes.queued_locked = lambda: 1  # type: ignore[method-assign]  # a lane waits for the idle worker
    _backlog(st, fetchers, 40, workers=2, idle_workers=1)
    with st.lock:
        assert not fetchers._wanted_locked()
        st.idle_workers = 2
        assert fetchers._wanted_locked()


def test_more_workers_than_partitions_make_no_run_of_empty_pops(client: Queen, qname: str, monkeypatch: Any) -> None:
    # 8 workers, 2 partitions: the workers' own pops would race the fetchers' long polls that
    # hold both partitions and come back empty, one per batch (before: about 230 of 430 pops)
    _push(client, qname, 2, 500)
    pops = _record_pops(monkeypatch)
    res = client.queue(qname).group("g").batch(10).concurrency(8).limit(1000).idle_millis(10000).consume(
        lambda msgs: None)
    assert (res.reason, res.handled, res.acked) == ("limit", 1000, 1000), res
    empty = [x for x in _worker_pops(pops) if x[3] == 0]
    assert len(empty) <= 5, (len(empty), len(pops))
