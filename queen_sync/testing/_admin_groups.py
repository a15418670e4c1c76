"""Consumer-group routes of the embedded broker: ``GET /api/v1/consumer-groups``, ``/{g}`` and
``/lagging``; ``DELETE /api/v1/consumer-groups/{g}[/queues/{q}]``; ``POST .../{g}/subscription``
and the seeks (``.../{g}/queues/{q}/seek``, ``.../partitions/{p}/seek``).

The listing follows the real broker's ``get_consumer_groups_v4``: one entry per (group, queue),
sorted by group then queue, with ``members`` = the partitions the group has read,
``partitionsWithLag`` = those with messages past its cursor, ``maxTimeLag`` = the age (seconds)
of the newest message of a lagging partition, and ``state`` ``Lagging`` (over 300 s), ``Stable``
(it has acked something) or ``Dead``. Group detail and ``lagging`` measure lag from the oldest
message past the cursor; ``lagging`` lists lag strictly over ``minLagSeconds`` (default 3600).
Queue mode (``__QUEUE_MODE__``) is listed like any group. Lock held inside each function.
"""

from __future__ import annotations

import bisect
from typing import Any, Dict, List, Optional

from ._records import Row
from ._stats import Reply, live_lease_expiry, pending_after, pg_int
from ._util import EMPTY_BODY, BadRequest, fmt_ms, int_param, now_us, parse_ts_us


def groups(st: Any) -> Reply:
    """``GET /api/v1/consumer-groups``."""
    now = now_us()
    with st.lock:
        out = []
        for q in st.queues.values():
            for g in {g for p in q.partitions.values() for g in p.rows}:
                rows = [(p, p.rows[g]) for p in q.partitions.values() if g in p.rows]
                lags = []
                for p, r in rows:
                    pend = pending_after(p, r)
                    if pend:
                        lags.append(pg_int((now - pend[-1].created) / 1e6))
                max_lag = max(lags, default=0)
                meta = st.meta.get((g, q.name)) or {}
                state = "Lagging" if max_lag > 300 else (
                    "Stable" if any(r.last_consumed is not None for _, r in rows) else "Dead")
                out.append({"name": g, "queueName": q.name, "topics": [q.name], "members": len(rows),
                            "totalLag": None, "partitionsWithLag": len(lags), "maxTimeLag": max_lag,
                            "state": state, "subscriptionMode": meta.get("mode"),
                            "subscriptionTimestamp": fmt_ms(meta.get("ts")),
                            "subscriptionCreatedAt": fmt_ms(meta.get("created"))})
    out.sort(key=lambda e: (e["name"], e["queueName"]))
    return 200, out


def group_detail(st: Any, group: str) -> Reply:
    """``GET /api/v1/consumer-groups/{g}``: ``{queue: {partitions: [...]}}``."""
    now = now_us()
    with st.lock:
        out: Dict[str, Any] = {}
        for q in sorted(st.queues.values(), key=lambda q: q.name):
            parts = []
            for p in sorted(q.partitions.values(), key=lambda p: p.name):
                r = p.rows.get(group)
                if r is None:
                    continue
                pend = pending_after(p, r)
                exp = live_lease_expiry(st, r, now)
                parts.append({"partition": p.name, "totalConsumed": r.total_consumed,
                              "lastConsumedAt": fmt_ms(r.last_consumed), "offsetLag": len(pend),
                              "timeLagSeconds": pg_int((now - pend[0].created) / 1e6) if pend else 0,
                              "leaseActive": exp is not None, "workerId": r.lease_id if exp else None})
            if parts:
                out[q.name] = {"partitions": parts}
    return 200, out


def lagging(st: Any, params: Dict[str, str]) -> Reply:
    """``GET /api/v1/consumer-groups/lagging?minLagSeconds=3600`` (snake_case keys)."""
    min_lag = int_param(params.get("minLagSeconds"), 3600)
    now = now_us()
    with st.lock:
        out: List[Dict[str, Any]] = []
        for q in st.queues.values():
            for p in q.partitions.values():
                for g, r in p.rows.items():
                    pend = pending_after(p, r)
                    if not pend:
                        continue
                    lag = pg_int((now - pend[0].created) / 1e6)
                    if lag <= min_lag:
                        continue
                    exp = live_lease_expiry(st, r, now)
                    out.append({"consumer_group": g, "queue_name": q.name, "partition_name": p.name,
                                "partition_id": p.id, "worker_id": r.lease_id if exp else None,
                                "offset_lag": len(pend), "time_lag_seconds": lag,
                                "lag_hours": round(lag / 3600.0, 2),
                                "oldest_unconsumed_at": fmt_ms(pend[0].created),
                                "last_consumed_at": fmt_ms(r.last_consumed)})
    out.sort(key=lambda e: e["time_lag_seconds"], reverse=True)
    return 200, out if out else EMPTY_BODY  # none lagging: the real broker sends no body (0.15.1)


def delete_group(st: Any, group: str, params: Dict[str, str], queue: Optional[str] = None) -> Reply:
    """``DELETE /api/v1/consumer-groups/{g}[/queues/{q}]?deleteMetadata=true``."""
    delete_meta = params.get("deleteMetadata", "true") in ("true", "1")
    with st.lock:
        n = 0
        qs = [st.queues[queue]] if queue is not None and queue in st.queues else \
            ([] if queue is not None else list(st.queues.values()))
        for q in qs:
            for p in q.partitions.values():
                if p.rows.pop(group, None) is not None:
                    n += 1
            st._notify(q.name)
        if delete_meta:
            for key in [k for k in st.meta if k[0] == group and (queue is None or k[1] == queue)]:
                del st.meta[key]
    body = {"success": True, "consumerGroup": group, "deletedPartitions": n, "metadataDeleted": delete_meta}
    if queue is not None:
        body["queueName"] = queue
    return 200, body


def update_subscription(st: Any, group: str, body: Any) -> Reply:
    """``POST /api/v1/consumer-groups/{g}/subscription`` ``{subscriptionTimestamp}``."""
    ts_text = body.get("subscriptionTimestamp") if isinstance(body, dict) else None
    if not ts_text:
        raise BadRequest("Missing subscriptionTimestamp in request body")
    ts = parse_ts_us(ts_text)
    with st.lock:
        n = 0
        for key, meta in st.meta.items():
            if key[0] == group and ts is not None:
                meta["ts"] = ts
                meta["mode"] = "timestamp"
                n += 1
    return 200, {"success": True, "consumerGroup": group, "newTimestamp": ts_text, "rowsUpdated": n}


def _move_cursor(r: Row, cursor: int) -> None:
    """A seek's effect on one (partition, group) row: the cursor set, the lease and the batch
    and retry counts dropped."""
    r.cursor = cursor
    r.lease_id = None
    r.batch_size = 0
    r.acked = 0
    r.retry = 0


def seek_partition(st: Any, group: str, queue: str, partition: str) -> Reply:
    """``POST /api/v1/consumer-groups/{g}/queues/{q}/partitions/{p}/seek``: to the end.

    As the real broker (0.15.1, 2026-12-02): only a group that has a cursor on the partition
    moves (to its newest message, its lease released: ``updated: true``); for any other
    nothing changes (``updated: false``) and its first pop still starts where it would have.
    ``cursorMovedTo`` is the newest message's time either way."""
    with st.lock:
        q = st.queues.get(queue)
        p = q.partitions.get(partition) if q is not None else None
        if p is None:
            return 200, {"success": False, "error": "Partition not found"}
        r = p.rows.get(group)
        if r is not None:
            _move_cursor(r, len(p.messages))
            st._notify(queue)
        newest = p.created_list[-1] if p.created_list else None
    return 200, {"success": True, "consumerGroup": group, "queueName": queue, "partitionName": partition,
                 "cursorMovedTo": fmt_ms(newest) if newest is not None else None, "updated": r is not None}


def seek(st: Any, group: str, queue: str, body: Any) -> Reply:
    """``POST /api/v1/consumer-groups/{g}/queues/{q}/seek``: to the end (``{toEnd: true}``)
    or to a timestamp, every partition of the queue."""
    to_end = isinstance(body, dict) and body.get("toEnd") is True
    ts_text = body.get("timestamp") if isinstance(body, dict) else None
    if not to_end and not ts_text:
        raise BadRequest("Must specify either 'toEnd': true or 'timestamp'")
    ts = None if to_end else parse_ts_us(ts_text)
    now = now_us()
    with st.lock:
        q = st.queues.get(queue)
        n = 0
        if q is not None:
            for p in q.partitions.values():
                r = p.rows.get(group)
                if r is None:
                    r = Row(group, 0, now)
                    p.rows[group] = r
                at = len(p.messages) if to_end else bisect.bisect_right(p.created_list, ts if ts is not None else 0)
                _move_cursor(r, at)
                n += 1
            st._notify(queue)
    body_out = {"success": True, "consumerGroup": group, "queueName": queue, "seekToEnd": to_end,
                "targetTimestamp": None if to_end else ts_text, "partitionsUpdated": n}
    return 200, body_out
