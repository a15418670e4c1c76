"""Dashboard routes of the embedded broker: ``/api/v1/resources/overview``, ``/api/v1/status``,
``/api/v1/status/analytics`` and ``/api/v1/analytics/{system-metrics,worker-metrics,postgres-stats}``.

Message counts come from :mod:`._stats`, request counters and their per-minute time series from
:mod:`._metrics`, each where the real broker takes them (``get_system_overview_v3``,
``get_status_v3``, ``get_analytics_v1``, ``get_worker_metrics_timeseries_v1``). What only a real
deployment has (event-loop lag, CPU, memory, database pool, PostgreSQL statistics) is answered
with the same structure and zero, null or empty values.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from ._metrics import MINUTE_US, bucket_minutes, regroup
from ._stats import Reply, all_queue_stats, live_lease_expiry, pg_int, system_stats
from ._util import fmt_ms, now_us, parse_ts_us

HOUR_US = 60 * MINUTE_US


def _fmt_s(us: int) -> str:
    """``YYYY-MM-DDTHH:MM:SSZ`` (the time-series timestamps have no milliseconds)."""
    text = fmt_ms(us)
    assert text is not None
    return text[:19] + "Z"


def _window(params: Dict[str, str], default_us: int) -> tuple:
    now = now_us()
    to = parse_ts_us(params.get("to")) or now
    frm = parse_ts_us(params.get("from")) or (now - default_us)
    return frm, to


def _ratio(a: int, b: int) -> float:
    return round(a / float(b), 2) if b else 0


def overview(st: Any) -> Reply:
    """``GET /api/v1/resources/overview``."""
    now = now_us()
    with st.lock:
        per_queue = all_queue_stats(st, now)
        system = system_stats(st, per_queue)
        qs = list(st.queues.values())
    totals = st.metrics.snapshot()
    recent = st.metrics.recent(5)
    pops = recent["pop_msg"]
    return 200, {
        "queues": len(qs), "partitions": system["partitions"],
        "namespaces": len({q.namespace for q in qs if q.namespace}),
        "tasks": len({q.task for q in qs if q.task}),
        "messages": {"total": totals["push_msg"],
                     "pending": max(0, system["pending"] - system["processing"]),
                     "processing": system["processing"], "completed": totals["ack_ok"],
                     "failed": totals["ack_fail"], "deadLetter": totals["dlq"]},
        "lag": {"time": {"avg": recent["lag_sum_ms"] // pops // 1000 if pops else 0,  # bigint division
                         "median": system["medianLagSeconds"], "min": 0,
                         "max": recent["lag_max_ms"] // 1000},
                "offset": {"avg": system["avgOffsetLag"], "median": 0, "min": 0,
                           "max": system["maxOffsetLag"]}},
        "throughput": {"ingestedPerSecond": round(recent["push_msg"] / 300.0, 2),
                       "processedPerSecond": round(recent["ack_msg"] / 300.0, 2)},
        "timestamp": fmt_ms(now), "statsAge": 0,
    }


def _throughput(st: Any, frm: int, to: int, width: int, queues: Optional[set]) -> List[dict]:
    rows = st.metrics.buckets(frm, to)
    if queues is None:
        series = [(t, g) for t, g, _ in rows]
    else:  # per-queue counters (queue_lag_metrics), summed over the selected queues
        series = []
        for t, _, per_queue in rows:
            acc: Dict[str, int] = {}
            for name, b in per_queue.items():
                if name in queues:
                    for k, v in b.items():
                        acc[k] = max(acc.get(k, 0), v) if k == "lag_max_ms" else acc.get(k, 0) + v
            if acc:
                series.append((t, acc))
    secs = width * 60.0
    out = []
    for t, b in regroup(series, width):
        processed = b["ack_msg"] if queues is None else b["ack_ok"] + b["ack_fail"]
        out.append({"timestamp": _fmt_s(t), "ingested": b["push_msg"], "processed": processed,
                    "popMessages": b["pop_msg"], "ingestedPerSecond": round(b["push_msg"] / secs, 2),
                    "processedPerSecond": round(processed / secs, 2),
                    "popPerSecond": round(b["pop_msg"] / secs, 2),
                    "avgLagMs": round(b["lag_sum_ms"] / float(b["pop_msg"]), 2) if b["pop_msg"] else 0,
                    "maxLagMs": b["lag_max_ms"], "avgEventLoopLagMs": 0, "maxEventLoopLagMs": 0,
                    "minFreeSlots": 0, "dbErrors": 0, "ackFailed": b["ack_fail"], "dlqCount": b["dlq"],
                    "queenCpuUserPct": None, "queenCpuSysPct": None, "queenRssMb": None,
                    "dbPoolActive": None, "dbPoolIdle": None, "dbPoolSize": None})
    return out


def status(st: Any, params: Dict[str, str]) -> Reply:
    """``GET /api/v1/status?from=&to=&queue=&namespace=&task=``."""
    frm, to = _window(params, HOUR_US)
    now = now_us()
    width = bucket_minutes(frm, to)
    qn, ns, task = params.get("queue"), params.get("namespace"), params.get("task")
    with st.lock:
        per_queue = all_queue_stats(st, now)
        selected = [q for q in st.queues.values() if (not qn or q.name == qn)
                    and (not ns or q.namespace == ns) and (not task or q.task == task)]
        queues = [{"id": q.id, "name": q.name, "namespace": q.namespace, "task": q.task,
                   "partitions": per_queue[q.name]["partitions"],
                   "totalConsumed": per_queue[q.name]["completed"]}
                  for q in selected if per_queue[q.name]["total"] > 0]
        leased = [(p, r) for q in st.queues.values() for p in q.partitions.values() for r in p.rows.values()
                  if live_lease_expiry(st, r, now) is not None]
        names = {q.name for q in selected} if (qn or ns or task) else None
    throughput = _throughput(st, frm, to, width, names)
    t = st.metrics.snapshot()
    recent = st.metrics.recent(2)
    return 200, {
        "timeRange": {"from": fmt_ms(frm), "to": fmt_ms(to)}, "bucketMinutes": width,
        "pointCount": len(throughput), "throughput": throughput, "queues": queues,
        "messages": {"total": t["push_msg"], "pending": max(0, t["push_msg"] - t["pop_msg"]),
                     "processing": 0, "completed": t["ack_ok"], "failed": t["ack_fail"],
                     "deadLetter": t["dlq"],
                     "requests": {"push": t["push_req"], "pop": t["pop_req"], "ack": t["ack_req"]},
                     "batchEfficiency": {"push": _ratio(t["push_msg"], t["push_req"]),
                                         "pop": _ratio(t["pop_msg"], t["pop_req"]),
                                         "ack": _ratio(t["ack_msg"], t["ack_req"])}},
        "leases": {"active": len(leased), "partitionsWithLeases": len({id(p) for p, _ in leased}),
                   "totalBatchSize": sum(r.batch_size for _, r in leased),
                   "totalAcked": sum(r.acked for _, r in leased)},
        "deadLetterQueue": {"totalMessages": t["dlq"], "affectedPartitions": 0, "topErrors": []},
        "errors": {"ackFailed": t["ack_fail"], "dbErrors": 0, "dlqMessages": t["dlq"]},
        "workers": [{"workerId": 0, "hostname": "embedded", "dbConnections": 0, "freeSlots": 0,
                     "jobQueueSize": 0, "avgEventLoopLagMs": 0, "maxEventLoopLagMs": 0,
                     "messagesProcessed": recent["push_msg"] + recent["ack_msg"]}],
        "statsAge": 0,
    }


_INTERVALS = {"minute": MINUTE_US, "hour": HOUR_US, "day": 24 * HOUR_US}


def analytics(st: Any, params: Dict[str, str]) -> Reply:
    """``GET /api/v1/status/analytics?from=&to=&interval=hour&queue=&namespace=&task=``: stored
    messages created per interval, one point per interval from the one holding ``from`` to the
    one holding ``to`` (empty ones included)."""
    frm, to = _window(params, 24 * HOUR_US)
    interval = params.get("interval") or "hour"
    width = _INTERVALS.get(interval, HOUR_US)
    qn, ns, task = params.get("queue"), params.get("namespace"), params.get("task")
    with st.lock:
        created = [m.created for q in st.queues.values()
                   if (not qn or q.name == qn) and (not ns or q.namespace == ns) and (not task or q.task == task)
                   for p in q.partitions.values() for m in p.messages if not m.deleted and frm <= m.created <= to]
    counts: Dict[int, int] = {}
    for c in created:
        counts[c - c % width] = counts.get(c - c % width, 0) + 1
    points: List[Dict[str, Any]] = []
    t = frm - frm % width
    while t <= to and len(points) < 10000:
        points.append({"timestamp": fmt_ms(t), "messages": counts.get(t, 0)})
        t += width
    return 200, {"from": fmt_ms(frm), "to": fmt_ms(to), "interval": interval, "dataPoints": points}


def system_metrics(st: Any, params: Dict[str, str]) -> Reply:
    """``GET /api/v1/analytics/system-metrics``: no process samples here (empty time series)."""
    frm, to = _window(params, HOUR_US)
    return 200, {"timeRange": {"from": fmt_ms(frm), "to": fmt_ms(to)},
                 "bucketMinutes": bucket_minutes(frm, to), "pointCount": 0, "replicaCount": 1,
                 "replicas": [{"hostname": "embedded", "port": 0, "workerId": "0", "timeSeries": []}]}


def worker_metrics(st: Any, params: Dict[str, str]) -> Reply:
    """``GET /api/v1/analytics/worker-metrics?from=&to=``: request and message counters."""
    frm, to = _window(params, HOUR_US)
    width = bucket_minutes(frm, to)
    rows = st.metrics.buckets(frm, to)
    secs = width * 60.0
    series = []
    for t, b in regroup([(t, g) for t, g, _ in rows], width):
        series.append({"timestamp": _fmt_s(t), "pushMessages": b["push_msg"], "popMessages": b["pop_msg"],
                       "ackMessages": b["ack_msg"], "pushRequests": b["push_req"], "popRequests": b["pop_req"],
                       "ackRequests": b["ack_req"], "jobsDone": b["push_req"] + b["pop_req"] + b["ack_req"],
                       "pushPerSecond": round(b["push_msg"] / secs, 2),
                       "popPerSecond": round(b["pop_msg"] / secs, 2),
                       "ackPerSecond": round(b["ack_msg"] / secs, 2),
                       "avgEventLoopLagMs": 0, "maxEventLoopLagMs": 0, "avgFreeSlots": 0, "minFreeSlots": 0,
                       "dbConnections": 0, "avgJobQueueSize": 0, "maxJobQueueSize": 0, "backoffSize": 0,
                       "avgLagMs": pg_int(b["lag_sum_ms"] / float(b["pop_msg"])) if b["pop_msg"] else 0,
                       "maxLagMs": b["lag_max_ms"], "lagCount": b["pop_msg"], "dbErrors": 0,
                       "ackSuccess": b["ack_ok"], "ackFailed": b["ack_fail"], "dlqCount": b["dlq"]})
    per_queue: Dict[str, Dict[str, int]] = {}
    for _, _, qs in rows:
        for name, b in qs.items():
            e = per_queue.setdefault(name, {"pop": 0, "lag": 0, "max": 0})
            e["pop"] += b["pop_msg"]
            e["lag"] += b["lag_sum_ms"]
            e["max"] = max(e["max"], b["lag_max_ms"])
    queues = [{"queueName": n, "popCount": e["pop"], "maxLagMs": e["max"],
               "avgLagMs": pg_int(e["lag"] / float(e["pop"])) if e["pop"] else 0}
              for n, e in sorted(per_queue.items(), key=lambda kv: kv[1]["pop"], reverse=True)]
    t = st.metrics.snapshot()
    recent = st.metrics.recent(5)
    now = now_us()
    return 200, {"timeRange": {"from": fmt_ms(frm), "to": fmt_ms(to)}, "bucketMinutes": width,
                 "pointCount": len(series), "timeSeries": series, "queues": queues,
                 "workers": [{"workerId": 0, "hostname": "embedded", "lastSeen": _fmt_s(now - now % MINUTE_US),
                              "dbConnections": 0, "freeSlots": 0, "jobQueueSize": 0, "backoffSize": 0,
                              "avgEventLoopLagMs": 0, "maxEventLoopLagMs": 0,
                              "messagesProcessed": recent["push_msg"] + recent["ack_msg"]}],
                 "summary": {"totalPushRequests": t["push_req"], "totalPushMessages": t["push_msg"],
                             "totalPopRequests": t["pop_req"], "totalPopMessages": t["pop_msg"],
                             "totalAckRequests": t["ack_req"], "totalAckMessages": t["ack_msg"],
                             "totalAckFailed": t["ack_fail"], "totalDbErrors": 0, "totalDlq": t["dlq"],
                             "pendingMessages": t["push_msg"] - t["pop_msg"]}}


def postgres_stats(st: Any) -> Reply:
    """``GET /api/v1/analytics/postgres-stats``: there is no PostgreSQL here."""
    return 200, {"database": "embedded", "timestamp": fmt_ms(now_us()),
                 "bufferConfig": {"sharedBuffers": "0", "sharedBuffersSize": "0 MB"},
                 "cacheSummary": {"tables": {"cacheHits": 0, "diskReads": 0, "hitRatio": 100.0},
                                  "indexes": {"cacheHits": 0, "diskReads": 0, "hitRatio": 100.0}},
                 "databaseCache": {"database": "embedded", "cacheHits": 0, "diskReads": 0, "cacheHitRatio": 100.0},
                 "activeQueries": [], "autovacuumStatus": [], "bufferUsage": [], "deadTuples": [],
                 "hotUpdates": [], "indexCache": [], "tableCache": [], "tableSizes": []}
