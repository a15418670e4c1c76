"""Acknowledging popped messages and extending their leases (``Queen.ack`` / ``Queen.renew``).

An ack settles one message for one consumer group: ``completed``, ``failed`` (nack:
redelivered until the queue's retry limit, then dead-lettered), ``retry`` (redeliver
without counting) or ``dlq``. A list is sent as one batch per effective consumer group
(the broker applies the body-level group to every item of a batch). A lease renewal moves
a pop's lease expiry; one pop shares one lease.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from . import codec
from ._validate import group_from_context, resolve_group, validate_name, validate_path_token
from .errors import AckError, InvalidInputError, LeaseError
from .wire import messages as wire_messages
from .wire._base import Requester

__all__ = ["ack", "renew"]

Message = Dict[str, Any]


def ack(
    requester: Requester,
    message: Union[Message, Sequence[Message]],
    status: Union[bool, str] = True,
    context: Optional[Mapping[str, Any]] = None,
    *,
    group: Optional[str] = None,
    error: Optional[str] = None,
) -> Union[Dict[str, Any], List[Dict[str, Any]]]:
    """Acknowledge one message or a list; arguments, return value and errors as
    :meth:`queen_sync.Queen.ack` (``group`` / ``error`` are the keyword forms of the
    context's keys).

    Wire: one message → ``POST /api/v1/ack``; a list → one ``POST /api/v1/ack/batch`` per
    effective consumer group.
    """
    group, error = _ack_context(context, group, error)
    codec.normalize_status(status)
    if isinstance(message, Mapping):
        eff = resolve_group(message, group)
        body = codec.encode_ack(message, status, eff, error)
        result, http_status = wire_messages.ack(requester, body)
        if result.get("success") is not True:
            raise AckError(
                "ack of %s refused by the broker: %s" % (message.get("transactionId"), result.get("error")),
                status=http_status,
                error=result.get("error"),
                body=[result],
                results=[result],
                failed=[result],
            )
        return result
    if isinstance(message, (str, bytes)) or not isinstance(message, Sequence):
        raise InvalidInputError("ack() takes a message dict or a list of them, got %s" % type(message).__name__)
    messages = list(message)
    if not messages:
        return []
    batches: "OrderedDict[Optional[str], List[Tuple[int, Message]]]" = OrderedDict()
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise InvalidInputError("ack item %d: a message must be a dict, got %s" % (i, type(m).__name__))
        batches.setdefault(resolve_group(m, group), []).append((i, m))
    encoded = []
    for eff, items in batches.items():
        encoded.append((items, codec.encode_ack_batch([m for _, m in items], status, eff, error)))
    out: List[Optional[Dict[str, Any]]] = [None] * len(messages)
    for items, body in encoded:
        results = wire_messages.ack_batch(requester, body, len(items))
        ordered = sorted(results, key=lambda r: r.get("index", 0)) if _has_indexes(results) else results
        for (pos, _), r in zip(items, ordered):
            r = dict(r)
            r["index"] = pos
            out[pos] = r
    final: List[Dict[str, Any]] = [r for r in out if r is not None]
    failed = [r for r in final if r.get("success") is not True]
    if failed:
        raise AckError(
            "%d of %d acks refused by the broker: %s"
            % (len(failed), len(final), ", ".join(sorted({str(r.get("error")) for r in failed}))),
            status=200,
            error=failed[0].get("error"),
            body=final,
            results=final,
            failed=failed,
        )
    return final


def renew(
    requester: Requester,
    target: Union[str, Message, Sequence[Union[str, Message]]],
    seconds: Optional[int] = None,
) -> Union[Dict[str, Any], List[Dict[str, Any]]]:
    """Extend leases; arguments, return value and errors as :meth:`queen_sync.Queen.renew`.

    Wire: ``POST /api/v1/lease/{leaseId}/extend`` with ``{}`` or ``{"seconds": N}``, one per lease.
    """
    body = codec.encode_renew(seconds)
    single = isinstance(target, (str, Mapping))
    items = [target] if single else target
    if isinstance(items, bytes) or not isinstance(items, Sequence):
        raise InvalidInputError("renew() takes a lease id, a message or a list of them, got %r" % (target,))
    lease_ids: List[str] = []
    for i, t in enumerate(items):
        if isinstance(t, Mapping):
            lease = t.get("leaseId")
            if not lease:
                raise InvalidInputError("renew item %d: the message has no leaseId (popped with auto-ack?)" % i)
        else:
            lease = t
        lease_id = validate_path_token("lease id", lease)  # the same str, now typed as one
        if lease_id not in lease_ids:
            lease_ids.append(lease_id)
    if not lease_ids:
        return []
    results = [wire_messages.extend_lease(requester, lease, body) for lease in lease_ids]
    failed = [r for r in results if r.get("success") is not True]
    if failed:
        raise LeaseError(
            "lease renewal refused by the broker: %s"
            % ", ".join("%s (%s)" % (r.get("leaseId"), r.get("error")) for r in failed),
            status=200,
            error=failed[0].get("error"),
            body=results,
        )
    return results[0] if single else results


def _has_indexes(results: List[Dict[str, Any]]) -> bool:
    return all(isinstance(r.get("index"), int) for r in results)


def _ack_context(
    context: Optional[Mapping[str, Any]], group: Optional[str] = None, error: Optional[str] = None
) -> Tuple[Optional[str], Optional[str]]:
    """Read ``{"group"|"consumer_group"|"consumerGroup": g, "error": text}`` and the keyword
    forms ``group=`` / ``error=`` (the same value in both is fine, two different ones are not)."""
    ctx_group, extra = group_from_context(context, ("error",))
    if group is not None:
        validate_name("consumer group", group)
        if ctx_group is not None and ctx_group != group:
            raise InvalidInputError("group=%r and the context's group %r differ" % (group, ctx_group))
        ctx_group = group
    ctx_error = extra.get("error")
    if error is not None:
        if not isinstance(error, str):
            raise InvalidInputError("error must be a str, got %r" % (error,))
        if ctx_error is not None and str(ctx_error) != error:
            raise InvalidInputError("error= and the context's error differ")
        ctx_error = error
    return ctx_group, (None if ctx_error is None else str(ctx_error))
