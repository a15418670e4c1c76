"""The unbuffered push of :meth:`QueueBuilder.push`: encode the items (ids minted once, before
the first attempt), send them within the push retry budget, turn ``failed`` items into a
:class:`BrokerError`, and attach the safe re-push items (same ``transactionId`` s) to every
error raised after the items were built."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

from . import codec
from ._session import Session
from .errors import BrokerError, QueenError
from .wire import messages as wire_messages

__all__ = ["push_now"]


def push_now(session: Session, queue: str, partition: Optional[str], items: List[Mapping[str, Any]]) -> List[Dict[str, Any]]:
    """Push ``items`` (already a non-empty list) to ``queue`` / ``partition`` now.

    Returns:
        the broker's results, one per item, in order.

    Raises:
        InvalidInputError: a bad item (nothing sent).
        BrokerError: some items ``failed`` (``.body``: all the results), or the broker refused
            the push; with the transport's errors, each carries ``.items`` (the re-push items).

    Wire: ``POST /api/v1/push`` (see :func:`queen_sync.wire.messages.push`).
    """
    body, ids = codec.encode_push(queue, partition, items, nan_as_null=session.nan_as_null)
    try:
        results, status, failed = wire_messages.push(session, body, queue=queue, partition=partition, count=len(items))
        if failed:  # counted by the reply check: no pass over the results when none failed
            raise _failed_items_error(results, status)
    except QueenError as exc:
        exc.items = _repush_items(items, ids)  # the safe re-push: same transactionIds (README "Retries")
        raise
    return results


def _repush_items(items: List[Mapping[str, Any]], ids: List[str]) -> List[Dict[str, Any]]:
    """Pushed items as push() items again, with the transactionIds they were sent with:
    ``{"payload", "transactionId", "traceId"?}``."""
    out = []
    for item, tx in zip(items, ids):
        again = {"payload": item["data"] if "data" in item else item["payload"], "transactionId": tx}
        trace = item.get("traceId")
        if trace is not None:
            again["traceId"] = trace
        out.append(again)
    return out


def _failed_items_error(results: List[Dict[str, Any]], status: int) -> BrokerError:
    """The error of a push whose reply holds ``failed`` items (``.body``: all the results)."""
    failed = [r for r in results if r.get("status") == "failed"]
    return BrokerError(
        "%d of %d pushed items failed: %s"
        % (len(failed), len(results), ", ".join(sorted({str(r.get("error")) for r in failed}))),
        status=status,
        error=failed[0].get("error"),
        body=results,
    )
