"""The three streams routes of a Queen 0.15 broker, one function each, every reply checked.

- ``POST /streams/v1/queries``   :func:`register_query`
- ``POST /streams/v1/cycle``     :func:`cycle`
- ``POST /streams/v1/state/get`` :func:`get_state`

A 0.15 broker answers every failure on these routes, a config-hash conflict included, with
HTTP 200 and ``{"success": false, "error": ...}`` (only request validation gets a real 400),
so the body decides: every reply is checked by :func:`queen_sync.wire._base.checked_object`
with ``require_success`` (refused unless ``success`` is true), and the errors name the query.
Each function takes a *requester* (:class:`queen_sync.wire._base.Requester`; a
:class:`queen_sync.transport.Transport` or a client session is one).
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Sequence

from ..errors import (
    InvalidInputError,
    ProtocolError,
    StreamsConfigHashError,
    StreamsCycleError,
    StreamsError,
)
from ._base import Requester, checked_object

__all__ = ["Requester", "register_query", "cycle", "get_state"]

_REGISTER = "/streams/v1/queries"
_CYCLE = "/streams/v1/cycle"
_STATE = "/streams/v1/state/get"


def _error_text(doc: Dict[str, Any]) -> Optional[str]:
    err = doc.get("error")
    return err if isinstance(err, str) else None


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def register_query(
    requester: Requester,
    *,
    name: str,
    source_queue: str,
    config_hash: str,
    sink_queue: Optional[str] = None,
    reset: bool = False,
) -> Dict[str, Any]:
    """Register (or re-attach to) a streams query.

    Args:
        name: the query name (``query_id`` of ``Stream.run``), broker-wide and permanent.
        source_queue / sink_queue: queue names (``sink_queue`` None = no sink).
        config_hash: SHA-256 hex of the operator chain.
        reset: wipe the query's state when the hash differs (the source cursor is kept).

    Returns:
        ``{"query_id", "name", "config_hash", "fresh", "reset", ...}`` as the broker sent it.

    Raises:
        InvalidInputError: an empty name, queue or hash (nothing sent).
        StreamsConfigHashError: the query exists with another hash and ``reset`` is False.
        StreamsError: any other refusal; ProtocolError: a reply without ``query_id``.

    Wire: ``POST /streams/v1/queries {name, source_queue, config_hash, reset, sink_queue?}``
    (idempotent: the same body again re-attaches).
    """
    for label, value in (("name", name), ("source_queue", source_queue), ("config_hash", config_hash)):
        if not isinstance(value, str) or not value:
            raise InvalidInputError("register_query: %s must be a non-empty str, got %r" % (label, value))
    body: Dict[str, Any] = {"name": name, "source_queue": source_queue, "config_hash": config_hash, "reset": bool(reset)}
    if sink_queue:
        body["sink_queue"] = sink_queue
    what = "stream query %r: register" % (name,)

    def refusal(doc: Dict[str, Any], status: int) -> StreamsError:
        err = doc.get("error")
        text = err if isinstance(err, str) else "register refused"
        if "config_hash mismatch" in text:
            return StreamsConfigHashError(
                "stream query %r: config_hash mismatch, the operator chain changed since it was "
                "registered (broker: %s). Pass reset=True to run() to wipe the query's state (the "
                "source cursor is kept), or use a new query_id." % (name, text.strip()),
                query=name,
                config_hash=config_hash,
                status=status,
                error=err,
                body=doc,
            )
        return StreamsError("%s refused by the broker: %s" % (what, text),
                            query=name, status=status, error=err, body=doc)

    doc = checked_object(requester, "POST", _REGISTER, what=what, body=body, idempotent=True,
                         require_success=True, refusal=refusal)
    if not isinstance(doc.get("query_id"), str) or not doc["query_id"]:
        raise ProtocolError("%s: the reply has no query_id" % what)
    return doc


def cycle(
    requester: Requester,
    *,
    query_id: str,
    partition_id: str,
    consumer_group: Optional[str],
    state_ops: Sequence[Mapping[str, Any]] = (),
    push_items: Sequence[Mapping[str, Any]] = (),
    ack: Optional[Mapping[str, Any]] = None,
    release_lease: bool = True,
    query: Optional[str] = None,
    nan_as_null: bool = False,
) -> Dict[str, Any]:
    """Commit one cycle: state ops, sink pushes and the source ack in one transaction.

    Args:
        query_id: the broker's query id (from :func:`register_query`); partition_id: the
            source partition id.
        consumer_group: the group whose cursor the ack moves (None = queue mode).
        state_ops: ``{"type": "upsert", "key", "value"}`` / ``{"type": "delete", "key"}``.
        push_items: ``{"queue", "partition", "payload", "transactionId"?}``.
        ack: ``{"transactionId", "leaseId", "status", "count"}`` of the batch's last message, or
            None (a flush cycle). With a ``leaseId`` the broker fences the cycle on it.
        release_lease: False keeps the source lease (a gate's partial ack).
        query: the query name, for error messages only.
        nan_as_null: payload NaN / ±Infinity are sent as ``null`` (the client's
            ``Queen(nan_as_null=)``) instead of refused with InvalidInputError.

    Returns:
        the reply ``{success, query_id, partition_id, queueName, state_ops_applied,
        push_results, ack_result}``.

    Raises:
        StreamsCycleError: the broker rolled the cycle back (``.lease_refused`` when the lease
            was refused). QueenConnectionError: the reply was lost (the cycle may have been
            applied); it is *not* resent here (the caller decides).

    Wire: ``POST /streams/v1/cycle``; retried only when certainly not processed.
    """
    body = {
        "query_id": query_id,
        "partition_id": partition_id,
        "consumer_group": consumer_group,
        "state_ops": list(state_ops),
        "push_items": list(push_items),
        "ack": dict(ack) if ack is not None else None,
        "release_lease": bool(release_lease),
    }
    what = "stream query %r: cycle on partition %s" % (query, partition_id)

    def refusal(doc: Dict[str, Any], status: int) -> StreamsError:
        return StreamsCycleError("%s rolled back by the broker: %s" % (what, doc.get("error")),
                                 query=query, status=status, error=_error_text(doc), body=doc)

    doc = checked_object(requester, "POST", _CYCLE, what=what, body=body, nan_as_null=nan_as_null,
                         idempotent=False, retry="unsent", affinity_key=partition_id,
                         require_success=True, refusal=refusal)
    ack_result = doc.get("ack_result")
    if ack is not None and not (isinstance(ack_result, dict) and ack_result.get("success") is True):
        raise ProtocolError("%s: the reply has no successful ack_result" % what)
    return doc


def get_state(
    requester: Requester,
    *,
    query_id: str,
    partition_id: str,
    keys: Optional[Sequence[str]] = None,
    key_prefix: Optional[str] = None,
    ripe_at_or_before: Optional[int] = None,
    query: Optional[str] = None,
) -> Dict[str, Any]:
    """Read state rows of one (query, partition).

    Args:
        keys: exact keys (None or empty = no key filter).
        key_prefix: the broker applies it as an *unescaped* SQL LIKE prefix (``_`` and ``%``
            are wildcards); None or ``""`` = no filter.
        ripe_at_or_before: epoch ms, an int: only rows whose ``value.windowEnd`` is a number
            ``<=`` it (a float would make the broker's procedure fail).

    Returns:
        ``{key: value}`` in the broker's order (keys sorted bytewise).

    Raises:
        InvalidInputError: a non-int ``ripe_at_or_before`` (nothing sent).
        StreamsError: the read failed; ProtocolError: a malformed reply.

    Wire: ``POST /streams/v1/state/get {query_id, partition_id, keys, key_prefix?,
    ripe_at_or_before?}`` (idempotent).
    """
    if ripe_at_or_before is not None and not _is_int(ripe_at_or_before):
        raise InvalidInputError("ripe_at_or_before must be an int (epoch ms), got %r" % (ripe_at_or_before,))
    body: Dict[str, Any] = {"query_id": query_id, "partition_id": partition_id, "keys": list(keys) if keys else []}
    if key_prefix:
        body["key_prefix"] = key_prefix
    if ripe_at_or_before is not None:
        body["ripe_at_or_before"] = ripe_at_or_before
    what = "stream query %r: state read on partition %s" % (query, partition_id)

    def refusal(doc: Dict[str, Any], status: int) -> StreamsError:
        return StreamsError("%s refused by the broker: %s" % (what, doc.get("error")),
                            query=query, status=status, error=_error_text(doc), body=doc)

    doc = checked_object(requester, "POST", _STATE, what=what, body=body, idempotent=True,
                         affinity_key=partition_id, require_success=True, refusal=refusal)
    rows = doc.get("rows")
    if not isinstance(rows, list):
        raise ProtocolError("%s: the reply has no rows list" % what)
    out: Dict[str, Any] = {}
    for row in rows:
        if isinstance(row, dict) and isinstance(row.get("key"), str):
            out[row["key"]] = row.get("value")
    return out


