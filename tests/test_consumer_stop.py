"""Background consumers: stop() during a burst, drain timeout, prompt stop, stop from a
handler, KeyboardInterrupt, opt-in signal handling."""

from __future__ import annotations

import _thread
import os
import signal
import threading
import time
from typing import Any, Dict, List, Set

import pytest

from queen_sync import InvalidInputError, Queen

from _helpers import capture_consumers, wait_until as _wait_until  # 15 s default


#: signals sent to this very process (handled in its main thread): run outside pytest-xdist
#: workers, whose main thread serves the controller (README test command, ``-m main_thread``)
pytestmark = pytest.mark.main_thread

def _push_burst(client: Queen, qname: str, partitions: int, per_partition: int) -> Set[str]:
    ids: Set[str] = set()
    for p in range(partitions):
        res = client.queue(qname).partition("p%d" % p).push([{"data": i} for i in range(per_partition)])
        ids.update(r["transaction_id"] for r in res)
    return ids


def _drain_group(client: Queen, qname: str) -> List[str]:
    got: List[str] = []
    lock = threading.Lock()

    def handler(m: Dict[str, Any]) -> None:
        with lock:
            got.append(m["transactionId"])

    client.queue(qname).group("g").batch(20).partitions(8).each().concurrency(4).idle_millis(800).consume(handler)
    return got


def test_stop_during_burst_acks_everything_handled(client: Queen, qname: str) -> None:
    pushed = _push_burst(client, qname, 8, 40)
    handled: List[str] = []
    lock = threading.Lock()
    in_flight: Dict[str, int] = {}
    overlaps: List[str] = []

    def handler(m: Dict[str, Any]) -> None:
        with lock:
            in_flight[m["partition"]] = in_flight.get(m["partition"], 0) + 1
            if in_flight[m["partition"]] > 1:
                overlaps.append(m["partition"])
            handled.append(m["transactionId"])
        time.sleep(0.002)
        with lock:
            in_flight[m["partition"]] -= 1

    consumer = client.queue(qname).group("g").batch(5).each().concurrency(4).consume(handler, background=True)
    assert consumer.is_running
    assert _wait_until(lambda: consumer.handled >= 60)
    res = consumer.stop(drain_timeout_millis=10_000)
    assert consumer.join(10) and not consumer.is_running
    assert res.reason == "stopped"
    assert overlaps == []
    assert len(handled) == len(set(handled)) == res.handled
    assert (res.acked, res.ack_failures, res.lost) == (res.handled, 0, 0)
    assert 60 <= res.handled < len(pushed)
    # what the broker still has for the group is exactly what was not handled
    rest = _drain_group(client, qname)
    assert set(rest).isdisjoint(handled)
    assert set(rest) | set(handled) == pushed and len(rest) == len(set(rest))


def test_drain_timeout_releases_unstarted_messages(client: Queen, qname: str) -> None:
    pushed = _push_burst(client, qname, 1, 5)
    gate = threading.Event()
    started = threading.Event()
    handled: List[str] = []

    def handler(m: Dict[str, Any]) -> None:
        handled.append(m["transactionId"])
        started.set()
        assert gate.wait(20)

    consumer = client.queue(qname).group("g").batch(5).each().consume(handler, background=True)
    assert started.wait(10)
    res = consumer.stop(drain_timeout_millis=200)  # message 1 is in the handler; 2..5 wait behind it in its lane
    # stop() returned at the drain timeout; 2..5 can only be released once message 1 is acked
    # (releasing its partition earlier would make that ack fail and the broker redeliver it)
    assert res.handled == 1 and res.acked == 0
    assert consumer.is_running  # the handler is still running
    gate.set()
    assert consumer.join(10)
    final = consumer.result
    assert (final.handled, final.acked, final.released, final.ack_failures) == (1, 1, 4, 0)
    rest = _drain_group(client, qname)
    assert sorted(rest + handled) == sorted(pushed) and not set(rest) & set(handled)


def test_messages_of_a_pop_answered_after_stop_are_released(embedded_broker: Any) -> None:
    with Queen(embedded_broker.url) as client:
        qname = "late-pop"
        pushed = _push_burst(client, qname, 1, 3)
        embedded_broker.faults.add("GET", "/api/v1/pop", "delay", delay_ms=1500, times=1)
        handled: List[str] = []
        consumer = client.queue(qname).group("g").batch(3).each().consume(
            lambda m: handled.append(m["transactionId"]), background=True
        )
        assert _wait_until(lambda: embedded_broker.request_count("GET", "/api/v1/pop") >= 1)
        res = consumer.stop(drain_timeout_millis=10_000)  # the delayed pop is in flight: its messages come back after the stop
        assert consumer.join(10)
        assert handled == [] and res.released == 3 and res.ack_failures == 0
        assert sorted(_drain_group(client, qname)) == sorted(pushed)


def test_stop_is_prompt_during_a_long_poll(client: Queen, qname: str) -> None:
    client.queue(qname).create()
    consumer = client.queue(qname).group("g").timeout_millis(30000).concurrency(2).consume(lambda m: None, background=True)
    done = threading.Event()

    def stopper() -> None:
        consumer.stop()
        done.set()

    threading.Thread(target=stopper, daemon=True).start()
    assert done.wait(10), "stop() waited for a whole 30 s long poll"
    assert consumer.join(10) and consumer.reason == "stopped"


def test_stop_from_inside_a_handler_does_not_deadlock(client: Queen, qname: str) -> None:
    pushed = _push_burst(client, qname, 1, 3)
    box: List[Any] = []
    ready = threading.Event()
    seen: List[str] = []

    def handler(m: Dict[str, Any]) -> None:
        assert ready.wait(10)
        seen.append(m["transactionId"])
        box[0].stop()

    consumer = client.queue(qname).group("g").consume(handler, background=True)
    box.append(consumer)
    ready.set()
    assert consumer.join(15)
    assert consumer.reason == "stopped" and consumer.acked == len(seen) >= 1
    assert sorted(_drain_group(client, qname) + seen) == sorted(pushed)


def test_context_manager_stops(client: Queen, qname: str) -> None:
    _push_burst(client, qname, 2, 2)
    seen: List[Any] = []
    with client.queue(qname).group("g").concurrency(2).consume(seen.append, background=True) as consumer:
        assert _wait_until(lambda: consumer.handled == 4)
    assert not consumer.is_running or consumer.join(10)
    assert consumer.result.acked == 4


def test_keyboard_interrupt_stops_gracefully_and_reraises(client: Queen, qname: str) -> None:
    pushed = _push_burst(client, qname, 1, 3)
    seen: List[str] = []

    def handler(m: Dict[str, Any]) -> None:
        seen.append(m["transactionId"])
        if len(seen) == 1:
            _thread.interrupt_main()  # like Ctrl-C in the main thread (where consume() runs)
            time.sleep(0.3)  # the handler is still running when the interrupt lands

    with pytest.raises(KeyboardInterrupt):
        # idle_millis only bounds the test if the interrupt were lost (it must not be)
        client.queue(qname).group("g").idle_millis(20000).consume(handler)
    # the message in the handler was finished and acked; the rest is still there
    assert len(seen) >= 1
    assert sorted(_drain_group(client, qname) + seen) == sorted(pushed)


def test_keyboard_interrupt_while_the_threads_start_stops_them(client: Queen, qname: str, monkeypatch: Any) -> None:
    # the interrupt can land in consume() before the supervisor runs: a handler may already
    # be running while the last threads are started; those started are stopped all the same
    from queen_sync.consumer import _consumer

    pushed = _push_burst(client, qname, 1, 3)
    seen: List[str] = []
    real = _consumer.Consumer._add_thread

    def add_thread(self: Any, t: threading.Thread) -> None:
        real(self, t)
        if t.name.endswith("-fetch-1"):  # two fetchers started, the third not yet
            raise KeyboardInterrupt

    monkeypatch.setattr(_consumer.Consumer, "_add_thread", add_thread)
    made = capture_consumers(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        client.queue(qname).group("g").concurrency(3).idle_millis(20000).consume(lambda m: seen.append(m["transactionId"]))
    monkeypatch.undo()
    assert made[0].result.reason == "interrupted"
    assert _wait_until(lambda: not client.running_consumers())
    assert sorted(_drain_group(client, qname) + seen) == sorted(pushed)


def test_handle_signals_sigterm_is_a_graceful_stop(client: Queen, qname: str) -> None:
    pushed = _push_burst(client, qname, 1, 4)
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    seen: List[str] = []

    def handler(m: Dict[str, Any]) -> None:
        seen.append(m["transactionId"])
        if len(seen) == 1:
            os.kill(os.getpid(), signal.SIGTERM)

    res = client.queue(qname).group("g").consume(handler, handle_signals=True)
    assert res.reason == "signal" and res.acked == len(seen) >= 1
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
    assert sorted(_drain_group(client, qname) + seen) == sorted(pushed)


def test_no_signal_handlers_by_default_and_main_thread_only(client: Queen, qname: str) -> None:
    client.queue(qname).create()
    before = signal.getsignal(signal.SIGTERM)
    consumer = client.queue(qname).group("g").consume(lambda m: None, background=True)
    assert signal.getsignal(signal.SIGTERM) == before
    consumer.stop()
    errors: List[BaseException] = []

    def other_thread() -> None:
        try:
            client.queue(qname).group("g").idle_millis(100).consume(lambda m: None, handle_signals=True)
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=other_thread)
    t.start()
    t.join(10)
    assert len(errors) == 1 and isinstance(errors[0], InvalidInputError)
