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
from ._util import BadRequest, fmt_ms, int_param, now_us, parse_ts_us


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
    return 200, out


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


def seek(st: Any, group: str, queue: str, body: Any, partition: Optional[str] = None) -> Reply:
    """The seeks: to the end (``{toEnd: true}``, and always for one partition) or to a timestamp."""
    to_end = partition is not None or (isinstance(body, dict) and body.get("toEnd") is True)
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
                if partition is not None and p.name != partition:
                    continue
                r = p.rows.get(group)
                if r is None:
                    r = Row(group, 0, now)
                    p.rows[group] = r
                if to_end:
                    r.cursor = len(p.messages)
                else:
                    r.cursor = bisect.bisect_right(p.created_list, ts if ts is not None else 0)
                r.lease_id = None
                r.batch_size = 0
                r.acked = 0
                r.retry = 0
                n += 1
            st._notify(queue)
    body_out = {"success": True, "consumerGroup": group, "queueName": queue, "seekToEnd": to_end,
                "targetTimestamp": None if to_end else ts_text, "partitionsUpdated": n}
    if partition is not None:
        body_out["partitionName"] = partition
    return 200, body_out
