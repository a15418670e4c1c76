"""Calls that hold a partition use a short per-attempt timeout (issue 11, item 6).

An ack, release or lease renewal on a half-open connection (the broker never answers: the
embedded broker's ``blackhole`` fault) waits ``ack_timeout_millis`` (default 5000), then is
retried, instead of the whole HTTP ``timeout_millis`` while its partition cannot advance.
Each case runs in a thread so that a wait of the full timeout fails the test quickly.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, List

import pytest

from queen_sync import InvalidInputError, Queen


def _within(seconds: float, fn: Callable[[], Any]) -> Any:
    out: List[Any] = []

    def run() -> None:
        try:
            out.append(("ok", fn()))
        except BaseException as exc:  # noqa: BLE001 - handed to the assertion below
            out.append(("error", exc))

    t = threading.Thread(target=run, daemon=True)
    t0 = time.monotonic()
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "still waiting after %.1f s (the HTTP timeout is 60 s)" % (time.monotonic() - t0)
    kind, value = out[0]
    if kind == "error":
        raise value
    return value


def test_consumer_ack_on_a_half_open_connection_is_retried_after_ack_timeout(embedded_broker: Any) -> None:
    with Queen(embedded_broker.url, timeout_millis=60000, ack_timeout_millis=1000) as q:
        q.queue("at").push({"data": 1})
        hole = embedded_broker.faults.add("POST", "/api/v1/ack", "blackhole", times=1)
        res = _within(10.0, lambda: q.queue("at").group("g").limit(1).consume(lambda m: None))
        assert hole.hits == 1
        assert (res.handled, res.acked, res.ack_failures, res.reason) == (1, 1, 0, "limit"), res
        assert q.queue("at").group("g").pop() == []  # the resent ack landed


def test_lease_renewal_on_a_half_open_connection_is_retried_after_ack_timeout(embedded_broker: Any) -> None:
    with Queen(embedded_broker.url, timeout_millis=60000, ack_timeout_millis=1000) as q:
        q.queue("rt").push({"data": 1})
        msg = q.queue("rt").group("g").pop()[0]
        hole = embedded_broker.faults.add("POST", "/api/v1/lease/", "blackhole", times=1)
        got = _within(10.0, lambda: q.renew(msg, 30))
        assert hole.hits == 1 and got["success"] is True


def test_ack_timeout_defaults_and_bounds(embedded_broker: Any) -> None:
    with Queen(embedded_broker.url) as q:
        assert q._session.ack_timeout_millis == 5000
    with Queen(embedded_broker.url, timeout_millis=2000) as q:
        assert q._session.ack_timeout_millis == 2000  # never longer than the HTTP timeout
    with pytest.raises(InvalidInputError):
        Queen(embedded_broker.url, ack_timeout_millis=0)
