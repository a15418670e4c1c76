"""Push retries span a broker restart (a time budget, not 3 attempts), an empty or garbled
200 reply counts as a lost reply, and an error that reaches the caller carries the pushed
items with their ids (``err.items``) so that ``push(err.items)`` is answered ``duplicate``."""

from __future__ import annotations

import http.server
import json
import threading
import time
from typing import Any, Dict, Iterator, List

import pytest

from queen_sync import InvalidInputError, ProtocolError, Queen, QueenConnectionError
from queen_sync.transport import ExponentialBackoff

from _helpers import wait_for


def test_unbuffered_push_rides_out_a_broker_restart_with_default_options(embedded_broker: Any) -> None:
    """Default client (retry_attempts=3): the broker is down for more than 3 attempts, and the
    push in flight when it went down had its reply lost; the push still succeeds, stored once."""
    broker = embedded_broker
    fault = broker.faults.add("POST", "/api/v1/push", "delay", delay_ms=300, times=1)
    with Queen(broker.url) as q:
        got: List[Any] = []

        def push() -> None:
            try:
                got.append(q.queue("restart").partition("p").push([{"data": 1}, {"data": 2}]))
            except BaseException as exc:  # reported below
                got.append(exc)

        t = threading.Thread(target=push)
        t.start()
        wait_for(lambda: fault.hits == 1, what="the push reaching the broker")
        broker.stop()  # the push in flight loses its reply; later attempts are refused
        wait_for(lambda: q.get_transport_stats()["retries"] >= 4, what="more retries than retry_attempts")
        broker.start()
        t.join(30)
        assert not t.is_alive()
        assert len(got) == 1 and isinstance(got[0], list), got
        assert {r["status"] for r in got[0]} <= {"queued", "duplicate"}
        stored = broker.messages("restart")
        assert [m["data"] for m in stored] == [1, 2]
        assert [m["transactionId"] for m in stored] == [r["transaction_id"] for r in got[0]]


def test_budget_not_attempt_count_decides(embedded_broker: Any) -> None:
    """retry_attempts=1 with a budget still retries a lost reply; budget 0 gives the count."""
    broker = embedded_broker
    broker.faults.add("POST", "/api/v1/push", "drop_after", times=2)
    with Queen(broker.url, retry_attempts=1, backoff=ExponentialBackoff(5, 20)) as q:
        got = q.queue("budget").push({"data": "x"})
    assert [r["status"] for r in got] == ["duplicate"]
    assert broker.request_count("POST", "/api/v1/push") == 3
    broker.faults.add("POST", "/api/v1/push", "drop_after", times=1)
    with Queen(broker.url, retry_attempts=1, push_retry_timeout_millis=0) as q:
        with pytest.raises(QueenConnectionError):
            q.queue("budget").push({"data": "y"})
    from queen_sync.transport import DEFAULT_PUSH_RETRY_TIMEOUT_MILLIS

    assert DEFAULT_PUSH_RETRY_TIMEOUT_MILLIS == 15000


def test_budget_bounds_the_wait(embedded_broker: Any) -> None:
    broker = embedded_broker
    broker.stop()
    with Queen(broker.url, push_retry_timeout_millis=600, backoff=ExponentialBackoff(50, 100)) as q:
        t0 = time.monotonic()
        with pytest.raises(QueenConnectionError) as info:
            q.queue("bounded").push({"data": 1})
        took = time.monotonic() - t0
        assert 0.6 <= took < 3.0, took
        assert q.get_transport_stats()["retries"] >= 5  # many more than retry_attempts
    assert info.value.items is not None and len(info.value.items) == 1
    with pytest.raises(InvalidInputError):
        Queen(broker.url, push_retry_timeout_millis=-1)


def test_error_carries_items_and_repush_is_duplicate(embedded_broker: Any) -> None:
    """A lost reply, no budget left: the error reaches the caller with err.items; pushing
    err.items is answered duplicate (nothing stored twice), the original items are a new send."""
    broker = embedded_broker
    items = [{"data": {"n": 1}}, {"data": {"n": 2}, "traceId": "0195e1c2-1234-7abc-8def-0123456789ab"}]
    broker.faults.add("POST", "/api/v1/push", "drop_after", times=1)
    with Queen(broker.url, retry_attempts=1, push_retry_timeout_millis=0) as q:
        qb = q.queue("repush").partition("p")
        with pytest.raises(QueenConnectionError) as info:
            qb.push(items)
        err_items = info.value.items
        assert err_items is not None
        stored = broker.messages("repush")
        assert [m["transactionId"] for m in stored] == [i["transactionId"] for i in err_items]
        assert [i["payload"] for i in err_items] == [{"n": 1}, {"n": 2}]
        assert err_items[1]["traceId"] == items[1]["traceId"]
        again = qb.push(err_items)
        assert [r["status"] for r in again] == ["duplicate", "duplicate"]
        assert len(broker.messages("repush")) == 2
        # the original items have no transactionId: pushing them again is a new send
        assert [r["status"] for r in qb.push(items)] == ["queued", "queued"]
        assert len(broker.messages("repush")) == 4


def test_refused_push_carries_items(embedded_broker: Any) -> None:
    broker = embedded_broker
    broker.faults.add("POST", "/api/v1/push", "status", status=400, times=1)
    with Queen(broker.url) as q:
        with pytest.raises(Exception) as info:
            q.queue("refused").push({"data": 1, "transactionId": "tx-1"})
    assert info.value.items == [{"payload": 1, "transactionId": "tx-1"}]


# --------------------------------------------------------------------------- empty / garbled 200


class _FlakyPushBroker(http.server.ThreadingHTTPServer):
    """Answers the first ``bad`` pushes with a 200 whose body is ``bad_body``, then like a
    broker: one ``queued`` result per item (``duplicate`` for an id seen before)."""

    daemon_threads = True

    def __init__(self, bad: int, bad_body: bytes) -> None:
        self.bad = bad
        self.bad_body = bad_body
        self.pushes = 0
        self.seen: Dict[str, int] = {}
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _FlakyPushBroker
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        srv = self.server
        srv.pushes += 1
        results = []
        for i, it in enumerate(body["items"]):
            tx = it["transactionId"]
            results.append({"index": i, "transaction_id": tx, "status": "duplicate" if tx in srv.seen else "queued"})
            srv.seen[tx] = srv.seen.get(tx, 0) + 1
        out = srv.bad_body if srv.pushes <= srv.bad else json.dumps(results).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


@pytest.fixture
def flaky_broker(request: Any) -> Iterator[_FlakyPushBroker]:
    srv = _FlakyPushBroker(*request.param)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(5)


@pytest.mark.parametrize("flaky_broker", [(1, b""), (2, b"[]"), (1, b"{}")], indirect=True)
def test_empty_or_garbled_200_is_retried(flaky_broker: _FlakyPushBroker) -> None:
    with Queen("http://127.0.0.1:%d" % flaky_broker.server_address[1], backoff=ExponentialBackoff(5, 20)) as q:
        got = q.queue("flaky").push([{"data": 1}, {"data": 2}])
    assert [r["status"] for r in got] == ["duplicate", "duplicate"]
    assert flaky_broker.pushes == flaky_broker.bad + 1
    assert all(n == flaky_broker.bad + 1 for n in flaky_broker.seen.values())


@pytest.mark.parametrize("flaky_broker", [(100, b""), (100, b"[]")], indirect=True)
def test_empty_200_past_budget_is_a_lost_reply(flaky_broker: _FlakyPushBroker) -> None:
    with Queen(
        "http://127.0.0.1:%d" % flaky_broker.server_address[1],
        push_retry_timeout_millis=200,
        backoff=ExponentialBackoff(5, 20),
    ) as q:
        expected = QueenConnectionError if flaky_broker.bad_body == b"" else ProtocolError
        with pytest.raises(expected) as info:
            q.queue("flaky").push({"data": 1})
    assert info.value.items is not None and info.value.items[0]["payload"] == 1
    assert flaky_broker.pushes > 3
