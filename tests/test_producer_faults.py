"""No loss, no duplicate: 16 producer threads share one ``Queen`` while the embedded broker
injects a fault (lost response after commit, connection closed before processing, 503 and
429 with Retry-After, refused connections, a restart). Buffered and unbuffered pushes.
Every payload must be stored exactly once (``broker.messages(queue)``)."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any, Dict, List

import pytest

from queen_sync import Queen
from queen_sync.transport import ExponentialBackoff

from _helpers import wait_for

THREADS = 16
FAULTS = ["drop_after", "drop_before", "status_503", "status_429", "refuse", "restart"]


def make_client(url: str) -> Queen:
    # small, capped backoff and many attempts: a fault window of ~2 s is ridden out
    return Queen(
        url,
        timeout_millis=5000,
        retry_attempts=100,
        backoff=ExponentialBackoff(2, 20),
        close_timeout_millis=10000,
    )


@pytest.mark.parametrize("mode", ["unbuffered", "buffered"])
@pytest.mark.parametrize("fault", FAULTS)
def test_every_payload_exactly_once(embedded_broker: Any, fault: str, mode: str) -> None:
    broker = embedded_broker
    queue = "faults-%s-%s" % (fault, mode)
    per_thread = 12 if mode == "unbuffered" else 40
    q = make_client(broker.url)
    results: List[Dict[str, Any]] = []
    errors: List[BaseException] = []
    lock = threading.Lock()
    started = threading.Barrier(THREADS + 1)
    go = threading.Event()

    def produce(t: int) -> None:
        qb = q.queue(queue).partition("p%d" % (t % 4))
        if mode == "buffered":
            qb = qb.buffer(25, 20)
        started.wait()
        go.wait()
        try:
            i = 0
            while i < per_thread:
                if i % 4 == 3 and i + 2 <= per_thread:  # some list pushes too
                    got = qb.push([{"data": {"t": t, "i": i}}, {"data": {"t": t, "i": i + 1}}])
                    i += 2
                else:
                    got = qb.push({"data": {"t": t, "i": i}})
                    i += 1
                with lock:
                    results.extend(got)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=produce, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    started.wait()

    fault_obj = None
    if fault == "drop_after":
        fault_obj = broker.faults.add("POST", "/api/v1/push", "drop_after", times=4)
    elif fault == "drop_before":
        fault_obj = broker.faults.add("POST", "/api/v1/push", "drop_before", times=4)
    elif fault == "status_503":
        fault_obj = broker.faults.add("POST", "/api/v1/push", "status", status=503, retry_after=0.01, times=6)
    elif fault == "status_429":
        fault_obj = broker.faults.add("POST", "/api/v1/push", "status", status=429, retry_after=0.01, times=6)
    elif fault == "refuse":
        broker.stop()
    elif fault == "restart":  # slow pushes down so some are in flight when the broker goes away
        fault_obj = broker.faults.add("POST", "/api/v1/push", "delay", delay_ms=20, times=None)

    go.set()
    if fault == "refuse":
        # connections are refused until the client has retried a few times, then come back
        wait_for(lambda: q.get_transport_stats()["retries"] >= 3, what="refused pushes being retried")
        broker.start()
    elif fault == "restart":
        wait_for(lambda: len(broker.messages(queue)) >= 20, what="first messages stored")
        broker.restart()
        broker.faults.clear()

    for th in threads:
        th.join(30)
    assert not errors, errors
    if mode == "buffered":
        assert q.flush_all_buffers(15000) == 0
        stats = q.get_buffer_stats()
        assert stats["totalBufferedMessages"] == 0
        assert stats["delivered"] == THREADS * per_thread
        assert stats["failed"] == 0
        assert all(r["status"] == "pending" for r in results)
    else:
        # the user sees one delivery per item: queued, or duplicate after a lost response
        assert {r["status"] for r in results} <= {"queued", "duplicate"}
    assert len(results) == THREADS * per_thread
    transport_stats = q.get_transport_stats()
    assert q.close() == 0

    stored = broker.messages(queue)
    seen = Counter((m["data"]["t"], m["data"]["i"]) for m in stored)
    expected = {(t, i) for t in range(THREADS) for i in range(per_thread)}
    assert set(seen) == expected
    dupes = {k: n for k, n in seen.items() if n != 1}
    assert dupes == {}
    assert len(stored) == THREADS * per_thread

    # the fault really happened
    if fault_obj is not None:
        assert fault_obj.hits >= 1
    if fault in ("refuse", "restart", "drop_before", "status_503", "status_429"):
        assert transport_stats["retries"] >= 1
    if fault == "drop_after":
        if mode == "unbuffered":
            assert any(r["status"] == "duplicate" for r in results)
        else:
            assert stats["duplicates"] >= 1


def test_lost_response_push_reuses_transaction_ids(embedded_broker: Any) -> None:
    """A push retried after a lost response is answered ``duplicate`` with the same ids."""
    broker = embedded_broker
    with make_client(broker.url) as q:
        broker.faults.add("POST", "/api/v1/push", "drop_after", times=1)
        got = q.queue("lost").push([{"data": 1}, {"data": 2}])
        assert [r["status"] for r in got] == ["duplicate", "duplicate"]
        assert broker.request_count("POST", "/api/v1/push") == 2
        stored = broker.messages("lost")
        assert [m["data"] for m in stored] == [1, 2]
        assert [m["transactionId"] for m in stored] == [r["transaction_id"] for r in got]
