"""Queue listing routes of the embedded broker: ``/api/v1/resources/{queues,namespaces,tasks}``,
``/api/v1/resources/queues/{q}``, ``/api/v1/status/queues``, ``/api/v1/status/queues/{q}`` and
``/api/v1/status/queues/{q}/messages``.

Counts come from :mod:`._stats` (the real broker's statistics, always fresh here). The routes
differ the way the real broker's procedures do: the resources listings report ``pending`` without
the messages in flight (``pending - processing``), ``/status/queues`` reports both as stored;
namespace and task listings leave out the empty namespace/task. Lock held inside each function.
"""

from __future__ import annotations

from typing import Any, Dict, List

from ._records import QUEUE_MODE, Msg, Queue
from ._stats import COUNTS, Reply, all_queue_stats, dlq_counts, live_lease_expiry, partition_stats
from ._util import EMPTY_BODY, fmt_ms, now_us, paging


def _counts(s: Dict[str, Any]) -> Dict[str, int]:
    out = {k: s[k] for k in COUNTS}
    out["failed"] = 0  # the real broker's procedures report a literal 0
    return out


def _summary(q: Queue, s: Dict[str, Any], include_leased: bool) -> dict:
    pending = s["pending"] if include_leased else max(0, s["pending"] - s["processing"])
    return {"id": q.id, "name": q.name, "namespace": q.namespace, "task": q.task,
            "createdAt": fmt_ms(q.created), "partitions": s["partitions"],
            "messages": {"total": s["total"], "pending": pending, "processing": s["processing"]}}


def list_queues(st: Any) -> Reply:
    """``GET /api/v1/resources/queues``: every queue, newest first."""
    with st.lock:
        stats = all_queue_stats(st, now_us())
        qs = sorted(st.queues.values(), key=lambda q: q.created, reverse=True)
        return 200, {"queues": [_summary(q, stats[q.name], False) for q in qs]}


def status_queues(st: Any, params: Dict[str, str]) -> Reply:
    """``GET /api/v1/status/queues?namespace=&task=&limit=100&offset=0``."""
    limit, offset = paging(params, 100)
    with st.lock:
        qs = sorted(st.queues.values(), key=lambda q: q.created, reverse=True)
        if params.get("namespace"):
            qs = [q for q in qs if q.namespace == params["namespace"]]
        if params.get("task"):
            qs = [q for q in qs if q.task == params["task"]]
        stats = all_queue_stats(st, now_us())
        out = [_summary(q, stats[q.name], True) for q in qs[offset:offset + limit]]
    return 200, {"queues": out, "pagination": {"limit": limit, "offset": offset}}


def _grouped(st: Any, key: str) -> Reply:
    with st.lock:
        stats = all_queue_stats(st, now_us())
        acc: Dict[str, dict] = {}
        for q in st.queues.values():
            name = getattr(q, key)
            if not name:
                continue
            e = acc.setdefault(name, {key: name, "queues": 0, "partitions": 0, "total": 0, "pending": 0})
            s = stats[q.name]
            e["queues"] += 1
            e["partitions"] += len(q.partitions)
            e["total"] += s["total"]
            e["pending"] += s["pending"] - s["processing"]
    out = [{key: e[key], "queues": e["queues"], "partitions": e["partitions"],
            "messages": {"total": e["total"], "pending": max(0, e["pending"])}}
           for e in sorted(acc.values(), key=lambda e: e[key])]
    return 200, {key + "s": out}


def namespaces(st: Any) -> Reply:
    """``GET /api/v1/resources/namespaces`` (queues with a namespace only)."""
    return _grouped(st, "namespace")


def tasks(st: Any) -> Reply:
    """``GET /api/v1/resources/tasks`` (queues with a task only)."""
    return _grouped(st, "task")


def _partition_rows(st: Any, q: Queue, now: int, with_cursor: bool) -> List[dict]:
    dlq = dlq_counts(st)
    out = []
    for p in sorted(q.partitions.values(), key=lambda p: p.name):
        s = partition_stats(st, p, now, dlq)
        # oldestMessage/newestMessage stay null: the real broker fills them only once its
        # background job has seen the partition, and the captures show them null.
        r: Dict[str, Any] = {"id": p.id, "name": p.name, "createdAt": fmt_ms(p.created), "stats": _counts(s),
                             "oldestMessage": None, "newestMessage": None}
        if with_cursor:
            rows = list(p.rows.values())
            # The real procedure joins the partition's statistics rows (one per group) with its
            # cursor rows, so the cursor sums count every cursor once per group.
            fan_out = max(1, len(rows))
            consumed = [x.last_consumed for x in rows if x.last_consumed is not None]
            r["messages"] = dict(r["stats"])
            r["cursor"] = {"totalConsumed": fan_out * sum(x.total_consumed for x in rows),
                           "batchesConsumed": fan_out * sum(x.batches_consumed for x in rows)}
            r["lastActivity"] = fmt_ms(max(consumed)) if consumed else None
        out.append(r)
    return out


def _totals(parts: List[dict]) -> Dict[str, Any]:
    return {k: sum(r["stats"][k] for r in parts) for k in COUNTS + ("failed",)}


def queue_detail(st: Any, name: str) -> Reply:
    """``GET /api/v1/resources/queues/{q}``: partitions (by name) with their counts, and totals."""
    with st.lock:
        q = st.queues.get(name)
        if q is None:
            return 200, {"error": "Queue not found"}
        parts = _partition_rows(st, q, now_us(), False)
        return 200, {"id": q.id, "name": q.name, "namespace": q.namespace, "task": q.task,
                     "createdAt": fmt_ms(q.created), "partitions": parts, "totals": _totals(parts)}


def status_queue(st: Any, name: str) -> Reply:
    """``GET /api/v1/status/queues/{q}``: queue config, partitions with counts and cursor, totals."""
    with st.lock:
        q = st.queues.get(name)
        if q is None:
            return 200, {"error": "Queue not found"}
        parts = _partition_rows(st, q, now_us(), True)
        totals = _totals(parts)
        totals["messages"] = dict(totals)
        o = q.options
        return 200, {"queue": {"id": q.id, "name": q.name, "namespace": q.namespace, "task": q.task,
                               "priority": o.get("priority", 0), "createdAt": fmt_ms(q.created),
                               "config": {"leaseTime": o["leaseTime"], "retryLimit": o["retryLimit"],
                                          "retryDelay": o["retryDelay"], "ttl": o["ttl"],
                                          "deadLetterQueue": o["deadLetterQueue"],
                                          "maxQueueSize": o["maxSize"]}},
                     "partitions": parts, "totals": totals}


def queue_mode_status(st: Any, m: Msg, now: int) -> str:
    """A message's status as queue mode sees it: completed (past the cursor), processing (a
    queue-mode lease is live on its partition), else pending. DLQ is the caller's business."""
    row = m.partition.rows.get(QUEUE_MODE)
    if row is not None and row.cursor > m.idx:
        return "completed"
    if live_lease_expiry(st, row, now) is not None:
        return "processing"
    return "pending"


def sorted_messages(queues: List[Queue], partition: Any = None) -> List[Msg]:
    """Stored messages of ``queues`` (optionally one partition name), newest first."""
    msgs = [m for q in queues for p in q.partitions.values() if partition in (None, "", p.name)
            for m in p.messages if not m.deleted]
    msgs.sort(key=lambda m: (m.created, m.id), reverse=True)
    return msgs


def status_queue_messages(st: Any, name: str, params: Dict[str, str]) -> Reply:
    """``GET /api/v1/status/queues/{q}/messages``: every stored message, newest first.

    Like the real broker's ``get_queue_messages_v1``, which applies ``LIMIT``/``OFFSET`` to its
    one aggregated row: ``limit`` (>= 1) does not cap the list, ``partition`` is not read, and
    ``offset >= 1`` (or ``limit <= 0``) leaves no row, which the broker answers as
    ``{"success": true, "value": null}``."""
    limit, offset = paging(params, 50)
    if limit <= 0 or offset >= 1:
        return 200, {"success": True, "value": None}
    now = now_us()
    with st.lock:
        q = st.queues.get(name)
        if q is None:
            return 200, EMPTY_BODY  # the real broker: 200, no body (Queen 0.15.1, 2026-12-02)
        dead = {id(d["msg"]) for d in st.dlq}
        out = [{"id": m.id, "transactionId": m.txid, "partitionId": m.partition.id,
                "partition": m.partition.name, "queue": q.name, "queuePath": q.name + "/" + m.partition.name,
                "createdAt": fmt_ms(m.created),
                "status": "dead_letter" if id(m) in dead else queue_mode_status(st, m, now)}
               for m in sorted_messages([q])]
    return 200, out
