"""Queue and stored-message routes: configure, queue delete, the ``/api/v1/resources``
reads and the ``/api/v1/messages`` routes.

Arguments are already validated by the caller (names URL-safe, numbers in range,
timestamps as the broker's text); ``None`` filters are not sent. Every reply is checked
(see :func:`queen_sync.wire._base.checked`).
"""

# mypy: no-warn-return-any
# (the functions return the broker's decoded JSON body, typed Any by ``checked``)

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

from ._base import Requester, checked, checked_object, query_params

__all__ = [
    "configure",
    "delete_queue",
    "overview",
    "namespaces",
    "tasks",
    "queues",
    "queue",
    "partitions",
    "clear_queue",
    "messages",
    "message",
    "delete_message",
    "retry_message",
    "move_message_to_dlq",
]


def configure(
    requester: Requester,
    queue: str,
    options: Mapping[str, Any],
    *,
    namespace: Optional[str] = None,
    task: Optional[str] = None,
) -> Dict[str, Any]:
    """Create or reconfigure ``queue`` with every option of ``options`` (camelCase).

    Returns ``{configured, queue, queueId, partitionId, namespace, task, options}``.
    Raises BrokerError (a refusal) or ProtocolError (not a JSON object).
    Wire: ``POST /api/v1/configure`` ``{queue, namespace?, task?, options}`` (idempotent).
    """
    body: Dict[str, Any] = {"queue": queue}
    if namespace is not None:
        body["namespace"] = namespace
    if task is not None:
        body["task"] = task
    body["options"] = dict(options)
    return checked_object(
        requester, "POST", "/api/v1/configure", body=body, what="configure of queue %r" % queue, idempotent=True
    )


def delete_queue(requester: Requester, queue: str) -> Dict[str, Any]:
    """Delete ``queue`` and its messages: ``{deleted: True, existed, queue}``.
    Wire: ``DELETE /api/v1/resources/queues/{queue}`` (idempotent)."""
    return checked_object(requester, "DELETE", "/api/v1/resources/queues/%s" % queue, what="delete of queue %r" % queue)


def overview(requester: Requester) -> Any:
    """Wire: ``GET /api/v1/resources/overview``."""
    return checked(requester, "GET", "/api/v1/resources/overview", what="admin.get_overview()")


def namespaces(requester: Requester) -> Any:
    """Wire: ``GET /api/v1/resources/namespaces``."""
    return checked(requester, "GET", "/api/v1/resources/namespaces", what="admin.get_namespaces()")


def tasks(requester: Requester) -> Any:
    """Wire: ``GET /api/v1/resources/tasks``."""
    return checked(requester, "GET", "/api/v1/resources/tasks", what="admin.get_tasks()")


def queues(requester: Requester) -> Any:
    """Wire: ``GET /api/v1/resources/queues``."""
    return checked(requester, "GET", "/api/v1/resources/queues", what="admin.list_queues()")


def queue(requester: Requester, name: str) -> Any:
    """Wire: ``GET /api/v1/resources/queues/{name}``."""
    return checked(requester, "GET", "/api/v1/resources/queues/%s" % name, what="admin.get_queue(%r)" % name)


def partitions(requester: Requester, queue: Optional[str]) -> Any:
    """Not a 0.15 route (raises RouteNotFoundError there). Wire: ``GET /api/v1/resources/partitions[?queue=]``."""
    return checked(
        requester, "GET", "/api/v1/resources/partitions", what="admin.get_partitions()", query=query_params(queue=queue)
    )


def clear_queue(requester: Requester, name: str, partition: Optional[str]) -> Any:
    """Not a 0.15 route (raises RouteNotFoundError there). Wire: ``DELETE /api/v1/queues/{name}/clear[?partition=]``."""
    return checked(
        requester,
        "DELETE",
        "/api/v1/queues/%s/clear" % name,
        what="admin.clear_queue(%r)" % name,
        query=query_params(partition=partition),
    )


def messages(
    requester: Requester,
    *,
    queue: Optional[str],
    partition: Optional[str],
    namespace: Optional[str],
    task: Optional[str],
    status: Optional[str],
    from_: Optional[str],
    to: Optional[str],
    limit: int,
    offset: int,
) -> Any:
    """Wire: ``GET /api/v1/messages?queue=&partition=&ns=&task=&status=&from=&to=&limit=&offset=``."""
    return checked(
        requester,
        "GET",
        "/api/v1/messages",
        what="admin.list_messages()",
        query=query_params(
            queue=queue,
            partition=partition,
            ns=namespace,
            task=task,
            status=status,
            **{"from": from_, "to": to},
            limit=limit,
            offset=offset,
        ),
    )


def message(requester: Requester, partition_id: str, transaction_id: str) -> Any:
    """Wire: ``GET /api/v1/messages/{partitionId}/{transactionId}``."""
    path = "/api/v1/messages/%s/%s" % (partition_id, transaction_id)
    return checked(requester, "GET", path, what="admin.get_message()")


def delete_message(requester: Requester, partition_id: str, transaction_id: str) -> Any:
    """Wire: ``DELETE /api/v1/messages/{partitionId}/{transactionId}``."""
    path = "/api/v1/messages/%s/%s" % (partition_id, transaction_id)
    return checked(requester, "DELETE", path, what="admin.delete_message()")


def retry_message(requester: Requester, partition_id: str, transaction_id: str) -> Any:
    """Not a 0.15 route. Wire: ``POST /api/v1/messages/{pid}/{tx}/retry``."""
    path = "/api/v1/messages/%s/%s/retry" % (partition_id, transaction_id)
    return checked(requester, "POST", path, what="admin.retry_message()")


def move_message_to_dlq(requester: Requester, partition_id: str, transaction_id: str) -> Any:
    """Not a 0.15 route. Wire: ``POST /api/v1/messages/{pid}/{tx}/dlq``."""
    path = "/api/v1/messages/%s/%s/dlq" % (partition_id, transaction_id)
    return checked(requester, "POST", path, what="admin.move_message_to_dlq()")
