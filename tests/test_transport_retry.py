"""Transport retry safety, Retry-After, pluggable backoff, and several brokers
(round-robin, affinity, health marking, failover), on the embedded broker's faults."""

from __future__ import annotations

import time
from typing import Any, Iterator, List

import pytest

from queen_sync import InvalidInputError, Queen, QueenConnectionError, QueenHTTPError
from queen_sync.testing import EmbeddedBroker
from queen_sync.transport import Backoff, ConstantBackoff, ExponentialBackoff, NoBackoff
from queen_sync.transport._retry import _parse_retry_after

from _helpers import wait_for


class RecordingBackoff(Backoff):
    def __init__(self) -> None:
        self.calls: List[int] = []

    def compute(self, failures: int) -> float:
        self.calls.append(failures)
        return 0.001


def record_pauses(q: Queen) -> List[float]:
    pauses: List[float] = []
    transport = q._transport

    def pause(seconds: float) -> bool:
        pauses.append(seconds)
        return transport._closed.is_set()

    transport._pause = pause  # type: ignore[method-assign]
    return pauses


def one_message(q: Queen, broker: Any, queue: str = "rq") -> dict:
    q.queue(queue).push({"data": "m"})
    msgs = q.queue(queue).pop()
    assert len(msgs) == 1
    return msgs[0]


# --------------------------------------------------------------------------- backoff


def test_backoff_policies() -> None:
    eb = ExponentialBackoff(100, 1000)
    for n in range(8):
        d = min(1.0, 0.1 * 2**n)
        assert d / 2 <= eb.compute(n) <= d
    full = ExponentialBackoff(100, 1000, jitter="full")
    assert all(0 <= full.compute(n) <= 1.0 for n in range(20))
    assert ExponentialBackoff(100, 1000, jitter="none").compute(2) == pytest.approx(0.4)
    assert ExponentialBackoff(100, 1000, jitter="none").compute(50) == pytest.approx(1.0)
    assert ConstantBackoff(250).compute(7) == pytest.approx(0.25)
    assert NoBackoff().compute(3) == 0
    with pytest.raises(InvalidInputError):
        ExponentialBackoff(jitter="weird")
    with pytest.raises(InvalidInputError):
        Queen("http://127.0.0.1:1", backoff=object())  # type: ignore[arg-type]


def test_custom_backoff_is_used(embedded_broker: Any) -> None:
    bo = RecordingBackoff()
    embedded_broker.faults.add("GET", "/api/v1/pop", "status", status=500, times=3)
    with Queen(embedded_broker.url, retry_attempts=5, backoff=bo) as q:
        assert q.queue("cb").pop() == []
    assert bo.calls == [0, 1, 2]


def test_parse_retry_after() -> None:
    assert _parse_retry_after("3") == 3.0
    assert _parse_retry_after("0.25") == 0.25
    assert _parse_retry_after("-4") == 0.0
    assert _parse_retry_after(None) is None
    assert _parse_retry_after("soon") is None
    future = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    assert 25 <= (_parse_retry_after(future) or 0) <= 31


# --------------------------------------------------------------------------- retry safety


@pytest.mark.parametrize("status", [429, 503])
def test_refusal_retried_even_for_ack_honouring_retry_after(embedded_broker: Any, status: int) -> None:
    with Queen(embedded_broker.url, retry_attempts=3, backoff=NoBackoff()) as q:
        msg = one_message(q, embedded_broker)
        pauses = record_pauses(q)
        embedded_broker.faults.add("POST", "/api/v1/ack", "status", status=status, retry_after=2, times=1)
        assert q.ack(msg, True)["success"] is True
        assert embedded_broker.request_count("POST", "/api/v1/ack") == 2
        assert pauses == [2.0]


@pytest.mark.parametrize(
    "kwargs, expected",
    [
        ({}, 10.0),  # default retry_max_delay_millis
        ({"retry_max_delay_millis": 250}, 0.25),
        ({"retry_max_delay_millis": 250, "backoff": NoBackoff()}, 0.25),  # also with a custom backoff
    ],
)
def test_retry_after_capped_by_retry_max_delay(embedded_broker: Any, kwargs: dict, expected: float) -> None:
    """A 429 ``Retry-After: 100`` must not block the caller for 100 s (nor the former 60 s)."""
    with Queen(embedded_broker.url, retry_attempts=3, **kwargs) as q:
        pauses = record_pauses(q)  # records instead of sleeping
        embedded_broker.faults.add("POST", "/api/v1/push", "status", status=429, retry_after=100, times=1)
        assert q.queue("cap").push({"data": 1})[0]["status"] == "queued"
        assert embedded_broker.request_count("POST", "/api/v1/push") == 2
    assert pauses == [pytest.approx(expected)]


def test_retry_after_gives_up_with_error_attribute(embedded_broker: Any) -> None:
    embedded_broker.faults.add("POST", "/api/v1/push", "status", status=429, retry_after=0.01, times=None)
    # push_retry_timeout_millis=0: the attempt count alone, as for every other call
    with Queen(embedded_broker.url, retry_attempts=2, backoff=NoBackoff(), push_retry_timeout_millis=0) as q:
        with pytest.raises(QueenHTTPError) as ei:
            q.queue("ra").push({"data": 1})
    assert ei.value.status == 429 and getattr(ei.value, "retry_after") == 0.01
    assert embedded_broker.request_count("POST", "/api/v1/push") == 2


def test_lost_ack_reply_not_resent(embedded_broker: Any) -> None:
    with Queen(embedded_broker.url, retry_attempts=5, backoff=NoBackoff()) as q:
        msg = one_message(q, embedded_broker)
        embedded_broker.faults.add("POST", "/api/v1/ack", "drop_after", times=1)
        with pytest.raises(QueenConnectionError):
            q.ack(msg, True)
        assert embedded_broker.request_count("POST", "/api/v1/ack") == 1


def test_lost_transaction_reply_not_resent(embedded_broker: Any) -> None:
    with Queen(embedded_broker.url, retry_attempts=5, backoff=NoBackoff()) as q:
        embedded_broker.faults.add("POST", "/api/v1/transaction", "drop_after", times=1)
        with pytest.raises(QueenConnectionError):
            q.transaction().queue("tx").push([{"data": 1}]).commit()
        assert embedded_broker.request_count("POST", "/api/v1/transaction") == 1


def test_lost_pop_reply_not_resent(embedded_broker: Any) -> None:
    with Queen(embedded_broker.url, retry_attempts=5, backoff=NoBackoff()) as q:
        q.queue("lp").push({"data": 1})
        embedded_broker.faults.add("GET", "/api/v1/pop", "drop_after", times=1)
        with pytest.raises(QueenConnectionError):
            q.queue("lp").pop()
        assert embedded_broker.request_count("GET", "/api/v1/pop") == 1


def test_pop_5xx_retried_but_not_504(embedded_broker: Any) -> None:
    with Queen(embedded_broker.url, retry_attempts=5, backoff=NoBackoff()) as q:
        q.queue("p5").push({"data": 1})
        embedded_broker.faults.add("GET", "/api/v1/pop", "status", status=502, times=2)
        assert [m["data"] for m in q.queue("p5").pop()] == [1]
        assert embedded_broker.request_count("GET", "/api/v1/pop") == 3
        embedded_broker.faults.add("GET", "/api/v1/pop", "status", status=504, times=1)
        with pytest.raises(QueenHTTPError):
            q.queue("p5").pop()
        assert embedded_broker.request_count("GET", "/api/v1/pop") == 4


def test_push_retried_after_504_and_lost_reply(embedded_broker: Any) -> None:
    with Queen(embedded_broker.url, retry_attempts=5, backoff=NoBackoff()) as q:
        embedded_broker.faults.add("POST", "/api/v1/push", "status", status=504, times=1)
        embedded_broker.faults.add("POST", "/api/v1/push", "drop_before", times=1)
        got = q.queue("p4").push({"data": 1})
        assert got[0]["status"] == "queued"
        assert embedded_broker.request_count("POST", "/api/v1/push") == 3
        assert len(embedded_broker.messages("p4")) == 1


def test_4xx_never_retried(embedded_broker: Any) -> None:
    embedded_broker.faults.add("POST", "/api/v1/push", "status", status=400, times=3)
    with Queen(embedded_broker.url, retry_attempts=5, backoff=NoBackoff()) as q:
        with pytest.raises(QueenHTTPError):
            q.queue("x4").push({"data": 1})
    assert embedded_broker.request_count("POST", "/api/v1/push") == 1


# --------------------------------------------------------------------------- several brokers


@pytest.fixture
def two_brokers(embedded_broker: Any) -> Iterator[List[Any]]:
    with EmbeddedBroker() as other:
        yield [embedded_broker, other]


def test_round_robin_spreads(two_brokers: List[Any]) -> None:
    a, b = two_brokers
    with Queen([a.url, b.url]) as q:
        for _ in range(10):
            q.queue("rr").pop()
    assert a.request_count("GET") == 5 and b.request_count("GET") == 5


def test_affinity_sticks_per_partition(two_brokers: List[Any]) -> None:
    a, b = two_brokers
    with Queen([a.url, b.url], load_balancing_strategy="affinity") as q:
        for p in range(16):
            for _ in range(3):
                q.queue("aff").partition("p%d" % p).push({"data": p})
    where = {}
    for p in range(16):
        in_a = sum(1 for m in a.messages("aff") if m["partition"] == "p%d" % p)
        in_b = sum(1 for m in b.messages("aff") if m["partition"] == "p%d" % p)
        assert (in_a, in_b) in ((3, 0), (0, 3)), p  # one partition: one broker
        where[p] = "a" if in_a else "b"
    assert set(where.values()) == {"a", "b"}  # partitions spread over both
    with pytest.raises(InvalidInputError):
        Queen([a.url, b.url], load_balancing_strategy="random")


def test_unhealthy_url_skipped_then_retried(two_brokers: List[Any]) -> None:
    a, b = two_brokers
    a.stop()
    with Queen([a.url, b.url], retry_attempts=1, health_retry_after_millis=300) as q:
        for i in range(6):
            q.queue("hl").push({"data": i})
        st = q.get_transport_stats()
        assert st["failovers"] == 1  # only the first call hit the dead broker
        assert [u["healthy"] for u in st["urls"]] == [False, True]
        assert len(b.messages("hl")) == 6
        a.start()
        # once health_retry_after_millis has passed, the first broker gets traffic again
        wait_for(lambda: bool(q.queue("hl").pop() is not None and a.request_count("GET") > 0), what="broker a used again")
        assert q.get_transport_stats()["urls"][0]["healthy"] is True


def test_affinity_fails_over_and_comes_back(two_brokers: List[Any]) -> None:
    a, b = two_brokers
    with Queen([a.url, b.url], load_balancing_strategy="affinity", retry_attempts=1, health_retry_after_millis=200) as q:
        q.queue("af").partition("x").push({"data": 0})
        home, other = (a, b) if a.messages("af") else (b, a)
        home.stop()
        q.queue("af").partition("x").push({"data": 1})  # fails over at once
        assert [m["data"] for m in other.messages("af")] == [1]
        home.start()
        n = [1]

        def pushed_home() -> bool:
            n[0] += 1
            q.queue("af").partition("x").push({"data": n[0]})
            return len(home.messages("af")) > 1

        wait_for(pushed_home, what="affinity back on the healthy home broker")


# --------------------------------------------------------------------------- on_retry


def test_on_retry_is_told_each_retried_attempt_and_cannot_break_the_call(embedded_broker: Any) -> None:
    from queen_sync.transport import Transport

    embedded_broker.faults.add("GET", "/health", "status", status=500, times=2, body={"error": "busy"})
    told: List[Any] = []

    def on_retry(error: Exception, attempt: int) -> None:
        told.append((type(error).__name__, attempt, "busy" in str(error)))
        raise RuntimeError("a broken callback")  # logged at DEBUG, the call goes on

    t = Transport([embedded_broker.url], retry_attempts=3, backoff=NoBackoff())
    try:
        resp = t.request("GET", "/health", idempotent=True, on_retry=on_retry)
        assert resp.status == 200
        assert told == [("QueenHTTPError", 1, True), ("QueenHTTPError", 2, True)]
        # the last attempt's failure is raised, not told
        embedded_broker.faults.add("GET", "/health", "status", status=500, times=3, body={"error": "busy"})
        attempts: List[int] = []
        with pytest.raises(QueenHTTPError, match="busy"):
            t.request("GET", "/health", idempotent=True, on_retry=lambda e, n: attempts.append(n))
        assert attempts == [1, 2]
    finally:
        t.close()
