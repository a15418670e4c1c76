"""Dispatch of the embedded broker's admin routes (everything but push, pop, ack, transaction,
lease, configure, queue delete, DLQ read and Streams) to the modules that answer them:

- :mod:`._admin_listing`: queue listings and queue detail (``/resources/*``, ``/status/queues*``);
- :mod:`._admin_dashboard`: overview, status, analytics and the ``/analytics/*`` metrics;
- :mod:`._admin_messages`: message listing, detail and delete, traces;
- :mod:`._admin_groups`: consumer groups (listing, detail, lagging, delete, subscription, seek);
- :mod:`._admin_system`: health, ``/metrics``, maintenance modes, statistics refresh.

Shapes follow the captures of a real Queen 0.15 broker (``scenario-admin-*.jsonl``); where the
captures show no case, the real broker's stored procedures.
"""

from __future__ import annotations

from typing import Any, Dict, Optional
from urllib.parse import unquote

from . import _admin_dashboard as dash
from . import _admin_groups as groups
from . import _admin_listing as listing
from . import _admin_messages as messages
from . import _admin_system as system
from ._stats import Reply

health = system.health


def _get(st: Any, path: str, segs: list, params: Dict[str, str]) -> Optional[Reply]:
    n = len(segs)
    if path == "/metrics":
        return system.metrics(st)
    if n < 4 or segs[1] != "api" or segs[2] != "v1":
        return None
    head = segs[3]
    if head == "resources":
        if n == 5:
            fn = {"queues": listing.list_queues, "overview": dash.overview, "namespaces": listing.namespaces,
                  "tasks": listing.tasks}.get(segs[4])
            return fn(st) if fn is not None else None
        if n == 6 and segs[4] == "queues" and segs[5]:
            return listing.queue_detail(st, segs[5])
    elif head == "status":
        if n == 4:
            return dash.status(st, params)
        if n == 5 and segs[4] == "queues":
            return listing.status_queues(st, params)
        if n == 5 and segs[4] == "analytics":
            return dash.analytics(st, params)
        if n == 6 and segs[4] == "queues" and segs[5]:
            return listing.status_queue(st, segs[5])
        if n == 7 and segs[4] == "queues" and segs[6] == "messages":
            return listing.status_queue_messages(st, segs[5], params)
    elif head == "consumer-groups":
        if n == 4:
            return groups.groups(st)
        if n == 5 and segs[4] == "lagging":
            return groups.lagging(st, params)
        if n == 5 and segs[4]:
            return groups.group_detail(st, segs[4])
    elif head == "messages":
        if n == 4:
            return messages.messages(st, params)
        if n == 6:
            return messages.message_detail(st, segs[4], segs[5])
    elif head == "traces":
        if n == 5 and segs[4] == "names":
            return messages.trace_names(st, params)
        if n == 6 and segs[4] == "by-name":
            return messages.traces_by_name(st, unquote(segs[5]), params)
        if n == 6:
            return messages.traces_for(st, segs[4], segs[5])
    elif head == "analytics" and n == 5:
        if segs[4] == "system-metrics":
            return dash.system_metrics(st, params)
        if segs[4] == "worker-metrics":
            return dash.worker_metrics(st, params)
        if segs[4] == "postgres-stats":
            return dash.postgres_stats(st)
    elif head == "system":
        if path == "/api/v1/system/maintenance":
            return system.maintenance_get(st)
        if path == "/api/v1/system/maintenance/pop":
            return system.pop_maintenance_get(st)
    return None


def route(st: Any, router: Any, method: str, path: str, params: Dict[str, str],
          raw: bytes) -> Optional[Reply]:
    """Answer an admin route, or return None when the route does not exist (404).
    ``router.parse_body(raw)`` decodes a request body (400 on a missing or malformed one)."""
    segs = path.split("/")
    n = len(segs)
    if method == "GET":
        return _get(st, path, segs, params)
    if method == "POST":
        if path == "/api/v1/traces":
            return messages.post_trace(st, router.parse_body(raw))
        if path == "/api/v1/stats/refresh":
            return system.stats_refresh(st)
        if path == "/api/v1/system/maintenance":
            return system.maintenance_set(st, router.parse_body(raw))
        if path == "/api/v1/system/maintenance/pop":
            return system.pop_maintenance_set(st, router.parse_body(raw))
        if n >= 5 and segs[1:4] == ["api", "v1", "consumer-groups"] and segs[4]:
            g = segs[4]
            if n == 6 and segs[5] == "subscription":
                return groups.update_subscription(st, g, router.parse_body(raw))
            if n == 8 and segs[5] == "queues" and segs[7] == "seek":
                return groups.seek(st, g, segs[6], router.parse_body(raw))
            if n == 10 and segs[5] == "queues" and segs[7] == "partitions" and segs[9] == "seek":
                return groups.seek_partition(st, g, segs[6], segs[8])
        return None
    if method == "DELETE":
        if n >= 5 and segs[1:4] == ["api", "v1", "consumer-groups"] and segs[4]:
            if n == 5:
                return groups.delete_group(st, segs[4], params)
            if n == 7 and segs[5] == "queues" and segs[6]:
                return groups.delete_group(st, segs[4], params, queue=segs[6])
        if n == 6 and segs[1:4] == ["api", "v1", "messages"]:
            return messages.delete_message(st, segs[4], segs[5])
    return None
