"""Consumer-group routes: list, read, lagging, delete, subscription timestamp and seek.

Names are already validated (URL-safe) and timestamps are the broker's text. Every reply is
checked (see :func:`queen_sync.wire._base.checked`).
"""

# mypy: no-warn-return-any
# (the functions return the broker's decoded JSON body, typed Any by ``checked``)

from __future__ import annotations

from typing import Any, Dict, List, Optional

from ._base import Requester, checked, checked_list, query_params

__all__ = ["list_groups", "group", "lagging", "delete", "set_subscription", "seek", "seek_partition_to_end"]


def list_groups(requester: Requester) -> Any:
    """Wire: ``GET /api/v1/consumer-groups``."""
    return checked(requester, "GET", "/api/v1/consumer-groups", what="admin.list_consumer_groups()")


def group(requester: Requester, name: str) -> Any:
    """Wire: ``GET /api/v1/consumer-groups/{name}`` (``lagging`` is another route)."""
    return checked(requester, "GET", "/api/v1/consumer-groups/%s" % name, what="admin.get_consumer_group(%r)" % name)


def lagging(requester: Requester, min_lag_seconds: int) -> List[Dict[str, Any]]:
    """Wire: ``GET /api/v1/consumer-groups/lagging?minLagSeconds=``; ``[]`` when none lags (a
    0.15 broker then answers 200 with no body).

    Raises:
        ProtocolError: the reply is not a JSON array; else as :func:`checked_list`.
    """
    return checked_list(requester, "GET", "/api/v1/consumer-groups/lagging", what="admin.get_lagging_consumers()",
                        query=query_params(minLagSeconds=min_lag_seconds))


def delete(requester: Requester, name: str, delete_metadata: bool, queue: Optional[str] = None) -> Any:
    """Wire: ``DELETE /api/v1/consumer-groups/{name}[/queues/{queue}]?deleteMetadata=true|false``."""
    path = "/api/v1/consumer-groups/%s" % name
    if queue is not None:
        path += "/queues/%s" % queue
    return checked(
        requester,
        "DELETE",
        path,
        what="delete of consumer group %r" % name,
        query=query_params(deleteMetadata=delete_metadata),
    )


def set_subscription(requester: Requester, name: str, timestamp: str) -> Any:
    """Wire: ``POST /api/v1/consumer-groups/{name}/subscription`` ``{"subscriptionTimestamp": ts}`` (idempotent)."""
    return checked(
        requester,
        "POST",
        "/api/v1/consumer-groups/%s/subscription" % name,
        body={"subscriptionTimestamp": timestamp},
        what="subscription update of consumer group %r" % name,
        idempotent=True,
    )


def seek(requester: Requester, name: str, queue: str, *, to_end: bool, timestamp: Optional[str]) -> Any:
    """Seek to the end (``to_end``) or to ``timestamp``. A timestamp seek is idempotent; a seek
    to the end is sent with ``RETRY_IF_UNSENT`` (a resend after a lost reply would also skip
    messages pushed in between).
    Wire: ``POST /api/v1/consumer-groups/{name}/queues/{queue}/seek`` ``{"toEnd": true}`` | ``{"timestamp": ts}``."""
    body: Dict[str, Any] = {"toEnd": True} if to_end else {"timestamp": timestamp}
    return checked(
        requester,
        "POST",
        "/api/v1/consumer-groups/%s/queues/%s/seek" % (name, queue),
        body=body,
        what="seek of consumer group %r on queue %r" % (name, queue),
        idempotent=not to_end,
    )


def seek_partition_to_end(requester: Requester, name: str, queue: str, partition: str) -> Any:
    """Not resent after a lost reply (see :func:`seek`); ``{}`` is sent as the body.
    Wire: ``POST /api/v1/consumer-groups/{name}/queues/{queue}/partitions/{partition}/seek``."""
    return checked(
        requester,
        "POST",
        "/api/v1/consumer-groups/%s/queues/%s/partitions/%s/seek" % (name, queue, partition),
        what="seek of consumer group %r on %s/%s" % (name, queue, partition),
        idempotent=False,
    )
