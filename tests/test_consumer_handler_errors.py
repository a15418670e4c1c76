"""A failing handler is visible at WARNING (with its traceback), without payloads."""

from __future__ import annotations

import logging
from typing import Any, Dict, List

import pytest

from queen_sync import Queen


class _HandlerBoom(RuntimeError):
    pass


def test_handler_failure_is_logged_at_warning_with_traceback(
    client: Queen, qname: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="queen_sync")
    res = client.queue(qname).partition("pa").push({"data": {"card": "PAYLOAD-SECRET-4242"}})
    txid = res[0]["transaction_id"]

    def handler(m: Dict[str, Any]) -> None:
        raise _HandlerBoom("handler refused it")

    out = client.queue(qname).group("g").limit(1).idle_millis(5000).consume(handler)
    assert (out.handled, out.failed, out.nacked) == (1, 1, 1)
    recs = [r for r in caplog.records if r.name == "queen_sync.consumer" and r.exc_info]
    assert len(recs) == 1
    rec = recs[0]
    assert rec.levelno == logging.WARNING
    assert rec.exc_info[0] is _HandlerBoom  # the traceback goes with it
    text = rec.getMessage()
    assert qname in text and "pa" in text and txid in text
    assert "PAYLOAD-SECRET-4242" not in caplog.text  # never the payload


def test_handler_failure_without_auto_ack_is_logged_and_reraised(
    client: Queen, qname: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="queen_sync")
    client.queue(qname).push({"data": "x"})
    seen: List[Any] = []

    def handler(m: Dict[str, Any]) -> None:
        seen.append(m)
        raise _HandlerBoom("no")

    consumer = client.queue(qname).group("g").auto_ack(False).consume(handler, background=True)
    with pytest.raises(_HandlerBoom):
        consumer.join(15)
    assert len(seen) == 1 and consumer.reason == "error"
    recs = [r for r in caplog.records if r.name == "queen_sync.consumer" and r.exc_info]
    assert [r.levelno for r in recs] == [logging.WARNING]
    assert recs[0].exc_info[1] is consumer.error
