"""Status, analytics, statistics, maintenance and system routes.

Arguments are already validated by the caller; ``None`` filters are not sent. Every reply
is checked (see :func:`queen_sync.wire._base.checked`).
"""

# mypy: no-warn-return-any
# (the functions return the broker's decoded JSON body, typed Any by ``checked``)

from __future__ import annotations

from typing import Any, List, Optional

from ._base import Requester, checked, checked_list, query_params

__all__ = [
    "status",
    "queue_stats",
    "queue_detail",
    "queue_messages",
    "analytics",
    "replica_series",
    "postgres_stats",
    "refresh_stats",
    "health",
    "metrics",
    "maintenance",
    "set_maintenance",
    "pop_maintenance",
    "set_pop_maintenance",
]


def status(requester: Requester, *, from_: Optional[str], to: Optional[str]) -> Any:
    """Wire: ``GET /api/v1/status[?from=&to=]``."""
    return checked(requester, "GET", "/api/v1/status", what="admin.get_status()", query=query_params(**{"from": from_, "to": to}))


def queue_stats(
    requester: Requester,
    *,
    namespace: Optional[str],
    task: Optional[str],
    from_: Optional[str],
    to: Optional[str],
    limit: int,
    offset: int,
) -> Any:
    """Wire: ``GET /api/v1/status/queues?namespace=&task=&from=&to=&limit=&offset=``."""
    return checked(
        requester,
        "GET",
        "/api/v1/status/queues",
        what="admin.get_queue_stats()",
        query=query_params(namespace=namespace, task=task, limit=limit, offset=offset, **{"from": from_, "to": to}),
    )


def queue_detail(requester: Requester, name: str, *, what: Optional[str] = None) -> Any:
    """One queue's status with its options (``what`` names the call in errors).
    Wire: ``GET /api/v1/status/queues/{name}``."""
    return checked(
        requester, "GET", "/api/v1/status/queues/%s" % name, what=what or "admin.get_queue_detail(%r)" % name
    )


def queue_messages(requester: Requester, name: str, *, partition: Optional[str], limit: int) -> List[Any]:
    """Wire: ``GET /api/v1/status/queues/{name}/messages?partition=&limit=`` (no ``offset``: a
    0.15 broker answers any ``offset >= 1`` with ``{"success": true, "value": null}``).

    Returns ``[]`` for an unknown queue (the broker answers it with an empty body).

    Raises:
        ProtocolError: the reply is not a JSON array; else as :func:`checked_list`.
    """
    return checked_list(
        requester,
        "GET",
        "/api/v1/status/queues/%s/messages" % name,
        what="admin.get_queue_messages(%r)" % name,
        query=query_params(partition=partition, limit=limit),
    )


def analytics(
    requester: Requester,
    *,
    queue: Optional[str],
    namespace: Optional[str],
    task: Optional[str],
    interval: Optional[str],
    from_: Optional[str],
    to: Optional[str],
) -> Any:
    """Wire: ``GET /api/v1/status/analytics?from=&to=&queue=&namespace=&task=&interval=``."""
    return checked(
        requester,
        "GET",
        "/api/v1/status/analytics",
        what="admin.get_analytics()",
        query=query_params(
            queue=queue, namespace=namespace, task=task, interval=interval, **{"from": from_, "to": to}
        ),
    )


def replica_series(
    requester: Requester,
    route: str,
    *,
    what: str,
    hostname: Optional[str],
    worker_id: Optional[str],
    from_: Optional[str],
    to: Optional[str],
) -> Any:
    """A per-replica time series, ``route`` ``"system-metrics"`` or ``"worker-metrics"``.
    Wire: ``GET /api/v1/analytics/{route}?hostname=&workerId=&from=&to=``."""
    return checked(
        requester,
        "GET",
        "/api/v1/analytics/" + route,
        what=what,
        query=query_params(hostname=hostname, workerId=worker_id, **{"from": from_, "to": to}),
    )


def postgres_stats(requester: Requester) -> Any:
    """Wire: ``GET /api/v1/analytics/postgres-stats``."""
    return checked(requester, "GET", "/api/v1/analytics/postgres-stats", what="admin.get_postgres_stats()")


def refresh_stats(requester: Requester) -> Any:
    """Wire: ``POST /api/v1/stats/refresh``."""
    return checked(requester, "POST", "/api/v1/stats/refresh", what="admin.refresh_consumer_stats()")


def health(requester: Requester) -> Any:
    """Wire: ``GET /health`` (not retried: an unhealthy broker answers 503 at once)."""
    return checked(requester, "GET", "/health", what="admin.health()", idempotent=False)


def metrics(requester: Requester) -> Any:
    """Wire: ``GET /metrics``."""
    return checked(requester, "GET", "/metrics", what="admin.metrics()")


def maintenance(requester: Requester) -> Any:
    """Wire: ``GET /api/v1/system/maintenance``."""
    return checked(requester, "GET", "/api/v1/system/maintenance", what="admin.get_maintenance_mode()")


def set_maintenance(requester: Requester, enabled: bool) -> Any:
    """Wire: ``POST /api/v1/system/maintenance`` ``{"enabled": bool}`` (safe to resend)."""
    return checked(
        requester,
        "POST",
        "/api/v1/system/maintenance",
        body={"enabled": enabled},
        what="admin.set_maintenance_mode()",
        idempotent=True,
    )


def pop_maintenance(requester: Requester) -> Any:
    """Wire: ``GET /api/v1/system/maintenance/pop``."""
    return checked(requester, "GET", "/api/v1/system/maintenance/pop", what="admin.get_pop_maintenance_mode()")


def set_pop_maintenance(requester: Requester, enabled: bool) -> Any:
    """Wire: ``POST /api/v1/system/maintenance/pop`` ``{"enabled": bool}`` (safe to resend)."""
    return checked(
        requester,
        "POST",
        "/api/v1/system/maintenance/pop",
        body={"enabled": enabled},
        what="admin.set_pop_maintenance_mode()",
        idempotent=True,
    )
