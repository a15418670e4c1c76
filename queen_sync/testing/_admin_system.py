"""System routes of the embedded broker: ``GET /health``, ``GET /metrics``,
``GET``/``POST /api/v1/system/maintenance`` (push maintenance: pushes are buffered),
``GET``/``POST /api/v1/system/maintenance/pop`` and ``POST /api/v1/stats/refresh``.

Statistics are computed on demand here (:mod:`._stats`), so a refresh has nothing to do; it
answers the real broker's reply with the counts of what it would have refreshed. ``/metrics``
is a stub on the real broker (zeros) and is one here too.
"""

from __future__ import annotations

from typing import Any

from ._stats import Reply
from ._util import BadRequest


def health(st: Any) -> dict:
    """Body of ``GET /health``."""
    return {"status": "healthy", "database": "connected", "server": "C++ Queen Server (libqueen)",
            "worker_id": 0, "version": "1.0.0",
            "queen": {"worker_id": 0, "status": "active"},
            "shared_state": {"enabled": False, "maintenance_mode": st.maintenance,
                             "pop_maintenance_mode": st.pop_maintenance,
                             "queue_config_cache": {"hit_rate": 0.0, "hits": 0, "misses": 0,
                                                    "size": len(st.queues)},
                             "running": False,
                             "server_health": {"heartbeats_received": 0, "restarts_detected": 0,
                                               "servers_alive": 0, "servers_dead": 0, "servers_tracked": 0},
                             "server_id": "embedded"}}


def metrics(st: Any) -> Reply:
    """``GET /metrics``: the real broker answers this fixed shape with zeros."""
    return 200, {"uptime": 0, "requests": {"total": 0, "rate": 0}, "messages": {"total": 0, "rate": 0},
                 "database": {"poolSize": 0, "idleConnections": 0, "waitingRequests": 0},
                 "memory": {"rss": 0, "heapTotal": 0, "heapUsed": 0, "external": 0, "arrayBuffers": 0},
                 "cpu": {"user": 0, "system": 0}}


def maintenance_get(st: Any) -> Reply:
    """``GET /api/v1/system/maintenance``."""
    with st.lock:
        buffered = len(st.push_buffer)
    return 200, {"maintenanceMode": st.maintenance, "popMaintenanceMode": st.pop_maintenance,
                 "bufferedMessages": buffered, "bufferHealthy": True,
                 "bufferStats": {"dbHealthy": True, "failedCount": 0, "pendingCount": buffered,
                                 "failedFiles": {"count": 0, "failoverCount": 0, "qos0Count": 0,
                                                 "totalBytes": 0, "totalMB": 0.0}}}


def maintenance_set(st: Any, body: Any) -> Reply:
    """``POST /api/v1/system/maintenance`` ``{enabled}``; switching off writes the buffered pushes."""
    if not isinstance(body, dict) or not isinstance(body.get("enabled"), bool):
        raise BadRequest("enabled (boolean) is required")
    enabled = body["enabled"]
    st.maintenance = enabled
    flushed = 0
    if not enabled:
        with st.lock:
            pending, st.push_buffer = st.push_buffer, []
        if pending:
            st.push(pending)
            flushed = len(pending)
    msg = ("Maintenance mode ENABLED. All PUSH operations will be buffered." if enabled else
           "Maintenance mode DISABLED. %d buffered messages were written." % flushed)
    return 200, {"maintenanceMode": enabled, "bufferedMessages": len(st.push_buffer),
                 "bufferHealthy": True, "message": msg}


def pop_maintenance_get(st: Any) -> Reply:
    """``GET /api/v1/system/maintenance/pop``."""
    on = st.pop_maintenance
    return 200, {"popMaintenanceMode": on,
                 "message": ("Pop maintenance mode is ON. All POP operations return empty arrays." if on else
                             "Pop maintenance mode is OFF. Normal operation.")}


def pop_maintenance_set(st: Any, body: Any) -> Reply:
    """``POST /api/v1/system/maintenance/pop`` ``{enabled}``; wakes every long poll."""
    if not isinstance(body, dict) or not isinstance(body.get("enabled"), bool):
        raise BadRequest("enabled (boolean) is required")
    on = body["enabled"]
    with st.lock:
        st.pop_maintenance = on
        for c in st.conds.values():
            c.notify_all()
    return 200, {"popMaintenanceMode": on,
                 "message": ("Pop maintenance mode ENABLED. All POP operations will return empty arrays."
                             if on else "Pop maintenance mode DISABLED. Normal operation resumed.")}


def stats_refresh(st: Any) -> Reply:
    """``POST /api/v1/stats/refresh``: what a forced refresh of the real broker would report."""
    with st.lock:
        qs = list(st.queues.values())
        rows = sum(len(p.rows) for q in qs for p in q.partitions.values())
    return 200, {"queue": {"queuesUpdated": len(qs)},
                 "namespace": {"namespacesUpdated": len({q.namespace for q in qs if q.namespace})},
                 "task": {"tasksUpdated": len({q.task for q in qs if q.task})},
                 "system": {"systemUpdated": 1},
                 "partition": {"dirtyPartitionsScanned": rows, "newPartitions": 0,
                               "partitionsSkippedByWatermark": 0, "partitionsUpdated": 0},
                 "cleanup": {"orphanedDeleted": 0}}
