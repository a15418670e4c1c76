"""NaN / ±Infinity in payloads: refused before sending by default, sent as null on request."""

from __future__ import annotations

import math
from typing import Any

import pytest

from queen_sync import InvalidInputError, Queen


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_push_buffer_and_transaction_refuse_non_finite_before_sending(queen_broker: Any, queen_queue: str, value: float) -> None:
    with queen_broker.client() as q:
        q.queue(queen_queue).create()
        with pytest.raises(InvalidInputError, match=r"payload\.total"):
            q.queue(queen_queue).push([{"data": {"ok": 1}}, {"data": {"total": value}}])
        with pytest.raises(InvalidInputError):
            q.queue(queen_queue).partition("b").buffer(10, 50).push({"data": {"total": value}})
        with pytest.raises(InvalidInputError):
            q.transaction().queue(queen_queue).push([{"data": {"total": value}}]).commit()
        # nothing of the three reached the broker (the first item of the list included)
        assert q.queue(queen_queue).batch(10).partitions(5).pop() == []


def test_nan_as_null_sends_null(queen_broker: Any, queen_queue: str) -> None:
    with queen_broker.client(nan_as_null=True) as q:
        q.queue(queen_queue).create()
        q.queue(queen_queue).push({"data": {"total": math.nan}})
        q.transaction().queue(queen_queue).push([{"data": {"total": math.inf}}]).commit()
        buf = q.queue(queen_queue).buffer(10, 50)
        buf.push({"data": {"total": -math.inf}})
        buf.flush()
        got = q.queue(queen_queue).batch(10).pop()
        assert [m["data"] for m in got] == [{"total": None}] * 3


def test_nan_as_null_must_be_bool() -> None:
    with pytest.raises(InvalidInputError):
        Queen("http://127.0.0.1:1", nan_as_null="yes")  # type: ignore[arg-type]
