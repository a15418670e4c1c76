"""An ack resent after a lost reply and refused with ``Invalid or expired lease``.

The refusal says only that the lease is no longer held: the first copy may have landed (and
released the lease), or it never arrived and the lease expired meanwhile (then the broker
redelivers the message: it is handled twice). So such an ack is never counted as done: a
``completed`` ack counts in ``ack_uncertain``, a nack in ``uncertain``. Checked on a fake
requester that breaks the first attempt after sending it and refuses the resend.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List

import pytest

from queen_sync.consumer import _acks
from queen_sync.errors import QueenConnectionError
from queen_sync.queues import QueueBuilder

from _helpers import FakeConsumerSession


def _msg(n: int) -> Dict[str, Any]:
    return {
        "id": "01a22b1d-4804-7%03d-b779-2ce8473d3735" % n,
        "transactionId": "tx-%d" % n,
        "partitionId": "pid-a",
        "partition": "a",
        "leaseId": "lease-1",
        "consumerGroup": "g",
        "createdAt": "2026-11-30T06:21:09.%06dZ" % n,
        "data": {"n": n},
    }


class ResendRefused(FakeConsumerSession):
    """One pop of ``popped``; the first ack request breaks after it was sent (``sent=True``:
    maybe applied), every later one is refused per item with ``refusal``."""

    def __init__(self, popped: List[Dict[str, Any]], refusal: str) -> None:
        super().__init__([popped])
        self._refusal = refusal
        self.acks: List[Dict[str, Any]] = []

    def answer_acks(self, doc: Dict[str, Any], items: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
        with self.lock:
            self.acks.append(doc)
            first = len(self.acks) == 1
        if first:
            raise QueenConnectionError("connection broke after the request was sent", sent=True)
        return [
            {"index": i, "transactionId": a["transactionId"], "success": False, "error": self._refusal}
            for i, a in enumerate(items)
        ]


@pytest.fixture(autouse=True)
def _no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_acks, "backoff", lambda attempt: 0.0)


@pytest.mark.parametrize("batch", [1, 3])
def test_resent_ack_refused_as_invalid_lease_counts_as_uncertain(batch: int) -> None:
    fake = ResendRefused([_msg(n) for n in range(batch)], _acks.INVALID_LEASE)
    builder = QueueBuilder(fake, "q").group("g").batch(batch).wait(False).limit(batch)  # type: ignore[arg-type]
    res = builder.consume(lambda m: None)
    assert len(fake.acks) == 2  # sent, resent once
    assert (res.handled, res.acked, res.ack_uncertain, res.ack_failures, res.uncertain) == (batch, 0, batch, 0, 0), res


def test_resent_nack_refused_as_invalid_lease_counts_as_uncertain() -> None:
    fake = ResendRefused([_msg(0)], _acks.INVALID_LEASE)

    def handler(m: Any) -> None:
        raise ValueError("no")

    builder = QueueBuilder(fake, "q").group("g").batch(1).wait(False).limit(1)  # type: ignore[arg-type]
    res = builder.consume(handler)
    assert [a["status"] for a in fake.acks] == ["failed", "failed"]
    assert (res.handled, res.failed, res.nacked, res.uncertain, res.ack_failures) == (1, 1, 0, 1, 0), res


def test_resent_ack_refused_otherwise_is_an_ack_failure() -> None:
    fake = ResendRefused([_msg(0)], "Message not found")
    builder = QueueBuilder(fake, "q").group("g").batch(1).wait(False).limit(1)  # type: ignore[arg-type]
    res = builder.consume(lambda m: None)
    assert (res.handled, res.acked, res.ack_uncertain, res.ack_failures) == (1, 0, 0, 1), res


class AlwaysRefused(FakeConsumerSession):
    """One pop of ``popped``; every ack refused per item with ``refusal`` (no lost reply)."""

    def __init__(self, popped: List[Dict[str, Any]], refusal: str) -> None:
        super().__init__([popped])
        self._refusal = refusal

    def answer_acks(self, doc: Dict[str, Any], items: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
        return [
            {"index": i, "transactionId": a["transactionId"], "success": False, "error": self._refusal}
            for i, a in enumerate(items)
        ]


@pytest.mark.parametrize("group, renew", [("g", False), (None, False), ("g", True)])
def test_an_ack_refused_for_an_expired_lease_says_what_to_do(
    group: Any, renew: bool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="queen_sync.consumer")
    fake = AlwaysRefused([_msg(0)], _acks.INVALID_LEASE)
    builder = QueueBuilder(fake, "orders").batch(1).wait(False).limit(1)  # type: ignore[arg-type]
    if group is not None:
        builder = builder.group(group)
    res = builder.renew_lease(renew).consume(lambda m: None)
    assert (res.handled, res.acked, res.ack_failures) == (1, 0, 1), res
    [text] = [r.getMessage() for r in caplog.records if "refused by the broker" in r.getMessage()]
    assert ("queue 'orders' (consumer group 'g')" in text) == (group is not None)
    if renew:
        assert "although renew_lease(True) is on" in text and "shorter renew_lease() interval" in text
    else:
        where = "queen.queue('orders')" + ("" if group is None else ".group('g')")
        assert where + ".renew_lease(True)" in text and "lease_time" in text


def test_an_ack_refused_otherwise_gets_no_lease_hint(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="queen_sync.consumer")
    fake = AlwaysRefused([_msg(0)], "Message not found")
    QueueBuilder(fake, "orders").group("g").batch(1).wait(False).limit(1).consume(lambda m: None)  # type: ignore[arg-type]
    [text] = [r.getMessage() for r in caplog.records if "refused by the broker" in r.getMessage()]
    assert "Message not found" in text and "renew_lease" not in text
