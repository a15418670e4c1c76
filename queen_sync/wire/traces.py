"""Trace routes: record a trace on a message, read traces by name or by message.

Arguments are already validated by the caller. Every reply is checked (see
:func:`queen_sync.wire._base.checked`).
"""

# mypy: no-warn-return-any
# (the functions return the broker's decoded JSON body, typed Any by ``checked``)

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional
from urllib.parse import quote

from ._base import Requester, checked, checked_object, query_params

__all__ = ["record", "by_name", "names", "for_message"]


def record(
    requester: Requester,
    *,
    transaction_id: str,
    partition_id: str,
    group: str,
    names: Optional[List[str]],
    event_type: str,
    data: Mapping[str, Any],
    nan_as_null: bool = False,
) -> Any:
    """Record one trace (NaN / ±Infinity in ``data`` sent as null with ``nan_as_null``, else
    refused). Wire: ``POST /api/v1/traces`` ``{transactionId, partitionId, consumerGroup,
    traceNames, eventType, data}`` (not resent once sent)."""
    body = {
        "transactionId": transaction_id,
        "partitionId": partition_id,
        "consumerGroup": group,
        "traceNames": names,
        "eventType": event_type,
        "data": dict(data),
    }
    return checked(requester, "POST", "/api/v1/traces", body=body, what="trace of message %s" % transaction_id,
                   nan_as_null=nan_as_null)


def by_name(requester: Requester, name: str, *, limit: int, offset: int) -> Dict[str, Any]:
    """``name`` is any text, URL-encoded here (the broker decodes this path segment).
    Wire: ``GET /api/v1/traces/by-name/{name}?limit=&offset=``.

    Raises:
        ProtocolError: the reply is not a JSON object; else as :func:`checked_object`.
    """
    return checked_object(
        requester,
        "GET",
        "/api/v1/traces/by-name/%s" % quote(name, safe=""),
        what="admin.get_traces_by_name(%r)" % name,
        query=query_params(limit=limit, offset=offset),
    )


def names(requester: Requester, *, limit: int, offset: int) -> Any:
    """Wire: ``GET /api/v1/traces/names?limit=&offset=``."""
    return checked(
        requester, "GET", "/api/v1/traces/names", what="admin.get_trace_names()", query=query_params(limit=limit, offset=offset)
    )


def for_message(requester: Requester, partition_id: str, transaction_id: str) -> Any:
    """Wire: ``GET /api/v1/traces/{partitionId}/{transactionId}``."""
    path = "/api/v1/traces/%s/%s" % (partition_id, transaction_id)
    return checked(requester, "GET", path, what="admin.get_traces_for_message()")
